"""The signed encoder bundle: what the coordinator ships and every site must verify before use.

Layout (a directory; the same three members also travel as one archive, see :meth:`to_bytes`)::

    weights.safetensors   tensors only (safetensors: a JSON header + raw little-endian data;
                          parsing it can never run code, unlike pickle / torch.load)
    manifest.json         canonical JSON (shared.bundle.canonical); carries the SHA-256 and size
                          of weights.safetensors, so signing the manifest signs the weights too
    signature             raw 64-byte Ed25519 signature over the exact bytes of manifest.json

Verification order is the security argument, so it is fixed and the same for a directory, an
archive file or raw bytes:

1. read ``manifest.json`` and ``signature`` (size-capped; missing / empty / truncated →
   :class:`BundleFormatError`);
2. parse the manifest strictly, only to learn ``format_version`` and ``key_id``;
3. find that key among the trusted keys (:class:`UnknownKeyError` otherwise);
4. verify the signature over the manifest bytes *as read* (:class:`SignatureError`); from here on
   the manifest is the signer's word;
5. check the manifest is canonical and well-formed (:class:`BundleFormatError`);
6. read the weights bytes once; check their size (truncation → :class:`BundleFormatError`) and
   SHA-256 against the signed values (:class:`SignatureError`); the same in-memory bytes are parsed
   next, so the file cannot change between hashing and parsing;
7. only now parse the tensors (safetensors) and check them against the manifest's tensor table;
8. rollback check against the site's :class:`TrustState` (:class:`RollbackError`);
9. ``load`` (never ``verify``) records the version as accepted - the last step, so a bundle that
   failed anything above never moves the state.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import os
import re
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519
from safetensors import SafetensorError
from safetensors.numpy import load as safetensors_load
from safetensors.numpy import save as safetensors_save

from shared.atomic import atomic_dir
from shared.bundle.canonical import canonical_json, dump_plain, parse_json_strict, to_jsonable
from shared.bundle.keys import TrustedKeys, key_id, load_private_key, load_trusted_keys
from shared.bundle.trust import TrustState
from shared.errors import (
    BundleFormatError,
    ConfigError,
    SignatureError,
    UnknownKeyError,
)

__all__ = [
    "ARCHIVE_MAGIC",
    "BUNDLE_FILES",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "SIGNATURE_NAME",
    "WEIGHTS_NAME",
    "EncoderBundle",
    "StateLike",
    "VerifiedInfo",
]

FORMAT_VERSION = 1
WEIGHTS_NAME = "weights.safetensors"
MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "signature"
BUNDLE_FILES = (MANIFEST_NAME, SIGNATURE_NAME, WEIGHTS_NAME)
SIGNATURE_BYTES = 64
# Archive: magic, then manifest, signature, weights, each as a big-endian u64 length + bytes.
ARCHIVE_MAGIC = b"ISFLBDL1"
_LENGTH = struct.Struct(">Q")
# Caps so that a hostile or wrong file cannot make a site allocate gigabytes before verification.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_WEIGHTS_BYTES = 1024 * 1024 * 1024
_MAX_SIGNATURE_FILE_BYTES = 4096  # read a little more than 64 so a wrong size gets a precise error
_MAX_ARCHIVE_BYTES = (
    len(ARCHIVE_MAGIC)
    + 3 * _LENGTH.size
    + MAX_MANIFEST_BYTES
    + _MAX_SIGNATURE_FILE_BYTES
    + MAX_WEIGHTS_BYTES
)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")
_DTYPES = frozenset(
    [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    ]
)
_RESERVED_TENSOR_NAMES = frozenset(["__metadata__"])

StateLike: TypeAlias = TrustState | str | os.PathLike[str] | None
BytesLike: TypeAlias = bytes | bytearray | memoryview
Source: TypeAlias = str | os.PathLike[str] | BytesLike


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _created_at_text(value: datetime | str | None) -> str:
    if value is None:
        return _utc_now()
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ConfigError("created_at must be timezone-aware (UTC); got a naive datetime")
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return value


def _is_utc_iso(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    offset = parsed.utcoffset()
    return offset is not None and offset.total_seconds() == 0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _manifest_problem(manifest: Mapping[str, Any], *, signed: bool) -> str | None:
    """First rule the manifest breaks, or ``None``. Shared by create (ConfigError) and load
    (BundleFormatError) so a bundle we write is exactly a bundle we accept."""
    m = manifest
    if m.get("format_version") != FORMAT_VERSION or not _is_int(m.get("format_version")):
        return f"format_version is {m.get('format_version')!r}; this version reads {FORMAT_VERSION}"
    version = m.get("encoder_version")
    if not _is_int(version) or version < 1:
        return f"encoder_version must be an integer >= 1, got {version!r}"
    for name in ("architecture", "input_schema", "labels", "training_metrics"):
        if not isinstance(m.get(name), dict):
            return f"{name} must be a JSON object, got {type(m.get(name)).__name__}"
    lam = m.get("lambda", "missing")
    if lam is not None and (not isinstance(lam, int | float) or isinstance(lam, bool) or lam < 0):
        return f"lambda must be a number >= 0 (or null for shapers without one), got {lam!r}"
    shaper = m.get("shaper")
    shaper_name = shaper.get("name") if isinstance(shaper, dict) else shaper
    if not isinstance(shaper_name, str) or not shaper_name:
        return "shaper must be a non-empty name or an object with a non-empty 'name'"
    if "schedule" not in m or not (m["schedule"] is None or isinstance(m["schedule"], str | dict)):
        return "schedule must be a name, an object or null"
    fingerprint = m.get("public_data_fingerprint", 0)
    if fingerprint is not None and not isinstance(fingerprint, str):
        return "public_data_fingerprint must be a string (or null)"
    if not isinstance(m.get("weights_sha256"), str) or not _HEX64.match(m["weights_sha256"]):
        return "weights_sha256 must be 64 lowercase hex digits"
    if not _is_int(m.get("weights_size")) or m["weights_size"] < 0:
        return "weights_size must be an integer >= 0"
    spec = m.get("tensors")
    if not isinstance(spec, dict):
        return "tensors must map each tensor name to its dtype and shape"
    for name, entry in spec.items():
        if (
            not isinstance(entry, dict)
            or entry.get("dtype") not in _DTYPES
            or not isinstance(entry.get("shape"), list)
            or not all(_is_int(d) and d >= 0 for d in entry["shape"])
        ):
            return f"tensors[{name!r}] must be {{'dtype': <one of {sorted(_DTYPES)}>, 'shape': []}}"
    if not _is_utc_iso(m.get("created_at")):
        return f"created_at must be an ISO-8601 UTC time, got {m.get('created_at')!r}"
    kid = m.get("key_id")
    if signed or kid is not None:
        if not isinstance(kid, str) or not _KEY_ID.match(kid):
            return f"key_id must be 16 lowercase hex digits, got {kid!r}"
    if "extra" in m and not isinstance(m["extra"], dict):
        return "extra must be a JSON object"
    return None


def _normalise_tensors(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Read-only, C-contiguous, little-endian copies: what safetensors stores, frozen so the bytes
    we hashed cannot drift from the arrays we hand out."""
    if not isinstance(tensors, Mapping):
        raise ConfigError(f"tensors must be a dict of name -> numpy array, got {type(tensors)}")
    out: dict[str, np.ndarray] = {}
    for name, array in tensors.items():
        if not isinstance(name, str) or not name or name in _RESERVED_TENSOR_NAMES:
            raise ConfigError(f"tensor name {name!r} is not allowed (non-empty string required)")
        if not isinstance(array, np.ndarray):
            raise ConfigError(
                f"tensor {name!r} is a {type(array).__name__}; pass a numpy array "
                "(e.g. tensor.detach().cpu().numpy())"
            )
        if array.dtype.name not in _DTYPES:
            raise ConfigError(
                f"tensor {name!r} has dtype {array.dtype}; allowed: {', '.join(sorted(_DTYPES))}"
            )
        frozen = np.array(array, dtype=array.dtype.newbyteorder("<"), order="C", copy=True)
        frozen.setflags(write=False)
        out[name] = frozen
    return out


def _tensor_spec(tensors: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {
        name: {"dtype": array.dtype.name, "shape": [int(d) for d in array.shape]}
        for name, array in tensors.items()
    }


def _as_dict(value: Any, name: str) -> Any:
    """Accept objects with ``to_dict()`` (e.g. ``InputSchema``) where a JSON object is stored."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, Mapping):
        value = to_dict()
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be a dict (or have .to_dict()), got {type(value).__name__}")
    return value


def _resolve_state(state: StateLike, state_dir: StateLike) -> TrustState | None:
    if state is not None and state_dir is not None:
        raise ConfigError("pass either state or state_dir, not both")
    chosen = state if state is not None else state_dir
    if chosen is None or isinstance(chosen, TrustState):
        return chosen
    return TrustState(chosen)


def _as_private_key(private_key: Any) -> ed25519.Ed25519PrivateKey:
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return private_key
    if isinstance(private_key, str | os.PathLike):
        return load_private_key(private_key)
    raise ConfigError(
        f"private_key must be an Ed25519 private key or a path to one, got {type(private_key)}"
    )


# ---------------------------------------------------------------------------------------------
# Reading the three members
# ---------------------------------------------------------------------------------------------
@dataclass
class _Raw:
    """The members of a bundle as bytes, plus how to name them in error messages."""

    label: str
    manifest: bytes
    signature: bytes
    weights: bytes | None  # read lazily for a directory: only after the signature verified
    weights_path: Path | None = None

    def name(self, member: str) -> str:
        if self.weights_path is not None:  # a directory
            return f"{self.label}/{member}"
        return f"{self.label}[{member}]"


def _read_member(path: Path, limit: int) -> bytes:
    """Read a bundle file (regular files only; size-capped) or raise BundleFormatError."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not hang us
    except FileNotFoundError:
        raise BundleFormatError(
            f"bundle file {path} is missing; a bundle holds {', '.join(BUNDLE_FILES)}"
        ) from None
    except OSError as exc:
        raise BundleFormatError(f"cannot read bundle file {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BundleFormatError(f"bundle file {path} is not a regular file")
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise BundleFormatError(f"cannot read bundle file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise BundleFormatError(f"bundle file {path} is larger than the {limit}-byte limit")
    return data


def _read_directory(directory: Path) -> _Raw:
    return _Raw(
        label=str(directory),
        manifest=_read_member(directory / MANIFEST_NAME, MAX_MANIFEST_BYTES),
        signature=_read_member(directory / SIGNATURE_NAME, _MAX_SIGNATURE_FILE_BYTES),
        weights=None,
        weights_path=directory / WEIGHTS_NAME,
    )


def _split_archive(data: BytesLike, label: str) -> _Raw:
    """Parse the length-prefixed archive in memory (nothing is extracted to disk)."""
    view = memoryview(data).cast("B")
    if len(view) < len(ARCHIVE_MAGIC) or bytes(view[: len(ARCHIVE_MAGIC)]) != ARCHIVE_MAGIC:
        raise BundleFormatError(
            f"{label} is not an InfoShape-FL bundle archive (bad magic); expected a bundle "
            "directory or the bytes of EncoderBundle.to_bytes()"
        )
    offset = len(ARCHIVE_MAGIC)
    members: list[bytes] = []
    limits = (MAX_MANIFEST_BYTES, _MAX_SIGNATURE_FILE_BYTES, MAX_WEIGHTS_BYTES)
    for member, limit in zip(BUNDLE_FILES, limits, strict=True):
        if len(view) - offset < _LENGTH.size:
            raise BundleFormatError(f"{label} is truncated: the length of {member} is missing")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if length > limit:
            raise BundleFormatError(f"{label}[{member}] is larger than the {limit}-byte limit")
        if len(view) - offset < length:
            raise BundleFormatError(
                f"{label} is truncated: {member} should be {length} bytes, "
                f"{len(view) - offset} remain"
            )
        members.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != len(view):
        raise BundleFormatError(f"{label} has {len(view) - offset} unexpected trailing bytes")
    return _Raw(label=label, manifest=members[0], signature=members[1], weights=members[2])


def _read_source(source: Source) -> _Raw:
    if isinstance(source, bytes | bytearray | memoryview):
        return _split_archive(source, "<bundle bytes>")
    path = Path(source)
    if path.is_dir():
        return _read_directory(path)
    if path.exists():
        return _split_archive(_read_member(path, _MAX_ARCHIVE_BYTES), str(path))
    raise BundleFormatError(
        f"bundle {path} does not exist (expected a directory holding {', '.join(BUNDLE_FILES)})"
    )


# ---------------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerifiedInfo:
    """What a successful verification established (all of it covered by the signature)."""

    source: str
    key_id: str
    version: int
    format_version: int
    fingerprint: str
    weights_sha256: str
    created_at: str
    tensors: dict[str, dict[str, Any]] = field(repr=False)
    manifest: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (for ``infoshape verify --json``), without the full manifest."""
        return {
            "source": self.source,
            "key_id": self.key_id,
            "encoder_version": self.version,
            "format_version": self.format_version,
            "fingerprint": self.fingerprint,
            "weights_sha256": self.weights_sha256,
            "created_at": self.created_at,
            "tensors": copy.deepcopy(self.tensors),
        }


@dataclass
class _Verified:
    info: VerifiedInfo
    manifest_bytes: bytes
    signature: bytes
    weights: bytes
    manifest: dict[str, Any]
    tensors: dict[str, np.ndarray]


def _verify_raw(raw: _Raw, trusted_keys: TrustedKeys, state: TrustState | None) -> _Verified:
    """Steps 2-8 of the module docstring, in that order; never records anything."""
    trusted = load_trusted_keys(trusted_keys)
    manifest_name = raw.name(MANIFEST_NAME)
    signature_name = raw.name(SIGNATURE_NAME)
    if not raw.manifest:
        raise BundleFormatError(f"bundle file {manifest_name} is empty")
    if len(raw.signature) != SIGNATURE_BYTES:
        raise BundleFormatError(
            f"bundle file {signature_name} is {len(raw.signature)} bytes; an Ed25519 signature is "
            f"{SIGNATURE_BYTES} (truncated or not a signature)"
        )
    try:
        manifest = parse_json_strict(raw.manifest)
    except (ValueError, RecursionError) as exc:
        raise BundleFormatError(
            f"bundle file {manifest_name} is not valid JSON (truncated or corrupted): {exc}"
        ) from None
    if not isinstance(manifest, dict):
        raise BundleFormatError(f"bundle file {manifest_name} is not a JSON object")
    fmt = manifest.get("format_version")
    if fmt != FORMAT_VERSION or not _is_int(fmt):
        raise BundleFormatError(
            f"{manifest_name} has format_version {fmt!r}; this version of infoshape-fl reads "
            f"format {FORMAT_VERSION} (upgrade infoshape-fl for newer bundles)"
        )
    kid = manifest.get("key_id")
    if not isinstance(kid, str) or not _KEY_ID.match(kid):
        raise BundleFormatError(f"{manifest_name} has no valid key_id (got {kid!r})")

    public_key = trusted.get(kid)
    if public_key is None:
        raise UnknownKeyError(
            f"bundle {raw.label} is signed by key {kid}, which is not trusted (trusted: "
            f"{', '.join(sorted(trusted))}); pin that key's signing.pub only if you trust its owner"
        )
    try:
        public_key.verify(raw.signature, raw.manifest)
    except InvalidSignature:
        raise SignatureError(
            f"signature of bundle {raw.label} does not verify with trusted key {kid}: "
            f"{MANIFEST_NAME} or {SIGNATURE_NAME} was changed after signing, or the manifest names "
            "a key that did not sign it"
        ) from None

    # The manifest is now the signer's word; still insist it is exactly what we would write.
    try:
        canonical = dump_plain(manifest)  # parse_json_strict already returned plain JSON types
    except (ValueError, UnicodeEncodeError) as exc:  # e.g. a lone surrogate from a \ud800 escape
        raise BundleFormatError(f"{manifest_name} cannot be re-encoded: {exc}") from None
    if canonical != raw.manifest:
        raise BundleFormatError(f"{manifest_name} is signed but not in canonical JSON form")
    problem = _manifest_problem(manifest, signed=True)
    if problem is not None:
        raise BundleFormatError(f"{manifest_name}: {problem}")

    weights_name = raw.name(WEIGHTS_NAME)
    if raw.weights is None:
        assert raw.weights_path is not None
        weights = _read_member(raw.weights_path, MAX_WEIGHTS_BYTES)
    else:
        weights = raw.weights
    if len(weights) != manifest["weights_size"]:
        raise BundleFormatError(
            f"bundle file {weights_name} is {len(weights)} bytes but the signed manifest says "
            f"{manifest['weights_size']} (truncated or replaced)"
        )
    digest = hashlib.sha256(weights).hexdigest()
    if not hmac.compare_digest(digest, manifest["weights_sha256"]):
        raise SignatureError(
            f"{weights_name}: weights do not match the signed hash (sha256 {digest[:16]}..., "
            f"signed {manifest['weights_sha256'][:16]}...); they were changed after signing"
        )

    try:  # only now, with bytes proven to be the signed ones
        tensors = safetensors_load(weights)
    except (SafetensorError, ValueError, TypeError) as exc:
        raise BundleFormatError(f"{weights_name} is not a valid safetensors file: {exc}") from None
    for array in tensors.values():
        array.setflags(write=False)
    if _tensor_spec(tensors) != manifest["tensors"]:
        raise BundleFormatError(
            f"{weights_name} holds tensors {_tensor_spec(tensors)} but the manifest lists "
            f"{manifest['tensors']}"
        )

    version = manifest["encoder_version"]
    if state is not None:
        state.check(kid, version)

    info = VerifiedInfo(
        source=raw.label,
        key_id=kid,
        version=version,
        format_version=fmt,
        fingerprint=hashlib.sha256(raw.manifest).hexdigest(),
        weights_sha256=digest,
        created_at=manifest["created_at"],
        tensors=parse_json_strict(raw.manifest)["tensors"],  # fresh copies: faster than deepcopy
        manifest=parse_json_strict(raw.manifest),
    )
    return _Verified(info, raw.manifest, raw.signature, weights, manifest, tensors)


# ---------------------------------------------------------------------------------------------
# The bundle
# ---------------------------------------------------------------------------------------------
class EncoderBundle:
    """A signed container: a JSON manifest plus named numpy tensors.

    It knows nothing about shapers: the caller stores ``Shaper.get_state()``'s tensors and config
    and rebuilds the shaper from ``bundle.tensors`` / ``bundle.shaper`` after :meth:`load`.

    Build one with :meth:`create` (field by field) or ``EncoderBundle(manifest, tensors)``; the
    weights are serialised at once and their hash, size and tensor table written into the manifest.
    :meth:`save` / :meth:`to_bytes` sign it (recording the signer's ``key_id``); :meth:`load`,
    :meth:`from_bytes` and :meth:`verify` accept a bundle only after the checks listed in the
    module docstring.
    """

    def __init__(self, manifest: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
        frozen = _normalise_tensors(tensors)
        weights = safetensors_save(dict(frozen)) if frozen else safetensors_save({})
        plain = to_jsonable(_as_dict(manifest, "manifest"), where="manifest")
        computed = {
            "weights_sha256": hashlib.sha256(weights).hexdigest(),
            "weights_size": len(weights),
            "tensors": _tensor_spec(frozen),
        }
        for name, value in computed.items():
            if name in plain and plain[name] != value:
                raise ConfigError(
                    f"manifest {name} does not describe the given tensors (the manifest belongs "
                    "to other weights); leave it out and it is computed"
                )
            plain[name] = value
        plain.setdefault("format_version", FORMAT_VERSION)
        plain.setdefault("created_at", _utc_now())
        plain.setdefault("key_id", None)
        problem = _manifest_problem(plain, signed=False)
        if problem is not None:
            raise ConfigError(f"bundle manifest: {problem}")
        self._manifest: dict[str, Any] = plain
        self._tensors = frozen
        self._weights = weights
        self._signed: tuple[bytes, bytes] | None = None  # (manifest bytes, signature)
        self._source: str | None = None

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        *,
        tensors: Mapping[str, np.ndarray],
        architecture: Mapping[str, Any] | Any,
        input_schema: Mapping[str, Any] | Any,
        labels: Mapping[str, Any],
        shaper: str | Mapping[str, Any],
        schedule: str | Mapping[str, Any] | None,
        lam: float | None,
        training_metrics: Mapping[str, Any] | None,
        public_data_fingerprint: str | None,
        encoder_version: int = 1,
        extra: Mapping[str, Any] | None = None,
        created_at: datetime | str | None = None,
    ) -> EncoderBundle:
        """Assemble an unsigned bundle from its parts (``input_schema`` may be an object with
        ``to_dict()``, e.g. ``InputSchema``). ``encoder_version`` must grow with every release
        from the same key: sites refuse anything lower than what they accepted.
        ``extra`` is stored under ``manifest["extra"]`` so it can never shadow a signed field."""
        manifest: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "encoder_version": encoder_version,
            "architecture": _as_dict(architecture, "architecture"),
            "input_schema": _as_dict(input_schema, "input_schema"),
            "labels": _as_dict(labels, "labels"),
            "lambda": lam,
            "shaper": shaper,
            "schedule": schedule,
            "training_metrics": _as_dict(training_metrics or {}, "training_metrics"),
            "public_data_fingerprint": public_data_fingerprint,
            "created_at": _created_at_text(created_at),
            "key_id": None,
        }
        if extra is not None:
            manifest["extra"] = _as_dict(extra, "extra")
        return cls(manifest, tensors)

    @classmethod
    def _from_verified(cls, verified: _Verified) -> EncoderBundle:
        bundle = cls.__new__(cls)
        bundle._manifest = verified.manifest
        bundle._tensors = verified.tensors
        bundle._weights = verified.weights
        bundle._signed = (verified.manifest_bytes, verified.signature)
        bundle._source = verified.info.source
        return bundle

    # -- signing and writing ---------------------------------------------------------------
    def _sign(self, private_key: Any) -> tuple[bytes, bytes]:
        key = _as_private_key(private_key)
        manifest = dict(self._manifest, key_id=key_id(key))
        manifest_bytes = canonical_json(manifest)
        signature = key.sign(manifest_bytes)
        self._manifest = manifest
        self._signed = (manifest_bytes, signature)
        return self._signed

    def save(self, directory: str | os.PathLike[str], private_key: Any) -> Path:
        """Sign with ``private_key`` and write the bundle directory atomically.

        The three files appear together or not at all. An existing bundle directory is replaced
        whole; a directory holding anything else is refused rather than deleted.
        """
        target = Path(directory)
        if target.is_dir():
            foreign = sorted(p.name for p in target.iterdir() if p.name not in BUNDLE_FILES)
            if foreign:
                raise ConfigError(
                    f"refusing to write a bundle into {target}: it holds files that are not part "
                    f"of a bundle ({', '.join(foreign[:5])}); choose an empty or new directory"
                )
        manifest_bytes, signature = self._sign(private_key)
        with atomic_dir(target) as tmp:
            for name, data in (
                (WEIGHTS_NAME, self._weights),
                (MANIFEST_NAME, manifest_bytes),
                (SIGNATURE_NAME, signature),
            ):
                with open(tmp / name, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
        self._source = str(target)
        return target

    def to_bytes(self, private_key: Any = None) -> bytes:
        """The bundle as one byte string (for a Flower message or a single file).

        Format: ``ARCHIVE_MAGIC`` then manifest, signature and weights, each as a big-endian u64
        length and the bytes. Reading it never touches the disk. With ``private_key`` the bundle
        is (re-)signed first; without, the signature from the last :meth:`save` / :meth:`load` is
        used.
        """
        if private_key is not None:
            self._sign(private_key)
        if self._signed is None:
            raise ConfigError(
                "bundle is not signed yet; pass private_key to to_bytes() or save() it first"
            )
        manifest_bytes, signature = self._signed
        parts = [ARCHIVE_MAGIC]
        for data in (manifest_bytes, signature, self._weights):
            parts.append(_LENGTH.pack(len(data)))
            parts.append(data)
        return b"".join(parts)

    # -- reading ---------------------------------------------------------------------------
    @classmethod
    def verify(
        cls,
        source: Source,
        trusted_keys: TrustedKeys,
        *,
        state: StateLike = None,
        state_dir: StateLike = None,
    ) -> VerifiedInfo:
        """Run every check of :meth:`load` (including the rollback check when ``state`` is given)
        without recording anything. ``source``: a bundle directory, an archive file, or bytes."""
        trust = _resolve_state(state, state_dir)
        return _verify_raw(_read_source(source), trusted_keys, trust).info

    @classmethod
    def load(
        cls,
        source: Source,
        trusted_keys: TrustedKeys,
        *,
        state: StateLike = None,
        state_dir: StateLike = None,
    ) -> EncoderBundle:
        """Verify and open a bundle; with ``state`` (a :class:`TrustState` or its directory), refuse
        a rollback and then record this version as accepted. ``state_dir`` is an alias."""
        trust = _resolve_state(state, state_dir)
        verified = _verify_raw(_read_source(source), trusted_keys, trust)
        if trust is not None:  # last: only a bundle that passed everything moves the state
            trust.accept(
                verified.info.key_id, verified.info.version, fingerprint=verified.info.fingerprint
            )
        return cls._from_verified(verified)

    @classmethod
    def from_bytes(
        cls,
        data: BytesLike,
        trusted_keys: TrustedKeys,
        *,
        state: StateLike = None,
        state_dir: StateLike = None,
    ) -> EncoderBundle:
        """:meth:`load` for the output of :meth:`to_bytes` - the same checks, in the same order."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ConfigError(f"from_bytes needs bytes, got {type(data).__name__}")
        return cls.load(data, trusted_keys, state=state, state_dir=state_dir)

    # -- accessors -------------------------------------------------------------------------
    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest (editing it cannot change what was signed)."""
        return copy.deepcopy(self._manifest)

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """Writable copies of the tensors (the bundle's own arrays stay frozen)."""
        return {name: array.copy() for name, array in self._tensors.items()}

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical manifest bytes; after signing, of ``manifest.json``."""
        if self._signed is not None:
            return hashlib.sha256(self._signed[0]).hexdigest()
        return hashlib.sha256(canonical_json(self._manifest)).hexdigest()

    @property
    def key_id(self) -> str | None:
        """Id of the signing key (``None`` until signed)."""
        return self._manifest.get("key_id")

    @property
    def version(self) -> int:
        """The ``encoder_version``."""
        return int(self._manifest["encoder_version"])

    @property
    def is_signed(self) -> bool:
        return self._signed is not None

    @property
    def source(self) -> str | None:
        """Where this bundle was last saved to or loaded from."""
        return self._source

    @property
    def weights_bytes(self) -> bytes:
        """The exact ``weights.safetensors`` bytes whose hash is signed."""
        return self._weights

    def _field(self, name: str) -> Any:
        return copy.deepcopy(self._manifest.get(name))

    format_version = property(lambda self: self._field("format_version"))
    architecture = property(lambda self: self._field("architecture"))
    input_schema = property(lambda self: self._field("input_schema"))
    labels = property(lambda self: self._field("labels"))
    lam = property(lambda self: self._field("lambda"))
    shaper = property(lambda self: self._field("shaper"))
    schedule = property(lambda self: self._field("schedule"))
    training_metrics = property(lambda self: self._field("training_metrics"))
    public_data_fingerprint = property(lambda self: self._field("public_data_fingerprint"))
    created_at = property(lambda self: self._field("created_at"))
    weights_sha256 = property(lambda self: self._field("weights_sha256"))
    extra = property(lambda self: self._field("extra") or {})

    def __repr__(self) -> str:
        return (
            f"EncoderBundle(version={self.version}, key_id={self.key_id}, "
            f"tensors={sorted(self._tensors)}, signed={self.is_signed})"
        )
