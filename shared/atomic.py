"""Write files and directories so that a reader never sees half of them.

A crash, a full disk or a refused bundle must not leave a truncated key, a half-written Parquet
file or a bundle directory holding new weights next to an old manifest. Every writer in
InfoShape-FL therefore writes into a temporary sibling of the target (same directory, hence the
same file system) and publishes it with one ``rename``: readers see either the old object or the
complete new one, and a failure leaves nothing behind but the old object.

Temporary names start with ``.`` and end with ``.tmp`` so that a crash (the one case where the
clean-up cannot run) leaves something obviously disposable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from shared.errors import ConfigError

__all__ = [
    "atomic_dir",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "default_file_mode",
]


def _current_umask() -> int:
    """The process umask, read without changing it where the OS allows (threads share it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no read-only query elsewhere: set and restore at once
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode ``open(path, "w")`` would give a new file (0o666 minus the umask)."""
    return 0o666 & ~_current_umask()


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable: the directory entry itself must reach the disk."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    mode: int | None = None,
    *,
    exclusive: bool = False,
) -> Path:
    """Write ``data`` to ``path`` all at once, or not at all.

    The parent directory must exist (creating it is the caller's decision). The bytes go to a
    temporary file beside ``path`` that is created with mode 0600 (so a secret
    is never readable by others, not even for an instant), flushed and fsynced, given ``mode``
    (default: what a normal new file would get under the current umask) and renamed over ``path``.

    ``exclusive=True`` refuses to replace an existing file, without a check-then-write race: the
    temporary file is hard-linked into place, which fails if the name is taken
    (``FileExistsError``).
    """
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    final_mode = default_file_mode() if mode is None else mode
    fd, tmp_name = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), final_mode)
        _publish_file(tmp, target, exclusive=exclusive)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(parent)
    return target


def atomic_write_text(
    path: str | os.PathLike[str],
    text: str,
    mode: int | None = None,
    *,
    encoding: str = "utf-8",
    exclusive: bool = False,
) -> Path:
    """:func:`atomic_write_bytes` for text (UTF-8 by default, newlines written as given)."""
    return atomic_write_bytes(path, text.encode(encoding), mode, exclusive=exclusive)


def _publish_file(tmp: Path, target: Path, *, exclusive: bool) -> None:
    if exclusive:
        os.link(tmp, target)  # fails with FileExistsError if the name is taken
        tmp.unlink()
    else:
        os.replace(tmp, target)


@contextlib.contextmanager
def atomic_path(
    final_path: str | os.PathLike[str], mode: int | None = None, *, exclusive: bool = False
) -> Iterator[Path]:
    """Yield a temporary path beside ``final_path`` for writers that want a path, not bytes.

    For outputs too large to hold in memory (a Parquet file written chunk by chunk with
    ``pyarrow.parquet.ParquetWriter``, a figure saved by matplotlib): write to the yielded path by
    any means; when the block succeeds the file is fsynced, given ``mode`` and renamed to
    ``final_path``; when it raises, the temporary file is removed and ``final_path`` is untouched
    (so a failed encode never leaves a partial output). ``exclusive`` as in
    :func:`atomic_write_bytes`.
    """
    target = Path(final_path)
    parent = target.parent if str(target.parent) else Path(".")
    final_mode = default_file_mode() if mode is None else mode
    fd, tmp_name = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # The writer may have replaced the file (unlink + create); open whatever is there now.
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), final_mode)
        _publish_file(tmp, target, exclusive=exclusive)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(parent)


@contextlib.contextmanager
def atomic_dir(final_path: str | os.PathLike[str], *, replace: bool = True) -> Iterator[Path]:
    """Build a directory in a temporary sibling and move it to ``final_path`` only on success.

    Usage::

        with atomic_dir(out) as tmp:
            (tmp / "a.json").write_bytes(...)
        # out/ now holds exactly what was written to tmp/

    If the block raises, the temporary directory is deleted and ``final_path`` is untouched. If
    ``final_path`` already is a directory it is *replaced as a whole* (not merged): it is first
    renamed aside, the new one renamed in, then the old one deleted; should the second rename fail,
    the old directory is put back. (There is a moment where ``final_path`` does not exist, but at no
    moment does it hold a mix of old and new files, and no failure loses both.) ``replace=False``
    raises ``FileExistsError`` instead. A ``final_path`` that is a file or a symlink is refused with
    :class:`~shared.errors.ConfigError` rather than deleted.
    """
    final = Path(final_path)
    parent = final.parent if str(final.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    _refuse_non_directory(final)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_current_umask())  # mkdtemp makes 0700; give the usual mode
        _publish_dir(tmp, final, replace=replace)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(parent)


def _refuse_non_directory(final: Path) -> None:
    """Never delete a file or follow a symlink in the place of the directory we publish."""
    try:
        info = os.lstat(final)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            f"output directory {final} exists and is not a directory (a file or a symlink); "
            "choose another path or remove it"
        )


def _publish_dir(tmp: Path, final: Path, *, replace: bool) -> None:
    """Rename ``tmp`` to ``final``; swap out an existing ``final`` without ever losing both."""
    if not replace and os.path.lexists(final):
        raise FileExistsError(f"{final} already exists")
    try:
        os.rename(tmp, final)  # fails when final is a non-empty directory (or any directory)
        return
    except OSError:
        if not final.exists():
            raise
    _refuse_non_directory(final)
    backup = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".old.tmp"))
    backup.rmdir()  # only the unique name is wanted; rename needs it free
    os.rename(final, backup)
    try:
        os.rename(tmp, final)
    except BaseException:
        os.rename(backup, final)
        raise
    shutil.rmtree(backup, ignore_errors=True)
