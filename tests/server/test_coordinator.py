"""A whole coordinator run in-process against the real ClientApp (no Ray): faults and the gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from flwr.app import Error, Message

from server import protocol as p
from server.config import RunConfig
from server.phases import run_coordinator
from simulations.rundir import check_release, read_summary
from tests.server.fakes import SmallWorld, client_grid, make_world

SUMMARY_KEYS = {"sites", "release", "downstream", "audit", "gate", "bundle", "timings"}


def _config(world: SmallWorld, tmp: Path, **overrides: Any) -> RunConfig:
    world.public.to_parquet(tmp / "public.parquet", index=False)
    world.test.to_parquet(tmp / "test.parquet", index=False)
    values: dict[str, Any] = dict(
        public_data=str(tmp / "public.parquet"), test_data=str(tmp / "test.parquet"),
        table_spec=json.dumps(world.spec.to_dict()), signing_key=str(world.private_key),
        num_sites=3, shaper="random-encoder", max_private_auc=1.0, mi_steps=50,
        attackers="logistic-regression,knn", wait_nodes_timeout=0.1, encode_timeout=2.0,
    )
    values.update(overrides)
    return RunConfig(**values)


@pytest.fixture
def world(tmp_path: Path) -> SmallWorld:
    return make_world(tmp_path / "world", n_hospitals=4, n=1400)


def test_release_run_with_a_wrong_key_a_crash_and_a_silent_site(
    world: SmallWorld, tmp_path: Path
) -> None:
    """hospital-1 trusts the wrong key, hospital-2's app raises, hospital-3 never answers the
    encode task: the run completes with hospital-0 and says who failed and why."""
    world.node_configs[102]["trusted-key"] = str(world.wrong_key)

    def faults(nid: int, message: Message, call: Any) -> Message | None:
        if message.metadata.message_type == p.DISCOVER:
            return call()
        if nid == 103:
            return Message(Error(code=2, reason="ClientApp raised RuntimeError"),
                           reply_to=message)
        if nid == 104:
            return None
        return call()

    run_dir = tmp_path / "run"
    summary = run_coordinator(client_grid(world.node_configs, wrap=faults),
                              _config(world, tmp_path), run_id="r", run_dir=run_dir)
    assert summary == read_summary(run_dir)
    assert SUMMARY_KEYS <= set(summary) and summary["status"] == "completed"
    sites = {s["name"]: s for s in summary["sites"]}
    assert sites["hospital-0"]["status"] == "ok"
    assert sites["auditor"]["status"] == "ok" and sites["auditor"]["role"] == "audit"
    assert (sites["hospital-1"]["status"], sites["hospital-1"]["error_type"]) == (
        "refused", "UnknownKeyError")
    assert sites["hospital-1"]["reason"].startswith("encode: UnknownKeyError")
    assert (sites["hospital-2"]["status"], sites["hospital-2"]["error_type"]) == (
        "failed", "ClientAppRaised")
    assert (sites["hospital-3"]["status"], sites["hospital-3"]["error_type"]) == (
        "failed", "Timeout")
    rows = len(world.site_frames["hospital-0"])
    assert sites["hospital-0"]["rows"] == rows
    assert summary["release"]["rows"] == rows and summary["release"]["published"]
    manifest = check_release(run_dir)
    assert list(manifest["sites"]) == ["hospital-0"]
    assert pq.read_table(run_dir / "release" / "hospital-0.parquet").column_names == [
        "z_0", "z_1", "z_2", "outcome"]
    assert summary["audit"]["federated"]["sites"] == 1
    assert summary["downstream"]["mode"] == "release"
    assert summary["downstream"]["test_rows"] == len(world.test)
    assert summary["bundle"]["fingerprint"] == manifest["encoder_fingerprint"]
    assert (run_dir / "bundle" / "manifest.json").is_file()


def test_gate_refuses_publication(world: SmallWorld, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    summary = run_coordinator(client_grid(world.node_configs),
                              _config(world, tmp_path, max_private_auc=0.5),
                              run_id="g", run_dir=run_dir)
    assert summary["status"] == "gated"
    assert summary["gate"]["passed"] is False and summary["gate"]["threshold"] == 0.5
    assert summary["gate"]["best_auc"] > 0.5
    assert summary["release"]["published"] is False
    assert "exceeds" in summary["release"]["reason"]
    assert not (run_dir / "release").exists()
    assert summary["release"]["rows"] == sum(
        len(world.site_frames[f"hospital-{i}"]) for i in range(4))


def test_no_auditor_fails_closed(world: SmallWorld, tmp_path: Path) -> None:
    configs = {nid: c for nid, c in world.node_configs.items() if c["role"] == "hospital"}
    summary = run_coordinator(client_grid(configs), _config(world, tmp_path),
                              run_id="n", run_dir=tmp_path / "run")
    assert summary["audit"]["central"] is None
    assert summary["gate"]["passed"] is False and "not measured" in summary["gate"]["reason"]
    assert not (tmp_path / "run" / "release").exists()


def test_a_given_bundle_is_verified_then_distributed(world: SmallWorld, tmp_path: Path) -> None:
    from shared.bundle import load_private_key
    from tests.server.fakes import make_bundle

    bundle = make_bundle(world, version=3)
    bundle.save(tmp_path / "given", load_private_key(world.private_key))
    config = _config(world, tmp_path, bundle=str(tmp_path / "given"),
                     trusted_key=str(world.public_key), signing_key="")
    summary = run_coordinator(client_grid(world.node_configs), config, run_id="b",
                              run_dir=tmp_path / "run")
    assert summary["bundle"]["version"] == 3
    assert summary["bundle"]["fingerprint"] == bundle.fingerprint
    assert all(s["status"] == "ok" for s in summary["sites"])

    wrong = _config(world, tmp_path, bundle=str(tmp_path / "given"),
                    trusted_key=str(world.wrong_key), signing_key="")
    with pytest.raises(Exception, match="not.*trusted|UnknownKey|trusted"):
        run_coordinator(client_grid(world.node_configs), wrong, run_id="w",
                        run_dir=tmp_path / "run2")
    assert read_summary(tmp_path / "run2")["status"] == "failed"


def test_a_run_where_every_hospital_refuses_fails_with_a_summary(
    world: SmallWorld, tmp_path: Path
) -> None:
    from shared.errors import RunError

    for config in world.node_configs.values():
        config["trusted-key"] = str(world.wrong_key)
    with pytest.raises(RunError, match="no hospital accepted"):
        run_coordinator(client_grid(world.node_configs), _config(world, tmp_path),
                        run_id="x", run_dir=tmp_path / "run")
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and summary["error"]["type"] == "RunError"
    assert {s["status"] for s in summary["sites"]} == {"refused"}
