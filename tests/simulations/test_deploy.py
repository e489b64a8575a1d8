"""Fast tests of the deployment helpers: certificates, node keys, command lines, input checks.

No Flower process is started here (see ``test_deploy_e2e.py`` for that); what is tested is what a
site gets wrong before it ever reaches Flower, and that each mistake produces one clear line.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shared.bundle import generate_keypair
from shared.errors import (
    ColumnError,
    ConfigError,
    DataError,
    DataFileError,
    KeyFileError,
    RunError,
)
from simulations import deploy

# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return deploy.make_certs(
        tmp_path_factory.mktemp("pki") / "certs",
        ["10.1.2.3", "coordinator.example.org", "::1", "10.1.2.3"],
    )


@pytest.fixture(scope="module")
def node_key(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return deploy.make_node_key(tmp_path_factory.mktemp("keys"), "hospital-a")


@pytest.fixture
def site(tmp_path: Path, certs: dict, node_key: dict) -> dict:
    """Valid inputs for one site; each test breaks exactly one of them."""
    data = tmp_path / "site.csv"
    rows = ["x0,x1,label,sensitive"] + [f"{i},{i * 2.5},{i % 2},{(i // 2) % 2}" for i in range(12)]
    data.write_text("\n".join(rows) + "\n")
    trusted = generate_keypair(tmp_path / "signing").public
    return {
        "superlink": "127.0.0.1:9092",
        "role": "hospital",
        "data": data,
        "trusted_key": trusted,
        "state_dir": tmp_path / "state",
        "site_name": "hospital-a",
        "port": deploy.free_port(),
        "ca": certs["ca_cert"],
        "auth_key": node_key["private_key"],
        "table_spec": '{"label": "label", "sensitive": ["sensitive"]}',
    }


def _cert(path: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


# ---------------------------------------------------------------------------------------------
# certificates
# ---------------------------------------------------------------------------------------------


def test_make_certs_sans_cover_every_host_plus_loopback(certs: dict) -> None:
    server = _cert(certs["server_cert"])
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = san.get_values_for_type(x509.IPAddress)
    dns = san.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in ips  # the SuperLink's own helper dials this
    assert ipaddress.ip_address("10.1.2.3") in ips
    assert ipaddress.ip_address("::1") in ips
    assert set(dns) == {"localhost", "coordinator.example.org"}
    assert len(ips) == 3  # the repeated host is listed once
    assert certs["sans"] == [
        "IP:127.0.0.1",
        "DNS:localhost",
        "IP:10.1.2.3",
        "DNS:coordinator.example.org",
        "IP:::1",
    ]


def test_make_certs_chain_and_usage(certs: dict) -> None:
    ca, server = _cert(certs["ca_cert"]), _cert(certs["server_cert"])
    server.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    key = serialization.load_pem_private_key(Path(certs["server_key"]).read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == server.public_key().public_numbers()
    assert server.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
    assert deploy.check_server_certs(certs["ca_cert"], certs["server_cert"], certs["server_key"])


def test_make_certs_private_keys_are_0600_and_no_temp_left(certs: dict) -> None:
    for name in ("ca_key", "server_key"):
        assert stat.S_IMODE(os.stat(certs[name]).st_mode) == 0o600
    parent = Path(certs["dir"]).parent
    assert [p.name for p in parent.iterdir()] == ["certs"]


def test_make_certs_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "c"
    first = deploy.make_certs(out, ["127.0.0.1"])
    before = Path(first["ca_cert"]).read_bytes()
    with pytest.raises(ConfigError, match=r"ca.crt already exists.*--overwrite"):
        deploy.make_certs(out, ["127.0.0.1"])
    assert Path(first["ca_cert"]).read_bytes() == before
    again = deploy.make_certs(out, ["127.0.0.1"], overwrite=True)
    assert Path(again["ca_cert"]).read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_make_certs_into_existing_dir_keeps_other_files(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("keep me")
    deploy.make_certs(tmp_path, ["127.0.0.1"])
    assert (tmp_path / "README").read_text() == "keep me"
    assert (tmp_path / "server.pem").exists()


@pytest.mark.parametrize(
    "bad", ["10.0.0.1:9092", "https://coordinator", "bad_host!", "-x.org", "", "0.0.0.0", "::"]
)
def test_make_certs_rejects_bad_hosts(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="--hosts entry"):
        deploy.make_certs(tmp_path / "c", [bad])
    assert not (tmp_path / "c").exists()


def test_check_server_certs_catches_mixed_sets(tmp_path: Path, certs: dict) -> None:
    other = deploy.make_certs(tmp_path / "other", ["127.0.0.1"])
    with pytest.raises(KeyFileError, match="does not belong to server certificate"):
        deploy.check_server_certs(certs["ca_cert"], certs["server_cert"], other["server_key"])
    with pytest.raises(KeyFileError, match="is not signed by CA"):
        deploy.check_server_certs(other["ca_cert"], certs["server_cert"], certs["server_key"])


def test_check_server_certs_needs_loopback_san(tmp_path: Path) -> None:
    ca_key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    now = dt.datetime.now(dt.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "srv")]))
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("srv.example")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(pem))
    (tmp_path / "server.pem").write_bytes(cert.public_bytes(pem))
    (tmp_path / "server.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    with pytest.raises(KeyFileError, match="no SAN IP:127.0.0.1"):
        deploy.check_server_certs(
            tmp_path / "ca.crt", tmp_path / "server.pem", tmp_path / "server.key"
        )


def test_check_ca_cert_errors(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"CA certificate .*missing.crt does not exist"):
        deploy.check_ca_cert(tmp_path / "missing.crt")
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    with pytest.raises(KeyFileError, match=r"garbage.crt is not a PEM certificate"):
        deploy.check_ca_cert(garbage)
    empty = tmp_path / "empty.crt"
    empty.write_text("")
    with pytest.raises(KeyFileError, match="is empty"):
        deploy.check_ca_cert(empty)


def test_check_ca_cert_expired(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old")])
    past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(past)
        .not_valid_after(past + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "old.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(KeyFileError, match="expired on 2020-01-02.*infoshape deploy certs"):
        deploy.check_ca_cert(path)


# ---------------------------------------------------------------------------------------------
# SuperNode keys
# ---------------------------------------------------------------------------------------------


def test_node_key_is_openssh_p384(node_key: dict) -> None:
    private = serialization.load_ssh_private_key(Path(node_key["private_key"]).read_bytes(), None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.curve.name == "secp384r1"
    assert (
        Path(node_key["private_key"]).read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    )
    line = Path(node_key["public_key"]).read_text().strip()
    assert line.startswith("ecdsa-sha2-nistp384 ") and line.endswith(" hospital-a")
    public = serialization.load_ssh_public_key(line.encode())
    assert public.public_numbers() == private.public_key().public_numbers()
    assert stat.S_IMODE(os.stat(node_key["private_key"]).st_mode) == 0o600
    assert node_key["fingerprint"].startswith("SHA256:")
    assert deploy.check_node_private_key(node_key["private_key"])
    assert deploy.check_node_public_key(node_key["public_key"])


def test_node_key_fingerprint_matches_ssh_keygen(node_key: dict) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not installed")
    out = subprocess.run(
        ["ssh-keygen", "-lf", node_key["public_key"]], capture_output=True, text=True, check=True
    ).stdout
    assert node_key["fingerprint"] in out


def test_node_key_refuses_overwrite_and_bad_names(tmp_path: Path) -> None:
    deploy.make_node_key(tmp_path, "site1")
    with pytest.raises(ConfigError, match=r"site1.key already exists"):
        deploy.make_node_key(tmp_path, "site1")
    for bad in ("", "../x", "a b", "-lead"):
        with pytest.raises(ConfigError, match="node key name"):
            deploy.make_node_key(tmp_path, bad)


def test_check_node_keys_reject_other_key_types(tmp_path: Path) -> None:
    none = serialization.NoEncryption()
    ssh = serialization.PrivateFormat.OpenSSH
    pem = serialization.Encoding.PEM
    for label, key in (
        ("rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ("ed25519", ed25519.Ed25519PrivateKey.generate()),
        ("p256", ec.generate_private_key(ec.SECP256R1())),
    ):
        priv = tmp_path / f"{label}.key"
        priv.write_bytes(key.private_bytes(pem, ssh, none))
        priv.chmod(0o600)
        pub = tmp_path / f"{label}.pub"
        pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
            )
        )
        with pytest.raises(KeyFileError, match=r"needs NIST P-384 .*infoshape deploy node-key"):
            deploy.check_node_private_key(priv)
        with pytest.raises(KeyFileError, match=r"needs NIST P-384"):
            deploy.check_node_public_key(pub)


def test_check_node_private_key_errors(tmp_path: Path, node_key: dict) -> None:
    with pytest.raises(KeyFileError, match=r"SuperNode private key .*nope.key does not exist"):
        deploy.check_node_private_key(tmp_path / "nope.key")
    bad = tmp_path / "bad.key"
    bad.write_text("hello\n")
    bad.chmod(0o600)
    with pytest.raises(KeyFileError, match="is not an OpenSSH private key"):
        deploy.check_node_private_key(bad)
    loose = tmp_path / "loose.key"
    loose.write_bytes(Path(node_key["private_key"]).read_bytes())
    loose.chmod(0o644)
    with pytest.raises(KeyFileError, match=r"readable by other users; run chmod 600"):
        deploy.check_node_private_key(loose)
    with pytest.raises(KeyFileError, match="is not an OpenSSH public key"):
        deploy.check_node_public_key(bad)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen not installed")
def test_keys_from_ssh_keygen(tmp_path: Path) -> None:
    """A key a site made with ``ssh-keygen -t ecdsa -b 384`` is accepted; a protected one is not."""
    plain = tmp_path / "plain"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", str(plain)], check=True
    )
    assert deploy.check_node_private_key(plain)
    assert deploy.check_node_public_key(plain.with_suffix(".pub"))
    enc = tmp_path / "enc"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "secret", "-f", str(enc)], check=True
    )
    with pytest.raises(KeyFileError, match="passphrase-protected"):
        deploy.check_node_private_key(enc)


def test_register_node_checks_the_key_before_calling_flwr(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="SuperNode public key"):
        deploy.register_node(tmp_path / "absent.pub", "e2e", "site")


# ---------------------------------------------------------------------------------------------
# command lines
# ---------------------------------------------------------------------------------------------


def test_superlink_command_has_tls_auth_and_no_runtime_installs() -> None:
    cmd = deploy.superlink_command(
        ca="/p/ca.crt",
        cert="/p/server.pem",
        key="/p/server.key",
        host="0.0.0.0",
        port=9999,
        database="/p/state.db",
        executable="flower-superlink",
    )
    assert cmd[0] == "flower-superlink"
    joined = " ".join(cmd)
    for part in (
        "--ssl-ca-certfile /p/ca.crt",
        "--ssl-certfile /p/server.pem",
        "--ssl-keyfile /p/server.key",
        "--enable-supernode-auth",
        "--disable-runtime-dependency-installation",
        "--host 0.0.0.0",
        "--port 9999",
        "--database /p/state.db",
    ):
        assert part in joined
    assert "--insecure" not in cmd


def test_site_command_and_node_config_round_trip_through_flwr() -> None:
    from flwr.common.config import parse_config_args

    cmd = deploy.site_command(
        superlink="10.0.0.5:9092",
        role="audit",
        data="/data/it's here.csv",
        trusted_key="/keys/signing.pub",
        state_dir="/var/lib/site",
        site_name="auditor",
        port=9095,
        ca="/pki/ca.crt",
        auth_key="/keys/auditor.key",
        table_spec='{"label":"y","sensitive":["s"]}',
        executable="flower-supernode",
    )
    assert cmd[:3] == ["flower-supernode", "--superlink", "10.0.0.5:9092"]
    joined = " ".join(cmd)
    assert "--root-certificates /pki/ca.crt" in joined
    assert "--auth-supernode-private-key /keys/auditor.key" in joined
    assert "--port 9095" in joined and "--insecure" not in cmd
    node_config = parse_config_args([cmd[cmd.index("--node-config") + 1]])
    assert node_config == {
        "role": "audit",
        "data-path": "/data/it's here.csv",
        "trusted-key": "/keys/signing.pub",
        "state-dir": "/var/lib/site",
        "site-name": "auditor",
        "table-spec": '{"label":"y","sensitive":["s"]}',
    }


def test_format_config_pairs_refuses_what_flwr_cannot_carry() -> None:
    assert deploy.format_config_pairs({"a": 1, "b": True, "c": 0.5, "d": "x"}) == (
        "a=1 b=true c=0.5 d='x'"
    )
    with pytest.raises(ConfigError, match="both ' and"):
        deploy.format_config_pairs({"p": 'it\'s "quoted"'})
    with pytest.raises(ConfigError, match="must be one line"):
        deploy.format_config_pairs({"p": "a\nb"})
    with pytest.raises(ConfigError, match="config key"):
        deploy.format_config_pairs({"bad key": "x"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("coord.example.org:443", ("coord.example.org", 443)),
        ("[::1]:9092", ("::1", 9092)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert deploy.parse_address(text) == expected


@pytest.mark.parametrize(
    "text", ["127.0.0.1", "host:0", "host:70000", ":9092", "a b:1", "::1:9092"]
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        deploy.parse_address(text)


# ---------------------------------------------------------------------------------------------
# site input checks: each mistake, one clear line
# ---------------------------------------------------------------------------------------------


def test_check_site_inputs_accepts_valid_inputs(site: dict) -> None:
    checked = deploy.check_site_inputs(**site)
    assert checked["rows"] == 12
    assert json.loads(checked["table_spec"])["label"] == "label"
    assert Path(checked["state_dir"]).is_dir()
    assert checked["auth_key"] == site["auth_key"]


def test_table_spec_file_travels_as_json(site: dict, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"label": "label", "sensitive": ["sensitive"]}))
    checked = deploy.check_site_inputs(**{**site, "table_spec": str(spec_file)})
    assert json.loads(checked["table_spec"])["sensitive"] == ["sensitive"]


@pytest.mark.parametrize(
    ("change", "error", "pattern"),
    [
        ({"role": "doctor"}, ConfigError, r"--role must be one of hospital, audit"),
        ({"site_name": "a/b"}, ConfigError, r"site name must be"),
        ({"superlink": "coordinator"}, ConfigError, r"HOST:PORT"),
        ({"port": 0}, ConfigError, r"site port must be an integer in 1..65535"),
        ({"insecure": True}, ConfigError, r"--insecure .* refuses SuperNode authentication"),
        ({"ca": "MISSING/ca.crt"}, KeyFileError, r"CA certificate .*ca.crt does not exist"),
        (
            {"auth_key": "MISSING/site.key"},
            KeyFileError,
            r"SuperNode private key .*site.key does not exist",
        ),
        ({"trusted_key": "MISSING/signing.pub"}, KeyFileError, r"signing.pub"),
        ({"data": "MISSING/table.csv"}, DataFileError, r"data file .*table.csv does not exist"),
        (
            {"table_spec": '{"label": "income", "sensitive": ["sensitive"]}'},
            ColumnError,
            r"missing required column.*'income'",
        ),
        ({"table_spec": "{not json"}, ConfigError, r"--table-spec is not valid JSON"),
        ({"table_spec": "MISSING/spec.json"}, ConfigError, r"spec.json' does not exist"),
    ],
)
def test_check_site_inputs_errors(
    site: dict, tmp_path: Path, change: dict, error: type[Exception], pattern: str
) -> None:
    change = {
        k: (
            str(tmp_path / v.removeprefix("MISSING/"))
            if isinstance(v, str) and v.startswith("MISSING/")
            else v
        )
        for k, v in change.items()
    }
    with pytest.raises(error, match=pattern) as info:
        deploy.check_site_inputs(**{**site, **change})
    assert "\n" not in str(info.value)


def test_check_site_inputs_wrong_files(site: dict, tmp_path: Path, certs: dict) -> None:
    wrong_trusted = tmp_path / "wrong.pub"
    wrong_trusted.write_bytes(Path(certs["ca_cert"]).read_bytes())
    with pytest.raises(KeyFileError, match="wrong.pub"):
        deploy.check_site_inputs(**{**site, "trusted_key": wrong_trusted})
    with pytest.raises(KeyFileError, match="is not an OpenSSH private key"):
        deploy.check_site_inputs(**{**site, "auth_key": certs["ca_key"]})
    with pytest.raises(KeyFileError, match="is not a PEM certificate"):
        deploy.check_site_inputs(**{**site, "ca": site["trusted_key"]})
    bad_ext = tmp_path / "table.xlsx"
    bad_ext.write_text("x")
    with pytest.raises(DataFileError, match="table.xlsx"):
        deploy.check_site_inputs(**{**site, "data": bad_ext})
    one_class = tmp_path / "one.csv"
    one_class.write_text("x0,label,sensitive\n1,0,0\n2,0,1\n3,0,0\n")
    with pytest.raises(DataError, match="label"):
        deploy.check_site_inputs(**{**site, "data": one_class})


def test_check_site_inputs_busy_port(site: dict) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"site port 127.0.0.1:{busy} is not available"):
            deploy.check_site_inputs(**{**site, "port": busy})


def test_start_site_checks_before_starting(site: dict, tmp_path: Path) -> None:
    with pytest.raises(DataFileError):
        deploy.start_site(**{**site, "data": tmp_path / "absent.csv"})


def test_start_superlink_checks_before_starting(tmp_path: Path, certs: dict) -> None:
    with pytest.raises(ConfigError, match="--certs DIR"):
        deploy.start_superlink()
    with pytest.raises(KeyFileError, match=r"CA certificate .*ca.crt does not exist; make the set"):
        deploy.start_superlink(certs_dir=tmp_path, port=deploy.free_port())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        with pytest.raises(ConfigError, match="SuperLink address .* is not available"):
            deploy.start_superlink(certs_dir=certs["dir"], host="127.0.0.1", port=busy)


# ---------------------------------------------------------------------------------------------
# flwr CLI configuration and process handling
# ---------------------------------------------------------------------------------------------


def test_write_flwr_connection_merges(tmp_path: Path, certs: dict) -> None:
    home = tmp_path / "flwr"
    home.mkdir()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
    )
    path = deploy.write_flwr_connection(home, "prod", "10.0.0.5:9092", certs["ca_cert"])
    config = tomllib.loads(path.read_text())
    assert config["superlink"]["local"] == {"address": ":local:"}
    assert config["superlink"]["prod"] == {
        "address": "10.0.0.5:9092",
        "root-certificates": certs["ca_cert"],
    }
    assert config["superlink"]["default"] == "prod"
    with pytest.raises(ConfigError, match="needs the CA certificate"):
        deploy.write_flwr_connection(home, "x", "10.0.0.5:9092")


def test_last_json_skips_banners() -> None:
    assert deploy._last_json('Loading...\n{"success": true, "run-id": "7"}\n') == {
        "success": True,
        "run-id": "7",
    }
    assert deploy._last_json("no json here") is None


def test_flwr_failure_becomes_one_line_run_error(tmp_path: Path) -> None:
    home = tmp_path / "flwr"
    deploy.write_flwr_connection(home, "dead", f"127.0.0.1:{deploy.free_port()}", insecure=True)
    with pytest.raises(RunError) as info:
        deploy.run_status(1, "dead", flwr_home=home, timeout=60)
    assert "\n" not in str(info.value)


def test_stop_process_stops_detached_descendants(tmp_path: Path) -> None:
    """Flower detaches its helpers into new sessions; stopping must still reach them."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert child in deploy.descendants(proc.pid)
    deploy.stop_process(proc, grace_s=2.0)
    assert proc.poll() is not None
    assert not deploy.is_alive(child)


def test_submit_run_refuses_undeclared_run_config_keys(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.flwr.app.config]\nnum-sites = 3\n[tool.flwr.app.config.sub]\nx = 1\n"
    )
    assert deploy.declared_run_config(tmp_path) == {"num-sites": 3, "sub.x": 1}
    with pytest.raises(
        ConfigError, match=r"'out-dir' are not declared in \[tool.flwr.app.config\]"
    ):
        deploy.submit_run(tmp_path, "e2e", run_config={"num-sites": 2, "out-dir": "/x"})


def test_site_needs_a_table_spec(site: dict) -> None:
    with pytest.raises(ConfigError, match="--table-spec is required"):
        deploy.check_site_inputs(**{**site, "table_spec": None})


def test_several_trusted_keys_travel_comma_separated(site: dict, tmp_path: Path) -> None:
    second = generate_keypair(tmp_path / "second").public
    checked = deploy.check_site_inputs(**{**site, "trusted_key": [site["trusted_key"], second]})
    assert checked["trusted_key"] == f"{site['trusted_key']},{second}"
    checked = deploy.check_site_inputs(**{**site, "trusted_key": f"{site['trusted_key']},{second}"})
    assert checked["trusted_key"].count(",") == 1
    with pytest.raises(KeyFileError, match="nope.pub"):
        deploy.check_site_inputs(
            **{**site, "trusted_key": f"{site['trusted_key']},{tmp_path}/nope.pub"}
        )


def test_harness_stops_its_processes_when_the_test_fails(tmp_path: Path) -> None:
    """The e2e harness's promise: whatever happens in the block, nothing it started survives."""
    from tests.simulations import deploy_harness as h

    log = tmp_path / "sleeper.log"
    cmd = [sys.executable, "-c", "import time; time.sleep(120)"]
    with pytest.raises(RuntimeError, match="boom"):
        with h.federation(tmp_path) as fed:
            proc = deploy.spawn(cmd, log_path=log, env=None, cwd=None)
            fed._record("sleeper", {"process": proc, "log": str(log), "command": cmd})
            raise RuntimeError("boom")
    assert proc.poll() is not None
