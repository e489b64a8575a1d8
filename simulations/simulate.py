"""``infoshape simulate``: the whole multi-site release on Flower's in-process simulation runtime.

One call builds a small world and runs the real apps in it:

- the table (a built-in dataset, or ``--data`` with ``--label/--sensitive``) is split into
  disjoint public / audit / test / site rows (``server.dataplan``), and each role's rows are
  written to a private scratch directory, as each institution would hold its own file;
- a signing key pair is made (unless ``--bundle`` brings a signed encoder and its trusted key);
- ``server.app`` (the coordinator) and ``client.app`` (hospitals + one auditor) run under
  ``flwr.simulation.run_simulation`` with the Ray backend — no SuperLink process, nothing
  installed at run time.

In simulation every node's ``node_config`` holds only ``partition-id`` / ``num-partitions`` and the
run config is empty (FLOWER_NOTES.md), so both apps are wrapped: the ServerApp gets a Context
carrying the run configuration, and each ClientApp call gets the ``node_config`` a deployed site
would have (role, site-name, data-path, table-spec, trusted-key, state-dir) for its partition:
partitions 0..N-1 are hospitals, partition N is the auditor. The apps' own code paths are exactly
those of a deployment. Test faults (a site that raises, stalls, dies or trusts the wrong key) are
injected by that wrapper, never by the apps.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from server.config import MODES, RunConfig
from server.dataplan import DataPlan, plan_splits
from shared.bundle import generate_keypair
from shared.data import TableSpec, load_dataset, load_table
from shared.errors import ConfigError, RunError
from simulations.rundir import (
    KEYS_DIR,
    default_run_dir,
    prepare_run_dir,
    read_summary,
    write_summary,
)

FAULTS = ("raise", "slow", "kill")
#: How Flower's run_simulation words a failure of the runtime itself.
RUNTIME_FAILURES = ("Simulation Runtime crashed", "An error was encountered. Ending simulation")
AUDITOR_NAME = "auditor"


def hospital_name(index: int) -> str:
    return f"hospital-{index}"


@dataclass
class SimulateOptions:
    """Everything ``infoshape simulate`` accepts (defaults: 3 hospitals + 1 auditor on
    paper-synthetic, release mode).

    Fault lists name hospitals by index (0-based) and exist for tests and demonstrations:
    ``wrong_key_sites`` trust a different public key (they must refuse the bundle),
    ``raise_sites`` crash in every task, ``slow_sites`` stall ``slow_seconds`` (default: past the
    encode timeout) before each task, ``kill_sites`` end their worker process.
    """

    sites: int = 3
    dataset: str = "paper-synthetic"
    data_path: str | None = None
    data: str | None = None
    label: str | None = None
    sensitive: list[str] = field(default_factory=list)
    features: list[str] | None = None
    categorical: list[str] = field(default_factory=list)
    partition: str = "iid"
    mode: str = "release"
    lam: float = 1.0
    shaper: str = "infoshape"
    schedule: str = "alternating"
    shaper_params: dict[str, Any] = field(default_factory=dict)
    bundle: str | None = None
    trusted_key: str | None = None
    out: str | None = None
    seed: int = 0
    max_private_auc: float = 0.70
    attackers: list[str] | None = None
    federated_audit: bool = True
    fedavg_rounds: int = 5
    local_epochs: int = 3
    mi_steps: int = 500
    min_audit_rows: int = 20
    fractions: dict[str, float] | None = None
    discover_timeout: float = 120.0
    encode_timeout: float = 300.0
    audit_timeout: float = 600.0
    round_timeout: float = 300.0
    wrong_key_sites: list[int] = field(default_factory=list)
    raise_sites: list[int] = field(default_factory=list)
    slow_sites: list[int] = field(default_factory=list)
    kill_sites: list[int] = field(default_factory=list)
    slow_seconds: float | None = None
    num_cpus: int = 2
    verbose: bool = False

    def check(self) -> None:
        if self.sites < 1:
            raise ConfigError(f"--sites must be at least 1; got {self.sites}")
        if self.mode not in MODES:
            raise ConfigError(f"--mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if self.data and not (self.label and self.sensitive):
            raise ConfigError("--data needs --label and at least one --sensitive column")
        if self.bundle and not self.trusted_key:
            raise ConfigError("--bundle needs --trusted-key (the public key that signed it)")
        if self.num_cpus < 1:
            raise ConfigError(f"num_cpus must be at least 1; got {self.num_cpus}")
        for name in ("wrong_key_sites", "raise_sites", "slow_sites", "kill_sites"):
            bad = [i for i in getattr(self, name) if not 0 <= int(i) < self.sites]
            if bad:
                raise ConfigError(
                    f"{name} names hospitals {bad}; hospitals are numbered 0..{self.sites - 1}"
                )

    def faults(self) -> dict[int, str]:
        """partition id → fault injected by the simulation wrapper."""
        out: dict[int, str] = {}
        for fault, sites in (("raise", self.raise_sites), ("slow", self.slow_sites),
                             ("kill", self.kill_sites)):
            for i in sites:
                out[int(i)] = fault
        return out


# ---------------------------------------------------------------------------------------------
# Wrappers that give the apps what a deployment would
# ---------------------------------------------------------------------------------------------
class StoppableGrid(Grid):
    """A Grid that refuses further use once ``stop`` is set.

    If Flower's simulation runtime dies (Ray fails to start, say), ``run_simulation`` raises in
    the main thread while the ServerApp thread would keep waiting for replies until its
    timeouts; setting ``stop`` makes its next pull raise, so the run ends at once.
    """

    def __init__(self, grid: Grid, stop: threading.Event) -> None:
        self._grid = grid
        self._stop = stop

    def _check(self) -> None:
        if self._stop.is_set():
            raise RunError("the simulation runtime stopped; abandoning the run")

    def set_run(self, run: Any) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Any:
        return self._grid.run

    def create_message(self, content: Any, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:
        return self._grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Any:
        self._check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Any) -> Any:
        self._check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Any) -> Any:
        self._check()
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> Any:
        self._check()
        return self._grid.send_and_receive(messages, timeout=timeout)


def configured_server_app(
    run_config: dict[str, Any], stop: threading.Event | None = None
) -> ServerApp:
    """The coordinator's ServerApp, called with a Context that carries ``run_config``
    (a Context's run_config cannot be changed in place; a new Context is built)."""
    from server.app import main as server_main

    wrapper = ServerApp()
    stop_event = stop or threading.Event()

    @wrapper.main()
    def _main(grid: Grid, context: Context) -> None:
        server_main(StoppableGrid(grid, stop_event), Context(
            run_id=context.run_id,
            node_id=context.node_id,
            node_config=context.node_config,
            state=context.state,
            run_config=dict(run_config),
        ))

    return wrapper


class SimulatedClientApp(ClientApp):
    """``client.app:app`` with each partition's deployment ``node_config`` (and test faults).

    Ray ships this object to its worker processes (cloudpickle), so it holds only plain data;
    the real ClientApp is imported inside the worker.
    """

    def __init__(
        self,
        node_configs: list[dict[str, Any]],
        faults: dict[int, str] | None = None,
        slow_seconds: float = 0.0,
        marker_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.node_configs = [dict(c) for c in node_configs]
        self.faults = dict(faults or {})
        self.slow_seconds = float(slow_seconds)
        self.marker_dir = marker_dir

    def __call__(self, message: Message, context: Context) -> Message:
        from client.app import app as client_app
        from client.protocol import DISCOVER

        partition = int(context.node_config["partition-id"])
        fault = self.faults.get(partition)
        if fault and message.metadata.message_type != DISCOVER:
            if fault == "raise":
                raise RuntimeError(f"simulated crash of partition {partition}")
            if fault == "slow":
                time.sleep(self.slow_seconds)
            if fault == "kill":
                self._kill(partition)
        site_context = Context(
            run_id=context.run_id,
            node_id=context.node_id,
            node_config=dict(self.node_configs[partition]),
            state=context.state,  # same object: what the app stores stays with the node
            run_config=context.run_config,
        )
        return client_app(message, site_context)

    def _kill(self, partition: int) -> None:
        """The site's worker process dies mid-task (``os._exit``), as a killed site would.

        Ray restarts the worker (see the backend config) and the coordinator re-sends the task
        the runtime lost; the re-sent task finds the marker and reports the site dead instead
        of running it again, so the site is recorded as failed and the others are unaffected.
        """
        marker = Path(self.marker_dir or tempfile.gettempdir()) / f"killed-{partition}"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("killed\n")
            os._exit(17)
        raise RuntimeError(
            f"the worker process of partition {partition} was killed mid-task (simulated kill)"
        )


# ---------------------------------------------------------------------------------------------
# The world: each role's rows in its own file, keys, per-site trust state
# ---------------------------------------------------------------------------------------------
@dataclass
class World:
    root: Path
    plan: DataPlan
    spec_json: str
    run_config: dict[str, Any]
    node_configs: list[dict[str, Any]]


def load_frame(options: SimulateOptions) -> tuple[Any, TableSpec, str]:
    """The table to simulate on, its spec and a name for it."""
    if options.data:
        spec = TableSpec(
            label=str(options.label),
            sensitive=list(options.sensitive),
            features=options.features,
            categorical=list(options.categorical),
        )
        return load_table(options.data, spec), spec, str(options.data)
    dataset = load_dataset(options.dataset, path=options.data_path, seed=options.seed)
    return dataset.frame, dataset.spec, dataset.name


def build_world(options: SimulateOptions, run_dir: Path, root: Path) -> World:
    """Write every role's table, make keys, and build the run and node configurations."""
    frame, spec, source = load_frame(options)
    plan = plan_splits(frame, spec, n_sites=options.sites, partition=options.partition,
                       seed=options.seed, fractions=options.fractions)
    spec_json = json.dumps(spec.to_dict())
    tables = root / "tables"
    tables.mkdir(parents=True)
    paths = {"public": tables / "public.parquet", "test": tables / "test.parquet",
             AUDITOR_NAME: tables / f"{AUDITOR_NAME}.parquet"}
    plan.public.to_parquet(paths["public"], index=False)
    plan.test.to_parquet(paths["test"], index=False)
    plan.audit.to_parquet(paths[AUDITOR_NAME], index=False)
    for i, site in enumerate(plan.sites):
        paths[hospital_name(i)] = tables / f"{hospital_name(i)}.parquet"
        site.to_parquet(paths[hospital_name(i)], index=False)

    signing_key = ""
    if options.bundle:
        trusted = str(Path(str(options.trusted_key)).resolve())
    else:
        pair = generate_keypair(root / "keys")
        signing_key, trusted = str(pair.private), str(pair.public)
        (run_dir / KEYS_DIR).mkdir(parents=True, exist_ok=True)
        shutil.copy2(pair.public, run_dir / KEYS_DIR / pair.public.name)
    wrong = str(generate_keypair(root / "wrong-keys").public) if options.wrong_key_sites else ""

    def node(name: str, role: str, key: str) -> dict[str, Any]:
        return {
            "role": role,
            "site-name": name,
            "data-path": str(paths[name]),
            "table-spec": spec_json,
            "trusted-key": key,
            "state-dir": str(root / "state" / name),
            "min-audit-rows": options.min_audit_rows,
        }

    wrong_sites = {int(i) for i in options.wrong_key_sites}
    node_configs = [
        node(hospital_name(i), "hospital", wrong if i in wrong_sites else trusted)
        for i in range(options.sites)
    ]
    node_configs.append(node(AUDITOR_NAME, "audit", trusted))

    config = RunConfig(
        dataset=options.dataset if not options.data else "",
        num_sites=options.sites,
        lam=options.lam,
        mode=options.mode,
        max_private_auc=options.max_private_auc,
        seed=options.seed,
        shaper=options.shaper,
        schedule=options.schedule,
        shaper_params=json.dumps(options.shaper_params) if options.shaper_params else "",
        out_dir=str(run_dir),
        run_id=run_dir.name,
        public_data=str(paths["public"]),
        test_data=str(paths["test"]),
        table_spec=spec_json,
        partition=options.partition,
        bundle=str(Path(options.bundle).resolve()) if options.bundle else "",
        trusted_key=trusted if options.bundle else "",
        signing_key=signing_key,
        attackers=",".join(options.attackers or []),
        mi_steps=options.mi_steps,
        federated_audit=options.federated_audit,
        fedavg_rounds=options.fedavg_rounds,
        local_epochs=options.local_epochs,
        wait_nodes_timeout=5.0,
        discover_timeout=options.discover_timeout,
        encode_timeout=options.encode_timeout,
        audit_timeout=options.audit_timeout,
        round_timeout=options.round_timeout,
    )
    run_config = config.to_run_config()
    run_config["dataset"] = options.dataset if not options.data else source
    return World(root, plan, spec_json, run_config, node_configs)


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------
@contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Keep Flower's INFO chatter, its deprecation warning for ``run_simulation`` and the remote
    tracebacks of failing sites off the console unless asked for: every site's failure is in
    summary.json with its reason, and a failure of the coordinator itself is raised."""
    logger = logging.getLogger("flwr")
    level = logger.level
    if not verbose:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_simulate(options: SimulateOptions) -> dict[str, Any]:
    """Run one simulated multi-site release; return the summary (also in RUNDIR/summary.json).

    The returned summary has ``run_dir`` set. A gated run returns normally with
    ``summary["gate"]["passed"] is False`` (the CLI exits with code 3, see :func:`exit_code`);
    a coordinator failure raises.
    """
    from flwr.simulation import run_simulation

    options.check()
    # Ray warns on every start that it will stop overriding accelerator env vars; we ask for no
    # GPU, so opt in to the future behaviour (and silence it) unless the user decided otherwise.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    # Ray's raylet gives its (Python) agents ~15 s to start; on a busy 2-core machine we saw it
    # give up ("Timed out waiting for file …metrics_agent_port…") and the run die. Be patient.
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    started = time.perf_counter()
    target = Path(options.out or default_run_dir())
    fresh = not target.exists()
    run_dir = prepare_run_dir(target)
    root = Path(tempfile.mkdtemp(prefix="infoshape-sim-"))
    try:
        try:
            world = build_world(options, run_dir, root)
        except BaseException:
            # Bad input (a missing dataset path, an unknown column…) is found here, before any
            # site runs: leave no run dir behind that looks like a run.
            if fresh:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        faults = options.faults()
        slow = options.slow_seconds
        if slow is None:
            slow = options.encode_timeout + 5.0
        backend_config: dict[str, Any] = {
            # max_restarts goes through to Ray's actor options. A simulated site whose process
            # dies takes its Ray actor with it, and Flower's pool keeps the dead actor: every
            # later task scheduled on it — other sites' — would fail too. A restarted actor
            # (plus the coordinator re-sending tasks the runtime lost, server/exchange.py)
            # confines the loss to the site that died.
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0, "max_restarts": -1},
            "init_args": {
                "num_cpus": options.num_cpus,
                "include_dashboard": False,
                "log_to_driver": bool(options.verbose),
                "logging_level": "INFO" if options.verbose else "ERROR",
            },
        }
        stop = threading.Event()
        with _quiet(options.verbose):
            try:
                run_simulation(
                    server_app=configured_server_app(world.run_config, stop),
                    client_app=SimulatedClientApp(world.node_configs, faults, slow,
                                                  marker_dir=str(root / "faults")),
                    num_supernodes=options.sites + 1,
                    backend_config=backend_config,  # type: ignore[arg-type]
                    verbose_logging=options.verbose,
                )
            except RuntimeError as exc:
                # Flower's own wrapper when the runtime (not the ServerApp) broke; anything
                # else — an InfoShapeError from the coordinator, or a bug — propagates as is.
                if not str(exc).startswith(RUNTIME_FAILURES):
                    raise
                cause = exc.__cause__ or exc
                raise RunError(
                    f"Flower's simulation runtime failed ({type(cause).__name__}: {cause}); "
                    f"partial results, if any, are in {run_dir}"
                ) from exc
            finally:
                stop.set()  # a ServerApp thread still waiting for replies gives up at once
        summary = read_summary(run_dir)
        summary["simulation"] = {
            "nodes": options.sites + 1,
            "hospitals": options.sites,
            "partition": options.partition,
            "splits": world.plan.describe(),
            "faults": {hospital_name(i): f for i, f in faults.items()}
            | {hospital_name(int(i)): "wrong-key" for i in options.wrong_key_sites},
            "backend": "ray",
            "num_cpus": options.num_cpus,
        }
        summary.setdefault("timings", {})["simulation_total_s"] = round(
            time.perf_counter() - started, 3)
        write_summary(run_dir, summary)
        summary["run_dir"] = str(run_dir)
        summary["report"] = str(_write_run_report(run_dir))
        return summary
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _write_run_report(run_dir: Path) -> Path:
    """``report.html`` + ``figures/`` for a finished run (released or gated), from its
    summary.json alone: no extra audit, nothing refitted. summary.json is already written, so a
    failure here loses no result; it is raised as a :class:`RunError` naming the retry."""
    from shared.report import write_report

    try:
        return write_report(run_dir)
    except Exception as exc:
        raise RunError(
            f"the run finished and wrote {run_dir / 'summary.json'}, but its report could not "
            f"be rendered ({type(exc).__name__}: {exc}); retry with `infoshape report {run_dir}`"
        ) from exc


def exit_code(summary: dict[str, Any]) -> int:
    """0 for a published (or federated, passing) run, 3 when the gate refused publication."""
    from shared.errors import GatedError

    return 0 if summary.get("gate", {}).get("passed") else GatedError.exit_code


__all__ = [
    "AUDITOR_NAME",
    "FAULTS",
    "SimulateOptions",
    "SimulatedClientApp",
    "build_world",
    "configured_server_app",
    "exit_code",
    "hospital_name",
    "run_simulate",
]
