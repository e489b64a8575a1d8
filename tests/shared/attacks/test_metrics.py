"""Scoring: agrees with scikit-learn where both are defined, stays defined where it is not."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from shared.attacks.metrics import majority_baseline, majority_class, score_predictions
from shared.errors import ConfigError, LabelError


def test_binary_matches_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 300)
    p1 = np.clip(0.3 * y + rng.random(300) * 0.7, 0, 1)
    proba = np.column_stack([1 - p1, p1])
    out = score_predictions(y, proba, [0, 1])
    assert out["auc"] == pytest.approx(roc_auc_score(y, p1))
    assert out["accuracy"] == pytest.approx(np.mean((p1 > 0.5) == y))
    assert out["balanced_accuracy"] == pytest.approx(
        balanced_accuracy_score(y, (p1 > 0.5).astype(int))
    )


def test_multiclass_is_ovr_macro_with_arbitrary_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    classes = np.array([-3, 7, 42])
    codes = rng.integers(0, 3, 400)
    y = classes[codes]
    logits = rng.normal(size=(400, 3)) + 1.5 * np.eye(3)[codes]
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    out = score_predictions(y, proba, classes)
    expected = roc_auc_score(codes, proba, multi_class="ovr", average="macro")
    assert out["auc"] == pytest.approx(expected)
    assert out["balanced_accuracy"] == pytest.approx(
        balanced_accuracy_score(codes, proba.argmax(axis=1))
    )


def test_class_absent_from_y_true_is_skipped() -> None:
    y = np.array([0, 0, 1, 1])
    proba = np.array(
        [[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.3, 0.6, 0.1]]
    )  # class 2 never occurs
    out = score_predictions(y, proba, [0, 1, 2])
    assert out["auc"] == pytest.approx(1.0)
    assert out["accuracy"] == 1.0
    assert out["balanced_accuracy"] == 1.0


def test_single_class_present_gives_nan_auc_but_accuracy() -> None:
    out = score_predictions([1, 1, 1], [[0.2, 0.8], [0.6, 0.4], [0.1, 0.9]], [0, 1])
    assert math.isnan(out["auc"])
    assert out["accuracy"] == pytest.approx(2 / 3)
    assert out["balanced_accuracy"] == pytest.approx(2 / 3)


def test_unknown_label_and_bad_shape_are_clear_errors() -> None:
    with pytest.raises(LabelError, match=r"\[5\]"):
        score_predictions([0, 5], [[0.5, 0.5], [0.5, 0.5]], [0, 1])
    with pytest.raises(ConfigError, match="shape"):
        score_predictions([0, 1], [[0.5, 0.5]], [0, 1])
    with pytest.raises(ConfigError, match="distinct"):
        score_predictions([0, 1], [[0.5, 0.5], [0.5, 0.5]], [1, 1])


def test_majority_baseline() -> None:
    assert majority_baseline([0, 1, 1, 1], [1, 0, 1, 0]) == 0.5
    assert majority_baseline([2, 2, 5], [5, 5, 5, 2]) == 0.25
    assert majority_class([3, 3, 1, 1]) == 1  # ties go to the smallest label
    with pytest.raises(LabelError):
        majority_baseline([], [1])
