"""The ``infoshape`` CLI through its real entry point: keygen → train → verify → encode, the
simulate and deploy wrappers, ``--json`` / ``--quiet`` / ``--debug``, usage errors and ``--help``.

Every command runs at least once as a subprocess of the installed console script; the cheaper
variations call :func:`simulations.cli.main` in-process (the same function the script runs).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).with_name("infoshape")
ENTRY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "simulations.cli"]
PASSPHRASE = "correct horse battery staple"


def run_cli(*args: object, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the console script as a user would (no TTY: no progress bars)."""
    return subprocess.run(
        [*ENTRY, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def call(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """In-process: ``main(argv)`` → (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_error_line(stderr: str, error_type: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"{error_type}: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def public_table(n: int = 600, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    y = rng.integers(0, 2, n)
    return pd.DataFrame(
        {
            "a": rng.normal(size=n) + y,
            "b": rng.normal(size=n) + s,
            "c": rng.choice(["north", "south", "east"], n),
            "y": y,
            "s": s,
        }
    )


@dataclass
class Trained:
    root: Path
    keys: Path
    bundle: Path
    public: pd.DataFrame
    keygen: dict
    train: dict


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """keygen (encrypted key) and a small InfoShape training, both through the console script."""
    root = tmp_path_factory.mktemp("cli")
    public = public_table(n=200)  # the encoder needs >= 50 rows; fewer rows train faster
    public.to_csv(root / "public.csv", index=False)
    keys = root / "keys"
    env = {"INFOSHAPE_TEST_PASSPHRASE": PASSPHRASE}
    done = run_cli(
        "keygen", "--out", keys, "--passphrase-env", "INFOSHAPE_TEST_PASSPHRASE", "--json", **env
    )
    assert done.returncode == 0, done.stderr
    keygen = json.loads(done.stdout)
    bundle = root / "bundle"
    done = run_cli(
        "train",
        "--data",
        root / "public.csv",
        "--label",
        "y",
        "--sensitive",
        "s",
        "--categorical",
        "c",
        "--lambda",
        "1.5",
        "--seed",
        "7",
        "--max-steps",
        "5",
        "--key",
        keys / "signing.key",
        "--passphrase-env",
        "INFOSHAPE_TEST_PASSPHRASE",
        "--out",
        bundle,
        "--version",
        "3",
        "--json",
        **env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return Trained(root, keys, bundle, public, keygen, json.loads(done.stdout))


def test_keygen_writes_a_0600_private_key_and_a_public_key(trained: Trained) -> None:
    private = trained.keys / "signing.key"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"ENCRYPTED PRIVATE KEY" in private.read_bytes()
    assert trained.keygen["encrypted"] is True
    assert trained.keygen["public_key"] == str(trained.keys / "signing.pub")
    assert len(trained.keygen["key_id"]) == 16


def test_train_json_reports_bundle_and_audit(trained: Trained) -> None:
    result = trained.train
    assert result["key_id"] == trained.keygen["key_id"]
    assert result["version"] == 3
    assert result["rows"] == 200 and result["label"] == "y" and result["sensitive"] == ["s"]
    assert result["features"] == ["a", "b", "c"] and result["inputs"] == 5
    assert result["params"]["lam"] == 1.5 and result["params"]["seed"] == 7
    audit = result["audit"]
    assert audit["steps"] >= 1
    assert np.isfinite(audit["mi_public_final"]) and set(audit["mi_sensitive_final"]) == {"s"}
    assert sorted(p.name for p in trained.bundle.iterdir()) == [
        "manifest.json",
        "signature",
        "weights.safetensors",
    ]


def test_verify_subprocess_json(trained: Trained) -> None:
    done = run_cli(
        "verify", trained.bundle, "--trusted-key", trained.keys / "signing.pub", "--json"
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["verified"] is True
    assert info["key_id"] == trained.keygen["key_id"]
    assert info["encoder_version"] == 3
    assert info["fingerprint"] == trained.train["fingerprint"]


def test_verify_human_and_quiet(trained: Trained, capsys: pytest.CaptureFixture[str]) -> None:
    pub = trained.keys / "signing.pub"
    code, out, err = call(capsys, "verify", trained.bundle, "--trusted-key", pub)
    assert code == 0 and err == ""
    assert "Bundle verified" in out and trained.keygen["key_id"] in out
    code, out, err = call(capsys, "verify", trained.bundle, "--trusted-key", pub, "--quiet")
    assert (code, out, err) == (0, "", "")


def test_encode_subprocess_round_trip(trained: Trained) -> None:
    from shared.bundle import EncoderBundle
    from shared.pipeline import open_bundle

    site = public_table(n=1500, seed=5).assign(patient_id=lambda f: np.arange(len(f)))
    site.to_parquet(trained.root / "site.parquet")
    out = trained.root / "release" / "site.parquet"
    state = trained.root / "state"
    done = run_cli(
        "encode",
        "--bundle",
        trained.bundle,
        "--trusted-key",
        trained.keys / "signing.pub",
        "--data",
        trained.root / "site.parquet",
        "--out",
        out,
        "--state-dir",
        state,
        "--chunk-rows",
        "400",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    result = json.loads(done.stdout)
    assert result["rows"] == 1500 and result["chunks"] == 4
    assert result["columns"] == ["z_0", "z_1", "z_2", "y"] and result["version"] == 3

    table = pq.read_table(out)
    assert table.column_names == ["z_0", "z_1", "z_2", "y"]  # no s, no raw feature, no id
    assert table.column("y").to_pylist() == site["y"].tolist()  # input order
    encoder = open_bundle(EncoderBundle.load(trained.bundle, trained.keys / "signing.pub"))
    np.testing.assert_allclose(
        table.select(["z_0", "z_1", "z_2"]).to_pandas().to_numpy(),
        encoder.encode_features(site),
        rtol=1e-5,
        atol=1e-6,
    )
    assert (
        json.loads((state / "trust-state.json").read_text())["accepted"][trained.keygen["key_id"]][
            "version"
        ]
        == 3
    )


def test_encode_human_output(trained: Trained, capsys: pytest.CaptureFixture[str]) -> None:
    trained.public.to_csv(trained.root / "site.csv", index=False)
    out = trained.root / "human.parquet"
    code, stdout, err = call(
        capsys,
        "encode",
        "--bundle",
        trained.bundle,
        "--trusted-key",
        trained.keys / "signing.pub",
        "--data",
        trained.root / "site.csv",
        "--out",
        out,
    )
    assert code == 0 and err == ""
    assert "encoded 200 rows" in stdout and "z_0, z_1, z_2, y" in stdout
    assert out.exists()


def test_train_human_audit_table(
    trained: Trained,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("INFOSHAPE_TEST_PASSPHRASE", PASSPHRASE)
    code, out, err = call(
        capsys,
        "train",
        "--data",
        trained.root / "public.csv",
        "--label",
        "y",
        "--sensitive",
        "s",
        "--features",
        "a,b",
        "--shaper",
        "random-encoder",
        "--key",
        trained.keys / "signing.key",
        "--passphrase-env",
        "INFOSHAPE_TEST_PASSPHRASE",
        "--out",
        tmp_path / "b",
    )
    assert code == 0, err
    assert "Encoder trained and signed" in out and "random-encoder, 2 -> 3 outputs" in out


def test_usage_error_is_one_line_exit_2() -> None:
    done = run_cli(
        "train", "--dataset", "paper-synthetic", "--schedule", "bogus", "--key", "k", "--out", "o"
    )
    assert done.returncode == 2
    line = assert_one_error_line(done.stderr, "UsageError")
    assert "'bogus'" in line and "--schedule" in line


def test_debug_adds_the_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = call(capsys, "verify", tmp_path / "nope", "--trusted-key", "k.pub", "--debug")
    assert code == 1
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("BundleFormatError: ")


def test_json_error_object(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = call(
        capsys, "keygen", "--out", tmp_path, "--passphrase-env", "UNSET_VAR_X", "--json"
    )
    assert code == 1
    assert json.loads(out) == {
        "error": {
            "type": "ConfigError",
            "message": "environment variable UNSET_VAR_X (from --passphrase-env) is not set",
            "exit_code": 1,
        }
    }
    assert_one_error_line(err, "ConfigError")


HELP_COMMANDS = [
    ["keygen"],
    ["train"],
    ["verify"],
    ["encode"],
    ["simulate"],
    ["deploy", "certs"],
    ["deploy", "node-key"],
    ["deploy", "superlink"],
    ["deploy", "site"],
]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=" ".join)
def test_help_shows_an_example(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = call(capsys, *command, "--help")
    assert code == 0
    assert "Example: infoshape " + command[0] in " ".join(out.split()).replace("│", "")
    assert "--json" in out and "--quiet" in out and "--debug" in out


def test_version_and_bare_invocation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = call(capsys, "--version")
    assert code == 0 and out.startswith("infoshape-fl ")
    code, out, _ = call(capsys)
    assert code in (0, 2) and "keygen" in out  # no command: the overview


# ---------------------------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------------------------
def test_simulate_failure_path_subprocess() -> None:
    done = run_cli("simulate", "--sites", "0", "--json")
    assert done.returncode == 1
    line = assert_one_error_line(done.stderr, "ConfigError")
    assert "--sites" in line and "0" in line
    assert json.loads(done.stdout)["error"]["type"] == "ConfigError"


def test_simulate_refuses_negative_lambda(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = call(capsys, "simulate", "--lambda", "-1")
    assert code == 1
    assert "-1" in assert_one_error_line(err, "ConfigError")


def test_simulate_dataset_path_errors_leave_no_run_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    code, _, err = call(capsys, "simulate", "--dataset", "adult", "--out", run)
    assert code == 1
    assert "needs path" in assert_one_error_line(err, "ConfigError")
    assert not run.exists()  # found before any site ran: no half-made run dir
    missing = tmp_path / "nowhere"
    code, _, err = call(
        capsys, "simulate", "--dataset", "adult", "--data-path", missing, "--out", run
    )
    assert code == 1
    assert str(missing) in assert_one_error_line(err, "DataFileError")
    assert not run.exists()
    run.mkdir()  # a directory the user made stays, empty
    code, _, err = call(capsys, "simulate", "--dataset", "paper-synthetic", "--data-path",
                        tmp_path, "--out", run)  # fmt: skip
    assert code == 1
    assert "takes no path" in assert_one_error_line(err, "ConfigError")
    assert run.is_dir() and not any(run.iterdir())


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_simulate_end_to_end_subprocess(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_cli(
        "simulate", "--sites", "2", "--max-steps", "60", "--out", run_dir, "--json", timeout=900
    )
    assert done.returncode in (0, 3), done.stderr
    summary = json.loads(done.stdout)
    assert Path(summary["run_dir"]) == run_dir and (run_dir / "summary.json").exists()
    assert [s["role"] for s in summary["sites"]].count("hospital") == 2
    if done.returncode == 3:
        assert_one_error_line(done.stderr, "GatedError")
    else:
        assert done.stderr.strip() == ""


# ---------------------------------------------------------------------------------------------
# deploy
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """deploy certs + deploy node-key through the console script."""
    root = tmp_path_factory.mktemp("pki")
    done = run_cli(
        "deploy",
        "certs",
        "--hosts",
        "coordinator.example.org",
        "10.0.0.5",
        "--out",
        root / "pki",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    certs = json.loads(done.stdout)
    done = run_cli("deploy", "node-key", "hospital-a", "--out", root / "keys", "--json")
    assert done.returncode == 0, done.stderr
    return {"root": root, "certs": certs, "node": json.loads(done.stdout)}


def test_deploy_certs_and_node_key(pki: dict) -> None:
    sans = pki["certs"]["sans"]
    assert "DNS:coordinator.example.org" in sans and "IP:10.0.0.5" in sans
    assert "IP:127.0.0.1" in sans
    private = Path(pki["node"]["private_key"])
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert Path(pki["node"]["public_key"]).read_text().startswith("ecdsa-sha2-nistp384 ")


def test_deploy_certs_refuses_overwrite(pki: dict, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = call(capsys, "deploy", "certs", "--hosts", "x.org", "--out", pki["root"] / "pki")
    assert code == 1
    assert "already exists" in assert_one_error_line(err, "ConfigError")


def test_deploy_superlink_dry_run_and_failure(
    pki: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = call(
        capsys,
        "deploy",
        "superlink",
        "--certs",
        pki["root"] / "pki",
        "--port",
        "9092",
        "--dry-run",
        "--json",
    )
    assert code == 0, err
    command = json.loads(out)["command"]
    assert "--enable-supernode-auth" in command
    assert "--disable-runtime-dependency-installation" in command

    done = run_cli("deploy", "superlink", "--certs", pki["root"] / "missing")
    assert done.returncode == 1
    assert "missing" in assert_one_error_line(done.stderr, "KeyFileError")


def test_deploy_site_dry_run_and_failure(
    pki: dict, trained: Trained, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulations.deploy import free_port

    spec = '{"label": "y", "sensitive": ["s"], "categorical": ["c"]}'
    args = [
        "deploy",
        "site",
        "--superlink",
        "127.0.0.1:9092",
        "--role",
        "hospital",
        "--data",
        trained.root / "public.csv",
        "--trusted-key",
        trained.keys / "signing.pub",
        "--ca",
        pki["certs"]["ca_cert"],
        "--auth-key",
        pki["node"]["private_key"],
        "--state-dir",
        trained.root / "site-state",
        "--name",
        "hospital-a",
        "--port",
        str(free_port()),
    ]
    code, out, err = call(capsys, *args, "--table-spec", spec, "--dry-run", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["rows"] == 200 and result["started"] is False
    assert "--node-config" in result["command"]

    done = run_cli(*args, "--table-spec", '{"label": "y"}', "--dry-run")
    assert done.returncode == 1
    assert "sensitive" in assert_one_error_line(done.stderr, "ConfigError")


def test_deploy_site_bad_role_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = call(
        capsys,
        "deploy",
        "site",
        "--superlink",
        "h:1",
        "--role",
        "spy",
        "--data",
        "d.csv",
        "--trusted-key",
        "k.pub",
        "--state-dir",
        "s",
        "--name",
        "n",
    )
    assert code == 2
    assert "'spy'" in assert_one_error_line(err, "UsageError")


@pytest.fixture(autouse=True)
def _no_stray_runs() -> Iterator[None]:
    """Nothing here may write a default run directory into the repository."""
    before = (ROOT / "runs").exists()
    yield
    if not before and (ROOT / "runs").exists():  # pragma: no cover - a test bug
        shutil.rmtree(ROOT / "runs")
        pytest.fail("a test wrote runs/ into the repository")


def test_simulate_summary_rendering(capsys: pytest.CaptureFixture[str]) -> None:
    """The human view of a run summary (the end-to-end run above uses --json)."""
    from simulations.cli import _console, _render_summary

    summary = {
        "sites": [
            {"name": "hospital-0", "role": "hospital", "rows": 900, "status": "ok"},
            {"name": "hospital-1", "role": "hospital", "rows": 0, "status": "refused",
             "reason": "UnknownKeyError: signed by key 1234"},
        ],
        "release": {"rows": 900},
        "downstream": {"mode": "release", "auc": 0.93, "accuracy": 0.86},
        "audit": {"central": {"best_auc": 0.61, "best_accuracy": 0.58, "majority": 0.51}},
        "gate": {"passed": True, "reason": "strongest attacker AUC 0.6100 (central:s) ≤ 0.7"},
        "run_dir": "runs/x",
    }  # fmt: skip
    _render_summary(_console(), summary)
    out = capsys.readouterr().out
    assert "hospital-1" in out and "refused" in out and "UnknownKeyError" in out
    assert "AUC 0.930" in out and "AUC 0.610" in out and "passed" in out and "runs/x" in out
