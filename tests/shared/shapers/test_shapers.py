"""Shaper contract: sklearn-style fit/transform, bundle state round trip, registry, baselines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import ConfigError, NotFittedError
from shared.shapers import SHAPERS, InfoShapeEncoder

FAST = {"max_steps": 30, "batch_size": 256}


def toy(n: int, seed: int, n_sensitive: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 6)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    s = np.stack([(X[:, 1 + j] > 0).astype(np.int64) for j in range(n_sensitive)], axis=1)
    return X, y, s


@pytest.fixture(scope="module")
def fitted() -> tuple[InfoShapeEncoder, np.ndarray]:
    X, y, s = toy(600, 0)
    return InfoShapeEncoder(**FAST).fit(X, y, s[:, 0]), X


def test_fit_returns_self_and_sets_learned_attributes(fitted) -> None:
    enc, X = fitted
    assert enc.n_features_in_ == X.shape[1]
    assert set(enc.weights_) == {"layer0.weight", "layer0.bias", "layer1.weight", "layer1.bias"}
    Z = enc.transform(X)
    assert Z.shape == (X.shape[0], 3) and Z.dtype == np.float32
    assert np.all(np.abs(Z) <= 1.0)


def test_history_records_mi_curves(fitted) -> None:
    enc, _ = fitted
    history = enc.training_metrics()["history"]
    assert len(history["step"]) == len(history["mi_public"]) == len(history["mi_sensitive"]) > 0
    assert all(len(row) == 1 for row in history["mi_sensitive"])


def test_transform_before_fit_is_refused() -> None:
    with pytest.raises(NotFittedError, match="fit"):
        InfoShapeEncoder().transform(np.zeros((2, 3)))


def test_feature_count_is_checked(fitted) -> None:
    enc, _ = fitted
    with pytest.raises(ConfigError, match="has 5 features.*fitted with 6"):
        enc.transform(np.zeros((3, 5)))


def test_fit_is_deterministic_for_a_seed(seed: int) -> None:
    X, y, s = toy(400, seed)
    a = InfoShapeEncoder(seed=seed, **FAST).fit(X, y, s).transform(X)
    b = InfoShapeEncoder(seed=seed, **FAST).fit(X, y, s).transform(X)
    np.testing.assert_array_equal(a, b)


def test_state_round_trip_reproduces_transform(fitted) -> None:
    enc, X = fitted
    config, tensors = enc.get_state()
    again = InfoShapeEncoder.from_state(config, tensors)
    np.testing.assert_allclose(again.transform(X), enc.transform(X), rtol=0, atol=1e-6)


def test_several_sensitive_columns_and_multiclass_public(seed: int) -> None:
    X, _, s = toy(500, seed, n_sensitive=2)
    y = np.digitize(X[:, 0], [-0.5, 0.5])  # 3 classes
    enc = InfoShapeEncoder(seed=seed, **FAST).fit(X, y, s)
    assert enc.n_labels_ == (3, [2, 2])
    assert len(enc.training_metrics()["history"]["mi_sensitive"][0]) == 2


def test_paper_schedule_runs_algorithm_one(seed: int) -> None:
    X, y, s = toy(300, seed)
    enc = InfoShapeEncoder(schedule="paper", epochs=2, paper_critic_iterations=20, seed=seed)
    enc.fit(X, y, s)
    assert enc.training_metrics()["history"]["step"] == [1, 2]


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"lam": -1.0}, "lam: must be a finite number >= 0"),
        ({"schedule": "fast"}, "schedule: must be one of alternating, paper"),
        ({"estimator": "nwj"}, "valid names"),
        ({"activation": "gelu"}, "activation"),
        ({"n_components": 0}, "n_components"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(params: dict, match: str) -> None:
    X, y, s = toy(100, 0)
    with pytest.raises(ConfigError, match=match):
        InfoShapeEncoder(**params).fit(X, y, s)


def test_single_class_label_is_refused() -> None:
    X, _, s = toy(100, 0)
    with pytest.raises(ConfigError, match="single class"):
        InfoShapeEncoder(**FAST).fit(X, np.zeros(100, dtype=np.int64), s)


def test_registry_lists_names_and_refuses_unknown() -> None:
    assert {"infoshape", "identity", "gaussian-noise", "random-encoder"} <= set(SHAPERS.names())
    with pytest.raises(ConfigError, match="valid names: .*infoshape"):
        SHAPERS.get("pca")


@pytest.mark.parametrize("name", ["identity", "gaussian-noise", "random-encoder"])
def test_baselines_round_trip_through_state(name: str, seed: int) -> None:
    X, y, s = toy(200, seed)
    shaper = SHAPERS.create(name).fit(X, y, s)
    config, tensors = shaper.get_state()
    again = SHAPERS.get(name).from_state(config, tensors)
    if name == "gaussian-noise":
        # Same noise stream from the same seed: the release can be reproduced.
        np.testing.assert_allclose(again.transform(X), SHAPERS.create(name).fit(X).transform(X))
    else:
        np.testing.assert_allclose(again.transform(X), shaper.transform(X), atol=1e-6)


def test_gaussian_noise_scale_matches_sigma(seed: int) -> None:
    X = np.zeros((20_000, 2), dtype=np.float32)
    Z = SHAPERS.create("gaussian-noise", sigma=2.0, seed=seed).fit(X).transform(X)
    assert abs(Z.std() - 2.0) < 0.05


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=40), st.floats(-1e3, 1e3))
def test_random_encoder_output_is_bounded_and_row_independent(n: int, value: float) -> None:
    X, y, s = toy(50, 0)
    shaper = SHAPERS.create("random-encoder").fit(X, y, s)
    batch = np.full((n, 6), value, dtype=np.float32)
    Z = shaper.transform(batch)
    assert np.all(np.abs(Z) <= 1.0)
    np.testing.assert_allclose(Z, np.repeat(shaper.transform(batch[:1]), n, axis=0), atol=1e-6)
