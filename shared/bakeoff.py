"""The bake-off: every registered shaper on one dataset, under one attacker suite.

Why one function: "why InfoShape and not X?" is answered only if every method is fitted on the same
public rows, released on the same site rows and attacked by the same auditor. :func:`run_bakeoff`
does exactly that and writes ``bakeoff.json`` (one row per shaper setting) and ``bakeoff.md`` (the
same as a Markdown table), both atomically.

Protocol (identical for every shaper)
    * split the dataset (seeded, stratified by the first sensitive column) into public 40 % /
      attack 30 % / test 30 %; fit the shaper on *public* only (``shared.pipeline.fit_shaper``);
    * release ``attack`` and ``test`` through the fitted encoder (two separate releases);
    * utility: the attacker suite (``score_utility``) on (T(attack), L) → scored on (T(test), L);
    * privacy: the attacker suite on (T(attack), S) → scored on (T(test), S); its strongest
      attacker's AUC / accuracy / balanced accuracy next to the majority baseline, and the smallest
      log-rank privacy over attackers (paper 003, Def. 10);
    * ``mi``: ``estimate_mi(T(attack), S)`` with few critic steps (a quick neural lower bound, in
      nats — a coarse cross-check of the attackers, not a precise figure);
    * ``epsilon`` / ``delta``: the shaper's ``epsilon_`` / ``delta_`` where it reports a DP
      guarantee (``clustmix``), else ``null``;
    * ``fit_seconds``: wall time of ``fit_shaper`` (schema + shaper); ``encode_rows_per_second``:
      rows of attack + test through ``Encoder.encode_frame`` per wall second.
    * For shapers whose output for a row depends on the other rows released with it
      (``row_independent = False``: ``clustmix``) also ``private_within_release``: the privacy
      suite trained and scored on disjoint rows of the *same* release (an auditor whose labelled
      rows were mixed into the site's release), next to the default cross-release figure.
    * For shapers whose release lives in the input feature space (``identity``, ``gaussian-noise``,
      ``clustmix``) also ``synthetic_to_real``: the utility suite trained on T(attack) and scored on
      the *real* test rows — paper 004's protocol (train on the release, test on real data).

Budget: built to finish within 20 minutes on two busy cores for Adult and paper-synthetic.
Attack and test splits larger than ``max_attack_rows`` are subsampled (seeded, stratified), and
the JSON says so under ``subsampled``. Torch runs single-threaded for the whole call (small
networks; more threads only contend on a shared machine) and its setting is restored afterwards.
"""

from __future__ import annotations

import inspect
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shared.atomic import atomic_write_text
from shared.errors import ConfigError
from shared.jsonsafe import json_safe as _json_safe

__all__ = [
    "BAKEOFF_FORMAT",
    "BAKEOFF_JSON",
    "BAKEOFF_MD",
    "DEFAULT_PARAMS",
    "INPUT_SPACE_SHAPERS",
    "SHAPER_ORDER",
    "SWEEPS",
    "bakeoff_settings",
    "render_markdown",
    "run_bakeoff",
]

BAKEOFF_FORMAT = "infoshape-bakeoff/1"
BAKEOFF_JSON = "bakeoff.json"
BAKEOFF_MD = "bakeoff.md"

#: Reporting order; shapers registered later (e.g. by plug-ins) follow alphabetically.
SHAPER_ORDER: tuple[str, ...] = (
    "identity",
    "gaussian-noise",
    "random-encoder",
    "infoshape",
    "dpfe",
    "gen-filter",
    "clustmix",
)

#: Parameters the bake-off sets on top of each shaper's documented defaults, and why.
#: ``clustmix``'s noise seed makes the bench reproducible; a deployed site never sets one.
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "clustmix": {"noise_seed": "<seed>"},
    "dpfe": {"noise_seed": "<seed>"},
    "gen-filter": {"noise_seed": "<seed>"},
}

#: ``sweep=True`` adds these settings (two per shaper, either side of the default). Entries
#: whose parameter the registered shaper does not take are skipped.
SWEEPS: dict[str, list[dict[str, Any]]] = {
    "gaussian-noise": [{"sigma": 0.5}, {"sigma": 2.0}],
    "infoshape": [{"lam": 0.5}, {"lam": 4.0}],
    "dpfe": [{"noise_scale": 0.5}, {"noise_scale": 2.0}],
    "gen-filter": [{"budget": 0.5}, {"budget": 8.0}],
    "clustmix": [{"epsilon": 0.5}, {"epsilon": 4.0}],
}

#: Shapers whose output columns are the (standardised) input features, so a model trained on
#: the release can be scored on real rows.
INPUT_SPACE_SHAPERS: frozenset[str] = frozenset({"identity", "gaussian-noise", "clustmix"})

#: Split fractions: the public rows train the shaper, the attack rows the auditor's models.
SPLITS: dict[str, float] = {"public": 0.4, "attack": 0.3, "test": 0.3}


def _registered() -> list[str]:
    """Every shaper in the registry (importing ``clustmix`` here registers it if needed)."""
    import shared.shapers  # noqa: F401  (registers the core shapers)
    import shared.shapers.clustmix  # noqa: F401  (registers clustmix)
    from shared.shapers import SHAPERS

    names = SHAPERS.names()
    known = [n for n in SHAPER_ORDER if n in names]
    return known + sorted(n for n in names if n not in SHAPER_ORDER)


def _accepts(name: str, param: str) -> bool:
    from shared.shapers import SHAPERS

    return param in inspect.signature(SHAPERS.get(name).__init__).parameters


def bakeoff_settings(
    shapers: Sequence[str] | None = None, *, sweep: bool = False, seed: int = 0
) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, shaper, params) for every run, in reporting order.

    ``shapers=None`` means every registered shaper. An unknown name raises ``ConfigError``
    listing the valid ones, before anything is fitted.
    """
    available = _registered()
    if shapers is None:
        names = available
    else:
        names = list(dict.fromkeys(shapers))
        if not names:
            raise ConfigError("shapers must name at least one shaper (or be None for all)")
        unknown = [n for n in names if n not in available]
        if unknown:
            raise ConfigError(
                f"unknown shaper(s) {', '.join(unknown)}; valid names: {', '.join(available)}"
            )
    out: list[tuple[str, str, dict[str, Any]]] = []
    for name in names:
        base = {
            k: (seed if v == "<seed>" else v)
            for k, v in DEFAULT_PARAMS.get(name, {}).items()
            if _accepts(name, k)
        }
        out.append((name, name, base))
        if sweep:
            for extra in SWEEPS.get(name, []):
                if all(_accepts(name, k) for k in extra):
                    label = name + " " + " ".join(f"{k}={v:g}" for k, v in extra.items())
                    out.append((label, name, {**base, **extra}))
    return out


def _subsample(frame: pd.DataFrame, limit: int, stratify: str, seed: int) -> pd.DataFrame:
    """At most ``limit`` rows, keeping the class shares of ``stratify`` (seeded)."""
    if len(frame) <= limit:
        return frame
    from shared.data import split_frame

    keep = limit / len(frame)
    parts = split_frame(frame, {"keep": keep, "drop": 1.0 - keep}, seed=seed, stratify=stratify)
    return parts["keep"]


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _machine() -> dict[str, Any]:
    import sklearn
    import torch

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on every platform
        load = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": load,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "sklearn": sklearn.__version__,
    }


def _evaluate(
    label: str,
    name: str,
    params: dict[str, Any],
    parts: dict[str, pd.DataFrame],
    spec: Any,
    *,
    seed: int,
    attackers: list[str] | None,
    mi_steps: int,
) -> dict[str, Any]:
    """Fit one shaper setting on the public rows and measure it (one bakeoff.json row)."""
    from shared.attacks import run_attack_suite, score_utility, split_for_attack
    from shared.mi import estimate_mi
    from shared.pipeline import encoder_from_fitted, fit_shaper

    cpu_start = time.process_time()
    start = time.perf_counter()
    fitted = fit_shaper(
        parts["public"], spec, shaper=name, seed=seed, source="public split", **params
    )
    fit_seconds = time.perf_counter() - start
    encoder = encoder_from_fitted(fitted)

    start = time.perf_counter()
    z_a, y_a = encoder.encode_frame(parts["attack"], source="attack split")
    z_t, y_t = encoder.encode_frame(parts["test"], source="test split")
    encode_seconds = time.perf_counter() - start
    rows = len(parts["attack"]) + len(parts["test"])
    s_a = encoder.encode_sensitive(parts["attack"], source="attack split")[:, 0]
    s_t = encoder.encode_sensitive(parts["test"], source="test split")[:, 0]

    utility = score_utility(z_a, y_a, z_t, y_t, attackers=attackers, seed=seed)
    private = run_attack_suite(z_a, s_a, z_t, s_t, attackers=attackers, seed=seed)
    mi = estimate_mi(z_a, s_a, steps=mi_steps, seed=seed) if mi_steps > 0 else None

    shaper = fitted.shaper
    row: dict[str, Any] = {
        "shaper": name,
        "setting": label,
        "params": {k: v for k, v in params.items() if k != "noise_seed"},
        "n_components": int(shaper.n_components),
        "utility": {
            "auc": _finite(utility.best_auc),
            "accuracy": _finite(utility.best_accuracy),
            "majority": _finite(utility.majority),
            "best_attacker": utility.best_attacker,
        },
        "private": {
            "auc": _finite(private.best_auc),
            "accuracy": _finite(private.best_accuracy),
            "balanced_accuracy": _finite(private.best_balanced_accuracy),
            "majority": _finite(private.majority),
            "best_attacker": private.best_attacker,
        },
        "log_rank_privacy": _finite(private.min_log_rank_privacy),
        "mi": _finite(mi),
        "epsilon": _finite(getattr(shaper, "epsilon_", None)),
        "delta": _finite(getattr(shaper, "delta_", None)),
        "fit_seconds": fit_seconds,
        "encode_rows_per_second": rows / encode_seconds if encode_seconds > 0 else None,
    }
    if name in INPUT_SPACE_SHAPERS and shaper.n_components == shaper.n_features_in_:
        x_t = encoder.features(parts["test"], source="test split")
        real = score_utility(z_a, y_a, x_t, y_t, attackers=attackers, seed=seed)
        row["synthetic_to_real"] = {
            "auc": _finite(real.best_auc),
            "accuracy": _finite(real.best_accuracy),
            "best_attacker": real.best_attacker,
        }
    if not getattr(shaper, "row_independent", True):
        # The release depends on which rows are released together (clustmix: one noisy mean per
        # group), so an auditor whose labelled rows share the site's release sees more than one
        # whose rows went through a separate call. Measure that view too: attackers trained and
        # scored on disjoint rows of the *same* release.
        za_tr, sa_tr, za_te, sa_te = split_for_attack(z_a, s_a, test_size=0.3, seed=seed)
        within = run_attack_suite(za_tr, sa_tr, za_te, sa_te, attackers=attackers, seed=seed)
        row["private_within_release"] = {
            "auc": _finite(within.best_auc),
            "accuracy": _finite(within.best_accuracy),
            "balanced_accuracy": _finite(within.best_balanced_accuracy),
            "majority": _finite(within.majority),
            "best_attacker": within.best_attacker,
        }
    if hasattr(shaper, "privacy_report"):
        row["privacy_report"] = shaper.privacy_report()
    if hasattr(shaper, "last_release_"):  # the test-split release: groups and noise used
        release = shaper.last_release_
        row["release"] = {
            "groups": len(release["group_sizes"]),
            "min_group": int(min(release["group_sizes"])),
            "max_sigma": float(max(release["sigmas"])),
        }
    row["seconds"] = time.perf_counter() - start + fit_seconds
    row["cpu_seconds"] = time.process_time() - cpu_start
    return row


def run_bakeoff(
    dataset: str,
    *,
    data_path: str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str],
    seed: int = 0,
    sweep: bool = False,
    shapers: Sequence[str] | None = None,
    max_attack_rows: int = 15000,
    attackers: Sequence[str] | None = None,
    mi_steps: int = 300,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every shaper (or ``shapers``) on ``dataset`` under one protocol; write the results.

    Args:
        dataset: ``paper-synthetic``, ``adult`` or ``digits`` (``shared.data.load_dataset``).
        data_path: the directory of the UCI files for ``adult``; refused by the others.
        out_dir: created if missing; receives ``bakeoff.json`` and ``bakeoff.md`` (each written
            atomically: a reader sees the old file or the complete new one).
        seed: seeds the split, every shaper, the attackers and the MI critic.
        sweep: add :data:`SWEEPS` settings (two per shaper that has them).
        shapers: names to run; default every registered shaper.
        max_attack_rows: cap on the attack and on the test split (each subsampled, stratified
            by S, when larger; recorded under ``subsampled``).
        attackers: attacker names; default the full suite.
        mi_steps: critic steps of the MI estimate (0 skips it; ``mi`` is then null).
        progress: called with one line per finished setting (e.g. ``print``).

    Returns:
        The dict written to ``bakeoff.json``: ``rows`` (one per setting) plus the protocol.
        A setting that fails gets a row with ``error`` (and the run goes on); ``errors`` counts
        them.
    """
    import torch

    from shared.data import load_dataset, split_frame

    if isinstance(max_attack_rows, bool) or int(max_attack_rows) < 100:
        raise ConfigError(f"max_attack_rows must be an integer >= 100; got {max_attack_rows!r}")
    if isinstance(mi_steps, bool) or int(mi_steps) < 0:
        raise ConfigError(f"mi_steps must be an integer >= 0; got {mi_steps!r}")
    settings = bakeoff_settings(shapers, sweep=sweep, seed=seed)
    attacker_list = None if attackers is None else list(attackers)
    if attacker_list is not None:
        from shared.attacks import ATTACKERS

        for attacker in attacker_list:
            ATTACKERS.get(attacker)  # an unknown name is refused before any work
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out_dir {out} exists and is not a directory")

    started = time.perf_counter()
    cpu_started = time.process_time()
    started_utc = datetime.now(UTC).isoformat(timespec="seconds")
    data = load_dataset(dataset, path=data_path, seed=seed)
    sensitive = data.spec.sensitive[0]
    parts = split_frame(data.frame, SPLITS, seed=seed, stratify=sensitive)
    sizes = {k: len(v) for k, v in parts.items()}
    subsampled: dict[str, Any] = {}
    for key in ("attack", "test"):
        if len(parts[key]) > max_attack_rows:
            parts[key] = _subsample(parts[key], int(max_attack_rows), sensitive, seed)
            subsampled[key] = {"from": sizes[key], "to": len(parts[key])}

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    try:
        for label, name, params in settings:
            try:
                row = _evaluate(
                    label,
                    name,
                    params,
                    parts,
                    data.spec,
                    seed=seed,
                    attackers=attacker_list,
                    mi_steps=int(mi_steps),
                )
            except Exception as exc:  # one broken shaper must not sink the comparison
                row = {
                    "shaper": name,
                    "setting": label,
                    "params": {k: v for k, v in params.items() if k != "noise_seed"},
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=6),
                }
            rows.append(row)
            if progress is not None:
                progress(_progress_line(row))
    finally:
        torch.set_num_threads(threads)

    result: dict[str, Any] = {
        "format": BAKEOFF_FORMAT,
        "dataset": dataset,
        "description": data.description,
        "label": data.spec.label,
        "sensitive": sensitive,
        "seed": seed,
        "sweep": bool(sweep),
        "splits": {
            "fractions": SPLITS,
            "rows": {k: len(v) for k, v in parts.items()},
            "rows_before_subsampling": sizes,
        },
        "subsampled": subsampled or None,
        "attackers": attacker_list or "default suite",
        "mi_steps": int(mi_steps),
        "protocol": (
            "fit on public; release attack and test; utility = attacker suite on (T(attack), L) "
            "scored on (T(test), L); private = attacker suite on (T(attack), S) scored on "
            "(T(test), S); best attacker per metric; mi = estimate_mi(T(attack), S) in nats"
        ),
        "machine": _machine(),
        "started_utc": started_utc,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started,
        "errors": sum(1 for r in rows if "error" in r),
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    import json

    atomic_write_text(out / BAKEOFF_JSON, json.dumps(_json_safe(result), indent=2) + "\n")
    atomic_write_text(out / BAKEOFF_MD, render_markdown(result))
    return result


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    return str(value)


def _progress_line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['setting']:28s} FAILED {row['error']}"
    return (
        f"{row['setting']:28s} utility AUC {_fmt(row['utility']['auc'])} | private AUC "
        f"{_fmt(row['private']['auc'])} acc {_fmt(row['private']['accuracy'])} (majority "
        f"{_fmt(row['private']['majority'])}) | LRP {_fmt(row['log_rank_privacy'])} | "
        f"fit {row['fit_seconds']:.1f}s"
    )


def render_markdown(result: dict[str, Any]) -> str:
    """``bakeoff.md``: the rows as one Markdown table, with the protocol in a few lines."""
    lines = [
        f"# Bake-off: {result['dataset']}",
        "",
        f"Label `{result['label']}`, sensitive `{result['sensitive']}`, seed {result['seed']}. "
        f"Rows: {result['splits']['rows']}.",
    ]
    if result.get("subsampled"):
        lines.append(
            "Subsampled for the attacker suite (stratified by S): "
            + ", ".join(f"{k} {v['from']} → {v['to']}" for k, v in result["subsampled"].items())
            + "."
        )
    lines += [
        "",
        "Utility and private columns are the strongest attacker's scores on the test release "
        "(private: lower is better, compare with majority). LRP = log-rank privacy (higher is "
        "more private). MI = neural estimate of I(T; S) in nats. ε: the DP guarantee where the "
        "method has one. Real-test AUC: utility model trained on the release, scored on real "
        "rows (input-space shapers only).",
        "",
        "| setting | utility AUC | utility acc | private AUC | private acc | private bal. acc | "
        "majority | LRP | MI | ε | real-test AUC | fit s | encode rows/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row['setting']} | failed: {row['error']} |" + " |" * 11)
            continue
        real = row.get("synthetic_to_real", {}).get("auc")
        eps = row.get("epsilon")
        eps_text = "—" if eps is None else f"{eps:g} (δ={row.get('delta'):.0e})"
        lines.append(
            "| "
            + " | ".join(
                [
                    row["setting"],
                    _fmt(row["utility"]["auc"]),
                    _fmt(row["utility"]["accuracy"]),
                    _fmt(row["private"]["auc"]),
                    _fmt(row["private"]["accuracy"]),
                    _fmt(row["private"]["balanced_accuracy"]),
                    _fmt(row["private"]["majority"]),
                    _fmt(row["log_rank_privacy"]),
                    _fmt(row["mi"]),
                    eps_text,
                    _fmt(real),
                    _fmt(row["fit_seconds"], 1),
                    _fmt(row["encode_rows_per_second"], 0),
                ]
            )
            + " |"
        )
    machine = result["machine"]
    lines += [
        "",
        f"Total {result['seconds']:.0f} s wall, {result.get('cpu_seconds', 0):.0f} s CPU, on "
        f"{machine['cpu_count']} CPU(s) (load average at start "
        f"{machine['load_average_at_start']}).",
    ]
    return "\n".join(lines) + "\n"
