"""Ed25519 signing keys: create, load, name.

Why Ed25519: small keys and signatures (32 / 64 bytes), deterministic signatures (no nonce to get
wrong), and strict verification in OpenSSL, so a bundle's signature either verifies or it does not.

Files (as written by ``infoshape keygen --out DIR``):

- ``DIR/signing.key`` - PKCS#8 PEM, encrypted when a passphrase is given, mode 0600 from the moment
  it exists (it is born as a 0600 temporary file and renamed into place);
- ``DIR/signing.pub`` - SubjectPublicKeyInfo PEM, the file a site pins as ``--trusted-key``.

A key is named by its *key id*, the first 16 hex digits of SHA-256 over the raw 32 public-key bytes;
a bundle's manifest records the id of the key that signed it, and trust state is kept per id.

Every failure here is a :class:`~shared.errors.KeyFileError` whose message is one line that names
the file and says what to do.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa, x448, x25519

from shared.atomic import atomic_write_bytes
from shared.errors import ConfigError, KeyFileError

__all__ = [
    "KEY_ID_HEX_DIGITS",
    "PRIVATE_KEY_NAME",
    "PUBLIC_KEY_NAME",
    "KeyPairPaths",
    "TrustedKeys",
    "generate_keypair",
    "key_id",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
]

PRIVATE_KEY_NAME = "signing.key"
PUBLIC_KEY_NAME = "signing.pub"
KEY_ID_HEX_DIGITS = 16
# A PEM Ed25519 key is ~120-250 bytes; anything much larger is the wrong file, so don't slurp it.
_MAX_KEY_FILE_BYTES = 64 * 1024
_KEYGEN_HINT = "run `infoshape keygen --out DIR` to create a key pair"

KeyLike: TypeAlias = ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey
PathLike: TypeAlias = str | os.PathLike[str]
TrustedKeys: TypeAlias = KeyLike | PathLike | Iterable[KeyLike | PathLike]


@dataclass(frozen=True)
class KeyPairPaths:
    """Where :func:`generate_keypair` wrote the pair, and the pair's key id."""

    private: Path
    public: Path
    key_id: str
    encrypted: bool


def key_id(public_key: KeyLike) -> str:
    """First 16 hex digits of SHA-256 over the raw 32 public-key bytes (a private key is allowed:
    its public half is used)."""
    if isinstance(public_key, ed25519.Ed25519PrivateKey):
        public_key = public_key.public_key()
    if not isinstance(public_key, ed25519.Ed25519PublicKey):
        raise ConfigError(
            f"key_id needs an Ed25519 public or private key, got {type(public_key).__name__}"
        )
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:KEY_ID_HEX_DIGITS]


def _passphrase_bytes(passphrase: str | bytes | None) -> bytes | None:
    if passphrase is None:
        return None
    data = passphrase.encode("utf-8") if isinstance(passphrase, str) else bytes(passphrase)
    if not data:
        raise ConfigError(
            "passphrase must not be empty; give a non-empty passphrase or none for an "
            "unencrypted key"
        )
    return data


def generate_keypair(
    out_dir: PathLike, passphrase: str | bytes | None = None, *, overwrite: bool = False
) -> KeyPairPaths:
    """Create a new Ed25519 key pair in ``out_dir`` (``signing.key`` + ``signing.pub``).

    Refuses to replace existing key files unless ``overwrite=True``: losing a signing key means
    every site must be re-provisioned, so it is never done by accident. The no-overwrite check is
    done by the file system (a hard link that fails if the name is taken), not a racy ``exists()``.
    """
    directory = Path(out_dir)
    if directory.exists() and not directory.is_dir():
        raise KeyFileError(f"key output {directory} exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    private_path = directory / PRIVATE_KEY_NAME
    public_path = directory / PUBLIC_KEY_NAME
    if not overwrite:
        for existing in (private_path, public_path):
            if os.path.lexists(existing):
                raise KeyFileError(
                    f"{existing} already exists; refusing to overwrite a key (choose another "
                    "--out directory or remove the old pair deliberately)"
                )

    secret = _passphrase_bytes(passphrase)
    private_key = ed25519.Ed25519PrivateKey.generate()
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(secret)
        if secret is not None
        else serialization.NoEncryption()
    )
    private_pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    public_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        atomic_write_bytes(private_path, private_pem, 0o600, exclusive=not overwrite)
    except FileExistsError:
        raise KeyFileError(f"{private_path} already exists; refusing to overwrite a key") from None
    try:
        atomic_write_bytes(public_path, public_pem, 0o644, exclusive=not overwrite)
    except BaseException:
        if not overwrite:  # don't leave a private key without its public half
            private_path.unlink(missing_ok=True)
        raise
    return KeyPairPaths(
        private=private_path,
        public=public_path,
        key_id=key_id(private_key),
        encrypted=secret is not None,
    )


def _read_key_file(path: Path, what: str) -> bytes:
    """Read a small key file, turning every OS failure into one clear KeyFileError line."""
    try:
        if path.is_dir():
            expected = PRIVATE_KEY_NAME if what == "private" else PUBLIC_KEY_NAME
            raise KeyFileError(f"{path} is a directory, not a {what} key file; pass {expected}")
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise KeyFileError(f"{what} key file {path} does not exist; {_KEYGEN_HINT}") from None
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} key file {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise KeyFileError(f"{what} key file {path} is empty; {_KEYGEN_HINT}")
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{path} is too large to be a {what} key file; pass the right file")
    return data


def _describe_key(key: object) -> str:
    kinds = [
        (rsa.RSAPrivateKey, "an RSA"),
        (rsa.RSAPublicKey, "an RSA"),
        (ec.EllipticCurvePrivateKey, "an EC"),
        (ec.EllipticCurvePublicKey, "an EC"),
        (dsa.DSAPrivateKey, "a DSA"),
        (dsa.DSAPublicKey, "a DSA"),
        (ed448.Ed448PrivateKey, "an Ed448"),
        (ed448.Ed448PublicKey, "an Ed448"),
        (x25519.X25519PrivateKey, "an X25519"),
        (x25519.X25519PublicKey, "an X25519"),
        (x448.X448PrivateKey, "an X448"),
        (x448.X448PublicKey, "an X448"),
    ]
    for cls, name in kinds:
        if isinstance(key, cls):
            return name
    return f"a {type(key).__name__}"


def load_private_key(
    path: PathLike, passphrase: str | bytes | None = None
) -> ed25519.Ed25519PrivateKey:
    """Load the Ed25519 signing key at ``path`` (decrypting it with ``passphrase`` if encrypted)."""
    key_path = Path(path)
    data = _read_key_file(key_path, "private")
    secret = _passphrase_bytes(passphrase)
    encrypted = b"BEGIN ENCRYPTED PRIVATE KEY" in data
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        raise KeyFileError(
            f"{key_path} holds a public key; signing needs the private key ({PRIVATE_KEY_NAME})"
        )
    if encrypted and secret is None:
        raise KeyFileError(f"private key {key_path} is encrypted; a passphrase is required")
    if not encrypted and secret is not None and b"PRIVATE KEY-----" in data:
        raise KeyFileError(
            f"private key {key_path} is not encrypted but a passphrase was given; omit it"
        )
    try:
        key = serialization.load_pem_private_key(data, password=secret)
    except TypeError as exc:  # cryptography's "password was (not) given" cases
        raise KeyFileError(f"private key {key_path}: {exc}") from None
    except ValueError:
        if encrypted:
            raise KeyFileError(f"wrong passphrase for private key {key_path}") from None
        raise KeyFileError(
            f"{key_path} is not a PEM private key (expected the `BEGIN PRIVATE KEY` file written "
            f"by `infoshape keygen`); {_KEYGEN_HINT}"
        ) from None
    except UnsupportedAlgorithm:
        raise KeyFileError(
            f"{key_path} holds a key of an unsupported algorithm; InfoShape-FL signs with Ed25519 "
            f"only - {_KEYGEN_HINT}"
        ) from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise KeyFileError(
            f"{key_path} holds {_describe_key(key)} key; InfoShape-FL signs with Ed25519 only - "
            f"{_KEYGEN_HINT}"
        )
    return key


def load_public_key(path: PathLike) -> ed25519.Ed25519PublicKey:
    """Load the Ed25519 public key at ``path`` (the ``signing.pub`` a site pins as trusted)."""
    key_path = Path(path)
    data = _read_key_file(key_path, "public")
    if b"PRIVATE KEY-----" in data:
        # Refuse rather than derive: a trust anchor should never be a secret copied around.
        raise KeyFileError(
            f"{key_path} holds a private key; pin the public key ({PUBLIC_KEY_NAME}) instead"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise KeyFileError(
            f"{key_path} is not a PEM public key (expected the `BEGIN PUBLIC KEY` file written by "
            f"`infoshape keygen`)"
        ) from None
    except UnsupportedAlgorithm:
        raise KeyFileError(
            f"{key_path} holds a public key of an unsupported algorithm; Ed25519 is required"
        ) from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise KeyFileError(
            f"{key_path} holds {_describe_key(key)} public key; bundles are signed with Ed25519"
        )
    return key


def load_trusted_keys(trusted: TrustedKeys) -> dict[str, ed25519.Ed25519PublicKey]:
    """Resolve what a caller trusts into ``{key_id: public_key}``.

    Accepts a public key object, a private key object (its public half), a path to a ``.pub``
    file, a directory (every ``*.pub`` in it), or any iterable of these. An empty result is a
    :class:`ConfigError`: trusting nothing is always a configuration mistake, never a policy.
    """
    items: list[object]
    if isinstance(trusted, str | os.PathLike | ed25519.Ed25519PublicKey):
        items = [trusted]
    elif isinstance(trusted, ed25519.Ed25519PrivateKey):
        items = [trusted]
    else:
        try:
            items = list(trusted)
        except TypeError:
            raise ConfigError(
                "trusted_keys must be a public key, a path to a .pub file or a directory of them, "
                f"or a list of these; got {type(trusted).__name__}"
            ) from None
    resolved: dict[str, ed25519.Ed25519PublicKey] = {}
    for item in items:
        if isinstance(item, ed25519.Ed25519PrivateKey):
            item = item.public_key()
        if isinstance(item, ed25519.Ed25519PublicKey):
            resolved[key_id(item)] = item
            continue
        if isinstance(item, str | os.PathLike):
            path = Path(item)
            if path.is_dir():
                pubs = sorted(path.glob("*.pub"))
                if not pubs:
                    raise KeyFileError(f"trusted-key directory {path} holds no *.pub file")
                for pub in pubs:
                    key = load_public_key(pub)
                    resolved[key_id(key)] = key
            else:
                key = load_public_key(path)
                resolved[key_id(key)] = key
            continue
        raise ConfigError(
            f"a trusted key must be an Ed25519 public key or a path, got {type(item).__name__}"
        )
    if not resolved:
        raise ConfigError("no trusted keys were given; pass at least one signing.pub")
    return resolved
