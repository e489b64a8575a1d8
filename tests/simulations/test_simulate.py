"""``run_simulate``: the whole release on Flower's simulation runtime (Ray), end to end.

The two end-to-end runs start Ray and train or load real encoders, so they are marked slow
(they still run in CI). The world-building tests below them are fast and need no Ray.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from shared.errors import ConfigError
from simulations.rundir import check_release, read_summary
from simulations.simulate import SimulateOptions, build_world, exit_code, run_simulate

SUMMARY_KEYS = {"sites", "release", "downstream", "audit", "gate", "bundle", "timings"}
SUITE_KEYS = {"best_auc", "best_accuracy", "best_balanced_accuracy", "majority", "per_attacker"}


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_defaults_end_to_end(tmp_path: Path) -> None:
    """3 hospitals + 1 auditor on paper-synthetic, release mode, the real InfoShape encoder."""
    summary = run_simulate(SimulateOptions(out=str(tmp_path / "run")))
    run_dir = Path(summary["run_dir"])
    assert SUMMARY_KEYS <= set(summary)
    assert summary["status"] == "completed" and exit_code(summary) == 0
    hospitals = [s for s in summary["sites"] if s["role"] == "hospital"]
    assert [s["name"] for s in hospitals] == ["hospital-0", "hospital-1", "hospital-2"]
    assert all(s["status"] == "ok" for s in summary["sites"])
    assert {s["role"] for s in summary["sites"]} == {"hospital", "audit"}

    # release rows = the hospitals' rows; files hold z columns + the label, nothing else
    assert summary["release"]["published"] is True
    assert summary["release"]["rows"] == sum(s["rows"] for s in hospitals) == 4000
    manifest = check_release(run_dir)
    assert manifest["encoder_fingerprint"] == summary["bundle"]["fingerprint"]
    for name in manifest["files"]:
        columns = pq.read_table(run_dir / "release" / name).column_names
        assert columns == [c for c in columns if c.startswith("z_")] + ["y"]

    # summary content (issue 3, item 5)
    for key in ("name", "role", "rows", "status", "reason"):
        assert all(key in s for s in summary["sites"])
    assert {"mode", "auc", "accuracy", "test_rows"} <= set(summary["downstream"])
    assert SUITE_KEYS <= set(summary["audit"]["central"])
    assert SUITE_KEYS <= set(summary["audit"]["federated"])
    assert summary["audit"]["mi"]["unit"] == "nats"
    assert summary["gate"]["threshold"] == 0.70 and summary["gate"]["passed"] is True
    assert {"fingerprint", "key_id", "version"} <= set(summary["bundle"])
    assert summary["timings"]["total_s"] > 0
    assert read_summary(run_dir)["run_id"] == summary["run_id"]
    assert (run_dir / "bundle" / "manifest.json").is_file()

    # acceptance figures (issue 3): utility kept, S hidden from the strongest attacker
    assert summary["downstream"]["auc"] >= 0.90
    assert summary["audit"]["central"]["best_auc"] <= 0.70
    assert summary["audit"]["federated"]["best_auc"] <= 0.70


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_faulty_sites_are_named_and_the_run_completes(tmp_path: Path) -> None:
    """hospital-1 trusts the wrong key, hospital-2 crashes, hospital-3 stalls past the timeout,
    hospital-4's worker process dies: hospital-0 and the auditor carry the (federated) run."""
    summary = run_simulate(SimulateOptions(
        sites=5, out=str(tmp_path / "run"), mode="federated", shaper="random-encoder",
        attackers=["logistic-regression", "knn"], mi_steps=50, max_private_auc=1.0,
        fedavg_rounds=2, wrong_key_sites=[1], raise_sites=[2], slow_sites=[3],
        kill_sites=[4], encode_timeout=45.0, slow_seconds=50.0,
    ))
    assert summary["status"] == "completed"
    sites = {s["name"]: s for s in summary["sites"]}
    assert sites["hospital-0"]["status"] == "ok" and sites["auditor"]["status"] == "ok"
    assert (sites["hospital-1"]["status"], sites["hospital-1"]["error_type"]) == (
        "refused", "UnknownKeyError")
    assert "not trusted" in sites["hospital-1"]["reason"]
    assert sites["hospital-2"]["status"] == "failed"
    assert "simulated crash" in sites["hospital-2"]["reason"]
    assert (sites["hospital-3"]["status"], sites["hospital-3"]["error_type"]) == (
        "failed", "Timeout")
    # A killed worker is seen either directly ("killed mid-task") or, when the machine is slow to
    # report the dead actor, as a node lost past the encode timeout; both name the site as failed.
    assert sites["hospital-4"]["status"] == "failed"
    assert ("killed" in sites["hospital-4"]["reason"]
            or sites["hospital-4"]["error_type"] == "Timeout"), sites["hospital-4"]
    assert summary["downstream"]["mode"] == "federated"
    assert summary["downstream"]["history"][-1]["sites"] == 1
    assert summary["release"]["published"] is False  # federated: encodings stay at the sites
    assert summary["simulation"]["faults"]["hospital-1"] == "wrong-key"


# --------------------------------------------------------------------------- fast, no Ray
def test_world_splits_are_disjoint_and_each_site_gets_its_own_config(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    options = SimulateOptions(sites=4, partition="dirichlet:0.5", wrong_key_sites=[2])
    world = build_world(options, run_dir, tmp_path / "world")
    configs = world.node_configs
    assert [c["role"] for c in configs] == ["hospital"] * 4 + ["audit"]
    assert [c["site-name"] for c in configs] == [f"hospital-{i}" for i in range(4)] + ["auditor"]
    assert configs[2]["trusted-key"] != configs[0]["trusted-key"] == configs[4]["trusted-key"]
    assert len({c["state-dir"] for c in configs}) == 5
    assert (run_dir / "keys" / "signing.pub").is_file()

    frames = [pd.read_parquet(c["data-path"]) for c in configs]
    frames += [pd.read_parquet(world.run_config[k]) for k in ("public-data", "test-data")]
    assert sum(len(f) for f in frames) == 10_000  # paper-synthetic, every row used once
    rows = pd.concat(frames).round(9)
    assert not rows.duplicated().any()  # disjoint public / audit / site / test rows
    spec = json.loads(configs[0]["table-spec"])
    assert spec["label"] == "y" and spec["sensitive"] == ["s"]
    assert world.run_config["num-sites"] == 4 and world.run_config["signing-key"]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (SimulateOptions(sites=0), "--sites"),
        (SimulateOptions(mode="pooled"), "--mode"),
        (SimulateOptions(data="x.csv"), "--label"),
        (SimulateOptions(bundle="b"), "--trusted-key"),
        (SimulateOptions(sites=2, kill_sites=[2]), "kill_sites"),
    ],
)
def test_options_are_checked_before_anything_runs(options: SimulateOptions, needle: str,
                                                  tmp_path: Path) -> None:
    options.out = str(tmp_path / "run")
    with pytest.raises(ConfigError, match=needle):
        run_simulate(options)
    assert not (tmp_path / "run").exists()


def test_simulated_client_app_gives_each_partition_its_node_config(tmp_path: Path) -> None:
    """Without Ray: the wrapper turns partition-id into the deployment node_config."""
    from flwr.app import Context, Message, RecordDict

    from client import protocol as p
    from simulations.simulate import SimulatedClientApp
    from tests.server.fakes import set_task_identity

    set_task_identity()
    app = SimulatedClientApp([
        {"role": "hospital", "site-name": "h0", "data-path": "x", "table-spec": "{}",
         "trusted-key": "k", "state-dir": str(tmp_path)},
        {"role": "audit", "site-name": "aud", "data-path": "x", "table-spec": "{}",
         "trusted-key": "k", "state-dir": str(tmp_path)},
    ], faults={0: "raise"})
    message = Message(RecordDict(), 5, p.DISCOVER)
    message.metadata.__dict__["_message_id"] = "m"
    context = Context(run_id=1, node_id=5, node_config={"partition-id": 1, "num-partitions": 2},
                      state=RecordDict(), run_config={})
    reply = app(message, context)
    assert p.ERROR in reply.content.config_records  # "{}" is not a valid table spec …
    assert reply.content.config_records[p.ERROR]["site-name"] == "aud"  # … of the auditor
    encode = Message(RecordDict(), 5, p.ENCODE)
    encode.metadata.__dict__["_message_id"] = "m2"
    context.node_config["partition-id"] = 0
    with pytest.raises(RuntimeError, match="simulated crash"):
        app(encode, context)


def test_a_user_table_becomes_the_world(tmp_path: Path) -> None:
    """--data TABLE --label --sensitive: the same world, built from the user's own file."""
    from tests.server.fakes import synthetic_table

    frame, _ = synthetic_table(n=600)
    frame["ward"] = ["north", "south", "east"] * 200
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    options = SimulateOptions(data=str(path), label="outcome", sensitive=["secret_diagnosis"],
                              categorical=["ward"], sites=2, partition="column:ward")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build_world(options, run_dir, tmp_path / "world")
    spec = json.loads(world.run_config["table-spec"])
    assert spec["categorical"] == ["ward"] and spec["label"] == "outcome"
    assert world.run_config["dataset"] == str(path)
    sites = [pd.read_parquet(c["data-path"]) for c in world.node_configs[:2]]
    assert sum(len(s) for s in sites) == len(world.plan.sites[0]) + len(world.plan.sites[1])
    assert all(len(s) for s in sites)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("shaper", ["dpfe", "gen-filter", "clustmix"])
def test_peer_shapers_run_inside_simulate(tmp_path: Path, shaper: str) -> None:
    """Issue 5: each peer method is fitted, signed, verified and encoded by the real apps."""
    summary = run_simulate(SimulateOptions(
        sites=2, out=str(tmp_path / "run"), shaper=shaper, max_private_auc=1.0,
        attackers=["logistic-regression", "knn"], mi_steps=50, federated_audit=False,
    ))
    assert summary["status"] == "completed"
    assert all(s["status"] == "ok" for s in summary["sites"]), summary["sites"]
    hospitals = [s for s in summary["sites"] if s["role"] == "hospital"]
    assert summary["release"]["rows"] == sum(s["rows"] for s in hospitals)
    manifest = json.loads((Path(summary["run_dir"]) / "bundle" / "manifest.json").read_text())
    assert manifest["shaper"]["name"] == shaper
    assert 0.5 <= summary["downstream"]["auc"] <= 1.0
