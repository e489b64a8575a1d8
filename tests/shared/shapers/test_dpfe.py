"""DPFE (paper 003): the Eq. 7 loss by hand, fit/transform, Procedure 2 noise, bundle round trip."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shared.bundle import EncoderBundle, generate_keypair, load_private_key
from shared.errors import ConfigError, NotFittedError
from shared.shapers import SHAPERS
from shared.shapers.dpfe import DPFEShaper, contrastive_removal_loss, silverman_sigma

FAST = {"max_steps": 60, "batch_size": 128}


def toy(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 6)).astype(np.float32)
    return X, (X[:, 0] > 0).astype(np.int64), (X[:, 1] > 0).astype(np.int64)


@pytest.fixture(scope="module")
def fitted() -> tuple[DPFEShaper, np.ndarray]:
    X, y, s = toy(600, 0)
    return DPFEShaper(**FAST).fit(X, y, s), X


# -- Eq. 7 by hand ----------------------------------------------------------------------------
def test_contrastive_loss_matches_a_hand_computed_case() -> None:
    # f0=(0,0), f1=(1,0), f2=(0,2); y = (0, 0, 1); c = 2, σ = 1, N = 3.
    # Pairs: (0,1) same label, d=1 -> c - d = 1;  (0,2) different, d=4;  (1,2) different, d=5.
    # Loss = (4 + 5 + 1) / (2 · 1 · 3²) = 10/18.
    f = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    loss = contrastive_removal_loss(f, [0, 0, 1], c=2.0, sigma=1.0)
    assert float(loss) == pytest.approx(10.0 / 18.0, abs=1e-12)
    # σ divides, c only shifts: c = 0 and σ = 0.5 gives (4 + 5 - 1) / (2 · 0.5 · 9) = 8/9.
    assert float(contrastive_removal_loss(f, [0, 0, 1], c=0.0, sigma=0.5)) == pytest.approx(8 / 9)
    # Default c = 2d = 4: (4 + 5 + 3) / 18.
    assert float(contrastive_removal_loss(f, [0, 0, 1])) == pytest.approx(12.0 / 18.0)


def test_contrastive_loss_equals_the_pairwise_sum_for_several_classes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((9, 3))
    y = rng.integers(0, 3, 9)
    c, sigma = 1.5, 0.7
    brute = 0.0
    for i, j in itertools.combinations(range(9), 2):
        d = float(np.sum((f[i] - f[j]) ** 2))
        brute += d if y[i] != y[j] else c - d
    assert float(contrastive_removal_loss(f, y, c=c, sigma=sigma)) == pytest.approx(
        brute / (2 * sigma * 81), rel=1e-10
    )


@pytest.mark.parametrize(("labels", "towards"), [([0, 1], True), ([0, 0], False)])
def test_contrastive_gradient_pulls_different_labels_together_and_same_apart(
    labels: list[int], towards: bool
) -> None:
    import torch

    f = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    contrastive_removal_loss(f, labels).backward()
    # A descent step moves f0 along -grad: towards f1 (+x) for different labels, away for equal.
    step_x = -float(f.grad[0, 0])
    assert (step_x > 0) == towards and step_x != 0


def test_contrastive_loss_refuses_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="features: must be 2-D"):
        contrastive_removal_loss(np.zeros(3), [0, 1, 0])
    with pytest.raises(ConfigError, match="sensitive: needs 3 labels"):
        contrastive_removal_loss(np.zeros((3, 2)), [0, 1])
    with pytest.raises(ConfigError, match="sigma: must be > 0, got 0"):
        contrastive_removal_loss(np.zeros((3, 2)), [0, 1, 0], sigma=0.0)


def test_silverman_sigma_is_the_squared_rule_of_thumb() -> None:
    # d = 1, n = 1: h = (4/3)^(1/5).
    assert silverman_sigma(1, 1) == pytest.approx((4 / 3) ** 0.4)
    assert silverman_sigma(6000, 3) < silverman_sigma(100, 3)


# -- fit / transform --------------------------------------------------------------------------
def test_fit_transform_shapes_and_batch_normalised_features(fitted) -> None:
    shaper, X = fitted
    Z = shaper.transform(X)
    assert Z.shape == (600, 3) and Z.dtype == np.float32 and shaper.n_components == 3
    # noise_scale = 0: the release is the batch-normalised feature (zero mean, unit variance).
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(Z.var(axis=0), 1.0, atol=1e-3)
    assert set(shaper.state_) == {
        "extractor.layer0.weight", "extractor.layer0.bias", "extractor.layer1.weight",
        "extractor.layer1.bias", "bn.mean", "bn.var", "noise.cholesky",
    }
    history = shaper.training_metrics()["history"]
    assert len(history["step"]) == len(history["cross_entropy"]) == len(history["removal"]) > 0


def test_transform_before_fit_and_wrong_width_are_refused(fitted) -> None:
    with pytest.raises(NotFittedError):
        DPFEShaper().transform(np.zeros((2, 6)))
    shaper, _ = fitted
    with pytest.raises(ConfigError, match="has 5 features"):
        shaper.transform(np.zeros((2, 5)))


def test_fit_is_deterministic_for_a_seed(seed: int) -> None:
    X, y, s = toy(300, seed)
    params = {"seed": seed, "noise_scale": 0.5, "noise_seed": seed, **FAST}
    a = DPFEShaper(**params).fit(X, y, s).transform(X)
    b = DPFEShaper(**params).fit(X, y, s).transform(X)
    np.testing.assert_array_equal(a, b)


def test_noise_has_the_scaled_feature_covariance(fitted) -> None:
    shaper, _ = fitted
    rows = np.zeros((20_000, 6), dtype=np.float32)
    clean = shaper.features(rows)
    shaper.noise_scale = 0.5
    try:
        noise = shaper.transform(rows) - clean
    finally:
        shaper.noise_scale = 0.0
        shaper.reset_noise()
    L = shaper.state_["noise.cholesky"]
    np.testing.assert_allclose(np.cov(noise, rowvar=False), 0.5 * (L @ L.T), atol=0.03)


def _seeded(shaper: DPFEShaper, noise_seed: int) -> DPFEShaper:
    shaper.noise_seed = noise_seed
    shaper.reset_noise()
    return shaper


def test_noise_is_per_row_and_chunking_does_not_change_it(fitted) -> None:
    shaper, X = fitted
    config, tensors = shaper.get_state()
    config["params"]["noise_scale"] = 1.0
    whole = _seeded(DPFEShaper.from_state(config, tensors), 7).transform(X)
    again = _seeded(DPFEShaper.from_state(config, tensors), 7)
    chunks = np.concatenate([again.transform(X[:250]), again.transform(X[250:])])
    np.testing.assert_allclose(chunks, whole, atol=1e-6)  # BLAS may round chunks differently
    repeated = DPFEShaper.from_state(config, tensors).transform(np.repeat(X[:1], 50, axis=0))
    assert np.unique(repeated[:, 0]).size == 50  # the same x gets fresh noise each row


def test_the_bundle_cannot_replay_the_noise(seed: int) -> None:
    X, y, s = toy(300, seed)
    shaper = DPFEShaper(noise_scale=1.0, noise_seed=seed, **FAST).fit(X, y, s)
    config, tensors = shaper.get_state()
    assert "noise_seed" not in config["params"]
    a = DPFEShaper.from_state(config, tensors).transform(X)
    b = DPFEShaper.from_state(config, tensors).transform(X)
    assert not np.allclose(a, b)  # fresh OS entropy at every site
    np.testing.assert_allclose((a - b).std(), np.sqrt(2.0) * shaper.features(X).std(), rtol=0.1)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"lam": -1.0}, r"lam: must be a finite number >= 0, got -1.0"),
        ({"lam": float("nan")}, r"lam: must be a finite number >= 0, got nan"),
        ({"n_components": 0}, r"n_components: must be an integer >= 1, got 0"),
        ({"hidden": [8, 0]}, r"hidden: every width must be an integer >= 1, got \[8, 0\]"),
        ({"activation": "gelu"}, r"activation: must be one of relu, tanh, got 'gelu'"),
        ({"noise_scale": -0.1}, r"noise_scale: must be a finite number >= 0, got -0.1"),
        ({"sigma": 0.0}, r"sigma: must be a finite number > 0, got 0.0"),
        ({"batch_size": 1}, r"batch_size: must be an integer >= 2, got 1"),
        ({"max_steps": 0}, r"max_steps: must be an integer >= 1, got 0"),
        ({"lr": "fast"}, r"lr: must be a number, got 'fast'"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(params: dict, match: str) -> None:
    X, y, s = toy(100, 0)
    with pytest.raises(ConfigError, match=match):
        DPFEShaper(**params).fit(X, y, s)


def test_missing_labels_and_noise_scale_set_after_fit_are_refused(fitted) -> None:
    X, y, _ = toy(100, 0)
    with pytest.raises(ConfigError, match="needs both labels"):
        DPFEShaper(**FAST).fit(X, y)
    shaper, X = fitted
    shaper.noise_scale = -1.0
    try:
        with pytest.raises(ConfigError, match="noise_scale: must be a finite number >= 0"):
            shaper.transform(X)
    finally:
        shaper.noise_scale = 0.0


def test_from_state_refuses_arrays_that_do_not_match_the_architecture(fitted) -> None:
    shaper, _ = fitted
    config, tensors = shaper.get_state()
    bad = dict(tensors, **{"extractor.layer0.weight": np.zeros((4, 6), np.float32)})
    with pytest.raises(ConfigError, match="extractor.layer0.weight has shape"):
        DPFEShaper.from_state(config, bad)
    with pytest.raises(ConfigError, match="noise.cholesky"):
        DPFEShaper.from_state(config, {k: v for k, v in tensors.items() if k != "noise.cholesky"})


def test_registered_and_reachable_by_name() -> None:
    from shared.pipeline import shaper_params

    assert SHAPERS.get("dpfe") is DPFEShaper
    assert shaper_params("dpfe", lam=2.0, seed=1, max_steps=5, schedule="paper") == {
        "lam": 2.0, "seed": 1, "max_steps": 5,
    }


# -- signed bundle round trip -----------------------------------------------------------------
def test_bundle_round_trip_through_the_pipeline(tmp_path) -> None:
    from shared.data import load_dataset
    from shared.pipeline import bundle_from_fitted, encoder_from_fitted, fit_shaper, open_bundle

    data = load_dataset("paper-synthetic")
    fitted = fit_shaper(data.frame, data.spec, shaper="dpfe", seed=3, noise_scale=0.2, **FAST)
    keys = generate_keypair(tmp_path / "keys")
    directory = bundle_from_fitted(fitted).save(tmp_path / "bundle",
                                                load_private_key(keys.private))
    loaded = EncoderBundle.load(directory, keys.public)
    assert loaded.shaper["name"] == "dpfe" and loaded.lam == 1.0
    site = open_bundle(loaded)
    fresh = encoder_from_fitted(fitted)
    rows = data.frame.iloc[:500]
    # Weights, batch-norm statistics and noise factor are rebuilt exactly: with the same
    # (test-only) noise seed on both sides the release is reproduced bit for bit.
    _seeded(site.shaper, 11)
    _seeded(fresh.shaper, 11)
    np.testing.assert_array_equal(site.encode_features(rows), fresh.encode_features(rows))


# -- privacy on the paper's data (slow) -------------------------------------------------------
def release_scores(shaper: str, seed: int = 0, **params: object) -> tuple[float, float]:
    """(utility AUC, private AUC) of the strongest attacker, as the core acceptance test does:
    fit on 60% public rows, attackers train on 20% and are scored on the other 20%."""
    from shared.attacks import run_attack_suite
    from shared.data import load_dataset, split_frame
    from shared.pipeline import encoder_from_fitted, fit_shaper

    data = load_dataset("paper-synthetic", seed=seed)
    parts = split_frame(
        data.frame, {"public": 0.6, "attack": 0.2, "test": 0.2}, seed=seed, stratify="s"
    )
    encoder = encoder_from_fitted(
        fit_shaper(parts["public"], data.spec, shaper=shaper, seed=seed, **params)
    )
    z_attack, y_attack = encoder.encode_frame(parts["attack"])
    z_test, y_test = encoder.encode_frame(parts["test"])
    s_attack = encoder.encode_sensitive(parts["attack"])[:, 0]
    s_test = encoder.encode_sensitive(parts["test"])[:, 0]
    utility = run_attack_suite(z_attack, y_attack, z_test, y_test, seed=seed)
    privacy = run_attack_suite(z_attack, s_attack, z_test, s_test, seed=seed)
    return utility.best_auc, privacy.best_auc


@pytest.mark.slow
def test_defaults_reduce_the_strongest_attackers_private_auc_vs_raw() -> None:
    raw_utility, raw_private = release_scores("identity")
    utility, private = release_scores("dpfe", noise_seed=0)
    # Measured (seed 0): raw 0.959 / 0.961, dpfe 0.926 / 0.612 (utility AUC / private AUC).
    assert raw_private >= 0.9
    assert private <= raw_private - 0.2, (private, raw_private)
    assert utility >= 0.9 and utility >= raw_utility - 0.05, (utility, raw_utility)
