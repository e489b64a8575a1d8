"""Privacy and utility metrics for attacker predictions.

One scoring function serves both sides of the trade-off: on the sensitive label S a high score is
leakage, on the public label L it is utility. Scores are computed per class and averaged over the
classes that are actually present in ``y_true`` so that a holdout missing a rare class still gets a
defined score (the absent class has no positives to rank and is skipped rather than crashing).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.metrics import roc_auc_score

from shared.errors import ConfigError, LabelError


def _as_labels(y: np.ndarray | Sequence[int], what: str) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ConfigError(f"{what} must be 1-D (one label per row); got shape {arr.shape}")
    if arr.size == 0:
        raise LabelError(f"{what} is empty; at least one row is needed to score")
    return arr


def score_predictions(
    y_true: np.ndarray | Sequence[int],
    proba: np.ndarray,
    classes: np.ndarray | Sequence[int],
) -> dict[str, float]:
    """Score class probabilities against true labels.

    Args:
        y_true: labels, shape (n,); every value must be one of ``classes``.
        proba: scores, shape (n, len(classes)); column j belongs to ``classes[j]``.
        classes: the label of each column of ``proba``.

    Returns:
        ``{"auc", "accuracy", "balanced_accuracy"}`` as floats.

        - ``auc``: binary ROC-AUC when ``proba`` has two columns, else one-vs-rest macro AUC. In
          both cases it is the mean of the one-vs-rest AUCs of the classes present in ``y_true``
          (for two columns both one-vs-rest AUCs equal the usual binary AUC). Classes absent from
          ``y_true`` are skipped; with fewer than two classes present the AUC is undefined and
          reported as NaN.
        - ``accuracy``: the arg-max prediction against ``y_true``.
        - ``balanced_accuracy``: mean recall over the classes present in ``y_true``.
    """
    y = _as_labels(y_true, "y_true")
    cls = np.asarray(classes)
    p = np.asarray(proba, dtype=np.float64)
    if p.ndim != 2 or p.shape != (y.shape[0], cls.shape[0]):
        raise ConfigError(
            f"proba must have shape (n_rows, n_classes) = ({y.shape[0]}, {cls.shape[0]}); "
            f"got {p.shape}"
        )
    if np.unique(cls).size != cls.size:
        raise ConfigError(f"classes must be distinct; got {cls.tolist()}")
    unknown = np.setdiff1d(np.unique(y), cls)
    if unknown.size:
        raise LabelError(
            f"y_true holds classes {unknown.tolist()} that have no probability column "
            f"(columns: {cls.tolist()}); score with the union of train and test classes"
        )

    pred = cls[np.argmax(p, axis=1)]
    accuracy = float(np.mean(pred == y))
    present = [j for j, c in enumerate(cls) if np.any(y == c)]
    recalls = [float(np.mean(pred[y == cls[j]] == cls[j])) for j in present]
    balanced = float(np.mean(recalls))

    if len(present) < 2:
        auc = float("nan")
    else:
        auc = float(np.mean([roc_auc_score(y == cls[j], p[:, j]) for j in present]))
    return {"auc": auc, "accuracy": accuracy, "balanced_accuracy": balanced}


def majority_class(y_train: np.ndarray | Sequence[int]) -> int:
    """The most frequent training class (ties broken towards the smallest label)."""
    values, counts = np.unique(_as_labels(y_train, "y_train"), return_counts=True)
    return values[int(np.argmax(counts))].item()


def majority_baseline(
    y_train: np.ndarray | Sequence[int], y_test: np.ndarray | Sequence[int]
) -> float:
    """Accuracy on ``y_test`` of always predicting the training majority class.

    This is what an adversary achieves with no access to the release at all, so attacker accuracy
    is only leakage to the extent it exceeds this number.
    """
    y = _as_labels(y_test, "y_test")
    return float(np.mean(y == majority_class(y_train)))


__all__ = ["majority_baseline", "majority_class", "score_predictions"]
