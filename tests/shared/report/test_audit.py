"""``audit_bundle``: the encoder next to raw, noise and random baselines, same attackers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from shared.bundle import generate_keypair
from shared.data import TableSpec, load_dataset, split_frame
from shared.errors import ColumnError, ConfigError, UnknownKeyError
from shared.pipeline import FittedShaper, bundle_from_fitted, encoder_from_fitted, fit_shaper
from shared.report import SETTINGS, audit_bundle
from shared.report.audit import roc_points

ATTACKERS = ["logistic-regression", "knn"]


@pytest.fixture(scope="module")
def parts() -> dict[str, pd.DataFrame]:
    data = load_dataset("paper-synthetic", seed=3)
    frame = data.frame.sample(n=1500, random_state=3)
    return split_frame(frame, {"public": 0.4, "audit": 0.4, "site": 0.2}, seed=3, stratify="s")


@pytest.fixture(scope="module")
def spec() -> TableSpec:
    return load_dataset("paper-synthetic", seed=3).spec


@pytest.fixture(scope="module")
def fitted(parts: dict[str, pd.DataFrame], spec: TableSpec) -> FittedShaper:
    # A random encoder is fitted instantly and is a legitimate thing to audit (it leaks).
    return fit_shaper(parts["public"], spec, shaper="random-encoder", seed=3)


@pytest.fixture(scope="module")
def audit(fitted: FittedShaper, parts: dict[str, pd.DataFrame]) -> dict[str, Any]:
    encoder = encoder_from_fitted(fitted)
    z, y = encoder.encode_frame(parts["site"])
    release = pd.DataFrame(z, columns=[f"z_{j}" for j in range(z.shape[1])]).assign(y=y)
    return audit_bundle(
        fitted, parts["audit"], release_frame=release, attackers=ATTACKERS, mi_steps=40, seed=3
    )


def test_every_setting_is_measured_the_same_way(audit: dict[str, Any]) -> None:
    assert list(audit["settings"]) == list(SETTINGS)
    assert audit["rows"] == {"total": 600, "train": 420, "holdout": 180}
    for name, entry in audit["settings"].items():
        suite = entry["privacy"]["s"]
        assert sorted(suite["per_attacker"]) == sorted(ATTACKERS), name
        assert suite["n_train"] == 420 and suite["n_test"] == 180
        assert entry["utility"]["n_test"] == 180
        assert set(entry["mi"]) == {"public", "sensitive"}
        head = audit["headline"][name]
        assert head["best_auc"] == suite["best_auc"] and head["sensitive"] == "s"
    assert audit["settings"]["raw"]["n_components"] == 10
    assert audit["settings"]["encoder"]["n_components"] == 3
    assert audit["reference"]["public"] == audit["settings"]["raw"]["mi"]["public"]
    json.dumps(audit, allow_nan=False)


def test_raw_data_leaks_so_the_attackers_see(audit: dict[str, Any]) -> None:
    raw = audit["headline"]["raw"]
    assert raw["best_auc"] >= 0.8, raw
    assert raw["utility_auc"] >= 0.85, raw


def test_roc_curves_match_the_reported_auc(audit: dict[str, Any]) -> None:
    for name, entry in audit["settings"].items():
        for curve, suite in (
            (entry["roc"]["public"], entry["utility"]),
            (entry["roc"]["sensitive"]["s"], entry["privacy"]["s"]),
        ):
            assert curve["attacker"] == suite["best_attacker"]
            fpr, tpr = np.asarray(curve["fpr"]), np.asarray(curve["tpr"])
            assert fpr[0] == 0.0 and fpr[-1] == 1.0 and np.all(np.diff(tpr) >= -1e-9)
            area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
            assert area == pytest.approx(suite["best_auc"], abs=0.01), name


def test_release_table_gives_the_adversary_view(audit: dict[str, Any]) -> None:
    release = audit["release"]
    assert release["kind"] == "release" and release["rows"] == 300
    column = release["columns"]["s"]
    assert 0.5 <= column["mean_top_probability"] <= 1.0
    assert sum(column["predicted_share"].values()) == pytest.approx(1.0)
    assert release["utility"]["n_train"] == 300 and release["utility"]["best_auc"] > 0.6


def test_site_table_scores_the_attackers_on_its_own_s(
    fitted: FittedShaper, parts: dict[str, pd.DataFrame]
) -> None:
    out = audit_bundle(
        fitted,
        parts["audit"],
        release_frame=parts["site"],
        attackers=["logistic-regression"],
        mi_steps=0,
        settings=("encoder",),
    )
    assert list(out["settings"]) == ["encoder"]
    assert out["settings"]["encoder"]["mi"] is None and out["reference"] is None
    site = out["release"]["columns"]["s"]
    assert out["release"]["kind"] == "site" and out["release"]["rows"] == 300
    assert 0.5 <= site["best_auc"] <= 1.0 and 0.3 <= site["majority"] <= 0.7


def test_a_release_holding_s_is_refused(
    fitted: FittedShaper, parts: dict[str, pd.DataFrame]
) -> None:
    encoder = encoder_from_fitted(fitted)
    z, y = encoder.encode_frame(parts["site"])
    bad = pd.DataFrame(z, columns=["z_0", "z_1", "z_2"]).assign(y=y, s=0)
    with pytest.raises(ConfigError, match="must not hold"):
        audit_bundle(
            fitted,
            parts["audit"],
            release_frame=bad,
            attackers=["knn"],
            mi_steps=0,
            settings=("encoder",),
        )


def test_same_seed_same_audit(fitted: FittedShaper, parts: dict[str, pd.DataFrame]) -> None:
    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if "seconds" not in k}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    kwargs: dict[str, Any] = {"attackers": ["logistic-regression"], "mi_steps": 0, "seed": 5}
    a = audit_bundle(fitted, parts["audit"], **kwargs)
    b = audit_bundle(fitted, parts["audit"], **kwargs)
    assert strip(a) == strip(b)


def test_bundle_paths_are_verified_first(
    tmp_path: Path, fitted: FittedShaper, parts: dict[str, pd.DataFrame]
) -> None:
    keys = generate_keypair(tmp_path / "keys")
    other = generate_keypair(tmp_path / "other")
    bundle_from_fitted(fitted).save(tmp_path / "bundle", keys.private)
    with pytest.raises(ConfigError, match="trusted_keys"):
        audit_bundle(tmp_path / "bundle", parts["audit"])
    with pytest.raises(UnknownKeyError):
        audit_bundle(tmp_path / "bundle", parts["audit"], trusted_keys=other.public)
    out = audit_bundle(
        tmp_path / "bundle",
        parts["audit"],
        trusted_keys=keys.public,
        attackers=["logistic-regression"],
        mi_steps=0,
        settings=("encoder",),
    )
    assert out["encoder"]["fingerprint"] and out["encoder"]["shaper"] == "random-encoder"


def test_bad_inputs_are_named(fitted: FittedShaper, parts: dict[str, pd.DataFrame]) -> None:
    with pytest.raises(ConfigError, match="settings"):
        audit_bundle(fitted, parts["audit"], settings=("raw", "pixelate"))
    with pytest.raises(ConfigError, match="sigma"):
        audit_bundle(fitted, parts["audit"], sigma=-1.0)
    with pytest.raises(ConfigError, match="bundle_or_encoder"):
        audit_bundle(42, parts["audit"])  # type: ignore[arg-type]
    with pytest.raises(ColumnError):
        audit_bundle(fitted, parts["audit"].drop(columns=["s"]), mi_steps=0)


def test_roc_points_binary_multiclass_and_degenerate() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    p1 = np.clip(0.3 * y + rng.uniform(0, 0.7, 400), 0, 1)
    proba = np.column_stack([1 - p1, p1])
    curve = roc_points(y, proba, np.array([0, 1]))
    assert curve is not None
    fpr, tpr = np.asarray(curve["fpr"]), np.asarray(curve["tpr"])
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert area == pytest.approx(roc_auc_score(y, p1), abs=0.01)

    y3 = rng.integers(0, 3, 300)
    proba3 = rng.dirichlet(np.ones(3), 300)
    curve3 = roc_points(y3, proba3, np.array([0, 1, 2]))
    assert curve3 is not None and len(curve3["fpr"]) == 201

    assert roc_points(np.zeros(10, dtype=int), proba[:10], np.array([0, 1])) is None
