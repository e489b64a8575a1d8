"""Who holds which rows: disjoint public / audit / site / test splits of one table.

The threat model needs the coordinator's public data P, the auditor's public data P_audit, every
hospital's D_i and the held-out test rows to be disjoint (an encoder trained on a hospital's rows,
or an attacker scored on its own training rows, would flatter the numbers). The simulation uses
this plan to give each simulated node its table; a deployment with a built-in dataset can use it
on the coordinator to find its own public and test rows. The plan is a pure function of
(table, spec, number of sites, partition scheme, seed), so every process that builds it gets the
same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from shared.data import TableSpec, partition_indices, split_frame
from shared.errors import ConfigError

#: Fractions of the table per role. The encoder needs enough public rows to learn T, the auditor
#: enough to train *and* score attackers, the test split enough for a stable AUC; the hospitals
#: get the rest.
DEFAULT_FRACTIONS: dict[str, float] = {"public": 0.3, "audit": 0.2, "test": 0.1, "sites": 0.4}


@dataclass
class DataPlan:
    """The rows of each role (each frame has a fresh 0..n-1 index)."""

    spec: TableSpec
    public: pd.DataFrame
    audit: pd.DataFrame
    test: pd.DataFrame
    sites: list[pd.DataFrame]

    def describe(self) -> dict[str, object]:
        return {
            "public_rows": len(self.public),
            "audit_rows": len(self.audit),
            "test_rows": len(self.test),
            "site_rows": [len(s) for s in self.sites],
        }


def plan_splits(
    frame: pd.DataFrame,
    spec: TableSpec,
    *,
    n_sites: int,
    partition: str = "iid",
    seed: int = 0,
    fractions: dict[str, float] | None = None,
) -> DataPlan:
    """Split ``frame`` into public / audit / test / sites, then partition the site rows.

    Raises :class:`ConfigError` when a role would get no rows (too small a table for that many
    sites); a site left empty by a skewed partition is kept (it will refuse: no data rows).
    """
    if n_sites < 1:
        raise ConfigError(f"number of sites must be at least 1; got {n_sites}")
    fractions = dict(DEFAULT_FRACTIONS if fractions is None else fractions)
    if set(fractions) != set(DEFAULT_FRACTIONS):
        raise ConfigError(
            f"fractions must have exactly the keys {sorted(DEFAULT_FRACTIONS)}; "
            f"got {sorted(fractions)}"
        )
    parts = split_frame(frame, fractions, seed=seed, stratify=spec.label)
    for role in ("public", "audit", "test", "sites"):
        if len(parts[role]) == 0:
            raise ConfigError(
                f"the {role} split is empty: {len(frame)} rows are too few for fractions "
                f"{fractions}"
            )
    pool = parts["sites"].reset_index(drop=True)
    if len(pool) < n_sites:
        raise ConfigError(
            f"{len(pool)} site rows cannot be shared among {n_sites} sites; use fewer sites "
            "or a larger table"
        )
    indices = partition_indices(pool, n_sites, partition, label=spec.label, seed=seed)
    sites = [pool.iloc[list(idx)].reset_index(drop=True) for idx in indices]
    return DataPlan(
        spec=spec,
        public=parts["public"].reset_index(drop=True),
        audit=parts["audit"].reset_index(drop=True),
        test=parts["test"].reset_index(drop=True),
        sites=sites,
    )


__all__ = ["DEFAULT_FRACTIONS", "DataPlan", "plan_splits"]
