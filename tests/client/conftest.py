"""Fixtures for the Flower-side tests: Flower's task identity (set by the runtime in a real run)."""

from __future__ import annotations

import pytest

from tests.server.fakes import set_task_identity


@pytest.fixture(autouse=True)
def _task_identity() -> None:
    set_task_identity()
