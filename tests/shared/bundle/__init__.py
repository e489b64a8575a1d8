"""Tests for shared.bundle and shared.atomic, plus the small builders they share.

The builders live here (not in a conftest) so test modules import them explicitly: a reader of a
test sees where its bundle comes from.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric import ed25519

from shared.bundle import EncoderBundle


def new_key() -> ed25519.Ed25519PrivateKey:
    """A fresh in-memory signing key (file handling is tested in test_keys)."""
    return ed25519.Ed25519PrivateKey.generate()


def small_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """The paper's default encoder shape (10 -> 10 -> 3), as a shaper's get_state() returns it."""
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.normal(size=(10, 10)).astype(np.float32),
        "layers.0.bias": rng.normal(size=10).astype(np.float32),
        "layers.1.weight": rng.normal(size=(3, 10)).astype(np.float32),
        "layers.1.bias": rng.normal(size=3).astype(np.float32),
    }


def make_bundle(version: int = 1, seed: int = 0, **overrides: Any) -> EncoderBundle:
    """An unsigned bundle with realistic manifest fields (MI curves included)."""
    fields: dict[str, Any] = {
        "tensors": small_tensors(seed),
        "architecture": {"input_dim": 10, "hidden": [10], "output_dim": 3, "activation": "tanh"},
        "input_schema": {
            "features": [f"x{i}" for i in range(10)],
            "dtypes": ["float64"] * 10,
            "mean": [0.0] * 10,
            "std": [1.0] * 10,
            "categorical": {},
        },
        "labels": {"public": "L", "sensitive": ["S"], "classes": {"L": [0, 1], "S": [0, 1]}},
        "shaper": {"name": "infoshape", "config": {"seed": seed}},
        "schedule": "alternating",
        "lam": 1.0,
        "training_metrics": {
            "mi_public": [0.1, 0.25, 0.4, 0.45],
            "mi_sensitive": [[0.3, 0.2, 0.05, 0.01]],
            "seconds": 3.5,
        },
        "public_data_fingerprint": "f" * 64,
        "encoder_version": version,
        "created_at": "2025-01-02T03:04:05Z",
    }
    fields.update(overrides)
    return EncoderBundle.create(**fields)
