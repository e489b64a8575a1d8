"""Neural mutual-information estimators: ReMINE (paper Eq. 7), MINE (EMA-corrected), InfoNCE.

Each estimator owns one statistics network (critic) and exposes two things:

* :meth:`MIEstimator.critic_loss` — what the critic minimises (a regularised negative bound);
* :meth:`MIEstimator.bound` — the differentiable MI lower bound under the current critic, which the
  encoder minimises (for S) or maximises (for L).

The second argument is either a *discrete label* (``LabelCoding``) or a continuous matrix. For a
discrete label the product-of-marginals expectation is taken exactly over the label's class
frequencies, E_{P(a)P(b)}[e^F] = mean_i Σ_c p_c e^{F(a_i, c)}, instead of by shuffling the batch:
the same quantity, with far less variance, which is what lets a warm critic keep up with a moving
encoder. Continuous second arguments use an in-batch permutation (the classic MINE recipe).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shared.errors import ConfigError
from shared.mi.critics import StatisticsNetwork
from shared.registry import Registry


@dataclass(frozen=True)
class LabelCoding:
    """How a discrete label enters a critic: 0/1 when binary (as in the paper), else one-hot."""

    n_classes: int
    priors: tuple[float, ...]

    @classmethod
    def from_labels(cls, labels: np.ndarray, n_classes: int | None = None) -> LabelCoding:
        labels = np.asarray(labels, dtype=np.int64)
        k = int(n_classes if n_classes is not None else labels.max() + 1)
        if k < 2:
            raise ConfigError(f"labels: need at least 2 classes to estimate MI, got {k}")
        counts = np.bincount(labels, minlength=k).astype(np.float64)
        return cls(n_classes=k, priors=tuple((counts / counts.sum()).tolist()))

    @property
    def dim(self) -> int:
        return 1 if self.n_classes == 2 else self.n_classes

    def codes(self) -> torch.Tensor:
        """One row per class: the critic input that stands for that class."""
        if self.n_classes == 2:
            return torch.tensor([[0.0], [1.0]])
        return torch.eye(self.n_classes)

    def encode(self, labels: torch.Tensor) -> torch.Tensor:
        return self.codes()[labels]

    def log_priors(self) -> torch.Tensor:
        return torch.log(torch.tensor(self.priors, dtype=torch.float32).clamp_min(1e-12))

    @property
    def entropy(self) -> float:
        """H(label) in nats: the ceiling of I(label; anything)."""
        p = np.asarray(self.priors)
        p = p[p > 0]
        return float(-(p * np.log(p)).sum())


def _log_mean_exp(x: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(x.reshape(-1), dim=0) - math.log(x.numel())


class MIEstimator(ABC):
    """A neural MI lower bound with its own critic and optimiser.

    Args:
        a_dim: width of the first variable (e.g. the encoder output T(x)).
        b: a :class:`LabelCoding` for a discrete second variable, or the width of a continuous one.
        hidden: critic hidden widths (paper: 100, 100).
        lr: critic learning rate.
        seed: seeds the critic's initial weights.
        standardize: feed the critic batch-standardised ``a`` (see ``_prepare``).
    """

    name: str = "base"

    def __init__(
        self,
        a_dim: int,
        b: LabelCoding | int,
        *,
        hidden: Sequence[int] = (100, 100),
        lr: float = 1e-3,
        seed: int = 0,
        standardize: bool = True,
    ) -> None:
        if a_dim < 1:
            raise ConfigError(f"a_dim: must be >= 1, got {a_dim}")
        if lr <= 0:
            raise ConfigError(f"lr: must be > 0, got {lr}")
        self.standardize = standardize
        self.coding = b if isinstance(b, LabelCoding) else None
        b_dim = b.dim if isinstance(b, LabelCoding) else int(b)
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.critic = StatisticsNetwork(a_dim, b_dim, hidden)
        torch.random.set_rng_state(generator_state)
        self.optimizer = torch.optim.Adam(self.critic.parameters(), lr=lr)
        if self.coding is not None:
            self._codes = self.coding.codes()
            self._log_priors = self.coding.log_priors()

    def _prepare(self, a: torch.Tensor) -> torch.Tensor:
        """Standardise ``a`` with its batch statistics (gradients flow through them).

        MI is invariant to rescaling each coordinate, and the attackers standardise their inputs.
        A critic that does not would be blind to structure the encoder squeezes into a tiny range
        (e.g. near Tanh saturation) that a scaled attacker still reads: weak critics overstate
        privacy.
        """
        if not self.standardize or a.shape[0] < 2:
            return a
        return (a - a.mean(0)) / (a.std(0) + 1e-6)

    # -- the two expectations of the Donsker–Varadhan family ------------------------------------
    def _joint_and_marginal(
        self, a: torch.Tensor, b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (F on joint pairs, log E_{P(a)P(b)}[e^F])."""
        a = self._prepare(a)
        if self.coding is not None:
            scores = self.critic.all_classes(a, self._codes)  # (n, K)
            joint = scores.gather(1, b.view(-1, 1)).squeeze(1)
            log_marg = torch.logsumexp(scores + self._log_priors, dim=1)  # log Σ_c p_c e^F
            return joint, _log_mean_exp(log_marg)
        joint = self.critic(a, b)
        perm = torch.randperm(b.shape[0])
        return joint, _log_mean_exp(self.critic(a, b[perm]))

    def dv_bound(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        joint, log_marg = self._joint_and_marginal(a, b)
        return joint.mean() - log_marg

    @abstractmethod
    def critic_loss(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Loss the critic minimises on a batch."""

    def bound(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Differentiable MI lower bound (nats) under the current critic."""
        return self.dv_bound(a, b)

    def step(self, a: torch.Tensor, b: torch.Tensor) -> float:
        """One critic update on a batch; ``a`` is detached so the encoder is untouched."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.critic_loss(a.detach(), b)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(self, a: torch.Tensor, b: torch.Tensor) -> float:
        return float(self.bound(a, b))

    def requires_grad_(self, flag: bool) -> None:
        for p in self.critic.parameters():
            p.requires_grad_(flag)


MI_ESTIMATORS: Registry[MIEstimator] = Registry("MI estimator")


@MI_ESTIMATORS.register("remine")
class ReMINE(MIEstimator):
    """Regularised MINE (Choi & Lee; paper Eq. 7): DV bound minus 0.1·(log E_marg[e^F])².

    The regulariser pins the critic's free additive constant so it stops drifting along a family
    of equally good solutions, which is what makes warm critics stable across encoder steps.
    """

    def __init__(self, *args: object, regularizer: float = 0.1, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if regularizer < 0:
            raise ConfigError(f"regularizer: must be >= 0, got {regularizer}")
        self.regularizer = regularizer

    def critic_loss(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        joint, log_marg = self._joint_and_marginal(a, b)
        return -(joint.mean() - log_marg) + self.regularizer * log_marg.pow(2)


@MI_ESTIMATORS.register("mine")
class MINE(MIEstimator):
    """MINE (Belghazi et al.) with the moving-average bias correction of the log-term gradient."""

    def __init__(self, *args: object, ema_rate: float = 0.01, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if not 0 < ema_rate <= 1:
            raise ConfigError(f"ema_rate: must be in (0, 1], got {ema_rate}")
        self.ema_rate = ema_rate
        self._ema: float | None = None

    def critic_loss(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        joint, log_marg = self._joint_and_marginal(a, b)
        mean_exp = torch.exp(log_marg)
        current = float(mean_exp.detach())
        self._ema = current if self._ema is None else (
            (1 - self.ema_rate) * self._ema + self.ema_rate * current
        )
        # ∇ log E[e^F] = ∇E[e^F] / E[e^F]; the denominator is replaced by its moving average.
        return -(joint.mean() - mean_exp / max(self._ema, 1e-12))


@MI_ESTIMATORS.register("infonce")
class InfoNCE(MIEstimator):
    """InfoNCE (van den Oord et al.; Poole et al. 2019).

    Continuous second variable: in-batch contrastive bound, capped at log(batch size).
    Discrete label: the negatives are the label's whole marginal (the limit of infinitely many
    negatives), giving E[F(a, y) − log Σ_c p_c e^{F(a, c)}], which is uncapped and low-variance.
    """

    pair_group = 64

    def bound(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = self._prepare(a)
        if self.coding is not None:
            scores = self.critic.all_classes(a, self._codes)
            joint = scores.gather(1, b.view(-1, 1)).squeeze(1)
            return (joint - torch.logsumexp(scores + self._log_priors, dim=1)).mean()
        # Contrast within groups of `pair_group` rows: n² critic calls per group keeps the cost
        # linear in the batch, at the price of capping the bound at log(pair_group).
        parts = []
        for a_g, b_g in zip(
            torch.split(a, self.pair_group), torch.split(b, self.pair_group), strict=True
        ):
            n = a_g.shape[0]
            if n < 2:
                continue
            a_rep = a_g.unsqueeze(1).expand(n, n, a_g.shape[1])
            b_rep = b_g.unsqueeze(0).expand(n, n, b_g.shape[1])
            scores = self.critic(a_rep, b_rep)  # scores[i, j] = F(a_i, b_j)
            parts.append(
                (scores.diagonal() - torch.logsumexp(scores, dim=1)).mean() + math.log(n)
            )
        return torch.stack(parts).mean()

    def critic_loss(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return -self.bound(a, b)
