"""``infoshape audit`` / ``report`` / ``frontier`` / ``bakeoff`` through the real console script,
one failure path each, plus the report written at the end of ``simulate``.

Settings are tiny (a 40-step encoder, one attacker, no MI critics) so the file stays quick on a
busy two-core machine; the sweeps that fit encoders are marked ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.errors import RunError
from simulations.cli import main
from tests.shared.report.conftest import make_summary

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).with_name("infoshape")
ENTRY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "simulations.cli"]
FAST = ["--attackers", "logistic-regression", "--mi-steps", "0"]


def run_cli(*args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The console script as a user runs it (no TTY: no progress output)."""
    return subprocess.run(
        [*ENTRY, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def one_error_line(stderr: str, error_type: str | None = None) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    head = lines[0].split(": ", 1)[0]
    assert head.isidentifier() and head.endswith("Error"), stderr
    if error_type is not None:
        assert head == error_type, stderr
    assert "Traceback" not in stderr
    return lines[0]


def write_summary_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(make_summary()), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# --help
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["audit", "report", "frontier", "bakeoff"])
def test_help_has_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([command, "--help"])
    out = capsys.readouterr().out
    assert code == 0
    assert f"Example: infoshape {command}" in " ".join(out.split()).replace("│", "")
    assert "--json" in out and "--quiet" in out and "--debug" in out
    assert "--max-steps" not in out  # hidden


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def test_report_writes_html_and_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = write_summary_dir(tmp_path / "run")
    done = run_cli("report", run_dir, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    result = json.loads(done.stdout)
    assert result["report"] == str(run_dir / "report.html")
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "RELEASED" in html
    assert (run_dir / "figures").is_dir()
    assert all(Path(f).is_file() for f in result["figures"])
    # Without --json the path is printed for people (in-process: same entry function).
    assert main(["report", str(run_dir)]) == 0
    assert str(run_dir / "report.html") in capsys.readouterr().out


def test_report_without_summary_fails_with_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_cli("report", empty)
    assert done.returncode == 1
    assert "summary.json" in one_error_line(done.stderr, "RunError")
    assert not (empty / "report.html").exists()


def test_report_missing_dir_is_a_config_error(tmp_path: Path, capsys) -> None:
    code = main(["report", str(tmp_path / "nope"), "--json"])
    captured = capsys.readouterr()
    assert code == 1
    one_error_line(captured.err, "ConfigError")
    assert json.loads(captured.out)["error"]["type"] == "ConfigError"


# ---------------------------------------------------------------------------------------------
# audit
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small signed InfoShape bundle, a second (untrusted) key and a public table."""
    from shared.bundle import generate_keypair
    from shared.data import load_dataset
    from shared.pipeline import bundle_from_fitted, fit_shaper

    root = tmp_path_factory.mktemp("audit")
    data = load_dataset("paper-synthetic", seed=0)
    frame = data.frame.sample(n=1200, random_state=0)
    public, audit_rows = frame.iloc[:600], frame.iloc[600:]
    fitted = fit_shaper(public, data.spec, shaper="infoshape", lam=1.0, seed=0, max_steps=40)
    keys = generate_keypair(root / "keys")
    other = generate_keypair(root / "other")
    bundle_from_fitted(fitted).save(root / "bundle", keys.private)
    audit_rows.to_csv(root / "public.csv", index=False)
    return {
        "root": root,
        "bundle": root / "bundle",
        "key": keys.public,
        "other": other.public,
        "data": root / "public.csv",
    }


def test_audit_writes_audit_and_report_and_gates(signed: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "audit"
    done = run_cli(
        "audit",
        signed["bundle"],
        "--trusted-key",
        signed["key"],
        "--data",
        signed["data"],
        *FAST,
        "--max-private-auc",
        "0.0",  # any attacker beats 0: the gate must refuse
        "--out",
        out,
        "--json",
    )
    assert done.returncode == 3, done.stderr
    assert "--max-private-auc" in one_error_line(done.stderr, "GatedError")
    result = json.loads(done.stdout)
    assert result["passed"] is False and result["max_private_auc"] == 0.0
    audit = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    assert set(audit["settings"]) == {"raw", "random-encoder", "gaussian-noise", "encoder"}
    assert result["headline"]["encoder"]["best_auc"] == audit["headline"]["encoder"]["best_auc"]
    assert (out / "report.html").is_file() and (out / "figures" / "roc.png").is_file()


@pytest.mark.slow
def test_audit_passes_without_a_gate(signed: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "audit"
    done = run_cli(
        "audit",
        signed["bundle"],
        "--trusted-key",
        signed["key"],
        "--data",
        signed["data"],
        *FAST,
        "--out",
        out,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert str(out / "report.html") in done.stdout
    assert (out / "audit.json").is_file()


def test_audit_with_a_wrong_trusted_key_fails_before_any_work(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "audit"
    done = run_cli(
        "audit",
        signed["bundle"],
        "--trusted-key",
        signed["other"],
        "--data",
        signed["data"],
        "--out",
        out,
        "--json",
    )
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert json.loads(done.stdout)["error"]["type"] == line.split(":", 1)[0]
    assert not (out / "audit.json").exists()


def test_audit_rejects_a_bad_threshold(signed: dict[str, Path], tmp_path: Path, capsys) -> None:
    code = main(
        [
            "audit",
            str(signed["bundle"]),
            "--trusted-key",
            str(signed["key"]),
            "--data",
            str(signed["data"]),
            "--max-private-auc",
            "1.5",
            "--out",
            str(tmp_path / "a"),
        ]
    )
    assert code == 1
    assert "--max-private-auc" in one_error_line(capsys.readouterr().err, "ConfigError")


# ---------------------------------------------------------------------------------------------
# frontier
# ---------------------------------------------------------------------------------------------
def test_frontier_bad_lambdas_fail_before_any_fit(tmp_path: Path) -> None:
    done = run_cli("frontier", "--lambdas", "0,abc", "--out", tmp_path / "f")
    assert done.returncode in (1, 2)
    assert "abc" in one_error_line(done.stderr)
    assert not (tmp_path / "f").exists()


def test_frontier_needs_label_with_data(tmp_path: Path, capsys) -> None:
    (tmp_path / "t.csv").write_text("a,y,s\n1,0,1\n", encoding="utf-8")
    code = main(["frontier", "--data", str(tmp_path / "t.csv"), "--out", str(tmp_path / "f")])
    assert code == 1
    assert "--label" in one_error_line(capsys.readouterr().err, "ConfigError")
    code = main(["frontier", "--lambdas", "-1", "--out", str(tmp_path / "f")])
    assert code == 1
    assert "--lambdas" in one_error_line(capsys.readouterr().err, "ConfigError")


@pytest.mark.slow
def test_frontier_sweeps_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "frontier"
    done = run_cli(
        "frontier",
        "--dataset",
        "paper-synthetic",
        "--lambdas",
        "0,2",
        "--sigmas",
        "1",
        "--max-steps",
        "30",
        "--attackers",
        "logistic-regression",
        "--repeats",
        "2",
        "--chance-runs",
        "2",
        "--out",
        out,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    result = json.loads(done.stdout)
    kinds = [(p["kind"], p["value"]) for p in result["points"]]
    assert kinds == [("raw", None), ("gaussian-noise", 1.0), ("infoshape", 0.0), ("infoshape", 2.0)]
    assert all(len(p["runs"]) == 2 for p in result["points"] if p["kind"] != "raw")
    assert len(result["chance"]["runs"]) == 2
    for name in ("frontier.json", "frontier.png", "report.html"):
        assert (out / name).is_file(), name
    assert (out / "figures" / "frontier.png").is_file()


# ---------------------------------------------------------------------------------------------
# bakeoff
# ---------------------------------------------------------------------------------------------
BAKEOFF_FAST = [*FAST, "--max-attack-rows", "400"]


def test_bakeoff_two_shapers(tmp_path: Path) -> None:
    out = tmp_path / "bake"
    done = run_cli(
        "bakeoff",
        "--dataset",
        "paper-synthetic",
        "--shaper",
        "identity",
        "--shaper",
        "random-encoder",
        *BAKEOFF_FAST,
        "--out",
        out,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    result = json.loads(done.stdout)
    assert [r["shaper"] for r in result["rows"]] == ["identity", "random-encoder"]
    assert result["errors"] == 0
    written = json.loads((out / "bakeoff.json").read_text(encoding="utf-8"))
    assert written["rows"][0]["private"]["auc"] == result["rows"][0]["private"]["auc"]
    assert (out / "bakeoff.md").is_file()


def test_bakeoff_unknown_shaper_fails(tmp_path: Path) -> None:
    done = run_cli(
        "bakeoff", "--dataset", "paper-synthetic", "--shaper", "nope", "--out", tmp_path / "b"
    )
    assert done.returncode != 0
    assert "nope" in one_error_line(done.stderr, "ConfigError")
    assert not (tmp_path / "b" / "bakeoff.json").exists()


def test_bakeoff_failed_row_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shared.bakeoff as bakeoff

    real = bakeoff._evaluate

    def flaky(label: str, name: str, *args, **kwargs):
        if name == "random-encoder":
            raise ValueError("boom")
        return real(label, name, *args, **kwargs)

    monkeypatch.setattr(bakeoff, "_evaluate", flaky)
    out = tmp_path / "bake"
    code = main(
        [
            "bakeoff",
            "--dataset",
            "paper-synthetic",
            "--shaper",
            "identity,random-encoder",
            *BAKEOFF_FAST,
            "--out",
            str(out),
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    line = one_error_line(captured.err, "RunError")
    assert "random-encoder" in line and "boom" in line
    written = json.loads((out / "bakeoff.json").read_text(encoding="utf-8"))
    assert written["errors"] == 1 and "error" not in written["rows"][0]


# ---------------------------------------------------------------------------------------------
# the report at the end of simulate
# ---------------------------------------------------------------------------------------------
def test_simulate_report_hook_writes_report(tmp_path: Path) -> None:
    from simulations.simulate import _write_run_report

    run_dir = write_summary_dir(tmp_path / "run")
    path = _write_run_report(run_dir)
    assert path == run_dir / "report.html" and path.is_file()
    assert (run_dir / "figures").is_dir()


def test_simulate_report_failure_keeps_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shared.report
    from simulations.simulate import _write_run_report

    def broken(*_args: object, **_kwargs: object) -> Path:
        raise ValueError("renderer exploded")

    monkeypatch.setattr(shared.report, "write_report", broken)
    run_dir = write_summary_dir(tmp_path / "run")
    with pytest.raises(RunError, match="renderer exploded") as info:
        _write_run_report(run_dir)
    assert "infoshape report" in str(info.value)
    assert json.loads((run_dir / "summary.json").read_text()) == make_summary()
    assert not (run_dir / "report.html").exists()


def test_summary_rendering_shows_report(capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.cli import _console, _render_summary

    summary = {**make_summary(), "run_dir": "runs/x", "report": "runs/x/report.html"}
    _render_summary(_console(), summary)
    assert "runs/x/report.html" in capsys.readouterr().out
