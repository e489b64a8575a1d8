"""``shared`` is the bottom layer: it imports without flwr, server, client or simulations.

A site encodes offline with nothing but ``shared`` installed, and the coordinator's and sites'
Flower code depends on it, never the reverse (docs/architecture.md). The check runs in a fresh
interpreter, because this test process has long imported everything.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import shared

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("flwr", "server", "client", "simulations", "ray")

_PROBE = """
import importlib, json, pkgutil, sys
import shared
names = ["shared"] + [
    m.name for m in pkgutil.walk_packages(shared.__path__, prefix="shared.")
]
for name in names:
    importlib.import_module(name)
bad = sorted({m for m in sys.modules if m.split(".")[0] in FORBIDDEN})
print(json.dumps({"modules": names, "bad": bad}))
"""


def test_every_shared_module_imports_without_upper_layers_or_flwr() -> None:
    probe = f"FORBIDDEN = {FORBIDDEN!r}\n{_PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bad"] == [], f"shared pulled in {result['bad']}"
    expected = {m.name for m in pkgutil.walk_packages(shared.__path__, prefix="shared.")}
    assert expected <= set(result["modules"])
    assert {"shared.encode", "shared.pipeline", "shared.bundle", "shared.data"} <= set(
        result["modules"]
    )
