"""The downstream model: both apps build the same layout; FedAvg is row-weighted."""

from __future__ import annotations

import numpy as np
import pytest

from client import downstream as client_ds
from server import downstream as server_ds


@pytest.mark.parametrize("hidden", [(), (8,), (32, 32)])
def test_server_and_client_build_identical_layouts(hidden: tuple[int, ...]) -> None:
    server_model = server_ds.build_model(server_ds.ModelSpec(3, 4, hidden))
    client_model = client_ds.build_model(3, 4, hidden)
    s = {k: tuple(v.shape) for k, v in server_model.state_dict().items()}
    c = {k: tuple(v.shape) for k, v in client_model.state_dict().items()}
    assert s == c
    # and the weights of one load into the other
    client_ds.load_weights(client_model, server_ds.get_weights(server_model))
    spec = server_ds.ModelSpec(3, 4, hidden).to_config()
    assert client_ds.parse_hidden(str(spec["hidden"])) == hidden


def test_fedavg_is_row_weighted() -> None:
    a = {"w": np.array([1.0, 1.0], np.float32)}
    b = {"w": np.array([3.0, 5.0], np.float32)}
    avg = server_ds.fedavg([(a, 1), (b, 3), ({"w": np.array([100.0, 100.0])}, 0)])
    np.testing.assert_allclose(avg["w"], [2.5, 4.0])
    assert avg["w"].dtype == np.float32


def test_client_refuses_a_mismatched_global_model() -> None:
    model = client_ds.build_model(3, 2, (4,))
    weights = client_ds.get_weights(model)
    weights["0.weight"] = np.zeros((5, 3), np.float32)
    with pytest.raises(Exception, match="shape"):
        client_ds.load_weights(model, weights)
