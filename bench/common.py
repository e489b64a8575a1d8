"""Helpers shared by the benchmarks: machine facts and JSON output under bench/results/."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on, including how busy the machine was."""
    import numpy
    import sklearn
    import torch

    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        load = (float("nan"),) * 3
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": [round(x, 2) for x in load],
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "sklearn": sklearn.__version__,
        "utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=float))
    tmp.replace(path)
    return path


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = time.process_time() - self.cpu_start
