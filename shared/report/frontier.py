"""``run_frontier``: the privacy–utility trade-off, swept and plotted (DPFE-style).

One λ is one point; a user choosing λ needs the curve. The sweep fits InfoShape once per λ and
perturbs the data with gaussian noise once per σ (the baseline every privacy paper is compared
with), then measures every point identically:

- privacy: the strongest attacker's AUC on S (max over the suite and over sensitive columns),
  trained on T(P_attack) → S and scored on held-out rows — the threat model's adversary;
- utility: the best AUC on L over the same suite, trained on T(P_attack) → L and scored on the
  same held-out rows — what a downstream model can still get from the release.

Public, attack and test rows are disjoint (the encoder never sees the rows it is judged on). The
Pareto front (no other point is both more private and more useful) is marked, because only those
points are sensible choices.

Two things keep the curve readable where it matters, near chance:

- ``repeats``: each λ (and σ) is fitted with ``repeats`` seeds on the same split and measured by
  the same attackers; a point is the mean, with the spread and every run kept. One fit's strongest
  AUC moves by a point or two from seed to seed, which is as large as the differences between
  neighbouring λ once S is hidden.
- ``chance``: the floor of the privacy axis, measured rather than assumed. The same suite runs
  on the raw attack and test rows with S *shuffled* in both (independent permutations, so S is
  independent of the features by construction): what the strongest of several searched attackers
  reaches when there is nothing to learn. It sits above 0.5 because the best of several noisy
  AUCs on a finite test set is taken; a point inside that band is indistinguishable from no
  leakage on this many rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shared.atomic import atomic_write_bytes, atomic_write_text
from shared.attacks import run_attack_suite
from shared.data import TableSpec, load_dataset, split_frame
from shared.errors import ConfigError
from shared.pipeline import Encoder, encoder_from_fitted, fit_shaper
from shared.report.audit import json_safe, one_torch_thread

FRONTIER_FORMAT = "infoshape-frontier/1"
FRONTIER_JSON = "frontier.json"
FRONTIER_PNG = "frontier.png"
DEFAULT_LAMBDAS: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0)
DEFAULT_SIGMAS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
DEFAULT_FRACTIONS: dict[str, float] = {"public": 0.6, "attack": 0.2, "test": 0.2}


def pareto_front(points: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of the points no other point dominates (lower private AUC *and* higher utility,
    one strictly). Points with a missing figure are never on the front."""
    valid = [
        i
        for i, p in enumerate(points)
        if _finite(p.get("private_auc")) and _finite(p.get("utility_auc"))
    ]
    front = []
    for i in valid:
        pi, ui = float(points[i]["private_auc"]), float(points[i]["utility_auc"])
        dominated = any(
            float(points[j]["private_auc"]) <= pi
            and float(points[j]["utility_auc"]) >= ui
            and (float(points[j]["private_auc"]) < pi or float(points[j]["utility_auc"]) > ui)
            for j in valid
            if j != i
        )
        if not dominated:
            front.append(i)
    return front


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _measure(
    encoder: Encoder,
    parts: Mapping[str, pd.DataFrame],
    *,
    attackers: list[str] | None,
    seed: int,
) -> dict[str, Any]:
    """Privacy and utility of one point, on the attack (train) and test (score) rows."""
    X_a = encoder.features(parts["attack"], source="attack rows")
    X_t = encoder.features(parts["test"], source="test rows")
    Z_a, Z_t = encoder.shaper.transform(X_a), encoder.shaper.transform(X_t)
    schema = encoder.schema
    y_a = schema.encode_labels(parts["attack"])
    y_t = schema.encode_labels(parts["test"])
    s_a = schema.encode_sensitive(parts["attack"])
    s_t = schema.encode_sensitive(parts["test"])
    by_column: dict[str, Any] = {}
    for j, column in enumerate(schema.sensitive):
        suite = run_attack_suite(Z_a, s_a[:, j], Z_t, s_t[:, j], attackers=attackers, seed=seed)
        by_column[column] = {
            "best_auc": suite.best_auc,
            "best_attacker": suite.best_attacker,
            "best_accuracy": suite.best_accuracy,
            "majority": suite.majority,
            "min_log_rank_privacy": suite.min_log_rank_privacy,
        }
    utility = run_attack_suite(Z_a, y_a, Z_t, y_t, attackers=attackers, seed=seed)
    worst = max(
        by_column,
        key=lambda c: (
            -math.inf if not _finite(by_column[c]["best_auc"]) else by_column[c]["best_auc"]
        ),
    )
    return {
        "private_auc": by_column[worst]["best_auc"],
        "private_attacker": by_column[worst]["best_attacker"],
        "private_accuracy": by_column[worst]["best_accuracy"],
        "majority": by_column[worst]["majority"],
        "min_log_rank_privacy": min(v["min_log_rank_privacy"] for v in by_column.values()),
        "sensitive": by_column,
        "utility_auc": utility.best_auc,
        "utility_accuracy": utility.best_accuracy,
        "utility_attacker": utility.best_attacker,
    }


_AVERAGED = (
    "private_auc",
    "private_accuracy",
    "min_log_rank_privacy",
    "utility_auc",
    "utility_accuracy",
    "fit_seconds",
)


def _mean(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One frontier point from its runs: means of the figures, the spread of the two headline
    AUCs, the attacker that won most often, and every run kept (its per-column detail too)."""
    point: dict[str, Any] = {}
    for key in _AVERAGED:
        values = [float(r[key]) for r in runs if _finite(r.get(key))]
        if key in runs[0]:
            point[key] = float(np.mean(values)) if values else None
    for key in ("private_auc", "utility_auc"):
        values = [float(r[key]) for r in runs if _finite(r.get(key))]
        point[f"{key}_sd"] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    for key in ("private_attacker", "utility_attacker"):
        names = [str(r.get(key)) for r in runs]
        point[key] = max(dict.fromkeys(names), key=names.count)
    point["majority"] = runs[0]["majority"]
    if "steps" in runs[0]:
        point["steps"] = [r.get("steps") for r in runs]
    point["runs"] = runs
    return point


def _chance_floor(
    encoder: Encoder,
    parts: Mapping[str, pd.DataFrame],
    *,
    attackers: list[str] | None,
    seed: int,
    runs: int,
) -> dict[str, Any]:
    """The strongest attacker's AUC when S carries no signal: the suite runs on the raw rows with
    S shuffled in the attack rows and, independently, in the test rows (fresh permutations per run).

    Shuffling the training S alone is not a null: a model fitted to noise is still a function of
    features that predict S, and its AUC against the true S swings far from 0.5 either way. With
    both shuffled, S is independent of everything the attackers see, so what remains is the
    auditor's own optimism: the best of several noisy AUCs on a finite test set. Per sensitive
    column; the worst column's value is kept, as for the points."""
    schema = encoder.schema
    Z_a = encoder.shaper.transform(encoder.features(parts["attack"], source="attack rows"))
    Z_t = encoder.shaper.transform(encoder.features(parts["test"], source="test rows"))
    s_a = schema.encode_sensitive(parts["attack"])
    s_t = schema.encode_sensitive(parts["test"])
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(runs):
        worst = -math.inf
        for j in range(s_a.shape[1]):
            suite = run_attack_suite(
                Z_a,
                rng.permutation(s_a[:, j]),
                Z_t,
                rng.permutation(s_t[:, j]),
                attackers=attackers,
                seed=seed,
            )
            if _finite(suite.best_auc):
                worst = max(worst, float(suite.best_auc))
        values.append(worst if math.isfinite(worst) else None)
    finite = [v for v in values if v is not None]
    return {
        "method": "strongest attacker on the raw rows with S shuffled independently in the attack "
        "and the test rows (S independent of the features)",
        "runs": values,
        "mean": float(np.mean(finite)) if finite else None,
        "sd": float(np.std(finite, ddof=1)) if len(finite) > 1 else None,
        "min": float(np.min(finite)) if finite else None,
        "max": float(np.max(finite)) if finite else None,
    }


def run_frontier(
    data: str | pd.DataFrame = "paper-synthetic",
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    sigmas: Sequence[float] = DEFAULT_SIGMAS,
    *,
    spec: TableSpec | None = None,
    seed: int = 0,
    out_dir: str | Path | None = None,
    data_path: str | Path | None = None,
    attackers: Sequence[str] | None = None,
    schedule: str = "alternating",
    max_steps: int | None = None,
    fractions: Mapping[str, float] | None = None,
    include_raw: bool = True,
    threshold: float | None = None,
    repeats: int = 3,
    chance_runs: int = 10,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Sweep λ (InfoShape) and σ (gaussian noise); return the frontier and write it to ``out_dir``.

    Args:
        data: a built-in dataset name (``paper-synthetic``, ``adult``, ``digits``) or a table;
            a table needs ``spec``.
        lambdas: λ values to fit InfoShape with (each is one full fit: the expensive part).
        sigmas: noise levels of the gaussian-noise baseline (cheap).
        spec: the table's spec when ``data`` is a DataFrame.
        seed: seeds the split, every fit and every attacker.
        out_dir: where ``frontier.json`` and ``frontier.png`` go (atomically); a run dir works,
            and its ``report.html`` then shows the frontier. ``None`` writes nothing.
        data_path: directory of a dataset's files (``adult``).
        attackers: attacker names (default: the full suite).
        schedule, max_steps: InfoShape training options (``max_steps`` caps encoder steps).
        fractions: ``{"public", "attack", "test"}`` shares of the rows (default 0.6/0.2/0.2).
        include_raw: add the raw data as a reference point.
        threshold: a gate threshold to draw on the plot (e.g. ``--max-private-auc``).
        repeats: fits per λ / σ (seeds ``seed``, ``seed + 1``, …); a point is their mean.
        chance_runs: shuffled-S runs that measure the chance floor (0 skips it).
        progress: called with a short message before each point.

    Returns:
        ``{"format", "dataset", "rows", "seed", "points", "pareto", ...}``; each point has
        ``kind`` (``infoshape`` | ``gaussian-noise`` | ``raw``), ``param``, ``value``,
        ``private_auc``, ``utility_auc`` (means over ``runs``), their ``*_sd`` and ``pareto``;
        ``chance`` holds the shuffled-S floor (``None`` when ``chance_runs`` is 0).
    """
    with one_torch_thread():
        return _sweep(
            data,
            lambdas,
            sigmas,
            spec=spec,
            seed=seed,
            out_dir=out_dir,
            data_path=data_path,
            attackers=attackers,
            schedule=schedule,
            max_steps=max_steps,
            fractions=fractions,
            include_raw=include_raw,
            threshold=threshold,
            repeats=repeats,
            chance_runs=chance_runs,
            progress=progress,
        )


def _sweep(
    data: str | pd.DataFrame,
    lambdas: Sequence[float],
    sigmas: Sequence[float],
    *,
    spec: TableSpec | None,
    seed: int,
    out_dir: str | Path | None,
    data_path: str | Path | None,
    attackers: Sequence[str] | None,
    schedule: str,
    max_steps: int | None,
    fractions: Mapping[str, float] | None,
    include_raw: bool,
    threshold: float | None,
    repeats: int,
    chance_runs: int,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    lambdas = [float(v) for v in lambdas]
    sigmas = [float(v) for v in sigmas]
    if not lambdas and not sigmas:
        raise ConfigError("give at least one λ or one σ to sweep")
    for name, values in (("lambda", lambdas), ("sigma", sigmas)):
        bad = [v for v in values if not (math.isfinite(v) and v >= 0)]
        if bad:
            raise ConfigError(f"{name} values must be finite and >= 0; got {bad}")
    for name, value, least in (("repeats", repeats, 1), ("chance_runs", chance_runs, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be an integer >= {least}; got {value!r}")
    if isinstance(data, str):
        if spec is not None:
            raise ConfigError("spec goes with a table; a built-in dataset brings its own")
        dataset = load_dataset(data, path=data_path, seed=seed)
        frame, spec, source = dataset.frame, dataset.spec, dataset.name
    else:
        if spec is None:
            raise ConfigError("a table needs spec=TableSpec(label=..., sensitive=[...])")
        frame, source = data, "table"
    shares = dict(fractions or DEFAULT_FRACTIONS)
    if set(shares) != {"public", "attack", "test"}:
        raise ConfigError(f"fractions needs exactly public, attack and test; got {sorted(shares)}")
    stratify = spec.sensitive[0] if spec.sensitive else None
    parts = split_frame(frame, shares, seed=seed, stratify=stratify)
    names = list(dict.fromkeys(attackers)) if attackers else None

    points: list[dict[str, Any]] = []
    raw = encoder_from_fitted(
        fit_shaper(parts["public"], spec, shaper="identity", source="public rows")
    )
    if include_raw:
        say("raw data")
        points.append(
            {
                "kind": "raw",
                "param": None,
                "value": None,
                **_measure(raw, parts, attackers=names, seed=seed),
            }
        )
    chance = None
    if chance_runs:
        say(f"chance floor: attackers on shuffled S ×{chance_runs}")
        chance = _chance_floor(raw, parts, attackers=names, seed=seed, runs=chance_runs)
    for sigma in sigmas:
        say(f"gaussian noise σ={sigma:g}")
        runs = []
        for r in range(repeats):
            noisy = encoder_from_fitted(
                fit_shaper(
                    parts["public"],
                    spec,
                    shaper="gaussian-noise",
                    source="public rows",
                    sigma=sigma,
                    seed=seed + r,
                )
            )
            runs.append({"seed": seed + r, **_measure(noisy, parts, attackers=names, seed=seed)})
        points.append({"kind": "gaussian-noise", "param": "sigma", "value": sigma, **_mean(runs)})
    for lam in lambdas:
        runs = []
        for r in range(repeats):
            say(f"InfoShape λ={lam:g}: training" + (f" (seed {seed + r})" if repeats > 1 else ""))
            t = time.perf_counter()
            params: dict[str, Any] = {"lam": lam, "seed": seed + r, "schedule": schedule}
            if max_steps is not None:
                params["max_steps"] = max_steps
            fitted = fit_shaper(
                parts["public"], spec, shaper="infoshape", source="public rows", **params
            )
            fit_seconds = time.perf_counter() - t
            say(f"InfoShape λ={lam:g}: attackers")
            metrics = fitted.shaper.training_metrics() or {}
            runs.append(
                {
                    "seed": seed + r,
                    **_measure(encoder_from_fitted(fitted), parts, attackers=names, seed=seed),
                    "fit_seconds": round(fit_seconds, 3),
                    "steps": metrics.get("steps"),
                }
            )
        points.append({"kind": "infoshape", "param": "lambda", "value": lam, **_mean(runs)})
    front = pareto_front(points)
    for i, point in enumerate(points):
        point["pareto"] = i in front
    result = json_safe(
        {
            "format": FRONTIER_FORMAT,
            "dataset": source,
            "label": spec.label,
            "sensitive": list(spec.sensitive),
            "rows": {k: int(len(v)) for k, v in parts.items()},
            "seed": int(seed),
            "schedule": schedule,
            "max_steps": max_steps,
            "attackers": names,
            "lambdas": lambdas,
            "sigmas": sigmas,
            "threshold": threshold,
            "repeats": repeats,
            "privacy_metric": "strongest attacker's AUC on S (max over attackers and sensitive "
            "columns), trained on T(attack rows), scored on test rows"
            + (f"; mean of {repeats} fits" if repeats > 1 else ""),
            "utility_metric": "best AUC on L over the same suite, same rows",
            "chance": chance,
            "points": points,
            "pareto": front,
            "seconds": round(time.perf_counter() - started, 3),
        }
    )
    if out_dir is not None:
        write_frontier(out_dir, result)
    return result


def write_frontier(out_dir: str | Path, result: Mapping[str, Any]) -> Path:
    """Write ``frontier.json`` and ``frontier.png`` into ``out_dir`` (each atomically)."""
    import json

    from shared.report.figures import chance_band, frontier_figure

    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(
        directory / FRONTIER_PNG,
        frontier_figure(
            result["points"],
            threshold=result.get("threshold"),
            chance=chance_band(result.get("chance")),
        ),
    )
    return atomic_write_text(
        directory / FRONTIER_JSON, json.dumps(result, indent=2, allow_nan=False) + "\n"
    )


__all__ = [
    "DEFAULT_LAMBDAS",
    "DEFAULT_SIGMAS",
    "FRONTIER_FORMAT",
    "FRONTIER_JSON",
    "FRONTIER_PNG",
    "pareto_front",
    "run_frontier",
    "write_frontier",
]
