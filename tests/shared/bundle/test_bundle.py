"""EncoderBundle: round trips, what the manifest holds, and every refusal that is not a tamper."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

import shared.bundle.bundle as bundle_module
from shared.bundle import (
    ARCHIVE_MAGIC,
    BUNDLE_FILES,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    WEIGHTS_NAME,
    EncoderBundle,
    canonical_json,
    generate_keypair,
    key_id,
    load_private_key,
)
from shared.errors import (
    BundleError,
    BundleFormatError,
    ConfigError,
    SignatureError,
    UnknownKeyError,
)
from tests.shared.bundle import make_bundle, new_key, small_tensors


@pytest.fixture
def key() -> ed25519.Ed25519PrivateKey:
    return new_key()


@pytest.fixture
def saved(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> Path:
    return make_bundle(version=2).save(tmp_path / "bundle", key)


def _write_signed(
    directory: Path, manifest_bytes: bytes, weights: bytes, key: ed25519.Ed25519PrivateKey
) -> Path:
    """A bundle whose manifest bytes we choose, validly signed: tests what is checked *after*
    the signature."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST_NAME).write_bytes(manifest_bytes)
    (directory / SIGNATURE_NAME).write_bytes(key.sign(manifest_bytes))
    (directory / WEIGHTS_NAME).write_bytes(weights)
    return directory


# -- round trips -------------------------------------------------------------------------------
def test_save_load_round_trip(saved: Path, key: ed25519.Ed25519PrivateKey) -> None:
    assert sorted(p.name for p in saved.iterdir()) == sorted(BUNDLE_FILES)
    loaded = EncoderBundle.load(saved, key.public_key())
    original = small_tensors()
    assert set(loaded.tensors) == set(original)
    for name, array in original.items():
        np.testing.assert_array_equal(loaded.tensors[name], array)
        assert loaded.tensors[name].dtype == array.dtype
    assert loaded.version == 2
    assert loaded.key_id == key_id(key)
    assert loaded.is_signed
    assert loaded.lam == 1.0 and loaded.schedule == "alternating"
    assert loaded.training_metrics["mi_public"] == [0.1, 0.25, 0.4, 0.45]
    assert loaded.shaper == {"name": "infoshape", "config": {"seed": 0}}
    assert loaded.fingerprint == hashlib.sha256((saved / MANIFEST_NAME).read_bytes()).hexdigest()


def test_manifest_carries_every_design_field(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST_NAME).read_bytes())
    for name in (
        "format_version",
        "encoder_version",
        "architecture",
        "input_schema",
        "labels",
        "lambda",
        "shaper",
        "schedule",
        "training_metrics",
        "weights_sha256",
        "public_data_fingerprint",
        "created_at",
        "key_id",
    ):
        assert name in manifest, name
    weights = (saved / WEIGHTS_NAME).read_bytes()
    assert manifest["weights_sha256"] == hashlib.sha256(weights).hexdigest()
    assert manifest["weights_size"] == len(weights)
    assert (saved / MANIFEST_NAME).read_bytes() == canonical_json(manifest)
    assert len((saved / SIGNATURE_NAME).read_bytes()) == 64


def test_verify_reports_what_was_checked(saved: Path, key: ed25519.Ed25519PrivateKey) -> None:
    info = EncoderBundle.verify(saved, [key.public_key()])
    assert info.key_id == key_id(key) and info.version == 2 and info.format_version == 1
    assert info.fingerprint == hashlib.sha256((saved / MANIFEST_NAME).read_bytes()).hexdigest()
    assert info.tensors["layers.1.weight"] == {"dtype": "float32", "shape": [3, 10]}
    summary = info.to_dict()
    json.dumps(summary)
    assert summary["encoder_version"] == 2 and summary["source"] == str(saved)


def test_trusted_keys_as_paths(tmp_path: Path) -> None:
    paths = generate_keypair(tmp_path / "keys", "pw")
    bundle_dir = make_bundle().save(tmp_path / "b", load_private_key(paths.private, "pw"))
    assert EncoderBundle.load(bundle_dir, paths.public).key_id == paths.key_id
    assert EncoderBundle.load(bundle_dir, str(paths.public)).key_id == paths.key_id
    assert EncoderBundle.load(bundle_dir, tmp_path / "keys").key_id == paths.key_id
    other = new_key()
    assert EncoderBundle.load(bundle_dir, [other.public_key(), paths.public]).version == 1


def test_bytes_round_trip_and_archive_file(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    bundle = make_bundle(version=4)
    with pytest.raises(ConfigError, match="not signed"):
        bundle.to_bytes()
    data = bundle.to_bytes(key)
    assert data.startswith(ARCHIVE_MAGIC)
    again = EncoderBundle.from_bytes(data, key.public_key())
    assert again.fingerprint == bundle.fingerprint and again.version == 4
    np.testing.assert_array_equal(again.tensors["layers.0.bias"], small_tensors()["layers.0.bias"])
    assert again.to_bytes() == data  # a loaded bundle re-ships its original signed bytes
    assert EncoderBundle.from_bytes(memoryview(data), key.public_key()).version == 4
    archive = tmp_path / "bundle.isfl"
    archive.write_bytes(data)
    assert EncoderBundle.verify(archive, key.public_key()).fingerprint == bundle.fingerprint
    # directory and archive forms carry the same signed bytes
    directory = EncoderBundle.from_bytes(data, key.public_key()).save(tmp_path / "d", key)
    assert EncoderBundle.load(directory, key.public_key()).to_bytes() == data
    with pytest.raises(ConfigError):
        EncoderBundle.from_bytes("text", key.public_key())  # type: ignore[arg-type]


def test_tensor_dtypes_and_shapes_round_trip(
    tmp_path: Path, key: ed25519.Ed25519PrivateKey
) -> None:
    tensors = {
        "f16": np.array([1.5, -2.0], dtype=np.float16),
        "f64": np.linspace(0, 1, 7),
        "i8": np.array([-3, 4], dtype=np.int8),
        "u64": np.array([2**63], dtype=np.uint64),
        "flag": np.array([True, False]),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "big_endian": np.arange(4, dtype=">i4"),
        "strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    }
    loaded = EncoderBundle.load(make_bundle(tensors=tensors).save(tmp_path / "b", key), key)
    for name, array in tensors.items():
        np.testing.assert_array_equal(loaded.tensors[name], array)
        assert loaded.tensors[name].shape == array.shape
    assert loaded.tensors["big_endian"].dtype == np.dtype("<i4")


def test_tensors_are_copies(key: ed25519.Ed25519PrivateKey) -> None:
    source = small_tensors()
    bundle = make_bundle(tensors=source)
    source["layers.0.bias"][:] = 99.0  # the caller's array changing later ...
    handed_out = bundle.tensors
    handed_out["layers.0.bias"][:] = 42.0  # ... or ours being edited ...
    assert handed_out["layers.0.bias"].flags.writeable
    # ... never changes what gets signed
    fresh = EncoderBundle.from_bytes(bundle.to_bytes(key), key.public_key())
    np.testing.assert_array_equal(fresh.tensors["layers.0.bias"], small_tensors()["layers.0.bias"])
    manifest = bundle.manifest
    manifest["encoder_version"] = 99
    assert bundle.version == 1


def test_extra_and_created_at(key: ed25519.Ed25519PrivateKey) -> None:
    bundle = make_bundle(
        extra={"run_id": "r1", "encoder_version": 77},
        created_at=datetime(2025, 5, 6, 7, 8, 9, tzinfo=timezone(timedelta(hours=2))),
    )
    assert bundle.created_at == "2025-05-06T05:08:09Z"
    assert bundle.extra == {"run_id": "r1", "encoder_version": 77}
    assert bundle.version == 1  # extra can never shadow a signed field
    now = make_bundle(created_at=None).created_at
    assert datetime.fromisoformat(now).tzinfo is not None
    assert abs(datetime.fromisoformat(now) - datetime.now(UTC)) < timedelta(minutes=5)


def test_input_schema_object_with_to_dict(key: ed25519.Ed25519PrivateKey) -> None:
    class Schema:
        def to_dict(self) -> dict[str, Any]:
            return {"features": ["a", "b"], "mean": np.array([0.5, 1.5])}

    bundle = make_bundle(input_schema=Schema())
    assert bundle.input_schema == {"features": ["a", "b"], "mean": [0.5, 1.5]}


def test_constructor_from_manifest(key: ed25519.Ed25519PrivateKey) -> None:
    base = make_bundle()
    again = EncoderBundle(base.manifest, small_tensors())
    assert again.weights_sha256 == base.weights_sha256
    with pytest.raises(ConfigError, match="other weights"):
        EncoderBundle(base.manifest, small_tensors(seed=1))


# -- what create refuses ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"training_metrics": {"mi": [0.1, float("nan")]}}, r"training_metrics\.mi\[1\]"),
        ({"lam": float("inf")}, "infinity"),
        ({"lam": -1.0}, "lambda"),
        ({"encoder_version": 0}, "encoder_version"),
        ({"encoder_version": True}, "encoder_version"),
        ({"encoder_version": 1.5}, "encoder_version"),
        ({"shaper": ""}, "shaper"),
        ({"schedule": 3}, "schedule"),
        ({"labels": ["L"]}, "labels"),
        ({"created_at": datetime(2025, 1, 1)}, "timezone"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"tensors": {"w": [1.0, 2.0]}}, "numpy array"),
        ({"tensors": {"w": np.array([1 + 2j])}}, "dtype"),
        ({"tensors": {"w": np.array(["a"], dtype=object)}}, "dtype"),
        ({"tensors": {"__metadata__": np.zeros(1)}}, "not allowed"),
        ({"tensors": {1: np.zeros(1)}}, "not allowed"),
    ],
)
def test_create_refuses(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_bundle(**overrides)


def test_save_refuses_foreign_directory(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    target = tmp_path / "home"
    target.mkdir()
    (target / "thesis.tex").write_text("do not delete")
    with pytest.raises(ConfigError, match="thesis.tex"):
        make_bundle().save(target, key)
    assert (target / "thesis.tex").read_text() == "do not delete"


def test_save_replaces_previous_bundle(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    target = make_bundle(version=1).save(tmp_path / "b", key)
    make_bundle(version=2, seed=3).save(target, key)
    assert EncoderBundle.load(target, key).version == 2
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


def test_failed_save_leaves_nothing(
    tmp_path: Path, key: ed25519.Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bundle_module.os, "fsync", boom)
    with pytest.raises(OSError):
        make_bundle().save(tmp_path / "b", key)
    assert list(tmp_path.iterdir()) == []


# -- keys ---------------------------------------------------------------------------------------
def test_other_key_is_unknown(saved: Path, key: ed25519.Ed25519PrivateKey) -> None:
    stranger = new_key()
    with pytest.raises(UnknownKeyError) as exc:
        EncoderBundle.verify(saved, stranger.public_key())
    message = str(exc.value)
    assert key_id(key) in message and key_id(stranger) in message and "\n" not in message
    with pytest.raises(UnknownKeyError):
        EncoderBundle.load(saved, [stranger.public_key()])


def test_forged_key_id_is_a_bad_signature(tmp_path: Path) -> None:
    """Signed by an attacker's key, but the manifest claims the trusted key's id."""
    trusted, attacker = new_key(), new_key()
    bundle_dir = make_bundle().save(tmp_path / "b", attacker)
    manifest = json.loads((bundle_dir / MANIFEST_NAME).read_bytes())
    manifest["key_id"] = key_id(trusted)
    forged = canonical_json(manifest)
    (bundle_dir / MANIFEST_NAME).write_bytes(forged)
    (bundle_dir / SIGNATURE_NAME).write_bytes(attacker.sign(forged))
    for check in (EncoderBundle.verify, EncoderBundle.load):
        with pytest.raises(SignatureError, match="does not verify"):
            check(bundle_dir, trusted.public_key())


# -- missing / truncated / malformed ------------------------------------------------------------
@pytest.mark.parametrize("member", BUNDLE_FILES)
def test_missing_file(saved: Path, key: ed25519.Ed25519PrivateKey, member: str) -> None:
    (saved / member).unlink()
    for check in (EncoderBundle.verify, EncoderBundle.load):
        with pytest.raises(BundleFormatError) as exc:
            check(saved, key.public_key())
        assert member in str(exc.value) and "missing" in str(exc.value)


def test_missing_directory(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    with pytest.raises(BundleFormatError, match="does not exist"):
        EncoderBundle.load(tmp_path / "nowhere", key.public_key())


@pytest.mark.parametrize("member", BUNDLE_FILES)
def test_truncated_file(saved: Path, key: ed25519.Ed25519PrivateKey, member: str) -> None:
    original = (saved / member).read_bytes()
    for length in sorted({0, 1, len(original) // 2, len(original) - 1}):
        (saved / member).write_bytes(original[:length])
        for check in (EncoderBundle.verify, EncoderBundle.load):
            with pytest.raises(BundleFormatError) as exc:
                check(saved, key.public_key())
            assert member in str(exc.value)


@pytest.mark.parametrize("member", [SIGNATURE_NAME, WEIGHTS_NAME])
def test_appended_bytes(saved: Path, key: ed25519.Ed25519PrivateKey, member: str) -> None:
    with open(saved / member, "ab") as handle:
        handle.write(b"\x00")
    with pytest.raises(BundleFormatError, match=member):
        EncoderBundle.verify(saved, key.public_key())


def test_member_that_is_not_a_file(saved: Path, key: ed25519.Ed25519PrivateKey) -> None:
    (saved / WEIGHTS_NAME).unlink()
    (saved / WEIGHTS_NAME).mkdir()
    with pytest.raises(BundleFormatError, match=WEIGHTS_NAME):
        EncoderBundle.load(saved, key.public_key())


def test_archive_every_truncation(key: ed25519.Ed25519PrivateKey) -> None:
    data = make_bundle().to_bytes(key)
    for length in range(len(data)):
        with pytest.raises(BundleFormatError):
            EncoderBundle.from_bytes(data[:length], key.public_key())
    with pytest.raises(BundleFormatError, match="trailing"):
        EncoderBundle.from_bytes(data + b"\x00", key.public_key())
    with pytest.raises(BundleFormatError, match="magic"):
        EncoderBundle.from_bytes(b"PK\x03\x04" + data, key.public_key())


def test_signed_but_not_canonical(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    good = make_bundle().save(tmp_path / "good", key)
    manifest = json.loads((good / MANIFEST_NAME).read_bytes())
    pretty = json.dumps(manifest, indent=2, sort_keys=True).encode()
    bad = _write_signed(tmp_path / "bad", pretty, (good / WEIGHTS_NAME).read_bytes(), key)
    with pytest.raises(BundleFormatError, match="canonical"):
        EncoderBundle.verify(bad, key.public_key())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"encoder_version": 0}, "encoder_version"),
        ({"format_version": 2}, "format_version"),
        ({"weights_sha256": "abc"}, "weights_sha256"),
        ({"created_at": "2025-01-01T00:00:00"}, "created_at"),
        ({"tensors": {"x": {"dtype": "float32", "shape": [1]}}}, "tensors"),
    ],
)
def test_signed_but_malformed_manifest(
    tmp_path: Path, key: ed25519.Ed25519PrivateKey, change: dict[str, Any], match: str
) -> None:
    good = make_bundle().save(tmp_path / "good", key)
    manifest = json.loads((good / MANIFEST_NAME).read_bytes())
    manifest.update(change)
    bad = _write_signed(
        tmp_path / "bad", canonical_json(manifest), (good / WEIGHTS_NAME).read_bytes(), key
    )
    with pytest.raises(BundleFormatError, match=match):
        EncoderBundle.load(bad, key.public_key())


def test_signed_garbage_weights(tmp_path: Path, key: ed25519.Ed25519PrivateKey) -> None:
    """Hash and size match (the signer vouched for them) but the bytes are not safetensors."""
    garbage = b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"
    manifest = make_bundle().manifest
    manifest.update(
        key_id=key_id(key),
        weights_sha256=hashlib.sha256(garbage).hexdigest(),
        weights_size=len(garbage),
    )
    bad = _write_signed(tmp_path / "bad", canonical_json(manifest), garbage, key)
    with pytest.raises(BundleFormatError, match="safetensors"):
        EncoderBundle.load(bad, key.public_key())


def test_tensors_parsed_only_after_verification(
    saved: Path, key: ed25519.Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = bundle_module.safetensors_load

    def spy(data: bytes) -> dict[str, np.ndarray]:
        calls.append(len(data))
        return real(data)

    monkeypatch.setattr(bundle_module, "safetensors_load", spy)
    for member, position in ((MANIFEST_NAME, 40), (SIGNATURE_NAME, 5), (WEIGHTS_NAME, 200)):
        original = (saved / member).read_bytes()
        tampered = bytearray(original)
        tampered[position] ^= 0x01
        (saved / member).write_bytes(bytes(tampered))
        with pytest.raises(BundleError):
            EncoderBundle.load(saved, key.public_key())
        (saved / member).write_bytes(original)
    assert calls == []
    EncoderBundle.load(saved, key.public_key())
    assert len(calls) == 1


def test_state_and_state_dir_are_exclusive(saved: Path, key: ed25519.Ed25519PrivateKey) -> None:
    with pytest.raises(ConfigError, match="either"):
        EncoderBundle.load(saved, key, state=saved.parent / "s1", state_dir=saved.parent / "s2")
