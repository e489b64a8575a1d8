"""The shaper interface: fit on public data, transform at a site, travel in a signed bundle.

Shapers follow scikit-learn's conventions: ``fit`` returns ``self``, learned attributes end in
``_``, ``transform`` checks fitted state and feature count. To travel in a bundle a shaper splits
into a JSON-able config and a dict of plain arrays (``get_state``), and is rebuilt from them by
``from_state`` without running any code from the bundle (no pickle).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from shared.errors import ConfigError, NotFittedError
from shared.registry import Registry


def as_features(X: Any, name: str = "X") -> np.ndarray:
    """Coerce to a finite float32 matrix, with an error that names the problem."""
    arr = np.asarray(X, dtype=np.float32)
    if arr.ndim != 2:
        raise ConfigError(f"{name}: must be a 2-D array (rows × features), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ConfigError(f"{name}: has no rows")
    if not np.isfinite(arr).all():
        raise ConfigError(f"{name}: holds NaN or inf; clean the table before encoding")
    return arr


def as_label_matrix(y: Any, n_rows: int, name: str) -> np.ndarray:
    """Labels as an int64 (n, j) matrix of class indices (one column per label)."""
    arr = np.asarray(y)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] != n_rows:
        raise ConfigError(f"{name}: needs {n_rows} rows (one per sample), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0):
            arr = arr.astype(np.int64)
        else:
            raise ConfigError(f"{name}: must hold integer class indices, got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ConfigError(f"{name}: class indices must be >= 0, got {arr.min()}")
    for j in range(arr.shape[1]):
        if len(np.unique(arr[:, j])) < 2:
            raise ConfigError(f"{name}: column {j} has a single class; nothing to learn or hide")
    return arr.astype(np.int64)


class Shaper(ABC):
    """Base of every data shaper (``SHAPERS`` registry)."""

    name: str = "base"

    def fit(self, X: Any, y_public: Any = None, y_sensitive: Any = None) -> Shaper:
        X = as_features(X)
        self.n_features_in_ = X.shape[1]
        self._fit(X, y_public, y_sensitive)
        return self

    @abstractmethod
    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None: ...

    def transform(self, X: Any) -> np.ndarray:
        self.check_fitted()
        X = as_features(X)
        if X.shape[1] != self.n_features_in_:
            raise ConfigError(
                f"X: has {X.shape[1]} features, but {type(self).__name__} was fitted with "
                f"{self.n_features_in_}"
            )
        return self._transform(X)

    def fit_transform(self, X: Any, y_public: Any = None, y_sensitive: Any = None) -> np.ndarray:
        return self.fit(X, y_public, y_sensitive).transform(X)

    @abstractmethod
    def _transform(self, X: np.ndarray) -> np.ndarray: ...

    def check_fitted(self) -> None:
        if not hasattr(self, "n_features_in_"):
            raise NotFittedError(
                f"{type(self).__name__} is not fitted yet; call fit(X, y_public, y_sensitive) first"
            )

    @property
    def n_components(self) -> int:
        """Width of the shaped output."""
        self.check_fitted()
        return self._n_components()

    @abstractmethod
    def _n_components(self) -> int: ...

    # -- bundle round trip -------------------------------------------------------------------
    @abstractmethod
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able config, plain arrays) — everything needed to rebuild ``transform``."""

    @classmethod
    @abstractmethod
    def from_state(cls, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> Shaper:
        """Rebuild a fitted shaper from ``get_state`` output (no code is run from the bundle)."""

    def training_metrics(self) -> dict[str, Any]:
        """Curves and figures recorded while fitting (stored in the bundle manifest)."""
        return {}


SHAPERS: Registry[Shaper] = Registry("shaper")
