"""Gaussian differential privacy (GDP) accounting: μ-GDP ↔ (ε, δ), and ClustMix's noise scale.

Why GDP: a Gaussian mechanism is *exactly* described by one number μ (Dong, Roth & Su 2019), and
μ composes as a root-sum-of-squares, so the accounting for a mixing release (paper 004, "3A" /
ClustMix) reduces to closed forms plus one monotone root-find. Every number a shaper reports as
"ε" goes through the functions here, so a test of this module is a test of every reported ε.

The closed forms (paper 004, Corollary 1 and Eq. 7; Dong, Roth & Su 2019, Corollary 2.13):

    δ(ε; μ) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2)                                  (Cor. 1)

    mixing ``l`` rows clipped to [0, 1]^D and adding N(0, σ² I_D) to their mean is μ-GDP with
    μ = √(C·D) / (l·σ), C = number of classes (the paper's allowance for KIP, see below), so

    δ(ε; σ, l, C, D) = Φ(-εlσ/√(CD) + √(CD)/(2lσ)) - e^ε Φ(-εlσ/√(CD) - √(CD)/(2lσ))    (Eq. 7)

δ(ε; μ) is strictly increasing in μ and strictly decreasing in ε, so the inverse problems
(μ for a target (ε, δ); ε for a given (μ, δ)) are solved by bisection to machine precision. The
paper solves Eq. 7 for σ with Nelder-Mead; because σ enters only through μ = √(CD)/(lσ), solving
for μ once and dividing is exact and cheaper (:func:`mixing_sigma`).

Numerics: δ is a difference of two nearly equal terms when δ is small (δ = 1e-9 is a normal
target), so it is evaluated as Φ(a)·(1 − exp(ε + log Φ(b) − log Φ(a))) with ``log_ndtr`` and
``expm1``; the naive form loses all digits below ≈ 1e-16 and overflows e^ε for ε > 709.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtr

from shared.errors import ConfigError

__all__ = [
    "compose_mu",
    "delta_for_epsilon",
    "epsilon_for_delta",
    "min_mixture_size",
    "mixing_delta",
    "mixing_mu",
    "mixing_sigma",
    "mu_for_epsilon_delta",
]

#: Bisection stops when the bracket is this tight relative to its upper end.
_REL_TOL = 1e-13
_MAX_ITER = 400


def _number(value: float, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number; got {value!r}") from None


def _check_epsilon(epsilon: float) -> float:
    eps = _number(epsilon, "epsilon")
    if not math.isfinite(eps) or eps < 0:
        raise ConfigError(f"epsilon must be a finite number >= 0; got {epsilon!r}")
    return eps


def _check_delta(delta: float) -> float:
    d = _number(delta, "delta")
    if not (math.isfinite(d) and 0.0 < d < 1.0):
        raise ConfigError(f"delta must lie strictly between 0 and 1; got {delta!r}")
    return d


def _check_mu(mu: float) -> float:
    m = _number(mu, "mu")
    if not (math.isfinite(m) and m > 0):
        raise ConfigError(f"mu must be a finite number > 0; got {mu!r}")
    return m


def delta_for_epsilon(epsilon: float, mu: float) -> float:
    """δ(ε) of a μ-GDP mechanism: the smallest δ with which it is (ε, δ)-DP (exact, Cor. 1).

    Args:
        epsilon: ε >= 0.
        mu: μ > 0.

    Returns:
        δ in [0, 1).
    """
    eps = _check_epsilon(epsilon)
    m = _check_mu(mu)
    a = -eps / m + m / 2.0
    b = -eps / m - m / 2.0
    log_pa = float(log_ndtr(a))
    log_ratio = eps + float(log_ndtr(b)) - log_pa  # log(e^ε Φ(b) / Φ(a)), always <= 0
    if log_ratio >= 0.0:  # only by rounding; the exact ratio is < 1
        return 0.0
    value = math.exp(log_pa) * -math.expm1(log_ratio)
    return min(max(value, 0.0), float(ndtr(a)))


def mu_for_epsilon_delta(epsilon: float, delta: float) -> float:
    """The largest μ whose mechanism is (ε, δ)-DP: solves δ(ε; μ) = δ for μ (bisection).

    Larger μ means less noise; any μ' <= the returned μ also satisfies (ε, δ). The result is
    returned rounded *down* by the bisection (the lower end of the final bracket is kept
    conservative: δ(ε; μ) <= δ up to ~1e-13 relative).
    """
    eps = _check_epsilon(epsilon)
    target = _check_delta(delta)
    lo, hi = 1e-3, 1.0
    while delta_for_epsilon(eps, lo) >= target:  # tiny δ targets with ε = 0 need tiny μ
        lo /= 10.0
        if lo < 1e-300:
            raise ConfigError(f"no mu > 0 reaches delta={delta} at epsilon={epsilon}")
    while delta_for_epsilon(eps, hi) < target:
        hi *= 2.0
        if hi > 1e6:
            raise ConfigError(f"no finite mu reaches delta={delta} at epsilon={epsilon}")
    log_lo, log_hi = math.log(lo), math.log(hi)
    for _ in range(_MAX_ITER):
        mid = 0.5 * (log_lo + log_hi)
        if delta_for_epsilon(eps, math.exp(mid)) <= target:
            log_lo = mid
        else:
            log_hi = mid
        if log_hi - log_lo < _REL_TOL:
            break
    return math.exp(log_lo)  # the side that satisfies δ(ε; μ) <= δ


def epsilon_for_delta(mu: float, delta: float) -> float:
    """The smallest ε with which a μ-GDP mechanism is (ε, δ)-DP (bisection on ε).

    Returns 0.0 when δ already covers ε = 0 (δ >= δ(0; μ) = 2Φ(μ/2) − 1).
    """
    m = _check_mu(mu)
    target = _check_delta(delta)
    if delta_for_epsilon(0.0, m) <= target:
        return 0.0
    hi = 1.0
    while delta_for_epsilon(hi, m) > target:
        hi *= 2.0
        if hi > 1e8:
            raise ConfigError(f"no finite epsilon reaches delta={delta} at mu={mu}")
    lo = 0.0
    for _ in range(_MAX_ITER):
        mid = 0.5 * (lo + hi)
        if delta_for_epsilon(mid, m) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= _REL_TOL * max(hi, 1e-300):
            break
    return hi  # the side that satisfies δ(ε; μ) <= δ


def compose_mu(*mus: float) -> float:
    """μ of the composition of μ_i-GDP mechanisms: √(Σ μ_i²) (paper 004, Cor. 2)."""
    if not mus:
        raise ConfigError("compose_mu needs at least one mu")
    return math.sqrt(sum(_check_mu(m) ** 2 for m in mus))


def _check_mixing(sigma: float | None, size: int, n_classes: int, n_features: int) -> None:
    if sigma is not None:
        value = _number(sigma, "sigma")
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"sigma must be a finite number > 0; got {sigma!r}")
    for name, count in (("l", size), ("n_classes", n_classes), ("n_features", n_features)):
        ok = isinstance(count, int | np.integer) and not isinstance(count, bool) and count >= 1
        if not ok:
            raise ConfigError(f"{name} must be an integer >= 1; got {count!r}")


def mixing_mu(sigma: float, size: int, n_classes: int, n_features: int) -> float:
    """μ of one ClustMix release: √(C·D) / (l·σ) (paper 004, proof of Theorem 2).

    Args:
        sigma: standard deviation of the Gaussian added to the mean, per coordinate, in the
            units of the [0, 1]-clipped features (sensitivity of the mean is 1/l per coordinate).
        size: l, the number of rows averaged.
        n_classes: C; the paper multiplies by C because KIP lets one row move other classes'
            centroids. Pass 1 for a release whose centroids do not depend on the private rows.
        n_features: D, the number of clipped coordinates.
    """
    _check_mixing(sigma, size, n_classes, n_features)
    return math.sqrt(n_classes * n_features) / (size * float(sigma))


def mixing_delta(epsilon: float, sigma: float, size: int, n_classes: int, n_features: int) -> float:
    """Paper 004, Eq. 7: δ(ε, σ, l, C, D) = δ(ε; μ = √(CD)/(lσ))."""
    return delta_for_epsilon(epsilon, mixing_mu(sigma, size, n_classes, n_features))


def mixing_sigma(epsilon: float, delta: float, size: int, n_classes: int, n_features: int) -> float:
    """The smallest σ for which mixing ``size`` rows is (ε, δ)-DP by Eq. 7.

    σ = √(C·D) / (l · μ*(ε, δ)) with μ* from :func:`mu_for_epsilon_delta`; exact (the paper
    reaches the same value by Nelder-Mead on Eq. 7). Noise falls as 1/l: bigger mixtures need less.
    """
    _check_mixing(None, size, n_classes, n_features)
    mu = mu_for_epsilon_delta(epsilon, delta)
    return math.sqrt(n_classes * n_features) / (size * mu)


def min_mixture_size(
    epsilon: float, delta: float, sigma_max: float, n_classes: int, n_features: int
) -> int:
    """l_min of Algorithm 2: the smallest l whose Eq. 7 noise σ does not exceed ``sigma_max``."""
    _check_mixing(sigma_max, 1, n_classes, n_features)
    mu = mu_for_epsilon_delta(epsilon, delta)
    exact = math.sqrt(n_classes * n_features) / (float(sigma_max) * mu)
    size = max(1, math.ceil(exact - 1e-9))
    while mixing_sigma(epsilon, delta, size, n_classes, n_features) > sigma_max:
        size += 1  # guard against rounding in the ceil
    return size
