"""The release: z columns + label only, a manifest with SHA-256s, written all at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from server.release import Contribution, file_stem, publish_release, write_summary
from simulations.rundir import check_release, prepare_run_dir, read_summary


def _contributions() -> dict[str, Contribution]:
    rng = np.random.default_rng(0)
    return {
        "St Mary's/ICU": Contribution("St Mary's/ICU", rng.normal(size=(7, 3)).astype(np.float32),
                                      rng.integers(0, 2, 7)),
        "b": Contribution("b", rng.normal(size=(5, 3)).astype(np.float32),
                          rng.integers(0, 2, 5)),
    }


def test_release_files_and_manifest(tmp_path: Path) -> None:
    manifest = publish_release(tmp_path, _contributions(), run_id="r1", fingerprint="ab" * 32,
                               label_name="outcome", label_classes=["no", "yes"])
    assert manifest["rows"] == 12 and manifest["run_id"] == "r1"
    assert manifest["encoder_fingerprint"] == "ab" * 32
    assert manifest["columns"] == ["z_0", "z_1", "z_2", "outcome"]
    assert set(manifest["files"]) == {"St_Mary_s_ICU.parquet", "b.parquet"}
    table = pq.read_table(tmp_path / "release" / "St_Mary_s_ICU.parquet")
    assert table.column_names == ["z_0", "z_1", "z_2", "outcome"]
    assert str(table.schema.field("z_0").type) == "float" and table.num_rows == 7
    on_disk = json.loads((tmp_path / "release" / "manifest.json").read_text())
    assert on_disk == manifest
    assert check_release(tmp_path)["rows"] == 12


def test_check_release_detects_tampering(tmp_path: Path) -> None:
    publish_release(tmp_path, _contributions(), run_id="r", fingerprint="0" * 64,
                    label_name="y")
    path = tmp_path / "release" / "b.parquet"
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(Exception, match="SHA-256"):
        check_release(tmp_path)


def test_a_failed_write_leaves_no_release(tmp_path: Path) -> None:
    bad = _contributions()
    bad["b"].label = bad["b"].label.astype(object)  # pyarrow cannot make int64 of this + 'x'
    bad["b"].label[0] = "x"
    with pytest.raises(ValueError):
        publish_release(tmp_path, bad, run_id="r", fingerprint="0" * 64, label_name="y")
    assert not (tmp_path / "release").exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_file_stems_are_safe() -> None:
    assert file_stem("../../etc/passwd") == "etc_passwd"
    assert file_stem("...") == "site"


def test_summary_is_strict_json(tmp_path: Path) -> None:
    write_summary(tmp_path, {"a": float("nan"), "b": np.float32(0.5), "c": [np.int64(3)]})
    assert read_summary(tmp_path) == {"a": None, "b": 0.5, "c": [3]}


def test_run_dir_is_never_reused(tmp_path: Path) -> None:
    prepare_run_dir(tmp_path / "new")
    (tmp_path / "new" / "x").write_text("")
    with pytest.raises(Exception, match="already holds files"):
        prepare_run_dir(tmp_path / "new")
