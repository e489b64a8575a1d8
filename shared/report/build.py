"""``write_report(run_dir)``: read what a run wrote, render ``report.html`` and ``figures/*.png``.

The report is a pure function of the run dir: ``summary.json`` (every metric of the run),
optionally ``audit.json`` (``infoshape audit``: baselines, ROC curves, Ĩ(·;x) references),
``frontier.json`` (``infoshape frontier``) and the bundle manifest's MI curves. Nothing is
refitted, so re-rendering is quick and deterministic, and a report can be rebuilt years later
from the archived run dir.

Writes are atomic (``shared.atomic``): ``figures/`` is replaced as a whole and ``report.html``
appears complete or not at all, so a browser, a sync job or a crash never sees half a report.
"""

from __future__ import annotations

import json
import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from shared.atomic import atomic_dir, atomic_write_text
from shared.errors import ConfigError, InfoShapeError, RunError
from shared.report import figures as figs
from shared.report.audit import json_safe
from shared.report.frontier import FRONTIER_JSON
from shared.report.html import render_report

REPORT_HTML = "report.html"
FIGURES_DIR = "figures"
AUDIT_JSON = "audit.json"
SUMMARY_JSON = "summary.json"
BUNDLE_DIR = "bundle"
KEYS_DIR = "keys"

#: Distributions whose versions decide a run's numbers (reported in the reproducibility block).
PACKAGES: tuple[str, ...] = (
    "infoshape-fl",
    "torch",
    "numpy",
    "scikit-learn",
    "scipy",
    "pandas",
    "pyarrow",
    "flwr",
    "ray",
    "safetensors",
    "cryptography",
    "matplotlib",
)


# ---------------------------------------------------------------------------------------------
# Reproducibility facts
# ---------------------------------------------------------------------------------------------
def environment_info(packages: Sequence[str] = PACKAGES) -> dict[str, Any]:
    """Python, platform and installed package versions (read from metadata: nothing imported,
    so asking for ``flwr``'s version does not pull the federation stack into ``shared``)."""
    versions: dict[str, str] = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {"versions": versions, "platform": platform.platform()}


def reproducibility_record(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """What ``summary["reproduce"]`` should hold, recorded when the run starts: the exact command
    line and the package versions that produced the numbers.

    ``argv`` defaults to ``sys.argv`` with the program shown as ``infoshape``.
    """
    args = list(sys.argv if argv is None else argv)
    if args and Path(args[0]).name in ("infoshape", "cli.py", "__main__.py"):
        args[0] = "infoshape"
    info = environment_info()
    return {
        "command": shlex.join(args),
        "argv": args,
        "versions": info["versions"],
        "platform": info["platform"],
        "recorded_at": _now(),
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_SIMULATE_FLAGS: tuple[tuple[str, str], ...] = (
    ("num-sites", "--sites"),
    ("dataset", "--dataset"),
    ("partition", "--partition"),
    ("mode", "--mode"),
    ("lambda", "--lambda"),
    ("shaper", "--shaper"),
    ("schedule", "--schedule"),
    ("seed", "--seed"),
    ("max-private-auc", "--max-private-auc"),
    ("attackers", "--attackers"),
    ("bundle", "--bundle"),
    ("trusted-key", "--trusted-key"),
)


def reconstruct_command(config: Mapping[str, Any], run_dir: str | Path) -> str:
    """An ``infoshape simulate`` line equivalent to a summary's ``config`` (used only when the
    run did not record its command)."""
    args = ["infoshape", "simulate"]
    for key, flag in _SIMULATE_FLAGS:
        value = config.get(key)
        if value in (None, ""):
            continue
        args += [flag, str(value)]
    args += ["--out", str(run_dir)]
    return shlex.join(args)


def _reproducibility(
    run_dir: Path,
    summary: Mapping[str, Any] | None,
    audit: Mapping[str, Any] | None,
    frontier: Mapping[str, Any] | None,
    manifest: Mapping[str, Any] | None,
    command: str | None,
) -> dict[str, Any]:
    recorded = dict((summary or {}).get("reproduce") or {})
    out: dict[str, Any] = {}
    if command:
        out["command"], out["command_origin"] = command, "as given to the report command"
    elif recorded.get("command"):
        out["command"] = recorded["command"]
        out["command_origin"] = f"recorded by the run at {recorded.get('recorded_at', 'start')}"
    elif summary and summary.get("config"):
        out["command"] = reconstruct_command(summary["config"], run_dir)
        out["command_origin"] = (
            "reconstructed from summary.json 'config' (the run did not record its command line)"
        )
    if recorded.get("versions"):
        out["versions"] = dict(recorded["versions"])
        out["versions_origin"] = "recorded by the run"
    else:
        out["versions"] = environment_info()["versions"]
        out["versions_origin"] = "of the environment that rendered this report"
    seeds: dict[str, Any] = {}
    config_seed = ((summary or {}).get("config") or {}).get("seed")
    if config_seed is not None:
        seeds["run (splits, encoder, attackers, downstream)"] = config_seed
    params = (manifest or {}).get("shaper") or {}
    if isinstance(params, Mapping) and isinstance(params.get("params"), Mapping):
        if params["params"].get("seed") is not None:
            seeds["encoder training (bundle manifest)"] = params["params"]["seed"]
    if audit and audit.get("seed") is not None:
        seeds["audit.json"] = audit["seed"]
    if frontier and frontier.get("seed") is not None:
        seeds["frontier.json"] = frontier["seed"]
    out["seeds"] = seeds
    return out


# ---------------------------------------------------------------------------------------------
# Reading a run dir
# ---------------------------------------------------------------------------------------------
def _read_json(path: Path, what: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunError(f"{what} {path} cannot be read ({exc}); re-create it") from None
    if not isinstance(data, dict):
        raise RunError(f"{what} {path} is not a JSON object")
    return data


def _bundle_dir(run_dir: Path, summary: Mapping[str, Any] | None) -> Path:
    name = ((summary or {}).get("bundle") or {}).get("dir") or BUNDLE_DIR
    return run_dir / str(name)


def _check_signature(run_dir: Path, bundle_dir: Path) -> dict[str, Any] | None:
    """Verify the run's bundle with the public key kept in the run dir (simulation), so the page
    can say whether the fingerprint it shows belongs to a validly signed encoder."""
    if not (bundle_dir / "manifest.json").is_file():
        return None
    keys = sorted((run_dir / KEYS_DIR).glob("*.pub")) if (run_dir / KEYS_DIR).is_dir() else []
    if not keys:
        return {"verified": None, "text": "not checked: no public key in the run dir's keys/"}
    from shared.bundle import EncoderBundle

    try:
        info = EncoderBundle.verify(bundle_dir, keys)
    except InfoShapeError as exc:
        return {"verified": False, "text": f"NOT valid: {type(exc).__name__}: {exc}"}
    names = ", ".join(f"{KEYS_DIR}/{k.name}" for k in keys)
    return {
        "verified": True,
        "text": f"valid (Ed25519, key id {info.key_id}), checked with {names}",
        "fingerprint": info.fingerprint,
    }


def _mi_inputs(
    manifest: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], list[str], dict[str, Any]] | None:
    """(history, sensitive names, entropies) from a manifest's training metrics, if any."""
    if not manifest:
        return None
    metrics = manifest.get("training_metrics") or {}
    history = metrics.get("history") if isinstance(metrics, Mapping) else None
    if not isinstance(history, Mapping) or not history.get("step"):
        return None
    labels = manifest.get("labels") or {}
    names = list(
        labels.get("sensitive") or (manifest.get("input_schema") or {}).get("sensitive") or []
    )
    if not names:
        first = (history.get("mi_sensitive") or [[]])[0]
        names = [f"S{j}" for j in range(len(first) if isinstance(first, list) else 1)]
    entropy = {
        "public": metrics.get("label_entropy"),
        "sensitive": dict(zip(names, metrics.get("sensitive_entropy") or [], strict=False)),
    }
    return dict(history), names, entropy


def render_figures(
    *,
    summary: Mapping[str, Any] | None,
    audit: Mapping[str, Any] | None,
    frontier: Mapping[str, Any] | None,
    manifest: Mapping[str, Any] | None,
) -> dict[str, bytes]:
    """Every figure the data allows, as PNG bytes keyed by file stem."""
    out: dict[str, bytes] = {}
    if audit and audit.get("settings"):
        label = audit.get("label") or "L"
        out["roc"] = figs.roc_figure(audit["settings"], label_name=str(label))
    mi = _mi_inputs(manifest)
    if mi is not None:
        history, names, entropy = mi
        final = None
        summary_mi = ((summary or {}).get("audit") or {}).get("mi")
        if isinstance(summary_mi, Mapping):
            final = {
                "public": summary_mi.get("public_label"),
                "sensitive": summary_mi.get("sensitive") or {},
            }
        out["mi"] = figs.mi_figure(
            history, names, reference=(audit or {}).get("reference"), entropy=entropy, final=final
        )
    audits = (summary or {}).get("audit") or {}
    suites = {
        name: audits[name]
        for name in ("central", "federated")
        if isinstance(audits.get(name), Mapping) and audits[name].get("per_attacker")
    }
    if suites:
        out["attackers"] = figs.attackers_figure(
            suites, threshold=((summary or {}).get("gate") or {}).get("threshold")
        )
    if frontier and frontier.get("points"):
        threshold = frontier.get("threshold")
        if threshold is None:
            threshold = ((summary or {}).get("gate") or {}).get("threshold")
        out["frontier"] = figs.frontier_figure(
            frontier["points"],
            threshold=threshold,
            chance=figs.chance_band(frontier.get("chance")),
        )
    return out


def write_report(run_dir: str | Path, *, command: str | None = None) -> Path:
    """Render ``RUN_DIR/report.html`` and ``RUN_DIR/figures/*.png``; return the report's path.

    Reads ``summary.json`` and, when present, ``audit.json``, ``frontier.json`` and
    ``bundle/manifest.json``. A directory with only an audit or a frontier (``infoshape audit
    --out DIR``) gets a report of what it holds. ``command`` overrides the command shown in the
    reproducibility block.
    """
    directory = Path(run_dir)
    if not directory.is_dir():
        raise ConfigError(f"run dir {directory} does not exist or is not a directory")
    summary = _read_json(directory / SUMMARY_JSON, "summary")
    audit = _read_json(directory / AUDIT_JSON, "audit")
    frontier = _read_json(directory / FRONTIER_JSON, "frontier")
    if not (summary or audit or frontier):
        raise RunError(
            f"{directory} holds no {SUMMARY_JSON}, {AUDIT_JSON} or {FRONTIER_JSON}; nothing to "
            "report (is it a run dir written by `infoshape simulate`?)"
        )
    bundle_dir = _bundle_dir(directory, summary)
    manifest = _read_json(bundle_dir / "manifest.json", "bundle manifest")
    check = _check_signature(directory, bundle_dir) if manifest else None
    pngs = render_figures(summary=summary, audit=audit, frontier=frontier, manifest=manifest)
    page = render_report(
        summary=summary,
        audit=audit,
        frontier=frontier,
        manifest=manifest,
        figures=pngs,
        reproducibility=_reproducibility(directory, summary, audit, frontier, manifest, command),
        bundle_check=check,
        generated_at=_now(),
    )
    with atomic_dir(directory / FIGURES_DIR) as tmp:
        for name, png in pngs.items():
            (tmp / f"{name}.png").write_bytes(png)
    return atomic_write_text(directory / REPORT_HTML, page)


def write_audit(out_dir: str | Path, audit: Mapping[str, Any]) -> Path:
    """Write ``audit.json`` into ``out_dir`` (a run dir or a fresh directory), atomically."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(
        directory / AUDIT_JSON, json.dumps(json_safe(dict(audit)), indent=2, allow_nan=False) + "\n"
    )


__all__ = [
    "AUDIT_JSON",
    "FIGURES_DIR",
    "REPORT_HTML",
    "environment_info",
    "reconstruct_command",
    "render_figures",
    "reproducibility_record",
    "write_audit",
    "write_report",
]
