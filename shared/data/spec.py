"""`TableSpec`: which columns of a table are features, the public label and the sensitive labels.

The spec travels as JSON (CLI ``--spec``, Flower ``node_config["table-spec"]``), so it has a plain
dict form, and it is checked when built: a spec that names the label as sensitive, or marks a
non-feature as categorical, would otherwise fail much later and far from the mistake.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.errors import ColumnError, ConfigError

_KEYS = ("label", "sensitive", "features", "categorical")


def _names(value: object, parameter: str, *, allow_none: bool = False) -> list[str] | None:
    """Normalise a list-of-column-names parameter; a lone string counts as a one-item list."""
    if value is None:
        if allow_none:
            return None
        raise ConfigError(f"{parameter} must be a list of column names; got None")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise ConfigError(
            f"{parameter} must be a list of column names; got {type(value).__name__} {value!r}"
        )
    names = list(value)
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(
                f"{parameter} must hold non-empty column names (strings); got {name!r}"
            )
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ConfigError(
            f"{parameter} must not repeat a column; {', '.join(map(repr, duplicated))} "
            f"appears more than once in {names!r}"
        )
    return names


@dataclass
class TableSpec:
    """Roles of a table's columns.

    ``features=None`` means "every column except the label and the sensitive ones" (resolved
    against a concrete table by :meth:`resolve_features`). Columns listed in ``categorical`` are
    one-hot encoded; every other feature must be numeric.
    """

    label: str
    sensitive: list[str]
    features: list[str] | None = None
    categorical: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise ConfigError(f"label must be a non-empty column name; got {self.label!r}")
        sensitive = _names(self.sensitive, "sensitive")
        assert sensitive is not None
        if not sensitive:
            raise ConfigError(
                "sensitive must name at least one column (the attribute to hide); got []"
            )
        if self.label in sensitive:
            raise ConfigError(
                f"label {self.label!r} is also listed in sensitive {sensitive!r}; a column "
                "cannot be both released (label) and hidden (sensitive)"
            )
        features = _names(self.features, "features", allow_none=True)
        categorical = _names(self.categorical, "categorical")
        assert categorical is not None
        targets = [self.label, *sensitive]
        if features is not None:
            if not features:
                raise ConfigError(
                    "features must name at least one column, or be None for every column "
                    "except the label and the sensitive ones; got []"
                )
            clash = [f for f in features if f in targets]
            if clash:
                raise ConfigError(
                    f"features must not include the label or a sensitive column; got "
                    f"{', '.join(map(repr, clash))} in features {features!r}"
                )
            outside = [c for c in categorical if c not in features]
            if outside:
                raise ConfigError(
                    f"categorical must be a subset of features; {', '.join(map(repr, outside))} "
                    f"is not among features {features!r}"
                )
        clash = [c for c in categorical if c in targets]
        if clash:
            raise ConfigError(
                f"categorical lists features only; {', '.join(map(repr, clash))} is the label "
                "or a sensitive column (those are encoded as classes automatically)"
            )
        self.sensitive = sensitive
        self.features = features
        self.categorical = categorical

    # -- columns ---------------------------------------------------------------------------
    @property
    def targets(self) -> list[str]:
        """The label followed by the sensitive columns."""
        return [self.label, *self.sensitive]

    def resolve_features(self, columns: Iterable[object]) -> list[str]:
        """The feature columns of a table with these ``columns``, in the table's order.

        Raises :class:`ColumnError` when an explicitly listed feature or categorical column is not
        among ``columns``.
        """
        available = [str(c) for c in columns]
        if self.features is None:
            targets = set(self.targets)
            features = [c for c in available if c not in targets]
        else:
            features = list(self.features)
        wanted = features + [c for c in self.categorical if c not in features]
        missing = [c for c in wanted if c not in available]
        if missing:
            raise ColumnError(
                f"feature column(s) {', '.join(map(repr, missing))} not found; available "
                f"columns: {', '.join(available)}"
            )
        if not features:
            raise ColumnError(
                "no feature columns left: the table holds only the label and sensitive "
                f"columns ({', '.join(available)}); add feature columns"
            )
        return features

    def required_columns(self, columns: Iterable[object]) -> list[str]:
        """Every column the spec needs from a table with these ``columns`` (targets first)."""
        available = [str(c) for c in columns]
        if self.features is None:
            features = [c for c in available if c not in set(self.targets)]
            features += [c for c in self.categorical if c not in features]
        else:
            features = list(self.features)
        return [*self.targets, *features]

    # -- serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; :meth:`from_dict` inverts it."""
        return {
            "label": self.label,
            "sensitive": list(self.sensitive),
            "features": None if self.features is None else list(self.features),
            "categorical": list(self.categorical),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableSpec:
        """Build from the dict of :meth:`to_dict` (unknown keys are refused: likely typos)."""
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"a table spec must be a JSON object with keys {', '.join(_KEYS)}; "
                f"got {type(data).__name__}"
            )
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise ConfigError(
                f"table spec has unknown key(s) {', '.join(map(repr, unknown))}; valid keys: "
                f"{', '.join(_KEYS)}"
            )
        for key in ("label", "sensitive"):
            if key not in data:
                raise ConfigError(f"table spec must have the key {key!r}; got keys {sorted(data)}")
        return cls(
            label=data["label"],
            sensitive=data["sensitive"],
            features=data.get("features"),
            categorical=data.get("categorical") or [],
        )

    @classmethod
    def from_json_file(cls, path: str | Path) -> TableSpec:
        """Read a spec from a JSON file such as ``{"label": "y", "sensitive": ["s"]}``."""
        path = Path(path)
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise ConfigError(
                f"table spec file '{path}' {what}; pass a JSON file with keys {', '.join(_KEYS)}"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"table spec file '{path}' is not valid JSON ({exc}); fix the file"
            ) from None
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            raise ConfigError(f"table spec file '{path}': {exc}") from None
