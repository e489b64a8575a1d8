"""The attacker suite: every attacker on the same split, reported as the strongest of them.

The threat model's adversary knows T and holds public samples with S, so it picks whichever
attacker reads S best. A privacy figure is therefore the *maximum* over a suite of diverse
attackers, always shown next to the majority-class baseline (what the adversary gets without the
release). The same suite on the public label L measures utility (:func:`score_utility`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.model_selection import train_test_split

from shared.attacks import models as _models  # noqa: F401  (registers the attackers)
from shared.attacks.base import ATTACKERS, Attacker, check_features, check_labels, expand_proba
from shared.attacks.logrank import log_rank_privacy_from_proba
from shared.attacks.metrics import majority_baseline, score_predictions
from shared.errors import ColumnError, ConfigError, LabelError
from shared.jsonsafe import json_safe as _json_safe

#: The default suite, in reporting order (ties for "best" go to the earlier name).
DEFAULT_ATTACKERS: tuple[str, ...] = ("logistic-regression", "gradient-boosting", "mlp", "knn")


@dataclass
class SuiteResult:
    """What one suite run measured.

    Attributes:
        per_attacker: name → ``{auc, accuracy, balanced_accuracy, log_rank_privacy, fit_seconds,
            params, search}`` on the test rows.
        best_attacker: the attacker with the highest AUC (the headline attacker).
        best_auc, best_accuracy, best_balanced_accuracy: each the **maximum of that metric over
            attackers**, taken separately — the strongest value any attacker reached, so the best
            accuracy may come from a different attacker than the best AUC. This is the
            adversary's view: it picks whichever tool serves the metric at hand. Picking the
            maximum on the same test rows it is reported on leans slightly towards the adversary
            (on pure noise with 2,000 test rows expect ≈ 0.51-0.52 rather than 0.50), which is
            the conservative side for a privacy figure.
        majority: accuracy of predicting the training majority class on the test rows; compare
            ``best_accuracy`` against it (leakage is the margin above it, not the accuracy itself).
        min_log_rank_privacy: the smallest log-rank privacy over attackers (paper 003, Def. 10;
            larger is more private, so the minimum is the strongest attacker's figure).
        n_train, n_test: rows used. classes: the labels scored (union of train and test).
        seconds: wall time of the whole suite.
        fitted: the fitted attackers (kept out of :meth:`to_dict`; e.g. for export to sites).
    """

    per_attacker: dict[str, dict[str, Any]]
    best_attacker: str
    best_auc: float
    best_accuracy: float
    best_balanced_accuracy: float
    majority: float
    n_train: int
    n_test: int
    classes: list[Any] = field(default_factory=list)
    min_log_rank_privacy: float = float("nan")
    seconds: float = 0.0
    fitted: dict[str, Attacker] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary (NaN → None); the fitted models are left out."""
        return _json_safe(
            {
                "best_attacker": self.best_attacker,
                "best_auc": self.best_auc,
                "best_accuracy": self.best_accuracy,
                "best_balanced_accuracy": self.best_balanced_accuracy,
                "majority": self.majority,
                "min_log_rank_privacy": self.min_log_rank_privacy,
                "n_train": self.n_train,
                "n_test": self.n_test,
                "classes": list(self.classes),
                "seconds": self.seconds,
                "per_attacker": self.per_attacker,
            }
        )


def _resolve(attackers: list[str] | None) -> list[str]:
    names = list(DEFAULT_ATTACKERS) if attackers is None else list(dict.fromkeys(attackers))
    if not names:
        raise ConfigError(
            f"attackers must name at least one attacker; valid names: {', '.join(ATTACKERS)}"
        )
    for name in names:
        ATTACKERS.get(name)  # raises ConfigError listing the valid names
    return names


def _nanmax(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return max(finite) if finite else float("nan")


def run_attack_suite(
    Z_train: np.ndarray,
    y_train: np.ndarray,
    Z_test: np.ndarray,
    y_test: np.ndarray,
    *,
    attackers: list[str] | None = None,
    seed: int = 0,
    n_jobs: int = 1,
) -> SuiteResult:
    """Fit each attacker on (Z_train, y_train), score it on (Z_test, y_test).

    Args:
        Z_train, Z_test: features (n, k) — for a privacy audit, T(P_audit) and a disjoint holdout.
        y_train, y_test: one label column (n,); binary or multi-class, any integer labels. For
            several sensitive columns run the suite once per column.
        attackers: registered names; default all of :data:`DEFAULT_ATTACKERS`. An unknown name
            raises ConfigError listing the valid ones (before anything is fitted).
        seed: seeds every attacker's search and training (same seed → same result).
        n_jobs: CPU threads per attacker (1 or 2; see :mod:`shared.attacks.base` for why 1 is
            the default).

    Returns:
        :class:`SuiteResult`; its headline is ``best_auc`` (strongest attacker) next to
        ``majority``.
    """
    start = time.perf_counter()
    names = _resolve(attackers)
    Xtr = check_features(Z_train, "Z_train")
    Xte = check_features(Z_test, "Z_test")
    if Xtr.shape[1] != Xte.shape[1]:
        raise ColumnError(
            f"Z_train has {Xtr.shape[1]} feature(s) but Z_test has {Xte.shape[1]}; "
            "both must come from the same encoder"
        )
    ytr = check_labels(y_train, Xtr.shape[0], "y_train")
    yte = check_labels(y_test, Xte.shape[0], "y_test")
    if np.unique(ytr).size < 2:
        raise LabelError(
            f"y_train has a single class ({np.unique(ytr).tolist()}); an attacker needs two"
        )
    classes = np.union1d(ytr, yte)
    train_codes = np.searchsorted(classes, np.unique(ytr))

    per: dict[str, dict[str, Any]] = {}
    fitted: dict[str, Attacker] = {}
    for name in names:
        att = ATTACKERS.create(name, seed=seed, n_jobs=n_jobs).fit(Xtr, ytr)
        proba = expand_proba(att.predict_proba(Xte), train_codes, classes.size)
        scores = score_predictions(yte, proba, classes)
        per[name] = {
            **scores,
            "log_rank_privacy": log_rank_privacy_from_proba(proba, yte, classes),
            "fit_seconds": float(att.fit_seconds_),
            "params": _json_safe(dict(att.params_)),
            "search": _json_safe(att.search_),
        }
        fitted[name] = att

    aucs = [per[n]["auc"] for n in names]
    if all(math.isnan(a) for a in aucs):  # test rows hold a single class: rank by accuracy
        best = max(names, key=lambda n: per[n]["accuracy"])
    else:
        best = max(names, key=lambda n: -math.inf if math.isnan(per[n]["auc"]) else per[n]["auc"])
    return SuiteResult(
        per_attacker=per,
        best_attacker=best,
        best_auc=_nanmax(aucs),
        best_accuracy=max(per[n]["accuracy"] for n in names),
        best_balanced_accuracy=max(per[n]["balanced_accuracy"] for n in names),
        majority=majority_baseline(ytr, yte),
        n_train=int(Xtr.shape[0]),
        n_test=int(Xte.shape[0]),
        classes=classes.tolist(),
        min_log_rank_privacy=min(per[n]["log_rank_privacy"] for n in names),
        seconds=time.perf_counter() - start,
        fitted=fitted,
    )


def score_utility(
    Z_train: np.ndarray,
    y_train: np.ndarray,
    Z_test: np.ndarray,
    y_test: np.ndarray,
    *,
    attackers: list[str] | None = None,
    seed: int = 0,
    n_jobs: int = 1,
) -> SuiteResult:
    """The same suite on the public label L: how much task information the release keeps.

    Identical to :func:`run_attack_suite`; the name says the intent (here a high ``best_auc`` is
    the goal, not the risk). ``min_log_rank_privacy`` has no utility meaning and can be ignored.
    """
    return run_attack_suite(
        Z_train, y_train, Z_test, y_test, attackers=attackers, seed=seed, n_jobs=n_jobs
    )


def split_for_attack(
    Z: np.ndarray, y: np.ndarray, *, test_size: float = 0.3, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Z_train, y_train, Z_test, y_test): a seeded split, stratified when every class allows."""
    X = check_features(Z)
    labels = check_labels(y, X.shape[0])
    if not 0.0 < test_size < 1.0:
        raise ConfigError(f"test_size must lie strictly between 0 and 1; got {test_size}")
    counts = np.unique(labels, return_counts=True)[1]
    stratify = labels if counts.min() >= 2 else None
    try:
        Ztr, Zte, ytr, yte = train_test_split(
            X, labels, test_size=test_size, stratify=stratify, random_state=seed
        )
    except ValueError as exc:  # e.g. too few rows for the requested split
        raise ConfigError(f"cannot split {X.shape[0]} rows for an attack: {exc}") from None
    return Ztr, ytr, Zte, yte


__all__ = [
    "DEFAULT_ATTACKERS",
    "SuiteResult",
    "run_attack_suite",
    "score_utility",
    "split_for_attack",
]
