"""The run directory of one simulation: where it goes, and reading/checking what a run wrote.

Layout (DESIGN.md "Formats")::

    RUNDIR/
      bundle/            the signed encoder that was distributed
      release/           <site>.parquet (z_0..z_{k-1} + label only) + manifest.json (SHA-256s)
      summary.json       every metric of the run (the report reads only this)
      keys/signing.pub   the public key that verifies bundle/ (simulation only)

The writers live in ``server/release.py`` because the coordinator writes the same run dir in a
deployment (and ``server/`` cannot import ``simulations/``); they are re-exported here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from server.release import (
    MANIFEST,
    RELEASE_DIR,
    SUMMARY,
    Contribution,
    publish_release,
    sha256_file,
    write_summary,
)
from shared.errors import ConfigError, RunError

KEYS_DIR = "keys"


def default_run_dir(base: str | Path | None = None, now: datetime | None = None) -> Path:
    """``<base or cwd>/runs/<UTC timestamp>/``; a suffix keeps two runs in one second apart."""
    root = Path(base) if base is not None else Path.cwd()
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    candidate = root / "runs" / stamp
    n = 1
    while candidate.exists():
        candidate = root / "runs" / f"{stamp}-{n}"
        n += 1
    return candidate


def prepare_run_dir(path: str | Path) -> Path:
    """Create the run dir; refuse one that already holds files (runs are never mixed)."""
    run_dir = Path(path)
    if run_dir.exists():
        if not run_dir.is_dir():
            raise ConfigError(f"--out {run_dir} exists and is not a directory")
        if any(run_dir.iterdir()):
            raise ConfigError(
                f"--out {run_dir} already holds files; choose a new directory so two runs are "
                "never mixed"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / SUMMARY
    if not path.is_file():
        raise RunError(f"the run wrote no {SUMMARY} in {run_dir}; the coordinator did not finish")
    return json.loads(path.read_text(encoding="utf-8"))


def check_release(run_dir: str | Path) -> dict[str, Any]:
    """Re-read ``release/``: every file's SHA-256 and rows match the manifest, and every file holds
    exactly z_0..z_{k-1} and the label. Returns the manifest; raises RunError otherwise."""
    release = Path(run_dir) / RELEASE_DIR
    manifest = json.loads((release / MANIFEST).read_text(encoding="utf-8"))
    expected = manifest["columns"]
    for name, entry in manifest["files"].items():
        path = release / name
        if sha256_file(path) != entry["sha256"]:
            raise RunError(f"release file {name} does not match its SHA-256 in the manifest")
        table = pq.read_table(path)
        if table.column_names != expected:
            raise RunError(f"release file {name} holds columns {table.column_names}; "
                           f"expected {expected}")
        if table.num_rows != entry["rows"]:
            raise RunError(f"release file {name} holds {table.num_rows} rows; manifest says "
                           f"{entry['rows']}")
    extra = sorted(p.name for p in release.iterdir() if p.name != MANIFEST
                   and p.name not in manifest["files"])
    if extra:
        raise RunError(f"release/ holds files the manifest does not list: {extra}")
    return manifest


__all__ = [
    "KEYS_DIR",
    "MANIFEST",
    "RELEASE_DIR",
    "SUMMARY",
    "Contribution",
    "check_release",
    "default_run_dir",
    "prepare_run_dir",
    "publish_release",
    "read_summary",
    "write_summary",
]
