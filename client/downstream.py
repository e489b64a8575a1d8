"""Local training of the downstream task model for FedAvg (the hospital's side).

The architecture must match ``server/downstream.py`` exactly (same layer order, so the same
state-dict keys and shapes); the two apps may not import each other, so it is restated here and
``tests/server/test_downstream.py`` checks both build identical layouts. Weights arrive and leave
as plain arrays; the encodings they are trained on never leave the site.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from shared.errors import ConfigError


def parse_hidden(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(h) for h in str(text).split(",") if h.strip())
    except ValueError:
        raise ConfigError(
            f"model 'hidden' must be comma-separated integers; got {text!r}"
        ) from None


def build_model(n_inputs: int, n_classes: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """MLP z → hidden (ReLU) → logits; no hidden layer is multinomial logistic regression."""
    if n_inputs < 1 or n_classes < 2 or any(h < 1 for h in hidden):
        raise ConfigError(
            f"invalid downstream model: {n_inputs} inputs, {n_classes} classes, hidden {hidden}"
        )
    layers: list[nn.Module] = []
    width = n_inputs
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


def load_weights(model: nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Copy the global weights in; refuse a layout that does not match (no silent broadcast)."""
    expected = model.state_dict()
    if set(weights) != set(expected):
        raise ConfigError(f"global model has keys {sorted(weights)}; expected {sorted(expected)}")
    for key, value in weights.items():
        if tuple(value.shape) != tuple(expected[key].shape):
            raise ConfigError(
                f"global model weight {key!r} has shape {value.shape}; expected "
                f"{tuple(expected[key].shape)}"
            )
        if not np.all(np.isfinite(value)):
            raise ConfigError(f"global model weight {key!r} holds NaN or infinite values")
    model.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})


def train_local(
    model: nn.Module,
    z: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    seed: int,
    batch_size: int = 128,
) -> float:
    """Adam on cross-entropy for ``epochs`` passes over the local rows; mean loss of the last."""
    X = torch.as_tensor(np.asarray(z, dtype=np.float32))
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


def get_weights(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


__all__ = ["build_model", "get_weights", "load_weights", "parse_hidden", "train_local"]
