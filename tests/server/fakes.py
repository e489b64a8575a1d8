"""Test doubles for the Flower side: a grid that answers from Python callables, worlds of sites.

``FakeGrid`` implements Flower's ``Grid`` with replies made by plain functions, so a phase can be
driven with hand-made replies (including none at all: a timeout) and without Ray. ``client_grid``
routes every message to the real ``client.app:app`` with a per-node Context, which runs a whole
coordinator in-process in a second or two.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

Responder = Callable[[Message], Message | None]


def set_task_identity() -> None:
    """Flower's Message() reads the process's task identity (set by the runtime in a real run)."""
    TaskIdentity.run_id = 1
    TaskIdentity.node_id = 1
    TaskIdentity.task_id = 1


class FakeGrid(Grid):
    """A Grid whose nodes are Python callables: ``responders[node_id](message) -> reply | None``.

    ``None`` means the node never answers (the exchange must time it out). Every message pushed
    is kept in ``sent`` and every reply in ``replies`` so tests can inspect the traffic.
    """

    def __init__(self, responders: dict[int, Responder]) -> None:
        self.responders = responders
        self._ids = itertools.count(1)
        self._pending: dict[str, Message] = {}
        self.sent: list[Message] = []
        self.replies: list[Message] = []

    # Grid API ----------------------------------------------------------------------------------
    def set_run(self, run: Any) -> None:  # pragma: no cover - not used by the phases
        pass

    @property
    def run(self) -> Any:  # pragma: no cover
        return None

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: ANN001
        return Message(content, dst_node_id, message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.responders)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message_id = f"m{next(self._ids)}"
            message.metadata.__dict__["_message_id"] = message_id
            self.sent.append(message)
            reply = self.responders[message.metadata.dst_node_id](message)
            if reply is not None:
                self._pending[message_id] = reply
                self.replies.append(reply)
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        out = [self._pending.pop(i) for i in list(message_ids) if i in self._pending]
        return out

    def send_and_receive(self, messages, *, timeout=None):  # noqa: ANN001
        ids = list(self.push_messages(messages))
        return self.pull_messages(ids)


def reply_with(content: RecordDict) -> Responder:
    return lambda message: Message(content, reply_to=message)


def flower_error(code: int, reason: str) -> Responder:
    return lambda message: Message(Error(code=code, reason=reason), reply_to=message)


def silent() -> Responder:
    return lambda message: None


def client_grid(node_configs: dict[int, dict[str, Any]],
                wrap: Callable[[int, Message, Callable[[], Message]], Message | None] | None = None
                ) -> FakeGrid:
    """A FakeGrid whose nodes run the real ClientApp with the given node_configs.

    ``wrap(node_id, message, call)`` may intercept a call (e.g. to drop a reply); by default the
    app is simply called.
    """
    from client.app import app as client_app

    contexts = {
        nid: Context(run_id=1, node_id=nid, node_config=dict(cfg), state=RecordDict(),
                     run_config={})
        for nid, cfg in node_configs.items()
    }

    def responder(nid: int) -> Responder:
        def respond(message: Message) -> Message | None:
            call = lambda: client_app(message, contexts[nid])  # noqa: E731
            return wrap(nid, message, call) if wrap else call()
        return respond

    return FakeGrid({nid: responder(nid) for nid in node_configs})


# ---------------------------------------------------------------------------------------------
# A small world on disk: tables, keys, node configs
# ---------------------------------------------------------------------------------------------
@dataclass
class SmallWorld:
    root: Path
    spec: Any
    frame: pd.DataFrame
    public: pd.DataFrame
    test: pd.DataFrame
    private_key: Path
    public_key: Path
    wrong_key: Path
    node_configs: dict[int, dict[str, Any]] = field(default_factory=dict)
    site_frames: dict[str, pd.DataFrame] = field(default_factory=dict)


def synthetic_table(n: int = 1200, seed: int = 0) -> tuple[pd.DataFrame, Any]:
    """A table where L and S are both readable from the features, with tell-tale S values.

    S is a string column named ``secret_diagnosis`` whose values (``DIAG-ALPHA-7731`` /
    ``DIAG-OMEGA-9902``) are unlikely to appear anywhere by accident, so a byte search for them in
    the traffic is meaningful; the raw features have distinctive non-round values.
    """
    from shared.data import TableSpec

    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 4)) * 1.7 + 13.123457
    x[:, 0] += 2.5 * y
    x[:, 1] += 2.5 * s
    frame = pd.DataFrame({f"feat_{j}": x[:, j] for j in range(4)})
    frame["outcome"] = np.where(y == 1, "yes", "no")
    frame["secret_diagnosis"] = np.where(s == 1, "DIAG-ALPHA-7731", "DIAG-OMEGA-9902")
    spec = TableSpec(label="outcome", sensitive=["secret_diagnosis"])
    return frame, spec


def make_world(root: Path, *, n_hospitals: int = 2, n: int = 1200, seed: int = 0) -> SmallWorld:
    """Public / test / audit / hospital tables, a signing key pair and a wrong key pair, and a
    node_config per node (node ids 101.. hospitals, 900 auditor)."""
    from shared.bundle import generate_keypair

    frame, spec = synthetic_table(n, seed)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(frame))
    parts = np.array_split(order, 3 + n_hospitals)
    tables = root / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    pair = generate_keypair(root / "keys")
    wrong = generate_keypair(root / "wrong")
    world = SmallWorld(
        root=root, spec=spec, frame=frame,
        public=frame.iloc[parts[0]].reset_index(drop=True),
        test=frame.iloc[parts[1]].reset_index(drop=True),
        private_key=pair.private, public_key=pair.public, wrong_key=wrong.public,
    )
    names = ["auditor"] + [f"hospital-{i}" for i in range(n_hospitals)]
    node_ids = [900] + [101 + i for i in range(n_hospitals)]
    for name, nid, idx in zip(names, node_ids, parts[2:], strict=True):
        site_frame = frame.iloc[idx].reset_index(drop=True)
        path = tables / f"{name}.parquet"
        site_frame.to_parquet(path, index=False)
        world.site_frames[name] = site_frame
        world.node_configs[nid] = {
            "role": "audit" if name == "auditor" else "hospital",
            "site-name": name,
            "data-path": str(path),
            "table-spec": json.dumps(spec.to_dict()),
            "trusted-key": str(pair.public),
            "state-dir": str(root / "state" / name),
        }
    return world


def make_bundle(world: SmallWorld, *, version: int = 1, seed: int = 0) -> Any:
    """A signed bundle for the world's public data (a fast, untrained shaper: these tests are
    about the plumbing, not the encoder's quality)."""
    from shared.bundle import load_private_key
    from shared.pipeline import train_bundle

    key = load_private_key(world.private_key)
    bundle = train_bundle(world.public, world.spec, shaper="random-encoder", seed=seed,
                          private_key=key, encoder_version=version)
    bundle.to_bytes(key)  # signed
    return bundle
