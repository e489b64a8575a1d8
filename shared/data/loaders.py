"""Reading CSV/Parquet tables and checking them against a :class:`TableSpec`.

A hospital runs this on its own data, far from whoever wrote the spec, so every failure is one
line (the CLI prints ``ErrorType: message``) that names the file, the column, the offending value
and its row, and says what to do. Rows are numbered from 1 and count data rows only (the header is
not a row), so in a CSV file "data row 17" is line 18.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from shared.data.spec import TableSpec
from shared.errors import (
    ColumnError,
    DataError,
    DataFileError,
    LabelError,
    ValueRangeError,
)

#: Largest magnitude accepted in a numeric feature. Larger values are almost always sentinels
#: (9.99e+99), unit mistakes or corruption, and they wreck standardisation.
MAX_ABS_VALUE = 1e12
#: A label or sensitive column with more classes than this is most likely continuous.
MAX_CLASSES = 1000

_CSV_SEPARATORS = {".csv": ",", ".csv.gz": ",", ".tsv": "\t", ".tsv.gz": "\t"}
_PARQUET_SUFFIXES = (".parquet", ".pq")
_SUPPORTED = ", ".join([*_CSV_SEPARATORS, *_PARQUET_SUFFIXES])
SEPARATOR_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}


# -- small formatting helpers (shared with schema.py) ---------------------------------------------
def show_value(value: object, limit: int = 40) -> str:
    """A short printable form of a cell for error messages."""
    if isinstance(value, float | np.floating):
        return f"{float(value):g}"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_true(mask: np.ndarray | pd.Series) -> int:
    """Position of the first ``True`` in a boolean mask (caller knows there is one)."""
    return int(np.argmax(np.asarray(mask, dtype=bool)))


def check_magnitudes(values: np.ndarray, *, column: str, source: str) -> None:
    """Refuse NaN, inf and |x| > :data:`MAX_ABS_VALUE` in a 1-d float array, naming the row."""
    ok = np.abs(values) <= MAX_ABS_VALUE  # False for NaN and inf as well
    if ok.all():
        return
    row = first_true(~ok)
    value = values[row]
    if np.isnan(value):
        count = int(np.isnan(values).sum())
        raise ValueRangeError(
            f"column {column!r} in {source} has a missing value (empty cell or NaN) at data "
            f"row {row + 1} ({count} missing in all); fill or drop those rows"
        )
    if np.isinf(value):
        raise ValueRangeError(
            f"column {column!r} in {source} holds an infinite value ({show_value(value)}) at "
            f"data row {row + 1}; replace it with a finite number or drop the row"
        )
    raise ValueRangeError(
        f"column {column!r} in {source} holds {show_value(value)} at data row {row + 1}, "
        f"beyond the supported magnitude {MAX_ABS_VALUE:g}; rescale the column or check for a "
        "sentinel or corrupt value"
    )


def numeric_column(series: pd.Series, *, column: str, source: str) -> np.ndarray:
    """A numeric feature as float64, refusing text, NaN, inf and huge values.

    Text that parses as numbers (e.g. an object column of ``"1.5"``) is accepted and converted.
    """
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        converted = pd.to_numeric(series, errors="coerce")
        bad = converted.isna().to_numpy() & series.notna().to_numpy()
        if bad.any():
            row = first_true(bad)
            count = int(bad.sum())
            raise ValueRangeError(
                f"column {column!r} in {source} holds non-numeric value "
                f"{show_value(series.iloc[row])} at data row {row + 1} ({count} such rows); "
                f"numeric features must be numbers: fix the value, or list {column!r} in "
                "categorical if it is a category"
            )
        values = converted.to_numpy(dtype=np.float64, na_value=np.nan)
    check_magnitudes(values, column=column, source=source)
    return values


def check_no_missing(series: pd.Series, *, column: str, source: str) -> None:
    """Refuse missing cells in a categorical, label or sensitive column, naming the first row."""
    missing = series.isna().to_numpy()
    if missing.any():
        row = first_true(missing)
        raise ValueRangeError(
            f"column {column!r} in {source} has a missing value (empty cell or NaN) at data "
            f"row {row + 1} ({int(missing.sum())} missing in all); fill or drop those rows"
        )


def _check_classes(series: pd.Series, *, column: str, role: str, source: str) -> None:
    check_no_missing(series, column=column, source=source)
    if pd.api.types.is_float_dtype(series.dtype):
        values = series.to_numpy(dtype=np.float64)
        inf = np.isinf(values)
        if inf.any():
            row = first_true(inf)
            raise ValueRangeError(
                f"{role} column {column!r} in {source} holds an infinite value at data row "
                f"{row + 1}; a {role} must hold class values"
            )
    classes = series.unique()
    if len(classes) < 2:
        raise LabelError(
            f"{role} column {column!r} in {source} has a single class "
            f"({show_value(classes[0])}) in all {len(series)} rows; it needs at least 2 classes: "
            "check the column, or the filtering that produced the table"
        )
    if len(classes) > MAX_CLASSES:
        raise LabelError(
            f"{role} column {column!r} in {source} has {len(classes)} distinct values (more than "
            f"{MAX_CLASSES}); it looks continuous: bin it into classes first"
        )


# -- validation -----------------------------------------------------------------------------------
def check_duplicate_columns(columns: pd.Index, *, source: str) -> None:
    """Refuse repeated column names (pandas would otherwise silently rename or shadow them)."""
    names = [str(c) for c in columns]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        where = "; ".join(
            f"{n!r} at columns {', '.join(str(i + 1) for i, m in enumerate(names) if m == n)}"
            for n in duplicated
        )
        raise ColumnError(
            f"{source} has duplicated column name(s): {where}; rename them so each name appears "
            "once"
        )


def validate_table(frame: pd.DataFrame, spec: TableSpec, *, source: str = "table") -> pd.DataFrame:
    """Check ``frame`` against ``spec``; return it with numeric-looking text columns as float64.

    Order of checks: duplicated columns, no rows, missing columns, label and sensitive columns
    (missing values, one class), then each feature in order (numeric: text, NaN, inf, magnitude;
    categorical: missing values). The first problem found is raised.
    """
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"{source} must be a pandas DataFrame; got {type(frame).__name__}")
    check_duplicate_columns(frame.columns, source=source)
    if not all(isinstance(c, str) for c in frame.columns):
        frame = frame.rename(columns=str)  # specs name columns by string
    if len(frame) == 0:
        raise DataFileError(f"{source} has no data rows; pass a table with at least 2 rows")
    available = [str(c) for c in frame.columns]
    roles = {spec.label: "label", **{s: "sensitive" for s in spec.sensitive}}
    missing = [c for c in spec.required_columns(available) if c not in available]
    if missing:
        listed = ", ".join(f"{c!r} ({roles.get(c, 'feature')})" for c in missing)
        raise ColumnError(
            f"{source} is missing required column(s) {listed}; available columns: "
            f"{', '.join(available)}. Fix the table spec or the table"
        )
    try:
        features = spec.resolve_features(available)
    except ColumnError as exc:
        raise ColumnError(f"{source}: {exc}") from None

    for column in spec.targets:
        _check_classes(frame[column], column=column, role=roles[column], source=source)

    categorical = set(spec.categorical)
    converted: dict[str, np.ndarray] = {}
    for column in features:
        series = frame[column]
        if column in categorical:
            check_no_missing(series, column=column, source=source)
            continue
        values = numeric_column(series, column=column, source=source)
        if not (
            pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)
        ):
            converted[column] = values
    if converted:
        frame = frame.assign(**converted)
    return frame


# -- reading --------------------------------------------------------------------------------------
def _csv_separator(path: Path) -> str | None:
    name = path.name.lower()
    for suffix, sep in _CSV_SEPARATORS.items():
        if name.endswith(suffix):
            return sep
    return None


def first_line(path: Path) -> str:
    """The first non-blank line of a (possibly gzipped) text file."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as handle:  # type: ignore[operator]
            for line in handle:
                if line.strip():
                    return line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise DataFileError(
            f"data file '{path}' is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as "
            "UTF-8 CSV or as Parquet"
        ) from None
    except (gzip.BadGzipFile, EOFError) as exc:
        raise DataFileError(
            f"data file '{path}' is not a valid gzip file ({exc}); re-compress it or pass the "
            "uncompressed file"
        ) from None
    except OSError as exc:
        raise DataFileError(f"data file '{path}' cannot be read ({exc})") from None
    raise DataFileError(f"data file '{path}' is empty (only blank lines); pass a table with data")


def check_csv_header(path: Path, sep: str) -> None:
    """Catch a wrong delimiter, duplicated and unnamed columns before pandas mangles them."""
    line = first_line(path)
    if sep not in line:
        for other in (";", "\t", "|", ","):
            if other != sep and other in line:
                expected = SEPARATOR_NAMES[sep]
                hint = (
                    "rename it to .tsv"
                    if other == "\t"
                    else "rename it to .csv"
                    if other == ","
                    else f"convert it, e.g. pandas.read_csv(path, sep={other!r})"
                    ".to_csv(new_path, index=False), or save it as Parquet"
                )
                raise DataFileError(
                    f"data file '{path}' looks {SEPARATOR_NAMES[other]}-delimited; its header "
                    f"{show_value(line, 60)} has no {expected} separator, which this extension "
                    f"requires: {hint}"
                )
    names = [n.strip() for n in next(csv.reader(io.StringIO(line), delimiter=sep))]
    check_duplicate_columns(pd.Index(names), source=f"data file '{path}'")
    unnamed = [i + 1 for i, n in enumerate(names) if not n]
    if unnamed:
        raise ColumnError(
            f"data file '{path}' has no name for column(s) {', '.join(map(str, unnamed))} of its "
            "header; name every column (a trailing delimiter or pandas' to_csv(index=True) "
            "leaves an unnamed one: write with index=False)"
        )


@contextlib.contextmanager
def csv_parse_errors(path: Path, sep: str) -> Iterator[None]:
    """pandas' CSV parser failures inside the block as one-line :class:`DataFileError`.

    Extra fields in a row become an error rather than pandas' warning, so a stray separator never
    silently shifts columns. Used by :func:`read_table` and the streaming encoder alike;
    ``EmptyDataError`` passes through (an empty file is an error for one, the end for the other).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            yield
        except pd.errors.ParserWarning:
            raise DataFileError(
                f"data file '{path}' has rows with more fields than its header; check for stray "
                f"{SEPARATOR_NAMES[sep]} separators or an unnamed index column"
            ) from None
        except pd.errors.EmptyDataError:
            raise
        except pd.errors.ParserError as exc:
            detail = str(exc).strip().splitlines()[0]
            raise DataFileError(
                f"data file '{path}' cannot be parsed ({detail}); fix that line (stray separator "
                "or unbalanced quote)"
            ) from None
        except UnicodeDecodeError as exc:
            raise DataFileError(
                f"data file '{path}' is not UTF-8 text ({exc.reason}); save it as UTF-8 or Parquet"
            ) from None


def _read_csv(path: Path, sep: str) -> pd.DataFrame:
    check_csv_header(path, sep)
    try:
        with csv_parse_errors(path, sep):
            frame = pd.read_csv(
                path,
                sep=sep,
                skipinitialspace=True,
                index_col=False,
                low_memory=False,
                encoding="utf-8-sig",
            )
    except pd.errors.EmptyDataError:
        raise DataFileError(f"data file '{path}' is empty; pass a table with data") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    for column in frame.columns:
        series = frame[column]
        if pd.api.types.is_string_dtype(series.dtype) or series.dtype == object:
            stripped = series.str.strip()
            frame[column] = stripped.mask(stripped == "")
    return frame


def _read_parquet(path: Path) -> pd.DataFrame:
    def unreadable(exc: Exception) -> DataFileError:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return DataFileError(
            f"data file '{path}' is not a readable Parquet file ({detail}); re-export it, or pass "
            "a CSV"
        )

    try:
        names = pq.read_schema(path).names
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise unreadable(exc) from None
    # Checked before pandas reads it: pandas/pyarrow fail on repeated names obscurely.
    check_duplicate_columns(pd.Index(names), source=f"data file '{path}'")
    try:
        return pd.read_parquet(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise unreadable(exc) from None



def check_table_file(path: Path) -> tuple[str | None, bool]:
    """Refuse a path that cannot be a table before any row is read.

    Returns (CSV separator or None, is Parquet). Shared by :func:`read_table` and the streaming
    encoder, so both refuse the same files with the same words.
    """
    if not path.exists():
        raise DataFileError(f"data file '{path}' does not exist; check the path")
    if path.is_dir():
        raise DataFileError(f"data file '{path}' is a directory; pass a table file ({_SUPPORTED})")
    sep = _csv_separator(path)
    is_parquet = path.name.lower().endswith(_PARQUET_SUFFIXES)
    if sep is None and not is_parquet:
        raise DataFileError(
            f"data file '{path}' has an unsupported extension; supported: {_SUPPORTED}"
        )
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DataFileError(f"data file '{path}' cannot be read ({exc})") from None
    if size == 0:
        raise DataFileError(f"data file '{path}' is empty (0 bytes); pass a table with data")
    return sep, is_parquet

def read_table(path: str | Path) -> pd.DataFrame:
    """Read ``.csv``, ``.csv.gz``, ``.tsv`` (``.tsv.gz``) or ``.parquet`` (``.pq``) into a frame.

    CSV cells are stripped of surrounding whitespace (``skipinitialspace`` handles UCI's ``", "``
    separators) and blank cells become missing. Pandas' default missing-value markers apply
    (``NA``, ``NaN``, ``null``, empty). No spec is needed here; see :func:`load_table`.
    """
    path = Path(path).expanduser()
    sep, is_parquet = check_table_file(path)
    frame = _read_parquet(path) if is_parquet else _read_csv(path, sep)  # type: ignore[arg-type]
    if len(frame) == 0:
        raise DataFileError(
            f"data file '{path}' has a header but no data rows; pass a table with data"
        )
    return frame


def load_table(path: str | Path, spec: TableSpec) -> pd.DataFrame:
    """Read a table file and validate it against ``spec`` (see :func:`validate_table`)."""
    frame = read_table(path)
    return validate_table(frame, spec, source=str(path))
