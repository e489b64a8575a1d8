"""Table → fitted shaper → signed bundle, and bundle → encoder: the calls every role shares.

The CLI (`infoshape train` / `encode`), the coordinator and the hospital client all go through
these functions, so a bundle made by one is read identically by the others.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from shared.bundle import EncoderBundle
from shared.data import InputSchema, TableSpec, fingerprint_frame, validate_table
from shared.errors import ConfigError, SchemaMismatchError
from shared.shapers import SHAPERS, Shaper


@dataclass
class FittedShaper:
    """A shaper fitted on a public table, with the preprocessing it was fitted behind."""

    schema: InputSchema
    shaper: Shaper
    public_fingerprint: str
    params: dict[str, Any]


def shaper_params(name: str, **params: Any) -> dict[str, Any]:
    """Keep the parameters the chosen shaper accepts; refuse explicit ones it does not know.

    ``lam``, ``schedule``, ``seed`` and ``progress`` are common options that only some shapers
    take, so they are dropped quietly for the others.
    """
    cls = SHAPERS.get(name)
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    common = {"lam", "schedule", "seed", "progress"}
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        if key in accepted:
            out[key] = value
        elif key not in common:
            raise ConfigError(
                f"{key}: not a parameter of shaper {name!r}; it takes {', '.join(sorted(accepted))}"
            )
    return out


def fit_shaper(
    frame: pd.DataFrame,
    spec: TableSpec,
    *,
    shaper: str = "infoshape",
    source: str = "public table",
    **params: Any,
) -> FittedShaper:
    """Validate a public table, fit its preprocessing, then fit the shaper on it."""
    frame = validate_table(frame, spec, source=source)
    schema = InputSchema.fit(frame, spec, source=source)
    X = schema.transform(frame, source=source)
    y = schema.encode_labels(frame, source=source)
    s = schema.encode_sensitive(frame, source=source)
    kept = shaper_params(shaper, **params)
    model = SHAPERS.create(shaper, **kept).fit(X, y, s)
    return FittedShaper(schema, model, fingerprint_frame(frame), kept)


def bundle_from_fitted(fitted: FittedShaper, *, encoder_version: int = 1) -> EncoderBundle:
    """An unsigned bundle of a fitted shaper; sign it with ``save`` / ``to_bytes``."""
    config, tensors = fitted.shaper.get_state()
    # λ and schedule as the shaper actually used them (its defaults included), not only as passed.
    used = {**config.get("params", {}), **fitted.params}
    schema = fitted.schema
    return EncoderBundle.create(
        tensors=tensors,
        architecture=config,
        input_schema=schema.to_dict(),
        labels={
            "public": schema.label,
            "public_classes": list(schema.label_classes),
            "sensitive": list(schema.sensitive),
        },
        shaper={"name": fitted.shaper.name, "params": _jsonable(fitted.params)},
        schedule=used.get("schedule"),
        lam=float(used["lam"]) if "lam" in used else None,
        training_metrics=fitted.shaper.training_metrics(),
        public_data_fingerprint=fitted.public_fingerprint,
        encoder_version=encoder_version,
    )


def train_bundle(
    frame: pd.DataFrame,
    spec: TableSpec,
    *,
    shaper: str = "infoshape",
    encoder_version: int = 1,
    private_key: Any = None,
    **params: Any,
) -> EncoderBundle:
    """Fit on a public table and return the bundle (signed bytes if ``private_key`` is given is
    the caller's choice: ``bundle.save(dir, key)`` signs on write)."""
    del private_key  # signing happens on save / to_bytes; accepted for call-site symmetry
    fitted = fit_shaper(frame, spec, shaper=shaper, **params)
    return bundle_from_fitted(fitted, encoder_version=encoder_version)


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, np.generic):
            value = value.item()
        out[key] = value
    return out


class Encoder:
    """A verified bundle opened for encoding: schema checks + the shaper's transform."""

    def __init__(self, schema: InputSchema, shaper: Shaper, fingerprint: str | None = None):
        self.schema = schema
        self.shaper = shaper
        self.fingerprint = fingerprint

    @property
    def n_components(self) -> int:
        return self.shaper.n_components

    @property
    def label(self) -> str:
        return self.schema.label

    def check_table(self, frame: pd.DataFrame, *, source: str = "table") -> None:
        """Refuse a table whose columns do not match the bundle's input schema."""
        try:
            self.schema.check_columns(frame, targets=False, source=source)
        except ConfigError:
            raise
        except Exception as exc:  # ColumnError from the data layer → the bundle's refusal type
            from shared.errors import ColumnError

            if isinstance(exc, ColumnError):
                raise SchemaMismatchError(f"{exc} (the bundle's input schema)") from None
            raise

    def features(self, frame: pd.DataFrame, *, source: str = "table") -> np.ndarray:
        self.check_table(frame, source=source)
        return self.schema.transform(frame, source=source)

    def encode_features(self, frame: pd.DataFrame, *, source: str = "table") -> np.ndarray:
        """T(x) for every row, float32 (n, k)."""
        return self.shaper.transform(self.features(frame, source=source))

    def encode_frame(
        self, frame: pd.DataFrame, *, source: str = "table"
    ) -> tuple[np.ndarray, np.ndarray]:
        """(T(x), L(x) as class indices) for a table that holds the label column."""
        z = self.encode_features(frame, source=source)
        return z, self.schema.encode_labels(frame, source=source)

    def encode_sensitive(self, frame: pd.DataFrame, *, source: str = "table") -> np.ndarray:
        """S(x) as class indices (n, n_sensitive): for audits only; never released."""
        return self.schema.encode_sensitive(frame, source=source)


def open_bundle(bundle: EncoderBundle) -> Encoder:
    """Rebuild schema and shaper from a *verified* bundle (``EncoderBundle.load`` verifies)."""
    schema = InputSchema.from_dict(bundle.input_schema)
    shaper_field = bundle.shaper
    name = shaper_field.get("name") if isinstance(shaper_field, dict) else shaper_field
    shaper = SHAPERS.get(str(name)).from_state(bundle.architecture, bundle.tensors)
    if shaper.n_features_in_ != schema.n_outputs:
        raise SchemaMismatchError(
            f"bundle: the shaper expects {shaper.n_features_in_} inputs but the schema makes "
            f"{schema.n_outputs}"
        )
    return Encoder(schema, shaper, bundle.fingerprint)


def encoder_from_fitted(fitted: FittedShaper) -> Encoder:
    """The same encoder interface for a freshly fitted shaper (before any bundle exists)."""
    return Encoder(fitted.schema, fitted.shaper)
