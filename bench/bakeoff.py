"""Bake-off wall time and results on Adult and paper-synthetic, plus the quoted Adult sweeps.

Issue 5's target is ≤ 20 min per dataset on 2 cores. The sweeps are the ones docs/bakeoff.md
quotes (gen-filter KL budget, DPFE noise scale).

Writes bench/results/bakeoff.json: the machine, per dataset the wall and CPU seconds and the
bake-off's own JSON (one row per shaper setting); each run's bakeoff.json/.md lands in
bench/results/bakeoff-<run>/.

    .venv/bin/python bench/bakeoff.py [--data ../shared/data/adult] [--no-sweeps]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import shared.bakeoff as bakeoff  # noqa: E402
from bench.common import RESULTS, SHARED_DATA, Timer, machine_info, write_result  # noqa: E402

#: The gen-filter budgets docs/bakeoff.md reports beyond the --sweep pair (0.5 and 8).
GEN_FILTER_BUDGETS = [0.5, 8.0, 16.0, 32.0]


def _headline(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        if row.get("error"):
            print(f"  {row['setting']:28s} ERROR {row['error']}")
            continue
        print(f"  {row['setting']:28s} utility AUC {row['utility']['auc']:.3f}  "
              f"private AUC {row['private']['auc']:.3f}  fit {row['fit_seconds']:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "adult")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-sweeps", action="store_true", help="Only the two default runs.")
    args = parser.parse_args()

    payload: dict[str, Any] = {"machine": machine_info(), "runs": {}}
    runs = [("adult", {"data_path": args.data}), ("paper-synthetic", {})]
    for name, extra in runs:
        with Timer() as t:
            result = bakeoff.run_bakeoff(
                name, seed=args.seed, out_dir=RESULTS / f"bakeoff-{name}", **extra
            )
        print(f"{name}: {t.seconds:.0f} s wall ({t.cpu_seconds:.0f} s CPU)")
        _headline(result["rows"])
        payload["runs"][name] = {"seconds": t.seconds, "cpu_seconds": t.cpu_seconds,
                                 "within_20_minutes": t.seconds <= 1200, "bakeoff": result}
    if not args.no_sweeps:
        bakeoff.SWEEPS["gen-filter"] = [{"budget": b} for b in GEN_FILTER_BUDGETS]
        for shaper in ("gen-filter", "dpfe"):
            with Timer() as t:
                result = bakeoff.run_bakeoff(
                    "adult", data_path=args.data, seed=args.seed, shapers=[shaper], sweep=True,
                    out_dir=RESULTS / f"bakeoff-adult-sweep-{shaper}",
                )
            print(f"adult sweep {shaper}: {t.seconds:.0f} s")
            _headline(result["rows"])
            payload["runs"][f"adult-sweep-{shaper}"] = {"seconds": t.seconds, "bakeoff": result}
    print(f"wrote {write_result('bakeoff', payload)}")


if __name__ == "__main__":
    main()
