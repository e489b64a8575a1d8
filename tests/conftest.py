"""Shared test fixtures: a fixed seed, Flower's environment kept inside the test's temp dir."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

# Flower writes to FLWR_HOME even for `--help`; telemetry and update checks must stay off in tests.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

# Under pytest-xdist every worker is one process per core: torch's default of one intra-op thread
# per core would put 2 x 2 spinning threads on 2 cores, and the estimator tests crawl (3-8x).
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _flwr_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLWR_HOME", str(tmp_path_factory.mktemp("flwr_home")))


@pytest.fixture
def seed() -> int:
    """The one seed tests use; everything random is derived from it."""
    value = 1234
    random.seed(value)
    np.random.seed(value)
    try:
        import torch

        torch.manual_seed(value)
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    return value
