"""InputSchema: fitted one-hot + standardisation, strict re-checking, JSON round-trip, speed."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.data import InputSchema, TableSpec, fingerprint_frame
from shared.errors import CategoryError, ColumnError, ConfigError, LabelError, ValueRangeError


@pytest.fixture
def schema(frame: pd.DataFrame, spec: TableSpec) -> InputSchema:
    return InputSchema.fit(frame, spec)


def test_fit_learns_layout_and_classes(schema: InputSchema) -> None:
    assert schema.features == ["age", "income_k", "color", "grade"]
    assert schema.n_features_in == 4
    assert schema.output_names == [
        "age",
        "income_k",
        "color=blue",
        "color=green",
        "color=red",
        "grade=1",
        "grade=2",
        "grade=3",
    ]
    assert schema.categories == {"color": ["blue", "green", "red"], "grade": ["1", "2", "3"]}
    assert schema.label == "y" and schema.label_classes == ["0", "1"]
    assert schema.sensitive == ["s"] and schema.sensitive_classes == {"s": ["F", "M"]}
    assert schema.dtypes["age"] == "int64"
    assert schema.spec == TableSpec(
        "y", ["s"], ["age", "income_k", "color", "grade"], ["color", "grade"]
    )


def test_transform_is_standardised_float32(schema: InputSchema, frame: pd.DataFrame) -> None:
    x = schema.transform(frame)
    assert x.dtype == np.float32 and x.shape == (40, 8)
    np.testing.assert_allclose(x.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(x.std(axis=0), 1, atol=1e-4)
    # The one-hot block of each categorical holds exactly one "hot" value per row.
    hot = x[:, 2:5] > 0
    assert (hot.sum(axis=1) == 1).all()
    assert (np.array(["blue", "green", "red"])[hot.argmax(axis=1)] == frame["color"]).all()


def test_constant_column_keeps_std_one(frame: pd.DataFrame, spec: TableSpec) -> None:
    frame["age"] = 7
    schema = InputSchema.fit(frame, spec)
    assert schema.std[0] == 1.0 and schema.mean[0] == 7.0
    assert (schema.transform(frame)[:, 0] == 0).all()


def test_extra_columns_ignored_and_order_free(schema: InputSchema, frame: pd.DataFrame) -> None:
    shuffled = frame[["s", "grade", "color", "y", "income_k", "age"]].assign(extra=1)
    np.testing.assert_array_equal(schema.transform(shuffled), schema.transform(frame))


def test_check_columns_strict(schema: InputSchema, frame: pd.DataFrame) -> None:
    schema.check_columns(frame, targets=True, allow_extra=False)
    with pytest.raises(ColumnError, match="has column\\(s\\) 'patient_id' that the input schema"):
        schema.check_columns(frame.assign(patient_id=1), allow_extra=False, source="site.csv")
    with pytest.raises(ColumnError, match="missing column\\(s\\) 'y'"):
        schema.check_columns(frame.drop(columns="y"), targets=True)


def test_missing_feature_column(schema: InputSchema, frame: pd.DataFrame) -> None:
    with pytest.raises(ColumnError) as info:
        schema.transform(frame.drop(columns="income_k"), source="site.csv")
    message = str(info.value)
    assert "site.csv is missing column(s) 'income_k'" in message
    assert "available columns: age, color, grade, y, s" in message


def test_unseen_category(schema: InputSchema, frame: pd.DataFrame) -> None:
    frame.loc[5, "color"] = "purple"
    with pytest.raises(CategoryError) as info:
        schema.transform(frame, source="site.csv")
    message = str(info.value)
    assert "column 'color' in site.csv holds category 'purple' at data row 6" in message
    assert "known categories: blue, green, red" in message


def test_unseen_integer_category(schema: InputSchema, frame: pd.DataFrame) -> None:
    frame.loc[0, "grade"] = 9
    with pytest.raises(CategoryError, match="'grade' in table holds category 9 at data row 1"):
        schema.transform(frame)


def test_categories_match_across_int_float_and_text(
    schema: InputSchema, frame: pd.DataFrame
) -> None:
    expected = schema.transform(frame)
    as_float = frame.assign(grade=frame["grade"].astype(float))
    as_text = frame.assign(grade=frame["grade"].astype(str))
    np.testing.assert_array_equal(schema.transform(as_float), expected)
    np.testing.assert_array_equal(schema.transform(as_text), expected)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (np.nan, "missing value (empty cell or NaN) at data row 3"),
        (np.inf, "infinite value (inf) at data row 3"),
        (-5e12, "holds -5e+12 at data row 3, beyond"),
        ("abc", "non-numeric value 'abc' at data row 3"),
    ],
)
def test_bad_numeric_values_at_transform(
    schema: InputSchema, frame: pd.DataFrame, value: object, needle: str
) -> None:
    frame = frame.astype({"income_k": object if isinstance(value, str) else float})
    frame.loc[2, "income_k"] = value
    with pytest.raises(ValueRangeError) as info:
        schema.transform(frame)
    assert "column 'income_k' in table" in str(info.value)
    assert needle in str(info.value)


def test_missing_category_at_transform(schema: InputSchema, frame: pd.DataFrame) -> None:
    frame.loc[1, "color"] = None
    with pytest.raises(ValueRangeError, match="column 'color' .* missing value .* data row 2"):
        schema.transform(frame)


def test_encode_labels_and_sensitive(schema: InputSchema, frame: pd.DataFrame) -> None:
    labels = schema.encode_labels(frame)
    assert labels.dtype == np.int64 and labels.tolist() == frame["y"].tolist()
    sens = schema.encode_sensitive(frame)
    assert sens.dtype == np.int64 and sens.shape == (40, 1)
    assert (sens[:, 0] == (frame["s"] == "M")).all()


def test_unseen_label_and_sensitive_class(schema: InputSchema, frame: pd.DataFrame) -> None:
    frame.loc[3, "y"] = 2
    with pytest.raises(LabelError) as info:
        schema.encode_labels(frame)
    assert (
        "label column 'y' in table holds 2 at data row 4, not among the classes seen at "
        "fit: 0, 1" in str(info.value)
    )
    frame.loc[0, "s"] = "X"
    with pytest.raises(LabelError, match="sensitive column 's' in table holds 'X' at data row 1"):
        schema.encode_sensitive(frame)
    with pytest.raises(ColumnError, match="missing the sensitive column 's'"):
        schema.encode_sensitive(frame.drop(columns="s"))


def test_several_sensitive_columns(frame: pd.DataFrame) -> None:
    frame["t"] = np.arange(40) % 3
    schema = InputSchema.fit(frame, TableSpec("y", ["s", "t"], categorical=["color"]))
    sens = schema.encode_sensitive(frame)
    assert sens.shape == (40, 2)
    assert sens[:, 1].tolist() == (np.arange(40) % 3).tolist()


def test_too_many_categories(seed: int) -> None:
    frame = pd.DataFrame(
        {"id": [f"p{i}" for i in range(1200)], "y": [0, 1] * 600, "s": [0, 0, 1, 1] * 300}
    )
    with pytest.raises(ConfigError, match="'id' in table has 1200 distinct values"):
        InputSchema.fit(frame, TableSpec("y", ["s"], categorical=["id"]))


def test_fit_validates(frame: pd.DataFrame, spec: TableSpec) -> None:
    frame["y"] = 0
    with pytest.raises(LabelError, match="single class"):
        InputSchema.fit(frame, spec, source="public.csv")


def test_dict_round_trip(schema: InputSchema, frame: pd.DataFrame) -> None:
    data = json.loads(json.dumps(schema.to_dict()))
    restored = InputSchema.from_dict(data)
    assert restored == schema
    np.testing.assert_array_equal(restored.transform(frame), schema.transform(frame))
    assert data["format"] == "infoshape-input-schema/1"


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d.update(format="other/9"), "format must be"),
        (lambda d: d.pop("mean"), "malformed"),
        (lambda d: d.update(std=[1.0]), "one entry per output column"),
        (lambda d: d["std"].__setitem__(0, 0.0), "std must be > 0"),
        (lambda d: d["mean"].__setitem__(0, float("nan")), "finite"),
        (lambda d: d["features"][0].update(kind="text"), "unknown feature kind"),
        (lambda d: d["output_names"].reverse(), "output_names do not match"),
    ],
)
def test_from_dict_refuses_malformed(schema: InputSchema, mutate, needle: str) -> None:
    data = json.loads(json.dumps(schema.to_dict()))
    mutate(data)
    with pytest.raises(ConfigError, match=needle):
        InputSchema.from_dict(data)


@st.composite
def tables(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(min_value=4, max_value=30))
    floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=64)
    a = draw(st.lists(floats, min_size=n, max_size=n))
    cats = draw(st.lists(st.sampled_from(["x", "y y", "z=1", "é"]), min_size=n, max_size=n))
    b = draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))
    return pd.DataFrame(
        {"a": a, "cat": cats, "b": b, "label": np.arange(n) % 2, "sens": (np.arange(n) // 2) % 2}
    )


@settings(max_examples=40, deadline=None)
@given(tables())
def test_round_trip_gives_identical_transform(table: pd.DataFrame) -> None:
    spec = TableSpec("label", ["sens"], categorical=["cat", "b"])
    schema = InputSchema.fit(table, spec)
    restored = InputSchema.from_dict(json.loads(json.dumps(schema.to_dict())))
    out = schema.transform(table)
    np.testing.assert_array_equal(restored.transform(table), out)
    assert np.isfinite(out).all()
    assert out.shape == (len(table), schema.n_outputs)


def test_transform_throughput(seed: int) -> None:
    """~5M rows/s is the target; assert a loose floor so loaded CI machines still pass."""
    rng = np.random.default_rng(seed)
    n = 250_000
    frame = pd.DataFrame({f"x{i}": rng.normal(size=n) for i in range(10)})
    frame["y"] = rng.integers(0, 2, n)
    frame["s"] = rng.integers(0, 2, n)
    schema = InputSchema.fit(frame, TableSpec("y", ["s"]))
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        out = schema.transform(frame)
        best = min(best, time.perf_counter() - start)
    assert out.shape == (n, 10)
    assert n / best > 1e6, f"{n / best:.3g} rows/s"


def test_fingerprint(frame: pd.DataFrame) -> None:
    base = fingerprint_frame(frame)
    assert len(base) == 64 and base == fingerprint_frame(frame.copy())
    assert fingerprint_frame(frame.set_index(frame.index + 100)) == base
    assert fingerprint_frame(frame.astype({"age": np.int32})) == base
    changed = frame.copy()
    changed.loc[3, "income_k"] += 0.01
    assert fingerprint_frame(changed) != base
    assert fingerprint_frame(frame.rename(columns={"age": "Age"})) != base
    assert fingerprint_frame(frame.iloc[::-1]) != base
    assert fingerprint_frame(frame[["age", "y", "s", "color", "grade", "income_k"]]) != base
