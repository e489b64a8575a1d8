"""``audit_bundle``: how much an encoder leaks, next to what raw data, noise and a random map leak.

A single private AUC means little on its own: 0.58 is excellent if the raw data gives 0.95 and
worthless if it gives 0.60. So the audit measures the encoder *and* three baselines on the same
rows, with the same attack split, the same attacker suite and the same seed:

- ``raw``: the preprocessed features x themselves (what releasing the data would leak);
- ``random-encoder``: an untrained network of the encoder's architecture (what any bottleneck of
  that width buys without training);
- ``gaussian-noise``: x plus N(0, σ²) per standardised feature (the classic perturbation);
- ``encoder``: the audited T (from a verified bundle or a freshly fitted shaper).

Per setting and per label it reports the strongest attacker (threat model: the adversary knows T
and holds public samples with S, so it picks its best tool), the majority baseline, log-rank
privacy (paper 003), neural MI estimates Ĩ(·;T), and the strongest attacker's ROC curve (the data
of paper Fig. 2). The raw setting's MI estimates are Ĩ(L;x) and Ĩ(S;x), the reference lines of
paper Fig. 3.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import roc_curve
from sklearn.model_selection import train_test_split

from shared.attacks import run_attack_suite
from shared.attacks.base import Attacker
from shared.attacks.logrank import log_rank_privacy_from_proba
from shared.attacks.metrics import majority_class, score_predictions
from shared.attacks.suite import SuiteResult
from shared.bundle import EncoderBundle
from shared.errors import ConfigError, LabelError
from shared.jsonsafe import json_safe
from shared.pipeline import Encoder, FittedShaper, encoder_from_fitted, open_bundle
from shared.shapers import GaussianNoiseShaper, RandomEncoderShaper

AUDIT_FORMAT = "infoshape-audit/1"
#: Settings in the order of paper Fig. 2 (raw, random, noise, the shaped encoder).
SETTINGS: tuple[str, ...] = ("raw", "random-encoder", "gaussian-noise", "encoder")
ROC_POINTS = 201

EncoderLike = Encoder | EncoderBundle | FittedShaper | str | os.PathLike[str]
Progress = Callable[[str], None]


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the MI critics and the MLP attacker on one torch thread, then restore the setting.

    Their networks are tiny; on a shared 2-core host, two intra-op threads made one 60-step MI
    estimate 30x slower (22 s against 0.7 s, measured) through oversubscription.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def resolve_encoder(source: EncoderLike, trusted_keys: Any = None) -> Encoder:
    """Any way of holding an encoder → the one :class:`Encoder` interface.

    A path is loaded with :meth:`EncoderBundle.load`, which verifies the signature against
    ``trusted_keys`` before any weight is read; auditing an unverified encoder would audit
    something other than what the sites run.
    """
    if isinstance(source, Encoder):
        return source
    if isinstance(source, EncoderBundle):
        return open_bundle(source)
    if isinstance(source, FittedShaper):
        return encoder_from_fitted(source)
    if isinstance(source, str | os.PathLike):
        if trusted_keys is None:
            raise ConfigError(
                f"bundle {source}: pass trusted_keys (the public key that signed it) so the "
                "audit checks the signature before using the weights"
            )
        return open_bundle(EncoderBundle.load(Path(source), trusted_keys))
    raise ConfigError(
        "bundle_or_encoder must be an Encoder, an EncoderBundle, a FittedShaper or a bundle "
        f"path; got {type(source).__name__}"
    )


def _encoder_info(encoder: Encoder) -> dict[str, Any]:
    shaper = encoder.shaper
    lam = getattr(shaper, "lam", None)
    return {
        "fingerprint": encoder.fingerprint,
        "shaper": getattr(shaper, "name", type(shaper).__name__),
        "lambda": float(lam) if isinstance(lam, int | float) else None,
        "n_components": int(encoder.n_components),
        "n_inputs": int(shaper.n_features_in_),
    }


def _random_encoder(encoder: Encoder, X: np.ndarray, seed: int) -> RandomEncoderShaper:
    """An untrained network shaped like the audited encoder (same hidden widths, k, activation),
    so the comparison isolates what *training* buys."""
    shaper = encoder.shaper
    hidden = tuple(getattr(shaper, "hidden", (10,))) or (10,)
    activation = str(getattr(shaper, "activation", "tanh"))
    return RandomEncoderShaper(
        hidden=hidden, n_components=int(encoder.n_components), activation=activation, seed=seed
    ).fit(X)


# ---------------------------------------------------------------------------------------------
# ROC curves
# ---------------------------------------------------------------------------------------------
def roc_points(
    y_true: np.ndarray, proba: np.ndarray, classes: np.ndarray, *, points: int = ROC_POINTS
) -> dict[str, list[float]] | None:
    """An ROC curve as ``{"fpr", "tpr"}`` on a fixed FPR grid (binary: positive = the larger
    class; multi-class: the macro average of the one-vs-rest curves, as the suite's AUC is).

    A fixed grid keeps ``audit.json`` small and the curves comparable across settings; the AUC
    reported next to a curve is the suite's, computed on the exact scores. ``None`` when the
    test rows hold fewer than two classes (no curve exists).
    """
    y = np.asarray(y_true)
    cls = np.asarray(classes)
    present = [j for j, c in enumerate(cls) if np.any(y == c)]
    if len(present) < 2:
        return None
    grid = np.linspace(0.0, 1.0, points)
    targets = [len(cls) - 1] if len(cls) == 2 else present
    curves = []
    for j in targets:
        positive = y == cls[j]
        if positive.all() or not positive.any():
            continue
        fpr, tpr, _ = roc_curve(positive, proba[:, j])
        curves.append(np.interp(grid, fpr, tpr))
    if not curves:
        return None
    tpr_mean = np.mean(curves, axis=0)
    tpr_mean[0] = 0.0 if tpr_mean[0] < 1e-12 else tpr_mean[0]
    return {
        "fpr": [round(float(v), 5) for v in grid],
        "tpr": [round(float(v), 5) for v in tpr_mean],
    }


def _best_curve(suite: SuiteResult, Z_test: np.ndarray, y_test: np.ndarray) -> dict[str, Any]:
    attacker: Attacker | None = suite.fitted.get(suite.best_attacker)
    out: dict[str, Any] = {"attacker": suite.best_attacker, "auc": _num(suite.best_auc)}
    if attacker is None:
        return out
    keep = np.isin(y_test, attacker.classes_)
    if keep.sum() == 0:
        return out
    proba = attacker.predict_proba(Z_test[keep])
    curve = roc_points(y_test[keep], proba, attacker.classes_)
    if curve is not None:
        out.update(curve)
    return out


# ---------------------------------------------------------------------------------------------
# The audit
# ---------------------------------------------------------------------------------------------
def audit_bundle(
    bundle_or_encoder: EncoderLike,
    public_frame: pd.DataFrame,
    *,
    release_frame: pd.DataFrame | None = None,
    seed: int = 0,
    trusted_keys: Any = None,
    attackers: Sequence[str] | None = None,
    sigma: float = 1.0,
    mi_steps: int = 500,
    holdout: float = 0.3,
    settings: Sequence[str] = SETTINGS,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Audit an encoder on a public table with S, side by side with the baselines.

    Args:
        bundle_or_encoder: an :class:`Encoder`, a verified :class:`EncoderBundle`, a
            :class:`FittedShaper`, or a bundle path (then ``trusted_keys`` is required).
        public_frame: public rows with features, the label L and every sensitive column S — the
            adversary's own data. Split into attack-training and holdout rows (``holdout``),
            stratified on the first sensitive column.
        release_frame: optional. A release table (``z_0..z_{k-1}`` + label, as in
            ``release/<site>.parquet``): reports what the adversary infers about the released
            rows and how well a model trained on the release predicts L on the public holdout.
            Or a site table (features + S): scores the encoder's attackers on it, as the
            federated audit does at a hospital.
        seed: seeds the split, the baselines, the attackers and the MI critics.
        trusted_keys: public key(s) that must have signed a bundle given as a path.
        attackers: attacker names (default: the full suite).
        sigma: noise level of the gaussian-noise baseline (in feature standard deviations).
        mi_steps: critic steps per MI estimate; 0 skips the MI estimates.
        holdout: fraction of ``public_frame`` held out to score the attackers.
        settings: which of :data:`SETTINGS` to run (``encoder`` is always run).
        progress: called with a short message before each step (for a CLI progress line).

    Returns:
        A JSON-safe dict (format :data:`AUDIT_FORMAT`): ``settings`` (per setting: ``privacy``
        per sensitive column and ``utility`` as attacker-suite dicts, ``mi``, ``roc``),
        ``headline`` (the encoder's strongest attacker over sensitive columns, with the raw
        data's for contrast), ``reference`` (Ĩ(L;x), Ĩ(S;x) from the raw setting), ``release``.
    """
    with one_torch_thread():
        return _audit(
            bundle_or_encoder,
            public_frame,
            release_frame=release_frame,
            seed=seed,
            trusted_keys=trusted_keys,
            attackers=attackers,
            sigma=sigma,
            mi_steps=mi_steps,
            holdout=holdout,
            settings=settings,
            progress=progress,
        )


def _audit(
    bundle_or_encoder: EncoderLike,
    public_frame: pd.DataFrame,
    *,
    release_frame: pd.DataFrame | None,
    seed: int,
    trusted_keys: Any,
    attackers: Sequence[str] | None,
    sigma: float,
    mi_steps: int,
    holdout: float,
    settings: Sequence[str],
    progress: Progress | None,
) -> dict[str, Any]:
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise ConfigError(f"settings: unknown {unknown}; choose from {', '.join(SETTINGS)}")
    if not 0.05 <= holdout <= 0.5:
        raise ConfigError(f"holdout must lie in [0.05, 0.5]; got {holdout}")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ConfigError(f"sigma must be a finite number >= 0; got {sigma}")
    if mi_steps < 0:
        raise ConfigError(f"mi_steps must be >= 0 (0 skips MI); got {mi_steps}")
    encoder = resolve_encoder(bundle_or_encoder, trusted_keys)
    schema = encoder.schema
    if not schema.sensitive:
        raise ConfigError("the encoder's schema names no sensitive column; nothing to audit")
    X = encoder.features(public_frame, source="public table")
    y = schema.encode_labels(public_frame, source="public table")
    s = schema.encode_sensitive(public_frame, source="public table")
    n = X.shape[0]
    index = np.arange(n)
    counts = np.unique(s[:, 0], return_counts=True)[1]
    try:
        tr, te = train_test_split(
            index,
            test_size=holdout,
            random_state=seed,
            stratify=s[:, 0] if counts.min() >= 2 else None,
        )
    except ValueError as exc:
        raise LabelError(
            f"the public table ({n} rows) cannot be split for an attack: {exc}"
        ) from None
    names = list(dict.fromkeys(attackers)) if attackers else None

    transforms: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {}
    order = [name for name in SETTINGS if name in settings or name == "encoder"]
    info = _encoder_info(encoder)
    for name in order:
        if name == "raw":
            transforms[name] = ("raw data", lambda A: A)
        elif name == "random-encoder":
            rnd = _random_encoder(encoder, X, seed)
            transforms[name] = ("random encoder", rnd.transform)
        elif name == "gaussian-noise":
            noise = GaussianNoiseShaper(sigma=sigma, seed=seed).fit(X)
            transforms[name] = (f"gaussian noise σ={sigma:g}", noise.transform)
        else:
            label = str(info["shaper"])
            if info["lambda"] is not None:
                label += f" λ={info['lambda']:g}"
            transforms[name] = (label, encoder.shaper.transform)

    results: dict[str, Any] = {}
    encoder_suites: dict[str, SuiteResult] = {}
    Z_by_setting: dict[str, np.ndarray] = {}
    for name, (label, transform) in transforms.items():
        say(f"{label}: encoding")
        Z = np.asarray(transform(X), dtype=np.float32)
        Z_by_setting[name] = Z
        privacy: dict[str, Any] = {}
        roc_s: dict[str, Any] = {}
        for j, column in enumerate(schema.sensitive):
            say(f"{label}: attackers on {column}")
            suite = run_attack_suite(Z[tr], s[tr, j], Z[te], s[te, j], attackers=names, seed=seed)
            privacy[column] = suite.to_dict()
            roc_s[column] = _best_curve(suite, Z[te], s[te, j])
            if name == "encoder":
                encoder_suites[column] = suite
        say(f"{label}: utility on {schema.label}")
        utility = run_attack_suite(Z[tr], y[tr], Z[te], y[te], attackers=names, seed=seed)
        mi: dict[str, Any] | None = None
        if mi_steps:
            from shared.mi import estimate_mi  # torch: only imported when MI is asked for

            say(f"{label}: MI estimates")
            mi = {
                "public": estimate_mi(Z, y, steps=mi_steps, seed=seed),
                "sensitive": {
                    c: estimate_mi(Z, s[:, j], steps=mi_steps, seed=seed)
                    for j, c in enumerate(schema.sensitive)
                },
            }
        results[name] = {
            "label": label,
            "n_components": int(Z.shape[1]),
            "privacy": privacy,
            "utility": utility.to_dict(),
            "mi": mi,
            "roc": {"public": _best_curve(utility, Z[te], y[te]), "sensitive": roc_s},
        }

    out: dict[str, Any] = {
        "format": AUDIT_FORMAT,
        "encoder": info,
        "label": schema.label,
        "sensitive": list(schema.sensitive),
        "rows": {"total": int(n), "train": int(len(tr)), "holdout": int(len(te))},
        "seed": int(seed),
        "attackers": names or sorted(next(iter(encoder_suites.values())).per_attacker),
        "sigma": float(sigma),
        "mi_steps": int(mi_steps),
        "mi_unit": "nats",
        "settings": results,
        "headline": {name: _headline(entry) for name, entry in results.items()},
        "reference": _reference(results.get("raw")),
        "release": None,
    }
    if release_frame is not None:
        say("release table")
        out["release"] = _audit_release(
            encoder,
            release_frame,
            encoder_suites,
            Z_by_setting["encoder"][te],
            y[te],
            s[tr],
            attackers=names,
            seed=seed,
        )
    out["seconds"] = round(time.perf_counter() - started, 3)
    return json_safe(out)


def _headline(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The most exposed sensitive column of one setting (the figure the gate would use)."""
    privacy: Mapping[str, Mapping[str, Any]] = entry["privacy"]

    def key(item: tuple[str, Mapping[str, Any]]) -> float:
        auc = item[1].get("best_auc")
        return -math.inf if auc is None else float(auc)

    column, suite = max(privacy.items(), key=key)
    return {
        "sensitive": column,
        "best_auc": suite.get("best_auc"),
        "best_attacker": suite.get("best_attacker"),
        "best_accuracy": suite.get("best_accuracy"),
        "best_balanced_accuracy": suite.get("best_balanced_accuracy"),
        "majority": suite.get("majority"),
        "min_log_rank_privacy": min(
            (
                v["min_log_rank_privacy"]
                for v in privacy.values()
                if v.get("min_log_rank_privacy") is not None
            ),
            default=None,
        ),
        "utility_auc": entry["utility"].get("best_auc"),
        "utility_accuracy": entry["utility"].get("best_accuracy"),
    }


def _reference(raw: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Ĩ(L;x) and Ĩ(S;x): the MI estimates of the raw setting (paper Fig. 3's dashed lines)."""
    if not raw or not raw.get("mi"):
        return None
    return {
        "public": raw["mi"]["public"],
        "sensitive": dict(raw["mi"]["sensitive"]),
        "what": "MI estimates on the raw (preprocessed) features x",
    }


# ---------------------------------------------------------------------------------------------
# A release or a site table
# ---------------------------------------------------------------------------------------------
def _audit_release(
    encoder: Encoder,
    frame: pd.DataFrame,
    suites: Mapping[str, SuiteResult],
    Z_holdout: np.ndarray,
    y_holdout: np.ndarray,
    s_train: np.ndarray,
    *,
    attackers: list[str] | None,
    seed: int,
) -> dict[str, Any]:
    """What the adversary gets from a release table, or what the attackers score on a site table.

    A release (``z_*`` columns) holds no S, so leakage cannot be *scored* on it; what can be said
    is how confidently the strongest attacker would label its rows (the adversary's view) and
    whether it still carries L (a model trained on it, tested on the public holdout). A site
    table holds x and S, so the attackers are scored on it exactly as the federated audit does.
    """
    k = encoder.n_components
    z_cols = [f"z_{j}" for j in range(k)]
    schema = encoder.schema
    if all(c in frame.columns for c in z_cols):
        extra = [c for c in frame.columns if c not in z_cols and c != schema.label]
        if extra:
            raise ConfigError(
                f"release table holds columns a release must not hold: {extra[:5]} "
                f"(expected {z_cols[0]}..{z_cols[-1]} and {schema.label!r})"
            )
        Z = frame[z_cols].to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(Z)):
            raise ConfigError("release table holds NaN or infinite encodings")
        out: dict[str, Any] = {"kind": "release", "rows": int(len(frame)), "columns": {}}
        for column, suite in suites.items():
            attacker = suite.fitted.get(suite.best_attacker)
            if attacker is None:
                continue
            proba = attacker.predict_proba(Z)
            top = proba.max(axis=1)
            predicted = attacker.classes_[proba.argmax(axis=1)]
            values, counts = np.unique(predicted, return_counts=True)
            out["columns"][column] = {
                "attacker": suite.best_attacker,
                "mean_top_probability": float(top.mean()),
                "share_above_0.9": float(np.mean(top > 0.9)),
                "predicted_share": {
                    str(v): float(c / len(frame)) for v, c in zip(values, counts, strict=True)
                },
            }
        if schema.label in frame.columns:
            # A release stores the label as class indices (server/release.py), not the values.
            codes = np.asarray(frame[schema.label])
            n_classes = len(schema.label_classes)
            if codes.dtype.kind not in "iu" or codes.min() < 0 or codes.max() >= n_classes:
                raise ConfigError(
                    f"release table: label {schema.label!r} must hold class indices "
                    f"0..{n_classes - 1}, as release files do"
                )
            if np.unique(codes).size >= 2:
                utility = run_attack_suite(
                    Z, codes, Z_holdout, y_holdout, attackers=attackers, seed=seed
                )
                out["utility"] = {
                    "what": "trained on the release, scored on the public holdout T(x) → L",
                    **utility.to_dict(),
                }
        return out
    # A site table: features (+ S) in the bundle's input schema.
    Z = encoder.encode_features(frame, source="site table")
    missing = [c for c in schema.sensitive if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"release_frame is neither a release ({z_cols[0]}..{z_cols[-1]} + label) nor a site "
            f"table with the sensitive column(s) {missing}"
        )
    s = schema.encode_sensitive(frame, source="site table")
    out = {"kind": "site", "rows": int(len(frame)), "columns": {}}
    for j, (column, suite) in enumerate(suites.items()):
        per: dict[str, Any] = {}
        for name, attacker in suite.fitted.items():
            keep = np.isin(s[:, j], attacker.classes_)
            if keep.sum() == 0:
                continue
            proba = attacker.predict_proba(Z[keep])
            scores = score_predictions(s[keep, j], proba, attacker.classes_)
            if len(attacker.classes_) >= 2:
                scores["log_rank_privacy"] = log_rank_privacy_from_proba(
                    proba, s[keep, j], attacker.classes_
                )
            per[name] = scores
        aucs = {n: v["auc"] for n, v in per.items() if math.isfinite(v["auc"])}
        majority = float(np.mean(s[:, j] == majority_class(s_train[:, j])))
        out["columns"][column] = {
            "best_attacker": max(aucs, key=aucs.__getitem__) if aucs else None,
            "best_auc": max(aucs.values()) if aucs else None,
            "best_accuracy": max((v["accuracy"] for v in per.values()), default=None),
            "majority": majority,
            "per_attacker": per,
        }
    return out


def _num(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


__all__ = [
    "AUDIT_FORMAT",
    "SETTINGS",
    "audit_bundle",
    "json_safe",
    "one_torch_thread",
    "resolve_encoder",
    "roc_points",
]
