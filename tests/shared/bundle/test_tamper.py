"""Any single changed byte in any member is refused with a typed BundleError, by verify and load.

Every byte position of every member is tried (the bundle is small enough), on disk and in the
single-archive form, plus random multi-byte corruptions from hypothesis. A refused bundle must
never move the trust state.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared.bundle import (
    ARCHIVE_MAGIC,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    WEIGHTS_NAME,
    EncoderBundle,
    TrustState,
)
from shared.errors import BundleError, BundleFormatError, SignatureError, UnknownKeyError
from tests.shared.bundle import make_bundle, new_key

# What each member's corruption may legitimately surface as.
EXPECTED: dict[str, tuple[type[BundleError], ...]] = {
    # a flip in the manifest may break the JSON, change the key id, or just break the signature
    MANIFEST_NAME: (BundleFormatError, UnknownKeyError, SignatureError),
    SIGNATURE_NAME: (SignatureError,),
    WEIGHTS_NAME: (SignatureError,),  # same size, different bytes: the signed hash catches it
}


_KEY = new_key()


def _archive_with_spans() -> tuple[bytes, dict[str, tuple[int, int]]]:
    """One signed archive and where each member sits in it (start, length)."""
    data = make_bundle(version=3).to_bytes(_KEY)
    spans: dict[str, tuple[int, int]] = {}
    offset = len(ARCHIVE_MAGIC)
    for member in (MANIFEST_NAME, SIGNATURE_NAME, WEIGHTS_NAME):
        length = int.from_bytes(data[offset : offset + 8], "big")
        spans[member] = (offset + 8, length)
        offset += 8 + length
    return data, spans


_ARCHIVE = _archive_with_spans()


@pytest.fixture(scope="module")
def key() -> ed25519.Ed25519PrivateKey:
    return new_key()


@pytest.fixture(scope="module")
def bundle_dir(
    tmp_path_factory: pytest.TempPathFactory, key: ed25519.Ed25519PrivateKey
) -> Iterator[Path]:
    path = make_bundle(version=3).save(tmp_path_factory.mktemp("tamper") / "bundle", key)
    yield path


def _mask(position: int) -> int:
    """One change per position, varied across positions: single low/high bits and whole bytes."""
    return (0x01, 0x80, 0xFF, 0x20, 0x04)[position % 5]


def _flips(data: bytes) -> Iterator[tuple[int, bytes]]:
    for position in range(len(data)):
        changed = bytearray(data)
        changed[position] ^= _mask(position)
        yield position, bytes(changed)


def _assert_refused(
    directory: Path,
    key: ed25519.Ed25519PrivateKey,
    state: TrustState,
    expected: tuple[type[BundleError], ...],
    where: str,
) -> None:
    for check in (EncoderBundle.verify, EncoderBundle.load):
        try:
            check(directory, key.public_key(), state=state)
        except expected:
            continue
        except Exception as exc:  # noqa: BLE001 - report the exact escape
            pytest.fail(f"{where}: {check.__name__} raised {type(exc).__name__}: {exc}")
        pytest.fail(f"{where}: {check.__name__} accepted a tampered bundle")


@pytest.mark.parametrize("member", [MANIFEST_NAME, SIGNATURE_NAME, WEIGHTS_NAME])
def test_every_single_byte_flip_on_disk(
    bundle_dir: Path, key: ed25519.Ed25519PrivateKey, tmp_path: Path, member: str
) -> None:
    state = TrustState(tmp_path / "state")
    path = bundle_dir / member
    original = path.read_bytes()
    # Change the byte in place (pwrite) and put it back: rewriting the whole file each time is
    # ~1000x slower on some file systems and would push this test past the suite's budget.
    fd = os.open(path, os.O_RDWR)
    try:
        for position, byte in enumerate(original):
            os.pwrite(fd, bytes([byte ^ _mask(position)]), position)
            _assert_refused(bundle_dir, key, state, EXPECTED[member], f"{member}[{position}]")
            os.pwrite(fd, bytes([byte]), position)
    finally:
        os.close(fd)
        path.write_bytes(original)
    assert not state.path.exists()  # nothing refused ever reached the trust state
    EncoderBundle.load(bundle_dir, key.public_key(), state=state)  # the original still loads
    assert state.highest(EncoderBundle.verify(bundle_dir, key).key_id) == 3


def test_every_single_byte_flip_in_archive(key: ed25519.Ed25519PrivateKey, tmp_path: Path) -> None:
    data = make_bundle(version=3).to_bytes(key)
    state = TrustState(tmp_path / "state")
    for position, changed in _flips(data):
        # every position through from_bytes (the coordinator's path); verify shares the code, so a
        # third of the positions through it keeps the suite fast while still exercising it
        checks = (EncoderBundle.from_bytes, EncoderBundle.verify)[: 2 if position % 3 == 0 else 1]
        for check in checks:
            with pytest.raises(BundleError):
                check(changed, key.public_key(), state=state)
                pytest.fail(f"archive byte {position} flipped was accepted by {check.__name__}")
    assert not state.path.exists()
    assert data.startswith(ARCHIVE_MAGIC)


@settings(max_examples=100, deadline=None)
@given(
    member=st.sampled_from([MANIFEST_NAME, SIGNATURE_NAME, WEIGHTS_NAME]),
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=8
    ),
)
def test_random_corruptions_in_archive(member: str, edits: list[tuple[float, int]]) -> None:
    """Several bytes of one member changed at once (positions relative to the member)."""
    data, spans = _ARCHIVE
    start, length = spans[member]
    changed = bytearray(data)
    for fraction, mask in edits:
        changed[start + int(fraction * length)] ^= mask
    assume(bytes(changed) != data)  # two edits of one byte can cancel out
    with pytest.raises(BundleError):
        EncoderBundle.from_bytes(bytes(changed), _KEY.public_key())


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=80), st.binary(max_size=300))
def test_arbitrary_members_never_escape_as_untyped_errors(
    manifest: bytes, signature: bytes, weights: bytes
) -> None:
    """Well-framed archives with arbitrary contents: always a BundleError, never a crash."""
    parts = [ARCHIVE_MAGIC]
    for member in (manifest, signature, weights):
        parts += [len(member).to_bytes(8, "big"), member]
    with pytest.raises(BundleError):
        EncoderBundle.from_bytes(b"".join(parts), _KEY.public_key())


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(BundleError):
        EncoderBundle.from_bytes(data, _KEY.public_key())
