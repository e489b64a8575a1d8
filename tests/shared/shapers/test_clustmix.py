"""ClustMix (paper 004): size-constrained clustering, NTK/KIP, Eq. 7 noise, release, bundle trip."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from shared import gdp
from shared.bundle import EncoderBundle
from shared.data import TableSpec
from shared.errors import ConfigError, NotFittedError
from shared.pipeline import bundle_from_fitted, encoder_from_fitted, fit_shaper, open_bundle
from shared.shapers import SHAPERS
from shared.shapers.clustmix import (
    ClustMixShaper,
    _greedy_repair,
    constrained_assign,
    gmm_constrained,
    kip_adapt,
    ntk_relu,
)

# Small and quick: D = 5, C = 2, (ε, δ) = (1, 1e-5), σ_max = 0.5 → l_min = ⌈√10 / (0.5 μ)⌉ = 24.
FAST = {"sigma_max": 0.5, "kip_steps": 30, "kip_batch": 128, "max_em_iter": 3}


def toy(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64)
    s = (X[:, 2] > 0).astype(np.int64)
    return X, y, s


@pytest.fixture(scope="module")
def fitted() -> tuple[ClustMixShaper, np.ndarray, np.ndarray]:
    X, y, s = toy(600, 0)
    return ClustMixShaper(noise_seed=1, **FAST).fit(X, y, s), X, y


# ---------------------------------------------------------------------- size constraint
def test_constrained_assign_lp_honours_minimum_and_beats_greedy() -> None:
    rng = np.random.default_rng(3)
    cost = rng.random((300, 6))
    cost[:, 0] -= 0.6  # everyone prefers cluster 0: the unconstrained argmin is infeasible
    assign, how = constrained_assign(cost, 40)
    assert how == "lp"
    assert np.bincount(assign, minlength=6).min() >= 40
    greedy = _greedy_repair(cost, 40)
    assert np.bincount(greedy, minlength=6).min() >= 40
    rows = np.arange(300)
    assert cost[rows, assign].sum() <= cost[rows, greedy].sum() + 1e-9  # the LP is optimal


def test_constrained_assign_large_problem_uses_greedy_and_infeasible_is_refused() -> None:
    rng = np.random.default_rng(4)
    cost = rng.random((500, 4))
    cost[:, 1] -= 1.0
    assign, how = constrained_assign(cost, 100, max_cells=100)
    assert how == "greedy" and np.bincount(assign, minlength=4).min() >= 100
    with pytest.raises(ConfigError, match="cannot make 4 clusters"):
        constrained_assign(cost, 126)


def test_gmm_constrained_clusters_are_never_below_minimum() -> None:
    rng = np.random.default_rng(5)
    # one dense blob and a sparse halo: an unconstrained mixture would make tiny halo clusters
    X = np.concatenate([rng.normal(0, 0.1, (270, 3)), rng.normal(0, 3.0, (30, 3))])
    assign, info = gmm_constrained(X, 5, 50, max_iter=4, seed=0)
    assert min(info["sizes"]) >= 50 and sum(info["sizes"]) == 300
    assert np.array_equal(np.bincount(assign, minlength=5), info["sizes"])
    assert info["method"] in {"gmm", "gmm-greedy", "kmeans-fallback"}


def test_public_clusters_and_site_groups_respect_l_min(fitted) -> None:
    shaper, X, y = fitted
    assert shaper.l_min_ == 24
    assert shaper.cluster_sizes_.min() >= shaper.l_min_
    for c in (0, 1):  # Algorithm 2 line 5: ⌊|X_c| / l_min⌋ clusters per class
        assert np.sum(shaper.centroid_classes_ == c) == np.sum(y == c) // shaper.l_min_
    Xs, _, _ = toy(300, 9)  # a site of another size
    groups = shaper.group_rows(Xs)
    assert np.bincount(groups)[np.unique(groups)].min() >= shaper.l_min_
    tiny = shaper.group_rows(Xs[:5])  # fewer rows than l_min: one group, noisier but private
    assert np.unique(tiny).size == 1


# ---------------------------------------------------------------------- ε, δ and the noise
def test_reported_privacy_matches_the_solver(fitted) -> None:
    shaper, X, _ = fitted
    mu = gdp.mu_for_epsilon_delta(1.0, 1e-5)
    assert shaper.epsilon_ == 1.0 and shaper.delta_ == 1e-5
    assert shaper.mu_ == pytest.approx(mu, rel=1e-12)
    report = shaper.training_metrics()["privacy"]
    assert report["epsilon"] == 1.0 and report["delta"] == 1e-5
    assert report["accounting_classes"] == 2 and report["n_features"] == 5
    assert report["sigma_at_l_min"] <= 0.5
    shaper.transform(X)
    release = shaper.last_release_
    for size, sigma in zip(release["group_sizes"], release["sigmas"], strict=True):
        assert sigma == pytest.approx(gdp.mixing_sigma(1.0, 1e-5, size, 2, 5), rel=1e-12)
        assert gdp.mixing_delta(1.0, sigma, size, 2, 5) == pytest.approx(1e-5, rel=1e-7)
        assert gdp.epsilon_for_delta(gdp.mixing_mu(sigma, size, 2, 5), 1e-5) == pytest.approx(
            1.0, rel=1e-7
        )
    assert release["delta"] == pytest.approx(1e-5, rel=1e-7)


def test_noise_added_has_the_solved_standard_deviation(fitted) -> None:
    """Constant rows: the released value minus the (clipped) row is pure noise of std σ_l."""
    shaper, _, _ = fitted
    rows = np.tile(np.zeros((1, 5), dtype=np.float32), (shaper.l_min_, 1))
    span = (shaper.hi_ - shaper.lo_).astype(np.float64)
    unit = np.clip((0.0 - shaper.lo_) / span, 0, 1)
    draws = np.stack([(shaper.transform(rows)[0] - shaper.lo_) / span - unit for _ in range(400)])
    expected = shaper.release_sigma(shaper.l_min_)
    assert draws.std() == pytest.approx(expected, rel=0.08)
    assert abs(draws.mean()) < 4 * expected / math.sqrt(draws.size)


def test_release_is_one_noisy_mean_per_group_in_input_units(fitted) -> None:
    shaper, X, _ = fitted
    Z = shaper.transform(X)
    assert Z.shape == X.shape and Z.dtype == np.float32
    groups = shaper.group_rows(X)
    for g in np.unique(groups):
        block = Z[groups == g]
        assert np.all(block == block[0])  # every member gets its group's synthetic row
    assert np.unique(Z, axis=0).shape[0] == np.unique(groups).size
    assert shaper.n_components == X.shape[1]


def test_noise_is_fresh_per_release_and_unseeded_by_default() -> None:
    X, y, s = toy(300, 2)
    a = ClustMixShaper(**FAST).fit(X, y, s)
    assert a.noise_seed is None
    assert not np.array_equal(a.transform(X), a.transform(X))  # a second release, new noise


# ---------------------------------------------------------------------- NTK and KIP
def test_ntk_depth_zero_is_the_linear_kernel_and_is_symmetric_psd() -> None:
    import torch

    rng = np.random.default_rng(6)
    x = torch.as_tensor(rng.standard_normal((20, 4)), dtype=torch.float64)
    lin = ntk_relu(x, x, depth=0, weight_std=1.5, bias_std=0.2)
    assert torch.allclose(lin, 2.25 * x @ x.T / 4 + 0.04)
    k = ntk_relu(x, x, depth=3)
    assert torch.allclose(k, k.T)
    assert torch.linalg.eigvalsh(k).min() > -1e-8


def test_ntk_one_hidden_layer_matches_monte_carlo() -> None:
    """Θ = w² E[φ̇(u)φ̇(v)] Σ¹ + w² E[φ(u)φ(v)] + b² with (u, v) ~ N(0, Σ¹)."""
    import torch

    w, b = math.sqrt(2.0), 0.1
    x1 = np.array([[1.0, 0.5, -0.3]])
    x2 = np.array([[0.2, -1.0, 0.8]])
    sig = lambda a, c: w**2 * (a @ c.T).item() / 3 + b**2  # noqa: E731
    cov = np.array([[sig(x1, x1), sig(x1, x2)], [sig(x1, x2), sig(x2, x2)]])
    rng = np.random.default_rng(7)
    uv = rng.multivariate_normal([0, 0], cov, size=400_000)
    relu = np.maximum(uv, 0)
    step = (uv > 0).astype(float)
    mc = w**2 * np.mean(step[:, 0] * step[:, 1]) * cov[0, 1]
    mc += w**2 * np.mean(relu[:, 0] * relu[:, 1]) + b**2
    exact = ntk_relu(torch.tensor(x1), torch.tensor(x2), depth=1, weight_std=w, bias_std=b).item()
    assert exact == pytest.approx(mc, rel=0.01)


def test_kip_alpha_trades_fidelity_against_kernel_loss() -> None:
    X, y, _ = toy(400, 8)
    support = np.stack([X[y == c][:10].mean(axis=0) for c in (0, 1)] * 3).astype(np.float64)
    support += np.random.default_rng(0).normal(0, 0.3, support.shape)
    labels = np.array([0, 1] * 3)
    free, curves = kip_adapt(support, labels, X, y, 2, alpha=0.0, steps=60, batch_size=400)
    assert curves["krr"][-1] < curves["krr"][0]  # KIP lowers Eq. 4
    pinned, _ = kip_adapt(support, labels, X, y, 2, alpha=1.0, steps=60, batch_size=400)
    assert np.allclose(pinned, support, atol=1e-3)  # α = 1: Eq. 5 keeps the GMM centroids
    assert np.abs(free - support).max() > 1e-2


# ---------------------------------------------------------------------- state and bundle
def test_state_round_trip_rebuilds_the_same_release(fitted) -> None:
    shaper, X, _ = fitted
    config, tensors = shaper.get_state()
    assert "noise_seed" not in config["params"]  # a bundle never lets anyone replay the noise
    again = SHAPERS.get("clustmix").from_state(config, tensors)
    assert again.noise_seed is None
    for name in ("centroids_", "initial_centroids_", "centroid_classes_", "lo_", "hi_"):
        assert np.array_equal(getattr(again, name), getattr(shaper, name))
    assert (again.l_min_, again.mu_, again.epsilon_, again.delta_) == (
        shaper.l_min_,
        shaper.mu_,
        shaper.epsilon_,
        shaper.delta_,
    )
    assert np.array_equal(again.group_rows(X), shaper.group_rows(X))
    shaper._rng, again._rng = np.random.default_rng(11), np.random.default_rng(11)
    assert np.array_equal(again.transform(X), shaper.transform(X))


def test_state_with_inconsistent_l_min_or_shapes_is_refused(fitted) -> None:
    shaper, _, _ = fitted
    config, tensors = shaper.get_state()
    bad = {**config, "params": {**config["params"], "l_min": 2}}  # would shrink the groups
    with pytest.raises(ConfigError, match="l_min"):
        ClustMixShaper.from_state(bad, tensors)
    with pytest.raises(ConfigError, match="inconsistent"):
        ClustMixShaper.from_state(config, {**tensors, "clip_low": tensors["clip_low"][:3]})
    with pytest.raises(ConfigError, match="malformed"):
        ClustMixShaper.from_state(config, {k: v for k, v in tensors.items() if k != "centroids"})


def test_signed_bundle_round_trip_through_the_pipeline() -> None:
    X, y, s = toy(500, 3)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(5)]).assign(y=y, s=s)
    spec = TableSpec(label="y", sensitive=["s"], features=[f"x{i}" for i in range(5)])
    fit = fit_shaper(frame, spec, shaper="clustmix", **FAST)
    key = ed25519.Ed25519PrivateKey.generate()
    data = bundle_from_fitted(fit).to_bytes(key)
    encoder = open_bundle(EncoderBundle.from_bytes(data, key.public_key()))
    z, labels = encoder.encode_frame(frame.iloc[:200])
    assert z.shape == (200, 5) and np.array_equal(labels, y[:200])
    local = encoder_from_fitted(fit).shaper
    assert np.array_equal(encoder.shaper.centroids_, local.centroids_)
    manifest = EncoderBundle.from_bytes(data, key.public_key()).training_metrics
    assert manifest["privacy"]["epsilon"] == 1.0


# ---------------------------------------------------------------------- contract
def test_parameters_are_checked_and_fit_needs_labels() -> None:
    X, y, s = toy(100, 1)
    for params, match in [
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"sigma_max": -1.0}, "sigma_max"),
        ({"alpha": 1.5}, "alpha"),
        ({"clip_quantile": 0.5}, "clip_quantile"),
        ({"kip_batch": 0}, "kip_batch"),
    ]:
        with pytest.raises(ConfigError, match=match):
            ClustMixShaper(**params).fit(X, y, s)
    with pytest.raises(ConfigError, match="y_public"):
        ClustMixShaper().fit(X)
    with pytest.raises(NotFittedError):
        ClustMixShaper().transform(X)
