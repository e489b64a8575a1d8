"""Hospital and audit handlers: verify before use, refuse with a reason, reply with little."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict

from client import handlers as h
from client import protocol as p
from client.app import app as client_app
from client.config import NodeConfig
from tests.server.fakes import SmallWorld, make_bundle, make_world

HOSPITAL, AUDITOR = 101, 900


@pytest.fixture
def world(tmp_path: Path) -> SmallWorld:
    return make_world(tmp_path, n_hospitals=2)


@pytest.fixture
def bundle(world: SmallWorld) -> Any:
    return make_bundle(world)


def _encode_content(data: bytes, contribute: bool = True) -> RecordDict:
    from server.phases import encode_request  # the coordinator's own request builder

    return encode_request(data, contribute=contribute, chunk_rows=50)


def _call(node_config: dict[str, Any], content: RecordDict, message_type: str = p.ENCODE
          ) -> RecordDict:
    """Through the real ClientApp, as Flower would call it."""
    message = Message(content, 101, message_type)
    message.metadata.__dict__["_message_id"] = "m1"
    context = Context(run_id=1, node_id=101, node_config=node_config, state=RecordDict(),
                      run_config={})
    reply = client_app(message, context)
    assert reply.metadata.reply_to_message_id == "m1"
    return reply.content


def _error(content: RecordDict) -> dict[str, str]:
    assert p.ERROR in content.config_records, list(content.keys())
    assert len(content) == 1  # an error reply holds nothing else
    return {k: str(v) for k, v in content.config_records[p.ERROR].items()}


def test_discover_says_role_and_name_only(world: SmallWorld) -> None:
    content = _call(world.node_configs[HOSPITAL], RecordDict(), p.DISCOVER)
    assert dict(content.config_records[p.NODE]) == {"role": "hospital",
                                                     "site-name": "hospital-0"}


def test_encode_replies_with_z_label_and_counts(world: SmallWorld, bundle: Any) -> None:
    content = _call(world.node_configs[HOSPITAL], _encode_content(bundle.to_bytes()))
    assert set(content.keys()) == {p.CONTRIBUTION, p.COUNTS, p.INFO}
    arrays = p.record_arrays(content, p.CONTRIBUTION)
    rows = len(world.site_frames["hospital-0"])
    assert set(arrays) == {p.Z, p.LABEL}
    assert arrays[p.Z].shape == (rows, 3) and arrays[p.Z].dtype == np.float32
    assert arrays[p.LABEL].shape == (rows,) and arrays[p.LABEL].dtype == np.int64
    assert content.metric_records[p.COUNTS]["rows"] == rows
    assert content.metric_records[p.COUNTS]["chunks"] == -(-rows // 50)
    assert content.config_records[p.INFO]["fingerprint"] == bundle.fingerprint
    # the label column is L(x), in the bundle's class order
    expected = (world.site_frames["hospital-0"]["outcome"] == "yes").astype(np.int64).to_numpy()
    np.testing.assert_array_equal(arrays[p.LABEL], expected)


def test_counts_only_when_not_contributing(world: SmallWorld, bundle: Any) -> None:
    content = _call(world.node_configs[HOSPITAL], _encode_content(bundle.to_bytes(), False))
    assert set(content.keys()) == {p.COUNTS, p.INFO}


def _flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("where", ["manifest", "signature", "weights"])
def test_tampered_bundle_is_refused(world: SmallWorld, bundle: Any, where: str) -> None:
    data = bundle.to_bytes()
    index = {"manifest": 40, "signature": len(data) - len(bundle.weights_bytes) - 20,
             "weights": len(data) - 5}[where]
    error = _error(_call(world.node_configs[HOSPITAL], _encode_content(_flip(data, index))))
    assert error["status"] == p.REFUSED
    assert error["type"] in {"SignatureError", "BundleFormatError"}
    assert error["site-name"] == "hospital-0" and error["message"]


def test_wrong_trusted_key_is_refused_before_data_or_weights_are_touched(
    world: SmallWorld, bundle: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("touched data or weights before verification")

    monkeypatch.setattr(h, "load_table", must_not_run)
    monkeypatch.setattr(sys.modules["shared.pipeline"], "open_bundle", must_not_run)
    config = dict(world.node_configs[HOSPITAL], **{"trusted-key": str(world.wrong_key)})
    error = _error(_call(config, _encode_content(bundle.to_bytes())))
    assert (error["type"], error["status"]) == ("UnknownKeyError", p.REFUSED)
    assert bundle.key_id in error["message"]
    # a refused bundle never moves the site's trust state
    assert not any(Path(config["state-dir"]).glob("*.json"))


def test_rollback_is_refused(world: SmallWorld) -> None:
    newer, older = make_bundle(world, version=2), make_bundle(world, version=1)
    config = world.node_configs[HOSPITAL]
    assert p.CONTRIBUTION in _call(config, _encode_content(newer.to_bytes()))
    assert p.CONTRIBUTION in _call(config, _encode_content(newer.to_bytes()))  # same: fine
    error = _error(_call(config, _encode_content(older.to_bytes())))
    assert (error["type"], error["status"]) == ("RollbackError", p.REFUSED)


def test_schema_mismatch_is_refused_without_quoting_the_data(
    world: SmallWorld, bundle: Any
) -> None:
    frame = world.site_frames["hospital-0"].drop(columns=["feat_2"])
    path = world.root / "narrow.parquet"
    frame.to_parquet(path, index=False)
    config = dict(world.node_configs[HOSPITAL], **{"data-path": str(path)})
    error = _error(_call(config, _encode_content(bundle.to_bytes())))
    assert error["status"] == p.REFUSED
    assert error["type"] in {"ColumnError", "SchemaMismatchError"}
    assert "withheld" in error["message"]


def test_unseen_category_message_is_withheld(world: SmallWorld, bundle: Any) -> None:
    frame = world.site_frames["hospital-0"].copy()
    frame.loc[0, "outcome"] = "PATIENT-NAME-DOE"
    path = world.root / "odd.parquet"
    frame.to_parquet(path, index=False)
    config = dict(world.node_configs[HOSPITAL], **{"data-path": str(path)})
    error = _error(_call(config, _encode_content(bundle.to_bytes())))
    assert error["status"] == p.REFUSED
    assert "PATIENT-NAME-DOE" not in json.dumps(error)


def test_wrong_role_and_broken_node_config(world: SmallWorld, bundle: Any) -> None:
    error = _error(_call(world.node_configs[AUDITOR], _encode_content(bundle.to_bytes())))
    assert error["type"] == "ConfigError" and "role 'audit'" in error["message"]
    config = dict(world.node_configs[HOSPITAL])
    del config["state-dir"]
    error = _error(_call(config, RecordDict(), p.DISCOVER))
    assert error["type"] == "ConfigError" and "state-dir" in error["message"]
    assert error["site-name"] == "hospital-0"


def test_unexpected_exception_is_a_failure_with_a_withheld_message(
    world: SmallWorld, bundle: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise KeyError("secret value 42")

    monkeypatch.setattr(h, "encode_table", boom)
    error = _error(_call(world.node_configs[HOSPITAL], _encode_content(bundle.to_bytes())))
    assert (error["type"], error["status"]) == ("KeyError", p.FAILED)
    assert "secret value" not in error["message"]


# ------------------------------------------------------------------------------ audit
def _audit(world: SmallWorld, bundle: Any) -> RecordDict:
    from server.phases import audit_request

    node = NodeConfig.from_node_config(world.node_configs[AUDITOR])
    request = audit_request(bundle.to_bytes(), seed=0, attackers=["logistic-regression", "knn"],
                            mi_steps=50, holdout=0.3, chunk_rows=100)
    return h.handle_audit(request, node)


def test_audit_reports_suite_mi_and_ships_public_attack_set(world: SmallWorld, bundle: Any
                                                            ) -> None:
    content = _audit(world, bundle)
    metrics = json.loads(content.config_records[p.AUDIT_RESULT][p.JSON])
    assert metrics["sensitive"] == ["secret_diagnosis"]
    suite = metrics["columns"]["secret_diagnosis"]
    assert set(suite["per_attacker"]) == {"logistic-regression", "knn"}
    assert 0.0 <= suite["best_auc"] <= 1.0 and "majority" in suite
    assert set(metrics["mi"]) >= {"public_label", "sensitive"}
    rows = metrics["rows"]
    train = p.record_arrays(content, p.ATTACK_TRAIN)
    assert train[p.Z].shape == (rows["train"], 3) and train[p.S].shape == (rows["train"], 1)
    configs = content.config_records[p.ATTACKER_CONFIGS]
    assert set(configs) == {"0:logistic-regression"}  # knn is refitted at the sites


def test_site_audit_returns_aggregates_only(world: SmallWorld, bundle: Any) -> None:
    from server.exchange import Reply
    from server.phases import Site, read_central_audit, site_audit_request

    auditor = Site(AUDITOR, "auditor", "audit")
    central = read_central_audit(auditor, Reply(AUDITOR, "ok", _audit(world, bundle)))
    assert central is not None
    request = site_audit_request(bundle.to_bytes(), central, seed=0,
                                 attackers=["logistic-regression", "knn"], chunk_rows=100)
    node = NodeConfig.from_node_config(world.node_configs[HOSPITAL])
    content = h.handle_site_audit(request, node)
    assert list(content.keys()) == [p.SITE_AUDIT_RESULT]
    metrics = dict(content.metric_records[p.SITE_AUDIT_RESULT])
    assert metrics["rows"] == len(world.site_frames["hospital-0"])
    assert {"0:logistic-regression:auc", "0:knn:auc", "0:majority"} <= set(metrics)
    assert all(isinstance(v, float) for v in metrics.values())

    strict = NodeConfig.from_node_config(dict(world.node_configs[HOSPITAL],
                                              **{"min-audit-rows": 10_000}))
    with pytest.raises(Exception, match="min-audit-rows"):
        h.handle_site_audit(request, strict)


def test_fedavg_round_returns_weights_of_the_same_layout(world: SmallWorld, bundle: Any
                                                         ) -> None:
    from server.phases import fedavg_request
    from shared import downstream as ds

    spec = ds.ModelSpec(3, 2, (8,))
    weights = ds.get_weights(ds.build_model(spec))
    request = fedavg_request(bundle.to_bytes(), weights, model_spec=spec, epochs=2, lr=0.01,
                             seed=1, chunk_rows=100)
    content = h.handle_fedavg(request, NodeConfig.from_node_config(world.node_configs[HOSPITAL]))
    got = p.record_arrays(content, p.MODEL)
    assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in weights.items()}
    assert content.metric_records[p.FIT]["rows"] == len(world.site_frames["hospital-0"])
    assert any(not np.allclose(got[k], weights[k]) for k in weights)  # it trained
