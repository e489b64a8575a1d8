"""Flower record helpers for the wire protocol (coordinator side); the names live in
:mod:`shared.protocol` so that both apps use one definition.
"""

from __future__ import annotations

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from shared.protocol import *  # noqa: F403 - re-exported: the protocol's names
from shared.protocol import BUNDLE_BYTES


def bundle_record(data: bytes) -> ConfigRecord:
    """The signed bundle as one bytes value (small: weights + manifest + signature)."""
    return ConfigRecord({BUNDLE_BYTES: data})


def arrays_record(arrays: dict[str, object]) -> ArrayRecord:
    """Named numpy arrays as an ArrayRecord (serialised with ``allow_pickle=False`` by Flower)."""
    import numpy as np

    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def record_arrays(content: RecordDict, name: str) -> dict[str, object]:
    """The arrays of one ArrayRecord as numpy arrays."""
    record = content.array_records[name]
    return {k: v.numpy() for k, v in record.items()}

