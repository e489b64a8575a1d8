"""The HTML page and ``write_report``: verdicts, self-containment, escaping, numbers, absences."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from shared.errors import ConfigError, RunError
from shared.report import render_report, verdict, write_report
from shared.report.build import reconstruct_command, render_figures, reproducibility_record
from shared.report.html import fmt
from tests.shared.report.conftest import make_summary, numeric_leaves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """Collects tags, attributes and visible text of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.values: list[tuple[str, str]] = []  # (data-value, shown text)
        self._value: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        value = dict(attrs).get("data-value")
        if value is not None:
            self._value = value

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._value is not None:
            self.values.append((self._value, data))
            self._value = None


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


# ---------------------------------------------------------------------------------------------
# Verdict
# ---------------------------------------------------------------------------------------------
def test_verdict_words() -> None:
    released = make_summary()
    assert verdict(released)["word"] == "RELEASED"
    assert "0.5844 (central:s) ≤ threshold 0.7000" in verdict(released)["line"]

    gated = make_summary(passed=False)
    v = verdict(gated)
    assert v["word"] == "GATED" and v["css"] == "gated"
    assert "> threshold 0.5500" in v["line"]

    federated = make_summary()
    federated["release"] = {
        "rows": 0,
        "published": False,
        "reason": "federated mode: the encoded data stays at the sites",
    }
    v = verdict(federated)
    assert v["word"].startswith("PASSED") and "federated mode" in v["line"]

    failed = make_summary()
    failed["status"] = "failed"
    failed["error"] = {"type": "RunError", "message": "no node answered"}
    assert verdict(failed)["word"] == "FAILED"
    assert "RunError: no node answered" in verdict(failed)["line"]

    unmeasured = make_summary()
    unmeasured["gate"] = {"threshold": 0.7, "passed": False, "best_auc": None}
    assert verdict(unmeasured)["word"] == "GATED"
    assert "not measured" in verdict(unmeasured)["line"]


# ---------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------
def test_page_is_self_contained_and_escapes_data(summary: dict[str, Any]) -> None:
    figures = render_figures(summary=summary, audit=None, frontier=None, manifest=None)
    page = render_report(summary=summary, figures=figures)
    doc = parse(page)
    tags = {t for t, _ in doc.tags}
    assert "script" not in tags and "link" not in tags and "iframe" not in tags
    assert "<script>alert(1)</script>" not in page  # a reason is data, never markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "hospital-&lt;b&gt;1&lt;/b&gt;" in page
    for tag, attrs in doc.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            if value is None:
                continue
            assert value.startswith(("data:image/png;base64,", "#")), (tag, value[:60])
    assert "@import" not in page and "url(" not in page
    assert not re.search(r"https?://", page.split('<section id="raw">')[0])
    images = [a for t, a in doc.tags if t == "img"]
    assert len(images) == 1  # the attacker chart; no audit, no MI curves, no frontier here


def test_numbers_in_the_page_equal_the_summary(summary: dict[str, Any]) -> None:
    page = render_report(summary=summary)
    doc = parse(page)
    shown = doc.values
    assert shown, "number cells carry their exact value"
    for exact, text in shown:
        value = json.loads(exact)
        assert text == fmt(value), (exact, text)
    exact_values = {json.loads(v) for v, _ in shown}
    must = {
        "release.rows",
        "downstream.auc",
        "downstream.accuracy",
        "downstream.test_rows",
        "gate.threshold",
        "gate.best_auc",
        "audit.central.best_auc",
        "audit.central.best_accuracy",
        "audit.central.majority",
        "audit.central.min_log_rank_privacy",
        "audit.federated.best_auc",
        "audit.federated.majority",
        "audit.mi.public_label",
        "audit.mi.sensitive.s",
        "bundle.version",
    }
    leaves = dict(numeric_leaves(summary))
    for key in must:
        assert leaves[key] in exact_values, key
        assert fmt(leaves[key]) in "".join(doc.text), key
    # every per-attacker score of both audits is in a table
    for path, value in numeric_leaves(summary["audit"]):
        if ".per_attacker." in path and path.split(".")[-1] in ("auc", "accuracy"):
            assert value in exact_values, path


def test_missing_sections_say_what_produces_them(summary: dict[str, Any]) -> None:
    page = render_report(summary=summary)
    text = "".join(parse(page).text)
    assert "No audit.json in this run dir" in text
    assert "No frontier.json in this run dir" in text
    assert "No training curves: no bundle manifest" in text
    assert "Verdict: RELEASED" in text


def test_render_needs_something_to_show() -> None:
    with pytest.raises(ValueError):
        render_report(summary=None)


def test_a_minimal_summary_still_renders() -> None:
    """A coordinator that failed early writes nearly empty sections; the page must not break."""
    summary = {
        "run_id": "x",
        "status": "failed",
        "sites": [],
        "release": {"rows": 0},
        "downstream": {"mode": "release", "auc": None, "accuracy": None, "test_rows": 0},
        "audit": {"central": None, "federated": None, "mi": None},
        "gate": {"threshold": 0.7, "passed": False},
        "bundle": None,
        "timings": {},
        "error": {"type": "RunError", "message": "no encoder"},
    }
    page = render_report(summary=summary)
    text = "".join(parse(page).text)
    assert "Verdict: FAILED" in text and "no encoder" in text
    assert "No audit result in summary.json" in text


# ---------------------------------------------------------------------------------------------
# write_report
# ---------------------------------------------------------------------------------------------
def test_write_report_writes_page_and_figures_atomically(summary_run_dir: Path) -> None:
    path = write_report(summary_run_dir)
    assert path == summary_run_dir / "report.html"
    figures = sorted(p.name for p in (summary_run_dir / "figures").iterdir())
    assert figures == ["attackers.png"]
    assert (summary_run_dir / "figures" / "attackers.png").read_bytes().startswith(PNG_MAGIC)
    leftovers = [p.name for p in summary_run_dir.iterdir() if p.name.endswith(".tmp")]
    assert not leftovers
    # a second render replaces the figures as a whole (a stale figure never survives)
    (summary_run_dir / "figures" / "stale.png").write_bytes(b"old")
    write_report(summary_run_dir)
    assert not (summary_run_dir / "figures" / "stale.png").exists()


def test_reproducibility_block(summary_run_dir: Path, summary: dict[str, Any]) -> None:
    page = write_report(summary_run_dir).read_text(encoding="utf-8")
    assert "reconstructed from summary.json" in page
    assert "infoshape simulate --sites 2 --dataset paper-synthetic" in page
    assert "--seed 7" in page
    assert "of the environment that rendered this report" in page

    summary["reproduce"] = reproducibility_record(
        ["/usr/bin/infoshape", "simulate", "--out", "runs/a b"]
    )
    (summary_run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    page = write_report(summary_run_dir).read_text(encoding="utf-8")
    assert "infoshape simulate --out &#x27;runs/a b&#x27;" in page
    assert "recorded by the run" in page
    page = write_report(summary_run_dir, command="infoshape report RUN").read_text()
    assert "as given to the report command" in page


def test_reconstruct_command_skips_empty_options() -> None:
    line = reconstruct_command({"num-sites": 3, "bundle": "", "lambda": 2.0}, "runs/x")
    assert line == "infoshape simulate --sites 3 --lambda 2.0 --out runs/x"


def test_write_report_refuses_what_is_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        write_report(tmp_path / "nope")
    with pytest.raises(RunError, match="nothing to report"):
        write_report(tmp_path)
    (tmp_path / "summary.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(RunError, match="cannot be read"):
        write_report(tmp_path)


def test_frontier_only_and_audit_only_dirs(tmp_path: Path) -> None:
    frontier = {
        "dataset": "paper-synthetic",
        "seed": 0,
        "rows": {"public": 6},
        "privacy_metric": "p",
        "utility_metric": "u",
        "points": [
            {
                "kind": "raw",
                "param": None,
                "value": None,
                "private_auc": 0.93,
                "utility_auc": 0.95,
                "pareto": True,
            },
            {
                "kind": "infoshape",
                "param": "lambda",
                "value": 1.0,
                "private_auc": 0.53,
                "private_auc_sd": 0.0123,
                "utility_auc": 0.93,
                "utility_auc_sd": 0.0045,
                "pareto": True,
            },
            {
                "kind": "gaussian-noise",
                "param": "sigma",
                "value": 1.0,
                "private_auc": 0.8,
                "utility_auc": 0.85,
                "pareto": False,
            },
        ],
        "chance": {"runs": [0.49, 0.52], "mean": 0.505, "min": 0.49, "max": 0.52},
    }
    (tmp_path / "frontier.json").write_text(json.dumps(frontier), encoding="utf-8")
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "Privacy–utility frontier" in page and "0.5300" in page
    assert "0.0123" in page and "0.0045" in page  # the spread of a mean over several fits
    assert "Chance floor" in page and "mean 0.5050, max 0.5200" in page
    assert (tmp_path / "figures" / "frontier.png").read_bytes().startswith(PNG_MAGIC)


def test_shared_report_imports_no_flwr_or_upper_layers() -> None:
    """The report runs where flwr is absent (an auditor's laptop): shared/ never imports it."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    code = (
        "import sys, shared.report\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('flwr', 'server', 'client', 'simulations', 'ray')]\n"
        "assert not bad, bad\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=180, cwd=root)
