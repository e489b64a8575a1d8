"""shared.atomic: a target is either the old object or the complete new one, never a mix."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import shared.atomic as atomic
from shared.atomic import (
    atomic_dir,
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
    default_file_mode,
)
from shared.errors import ConfigError


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_write_bytes_creates_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    assert atomic_write_bytes(target, b"one") == target
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert _leftovers(tmp_path) == []


def test_write_bytes_default_mode_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        atomic_write_bytes(tmp_path / "f", b"x")
        assert default_file_mode() == 0o640
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o640


def test_write_bytes_explicit_mode(tmp_path: Path) -> None:
    atomic_write_bytes(tmp_path / "secret", b"x", 0o600)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600


def test_write_text(tmp_path: Path) -> None:
    atomic_write_text(tmp_path / "t.json", '{"é": 1}\n')
    assert (tmp_path / "t.json").read_text(encoding="utf-8") == '{"é": 1}\n'


def test_exclusive_refuses_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "key"
    target.write_bytes(b"old")
    with pytest.raises(FileExistsError):
        atomic_write_bytes(target, b"new", exclusive=True)
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []
    atomic_write_bytes(tmp_path / "fresh", b"new", exclusive=True)
    assert (tmp_path / "fresh").read_bytes() == b"new"


def test_failed_write_keeps_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def boom(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError, match="No space"):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_atomic_dir_publishes_on_success(tmp_path: Path) -> None:
    final = tmp_path / "out"
    with atomic_dir(final) as tmp:
        assert tmp.parent == tmp_path and tmp != final
        (tmp / "a").write_text("1")
        assert not final.exists()  # nothing visible until the block succeeds
    assert (final / "a").read_text() == "1"
    assert stat.S_IMODE(final.stat().st_mode) == 0o777 & ~_umask()
    assert _leftovers(tmp_path) == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_dir_failure_leaves_nothing(tmp_path: Path) -> None:
    final = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "half").write_text("partial")
        raise RuntimeError("training crashed")
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_failure_keeps_existing(tmp_path: Path) -> None:
    final = tmp_path / "out"
    final.mkdir()
    (final / "old").write_text("keep")
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "new").write_text("x")
        raise RuntimeError
    assert sorted(p.name for p in final.iterdir()) == ["old"]
    assert _leftovers(tmp_path) == []


def test_atomic_dir_replaces_whole_directory(tmp_path: Path) -> None:
    final = tmp_path / "out"
    final.mkdir()
    (final / "old").write_text("stale")
    with atomic_dir(final) as tmp:
        (tmp / "new").write_text("fresh")
    assert sorted(p.name for p in final.iterdir()) == ["new"]
    assert _leftovers(tmp_path) == []


def test_atomic_dir_replace_false(tmp_path: Path) -> None:
    final = tmp_path / "out"
    final.mkdir()
    with pytest.raises(FileExistsError), atomic_dir(final, replace=False) as tmp:
        (tmp / "x").write_text("x")
    assert list(final.iterdir()) == []
    assert _leftovers(tmp_path) == []


def test_atomic_dir_refuses_file_or_symlink(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("precious")
    with pytest.raises(ConfigError, match="not a directory"), atomic_dir(tmp_path / "file"):
        pass
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match="symlink"), atomic_dir(tmp_path / "link"):
        pass
    assert (tmp_path / "file").read_text() == "precious"


def test_atomic_dir_swap_failure_restores_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the new dir cannot be moved in after the old one was moved aside, the old comes back."""
    final = tmp_path / "out"
    final.mkdir()
    (final / "old").write_text("keep")
    real_rename = os.rename
    calls: list[tuple[str, str]] = []

    def flaky(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append((str(src), str(dst)))
        if len(calls) == 3:  # 1: tmp->final (refused, not empty), 2: final->backup, 3: tmp->final
            raise OSError(5, "I/O error")
        real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", flaky)
    with pytest.raises(OSError, match="I/O error"), atomic_dir(final) as tmp:
        (tmp / "new").write_text("x")
    assert sorted(p.name for p in final.iterdir()) == ["old"]
    assert _leftovers(tmp_path) == []


def test_atomic_path_publishes_on_success(tmp_path: Path) -> None:
    target = tmp_path / "release.parquet"
    with atomic_path(target, 0o640) as tmp:
        assert tmp.parent == tmp_path and not target.exists()
        with open(tmp, "wb") as handle:  # a streaming writer, chunk by chunk
            for chunk in (b"PAR1", b"...", b"PAR1"):
                handle.write(chunk)
    assert target.read_bytes() == b"PAR1...PAR1"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _leftovers(tmp_path) == []


def test_atomic_path_writer_may_recreate_file(tmp_path: Path) -> None:
    target = tmp_path / "fig.png"
    with atomic_path(target) as tmp:
        tmp.unlink()
        tmp.write_bytes(b"png")
    assert target.read_bytes() == b"png"


def test_atomic_path_failure_leaves_no_partial_output(tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    with pytest.raises(ValueError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half a file")
        raise ValueError("unseen category in chunk 3")
    assert list(tmp_path.iterdir()) == []
    target.write_bytes(b"old")
    with pytest.raises(ValueError), atomic_path(target) as tmp:
        tmp.write_bytes(b"new")
        raise ValueError
    assert target.read_bytes() == b"old"
    with pytest.raises(FileExistsError), atomic_path(target, exclusive=True) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []
