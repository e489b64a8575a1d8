"""The downstream task model on released encodings: a small torch MLP (or logistic regression).

It measures what the release is *for*: how well L can be learned from (T(x), L(x)). In ``release``
mode the coordinator trains it on the pooled release; in ``federated`` mode each hospital trains it
on its own encodings and the coordinator only averages weights (FedAvg). Both sides build it from
this one module, so the layouts cannot drift apart.

Weights travel as a flat ``{name: ndarray}`` dict (a torch ``state_dict`` as numpy), never as a
pickled module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from shared.attacks import score_predictions
from shared.errors import ConfigError


def parse_hidden(text: str) -> tuple[int, ...]:
    """Hidden widths from their wire form ``"32,32"`` (empty: logistic regression)."""
    try:
        hidden = tuple(int(h) for h in str(text).split(",") if h.strip())
    except ValueError:
        raise ConfigError(
            f"model 'hidden' must be comma-separated integers; got {text!r}"
        ) from None
    if any(h < 1 for h in hidden):
        raise ConfigError(f"model 'hidden' widths must be >= 1; got {text!r}")
    return hidden


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of the downstream model; travels in the FedAvg task record."""

    n_inputs: int
    n_classes: int
    hidden: tuple[int, ...] = (32, 32)

    def to_config(self) -> dict[str, int | str]:
        return {
            "n-inputs": self.n_inputs,
            "n-classes": self.n_classes,
            "hidden": ",".join(str(h) for h in self.hidden),
        }


def build_model(spec: ModelSpec, seed: int = 0) -> nn.Sequential:
    """MLP z → hidden (ReLU) → logits; no hidden layer is multinomial logistic regression."""
    if spec.n_inputs < 1 or spec.n_classes < 2:
        raise ConfigError(
            f"downstream model needs ≥ 1 input and ≥ 2 classes; got {spec.n_inputs}, "
            f"{spec.n_classes}"
        )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        layers: list[nn.Module] = []
        width = spec.n_inputs
        for h in spec.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, spec.n_classes))
        return nn.Sequential(*layers)
    finally:
        torch.random.set_rng_state(generator_state)


def get_weights(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def set_weights(model: nn.Module, weights: dict[str, np.ndarray]) -> None:
    expected = model.state_dict()
    if set(weights) != set(expected):
        raise ConfigError(
            f"model weights have keys {sorted(weights)}; expected {sorted(expected)}"
        )
    for k, v in weights.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise ConfigError(f"model weight {k!r} has shape {v.shape}; expected "
                              f"{tuple(expected[k].shape)}")
        if not np.all(np.isfinite(v)):
            raise ConfigError(f"model weight {k!r} holds NaN or infinite values")
    model.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})


def train_model(
    model: nn.Module,
    Z: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    batch_size: int = 128,
    seed: int = 0,
) -> float:
    """Adam on cross-entropy for ``epochs`` passes; returns the mean loss of the last epoch.

    Runs on one intra-op thread: the model is tiny, and more threads only contend with the
    simulated sites (or other work) for the same cores.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(model, Z, y, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed)
    finally:
        torch.set_num_threads(threads)


def _train(
    model: nn.Module, Z: np.ndarray, y: np.ndarray, *, epochs: int, lr: float,
    batch_size: int, seed: int,
) -> float:
    X = torch.as_tensor(np.asarray(Z, dtype=np.float32))
    t = torch.as_tensor(np.asarray(y, dtype=np.int64))
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    last = float("nan")
    for _ in range(epochs):
        order = torch.randperm(X.shape[0], generator=gen)
        total, count = 0.0, 0
        for start in range(0, X.shape[0], batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            loss = loss_fn(model(X[idx]), t[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            count += len(idx)
        last = total / max(count, 1)
    return last


def predict_proba(model: nn.Module, Z: np.ndarray) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        logits = model(torch.as_tensor(np.asarray(Z, dtype=np.float32)))
        return torch.softmax(logits, dim=1).numpy().astype(np.float64)


def evaluate(model: nn.Module, Z: np.ndarray, y: np.ndarray, n_classes: int) -> dict[str, float]:
    """AUC (one-vs-rest macro for several classes), accuracy, balanced accuracy on (Z, y)."""
    return score_predictions(y, predict_proba(model, Z), np.arange(n_classes))


def fedavg(updates: Sequence[tuple[dict[str, np.ndarray], int]]) -> dict[str, np.ndarray]:
    """Average weight dicts weighted by each site's row count (McMahan et al., FedAvg)."""
    updates = [(w, n) for w, n in updates if n > 0]
    if not updates:
        raise ConfigError("FedAvg needs at least one update with rows")
    total = float(sum(n for _, n in updates))
    keys = updates[0][0].keys()
    return {
        k: (sum(np.asarray(w[k], dtype=np.float64) * (n / total) for w, n in updates)).astype(
            np.asarray(updates[0][0][k]).dtype
        )
        for k in keys
    }


__all__ = [
    "ModelSpec",
    "parse_hidden",
    "build_model",
    "evaluate",
    "fedavg",
    "get_weights",
    "predict_proba",
    "set_weights",
    "train_model",
]
