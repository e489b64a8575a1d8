"""Privacy–utility frontier on paper-synthetic: λ sweep, mean of several fits per point.

Issue 4: private AUC falls as λ grows while utility stays ≥ 0.88 up to λ = 2. Each point sits
beside the shuffled-S chance floor and the gaussian-noise baseline.

Writes bench/results/frontier.json: the machine, the wall time, per λ the mean ± sd of the
strongest attacker's AUC on S and of the best AUC on L, and the chance floor.

    .venv/bin/python bench/frontier.py [--lambdas 0 0.25 0.5 1 2] [--repeats 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Timer, machine_info, write_result  # noqa: E402
from shared.report import run_frontier  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0, 2.0])
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    machine = machine_info()
    with Timer() as t:
        result = run_frontier(
            "paper-synthetic", args.lambdas, args.sigmas, seed=args.seed, repeats=args.repeats
        )
    points = [
        {
            "kind": p["kind"],
            "value": p["value"],
            "private_auc": p["private_auc"],
            "private_auc_sd": p.get("private_auc_sd"),
            "utility_auc": p["utility_auc"],
            "utility_auc_sd": p.get("utility_auc_sd"),
            "pareto": p["pareto"],
        }
        for p in result["points"]
    ]
    for p in points:
        print(f"{p['kind']:15s} {p['value']!s:>5}  private {p['private_auc']:.3f}"
              f" ± {p['private_auc_sd'] or 0:.3f}  utility {p['utility_auc']:.3f}")
    chance = result["chance"]
    print(f"chance floor: mean {chance['mean']:.3f}, max {chance['max']:.3f}; {t.seconds:.0f} s")
    path = write_result("frontier", {
        "machine": machine,
        "seconds": t.seconds,
        "cpu_seconds": t.cpu_seconds,
        "repeats": args.repeats,
        "seed": args.seed,
        "rows": result["rows"],
        "chance": chance,
        "points": points,
        "frontier": result,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
