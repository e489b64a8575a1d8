"""Partitions (iid / Dirichlet / column) and public/audit/site/test splits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.data import Scheme, parse_scheme, partition_indices, split_frame, split_indices
from shared.errors import ColumnError, ConfigError, ValueRangeError


@pytest.fixture
def table(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 1000
    return pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "y": rng.integers(0, 3, n),
            "site": rng.choice(["a", "b", "c", "d"], n),
        }
    )


def _assert_partition(parts: list[np.ndarray], n: int, n_parts: int) -> None:
    assert len(parts) == n_parts
    assert all(len(p) > 0 for p in parts)
    joined = np.concatenate(parts)
    assert len(joined) == n and set(joined.tolist()) == set(range(n))


def test_parse_scheme() -> None:
    assert parse_scheme("iid") == Scheme("iid")
    assert parse_scheme(" Dirichlet:0.5 ") == Scheme("dirichlet", alpha=0.5)
    assert parse_scheme("column:hospital id") == Scheme("column", column="hospital id")
    assert str(parse_scheme("dirichlet:0.10")) == "dirichlet:0.1"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "random",
            "scheme must be 'iid', 'dirichlet:ALPHA' (ALPHA > 0) or 'column:NAME'; got 'random'",
        ),
        ("dirichlet", "got 'dirichlet'"),
        ("dirichlet:-1", "ALPHA in 'dirichlet:ALPHA' must be a finite number > 0"),
        ("dirichlet:abc", "got 'abc'"),
        ("dirichlet:inf", "got 'inf'"),
        ("column:", "NAME in 'column:NAME' must be a column name"),
        ("iid:3", "got 'iid:3'"),
    ],
)
def test_parse_scheme_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scheme(text)
    assert needle in str(info.value)


def test_iid(table: pd.DataFrame, seed: int) -> None:
    parts = partition_indices(table, 3, "iid", seed=seed)
    _assert_partition(parts, 1000, 3)
    assert sorted(len(p) for p in parts) == [333, 333, 334]
    again = partition_indices(table, 3, "iid", seed=seed)
    assert all((a == b).all() for a, b in zip(parts, again, strict=True))


def test_dirichlet_skews_labels(table: pd.DataFrame, seed: int) -> None:
    skewed = partition_indices(table, 4, "dirichlet:0.1", label="y", seed=seed)
    flat = partition_indices(table, 4, "dirichlet:1000", label="y", seed=seed)
    _assert_partition(skewed, 1000, 4)
    _assert_partition(flat, 1000, 4)

    def spread(parts: list[np.ndarray]) -> float:
        shares = [np.bincount(table["y"].to_numpy()[p], minlength=3) / len(p) for p in parts]
        return float(np.std(shares, axis=0).mean())

    assert spread(skewed) > 3 * spread(flat)


def test_dirichlet_every_part_non_empty_even_when_extreme(seed: int) -> None:
    frame = pd.DataFrame({"y": [0] * 15 + [1] * 5})
    for s in range(20):
        parts = partition_indices(frame, 12, "dirichlet:0.01", label="y", seed=seed + s)
        _assert_partition(parts, 20, 12)


def test_dirichlet_needs_label(table: pd.DataFrame) -> None:
    with pytest.raises(ConfigError, match="'dirichlet:0.5' needs label=COLUMN"):
        partition_indices(table, 2, "dirichlet:0.5")
    with pytest.raises(ColumnError, match="label column 'z' not found; available columns: x, y"):
        partition_indices(table, 2, "dirichlet:0.5", label="z")
    table.loc[9, "y"] = None
    with pytest.raises(
        ValueRangeError, match="label column 'y' has a missing value at data row 10"
    ):
        partition_indices(table, 2, "dirichlet:0.5", label="y")


def test_column_one_part_per_value(table: pd.DataFrame) -> None:
    parts = partition_indices(table, 4, "column:site")
    _assert_partition(parts, 1000, 4)
    for part, value in zip(parts, ["a", "b", "c", "d"], strict=True):
        assert (table["site"].iloc[part] == value).all()


def test_column_round_robin_when_fewer_parts(table: pd.DataFrame) -> None:
    parts = partition_indices(table, 2, "column:site")
    _assert_partition(parts, 1000, 2)
    assert set(table["site"].iloc[parts[0]]) == {"a", "c"}
    assert set(table["site"].iloc[parts[1]]) == {"b", "d"}


def test_column_errors(table: pd.DataFrame) -> None:
    with pytest.raises(ConfigError, match="distinct values of column 'site' \\(4\\).*got 5"):
        partition_indices(table, 5, "column:site")
    with pytest.raises(ColumnError, match="partition column 'ward' not found"):
        partition_indices(table, 2, "column:ward")


@pytest.mark.parametrize("n_parts", [0, -1, 2.5, True, "3"])
def test_bad_n_parts(table: pd.DataFrame, n_parts: object) -> None:
    with pytest.raises(ConfigError, match="n_parts must be an integer >= 1"):
        partition_indices(table, n_parts, "iid")  # type: ignore[arg-type]


def test_more_parts_than_rows() -> None:
    with pytest.raises(ConfigError, match="n_parts must be <= the number of rows \\(3\\).*got 4"):
        partition_indices(pd.DataFrame({"y": [0, 1, 0]}), 4, "iid")


def test_bad_seed(table: pd.DataFrame) -> None:
    with pytest.raises(ConfigError, match="seed must be an integer >= 0; got -2"):
        partition_indices(table, 2, "iid", seed=-2)


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=300),
    n_parts=st.integers(min_value=1, max_value=12),
    scheme=st.sampled_from(["iid", "dirichlet:0.05", "dirichlet:1", "column:g"]),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_parts_are_disjoint_non_empty_and_cover(
    n: int, n_parts: int, scheme: str, seed: int
) -> None:
    frame = pd.DataFrame({"y": np.arange(n) % 3, "g": np.arange(n) % 13})
    n_parts = min(n_parts, n, frame["g"].nunique())
    parts = partition_indices(frame, n_parts, scheme, label="y", seed=seed)
    _assert_partition(parts, n, n_parts)


# -- splits ---------------------------------------------------------------------------------------
FRACTIONS = {"public": 0.3, "audit": 0.1, "sites": 0.5, "test": 0.1}


def test_split_frame_sizes_and_determinism(table: pd.DataFrame, seed: int) -> None:
    parts = split_frame(table, FRACTIONS, seed=seed)
    assert {k: len(v) for k, v in parts.items()} == {
        "public": 300,
        "audit": 100,
        "sites": 500,
        "test": 100,
    }
    index = np.concatenate([v.index.to_numpy() for v in parts.values()])
    assert len(set(index.tolist())) == 1000
    again = split_frame(table, FRACTIONS, seed=seed)
    assert all(parts[k].equals(again[k]) for k in FRACTIONS)
    other = split_frame(table, FRACTIONS, seed=seed + 1)
    assert not parts["public"].equals(other["public"])


def test_split_frame_stratified(table: pd.DataFrame, seed: int) -> None:
    parts = split_frame(table, FRACTIONS, seed=seed, stratify="y")
    overall = table["y"].value_counts(normalize=True).sort_index()
    for name, part in parts.items():
        counts = part["y"].value_counts().sort_index()
        expected = overall * len(part)
        assert (abs(counts - expected) <= 2).all(), name


def test_split_errors(table: pd.DataFrame) -> None:
    with pytest.raises(ConfigError, match="fractions must sum to 1; got 0.9"):
        split_frame(table, {"a": 0.5, "b": 0.4}, seed=0)
    with pytest.raises(ConfigError, match=r"fractions\['a'\] must be in \(0, 1\]; got 1.5"):
        split_frame(table, {"a": 1.5, "b": -0.5}, seed=0)
    with pytest.raises(ConfigError, match="leaves split 'b' empty"):
        split_frame(table.iloc[:5], {"a": 0.95, "b": 0.05}, seed=0)
    with pytest.raises(ConfigError, match="non-empty mapping"):
        split_frame(table, {}, seed=0)
    with pytest.raises(ColumnError, match="stratify column 'z' not found"):
        split_frame(table, {"a": 1.0}, seed=0, stratify="z")


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(min_value=4, max_value=500),
    weights=st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=4),
    seed=st.integers(min_value=0, max_value=2**31),
    stratified=st.booleans(),
)
def test_splits_are_disjoint_and_cover(
    n: int, weights: list[int], seed: int, stratified: bool
) -> None:
    if len(weights) > n:
        weights = weights[:n]
    total = sum(weights)
    fractions = {f"p{i}": w / total for i, w in enumerate(weights)}
    strata = np.arange(n) % 3 if stratified else None
    try:
        parts = split_indices(n, fractions, seed=seed, stratify=strata)
    except ConfigError as exc:  # a tiny split rounded to zero rows is refused, not emptied
        assert "empty" in str(exc)
        return
    joined = np.concatenate(list(parts.values()))
    assert len(joined) == n and set(joined.tolist()) == set(range(n))
    for name, idx in parts.items():
        assert abs(len(idx) - fractions[name] * n) < 1
