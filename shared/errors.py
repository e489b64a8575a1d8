"""Every error InfoShape-FL raises on purpose, in one place.

The CLI catches :class:`InfoShapeError` (and nothing else) and prints ``ErrorType: message`` on one
line, so each message must stand alone: name the file, column, value or parameter, and say what to
do. Anything that is *not* an ``InfoShapeError`` is a bug and keeps its traceback.

Hierarchy::

    InfoShapeError
    ├── ConfigError              a parameter breaks its rule (name, rule, value)
    ├── NotFittedError           transform/save before fit
    ├── DataError                a table cannot be used
    │   ├── DataFileError        missing, empty, unreadable or wrongly delimited file
    │   ├── ColumnError          a missing / unexpected / duplicated column
    │   ├── ValueRangeError      NaN, inf, non-numeric or out-of-range values
    │   ├── LabelError           a label with one class, or unseen label values
    │   └── CategoryError        a category not seen when the encoder was fitted
    ├── KeyFileError             a key file is missing, malformed, or the passphrase is wrong
    ├── BundleError              a bundle must not be used
    │   ├── BundleFormatError    missing or truncated file, malformed manifest
    │   ├── SignatureError       the signature does not verify (tampering, wrong key)
    │   ├── UnknownKeyError      signed by a key that is not trusted
    │   ├── RollbackError        an older version than one already accepted
    │   ├── TrustStateError      the site's record of accepted versions is unreadable or damaged
    │   └── SchemaMismatchError  the site's table does not match the bundle's input schema
    └── RunError                 a multi-site run could not proceed
        └── GatedError           the release was refused: leakage above the threshold
"""

from __future__ import annotations


class InfoShapeError(Exception):
    """Base of every deliberate error; the CLI prints these as ``Type: message``."""

    exit_code: int = 1


class ConfigError(InfoShapeError, ValueError):
    """A parameter breaks its rule. Message: parameter, rule, value."""


class NotFittedError(InfoShapeError, RuntimeError):
    """An estimator was used before ``fit``."""


class DataError(InfoShapeError, ValueError):
    """A table cannot be used as given."""


class DataFileError(DataError):
    """A data file is missing, empty, unreadable, or not in the expected format."""


class ColumnError(DataError):
    """A required column is missing, or an unexpected / duplicated one is present."""


class ValueRangeError(DataError):
    """A column holds NaN, inf, text where numbers belong, or values out of range."""


class LabelError(DataError):
    """A label column cannot be learned from (e.g. one class) or holds unknown classes."""


class CategoryError(DataError):
    """A categorical column holds a value the encoder was not fitted on."""


class KeyFileError(InfoShapeError):
    """A key file is missing or malformed, or its passphrase is wrong."""


class BundleError(InfoShapeError):
    """A bundle must not be used."""


class BundleFormatError(BundleError):
    """A bundle file is missing or truncated, or its manifest is malformed."""


class SignatureError(BundleError):
    """The bundle's signature does not verify against the trusted key."""


class UnknownKeyError(BundleError):
    """The bundle names a signing key that is not among the trusted keys."""


class RollbackError(BundleError):
    """The bundle's version is lower than one already accepted for the same key."""


class TrustStateError(BundleError):
    """The site's trust state (highest accepted version per key) cannot be read, parsed or
    written. Without it a rollback cannot be ruled out, so no bundle is used until it is fixed."""


class SchemaMismatchError(BundleError):
    """A table does not match the input schema recorded in the bundle."""


class RunError(InfoShapeError):
    """A multi-site run could not proceed."""


class GatedError(RunError):
    """The release was refused because measured leakage exceeded the threshold."""

    exit_code = 3


__all__ = [
    "BundleError",
    "BundleFormatError",
    "CategoryError",
    "ColumnError",
    "ConfigError",
    "DataError",
    "DataFileError",
    "GatedError",
    "InfoShapeError",
    "KeyFileError",
    "LabelError",
    "NotFittedError",
    "RollbackError",
    "RunError",
    "SchemaMismatchError",
    "SignatureError",
    "TrustStateError",
    "UnknownKeyError",
    "ValueRangeError",
]
