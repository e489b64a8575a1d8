"""MI estimators against closed forms: correlated Gaussians, a binary label with Gaussian
class-conditionals (numerical integration), and independent data (≈ 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from shared.errors import ConfigError
from shared.mi import MI_ESTIMATORS, LabelCoding, estimate_mi

ESTIMATORS = ["remine", "mine", "infonce"]


def gaussian_pair(n: int, rho: float, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal(n)
    return x, y, -0.5 * np.log(1 - rho**2)


def binary_gaussian(n: int, mu: float, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Label ~ Bernoulli(½), z | label ~ N(±mu, 1): I = h(z) − h(z | label) by quadrature."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    z = rng.standard_normal(n) + np.where(labels == 1, mu, -mu)

    def mixture(t: float) -> float:
        return 0.5 * stats.norm.pdf(t, mu) + 0.5 * stats.norm.pdf(t, -mu)

    h_z = integrate.quad(lambda t: -mixture(t) * np.log(mixture(t)), -mu - 12, mu + 12)[0]
    return z, labels, h_z - 0.5 * np.log(2 * np.pi * np.e)


@pytest.mark.slow
@pytest.mark.parametrize("name", ESTIMATORS)
def test_correlated_gaussians_within_ten_percent(name: str, seed: int) -> None:
    x, y, truth = gaussian_pair(20_000, 0.8, seed)
    estimate = estimate_mi(x, y, estimator=name, steps=2500, seed=seed)
    assert abs(estimate - truth) <= 0.10 * truth, (estimate, truth)


@pytest.mark.slow
@pytest.mark.parametrize("name", ESTIMATORS)
def test_binary_label_with_gaussian_classes_within_ten_percent(name: str, seed: int) -> None:
    z, labels, truth = binary_gaussian(20_000, 1.0, seed)
    estimate = estimate_mi(z, labels, estimator=name, steps=2000, seed=seed)
    assert abs(estimate - truth) <= 0.10 * truth, (estimate, truth)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_independent_data_is_near_zero(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((8_000, 3))
    labels = rng.integers(0, 2, 8_000)
    assert abs(estimate_mi(a, labels, estimator=name, steps=600, seed=seed)) < 0.02
    b = rng.standard_normal(8_000)
    assert abs(estimate_mi(a, b, estimator=name, steps=600, seed=seed)) < 0.03


def test_estimate_is_deterministic_for_a_seed(seed: int) -> None:
    x, y, _ = gaussian_pair(2_000, 0.5, seed)
    first = estimate_mi(x, y, steps=100, seed=seed)
    assert first == estimate_mi(x, y, steps=100, seed=seed)


def test_multiclass_label_coding_is_one_hot() -> None:
    coding = LabelCoding.from_labels(np.array([0, 1, 2, 2]))
    assert coding.dim == 3
    assert torch.equal(coding.codes(), torch.eye(3))
    assert np.isclose(sum(coding.priors), 1.0)
    assert np.isclose(coding.entropy, -(0.25 * np.log(0.25) * 2 + 0.5 * np.log(0.5)))


def test_unknown_estimator_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="valid names: infonce, mine, remine"):
        MI_ESTIMATORS.get("nwj")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"steps": 0}, "steps"), ({"estimator": "bogus"}, "bogus")],
)
def test_bad_parameters_name_the_parameter(kwargs: dict, match: str) -> None:
    x = np.zeros((200, 1))
    with pytest.raises(ConfigError, match=match):
        estimate_mi(x, np.arange(200) % 2, **kwargs)


def test_nan_input_is_refused() -> None:
    x = np.full((200, 1), np.nan)
    with pytest.raises(ConfigError, match="NaN"):
        estimate_mi(x, np.arange(200) % 2)
