"""shared.encode.encode_table: chunked, in order, z + label only, nothing left on failure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shared.data import TableSpec
from shared.encode import encode_table, z_names
from shared.errors import (
    CategoryError,
    ConfigError,
    DataFileError,
    LabelError,
    SchemaMismatchError,
    ValueRangeError,
)
from shared.pipeline import Encoder, encoder_from_fitted, fit_shaper

N = 1000


def _frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.integers(-5, 5, size=n),
            "c": rng.choice(["red", "green", "blue"], size=n),
            "y": rng.choice(["no", "yes"], size=n),
            "s": rng.integers(0, 2, size=n),
        }
    )


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    spec = TableSpec(label="y", sensitive=["s"], categorical=["c"])
    fitted = fit_shaper(_frame(300, seed=1), spec, shaper="random-encoder", seed=3)
    return encoder_from_fitted(fitted)


@pytest.fixture
def frame() -> pd.DataFrame:
    return _frame(N)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_parquet_round_trip_matches_whole_table_in_order(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    src = tmp_path / "site.parquet"
    frame.to_parquet(src)
    out = tmp_path / "release.parquet"
    seen: list[tuple[int, int | None]] = []
    result = encode_table(
        encoder, src, out, chunk_rows=128, progress=lambda d, t: seen.append((d, t))
    )

    table = pq.read_table(out)
    assert table.column_names == [*z_names(encoder.n_components), "y"]
    assert all(table.schema.field(n).type == pa.float32() for n in table.column_names[:-1])
    got = table.to_pandas()
    expected = encoder.encode_features(frame)
    np.testing.assert_allclose(got[table.column_names[:-1]].to_numpy(), expected, rtol=1e-6)
    assert got["y"].tolist() == frame["y"].tolist()  # the label as in the input, in input order
    assert result["rows"] == N and result["chunks"] == 8
    assert result["columns"] == table.column_names and result["output"] == str(out)
    assert result["rows_per_second"] > 0
    assert seen[-1] == (N, N) and len(seen) == 8
    assert _leftovers(tmp_path) == []


def test_csv_round_trip_chunks_and_cleaning(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    src = tmp_path / "site.csv"
    padded = frame.assign(c=" " + frame["c"] + " ")  # read_table strips cells; so must we
    padded.to_csv(src, index=False)
    out = tmp_path / "release.parquet"
    result = encode_table(encoder, src, out, chunk_rows=300)
    got = pd.read_parquet(out)
    assert list(got.columns) == ["z_0", "z_1", "z_2", "y"]
    np.testing.assert_allclose(
        got[["z_0", "z_1", "z_2"]].to_numpy(), encoder.encode_features(frame), rtol=1e-5, atol=1e-6
    )
    assert got["y"].tolist() == frame["y"].tolist()
    assert result["chunks"] == 4 and result["rows"] == N


def test_tsv_and_integer_label_type_kept(encoder: Encoder, tmp_path: Path) -> None:
    spec = TableSpec(label="y", sensitive=["s"])
    train = _frame(200).assign(y=lambda f: (f["a"] > 0).astype(int)).drop(columns="c")
    enc = encoder_from_fitted(fit_shaper(train, spec, shaper="random-encoder"))
    src = tmp_path / "site.tsv"
    train.to_csv(src, sep="\t", index=False)
    out = tmp_path / "out.pq"
    encode_table(enc, src, out, chunk_rows=64)
    table = pq.read_table(out)
    assert table.schema.field("y").type == pa.int64()
    assert table.column("y").to_pylist() == train["y"].tolist()


def test_nan_row_number_is_absolute_and_nothing_is_left(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    frame.loc[612, "a"] = np.nan
    src = tmp_path / "site.parquet"
    frame.to_parquet(src)
    out = tmp_path / "release.parquet"
    out.write_bytes(b"previous release")  # an existing output must survive a failed encode
    with pytest.raises(ValueRangeError, match=r"'a'.*data row 613 \(1 missing in data rows"):
        encode_table(encoder, src, out, chunk_rows=100)
    assert out.read_bytes() == b"previous release"
    assert _leftovers(tmp_path) == []


def test_unseen_category_in_a_late_chunk(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    frame.loc[901, "c"] = "purple"
    src = tmp_path / "site.csv"
    frame.to_csv(src, index=False)
    out = tmp_path / "sub" / "release.parquet"
    with pytest.raises(CategoryError, match=r"'c'.*'purple' at data row 902"):
        encode_table(encoder, src, out, chunk_rows=250)
    assert not out.exists() and not out.parent.exists()  # the created directory is gone too


def test_unseen_label_and_text_in_numeric_column(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    bad_label = frame.copy()
    bad_label.loc[5, "y"] = "maybe"
    src = tmp_path / "label.csv"
    bad_label.to_csv(src, index=False)
    with pytest.raises(LabelError, match="'maybe' at data row 6"):
        encode_table(encoder, src, tmp_path / "o.parquet", chunk_rows=400)

    text = frame.astype({"b": object})
    text.loc[777, "b"] = "seven"
    src = tmp_path / "text.csv"
    text.to_csv(src, index=False)
    with pytest.raises(ValueRangeError, match=r"'b'.*'seven' at data row 778"):
        encode_table(encoder, src, tmp_path / "o.parquet", chunk_rows=400)
    assert not (tmp_path / "o.parquet").exists()


def test_null_in_parquet_integer_feature(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    b = pa.array([None if i == 42 else v for i, v in enumerate(frame["b"])], type=pa.int64())
    table = table.set_column(table.schema.get_field_index("b"), "b", b)
    src = tmp_path / "null.parquet"
    pq.write_table(table, src)
    with pytest.raises(ValueRangeError, match="'b'.*data row 43"):
        encode_table(encoder, src, tmp_path / "o.parquet")


@pytest.mark.parametrize("drop", ["a", "c", "y"])
def test_missing_columns_refused_before_reading_rows(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path, drop: str
) -> None:
    src = tmp_path / "site.parquet"
    frame.drop(columns=drop).to_parquet(src)
    with pytest.raises(SchemaMismatchError, match=repr(drop)):
        encode_table(encoder, src, tmp_path / "o.parquet")
    assert not (tmp_path / "o.parquet").exists()


def test_sensitive_and_extra_columns_never_written(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    src = tmp_path / "site.parquet"
    frame.assign(patient_id=np.arange(N), note=["x"] * N).to_parquet(src)
    encode_table(encoder, src, tmp_path / "o.parquet")
    assert pq.read_schema(tmp_path / "o.parquet").names == ["z_0", "z_1", "z_2", "y"]


def test_empty_and_header_only_inputs(encoder: Encoder, tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataFileError, match="empty"):
        encode_table(encoder, empty, tmp_path / "o.parquet")
    header = tmp_path / "header.csv"
    header.write_text("a,b,c,y,s\n")
    with pytest.raises(DataFileError, match="header but no data rows"):
        encode_table(encoder, header, tmp_path / "o.parquet")
    no_rows = tmp_path / "none.parquet"
    _frame(0).to_parquet(no_rows)
    with pytest.raises(DataFileError, match="header but no data rows"):
        encode_table(encoder, no_rows, tmp_path / "o.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.csv", "header.csv", "none.parquet"]


def test_wrong_delimiter_and_bad_paths(
    encoder: Encoder, frame: pd.DataFrame, tmp_path: Path
) -> None:
    semi = tmp_path / "semi.csv"
    frame.to_csv(semi, sep=";", index=False)
    with pytest.raises(DataFileError, match="';'-delimited"):
        encode_table(encoder, semi, tmp_path / "o.parquet")
    with pytest.raises(DataFileError, match="does not exist"):
        encode_table(encoder, tmp_path / "missing.csv", tmp_path / "o.parquet")
    with pytest.raises(DataFileError, match="is a directory"):
        encode_table(encoder, tmp_path, tmp_path / "o.parquet")
    txt = tmp_path / "site.txt"
    txt.write_text("a,b\n1,2\n")
    with pytest.raises(DataFileError, match="unsupported extension"):
        encode_table(encoder, txt, tmp_path / "o.parquet")


def test_output_path_checks(encoder: Encoder, frame: pd.DataFrame, tmp_path: Path) -> None:
    src = tmp_path / "site.parquet"
    frame.to_parquet(src)
    with pytest.raises(ConfigError, match=r"must end in \.parquet"):
        encode_table(encoder, src, tmp_path / "out.csv")
    with pytest.raises(ConfigError, match="is the input file"):
        encode_table(encoder, src, src)
    (tmp_path / "d.parquet").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        encode_table(encoder, src, tmp_path / "d.parquet")
    with pytest.raises(ConfigError, match="chunk_rows"):
        encode_table(encoder, src, tmp_path / "o.parquet", chunk_rows=0)


def test_csv_with_more_fields_than_header(encoder: Encoder, tmp_path: Path) -> None:
    src = tmp_path / "ragged.csv"
    rows = ["a,b,c,y,s"] + [f"{i / 10},{i % 3},red,yes,{i % 2}" for i in range(50)]
    rows[30] += ",extra"
    src.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataFileError, match="more fields than its header|cannot be parsed"):
        encode_table(encoder, src, tmp_path / "o.parquet", chunk_rows=10)
    assert not (tmp_path / "o.parquet").exists()
