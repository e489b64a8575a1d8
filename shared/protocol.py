"""The wire protocol between coordinator and nodes: message types and record names.

Both apps must agree on these strings and may not import each other, so they live here, in the
flwr-free library; ``server/protocol.py`` and ``client/protocol.py`` add only the helpers that
build Flower records.

What travels where (and nothing else), coordinator → node / node → coordinator:

- ``query.discover``: nothing / ``node`` (role, site name).
- ``query.encode``: ``bundle``, ``task`` / ``contribution`` (z, label), ``counts``, ``info``.
- ``evaluate.audit`` (auditor): ``bundle``, ``task`` / ``audit`` (metrics JSON),
  ``attack-train`` (T(P_audit) and S of the auditor's *public* rows), exported attackers.
- ``evaluate.site_audit`` (hospital): ``bundle``, ``task``, attack-train, attackers /
  ``site-audit`` (aggregate scores only).
- ``train.fedavg``: ``bundle``, ``model``, ``task`` / ``model``, ``fit`` (rows, loss).
- any task: an ``error`` record (type, message, status) instead of the reply.
"""

from __future__ import annotations

# Message types: "<category>.<action>" as ClientApp routes them.
DISCOVER = "query.discover"
ENCODE = "query.encode"
AUDIT = "evaluate.audit"
SITE_AUDIT = "evaluate.site_audit"
FEDAVG = "train.fedavg"

# Record names.
BUNDLE = "bundle"            # ConfigRecord {BUNDLE_BYTES: bytes}
BUNDLE_BYTES = "bytes"
TASK = "task"                # ConfigRecord: parameters of the task
NODE = "node"                # ConfigRecord: role, site-name
CONTRIBUTION = "contribution"  # ArrayRecord: z (n, k) float32, label (n,) int64
COUNTS = "counts"            # MetricRecord: rows, chunks
INFO = "info"                # ConfigRecord: fingerprint, site-name
AUDIT_RESULT = "audit"       # ConfigRecord {"json": metrics}
ATTACK_TRAIN = "attack-train"  # ArrayRecord: z, s (public audit rows only)
ATTACKER_CONFIGS = "attacker-configs"  # ConfigRecord {"<col>:<name>": config JSON}
ATTACKER_ARRAYS = "attacker-arrays"    # ArrayRecord {"<col>:<name>:<array>": Array}
SITE_AUDIT_RESULT = "site-audit"       # MetricRecord: "<col>:<attacker>:<metric>", rows
MODEL = "model"              # ArrayRecord: downstream model weights
FIT = "fit"                  # MetricRecord: rows, loss
ERROR = "error"              # ConfigRecord: type, message, status

# Keys inside records.
Z = "z"
LABEL = "label"
S = "s"
JSON = "json"

# Roles.
ROLE_HOSPITAL = "hospital"
ROLE_AUDIT = "audit"
ROLES = (ROLE_HOSPITAL, ROLE_AUDIT)

# Site status values recorded in summary.json.
OK = "ok"
REFUSED = "refused"
FAILED = "failed"

__all__ = [
    "ATTACKER_ARRAYS",
    "ATTACKER_CONFIGS",
    "ATTACK_TRAIN",
    "AUDIT",
    "AUDIT_RESULT",
    "BUNDLE",
    "BUNDLE_BYTES",
    "CONTRIBUTION",
    "COUNTS",
    "DISCOVER",
    "ENCODE",
    "ERROR",
    "FAILED",
    "FEDAVG",
    "FIT",
    "INFO",
    "JSON",
    "LABEL",
    "MODEL",
    "NODE",
    "OK",
    "REFUSED",
    "ROLES",
    "ROLE_AUDIT",
    "ROLE_HOSPITAL",
    "S",
    "SITE_AUDIT",
    "SITE_AUDIT_RESULT",
    "TASK",
    "Z",
]
