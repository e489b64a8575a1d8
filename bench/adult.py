"""UCI Adult (L = income > 50K, S = sex): raw features vs InfoShape at several λ.

Writes bench/results/adult.json with, per setting, utility (AUC, accuracy) and privacy (strongest
attacker's AUC, accuracy, balanced accuracy) next to the majority baseline.

    .venv/bin/python bench/adult.py [--data ../shared/data/adult] [--lambdas 0.5 1 2 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import SHARED_DATA, Timer, machine_info, write_result  # noqa: E402
from shared.attacks import run_attack_suite  # noqa: E402
from shared.data import load_dataset, split_frame  # noqa: E402
from shared.pipeline import encoder_from_fitted, fit_shaper  # noqa: E402


def evaluate(encoder, parts: dict[str, Any], seed: int) -> dict[str, Any]:
    z_a, y_a = encoder.encode_frame(parts["attack"])
    z_t, y_t = encoder.encode_frame(parts["test"])
    s_a = encoder.encode_sensitive(parts["attack"])[:, 0]
    s_t = encoder.encode_sensitive(parts["test"])[:, 0]
    utility = run_attack_suite(z_a, y_a, z_t, y_t, seed=seed)
    privacy = run_attack_suite(z_a, s_a, z_t, s_t, seed=seed)
    return {
        "utility": {"auc": utility.best_auc, "accuracy": utility.best_accuracy,
                    "majority": utility.majority},
        "private": {"auc": privacy.best_auc, "accuracy": privacy.best_accuracy,
                    "balanced_accuracy": privacy.best_balanced_accuracy,
                    "majority": privacy.majority, "best_attacker": privacy.best_attacker},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "adult")
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    data = load_dataset("adult", path=args.data, seed=args.seed)
    parts = split_frame(data.frame, {"public": 0.5, "attack": 0.3, "test": 0.2},
                        seed=args.seed, stratify="sex")
    rows: list[dict[str, Any]] = []
    settings = [("raw", "identity", {})] + [
        (f"infoshape lambda={lam}", "infoshape", {"lam": lam}) for lam in args.lambdas
    ]
    for label, shaper, params in settings:
        with Timer() as t:
            fitted = fit_shaper(parts["public"], data.spec, shaper=shaper, seed=args.seed, **params)
        row = {"setting": label, "shaper": shaper, **params, "fit_seconds": t.seconds,
               **evaluate(encoder_from_fitted(fitted), parts, args.seed)}
        rows.append(row)
        print(f"{label:24s} utility AUC {row['utility']['auc']:.3f} acc "
              f"{row['utility']['accuracy']:.3f} | private AUC {row['private']['auc']:.3f} acc "
              f"{row['private']['accuracy']:.3f} bal {row['private']['balanced_accuracy']:.3f} "
              f"(majority {row['private']['majority']:.3f}) fit {t.seconds:.1f}s", flush=True)
    path = write_result("adult", {"machine": machine_info(), "rows": rows,
                                  "splits": {k: len(v) for k, v in parts.items()}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
