"""Splitting one table into sites (partitions) and into public / audit / site / test splits.

Simulated federations need site data that is iid, label-skewed (Dirichlet(α), the usual non-iid
benchmark of Hsu et al. 2019) or split along a real column such as a hospital id. Everything is
positional (``frame.iloc``) and deterministic for a seed, so a run can be reproduced exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pandas as pd

from shared.errors import ColumnError, ConfigError, ValueRangeError

SCHEME_FORMS = "'iid', 'dirichlet:ALPHA' (ALPHA > 0) or 'column:NAME'"
#: Fresh Dirichlet draws tried before empty parts are repaired by moving single rows.
_DIRICHLET_TRIES = 10


@dataclass(frozen=True)
class Scheme:
    """A parsed partition scheme; ``str(scheme)`` gives back the text form."""

    kind: str
    alpha: float | None = None
    column: str | None = None

    def __str__(self) -> str:
        if self.kind == "dirichlet":
            return f"dirichlet:{self.alpha:g}"
        if self.kind == "column":
            return f"column:{self.column}"
        return self.kind


def parse_scheme(text: str | Scheme) -> Scheme:
    """Parse ``'iid'``, ``'dirichlet:0.5'`` or ``'column:hospital'``."""
    if isinstance(text, Scheme):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"scheme must be {SCHEME_FORMS}; got {type(text).__name__} {text!r}")
    kind, sep, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind == "iid" and not sep:
        return Scheme("iid")
    if kind == "dirichlet" and sep:
        try:
            alpha = float(arg)
        except ValueError:
            alpha = math.nan
        if not (math.isfinite(alpha) and alpha > 0):
            raise ConfigError(
                f"scheme {text!r}: ALPHA in 'dirichlet:ALPHA' must be a finite number > 0 "
                f"(small = skewed, large = near iid); got {arg!r}"
            )
        return Scheme("dirichlet", alpha=alpha)
    if kind == "column" and sep:
        if not arg.strip():
            raise ConfigError(
                f"scheme {text!r}: NAME in 'column:NAME' must be a column name; got ''"
            )
        return Scheme("column", column=arg.strip())
    raise ConfigError(f"scheme must be {SCHEME_FORMS}; got {text!r}")


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, Integral) or int(seed) < 0:
        raise ConfigError(f"seed must be an integer >= 0; got {seed!r}")
    return int(seed)


def _codes(frame: pd.DataFrame, column: str, role: str) -> tuple[np.ndarray, int]:
    """Class codes (0..k-1, in sorted value order) of a column, refusing missing values."""
    if column not in frame.columns:
        raise ColumnError(
            f"{role} column {column!r} not found; available columns: "
            f"{', '.join(map(str, frame.columns))}"
        )
    series = frame[column]
    missing = series.isna().to_numpy()
    if missing.any():
        row = int(np.argmax(missing))
        raise ValueRangeError(
            f"{role} column {column!r} has a missing value at data row {row + 1}; fill or drop "
            "those rows before partitioning"
        )
    codes, uniques = pd.factorize(series, sort=True)
    return codes.astype(np.int64), len(uniques)


def partition_indices(
    frame: pd.DataFrame,
    n_parts: int,
    scheme: str | Scheme,
    *,
    label: str | None = None,
    seed: int = 0,
) -> list[np.ndarray]:
    """Split the rows of ``frame`` into ``n_parts`` disjoint, non-empty, covering parts.

    Returns sorted positional indices (for ``frame.iloc``), one array per part.

    - ``iid``: a seeded shuffle cut into near-equal parts.
    - ``dirichlet:ALPHA``: for each class of ``label``, part shares are drawn from
      Dirichlet(ALPHA); a part left empty gets one row moved from the largest part.
    - ``column:NAME``: one part per distinct value of NAME (sorted). If fewer parts are asked
      for than there are values, value ``i`` (in sorted order) goes to part ``i % n_parts``
      (round-robin); more parts than values is an error.
    """
    parsed = parse_scheme(scheme)
    rng = np.random.default_rng(_check_seed(seed))
    n = len(frame)
    if isinstance(n_parts, bool) or not isinstance(n_parts, Integral) or n_parts < 1:
        raise ConfigError(f"n_parts must be an integer >= 1; got {n_parts!r}")
    n_parts = int(n_parts)
    if n_parts > n:
        raise ConfigError(
            f"n_parts must be <= the number of rows ({n}) so that every part is non-empty; "
            f"got {n_parts}"
        )
    if parsed.kind == "iid":
        parts = np.array_split(rng.permutation(n), n_parts)
        return [np.sort(p).astype(np.int64) for p in parts]
    if parsed.kind == "column":
        assert parsed.column is not None
        codes, n_values = _codes(frame, parsed.column, "partition")
        if n_parts > n_values:
            raise ConfigError(
                f"n_parts must be <= the number of distinct values of column "
                f"{parsed.column!r} ({n_values}) for scheme {str(parsed)!r}; got {n_parts}"
            )
        assignment = codes % n_parts
        return [np.flatnonzero(assignment == k).astype(np.int64) for k in range(n_parts)]
    if label is None:
        raise ConfigError(
            f"scheme {str(parsed)!r} needs label=COLUMN (the label whose classes are skewed "
            "across parts); got None"
        )
    codes, n_classes = _codes(frame, label, "label")
    assert parsed.alpha is not None
    assignment = _dirichlet_assignment(codes, n_classes, n_parts, parsed.alpha, rng)
    return [np.flatnonzero(assignment == k).astype(np.int64) for k in range(n_parts)]


def _dirichlet_assignment(
    codes: np.ndarray, n_classes: int, n_parts: int, alpha: float, rng: np.random.Generator
) -> np.ndarray:
    assignment = np.empty(len(codes), dtype=np.int64)
    members = [np.flatnonzero(codes == c) for c in range(n_classes)]
    for _ in range(_DIRICHLET_TRIES):
        for idx in members:
            idx = rng.permutation(idx)
            shares = rng.dirichlet(np.full(n_parts, alpha))
            if not np.isfinite(shares).all():  # pragma: no cover - extreme alpha underflow
                shares = np.eye(n_parts)[rng.integers(n_parts)]
            cuts = np.round(np.cumsum(shares)[:-1] * len(idx)).astype(np.int64)
            for part, chunk in enumerate(np.split(idx, cuts)):
                assignment[chunk] = part
        if (np.bincount(assignment, minlength=n_parts) > 0).all():
            return assignment
    counts = np.bincount(assignment, minlength=n_parts)
    for empty in np.flatnonzero(counts == 0):
        donor = int(np.argmax(counts))
        row = rng.choice(np.flatnonzero(assignment == donor))
        assignment[row] = empty
        counts[donor] -= 1
        counts[empty] += 1
    return assignment


# -- splits ---------------------------------------------------------------------------------------
def _check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(fractions, Mapping) or not fractions:
        raise ConfigError(
            "fractions must be a non-empty mapping of split name to fraction, e.g. "
            f"{{'public': 0.3, 'sites': 0.7}}; got {fractions!r}"
        )
    checked: dict[str, float] = {}
    for name, value in fractions.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"fractions: split names must be non-empty strings; got {name!r}")
        if isinstance(value, bool) or not isinstance(value, Real):
            raise ConfigError(f"fractions[{name!r}] must be a number in (0, 1]; got {value!r}")
        value = float(value)
        if not (math.isfinite(value) and 0 < value <= 1):
            raise ConfigError(f"fractions[{name!r}] must be in (0, 1]; got {value!r}")
        checked[name] = value
    total = sum(checked.values())
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"fractions must sum to 1; got {total:g} for {checked}")
    return checked


def _split_counts(n: int, fractions: dict[str, float]) -> list[int]:
    """Largest-remainder rounding: counts that sum to ``n`` exactly."""
    raw = np.array([f * n for f in fractions.values()])
    counts = np.floor(raw).astype(np.int64)
    remainder = n - int(counts.sum())
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[:remainder]] += 1
    return [int(c) for c in counts]


def split_indices(
    n_rows: int | pd.DataFrame,
    fractions: Mapping[str, float],
    *,
    seed: int,
    stratify: np.ndarray | pd.Series | None = None,
) -> dict[str, np.ndarray]:
    """Positional, sorted, disjoint indices per split; see :func:`split_frame`."""
    checked = _check_fractions(fractions)
    rng = np.random.default_rng(_check_seed(seed))
    n = len(n_rows) if isinstance(n_rows, pd.DataFrame) else int(n_rows)
    counts = _split_counts(n, checked)
    for name, count in zip(checked, counts, strict=True):
        if count == 0:
            raise ConfigError(
                f"fractions[{name!r}] = {checked[name]:g} of {n} rows leaves split {name!r} "
                "empty; use more rows or a larger fraction"
            )
    order = rng.permutation(n)
    if stratify is not None:
        codes = np.asarray(stratify)
        order = order[np.argsort(codes[order], kind="stable")]
    # Spread each split evenly along `order` (split k's j-th row sits at (j + 0.5) / count_k), so
    # every contiguous run of `order` (one class, when stratified) is split in proportion.
    times = np.concatenate([(np.arange(c) + 0.5) / c for c in counts])
    owners = np.repeat(np.arange(len(counts)), counts)
    sequence = owners[np.argsort(times, kind="stable")]
    assignment = np.empty(n, dtype=np.int64)
    assignment[order] = sequence
    return {name: np.flatnonzero(assignment == k) for k, name in enumerate(checked)}


def split_frame(
    frame: pd.DataFrame,
    fractions: Mapping[str, float],
    *,
    seed: int,
    stratify: str | None = None,
) -> dict[str, pd.DataFrame]:
    """Split ``frame`` into disjoint parts (e.g. public / audit / sites / test) by ``fractions``.

    Fractions must sum to 1; sizes are rounded so they add up to ``len(frame)`` exactly and every
    split is non-empty. With ``stratify=COLUMN`` each split keeps that column's class proportions
    (to within a row per class). Rows keep their input order and index inside each split, so the
    result is deterministic for a seed and traceable to the source rows.
    """
    codes = None
    if stratify is not None:
        codes, _ = _codes(frame, stratify, "stratify")
    parts = split_indices(len(frame), fractions, seed=seed, stratify=codes)
    return {name: frame.iloc[idx] for name, idx in parts.items()}
