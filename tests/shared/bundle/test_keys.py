"""Key files: creation, permissions, passphrases, and one clear line for every mistake."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from shared.bundle import (
    PRIVATE_KEY_NAME,
    PUBLIC_KEY_NAME,
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
    load_trusted_keys,
)
from shared.errors import ConfigError, KeyFileError


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


def test_round_trip_without_passphrase(tmp_path: Path) -> None:
    paths = generate_keypair(tmp_path / "k")
    assert paths.private == tmp_path / "k" / PRIVATE_KEY_NAME
    assert paths.public == tmp_path / "k" / PUBLIC_KEY_NAME
    assert not paths.encrypted
    private = load_private_key(paths.private)
    public = load_public_key(paths.public)
    assert key_id(private) == key_id(public) == paths.key_id
    public.verify(private.sign(b"msg"), b"msg")
    assert paths.public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert paths.private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


@pytest.mark.parametrize("passphrase", ["correct horse", "pässwörd", b"raw-bytes"])
def test_passphrase_round_trip(tmp_path: Path, passphrase: str | bytes) -> None:
    paths = generate_keypair(tmp_path, passphrase)
    assert paths.encrypted
    assert b"ENCRYPTED PRIVATE KEY" in paths.private.read_bytes()
    assert key_id(load_private_key(paths.private, passphrase)) == paths.key_id


def test_wrong_or_missing_passphrase(tmp_path: Path) -> None:
    paths = generate_keypair(tmp_path, "right")
    with pytest.raises(KeyFileError) as exc:
        load_private_key(paths.private, "wrong")
    assert "wrong passphrase" in _one_line(exc) and str(paths.private) in str(exc.value)
    with pytest.raises(KeyFileError) as exc:
        load_private_key(paths.private)
    assert "passphrase is required" in _one_line(exc)


def test_passphrase_for_unencrypted_key_and_empty_passphrase(tmp_path: Path) -> None:
    paths = generate_keypair(tmp_path)
    with pytest.raises(KeyFileError) as exc:
        load_private_key(paths.private, "unexpected")
    assert "not encrypted" in _one_line(exc)
    with pytest.raises(ConfigError, match="must not be empty"):
        generate_keypair(tmp_path / "other", "")


def test_private_key_mode_0600_even_with_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        paths = generate_keypair(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(paths.private.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.public.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    first = generate_keypair(tmp_path)
    before = first.private.read_bytes()
    with pytest.raises(KeyFileError) as exc:
        generate_keypair(tmp_path)
    assert "already exists" in _one_line(exc)
    assert first.private.read_bytes() == before
    second = generate_keypair(tmp_path, overwrite=True)
    assert second.key_id != first.key_id
    assert key_id(load_public_key(second.public)) == second.key_id
    assert stat.S_IMODE(second.private.stat().st_mode) == 0o600


def test_refuses_when_only_public_exists(tmp_path: Path) -> None:
    (tmp_path / PUBLIC_KEY_NAME).write_text("something")
    with pytest.raises(KeyFileError, match="already exists"):
        generate_keypair(tmp_path)
    assert not (tmp_path / PRIVATE_KEY_NAME).exists()


def test_missing_key_files_name_path_and_fix(tmp_path: Path) -> None:
    for loader in (load_private_key, load_public_key):
        with pytest.raises(KeyFileError) as exc:
            loader(tmp_path / "nope.key")
        message = _one_line(exc)
        assert str(tmp_path / "nope.key") in message
        assert "run `infoshape keygen --out DIR`" in message


def test_not_a_key(tmp_path: Path) -> None:
    junk = tmp_path / "junk.key"
    junk.write_text("hello, I am not a key\n")
    with pytest.raises(KeyFileError) as exc:
        load_private_key(junk)
    assert "not a PEM private key" in _one_line(exc)
    with pytest.raises(KeyFileError) as exc:
        load_public_key(junk)
    assert "not a PEM public key" in _one_line(exc)
    empty = tmp_path / "empty.key"
    empty.write_bytes(b"")
    with pytest.raises(KeyFileError, match="empty"):
        load_private_key(empty)
    with pytest.raises(KeyFileError, match="is a directory"):
        load_private_key(tmp_path)
    big = tmp_path / "big.key"
    big.write_bytes(b"A" * 100_000)
    with pytest.raises(KeyFileError, match="too large"):
        load_public_key(big)


def test_public_and_private_swapped(tmp_path: Path) -> None:
    paths = generate_keypair(tmp_path)
    with pytest.raises(KeyFileError) as exc:
        load_private_key(paths.public)
    assert "holds a public key" in _one_line(exc)
    with pytest.raises(KeyFileError) as exc:
        load_public_key(paths.private)
    assert "holds a private key" in _one_line(exc)


def test_not_ed25519(tmp_path: Path) -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    private = tmp_path / "ec.key"
    private.write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = tmp_path / "ec.pub"
    public.write_bytes(
        other.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with pytest.raises(KeyFileError) as exc:
        load_private_key(private)
    assert "EC" in _one_line(exc) and "Ed25519" in str(exc.value)
    with pytest.raises(KeyFileError) as exc:
        load_public_key(public)
    assert "EC" in _one_line(exc) and "Ed25519" in str(exc.value)


def test_key_id_definition() -> None:
    private = ed25519.Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert key_id(private.public_key()) == hashlib.sha256(raw).hexdigest()[:16]
    assert key_id(private) == key_id(private.public_key())
    with pytest.raises(ConfigError):
        key_id("not a key")  # type: ignore[arg-type]


def test_load_trusted_keys_forms(tmp_path: Path) -> None:
    a = generate_keypair(tmp_path / "a")
    b = generate_keypair(tmp_path / "b")
    obj = ed25519.Ed25519PrivateKey.generate()
    assert list(load_trusted_keys(a.public)) == [a.key_id]
    assert list(load_trusted_keys(str(a.public))) == [a.key_id]
    both = load_trusted_keys([a.public, b.public, obj.public_key(), obj])
    assert set(both) == {a.key_id, b.key_id, key_id(obj)}
    pubs = tmp_path / "pins"
    pubs.mkdir()
    (pubs / "a.pub").write_bytes(a.public.read_bytes())
    (pubs / "b.pub").write_bytes(b.public.read_bytes())
    assert set(load_trusted_keys(pubs)) == {a.key_id, b.key_id}
    with pytest.raises(ConfigError, match="no trusted keys"):
        load_trusted_keys([])
    with pytest.raises(ConfigError):
        load_trusted_keys(42)  # type: ignore[arg-type]
    with pytest.raises(KeyFileError, match="no \\*.pub"):
        load_trusted_keys(tmp_path)  # holds only sub-directories
