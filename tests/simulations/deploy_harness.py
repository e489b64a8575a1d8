"""A real Flower federation on 127.0.0.1 for tests: 1 SuperLink + N SuperNodes as processes.

Everything goes through :mod:`simulations.deploy` (the code users run), with TLS, SuperNode
authentication and runtime dependency installation off, exactly as ``docs/deployment.md`` says.
Ports are picked at runtime, ``FLWR_HOME`` lives in the test's temp dir, and every process the
harness starts is recorded by PID and stopped in :meth:`Federation.close` (also the descendants
Flower detaches into their own sessions), so a failing test leaks nothing.

A tiny *probe* Flower app (written into the temp dir) proves the plumbing without the real
InfoShape apps: its ServerApp asks every node for its ``node_config`` and writes what came back.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from simulations import deploy

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Started:
    """One process the harness started: what, its handle, and where its output goes."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    command: list[str]
    info: dict[str, Any] = field(default_factory=dict)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Federation:
    """Owns the PKI, the processes and the ``flwr`` CLI state of one test federation."""

    def __init__(self, root: Path, *, connection: str = "e2e") -> None:
        self.root = root
        self.connection = connection
        self.flwr_home = root / "flwr_home"
        self.logs = root / "logs"
        self.keys = root / "keys"
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.flwr_home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PYTHONUNBUFFERED": "1",
        }
        self.started: list[Started] = []
        self.seen_pids: set[int] = set()
        self.certs: dict[str, Any] = {}
        self.address = ""
        self.node_ids: dict[str, int] = {}
        self.timings: dict[str, float] = {}
        self._keys: dict[str, dict[str, Any]] = {}
        self._run_started = time.monotonic()

    # -- set-up ------------------------------------------------------------------------------

    def _env_for(self, name: str) -> dict[str, str]:
        """Each Flower process gets its own FLWR_HOME (apps unpack there), as on real hosts."""
        home = self.root / "homes" / name
        home.mkdir(parents=True, exist_ok=True)
        return {**self.env, "FLWR_HOME": str(home)}

    def start_superlink(self, *, timeout: float = 60.0) -> str:
        """Certificates, the SuperLink, its health, and the CLI connection; returns HOST:PORT."""
        t0 = time.monotonic()
        self.certs = deploy.make_certs(self.root / "certs", ["127.0.0.1", "localhost"])
        port = deploy.free_port()
        info = deploy.start_superlink(
            certs_dir=self.root / "certs",
            host="127.0.0.1",
            port=port,
            log_path=self.logs / "superlink.log",
            env=self._env_for("superlink"),
            cwd=self.root,
        )
        self._record("superlink", info)
        self.address = f"127.0.0.1:{port}"
        deploy.wait_for_superlink(
            self.address, self.certs["ca_cert"], timeout=timeout, proc=info["process"]
        )
        deploy.write_flwr_connection(
            self.flwr_home, self.connection, self.address, self.certs["ca_cert"]
        )
        self.timings["superlink_healthy_s"] = time.monotonic() - t0
        return self.address

    def node_key(self, name: str, *, register: bool = True) -> dict[str, Any]:
        """A P-384 key pair for ``name``; registered on the SuperLink unless told otherwise."""
        key = deploy.make_node_key(self.keys, name)
        if register:
            key["node_id"] = deploy.register_node(
                key["public_key"], self.connection, name, flwr_home=self.flwr_home, env=self.env
            )
            self.node_ids[name] = key["node_id"]
        return key

    def register_many(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """Key pairs for ``names``, registered concurrently (each ``flwr`` call takes ~2 s)."""
        from concurrent.futures import ThreadPoolExecutor

        keys = {n: deploy.make_node_key(self.keys, n) for n in names}

        def _register(name: str) -> int:
            return deploy.register_node(
                keys[name]["public_key"],
                self.connection,
                name,
                flwr_home=self.flwr_home,
                env=self.env,
            )

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
            for name, node_id in zip(names, pool.map(_register, names), strict=True):
                keys[name]["node_id"] = node_id
                self.node_ids[name] = node_id
        self._keys.update(keys)
        self.timings["register_s"] = time.monotonic() - t0
        return keys

    def start_site(
        self,
        name: str,
        role: str,
        data: Path,
        trusted_key: Path,
        *,
        register: bool = True,
        table_spec: str | None = None,
        extra_node_config: Mapping[str, str | int | float | bool] | None = None,
        validate_data: bool = True,
    ) -> Started:
        """One SuperNode with its own key, state dir and ClientAppIo port.

        A key already made by :meth:`register_many` is reused; otherwise one is made here (and
        registered unless ``register=False``, which is how a rogue site is simulated).
        """
        key = self._keys.get(name) or self.node_key(name, register=register)
        info = deploy.start_site(
            superlink=self.address,
            role=role,
            data=data,
            trusted_key=trusted_key,
            state_dir=self.root / "state" / name,
            site_name=name,
            port=deploy.free_port(),
            ca=self.certs["ca_cert"],
            auth_key=key["private_key"],
            table_spec=table_spec,
            extra_node_config=extra_node_config,
            validate_data=validate_data,
            log_path=self.logs / f"{name}.log",
            env=self._env_for(name),
            cwd=self.root,
        )
        info["node_id"] = key.get("node_id")
        return self._record(name, info)

    def _record(self, name: str, info: dict[str, Any]) -> Started:
        proc = info["process"]
        started = Started(
            name=name,
            process=proc,
            log=Path(info["log"]),
            command=list(info["command"]),
            info={k: v for k, v in info.items() if k != "process"},
        )
        self.started.append(started)
        self.seen_pids.add(proc.pid)
        return started

    # -- observing -----------------------------------------------------------------------------

    def submit(self, app_dir: Path, run_config: Mapping[str, Any] | None = None) -> int:
        t0 = time.monotonic()
        run_id = deploy.submit_run(
            app_dir, self.connection, run_config=run_config, flwr_home=self.flwr_home, env=self.env
        )
        self.timings["submit_s"] = time.monotonic() - t0
        self._run_started = time.monotonic()
        return run_id

    def wait(
        self,
        run_id: int,
        *,
        timeout: float = 150.0,
        done_marker: Path | None = None,
        slow_poll_s: float = 10.0,
    ) -> str:
        """Poll ``flwr list`` until ``finished:*``, noting the descendants Flower starts.

        Each ``flwr list`` is a Python start-up (~2 s of CPU) competing with the run on a small
        machine, so while ``done_marker`` (a file the ServerApp writes at its end, e.g. its
        ``summary.json``) is absent the CLI is asked only every ``slow_poll_s`` seconds (a
        ServerApp that dies before writing it is still noticed), then every second.
        """
        deadline = time.monotonic() + timeout
        status = "unknown"
        next_ask = time.monotonic()
        while time.monotonic() < deadline:
            self.note_descendants()
            marker_seen = done_marker is None or done_marker.exists()
            if marker_seen or time.monotonic() >= next_ask:
                status = deploy.run_status(
                    run_id, self.connection, flwr_home=self.flwr_home, env=self.env
                )
                if status.startswith("finished:"):
                    self.timings["run_s"] = time.monotonic() - self._run_started
                    return status
                next_ask = time.monotonic() + slow_poll_s
            time.sleep(1.0 if marker_seen else 0.25)
        raise AssertionError(
            f"run {run_id} still {status!r} after {timeout:.0f} s\n{self.logs_tail()}"
        )

    def run_log(self, run_id: int) -> str:
        """What the ServerApp printed (``flwr log ID --show``), for assertions and diagnosis."""
        res = subprocess.run(
            [deploy.find_tool("flwr"), "log", str(run_id), self.connection, "--show"],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        return res.stdout + res.stderr

    def note_descendants(self) -> None:
        for s in self.started:
            self.seen_pids.update(deploy.descendants(s.process.pid))

    def logs_tail(self, lines: int = 25) -> str:
        return "\n".join(
            f"--- {s.name} ({s.log})\n{tail(s.log_text(), lines)}" for s in self.started
        )

    # -- tear-down -----------------------------------------------------------------------------

    def close(self) -> list[int]:
        """Stop every started process (SuperNodes first), then report any PID still alive."""
        self.note_descendants()
        deploy.stop_processes([s.process for s in self.started], grace_s=8.0)
        leaked = [pid for pid in sorted(self.seen_pids) if deploy.is_alive(pid)]
        for pid in leaked:  # belt and braces: the assertion reports them, nothing stays behind
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        return leaked


@contextmanager
def federation(root: Path, *, connection: str = "e2e") -> Iterator[Federation]:
    """A :class:`Federation` whose processes are stopped by PID however the block ends."""
    with _one_federation_at_a_time():
        yield from _federation(root, connection)


@contextmanager
def _one_federation_at_a_time() -> Iterator[None]:
    """Serialise federations across pytest-xdist workers on one machine.

    Each federation is ~8 Python processes whose per-message ClientApp start-ups are CPU-bound;
    two at once on a 2-core runner slow each other past their own timeouts.
    """
    import fcntl
    import tempfile

    lock_path = Path(tempfile.gettempdir()) / "infoshape-deploy-e2e.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _federation(root: Path, connection: str) -> Iterator[Federation]:
    fed = Federation(root, connection=connection)
    try:
        yield fed
    except BaseException:
        leaked = fed.close()  # stop everything, but let the original failure be the report
        if leaked:
            print(f"processes still alive after stop (now killed): {leaked}")
        raise
    leaked = fed.close()
    if leaked:
        raise AssertionError(f"processes still alive after stop (now killed): {leaked}")


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


# ----------------------------------------------------------------------------------------------
# site fixtures that do not depend on the real apps
# ----------------------------------------------------------------------------------------------


def write_trusted_key(path: Path) -> Path:
    """An Ed25519 public key (PEM) standing in for the coordinator's bundle-signing key."""
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def write_table(path: Path, rows: int = 20) -> Path:
    """A small CSV with features, a public label and a sensitive column."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["x0,x1,label,sensitive"]
    lines += [f"{i * 0.1:.1f},{(rows - i) * 0.2:.1f},{i % 2},{(i // 2) % 2}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------------------------
# the probe app
# ----------------------------------------------------------------------------------------------

_PROBE_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "deploy-probe"
version = "0.1.0"
dependencies = []

[tool.flwr.app]
publisher = "infoshape"

[tool.flwr.app.components]
serverapp = "probe_server:app"
clientapp = "probe_client:app"

[tool.flwr.app.config]
out-dir = ""
num-nodes = 1
reply-timeout = 60.0
"""

_PROBE_SERVER = '''\
"""Probe ServerApp: ask every node for its node_config, write what came back."""
import json
import os
import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    out = Path(str(context.run_config["out-dir"]))
    timeout = float(context.run_config["reply-timeout"])
    expected = int(context.run_config["num-nodes"])
    t0 = time.monotonic()
    node_ids = []
    while time.monotonic() - t0 < timeout and len(node_ids) < expected:
        node_ids = list(grid.get_node_ids())
        time.sleep(0.5)
    msgs = [
        Message(RecordDict({"q": ConfigRecord({"ask": "node-config"})}), dst_node_id=n,
                message_type="query")
        for n in node_ids
    ]
    replies = list(grid.send_and_receive(msgs, timeout=timeout))
    sites = {}
    for reply in replies:
        src = reply.metadata.src_node_id
        if reply.has_content():
            sites[str(src)] = dict(reply.content["node"])
        else:
            sites[str(src)] = {"error": reply.error.code, "reason": reply.error.reason}
    out.mkdir(parents=True, exist_ok=True)
    summary = {"node_ids": node_ids, "sites": sites, "cwd": os.getcwd()}
    (out / "summary.json").write_text(json.dumps(summary))
    print(f"probe wrote {out / 'summary.json'}")
'''

_PROBE_CLIENT = '''\
"""Probe ClientApp: reply with this node's node_config."""
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    node = {k: v for k, v in context.node_config.items() if isinstance(v, str | int | float | bool)}
    return Message(RecordDict({"node": ConfigRecord(node)}), reply_to=msg)
'''


def write_probe_app(root: Path) -> Path:
    """Write the probe app into ``root/deploy-probe`` (the FAB is built from that directory)."""
    app = root / "deploy-probe"
    app.mkdir(parents=True, exist_ok=True)
    (app / "pyproject.toml").write_text(_PROBE_PYPROJECT)
    (app / "probe_server.py").write_text(_PROBE_SERVER)
    (app / "probe_client.py").write_text(_PROBE_CLIENT)
    return app


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------------------------
# the real InfoShape app
# ----------------------------------------------------------------------------------------------


def app_under_test() -> Path:
    """The Flower app the real-app tests submit: this repository (``INFOSHAPE_E2E_APP`` overrides
    it, e.g. to try a staged copy)."""
    return Path(os.environ.get("INFOSHAPE_E2E_APP", str(REPO_ROOT))).resolve()


def missing_run_config_keys(app_dir: Path, keys: list[str]) -> list[str]:
    """Keys ``flwr run --run-config`` would be refused for (not in ``[tool.flwr.app.config]``)."""
    declared = deploy.declared_run_config(app_dir)
    return [k for k in keys if k not in declared]


@dataclass
class SiteTables:
    """Each institution's own file, cut from one dataset the way the coordinator cuts it."""

    spec_json: str
    hospitals: dict[str, Path]
    auditor: Path
    rows: dict[str, int]


def write_site_tables(
    root: Path, n_hospitals: int, *, dataset: str = "paper-synthetic", seed: int = 0
) -> SiteTables:
    """Hospital and auditor tables disjoint from the coordinator's public and test rows.

    The coordinator of a deployment with a built-in dataset takes its public and test rows from
    ``server.dataplan.plan_splits`` with the run's seed and site count; the sites here get the
    other rows of that same plan, so no row is in two roles.
    """
    from server.dataplan import plan_splits
    from shared.data import load_dataset

    ds = load_dataset(dataset, seed=seed)
    plan = plan_splits(ds.frame, ds.spec, n_sites=n_hospitals, partition="iid", seed=seed)
    root.mkdir(parents=True, exist_ok=True)
    hospitals: dict[str, Path] = {}
    rows: dict[str, int] = {}
    for i, frame in enumerate(plan.sites):
        name = f"hospital-{i}"
        hospitals[name] = root / f"{name}.csv"
        frame.to_csv(hospitals[name], index=False)
        rows[name] = len(frame)
    auditor = root / "auditor.csv"
    plan.audit.to_csv(auditor, index=False)
    rows["auditor"] = len(plan.audit)
    return SiteTables(json.dumps(ds.spec.to_dict()), hospitals, auditor, rows)


def clientapp_pids(supernode_pid: int) -> list[int]:
    """The ``flwr-clientapp`` processes a SuperNode has running now (one per message)."""
    found = []
    for pid in deploy.descendants(supernode_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"flwr-clientapp" in cmdline:
            found.append(pid)
    return found
