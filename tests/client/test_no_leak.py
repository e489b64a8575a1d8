"""No leak by construction: every byte a hospital sends, over a whole run, is inspected.

A full coordinator run (release mode and federated mode, with the central and the federated
audit and an error path) is driven in-process against the real ClientApp; every message a
hospital node sends is captured, and we prove that:

- the only arrays are ``z`` (n, k), ``label`` (n,) and downstream-model weights;
- the label array is L(x) and z is not any raw or standardised feature column;
- nowhere in any reply — array bytes, record names, config strings, metric names, error
  messages — does the sensitive column's name or any of its values appear, nor the bytes of any
  raw feature value (as float64 or float32).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message

from client import protocol as p
from server.config import RunConfig
from server.phases import run_coordinator
from shared.data import InputSchema
from tests.server.fakes import SmallWorld, client_grid, make_world

HOSPITALS = (101, 102)
S_NAME = "secret_diagnosis"
S_UNSEEN = "DIAG-SIGMA-5555"  # only in hospital-1's table: provokes a data error at the site


def _run(world: SmallWorld, mode: str, tmp: Path) -> tuple[dict[str, Any], list[Message]]:
    world.public.to_parquet(tmp / "public.parquet", index=False)
    world.test.to_parquet(tmp / "test.parquet", index=False)
    config = RunConfig(
        public_data=str(tmp / "public.parquet"), test_data=str(tmp / "test.parquet"),
        table_spec=json.dumps(world.spec.to_dict()), signing_key=str(world.private_key),
        num_sites=2, shaper="random-encoder", mode=mode, max_private_auc=1.0, mi_steps=50,
        attackers="logistic-regression,knn", fedavg_rounds=2, local_epochs=1,
        wait_nodes_timeout=0.1,
    )
    sent: list[Message] = []

    def capture(nid: int, message: Message, call: Any) -> Message:
        reply = call()
        if nid in HOSPITALS:
            sent.append(reply)
        return reply

    summary = run_coordinator(client_grid(world.node_configs, wrap=capture), config,
                              run_id=f"leak-{mode}", run_dir=tmp / f"run-{mode}")
    return summary, sent


def _blob(message: Message) -> bytes:
    """Every byte of a reply that could carry information."""
    parts: list[bytes] = []
    if message.has_error():
        parts.append(str(message.error.reason).encode())
    if not message.has_content():
        return b"".join(parts)
    for name, record in message.content.items():
        parts.append(name.encode())
        for key, value in record.items():
            parts.append(str(key).encode())
            if hasattr(value, "data"):  # flwr Array
                parts += [value.data, str(value.dtype).encode(), str(value.shape).encode()]
            elif isinstance(value, bytes):
                parts.append(value)
            elif isinstance(value, list):
                parts += [v if isinstance(v, bytes) else str(v).encode() for v in value]
            else:
                parts.append(str(value).encode())
    return b"\x00".join(parts)


@pytest.fixture
def world(tmp_path: Path) -> SmallWorld:
    world = make_world(tmp_path / "world", n_hospitals=2)
    frame = world.site_frames["hospital-1"]
    frame.loc[:4, S_NAME] = S_UNSEEN
    frame.to_parquet(world.node_configs[102]["data-path"], index=False)
    return world


@pytest.mark.parametrize("mode", ["release", "federated"])
def test_hospitals_send_no_raw_feature_and_no_sensitive_value(
    world: SmallWorld, tmp_path: Path, mode: str
) -> None:
    summary, sent = _run(world, mode, tmp_path)
    assert summary["status"] == "completed"
    types = {m.metadata.message_type for m in sent}
    assert {p.DISCOVER, p.ENCODE, p.SITE_AUDIT} <= types
    if mode == "federated":
        assert p.FEDAVG in types
    # the error path ran: hospital-1 could not encode S for the site audit
    site1 = next(s for s in summary["sites"] if s["name"] == "hospital-1")
    assert "site-audit" in site1["reason"]

    features = [c for c in world.frame.columns if c.startswith("feat_")]
    model_keys: set[str] = set()
    for message in sent:
        if message.has_content() and p.MODEL in message.content.array_records:
            model_keys |= set(message.content.array_records[p.MODEL])
    assert all(k.endswith(("weight", "bias")) for k in model_keys)

    for nid, name in zip(HOSPITALS, ("hospital-0", "hospital-1"), strict=True):
        frame = world.site_frames[name]
        n = len(frame)
        schema = InputSchema.fit(world.public, world.spec)
        standardised = schema.transform(frame)
        raw = frame[features].to_numpy(np.float64)
        mine = [m for m in sent if m.metadata.src_node_id == nid]
        assert mine
        for message in mine:
            if not message.has_content():
                continue
            for record_name, record in message.content.array_records.items():
                assert record_name in {p.CONTRIBUTION, p.MODEL}, record_name
                for key, array in record.items():
                    value = array.numpy()
                    if record_name == p.CONTRIBUTION:
                        assert key in {p.Z, p.LABEL}
                        if key == p.Z:
                            assert value.shape == (n, 3)
                            for j in range(value.shape[1]):  # z is no feature column
                                for column in (*raw.T, *standardised.T):
                                    assert not np.allclose(value[:, j], column, atol=1e-3)
                        else:
                            assert value.shape == (n,)
                            expected = (frame["outcome"] == "yes").to_numpy(np.int64)
                            np.testing.assert_array_equal(value, expected)  # L, not S
                    else:
                        assert n not in value.shape  # weights never have a row per patient
        blob = b"".join(_blob(m) for m in mine)
        for needle in (S_NAME, "DIAG-ALPHA-7731", "DIAG-OMEGA-9902", S_UNSEEN, *features):
            assert needle.encode() not in blob, needle
        for x in raw.ravel():
            assert np.float64(x).tobytes() not in blob
            assert np.float32(x).tobytes() not in blob
