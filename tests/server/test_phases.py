"""Coordinator phases, driven with hand-made reply messages (no Ray, no network)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from server import phases as ph
from server import protocol as p
from server.config import RunConfig
from server.exchange import Reply
from server.release import Contribution
from shared import downstream as ds
from tests.server.fakes import FakeGrid, flower_error, reply_with, silent

FP = "f" * 64


def _site(nid: int = 1, name: str = "h1", role: str = p.ROLE_HOSPITAL) -> ph.Site:
    return ph.Site(node_id=nid, name=name, role=role)


def _contribution(rows: int = 5, k: int = 3, fp: str = FP, **overrides: object) -> RecordDict:
    arrays = {p.Z: np.zeros((rows, k), np.float32), p.LABEL: np.zeros(rows, np.int64)}
    arrays.update(overrides)  # type: ignore[arg-type]
    return RecordDict({
        p.CONTRIBUTION: p.arrays_record(arrays),
        p.COUNTS: MetricRecord({"rows": rows, "chunks": 1}),
        p.INFO: ConfigRecord({"fingerprint": fp, "site-name": "h1"}),
    })


# ------------------------------------------------------------------------------ discovery
def test_discovery_names_and_roles() -> None:
    grid = FakeGrid({
        11: reply_with(RecordDict({p.NODE: ConfigRecord({"role": "hospital",
                                                         "site-name": "st-mary"})})),
        12: reply_with(RecordDict({p.NODE: ConfigRecord({"role": "audit",
                                                         "site-name": "auditor"})})),
        13: reply_with(RecordDict({p.ERROR: ConfigRecord({
            "type": "ConfigError", "message": "node_config 'data-path' is missing",
            "status": p.REFUSED, "site-name": "broken"})})),
        14: silent(),
        15: reply_with(RecordDict({p.NODE: ConfigRecord({"role": "spy", "site-name": "x"})})),
        16: reply_with(RecordDict({p.NODE: ConfigRecord({"role": "hospital",
                                                         "site-name": "st-mary"})})),
    })
    sites = {s.node_id: s for s in ph.discover_sites(
        grid, expected_nodes=6, wait_timeout=0, timeout=0.2)}
    assert (sites[11].name, sites[11].role, sites[11].status) == ("st-mary", "hospital", "ok")
    assert sites[12].role == "audit"
    assert (sites[13].name, sites[13].status) == ("broken", p.REFUSED)
    assert "data-path" in sites[13].reason and not sites[13].active
    assert (sites[14].name, sites[14].status, sites[14].error_type) == (
        "node-14", p.FAILED, "Timeout")
    assert sites[15].status == p.FAILED and "role" in sites[15].reason
    assert sites[16].name == "st-mary-node16"  # names stay unique (they name release files)
    assert [s.node_id for s in ph.hospitals_of(list(sites.values()))] == [11, 16]
    assert ph.auditor_of(list(sites.values())) is sites[12]


# ------------------------------------------------------------------------------ contributions
def test_valid_contribution_is_accepted() -> None:
    site = _site()
    got = ph.read_contribution(site, Reply(1, p.OK, _contribution(rows=5)), fingerprint=FP,
                               k=3, n_classes=2, contribute=True)
    assert isinstance(got, Contribution) and got.rows == 5 and site.rows == 5
    assert site.status == p.OK and site.phases["encode"] == p.OK


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (_contribution(fp="0" * 64), "encoded with bundle"),
        (_contribution(**{p.Z: np.zeros((5, 2), np.float32)}), "expected (5, 3)"),
        (_contribution(**{p.Z: np.full((5, 3), np.nan, np.float32)}), "NaN"),
        (_contribution(**{p.LABEL: np.full(5, 7, np.int64)}), "label codes"),
        (_contribution(**{"secret": np.zeros(5)}), "expected z and label"),
        (RecordDict({p.COUNTS: MetricRecord({"rows": 1})}), "info"),
    ],
)
def test_malformed_contributions_fail_the_site(content: RecordDict, needle: str) -> None:
    site = _site()
    got = ph.read_contribution(site, Reply(1, p.OK, content), fingerprint=FP, k=3,
                               n_classes=2, contribute=True)
    assert got is None
    assert (site.status, site.error_type) == (p.FAILED, "MalformedReply")
    assert needle in site.reason and not site.active


def test_refusal_is_recorded_with_its_reason() -> None:
    site = _site()
    reply = Reply(1, p.REFUSED, None, "UnknownKeyError", "signed by key abc, not trusted")
    assert ph.read_contribution(site, reply, fingerprint=FP, k=3, n_classes=2,
                                contribute=True) is None
    assert site.status == p.REFUSED
    assert site.reason == "encode: UnknownKeyError: signed by key abc, not trusted"
    assert site.to_dict()["status"] == "refused"


def test_distribute_collects_hospitals_and_the_central_audit_in_one_round() -> None:
    audit_reply = RecordDict({
        p.AUDIT_RESULT: ConfigRecord({p.JSON: json.dumps({
            "sensitive": ["s"], "rows": {"total": 10},
            "columns": {"s": {"best_auc": 0.55, "best_attacker": "knn"}},
            "mi": {"public_label": 0.4}})}),
        p.ATTACK_TRAIN: p.arrays_record({p.Z: np.zeros((4, 3), np.float32),
                                         p.S: np.zeros((4, 1), np.int64)}),
        p.ATTACKER_CONFIGS: ConfigRecord({}),
    })
    grid = FakeGrid({1: reply_with(_contribution(rows=4)), 2: flower_error(2, "crash"),
                     9: reply_with(audit_reply)})
    hospitals = [_site(1, "a"), _site(2, "b")]
    auditor = _site(9, "auditor", p.ROLE_AUDIT)
    contributions, central = ph.distribute(
        grid, hospitals, auditor, b"bundle", fingerprint=FP, k=3, n_classes=2,
        contribute=True, config=RunConfig())
    assert list(contributions) == ["a"]
    assert hospitals[1].status == p.FAILED and "crash" in hospitals[1].reason
    assert central is not None and central.sensitive == ["s"]
    assert {m.metadata.message_type for m in grid.sent} == {p.ENCODE, p.AUDIT}
    summary = ph.central_summary(central)
    assert summary is not None and summary["best_auc"] == 0.55 and summary["sensitive"] == "s"


# ------------------------------------------------------------------------------ federated audit
def test_site_audits_are_combined_weighted_by_rows() -> None:
    results = [
        ("a", 100, {"0:knn:auc": 0.6, "0:knn:accuracy": 0.7, "0:knn:balanced_accuracy": 0.6,
                    "0:mlp:auc": 0.5, "0:mlp:accuracy": 0.5, "0:mlp:balanced_accuracy": 0.5,
                    "0:majority": 0.5}),
        ("b", 300, {"0:knn:auc": 0.8, "0:knn:accuracy": 0.9, "0:knn:balanced_accuracy": 0.8,
                    "0:mlp:accuracy": 0.6, "0:mlp:balanced_accuracy": 0.5,  # AUC undefined
                    "0:majority": 0.7}),
    ]
    out = ph.combine_site_audits(["sex"], results)
    assert out is not None
    knn = out["per_attacker"]["knn"]
    assert knn["auc"] == pytest.approx(0.75) and knn["accuracy"] == pytest.approx(0.85)
    assert out["per_attacker"]["mlp"]["auc"] == pytest.approx(0.5)  # only site a had one
    assert out["best_attacker"] == "knn" and out["best_auc"] == pytest.approx(0.75)
    assert out["majority"] == pytest.approx(0.65)
    assert out["rows"] == 400 and out["sites"] == 2 and out["sensitive"] == "sex"
    assert ph.combine_site_audits(["sex"], []) is None


def test_site_audit_refusal_keeps_the_site_in_the_run() -> None:
    site = _site()
    reply = Reply(1, p.REFUSED, None, "RunError", "holds 5 rows, fewer than min-audit-rows")
    assert ph.read_site_audit(site, reply) is None
    assert site.status == p.REFUSED and site.active  # still trains the downstream model


# ------------------------------------------------------------------------------ downstream
def _separable(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    z = (rng.normal(size=(n, 3)) + 2.0 * y[:, None]).astype(np.float32)
    return z, y.astype(np.int64)


def test_downstream_release_learns_the_label() -> None:
    za, ya = _separable(300, 0)
    zb, yb = _separable(300, 1)
    zt, yt = _separable(400, 2)
    contributions = {"a": Contribution("a", za, ya), "b": Contribution("b", zb, yb)}
    out = ph.downstream_release(contributions, ph.EncodedTest(zt, yt),
                                model_spec=ds.ModelSpec(3, 2, (8,)), epochs=20, lr=0.01, seed=0)
    assert out["auc"] > 0.95 and out["train_rows"] == 600 and out["test_rows"] == 400


def test_downstream_federated_averages_and_drops_a_failing_site() -> None:
    """Site 1 returns weights of 2.0 everywhere (100 rows), site 2 of 4.0 (300 rows) in round 1
    and crashes in round 2; the average must be row-weighted and round 2 must go on alone."""
    spec = ds.ModelSpec(3, 2, ())
    calls = {2: 0}

    def site(value: float, rows: int, crash_after: int | None = None):
        def respond(message):
            from flwr.app import Error, Message

            if crash_after is not None:
                calls[2] += 1
                if calls[2] > crash_after:
                    return Message(Error(code=2, reason="died"), reply_to=message)
            weights = {k: np.full(v.shape, value, np.float32) for k, v in
                       p.record_arrays(message.content, p.MODEL).items()}
            return Message(RecordDict({p.MODEL: p.arrays_record(weights),
                                       p.FIT: MetricRecord({"rows": rows, "loss": 0.5})}),
                           reply_to=message)
        return respond

    grid = FakeGrid({1: site(2.0, 100), 2: site(4.0, 300, crash_after=1)})
    hospitals = [_site(1, "a"), _site(2, "b")]
    zt, yt = _separable(50, 3)
    out = ph.downstream_federated(grid, hospitals, b"bundle", ph.EncodedTest(zt, yt),
                                  model_spec=spec, config=RunConfig(fedavg_rounds=2))
    assert [h["sites"] for h in out["history"]] == [2, 1]
    assert out["history"][0]["rows"] == 400
    assert hospitals[1].status == p.FAILED and "fedavg-2" in hospitals[1].reason
    assert hospitals[0].status == p.OK
    assert out["rounds"] == 2 and out["test_rows"] == 50


# ------------------------------------------------------------------------------ gate
def test_gate_passes_below_the_threshold_and_fails_above() -> None:
    central = {"columns": {"s": {"best_auc": 0.62}}}
    federated = {"columns": {"s": {"best_auc": 0.66}}}
    ok = ph.decide_gate(0.70, central, federated)
    assert ok["passed"] and ok["best_auc"] == 0.66 and ok["source"] == "federated:s"
    refused = ph.decide_gate(0.65, central, federated)
    assert not refused["passed"] and "not published" in refused["reason"]


def test_gate_fails_closed_without_any_audit() -> None:
    gate = ph.decide_gate(0.7, None, None)
    assert gate["passed"] is False and "not measured" in gate["reason"]
