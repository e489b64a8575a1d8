"""``InfoShapeEncoder``: a small network T trained so T(x) keeps I(T;L) and loses I(T;S).

Usage (scikit-learn style)::

    enc = InfoShapeEncoder(lam=1.0).fit(X, y_public, y_sensitive)
    Z = enc.transform(X)

``X`` is a numeric matrix (tables go through ``shared.data.InputSchema`` first); labels are class
indices; ``y_sensitive`` may have several columns, each hidden with weight λ.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.errors import ConfigError
from shared.shapers.base import SHAPERS, Shaper, as_label_matrix
from shared.shapers.network import (
    NumpyNetwork,
    build_network,
    check_architecture,
    network_arrays,
)

SCHEDULES = ("alternating", "paper")


def _progress_bar(enabled: bool, schedule: str):
    """A rich progress callback when asked for and attached to a terminal, else None."""
    if not enabled or not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn(f"training encoder ({schedule})"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        transient=True,
    )
    task = bar.add_task("fit", total=1, info="")

    def update(step: int, total: int, values: dict[str, float]) -> None:
        info = "  ".join(f"{k}={v:.3f}" for k, v in values.items())
        bar.update(task, completed=step, total=total, info=info)

    return bar, update


@SHAPERS.register("infoshape")
class InfoShapeEncoder(Shaper):
    """Task-based encoder trained with neural MI estimates (InfoShape, Esfahanizadeh et al.).

    Args:
        lam: λ, weight of Σ_j Ĩ(S_j;T) against Ĩ(L;T). Larger hides more of S.
        hidden: hidden layer widths of T (paper: (10,)).
        n_components: output width k of T (paper: 3).
        activation: ``tanh`` (paper), ``relu`` or ``sigmoid``.
        estimator: MI estimator name (``remine`` default, ``mine``, ``infonce``).
        schedule: ``alternating`` (default; fast) or ``paper`` (Algorithm 1, for reproduction).
        critic_hidden: statistics-network hidden widths (paper: (100, 100)).
        critic_lr: critic learning rate for the alternating schedule.
        encoder_lr: Adam learning rate of T (paper: 1e-3; the alternating schedule takes 3e-3).
        critic_steps: public-critic steps per encoder step (alternating).
        sensitive_critic_steps: sensitive-critic steps per encoder step (alternating).
        warmup_steps: critic steps on the initial encoder before it moves (alternating).
        batch_size: minibatch for the alternating schedule.
        max_steps: encoder-step cap (alternating); ``epochs`` for the paper schedule.
        paper_critic_iterations: critic iterations per encoder step (paper schedule; 2000).
        validation_fraction: share of rows held out to track MI curves and detect the plateau.
        seed: seeds everything; CPU runs are deterministic for a seed.
        progress: show a progress bar on a terminal.
    """

    def __init__(
        self,
        lam: float = 1.0,
        *,
        hidden: Sequence[int] = (10,),
        n_components: int = 3,
        activation: str = "tanh",
        estimator: str = "remine",
        schedule: str = "alternating",
        critic_hidden: Sequence[int] = (100, 100),
        critic_lr: float = 1e-3,
        encoder_lr: float = 3e-3,
        critic_steps: int = 1,
        sensitive_critic_steps: int = 3,
        warmup_steps: int = 300,
        batch_size: int = 512,
        max_steps: int = 600,
        epochs: int = 50,
        paper_critic_iterations: int = 2000,
        validation_fraction: float = 0.2,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        self.lam = lam
        self.hidden = tuple(int(h) for h in hidden)
        self.n_components_out = n_components
        self.activation = activation
        self.estimator = estimator
        self.schedule = schedule
        self.critic_hidden = tuple(int(h) for h in critic_hidden)
        self.critic_lr = critic_lr
        self.encoder_lr = encoder_lr
        self.critic_steps = critic_steps
        self.sensitive_critic_steps = sensitive_critic_steps
        self.warmup_steps = warmup_steps
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.epochs = epochs
        self.paper_critic_iterations = paper_critic_iterations
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.progress = progress

    # -- validation --------------------------------------------------------------------------
    def _check_params(self) -> None:
        if not np.isfinite(self.lam) or self.lam < 0:
            raise ConfigError(f"lam: must be a finite number >= 0, got {self.lam}")
        from shared.mi.estimators import MI_ESTIMATORS

        check_architecture(self.hidden, self.n_components_out, self.activation)
        MI_ESTIMATORS.get(self.estimator)
        if self.schedule not in SCHEDULES:
            raise ConfigError(
                f"schedule: must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}"
            )
        for name in ("critic_steps", "sensitive_critic_steps", "batch_size", "max_steps",
                     "epochs", "paper_critic_iterations"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("critic_lr", "encoder_lr"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}: must be > 0, got {getattr(self, name)}")
        if int(self.warmup_steps) < 0:
            raise ConfigError(f"warmup_steps: must be >= 0, got {self.warmup_steps}")
        if not 0 < self.validation_fraction < 0.5:
            raise ConfigError(
                f"validation_fraction: must be in (0, 0.5), got {self.validation_fraction}"
            )

    # -- fitting -----------------------------------------------------------------------------
    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None:
        # Training needs torch; encoding (transform) does not, so import it here only.
        import torch

        from shared.mi.estimators import LabelCoding
        from shared.shapers.schedules import (
            AlternatingConfig,
            CriticConfig,
            PaperConfig,
            TrainData,
            train_alternating,
            train_paper,
        )

        self._check_params()
        if y_public is None or y_sensitive is None:
            raise ConfigError("y_public, y_sensitive: InfoShape needs both labels to fit")
        n = X.shape[0]
        y = as_label_matrix(y_public, n, "y_public")
        if y.shape[1] != 1:
            raise ConfigError(f"y_public: must be one label column, got {y.shape[1]}")
        s = as_label_matrix(y_sensitive, n, "y_sensitive")
        if n < 50:
            raise ConfigError(f"X: need at least 50 rows to train an encoder, got {n}")

        rng = np.random.default_rng(self.seed)
        order = rng.permutation(n)
        n_val = max(int(round(self.validation_fraction * n)), 10)
        val, train = order[:n_val], order[n_val:]
        data = TrainData(
            X=torch.from_numpy(X[train]),
            y=torch.from_numpy(y[train, 0]),
            s=torch.from_numpy(s[train]),
            X_val=torch.from_numpy(X[val]),
            y_val=torch.from_numpy(y[val, 0]),
            s_val=torch.from_numpy(s[val]),
            y_coding=LabelCoding.from_labels(y[:, 0]),
            s_codings=[LabelCoding.from_labels(s[:, j]) for j in range(s.shape[1])],
        )

        torch_state = torch.random.get_rng_state()
        threads = torch.get_num_threads()
        # The networks are tiny: one thread avoids sync overhead that, on a busy 2-core machine,
        # made training ~8x slower in CPU time than single-threaded.
        torch.set_num_threads(1)
        torch.manual_seed(self.seed)
        try:
            net = build_network(X.shape[1], self.hidden, self.n_components_out, self.activation)
            critic_cfg = CriticConfig(self.estimator, self.critic_hidden, self.critic_lr)
            bar, update = _progress_bar(self.progress, self.schedule)
            if bar is not None:
                bar.start()
            try:
                if self.schedule == "paper":
                    history = train_paper(
                        net, data, self.lam, critic_cfg,
                        PaperConfig(epochs=self.epochs,
                                    critic_iterations=self.paper_critic_iterations),
                        self.encoder_lr, self.seed, update,
                    )
                else:
                    history = train_alternating(
                        net, data, self.lam, critic_cfg,
                        AlternatingConfig(
                            critic_steps=self.critic_steps,
                            sensitive_critic_steps=self.sensitive_critic_steps,
                            warmup_steps=self.warmup_steps,
                            batch_size=self.batch_size,
                            max_steps=self.max_steps,
                        ),
                        self.encoder_lr, self.seed, update,
                    )
            finally:
                if bar is not None:
                    bar.stop()
        finally:
            torch.random.set_rng_state(torch_state)
            torch.set_num_threads(threads)

        self.weights_ = network_arrays(net)
        self.history_ = history
        self.n_labels_ = (data.y_coding.n_classes, [c.n_classes for c in data.s_codings])
        self.label_entropy_ = data.y_coding.entropy
        self.sensitive_entropy_ = [c.entropy for c in data.s_codings]
        self._net = NumpyNetwork(self.weights_, len(self.hidden) + 1, self.activation)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return self._net(X)

    def _n_components(self) -> int:
        return self.n_components_out

    # -- bundle round trip -------------------------------------------------------------------
    def architecture(self) -> dict[str, Any]:
        return {
            "type": "mlp",
            "n_features_in": int(self.n_features_in_),
            "hidden": list(self.hidden),
            "n_components": int(self.n_components_out),
            "activation": self.activation,
        }

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.check_fitted()
        config = {
            "architecture": self.architecture(),
            "params": {
                "lam": float(self.lam),
                "estimator": self.estimator,
                "schedule": self.schedule,
                "seed": int(self.seed),
            },
        }
        return config, dict(self.weights_)

    @classmethod
    def from_state(cls, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> InfoShapeEncoder:
        arch = config["architecture"]
        params = config.get("params", {})
        enc = cls(
            lam=float(params.get("lam", 1.0)),
            hidden=arch["hidden"],
            n_components=int(arch["n_components"]),
            activation=arch["activation"],
            estimator=params.get("estimator", "remine"),
            schedule=params.get("schedule", "alternating"),
            seed=int(params.get("seed", 0)),
        )
        check_architecture(enc.hidden, enc.n_components_out, enc.activation)
        enc._net = NumpyNetwork(tensors, len(enc.hidden) + 1, enc.activation)
        if enc._net.n_in != int(arch["n_features_in"]) or enc._net.n_out != enc.n_components_out:
            raise ConfigError("encoder weights: shapes do not match the recorded architecture")
        enc.weights_ = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
        enc.n_features_in_ = int(arch["n_features_in"])
        return enc

    def training_metrics(self) -> dict[str, Any]:
        if not hasattr(self, "history_"):
            return {}
        return {
            "history": self.history_.to_dict(),
            "label_entropy": self.label_entropy_,
            "sensitive_entropy": self.sensitive_entropy_,
            "steps": self.history_.step[-1] if self.history_.step else 0,
            "seconds": self.history_.seconds[-1] if self.history_.seconds else 0.0,
        }
