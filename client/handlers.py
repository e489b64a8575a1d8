"""What a hospital and the auditor do with each task: plain functions, no Flower app plumbing.

Every task that uses the encoder starts the same way, in this order, before any weight touches
the site's data (``open_verified`` then ``encode_table``):

1. the bundle bytes from the message are verified against the keys *this site* trusts
   (signature, known key, and — with the site's TrustState — no rollback to an older version);
2. the site's own table is loaded and validated against its own TableSpec;
3. the table's columns are checked against the bundle's input schema;
4. only then is the encoder built and the table encoded, chunk by chunk.

A hospital's replies hold only T(x), L(x) (the release contribution), counts, model weights trained
on those, and audit aggregates computed on at least ``min-audit-rows`` rows — never a raw feature
and never S. Error replies carry the error's type and, for errors that could quote the site's
data (data and schema errors, unexpected exceptions), a fixed message instead of the original.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from client import protocol as p
from client.config import NodeConfig
from shared import downstream as dsm
from shared.attacks import (
    ATTACKERS,
    DEFAULT_ATTACKERS,
    attacker_from_weights,
    log_rank_privacy_from_proba,
    majority_baseline,
    run_attack_suite,
    score_predictions,
    score_utility,
)
from shared.attacks.base import expand_proba
from shared.bundle import EncoderBundle, TrustState
from shared.data import InputSchema, load_table
from shared.errors import (
    ConfigError,
    DataError,
    InfoShapeError,
    LabelError,
    RunError,
    SchemaMismatchError,
)

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Errors → reply
# ---------------------------------------------------------------------------------------------
_WITHHELD = "details withheld from the reply because they could quote the site's data; see the "
_WITHHELD += "site's log"


def safe_message(exc: BaseException) -> str:
    """The error message a site may send: bundle, key and config errors are about the bundle or
    the site's settings and go out as they are; data and schema errors (which may quote a cell,
    a category or a class of the site's table) and unexpected exceptions get a fixed text."""
    if isinstance(exc, SchemaMismatchError):
        return f"the site's table does not match the bundle's input schema ({_WITHHELD})"
    if isinstance(exc, DataError):
        doc = (type(exc).__doc__ or "the site's table cannot be used").strip().splitlines()[0]
        return f"{doc.rstrip('.')} ({_WITHHELD})"
    if isinstance(exc, InfoShapeError):
        return str(exc)
    return f"unexpected {type(exc).__name__} at the site ({_WITHHELD})"


def error_content(exc: BaseException, node: NodeConfig | None = None) -> RecordDict:
    """An error reply: ``refused`` for a deliberate refusal (any InfoShapeError), ``failed`` for
    anything else. The full message stays in the site's log."""
    status = p.REFUSED if isinstance(exc, InfoShapeError) else p.FAILED
    log.warning("%s: %s: %s", node.site_name if node else "node", type(exc).__name__, exc)
    record: dict[str, str] = {
        "type": type(exc).__name__,
        "message": safe_message(exc),
        "status": status,
    }
    if node is not None:
        record.update(node.describe())
    return RecordDict({p.ERROR: ConfigRecord(record)})


@contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Run torch work (MI critics, small MLPs) on ``n`` intra-op threads, then restore.

    These models are tiny: extra threads buy nothing and, on a busy host (or next to other
    simulated sites), oversubscription made one MI estimate 15x slower in our measurements.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def require_role(node: NodeConfig, role: str, task: str) -> None:
    if node.role != role:
        raise ConfigError(
            f"{node.site_name} has role {node.role!r}; the {task} task is for {role!r} nodes"
        )


# ---------------------------------------------------------------------------------------------
# Verify, load, encode
# ---------------------------------------------------------------------------------------------
def open_verified(content: RecordDict, node: NodeConfig) -> EncoderBundle:
    """Steps 1 of the module docstring: the bundle, accepted only if this site trusts it."""
    try:
        data = content.config_records[p.BUNDLE][p.BUNDLE_BYTES]
    except KeyError:
        raise ConfigError("the task carries no bundle; nothing to verify") from None
    if not isinstance(data, bytes):
        raise ConfigError(f"the bundle must travel as bytes; got {type(data).__name__}")
    if not node.trusted_keys:
        raise ConfigError("node_config 'trusted-key' names no key; trusting nothing refuses all")
    return EncoderBundle.from_bytes(
        data, [str(k) for k in node.trusted_keys], state=TrustState(node.state_dir)
    )


@dataclass
class Encoded:
    """The site's table after the checks, and its encodings (which may leave only as z, L)."""

    frame: pd.DataFrame
    schema: InputSchema
    z: np.ndarray
    y: np.ndarray
    chunks: int

    @property
    def rows(self) -> int:
        return int(self.z.shape[0])

    def sensitive(self) -> np.ndarray:
        """S(x) as class codes (n, n_sensitive); stays at the site."""
        return self.schema.encode_sensitive(self.frame, source="site table")


def encode_table(bundle: EncoderBundle, node: NodeConfig, chunk_rows: int) -> Encoded:
    """Steps 2–4: load and validate the site's table, check it against the bundle's schema, then
    encode it in chunks of ``chunk_rows`` (bounded peak memory in the encoder)."""
    from shared.pipeline import open_bundle

    if chunk_rows < 1:
        raise ConfigError(f"chunk-rows must be at least 1; got {chunk_rows}")
    frame = load_table(node.data_path, node.table_spec)
    schema = InputSchema.from_dict(bundle.input_schema)
    if schema.label != node.table_spec.label:
        raise SchemaMismatchError(
            f"the bundle's label is {schema.label!r}; this site's label is "
            f"{node.table_spec.label!r}"
        )
    schema.check_columns(frame, targets=False, source="site table")
    encoder = open_bundle(bundle)
    zs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for start in range(0, len(frame), chunk_rows):
        z, y = encoder.encode_frame(frame.iloc[start:start + chunk_rows])
        zs.append(np.asarray(z, dtype=np.float32))
        ys.append(np.asarray(y, dtype=np.int64))
    if not zs:
        raise DataError("the site's table has no rows")
    return Encoded(frame, schema, np.concatenate(zs), np.concatenate(ys), len(zs))


def _task(content: RecordDict) -> ConfigRecord:
    return content.config_records.get(p.TASK, ConfigRecord())


def _attackers(task: ConfigRecord) -> list[str]:
    names = [n.strip() for n in str(task.get("attackers", "")).split(",") if n.strip()]
    return names or list(DEFAULT_ATTACKERS)


# ---------------------------------------------------------------------------------------------
# Handlers (content in, content out)
# ---------------------------------------------------------------------------------------------
def handle_discover(content: RecordDict, node: NodeConfig) -> RecordDict:
    """Say who this node is: role and site name (nothing about its data)."""
    return RecordDict({p.NODE: ConfigRecord(node.describe())})


def handle_encode(content: RecordDict, node: NodeConfig) -> RecordDict:
    """Hospital: verify the bundle, encode the table, reply with (z, L) and counts only."""
    require_role(node, p.ROLE_HOSPITAL, "encode")
    task = _task(content)
    bundle = open_verified(content, node)
    enc = encode_table(bundle, node, int(task.get("chunk-rows", 65536)))
    reply = RecordDict({
        p.COUNTS: MetricRecord({"rows": enc.rows, "chunks": enc.chunks}),
        p.INFO: ConfigRecord({"fingerprint": bundle.fingerprint, "site-name": node.site_name}),
    })
    if bool(task.get("contribute", True)):
        reply[p.CONTRIBUTION] = p.arrays_record({p.Z: enc.z, p.LABEL: enc.y})
    return reply


@torch_threads()
def handle_audit(content: RecordDict, node: NodeConfig) -> RecordDict:
    """Auditor: play the adversary on public rows with S.

    Encode P_audit with T, split it into attack-training and holdout rows, fit the attacker suite
    on T(P_audit) → S per sensitive column and score the holdout; report utility on L, MI
    estimates and log-rank privacy; return the attack-training set and the exportable attackers
    (plain arrays) for the federated audit. These are public rows, not a hospital's.
    """
    from sklearn.model_selection import train_test_split

    from shared.mi import estimate_mi

    require_role(node, p.ROLE_AUDIT, "audit")
    task = _task(content)
    seed = int(task.get("seed", 0))
    holdout = float(task.get("holdout", 0.3))
    mi_steps = int(task.get("mi-steps", 500))
    attackers = _attackers(task)
    bundle = open_verified(content, node)
    enc = encode_table(bundle, node, int(task.get("chunk-rows", 65536)))
    s = enc.sensitive()
    index = np.arange(enc.rows)
    counts = np.unique(s[:, 0], return_counts=True)[1]
    try:
        tr, te = train_test_split(
            index, test_size=holdout, random_state=seed,
            stratify=s[:, 0] if counts.min() >= 2 else None,
        )
    except ValueError as exc:
        raise LabelError(f"the audit table cannot be split for an attack: {exc}") from None
    columns: dict[str, object] = {}
    configs: dict[str, str] = {}
    arrays: dict[str, np.ndarray] = {}
    mi_sensitive: dict[str, float] = {}
    for j, column in enumerate(enc.schema.sensitive):
        suite = run_attack_suite(
            enc.z[tr], s[tr, j], enc.z[te], s[te, j], attackers=attackers, seed=seed
        )
        columns[column] = suite.to_dict()
        for name, attacker in suite.fitted.items():
            if type(attacker).exportable:
                config, weights = attacker.export_weights()
                configs[f"{j}:{name}"] = json.dumps(config)
                arrays.update({f"{j}:{name}:{k}": np.asarray(v) for k, v in weights.items()})
        mi_sensitive[column] = estimate_mi(enc.z, s[:, j], steps=mi_steps, seed=seed)
    utility = score_utility(
        enc.z[tr], enc.y[tr], enc.z[te], enc.y[te], attackers=attackers, seed=seed
    )
    metrics = {
        "sensitive": enc.schema.sensitive,
        "columns": columns,
        "utility": utility.to_dict(),
        "mi": {
            "estimator": "remine",
            "unit": "nats",
            "steps": mi_steps,
            "public_label": estimate_mi(enc.z, enc.y, steps=mi_steps, seed=seed),
            "sensitive": mi_sensitive,
        },
        "rows": {"total": enc.rows, "train": int(len(tr)), "holdout": int(len(te))},
        "fingerprint": bundle.fingerprint,
    }
    reply = RecordDict({
        p.AUDIT_RESULT: ConfigRecord({p.JSON: json.dumps(_finite(metrics))}),
        p.ATTACK_TRAIN: p.arrays_record({p.Z: enc.z[tr], p.S: s[tr]}),
        p.ATTACKER_CONFIGS: ConfigRecord(configs),
    })
    if arrays:
        reply[p.ATTACKER_ARRAYS] = p.arrays_record(arrays)
    return reply


@torch_threads()
def handle_site_audit(content: RecordDict, node: NodeConfig) -> RecordDict:
    """Hospital: score the auditor's attackers on this site's own (T(x), S(x)).

    Exportable attackers arrive as plain arrays; the others are refitted here from the auditor's
    public attack-training set with the same name and seed. Only aggregate scores leave, and only
    over at least ``min-audit-rows`` rows.
    """
    require_role(node, p.ROLE_HOSPITAL, "site audit")
    task = _task(content)
    seed = int(task.get("seed", 0))
    bundle = open_verified(content, node)
    enc = encode_table(bundle, node, int(task.get("chunk-rows", 65536)))
    if enc.rows < node.min_audit_rows:
        raise RunError(
            f"{node.site_name} holds {enc.rows} rows, fewer than its min-audit-rows "
            f"({node.min_audit_rows}); it reports no audit aggregate over so few rows"
        )
    s = enc.sensitive()
    try:
        train = p.record_arrays(content, p.ATTACK_TRAIN)
        attack_z = np.asarray(train[p.Z], dtype=np.float64)
        attack_s = np.asarray(train[p.S])
    except KeyError:
        raise ConfigError("the site-audit task carries no attack-training set") from None
    if attack_s.ndim != 2 or attack_s.shape[1] != s.shape[1] or attack_z.shape[1] != enc.z.shape[1]:
        raise ConfigError(
            f"attack-training set has shapes z {attack_z.shape}, s {attack_s.shape}; this site "
            f"has {s.shape[1]} sensitive column(s) and encodings of width {enc.z.shape[1]}"
        )
    configs = {k: str(v) for k, v in content.config_records.get(p.ATTACKER_CONFIGS, {}).items()}
    shipped = (
        p.record_arrays(content, p.ATTACKER_ARRAYS)
        if p.ATTACKER_ARRAYS in content.array_records else {}
    )
    metrics: dict[str, float] = {"rows": float(enc.rows)}
    for j in range(s.shape[1]):
        s_j = s[:, j]
        for name in _attackers(task):
            key = f"{j}:{name}"
            if key in configs:
                prefix = f"{key}:"
                weights = {k[len(prefix):]: v for k, v in shipped.items() if k.startswith(prefix)}
                attacker = attacker_from_weights(json.loads(configs[key]), weights)
            else:
                attacker = refit_attacker(name, seed, attack_z, attack_s[:, j])
            classes = np.union1d(attacker.classes_, np.unique(s_j))
            proba = expand_proba(
                attacker.predict_proba(enc.z), np.searchsorted(classes, attacker.classes_),
                classes.size,
            )
            scores = score_predictions(s_j, proba, classes)
            scores["log_rank_privacy"] = log_rank_privacy_from_proba(proba, s_j, classes)
            for metric, value in scores.items():
                if np.isfinite(value):
                    metrics[f"{key}:{metric}"] = float(value)
        metrics[f"{j}:majority"] = majority_baseline(attack_s[:, j], s_j)
    return RecordDict({p.SITE_AUDIT_RESULT: MetricRecord(metrics)})


_REFITS: OrderedDict[str, Any] = OrderedDict()
_REFITS_MAX = 16


def refit_attacker(name: str, seed: int, z: np.ndarray, s: np.ndarray) -> Any:
    """Fit attacker ``name`` on the auditor's public attack-training set, once per process.

    The fit depends only on (name, seed, the public training rows), never on the site, so a
    process that serves several simulated sites (a Ray worker) refits each attacker once instead
    of once per site. Keyed by a hash of the exact rows; nothing of any site is kept.
    """
    digest = hashlib.sha256()
    for part in (name.encode(), str(seed).encode(), np.ascontiguousarray(z).tobytes(),
                 str(z.shape).encode(), np.ascontiguousarray(s).tobytes()):
        digest.update(part)
    key = digest.hexdigest()
    if key in _REFITS:
        _REFITS.move_to_end(key)
        return _REFITS[key]
    attacker = ATTACKERS.create(name, seed=seed).fit(z, s)
    _REFITS[key] = attacker
    while len(_REFITS) > _REFITS_MAX:
        _REFITS.popitem(last=False)
    return attacker


@torch_threads()
def handle_fedavg(content: RecordDict, node: NodeConfig) -> RecordDict:
    """Hospital: one FedAvg round — train the global model on this site's own encodings."""
    require_role(node, p.ROLE_HOSPITAL, "FedAvg")
    task = _task(content)
    bundle = open_verified(content, node)
    enc = encode_table(bundle, node, int(task.get("chunk-rows", 65536)))
    try:
        n_inputs, n_classes = int(task["n-inputs"]), int(task["n-classes"])
        hidden = dsm.parse_hidden(str(task.get("hidden", "")))
        epochs, lr, seed = int(task["epochs"]), float(task["lr"]), int(task["seed"])
    except KeyError as exc:
        raise ConfigError(f"the FedAvg task lacks {exc}") from None
    if n_inputs != enc.z.shape[1]:
        raise ConfigError(f"global model takes {n_inputs} inputs; encodings have "
                          f"{enc.z.shape[1]}")
    if enc.rows and int(enc.y.max()) >= n_classes:
        raise ConfigError(f"global model has {n_classes} classes; fewer than the label's")
    if not 1 <= epochs <= 1000 or not 0 < lr < 10:
        raise ConfigError(f"FedAvg epochs {epochs} / lr {lr} out of range")
    model = dsm.build_model(dsm.ModelSpec(n_inputs, n_classes, hidden), seed=seed)
    dsm.set_weights(model, p.record_arrays(content, p.MODEL))
    loss = dsm.train_model(model, enc.z, enc.y, epochs=epochs, lr=lr, seed=seed)
    return RecordDict({
        p.MODEL: p.arrays_record(dsm.get_weights(model)),
        p.FIT: MetricRecord({"rows": enc.rows, "loss": float(loss)}),
    })


def _finite(obj: object) -> object:
    """JSON-safe: NaN/inf → None (json.dumps would write invalid JSON)."""
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


HANDLERS = {
    p.DISCOVER: handle_discover,
    p.ENCODE: handle_encode,
    p.AUDIT: handle_audit,
    p.SITE_AUDIT: handle_site_audit,
    p.FEDAVG: handle_fedavg,
}

__all__ = [
    "HANDLERS",
    "Encoded",
    "encode_table",
    "error_content",
    "handle_audit",
    "handle_discover",
    "handle_encode",
    "handle_fedavg",
    "handle_site_audit",
    "open_verified",
    "require_role",
    "safe_message",
]
