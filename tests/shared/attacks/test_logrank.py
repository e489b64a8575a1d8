"""Log-rank privacy (paper 003, Def. 10 / Eq. 9) against cases worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.attacks.logrank import (
    expected_log_ranks,
    log_rank_privacy,
    log_rank_privacy_from_proba,
    plugin_conditional_proba,
)
from shared.errors import ConfigError, LabelError


def test_binary_hand_case() -> None:
    # Ranks of the true class: 1, 2, 2 → (log 1 + log 2 + log 2) / (3 log 2) = 2/3.
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]])
    assert log_rank_privacy_from_proba(proba, [0, 0, 1]) == pytest.approx(2 / 3)


def test_three_class_hand_case() -> None:
    # Row ranks of the true class: 3 (0.2 of [0.5, 0.3, 0.2]), 2, 1.
    proba = np.array([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    expected = (math.log(3) + math.log(2) + 0.0) / (3 * math.log(3))
    assert log_rank_privacy_from_proba(proba, [2, 1, 2]) == pytest.approx(expected)


def test_perfect_knowledge_is_zero_and_always_last_is_one() -> None:
    proba = np.eye(4)[[0, 1, 2, 3, 0]]
    assert log_rank_privacy_from_proba(proba, [0, 1, 2, 3, 0]) == 0.0
    worst = np.array([[0.6, 0.4], [0.1, 0.9]])
    assert log_rank_privacy_from_proba(worst, [1, 0]) == pytest.approx(1.0)


def test_ties_use_expected_log_rank() -> None:
    # Two classes tied: rank 1 or 2 with equal chance → (log 1 + log 2) / 2 / log 2 = 0.5.
    assert log_rank_privacy_from_proba([[0.5, 0.5]], [0]) == pytest.approx(0.5)
    # [0.4, 0.3, 0.3], true class 1: one class above, tied with one → (log 2 + log 3) / 2.
    assert expected_log_ranks(np.array([[0.4, 0.3, 0.3]]), np.array([1]))[0] == pytest.approx(
        (math.log(2) + math.log(3)) / 2
    )


@pytest.mark.parametrize("c", [2, 3, 4, 10])
def test_uninformative_posterior_gives_log_factorial_formula(c: int) -> None:
    proba = np.full((c, c), 1.0 / c)
    expected = math.lgamma(c + 1) / (c * math.log(c))  # log(c!) / (c log c)
    assert log_rank_privacy_from_proba(proba, np.arange(c)) == pytest.approx(expected)


def test_classes_name_the_columns() -> None:
    # Columns belong to labels 10 and 5; true labels 5, 10 → ranks 1, 2 → 1/2.
    proba = np.array([[0.2, 0.8], [0.3, 0.7]])
    assert log_rank_privacy_from_proba(proba, [5, 10], classes=[10, 5]) == pytest.approx(0.5)
    # A third, unobserved class still counts in log c_y.
    proba3 = np.array([[0.2, 0.8, 0.0], [0.3, 0.7, 0.0]])
    got = log_rank_privacy_from_proba(proba3, [5, 10], classes=[10, 5, 99])
    assert got == pytest.approx(math.log(2) / (2 * math.log(3)))


def test_plugin_estimator_hand_case() -> None:
    # f = 0: s = 0, 0, 1 → p(0|f) = 2/3; f = 1: s = 1, 1, 0 → p(1|f) = 2/3.
    # Four rows rank their class first, two rank it second → 2 log 2 / (6 log 2) = 1/3.
    Z = np.array([[0.0], [0.0], [0.0], [1.0], [1.0], [1.0]])
    s = np.array([0, 0, 1, 1, 1, 0])
    proba, classes = plugin_conditional_proba(Z, s)
    assert classes.tolist() == [0, 1]
    np.testing.assert_allclose(proba[0], [2 / 3, 1 / 3])
    np.testing.assert_allclose(proba[3], [1 / 3, 2 / 3])
    assert log_rank_privacy(Z, s, estimator="plugin") == pytest.approx(1 / 3)


def test_attacker_estimate_reads_separable_and_noise(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, 800)
    readable = np.column_stack([s + 0.05 * rng.normal(size=800), rng.normal(size=800)])
    noise = rng.normal(size=(800, 2))
    lr = ["logistic-regression"]
    assert log_rank_privacy(readable, s, attackers=lr, seed=seed) < 0.02
    assert log_rank_privacy(noise, s, attackers=lr, seed=seed) == pytest.approx(0.5, abs=0.1)


def test_errors() -> None:
    with pytest.raises(LabelError):
        log_rank_privacy_from_proba([[1.0]], [0])
    with pytest.raises(LabelError, match=r"\[7\]"):
        log_rank_privacy_from_proba([[0.5, 0.5]], [7])
    with pytest.raises(ConfigError):
        log_rank_privacy(np.zeros((4, 1)), [0, 1, 0, 1], estimator="entropy")
    with pytest.raises(ConfigError):
        log_rank_privacy(np.zeros((4, 1)), [0, 1, 0, 1], Z_test=np.zeros((2, 1)))
