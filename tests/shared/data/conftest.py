"""Helpers for the data tests: small tables written to files in a temp dir."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shared.data import TableSpec


@pytest.fixture
def frame(seed: int) -> pd.DataFrame:
    """40 rows: numeric age/income_k, categorical color and grade (int), label y, sensitive s."""
    rng = np.random.default_rng(seed)
    n = 40
    return pd.DataFrame(
        {
            "age": rng.integers(18, 90, n),
            "income_k": rng.normal(50, 10, n).round(2),
            "color": rng.choice(["red", "green", "blue"], n),
            "grade": rng.integers(1, 4, n),
            "y": np.arange(n) % 2,
            "s": np.where(np.arange(n) % 4 < 2, "F", "M"),
        }
    )


@pytest.fixture
def spec() -> TableSpec:
    return TableSpec(label="y", sensitive=["s"], categorical=["color", "grade"])


@pytest.fixture
def write_csv(tmp_path: Path) -> Callable[..., Path]:
    """Write text (or a frame) to ``tmp_path/name`` and return the path."""

    def write(content: str | pd.DataFrame, name: str = "table.csv") -> Path:
        path = tmp_path / name
        if isinstance(content, pd.DataFrame):
            content.to_csv(path, index=False)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return write
