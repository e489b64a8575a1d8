"""Build a small but real run dir without Flower's runtime: for the report tests.

Every part is made by the code a real run uses — a trained InfoShape encoder in a signed bundle,
attackers fitted on T(P_audit), the coordinator's own summary helpers (``central_summary``,
``combine_site_audits``, ``decide_gate``, ``bundle_summary``, ``publish_release``,
``write_summary``) — only the message passing is skipped. So the summary has exactly the keys and
shapes ``infoshape simulate`` writes, and a change to them there shows up here.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

from shared.attacks import run_attack_suite, score_utility
from shared.attacks.logrank import log_rank_privacy_from_proba
from shared.attacks.metrics import majority_baseline, score_predictions
from shared.bundle import EncoderBundle, generate_keypair
from shared.data import load_dataset, split_frame
from shared.mi import estimate_mi
from shared.pipeline import Encoder, bundle_from_fitted, fit_shaper, open_bundle
from shared.report.audit import one_torch_thread

ATTACKERS = ["logistic-regression", "knn"]


@dataclass
class BuiltRun:
    run_dir: Path
    summary: dict[str, Any]
    encoder: Encoder
    audit_frame: pd.DataFrame
    release_frame: pd.DataFrame


def build_run_dir(root: Path, **kwargs: Any) -> BuiltRun:
    """:func:`_build` on one torch thread (see ``shared.report.audit.one_torch_thread``)."""
    with one_torch_thread():
        return _build(root, **kwargs)


def _build(
    root: Path,
    *,
    threshold: float = 0.7,
    rows: int = 2400,
    max_steps: int = 75,
    seed: int = 0,
    mi_steps: int = 60,
) -> BuiltRun:
    """A run dir (bundle/, keys/, release/ when published, summary.json) for 2 hospitals, one of
    which refused the bundle, and one auditor."""
    from server.config import RunConfig
    from server.phases import (
        CentralAudit,
        Site,
        bundle_summary,
        central_summary,
        combine_site_audits,
        decide_gate,
    )
    from server.release import Contribution, publish_release, write_summary

    run_dir = root / "run"
    run_dir.mkdir(parents=True)
    data = load_dataset("paper-synthetic", seed=seed)
    frame = data.frame.sample(n=rows, random_state=seed)
    parts = split_frame(
        frame,
        {
            "public": 0.4,
            "audit": 0.25,
            "hospital-0": 0.1,
            "hospital-1": 0.1,
            "hospital-2": 0.05,
            "test": 0.1,
        },
        seed=seed,
        stratify="s",
    )
    fitted = fit_shaper(
        parts["public"], data.spec, shaper="infoshape", lam=1.0, seed=seed, max_steps=max_steps
    )
    keys = generate_keypair(root / "keys")
    bundle_from_fitted(fitted).save(run_dir / "bundle", keys.private)
    (run_dir / "keys").mkdir()
    shutil.copy2(keys.public, run_dir / "keys" / keys.public.name)
    bundle = EncoderBundle.load(run_dir / "bundle", keys.public)
    encoder = open_bundle(bundle)

    # Auditor: attackers on T(P_audit) → S, scored on a holdout; utility; MI.
    z, y = encoder.encode_frame(parts["audit"])
    s = encoder.encode_sensitive(parts["audit"])
    n = len(y)
    order = np.random.default_rng(seed).permutation(n)
    tr, te = order[: int(0.7 * n)], order[int(0.7 * n) :]
    suite = run_attack_suite(z[tr], s[tr, 0], z[te], s[te, 0], attackers=ATTACKERS, seed=seed)
    utility = score_utility(z[tr], y[tr], z[te], y[te], attackers=ATTACKERS, seed=seed)
    metrics = {
        "sensitive": ["s"],
        "columns": {"s": suite.to_dict()},
        "utility": utility.to_dict(),
        "mi": {
            "estimator": "remine",
            "unit": "nats",
            "steps": mi_steps,
            "public_label": estimate_mi(z, y, steps=mi_steps, seed=seed),
            "sensitive": {"s": estimate_mi(z, s[:, 0], steps=mi_steps, seed=seed)},
        },
        "rows": {"total": n, "train": len(tr), "holdout": len(te)},
    }
    central = CentralAudit(metrics, ["s"], z[tr], s[tr], {}, {})

    # Hospitals 0 and 1 encode and score the attackers on their own rows; 2 refused the key.
    sites = [
        Site(1, "hospital-0", "hospital"),
        Site(2, "hospital-1", "hospital"),
        Site(3, "hospital-2", "hospital"),
        Site(4, "auditor", "audit"),
    ]
    contributions: dict[str, Contribution] = {}
    results = []
    for site in sites[:2]:
        zs, ys = encoder.encode_frame(parts[site.name])
        ss = encoder.encode_sensitive(parts[site.name])[:, 0]
        site.rows = len(ys)
        site.phases = {"discover": "ok", "encode": "ok", "site-audit": "ok"}
        contributions[site.name] = Contribution(site.name, zs, ys)
        flat: dict[str, float] = {"0:majority": majority_baseline(s[tr, 0], ss)}
        for name, attacker in suite.fitted.items():
            proba = attacker.predict_proba(zs)
            scores = score_predictions(ss, proba, attacker.classes_)
            scores["log_rank_privacy"] = log_rank_privacy_from_proba(proba, ss, attacker.classes_)
            flat.update({f"0:{name}:{k}": float(v) for k, v in scores.items()})
        results.append((site.name, site.rows, flat))
    sites[2].status, sites[2].error_type = "refused", "UnknownKeyError"
    sites[2].reason = "encode: UnknownKeyError: bundle signed by key 0123abcd, which is not trusted"
    sites[2].phases = {"discover": "ok", "encode": f"refused: {sites[2].reason[8:]}"}
    sites[2].active = False
    sites[3].rows, sites[3].phases = n, {"discover": "ok", "audit": "ok"}
    federated = combine_site_audits(["s"], results)

    # Downstream (release mode): a model trained on the pooled release, tested on held-out rows.
    z_rel = np.concatenate([c.z for c in contributions.values()])
    y_rel = np.concatenate([c.label for c in contributions.values()])
    z_test, y_test = encoder.encode_frame(parts["test"])
    model = LogisticRegression().fit(z_rel, y_rel)
    proba = model.predict_proba(z_test)[:, 1]
    downstream = {
        "mode": "release",
        "auc": float(roc_auc_score(y_test, proba)),
        "accuracy": float(accuracy_score(y_test, proba > 0.5)),
        "test_rows": int(len(y_test)),
        "train_rows": int(len(y_rel)),
    }

    config = RunConfig(
        num_sites=3,
        max_private_auc=threshold,
        seed=seed,
        attackers=",".join(ATTACKERS),
        mi_steps=mi_steps,
        out_dir=str(run_dir),
        run_id="report-test",
    )
    gate = decide_gate(threshold, central_summary(central), federated)
    release: dict[str, Any] = {
        "rows": int(len(y_rel)),
        "sites": len(contributions),
        "published": False,
    }
    if gate["passed"]:
        manifest = publish_release(
            run_dir,
            contributions,
            run_id="report-test",
            fingerprint=bundle.fingerprint,
            label_name="y",
        )
        release.update({"published": True, "dir": "release", "files": manifest["files"]})
    else:
        release["reason"] = gate["reason"]
    summary = {
        "run_id": "report-test",
        "status": "completed" if gate["passed"] else "gated",
        "config": config.to_dict(),
        "sites": [site.to_dict() for site in sites],
        "release": release,
        "downstream": downstream,
        "audit": {"central": central_summary(central), "federated": federated, "mi": metrics["mi"]},
        "gate": gate,
        "bundle": bundle_summary(bundle),
        "timings": {"encoder_s": 1.25, "distribute_s": 0.5, "total_s": 2.0},
        "reproduce": {
            "command": f"infoshape simulate --sites 3 --out {run_dir}",
            "versions": {"python": "3.11", "torch": "2.13.0"},
            "recorded_at": "2026-01-01T00:00:00Z",
        },
    }
    write_summary(run_dir, summary)
    release_frame = pd.DataFrame(z_rel, columns=[f"z_{j}" for j in range(z_rel.shape[1])])
    release_frame["y"] = y_rel
    return BuiltRun(run_dir, summary, encoder, parts["audit"], release_frame)
