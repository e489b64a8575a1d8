"""Rollback protection: version N-1 after N is refused; the state only moves on a full success."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from shared.bundle import STATE_FILE_NAME, EncoderBundle, TrustState, key_id
from shared.errors import ConfigError, RollbackError, SignatureError, TrustStateError
from tests.shared.bundle import make_bundle, new_key


@pytest.fixture
def key() -> ed25519.Ed25519PrivateKey:
    return new_key()


def _versions(tmp_path: Path, key: ed25519.Ed25519PrivateKey, *versions: int) -> dict[int, Path]:
    return {v: make_bundle(version=v, seed=v).save(tmp_path / f"v{v}", key) for v in versions}


def test_older_version_refused_by_verify_and_load(
    tmp_path: Path, key: ed25519.Ed25519PrivateKey
) -> None:
    bundles = _versions(tmp_path, key, 4, 5)
    state_dir = tmp_path / "state"
    EncoderBundle.load(bundles[5], key.public_key(), state=state_dir)
    for check in (EncoderBundle.verify, EncoderBundle.load):
        with pytest.raises(RollbackError) as exc:
            check(bundles[4], key.public_key(), state=state_dir)
        message = str(exc.value)
        assert "version 4" in message and "version 5 already accepted" in message
        assert key_id(key) in message and "\n" not in message
    assert TrustState(state_dir).highest(key_id(key)) == 5


def test_same_version_again_and_newer_are_fine(
    tmp_path: Path, key: ed25519.Ed25519PrivateKey
) -> None:
    bundles = _versions(tmp_path, key, 5, 6)
    state = TrustState(tmp_path / "state")
    EncoderBundle.load(bundles[5], key, state=state)
    EncoderBundle.load(bundles[5], key, state=state)  # re-delivery
    EncoderBundle.load(bundles[6], key, state=state)
    assert state.highest(key_id(key)) == 6
    with pytest.raises(RollbackError):
        EncoderBundle.load(bundles[5], key, state=state)


def test_verify_never_records(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    bundles = _versions(tmp_path, key, 7)
    state = TrustState(tmp_path / "state")
    EncoderBundle.verify(bundles[7], key, state=state)
    assert not state.path.exists()
    assert state.highest(key_id(key)) is None


def test_without_state_no_rollback_check(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    bundles = _versions(tmp_path, key, 1, 2)
    EncoderBundle.load(bundles[2], key, state=tmp_path / "state")
    assert EncoderBundle.load(bundles[1], key).version == 1


def test_versions_are_per_key(tmp_path: Path) -> None:
    a, b = new_key(), new_key()
    state = tmp_path / "state"
    EncoderBundle.load(make_bundle(version=9).save(tmp_path / "a9", a), [a, b], state=state)
    EncoderBundle.load(make_bundle(version=1).save(tmp_path / "b1", b), [a, b], state=state)
    assert TrustState(state).entries() == {key_id(a): 9, key_id(b): 1}


def test_archive_rollback(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    v2, v3 = (make_bundle(version=v).to_bytes(key) for v in (2, 3))
    EncoderBundle.from_bytes(v3, key, state=tmp_path / "s")
    with pytest.raises(RollbackError):
        EncoderBundle.from_bytes(v2, key, state=tmp_path / "s")


def test_failed_load_does_not_move_state(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    bundles = _versions(tmp_path, key, 2, 8)
    state = TrustState(tmp_path / "state")
    EncoderBundle.load(bundles[2], key, state=state)
    weights = bundles[8] / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(SignatureError, match="weights do not match the signed hash"):
        EncoderBundle.load(bundles[8], key, state=state)
    assert state.highest(key_id(key)) == 2


def test_state_file_format_and_fingerprint(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    bundles = _versions(tmp_path, key, 3)
    loaded = EncoderBundle.load(bundles[3], key, state_dir=tmp_path / "state")
    doc = json.loads((tmp_path / "state" / STATE_FILE_NAME).read_text())
    entry = doc["accepted"][key_id(key)]
    assert doc["format_version"] == 1
    assert entry["version"] == 3 and entry["fingerprint"] == loaded.fingerprint
    assert entry["accepted_at"].endswith("Z")


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"format_version": 1}',
        '{"format_version": 1, "accepted": {"0123456789abcdef": {"version": "5"}}}',
        '{"format_version": 1, "accepted": {"nothex": {"version": 5}}}',
        '{"format_version": 1, "accepted": {"0123456789abcdef": {"version": NaN}}}',
    ],
)
def test_damaged_state_fails_closed(
    tmp_path: Path, key: ed25519.Ed25519PrivateKey, content: str
) -> None:
    bundles = _versions(tmp_path, key, 1)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / STATE_FILE_NAME).write_text(content)
    for check in (EncoderBundle.verify, EncoderBundle.load):
        with pytest.raises(TrustStateError, match="damaged"):
            check(bundles[1], key, state=state_dir)
    assert (state_dir / STATE_FILE_NAME).read_text() == content  # never silently reset


def test_accept_rules(tmp_path: Path) -> None:
    state = TrustState(tmp_path)
    state.accept("0123456789abcdef", 4)
    state.check("0123456789abcdef", 4)
    state.check("fedcba9876543210", 1)
    with pytest.raises(RollbackError):
        state.check("0123456789abcdef", 3)
    with pytest.raises(RollbackError):
        state.accept("0123456789abcdef", 3)
    with pytest.raises(ConfigError):
        state.accept("0123456789abcdef", 0)
    with pytest.raises(ConfigError):
        state.accept("XYZ", 5)
    assert state.entries() == {"0123456789abcdef": 4}


def test_concurrent_accepts_keep_the_maximum(tmp_path: Path) -> None:
    kid = "0123456789abcdef"
    errors: list[BaseException] = []

    def worker(version: int) -> None:
        try:
            TrustState(tmp_path).accept(kid, version)
        except RollbackError:
            pass  # a higher version won the race: refusing the lower one is correct
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(v,)) for v in range(1, 21)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert TrustState(tmp_path).highest(kid) == 20


def test_unwritable_state_is_a_typed_error(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    bundles = _versions(tmp_path, key, 1)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the state directory should be")
    with pytest.raises(TrustStateError, match="trust state"):
        EncoderBundle.load(bundles[1], key, state=blocker / "state")
