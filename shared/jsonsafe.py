"""One conversion to plain JSON types for every summary, audit and bake-off file.

Numbers computed with numpy arrive as numpy scalars and arrays, and a metric that could not be
computed is NaN; JSON has neither, and a NaN written as a number would be read back as a figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def json_safe(obj: Any) -> Any:
    """Plain JSON types: numpy → Python, paths → str, NaN/inf → None (a missing figure)."""
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj
