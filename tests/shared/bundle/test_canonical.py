"""Canonical JSON: one byte string per value, strict parsing, no NaN."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.bundle.canonical import canonical_json, parse_json_strict, to_jsonable
from shared.errors import ConfigError

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    """Same value, different dict insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def test_known_bytes() -> None:
    assert canonical_json({"b": 1, "a": [1.5, "é", None, True]}) == (
        '{"a":[1.5,"é",null,true],"b":1}'.encode()
    )
    assert canonical_json(0.1) == b"0.1"
    assert canonical_json(1.0) == b"1.0"
    assert canonical_json(1e300) == b"1e+300"


@settings(max_examples=100, deadline=None)
@given(json_values, st.integers(0, 2**32))
def test_order_independent_and_round_trips(value: Any, seed: int) -> None:
    data = canonical_json(value)
    assert canonical_json(_shuffled(value, random.Random(seed))) == data
    parsed = parse_json_strict(data)
    assert canonical_json(parsed) == data  # a fixed point: re-serialising changes nothing
    assert json.loads(data) == parsed


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float32("nan")])
def test_rejects_non_finite_with_path(bad: float) -> None:
    with pytest.raises(ConfigError, match=r"training_metrics\.mi\[1\]"):
        to_jsonable({"training_metrics": {"mi": [0.1, bad]}}, where="manifest")
    with pytest.raises(ConfigError):
        canonical_json({"x": bad})


@settings(max_examples=50, deadline=None)
@given(json_values, st.sampled_from([math.nan, math.inf, -math.inf]))
def test_nan_anywhere_is_refused(value: Any, bad: float) -> None:
    with pytest.raises(ConfigError):
        canonical_json({"wrapper": [value, {"deep": bad}]})


def test_rejects_non_string_keys_and_odd_types() -> None:
    with pytest.raises(ConfigError, match="keys must be strings"):
        canonical_json({1: "a"})
    with pytest.raises(ConfigError, match="set"):
        canonical_json({"a": {1, 2}})
    with pytest.raises(ConfigError, match="object"):
        canonical_json({"a": np.array(["x"], dtype=object)})
    with pytest.raises(ConfigError, match="Unicode"):
        canonical_json({"a": "\ud800"})


def test_numpy_values_become_plain_json() -> None:
    value = {
        "i": np.int64(3),
        "f": np.float32(0.5),
        "b": np.bool_(True),
        "curve": np.array([[1.0, 2.0]], dtype=np.float64),
        "t": (1, 2),
    }
    assert canonical_json(value) == b'{"b":true,"curve":[[1.0,2.0]],"f":0.5,"i":3,"t":[1,2]}'


@pytest.mark.parametrize(
    "text",
    [
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b'{"a":-Infinity}',
        b'{"a":1e400}',
        b'{"a":1,"a":2}',
        b"\xff",
    ],
)
def test_strict_parse_refuses(text: bytes) -> None:
    with pytest.raises(ValueError):
        parse_json_strict(text)
