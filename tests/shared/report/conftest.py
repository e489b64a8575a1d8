"""Fixtures for the report tests: a summary shaped like the coordinator's, without any fitting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def _suite(best: float, majority: float, lrp: float, *, sites: bool = False) -> dict[str, Any]:
    per = {
        "logistic-regression": {
            "auc": best,
            "accuracy": 0.5512345,
            "balanced_accuracy": 0.55,
            "log_rank_privacy": lrp,
        },
        "knn": {
            "auc": best - 0.0123,
            "accuracy": 0.53,
            "balanced_accuracy": 0.529,
            "log_rank_privacy": lrp + 0.01,
        },
    }
    for entry in per.values():
        if sites:
            entry["sites"] = 2
        else:
            entry["params"] = {"C": 1.0}
    return {
        "best_attacker": "logistic-regression",
        "best_auc": best,
        "best_accuracy": 0.5512345,
        "best_balanced_accuracy": 0.55,
        "majority": majority,
        "min_log_rank_privacy": lrp,
        "per_attacker": per,
    }


def make_summary(*, passed: bool = True, threshold: float = 0.7) -> dict[str, Any]:
    """The keys and nesting of ``server.phases.run_coordinator``'s summary (issue 3 item 5)."""
    central = _suite(0.5844123456, 0.4388888, 0.5111)
    federated = _suite(0.5286421, 0.5166667, 0.4562, sites=True)
    best = max(central["best_auc"], federated["best_auc"])
    if not passed:
        threshold = 0.55
    gate_passed = best <= threshold
    summary: dict[str, Any] = {
        "run_id": "unit-run",
        "status": "completed" if gate_passed else "gated",
        "config": {
            "dataset": "paper-synthetic",
            "num-sites": 2,
            "lambda": 1.0,
            "mode": "release",
            "max-private-auc": threshold,
            "seed": 7,
            "shaper": "infoshape",
            "schedule": "alternating",
            "partition": "iid",
            "attackers": "",
            "bundle": "",
            "trusted-key": "",
        },
        "sites": [
            {
                "name": "hospital-0",
                "role": "hospital",
                "node_id": 1,
                "rows": 1334,
                "status": "ok",
                "reason": "",
                "error_type": "",
                "phases": {"discover": "ok", "encode": "ok", "site-audit": "ok"},
            },
            {
                "name": "hospital-<b>1</b>",
                "role": "hospital",
                "node_id": 2,
                "rows": 0,
                "status": "refused",
                "error_type": "UnknownKeyError",
                "reason": "encode: UnknownKeyError: <script>alert(1)</script> not trusted",
                "phases": {"discover": "ok", "encode": "refused: UnknownKeyError: ..."},
            },
            {
                "name": "auditor",
                "role": "audit",
                "node_id": 3,
                "rows": 2000,
                "status": "ok",
                "reason": "",
                "error_type": "",
                "phases": {"discover": "ok", "audit": "ok"},
            },
        ],
        "release": {"rows": 1334, "sites": 1, "published": gate_passed},
        "downstream": {
            "mode": "release",
            "auc": 0.9312345678,
            "accuracy": 0.861,
            "test_rows": 1000,
            "train_rows": 1334,
        },
        "audit": {
            "central": {
                "sensitive": "s",
                **central,
                "columns": {"s": central},
                "utility": _suite(0.9280111, 0.4611, 0.1722),
                "rows": {"total": 2000, "train": 1400, "holdout": 600},
            },
            "federated": {
                "sensitive": "s",
                **federated,
                "columns": {"s": federated},
                "sites": 1,
                "rows": 1334,
                "per_site": [{"site": "hospital-0", "rows": 1334}],
                "combine": "row-weighted mean over sites",
            },
            "mi": {
                "estimator": "remine",
                "unit": "nats",
                "steps": 500,
                "public_label": 0.2871654,
                "sensitive": {"s": 0.0060321},
            },
        },
        "gate": {
            "threshold": threshold,
            "passed": gate_passed,
            "best_auc": best,
            "source": "central:s",
            "reason": f"strongest attacker AUC {best:.4f} (central:s) "
            + ("≤" if gate_passed else "exceeds")
            + f" {threshold}",
        },
        "bundle": {
            "fingerprint": "ab" * 32,
            "key_id": "e86ee93ee346db7d",
            "version": 3,
            "shaper": "infoshape",
            "lambda": 1.0,
            "dir": "bundle",
        },
        "timings": {"encoder_s": 12.5, "total_s": 60.25},
    }
    if gate_passed:
        summary["release"].update({"dir": "release", "files": {}})
    else:
        summary["release"]["reason"] = summary["gate"]["reason"]
    return summary


@pytest.fixture
def summary() -> dict[str, Any]:
    return make_summary()


@pytest.fixture
def summary_run_dir(tmp_path: Path, summary: dict[str, Any]) -> Path:
    """A run dir that holds only summary.json (no bundle, audit or frontier)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return run_dir


def numeric_leaves(obj: Any, path: str = "") -> list[tuple[str, float]]:
    """(dotted path, value) for every int/float in a JSON tree (bools excluded)."""
    out: list[tuple[str, float]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += numeric_leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += numeric_leaves(v, f"{path}[{i}]")
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        out.append((path, obj))
    return out


__all__ = ["make_summary", "numeric_leaves"]
