"""One self-contained HTML page for a run: verdict first, evidence after, raw numbers last.

The page must open offline on an auditor's laptop, be mailed as one attachment and be archived
with the run, so it holds everything itself: images as base64 ``data:`` URIs, CSS in a
``<style>`` element, and no script, font, stylesheet or link that reaches outside the file.

Numbers are printed from the very values in ``summary.json`` (and ``audit.json`` /
``frontier.json``) with one rule — floats to 4 decimals — and each number cell carries the exact
value in ``data-value``, so a reader (or a test) can check the page against the JSON. Every text
that comes from a file is escaped: a site name or a reason is data, never markup.

Sections whose data is absent (no audit.json, no frontier, no MI curves in the bundle) say what is
missing and which command produces it, instead of failing the whole report.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MISSING = "—"

CSS = """
:root { --ok:#1b7f3b; --bad:#b42318; --warn:#b54708; --muted:#667085; --line:#e4e7ec; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 40px 60px; color: #101828; background: #ffffff;
       font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
       sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 2px solid
     var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.verdict { border-radius: 10px; padding: 16px 22px; margin: 16px 0; border: 2px solid; }
.verdict h2 { border: 0; margin: 0 0 6px; font-size: 26px; letter-spacing: .5px; }
.verdict.released, .verdict.passed { background: #ecfdf3; border-color: var(--ok); }
.verdict.released h2, .verdict.passed h2 { color: var(--ok); }
.verdict.gated, .verdict.failed { background: #fef3f2; border-color: var(--bad); }
.verdict.gated h2, .verdict.failed h2 { color: var(--bad); }
.verdict.audit { background: #eff8ff; border-color: #175cd3; }
.verdict.audit h2 { color: #175cd3; }
.verdict .line { font-size: 16px; margin: 4px 0 10px; }
table { border-collapse: collapse; margin: 8px 0 16px; min-width: 40%; }
th, td { border: 1px solid var(--line); padding: 4px 10px; text-align: left;
         vertical-align: top; }
th { background: #f9fafb; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.best td { background: #fffaeb; }
tr.total td { font-weight: 600; background: #f9fafb; }
.status-ok { color: var(--ok); font-weight: 600; }
.status-refused, .status-failed { color: var(--bad); font-weight: 600; }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: 2px 18px; margin: 6px 0; }
dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
            font-size: 12.5px; }
pre { background: #f9fafb; border: 1px solid var(--line); padding: 10px 12px;
      overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
figure { margin: 10px 0 18px; }
figure img { max-width: 100%; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: 13px; max-width: 900px; }
.missing { color: var(--warn); font-style: italic; }
.note { color: var(--muted); font-size: 13px; }
nav a { margin-right: 12px; color: #175cd3; text-decoration: none; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------
def fmt(value: Any, digits: int = 4) -> str:
    """The page's one number rule: floats to ``digits`` decimals, ints as is, missing as —."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else MISSING
    return str(value)


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def num(value: Any, digits: int = 4) -> str:
    """A number cell that carries the exact JSON value for checking."""
    exact = (
        json.dumps(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""
    )
    attr = f' data-value="{esc(exact)}"' if exact else ""
    return f'<td class="num"{attr}>{esc(fmt(value, digits))}</td>'


def td(value: Any, cls: str = "") -> str:
    klass = f' class="{esc(cls)}"' if cls else ""
    return f"<td{klass}>{esc(fmt(value))}</td>"


def table(headers: Sequence[str], rows: Iterable[str], *, cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    klass = f' class="{esc(cls)}"' if cls else ""
    body = "\n".join(rows)
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"


def kv(pairs: Iterable[tuple[str, str]]) -> str:
    """A definition list; values are HTML already (use :func:`esc` / :func:`span_num`)."""
    items = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs)
    return f'<dl class="kv">{items}</dl>'


def span_num(value: Any, digits: int = 4) -> str:
    exact = (
        json.dumps(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""
    )
    attr = f' data-value="{esc(exact)}"' if exact else ""
    return f'<span class="num"{attr}>{esc(fmt(value, digits))}</span>'


def image(png: bytes, alt: str, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def missing(text: str) -> str:
    return f'<p class="missing">{esc(text)}</p>'


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


# ---------------------------------------------------------------------------------------------
# Verdict
# ---------------------------------------------------------------------------------------------
def verdict(summary: Mapping[str, Any]) -> dict[str, str]:
    """``{"word", "css", "line"}``: what happened to the release, in one word and one line.

    RELEASED needs both a passing gate and a published release; a passing gate without a release
    (federated mode keeps the data at the sites) is PASSED; a failing gate is GATED; a run that
    broke is FAILED. The line compares the strongest attacker's AUC with the threshold.
    """
    gate = summary.get("gate") or {}
    release = summary.get("release") or {}
    threshold = gate.get("threshold")
    best = gate.get("best_auc")
    source = gate.get("source")
    where = f" ({source})" if source else ""
    if summary.get("status") == "failed":
        error = summary.get("error") or {}
        return {
            "word": "FAILED",
            "css": "failed",
            "line": f"The run failed: {error.get('type', 'Error')}: "
            f"{error.get('message', 'see summary.json')}",
        }
    if best is None:
        comparison = f"leakage was not measured; threshold {fmt(threshold)}"
    elif gate.get("passed"):
        comparison = f"strongest-attacker AUC {fmt(best)}{where} ≤ threshold {fmt(threshold)}"
    else:
        comparison = f"strongest-attacker AUC {fmt(best)}{where} > threshold {fmt(threshold)}"
    if gate.get("passed") and release.get("published"):
        return {"word": "RELEASED", "css": "released", "line": comparison}
    if gate.get("passed"):
        why = release.get("reason") or "nothing was published"
        return {"word": "PASSED — NOT PUBLISHED", "css": "passed", "line": f"{comparison}; {why}"}
    return {"word": "GATED", "css": "gated", "line": f"{comparison}: the release was not published"}


def _verdict_section(summary: Mapping[str, Any]) -> str:
    v = verdict(summary)
    gate = summary.get("gate") or {}
    central = _get(summary, "audit", "central") or {}
    federated = _get(summary, "audit", "federated") or {}
    release = summary.get("release") or {}
    down = summary.get("downstream") or {}
    pairs = [
        ("gate threshold (max private AUC)", span_num(gate.get("threshold"))),
        ("strongest-attacker AUC", span_num(gate.get("best_auc"))),
        ("measured where", esc(gate.get("source") or MISSING)),
    ]
    for name, audit in (("central", central), ("federated", federated)):
        if audit:
            pairs.append(
                (
                    f"{name} audit: best AUC / attacker",
                    f"{span_num(audit.get('best_auc'))} / "
                    f"{esc(audit.get('best_attacker') or MISSING)}",
                )
            )
            pairs.append(
                (
                    f"{name} audit: best accuracy vs majority baseline",
                    f"{span_num(audit.get('best_accuracy'))} vs {span_num(audit.get('majority'))}",
                )
            )
    pairs += [
        (
            "release",
            f"{span_num(release.get('rows'))} rows from {span_num(release.get('sites'))}"
            f" site(s); published: {esc(fmt(bool(release.get('published'))))}",
        ),
        (
            f"downstream model ({down.get('mode', MISSING)} mode)",
            f"AUC {span_num(down.get('auc'))}, accuracy {span_num(down.get('accuracy'))} on "
            f"{span_num(down.get('test_rows'))} test rows",
        ),
    ]
    reason = gate.get("reason")
    extra = f'<p class="note">Gate: {esc(reason)}</p>' if reason else ""
    return (
        f'<section id="verdict" class="verdict {esc(v["css"])}">'
        f'<h2>Verdict: {esc(v["word"])}</h2><p class="line">{esc(v["line"])}</p>'
        f"{kv(pairs)}{extra}</section>"
    )


def _audit_verdict_section(audit: Mapping[str, Any]) -> str:
    """The headline when a page shows an audit without a run (``infoshape audit``)."""
    head = _get(audit, "headline", "encoder") or {}
    raw = _get(audit, "headline", "raw") or {}
    line = (
        f"strongest-attacker AUC on {head.get('sensitive', 'S')}: {fmt(head.get('best_auc'))}"
        f" (majority baseline {fmt(head.get('majority'))})"
    )
    if raw:
        line += f"; raw data: {fmt(raw.get('best_auc'))}"
    pairs = [
        ("encoder", esc(_get(audit, "encoder", "shaper") or MISSING)),
        ("fingerprint", f"<code>{esc(_get(audit, 'encoder', 'fingerprint') or MISSING)}</code>"),
        ("best attacker", esc(head.get("best_attacker") or MISSING)),
        ("utility AUC on L", span_num(head.get("utility_auc"))),
        ("log-rank privacy (min)", span_num(head.get("min_log_rank_privacy"))),
    ]
    return (
        f'<section id="verdict" class="verdict audit"><h2>Audit</h2>'
        f'<p class="line">{esc(line)}</p>{kv(pairs)}</section>'
    )


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------
def _key_figures(summary: Mapping[str, Any]) -> str:
    rows = []

    def row(name: str, value: Any) -> None:
        rows.append(f"<tr><td>{esc(name)}</td>{num(value)}</tr>")

    row("release rows", _get(summary, "release", "rows"))
    row("release sites", _get(summary, "release", "sites"))
    down = summary.get("downstream") or {}
    row("downstream AUC", down.get("auc"))
    row("downstream accuracy", down.get("accuracy"))
    row("downstream test rows", down.get("test_rows"))
    for name in ("central", "federated"):
        audit = _get(summary, "audit", name)
        if not audit:
            continue
        for key in (
            "best_auc",
            "best_accuracy",
            "best_balanced_accuracy",
            "majority",
            "min_log_rank_privacy",
        ):
            row(f"{name} audit {key.replace('_', ' ')}", audit.get(key))
    utility = _get(summary, "audit", "central", "utility")
    if utility:
        row("central audit utility AUC on L", utility.get("best_auc"))
    mi = _get(summary, "audit", "mi")
    if mi:
        row(f"Ĩ(L;T) on audit rows ({mi.get('unit', 'nats')})", mi.get("public_label"))
        for column, value in (mi.get("sensitive") or {}).items():
            row(f"Ĩ({column};T) on audit rows ({mi.get('unit', 'nats')})", value)
    return (
        '<section id="key-figures"><h2>Key figures</h2>'
        + table(["figure", "value"], rows)
        + "</section>"
    )


def _fig2(audit: Mapping[str, Any] | None, png: bytes | None) -> str:
    head = (
        '<section id="fig2"><h2>Fig. 2 analogue: ROC curves on raw, random, noisy and '
        "shaped data</h2>"
    )
    if png is None or not audit:
        return (
            head
            + missing(
                "No audit.json in this run dir, so no ROC curves. Run `infoshape audit` with the "
                "bundle and a public table with S, writing into this run dir, then `infoshape "
                "report RUNDIR`."
            )
            + "</section>"
        )
    caption = (
        "Strongest attacker per setting, trained on T(P_attack) and scored on held-out public "
        f"rows ({esc(_get(audit, 'rows', 'holdout'))} rows). Left: the public label — the curve "
        "should stay high after shaping. Right: each sensitive attribute — the closer to the "
        "diagonal, the less the release tells an adversary who knows T."
    )
    return head + image(png, "ROC curves for L and S per setting", caption) + "</section>"


def _baselines(audit: Mapping[str, Any] | None) -> str:
    if not audit:
        return ""
    rows = []
    sensitive = list(audit.get("sensitive") or [])
    for name, entry in (audit.get("settings") or {}).items():
        head = _get(audit, "headline", name) or {}
        mi = entry.get("mi") or {}
        cells = [
            td(entry.get("label") or name),
            num(head.get("best_auc")),
            td(head.get("best_attacker")),
            num(head.get("best_accuracy")),
            num(head.get("majority")),
            num(head.get("min_log_rank_privacy")),
            num(head.get("utility_auc")),
            num(mi.get("public")),
        ]
        cells += [num((mi.get("sensitive") or {}).get(c)) for c in sensitive]
        css = ' class="best"' if name == "encoder" else ""
        rows.append(f"<tr{css}>{''.join(cells)}</tr>")
    headers = [
        "setting",
        "private AUC (strongest)",
        "attacker",
        "private accuracy",
        "majority baseline",
        "log-rank privacy",
        "utility AUC on L",
        f"Ĩ(L;·) ({audit.get('mi_unit', 'nats')})",
    ] + [f"Ĩ({c};·)" for c in sensitive]
    extra = _release_audit(audit.get("release"))
    note = (
        f'<p class="note">Same attack split ({esc(_get(audit, "rows", "train"))} train / '
        f"{esc(_get(audit, 'rows', 'holdout'))} holdout rows), same attackers, seed "
        f"{esc(audit.get('seed'))}; noise σ = {esc(fmt(audit.get('sigma')))}. Log-rank "
        "privacy: larger is more private (≈ 0.5 for a binary S that T says nothing about)."
        "</p>"
    )
    return (
        '<section id="baselines"><h2>Audit: the encoder next to the baselines</h2>'
        + table(headers, rows)
        + note
        + extra
        + "</section>"
    )


def _release_audit(release: Mapping[str, Any] | None) -> str:
    """The audit's look at a release table (adversary's confidence, utility) or a site table
    (attackers scored on the site's own S)."""
    if not release:
        return ""
    rows = []
    if release.get("kind") == "release":
        for column, entry in (release.get("columns") or {}).items():
            shares = ", ".join(
                f"{k}: {fmt(v)}" for k, v in (entry.get("predicted_share") or {}).items()
            )
            rows.append(
                f"<tr>{td(column)}{td(entry.get('attacker'))}"
                f"{num(entry.get('mean_top_probability'))}"
                f"{num(entry.get('share_above_0.9'))}{td(shares)}</tr>"
            )
        body = table(
            [
                "sensitive",
                "strongest attacker",
                "mean top probability",
                "share of rows above 0.9",
                "predicted class shares",
            ],
            rows,
        )
        utility = release.get("utility") or {}
        if utility:
            body += (
                f'<p class="note">A model trained on the release scores AUC '
                f"{span_num(utility.get('best_auc'))} (accuracy "
                f"{span_num(utility.get('best_accuracy'))}, majority "
                f"{span_num(utility.get('majority'))}) on L of the public holdout.</p>"
            )
        title = (
            f"Release table ({fmt(release.get('rows'))} rows): what the adversary infers "
            "(S is not in a release, so this is confidence, not accuracy)"
        )
    else:
        for column, entry in (release.get("columns") or {}).items():
            rows.append(
                f"<tr>{td(column)}{num(entry.get('best_auc'))}"
                f"{td(entry.get('best_attacker'))}{num(entry.get('best_accuracy'))}"
                f"{num(entry.get('majority'))}</tr>"
            )
        body = table(
            ["sensitive", "best AUC", "attacker", "best accuracy", "majority baseline"], rows
        )
        title = (
            f"Site table ({fmt(release.get('rows'))} rows): the encoder's attackers scored "
            "on the site's own S"
        )
    return f"<h3>{esc(title)}</h3>{body}"


def _fig3(manifest: Mapping[str, Any] | None, png: bytes | None, has_reference: bool) -> str:
    head = '<section id="fig3"><h2>Fig. 3 analogue: Ĩ(L;T) and Ĩ(S;T) over training</h2>'
    if png is None:
        why = (
            "the bundle manifest holds no MI curves (this shaper records none)"
            if manifest is not None
            else "no bundle manifest in this run dir"
        )
        return head + missing(f"No training curves: {why}.") + "</section>"
    ref = (
        "Dashed lines: Ĩ(L;x) and Ĩ(S;x) estimated on the raw features (audit.json), what "
        "the data holds before shaping."
        if has_reference
        else "Dotted lines: H(L) and H(S), the ceilings (no audit.json with raw-data MI "
        "references in this run dir)."
    )
    caption = (
        "The critics' estimates on validation rows while T was trained (bundle manifest "
        f"training_metrics). {ref} Dots: the auditor's independent estimates on "
        "T(P_audit) (summary.json audit.mi)."
    )
    return head + image(png, "MI over training", caption) + "</section>"


def _sites(summary: Mapping[str, Any]) -> str:
    sites = summary.get("sites") or []
    federated = _get(summary, "audit", "federated") or {}
    per_site = {
        str(e.get("site")): e for e in federated.get("per_site") or [] if isinstance(e, Mapping)
    }
    faults = _get(summary, "simulation", "faults") or {}
    rows = []
    for site in sites:
        name = str(site.get("name"))
        status = str(site.get("status") or MISSING)
        phases = site.get("phases") or {}
        audit_entry = per_site.get(name) or {}
        scores = {k: v for k, v in audit_entry.items() if k not in ("site", "rows")}
        if audit_entry:
            fed = f"scored {fmt(audit_entry.get('rows'))} rows"
            if "best_auc" in scores:
                fed += (
                    f"; best AUC {fmt(scores.get('best_auc'))}"
                    f" ({scores.get('best_attacker') or MISSING})"
                )
                if "best_accuracy" in scores:
                    fed += (
                        f", accuracy {fmt(scores.get('best_accuracy'))} vs majority "
                        f"{fmt(scores.get('majority'))}"
                    )
            elif scores:  # whatever per-site figures the coordinator recorded
                fed += "; " + ", ".join(
                    f"{k} {fmt(v)}"
                    for k, v in sorted(scores.items())
                    if not isinstance(v, Mapping | list)
                )
        elif "site-audit" in phases:
            fed = str(phases["site-audit"])
        else:
            fed = "not part of the federated audit" if site.get("role") == "hospital" else "—"
        reason = site.get("reason") or ""
        if name in faults:
            reason = f"[injected fault: {faults[name]}] {reason}".strip()
        phase_text = ", ".join(f"{k}: {v}" for k, v in phases.items())
        rows.append(
            f"<tr>{td(name)}{td(site.get('role'))}{num(site.get('rows'))}"
            f'<td class="status-{esc(status)}">{esc(status)}</td>{td(reason or MISSING)}'
            f"{td(fed)}{td(phase_text or MISSING)}</tr>"
        )
    if federated:
        combine = federated.get("combine", "combined")
        rows.append(
            f'<tr class="total">{td("all audited hospitals")}{td(f"({combine})")}'
            f"{num(federated.get('rows'))}{td(str(federated.get('sites')) + ' site(s)')}"
            f"{td('')}<td>best AUC {span_num(federated.get('best_auc'))} "
            f"({esc(federated.get('best_attacker') or MISSING)}), accuracy "
            f"{span_num(federated.get('best_accuracy'))} vs majority "
            f"{span_num(federated.get('majority'))}</td>{td('')}</tr>"
        )
    if not rows:
        return (
            '<section id="sites"><h2>Sites</h2>'
            + missing("summary.json lists no sites.")
            + "</section>"
        )
    headers = ["site", "role", "rows", "status", "reason", "federated audit", "phases"]
    return '<section id="sites"><h2>Sites</h2>' + table(headers, rows) + "</section>"


def _suite_table(suite: Mapping[str, Any], *, title: str, privacy: bool = True) -> str:
    rows = []
    best = suite.get("best_attacker")
    for name, entry in (suite.get("per_attacker") or {}).items():
        css = ' class="best"' if name == best else ""
        params = entry.get("params")
        extra = entry.get("sites")
        detail = (
            json.dumps(params, sort_keys=True)
            if params is not None
            else (f"{extra} site(s)" if extra is not None else MISSING)
        )
        rows.append(
            f"<tr{css}>{td(name + (' ★' if name == best else ''))}{num(entry.get('auc'))}"
            f"{num(entry.get('accuracy'))}{num(entry.get('balanced_accuracy'))}"
            f"{num(entry.get('log_rank_privacy'))}{td(detail)}</tr>"
        )
    lrp = num(suite.get("min_log_rank_privacy")) if privacy else td("")
    note = "← accuracy without the release" + ("; min log-rank privacy" if privacy else "")
    rows.append(
        f'<tr class="total">{td("majority baseline")}{td("")}{num(suite.get("majority"))}'
        f"{td('')}{lrp}{td(note)}</tr>"
    )
    headers = [
        "attacker",
        "AUC",
        "accuracy",
        "balanced accuracy",
        "log-rank privacy",
        "chosen parameters / sites",
    ]
    return f"<h3>{esc(title)}</h3>" + table(headers, rows)


def _attackers(summary: Mapping[str, Any], png: bytes | None) -> str:
    parts = ['<section id="attackers"><h2>Attacker suite</h2>']
    any_suite = False
    for name in ("central", "federated"):
        audit = _get(summary, "audit", name)
        if not audit:
            continue
        columns = audit.get("columns") or {}
        if not columns and audit.get("per_attacker"):
            columns = {audit.get("sensitive", "S"): audit}
        for column, suite in columns.items():
            any_suite = True
            where = (
                "auditor's holdout"
                if name == "central"
                else "each hospital's own rows, row-weighted"
            )
            parts.append(_suite_table(suite, title=f"{name} audit — sensitive {column} ({where})"))
        utility = audit.get("utility") if name == "central" else None
        if utility:
            parts.append(
                _suite_table(
                    utility,
                    privacy=False,
                    title="utility — the same suite on the public label (higher is better)",
                )
            )
    if not any_suite:
        parts.append(missing("No audit result in summary.json (no auditor answered)."))
    if png is not None:
        parts.append(
            image(
                png,
                "attacker AUCs",
                "Each attacker's AUC on S; the gate compares "
                "the highest with the threshold (dashed).",
            )
        )
    parts.append(
        '<p class="note">★ the strongest attacker (highest AUC). A privacy figure is '
        "always the strongest attacker's, next to the majority baseline: leakage is "
        "the margin above what an adversary gets without the release.</p></section>"
    )
    return "".join(parts)


def _frontier(frontier: Mapping[str, Any] | None, png: bytes | None) -> str:
    if not frontier:
        return (
            '<section id="frontier"><h2>Privacy–utility frontier</h2>'
            + missing(
                "No frontier.json in this run dir. `infoshape frontier --out RUNDIR` "
                "sweeps λ and σ and adds it."
            )
            + "</section>"
        )
    rows = []
    for point in frontier.get("points") or []:
        css = ' class="best"' if point.get("pareto") else ""
        rows.append(
            f"<tr{css}>{td(point.get('kind'))}{td(point.get('param') or MISSING)}"
            f"{num(point.get('value'))}{num(point.get('private_auc'))}"
            f"{num(point.get('private_auc_sd'))}"
            f"{td(point.get('private_attacker'))}{num(point.get('majority'))}"
            f"{num(point.get('utility_auc'))}{num(point.get('utility_auc_sd'))}"
            f"{td('yes' if point.get('pareto') else '')}</tr>"
        )
    headers = [
        "kind",
        "parameter",
        "value",
        "private AUC (strongest)",
        "± sd",
        "attacker",
        "majority baseline",
        "utility AUC on L",
        "± sd",
        "Pareto",
    ]
    chance = frontier.get("chance") or {}
    floor = (
        f" Chance floor (strongest attacker on shuffled S, {len(chance.get('runs') or [])} runs): "
        f"mean {esc(fmt(chance.get('mean')))}, max {esc(fmt(chance.get('max')))}; points at or "
        "under it show no measurable leakage."
        if chance.get("max") is not None
        else ""
    )
    caption = (
        f"{esc(frontier.get('dataset'))}: {esc(frontier.get('privacy_metric'))}; utility: "
        f"{esc(frontier.get('utility_metric'))}. Rows: "
        f"{esc(json.dumps(frontier.get('rows')))}, seed {esc(frontier.get('seed'))}.{floor}"
    )
    body = image(png, "privacy-utility frontier", caption) if png is not None else ""
    return (
        '<section id="frontier"><h2>Privacy–utility frontier</h2>'
        + body
        + table(headers, rows)
        + "</section>"
    )


def _bundle(
    summary: Mapping[str, Any] | None,
    manifest: Mapping[str, Any] | None,
    check: Mapping[str, Any] | None,
) -> str:
    info = (summary or {}).get("bundle") or {}
    m = manifest or {}
    if not info and not m:
        return (
            '<section id="bundle"><h2>Encoder bundle</h2>'
            + missing("No bundle information.")
            + "</section>"
        )
    shaper = info.get("shaper") or m.get("shaper")
    if isinstance(shaper, Mapping):
        shaper = shaper.get("name")
    pairs = [
        (
            "fingerprint",
            f"<code>{esc(info.get('fingerprint') or m.get('fingerprint') or MISSING)}</code>",
        ),
        ("key id", f"<code>{esc(info.get('key_id') or m.get('key_id') or MISSING)}</code>"),
        ("version", span_num(info.get("version", m.get("encoder_version")))),
        ("shaper", esc(shaper or MISSING)),
        ("λ", span_num(info.get("lambda", m.get("lambda")))),
        ("schedule", esc(m.get("schedule") or MISSING)),
        ("created at", esc(m.get("created_at") or MISSING)),
        (
            "public-data fingerprint",
            f"<code>{esc(m.get('public_data_fingerprint') or MISSING)}</code>",
        ),
        ("weights SHA-256", f"<code>{esc(m.get('weights_sha256') or MISSING)}</code>"),
    ]
    if check:
        pairs.append(("signature", esc(check.get("text", MISSING))))
    return '<section id="bundle"><h2>Encoder bundle</h2>' + kv(pairs) + "</section>"


def _reproducibility(repro: Mapping[str, Any], timings: Mapping[str, Any] | None) -> str:
    parts = ['<section id="reproducibility"><h2>Reproducibility</h2>']
    command = repro.get("command")
    origin = repro.get("command_origin", "")
    parts.append(f"<h3>Command</h3><pre>{esc(command or MISSING)}</pre>")
    if origin:
        parts.append(f'<p class="note">{esc(origin)}</p>')
    seeds = repro.get("seeds") or {}
    if seeds:
        parts.append(
            "<h3>Seeds</h3>"
            + table(["where", "seed"], [f"<tr>{td(k)}{num(v)}</tr>" for k, v in seeds.items()])
        )
    versions = repro.get("versions") or {}
    if versions:
        parts.append(f"<h3>Package versions ({esc(repro.get('versions_origin', ''))})</h3>")
        parts.append(
            table(["package", "version"], [f"<tr>{td(k)}{td(v)}</tr>" for k, v in versions.items()])
        )
    if timings:
        parts.append(
            "<h3>Timings (seconds)</h3>"
            + table(["phase", "seconds"], [f"<tr>{td(k)}{num(v)}</tr>" for k, v in timings.items()])
        )
    parts.append("</section>")
    return "".join(parts)


def _raw_json(name: str, data: Mapping[str, Any] | None) -> str:
    if not data:
        return ""
    return (
        f"<details><summary>{esc(name)} (exact values)</summary><pre>"
        f"{esc(json.dumps(data, indent=2, ensure_ascii=False))}</pre></details>"
    )


# ---------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------
def render_report(
    *,
    summary: Mapping[str, Any] | None,
    audit: Mapping[str, Any] | None = None,
    frontier: Mapping[str, Any] | None = None,
    manifest: Mapping[str, Any] | None = None,
    figures: Mapping[str, bytes] | None = None,
    reproducibility: Mapping[str, Any] | None = None,
    bundle_check: Mapping[str, Any] | None = None,
    generated_at: str = "",
    title: str | None = None,
) -> str:
    """The whole page as a string.

    ``figures`` maps ``roc``, ``mi``, ``attackers`` and ``frontier`` to PNG bytes (absent keys
    give a note in place of the figure). At least one of ``summary``, ``audit``, ``frontier``
    must be given.
    """
    if not (summary or audit or frontier):
        raise ValueError("render_report needs a summary, an audit or a frontier to show")
    figs = dict(figures or {})
    run_id = (summary or {}).get("run_id")
    heading = title or ("InfoShape-FL release report" if summary else "InfoShape-FL audit report")
    sub = []
    if run_id:
        sub.append(f"run <code>{esc(run_id)}</code>")
    if summary and summary.get("status"):
        sub.append(f"status <b>{esc(summary['status'])}</b>")
    dataset = _get(summary, "config", "dataset")
    if dataset:
        sub.append(f"data {esc(dataset)}")
    if generated_at:
        sub.append(f"generated {esc(generated_at)}")
    body = [f"<h1>{esc(heading)}</h1>", f'<p class="sub">{" · ".join(sub)}</p>']
    nav = [
        ("verdict", "Verdict"),
        ("fig2", "ROC (Fig. 2)"),
        ("fig3", "MI (Fig. 3)"),
        ("sites", "Sites"),
        ("attackers", "Attackers"),
        ("frontier", "Frontier"),
        ("bundle", "Bundle"),
        ("reproducibility", "Reproducibility"),
    ]
    if not summary:
        nav = [n for n in nav if n[0] not in ("sites", "attackers")]
    body.append("<nav>" + "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in nav) + "</nav>")
    if summary:
        body.append(_verdict_section(summary))
        body.append(_key_figures(summary))
    elif audit:
        body.append(_audit_verdict_section(audit))
    else:
        body.append(
            '<section id="verdict" class="verdict audit"><h2>Frontier</h2>'
            '<p class="line">A λ / σ sweep; no run summary in this directory.</p>'
            "</section>"
        )
    body.append(_fig2(audit, figs.get("roc")))
    body.append(_baselines(audit))
    body.append(_fig3(manifest, figs.get("mi"), bool(audit and audit.get("reference"))))
    if summary:
        body.append(_sites(summary))
        body.append(_attackers(summary, figs.get("attackers")))
    body.append(_frontier(frontier, figs.get("frontier")))
    body.append(_bundle(summary, manifest or (audit or {}).get("encoder"), bundle_check))
    body.append(_reproducibility(reproducibility or {}, (summary or {}).get("timings")))
    raw = "".join(
        _raw_json(n, d)
        for n, d in (
            ("summary.json", summary),
            ("audit.json", _strip_roc(audit)),
            ("frontier.json", frontier),
        )
    )
    if raw:
        body.append(f'<section id="raw"><h2>Raw data</h2>{raw}</section>')
    body.append(
        "<footer>Self-contained: no script, font or link leaves this file. "
        "Numbers: floats to 4 decimals; each cell's exact value is in its data-value "
        "attribute and in the raw JSON above.</footer>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(heading)}{' — ' + esc(run_id) if run_id else ''}</title>"
        f"<style>{CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _strip_roc(audit: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """audit.json without the ROC point lists (hundreds of numbers the figure already shows)."""
    if not audit:
        return None
    out = dict(audit)
    settings = {}
    for name, entry in (audit.get("settings") or {}).items():
        entry = dict(entry)
        entry.pop("roc", None)
        settings[name] = entry
    out["settings"] = settings
    return out


__all__ = ["CSS", "fmt", "render_report", "verdict"]
