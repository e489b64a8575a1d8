"""The suite: strongest attacker next to the majority baseline, on readable and on noise data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shared.attacks import DEFAULT_ATTACKERS, run_attack_suite, score_utility
from shared.errors import ColumnError, ConfigError, LabelError


def _split(Z: np.ndarray, y: np.ndarray, n_train: int) -> tuple:
    return Z[:n_train], y[:n_train], Z[n_train:], y[n_train:]


def test_readable_sensitive_label_gives_auc_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, 1500)
    Z = np.column_stack([s + 0.05 * rng.normal(size=1500), rng.normal(size=(1500, 2))])
    res = run_attack_suite(*_split(Z, s, 1000), seed=seed)
    assert list(res.per_attacker) == list(DEFAULT_ATTACKERS)
    assert res.best_auc > 0.999
    assert res.best_accuracy > 0.99
    assert all(m["auc"] > 0.99 for m in res.per_attacker.values())
    assert res.min_log_rank_privacy < 0.01
    assert 0.4 < res.majority < 0.6


def test_independent_noise_gives_chance_and_majority(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = (rng.random(2000) < 0.7).astype(int)  # imbalanced: majority ≈ 0.7
    Z = rng.normal(size=(2000, 3))
    res = run_attack_suite(*_split(Z, s, 1400), seed=seed)
    assert res.best_auc == pytest.approx(0.5, abs=0.07)
    assert res.best_accuracy <= res.majority + 0.03
    assert res.majority == pytest.approx(0.7, abs=0.05)
    assert res.min_log_rank_privacy > 0.3


def test_multiclass_any_labels_and_json(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = np.array([-1, 4, 9])
    codes = rng.integers(0, 3, 1200)
    Z = 3.0 * np.eye(3)[codes] + rng.normal(size=(1200, 3))
    res = run_attack_suite(*_split(Z, labels[codes], 900), seed=seed)
    assert res.classes == [-1, 4, 9]
    assert res.best_auc > 0.95
    d = json.loads(json.dumps(res.to_dict()))
    assert "fitted" not in d and set(res.fitted) == set(DEFAULT_ATTACKERS)
    assert d["best_attacker"] in DEFAULT_ATTACKERS and d["n_train"] == 900 and d["n_test"] == 300
    for key in ("auc", "accuracy", "balanced_accuracy"):
        assert d[f"best_{key}"] == max(m[key] for m in d["per_attacker"].values())
    assert d["per_attacker"][d["best_attacker"]]["auc"] == d["best_auc"]


def test_same_seed_same_result_and_utility_alias(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 800)
    Z = np.column_stack([y + rng.normal(size=800), rng.normal(size=800)])
    names = ["gradient-boosting", "mlp"]

    def strip(d: dict) -> dict:
        d.pop("seconds")
        for m in d["per_attacker"].values():
            m.pop("fit_seconds")
        return d

    a = strip(run_attack_suite(*_split(Z, y, 600), attackers=names, seed=seed).to_dict())
    b = strip(score_utility(*_split(Z, y, 600), attackers=names, seed=seed).to_dict())
    assert a == b


def test_test_class_missing_from_train_is_scored(seed: int) -> None:
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(400, 2))
    y_train = (Z[:300, 0] > 0).astype(int)
    y_test = np.where(Z[300:, 0] > 0, 1, 0)
    y_test[:5] = 2  # a class the attackers never saw
    res = run_attack_suite(Z[:300], y_train, Z[300:], y_test, attackers=["knn"], seed=seed)
    assert res.classes == [0, 1, 2]
    assert 0.5 < res.best_auc <= 1.0


def test_unknown_attacker_lists_valid_names_before_fitting() -> None:
    Z = np.zeros((10, 2))
    y = np.array([0, 1] * 5)
    with pytest.raises(ConfigError, match="'svm'.*valid names: gradient-boosting, knn"):
        run_attack_suite(Z, y, Z, y, attackers=["knn", "svm"])
    with pytest.raises(ConfigError, match="at least one"):
        run_attack_suite(Z, y, Z, y, attackers=[])


def test_input_errors() -> None:
    Z = np.random.default_rng(0).normal(size=(20, 2))
    y = np.array([0, 1] * 10)
    with pytest.raises(ColumnError, match="same encoder"):
        run_attack_suite(Z, y, Z[:, :1], y, attackers=["knn"])
    with pytest.raises(LabelError, match="single class"):
        run_attack_suite(Z, np.zeros(20, dtype=int), Z, y, attackers=["knn"])
