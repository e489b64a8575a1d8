"""End to end: a real federation of processes on 127.0.0.1 with TLS and SuperNode authentication.

1 SuperLink + 3 SuperNodes (2 hospitals, 1 auditor), free ports picked at runtime, ``FLWR_HOME``
in the test's temp dir, every process stopped by PID at the end (the harness fails the test if
one survives). Slow (tens of seconds each) but run in CI: this is the only test that proves the
recipe in ``docs/deployment.md`` works as written.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from shared.bundle import KeyPairPaths, generate_keypair
from simulations import deploy
from tests.simulations import deploy_harness as h

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deploy")]

SPEC = json.dumps({"label": "label", "sensitive": ["sensitive"]})
SITES = [("hospital-a", "hospital"), ("hospital-b", "hospital"), ("auditor", "audit")]


def test_tls_auth_federation_and_unregistered_node_refused(tmp_path: Path) -> None:
    """The plumbing with a probe app: TLS, registration, node_config, refusal, no leaks."""
    t0 = time.monotonic()
    out = tmp_path / "out"
    with h.federation(tmp_path) as fed:
        address = fed.start_superlink()
        # the SuperLink speaks TLS only: plain HTTP on its port gets no answer
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://{address}/health", timeout=5)  # noqa: S310

        signing = generate_keypair(tmp_path / "signing")
        data = h.write_table(tmp_path / "data" / "site.csv")
        fed.register_many([name for name, _ in SITES])
        for name, role in SITES:
            fed.start_site(name, role, data, signing.public, table_spec=SPEC)
        rogue = fed.start_site(
            "rogue", "hospital", data, signing.public, table_spec=SPEC, register=False
        )

        run_id = fed.submit(
            h.write_probe_app(tmp_path), {"out-dir": str(out), "num-nodes": len(SITES)}
        )

        # an unregistered key is refused at activation: the SuperNode exits with Flower's 2004
        rogue.process.wait(timeout=60)
        assert rogue.process.returncode != 0
        assert "[code: 2004]" in rogue.log_text(), h.tail(rogue.log_text())

        status = fed.wait(run_id, timeout=120, done_marker=out / "summary.json")
        assert status == "finished:completed", fed.logs_tail()
        listed = deploy.list_nodes(fed.connection, flwr_home=fed.flwr_home, env=fed.env)
        assert {int(n["node-id"]): n["status"] for n in listed} == {
            fed.node_ids[name]: "online" for name, _ in SITES
        }

        summary = h.read_json(out / "summary.json")
        roles = {int(node): site["role"] for node, site in summary["sites"].items()}
        names = {int(node): site["site-name"] for node, site in summary["sites"].items()}
        assert sorted(summary["node_ids"]) == sorted(fed.node_ids[n] for n, _ in SITES)
        for name, role in SITES:
            assert roles[fed.node_ids[name]] == role
            assert names[fed.node_ids[name]] == name
        node_cfg = summary["sites"][str(fed.node_ids["hospital-a"])]
        spec = json.loads(node_cfg["table-spec"])
        assert (spec["label"], spec["sensitive"]) == ("label", ["sensitive"])
        assert node_cfg["trusted-key"] == str(signing.public.resolve())
        started = [s.process for s in fed.started]
    assert all(p.poll() is not None for p in started)
    elapsed = time.monotonic() - t0
    print(f"probe federation end to end: {elapsed:.1f} s; {fed.timings}")


# ---------------------------------------------------------------------------------------------
# the real apps (server.app / client.app) on the same kind of federation
# ---------------------------------------------------------------------------------------------

HOSPITALS = ["hospital-0", "hospital-1"]


def _release_run_config(tmp_path: Path, signing_key: Path, **overrides: object) -> dict:
    """A release run kept small and quick: the deployment is under test, not the encoder."""
    config: dict = {
        "out-dir": str(tmp_path / "run"),
        "num-sites": len(HOSPITALS),
        "signing-key": str(signing_key),
        "mode": "release",
        "seed": 0,
        # the real InfoShape encoder, trained briefly; the gate is off (1.0) because this test is
        # about the deployment (the gate has its own tests in the simulation)
        "shaper-params": json.dumps({"max_steps": 100}),
        "max-private-auc": 1.0,
        "attackers": "logistic-regression",
        "mi-steps": 100,
        "federated-audit": True,
        "downstream-epochs": 5,
        "wait-nodes-timeout": 60.0,
        "discover-timeout": 60.0,
        "encode-timeout": 90.0,
        "audit-timeout": 120.0,
        "round-timeout": 60.0,
    }
    config.update(overrides)
    return config


def _start_real_federation(fed: h.Federation, tmp_path: Path) -> tuple[h.SiteTables, KeyPairPaths]:
    """SuperLink + 2 hospitals + 1 auditor holding disjoint rows of paper-synthetic."""
    tables = h.write_site_tables(tmp_path / "data", len(HOSPITALS))
    signing = generate_keypair(tmp_path / "coordinator" / "keys")
    fed.start_superlink()
    fed.register_many([*HOSPITALS, "auditor"])
    for name in HOSPITALS:
        fed.start_site(
            name, "hospital", tables.hospitals[name], signing.public, table_spec=tables.spec_json
        )
    fed.start_site("auditor", "audit", tables.auditor, signing.public, table_spec=tables.spec_json)
    return tables, signing


def _require_declared(config: dict) -> Path:
    app = h.app_under_test()
    missing = h.missing_run_config_keys(app, list(config))
    assert not missing, (
        f"add {missing} to [tool.flwr.app.config] in {app / 'pyproject.toml'}: the SuperLink "
        "refuses --run-config overrides of undeclared keys"
    )
    return app


def _sites_by_name(summary: dict) -> dict[str, dict]:
    return {s["name"]: s for s in summary["sites"]}


def test_release_run_on_tls_federation(tmp_path: Path) -> None:
    """``flwr run`` of this repository on 1 SuperLink + 3 SuperNodes with TLS and SuperNode
    authentication: an unregistered SuperNode is refused, the run completes, the run dir is
    complete, and every process is stopped by PID (the harness fails the test otherwise)."""
    app = _require_declared(_release_run_config(tmp_path, Path("signing.key")))
    t0 = time.monotonic()
    with h.federation(tmp_path) as fed:
        tables, signing = _start_real_federation(fed, tmp_path)
        rogue = fed.start_site(
            "rogue",
            "hospital",
            tables.hospitals["hospital-0"],
            signing.public,
            table_spec=tables.spec_json,
            register=False,
        )
        run_id = fed.submit(app, _release_run_config(tmp_path, signing.private))
        rogue.process.wait(timeout=60)
        assert rogue.process.returncode != 0
        assert "[code: 2004]" in rogue.log_text(), h.tail(rogue.log_text())
        status = fed.wait(run_id, timeout=240, done_marker=tmp_path / "run" / "summary.json")
        assert status == "finished:completed", fed.run_log(run_id) + fed.logs_tail()
        started = [s.process for s in fed.started]
    assert all(p.poll() is not None for p in started)
    elapsed = time.monotonic() - t0

    run_dir = tmp_path / "run"
    summary = h.read_json(run_dir / "summary.json")
    assert summary["status"] == "completed", summary.get("error")
    sites = _sites_by_name(summary)
    assert set(sites) == {*HOSPITALS, "auditor"}
    for name in (*HOSPITALS, "auditor"):
        assert sites[name]["status"] == "ok", sites[name]
        assert sites[name]["node_id"] == fed.node_ids[name]
    assert sites["auditor"]["role"] == "audit"
    hospital_rows = sum(tables.rows[n] for n in HOSPITALS)
    assert summary["release"]["rows"] == hospital_rows
    assert summary["release"]["published"] is True

    import pandas as pd

    spec = json.loads(tables.spec_json)
    manifest = h.read_json(run_dir / "release" / "manifest.json")
    files = sorted((run_dir / "release").glob("*.parquet"))
    assert [f.stem for f in files] == HOSPITALS
    for f in files:
        columns = list(pd.read_parquet(f).columns)
        assert columns[-1] == spec["label"], columns
        assert all(c.startswith("z_") for c in columns[:-1]), columns  # no x, no S
        assert hashlib.sha256(f.read_bytes()).hexdigest() in json.dumps(manifest)
    assert (run_dir / "bundle" / "manifest.json").exists()
    print(f"release run over TLS federation: {elapsed:.1f} s; {fed.timings}")


def test_killed_supernode_does_not_stop_the_run(tmp_path: Path) -> None:
    """SIGKILL one hospital's SuperNode mid-run: the run completes and names that site failed."""
    t0 = time.monotonic()
    victim = "hospital-1"
    # the encode timeout bounds the wait for the dead site (Flower itself declares a killed
    # SuperNode unavailable after ~60 s); the federated audit is left out to keep the test
    # short: the kill happens before it
    short = {"encode-timeout": 60.0, "audit-timeout": 120.0, "federated-audit": False}
    app = _require_declared(_release_run_config(tmp_path, Path("signing.key"), **short))
    with h.federation(tmp_path) as fed:
        tables, signing = _start_real_federation(fed, tmp_path)
        node = next(s for s in fed.started if s.name == victim)
        run_id = fed.submit(app, _release_run_config(tmp_path, signing.private, **short))
        # kill it once it has answered discovery (its first ClientApp process came and went):
        # the coordinator then counts on it for the encoding, which it never delivers
        deadline = time.monotonic() + 120
        seen: set[int] = set()
        while time.monotonic() < deadline:
            now = set(h.clientapp_pids(node.process.pid))
            if seen - now:
                break
            seen |= now
            time.sleep(0.1)
        else:
            raise AssertionError("the victim never ran a ClientApp\n" + fed.logs_tail())
        fed.note_descendants()  # its helpers are orphaned by the kill: remember them to stop
        node.process.kill()  # SIGKILL the SuperNode itself, as a crash would
        node.process.wait(timeout=10)
        killed_at = time.monotonic() - t0
        status = fed.wait(run_id, timeout=240, done_marker=tmp_path / "run" / "summary.json")
        assert status == "finished:completed", fed.run_log(run_id) + fed.logs_tail()
    elapsed = time.monotonic() - t0

    summary = h.read_json(tmp_path / "run" / "summary.json")
    sites = _sites_by_name(summary)
    assert sites[victim]["status"] == "failed", sites[victim]
    assert sites[victim]["reason"], sites[victim]
    assert sites["hospital-0"]["status"] == "ok"
    assert summary["release"]["rows"] == tables.rows["hospital-0"]
    print(
        f"killed {victim} at {killed_at:.1f} s; run finished after {elapsed:.1f} s; "
        f"reason: {sites[victim]['reason']}"
    )
