"""Canonical JSON: one byte string per value, so a signature over it means one thing.

A signature covers bytes, not meaning. If two writers could serialise the same manifest two ways
(key order, spacing, ``1.0`` vs ``1``, ``NaN``), a verifier would have to re-serialise before
checking and a fingerprint would depend on who wrote the file. So the manifest is written in one
canonical form, the signature is over exactly those bytes, and the loader insists the bytes on disk
*are* that form.

The form: keys sorted by code point, no whitespace, UTF-8 (non-ASCII kept as is), floats by
``repr`` (the shortest string that round-trips), ``NaN`` and infinities refused (they are not JSON
and would make "the same" value compare unequal to itself).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from shared.errors import ConfigError

__all__ = ["canonical_json", "dump_plain", "parse_json_strict", "to_jsonable"]


def to_jsonable(obj: Any, *, where: str = "value") -> Any:
    """Return ``obj`` as plain JSON types, or raise :class:`ConfigError` naming the bad part.

    NumPy scalars and arrays become Python numbers and (nested) lists, tuples become lists, so a
    training loop can hand over its curves as they are. Refused, with the path to the value
    (e.g. ``training_metrics.mi_sensitive[17]``): NaN / infinity, non-string keys (JSON would turn
    ``1`` and ``"1"`` into the same key), strings that are not valid Unicode, and any other type.
    """
    if obj is None:
        return None
    if isinstance(obj, bool | np.bool_):  # before int: bool is an int subclass
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        value = float(obj)
        if not math.isfinite(value):
            raise ConfigError(
                f"{where} is {value!r}; JSON (and a signed manifest) cannot hold NaN or infinity "
                "- replace it with null or a finite number"
            )
        return value
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigError(f"{where} is not valid Unicode text ({exc.reason})") from None
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise ConfigError(f"{where} is an array of dtype {obj.dtype}; only numbers fit in JSON")
        return [to_jsonable(item, where=f"{where}[{i}]") for i, item in enumerate(obj.tolist())]
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise ConfigError(
                    f"{where} has a key {key!r} of type {type(key).__name__}; keys must be strings"
                )
            to_jsonable(key, where=f"{where} key {key!r}")
            out[key] = to_jsonable(value, where=f"{where}.{key}")
        return out
    if isinstance(obj, list | tuple):
        return [to_jsonable(item, where=f"{where}[{i}]") for i, item in enumerate(obj)]
    raise ConfigError(
        f"{where} has type {type(obj).__name__}, which JSON cannot hold "
        "(use dict, list, str, int, float, bool or None)"
    )


def canonical_json(obj: Any) -> bytes:
    """The canonical UTF-8 bytes of ``obj`` (see the module docstring); these are what get signed.

    Raises :class:`ConfigError` for values JSON cannot hold faithfully (NaN, infinity, non-string
    keys, unknown types).
    """
    return dump_plain(to_jsonable(obj))


def dump_plain(plain: Any) -> bytes:
    """Canonical bytes of a value that already holds only plain JSON types (e.g. the output of
    :func:`parse_json_strict`); skips the normalising walk, refuses NaN all the same."""
    text = json.dumps(
        plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (JSON has no NaN or infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "1e400" parses to inf
        raise ValueError(f"number {text} overflows to infinity")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def parse_json_strict(data: bytes) -> Any:
    """Parse UTF-8 JSON bytes, refusing what a lenient parser would quietly accept.

    Refused with ``ValueError``: invalid UTF-8, ``NaN``/``Infinity``, numbers that overflow to
    infinity, and duplicate keys (two readers could disagree on which one counts). Deep nesting
    surfaces as ``RecursionError``; callers treat both as "malformed".
    """
    text = data.decode("utf-8")  # UnicodeDecodeError is a ValueError
    return json.loads(
        text,
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
        object_pairs_hook=_no_duplicates,
    )
