"""The report's figures as PNG bytes (matplotlib, Agg backend, no pyplot state).

Figures are returned as bytes rather than written to disk because the same image goes twice into a
run dir: inline (base64) in ``report.html``, which must open offline as a single file, and as a PNG
under ``figures/`` for slides and papers. Each function builds its own :class:`Figure` on an Agg
canvas instead of using ``pyplot``: pyplot keeps global state (current figure, a GUI backend chosen
at import), which leaks memory in long-lived processes and breaks on machines without a display.

Every function takes plain JSON-shaped data (what ``audit.json`` / ``frontier.json`` /
``summary.json`` and the bundle manifest hold), so a report can be re-rendered from a run dir
without refitting anything.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Display order and colours of the audit settings (paper Fig. 2 order: raw, random, noise, ours).
SETTING_STYLE: dict[str, tuple[str, str]] = {
    "raw": ("#d62728", "raw data"),
    "random-encoder": ("#7f7f7f", "random encoder"),
    "gaussian-noise": ("#ff7f0e", "gaussian noise"),
    "encoder": ("#1f77b4", "encoder"),
}
_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DPI = 110


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    """Encode a figure as PNG without the matplotlib version stamp, so equal data gives equal
    bytes across matplotlib upgrades (a re-rendered report diffs clean)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()


def _legend(ax: Any, loc: str) -> None:
    """A legend only when something is labelled (an empty one is a matplotlib warning)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc=loc, fontsize=7.5, frameon=False)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _setting_style(name: str, entry: Mapping[str, Any], index: int) -> tuple[str, str]:
    colour, label = SETTING_STYLE.get(name, (_PALETTE[index % len(_PALETTE)], name))
    return colour, str(entry.get("label") or label)


def roc_figure(settings: Mapping[str, Mapping[str, Any]], *, label_name: str = "L") -> bytes:
    """Paper Fig. 2 analogue: ROC curves of the strongest attacker per setting.

    One panel for the public label L (utility: the curve should bow up) and one per sensitive
    column S (privacy: the curve should hug the diagonal). ``settings`` maps a setting name to the
    ``roc`` entry of :func:`shared.report.audit.audit_bundle`: ``{"public": curve,
    "sensitive": {column: curve}}`` with ``curve = {"fpr", "tpr", "auc", "attacker"}``.
    """
    columns: list[str] = []
    for entry in settings.values():
        for column in (entry.get("roc") or {}).get("sensitive", {}):
            if column not in columns:
                columns.append(column)
    panels = [("public", None)] + [("sensitive", c) for c in columns]
    fig = _new_figure(4.2 * len(panels), 4.0)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (kind, column) in zip(axes, panels, strict=True):
        ax.plot([0, 1], [0, 1], color="#bbbbbb", linestyle=":", linewidth=1, label="chance")
        for i, (name, entry) in enumerate(settings.items()):
            roc = entry.get("roc") or {}
            curve = roc.get("public") if kind == "public" else roc.get("sensitive", {}).get(column)
            if not curve or not curve.get("fpr"):
                continue
            colour, label = _setting_style(name, entry, i)
            auc = curve.get("auc")
            text = f"{label} (AUC {auc:.3f})" if _finite(auc) else label
            ax.plot(curve["fpr"], curve["tpr"], color=colour, linewidth=1.8, label=text)
        title = (
            f"public label {label_name}: utility"
            if kind == "public"
            else f"sensitive {column}: leakage"
        )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.01)
        ax.set_aspect("equal")
        _legend(ax, "lower right")
    return _png(fig)


def mi_figure(
    history: Mapping[str, Sequence[Any]],
    sensitive_names: Sequence[str],
    *,
    reference: Mapping[str, Any] | None = None,
    entropy: Mapping[str, Any] | None = None,
    final: Mapping[str, Any] | None = None,
) -> bytes:
    """Paper Fig. 3 analogue: Ĩ(L;T) and Ĩ(S;T) over the encoder's training.

    Args:
        history: the manifest's ``training_metrics["history"]`` (``step``, ``mi_public``,
            ``mi_sensitive`` as one list per step with a value per sensitive column).
        sensitive_names: names of the sensitive columns, in ``mi_sensitive`` order.
        reference: ``{"public": Ĩ(L;x), "sensitive": {name: Ĩ(S;x)}}`` drawn as dashed lines —
            what the raw data holds, the ceiling T can keep or must shed.
        entropy: ``{"public": H(L), "sensitive": {name: H(S)}}`` drawn as dotted lines when no
            reference is known (the information-theoretic ceiling).
        final: the audit's independent estimates on T(P_audit) ``{"public": .., "sensitive":
            {name: ..}}``, marked at the last step so the critic's training-time values can be
            checked against a fresh estimator.
    """
    steps = list(history.get("step") or [])
    public = list(history.get("mi_public") or [])
    sensitive = list(history.get("mi_sensitive") or [])
    fig = _new_figure(7.5, 4.2)
    ax = fig.subplots()
    colours = {"public": "#1f77b4"}
    if steps and public:
        ax.plot(
            steps[: len(public)], public, color=colours["public"], linewidth=1.8, label="Ĩ(L;T)"
        )
    for j, name in enumerate(sensitive_names):
        colour = _PALETTE[(j + 1) % len(_PALETTE)]
        colours[name] = colour
        values = [
            row[j] if isinstance(row, Sequence) and j < len(row) else row for row in sensitive
        ]
        if steps and values:
            ax.plot(steps[: len(values)], values, color=colour, linewidth=1.8, label=f"Ĩ({name};T)")
    last = steps[-1] if steps else 0

    def hline(value: Any, colour: str, style: str, label: str) -> None:
        if _finite(value):
            ax.axhline(float(value), color=colour, linestyle=style, linewidth=1.1, label=label)

    ref = reference or {}
    ent = entropy or {}
    if ref:
        hline(ref.get("public"), colours["public"], "--", "Ĩ(L;x) (raw data)")
        for name in sensitive_names:
            hline(
                (ref.get("sensitive") or {}).get(name),
                colours[name],
                "--",
                f"Ĩ({name};x) (raw data)",
            )
    else:
        hline(ent.get("public"), colours["public"], ":", "H(L) (ceiling)")
        for name in sensitive_names:
            hline(
                (ent.get("sensitive") or {}).get(name), colours[name], ":", f"H({name}) (ceiling)"
            )
    fin = final or {}
    if _finite(fin.get("public")):
        ax.plot(
            [last],
            [fin["public"]],
            marker="o",
            color=colours["public"],
            linestyle="none",
            label="audit estimate on T(P_audit)",
        )
    for name in sensitive_names:
        value = (fin.get("sensitive") or {}).get(name)
        if _finite(value):
            ax.plot([last], [value], marker="o", color=colours[name], linestyle="none")
    ax.axhline(0.0, color="#dddddd", linewidth=0.8)
    ax.set_xlabel("encoder step")
    ax.set_ylabel("estimated mutual information (nats)")
    ax.set_title("Information kept (L) and shed (S) while training T", fontsize=10)
    _legend(ax, "center right")
    return _png(fig)


def attackers_figure(
    suites: Mapping[str, Mapping[str, Any]], *, threshold: float | None = None
) -> bytes:
    """Strongest-attacker view: each attacker's AUC per audit (central, federated, …), the gate
    threshold as a red line and 0.5 (no information) as a grey one.

    ``suites`` maps an audit name to a suite dict (``per_attacker`` → ``{"auc": ..}``).
    """
    names: list[str] = []
    for suite in suites.values():
        for name in suite.get("per_attacker") or {}:
            if name not in names:
                names.append(name)
    fig = _new_figure(7.5, 3.6)
    ax = fig.subplots()
    width = 0.8 / max(len(suites), 1)
    for i, (audit, suite) in enumerate(suites.items()):
        per = suite.get("per_attacker") or {}
        xs, heights = [], []
        for k, name in enumerate(names):
            auc = (per.get(name) or {}).get("auc")
            if _finite(auc):
                xs.append(k + (i - (len(suites) - 1) / 2) * width)
                heights.append(float(auc))
        ax.bar(xs, heights, width=width * 0.95, color=_PALETTE[i % len(_PALETTE)], label=audit)
    ax.axhline(0.5, color="#999999", linestyle=":", linewidth=1, label="0.5: no information")
    if _finite(threshold):
        ax.axhline(
            float(threshold),
            color="#d62728",
            linestyle="--",
            linewidth=1.2,
            label=f"gate threshold {threshold}",
        )
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(0.4, 1.0)
    ax.set_ylabel("private AUC (attacker on S)")
    ax.set_title("Attacker suite: AUC of each attacker reading S from T(x)", fontsize=10)
    _legend(ax, "upper right")
    return _png(fig)


def frontier_figure(
    points: Sequence[Mapping[str, Any]],
    *,
    threshold: float | None = None,
    chance: tuple[float, float] | None = None,
) -> bytes:
    """Privacy–utility frontier (DPFE-style): utility on L against the strongest attacker's AUC
    on S, one point per λ (InfoShape) or σ (noise), the Pareto front as a step line.

    ``points`` are ``frontier.json`` points: ``kind``, ``param``, ``value``, ``private_auc``,
    ``utility_auc``, ``pareto`` and, when a point averages several fits, ``private_auc_sd`` /
    ``utility_auc_sd`` (drawn as error bars). ``chance`` — the (lowest, highest) strongest-attacker
    AUC of the shuffled-S runs — is drawn as a band: a point inside it is indistinguishable from
    no leakage.
    """
    fig = _new_figure(7.5, 4.8)
    ax = fig.subplots()
    if chance is not None and all(_finite(v) for v in chance):
        low, high = sorted(float(v) for v in chance)
        ax.axvspan(low, high, color="#bbbbbb", alpha=0.35, lw=0, label="chance (shuffled S)")
    styles = {
        "infoshape": ("#1f77b4", "o", "InfoShape (λ)"),
        "gaussian-noise": ("#ff7f0e", "s", "gaussian noise (σ)"),
        "raw": ("#d62728", "X", "raw data"),
    }
    for kind in dict.fromkeys(p.get("kind") for p in points):
        colour, marker, label = styles.get(str(kind), ("#7f7f7f", "^", str(kind)))
        chosen = [
            p
            for p in points
            if p.get("kind") == kind
            and _finite(p.get("private_auc"))
            and _finite(p.get("utility_auc"))
        ]
        if not chosen:
            continue
        chosen.sort(key=lambda p: float(p.get("value") or 0.0))
        xs = [float(p["private_auc"]) for p in chosen]
        ys = [float(p["utility_auc"]) for p in chosen]
        ax.plot(
            xs, ys, color=colour, marker=marker, linewidth=1, markersize=7, label=label, alpha=0.9
        )
        xerr = [float(p.get("private_auc_sd") or 0.0) for p in chosen]
        yerr = [float(p.get("utility_auc_sd") or 0.0) for p in chosen]
        if any(xerr) or any(yerr):
            ax.errorbar(
                xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor=colour, elinewidth=0.8, alpha=0.6
            )
        if kind != "raw":
            symbol = "λ" if _param(chosen[0]) == "lambda" else "σ"
            for p, x, y in zip(chosen, xs, ys, strict=True):
                ax.annotate(
                    f"{symbol}={_short(p.get('value'))}",
                    (x, y),
                    fontsize=7,
                    xytext=(4, 4),
                    textcoords="offset points",
                    color=colour,
                )
    front = sorted(
        (
            p
            for p in points
            if p.get("pareto") and _finite(p.get("private_auc")) and _finite(p.get("utility_auc"))
        ),
        key=lambda p: float(p["private_auc"]),
    )
    if front:
        ax.step(
            [float(p["private_auc"]) for p in front],
            [float(p["utility_auc"]) for p in front],
            where="post",
            color="#2ca02c",
            linewidth=2.2,
            alpha=0.5,
            label="Pareto front",
            zorder=0,
        )
        ax.scatter(
            [float(p["private_auc"]) for p in front],
            [float(p["utility_auc"]) for p in front],
            s=160,
            facecolors="none",
            edgecolors="#2ca02c",
            linewidths=1.5,
            zorder=3,
        )
    if _finite(threshold):
        ax.axvline(
            float(threshold),
            color="#d62728",
            linestyle="--",
            linewidth=1,
            label=f"max private AUC {threshold}",
        )
    ax.axvline(0.5, color="#999999", linestyle=":", linewidth=1)
    ax.set_xlabel("privacy: strongest attacker's AUC on S (lower is better)")
    ax.set_ylabel("utility: best AUC on L (higher is better)")
    ax.set_title("Privacy–utility frontier", fontsize=10)
    _legend(ax, "lower right")
    return _png(fig)


def _param(point: Mapping[str, Any]) -> str:
    """The swept parameter of a frontier point (``lambda`` or ``sigma``)."""
    return str(point.get("param") or "")


def _short(value: Any) -> str:
    if _finite(value):
        return f"{float(value):g}"
    return str(value)


__all__ = ["attackers_figure", "frontier_figure", "mi_figure", "roc_figure"]


def chance_band(chance: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """The (lowest, highest) run of a ``frontier.json`` ``chance`` block, or None."""
    if not chance or not (_finite(chance.get("min")) and _finite(chance.get("max"))):
        return None
    return float(chance["min"]), float(chance["max"])
