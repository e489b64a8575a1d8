"""The attacker interface and the search loop every attacker shares.

An attacker plays the adversary of the threat model: it sees encodings T(x) of public samples
together with their sensitive label S and learns to read S from T(x). A privacy number is only as
honest as the attacker behind it (a weak attacker overstates privacy), so every attacker here

- standardises its inputs (a scaler is part of the attacker, fitted on its training rows),
- runs a small hyper-parameter search on an internal, stratified validation split and keeps the
  candidate with the best validation AUC, then refits that candidate on all training rows,
- subsamples the rows used for the search on large inputs (the refit still sees every row),
- is deterministic for a seed (and thread count) and uses at most ``n_jobs`` ≤ 2 CPU cores (BLAS
  and OpenMP pools are capped with threadpoolctl while it fits and predicts). The default is one
  core: attackers often run beside other work (Flower simulates clients concurrently), and
  OpenMP/BLAS threads on oversubscribed cores run an order of magnitude *slower*, not faster.
  Pass ``n_jobs=2`` on an otherwise idle machine.

Labels may be any integers (binary or multi-class); columns of :meth:`Attacker.predict_proba`
follow ``classes_`` (the sorted distinct training labels).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Self

import numpy as np
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

from shared.attacks.metrics import score_predictions
from shared.errors import (
    ColumnError,
    ConfigError,
    LabelError,
    NotFittedError,
    ValueRangeError,
)
from shared.registry import Registry

#: Format tag written into exported attacker configs; bumped if the array layout changes.
WEIGHTS_FORMAT = "infoshape-attacker/1"


def check_features(Z: object, what: str = "Z") -> np.ndarray:
    """``Z`` as a finite float64 matrix (n_rows, n_features), or a clear error."""
    try:
        arr = np.asarray(Z, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueRangeError(f"{what} must be numeric; could not convert it: {exc}") from None
    if arr.ndim != 2:
        raise ConfigError(
            f"{what} must be 2-D (n_rows, n_features); got shape {arr.shape} "
            "(reshape a single feature with Z.reshape(-1, 1))"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueRangeError(f"{what} is empty (shape {arr.shape}); need rows and features")
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise ValueRangeError(f"{what} holds {bad} NaN or infinite value(s); clean them first")
    return arr


def check_labels(y: object, n_rows: int, what: str = "y") -> np.ndarray:
    """``y`` as a 1-D label array of length ``n_rows``, or a clear error."""
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ConfigError(
            f"{what} must be 1-D (one label per row); got shape {arr.shape}. "
            "Attack several sensitive columns one at a time."
        )
    if arr.shape[0] != n_rows:
        raise ConfigError(f"{what} has {arr.shape[0]} rows but the features have {n_rows}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise LabelError(f"{what} must hold integer class labels; got non-integer floats")
        arr = arr.astype(np.int64)
    return arr


def expand_proba(proba: np.ndarray, seen: np.ndarray, n_classes: int) -> np.ndarray:
    """Place columns for the class codes ``seen`` into an (n, n_classes) matrix (zeros elsewhere).

    A search split may miss a rare class; its candidate then scores it with probability 0.
    """
    if proba.shape[1] == n_classes and np.array_equal(seen, np.arange(n_classes)):
        return proba
    out = np.zeros((proba.shape[0], n_classes), dtype=np.float64)
    out[:, np.asarray(seen, dtype=np.int64)] = proba
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, shifted for numerical stability."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


class Attacker:
    """Base class: ``fit(Z, y) -> self``, ``predict_proba(Z) -> (n, n_classes)``.

    Subclasses describe their search with :meth:`_candidates`, train one candidate with
    :meth:`_fit_candidate` (which may use the validation split for early stopping and returns the
    parameters its refit should use, e.g. the number of boosting rounds it reached) and the final
    model with :meth:`_fit_final`; :meth:`_proba` turns scaled inputs into probabilities.

    Learned attributes end in ``_``: ``classes_``, ``n_features_in_``, ``mean_``, ``scale_``,
    ``params_`` (the chosen candidate, after early stopping), ``search_`` (every candidate with its
    validation AUC), ``model_``, ``fit_seconds_``.
    """

    name: ClassVar[str] = "attacker"
    #: True when :meth:`export_weights` can ship this attacker as plain arrays + JSON.
    exportable: ClassVar[bool] = False
    #: Below this many training rows the search is skipped and the first candidate is used.
    min_search_rows: ClassVar[int] = 40

    def __init__(
        self,
        *,
        seed: int = 0,
        n_jobs: int = 1,
        validation_fraction: float = 0.25,
        max_search_rows: int = 10_000,
    ) -> None:
        if not 1 <= int(n_jobs) <= 2:
            raise ConfigError(f"n_jobs must be 1 or 2 (attackers stay on two cores); got {n_jobs}")
        if not 0.05 <= validation_fraction <= 0.5:
            raise ConfigError(
                f"validation_fraction must lie in [0.05, 0.5]; got {validation_fraction}"
            )
        if max_search_rows < 100:
            raise ConfigError(f"max_search_rows must be at least 100; got {max_search_rows}")
        self.seed = int(seed)
        self.n_jobs = int(n_jobs)
        self.validation_fraction = float(validation_fraction)
        self.max_search_rows = int(max_search_rows)

    # ------------------------------------------------------------------ subclass hooks
    def _candidates(self, n_rows: int, n_features: int, n_classes: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _fit_candidate(
        self,
        params: dict[str, Any],
        X: np.ndarray,
        y: np.ndarray,
        X_val: np.ndarray,
        y_val: np.ndarray,
        n_classes: int,
    ) -> tuple[Any, dict[str, Any]]:
        """Train on (X, y) (codes 0..n_classes-1); return (model, params for the final refit)."""
        raise NotImplementedError

    def _fit_final(
        self, params: dict[str, Any], X: np.ndarray, y: np.ndarray, n_classes: int
    ) -> Any:
        raise NotImplementedError

    def _proba(self, model: Any, X: np.ndarray, n_classes: int) -> np.ndarray:
        """Probabilities (n, n_classes) for scaled inputs, columns = class codes."""
        raise NotImplementedError

    def _evaluate_candidates(
        self,
        candidates: list[dict[str, Any]],
        X: np.ndarray,
        y: np.ndarray,
        X_val: np.ndarray,
        y_val: np.ndarray,
        n_classes: int,
    ) -> list[tuple[dict[str, Any], np.ndarray]]:
        """(refit params, validation probabilities) per candidate.

        Trains each candidate in turn; subclasses whose candidates share work (kNN: one
        neighbour query serves every k) override this.
        """
        out = []
        for params in candidates:
            model, refit_params = self._fit_candidate(dict(params), X, y, X_val, y_val, n_classes)
            out.append((refit_params, self._proba(model, X_val, n_classes)))
        return out

    # ------------------------------------------------------------------ public API
    def fit(self, Z: object, y: object) -> Self:
        """Learn to predict ``y`` from ``Z``; returns ``self``."""
        start = time.perf_counter()
        X = check_features(Z)
        labels = check_labels(y, X.shape[0])
        classes, codes = np.unique(labels, return_inverse=True)
        if classes.size < 2:
            raise LabelError(
                f"the attacker's label has a single class ({classes.tolist()}); "
                "at least two are needed to learn anything"
            )
        n_classes = int(classes.size)
        self.mean_ = X.mean(axis=0)
        scale = X.std(axis=0)
        self.scale_ = np.where(scale > 0, scale, 1.0)
        Xs = (X - self.mean_) / self.scale_

        with threadpool_limits(limits=self.n_jobs):
            params, search = self._search(Xs, codes, n_classes)
            self.model_ = self._fit_final(params, Xs, codes, n_classes)
        self.classes_ = classes
        self.n_features_in_ = int(X.shape[1])
        self.params_ = params
        self.search_ = search
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def predict_proba(self, Z: object) -> np.ndarray:
        """Class probabilities, shape (n_rows, n_classes), columns in ``classes_`` order."""
        X = self._check_predict_input(Z)
        with threadpool_limits(limits=self.n_jobs):
            return self._proba(self.model_, (X - self.mean_) / self.scale_, self.classes_.size)

    def predict(self, Z: object) -> np.ndarray:
        """The most probable class of each row (labels from ``classes_``)."""
        return self.classes_[np.argmax(self.predict_proba(Z), axis=1)]

    def export_weights(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-safe config, plain numpy arrays) that :meth:`from_weights` turns back into an
        attacker with identical ``predict_proba``; never a pickle.

        Only ``logistic-regression`` and ``mlp`` can be shipped this way. For ``gradient-boosting``
        and ``knn`` the federated audit ships the attack-training set (T(P_audit), S) instead, and
        the site refits the attacker with the same name and seed.
        """
        raise ConfigError(
            f"attacker {self.name!r} cannot be exported as plain weights; ship its training set "
            "(T(P_audit), S) and refit it at the site (exportable: logistic-regression, mlp)"
        )

    @classmethod
    def from_weights(cls, config: dict[str, Any], arrays: dict[str, np.ndarray]) -> Self:
        """Rebuild an exported attacker (see :meth:`export_weights`)."""
        raise ConfigError(f"attacker {cls.name!r} cannot be rebuilt from plain weights")

    # ------------------------------------------------------------------ helpers
    def _check_predict_input(self, Z: object) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise NotFittedError(f"attacker {self.name!r} must be fitted before predict_proba")
        X = check_features(Z)
        if X.shape[1] != self.n_features_in_:
            raise ColumnError(
                f"Z has {X.shape[1]} feature(s) but attacker {self.name!r} was fitted on "
                f"{self.n_features_in_}"
            )
        return X

    def _search(
        self, X: np.ndarray, y: np.ndarray, n_classes: int
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Pick a candidate by validation AUC on a (sub-sampled) stratified split."""
        candidates = self._candidates(X.shape[0], X.shape[1], n_classes)
        counts = np.bincount(y, minlength=n_classes)
        if len(candidates) == 1 or X.shape[0] < self.min_search_rows or counts.min() < 2:
            return dict(candidates[0]), []

        idx = np.arange(X.shape[0])
        if X.shape[0] > self.max_search_rows:
            idx, _ = train_test_split(
                idx, train_size=self.max_search_rows, stratify=y, random_state=self.seed
            )
        stratify = y[idx] if np.bincount(y[idx], minlength=n_classes).min() >= 2 else None
        tr, va = train_test_split(
            idx,
            test_size=self.validation_fraction,
            stratify=stratify,
            random_state=self.seed,
        )
        # A class missing from the training part cannot be learned there; drop its validation rows
        # (its AUC is skipped) rather than let an estimator fail on an unseen label.
        va = va[np.isin(y[va], y[tr])]
        if np.unique(y[tr]).size < 2 or va.size == 0:
            return dict(candidates[0]), []

        results: list[dict[str, Any]] = []
        best_key: tuple[float, float] | None = None
        best_params: dict[str, Any] = dict(candidates[0])
        evaluated = self._evaluate_candidates(candidates, X[tr], y[tr], X[va], y[va], n_classes)
        for refit_params, proba in evaluated:
            scores = score_predictions(y[va], proba, np.arange(n_classes))
            auc = scores["auc"]
            key = (-np.inf if np.isnan(auc) else auc, scores["accuracy"])
            results.append({"params": _jsonable(refit_params), "val_auc": _nan_to_none(auc)})
            if best_key is None or key > best_key:
                best_key, best_params = key, refit_params
        return best_params, results


def _nan_to_none(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    """Params with tuples turned into lists and numpy scalars into Python numbers."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, tuple):
            v = list(v)
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out


ATTACKERS: Registry[Attacker] = Registry[Attacker]("attacker")


def attacker_from_weights(config: dict[str, Any], arrays: dict[str, np.ndarray]) -> Attacker:
    """Rebuild any exported attacker; the config names which one (``config["attacker"]``)."""
    if not isinstance(config, dict) or config.get("format") != WEIGHTS_FORMAT:
        got = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise ConfigError(f"attacker config format must be {WEIGHTS_FORMAT!r}; got {got!r}")
    return ATTACKERS.get(str(config.get("attacker"))).from_weights(config, arrays)


__all__ = [
    "ATTACKERS",
    "WEIGHTS_FORMAT",
    "Attacker",
    "attacker_from_weights",
    "check_features",
    "check_labels",
    "expand_proba",
    "softmax",
]
