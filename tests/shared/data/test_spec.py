"""TableSpec: construction rules, feature resolution, JSON round-trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.data import TableSpec
from shared.errors import ColumnError, ConfigError


def test_defaults_and_single_string_sensitive() -> None:
    spec = TableSpec(label="y", sensitive="s")
    assert spec.sensitive == ["s"]
    assert spec.features is None and spec.categorical == []
    assert spec.targets == ["y", "s"]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"label": "y", "sensitive": []}, "at least one"),
        ({"label": "y", "sensitive": ["y"]}, "label 'y' is also listed in sensitive"),
        ({"label": "", "sensitive": ["s"]}, "label must be a non-empty"),
        ({"label": "y", "sensitive": ["s", "s"]}, "'s' appears more than once"),
        ({"label": "y", "sensitive": ["s"], "features": []}, "at least one column"),
        ({"label": "y", "sensitive": ["s"], "features": ["a", "y"]}, "'y' in features"),
        (
            {"label": "y", "sensitive": ["s"], "features": ["a"], "categorical": ["b"]},
            "'b' is not among features",
        ),
        ({"label": "y", "sensitive": ["s"], "categorical": ["s"]}, "'s' is the label"),
        ({"label": "y", "sensitive": 3}, "sensitive must be a list"),
        ({"label": "y", "sensitive": ["s", 5]}, "got 5"),
    ],
)
def test_invalid_specs_raise_config_error(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        TableSpec(**kwargs)
    assert needle in str(info.value)


def test_resolve_features_default_is_every_other_column() -> None:
    spec = TableSpec(label="y", sensitive=["s"])
    assert spec.resolve_features(["a", "s", "b", "y"]) == ["a", "b"]


def test_resolve_features_explicit_and_missing() -> None:
    spec = TableSpec(label="y", sensitive=["s"], features=["b", "a"])
    assert spec.resolve_features(["a", "b", "y", "s"]) == ["b", "a"]
    with pytest.raises(ColumnError, match=r"'b' not found; available columns: a, y, s"):
        spec.resolve_features(["a", "y", "s"])


def test_resolve_features_none_left() -> None:
    with pytest.raises(ColumnError, match="no feature columns left"):
        TableSpec(label="y", sensitive=["s"]).resolve_features(["y", "s"])


def test_dict_round_trip_is_json_able() -> None:
    spec = TableSpec(label="y", sensitive=["s", "t"], features=["a", "b"], categorical=["b"])
    data = json.loads(json.dumps(spec.to_dict()))
    assert TableSpec.from_dict(data) == spec


def test_from_dict_refuses_unknown_and_missing_keys() -> None:
    with pytest.raises(ConfigError, match=r"unknown key\(s\) 'lable'; valid keys"):
        TableSpec.from_dict({"lable": "y", "label": "y", "sensitive": ["s"]})
    with pytest.raises(ConfigError, match="must have the key 'sensitive'"):
        TableSpec.from_dict({"label": "y"})
    with pytest.raises(ConfigError, match="JSON object"):
        TableSpec.from_dict(["y"])  # type: ignore[arg-type]


def test_from_json_file(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"label": "y", "sensitive": ["s"], "categorical": ["c"]}))
    assert TableSpec.from_json_file(path) == TableSpec("y", ["s"], categorical=["c"])


def test_from_json_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.json' does not exist"):
        TableSpec.from_json_file(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{label: y")
    with pytest.raises(ConfigError, match=r"bad\.json' is not valid JSON"):
        TableSpec.from_json_file(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"label": "y", "sensitive": ["y"]}))
    with pytest.raises(ConfigError, match=r"wrong\.json': label 'y' is also listed"):
        TableSpec.from_json_file(wrong)
