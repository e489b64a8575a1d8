"""The coordinator's run configuration, read once from Flower's ``context.run_config``.

Flower hands the ServerApp a flat mapping of kebab-case keys (``[tool.flwr.app.config]`` in
pyproject, overridden by ``flwr run --run-config`` or by the simulation wrapper). Reading it in one
place into a typed, validated dataclass keeps every phase free of string keys and defaults, and
turns a typo in a key into a clear :class:`~shared.errors.ConfigError` at the start of the run
instead of a silently ignored setting.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from shared.errors import ConfigError

MODES = ("release", "federated")


def _meta(key: str, help_text: str) -> dict[str, str]:
    return {"key": key, "help": help_text}


@dataclass(frozen=True)
class RunConfig:
    """Everything the coordinator needs for one run (field metadata names the run-config key)."""

    dataset: str = field(default="paper-synthetic", metadata=_meta(
        "dataset", "built-in dataset, used when no public-data table is given"))
    num_sites: int = field(default=3, metadata=_meta(
        "num-sites", "hospitals expected; the coordinator waits for them (plus one auditor)"))
    lam: float = field(default=1.0, metadata=_meta("lambda", "privacy weight λ of the encoder"))
    mode: str = field(default="release", metadata=_meta(
        "mode", "downstream model: 'release' (pooled release) or 'federated' (FedAvg)"))
    max_private_auc: float = field(default=0.70, metadata=_meta(
        "max-private-auc", "gate: refuse to publish when the strongest attacker's AUC exceeds it"))
    seed: int = field(default=0, metadata=_meta("seed", "seed of every random choice"))
    shaper: str = field(default="infoshape", metadata=_meta("shaper", "shaper name"))
    schedule: str = field(default="alternating", metadata=_meta(
        "schedule", "InfoShape schedule: alternating or paper"))
    shaper_params: str = field(default="", metadata=_meta(
        "shaper-params", "extra shaper parameters as a JSON object"))
    out_dir: str = field(default="", metadata=_meta(
        "out-dir", "run directory (bundle/, release/, summary.json); default runs/<UTC time>"))
    run_id: str = field(default="", metadata=_meta(
        "run-id", "name recorded in the release manifest; default Flower's run id"))
    public_data: str = field(default="", metadata=_meta(
        "public-data", "coordinator's public table P (x, L, S) to train the encoder on"))
    test_data: str = field(default="", metadata=_meta(
        "test-data", "held-out table (x, L) for the downstream evaluation"))
    table_spec: str = field(default="", metadata=_meta(
        "table-spec", "TableSpec as JSON (or a path to a JSON file) for public/test data"))
    partition: str = field(default="iid", metadata=_meta(
        "partition", "partition scheme (recorded; the sites hold their own data)"))
    bundle: str = field(default="", metadata=_meta(
        "bundle", "existing signed bundle directory to distribute instead of training"))
    trusted_key: str = field(default="", metadata=_meta(
        "trusted-key", "public key that must have signed --bundle"))
    signing_key: str = field(default="", metadata=_meta(
        "signing-key", "private Ed25519 key that signs a newly trained encoder"))
    encoder_version: int = field(default=1, metadata=_meta(
        "encoder-version", "version written into a newly trained bundle (rollback protection)"))
    attackers: str = field(default="", metadata=_meta(
        "attackers", "comma-separated attacker names for the audits; empty = the full suite"))
    mi_steps: int = field(default=500, metadata=_meta(
        "mi-steps", "critic steps per MI estimate in the central audit"))
    audit_holdout: float = field(default=0.3, metadata=_meta(
        "audit-holdout", "fraction of the auditor's rows held out to score the attackers"))
    federated_audit: bool = field(default=True, metadata=_meta(
        "federated-audit", "send the attackers to the hospitals and combine their scores"))
    fedavg_rounds: int = field(default=5, metadata=_meta(
        "fedavg-rounds", "FedAvg rounds in federated mode"))
    local_epochs: int = field(default=3, metadata=_meta(
        "local-epochs", "local epochs per FedAvg round"))
    downstream_epochs: int = field(default=40, metadata=_meta(
        "downstream-epochs", "epochs of the downstream model in release mode"))
    downstream_hidden: str = field(default="32,32", metadata=_meta(
        "downstream-hidden", "hidden widths of the downstream MLP ('' = logistic regression)"))
    downstream_lr: float = field(default=0.01, metadata=_meta(
        "downstream-lr", "Adam learning rate of the downstream model"))
    chunk_rows: int = field(default=65536, metadata=_meta(
        "chunk-rows", "rows per encoding chunk at the sites"))
    wait_nodes_timeout: float = field(default=60.0, metadata=_meta(
        "wait-nodes-timeout", "seconds to wait for the expected nodes to connect"))
    discover_timeout: float = field(default=120.0, metadata=_meta(
        "discover-timeout", "seconds to wait for the nodes to say who they are"))
    encode_timeout: float = field(default=300.0, metadata=_meta(
        "encode-timeout", "seconds to wait for the hospitals' encoded data"))
    audit_timeout: float = field(default=600.0, metadata=_meta(
        "audit-timeout", "seconds to wait for the central and the federated audit"))
    round_timeout: float = field(default=300.0, metadata=_meta(
        "round-timeout", "seconds to wait for one FedAvg round"))

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if self.num_sites < 1:
            raise ConfigError(f"num-sites must be at least 1; got {self.num_sites}")
        if not (0.0 < self.max_private_auc <= 1.0) or math.isnan(self.max_private_auc):
            raise ConfigError(
                f"max-private-auc must lie in (0, 1] (1 disables the gate); "
                f"got {self.max_private_auc}"
            )
        if not 0.05 <= self.audit_holdout <= 0.5:
            raise ConfigError(f"audit-holdout must lie in [0.05, 0.5]; got {self.audit_holdout}")
        for name in ("fedavg_rounds", "local_epochs", "downstream_epochs", "chunk_rows",
                     "mi_steps", "encoder_version"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{_key(name)} must be at least 1; got {getattr(self, name)}")
        for name in ("wait_nodes_timeout", "discover_timeout", "encode_timeout",
                     "audit_timeout", "round_timeout", "downstream_lr"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{_key(name)} must be a positive number; got {value}")
        if self.bundle and not self.trusted_key:
            raise ConfigError(
                "bundle is set but trusted-key is not; the coordinator verifies a bundle "
                "before distributing it — pass the signer's public key as trusted-key"
            )
        self.shaper_param_dict()  # validates the JSON
        self.hidden_sizes()

    # -- derived values ----------------------------------------------------------------------
    def shaper_param_dict(self) -> dict[str, Any]:
        """``shaper-params`` parsed (an empty string means no extra parameters)."""
        if not self.shaper_params.strip():
            return {}
        try:
            value = json.loads(self.shaper_params)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"shaper-params must be a JSON object; {exc}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"shaper-params must be a JSON object; got {self.shaper_params!r}")
        return value

    def attacker_names(self) -> list[str] | None:
        """Attacker names for the suites, or ``None`` for the library's default suite."""
        names = [n.strip() for n in self.attackers.split(",") if n.strip()]
        return names or None

    def hidden_sizes(self) -> tuple[int, ...]:
        """Hidden widths of the downstream MLP; empty means logistic regression."""
        try:
            sizes = tuple(int(p) for p in self.downstream_hidden.split(",") if p.strip())
        except ValueError:
            raise ConfigError(
                f"downstream-hidden must be comma-separated integers; "
                f"got {self.downstream_hidden!r}"
            ) from None
        if any(s < 1 for s in sizes):
            raise ConfigError(f"downstream-hidden widths must be ≥ 1; got {sizes}")
        return sizes

    # -- conversion --------------------------------------------------------------------------
    @classmethod
    def keys(cls) -> dict[str, str]:
        """run-config key → field name."""
        return {f.metadata["key"]: f.name for f in fields(cls)}

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> RunConfig:
        """Build from Flower's flat run config; unknown keys are refused (likely typos)."""
        by_key = cls.keys()
        unknown = sorted(set(run_config) - set(by_key))
        if unknown:
            raise ConfigError(
                f"unknown run-config key(s) {', '.join(map(repr, unknown))}; valid keys: "
                f"{', '.join(sorted(by_key))}"
            )
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in run_config.items():
            name = by_key[key]
            values[name] = _coerce(key, raw, types[name])
        return cls(**values)

    def to_run_config(self) -> dict[str, bool | int | float | str]:
        """The flat kebab-case mapping :meth:`from_run_config` reads (for the simulation)."""
        return {_key(name): value for name, value in asdict(self).items()}

    def to_dict(self) -> dict[str, Any]:
        """Recorded in summary.json (kebab-case like the configuration itself)."""
        return self.to_run_config()


def _key(name: str) -> str:
    for f in fields(RunConfig):
        if f.name == name:
            return str(f.metadata["key"])
    return name.replace("_", "-")


def _coerce(key: str, raw: Any, type_name: Any) -> Any:
    """Convert a run-config value to the field's type with a clear error (TOML ints for floats
    and the strings of ``--run-config`` overrides are both accepted)."""
    target = str(type_name)
    try:
        if target == "bool":
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.lower() in ("true", "false", "1", "0", "yes", "no"):
                return raw.lower() in ("true", "1", "yes")
            raise ValueError(raw)
        if target == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError(raw)
            return int(raw)
        if target == "float":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return float(raw)
        return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"run-config {key!r} must be of type {target}; got {raw!r}") from None


__all__ = ["MODES", "RunConfig"]
