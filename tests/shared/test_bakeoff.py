"""The bake-off (shared.bakeoff): one protocol for every shaper, a valid bakeoff.json/.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import shared.bakeoff as bakeoff
from shared.bakeoff import BAKEOFF_FORMAT, bakeoff_settings, run_bakeoff
from shared.errors import ConfigError

QUICK = {"attackers": ["logistic-regression"], "mi_steps": 20, "max_attack_rows": 400}


def _check_row(row: dict) -> None:
    """The row schema the issue asks for (one row per shaper)."""
    assert set(row) >= {
        "shaper",
        "utility",
        "private",
        "log_rank_privacy",
        "mi",
        "epsilon",
        "fit_seconds",
        "encode_rows_per_second",
    }
    assert set(row["utility"]) >= {"auc", "accuracy"}
    assert set(row["private"]) >= {"auc", "accuracy", "balanced_accuracy", "majority"}
    for value in (row["utility"]["auc"], row["private"]["auc"], row["private"]["majority"]):
        assert 0.0 <= value <= 1.0
    assert 0.0 <= row["log_rank_privacy"] <= 1.0
    assert math.isfinite(row["mi"])
    assert row["fit_seconds"] >= 0 and row["encode_rows_per_second"] > 0


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("bakeoff") / "out"
    result = run_bakeoff(
        "paper-synthetic", out_dir=out, seed=0, shapers=["identity", "gaussian-noise"], **QUICK
    )
    return result, out


def test_quick_bakeoff_writes_valid_json_and_markdown(quick_run) -> None:
    result, out = quick_run
    on_disk = json.loads((out / "bakeoff.json").read_text())
    assert on_disk["format"] == BAKEOFF_FORMAT and on_disk["dataset"] == "paper-synthetic"
    assert [r["shaper"] for r in on_disk["rows"]] == ["identity", "gaussian-noise"]
    assert on_disk["errors"] == 0
    for row in on_disk["rows"]:
        _check_row(row)
        assert row["epsilon"] is None  # neither baseline has a DP guarantee
        assert "synthetic_to_real" in row  # both release in the input feature space
    # the raw release leaks S on paper-synthetic; the majority baseline is ~0.5 there
    identity = on_disk["rows"][0]
    assert identity["private"]["auc"] > 0.8 and identity["private"]["majority"] < 0.6
    assert on_disk["subsampled"] == {
        "attack": {"from": 3000, "to": 400},
        "test": {"from": 3000, "to": 400},
    }
    table = (out / "bakeoff.md").read_text()
    assert "| identity |" in table and "| gaussian-noise |" in table
    assert "Subsampled" in table
    assert sorted(p.name for p in out.iterdir()) == ["bakeoff.json", "bakeoff.md"]  # no temp files
    assert result["rows"][0]["utility"] == on_disk["rows"][0]["utility"]


def test_clustmix_row_reports_epsilon(tmp_path: Path) -> None:
    """digits is small (1,797 rows): one public cluster per class, so clustmix fits in seconds."""
    result = run_bakeoff("digits", out_dir=tmp_path, shapers=["clustmix"], **QUICK)
    (row,) = result["rows"]
    assert "error" not in row, row.get("traceback")
    _check_row(row)
    assert row["epsilon"] == 1.0 and row["delta"] == 1e-5
    assert row["privacy_report"]["l_min"] >= 1
    assert row["release"]["groups"] >= 1
    assert "1 (δ=1e-05)" in (tmp_path / "bakeoff.md").read_text()


def test_a_failing_shaper_is_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch) -> None:
    real = bakeoff._evaluate

    def flaky(label, name, *args, **kwargs):
        if name == "gaussian-noise":
            raise RuntimeError("boom")
        return real(label, name, *args, **kwargs)

    monkeypatch.setattr(bakeoff, "_evaluate", flaky)
    result = run_bakeoff(
        "paper-synthetic", out_dir=tmp_path, shapers=["gaussian-noise", "identity"], **QUICK
    )
    assert result["errors"] == 1
    assert result["rows"][0]["error"] == "RuntimeError: boom"
    _check_row(result["rows"][1])
    assert "failed: RuntimeError: boom" in (tmp_path / "bakeoff.md").read_text()


def test_settings_cover_the_registry_and_the_sweep() -> None:
    names = [name for _, name, _ in bakeoff_settings()]
    assert names[:4] == ["identity", "gaussian-noise", "random-encoder", "infoshape"]
    assert "clustmix" in names
    swept = bakeoff_settings(["gaussian-noise", "clustmix"], sweep=True, seed=7)
    labels = [label for label, _, _ in swept]
    assert labels == [
        "gaussian-noise",
        "gaussian-noise sigma=0.5",
        "gaussian-noise sigma=2",
        "clustmix",
        "clustmix epsilon=0.5",
        "clustmix epsilon=4",
    ]
    assert all(p["noise_seed"] == 7 for _, n, p in swept if n == "clustmix")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shapers": ["nope"]}, "unknown shaper"),
        ({"shapers": []}, "at least one"),
        ({"attackers": ["nope"]}, "nope"),
        ({"max_attack_rows": 5}, "max_attack_rows"),
        ({"mi_steps": -1}, "mi_steps"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(tmp_path: Path, kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        run_bakeoff("paper-synthetic", out_dir=tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_adult_needs_its_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="adult"):
        run_bakeoff("adult", out_dir=tmp_path, shapers=["identity"], **QUICK)
