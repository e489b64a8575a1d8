"""Writing the run dir's release and summary — all at once or not at all.

The release is what leaves the federation, so its format is a promise: ``release/<site>.parquet``
holds the columns ``z_0 … z_{k-1}`` and the public label, nothing else, and
``release/manifest.json`` names the run, the encoder's fingerprint, each site's rows and the
SHA-256 of every file. It is built in a temporary sibling directory and renamed into place, so a
reader (or the gate refusing publication) never leaves a half-written release behind.

This module lives in ``server/`` because the coordinator writes the run dir in a deployment too;
``simulations/rundir.py`` re-exports it for the simulation.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shared.atomic import atomic_dir, atomic_write_text
from shared.errors import ConfigError
from shared.jsonsafe import json_safe

RELEASE_DIR = "release"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
RELEASE_FORMAT = "infoshape-release/1"


@dataclass
class Contribution:
    """One hospital's encoded rows: z (n, k) float32 and the public label codes (n,) int64."""

    site: str
    z: np.ndarray
    label: np.ndarray

    def __post_init__(self) -> None:
        if self.z.ndim != 2 or self.label.ndim != 1 or self.z.shape[0] != self.label.shape[0]:
            raise ConfigError(
                f"contribution of {self.site}: z {self.z.shape} and label {self.label.shape} "
                "do not match"
            )

    @property
    def rows(self) -> int:
        return int(self.z.shape[0])


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(site: str) -> str:
    """A site name as a safe file name (no path separators, no leading dot)."""
    stem = _SAFE.sub("_", site).strip("._") or "site"
    return stem


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def release_table(contribution: Contribution, label_name: str) -> pa.Table:
    """z_0..z_{k-1} as float32 and the label as int64 — the only columns a release may hold."""
    z = np.asarray(contribution.z, dtype=np.float32)
    columns = {f"z_{j}": pa.array(z[:, j]) for j in range(z.shape[1])}
    if label_name in columns:
        raise ConfigError(f"label column name {label_name!r} clashes with an encoding column")
    columns[label_name] = pa.array(np.asarray(contribution.label, dtype=np.int64))
    return pa.table(columns)


def publish_release(
    run_dir: Path,
    contributions: Mapping[str, Contribution],
    *,
    run_id: str,
    fingerprint: str,
    label_name: str,
    label_classes: list[str] | None = None,
) -> dict[str, Any]:
    """Write ``run_dir/release/`` atomically; return the manifest."""
    if not contributions:
        raise ConfigError("no contribution to release: every hospital refused or failed")
    stems: dict[str, str] = {}
    for site in contributions:
        stem = file_stem(site)
        if stem in stems.values():
            stem = f"{stem}-{len(stems)}"
        stems[site] = stem
    with atomic_dir(run_dir / RELEASE_DIR) as tmp:
        files: dict[str, dict[str, Any]] = {}
        sites: dict[str, dict[str, Any]] = {}
        for site, contribution in contributions.items():
            name = f"{stems[site]}.parquet"
            pq.write_table(release_table(contribution, label_name), tmp / name)
            files[name] = {"sha256": sha256_file(tmp / name), "rows": contribution.rows}
            sites[site] = {"file": name, "rows": contribution.rows}
        k = next(iter(contributions.values())).z.shape[1]
        manifest = {
            "format": RELEASE_FORMAT,
            "run_id": run_id,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "encoder_fingerprint": fingerprint,
            "columns": [f"z_{j}" for j in range(k)] + [label_name],
            "label": label_name,
            "label_classes": label_classes,
            "rows": sum(c.rows for c in contributions.values()),
            "sites": sites,
            "files": files,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> Path:
    """``summary.json``, written atomically (NaN/inf become null: JSON has no such numbers)."""
    return atomic_write_text(
        run_dir / SUMMARY, json.dumps(json_safe(summary), indent=2, sort_keys=False) + "\n"
    )


__all__ = [
    "MANIFEST",
    "RELEASE_DIR",
    "RELEASE_FORMAT",
    "SUMMARY",
    "Contribution",
    "file_stem",
    "json_safe",
    "publish_release",
    "release_table",
    "sha256_file",
    "write_summary",
]
