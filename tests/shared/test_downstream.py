"""The downstream model both apps build from shared.downstream; FedAvg is row-weighted."""

from __future__ import annotations

import numpy as np
import pytest

from shared import downstream as ds
from shared.errors import ConfigError


@pytest.mark.parametrize("hidden", [(), (8,), (32, 32)])
def test_wire_form_of_the_spec_round_trips(hidden: tuple[int, ...]) -> None:
    spec = ds.ModelSpec(3, 4, hidden)
    assert ds.parse_hidden(str(spec.to_config()["hidden"])) == hidden
    a, b = ds.build_model(spec, seed=1), ds.build_model(spec, seed=2)
    ds.set_weights(b, ds.get_weights(a))
    for key, value in ds.get_weights(a).items():
        np.testing.assert_array_equal(value, ds.get_weights(b)[key])


def test_fedavg_is_row_weighted() -> None:
    a = {"w": np.array([1.0, 1.0], np.float32)}
    b = {"w": np.array([3.0, 5.0], np.float32)}
    avg = ds.fedavg([(a, 1), (b, 3), ({"w": np.array([100.0, 100.0])}, 0)])
    np.testing.assert_allclose(avg["w"], [2.5, 4.0])
    assert avg["w"].dtype == np.float32


def test_mismatched_or_non_finite_weights_are_refused() -> None:
    model = ds.build_model(ds.ModelSpec(3, 2, (4,)))
    weights = ds.get_weights(model)
    with pytest.raises(ConfigError, match="shape"):
        ds.set_weights(model, {**weights, "0.weight": np.zeros((5, 3), np.float32)})
    with pytest.raises(ConfigError, match="NaN"):
        ds.set_weights(model, {**weights, "0.bias": np.full(4, np.nan, np.float32)})


def test_bad_hidden_text_names_the_value() -> None:
    with pytest.raises(ConfigError, match="'a,b'"):
        ds.parse_hidden("a,b")


def test_trained_model_separates_an_easy_task(seed: int) -> None:
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((400, 2)).astype(np.float32)
    y = (z[:, 0] > 0).astype(np.int64)
    model = ds.build_model(ds.ModelSpec(2, 2, (8,)), seed=seed)
    ds.train_model(model, z, y, epochs=30, lr=0.01, seed=seed)
    assert ds.evaluate(model, z, y, 2)["auc"] > 0.95
