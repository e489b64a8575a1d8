"""The encoder network T and its plain-array form.

A fully connected stack (paper: in → 10 → 3, Tanh). Encoding at a site does not need torch: the
forward pass is a few matrix products in numpy, done in float32 chunks, which is both faster for
small layers and keeps the site's code path free of any model-loading machinery. torch is only
imported to *train* (it costs ~300 MB of resident memory that an encoding site does not need).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

from shared.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

ACTIVATIONS = ("relu", "sigmoid", "tanh")


def check_architecture(hidden: Sequence[int], n_components: int, activation: str) -> None:
    if n_components < 1:
        raise ConfigError(f"n_components: must be >= 1, got {n_components}")
    if any(int(h) < 1 for h in hidden):
        raise ConfigError(f"hidden: every width must be >= 1, got {list(hidden)}")
    if activation not in ACTIVATIONS:
        raise ConfigError(
            f"activation: must be one of {', '.join(sorted(ACTIVATIONS))}, got {activation!r}"
        )


def build_network(
    n_in: int, hidden: Sequence[int], n_components: int, activation: str
) -> nn.Sequential:
    """Linear+activation for every layer, the output included (Tanh bounds T(x) as in the paper)."""
    from torch import nn

    check_architecture(hidden, n_components, activation)
    act = {"tanh": nn.Tanh, "relu": nn.ReLU, "sigmoid": nn.Sigmoid}[activation]
    layers: list[nn.Module] = []
    width = n_in
    for h in [*hidden, n_components]:
        layers += [nn.Linear(width, int(h)), act()]
        width = int(h)
    return nn.Sequential(*layers)


def network_arrays(net: nn.Sequential) -> dict[str, np.ndarray]:
    """Weights as plain float32 arrays named ``layer{i}.weight`` / ``layer{i}.bias``."""
    from torch import nn

    out: dict[str, np.ndarray] = {}
    linear = [m for m in net if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linear):
        out[f"layer{i}.weight"] = layer.weight.detach().cpu().numpy().astype(np.float32).copy()
        out[f"layer{i}.bias"] = layer.bias.detach().cpu().numpy().astype(np.float32).copy()
    return out


def _np_activation(name: str, x: np.ndarray) -> np.ndarray:
    if name == "tanh":
        return np.tanh(x, out=x)
    if name == "relu":
        return np.maximum(x, 0, out=x)
    return 1.0 / (1.0 + np.exp(-x))


class NumpyNetwork:
    """Forward pass of a stored encoder in numpy (used at sites; no torch module is rebuilt)."""

    def __init__(self, arrays: dict[str, np.ndarray], n_layers: int, activation: str) -> None:
        self.activation = activation
        self.weights: list[tuple[np.ndarray, np.ndarray]] = []
        for i in range(n_layers):
            try:
                w = np.ascontiguousarray(arrays[f"layer{i}.weight"], dtype=np.float32).T
                b = np.asarray(arrays[f"layer{i}.bias"], dtype=np.float32)
            except KeyError as exc:
                raise ConfigError(f"encoder weights: missing array {exc.args[0]!r}") from None
            chained = not self.weights or self.weights[-1][1].shape[0] == w.shape[0]
            if b.shape[0] != w.shape[1] or not chained:
                raise ConfigError(f"encoder weights: layer {i} has inconsistent shapes {w.shape}")
            self.weights.append((w, b))

    @property
    def n_in(self) -> int:
        return self.weights[0][0].shape[0]

    @property
    def n_out(self) -> int:
        return self.weights[-1][0].shape[1]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        # The layers are tiny (10×10): BLAS worker threads only add spin/sync overhead, which on a
        # busy 2-core machine made encoding ~10× slower. One thread per call.
        with threadpool_limits(limits=1, user_api="blas"):
            h = X
            for w, b in self.weights:
                h = h @ w
                h += b
                h = _np_activation(self.activation, h)
        return h
