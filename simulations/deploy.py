"""Deployment helpers: certificates, SuperNode keys, and the Flower processes of a real federation.

The in-process simulation (``infoshape simulate``) needs none of this. A real multi-site release
runs one ``flower-superlink`` at the coordinator and one ``flower-supernode`` per institution; these
functions build their command lines and, before anything is started, check every input a site
would otherwise only discover minutes later in a Flower log (a missing data file, a key in the
wrong format, a certificate without the SAN the SuperLink itself connects to, a busy port).

Everything is a plain function with typed arguments that returns a dict (JSON-friendly except for
the ``process`` handle of the ``start_*`` functions) or raises a :mod:`shared.errors` type whose
message names the file and says what to do; ``simulations/cli.py`` maps the ``infoshape deploy``
commands onto them. Facts about flwr 1.41 used here are in ``../shared/FLOWER_NOTES.md``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shared.atomic import atomic_write_text
from shared.errors import ConfigError, DataFileError, InfoShapeError, KeyFileError, RunError

# File names inside a certificate directory (the names FLOWER_NOTES and the recipe use).
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
SERVER_CERT = "server.pem"
SERVER_KEY = "server.key"

#: flwr 1.41 serves the Fleet, Control and Runtime APIs of the SuperLink on this one port.
DEFAULT_SUPERLINK_PORT = 8000
#: The first ClientAppIo port of a SuperNode; every SuperNode on one host needs its own.
DEFAULT_SITE_PORT = 9094

#: Roles a SuperNode can play; the ClientApp dispatches on ``node_config["role"]``.
ROLES = ("hospital", "audit")
Role = Literal["hospital", "audit"]
#: A trusted key: one path, several, or a comma-separated string of paths.
TrustedKeyArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

#: Flower's error code when a SuperNode's key is not registered on the SuperLink.
REFUSED_UNREGISTERED = 2004
#: Flower's error code when a SuperNode without a key meets a SuperLink that requires one.
REFUSED_NO_KEY = 2001

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_DNS_LABEL_RE = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


# ----------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------


def _write_private(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600 from the first byte: a key is never briefly world-readable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _write_public(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _install_files(tmp_dir: Path, out_dir: Path, names: Sequence[str], overwrite: bool) -> None:
    """Move finished files from ``tmp_dir`` into ``out_dir`` so a crash never leaves half a set.

    A missing (or empty) ``out_dir`` is replaced by ``tmp_dir`` in one rename. Into an existing
    directory each file is moved with ``os.replace`` (atomic per file) after checking that none of
    them would clobber an existing file unless ``overwrite`` is set.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"output directory {out_dir} is a file; pass a directory path")
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        out_dir.rmdir()
    if not out_dir.exists():
        tmp_dir.rename(out_dir)
        return
    clashes = [n for n in names if (out_dir / n).exists()]
    if clashes and not overwrite:
        raise ConfigError(
            f"{out_dir / clashes[0]} already exists; pick another directory or pass --overwrite "
            "(existing keys and certificates would be replaced)"
        )
    for name in names:
        os.replace(tmp_dir / name, out_dir / name)
    shutil.rmtree(tmp_dir, ignore_errors=True)


def _tmp_dir_next_to(out_dir: Path) -> Path:
    """A scratch directory on the same file system as ``out_dir`` (so ``rename`` is atomic)."""
    parent = out_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=parent))


def _readable_file(
    path: str | os.PathLike[str], what: str, error: type[InfoShapeError], hint: str
) -> Path:
    """Resolve ``path`` and check it is a readable, non-empty regular file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise error(f"{what} {p} does not exist; {hint}")
    if not p.is_file():
        raise error(f"{what} {p} is not a regular file; {hint}")
    if not os.access(p, os.R_OK):
        raise error(f"{what} {p} is not readable by this user; fix its permissions")
    if p.stat().st_size == 0:
        raise error(f"{what} {p} is empty; {hint}")
    return p.resolve()


def _check_port(port: int, what: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"{what} must be an integer in 1..65535, got {port!r}")
    return port


def _check_port_free(host: str, port: int, what: str) -> None:
    """Bind the port briefly: a busy port fails here with a clear line, not deep in Flower's log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = host.strip("[]")
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError as err:
            raise ConfigError(
                f"{what} {host}:{port} is not available ({err.strerror}); pick another port"
            ) from None


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free right now (tests and local runs pick ports at runtime)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def parse_address(address: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6) and check both parts."""
    text = address.strip()
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)", text) or re.fullmatch(
        r"([^:\s\[\]]+):(\d+)", text
    )
    if not match:
        raise ConfigError(
            f"address must look like HOST:PORT (IPv6 as [ADDR]:PORT), got {address!r}"
        )
    host, port = match.group(1), int(match.group(2))
    _check_port(port, f"port of {address!r}")
    return host, port


def find_tool(name: str) -> str:
    """Find a Flower executable: next to this interpreter first (a venv need not be on PATH)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise ConfigError(
            f"{name} not found next to {sys.executable} or on PATH; install flwr 1.41 "
            "(pip install 'flwr[simulation]>=1.41,<1.42') in this environment"
        )
    return found


def _node_config_value(key: str, value: str | int | float | bool) -> str:
    """Quote one ``--node-config`` value the way flwr's parser (TOML per pair) reads it back.

    Strings go in TOML literal quotes (no escapes, so paths stay verbatim); flwr's parser cannot
    carry a value with both quote kinds or a newline, so such values are refused here.
    """
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    if isinstance(value, int | float):
        return f"{key}={value}"
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ConfigError(f"node config {key} must be one line, got {text!r}")
    if "'" not in text:
        return f"{key}='{text}'"
    if '"' not in text:
        return f'{key}="' + text.replace("\\", "\\\\") + '"'
    raise ConfigError(
        f"node config {key} holds both ' and \" which Flower's --node-config cannot carry; "
        f"rename the file or directory: {text!r}"
    )


def format_config_pairs(pairs: Mapping[str, str | int | float | bool]) -> str:
    """``{"a": "x", "b": 1}`` → ``a='x' b=1`` (for ``--node-config`` and ``--run-config``)."""
    for key in pairs:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", key):
            raise ConfigError(f"config key must be letters, digits, - or _, got {key!r}")
    return " ".join(_node_config_value(k, v) for k, v in pairs.items())


# ----------------------------------------------------------------------------------------------
# certificates
# ----------------------------------------------------------------------------------------------


def _parse_host(host: str) -> x509.GeneralName:
    """One ``--hosts`` entry → an IP SAN for addresses, a DNS SAN for names."""
    text = host.strip()
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        ip = None
    if ip is not None:
        if ip.is_unspecified:
            raise ConfigError(
                f"--hosts entry {host!r} is a bind-all address, not one a site can dial; list "
                "the coordinator's real IP addresses and DNS names"
            )
        return x509.IPAddress(ip)
    if ":" in text or "/" in text:
        raise ConfigError(
            f"--hosts entry {host!r} is not an IP address or a DNS name; give bare hosts "
            "without port or scheme, e.g. --hosts 10.0.0.5 coordinator.example.org"
        )
    labels = text.rstrip(".").split(".")
    if labels and labels[0] == "*":
        labels = labels[1:]
    if (
        not text
        or len(text) > 253
        or not labels
        or not all(_DNS_LABEL_RE.match(lb) for lb in labels)
    ):
        raise ConfigError(
            f"--hosts entry {host!r} is not a valid IP address or DNS name "
            "(letters, digits, '-' and '.' only)"
        )
    return x509.DNSName(text.rstrip(".").lower())


def _san_list(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """The SANs of the server certificate: every host, plus IP:127.0.0.1 and DNS:localhost.

    The SuperLink's own helper processes connect to 127.0.0.1 over TLS, so that SAN is always
    needed, whatever the public address is.
    """
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    for host in hosts:
        name = _parse_host(host)
        if name not in names:
            names.append(name)
    return names


def _san_strings(names: Sequence[x509.GeneralName]) -> list[str]:
    out = []
    for name in names:
        if isinstance(name, x509.IPAddress):
            out.append(f"IP:{name.value}")
        elif isinstance(name, x509.DNSName):
            out.append(f"DNS:{name.value}")
    return out


def make_certs(
    out_dir: str | os.PathLike[str],
    hosts: Sequence[str],
    *,
    days: int = 365,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Create a private CA and a SuperLink server certificate it signs.

    Why a private CA: SuperNodes pin it with ``--root-certificates``, so no public CA is needed and
    no other certificate can impersonate the coordinator. Keys are ECDSA P-384; the server
    certificate carries a SAN for every host the SuperNodes dial (IPs as IP SANs, names as DNS
    SANs) plus ``IP:127.0.0.1`` and ``DNS:localhost``. Files (``ca.crt``, ``ca.key``,
    ``server.pem``, ``server.key``; private keys 0600) are written to a scratch directory first
    and moved into place, so an interrupted run leaves either nothing or the whole set.

    Returns the four paths, the SANs, the fingerprint of the CA and the expiry date.
    """
    if isinstance(hosts, str):
        hosts = [hosts]
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise ConfigError(f"days must be an integer in 1..3650, got {days!r}")
    sans = _san_list(hosts)
    out = Path(out_dir).expanduser().resolve()
    if out.is_dir() and not overwrite:
        clashes = [n for n in (CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY) if (out / n).exists()]
        if clashes:
            raise ConfigError(
                f"{out / clashes[0]} already exists; pick another directory or pass --overwrite "
                "(every SuperNode must then get the new ca.crt)"
            )

    now = dt.datetime.now(dt.UTC)
    not_before = now - dt.timedelta(minutes=5)  # tolerate small clock skew between machines
    not_after = now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "InfoShape-FL deployment CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA384())
    )

    server_key = ec.generate_private_key(ec.SECP384R1())
    first = sans[2] if len(sans) > 2 else sans[1]
    common_name = str(first.value)
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA384())
    )

    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    nocrypt = serialization.NoEncryption()
    tmp = _tmp_dir_next_to(out)
    try:
        _write_public(tmp / CA_CERT, ca_cert.public_bytes(pem))
        _write_private(tmp / CA_KEY, ca_key.private_bytes(pem, pkcs8, nocrypt))
        _write_public(tmp / SERVER_CERT, server_cert.public_bytes(pem))
        _write_private(tmp / SERVER_KEY, server_key.private_bytes(pem, pkcs8, nocrypt))
        _install_files(tmp, out, (CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY), overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

    return {
        "dir": str(out),
        "ca_cert": str(out / CA_CERT),
        "ca_key": str(out / CA_KEY),
        "server_cert": str(out / SERVER_CERT),
        "server_key": str(out / SERVER_KEY),
        "sans": _san_strings(sans),
        "ca_fingerprint_sha256": ca_cert.fingerprint(hashes.SHA256()).hex(),
        "not_after": not_after.replace(microsecond=0).isoformat(),
    }


def _load_certs(path: Path, what: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(path.read_bytes())
    except ValueError:
        certs = []
    if not certs:
        raise KeyFileError(
            f"{what} {path} is not a PEM certificate; make one with `infoshape deploy certs`"
        )
    now = dt.datetime.now(dt.UTC)
    for cert in certs:
        if cert.not_valid_after_utc < now:
            raise KeyFileError(
                f"{what} {path} expired on {cert.not_valid_after_utc.date()}; make new ones with "
                "`infoshape deploy certs` and give every SuperNode the new ca.crt"
            )
    return certs


def check_ca_cert(path: str | os.PathLike[str]) -> Path:
    """The CA certificate SuperNodes and the ``flwr`` CLI pin: present, PEM, not expired."""
    hint = "copy the coordinator's ca.crt here (made by `infoshape deploy certs`)"
    p = _readable_file(path, "CA certificate", KeyFileError, hint)
    _load_certs(p, "CA certificate")
    return p


def check_server_certs(
    ca: str | os.PathLike[str], cert: str | os.PathLike[str], key: str | os.PathLike[str]
) -> dict[str, Any]:
    """The SuperLink's TLS files: parseable, the key matches, signed by the CA, SAN 127.0.0.1.

    Flower would fail on any of these only when the first client connects (or, for the missing
    loopback SAN, when its own helper process cannot reach the SuperLink), far from the cause.
    """
    hint = "make the set with `infoshape deploy certs --hosts HOST ...`"
    ca_path = _readable_file(ca, "CA certificate", KeyFileError, hint)
    cert_path = _readable_file(cert, "server certificate", KeyFileError, hint)
    key_path = _readable_file(key, "server key", KeyFileError, hint)
    ca_cert = _load_certs(ca_path, "CA certificate")[0]
    server_cert = _load_certs(cert_path, "server certificate")[0]
    try:
        server_key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyFileError(
            f"server key {key_path} is not an unencrypted PEM private key; {hint}"
        ) from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if server_key.public_key().public_bytes(der, pub) != server_cert.public_key().public_bytes(
        der, pub
    ):
        raise KeyFileError(
            f"server key {key_path} does not belong to server certificate {cert_path}; "
            "use the two files made together by `infoshape deploy certs`"
        )
    try:
        server_cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        raise KeyFileError(
            f"server certificate {cert_path} is not signed by CA {ca_path}; use the ca.crt made "
            "together with it by `infoshape deploy certs`"
        ) from None
    try:
        san = server_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = x509.SubjectAlternativeName([])
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    if "127.0.0.1" not in ips:
        raise KeyFileError(
            f"server certificate {cert_path} has no SAN IP:127.0.0.1, which the SuperLink's own "
            "helper process needs; remake it with `infoshape deploy certs`"
        )
    return {
        "ca_cert": str(ca_path),
        "server_cert": str(cert_path),
        "server_key": str(key_path),
        "sans": _san_strings(list(san)),
    }


# ----------------------------------------------------------------------------------------------
# SuperNode authentication keys
# ----------------------------------------------------------------------------------------------


def _check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(
            f"{what} must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or "
            f"digit, got {name!r}"
        )
    return name


def make_node_key(
    out_dir: str | os.PathLike[str], name: str, *, overwrite: bool = False
) -> dict[str, Any]:
    """Create a SuperNode authentication key pair: ``NAME.key`` (private) and ``NAME.pub``.

    flwr 1.41 authenticates SuperNodes with NIST P-384 ECDSA keys in OpenSSH format (what
    ``ssh-keygen -t ecdsa -b 384`` makes). The private key stays at the site (mode 0600); the
    public key goes to the coordinator, who registers it with ``flwr supernode register``.
    """
    _check_name(name, "node key name")
    out = Path(out_dir).expanduser().resolve()
    priv_name, pub_name = f"{name}.key", f"{name}.pub"
    if not overwrite:
        for n in (priv_name, pub_name):
            if (out / n).exists():
                raise ConfigError(
                    f"{out / n} already exists; pick another name or pass --overwrite (the "
                    "coordinator must then register the new public key)"
                )
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    public_line = public + f" {name}\n".encode()
    tmp = _tmp_dir_next_to(out)
    try:
        _write_private(tmp / priv_name, private)
        _write_public(tmp / pub_name, public_line)
        _install_files(tmp, out, (priv_name, pub_name), overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return {
        "name": name,
        "private_key": str(out / priv_name),
        "public_key": str(out / pub_name),
        "fingerprint": ssh_fingerprint(public),
    }


def ssh_fingerprint(public_openssh: bytes) -> str:
    """``SHA256:…`` as ``ssh-keygen -lf`` prints it, to compare keys by eye across sites."""
    import base64
    import hashlib

    blob = base64.b64decode(public_openssh.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def _require_p384(key: object, path: Path, what: str) -> None:
    if not isinstance(
        key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey
    ) or not isinstance(key.curve, ec.SECP384R1):
        kind = getattr(getattr(key, "curve", None), "name", type(key).__name__)
        raise KeyFileError(
            f"{what} {path} is a {kind} key; Flower needs NIST P-384 (ecdsa-sha2-nistp384), "
            "make one with `infoshape deploy node-key NAME`"
        )


def check_node_private_key(path: str | os.PathLike[str]) -> Path:
    """A SuperNode's private key: OpenSSH format, P-384, unencrypted, not readable by others."""
    hint = "make a key pair with `infoshape deploy node-key NAME`"
    p = _readable_file(path, "SuperNode private key", KeyFileError, hint)
    try:
        key = serialization.load_ssh_private_key(p.read_bytes(), password=None)
    except TypeError:
        raise KeyFileError(
            f"SuperNode private key {p} is passphrase-protected; Flower needs an unencrypted key "
            "(keep it mode 0600)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise KeyFileError(
            f"SuperNode private key {p} is not an OpenSSH private key; {hint}"
        ) from None
    _require_p384(key, p, "SuperNode private key")
    if stat.S_IMODE(p.stat().st_mode) & 0o077:
        raise KeyFileError(
            f"SuperNode private key {p} is readable by other users; run chmod 600 {p}"
        )
    return p


def check_node_public_key(path: str | os.PathLike[str]) -> Path:
    """A SuperNode's public key to register: one OpenSSH line, P-384."""
    hint = "use the NAME.pub made by `infoshape deploy node-key NAME`"
    p = _readable_file(path, "SuperNode public key", KeyFileError, hint)
    try:
        key = serialization.load_ssh_public_key(p.read_bytes().strip())
    except (ValueError, UnsupportedAlgorithm):
        raise KeyFileError(
            f"SuperNode public key {p} is not an OpenSSH public key; {hint}"
        ) from None
    _require_p384(key, p, "SuperNode public key")
    return p


# ----------------------------------------------------------------------------------------------
# site inputs: data table, table spec, trusted bundle key
# ----------------------------------------------------------------------------------------------


def load_table_spec(table_spec: str) -> Any:
    """``--table-spec`` as inline JSON or as the path of a JSON file → a ``TableSpec``."""
    from shared.data.spec import TableSpec

    text = table_spec.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(
                f"--table-spec is not valid JSON ({err.msg} at char {err.pos}): {table_spec!r}"
            ) from None
        return TableSpec.from_dict(obj)
    return TableSpec.from_json_file(Path(text).expanduser())


def check_data(data: str | os.PathLike[str], table_spec: str | None = None) -> dict[str, Any]:
    """The site's table: present, readable, a supported format and, given a spec, valid.

    Loading it fully here costs seconds once and saves a run: a table that does not match its
    spec would otherwise be refused by the ClientApp only after the coordinator has trained and
    shipped the encoder. Returns the resolved path, the row count and the spec as compact JSON
    (what travels in ``node_config["table-spec"]``).
    """
    from shared.data.loaders import load_table, read_table

    hint = "pass the path of the site's CSV or Parquet table with --data"
    p = _readable_file(data, "data file", DataFileError, hint)
    if table_spec:
        spec = load_table_spec(table_spec)
        frame = load_table(p, spec)
        spec_json: str | None = json.dumps(spec.to_dict(), separators=(",", ":"))
    else:
        frame = read_table(p)
        spec_json = None
    return {"path": str(p), "rows": int(len(frame)), "table_spec": spec_json}


def check_trusted_key(path: str | os.PathLike[str]) -> Path:
    """The coordinator's bundle-signing public key the site pins (Ed25519, ``signing.pub``).

    Loaded with :func:`shared.bundle.load_public_key`, the loader the ClientApp uses, so a key
    that passes here is a key the site will accept.
    """
    from shared.bundle import load_public_key

    hint = (
        "copy the coordinator's signing.pub (made by `infoshape keygen`) and pass it with "
        "--trusted-key"
    )
    p = _readable_file(path, "trusted key", KeyFileError, hint)
    load_public_key(p)
    return p


def _trusted_paths(trusted_key: TrustedKeyArg) -> list[str | os.PathLike[str]]:
    """One path, several, or a comma-separated string (what ``node_config`` carries)."""
    if isinstance(trusted_key, str):
        items: list[str | os.PathLike[str]] = [t.strip() for t in trusted_key.split(",")]
    elif isinstance(trusted_key, os.PathLike):
        items = [trusted_key]
    else:
        items = list(trusted_key)
    items = [t for t in items if str(t).strip()]
    if not items:
        raise ConfigError("--trusted-key is empty; pass the coordinator's signing.pub")
    if any("," in str(t) for t in items):
        raise ConfigError(f"trusted key paths must not contain ',' (the list separator): {items}")
    return items


def _check_state_dir(path: str | os.PathLike[str]) -> Path:
    """The site's persistent state (highest bundle version seen): must survive restarts."""
    p = Path(path).expanduser().resolve()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"state directory {p} is a file; pass a directory with --state-dir")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"state directory {p} cannot be created ({err.strerror})") from None
    if not os.access(p, os.W_OK):
        raise ConfigError(f"state directory {p} is not writable by this user")
    return p


# ----------------------------------------------------------------------------------------------
# SuperLink (the coordinator)
# ----------------------------------------------------------------------------------------------


def superlink_command(
    *,
    ca: str | os.PathLike[str],
    cert: str | os.PathLike[str],
    key: str | os.PathLike[str],
    host: str = "0.0.0.0",
    port: int = DEFAULT_SUPERLINK_PORT,
    database: str | os.PathLike[str] | None = None,
    log_file: str | os.PathLike[str] | None = None,
    executable: str | None = None,
) -> list[str]:
    """The ``flower-superlink`` command line: TLS, SuperNode auth, no runtime installs.

    SuperNode authentication means only registered keys may join; with runtime dependency
    installation off the SuperLink never runs ``uv sync`` on a submitted app (the environment is
    fixed by the coordinator). Pure: checks nothing, so it can be printed for a service file.
    """
    cmd = [
        executable or find_tool("flower-superlink"),
        "--ssl-ca-certfile",
        str(ca),
        "--ssl-certfile",
        str(cert),
        "--ssl-keyfile",
        str(key),
        "--enable-supernode-auth",
        "--disable-runtime-dependency-installation",
        "--host",
        host,
        "--port",
        str(port),
    ]
    if database is not None:
        cmd += ["--database", str(database)]
    if log_file is not None:
        cmd += ["--log-file", str(log_file)]
    return cmd


def start_superlink(
    *,
    certs_dir: str | os.PathLike[str] | None = None,
    ca: str | os.PathLike[str] | None = None,
    cert: str | os.PathLike[str] | None = None,
    key: str | os.PathLike[str] | None = None,
    host: str = "0.0.0.0",
    port: int = DEFAULT_SUPERLINK_PORT,
    database: str | os.PathLike[str] | None = None,
    log_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Check the coordinator's inputs, then start ``flower-superlink`` in the background.

    ``certs_dir`` (as made by :func:`make_certs`) fills in whichever of ``ca``/``cert``/``key`` is
    not given. ``database`` keeps runs and registered SuperNodes across restarts (default: in
    memory, so every restart needs the SuperNodes registered again). Output goes to ``log_path``
    (default: inherited stdout/stderr). Returns the command, pid, address and the ``process``
    handle (pop it before printing the dict as JSON; :func:`wait_foreground` waits on it).
    """
    base = Path(certs_dir).expanduser() if certs_dir is not None else None
    if base is None and (ca is None or cert is None or key is None):
        raise ConfigError(
            "the SuperLink needs TLS files: pass --certs DIR (from `infoshape deploy certs`) "
            "or all of --ca, --cert and --key"
        )
    ca_p = Path(ca) if ca is not None else base / CA_CERT  # type: ignore[operator]
    cert_p = Path(cert) if cert is not None else base / SERVER_CERT  # type: ignore[operator]
    key_p = Path(key) if key is not None else base / SERVER_KEY  # type: ignore[operator]
    checked = check_server_certs(ca_p, cert_p, key_p)
    _check_port(port, "SuperLink port")
    _check_port_free(host, port, "SuperLink address")
    db = None
    if database is not None:
        db = Path(database).expanduser().resolve()
        if not db.parent.is_dir():
            raise ConfigError(f"database {db}: directory {db.parent} does not exist; create it")
    cmd = superlink_command(
        ca=checked["ca_cert"],
        cert=checked["server_cert"],
        key=checked["server_key"],
        host=host,
        port=port,
        database=db,
    )
    proc = spawn(cmd, log_path=log_path, env=env, cwd=cwd)
    return {
        "role": "superlink",
        "pid": proc.pid,
        "command": cmd,
        "address": f"{host}:{port}",
        "log": str(log_path) if log_path is not None else None,
        "sans": checked["sans"],
        "process": proc,
    }


def spawn(
    cmd: Sequence[str],
    *,
    log_path: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
) -> subprocess.Popen[bytes]:
    """Start a Flower process in its own session so it can be signalled as a group.

    The directory of the executable goes first on PATH: a SuperLink starts ``flower-superexec``
    and a SuperNode ``flwr-clientapp`` by bare name, which fails when the venv is not activated.
    """
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    full_env.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    bin_dir = str(Path(cmd[0]).parent)
    if Path(cmd[0]).is_absolute():
        full_env["PATH"] = os.pathsep.join([bin_dir, full_env.get("PATH", os.defpath)])
    if log_path is not None:
        log = Path(log_path)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            return subprocess.Popen(
                list(cmd),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
    return subprocess.Popen(list(cmd), env=full_env, cwd=cwd, start_new_session=True)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux ``/proc``; empty elsewhere).

    Flower detaches its helpers (``flower-superexec``, ``flwr-serverapp``, ``flwr-clientapp``)
    into their own sessions, so signalling a process group misses them; they are found by
    parentage instead, before the parent dies and they are re-parented.
    """
    children: dict[int, list[int]] = {}
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_text = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may hold spaces and parentheses: split after the last ')'
        fields = stat_text[stat_text.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.append(child)
                stack.append(child)
    return found


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still answers kill(0); it is dead for our purposes
        state = Path(f"/proc/{pid}/stat").read_text()
        return state[state.rfind(")") + 2] != "Z"
    except OSError:
        return True


def stop_process(proc: subprocess.Popen[bytes], *, grace_s: float = 10.0) -> int:
    """Stop a process started here and every process it started; returns its exit code."""
    return stop_processes([proc], grace_s=grace_s)[0]


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], *, grace_s: float = 10.0) -> list[int]:
    """Stop processes started here, and all their descendants, together: SIGTERM, then SIGKILL.

    SIGTERM first so a SuperNode leaves the federation cleanly; everything is signalled at once
    (a SuperNode takes seconds to deactivate, and stopping N of them one by one would add up);
    anything still alive after ``grace_s`` (a leader, its group, a detached descendant) is
    killed. Returns the exit codes in the order given.
    """
    family: set[int] = set()
    for proc in procs:
        family.update(descendants(proc.pid))
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        for proc in procs:
            family.update(descendants(proc.pid))
        time.sleep(0.1)
    for proc in procs:
        family.update(descendants(proc.pid))
        _signal_group(proc, signal.SIGKILL)
    for pid in family:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + min(grace_s, 5.0)
    while time.monotonic() < deadline and any(is_alive(p) for p in family):
        time.sleep(0.1)
    for pid in family:
        if is_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    codes = []
    for proc in procs:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        codes.append(int(proc.returncode) if proc.returncode is not None else -9)
    return codes


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session=True: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def wait_foreground(proc: subprocess.Popen[bytes]) -> int:
    """Wait for a started process like a foreground command; Ctrl-C / SIGTERM stop it cleanly."""

    def _forward(signum: int, _frame: object) -> None:
        _signal_group(proc, signal.Signals(signum))

    old_int = signal.signal(signal.SIGINT, _forward)
    old_term = signal.signal(signal.SIGTERM, _forward)
    try:
        return int(proc.wait())
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


# ----------------------------------------------------------------------------------------------
# SuperNodes (one per hospital, one for the auditor)
# ----------------------------------------------------------------------------------------------


def site_node_config(
    *,
    role: str,
    data: str | os.PathLike[str],
    trusted_key: TrustedKeyArg,
    state_dir: str | os.PathLike[str],
    site_name: str,
    table_spec: str | None = None,
    extra: Mapping[str, str | int | float | bool] | None = None,
) -> dict[str, str | int | float | bool]:
    """The ``node_config`` the ClientApp reads (keys from DESIGN.md, kebab-case)."""
    config: dict[str, str | int | float | bool] = {
        "role": role,
        "data-path": str(data),
        "trusted-key": ",".join(str(t) for t in _trusted_paths(trusted_key)),
        "state-dir": str(state_dir),
        "site-name": site_name,
    }
    if table_spec:
        config["table-spec"] = table_spec
    for k, v in (extra or {}).items():
        config[k] = v
    return config


def site_command(
    *,
    superlink: str,
    role: str,
    data: str | os.PathLike[str],
    trusted_key: TrustedKeyArg,
    state_dir: str | os.PathLike[str],
    site_name: str,
    port: int = DEFAULT_SITE_PORT,
    ca: str | os.PathLike[str] | None = None,
    auth_key: str | os.PathLike[str] | None = None,
    table_spec: str | None = None,
    insecure: bool = False,
    host: str = "127.0.0.1",
    extra_node_config: Mapping[str, str | int | float | bool] | None = None,
    max_retries: int | None = None,
    max_wait_time: float | None = None,
    executable: str | None = None,
) -> list[str]:
    """The ``flower-supernode`` command line of one site. Pure: checks nothing.

    ``--clientappio-api-address`` of older Flower is ``--host/--port`` in 1.41: the local API the
    SuperNode's ClientApp processes talk to, one port per SuperNode on a shared host.
    """
    cmd = [executable or find_tool("flower-supernode"), "--superlink", superlink]
    if insecure:
        cmd.append("--insecure")
    if ca is not None:
        cmd += ["--root-certificates", str(ca)]
    if auth_key is not None:
        cmd += ["--auth-supernode-private-key", str(auth_key)]
    cmd += ["--host", host, "--port", str(port)]
    if max_retries is not None:
        cmd += ["--max-retries", str(max_retries)]
    if max_wait_time is not None:
        cmd += ["--max-wait-time", str(max_wait_time)]
    node_config = site_node_config(
        role=role,
        data=data,
        trusted_key=trusted_key,
        state_dir=state_dir,
        site_name=site_name,
        table_spec=table_spec,
        extra=extra_node_config,
    )
    cmd += ["--node-config", format_config_pairs(node_config)]
    return cmd


def check_site_inputs(
    *,
    superlink: str,
    role: str,
    data: str | os.PathLike[str],
    trusted_key: TrustedKeyArg,
    state_dir: str | os.PathLike[str],
    site_name: str,
    port: int = DEFAULT_SITE_PORT,
    ca: str | os.PathLike[str] | None = None,
    auth_key: str | os.PathLike[str] | None = None,
    table_spec: str | None = None,
    insecure: bool = False,
    host: str = "127.0.0.1",
    validate_data: bool = True,
) -> dict[str, Any]:
    """Every check a site's inputs must pass, cheapest first; returns the resolved inputs.

    The table spec comes back as compact JSON whether it was given inline or as a file: the
    ClientApp reads ``node_config["table-spec"]`` as JSON and the file may not exist where the
    ClientApp runs.
    """
    if role not in ROLES:
        raise ConfigError(f"--role must be one of {', '.join(ROLES)}, got {role!r}")
    _check_name(site_name, "site name")
    parse_address(superlink)
    _check_port(port, "site port")
    if insecure and (ca is not None or auth_key is not None):
        raise ConfigError(
            "--insecure turns TLS off, and Flower refuses SuperNode authentication without TLS; "
            "drop --insecure (recommended) or drop --ca/--auth-key"
        )
    if not table_spec:
        raise ConfigError(
            "--table-spec is required: the site's table is checked against it here and the "
            'ClientApp reads it, e.g. --table-spec \'{"label": "y", "sensitive": ["s"]}\' or a '
            "JSON file"
        )
    ca_p = check_ca_cert(ca) if ca is not None else None
    key_p = check_node_private_key(auth_key) if auth_key is not None else None
    trusted = [check_trusted_key(t) for t in _trusted_paths(trusted_key)]
    if validate_data:
        data_info = check_data(data, table_spec)
    else:  # the cheap checks only (a huge table the site has validated before)
        hint = "pass the path of the site's CSV or Parquet table with --data"
        spec = load_table_spec(table_spec) if table_spec else None
        data_info = {
            "path": str(_readable_file(data, "data file", DataFileError, hint)),
            "rows": None,
            "table_spec": json.dumps(spec.to_dict(), separators=(",", ":")) if spec else None,
        }
    state_p = _check_state_dir(state_dir)
    _check_port_free(host, port, "site port")
    return {
        "superlink": superlink,
        "role": role,
        "site_name": site_name,
        "data": data_info["path"],
        "rows": data_info["rows"],
        "table_spec": data_info["table_spec"],
        "trusted_key": ",".join(str(t) for t in trusted),
        "state_dir": str(state_p),
        "ca": str(ca_p) if ca_p else None,
        "auth_key": str(key_p) if key_p else None,
        "port": port,
    }


def start_site(
    *,
    superlink: str,
    role: str,
    data: str | os.PathLike[str],
    trusted_key: TrustedKeyArg,
    state_dir: str | os.PathLike[str],
    site_name: str,
    port: int = DEFAULT_SITE_PORT,
    ca: str | os.PathLike[str] | None = None,
    auth_key: str | os.PathLike[str] | None = None,
    table_spec: str | None = None,
    insecure: bool = False,
    host: str = "127.0.0.1",
    extra_node_config: Mapping[str, str | int | float | bool] | None = None,
    validate_data: bool = True,
    log_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Check one site's inputs, then start its ``flower-supernode`` in the background.

    Without ``ca`` the SuperNode trusts the system CA store (a publicly signed SuperLink); without
    ``auth_key`` it does not authenticate, which a SuperLink started by :func:`start_superlink`
    refuses. Returns the command, pid, resolved inputs and the ``process`` handle.
    """
    checked = check_site_inputs(
        superlink=superlink,
        role=role,
        data=data,
        trusted_key=trusted_key,
        state_dir=state_dir,
        site_name=site_name,
        port=port,
        ca=ca,
        auth_key=auth_key,
        table_spec=table_spec,
        insecure=insecure,
        host=host,
        validate_data=validate_data,
    )
    cmd = site_command(
        superlink=superlink,
        role=role,
        data=checked["data"],
        trusted_key=checked["trusted_key"],
        state_dir=checked["state_dir"],
        site_name=site_name,
        port=port,
        ca=checked["ca"],
        auth_key=checked["auth_key"],
        table_spec=checked["table_spec"],
        insecure=insecure,
        host=host,
        extra_node_config=extra_node_config,
    )
    proc = spawn(cmd, log_path=log_path, env=env, cwd=cwd)
    return {
        **checked,
        "pid": proc.pid,
        "command": cmd,
        "log": str(log_path) if log_path is not None else None,
        "process": proc,
    }


# ----------------------------------------------------------------------------------------------
# the flwr CLI: connection, registration, runs
# ----------------------------------------------------------------------------------------------


def write_flwr_connection(
    flwr_home: str | os.PathLike[str],
    name: str,
    address: str,
    ca: str | os.PathLike[str] | None = None,
    *,
    insecure: bool = False,
    make_default: bool = True,
) -> Path:
    """Add ``[superlink.NAME]`` to ``$FLWR_HOME/config.toml`` (other entries are kept).

    flwr 1.41's CLI reads SuperLink connections only from this file; the CA path is stored
    absolute so the CLI works from any directory.
    """
    import tomli_w

    _check_name(name, "connection name")
    parse_address(address)
    if ca is None and not insecure:
        raise ConfigError(
            f"connection {name!r} needs the CA certificate (--ca ca.crt) or --insecure"
        )
    home = Path(flwr_home).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.toml"
    config: dict[str, Any] = {}
    if path.exists():
        try:
            config = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path} is not valid TOML ({err}); fix or remove it") from None
    superlink = config.setdefault("superlink", {})
    entry: dict[str, Any] = {"address": address}
    if insecure:
        entry["insecure"] = True
    else:
        entry["root-certificates"] = str(check_ca_cert(ca))  # type: ignore[arg-type]
    superlink[name] = entry
    if make_default:
        superlink["default"] = name
    atomic_write_text(path, tomli_w.dumps(config))
    return path


def _flwr_env(
    flwr_home: str | os.PathLike[str] | None, env: Mapping[str, str] | None
) -> dict[str, str]:
    full = dict(os.environ if env is None else env)
    if flwr_home is not None:
        full["FLWR_HOME"] = str(Path(flwr_home).expanduser().resolve())
    full.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    full.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    return full


def _flwr_json(
    args: Sequence[str],
    *,
    flwr_home: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    timeout: float,
    what: str,
) -> dict[str, Any]:
    """Run ``flwr ARGS --format json`` and return its JSON; a failure becomes a RunError."""
    cmd = [find_tool("flwr"), *args, "--format", "json"]
    try:
        res = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_flwr_env(flwr_home, env),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise RunError(
            f"{what}: `flwr {' '.join(args)}` did not answer in {timeout:.0f} s; "
            "is the SuperLink running and reachable?"
        ) from None
    payload = _last_json(res.stdout)
    if payload is None:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RunError(f"{what}: `flwr {' '.join(args)}` exited {res.returncode}: {tail[0]}")
    if payload.get("success") is False or res.returncode != 0:
        message = str(payload.get("error-message") or payload.get("error") or json.dumps(payload))
        lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
        raise RunError(f"{what}: {lines[-1] if lines else 'flwr reported a failure'}")
    return payload


def _last_json(text: str) -> dict[str, Any] | None:
    """The JSON object in ``flwr --format json`` output (banners may precede it)."""
    start = text.find("{")
    while start != -1:
        try:
            obj = json.loads(text[start:])
            return obj if isinstance(obj, dict) else None
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return None


def register_node(
    pub_key: str | os.PathLike[str],
    connection_name: str,
    name: str,
    *,
    flwr_home: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> int:
    """Register a site's public key on the SuperLink and return the node id Flower assigns.

    Knowing each node id before the run lets the coordinator tell hospitals from the auditor.
    A key can be registered once; registering it again fails with Flower's message.
    """
    p = check_node_public_key(pub_key)
    _check_name(name, "SuperNode name")
    try:
        payload = _flwr_json(
            ["supernode", "register", str(p), connection_name, "--name", name],
            flwr_home=flwr_home,
            env=env,
            timeout=timeout,
            what=f"registering {p}",
        )
    except RunError as err:
        if "already in use" in str(err):
            raise ConfigError(
                f"public key {p} is already registered on this SuperLink; each site needs its "
                "own key (`infoshape deploy node-key NAME`)"
            ) from None
        raise
    node_id = payload.get("node-id", payload.get("node_id"))
    if node_id is None:
        raise RunError(f"registering {p}: no node id in Flower's answer {json.dumps(payload)}")
    return int(node_id)


def list_nodes(
    connection_name: str,
    *,
    flwr_home: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> list[dict[str, Any]]:
    """The SuperNodes the SuperLink knows (registered, online, offline) as ``flwr`` lists them."""
    payload = _flwr_json(
        ["supernode", "list", connection_name],
        flwr_home=flwr_home,
        env=env,
        timeout=timeout,
        what="listing SuperNodes",
    )
    nodes = payload.get("nodes", [])
    return [n for n in nodes if isinstance(n, dict)]


def declared_run_config(app_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The app's ``[tool.flwr.app.config]``, flattened with dots as Flower does (the keys
    ``--run-config`` may override)."""
    path = Path(app_dir).expanduser().resolve() / "pyproject.toml"
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist; pass the Flower app's directory") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML ({err})") from None
    declared = config.get("tool", {}).get("flwr", {}).get("app", {}).get("config", {})

    def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        flat: dict[str, Any] = {}
        for key, value in table.items():
            if isinstance(value, Mapping):
                flat.update(flatten(value, f"{prefix}{key}."))
            else:
                flat[f"{prefix}{key}"] = value
        return flat

    return flatten(declared) if isinstance(declared, Mapping) else {}


def submit_run(
    app_dir: str | os.PathLike[str],
    connection_name: str,
    *,
    run_config: Mapping[str, str | int | float | bool] | None = None,
    flwr_home: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> int:
    """``flwr run APP CONNECTION --format json`` → the run id; the run goes on at the SuperLink.

    Override keys are checked against the app's ``[tool.flwr.app.config]`` first: the SuperLink
    refuses undeclared keys with a bare "Invalid run configuration" that names none of them.
    """
    app = Path(app_dir).expanduser().resolve()
    if run_config:
        undeclared = [k for k in run_config if k not in declared_run_config(app)]
        if undeclared:
            raise ConfigError(
                f"run-config key(s) {', '.join(map(repr, undeclared))} are not declared in "
                f"[tool.flwr.app.config] of {app / 'pyproject.toml'}; the SuperLink accepts "
                "overrides of declared keys only"
            )
    args = ["run", str(app), connection_name]
    if run_config:
        args += ["--run-config", format_config_pairs(run_config)]
    payload = _flwr_json(
        args, flwr_home=flwr_home, env=env, timeout=timeout, what="submitting the run"
    )
    run_id = payload.get("run-id")
    if run_id is None:
        raise RunError(f"submitting the run: no run id in Flower's answer {json.dumps(payload)}")
    return int(run_id)


def run_status(
    run_id: int,
    connection_name: str,
    *,
    flwr_home: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> str:
    """The run's status as ``flwr list`` prints it, e.g. ``running`` or ``finished:completed``."""
    payload = _flwr_json(
        ["list", connection_name, "--run-id", str(run_id)],
        flwr_home=flwr_home,
        env=env,
        timeout=timeout,
        what=f"reading run {run_id}",
    )
    for run in payload.get("runs", []):
        if str(run.get("run-id")) == str(run_id):
            return str(run.get("status", "unknown"))
    raise RunError(f"run {run_id} is not known to the SuperLink behind {connection_name!r}")


def wait_for_run(
    run_id: int,
    connection_name: str,
    *,
    timeout: float = 600.0,
    poll_s: float = 2.0,
    flwr_home: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """Poll ``flwr list`` until the run is ``finished:*`` and return that status.

    Polling, not ``flwr run --stream``: the stream exits 0 even for a failed run.
    """
    deadline = time.monotonic() + timeout
    status = "unknown"
    while time.monotonic() < deadline:
        status = run_status(run_id, connection_name, flwr_home=flwr_home, env=env)
        if status.startswith("finished:"):
            return status
        time.sleep(poll_s)
    raise RunError(
        f"run {run_id} still {status!r} after {timeout:.0f} s; see `flwr log {run_id} "
        f"{connection_name} --show`"
    )


def wait_for_superlink(
    address: str,
    ca: str | os.PathLike[str] | None,
    *,
    timeout: float = 60.0,
    proc: subprocess.Popen[bytes] | None = None,
) -> float:
    """Wait until the SuperLink answers ``/health`` over TLS; returns the seconds it took.

    Passing ``proc`` turns a SuperLink that died at start-up into an immediate, clear error.
    """
    host, port = parse_address(address)
    dial = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    netloc = f"[{dial}]:{port}" if ":" in dial else f"{dial}:{port}"
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    url = f"{'https' if ca is not None else 'http'}://{netloc}/health"
    start = time.monotonic()
    last = "no answer"
    while time.monotonic() - start < timeout:
        if proc is not None and proc.poll() is not None:
            raise RunError(
                f"the SuperLink exited with code {proc.returncode} while starting; see its log"
            )
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as res:  # noqa: S310
                if res.status == 200:
                    return time.monotonic() - start
                last = f"HTTP {res.status}"
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            last = str(getattr(err, "reason", err))
        time.sleep(0.2)
    raise RunError(f"the SuperLink at {address} did not become healthy in {timeout:.0f} s ({last})")


__all__ = [
    "CA_CERT",
    "CA_KEY",
    "DEFAULT_SITE_PORT",
    "DEFAULT_SUPERLINK_PORT",
    "REFUSED_NO_KEY",
    "REFUSED_UNREGISTERED",
    "ROLES",
    "SERVER_CERT",
    "SERVER_KEY",
    "TrustedKeyArg",
    "check_ca_cert",
    "check_data",
    "check_node_private_key",
    "check_node_public_key",
    "check_server_certs",
    "check_site_inputs",
    "check_trusted_key",
    "declared_run_config",
    "descendants",
    "find_tool",
    "format_config_pairs",
    "free_port",
    "is_alive",
    "list_nodes",
    "load_table_spec",
    "make_certs",
    "make_node_key",
    "parse_address",
    "register_node",
    "run_status",
    "site_command",
    "site_node_config",
    "spawn",
    "ssh_fingerprint",
    "start_site",
    "start_superlink",
    "stop_process",
    "stop_processes",
    "submit_run",
    "superlink_command",
    "wait_for_run",
    "wait_for_superlink",
    "wait_foreground",
    "write_flwr_connection",
]
