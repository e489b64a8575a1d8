"""Encode a site's table with a verified encoder, chunk by chunk, into a release Parquet file.

A hospital may hold tens of millions of rows, so :func:`encode_table` never holds more than one
chunk: it streams the input (CSV with ``pandas.read_csv(chunksize=...)``, Parquet with
``pyarrow.parquet.ParquetFile.iter_batches``), validates and encodes each chunk through
:meth:`shared.pipeline.Encoder.encode_frame` (schema check, NaN / inf / text / unseen categories /
unseen labels as typed errors), and appends ``z_0 … z_{k-1}`` (float32) and the label column (as
in the input) to a ``ParquetWriter``. Nothing else is ever written: the sensitive columns and the
raw features are not even read where the format allows it (Parquet reads only the columns it needs).

The output is written to a temporary file beside the target and renamed into place only when every
chunk succeeded (:func:`shared.atomic.atomic_path`), so a refused table leaves no partial file.
Error messages name the file, column, value and the *absolute* data row (rows counted from 1 over
the whole file, header excluded), as :func:`shared.data.read_table` does for whole tables.

CSV parsing follows :func:`shared.data.read_table`: the delimiter comes from the extension and is
checked against the header, cells are stripped of surrounding whitespace, blank cells are missing.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits

from shared.atomic import atomic_path
from shared.data.loaders import (
    check_csv_header,
    check_duplicate_columns,
    check_table_file,
    csv_parse_errors,
    first_line,
)
from shared.errors import (
    ConfigError,
    DataError,
    DataFileError,
    SchemaMismatchError,
    ValueRangeError,
)

if TYPE_CHECKING:  # the pipeline pulls in the shapers (torch); only its type is needed here
    from shared.pipeline import Encoder

__all__ = ["DEFAULT_CHUNK_ROWS", "OUTPUT_SUFFIXES", "ProgressCallback", "encode_table", "z_names"]

#: Rows per chunk: ~20 MB of float64 for 10 features, large enough to amortise per-chunk overhead.
DEFAULT_CHUNK_ROWS = 262_144
#: The output is Parquet; refusing other names catches ``--out release.csv`` mistakes.
OUTPUT_SUFFIXES = (".parquet", ".pq")

#: ``progress(rows_done, total_rows)``; ``total_rows`` is ``None`` when unknown (CSV).
ProgressCallback = Callable[[int, int | None], None]

_ROW = re.compile(r"data row (\d+)")
_COUNTS = re.compile(r"\((\d+) (missing in all|such rows)\)")


def z_names(k: int) -> list[str]:
    """Output column names of a k-dimensional encoding: ``z_0 … z_{k-1}``."""
    return [f"z_{i}" for i in range(k)]


@dataclass
class _Source:
    """An opened input: its column names, total rows if known, and a chunk iterator factory."""

    path: Path
    columns: list[str]
    total_rows: int | None
    chunks: Callable[[list[str], int], Iterator[tuple[pd.DataFrame, pa.Array]]]


# ---------------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------------
def _open_source(path: Path, label: str, numeric: set[str]) -> _Source:
    """Check the input file as :func:`shared.data.read_table` does, without reading its rows."""
    sep, is_parquet = check_table_file(path)
    if is_parquet:
        return _open_parquet(path, label, numeric)
    assert sep is not None
    return _open_csv(path, sep, label)


def _parquet_unreadable(path: Path, exc: Exception) -> DataFileError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DataFileError(
        f"data file '{path}' is not a readable Parquet file ({detail}); re-export it, or pass a CSV"
    )


def _open_parquet(path: Path, label: str, numeric: set[str]) -> _Source:
    try:
        # Streamed page by page: pre-buffering a whole row group cost ~4x the memory for no speed.
        handle = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
        schema = handle.schema_arrow
        names = list(schema.names)
        total = int(handle.metadata.num_rows)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _parquet_unreadable(path, exc) from None
    check_duplicate_columns(pd.Index(names), source=f"data file '{path}'")

    def chunks(columns: list[str], chunk_rows: int) -> Iterator[tuple[pd.DataFrame, pa.Array]]:
        # Only the columns the encoder needs are decoded: S and unused columns are never read.
        fast = [c for c in columns if c in numeric and _plain_number(schema.field(c).type)]
        batches = handle.iter_batches(batch_size=chunk_rows, columns=columns, use_threads=True)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise _parquet_unreadable(path, exc) from None
            if batch.num_rows == 0:
                continue
            yield _batch_frame(batch, fast), batch.column(batch.schema.get_field_index(label))

    return _Source(path, names, total, chunks)


def _plain_number(dtype: pa.DataType) -> bool:
    return pa.types.is_floating(dtype) or pa.types.is_integer(dtype)


def _batch_frame(batch: pa.RecordBatch, numeric: list[str]) -> pd.DataFrame:
    """A record batch as a DataFrame whose numeric features share one column-major float64 block.

    That is the layout ``InputSchema.transform`` reads without a copy (``frame.to_numpy()`` of a
    single F-ordered block is a view), and it costs one pass per column instead of pandas' generic
    conversion plus a consolidation. Nulls become NaN and are refused by the schema with their row.
    """
    if not numeric:
        return batch.to_pandas()
    block = np.empty((len(numeric), batch.num_rows), dtype=np.float64)
    for j, name in enumerate(numeric):
        block[j] = batch.column(name).to_numpy(zero_copy_only=False)
    frame = pd.DataFrame(block.T, columns=numeric, copy=False)
    rest = [name for name in batch.schema.names if name not in set(numeric)]
    if rest:
        others = pa.RecordBatch.from_arrays([batch.column(n) for n in rest], names=rest)
        for name, series in others.to_pandas().items():
            frame[name] = series  # a new block per column; the float block is not copied
    return frame


def _open_csv(path: Path, sep: str, label: str) -> _Source:
    check_csv_header(path, sep)  # wrong delimiter, duplicated or unnamed columns: refused here
    header = first_line(path)
    names = [n.strip() for n in next(csv.reader(io.StringIO(header), delimiter=sep))]

    def chunks(columns: list[str], chunk_rows: int) -> Iterator[tuple[pd.DataFrame, pa.Array]]:
        del columns  # a CSV is parsed whole, row by row; the encoder ignores unused columns
        try:
            reader = pd.read_csv(
                path,
                sep=sep,
                skipinitialspace=True,
                index_col=False,
                encoding="utf-8-sig",
                chunksize=chunk_rows,
                # Every column is parsed (no usecols): pandas then notices rows with more fields
                # than the header, which a stray separator in any column produces.
            )
        except pd.errors.EmptyDataError:
            raise DataFileError(f"data file '{path}' is empty; pass a table with data") from None
        label_type: pa.DataType | None = None
        with reader:
            while True:
                frame = _next_csv_chunk(reader, path, sep)
                if frame is None:
                    return
                if len(frame) == 0:
                    continue
                frame = _clean_csv_chunk(frame)
                labels = pa.Array.from_pandas(frame[label])
                if label_type is None:
                    label_type = labels.type
                elif labels.type != label_type:
                    labels = _cast_labels(labels, label_type, path, label)
                yield frame, labels

    return _Source(path, names, None, chunks)


def _next_csv_chunk(reader: Any, path: Path, sep: str) -> pd.DataFrame | None:
    """The next chunk (``None`` at the end), parser failures as one-line :class:`DataFileError`."""
    try:
        with csv_parse_errors(path, sep):
            return next(reader)
    except (StopIteration, pd.errors.EmptyDataError):
        return None


def _clean_csv_chunk(frame: pd.DataFrame) -> pd.DataFrame:
    """What :func:`shared.data.read_table` does to a CSV: strip names and text cells, blank = NA."""
    frame.columns = [str(c).strip() for c in frame.columns]
    for column in frame.columns:
        series = frame[column]
        if pd.api.types.is_string_dtype(series.dtype) or series.dtype == object:
            stripped = series.str.strip()
            frame[column] = stripped.mask(stripped == "")
    return frame


def _cast_labels(labels: pa.Array, target: pa.DataType, path: Path, label: str) -> pa.Array:
    """Keep one label type across CSV chunks (pandas infers each chunk's dtype on its own)."""
    try:
        return labels.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ValueRangeError(
            f"label column {label!r} in data file '{path}' changes type part-way through the file "
            f"({target} first, then {labels.type}); make the column's values one type"
        ) from None


# ---------------------------------------------------------------------------------------------
# Errors with absolute row numbers
# ---------------------------------------------------------------------------------------------
def _absolute_rows(exc: DataError, first_row: int, n_rows: int, partial: bool) -> DataError:
    """The same error with chunk-relative row numbers turned into file-wide ones.

    ``first_row`` is the 0-based file row of the chunk's first row. Counts the data layer reports
    "in all" only cover this chunk when the file has more rows, so they are qualified.
    """
    message = _ROW.sub(lambda m: f"data row {int(m.group(1)) + first_row}", str(exc))
    if partial:
        span = f"data rows {first_row + 1}-{first_row + n_rows}"
        message = _COUNTS.sub(
            lambda m: f"({m.group(1)} {m.group(2).replace(' in all', '')} in {span})", message
        )
    shifted = type(exc)(message)
    return shifted


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def _check_output(output: Path, source: Path) -> None:
    if not output.name.lower().endswith(OUTPUT_SUFFIXES):
        raise ConfigError(
            f"output '{output}' must end in .parquet (the encoded table is written as Parquet)"
        )
    if output.is_dir():
        raise ConfigError(f"output '{output}' is a directory; pass a file path such as out.parquet")
    with contextlib.suppress(OSError):
        if output.exists() and output.resolve() == source.resolve():
            raise ConfigError(
                f"output '{output}' is the input file; write the encoded table to another path"
            )
    if output.parent.exists() and not output.parent.is_dir():
        raise ConfigError(f"output directory '{output.parent}' is a file, not a directory")


@contextlib.contextmanager
def _output_parent(output: Path) -> Iterator[None]:
    """Create the output's parent directories; remove the ones created here if encoding fails."""
    created: list[Path] = []
    parent = output.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        for directory in reversed(created):
            directory.mkdir()
    except OSError as exc:
        raise ConfigError(f"cannot create output directory '{output.parent}': {exc}") from None
    try:
        yield
    except BaseException:
        for directory in created:
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def _chunk_table(z: np.ndarray, labels: pa.Array, names: list[str]) -> pa.Table:
    columns = np.ascontiguousarray(z.T, dtype=np.float32)  # one copy; each row is a column
    arrays = [pa.array(columns[i]) for i in range(columns.shape[0])]
    return pa.Table.from_arrays([*arrays, labels], names=names)


# ---------------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------------
def encode_table(
    encoder: Encoder,
    input_path: str | Path,
    output_path: str | Path,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Encode the table at ``input_path`` into ``output_path`` (Parquet), one chunk at a time.

    ``encoder`` must come from a *verified* bundle (``open_bundle(EncoderBundle.load(...))``).
    The output holds ``z_0 … z_{k-1}`` (float32) and the label column with its input type, rows in
    input order, and nothing else. Returns ``{rows, chunks, seconds, rows_per_second, output,
    columns, input, fingerprint}``.

    Raises :class:`~shared.errors.DataFileError` (missing, empty, header-only, unreadable, wrong
    delimiter), :class:`~shared.errors.SchemaMismatchError` (a column the bundle needs is missing),
    ``ValueRangeError`` / ``CategoryError`` / ``LabelError`` (bad cells, with the absolute row),
    :class:`~shared.errors.ConfigError` (bad output path or ``chunk_rows``). On any failure no
    output file is left behind and an existing ``output_path`` is untouched.
    """
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be an integer >= 1; got {chunk_rows!r}")
    source_path = Path(input_path).expanduser()
    output = Path(output_path).expanduser()
    _check_output(output, source_path)
    label = encoder.label
    names = [*z_names(encoder.n_components), label]
    if label in names[:-1]:
        raise ConfigError(
            f"the bundle's label column is named {label!r}, like an output column of the "
            "encoding; rename the label and retrain"
        )

    numeric = set(encoder.schema.features) - set(encoder.schema.categories)
    source = _open_source(source_path, label, numeric)
    where = f"data file '{source_path}'"
    header = pd.DataFrame(columns=source.columns)
    encoder.check_table(header, source=where)  # SchemaMismatchError before any row is read
    if label not in source.columns:
        raise SchemaMismatchError(
            f"{where} has no label column {label!r}, which the bundle's input schema releases "
            f"with the encoding; available columns: {', '.join(source.columns)}"
        )
    if source.total_rows == 0:
        raise DataFileError(f"{where} has a header but no data rows; pass a table with data")
    wanted = set(encoder.schema.features) | {label}
    needed = [c for c in source.columns if c in wanted]  # file order: what the reader expects

    started = time.perf_counter()
    rows = 0
    n_chunks = 0
    # One BLAS thread: the encoder's matrices are tiny (10 x 10), and OpenBLAS' spinning worker
    # threads made its products ~10x slower on a busy 2-core machine.
    with (
        threadpool_limits(limits=1, user_api="blas"),
        _output_parent(output),
        atomic_path(output) as tmp,
    ):
        writer: pq.ParquetWriter | None = None
        try:
            for frame, labels in source.chunks(needed, chunk_rows):
                n = len(frame)
                try:
                    z, _ = encoder.encode_frame(frame, source=where)
                except DataError as exc:
                    partial = source.total_rows != n or n == chunk_rows
                    raise _absolute_rows(exc, rows, n, partial) from None
                table = _chunk_table(z, labels, names)
                if writer is None:
                    # No dictionary for z: distinct floats make pyarrow build (and drop) a
                    # dictionary per page, which was 6x the cost of writing them plainly.
                    writer = pq.ParquetWriter(
                        tmp, table.schema, compression="snappy", use_dictionary=[label]
                    )
                writer.write_table(table)
                rows += n
                n_chunks += 1
                if progress is not None:
                    progress(rows, source.total_rows)
        finally:
            if writer is not None:
                writer.close()
        if rows == 0:
            raise DataFileError(f"{where} has a header but no data rows; pass a table with data")
    seconds = time.perf_counter() - started
    return {
        "input": str(source_path),
        "output": str(output),
        "rows": rows,
        "chunks": n_chunks,
        "columns": names,
        "seconds": round(seconds, 4),
        "rows_per_second": round(rows / seconds, 1) if seconds > 0 else None,
        "fingerprint": encoder.fingerprint,
    }
