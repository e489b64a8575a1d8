"""GDP accounting (shared.gdp) against the closed form, independent references and invariants.

Every ε a shaper reports comes from these functions, so they are checked three ways: against
reference values of δ(ε; μ) computed with mpmath at 40 digits, against the definition of GDP via
the trade-off function (δ(ε) = sup_α 1 − G_μ(α) − e^ε α), and by monotonicity / round trips
under hypothesis.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from shared import gdp
from shared.errors import ConfigError

# δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), evaluated with mpmath (dps = 40).
REFERENCE = [
    (0.0, 1.0, 0.38292492254802621),  # = 2Φ(1/2) − 1
    (1.0, 1.0, 0.12693673750664395),
    (1.0, 0.5, 0.0068295949831145754),
    (2.0, 1.0, 0.020923635821113731),
    (0.5, 2.0, 0.59918561853393326),
    (1.0, 0.268, 9.9683751784032465e-6),
    (5.0, 1.0, 5.7937216919194941e-7),
    (10.0, 1.0, 9.8127058268469559e-23),  # the naive difference would give 0 or garbage here
    (3.0, 0.5, 3.4009117356735288e-10),
]


@pytest.mark.parametrize(("epsilon", "mu", "expected"), REFERENCE)
def test_delta_matches_high_precision_closed_form(epsilon, mu, expected):
    assert gdp.delta_for_epsilon(epsilon, mu) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("epsilon", "mu"), [(0.0, 1.0), (1.0, 1.0), (0.5, 0.7), (2.0, 3.0)])
def test_delta_matches_scipy_naive_form_where_it_is_accurate(epsilon, mu):
    naive = norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2)
    assert gdp.delta_for_epsilon(epsilon, mu) == pytest.approx(naive, rel=1e-10)


@pytest.mark.parametrize(("epsilon", "mu"), [(0.3, 0.5), (1.0, 1.0), (2.0, 2.0)])
def test_delta_matches_the_tradeoff_function_definition(epsilon, mu):
    """μ-GDP means T ≥ G_μ(α) = Φ(Φ⁻¹(1 − α) − μ); its (ε, δ(ε)) is sup_α 1 − G_μ(α) − e^ε α."""
    alpha = np.concatenate([np.logspace(-12, -1, 20001), np.linspace(0.1, 1, 20001)])
    g = norm.cdf(norm.ppf(1 - alpha) - mu)
    dual = float(np.max(1.0 - g - math.exp(epsilon) * alpha))
    assert gdp.delta_for_epsilon(epsilon, mu) == pytest.approx(dual, rel=1e-4, abs=1e-9)


def test_known_inverse_values():
    # mpmath findroot of δ(1; μ) = target
    assert gdp.mu_for_epsilon_delta(1.0, 1e-5) == pytest.approx(0.26805112321129422, rel=1e-10)
    assert gdp.mu_for_epsilon_delta(1.0, 1 / 45222) == pytest.approx(0.28175097141356065, rel=1e-10)
    # ε = 0 is exactly the total-variation point: δ(0; μ) = 2Φ(μ/2) − 1
    mu = 1.3
    assert gdp.epsilon_for_delta(mu, 2 * norm.cdf(mu / 2) - 1 + 1e-12) == 0.0


def test_solver_is_conservative():
    """The returned μ never exceeds the target δ; the returned ε never falls short of it."""
    for eps, delta in [(0.1, 1e-9), (1.0, 1e-5), (8.0, 1e-3)]:
        mu = gdp.mu_for_epsilon_delta(eps, delta)
        assert gdp.delta_for_epsilon(eps, mu) <= delta
        assert gdp.delta_for_epsilon(eps, mu * (1 + 1e-9)) > delta * (1 - 1e-6)
        e = gdp.epsilon_for_delta(mu, delta)
        assert gdp.delta_for_epsilon(e, mu) <= delta
        assert e == pytest.approx(eps, rel=1e-9)


def test_eq7_is_the_gdp_curve_at_mu_sqrt_cd_over_l_sigma():
    eps, sigma, size, c, d = 1.0, 0.05, 300, 2, 14
    mu = math.sqrt(c * d) / (size * sigma)
    assert gdp.mixing_mu(sigma, size, c, d) == pytest.approx(mu)
    root = math.sqrt(c * d)
    direct = norm.cdf(-eps * size * sigma / root + root / (2 * size * sigma))
    direct -= math.exp(eps) * norm.cdf(-eps * size * sigma / root - root / (2 * size * sigma))
    assert gdp.mixing_delta(eps, sigma, size, c, d) == pytest.approx(direct, rel=1e-9)


def test_mixing_sigma_meets_the_target_exactly_and_min_size_caps_sigma():
    eps, delta, c, d = 1.0, 1e-5, 2, 104
    for size in (1, 50, 539, 5000):
        sigma = gdp.mixing_sigma(eps, delta, size, c, d)
        assert gdp.mixing_delta(eps, sigma, size, c, d) == pytest.approx(delta, rel=1e-8)
        assert gdp.mixing_delta(eps, sigma * 0.99, size, c, d) > delta  # less noise breaks it
    l_min = gdp.min_mixture_size(eps, delta, 0.1, c, d)
    assert gdp.mixing_sigma(eps, delta, l_min, c, d) <= 0.1
    assert gdp.mixing_sigma(eps, delta, l_min - 1, c, d) > 0.1
    assert l_min == 539  # √208 / (0.1 · 0.268051…) = 538.03… → 539


def test_composition_adds_in_quadrature():
    assert gdp.compose_mu(0.3, 0.4) == pytest.approx(0.5)
    assert gdp.compose_mu(1.0) == 1.0


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (gdp.delta_for_epsilon, (-1.0, 1.0)),
        (gdp.delta_for_epsilon, (1.0, 0.0)),
        (gdp.delta_for_epsilon, (float("nan"), 1.0)),
        (gdp.mu_for_epsilon_delta, (1.0, 0.0)),
        (gdp.mu_for_epsilon_delta, (1.0, 1.0)),
        (gdp.epsilon_for_delta, (-0.5, 1e-5)),
        (gdp.mixing_sigma, (1.0, 1e-5, 0, 2, 3)),
        (gdp.mixing_mu, (0.0, 10, 2, 3)),
        (gdp.min_mixture_size, (1.0, 1e-5, -0.1, 2, 3)),
        (gdp.compose_mu, ()),
    ],
)
def test_bad_arguments_are_config_errors(call, args):
    with pytest.raises(ConfigError):
        call(*args)


mus = st.floats(min_value=0.05, max_value=8.0, allow_nan=False)
epsilons = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(eps=epsilons, mu=mus, factor=st.floats(min_value=1.01, max_value=3.0))
def test_delta_increases_with_mu(eps, mu, factor):
    lo, hi = gdp.delta_for_epsilon(eps, mu), gdp.delta_for_epsilon(eps, mu * factor)
    assert 0.0 <= lo <= hi <= 1.0  # δ(0; μ) = 2Φ(μ/2) − 1 rounds to 1.0 for μ ≳ 17
    if 1e-250 < lo < 1.0 - 1e-9:
        assert hi > lo


@settings(max_examples=150, deadline=None)
@given(eps=epsilons, mu=mus, step=st.floats(min_value=0.01, max_value=3.0))
def test_delta_decreases_with_epsilon(eps, mu, step):
    assert gdp.delta_for_epsilon(eps + step, mu) <= gdp.delta_for_epsilon(eps, mu)


@settings(max_examples=100, deadline=None)
@given(
    eps=st.floats(min_value=0.05, max_value=8.0),
    log_delta=st.floats(min_value=-12.0, max_value=-1.5),
)
def test_mu_solver_round_trips(eps, log_delta):
    delta = 10.0**log_delta
    mu = gdp.mu_for_epsilon_delta(eps, delta)
    assert gdp.delta_for_epsilon(eps, mu) == pytest.approx(delta, rel=1e-7)


@settings(max_examples=60, deadline=None)
@given(
    eps=st.floats(min_value=0.1, max_value=5.0),
    size=st.integers(min_value=1, max_value=10_000),
    c=st.integers(min_value=1, max_value=10),
    d=st.integers(min_value=1, max_value=800),
)
def test_sigma_falls_as_one_over_l_and_grows_with_sqrt_cd(eps, size, c, d):
    base = gdp.mixing_sigma(eps, 1e-5, size, c, d)
    assert gdp.mixing_sigma(eps, 1e-5, 2 * size, c, d) == pytest.approx(base / 2, rel=1e-12)
    assert gdp.mixing_sigma(eps, 1e-5, size, 4 * c, d) == pytest.approx(2 * base, rel=1e-12)
