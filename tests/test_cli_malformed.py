"""Malformed inputs: each one gives exit != 0, exactly one ``ErrorType: message`` line on stderr
that names the file / column / value, no traceback, and no partial output left behind.

The cases run in-process through :func:`simulations.cli.main` (the console script's function);
a few also run through the installed script to prove nothing else reaches stderr there. The
bundles are made once per module with the cheap ``random-encoder`` shaper: what is under test is
the refusal, not the training.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).with_name("infoshape")
ENTRY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "simulations.cli"]
PASSPHRASE = "s3cret passphrase"
PASS_ENV = "INFOSHAPE_MALFORMED_PASSPHRASE"


def site_table(n: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.normal(size=n),
            "c": rng.choice(["x", "y", "z"], n),
            "label": rng.integers(0, 2, n),
            "s": rng.integers(0, 2, n),
        }
    )


@dataclass
class World:
    root: Path
    key: Path  # encrypted with PASSPHRASE
    pub: Path
    other_pub: Path
    bundle: Path  # version 2
    bundle_v1: Path
    bundle_other: Path  # signed by the other key
    public_csv: Path
    out: Path = field(init=False)

    def __post_init__(self) -> None:
        self.out = self.root / "outputs"
        self.out.mkdir()


def _ok(*args: object) -> None:
    code = main([str(a) for a in args])
    assert code == 0, f"setup command failed: {args}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("malformed")
    os.environ[PASS_ENV] = PASSPHRASE
    public = root / "public.csv"
    site_table(300, seed=1).to_csv(public, index=False)
    _ok("keygen", "--out", root / "keys", "--passphrase-env", PASS_ENV, "--quiet")
    _ok("keygen", "--out", root / "other", "--quiet")
    common = [
        "--data",
        public,
        "--label",
        "label",
        "--sensitive",
        "s",
        "--categorical",
        "c",
        "--shaper",
        "random-encoder",
        "--quiet",
    ]
    key = ["--key", root / "keys" / "signing.key", "--passphrase-env", PASS_ENV]
    _ok("train", *common, *key, "--out", root / "bundle", "--version", "2")
    _ok("train", *common, *key, "--out", root / "bundle_v1", "--version", "1")
    _ok("train", *common, "--key", root / "other" / "signing.key", "--out", root / "bundle_other")
    return World(
        root=root,
        key=root / "keys" / "signing.key",
        pub=root / "keys" / "signing.pub",
        other_pub=root / "other" / "signing.pub",
        bundle=root / "bundle",
        bundle_v1=root / "bundle_v1",
        bundle_other=root / "bundle_other",
        public_csv=public,
    )


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------
@dataclass
class Case:
    """argv builder (given the world and a fresh directory) → expected error type and words."""

    name: str
    argv: Callable[[World, Path], list[object]]
    error: str
    needles: Callable[[World, Path], list[str]]
    exit_code: int = 1


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _csv(tmp: Path, frame: pd.DataFrame, name: str = "site.csv", **kwargs: object) -> Path:
    path = tmp / name
    frame.to_csv(path, index=False, **kwargs)
    return path


def _encode(world: World, data: Path, *extra: object, bundle: Path | None = None) -> list[object]:
    return [
        "encode",
        "--bundle",
        bundle or world.bundle,
        "--trusted-key",
        world.pub,
        "--data",
        data,
        "--out",
        world.out / f"{data.stem}.parquet",
        *extra,
    ]


def _train(world: World, tmp: Path, *extra: object, data: Path | None = None) -> list[object]:
    return [
        "train",
        "--data",
        data or world.public_csv,
        "--label",
        "label",
        "--sensitive",
        "s",
        "--shaper",
        "random-encoder",
        "--key",
        world.key,
        "--passphrase-env",
        PASS_ENV,
        "--out",
        tmp / "new-bundle",
        *extra,
    ]


def _with(row: int, column: str, value: object) -> pd.DataFrame:
    frame = site_table()
    if isinstance(value, str) and column in ("a", "b"):
        frame = frame.astype({column: object})
    frame.loc[row, column] = value
    return frame


def _tampered(world: World, tmp: Path, member: str, offset: int) -> Path:
    copy = tmp / "tampered"
    copy.mkdir()
    for item in world.bundle.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())
    data = bytearray((copy / member).read_bytes())
    data[offset % len(data)] ^= 0x01
    (copy / member).write_bytes(bytes(data))
    return copy


def _without(world: World, tmp: Path, member: str) -> Path:
    copy = tmp / "partial"
    copy.mkdir()
    for item in world.bundle.iterdir():
        if item.name != member:
            (copy / item.name).write_bytes(item.read_bytes())
    return copy


CASES = [
    # -- encode: the site's table ---------------------------------------------------------------
    Case(
        "missing column",
        lambda w, t: _encode(w, _csv(t, site_table().drop(columns="b"))),
        "SchemaMismatchError",
        lambda w, t: ["'b'", "site.csv"],
    ),
    Case(
        "duplicated (extra) column",
        lambda w, t: _encode(w, _write(t / "dup.csv", "a,b,c,label,s,a\n" + "1,2,x,0,1,3\n" * 5)),
        "ColumnError",
        lambda w, t: ["dup.csv", "'a'"],
    ),
    Case(
        "extra unnamed column (trailing delimiter)",
        lambda w, t: _encode(w, _write(t / "trail.csv", "a,b,c,label,s,\n" + "1,2,x,0,1,\n" * 5)),
        "ColumnError",
        lambda w, t: ["trail.csv", "column(s) 6"],
    ),
    Case(
        "NaN in a feature",
        lambda w, t: _encode(w, _csv(t, _with(57, "a", np.nan)), "--chunk-rows", "25"),
        "ValueRangeError",
        lambda w, t: ["'a'", "site.csv", "data row 58"],
    ),
    Case(
        "inf in a feature",
        lambda w, t: _encode(w, _csv(t, _with(9, "b", np.inf))),
        "ValueRangeError",
        lambda w, t: ["'b'", "inf", "data row 10"],
    ),
    Case(
        "text in a numeric column",
        lambda w, t: _encode(w, _csv(t, _with(101, "a", "n/a?")), "--chunk-rows", "50"),
        "ValueRangeError",
        lambda w, t: ["'a'", "'n/a?'", "data row 102"],
    ),
    Case(
        "huge value",
        lambda w, t: _encode(w, _csv(t, _with(3, "a", 1e300))),
        "ValueRangeError",
        lambda w, t: ["'a'", "1e+300", "data row 4"],
    ),
    Case(
        "unseen category at encode time",
        lambda w, t: _encode(w, _csv(t, _with(77, "c", "w")), "--chunk-rows", "30"),
        "CategoryError",
        lambda w, t: ["'c'", "'w'", "data row 78"],
    ),
    Case(
        "unseen label value at encode time",
        lambda w, t: _encode(w, _csv(t, _with(12, "label", 7))),
        "LabelError",
        lambda w, t: ["'label'", "7", "data row 13"],
    ),
    Case(
        "empty file",
        lambda w, t: _encode(w, _write(t / "empty.csv", "")),
        "DataFileError",
        lambda w, t: ["empty.csv", "empty"],
    ),
    Case(
        "header-only file",
        lambda w, t: _encode(w, _write(t / "header.csv", "a,b,c,label,s\n")),
        "DataFileError",
        lambda w, t: ["header.csv", "no data rows"],
    ),
    Case(
        "wrong delimiter",
        lambda w, t: _encode(w, _csv(t, site_table(), "semi.csv", sep=";")),
        "DataFileError",
        lambda w, t: ["semi.csv", "';'-delimited"],
    ),
    Case(
        "nonexistent --data path",
        lambda w, t: _encode(w, t / "nowhere.csv"),
        "DataFileError",
        lambda w, t: ["nowhere.csv", "does not exist"],
    ),
    Case(
        "directory given as data",
        lambda w, t: _encode(w, t),
        "DataFileError",
        lambda w, t: [str(t), "is a directory"],
    ),
    Case(
        "unsupported file extension",
        lambda w, t: _encode(w, _write(t / "site.xlsx", "a,b\n1,2\n")),
        "DataFileError",
        lambda w, t: ["site.xlsx", "unsupported extension"],
    ),
    Case(
        "output that is not Parquet",
        lambda w, t: [
            "encode",
            "--bundle",
            w.bundle,
            "--trusted-key",
            w.pub,
            "--data",
            _csv(t, site_table()),
            "--out",
            w.out / "release.csv",
        ],
        "ConfigError",
        lambda w, t: ["release.csv", ".parquet"],
    ),
    # -- encode / verify: the bundle and keys ----------------------------------------------------
    Case(
        "missing bundle file",
        lambda w, t: _encode(w, _csv(t, site_table()), bundle=_without(w, t, "signature")),
        "BundleFormatError",
        lambda w, t: ["signature"],
    ),
    Case(
        "tampered manifest",
        lambda w, t: _encode(w, _csv(t, site_table()), bundle=_tampered(w, t, "manifest.json", 40)),
        "SignatureError",
        lambda w, t: ["tampered", "manifest.json"],
    ),
    Case(
        "tampered weights",
        lambda w, t: _encode(
            w, _csv(t, site_table()), bundle=_tampered(w, t, "weights.safetensors", -7)
        ),
        "SignatureError",
        lambda w, t: ["weights.safetensors", "changed after signing"],
    ),
    Case(
        "tampered signature (verify)",
        lambda w, t: ["verify", _tampered(w, t, "signature", 3), "--trusted-key", w.pub],
        "SignatureError",
        lambda w, t: ["tampered", "does not verify"],
    ),
    Case(
        "bundle signed by another key",
        lambda w, t: _encode(w, _csv(t, site_table()), bundle=w.bundle_other),
        "UnknownKeyError",
        lambda w, t: ["bundle_other", "not trusted"],
    ),
    Case(
        "trusted key file missing",
        lambda w, t: ["verify", w.bundle, "--trusted-key", t / "nokey.pub"],
        "KeyFileError",
        lambda w, t: ["nokey.pub", "does not exist"],
    ),
    # -- train ---------------------------------------------------------------------------------
    Case(
        "label with one class",
        lambda w, t: _train(w, t, data=_csv(t, site_table().assign(label=1), "one.csv")),
        "LabelError",
        lambda w, t: ["'label'", "one.csv", "single class"],
    ),
    Case(
        "sensitive column same as label",
        lambda w, t: [
            "train",
            "--data",
            w.public_csv,
            "--label",
            "label",
            "--sensitive",
            "label",
            "--key",
            w.key,
            "--passphrase-env",
            PASS_ENV,
            "--out",
            t / "new-bundle",
        ],
        "ConfigError",
        lambda w, t: ["'label'", "sensitive"],
    ),
    Case(
        "label column not in the table",
        lambda w, t: [
            "train",
            "--data",
            w.public_csv,
            "--label",
            "outcome",
            "--sensitive",
            "s",
            "--shaper",
            "random-encoder",
            "--key",
            w.key,
            "--passphrase-env",
            PASS_ENV,
            "--out",
            t / "new-bundle",
        ],
        "ColumnError",
        lambda w, t: ["'outcome'", "public.csv"],
    ),
    Case(
        "--features names a missing column",
        lambda w, t: _train(w, t, "--features", "a,zz"),
        "ColumnError",
        lambda w, t: ["'zz'"],
    ),
    Case(
        "text in a numeric training column",
        lambda w, t: _train(w, t, data=_csv(t, _with(20, "b", "high"), "text.csv")),
        "ValueRangeError",
        lambda w, t: ["'b'", "'high'", "data row 21"],
    ),
    Case(
        "missing key file",
        lambda w, t: [
            "train",
            "--dataset",
            "paper-synthetic",
            "--key",
            t / "absent.key",
            "--out",
            t / "new-bundle",
        ],
        "KeyFileError",
        lambda w, t: ["absent.key", "does not exist"],
    ),
    Case(
        "wrong passphrase",
        lambda w, t: [
            "train",
            "--dataset",
            "paper-synthetic",
            "--key",
            w.key,
            "--passphrase-file",
            _write(t / "pass.txt", "not it\n"),
            "--out",
            t / "new-bundle",
        ],
        "KeyFileError",
        lambda w, t: ["wrong passphrase", "signing.key"],
    ),
    Case(
        "public key given as the signing key",
        lambda w, t: [
            "train",
            "--dataset",
            "paper-synthetic",
            "--key",
            w.pub,
            "--out",
            t / "new-bundle",
        ],
        "KeyFileError",
        lambda w, t: ["signing.pub", "public key"],
    ),
    Case(
        "missing passphrase file",
        lambda w, t: [
            "train",
            "--dataset",
            "paper-synthetic",
            "--key",
            w.key,
            "--passphrase-file",
            t / "nopass.txt",
            "--out",
            t / "new-bundle",
        ],
        "KeyFileError",
        lambda w, t: ["nopass.txt", "does not exist"],
    ),
    Case(
        "unknown dataset name",
        lambda w, t: [
            "train",
            "--dataset",
            "mnist",
            "--key",
            w.key,
            "--passphrase-env",
            PASS_ENV,
            "--out",
            t / "new-bundle",
        ],
        "ConfigError",
        lambda w, t: ["'mnist'", "paper-synthetic"],
    ),
    Case(
        "unknown shaper",
        lambda w, t: _train(w, t, "--shaper", "magic"),
        "ConfigError",
        lambda w, t: ["'magic'", "infoshape"],
    ),
    Case(
        "negative lambda",
        lambda w, t: _train(w, t, "--lambda", "-0.5"),
        "ConfigError",
        lambda w, t: ["--lambda", "-0.5"],
    ),
    Case(
        "bad --schedule",
        lambda w, t: _train(w, t, "--schedule", "weekly"),
        "UsageError",
        lambda w, t: ["--schedule", "'weekly'"],
        exit_code=2,
    ),
    Case(
        "--data and --dataset together",
        lambda w, t: _train(w, t, "--dataset", "digits"),
        "ConfigError",
        lambda w, t: ["--data", "--dataset"],
    ),
    Case(
        "nonexistent training table",
        lambda w, t: _train(w, t, data=t / "public.parquet"),
        "DataFileError",
        lambda w, t: ["public.parquet", "does not exist"],
    ),
    Case(
        "--out is a file",
        lambda w, t: [*_train(w, t)[:-2], "--out", _write(t / "occupied", "x")],
        "ConfigError",
        lambda w, t: ["occupied", "not a directory"],
    ),
]


def _files(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_input(
    case: Case, world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(a) for a in case.argv(world, tmp_path)]
    before_tmp = _files(tmp_path)
    before_out = _files(world.out)
    capsys.readouterr()

    code = main(argv)
    captured = capsys.readouterr()

    assert code == case.exit_code != 0
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{case.error}: "), lines[0]
    assert "Traceback" not in captured.err
    for needle in case.needles(world, tmp_path):
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert captured.out == ""
    # no partial output: not the bundle, not the Parquet file, not a temporary sibling
    assert _files(tmp_path) == before_tmp
    assert _files(world.out) == before_out


def test_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20


def test_rollback_is_refused_by_encode_and_verify(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    data = _csv(tmp_path, site_table())
    out = tmp_path / "release.parquet"
    base = ["--trusted-key", world.pub, "--state-dir", state]
    assert (
        main(
            [
                str(a)
                for a in [
                    "encode",
                    "--bundle",
                    world.bundle,
                    *base,
                    "--data",
                    data,
                    "--out",
                    out,
                    "--quiet",
                ]
            ]
        )
        == 0
    )
    assert out.exists()
    out.unlink()
    capsys.readouterr()
    for argv in (
        ["encode", "--bundle", world.bundle_v1, *base, "--data", data, "--out", out],
        ["verify", world.bundle_v1, *base],
    ):
        code = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert code == 1
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("RollbackError: "), err
        assert "version 1" in lines[0] and "version 2" in lines[0]
    assert not out.exists()


def _script(*args: object, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRY, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_through_the_console_script(world: World, tmp_path: Path) -> None:
    """The real script: one line on stderr (no warnings, no traceback), nothing written."""
    data = _csv(tmp_path, _with(40, "a", np.nan))
    out = tmp_path / "release.parquet"
    done = _script(
        "encode",
        "--bundle",
        world.bundle,
        "--trusted-key",
        world.pub,
        "--data",
        data,
        "--out",
        out,
        "--chunk-rows",
        "16",
    )
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ValueRangeError: "), done.stderr
    assert "'a'" in lines[0] and "data row 41" in lines[0] and "site.csv" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site.csv"]

    done = _script(
        "train",
        "--dataset",
        "paper-synthetic",
        "--key",
        world.key,
        "--passphrase-env",
        "WRONG_PASS",
        "--out",
        tmp_path / "b",
        WRONG_PASS="nope",
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("KeyFileError: wrong passphrase"), done.stderr
    assert not (tmp_path / "b").exists()
