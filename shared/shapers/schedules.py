"""Training schedules for the InfoShape encoder: ``alternating`` (default) and ``paper``.

Both minimise Q = −Ĩ(L;T) + λ Σ_j Ĩ(S_j;T) with the same estimator family; they differ in how the
critics that produce Ĩ are kept.

* ``paper`` — Algorithm 1 as published: for every encoder step two *fresh* critics are trained
  from scratch (N iterations at batch 2000, Adam 1e-4, gradients accumulated over 10 batches), the
  final MI is averaged over batches, then one Adam step moves the encoder. Faithful and slow: the
  authors report up to an hour per epoch.
* ``alternating`` — critics stay warm across encoder steps: after a warm-up, k critic steps per
  encoder step on fresh minibatches. A warm critic tracks the moving encoder, so one encoder step
  costs a few critic steps instead of thousands. Training stops when the validation objective
  plateaus. Sensitive critics take extra steps: a critic that lags the encoder under-reports
  Ĩ(S;T) and the encoder then "hides" S only from that critic, not from a real attacker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from shared.mi.estimators import MI_ESTIMATORS, LabelCoding, MIEstimator
from shared.shapers.network import network_arrays

ProgressFn = Callable[[int, int, dict[str, float]], None]


@dataclass
class TrainData:
    """Tensors for one fit: features, public label, sensitive labels (n, j), validation split."""

    X: torch.Tensor
    y: torch.Tensor
    s: torch.Tensor
    X_val: torch.Tensor
    y_val: torch.Tensor
    s_val: torch.Tensor
    y_coding: LabelCoding
    s_codings: list[LabelCoding]


@dataclass
class CriticConfig:
    estimator: str = "remine"
    hidden: tuple[int, ...] = (100, 100)
    lr: float = 1e-3


@dataclass
class History:
    """Per-step MI estimates (the data of paper Fig. 3)."""

    step: list[int] = field(default_factory=list)
    mi_public: list[float] = field(default_factory=list)
    mi_sensitive: list[list[float]] = field(default_factory=list)  # per step, one per column
    objective: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    # Encoder weights at each record (tiny), so a benchmark can find *when* a target was reached
    # by scoring snapshots with real attackers afterwards. Not part of the manifest.
    snapshots: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, list]:
        return {
            "step": self.step,
            "mi_public": self.mi_public,
            "mi_sensitive": self.mi_sensitive,
            "objective": self.objective,
            "seconds": self.seconds,
        }


def make_critics(
    z_dim: int, data: TrainData, cfg: CriticConfig, seed: int
) -> tuple[MIEstimator, list[MIEstimator]]:
    cls = MI_ESTIMATORS.get(cfg.estimator)
    public = cls(z_dim, data.y_coding, hidden=cfg.hidden, lr=cfg.lr, seed=seed)
    sensitive = [
        cls(z_dim, coding, hidden=cfg.hidden, lr=cfg.lr, seed=seed + 1 + j)
        for j, coding in enumerate(data.s_codings)
    ]
    return public, sensitive


def objective(
    z: torch.Tensor,
    y: torch.Tensor,
    s: torch.Tensor,
    public: MIEstimator,
    sensitive: list[MIEstimator],
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Q = −Ĩ(L;T) + λ Σ_j Ĩ(S_j;T), with the parts."""
    mi_l = public.bound(z, y)
    mi_s = [c.bound(z, s[:, j]) for j, c in enumerate(sensitive)]
    q = -mi_l + lam * torch.stack(mi_s).sum()
    return q, mi_l, mi_s


@dataclass
class AlternatingConfig:
    critic_steps: int = 1
    sensitive_critic_steps: int = 3
    warmup_steps: int = 300
    batch_size: int = 512
    max_steps: int = 600
    min_steps: int = 400
    eval_every: int = 25
    patience: int = 8
    tol: float = 1e-3


def _batches(n: int, batch: int, gen: torch.Generator):
    while True:
        yield torch.randint(n, (min(batch, n),), generator=gen)


def train_alternating(
    encoder: nn.Module,
    data: TrainData,
    lam: float,
    critic_cfg: CriticConfig,
    cfg: AlternatingConfig,
    encoder_lr: float,
    seed: int,
    progress: ProgressFn | None = None,
    clock: Callable[[], float] | None = None,
) -> History:
    """Warm critics, k critic steps per encoder step, stop on a validation plateau."""
    import time

    clock = clock or time.perf_counter
    start = clock()
    gen = torch.Generator().manual_seed(seed)
    z_dim = encoder(data.X[:1]).shape[1]
    public, sensitive = make_critics(z_dim, data, critic_cfg, seed)
    enc_opt = torch.optim.Adam(encoder.parameters(), lr=encoder_lr)
    batches = _batches(data.X.shape[0], cfg.batch_size, gen)
    history = History()

    def critic_round(z_all: torch.Tensor, n_public: int, n_sensitive: int) -> None:
        for i in range(max(n_public, n_sensitive)):
            idx = next(batches)
            z_b = z_all[idx]
            if i < n_public:
                public.step(z_b, data.y[idx])
            if i < n_sensitive:
                for j, critic in enumerate(sensitive):
                    critic.step(z_b, data.s[idx, j])

    with torch.no_grad():
        z_all = encoder(data.X)
    critic_round(z_all, cfg.warmup_steps, cfg.warmup_steps)

    best = float("inf")
    stale = 0
    for step in range(1, cfg.max_steps + 1):
        with torch.no_grad():
            z_all = encoder(data.X)
        critic_round(z_all, cfg.critic_steps, cfg.sensitive_critic_steps)

        idx = next(batches)
        for critic in [public, *sensitive]:
            critic.requires_grad_(False)
        z = encoder(data.X[idx])
        q, _, _ = objective(z, data.y[idx], data.s[idx], public, sensitive, lam)
        enc_opt.zero_grad(set_to_none=True)
        q.backward()
        enc_opt.step()
        for critic in [public, *sensitive]:
            critic.requires_grad_(True)

        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            with torch.no_grad():
                z_val = encoder(data.X_val)
                q_val, mi_l, mi_s = objective(
                    z_val, data.y_val, data.s_val, public, sensitive, lam
                )
            record = (float(q_val), float(mi_l), [float(m) for m in mi_s])
            history.step.append(step)
            history.objective.append(record[0])
            history.mi_public.append(record[1])
            history.mi_sensitive.append(record[2])
            history.seconds.append(clock() - start)
            history.snapshots.append(network_arrays(encoder))
            if progress:
                progress(step, cfg.max_steps, {"I(L;T)": record[1], "I(S;T)": sum(record[2])})
            # Plateau on a smoothed validation objective (critic noise makes single reads jumpy).
            smooth = float(np.mean(history.objective[-3:]))
            if smooth < best - cfg.tol:
                best, stale = smooth, 0
            else:
                stale += 1
            if step >= cfg.min_steps and stale >= cfg.patience:
                break
    return history


@dataclass
class PaperConfig:
    """Algorithm 1 and the §4 setup of the paper (see DESIGN.md)."""

    epochs: int = 50
    critic_iterations: int = 2000
    batch_size: int = 2000
    accumulate: int = 10
    critic_lr: float = 1e-4
    average_last: int = 100


def train_paper(
    encoder: nn.Module,
    data: TrainData,
    lam: float,
    critic_cfg: CriticConfig,
    cfg: PaperConfig,
    encoder_lr: float,
    seed: int,
    progress: ProgressFn | None = None,
    clock: Callable[[], float] | None = None,
) -> History:
    """Per encoder step: fresh critics trained from scratch, then one encoder step."""
    import time

    clock = clock or time.perf_counter
    start = clock()
    gen = torch.Generator().manual_seed(seed)
    enc_opt = torch.optim.Adam(encoder.parameters(), lr=encoder_lr)
    history = History()
    fresh_cfg = CriticConfig(critic_cfg.estimator, critic_cfg.hidden, cfg.critic_lr)
    n = data.X.shape[0]
    for epoch in range(1, cfg.epochs + 1):
        with torch.no_grad():
            z_all = encoder(data.X)
        z_dim = z_all.shape[1]
        public, sensitive = make_critics(z_dim, data, fresh_cfg, seed + 1000 * epoch)
        critics = [public, *sensitive]
        recent_l: list[float] = []
        recent_s: list[list[float]] = []
        for c in critics:
            c.optimizer.zero_grad(set_to_none=True)
        for it in range(1, cfg.critic_iterations + 1):
            idx = torch.randint(n, (min(cfg.batch_size, n),), generator=gen)
            z_b = z_all[idx]
            values = []
            for j, c in enumerate(critics):
                labels = data.y[idx] if j == 0 else data.s[idx, j - 1]
                loss = c.critic_loss(z_b, labels) / cfg.accumulate
                loss.backward()
                with torch.no_grad():
                    values.append(float(c.bound(z_b, labels)))
            if it % cfg.accumulate == 0:
                for c in critics:
                    c.optimizer.step()
                    c.optimizer.zero_grad(set_to_none=True)
            recent_l.append(values[0])
            recent_s.append(values[1:])
        # Encoder step with the trained critics on one batch.
        for c in critics:
            c.requires_grad_(False)
        idx = torch.randint(n, (min(cfg.batch_size, n),), generator=gen)
        z = encoder(data.X[idx])
        q, _, _ = objective(z, data.y[idx], data.s[idx], public, sensitive, lam)
        enc_opt.zero_grad(set_to_none=True)
        q.backward()
        enc_opt.step()
        mi_l = float(np.mean(recent_l[-cfg.average_last :]))
        mi_s = np.mean(np.asarray(recent_s[-cfg.average_last :]), axis=0).tolist()
        history.step.append(epoch)
        history.mi_public.append(mi_l)
        history.mi_sensitive.append([float(v) for v in mi_s])
        history.objective.append(-mi_l + lam * float(np.sum(mi_s)))
        history.seconds.append(clock() - start)
        history.snapshots.append(network_arrays(encoder))
        if progress:
            progress(epoch, cfg.epochs, {"I(L;T)": mi_l, "I(S;T)": float(np.sum(mi_s))})
    return history
