"""Signed encoder bundles: Ed25519 keys, canonical manifests, safetensors weights, rollback state.

Everything a site needs to decide whether an encoder may touch its data, and nothing that could run
code while deciding: no pickle, no ``torch.load``, no flwr. See :mod:`shared.bundle.bundle` for
the verification order, which is the security argument.
"""

from shared.bundle.bundle import (
    ARCHIVE_MAGIC,
    BUNDLE_FILES,
    FORMAT_VERSION,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    WEIGHTS_NAME,
    EncoderBundle,
    VerifiedInfo,
)
from shared.bundle.canonical import canonical_json, parse_json_strict, to_jsonable
from shared.bundle.keys import (
    PRIVATE_KEY_NAME,
    PUBLIC_KEY_NAME,
    KeyPairPaths,
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
    load_trusted_keys,
)
from shared.bundle.trust import STATE_FILE_NAME, TrustState

__all__ = [
    "ARCHIVE_MAGIC",
    "BUNDLE_FILES",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "PRIVATE_KEY_NAME",
    "PUBLIC_KEY_NAME",
    "SIGNATURE_NAME",
    "STATE_FILE_NAME",
    "WEIGHTS_NAME",
    "EncoderBundle",
    "KeyPairPaths",
    "TrustState",
    "VerifiedInfo",
    "canonical_json",
    "generate_keypair",
    "key_id",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "parse_json_strict",
    "to_jsonable",
]
