"""The coordinator's run, phase by phase, as plain functions over a ``grid`` and typed arguments.

Each phase builds its requests, sends them with :func:`server.exchange.exchange` (which accounts
for every node that refused, raised, timed out or vanished) and reads the replies into typed
results. Nothing here reads ``context.run_config`` (``server/app.py`` does that once), so a test
drives a phase with a fake grid that answers with hand-made reply messages.

Order of one run (DESIGN.md, "Roles and one run"):

1. ``discover_sites``   who is there, which role, which site name;
2. ``prepare_bundle``   train T on public data and sign it, or verify a given bundle;
3. ``distribute``       bundle → hospitals (encode, reply z + L + counts) and, at the same time,
                        bundle → auditor (central audit: attacker suite on T(P_audit) → S);
4. ``federated_audit``  the auditor's attackers → each hospital, scored on its own (T(x), S(x));
                        aggregates only come back, combined weighted by rows;
5. ``downstream_*``     the task model: on the pooled release, or FedAvg at the sites;
6. ``decide_gate``      refuse publication when the strongest attacker's AUC exceeds the limit;
7. ``publish_release`` + ``summary.json``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from flwr.app import ConfigRecord, RecordDict
from flwr.serverapp import Grid

from server import protocol as p
from server.config import RunConfig
from server.exchange import Reply, Request, exchange, exchange_requests, wait_for_nodes
from server.release import Contribution, json_safe, publish_release, write_summary
from shared import downstream as ds
from shared.bundle import BUNDLE_FILES, EncoderBundle, load_private_key
from shared.data import InputSchema, TableSpec, load_dataset, load_table, read_table
from shared.errors import ConfigError, InfoShapeError, RunError

log = logging.getLogger(__name__)

BUNDLE_DIR = "bundle"


# ---------------------------------------------------------------------------------------------
# Sites
# ---------------------------------------------------------------------------------------------
@dataclass
class Site:
    """One node as the summary reports it.

    ``status`` is the first non-ok outcome of any phase (``ok`` | ``refused`` | ``failed``) and
    ``reason`` says which phase and why; ``phases`` keeps every phase's outcome. ``active`` turns
    false once the site must not get further work (it refused the bundle, or it failed).
    """

    node_id: int
    name: str
    role: str
    status: str = p.OK
    reason: str = ""
    error_type: str = ""
    rows: int = 0
    active: bool = True
    phases: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == p.OK

    def record(self, phase: str, reply: Reply, *, keep_active: bool = False) -> None:
        """Note a phase's outcome; a non-ok reply deactivates the site unless ``keep_active``."""
        if reply.ok:
            self.phases[phase] = p.OK
            return
        self.phases[phase] = f"{reply.status}: {reply.error_type}: {reply.reason}"
        if self.status == p.OK:
            self.status = reply.status
            self.error_type = reply.error_type
            self.reason = f"{phase}: {reply.error_type}: {reply.reason}"
        if not keep_active or reply.status == p.FAILED:
            self.active = False

    def fail(self, phase: str, error_type: str, reason: str) -> None:
        """Record a failure found by the coordinator itself (e.g. a malformed reply)."""
        self.record(phase, Reply(self.node_id, p.FAILED, error_type=error_type, reason=reason))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "node_id": self.node_id,
            "rows": self.rows,
            "status": self.status,
            "reason": self.reason,
            "error_type": self.error_type,
            "phases": dict(self.phases),
        }


def hospitals_of(sites: Sequence[Site], *, active_only: bool = True) -> list[Site]:
    return [s for s in sites if s.role == p.ROLE_HOSPITAL and (s.active or not active_only)]


def auditor_of(sites: Sequence[Site]) -> Site | None:
    """The first active audit node (by name); extra auditors are noted and left idle."""
    auditors = sorted((s for s in sites if s.role == p.ROLE_AUDIT and s.active),
                      key=lambda s: s.name)
    for extra in auditors[1:]:
        extra.phases["audit"] = "idle: another audit node was chosen"
    return auditors[0] if auditors else None


# ---------------------------------------------------------------------------------------------
# 1. Discover
# ---------------------------------------------------------------------------------------------
def discover_sites(
    grid: Grid, *, expected_nodes: int, wait_timeout: float, timeout: float
) -> list[Site]:
    """Ask every connected node for its role and site name (from its own node_config)."""
    node_ids = wait_for_nodes(grid, expected_nodes, wait_timeout)
    if not node_ids:
        raise RunError(
            f"no node connected within {wait_timeout:g} s; start the SuperNodes (or check the "
            "SuperLink address) and retry"
        )
    replies = exchange(
        grid, {nid: RecordDict() for nid in node_ids}, p.DISCOVER,
        timeout=timeout, group_id="discover",
    )
    sites = [site_from_discovery(nid, replies[nid]) for nid in node_ids]
    seen: set[str] = set()
    for site in sites:  # site names key the release files: make them unique
        if site.name in seen:
            site.name = f"{site.name}-node{site.node_id}"
        seen.add(site.name)
    return sites


def site_from_discovery(node_id: int, reply: Reply) -> Site:
    """A :class:`Site` from a discovery reply (a node that could not say who it is fails)."""
    record = None
    if reply.content is not None:
        for name in (p.NODE, p.ERROR):
            if name in reply.content.config_records:
                record = reply.content.config_records[name]
                break
    name = str(record.get("site-name", "")) if record is not None else ""
    role = str(record.get("role", "")) if record is not None else ""
    site = Site(node_id=node_id, name=name or f"node-{node_id}", role=role or "unknown")
    if reply.ok and role not in p.ROLES:
        site.fail("discover", "ConfigError",
                  f"node reports role {role!r}; expected one of {', '.join(p.ROLES)}")
    else:
        site.record("discover", reply)
    return site


# ---------------------------------------------------------------------------------------------
# 2. Train or load the encoder
# ---------------------------------------------------------------------------------------------
@dataclass
class CoordinatorData:
    """What the coordinator itself holds: public rows P (to train T) and held-out test rows."""

    spec: TableSpec | None
    public: pd.DataFrame | None
    test: pd.DataFrame | None
    source: str


def parse_table_spec(text: str) -> TableSpec:
    """A TableSpec from JSON text, or from a JSON file when ``text`` is a path."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            return TableSpec.from_dict(json.loads(stripped))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"table-spec is not valid JSON ({exc})") from None
    return TableSpec.from_json_file(stripped)


def load_coordinator_data(config: RunConfig) -> CoordinatorData:
    """Public and test rows from files (``public-data``/``test-data`` + ``table-spec``) or, when
    neither is given, the coordinator's share of the built-in ``dataset`` (see dataplan)."""
    if config.public_data or config.test_data:
        spec = parse_table_spec(config.table_spec) if config.table_spec else None
        if config.public_data and spec is None:
            raise ConfigError("public-data needs table-spec (label and sensitive columns)")
        public = load_table(config.public_data, spec) if config.public_data else None
        # The test rows need features and the label only; the encoder checks its own schema.
        test = read_table(config.test_data) if config.test_data else None
        return CoordinatorData(spec, public, test, "files")
    if config.bundle and not config.dataset:
        return CoordinatorData(None, None, None, "none")
    from server.dataplan import plan_splits

    dataset = load_dataset(config.dataset, seed=config.seed)
    plan = plan_splits(
        dataset.frame, dataset.spec, n_sites=config.num_sites,
        partition=config.partition, seed=config.seed,
    )
    return CoordinatorData(dataset.spec, plan.public, plan.test, f"dataset:{config.dataset}")


def prepare_bundle(config: RunConfig, data: CoordinatorData, run_dir: Path) -> EncoderBundle:
    """Verify a given bundle, or train T on the public rows and sign it; copy it to ``bundle/``.

    The coordinator verifies a given bundle with the same checks a site applies: it will not
    distribute what it could not itself accept.
    """
    target = run_dir / BUNDLE_DIR
    if config.bundle:
        bundle = EncoderBundle.load(config.bundle, config.trusted_key)
        source = Path(config.bundle)
        if source.is_dir() and source.resolve() != target.resolve():
            from shared.atomic import atomic_dir

            with atomic_dir(target) as tmp:
                for name in BUNDLE_FILES:
                    shutil.copy2(source / name, tmp / name)
        elif source.is_file():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / source.name)
        return bundle
    if data.public is None or data.spec is None:
        raise ConfigError(
            "no encoder to distribute: give bundle (+ trusted-key), or public-data + table-spec, "
            "or a built-in dataset"
        )
    if not config.signing_key:
        raise ConfigError(
            "signing-key is required to sign a newly trained encoder (create one with "
            "`infoshape keygen --out DIR`)"
        )
    from shared.pipeline import train_bundle

    private_key = load_private_key(config.signing_key)
    bundle = train_bundle(
        data.public, data.spec,
        shaper=config.shaper, lam=config.lam, schedule=config.schedule, seed=config.seed,
        private_key=private_key, encoder_version=config.encoder_version,
        **config.shaper_param_dict(),
    )
    bundle.save(target, private_key)
    return bundle


def bundle_summary(bundle: EncoderBundle) -> dict[str, Any]:
    shaper = bundle.shaper
    return {
        "fingerprint": bundle.fingerprint,
        "key_id": bundle.key_id,
        "version": bundle.version,
        "shaper": shaper.get("name") if isinstance(shaper, dict) else shaper,
        "lambda": bundle.lam,
        "dir": BUNDLE_DIR,
    }


# ---------------------------------------------------------------------------------------------
# 3. Distribute: hospitals encode, the auditor audits (one exchange, per-request timeouts)
# ---------------------------------------------------------------------------------------------
@dataclass
class CentralAudit:
    """The auditor's reply: metrics plus what the federated audit needs (public rows only)."""

    metrics: dict[str, Any]
    sensitive: list[str]
    attack_z: np.ndarray
    attack_s: np.ndarray
    attacker_configs: dict[str, str]
    attacker_arrays: dict[str, np.ndarray]


def encode_request(bundle_bytes: bytes, *, contribute: bool, chunk_rows: int) -> RecordDict:
    """The hospital task: verify, encode, reply with (z, L) (``contribute``) or counts only."""
    return RecordDict({
        p.BUNDLE: p.bundle_record(bundle_bytes),
        p.TASK: ConfigRecord({"contribute": contribute, "chunk-rows": chunk_rows}),
    })


def audit_request(
    bundle_bytes: bytes, *, seed: int, attackers: list[str] | None, mi_steps: int,
    holdout: float, chunk_rows: int,
) -> RecordDict:
    return RecordDict({
        p.BUNDLE: p.bundle_record(bundle_bytes),
        p.TASK: ConfigRecord({
            "seed": seed,
            "attackers": ",".join(attackers or []),
            "mi-steps": mi_steps,
            "holdout": holdout,
            "chunk-rows": chunk_rows,
        }),
    })


def read_contribution(
    site: Site, reply: Reply, *, fingerprint: str, k: int, n_classes: int, contribute: bool
) -> Contribution | None:
    """Check one hospital's encode reply; a malformed one fails the site (nothing is trusted)."""
    site.record("encode", reply)
    if not reply.ok:
        return None
    content = reply.content
    assert content is not None
    try:
        counts = content.metric_records[p.COUNTS]
        rows = int(counts["rows"])
        info = content.config_records[p.INFO]
        if str(info.get("fingerprint")) != fingerprint:
            raise ValueError(
                f"encoded with bundle {str(info.get('fingerprint'))[:12]}…, "
                f"not {fingerprint[:12]}…"
            )
        if not contribute:
            site.rows = rows
            return None
        arrays = p.record_arrays(content, p.CONTRIBUTION)
        if set(arrays) != {p.Z, p.LABEL}:
            raise ValueError(f"contribution holds arrays {sorted(arrays)}; expected z and label")
        z = np.asarray(arrays[p.Z])
        label = np.asarray(arrays[p.LABEL])
        if z.ndim != 2 or z.shape != (rows, k) or z.dtype != np.float32:
            raise ValueError(f"z has shape {z.shape} {z.dtype}; expected ({rows}, {k}) float32")
        if label.shape != (rows,) or label.dtype != np.int64:
            raise ValueError(f"label has shape {label.shape} {label.dtype}; expected ({rows},)")
        if not np.all(np.isfinite(z)):
            raise ValueError("z holds NaN or infinite values")
        if rows and (label.min() < 0 or label.max() >= n_classes):
            raise ValueError(f"label codes outside 0..{n_classes - 1}")
    except (KeyError, ValueError, TypeError) as exc:
        site.fail("encode", "MalformedReply", str(exc))
        return None
    site.rows = rows
    return Contribution(site=site.name, z=z, label=label)


def read_central_audit(site: Site, reply: Reply) -> CentralAudit | None:
    """Parse the auditor's reply (metrics JSON, attack-training set, exported attackers)."""
    site.record("audit", reply)
    if not reply.ok:
        return None
    content = reply.content
    assert content is not None
    try:
        metrics = json.loads(str(content.config_records[p.AUDIT_RESULT][p.JSON]))
        train = p.record_arrays(content, p.ATTACK_TRAIN)
        configs = {
            k: str(v) for k, v in content.config_records.get(p.ATTACKER_CONFIGS, {}).items()
        }
        arrays = (
            p.record_arrays(content, p.ATTACKER_ARRAYS)
            if p.ATTACKER_ARRAYS in content.array_records else {}
        )
        sensitive = [str(s) for s in metrics["sensitive"]]
        attack_z = np.asarray(train[p.Z])
        attack_s = np.asarray(train[p.S])
        if attack_s.ndim != 2 or attack_s.shape != (attack_z.shape[0], len(sensitive)):
            raise ValueError(f"attack-train s has shape {attack_s.shape}")
        site.rows = int(metrics.get("rows", {}).get("total", 0))
    except (KeyError, ValueError, TypeError) as exc:
        site.fail("audit", "MalformedReply", str(exc))
        return None
    return CentralAudit(metrics, sensitive, attack_z, attack_s, configs, arrays)


def distribute(
    grid: Grid,
    hospitals: Sequence[Site],
    auditor: Site | None,
    bundle_bytes: bytes,
    *,
    fingerprint: str,
    k: int,
    n_classes: int,
    contribute: bool,
    config: RunConfig,
) -> tuple[dict[str, Contribution], CentralAudit | None]:
    """Send the bundle to every hospital (encode) and to the auditor (central audit) at once."""
    requests: dict[int, Request] = {
        s.node_id: Request(
            p.ENCODE,
            encode_request(bundle_bytes, contribute=contribute, chunk_rows=config.chunk_rows),
            config.encode_timeout,
        )
        for s in hospitals
    }
    if auditor is not None:
        requests[auditor.node_id] = Request(
            p.AUDIT,
            audit_request(
                bundle_bytes, seed=config.seed, attackers=config.attacker_names(),
                mi_steps=config.mi_steps, holdout=config.audit_holdout,
                chunk_rows=config.chunk_rows,
            ),
            config.audit_timeout,
        )
    replies = exchange_requests(grid, requests, group_id="distribute")
    contributions: dict[str, Contribution] = {}
    for site in hospitals:
        got = read_contribution(
            site, replies[site.node_id], fingerprint=fingerprint, k=k,
            n_classes=n_classes, contribute=contribute,
        )
        if got is not None:
            contributions[site.name] = got
    central = read_central_audit(auditor, replies[auditor.node_id]) if auditor else None
    return contributions, central


def central_summary(central: CentralAudit | None) -> dict[str, Any] | None:
    """``audit.central``: the headline of the most exposed sensitive column, plus every column."""
    if central is None:
        return None
    columns: dict[str, Any] = central.metrics.get("columns", {})
    out = _headline(columns)
    out.update({
        "columns": columns,
        "utility": central.metrics.get("utility"),
        "rows": central.metrics.get("rows"),
    })
    return out


def _headline(columns: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The suite figures of the sensitive column with the highest best AUC."""
    def key(item: tuple[str, Mapping[str, Any]]) -> float:
        auc = item[1].get("best_auc")
        return -math.inf if auc is None or (isinstance(auc, float) and math.isnan(auc)) else auc

    if not columns:
        return {"best_auc": None}
    name, suite = max(columns.items(), key=key)
    fields_ = ("best_attacker", "best_auc", "best_accuracy", "best_balanced_accuracy",
               "majority", "per_attacker", "min_log_rank_privacy")
    return {"sensitive": name, **{f: suite.get(f) for f in fields_}}


# ---------------------------------------------------------------------------------------------
# 4. Federated audit
# ---------------------------------------------------------------------------------------------
def site_audit_request(
    bundle_bytes: bytes, central: CentralAudit, *, seed: int, attackers: list[str] | None,
    chunk_rows: int,
) -> RecordDict:
    """Bundle + the auditor's attack-training set (public rows) + its exportable attackers."""
    content = RecordDict({
        p.BUNDLE: p.bundle_record(bundle_bytes),
        p.TASK: ConfigRecord({
            "seed": seed,
            "attackers": ",".join(attackers or []),
            "sensitive": ",".join(central.sensitive),
            "chunk-rows": chunk_rows,
        }),
        p.ATTACK_TRAIN: p.arrays_record({p.Z: central.attack_z, p.S: central.attack_s}),
        p.ATTACKER_CONFIGS: ConfigRecord(dict(central.attacker_configs)),
    })
    if central.attacker_arrays:
        content[p.ATTACKER_ARRAYS] = p.arrays_record(central.attacker_arrays)
    return content


def read_site_audit(site: Site, reply: Reply) -> tuple[int, dict[str, float]] | None:
    """(rows, flat metrics) of one hospital's audit; a refusal keeps the site in the run."""
    site.record("site-audit", reply, keep_active=True)
    if not reply.ok:
        return None
    assert reply.content is not None
    try:
        record = reply.content.metric_records[p.SITE_AUDIT_RESULT]
        metrics = {str(k): float(v) for k, v in record.items()}  # type: ignore[arg-type]
        rows = int(metrics.pop("rows"))
    except (KeyError, ValueError, TypeError) as exc:
        site.fail("site-audit", "MalformedReply", str(exc))
        return None
    return rows, metrics


def combine_site_audits(
    sensitive: Sequence[str], results: Sequence[tuple[str, int, Mapping[str, float]]]
) -> dict[str, Any] | None:
    """Row-weighted means of each attacker's per-site scores; headline = strongest attacker.

    ``results``: (site, rows, metrics) with metric keys ``"<col>:<attacker>:<metric>"`` and
    ``"<col>:majority"``. A metric a site could not compute (e.g. AUC with one class present)
    is absent from its record and simply not averaged for that site.
    """
    if not results:
        return None
    columns: dict[str, Any] = {}
    for j, column in enumerate(sensitive):
        per_attacker: dict[str, dict[str, Any]] = {}
        names = sorted({k.split(":")[1] for _, _, m in results for k in m
                        if k.startswith(f"{j}:") and k.count(":") == 2})
        for name in names:
            entry: dict[str, Any] = {}
            for metric in ("auc", "accuracy", "balanced_accuracy", "log_rank_privacy"):
                entry[metric] = _weighted(results, f"{j}:{name}:{metric}")
            entry["sites"] = sum(1 for _, _, m in results if f"{j}:{name}:accuracy" in m)
            per_attacker[name] = entry
        if not per_attacker:
            continue
        aucs = {n: e["auc"] for n, e in per_attacker.items() if e["auc"] is not None}
        best = max(aucs, key=aucs.__getitem__) if aucs else next(iter(per_attacker))
        lrps = [e["log_rank_privacy"] for e in per_attacker.values()
                if e["log_rank_privacy"] is not None]
        columns[column] = {
            "best_attacker": best,
            "best_auc": max(aucs.values()) if aucs else None,
            "best_accuracy": _max(e["accuracy"] for e in per_attacker.values()),
            "best_balanced_accuracy": _max(
                e["balanced_accuracy"] for e in per_attacker.values()),
            "majority": _weighted(results, f"{j}:majority"),
            "min_log_rank_privacy": min(lrps) if lrps else None,
            "per_attacker": per_attacker,
        }
    if not columns:
        return None
    out = _headline(columns)
    out.update({
        "columns": columns,
        "sites": len(results),
        "rows": sum(rows for _, rows, _ in results),
        "per_site": [{"site": s, "rows": r} for s, r, _ in results],
        "combine": "row-weighted mean over sites",
    })
    return out


def _weighted(results: Sequence[tuple[str, int, Mapping[str, float]]], key: str) -> float | None:
    pairs = [(m[key], rows) for _, rows, m in results
             if key in m and rows > 0 and math.isfinite(m[key])]
    total = sum(r for _, r in pairs)
    return sum(v * r for v, r in pairs) / total if total else None


def _max(values: Any) -> float | None:
    finite = [v for v in values if v is not None]
    return max(finite) if finite else None


def federated_audit(
    grid: Grid,
    hospitals: Sequence[Site],
    bundle_bytes: bytes,
    central: CentralAudit,
    *,
    config: RunConfig,
) -> dict[str, Any] | None:
    """Each active hospital scores the auditor's attackers on its own (T(x), S(x))."""
    if not hospitals:
        return None
    content = site_audit_request(
        bundle_bytes, central, seed=config.seed, attackers=config.attacker_names(),
        chunk_rows=config.chunk_rows,
    )
    replies = exchange(
        grid, {s.node_id: content for s in hospitals}, p.SITE_AUDIT,
        timeout=config.audit_timeout, group_id="site-audit",
    )
    results = []
    for site in hospitals:
        got = read_site_audit(site, replies[site.node_id])
        if got is not None:
            results.append((site.name, got[0], got[1]))
    return combine_site_audits(central.sensitive, results)


# ---------------------------------------------------------------------------------------------
# 5. Downstream model
# ---------------------------------------------------------------------------------------------
@dataclass
class EncodedTest:
    """The coordinator's held-out rows, encoded with T (the coordinator knows T)."""

    z: np.ndarray
    y: np.ndarray


def encode_test(bundle: EncoderBundle, test: pd.DataFrame | None) -> EncodedTest | None:
    if test is None or len(test) == 0:
        return None
    from shared.pipeline import open_bundle

    z, y = open_bundle(bundle).encode_frame(test)
    return EncodedTest(np.asarray(z, dtype=np.float32), np.asarray(y, dtype=np.int64))


def downstream_release(
    contributions: Mapping[str, Contribution],
    test: EncodedTest | None,
    *,
    model_spec: ds.ModelSpec,
    epochs: int,
    lr: float,
    seed: int,
) -> dict[str, Any]:
    """Train the task model on the pooled release; evaluate on the encoded test rows."""
    out: dict[str, Any] = {"mode": "release", "model": model_spec.to_config()}
    if not contributions:
        return {**out, "auc": None, "accuracy": None, "test_rows": 0,
                "reason": "no contribution to train on"}
    z = np.concatenate([c.z for c in contributions.values()])
    y = np.concatenate([c.label for c in contributions.values()])
    model = ds.build_model(model_spec, seed=seed)
    loss = ds.train_model(model, z, y, epochs=epochs, lr=lr, seed=seed)
    out.update({"train_rows": int(len(y)), "train_loss": loss, "epochs": epochs})
    return {**out, **_evaluate(model, test, model_spec.n_classes)}


def _evaluate(model: Any, test: EncodedTest | None, n_classes: int) -> dict[str, Any]:
    if test is None:
        return {"auc": None, "accuracy": None, "test_rows": 0, "reason": "no test data"}
    scores = ds.evaluate(model, test.z, test.y, n_classes)
    return {**scores, "test_rows": int(len(test.y))}


def fedavg_request(
    bundle_bytes: bytes, weights: Mapping[str, np.ndarray], *, model_spec: ds.ModelSpec,
    epochs: int, lr: float, seed: int, chunk_rows: int,
) -> RecordDict:
    return RecordDict({
        p.BUNDLE: p.bundle_record(bundle_bytes),
        p.MODEL: p.arrays_record(dict(weights)),
        p.TASK: ConfigRecord({
            **model_spec.to_config(), "epochs": epochs, "lr": lr, "seed": seed,
            "chunk-rows": chunk_rows,
        }),
    })


def read_fedavg(
    site: Site, reply: Reply, expected: Mapping[str, np.ndarray], round_: int
) -> tuple[dict[str, np.ndarray], int, float] | None:
    phase = f"fedavg-{round_}"
    site.record(phase, reply)
    if not reply.ok:
        return None
    assert reply.content is not None
    try:
        weights = {k: np.asarray(v) for k, v in p.record_arrays(reply.content, p.MODEL).items()}
        fit = reply.content.metric_records[p.FIT]
        rows, loss = int(fit["rows"]), float(fit["loss"])  # type: ignore[arg-type]
        if set(weights) != set(expected) or any(
            weights[k].shape != expected[k].shape for k in expected
        ):
            raise ValueError("model weights do not match the global model's layout")
        if not all(np.all(np.isfinite(w)) for w in weights.values()):
            raise ValueError("model weights hold NaN or infinite values")
    except (KeyError, ValueError, TypeError) as exc:
        site.fail(phase, "MalformedReply", str(exc))
        return None
    return weights, rows, loss


def downstream_federated(
    grid: Grid,
    hospitals: Sequence[Site],
    bundle_bytes: bytes,
    test: EncodedTest | None,
    *,
    model_spec: ds.ModelSpec,
    config: RunConfig,
) -> dict[str, Any]:
    """FedAvg: each round the active hospitals train the global model on their own encodings."""
    model = ds.build_model(model_spec, seed=config.seed)
    weights = ds.get_weights(model)
    history: list[dict[str, Any]] = []
    out: dict[str, Any] = {"mode": "federated", "model": model_spec.to_config(),
                           "local_epochs": config.local_epochs}
    for round_ in range(1, config.fedavg_rounds + 1):
        active = [s for s in hospitals if s.active]
        if not active:
            out["reason"] = f"no hospital left in round {round_}"
            break
        replies = exchange(
            grid,
            {s.node_id: fedavg_request(
                bundle_bytes, weights, model_spec=model_spec, epochs=config.local_epochs,
                lr=config.downstream_lr, seed=config.seed * 1000 + round_,
                chunk_rows=config.chunk_rows,
            ) for s in active},
            p.FEDAVG, timeout=config.round_timeout, group_id=f"fedavg-{round_}",
        )
        updates = []
        losses = []
        for site in active:
            got = read_fedavg(site, replies[site.node_id], weights, round_)
            if got is not None:
                updates.append((got[0], got[1]))
                losses.append((got[2], got[1]))
                site.phases.setdefault("fedavg", p.OK)
        if not updates or sum(n for _, n in updates) == 0:
            out["reason"] = f"no usable update in round {round_}"
            break
        weights = ds.fedavg(updates)
        total = sum(n for _, n in losses)
        history.append({
            "round": round_, "sites": len(updates), "rows": total,
            "loss": sum(loss * n for loss, n in losses) / total,
        })
    ds.set_weights(model, weights)
    out.update({"rounds": len(history), "history": history,
                "train_rows": history[-1]["rows"] if history else 0})
    return {**out, **_evaluate(model, test, model_spec.n_classes)}


# ---------------------------------------------------------------------------------------------
# 6. Gate
# ---------------------------------------------------------------------------------------------
def decide_gate(
    threshold: float, central: Mapping[str, Any] | None, federated: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Pass only when leakage was measured and no audit's strongest attacker beats ``threshold``.

    Fails closed: without any audit result the release is not published (unmeasured leakage is
    not the same as no leakage).
    """
    measured: dict[str, float] = {}
    for source, result in (("central", central), ("federated", federated)):
        if not result:
            continue
        for column, suite in result.get("columns", {}).items():
            auc = suite.get("best_auc")
            if auc is not None and math.isfinite(auc):
                measured[f"{source}:{column}"] = float(auc)
    if not measured:
        return {"threshold": threshold, "passed": False, "best_auc": None, "source": None,
                "reason": "leakage was not measured (no audit result); refusing to publish"}
    source, best = max(measured.items(), key=lambda kv: kv[1])
    passed = best <= threshold
    reason = (
        f"strongest attacker AUC {best:.4f} ({source}) ≤ {threshold}" if passed else
        f"strongest attacker AUC {best:.4f} ({source}) exceeds max-private-auc {threshold}; "
        "the release was not published"
    )
    return {"threshold": threshold, "passed": passed, "best_auc": best, "source": source,
            "measured": measured, "reason": reason}


# ---------------------------------------------------------------------------------------------
# The whole run
# ---------------------------------------------------------------------------------------------
def run_coordinator(grid: Grid, config: RunConfig, *, run_id: str, run_dir: Path) -> dict[str, Any]:
    """Run every phase, write the run dir, return the summary (also in ``summary.json``).

    Failures of single sites never stop the run; a failure of the coordinator's own work (no
    encoder, no node at all) writes a summary with ``status: failed`` and re-raises.
    """
    started = time.perf_counter()
    timings: dict[str, float] = {}
    run_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "run_id": run_id,
        "status": "running",
        "config": config.to_dict(),
        "sites": [],
        "release": {"rows": 0, "published": False},
        "downstream": {"mode": config.mode, "auc": None, "accuracy": None, "test_rows": 0},
        "audit": {"central": None, "federated": None, "mi": None},
        "gate": {"threshold": config.max_private_auc, "passed": False},
        "bundle": None,
        "timings": timings,
    }
    sites: list[Site] = []

    def tick(name: str, since: float) -> float:
        now = time.perf_counter()
        timings[name] = round(now - since, 3)
        return now

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="discover")
    try:
        t = time.perf_counter()
        # Discovery runs while the encoder trains: the first message to each node is also what
        # starts its app (in simulation: Ray workers importing torch), so both wait together.
        discovery = pool.submit(
            discover_sites, grid, expected_nodes=config.num_sites + 1,
            wait_timeout=config.wait_nodes_timeout, timeout=config.discover_timeout,
        )
        data = load_coordinator_data(config)
        bundle = prepare_bundle(config, data, run_dir)
        summary["bundle"] = bundle_summary(bundle)
        bundle_bytes = bundle.to_bytes()
        schema = InputSchema.from_dict(bundle.input_schema)
        test = encode_test(bundle, data.test)
        k = int(test.z.shape[1]) if test is not None else _output_width(bundle)
        n_classes = len(schema.label_classes)
        t = tick("encoder_s", t)

        sites = discovery.result()
        summary["sites"] = [s.to_dict() for s in sites]
        t = tick("discover_wait_s", t)
        if not any(s.ok for s in sites):
            raise RunError(
                f"none of the {len(sites)} connected node(s) answered discovery correctly; "
                "see summary.json 'sites' for each node's reason"
            )

        hospitals = hospitals_of(sites)
        auditor = auditor_of(sites)
        contribute = config.mode == "release"
        contributions, central = distribute(
            grid, hospitals, auditor, bundle_bytes, fingerprint=bundle.fingerprint, k=k,
            n_classes=n_classes, contribute=contribute, config=config,
        )
        summary["audit"]["central"] = central_summary(central)
        summary["audit"]["mi"] = central.metrics.get("mi") if central else None
        t = tick("distribute_s", t)
        if not hospitals_of(sites):
            raise RunError(
                "no hospital accepted the bundle and encoded its data; nothing to release or "
                "train on (see summary.json 'sites' for each site's reason)"
            )

        federated = None
        if central is not None and config.federated_audit:
            federated = federated_audit(grid, hospitals_of(sites), bundle_bytes, central,
                                        config=config)
        summary["audit"]["federated"] = federated
        t = tick("federated_audit_s", t)

        model_spec = ds.ModelSpec(k, n_classes, config.hidden_sizes())
        if config.mode == "release":
            summary["downstream"] = downstream_release(
                contributions, test, model_spec=model_spec, epochs=config.downstream_epochs,
                lr=config.downstream_lr, seed=config.seed,
            )
        else:
            summary["downstream"] = downstream_federated(
                grid, hospitals_of(sites), bundle_bytes, test, model_spec=model_spec,
                config=config,
            )
        t = tick("downstream_s", t)

        gate = decide_gate(config.max_private_auc, summary["audit"]["central"], federated)
        summary["gate"] = gate
        release: dict[str, Any] = {
            "rows": sum(c.rows for c in contributions.values()),
            "sites": len(contributions),
            "published": False,
        }
        if not contribute:
            release["reason"] = "federated mode: the encoded data stays at the sites"
        elif not gate["passed"]:
            release["reason"] = gate["reason"]
        elif not contributions:
            release["reason"] = "no hospital contributed"
        else:
            manifest = publish_release(
                run_dir, contributions, run_id=run_id, fingerprint=bundle.fingerprint,
                label_name=schema.label, label_classes=list(schema.label_classes),
            )
            release.update({"published": True, "dir": "release", "files": manifest["files"]})
        summary["release"] = release
        tick("release_s", t)
        summary["status"] = "completed" if gate["passed"] else "gated"
    except Exception as exc:
        summary["status"] = "failed"
        summary["error"] = {"type": type(exc).__name__, "message": str(exc)}
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        summary["sites"] = [s.to_dict() for s in sorted(sites, key=_site_order)]
        timings["total_s"] = round(time.perf_counter() - started, 3)
        write_summary(run_dir, json_safe(summary))
    return json_safe(summary)


def _site_order(site: Site) -> tuple[int, list[object]]:
    """Hospitals first, then the auditor, then the rest; names in natural order (h-2 < h-10)."""
    rank = {p.ROLE_HOSPITAL: 0, p.ROLE_AUDIT: 1}.get(site.role, 2)
    parts: list[object] = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", site.name)]
    return rank, parts


def _output_width(bundle: EncoderBundle) -> int:
    """Width k of T(x) from the bundle's architecture (used when there is no test split)."""
    arch = bundle.architecture or {}
    for key in ("n_components", "n_outputs", "out_features", "output_dim", "k"):
        if key in arch:
            return int(arch[key])
    raise InfoShapeError("cannot tell the encoder's output width: give test data")


__all__ = [
    "CentralAudit",
    "CoordinatorData",
    "EncodedTest",
    "Site",
    "audit_request",
    "auditor_of",
    "bundle_summary",
    "central_summary",
    "combine_site_audits",
    "decide_gate",
    "discover_sites",
    "distribute",
    "downstream_federated",
    "downstream_release",
    "encode_request",
    "encode_test",
    "federated_audit",
    "fedavg_request",
    "hospitals_of",
    "load_coordinator_data",
    "parse_table_spec",
    "prepare_bundle",
    "read_central_audit",
    "read_contribution",
    "read_fedavg",
    "read_site_audit",
    "run_coordinator",
    "site_audit_request",
    "site_from_discovery",
]
