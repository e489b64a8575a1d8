"""Statistics networks (critics) for neural MI estimation.

The paper's critic is ``concat(z, label) → 100 → 100 → 1`` with ReLU. Labels enter as a single
0/1 input for binary labels (as in the paper) and one-hot for multi-class ones, so one network shape
serves every table.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class StatisticsNetwork(nn.Module):
    """F_φ(a, b): a scalar score of a pair; large on joint samples, small on independent ones."""

    def __init__(self, a_dim: int, b_dim: int, hidden: Sequence[int] = (100, 100)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = a_dim + b_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)
        self.a_dim = a_dim
        self.b_dim = b_dim

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([a, b], dim=-1)).squeeze(-1)

    def all_classes(self, a: torch.Tensor, class_codes: torch.Tensor) -> torch.Tensor:
        """Scores F(a_i, c) for every row i and every class code c: shape (n, n_classes).

        Used for discrete labels, where the product-of-marginals expectation can be taken exactly
        over the label's class frequencies instead of by shuffling a minibatch.
        """
        n, k = a.shape[0], class_codes.shape[0]
        a_rep = a.unsqueeze(1).expand(n, k, a.shape[1])
        c_rep = class_codes.unsqueeze(0).expand(n, k, class_codes.shape[1])
        return self.forward(a_rep, c_rep)
