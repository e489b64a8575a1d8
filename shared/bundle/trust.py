"""Rollback protection: remember the highest encoder version accepted from each signing key.

A valid signature only says "the coordinator once signed this". Without memory, an attacker who
recorded an old bundle (say, one with a weaker λ, later replaced) could replay it forever. So a
site keeps ``STATE_DIR/trust-state.json``: per key id, the highest ``encoder_version`` it has
accepted. A lower version from the same key is refused (:class:`~shared.errors.RollbackError`);
the *same* version is fine (re-delivery, a restarted run).

The file is tiny JSON, rewritten atomically under an advisory lock so two encodes on one site
cannot lose each other's update. It is only advanced by ``EncoderBundle.load`` after every other
check passed; ``verify`` only reads it. A damaged state file is refused (fail closed), never
silently reset - resetting it would re-open exactly the replay it exists to stop.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.atomic import atomic_write_bytes
from shared.bundle.canonical import canonical_json, parse_json_strict
from shared.errors import ConfigError, RollbackError, TrustStateError

try:  # POSIX; elsewhere the state is still atomic, just not serialised between processes
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["STATE_FILE_NAME", "TrustState"]

STATE_FILE_NAME = "trust-state.json"
_LOCK_FILE_NAME = "trust-state.lock"
_STATE_FORMAT = 1
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class TrustState:
    """The highest accepted encoder version per signing key id, kept in ``state_dir``."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / STATE_FILE_NAME

    def __repr__(self) -> str:
        return f"TrustState({str(self.state_dir)!r})"

    # -- reading ---------------------------------------------------------------------------
    def _read(self) -> dict[str, dict[str, Any]]:
        """Parse the state file; a missing file is an empty state, a damaged one an error."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise TrustStateError(
                f"cannot read trust state {self.path}: {exc.strerror or exc}"
            ) from None
        damaged = (
            f"trust state {self.path} is damaged; refusing to guess which versions were accepted "
            "- restore it from a backup (deleting it forgets every accepted version)"
        )
        try:
            doc = parse_json_strict(data)
        except (ValueError, RecursionError):
            raise TrustStateError(damaged) from None
        if not isinstance(doc, dict) or doc.get("format_version") != _STATE_FORMAT:
            raise TrustStateError(damaged)
        accepted = doc.get("accepted")
        if not isinstance(accepted, dict):
            raise TrustStateError(damaged)
        for kid, entry in accepted.items():
            version = entry.get("version") if isinstance(entry, dict) else None
            if (
                not _KEY_ID.match(kid)
                or not isinstance(version, int)
                or isinstance(version, bool)
                or version < 1
            ):
                raise TrustStateError(damaged)
        return accepted

    def highest(self, key_id: str) -> int | None:
        """The highest version accepted from ``key_id``, or ``None`` if none yet."""
        entry = self._read().get(key_id)
        return None if entry is None else int(entry["version"])

    def entries(self) -> dict[str, int]:
        """``{key_id: highest accepted version}`` for every key seen."""
        return {kid: int(entry["version"]) for kid, entry in self._read().items()}

    # -- checking and recording ------------------------------------------------------------
    def _check(self, accepted: dict[str, dict[str, Any]], key_id: str, version: int) -> None:
        entry = accepted.get(key_id)
        if entry is not None and version < int(entry["version"]):
            raise RollbackError(
                f"version {version} from key {key_id} is older than version {entry['version']} "
                f"already accepted; refusing a rollback - ask the coordinator for version "
                f"{entry['version']} or newer (state: {self.path})"
            )

    def check(self, key_id: str, version: int) -> None:
        """Raise :class:`RollbackError` if ``version`` is lower than one already accepted."""
        self._check(self._read(), key_id, version)

    def accept(self, key_id: str, version: int, *, fingerprint: str | None = None) -> None:
        """Record ``version`` as accepted from ``key_id`` (checking for a rollback first).

        Check and write happen under one lock, so the stored value never goes down. The stored
        entry keeps the fingerprint and time of the accepted bundle for anyone auditing the site.
        """
        if not _KEY_ID.match(key_id):
            raise ConfigError(f"key id {key_id!r} is not 16 lowercase hex digits")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ConfigError(f"encoder version must be an integer >= 1, got {version!r}")
        try:
            self._accept_locked(key_id, version, fingerprint)
        except OSError as exc:
            raise TrustStateError(
                f"cannot record the accepted version in trust state {self.path}: "
                f"{exc.strerror or exc}; check that the state directory is writable"
            ) from None

    def _accept_locked(self, key_id: str, version: int, fingerprint: str | None) -> None:
        with self._locked():
            accepted = self._read()
            self._check(accepted, key_id, version)
            previous = accepted.get(key_id)
            if previous is not None and int(previous["version"]) == version:
                return  # re-delivery of the accepted version: nothing new to remember
            accepted[key_id] = {
                "version": version,
                "fingerprint": fingerprint,
                "accepted_at": _utc_now(),
            }
            doc = {"format_version": _STATE_FORMAT, "accepted": accepted}
            atomic_write_bytes(self.path, canonical_json(doc) + b"\n")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise read-check-write between processes sharing this state directory."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if fcntl is None:  # pragma: no cover
            yield
            return
        fd = os.open(self.state_dir / _LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock
