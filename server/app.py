"""The ServerApp (coordinator): read the run configuration once, then run the phases.

Kept thin on purpose, like Flower's quickstart apps: everything that decides anything lives in
``server/phases.py`` as plain functions over a grid and a typed :class:`RunConfig`, so it can be
tested with fake replies and reused by the simulation unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from server.config import RunConfig
from server.phases import run_coordinator

app = ServerApp()


def default_run_dir(now: datetime | None = None) -> Path:
    """``runs/<UTC timestamp>/`` under the current directory."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / stamp


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Coordinator entry point: one typed config, one call."""
    config = RunConfig.from_run_config(context.run_config)
    run_dir = Path(config.out_dir) if config.out_dir else default_run_dir()
    run_id = config.run_id or str(context.run_id)
    run_coordinator(grid, config, run_id=run_id, run_dir=run_dir)


__all__ = ["app", "default_run_dir", "main"]
