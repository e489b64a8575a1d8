"""Log-rank privacy (paper 003, DPFE, §5, Definition 10).

Paper 003 relaxes the conditional entropy H(y|f) by ranking the conditional probabilities: the
r-th largest of numbers summing to one is at most 1/r, so

    H(y|f) >= E_{p(f,y)} log r  =: L_rank                                   (Eq. 8)

where r is the rank of p(y|f) among {p(y_j|f) : j = 1..c_y} sorted in descending order (rank 1 =
most probable). Dividing by log c_y gives Definition 10:

    LRP(y|f) = (1 / log c_y) * E_{p(f,y)} log r                             (Eq. 9)

(the paper's typeset ``log c_n`` is a typo for ``log c_y``, the number of sensitive classes, as the
text before it and the empirical estimator after it both say), estimated by the sample mean

    LRP^(y|f) = 1 / (N log c_y) * sum_i log rank(p(y_i|f_i), S_i),
    S_i = {p(y_j|f_i) : j = 1..c_y}.

What it measures: the expected (log) number of guesses an adversary who orders the classes by
p(y|f) needs before naming the true sensitive class — a soft k-anonymity / 20-questions reading.
**Larger is more private**: 0 means the true class is always ranked first (S fully readable); with
a p(y|f) that carries no information (ties broken at random) it is log(c_y!) / (c_y log c_y), e.g.
0.5 for two classes; 1 only if the true class were always ranked last (an adversary that is
systematically wrong, which an honest estimate of p(y|f) is not).

Ties: the paper's rank is undefined when probabilities tie. We use the expected log rank under a
uniformly random ordering of the tied classes (the 20-questions player guesses among equals at
random): a true class with ``a`` classes strictly above it and ``t`` classes (itself included) tied
with it contributes (1/t) * sum_{j=1..t} log(a + j). Without ties this is exactly log rank.

p(y|f) must be estimated. :func:`log_rank_privacy_from_proba` takes it as given (the exact
Eq. 9 estimator); :func:`log_rank_privacy` estimates it with the attacker suite on a held-out split
(reporting the smallest, i.e. most pessimistic, value over attackers, as for every privacy figure
in this toolkit) or, for discrete features, with plug-in frequencies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln

from shared.attacks.base import check_features, check_labels
from shared.errors import ConfigError, LabelError


def expected_log_ranks(proba: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Per row, log of the rank of column ``codes[i]`` in descending order (ties: expected value).

    ``proba`` is (n, c); ``codes`` holds column indices.
    """
    p = np.asarray(proba, dtype=np.float64)
    rows = np.arange(p.shape[0])
    own = p[rows, codes][:, None]
    above = np.sum(p > own, axis=1)
    tied = np.sum(p == own, axis=1)  # includes the true class itself
    # (1/t) * sum_{j=1..t} log(a + j) = (log Γ(a + t + 1) - log Γ(a + 1)) / t
    return (gammaln(above + tied + 1.0) - gammaln(above + 1.0)) / tied


def log_rank_privacy_from_proba(
    proba: np.ndarray,
    y: np.ndarray | Sequence[int],
    classes: np.ndarray | Sequence[int] | None = None,
) -> float:
    """Eq. 9 estimator: mean log rank of the true class's probability, over log c_y.

    Args:
        proba: estimated p(y_j | f_i), shape (n, c_y); column j belongs to ``classes[j]``.
        y: true sensitive labels, shape (n,).
        classes: labels of the columns; default ``0..c_y-1``. c_y = ``len(classes)``, so a class
            that exists but is absent from this sample still counts in the normaliser.

    Returns:
        A value in [0, 1]; larger is more private.
    """
    p = np.asarray(proba, dtype=np.float64)
    if p.ndim != 2:
        raise ConfigError(f"proba must be 2-D (n_rows, n_classes); got shape {p.shape}")
    labels = check_labels(y, p.shape[0], "y")
    cls = np.arange(p.shape[1]) if classes is None else np.asarray(classes)
    if cls.ndim != 1 or cls.size != p.shape[1]:
        raise ConfigError(f"classes must name each of the {p.shape[1]} proba columns")
    if cls.size < 2:
        raise LabelError("log-rank privacy needs at least two sensitive classes (log c_y > 0)")
    if np.unique(cls).size != cls.size:
        raise ConfigError(f"classes must be distinct; got {cls.tolist()}")
    if p.shape[0] == 0:
        raise LabelError("log-rank privacy needs at least one row")
    if not np.all(np.isfinite(p)):
        raise ConfigError("proba holds NaN or infinite values")
    order = np.argsort(cls)
    pos = np.searchsorted(cls[order], labels)
    pos = np.clip(pos, 0, cls.size - 1)
    codes = order[pos]
    if not np.all(cls[codes] == labels):
        unknown = np.setdiff1d(labels, cls).tolist()
        raise LabelError(f"y holds classes {unknown} with no proba column ({cls.tolist()})")
    return float(np.mean(expected_log_ranks(p, codes)) / np.log(cls.size))


def plugin_conditional_proba(
    Z: np.ndarray, y: np.ndarray | Sequence[int], classes: np.ndarray | Sequence[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Empirical p(y | f) for discrete features: class frequencies among rows with the same f.

    Returns (proba (n, c_y), classes). Only meaningful when rows repeat; on continuous features
    every row is its own group and the estimate degenerates to "always right" (LRP = 0).
    """
    X = check_features(Z)
    labels = check_labels(y, X.shape[0], "y")
    cls = np.unique(labels) if classes is None else np.asarray(classes)
    codes = np.searchsorted(cls, labels)
    if np.any(codes >= cls.size) or not np.all(cls[np.clip(codes, 0, cls.size - 1)] == labels):
        raise LabelError(f"y holds classes missing from classes={cls.tolist()}")
    _, group = np.unique(X, axis=0, return_inverse=True)
    group = group.ravel()
    counts = np.zeros((group.max() + 1, cls.size))
    np.add.at(counts, (group, codes), 1.0)
    proba = counts[group] / counts[group].sum(axis=1, keepdims=True)
    return proba, cls


def log_rank_privacy(
    Z: np.ndarray,
    s: np.ndarray | Sequence[int],
    *,
    Z_test: np.ndarray | None = None,
    s_test: np.ndarray | Sequence[int] | None = None,
    estimator: str = "attackers",
    attackers: list[str] | None = None,
    test_size: float = 0.3,
    seed: int = 0,
) -> float:
    """Log-rank privacy of sensitive labels ``s`` given features ``Z`` (paper 003, Def. 10, Eq. 9).

    Args:
        Z, s: features f (n, k) and sensitive labels y (n,).
        Z_test, s_test: rows to evaluate on. With ``estimator="attackers"`` and no test rows, a
            stratified ``test_size`` split of (Z, s) is held out, so p(y|f) is never scored on the
            rows it was fitted on (in-sample ranks would overstate leakage).
        estimator: ``"attackers"`` fits the attacker suite (``attackers``, default all) and
            returns the smallest LRP over attackers — the adversary's best ordering, i.e. the
            pessimistic figure. ``"plugin"`` uses class frequencies per distinct row of Z
            (discrete features only), evaluated in-sample on (Z, s) — exactly the empirical
            Eq. 9 with the empirical p(y|f).
        seed: seeds the split and the attackers.

    Returns:
        LRP in [0, 1]; larger is more private (0: S read perfectly; ≈ 0.5 for two classes that
        T(x) says nothing about).
    """
    if estimator == "plugin":
        if Z_test is not None or s_test is not None:
            raise ConfigError("estimator='plugin' is in-sample; do not pass Z_test / s_test")
        proba, cls = plugin_conditional_proba(Z, s)
        return log_rank_privacy_from_proba(proba, s, cls)
    if estimator != "attackers":
        raise ConfigError(f"estimator must be 'attackers' or 'plugin'; got {estimator!r}")

    from shared.attacks.suite import run_attack_suite, split_for_attack

    if (Z_test is None) != (s_test is None):
        raise ConfigError("pass both Z_test and s_test, or neither")
    if Z_test is None:
        Z, s, Z_test, s_test = split_for_attack(Z, s, test_size=test_size, seed=seed)
    result = run_attack_suite(Z, s, Z_test, s_test, attackers=attackers, seed=seed)
    return result.min_log_rank_privacy


__all__ = [
    "expected_log_ranks",
    "log_rank_privacy",
    "log_rank_privacy_from_proba",
    "plugin_conditional_proba",
]
