"""shared.data is importable without the federation stack (sites encode with it offline)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_shared_data_imports_no_flwr_or_upper_layers() -> None:
    code = (
        "import sys, shared.data\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('flwr', 'server', 'client', 'simulations')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)
