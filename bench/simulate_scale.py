"""Many simulated hospitals end to end on Flower's in-process runtime (issue 3: 32 sites in
≤ 90 s, 64 complete). Writes bench/results/simulate_scale.json.

Each size runs twice: once training the encoder inside the run (the default main job), and once
with an existing signed bundle (`--bundle`), which isolates the federation's own cost.

    .venv/bin/python bench/simulate_scale.py [--sites 32 64]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine_info, write_result  # noqa: E402
from simulations.simulate import SimulateOptions, run_simulate  # noqa: E402


def one(sites: int, out: Path, **extra: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    summary = run_simulate(SimulateOptions(sites=sites, out=str(out), **extra))
    wall = time.perf_counter() - t0
    statuses = [s["status"] for s in summary["sites"]]
    return {
        "sites": sites,
        "wall_seconds": wall,
        "ok_sites": statuses.count("ok"),
        "release_rows": summary["release"]["rows"],
        "downstream_auc": summary["downstream"]["auc"],
        "audit_central_best_auc": summary["audit"]["central"]["best_auc"],
        "audit_federated_best_auc": summary["audit"]["federated"]["best_auc"],
        "timings": summary.get("timings"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[32, 64])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        first = one(3, base / "seed-run")  # trains and signs the bundle reused below
        bundle, key = base / "seed-run" / "bundle", base / "seed-run" / "keys" / "signing.pub"
        for n in args.sites:
            trained = one(n, base / f"train-{n}")
            reused = one(n, base / f"bundle-{n}", bundle=str(bundle), trusted_key=str(key))
            rows += [{"encoder": "trained in the run", **trained},
                     {"encoder": "existing signed bundle", **reused}]
            print(f"{n} sites: {trained['wall_seconds']:.1f}s with training, "
                  f"{reused['wall_seconds']:.1f}s with an existing bundle", flush=True)
    path = write_result("simulate_scale", {"machine": machine_info(), "reference_3_sites": first,
                                           "rows": rows, "target": "32 sites <= 90 s"})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
