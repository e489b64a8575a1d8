"""read_table / load_table / validate_table: every failure is one typed line naming the culprit."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shared.data import TableSpec, load_table, read_table, validate_table
from shared.errors import (
    ColumnError,
    DataError,
    DataFileError,
    LabelError,
    ValueRangeError,
)

Writer = Callable[..., Path]


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


# -- successful reads -----------------------------------------------------------------------------
def test_csv_round_trip_and_uci_style_whitespace(write_csv: Writer, spec: TableSpec) -> None:
    path = write_csv("age, color , grade,y,s\n39, red ,1, 0, F\n50,  blue, 2 ,1,M\n")
    frame = load_table(path, spec)
    assert list(frame.columns) == ["age", "color", "grade", "y", "s"]
    assert frame["color"].tolist() == ["red", "blue"]
    assert frame["s"].tolist() == ["F", "M"]
    assert frame["age"].tolist() == [39, 50]
    assert frame["grade"].tolist() == [1, 2]


def test_csv_gz_tsv_and_parquet(tmp_path: Path, frame: pd.DataFrame, spec: TableSpec) -> None:
    with gzip.open(tmp_path / "t.csv.gz", "wt") as handle:
        frame.to_csv(handle, index=False)
    frame.to_csv(tmp_path / "t.tsv", sep="\t", index=False)
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    for name in ("t.csv.gz", "t.tsv", "t.parquet"):
        loaded = load_table(tmp_path / name, spec)
        pd.testing.assert_frame_equal(loaded, frame, check_dtype=False)


def test_numeric_text_in_parquet_is_converted(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": ["1.5", "2"], "y": [0, 1], "s": [1, 0]}, dtype=object)
    frame["y"] = frame["y"].astype(int)
    frame.to_parquet(tmp_path / "t.parquet")
    loaded = load_table(tmp_path / "t.parquet", TableSpec("y", ["s"]))
    assert loaded["a"].dtype == np.float64
    assert loaded["a"].tolist() == [1.5, 2.0]


# -- file-level failures --------------------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataFileError) as info:
        read_table(tmp_path / "absent.csv")
    assert "absent.csv' does not exist" in _one_line(info.value)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="is a directory; pass a table file"):
        read_table(tmp_path)


def test_empty_file(write_csv: Writer) -> None:
    path = write_csv("")
    with pytest.raises(DataFileError) as info:
        read_table(path)
    assert f"'{path}' is empty (0 bytes)" in _one_line(info.value)


def test_blank_lines_only(write_csv: Writer) -> None:
    with pytest.raises(DataFileError, match="is empty"):
        read_table(write_csv("\n\n  \n"))


def test_header_without_rows(write_csv: Writer) -> None:
    path = write_csv("a,b,y\n")
    with pytest.raises(DataFileError, match=r"table\.csv' has a header but no data rows"):
        read_table(path)


def test_unreadable_parquet(write_csv: Writer) -> None:
    path = write_csv("this is not parquet", name="t.parquet")
    with pytest.raises(DataFileError) as info:
        read_table(path)
    assert "t.parquet' is not a readable Parquet file" in _one_line(info.value)


def test_unsupported_extension(write_csv: Writer) -> None:
    with pytest.raises(DataFileError, match=r"unsupported extension; supported: \.csv"):
        read_table(write_csv("a,b\n1,2\n", name="t.xlsx"))


def test_semicolon_file_read_as_csv(write_csv: Writer) -> None:
    path = write_csv("age;color;y;s\n1;red;0;F\n2;blue;1;M\n")
    with pytest.raises(DataFileError) as info:
        read_table(path)
    message = _one_line(info.value)
    assert "looks ';'-delimited" in message and str(path) in message
    assert "sep=';'" in message


def test_tab_file_read_as_csv(write_csv: Writer) -> None:
    with pytest.raises(DataFileError, match="looks tab-delimited.*rename it to .tsv"):
        read_table(write_csv("a\tb\n1\t2\n"))


def test_comma_file_read_as_tsv(write_csv: Writer) -> None:
    with pytest.raises(DataFileError, match="looks ','-delimited.*rename it to .csv"):
        read_table(write_csv("a,b\n1,2\n", name="t.tsv"))


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("a,b\n\xe9t\xe9,1\n".encode("latin-1"))
    with pytest.raises(DataFileError, match="is not UTF-8 text"):
        read_table(path)


def test_bad_gzip(write_csv: Writer) -> None:
    with pytest.raises(DataFileError, match="not a valid gzip file"):
        read_table(write_csv("a,b\n1,2\n", name="t.csv.gz"))


def test_row_with_too_many_fields(write_csv: Writer) -> None:
    with pytest.raises(DataFileError, match=r"cannot be parsed \(.*line 3.*\)"):
        read_table(write_csv("a,b\n1,2\n3,4,5\n"))


def test_every_row_one_field_too_many(write_csv: Writer) -> None:
    with pytest.raises(DataFileError, match="more fields than its header"):
        read_table(write_csv("a,b\n1,2,3\n4,5,6\n"))


def test_duplicated_column_names_in_csv(write_csv: Writer) -> None:
    with pytest.raises(ColumnError) as info:
        read_table(write_csv("age,y,age\n1,0,2\n"))
    assert "duplicated column name(s): 'age' at columns 1, 3" in _one_line(info.value)


def test_duplicated_column_names_in_parquet(tmp_path: Path) -> None:
    table = pa.table([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"])
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(ColumnError, match="duplicated column name.*'a' at columns 1, 2"):
        read_table(tmp_path / "t.parquet")


def test_duplicated_column_names_in_frame(spec: TableSpec) -> None:
    frame = pd.DataFrame([[1, 2, 0, "F"]], columns=["age", "age", "y", "s"])
    with pytest.raises(ColumnError, match="'age' at columns 1, 2"):
        validate_table(frame, spec)


def test_unnamed_column(write_csv: Writer) -> None:
    with pytest.raises(ColumnError, match="no name for column.* 1.*index=False"):
        read_table(write_csv(",a,y\n0,1,0\n1,2,1\n"))


# -- column and value failures --------------------------------------------------------------------
def test_missing_required_column(write_csv: Writer, frame: pd.DataFrame) -> None:
    path = write_csv(frame.drop(columns=["s"]))
    with pytest.raises(ColumnError) as info:
        load_table(path, TableSpec("y", ["s"], categorical=["color", "grade"]))
    message = _one_line(info.value)
    assert str(path) in message
    assert "missing required column(s) 's' (sensitive)" in message
    assert "available columns: age, income_k, color, grade, y" in message


def test_missing_feature_and_label_columns(frame: pd.DataFrame) -> None:
    spec = TableSpec("target", ["s"], features=["age", "height"])
    with pytest.raises(ColumnError, match=r"'target' \(label\), 'height' \(feature\)"):
        validate_table(frame, spec, source="site.csv")


def test_text_in_numeric_feature_names_column_value_row(
    write_csv: Writer, frame: pd.DataFrame, spec: TableSpec
) -> None:
    frame = frame.astype({"age": object})
    frame.loc[16, "age"] = "abc"
    path = write_csv(frame)
    with pytest.raises(ValueRangeError) as info:
        load_table(path, spec)
    message = _one_line(info.value)
    assert f"column 'age' in {path} holds non-numeric value 'abc' at data row 17" in message
    assert "list 'age' in categorical" in message


@pytest.mark.parametrize(
    ("cell", "needle"),
    [
        ("", "missing value (empty cell or NaN) at data row 5"),
        ("NaN", "missing value (empty cell or NaN) at data row 5"),
        ("inf", "infinite value (inf) at data row 5"),
        ("-inf", "infinite value (-inf) at data row 5"),
        ("1e13", "holds 1e+13 at data row 5, beyond the supported magnitude 1e+12"),
    ],
)
def test_bad_numeric_cells(
    write_csv: Writer, frame: pd.DataFrame, spec: TableSpec, cell: str, needle: str
) -> None:
    frame = frame.astype({"income_k": object})
    frame.loc[4, "income_k"] = cell
    path = write_csv(frame)
    with pytest.raises(ValueRangeError) as info:
        load_table(path, spec)
    message = _one_line(info.value)
    assert f"column 'income_k' in {path}" in message
    assert needle in message


def test_missing_label_value(write_csv: Writer, frame: pd.DataFrame, spec: TableSpec) -> None:
    frame = frame.astype({"y": object})
    frame.loc[2, "y"] = None
    with pytest.raises(ValueRangeError, match="column 'y' .* missing value .* data row 3"):
        load_table(write_csv(frame), spec)


def test_missing_categorical_value(frame: pd.DataFrame, spec: TableSpec) -> None:
    frame.loc[7, "color"] = None
    with pytest.raises(ValueRangeError, match="column 'color' in t.csv has a missing .* row 8"):
        validate_table(frame, spec, source="t.csv")


def test_label_with_one_class(write_csv: Writer, frame: pd.DataFrame, spec: TableSpec) -> None:
    frame["y"] = 1
    path = write_csv(frame)
    with pytest.raises(LabelError) as info:
        load_table(path, spec)
    message = _one_line(info.value)
    assert f"label column 'y' in {path} has a single class (1) in all 40 rows" in message


def test_sensitive_with_one_class(frame: pd.DataFrame, spec: TableSpec) -> None:
    frame["s"] = "F"
    with pytest.raises(LabelError, match="sensitive column 's' in t has a single class \\('F'\\)"):
        validate_table(frame, spec, source="t")


def test_continuous_label_is_refused(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {"a": rng.normal(size=1500), "y": rng.normal(size=1500), "s": [0, 1] * 750}
    )
    with pytest.raises(LabelError, match="1500 distinct values .* looks continuous"):
        validate_table(frame, TableSpec("y", ["s"]))


def test_inf_label(frame: pd.DataFrame, spec: TableSpec) -> None:
    frame["y"] = frame["y"].astype(float)
    frame.loc[3, "y"] = np.inf
    with pytest.raises(ValueRangeError, match="label column 'y' .* infinite value at data row 4"):
        validate_table(frame, spec)


def test_no_rows_and_not_a_frame(frame: pd.DataFrame, spec: TableSpec) -> None:
    with pytest.raises(DataFileError, match="has no data rows"):
        validate_table(frame.iloc[:0], spec)
    with pytest.raises(DataError, match="must be a pandas DataFrame"):
        validate_table([[1, 2]], spec)  # type: ignore[arg-type]


def test_string_feature_not_marked_categorical(frame: pd.DataFrame) -> None:
    with pytest.raises(ValueRangeError, match="column 'color' .* non-numeric value"):
        validate_table(frame, TableSpec("y", ["s"], categorical=["grade"]))


def test_categorical_column_absent_with_default_features(frame: pd.DataFrame) -> None:
    spec = TableSpec("y", ["s"], categorical=["color", "zone"])
    with pytest.raises(ColumnError, match=r"'zone' \(feature\)"):
        validate_table(frame, spec)


def test_validate_does_not_modify_input(frame: pd.DataFrame, spec: TableSpec) -> None:
    frame = frame.astype({"age": str})
    before = frame.copy()
    out = validate_table(frame, spec)
    pd.testing.assert_frame_equal(frame, before)
    assert out["age"].dtype == np.float64
