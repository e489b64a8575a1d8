"""A node's own facts, read from Flower's ``context.node_config`` into a typed object.

These are the institution's settings, not the coordinator's: which role the node plays, where its
table is, which keys it trusts, where it remembers accepted bundle versions. The coordinator never
sees or overrides them (a deployment passes them with ``flower-supernode --node-config``; the
simulation builds them per partition). Policy that protects the site's data — the trusted keys,
the rollback state, the minimum number of rows behind any aggregate it reports — lives here for
that reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client import protocol as p
from shared.data import TableSpec
from shared.errors import ConfigError

#: Below this many rows a hospital refuses to report audit aggregates: an accuracy over a
#: handful of rows, next to the released z and a known attacker, would give away S row by row.
DEFAULT_MIN_AUDIT_ROWS = 20


@dataclass(frozen=True)
class NodeConfig:
    """Validated ``node_config`` (keys: role, site-name, data-path, table-spec, trusted-key,
    state-dir, and optionally min-audit-rows)."""

    role: str
    site_name: str
    data_path: Path
    table_spec: TableSpec
    trusted_keys: tuple[Path, ...]
    state_dir: Path
    min_audit_rows: int = DEFAULT_MIN_AUDIT_ROWS

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, Any]) -> NodeConfig:
        role = str(node_config.get("role", "")).strip()
        if role not in p.ROLES:
            raise ConfigError(
                f"node_config 'role' must be one of {', '.join(p.ROLES)}; got {role!r} "
                "(start the SuperNode with --node-config 'role=\"hospital\" …')"
            )
        site_name = str(node_config.get("site-name", "")).strip()
        if not site_name:
            raise ConfigError("node_config 'site-name' is missing; name this institution")
        data_path = _required(node_config, "data-path")
        trusted = [t.strip() for t in _required(node_config, "trusted-key").split(",")]
        state_dir = _required(node_config, "state-dir")
        try:
            min_rows = int(node_config.get("min-audit-rows", DEFAULT_MIN_AUDIT_ROWS))
        except (TypeError, ValueError):
            raise ConfigError(
                f"node_config 'min-audit-rows' must be an integer; got "
                f"{node_config.get('min-audit-rows')!r}"
            ) from None
        if min_rows < 1:
            raise ConfigError(f"node_config 'min-audit-rows' must be ≥ 1; got {min_rows}")
        return cls(
            role=role,
            site_name=site_name,
            data_path=Path(data_path),
            table_spec=parse_table_spec(_required(node_config, "table-spec")),
            trusted_keys=tuple(Path(t) for t in trusted if t),
            state_dir=Path(state_dir),
            min_audit_rows=min_rows,
        )

    def describe(self) -> dict[str, str]:
        """What a node says about itself in discovery (nothing about its data)."""
        return {"role": self.role, "site-name": self.site_name}


def _required(node_config: Mapping[str, Any], key: str) -> str:
    value = str(node_config.get(key, "")).strip()
    if not value:
        raise ConfigError(f"node_config {key!r} is missing; every {key} must be set per site")
    return value


def parse_table_spec(text: str) -> TableSpec:
    """A TableSpec from JSON text, or from a JSON file when ``text`` is a path."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            return TableSpec.from_dict(json.loads(stripped))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"node_config 'table-spec' is not valid JSON ({exc})") from None
    return TableSpec.from_json_file(stripped)


__all__ = ["DEFAULT_MIN_AUDIT_ROWS", "NodeConfig", "parse_table_spec"]
