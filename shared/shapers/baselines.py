"""Baseline shapers the paper compares against (§4): raw data, noisy data, a random encoder.

They share InfoShape's interface so every comparison runs through the same bundle, encoding and
attacker code; a baseline that leaks is measured exactly like an encoder that does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.errors import ConfigError
from shared.shapers.base import SHAPERS, Shaper
from shared.shapers.network import NumpyNetwork, build_network, check_architecture, network_arrays


@SHAPERS.register("identity")
class IdentityShaper(Shaper):
    """Releases the (standardised) features unchanged: the 'raw data' reference point."""

    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None:
        pass

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return X.copy()

    def _n_components(self) -> int:
        return int(self.n_features_in_)

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.check_fitted()
        return {"architecture": {"type": "identity", "n_features_in": int(self.n_features_in_)}}, {}

    @classmethod
    def from_state(cls, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> IdentityShaper:
        shaper = cls()
        shaper.n_features_in_ = int(config["architecture"]["n_features_in"])
        return shaper


@SHAPERS.register("gaussian-noise")
class GaussianNoiseShaper(Shaper):
    """Adds N(0, σ²) to each standardised feature, fresh noise per row (paper §4's noisy data).

    Args:
        sigma: noise standard deviation, in units of each feature's standard deviation.
        seed: seeds the noise stream, so an encoding run can be reproduced.
    """

    def __init__(self, sigma: float = 1.0, *, seed: int = 0) -> None:
        self.sigma = sigma
        self.seed = seed

    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None:
        if not np.isfinite(self.sigma) or self.sigma < 0:
            raise ConfigError(f"sigma: must be a finite number >= 0, got {self.sigma}")
        self._rng = np.random.default_rng(self.seed)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "_rng"):
            self._rng = np.random.default_rng(self.seed)
        noise = self._rng.standard_normal(X.shape, dtype=np.float32)
        noise *= np.float32(self.sigma)
        return X + noise

    def _n_components(self) -> int:
        return int(self.n_features_in_)

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.check_fitted()
        arch = {"type": "gaussian-noise", "n_features_in": int(self.n_features_in_)}
        return {"architecture": arch, "params": {"sigma": float(self.sigma),
                                                  "seed": int(self.seed)}}, {}

    @classmethod
    def from_state(
        cls, config: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> GaussianNoiseShaper:
        params = config.get("params", {})
        shaper = cls(sigma=float(params.get("sigma", 1.0)), seed=int(params.get("seed", 0)))
        shaper.n_features_in_ = int(config["architecture"]["n_features_in"])
        return shaper


@SHAPERS.register("random-encoder")
class RandomEncoderShaper(Shaper):
    """An untrained encoder of InfoShape's architecture: what shaping buys over a random map."""

    def __init__(
        self,
        *,
        hidden: Sequence[int] = (10,),
        n_components: int = 3,
        activation: str = "tanh",
        seed: int = 0,
    ) -> None:
        self.hidden = tuple(int(h) for h in hidden)
        self.n_components_out = n_components
        self.activation = activation
        self.seed = seed

    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None:
        import torch

        check_architecture(self.hidden, self.n_components_out, self.activation)
        state = torch.random.get_rng_state()
        torch.manual_seed(self.seed)
        try:
            net = build_network(X.shape[1], self.hidden, self.n_components_out, self.activation)
        finally:
            torch.random.set_rng_state(state)
        self.weights_ = network_arrays(net)
        self._net = NumpyNetwork(self.weights_, len(self.hidden) + 1, self.activation)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return self._net(X)

    def _n_components(self) -> int:
        return int(self.n_components_out)

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.check_fitted()
        arch = {
            "type": "mlp",
            "n_features_in": int(self.n_features_in_),
            "hidden": list(self.hidden),
            "n_components": int(self.n_components_out),
            "activation": self.activation,
        }
        return {"architecture": arch, "params": {"seed": int(self.seed)}}, dict(self.weights_)

    @classmethod
    def from_state(
        cls, config: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> RandomEncoderShaper:
        arch = config["architecture"]
        shaper = cls(
            hidden=arch["hidden"],
            n_components=int(arch["n_components"]),
            activation=arch["activation"],
            seed=int(config.get("params", {}).get("seed", 0)),
        )
        check_architecture(shaper.hidden, shaper.n_components_out, shaper.activation)
        shaper._net = NumpyNetwork(tensors, len(shaper.hidden) + 1, shaper.activation)
        shaper.weights_ = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
        shaper.n_features_in_ = int(arch["n_features_in"])
        return shaper
