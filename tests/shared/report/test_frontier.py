"""``run_frontier``: the λ / σ sweep, the Pareto front, and the paper-synthetic acceptance."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from shared.data import load_dataset
from shared.errors import ConfigError
from shared.report import pareto_front, run_frontier

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_pareto_front() -> None:
    points = [
        {"private_auc": 0.9, "utility_auc": 0.95},  # most useful: on the front
        {"private_auc": 0.55, "utility_auc": 0.93},  # on the front
        {"private_auc": 0.6, "utility_auc": 0.90},  # dominated by the one above
        {"private_auc": 0.5, "utility_auc": 0.70},  # most private: on the front
        {"private_auc": None, "utility_auc": 0.99},  # not measured: never on the front
        {"private_auc": 0.55, "utility_auc": 0.93},  # a tie dominates neither
    ]
    assert pareto_front(points) == [0, 1, 3, 5]


def test_noise_sweep_writes_json_and_png(tmp_path: Path) -> None:
    data = load_dataset("paper-synthetic", seed=1)
    frame = data.frame.sample(n=1500, random_state=1)
    result = run_frontier(
        frame,
        [],
        [0.25, 4.0],
        spec=data.spec,
        seed=1,
        out_dir=tmp_path,
        attackers=["logistic-regression", "knn"],
    )
    stored = json.loads((tmp_path / "frontier.json").read_text(encoding="utf-8"))
    assert stored == result
    assert (tmp_path / "frontier.png").read_bytes().startswith(PNG_MAGIC)
    kinds = [(p["kind"], p["value"]) for p in result["points"]]
    assert kinds == [("raw", None), ("gaussian-noise", 0.25), ("gaussian-noise", 4.0)]
    raw, low, high = result["points"]
    assert raw["private_auc"] > 0.8  # raw data leaks S
    assert high["private_auc"] < low["private_auc"] <= raw["private_auc"] + 0.02
    assert high["utility_auc"] < raw["utility_auc"]
    assert result["pareto"] == [i for i, p in enumerate(result["points"]) if p["pareto"]]
    assert result["rows"] == {"public": 900, "attack": 300, "test": 300}


def test_bad_sweeps_are_refused() -> None:
    data = load_dataset("paper-synthetic", seed=1)
    with pytest.raises(ConfigError, match="spec"):
        run_frontier(data.frame, [1.0], [])
    with pytest.raises(ConfigError, match="at least one"):
        run_frontier("paper-synthetic", [], [])
    with pytest.raises(ConfigError, match="lambda"):
        run_frontier("paper-synthetic", [-1.0], [])
    with pytest.raises(ConfigError, match="fractions"):
        run_frontier("paper-synthetic", [], [1.0], fractions={"public": 0.5, "test": 0.5})


@pytest.mark.slow
def test_paper_synthetic_frontier_acceptance(tmp_path: Path) -> None:
    """Issue 4 acceptance: ≥ 5 λ values; private AUC falls as λ grows; utility ≥ 0.88 up to λ=2.

    "Falls" is read with the attackers' own noise in mind: once S is hidden the strongest AUC
    sits at the floor (≈ 0.52-0.54 on 2,000 test rows) and neighbouring λ may swap by a point
    or two, so each step may rise by at most 0.03 while the whole sweep must fall by > 0.25.
    """
    lambdas = [0.0, 0.25, 0.5, 1.0, 2.0]
    started = time.perf_counter()
    result = run_frontier("paper-synthetic", lambdas, [0.5, 1.0, 2.0], seed=0, out_dir=tmp_path)
    seconds = time.perf_counter() - started
    shaped = [p for p in result["points"] if p["kind"] == "infoshape"]
    table = [(p["value"], round(p["private_auc"], 4), round(p["utility_auc"], 4)) for p in shaped]
    print(f"\nfrontier (λ, private AUC, utility AUC): {table}  [{seconds:.0f} s]")
    noise = [
        (p["value"], round(p["private_auc"], 4), round(p["utility_auc"], 4))
        for p in result["points"]
        if p["kind"] == "gaussian-noise"
    ]
    print(f"noise (σ, private AUC, utility AUC): {noise}")
    assert [p["value"] for p in shaped] == lambdas
    aucs = [p["private_auc"] for p in shaped]
    assert aucs[0] >= 0.8, table  # λ = 0 does not hide S
    assert aucs[-1] <= aucs[0] - 0.25, table
    assert all(b <= a + 0.03 for a, b in zip(aucs, aucs[1:], strict=False)), table
    assert all(p["utility_auc"] >= 0.88 for p in shaped if p["value"] <= 2.0), table
    # InfoShape beats noise: some λ is both more private and at least as useful as every σ.
    best_noise = min(noise, key=lambda n: n[1])
    assert any(
        p["private_auc"] < best_noise[1] and p["utility_auc"] >= best_noise[2] for p in shaped
    ), (table, noise)
    assert (tmp_path / "frontier.png").is_file()
