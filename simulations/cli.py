"""The ``infoshape`` command line: thin glue over :mod:`shared`, ``simulations.simulate`` and
``simulations.deploy``.

Conventions every command follows:

- ``--json`` prints the result as one JSON document on stdout (an error as
  ``{"error": {"type", "message", "exit_code"}}``); ``--quiet`` prints nothing but errors;
  ``--debug`` adds the traceback to an error.
- Exit codes: 0 ok, 1 error, 2 usage (a bad or missing option), 3 release gated by leakage.
- An error is one line on stderr, ``ErrorType: message``. Only :class:`shared.errors.InfoShapeError`
  (and the command-line parser's usage errors) are reported that way: anything else is a bug and
  keeps its traceback.
- Progress bars (rich) appear only on a terminal and never with ``--quiet``.

Heavy modules (torch, pandas, flwr) are imported inside the commands that need them, so
``infoshape keygen`` or ``infoshape --help`` start in well under a second.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import click
import typer

from shared.errors import ConfigError, GatedError, InfoShapeError, KeyFileError, RunError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["app", "main"]

F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(
    name="infoshape",
    help=(
        "InfoShape-FL: train a privacy-shaping encoder on public data, sign it, and release "
        "task data from several sites without a sensitive attribute."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
deploy_app = typer.Typer(
    help="Run a real federation: certificates, SuperNode keys, the SuperLink and each site.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(deploy_app, name="deploy")


class Schedule(enum.StrEnum):
    """Training schedules of the InfoShape encoder."""

    alternating = "alternating"
    paper = "paper"


class Mode(enum.StrEnum):
    """How ``simulate`` trains the downstream model."""

    release = "release"
    federated = "federated"


class Role(enum.StrEnum):
    """What a deployed SuperNode does."""

    hospital = "hospital"
    audit = "audit"


# ---------------------------------------------------------------------------------------------
# Options every command takes
# ---------------------------------------------------------------------------------------------
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the result as JSON on stdout (errors too).")
]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print nothing but errors; no progress bars.")
]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show the traceback of an error.")]
PassFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--passphrase-file",
        help="Read the signing key's passphrase from this file (first line).",
        show_default=False,
    ),
]
PassEnvOpt = Annotated[
    str | None,
    typer.Option(
        "--passphrase-env",
        metavar="VAR",
        help="Read the signing key's passphrase from this environment variable.",
        show_default=False,
    ),
]
TrustedKeyOpt = Annotated[
    list[Path],
    typer.Option(
        "--trusted-key",
        help="The coordinator's signing.pub (repeat to trust several keys).",
        show_default=False,
    ),
]
StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Directory remembering the highest bundle version accepted per key (rollback "
        "protection).",
        show_default=False,
    ),
]


# Options of the deploy commands that start a Flower process.
LogOpt = Annotated[
    Path | None, typer.Option("--log", help="Write Flower's output here.", show_default=False)
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Check the inputs, print the command, start nothing.")
]


# Options of the commands that read a table (train, simulate, frontier) and run attackers.
LabelOpt = Annotated[
    str | None, typer.Option("--label", help="Public label column.", show_default=False)
]
SensitiveOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--sensitive", help="Sensitive column to hide (repeat for several).", show_default=False
    ),
]
FeaturesOpt = Annotated[
    str | None,
    typer.Option(
        "--features",
        help="Comma-separated feature columns (default: every other column).",
        show_default=False,
    ),
]
CategoricalOpt = Annotated[
    str | None,
    typer.Option(
        "--categorical", help="Comma-separated categorical (one-hot) columns.", show_default=False
    ),
]
DataPathOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-path", help="Directory of the dataset's files (adult).", show_default=False
    ),
]
AttackersOpt = Annotated[
    str | None,
    typer.Option(
        "--attackers",
        help="Comma-separated attacker names (default: the whole suite).",
        show_default=False,
    ),
]


@dataclass
class Output:
    """Where a command's result goes, following ``--json`` / ``--quiet``."""

    as_json: bool = False
    quiet: bool = False

    @property
    def progress(self) -> bool:
        """Progress bars: only on a terminal, and never with --quiet or --json."""
        return not self.quiet and not self.as_json and sys.stderr.isatty()

    def result(self, data: dict[str, Any], render: Callable[[Console], None] | None) -> None:
        """Print ``data`` as JSON, or let ``render`` print it for people (unless --quiet)."""
        if self.as_json:
            sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
            sys.stdout.flush()
        elif not self.quiet and render is not None:
            render(_console())


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _error_line(exc: BaseException) -> str:
    message = " ".join(str(exc).splitlines()).strip() or "(no message)"
    return f"{type(exc).__name__}: {message}"


def _report_error(exc: InfoShapeError, as_json: bool) -> None:
    """The one stderr line (and, with --json, the same error as JSON on stdout)."""
    sys.stderr.write(_error_line(exc) + "\n")
    sys.stderr.flush()
    if as_json:
        error = {"type": type(exc).__name__, "message": str(exc), "exit_code": exc.exit_code}
        sys.stdout.write(json.dumps({"error": error}) + "\n")
        sys.stdout.flush()


def handles_errors(fn: F) -> F:
    """Turn an :class:`InfoShapeError` raised by a command into its line and exit code."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except InfoShapeError as exc:
            if kwargs.get("debug"):
                traceback.print_exc(file=sys.stderr)
            _report_error(exc, bool(kwargs.get("json_out")))
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def split_list(values: str | list[str] | None) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` → ``["a", "b", "c"]`` (blank items dropped)."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def read_passphrase(passphrase_file: Path | None, passphrase_env: str | None) -> str | None:
    """The passphrase from ``--passphrase-file`` or ``--passphrase-env`` (never from argv)."""
    if passphrase_file is not None and passphrase_env is not None:
        raise ConfigError("give --passphrase-file or --passphrase-env, not both")
    if passphrase_file is not None:
        path = passphrase_file.expanduser()
        if path.is_dir():
            raise KeyFileError(f"passphrase file {path} is a directory; pass a file")
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KeyFileError(f"passphrase file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyFileError(f"cannot read passphrase file {path}: {exc}") from None
        first = text.splitlines()[0] if text.splitlines() else ""
        if not first:
            raise KeyFileError(f"passphrase file {path} is empty; put the passphrase on line 1")
        return first
    if passphrase_env is not None:
        value = os.environ.get(passphrase_env)
        if value is None:
            raise ConfigError(
                f"environment variable {passphrase_env} (from --passphrase-env) is not set"
            )
        if not value:
            raise ConfigError(f"environment variable {passphrase_env} is empty")
        return value
    return None


def _check_lambda(lam: float | None) -> None:
    if lam is not None and (not math.isfinite(lam) or lam < 0):
        raise ConfigError(f"--lambda must be a finite number >= 0; got {lam}")


def _check_bundle_out(out: Path) -> None:
    """Refuse an unusable --out before minutes of training, not after."""
    from shared.bundle import BUNDLE_FILES

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory; choose a bundle directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in BUNDLE_FILES)
        if foreign:
            raise ConfigError(
                f"--out {out} holds files that are not part of a bundle "
                f"({', '.join(foreign[:5])}); choose an empty or new directory"
            )


@contextmanager
def _progress_bar(
    out: Output, description: str
) -> Iterator[Callable[[int, int | None], None] | None]:
    """A rich progress callback ``(done, total)`` on a terminal, else ``None``."""
    if not out.progress:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=True,
    )
    task = bar.add_task(description, total=None)

    def update(done: int, total: int | None) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return "-" if value is None else str(value)


def _kv_table(title: str, rows: list[tuple[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, _fmt(value))
    return table


# ---------------------------------------------------------------------------------------------
# Top level
# ---------------------------------------------------------------------------------------------
def _version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"infoshape-fl {version('infoshape-fl')}")
        except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
            typer.echo("infoshape-fl (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Show version."),
    ] = False,
) -> None:
    """InfoShape-FL: train, sign, verify and apply privacy-shaping encoders; simulate and deploy
    multi-site releases on Flower.

    Example: infoshape keygen --out keys/ && infoshape train --dataset paper-synthetic
    --key keys/signing.key --out bundle/
    """


# ---------------------------------------------------------------------------------------------
# keygen
# ---------------------------------------------------------------------------------------------
@app.command(epilog="Example: infoshape keygen --out keys/ --passphrase-env INFOSHAPE_PASSPHRASE")
@handles_errors
def keygen(
    out: Annotated[
        Path, typer.Option("--out", help="Directory for signing.key (0600) and signing.pub.")
    ],
    passphrase_file: PassFileOpt = None,
    passphrase_env: PassEnvOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Create an Ed25519 signing key pair for encoder bundles (never overwrites a key)."""
    from shared.bundle import generate_keypair

    passphrase = read_passphrase(passphrase_file, passphrase_env)
    pair = generate_keypair(out.expanduser(), passphrase)
    result = {
        "private_key": str(pair.private),
        "public_key": str(pair.public),
        "key_id": pair.key_id,
        "encrypted": pair.encrypted,
    }

    def render(console: Console) -> None:
        console.print(f"private key  {pair.private}  (mode 0600, keep it secret)")
        console.print(f"public key   {pair.public}  (give it to every site as --trusted-key)")
        console.print(f"key id       {pair.key_id}")

    Output(json_out, quiet).result(result, render)


# ---------------------------------------------------------------------------------------------
# train
# ---------------------------------------------------------------------------------------------
@dataclass
class _Table:
    frame: Any
    spec: Any
    source: str


def _training_table(
    *,
    data: Path | None,
    label: str | None,
    sensitive: list[str],
    features: str | None,
    categorical: str | None,
    dataset: str | None,
    data_path: Path | None,
    seed: int,
) -> Callable[[], _Table]:
    """Check the table options now; return a loader to call once the key and --out are fine."""
    from shared.data import DATASETS, TableSpec, load_dataset, load_table

    if data is None and dataset is None:
        raise ConfigError(
            "give --data TABLE with --label and --sensitive, or --dataset NAME "
            f"({', '.join(DATASETS)})"
        )
    if data is not None and dataset is not None:
        raise ConfigError("give either --data or --dataset, not both")
    if dataset is not None:
        given = [
            flag
            for flag, value in (
                ("--label", label),
                ("--sensitive", sensitive),
                ("--features", features),
                ("--categorical", categorical),
            )
            if value
        ]
        if given:
            raise ConfigError(
                f"--dataset {dataset} comes with its own table spec; drop {', '.join(given)} "
                "(or pass your table with --data)"
            )
        if dataset not in DATASETS:
            raise ConfigError(f"unknown dataset {dataset!r}; valid names: {', '.join(DATASETS)}")

        def load_builtin() -> _Table:
            loaded = load_dataset(dataset, path=data_path, seed=seed)
            return _Table(loaded.frame, loaded.spec, f"dataset {dataset}")

        return load_builtin
    assert data is not None
    if data_path is not None:
        raise ConfigError("--data-path goes with --dataset (e.g. adult); with --data drop it")
    if not label:
        raise ConfigError(f"--data {data} needs --label COL (the public task label)")
    if not sensitive:
        raise ConfigError(f"--data {data} needs --sensitive COL (the attribute to hide)")
    feature_list = split_list(features) or None
    spec = TableSpec(
        label=label,
        sensitive=sensitive,
        features=feature_list,
        categorical=split_list(categorical),
    )

    def load_file() -> _Table:
        return _Table(load_table(data, spec), spec, f"data file '{data}'")

    return load_file


def _shaper_params_used(fitted: Any) -> dict[str, Any]:
    """The parameters the fitted shaper ran with, defaults included (as stored in the bundle)."""
    config, _ = fitted.shaper.get_state()
    params = dict(config.get("params") or {})
    params.update({k: v for k, v in fitted.params.items() if k not in params and k != "progress"})
    return params


def _train_audit(fitted: Any) -> dict[str, Any]:
    """The MI curve's end values, read from the training history (no extra computation)."""
    metrics = fitted.shaper.training_metrics() or {}
    history = metrics.get("history") or {}
    out: dict[str, Any] = {
        "steps": metrics.get("steps"),
        "train_seconds": metrics.get("seconds"),
    }
    if history.get("mi_public"):
        out["mi_public_final"] = float(history["mi_public"][-1])
        out["label_entropy"] = metrics.get("label_entropy")
    if history.get("mi_sensitive"):
        last = history["mi_sensitive"][-1]
        names = fitted.schema.sensitive
        out["mi_sensitive_final"] = {n: float(v) for n, v in zip(names, last, strict=False)}
        entropies = metrics.get("sensitive_entropy") or []
        out["sensitive_entropy"] = {n: float(v) for n, v in zip(names, entropies, strict=False)}
    return out


@app.command(
    epilog="Example: infoshape train --dataset paper-synthetic --lambda 1 --key keys/signing.key "
    "--out bundle/   |   infoshape train --data public.csv --label y --sensitive s "
    "--categorical site,ward --key keys/signing.key --out bundle/ --version 2"
)
@handles_errors
def train(
    key: Annotated[Path, typer.Option("--key", help="The signing.key made by keygen.")],
    out: Annotated[Path, typer.Option("--out", help="Bundle directory to write (signed).")],
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Public table (.csv, .tsv, .parquet).", show_default=False),
    ] = None,
    label: LabelOpt = None,
    sensitive: SensitiveOpt = None,
    features: FeaturesOpt = None,
    categorical: CategoricalOpt = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Built-in dataset instead of --data: paper-synthetic, adult or digits.",
            show_default=False,
        ),
    ] = None,
    data_path: DataPathOpt = None,
    shaper: Annotated[str, typer.Option("--shaper", help="Shaper to train.")] = "infoshape",
    lam: Annotated[
        float | None,
        typer.Option("--lambda", help="Privacy weight λ (>= 0; default 1).", show_default=False),
    ] = None,
    schedule: Annotated[
        Schedule | None,
        typer.Option(
            "--schedule", help="Training schedule (default alternating).", show_default=False
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed (training and synthetic data).")] = 0,
    passphrase_file: PassFileOpt = None,
    passphrase_env: PassEnvOpt = None,
    version: Annotated[
        int, typer.Option("--version", min=1, help="Encoder version (raise it for each release).")
    ] = 1,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", min=1, hidden=True, help="Cap encoder steps.")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Train an encoder on a public table and write it as a signed bundle, then print its audit."""
    output = Output(json_out, quiet)
    _check_lambda(lam)
    load = _training_table(
        data=data,
        label=label,
        sensitive=split_list(sensitive),
        features=features,
        categorical=categorical,
        dataset=dataset,
        data_path=data_path,
        seed=seed,
    )
    from shared.bundle import load_private_key
    from shared.pipeline import bundle_from_fitted, fit_shaper, shaper_params

    params = {
        "lam": lam,
        "schedule": schedule.value if schedule is not None else None,
        "seed": seed,
        "progress": output.progress,
        "max_steps": max_steps,
    }
    shaper_params(shaper, **params)  # unknown shaper or parameter: refused before any work
    private_key = load_private_key(
        key.expanduser(), read_passphrase(passphrase_file, passphrase_env)
    )
    out = out.expanduser()
    _check_bundle_out(out)

    started = time.perf_counter()
    table = load()
    fitted = fit_shaper(table.frame, table.spec, shaper=shaper, source=table.source, **params)
    bundle = bundle_from_fitted(fitted, encoder_version=version)
    bundle.save(out, private_key)
    seconds = time.perf_counter() - started

    schema = fitted.schema
    result: dict[str, Any] = {
        "bundle": str(out),
        "key_id": bundle.key_id,
        "version": bundle.version,
        "fingerprint": bundle.fingerprint,
        "source": table.source,
        "rows": int(len(table.frame)),
        "label": schema.label,
        "sensitive": schema.sensitive,
        "features": list(schema.features),
        "inputs": schema.n_outputs,
        "outputs": int(fitted.shaper.n_components),
        "shaper": shaper,
        "params": _shaper_params_used(fitted),
        "audit": _train_audit(fitted),
        "seconds": round(seconds, 3),
    }

    def render(console: Console) -> None:
        audit = result["audit"]
        rows: list[tuple[str, Any]] = [
            ("data", f"{table.source}: {result['rows']} rows"),
            (
                "columns",
                f"label {schema.label!r}, sensitive {', '.join(schema.sensitive)}; "
                f"{len(schema.features)} features -> {schema.n_outputs} inputs",
            ),
            ("encoder", f"{shaper}, {result['inputs']} -> {result['outputs']} outputs"),
        ]
        for name in ("lam", "schedule", "seed"):
            if name in result["params"]:
                rows.append(("λ" if name == "lam" else name, result["params"][name]))
        if audit.get("steps"):
            rows.append(("steps", audit["steps"]))
        if "mi_public_final" in audit:
            rows.append(
                (
                    "Ĩ(L;T) final",
                    f"{audit['mi_public_final']:.3f} nats (H(L) = {audit['label_entropy']:.3f})",
                )
            )
        for name, value in audit.get("mi_sensitive_final", {}).items():
            entropy = audit.get("sensitive_entropy", {}).get(name)
            bound = f" (H = {entropy:.3f})" if entropy is not None else ""
            rows.append((f"Ĩ({name};T) final", f"{value:.3f} nats{bound}"))
        rows += [
            ("bundle", f"{out}  version {bundle.version}"),
            ("key id", bundle.key_id),
            ("fingerprint", bundle.fingerprint),
            ("time", f"{seconds:.1f} s"),
        ]
        console.print(_kv_table("Encoder trained and signed", rows))
        if "mi_public_final" in audit:
            console.print(
                "Ĩ values are the critics' estimates; measure leakage with attackers before "
                "releasing (simulate / audit)."
            )

    output.result(result, render)


# ---------------------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------------------
@app.command(
    epilog="Example: infoshape verify bundle/ --trusted-key keys/signing.pub --state-dir state/"
)
@handles_errors
def verify(
    bundle: Annotated[Path, typer.Argument(help="Bundle directory (or archive file).")],
    trusted_key: TrustedKeyOpt,
    state_dir: StateDirOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Check a bundle's signature, key, weights and (with --state-dir) version; change nothing."""
    from shared.bundle import EncoderBundle

    info = EncoderBundle.verify(
        bundle.expanduser(), [p.expanduser() for p in trusted_key], state_dir=state_dir
    )
    result = {"verified": True, "bundle": str(bundle), **info.to_dict()}

    def render(console: Console) -> None:
        console.print(
            _kv_table(
                "Bundle verified",
                [
                    ("bundle", str(bundle)),
                    ("key id", info.key_id),
                    ("version", info.version),
                    ("fingerprint", info.fingerprint),
                    ("weights sha256", info.weights_sha256),
                    ("created", info.created_at),
                ],
            )
        )

    Output(json_out, quiet).result(result, render)


# ---------------------------------------------------------------------------------------------
# encode
# ---------------------------------------------------------------------------------------------
@app.command(
    epilog="Example: infoshape encode --bundle bundle/ --trusted-key signing.pub "
    "--data site.parquet --out release.parquet --state-dir state/"
)
@handles_errors
def encode(
    bundle: Annotated[Path, typer.Option("--bundle", help="Signed bundle directory.")],
    trusted_key: TrustedKeyOpt,
    data: Annotated[Path, typer.Option("--data", help="Table to encode (.csv, .tsv, .parquet).")],
    out: Annotated[Path, typer.Option("--out", help="Output .parquet (z columns + label only).")],
    state_dir: StateDirOpt = None,
    chunk_rows: Annotated[
        int, typer.Option("--chunk-rows", min=1, help="Rows per chunk (bounds memory).")
    ] = 262_144,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Verify a bundle, then encode a table with it: only z_0..z_{k-1} and the label are written."""
    from shared.bundle import EncoderBundle
    from shared.encode import encode_table
    from shared.pipeline import open_bundle

    output = Output(json_out, quiet)
    # Verification (signature, trusted key, weights hash, rollback) happens before any weight
    # is read into a model.
    loaded = EncoderBundle.load(
        bundle.expanduser(), [p.expanduser() for p in trusted_key], state_dir=state_dir
    )
    encoder = open_bundle(loaded)
    with _progress_bar(output, "encoding") as progress:
        result = encode_table(encoder, data, out, chunk_rows=chunk_rows, progress=progress)
    result.update({"bundle": str(bundle), "key_id": loaded.key_id, "version": loaded.version})

    def render(console: Console) -> None:
        console.print(
            f"encoded {result['rows']} rows in {result['seconds']:.2f} s "
            f"({result['rows_per_second']:,.0f} rows/s, {result['chunks']} chunks) -> "
            f"{result['output']}"
        )
        console.print(f"columns: {', '.join(result['columns'])}")

    output.result(result, render)


# ---------------------------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------------------------
@app.command(
    epilog="Example: infoshape simulate --sites 3 --dataset paper-synthetic --mode release "
    "--lambda 1 --out runs/demo"
)
@handles_errors
def simulate(
    sites: Annotated[int, typer.Option("--sites", help="Number of hospitals.")] = 3,
    dataset: Annotated[
        str, typer.Option("--dataset", help="Built-in dataset (ignored with --data).")
    ] = "paper-synthetic",
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Your table instead of a dataset.", show_default=False),
    ] = None,
    data_path: DataPathOpt = None,
    label: LabelOpt = None,
    sensitive: SensitiveOpt = None,
    features: FeaturesOpt = None,
    categorical: CategoricalOpt = None,
    partition: Annotated[
        str, typer.Option("--partition", help="iid, dirichlet:ALPHA or column:NAME.")
    ] = "iid",
    mode: Annotated[Mode, typer.Option("--mode", help="Downstream training mode.")] = Mode.release,
    lam: Annotated[float, typer.Option("--lambda", help="Privacy weight λ (>= 0).")] = 1.0,
    shaper: Annotated[str, typer.Option("--shaper")] = "infoshape",
    schedule: Annotated[Schedule, typer.Option("--schedule")] = Schedule.alternating,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle", help="Use this signed bundle instead of training one.", show_default=False
        ),
    ] = None,
    trusted_key: Annotated[
        Path | None,
        typer.Option("--trusted-key", help="Public key that signed --bundle.", show_default=False),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Run directory (default runs/<UTC timestamp>/).", show_default=False
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    max_private_auc: Annotated[
        float, typer.Option("--max-private-auc", help="Gate: refuse the release above this AUC.")
    ] = 0.70,
    attackers: AttackersOpt = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", min=1, hidden=True, help="Cap encoder steps.")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Simulate a multi-site release on Flower's in-process runtime (hospitals + an auditor)."""
    _check_lambda(lam)
    try:
        from simulations.simulate import SimulateOptions, exit_code, run_simulate
    except ImportError as exc:  # pragma: no cover - the federation stack is a hard dependency
        raise RunError(f"simulate is unavailable: {exc}") from None

    options = SimulateOptions(
        sites=sites,
        dataset=dataset,
        data_path=str(data_path.expanduser()) if data_path is not None else None,
        data=str(data.expanduser()) if data is not None else None,
        label=label,
        sensitive=split_list(sensitive),
        features=split_list(features) or None,
        categorical=split_list(categorical),
        partition=partition,
        mode=mode.value,
        lam=lam,
        shaper=shaper,
        schedule=schedule.value,
        shaper_params={"max_steps": max_steps} if max_steps is not None else {},
        bundle=str(bundle.expanduser()) if bundle is not None else None,
        trusted_key=str(trusted_key.expanduser()) if trusted_key is not None else None,
        out=str(out.expanduser()) if out is not None else None,
        seed=seed,
        max_private_auc=max_private_auc,
        attackers=split_list(attackers) or None,
        verbose=debug,
    )
    summary = run_simulate(options)
    code = exit_code(summary)
    Output(json_out, quiet).result(summary, lambda console: _render_summary(console, summary))
    if code == GatedError.exit_code:
        gate = summary.get("gate") or {}
        reason = gate.get("reason") or "strongest-attacker AUC above the threshold"
        message = f"{reason}; see {summary.get('run_dir')}/summary.json"
        sys.stderr.write(_error_line(GatedError(message)) + "\n")
    if code:
        raise typer.Exit(code)


def _render_summary(console: Console, summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="Sites", title_justify="left")
    for column in ("site", "role", "rows", "status", "reason"):
        table.add_column(column)
    for site in summary.get("sites", []):
        table.add_row(
            str(site.get("name")),
            str(site.get("role")),
            _fmt(site.get("rows")),
            str(site.get("status")),
            str(site.get("reason") or ""),
        )
    console.print(table)
    downstream = summary.get("downstream") or {}
    audit = summary.get("audit") or {}
    gate = summary.get("gate") or {}
    rows = [
        ("release rows", (summary.get("release") or {}).get("rows")),
        (
            "downstream",
            f"{downstream.get('mode')}: AUC {_fmt(downstream.get('auc'))}, "
            f"accuracy {_fmt(downstream.get('accuracy'))}",
        ),
    ]
    for where in ("central", "federated"):
        part = audit.get(where) or {}
        if part:
            rows.append(
                (
                    f"audit ({where})",
                    f"strongest attacker: AUC {_fmt(part.get('best_auc'))}, accuracy "
                    f"{_fmt(part.get('best_accuracy'))} (majority-class accuracy "
                    f"{_fmt(part.get('majority'))})",
                )
            )
    rows.append(
        ("gate", f"{'passed' if gate.get('passed') else 'REFUSED'}: {gate.get('reason') or ''}")
    )
    rows.append(("run dir", summary.get("run_dir")))
    if summary.get("report"):
        rows.append(("report", summary.get("report")))
    console.print(_kv_table("Release", rows))


# ---------------------------------------------------------------------------------------------
# audit, report, frontier, bakeoff
# ---------------------------------------------------------------------------------------------
@contextmanager
def _status_lines(out: Output, title: str) -> Iterator[Callable[[str], None] | None]:
    """A rich status line ``title: message`` on a terminal (``None`` otherwise), for library
    functions that report progress as short messages."""
    if not out.progress:
        yield None
        return
    with _console(stderr=True).status(title) as status:

        def update(message: str) -> None:
            status.update(f"{title}: {message}")

        yield update


def _float_list(values: str, option: str) -> list[float]:
    """``"0,0.5,1"`` → ``[0.0, 0.5, 1.0]``; anything else is a ConfigError naming ``option``."""
    items = split_list(values)
    if not items:
        raise ConfigError(f"{option} needs at least one number, e.g. {option} 0,0.5,1")
    out: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise ConfigError(
                f"{option} takes comma-separated numbers; {item!r} is not a number"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{option} values must be finite and >= 0; got {item}")
        out.append(value)
    return out


def _check_threshold(value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ConfigError(f"--max-private-auc must be an AUC in [0, 1]; got {value}")


def _check_out_dir(out: Path) -> Path:
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory; choose a directory")
    return out


def _read_any_table(path: Path, what: str) -> Any:
    from shared.data import read_table

    try:
        return read_table(path.expanduser())
    except InfoShapeError:
        raise
    except OSError as exc:  # pragma: no cover - read_table reports its own errors
        raise ConfigError(f"{what} {path} cannot be read: {exc}") from None


def _write_report_for(directory: Path) -> Path:
    """``write_report`` for a command's --out: anything but an InfoShapeError becomes a RunError
    (the command's own results are on disk by then)."""
    from shared.report import write_report

    try:
        return write_report(directory)
    except InfoShapeError:
        raise
    except Exception as exc:
        raise RunError(
            f"the results are in {directory}, but report.html could not be rendered "
            f"({type(exc).__name__}: {exc}); retry with `infoshape report {directory}`"
        ) from exc


@app.command(
    epilog="Example: infoshape audit bundle/ --trusted-key keys/signing.pub --data public.csv "
    "--release release/hospital-0.parquet --max-private-auc 0.7 --out audit/"
)
@handles_errors
def audit(
    bundle: Annotated[Path, typer.Argument(help="Signed bundle directory (or archive file).")],
    trusted_key: TrustedKeyOpt,
    data: Annotated[
        Path,
        typer.Option(
            "--data", help="Public table with the features, the label and every sensitive column."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for audit.json, report.html and figures/.")
    ],
    release: Annotated[
        Path | None,
        typer.Option(
            "--release",
            help="A release table (z columns + label) or a site table (features + S) to audit.",
            show_default=False,
        ),
    ] = None,
    sigma: Annotated[
        float, typer.Option("--sigma", help="Noise level of the gaussian-noise baseline.")
    ] = 1.0,
    attackers: AttackersOpt = None,
    mi_steps: Annotated[
        int, typer.Option("--mi-steps", min=0, help="Critic steps per MI estimate (0 skips MI).")
    ] = 500,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the split, baselines, attackers.")] = 0,
    max_private_auc: Annotated[
        float | None,
        typer.Option(
            "--max-private-auc",
            help="Exit 3 when the encoder's strongest-attacker AUC exceeds this.",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Audit a signed encoder against raw data, gaussian noise and a random encoder: attackers,
    MI estimates and log-rank privacy; writes audit.json and report.html."""
    from shared.bundle import EncoderBundle
    from shared.pipeline import open_bundle
    from shared.report import REPORT_HTML, audit_bundle, write_audit

    output = Output(json_out, quiet)
    _check_threshold(max_private_auc)
    out = _check_out_dir(out)
    # The signature is checked before any weight is read (and before minutes of attacks).
    loaded = EncoderBundle.load(bundle.expanduser(), [p.expanduser() for p in trusted_key])
    encoder = open_bundle(loaded)
    public = _read_any_table(data, "--data")
    release_frame = _read_any_table(release, "--release") if release is not None else None
    with _status_lines(output, "auditing") as progress:
        result = audit_bundle(
            encoder,
            public,
            release_frame=release_frame,
            seed=seed,
            attackers=split_list(attackers) or None,
            sigma=sigma,
            mi_steps=mi_steps,
            progress=progress,
        )
    audit_path = write_audit(out, result)
    report = _write_report_for(out)
    headline = result["headline"]["encoder"]
    best = headline.get("best_auc")
    gated = max_private_auc is not None and best is not None and float(best) > max_private_auc
    summary: dict[str, Any] = {
        "bundle": str(bundle),
        "key_id": loaded.key_id,
        "version": loaded.version,
        "fingerprint": loaded.fingerprint,
        "audit": str(audit_path),
        "report": str(report),
        "max_private_auc": max_private_auc,
        "passed": None if max_private_auc is None else not gated,
        "headline": result["headline"],
        "release": result.get("release"),
    }

    def render(console: Console) -> None:
        from rich.table import Table

        table = Table(title="Audit (strongest attacker on S; utility on L)", title_justify="left")
        for column in ("setting", "S", "best attacker", "AUC", "accuracy", "majority", "L AUC"):
            table.add_column(column)
        for name, entry in result["headline"].items():
            table.add_row(
                result["settings"][name].get("label", name),
                str(entry.get("sensitive")),
                str(entry.get("best_attacker")),
                _fmt(entry.get("best_auc")),
                _fmt(entry.get("best_accuracy")),
                _fmt(entry.get("majority")),
                _fmt(entry.get("utility_auc")),
            )
        console.print(table)
        rows: list[tuple[str, Any]] = [
            ("bundle", f"{bundle}  version {loaded.version}, key id {loaded.key_id}"),
        ]
        if max_private_auc is not None:
            rows.append(
                (
                    "gate",
                    f"{'REFUSED' if gated else 'passed'}: encoder AUC {_fmt(best)} "
                    f"{'>' if gated else '≤'} {max_private_auc:g}",
                )
            )
        console.print(_kv_table("Audit", rows))
        console.print(f"wrote {audit_path} and {out / REPORT_HTML}")

    output.result(summary, render)
    if gated:
        message = (
            f"strongest attacker AUC {float(best):.4f} on {headline.get('sensitive')} exceeds "
            f"--max-private-auc {max_private_auc:g}; see {audit_path}"
        )
        sys.stderr.write(_error_line(GatedError(message)) + "\n")
        raise typer.Exit(GatedError.exit_code)


@app.command(
    epilog="Example: infoshape report runs/demo   (writes runs/demo/report.html and figures/)"
)
@handles_errors
def report(
    run_dir: Annotated[
        Path,
        typer.Argument(help="Run dir with summary.json, audit.json or frontier.json."),
    ],
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Render RUNDIR/report.html (self-contained, opens offline) and RUNDIR/figures/*.png."""
    from shared.report import FIGURES_DIR

    path = _write_report_for(run_dir.expanduser())
    figures_dir = path.parent / FIGURES_DIR
    figures = sorted(p.name for p in figures_dir.glob("*.png")) if figures_dir.is_dir() else []
    result = {"report": str(path), "figures": [str(figures_dir / f) for f in figures]}
    Output(json_out, quiet).result(result, lambda console: console.print(str(path)))


@app.command(
    epilog="Example: infoshape frontier --dataset paper-synthetic --lambdas 0,0.25,0.5,1,2 "
    "--sigmas 0.25,0.5,1,2,4 --out frontier/   |   infoshape frontier --data public.csv "
    "--label y --sensitive s --out frontier/"
)
@handles_errors
def frontier(
    out: Annotated[
        Path,
        typer.Option("--out", help="Directory (or run dir) for frontier.json/.png, report.html."),
    ],
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Built-in dataset: paper-synthetic (default), adult or digits.",
            show_default=False,
        ),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Your table instead of --dataset.", show_default=False),
    ] = None,
    label: LabelOpt = None,
    sensitive: SensitiveOpt = None,
    features: FeaturesOpt = None,
    categorical: CategoricalOpt = None,
    data_path: DataPathOpt = None,
    lambdas: Annotated[
        str, typer.Option("--lambdas", help="Comma-separated λ values (one encoder fit each).")
    ] = "0,0.25,0.5,1,2",
    sigmas: Annotated[
        str, typer.Option("--sigmas", help="Comma-separated σ values of the noise baseline.")
    ] = "0.25,0.5,1,2,4",
    attackers: AttackersOpt = None,
    schedule: Annotated[Schedule, typer.Option("--schedule")] = Schedule.alternating,
    max_private_auc: Annotated[
        float | None,
        typer.Option(
            "--max-private-auc", help="Threshold to draw on the plot.", show_default=False
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the split, fits and attackers.")] = 0,
    repeats: Annotated[
        int,
        typer.Option(
            "--repeats", min=1, help="Fits per λ / σ (seeds seed, seed+1, …); points are means."
        ),
    ] = 3,
    chance_runs: Annotated[
        int,
        typer.Option(
            "--chance-runs", min=0, help="Shuffled-S runs that measure the chance floor (0 skips)."
        ),
    ] = 10,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", min=1, hidden=True, help="Cap encoder steps.")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Sweep λ (InfoShape) and σ (gaussian noise): utility vs strongest-attacker AUC, with the
    Pareto front marked; writes frontier.json, frontier.png and report.html."""
    from shared.report import FRONTIER_JSON, FRONTIER_PNG, REPORT_HTML, run_frontier

    output = Output(json_out, quiet)
    lambda_values = _float_list(lambdas, "--lambdas")
    sigma_values = _float_list(sigmas, "--sigmas")
    _check_threshold(max_private_auc)
    if data is None and dataset is None:
        dataset = "paper-synthetic"
    load = _training_table(
        data=data,
        label=label,
        sensitive=split_list(sensitive),
        features=features,
        categorical=categorical,
        dataset=dataset,
        data_path=data_path,
        seed=seed,
    )
    out = _check_out_dir(out)
    source: Any
    spec: Any = None
    if dataset is not None:
        source = dataset
    else:
        table = load()
        source, spec = table.frame, table.spec
    with _status_lines(output, "frontier") as progress:
        result = run_frontier(
            source,
            lambda_values,
            sigma_values,
            spec=spec,
            seed=seed,
            out_dir=out,
            data_path=data_path if dataset is not None else None,
            attackers=split_list(attackers) or None,
            schedule=schedule.value,
            max_steps=max_steps,
            threshold=max_private_auc,
            repeats=repeats,
            chance_runs=chance_runs,
            progress=progress,
        )
    report_path = _write_report_for(out)
    summary = {
        "frontier": str(out / FRONTIER_JSON),
        "plot": str(out / FRONTIER_PNG),
        "report": str(report_path),
        "dataset": result.get("dataset"),
        "points": result.get("points"),
        "pareto": result.get("pareto"),
        "chance": result.get("chance"),
        "seconds": result.get("seconds"),
    }

    def render(console: Console) -> None:
        from rich.table import Table

        table = Table(
            title=f"Privacy–utility frontier ({result.get('dataset')})", title_justify="left"
        )
        for column in ("kind", "param", "private AUC", "utility AUC", "Pareto"):
            table.add_column(column)
        for point in result.get("points", []):
            param = point.get("param")
            table.add_row(
                str(point.get("kind")),
                f"{'λ' if param == 'lambda' else 'σ'}={point['value']:g}" if param else "-",
                _with_sd(point, "private_auc"),
                _with_sd(point, "utility_auc"),
                "*" if point.get("pareto") else "",
            )
        console.print(table)
        chance = result.get("chance") or {}
        if chance.get("max") is not None:
            console.print(
                f"chance floor (strongest attacker on shuffled S): mean {_fmt(chance['mean'])}, "
                f"max {_fmt(chance['max'])}"
            )
        console.print(f"wrote {summary['frontier']}, {summary['plot']} and {out / REPORT_HTML}")

    output.result(summary, render)


def _with_sd(point: dict[str, Any], key: str) -> str:
    """``0.5312 ± 0.0080`` for a mean over several fits, the bare figure otherwise."""
    sd = point.get(f"{key}_sd")
    return _fmt(point.get(key)) + (f" ± {_fmt(sd)}" if sd else "")


@app.command(
    epilog="Example: infoshape bakeoff --dataset paper-synthetic --out bakeoff/   |   "
    "infoshape bakeoff --dataset adult --data ~/data/adult --out bakeoff-adult/ --sweep"
)
@handles_errors
def bakeoff(
    dataset: Annotated[str, typer.Option("--dataset", help="paper-synthetic, adult or digits.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for bakeoff.json and bakeoff.md.")],
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            "--data-path",
            help="Directory of the dataset's files (adult); --data-path as in the other commands.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the split, shapers, attackers.")] = 0,
    sweep: Annotated[
        bool, typer.Option("--sweep", help="Add two settings per shaper around its default.")
    ] = False,
    shaper: Annotated[
        list[str] | None,
        typer.Option(
            "--shaper",
            help="Shaper to compare (repeat or comma-separate; default: every registered one).",
            show_default=False,
        ),
    ] = None,
    attackers: AttackersOpt = None,
    mi_steps: Annotated[
        int, typer.Option("--mi-steps", min=0, help="Critic steps of the MI estimate (0 skips).")
    ] = 300,
    max_attack_rows: Annotated[
        int,
        typer.Option("--max-attack-rows", min=100, hidden=True, help="Cap attack/test rows."),
    ] = 15000,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Compare every shaper (identity, noise, random encoder, InfoShape and the peer methods)
    under one attacker suite; writes bakeoff.json and bakeoff.md. Exits 1 if a shaper failed."""
    from shared.bakeoff import BAKEOFF_JSON, BAKEOFF_MD, run_bakeoff

    output = Output(json_out, quiet)
    out = _check_out_dir(out)
    lines: list[str] = []
    with _status_lines(output, "bakeoff") as status:

        def progress(line: str) -> None:
            lines.append(line)
            if status is not None:
                status(line)

        result = run_bakeoff(
            dataset,
            data_path=data.expanduser() if data is not None else None,
            out_dir=out,
            seed=seed,
            sweep=sweep,
            shapers=split_list(shaper) or None,
            max_attack_rows=max_attack_rows,
            attackers=split_list(attackers) or None,
            mi_steps=mi_steps,
            progress=progress,
        )
    rows = result.get("rows", [])
    failed = [r for r in rows if "error" in r]
    summary = {
        "bakeoff": str(out / BAKEOFF_JSON),
        "markdown": str(out / BAKEOFF_MD),
        "dataset": result.get("dataset"),
        "errors": len(failed),
        "rows": [{k: v for k, v in r.items() if k != "traceback"} for r in rows],
        "seconds": result.get("seconds"),
    }

    def render(console: Console) -> None:
        from rich.table import Table

        table = Table(title=f"Bake-off ({dataset})", title_justify="left")
        for column in ("setting", "utility AUC", "private AUC", "majority", "log-rank", "ε"):
            table.add_column(column)
        for row in rows:
            if "error" in row:
                table.add_row(str(row.get("setting")), "FAILED", str(row["error"]), "", "", "")
                continue
            table.add_row(
                str(row.get("setting")),
                _fmt(row["utility"].get("auc")),
                _fmt(row["private"].get("auc")),
                _fmt(row["private"].get("majority")),
                _fmt(row.get("log_rank_privacy")),
                _fmt(row.get("epsilon")),
            )
        console.print(table)
        console.print(f"wrote {summary['bakeoff']} and {summary['markdown']}")

    output.result(summary, render)
    if failed:
        names = ", ".join(str(r.get("setting")) for r in failed)
        first = str(failed[0].get("error"))
        raise RunError(
            f"{len(failed)} of {len(rows)} shaper settings failed ({names}); first: {first}; "
            f"see {out / BAKEOFF_JSON}"
        )


# ---------------------------------------------------------------------------------------------
# deploy
# ---------------------------------------------------------------------------------------------
def _deploy() -> Any:
    try:
        from simulations import deploy
    except ImportError as exc:  # pragma: no cover - part of this package
        raise RunError(f"deploy helpers are unavailable: {exc}") from None
    return deploy


def _public(result: dict[str, Any]) -> dict[str, Any]:
    """A deploy result without the process handle (not JSON)."""
    return {k: v for k, v in result.items() if k != "process"}


def _run_foreground(deploy: Any, result: dict[str, Any], output: Output, what: str) -> None:
    """Print what was started, then wait for it like a foreground command."""
    output.result(
        _public(result),
        lambda console: console.print(
            f"started {what} (pid {result['pid']}): {' '.join(result['command'])}"
        ),
    )
    code = deploy.wait_foreground(result["process"])
    if code not in (0, -2, -15, 130, 143):  # stopped by Ctrl-C / SIGTERM is a normal end
        raise RunError(f"{what} exited with code {code}; see its output above or its log")


@deploy_app.command(
    "certs",
    epilog="Example: infoshape deploy certs --hosts coordinator.example.org 10.0.0.5 --out pki/",
)
@handles_errors
def deploy_certs(
    out: Annotated[Path, typer.Option("--out", help="Directory for ca.crt, ca.key, server.*.")],
    hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--hosts",
            help="Names/IPs the sites dial (repeat, comma-separate, or list after the option).",
            show_default=False,
        ),
    ] = None,
    more_hosts: Annotated[
        list[str] | None, typer.Argument(help="More hosts.", show_default=False)
    ] = None,
    days: Annotated[int, typer.Option("--days", help="Validity in days.")] = 365,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace existing files.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Create a private CA and the SuperLink's TLS certificate (SANs for every host)."""
    names = split_list(hosts) + split_list(more_hosts)
    if not names:
        raise ConfigError("give at least one --hosts NAME_OR_IP the sites will dial")
    result = _deploy().make_certs(out.expanduser(), names, days=days, overwrite=overwrite)
    Output(json_out, quiet).result(
        result,
        lambda console: console.print(
            f"wrote {result['ca_cert']}, {result['server_cert']} (+ keys, 0600); SANs: "
            f"{', '.join(result['sans'])}; give ca.crt to every site"
        ),
    )


@deploy_app.command("node-key", epilog="Example: infoshape deploy node-key hospital-a --out keys/")
@handles_errors
def deploy_node_key(
    name: Annotated[str, typer.Argument(help="Site name (file stem of NAME.key / NAME.pub).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the key pair.")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace existing files.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Create a SuperNode authentication key pair (P-384, OpenSSH) for one site."""
    result = _deploy().make_node_key(out.expanduser(), name, overwrite=overwrite)
    Output(json_out, quiet).result(
        result,
        lambda console: console.print(
            f"wrote {result['private_key']} (0600) and {result['public_key']}; register the "
            f"public key at the coordinator ({result['fingerprint']})"
        ),
    )


@deploy_app.command(
    "superlink",
    epilog="Example: infoshape deploy superlink --certs pki/ --host 0.0.0.0 --port 9092 "
    "--database superlink.db",
)
@handles_errors
def deploy_superlink(
    certs: Annotated[
        Path | None,
        typer.Option("--certs", help="Directory from `deploy certs`.", show_default=False),
    ] = None,
    ca: Annotated[Path | None, typer.Option("--ca", show_default=False)] = None,
    cert: Annotated[Path | None, typer.Option("--cert", show_default=False)] = None,
    key: Annotated[Path | None, typer.Option("--key", show_default=False)] = None,
    host: Annotated[str, typer.Option("--host")] = "0.0.0.0",
    port: Annotated[int, typer.Option("--port")] = 8000,
    database: Annotated[
        Path | None,
        typer.Option("--database", help="Keep state across restarts.", show_default=False),
    ] = None,
    log: LogOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Check the coordinator's TLS files and port, then run flower-superlink (TLS, node auth)."""
    deploy = _deploy()
    output = Output(json_out, quiet)
    if dry_run:
        if certs is None and (ca is None or cert is None or key is None):
            raise ConfigError(
                "pass --certs DIR (from `infoshape deploy certs`) or --ca, --cert and --key"
            )
        base = certs.expanduser() if certs is not None else Path()
        checked = deploy.check_server_certs(
            ca or base / deploy.CA_CERT,
            cert or base / deploy.SERVER_CERT,
            key or base / deploy.SERVER_KEY,
        )
        command = deploy.superlink_command(
            ca=checked["ca_cert"],
            cert=checked["server_cert"],
            key=checked["server_key"],
            host=host,
            port=port,
            database=database,
        )
        output.result(
            {"command": command, "started": False}, lambda console: console.print(" ".join(command))
        )
        return
    result = deploy.start_superlink(
        certs_dir=certs,
        ca=ca,
        cert=cert,
        key=key,
        host=host,
        port=port,
        database=database,
        log_path=log,
    )
    _run_foreground(deploy, result, output, "flower-superlink")


@deploy_app.command(
    "site",
    epilog="Example: infoshape deploy site --superlink coordinator.example.org:9092 --role "
    "hospital --data site.csv --table-spec spec.json --trusted-key signing.pub --ca ca.crt "
    "--auth-key keys/hospital-a.key --state-dir state/ --name hospital-a",
)
@handles_errors
def deploy_site(
    superlink: Annotated[str, typer.Option("--superlink", help="HOST:PORT of the SuperLink.")],
    role: Annotated[Role, typer.Option("--role", help="What this site does.")],
    data: Annotated[Path, typer.Option("--data", help="This site's table.")],
    trusted_key: TrustedKeyOpt,
    state_dir: Annotated[Path, typer.Option("--state-dir", help="Persistent site state.")],
    name: Annotated[str, typer.Option("--name", help="Site name (as registered).")],
    table_spec: Annotated[
        str | None,
        typer.Option("--table-spec", help="Table spec as JSON or a JSON file.", show_default=False),
    ] = None,
    ca: Annotated[
        Path | None, typer.Option("--ca", help="The coordinator's ca.crt.", show_default=False)
    ] = None,
    auth_key: Annotated[
        Path | None, typer.Option("--auth-key", help="This site's NAME.key.", show_default=False)
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Local ClientAppIo port.")] = 9094,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    insecure: Annotated[bool, typer.Option("--insecure", help="No TLS (testing only).")] = False,
    log: LogOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Check a site's inputs (data vs spec, keys, certificates, port), then run its SuperNode."""
    deploy = _deploy()
    output = Output(json_out, quiet)
    common: dict[str, Any] = {
        "superlink": superlink,
        "role": role.value,
        "data": data.expanduser(),
        "trusted_key": [str(p.expanduser()) for p in trusted_key],
        "state_dir": state_dir.expanduser(),
        "site_name": name,
        "port": port,
        "ca": ca,
        "auth_key": auth_key,
        "table_spec": table_spec,
        "insecure": insecure,
        "host": host,
    }
    if dry_run:
        checked = deploy.check_site_inputs(**common)
        command = deploy.site_command(
            **{
                **common,
                "data": checked["data"],
                "trusted_key": checked["trusted_key"],
                "state_dir": checked["state_dir"],
                "ca": checked["ca"],
                "auth_key": checked["auth_key"],
                "table_spec": checked["table_spec"],
            }
        )
        output.result(
            {**checked, "command": command, "started": False},
            lambda console: console.print(" ".join(command)),
        )
        return
    result = deploy.start_site(**common, log_path=log)
    _run_foreground(deploy, result, output, f"flower-supernode ({name})")


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Console-script entry (``infoshape``): run the app, map usage errors to one line + exit 2."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="infoshape", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "infoshape"
        sys.stderr.write(
            f"UsageError: {' '.join(exc.format_message().split())} (see '{where} --help')\n"
        )
        return 2
    except click.ClickException as exc:  # pragma: no cover - e.g. a FileError from click
        sys.stderr.write(f"{type(exc).__name__}: {exc.format_message()}\n")
        return exc.exit_code
    except click.exceptions.Abort:
        sys.stderr.write("Aborted\n")
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # python -m simulations.cli
    sys.exit(main())
