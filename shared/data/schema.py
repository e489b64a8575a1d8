"""`InputSchema`: the fitted preprocessing (one-hot + standardise) that a bundle carries.

A site encodes its own table with the coordinator's encoder, so the exact preprocessing learned on
public data must travel inside the signed bundle. It is therefore plain JSON (names, category
lists, means, stds, class lists; never pickle), and :meth:`InputSchema.transform` re-checks every
table against it: an unseen category or a missing column must fail loudly, not shift the one-hot
layout silently. ``transform`` is vectorised because sites encode millions of rows in chunks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from shared.data.loaders import (
    MAX_ABS_VALUE,
    check_duplicate_columns,
    check_magnitudes,
    check_no_missing,
    first_true,
    numeric_column,
    show_value,
    validate_table,
)
from shared.data.spec import TableSpec
from shared.errors import CategoryError, ColumnError, ConfigError, InfoShapeError, LabelError

FORMAT = "infoshape-input-schema/1"
#: A categorical column with more categories than this would explode the one-hot width (an ID?).
MAX_CATEGORIES = 1000
#: Values per tile when standardising numeric columns (fits in L2 cache).
_TILE_VALUES = 1 << 16


def _cell_text(value: object) -> str:
    """Canonical text of one cell: integral numbers print as integers, booleans as True/False."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return _number_text(float(value))
    return str(value)


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(value)


def canonical_strings(series: pd.Series) -> list[str]:
    """Sorted distinct values of a column as strings, the form stored in the schema.

    Numeric columns sort numerically and integral floats print as integers (``1.0`` -> ``"1"``),
    so a column read as int at one site and as float at another maps to the same classes.
    """
    values = series.dropna().unique()
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return [str(bool(v)) for v in sorted(values)]
    if pd.api.types.is_numeric_dtype(dtype):
        numbers = np.sort(np.asarray(values, dtype=np.float64))
        return [_number_text(v) for v in numbers]
    return sorted({_cell_text(v) for v in values})


def _numeric_codes(values: np.ndarray, classes: Sequence[str]) -> np.ndarray | None:
    """Match float values against the numeric-looking classes; ``None`` if that is ambiguous."""
    numbers = pd.to_numeric(pd.Series(list(classes), dtype=object), errors="coerce")
    numbers = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
    keep = np.flatnonzero(~np.isnan(numbers))
    index = pd.Index(numbers[keep])
    if not index.is_unique:
        return None
    found = index.get_indexer(values)
    codes = np.where(found >= 0, keep[np.maximum(found, 0)] if len(keep) else -1, -1)
    codes[np.isnan(values)] = -1
    return codes.astype(np.int64, copy=False)


def class_codes(series: pd.Series, classes: Sequence[str]) -> np.ndarray:
    """Index of each value of ``series`` in ``classes`` (``-1`` when absent or missing).

    Vectorised: numeric columns are matched as numbers (no per-row string conversion), string
    columns through a hash index.
    """
    dtype = series.dtype
    if pd.api.types.is_integer_dtype(dtype) and not pd.api.types.is_extension_array_dtype(dtype):
        codes = _integer_codes(series.to_numpy(), classes)
        if codes is not None:
            return codes
    if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        codes = _numeric_codes(values, classes)
        if codes is not None:
            return codes
    if isinstance(dtype, pd.StringDtype):
        index = pd.Index(list(classes), dtype=dtype)
        return np.asarray(index.get_indexer(series), dtype=np.int64)
    strings = series.map(_cell_text, na_action="ignore")
    index = pd.Index(list(classes), dtype=object)
    return np.asarray(index.get_indexer(strings.to_numpy(dtype=object)), dtype=np.int64)


def _integer_codes(values: np.ndarray, classes: Sequence[str]) -> np.ndarray | None:
    """Lookup-table matching for an int column against integer classes (the common case)."""
    try:
        numbers = np.array([int(c) for c in classes], dtype=np.int64)
    except (ValueError, OverflowError):
        return None
    if len(numbers) == 0 or len(np.unique(numbers)) != len(numbers):
        return None
    lo, hi = int(numbers.min()), int(numbers.max())
    if hi - lo > 1 << 20:
        return None
    table = np.full(hi - lo + 1, -1, dtype=np.int64)
    table[numbers - lo] = np.arange(len(numbers))
    values = values.astype(np.int64, copy=False)
    inside = (values >= lo) & (values <= hi)
    if inside.all():
        return table[values - lo]
    codes = np.full(len(values), -1, dtype=np.int64)
    codes[inside] = table[values[inside] - lo]
    return codes


def _str_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Schemas name columns by string; a frame built in code may use other labels."""
    if all(isinstance(c, str) for c in frame.columns):
        return frame
    return frame.rename(columns=str)


class InputSchema:
    """Fitted feature layout, one-hot categories, standardisation and class lists.

    Build with :meth:`fit` or :meth:`from_dict`. Output columns follow the feature order; a
    categorical feature ``c`` with categories ``a, b`` becomes ``c=a, c=b``. Every output column
    is standardised with the mean/std learned at fit (a constant column keeps std 1).
    """

    def __init__(
        self,
        *,
        features: Sequence[str],
        dtypes: Mapping[str, str],
        categories: Mapping[str, Sequence[str]],
        mean: Sequence[float],
        std: Sequence[float],
        label: str,
        label_classes: Sequence[str],
        sensitive: Sequence[str],
        sensitive_classes: Mapping[str, Sequence[str]],
    ) -> None:
        self.features = [str(f) for f in features]
        self.dtypes = {f: str(dtypes[f]) for f in self.features}
        self.categories = {
            c: [str(v) for v in categories[c]] for c in self.features if c in categories
        }
        self._label = str(label)
        self.label_classes = [str(v) for v in label_classes]
        self._sensitive = [str(s) for s in sensitive]
        self.sensitive_classes = {
            s: [str(v) for v in sensitive_classes[s]] for s in self._sensitive
        }
        names: list[str] = []
        self._slots: list[tuple[str, int, int]] = []  # (feature, first output, width)
        for feature in self.features:
            start = len(names)
            if feature in self.categories:
                names += [f"{feature}={v}" for v in self.categories[feature]]
            else:
                names.append(feature)
            self._slots.append((feature, start, len(names) - start))
        self._output_names = names
        self.mean = np.asarray(mean, dtype=np.float64)
        self.std = np.asarray(std, dtype=np.float64)
        self._check()
        self._numeric = [f for f in self.features if f not in self.categories]
        self._numeric_pos = np.array(
            [start for f, start, _ in self._slots if f not in self.categories], dtype=np.int64
        )
        self._inv_std = 1.0 / self.std

    def _check(self) -> None:
        n = len(self._output_names)
        if self.mean.shape != (n,) or self.std.shape != (n,):
            raise ConfigError(
                f"input schema: mean and std must have one entry per output column ({n}); got "
                f"{self.mean.shape[0] if self.mean.ndim else 0} and "
                f"{self.std.shape[0] if self.std.ndim else 0}"
            )
        if not (np.isfinite(self.mean).all() and np.isfinite(self.std).all()):
            raise ConfigError("input schema: mean and std must be finite numbers")
        if (self.std <= 0).any():
            raise ConfigError("input schema: std must be > 0 for every output column")
        if len(set(self._output_names)) != n:
            dup = sorted({x for x in self._output_names if self._output_names.count(x) > 1})
            raise ColumnError(
                f"input schema: output column name(s) {', '.join(map(repr, dup))} occur twice "
                "(a numeric column named like a one-hot output?); rename the column"
            )
        if len(self.label_classes) < 2:
            raise ConfigError(
                f"input schema: label {self._label!r} needs at least 2 classes; got "
                f"{self.label_classes}"
            )
        if not self._sensitive:
            raise ConfigError("input schema: at least one sensitive column is required")

    # -- fitting ---------------------------------------------------------------------------
    @classmethod
    def fit(cls, frame: pd.DataFrame, spec: TableSpec, *, source: str = "table") -> InputSchema:
        """Validate ``frame`` against ``spec`` and learn the preprocessing from it."""
        frame = validate_table(frame, spec, source=source)
        features = spec.resolve_features(frame.columns)
        categorical = set(spec.categorical)
        categories: dict[str, list[str]] = {}
        for column in features:
            if column in categorical:
                cats = canonical_strings(frame[column])
                if len(cats) > MAX_CATEGORIES:
                    raise ConfigError(
                        f"categorical column {column!r} in {source} has {len(cats)} distinct "
                        f"values (more than {MAX_CATEGORIES}); one-hot encoding would add as many "
                        "inputs: drop it from features or group its values"
                    )
                categories[column] = cats
        label_classes = canonical_strings(frame[spec.label])
        sensitive_classes = {s: canonical_strings(frame[s]) for s in spec.sensitive}
        dtypes = {c: str(frame[c].dtype) for c in features}
        n_out = sum(len(categories[c]) if c in categories else 1 for c in features)
        unit = cls(
            features=features,
            dtypes=dtypes,
            categories=categories,
            mean=np.zeros(n_out),
            std=np.ones(n_out),
            label=spec.label,
            label_classes=label_classes,
            sensitive=spec.sensitive,
            sensitive_classes=sensitive_classes,
        )
        raw = unit._encode(frame, source=source, dtype=np.float64)
        mean = raw.mean(axis=0)
        std = raw.std(axis=0)
        constant = raw.max(axis=0) == raw.min(axis=0)
        std[constant | (std == 0)] = 1.0
        return cls(
            features=features,
            dtypes=dtypes,
            categories=categories,
            mean=mean,
            std=std,
            label=spec.label,
            label_classes=label_classes,
            sensitive=spec.sensitive,
            sensitive_classes=sensitive_classes,
        )

    # -- properties --------------------------------------------------------------------------
    @property
    def n_features_in(self) -> int:
        """Number of input (table) feature columns."""
        return len(self.features)

    @property
    def n_outputs(self) -> int:
        """Width of :meth:`transform`'s output."""
        return len(self._output_names)

    @property
    def output_names(self) -> list[str]:
        return list(self._output_names)

    @property
    def label(self) -> str:
        return self._label

    @property
    def sensitive(self) -> list[str]:
        return list(self._sensitive)

    @property
    def spec(self) -> TableSpec:
        """The spec this schema enforces (explicit feature list)."""
        return TableSpec(
            label=self._label,
            sensitive=list(self._sensitive),
            features=list(self.features),
            categorical=[f for f in self.features if f in self.categories],
        )

    # -- checking and encoding -------------------------------------------------------------
    def check_columns(
        self,
        frame: pd.DataFrame,
        *,
        targets: bool = False,
        allow_extra: bool = True,
        source: str = "table",
    ) -> None:
        """Refuse a frame lacking a feature column (and the label/sensitive ones if ``targets``).

        With ``allow_extra=False``, columns that are neither features, label nor sensitive are
        refused too.
        """
        check_duplicate_columns(frame.columns, source=source)
        available = [str(c) for c in frame.columns]
        needed = list(self.features)
        if targets:
            needed = [self._label, *self._sensitive, *needed]
        missing = [c for c in needed if c not in available]
        if missing:
            raise ColumnError(
                f"{source} is missing column(s) {', '.join(map(repr, missing))} that the input "
                f"schema needs; available columns: {', '.join(available)}"
            )
        if not allow_extra:
            known = {*self.features, self._label, *self._sensitive}
            extra = [c for c in available if c not in known]
            if extra:
                raise ColumnError(
                    f"{source} has column(s) {', '.join(map(repr, extra))} that the input schema "
                    f"does not know; expected only {', '.join(sorted(known))}"
                )

    def transform(self, frame: pd.DataFrame, *, source: str = "table") -> np.ndarray:
        """Encode the feature columns of ``frame`` as a float32 matrix ``(n, n_outputs)``.

        Extra columns are ignored. Raises :class:`ColumnError` (missing column),
        :class:`CategoryError` (unseen category) or ``ValueRangeError`` (NaN, inf, text in a
        numeric column, |x| > 1e12).
        """
        return self._encode(frame, source=source, dtype=np.float32)

    def _encode(self, frame: pd.DataFrame, *, source: str, dtype: type) -> np.ndarray:
        self.check_columns(frame, source=source)
        frame = _str_columns(frame)
        n = len(frame)
        out = np.empty((n, self.n_outputs), dtype=dtype)
        if self._numeric:
            self._fill_numeric(out, self._numeric_block(frame, source))
        for feature, start, width in self._slots:
            if feature not in self.categories:
                continue
            codes = self._category_codes(frame[feature], feature, source)
            mean = self.mean[start : start + width]
            inv = self._inv_std[start : start + width]
            out[:, start : start + width] = (-mean * inv).astype(dtype)
            hot = ((1.0 - mean) * inv).astype(dtype)
            # Scatter through the flat view: one index per row, no (n, width) temporaries.
            flat = out.reshape(-1)
            flat[np.arange(n, dtype=np.int64) * self.n_outputs + start + codes] = hot[codes]
        return out

    def _fill_numeric(self, out: np.ndarray, block: np.ndarray) -> None:
        """Standardise ``block`` (n, k) into the numeric output slots, in cache-sized row tiles.

        Pandas stores a frame's float columns column-major, so ``block.T`` is contiguous: tiles
        are standardised there and transposed into the row-major output.
        """
        pos = self._numeric_pos
        k = len(pos)
        first = int(pos[0])
        contiguous = np.array_equal(pos, np.arange(first, first + k))
        where: slice | np.ndarray = slice(first, first + k) if contiguous else pos
        mean = self.mean[pos][:, None]
        inv = self._inv_std[pos][:, None]
        columns = block.T
        n = columns.shape[1]
        step = max(1024, _TILE_VALUES // max(k, 1))
        tile = np.empty((k, min(step, n)), dtype=np.float64)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            t = tile[:, : r1 - r0]
            np.subtract(columns[:, r0:r1], mean, out=t)
            t *= inv
            out[r0:r1, where] = t.T

    def _numeric_block(self, frame: pd.DataFrame, source: str) -> np.ndarray:
        """The numeric features as float64 (n, k), checked for NaN, inf and huge values."""
        columns = frame[self._numeric]
        if all(
            pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_extension_array_dtype(t)
            for t in columns.dtypes
        ):
            block = columns.to_numpy(dtype=np.float64)
            # Two reductions, no temporaries; NaN propagates through min/max and fails the test.
            if len(block) == 0 or (block.min() >= -MAX_ABS_VALUE and block.max() <= MAX_ABS_VALUE):
                return block
            for j, column in enumerate(self._numeric):
                check_magnitudes(block[:, j], column=column, source=source)
            return block  # pragma: no cover - check_magnitudes raised
        block = np.empty((len(self._numeric), len(frame)), dtype=np.float64)
        for j, column in enumerate(self._numeric):
            block[j] = numeric_column(frame[column], column=column, source=source)
        return block.T

    def _category_codes(self, series: pd.Series, column: str, source: str) -> np.ndarray:
        known = self.categories[column]
        codes = class_codes(series, known)
        if (codes < 0).any():
            check_no_missing(series, column=column, source=source)
            row = first_true(codes < 0)
            value = series.iloc[row]
            unseen = pd.unique(series[codes < 0])
            shown = ", ".join(known[:20]) + (
                f", ... ({len(known)} in all)" if len(known) > 20 else ""
            )
            raise CategoryError(
                f"column {column!r} in {source} holds category {show_value(value)} at data row "
                f"{row + 1}, not seen when the encoder was fitted ({len(unseen)} unseen value(s)); "
                f"known categories: {shown}. Map it to a known category or retrain the encoder"
            )
        return codes

    def _class_codes(
        self, frame: pd.DataFrame, column: str, classes: list[str], role: str, source: str
    ) -> np.ndarray:
        frame = _str_columns(frame)
        if column not in frame.columns:
            raise ColumnError(
                f"{source} is missing the {role} column {column!r}; available columns: "
                f"{', '.join(map(str, frame.columns))}"
            )
        series = frame[column]
        codes = class_codes(series, classes)
        if (codes < 0).any():
            check_no_missing(series, column=column, source=source)
            row = first_true(codes < 0)
            raise LabelError(
                f"{role} column {column!r} in {source} holds {show_value(series.iloc[row])} at "
                f"data row {row + 1}, not among the classes seen at fit: {', '.join(classes)}; "
                "drop those rows or retrain"
            )
        return codes

    def encode_labels(self, frame: pd.DataFrame, *, source: str = "table") -> np.ndarray:
        """The label column as class indices into :attr:`label_classes`, int64 ``(n,)``."""
        return self._class_codes(frame, self._label, self.label_classes, "label", source)

    def encode_sensitive(self, frame: pd.DataFrame, *, source: str = "table") -> np.ndarray:
        """The sensitive columns as class indices, int64 ``(n, n_sensitive)``."""
        out = np.empty((len(frame), len(self._sensitive)), dtype=np.int64)
        for j, column in enumerate(self._sensitive):
            out[:, j] = self._class_codes(
                frame, column, self.sensitive_classes[column], "sensitive", source
            )
        return out

    # -- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (floats round-trip exactly through ``json``)."""
        return {
            "format": FORMAT,
            "features": [
                {
                    "name": f,
                    "kind": "categorical" if f in self.categories else "numeric",
                    "dtype": self.dtypes[f],
                    **({"categories": list(self.categories[f])} if f in self.categories else {}),
                }
                for f in self.features
            ],
            "output_names": list(self._output_names),
            "mean": [float(x) for x in self.mean],
            "std": [float(x) for x in self.std],
            "label": self._label,
            "label_classes": list(self.label_classes),
            "sensitive": list(self._sensitive),
            "sensitive_classes": {s: list(self.sensitive_classes[s]) for s in self._sensitive},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InputSchema:
        """Rebuild from :meth:`to_dict`; a malformed dict raises :class:`ConfigError`."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, Mapping) else type(data).__name__
            raise ConfigError(f"input schema: format must be {FORMAT!r}; got {got!r}")
        try:
            entries = data["features"]
            features = [e["name"] for e in entries]
            categories = {e["name"]: e["categories"] for e in entries if e["kind"] == "categorical"}
            kinds = {e["kind"] for e in entries}
            if not kinds <= {"numeric", "categorical"}:
                raise ConfigError(f"input schema: unknown feature kind(s) {sorted(kinds)}")
            schema = cls(
                features=features,
                dtypes={e["name"]: e.get("dtype", "") for e in entries},
                categories=categories,
                mean=data["mean"],
                std=data["std"],
                label=data["label"],
                label_classes=data["label_classes"],
                sensitive=data["sensitive"],
                sensitive_classes=data["sensitive_classes"],
            )
        except InfoShapeError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"input schema is malformed (missing or mistyped {exc}); re-create the bundle"
            ) from None
        if "output_names" in data and list(data["output_names"]) != schema.output_names:
            raise ConfigError("input schema: output_names do not match features and categories")
        return schema

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InputSchema) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"InputSchema(features={self.n_features_in}, outputs={self.n_outputs}, "
            f"label={self._label!r}, sensitive={self._sensitive!r})"
        )


def fingerprint_frame(frame: pd.DataFrame) -> str:
    """SHA-256 (hex) of a canonical serialisation of ``frame``: the public-data fingerprint.

    Covers column names, their order, a coarse kind per column (int, float, bool, text) and every
    value in row order; the index and the exact dtype width (int32 vs int64) are ignored. Floats are
    hashed as little-endian float64 with NaN canonicalised and -0.0 as 0.0.
    """
    digest = hashlib.sha256()
    columns = [frame.iloc[:, i] for i in range(frame.shape[1])]  # positional: repeats allowed
    kinds = [_fingerprint_kind(series) for series in columns]
    header = {"columns": [str(c) for c in frame.columns], "kinds": kinds, "rows": len(frame)}
    digest.update(json.dumps(header, sort_keys=True).encode("utf-8"))
    for series, kind in zip(columns, kinds, strict=True):
        digest.update(b"\x00col\x00")
        if kind == "bool":
            digest.update(series.to_numpy(dtype=np.uint8).tobytes())
        elif kind == "int":
            digest.update(series.to_numpy(dtype="<i8").tobytes())
        elif kind == "float":
            values = series.to_numpy(dtype="<f8", na_value=np.nan) + 0.0  # -0.0 -> 0.0
            values[np.isnan(values)] = np.nan
            digest.update(values.tobytes())
        else:
            cells = [None if pd.isna(v) else str(v) for v in series.tolist()]
            digest.update(json.dumps(cells, ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


def _fingerprint_kind(series: pd.Series) -> str:
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype) and not series.hasnans:
        return "bool"
    if pd.api.types.is_integer_dtype(dtype) and not series.hasnans:
        return "int"
    if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
        return "float"
    return "text"
