"""``dpfe``: the Deep Private-Feature Extractor of paper 003 (Osia et al.), for tables.

What it is
    A small MLP feature extractor g(x; θ) whose output is batch-normalised (zero mean, unit
    variance per dimension, no affine part), trained on the public table with

        min_θ,φ  CE(q(L | f; φ), L)  +  λ · Σ_j  C(f, S_j),        f = BN(g(x; θ))

    where C is the contrastive sensitive-removal term of paper 003 Eq. 7
    (:func:`contrastive_removal_loss`) and q is a small classification head that is thrown away
    after fitting: only f is released. Eq. 7 is an upper bound on I(f; S) (Theorem 7 via a KDE with
    bandwidth σ): it *pulls together* pairs with different S and *pushes apart* pairs with the same
    S. Batch normalisation is what makes this bounded: with every dimension at unit variance the
    sum of all pairwise distances is fixed (Lemma 12), so the only way to lower the loss is to move
    the S-conditional feature distributions onto each other.

Test-time noise (Procedure 2)
    After training, the covariance C of the released features on the public rows is estimated and
    ``transform`` adds N(0, r·C) per row, r = ``noise_scale``. One trained model thus traces the
    whole accuracy–privacy curve (set ``noise_scale`` on a fitted shaper; no refit needed). The
    noise comes from the operating system's entropy unless ``noise_seed`` is given (tests and
    benchmarks): whoever holds a noise seed and the row order can regenerate and subtract the
    noise, so the seed is never written to the bundle and a shaper rebuilt from one always draws
    fresh entropy.

Fitted state (plain arrays, no pickle): extractor weights ``extractor.layer{i}.weight/bias``,
batch-norm statistics ``bn.mean`` / ``bn.var``, and ``noise.cholesky`` (lower-triangular factor of
C). ``transform`` is a numpy forward pass; torch is imported only inside ``fit``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.errors import ConfigError
from shared.shapers.base import SHAPERS, Shaper, as_features, as_label_matrix

if TYPE_CHECKING:
    import torch

ACTIVATIONS = ("relu", "tanh")
BN_EPS = 1e-5


# -- the loss of Eq. 7 ------------------------------------------------------------------------
def silverman_sigma(n_rows: int, dim: int) -> float:
    """KDE kernel variance σ for unit-variance features (Silverman's rule, squared bandwidth).

    Paper 003 fixes the kernel covariance to σI after normalising the features and says σ "depends
    on the dimensionality of the feature space and the size of the training data"; Silverman's rule
    of thumb h = (4 / (d + 2))^(1/(d+4)) · n^(-1/(d+4)) per unit standard deviation is the choice it
    cites ([39]); σ = h².
    """
    if n_rows < 1 or dim < 1:
        raise ConfigError(f"silverman_sigma: needs n_rows >= 1 and dim >= 1, got {n_rows}, {dim}")
    h = (4.0 / (dim + 2.0)) ** (1.0 / (dim + 4.0)) * n_rows ** (-1.0 / (dim + 4.0))
    return h * h


def contrastive_removal_loss(
    features: Any,
    sensitive: Any,
    *,
    c: float | None = None,
    sigma: float = 1.0,
) -> torch.Tensor:
    """Paper 003 Eq. 7, second term without β: the sensitive-removal (inverted contrastive) loss.

        C(f, y) = 1/(2σN²) · [ Σ_{i<j, y_i≠y_j} ‖f_i − f_j‖² + Σ_{i<j, y_i=y_j} (c − ‖f_i − f_j‖²) ]

    over the N rows of a batch, each unordered pair counted once. Pairs with *different*
    sensitive labels are pulled together and pairs with the *same* label pushed apart — the
    opposite of a Siamese contrastive loss, because the goal is to make f uninformative of y.

    Args:
        features: (N, d) batch of features f (torch tensor or array-like); meant to be batch-
            normalised, which is what bounds the loss (see the module docstring).
        sensitive: (N,) integer sensitive labels y.
        c: the constant of Theorem 8; it shifts the value, not the gradient. Default ``2d``, the
            expected squared distance of two unit-variance features (Lemma 12), so a same-label
            pair of uninformative features contributes 0 on average.
        sigma: the KDE kernel variance σ of Theorem 7 (> 0).

    Returns:
        A scalar tensor (differentiable when ``features`` requires grad).

    Computed in O(N·d) from per-class sums, not O(N²·d) from the pair matrix:
    Σ_{i<j in a group} ‖f_i − f_j‖² = n·Σ‖f_i‖² − ‖Σ f_i‖² for any group of n rows.
    """
    import torch

    f = features
    if not isinstance(f, torch.Tensor):
        f = torch.as_tensor(np.asarray(features, dtype=np.float64))
    y = sensitive
    if not isinstance(y, torch.Tensor):
        y = torch.as_tensor(np.asarray(sensitive))
    if f.ndim != 2:
        raise ConfigError(f"features: must be 2-D (N, d), got shape {tuple(f.shape)}")
    if y.ndim != 1 or y.shape[0] != f.shape[0]:
        raise ConfigError(
            f"sensitive: needs {f.shape[0]} labels (one per row), got shape {tuple(y.shape)}"
        )
    if not sigma > 0:
        raise ConfigError(f"sigma: must be > 0, got {sigma}")
    n, d = f.shape
    const = 2.0 * d if c is None else float(c)
    y = y.long()
    _, codes = torch.unique(y, return_inverse=True)
    onehot = torch.nn.functional.one_hot(codes).to(f.dtype)  # (N, C)
    sq = (f * f).sum(dim=1)  # (N,)
    counts = onehot.sum(dim=0)  # (C,)
    class_sums = onehot.T @ f  # (C, d)
    class_sq = onehot.T @ sq  # (C,)
    same = (counts * class_sq - (class_sums * class_sums).sum(dim=1)).sum()
    total_sum = f.sum(dim=0)
    every = n * sq.sum() - (total_sum * total_sum).sum()
    n_same = (counts * (counts - 1) / 2).sum()
    # different-label pairs: every − same;   same-label pairs: c·n_same − same
    return (every - 2.0 * same + const * n_same) / (2.0 * sigma * n * n)


# -- small-MLP helpers (shared with gen_filter) -------------------------------------------------
# Hidden layers carry the activation, the last layer is linear. Training builds torch modules;
# sites run the same layers as float32 matrix products in numpy from the stored arrays.
def mlp_forward(
    arrays: dict[str, np.ndarray], prefix: str, n_layers: int, activation: str, X: np.ndarray
) -> np.ndarray:
    """Hidden layers with ``activation``, the last layer linear (float32 throughout)."""
    h = X
    for i in range(n_layers):
        w = arrays[f"{prefix}.layer{i}.weight"]
        b = arrays[f"{prefix}.layer{i}.bias"]
        h = h @ w.T
        h += b
        if i < n_layers - 1:
            h = np.tanh(h) if activation == "tanh" else np.maximum(h, 0.0)
    return h


def check_mlp_arrays(
    arrays: dict[str, np.ndarray], prefix: str, widths: Sequence[int]
) -> None:
    """Refuse stored weights whose shapes do not chain ``widths`` (n_in, hidden..., n_out)."""
    for i in range(len(widths) - 1):
        for part, shape in (("weight", (widths[i + 1], widths[i])), ("bias", (widths[i + 1],))):
            name = f"{prefix}.layer{i}.{part}"
            if name not in arrays:
                raise ConfigError(f"{prefix} weights: missing array {name!r}")
            if tuple(arrays[name].shape) != shape:
                raise ConfigError(
                    f"{prefix} weights: {name} has shape {tuple(arrays[name].shape)}, the recorded "
                    f"architecture needs {shape}"
                )


def build_mlp(n_in: int, hidden: Sequence[int], n_out: int, activation: str) -> Any:
    from torch import nn

    act = nn.Tanh if activation == "tanh" else nn.ReLU
    layers: list[nn.Module] = []
    width = n_in
    for h in hidden:
        layers += [nn.Linear(width, int(h)), act()]
        width = int(h)
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


def mlp_arrays(net: Any, prefix: str) -> dict[str, np.ndarray]:
    from torch import nn

    out: dict[str, np.ndarray] = {}
    for i, layer in enumerate(m for m in net if isinstance(m, nn.Linear)):
        out[f"{prefix}.layer{i}.weight"] = layer.weight.detach().numpy().astype(np.float32)
        out[f"{prefix}.layer{i}.bias"] = layer.bias.detach().numpy().astype(np.float32)
    return out


def check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_widths(name: str, value: Any) -> tuple[int, ...]:
    try:
        widths = tuple(value)
    except TypeError:
        raise ConfigError(f"{name}: must be a list of layer widths, got {value!r}") from None
    if any(isinstance(w, bool) or not isinstance(w, int | np.integer) or w < 1 for w in widths):
        raise ConfigError(f"{name}: every width must be an integer >= 1, got {list(widths)}")
    return tuple(int(w) for w in widths)


def check_number(name: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: must be a number, got {value!r}") from None
    ok = math.isfinite(number) and (number >= 0 if allow_zero else number > 0)
    if not ok:
        rule = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name}: must be a finite number {rule}, got {value!r}")
    return number


@SHAPERS.register("dpfe")
class DPFEShaper(Shaper):
    """Deep Private-Feature Extractor (paper 003): CE for L + λ·Eq. 7 on batch-normalised features.

    Args:
        lam: β of Eq. 7, the weight of the sensitive-removal term against the task
            cross-entropy (the toolkit's common "privacy weight", so ``--lambda`` sets it). 0 gives
            the paper's *Simple* model (task features, no removal).
        hidden: hidden widths of the extractor g.
        n_components: width d of the released, batch-normalised feature f.
        activation: ``relu`` or ``tanh`` for the hidden layers (the feature layer is linear, then
            batch-normalised, as in the paper's linear auto-encoder + BN).
        head_hidden: hidden widths of the task head q(L | f) used only while fitting.
        noise_scale: r of Procedure 2: ``transform`` adds N(0, r·C), C the feature covariance.
            0 releases f itself. May be changed on a fitted shaper to trace the curve.
        sigma: KDE kernel variance σ of Eq. 7; default Silverman's rule for d and the number of
            training rows (:func:`silverman_sigma`). Only the ratio λ/σ matters for training.
        contrastive_c: the constant c of Eq. 7 (value only, never the gradient); default 2d.
        lr: Adam learning rate.
        batch_size: rows per step (Eq. 7 is computed over the pairs of a batch).
        max_steps: optimiser steps.
        seed: seeds initialisation and batches (CPU fits are deterministic for a seed).
        noise_seed: seeds the test-time noise stream, for tests and benchmarks; ``None`` (the
            default) draws from OS entropy. Never stored in the bundle.
    """

    def __init__(
        self,
        lam: float = 1.0,
        *,
        hidden: Sequence[int] = (32,),
        n_components: int = 3,
        activation: str = "tanh",
        head_hidden: Sequence[int] = (16,),
        noise_scale: float = 0.0,
        sigma: float | None = None,
        contrastive_c: float | None = None,
        lr: float = 3e-3,
        batch_size: int = 256,
        max_steps: int = 600,
        seed: int = 0,
        noise_seed: int | None = None,
    ) -> None:
        self.lam = lam
        self.hidden = hidden
        self.n_components_out = n_components
        self.activation = activation
        self.head_hidden = head_hidden
        self.noise_scale = noise_scale
        self.sigma = sigma
        self.contrastive_c = contrastive_c
        self.lr = lr
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.seed = seed
        self.noise_seed = noise_seed

    # -- validation --------------------------------------------------------------------------
    def _check_params(self) -> None:
        self.lam = check_number("lam", self.lam, allow_zero=True)
        self.hidden = check_widths("hidden", self.hidden)
        self.head_hidden = check_widths("head_hidden", self.head_hidden)
        self.n_components_out = check_int("n_components", self.n_components_out, 1)
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"activation: must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}"
            )
        self.noise_scale = check_number("noise_scale", self.noise_scale, allow_zero=True)
        if self.sigma is not None:
            self.sigma = check_number("sigma", self.sigma)
        if self.contrastive_c is not None:
            self.contrastive_c = check_number(
                "contrastive_c", self.contrastive_c, allow_zero=True
            )
        self.lr = check_number("lr", self.lr)
        self.batch_size = check_int("batch_size", self.batch_size, 2)
        self.max_steps = check_int("max_steps", self.max_steps, 1)
        self.seed = check_int("seed", self.seed, 0)
        if self.noise_seed is not None:
            self.noise_seed = check_int("noise_seed", self.noise_seed, 0)

    # -- fitting -----------------------------------------------------------------------------
    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None:
        import torch
        from torch import nn

        self._check_params()
        if y_public is None or y_sensitive is None:
            raise ConfigError("y_public, y_sensitive: DPFE needs both labels to fit")
        n = X.shape[0]
        y = as_label_matrix(y_public, n, "y_public")
        if y.shape[1] != 1:
            raise ConfigError(f"y_public: must be one label column, got {y.shape[1]}")
        s = as_label_matrix(y_sensitive, n, "y_sensitive")
        if n < 2 * self.n_components_out + 2:
            raise ConfigError(
                f"X: need at least {2 * self.n_components_out + 2} rows to estimate the feature "
                f"covariance, got {n}"
            )
        d = self.n_components_out
        sigma = self.sigma if self.sigma is not None else silverman_sigma(n, d)
        n_classes = int(y.max()) + 1

        torch_state = torch.random.get_rng_state()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny networks: one thread beats sync overhead on a busy host
        torch.manual_seed(self.seed)
        start = time.perf_counter()
        try:
            extractor = build_mlp(X.shape[1], self.hidden, d, self.activation)
            head = build_mlp(d, self.head_hidden, n_classes, self.activation)
            bn = nn.BatchNorm1d(d, affine=False, eps=BN_EPS)
            params = [*extractor.parameters(), *head.parameters()]
            opt = torch.optim.Adam(params, lr=self.lr)
            gen = torch.Generator().manual_seed(self.seed)
            Xt = torch.from_numpy(X)
            yt = torch.from_numpy(y[:, 0])
            st = torch.from_numpy(s)
            batch = min(self.batch_size, n)
            history: dict[str, list[float]] = {"step": [], "cross_entropy": [], "removal": []}
            record_every = max(self.max_steps // 20, 1)
            for step in range(1, self.max_steps + 1):
                idx = torch.randint(n, (batch,), generator=gen)
                f = bn(extractor(Xt[idx]))
                ce = nn.functional.cross_entropy(head(f), yt[idx])
                removal = sum(
                    contrastive_removal_loss(f, st[idx, j], c=self.contrastive_c, sigma=sigma)
                    for j in range(st.shape[1])
                )
                loss = ce + self.lam * removal
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if step % record_every == 0 or step == self.max_steps:
                    history["step"].append(step)
                    history["cross_entropy"].append(float(ce.detach()))
                    history["removal"].append(float(removal.detach()))
        finally:
            torch.random.set_rng_state(torch_state)
            torch.set_num_threads(threads)

        arrays = mlp_arrays(extractor, "extractor")
        # Final batch-norm statistics over every public row (exact, not a running average), so
        # the released features are exactly zero-mean / unit-variance on the fitting data.
        h = mlp_forward(arrays, "extractor", len(self.hidden) + 1, self.activation, X)
        arrays["bn.mean"] = h.mean(axis=0, dtype=np.float64).astype(np.float32)
        arrays["bn.var"] = h.var(axis=0, dtype=np.float64).astype(np.float32)
        f_all = (h - arrays["bn.mean"]) / np.sqrt(arrays["bn.var"] + np.float32(BN_EPS))
        arrays["noise.cholesky"] = _noise_cholesky(f_all)
        self.state_ = arrays
        self.sigma_ = float(sigma)
        self.history_ = history
        self.fit_seconds_ = time.perf_counter() - start
        self.reset_noise()

    # -- transform ---------------------------------------------------------------------------
    def features(self, X: Any) -> np.ndarray:
        """The noiseless released feature f = BN(g(x)) (Procedure 2 with r = 0)."""
        self.check_fitted()
        X = as_features(X)
        if X.shape[1] != self.n_features_in_:
            raise ConfigError(
                f"X: has {X.shape[1]} features, but DPFEShaper was fitted with "
                f"{self.n_features_in_}"
            )
        return self._features(X)

    def _features(self, X: np.ndarray) -> np.ndarray:
        h = mlp_forward(self.state_, "extractor", len(self.hidden) + 1, self.activation, X)
        h -= self.state_["bn.mean"]
        h /= np.sqrt(self.state_["bn.var"] + np.float32(BN_EPS))
        return h.astype(np.float32, copy=False)

    def reset_noise(self) -> None:
        """Start a new noise stream: at ``noise_seed`` if set, else from OS entropy."""
        self._rng = np.random.default_rng(self.noise_seed)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        f = self._features(X)
        scale = check_number("noise_scale", self.noise_scale, allow_zero=True)
        if scale == 0:
            return f
        if not hasattr(self, "_rng"):
            self.reset_noise()
        # One fresh draw per row from one stream: encoding in chunks gives the same rows as
        # encoding at once, and no two rows share noise.
        eps = self._rng.standard_normal(f.shape, dtype=np.float32)
        noise = eps @ self.state_["noise.cholesky"].T
        noise *= np.float32(math.sqrt(scale))
        return f + noise

    def _n_components(self) -> int:
        return int(self.n_components_out)

    # -- bundle round trip -------------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.check_fitted()
        config = {
            "architecture": {
                "type": "dpfe",
                "n_features_in": int(self.n_features_in_),
                "hidden": list(self.hidden),
                "n_components": int(self.n_components_out),
                "activation": self.activation,
                "bn_eps": BN_EPS,
            },
            "params": {
                "lam": float(self.lam),
                "noise_scale": float(self.noise_scale),
                "sigma": float(self.sigma_),
                "seed": int(self.seed),
                # noise_seed deliberately absent: a bundle must never let anyone replay the noise.
            },
        }
        return config, {k: np.array(v, dtype=np.float32) for k, v in self.state_.items()}

    @classmethod
    def from_state(cls, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> DPFEShaper:
        try:
            arch = config["architecture"]
            params = config.get("params", {})
            shaper = cls(
                lam=params.get("lam", 1.0),
                hidden=arch["hidden"],
                n_components=arch["n_components"],
                activation=arch["activation"],
                noise_scale=params.get("noise_scale", 0.0),
                seed=params.get("seed", 0),
            )
            n_in = check_int("n_features_in", arch["n_features_in"], 1)
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"dpfe state: malformed architecture/params ({exc!r})") from None
        shaper._check_params()
        if float(arch.get("bn_eps", BN_EPS)) != BN_EPS:
            raise ConfigError(f"dpfe state: bn_eps must be {BN_EPS}, got {arch.get('bn_eps')}")
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
        d = shaper.n_components_out
        check_mlp_arrays(arrays, "extractor", [n_in, *shaper.hidden, d])
        for name, shape in (("bn.mean", (d,)), ("bn.var", (d,)), ("noise.cholesky", (d, d))):
            if name not in arrays or tuple(arrays[name].shape) != shape:
                raise ConfigError(f"dpfe state: needs array {name!r} of shape {shape}")
        if np.any(arrays["bn.var"] < 0) or not all(np.isfinite(a).all() for a in arrays.values()):
            raise ConfigError("dpfe state: arrays hold NaN/inf or a negative variance")
        shaper.state_ = arrays
        shaper.sigma_ = float(params.get("sigma", 1.0))
        shaper.n_features_in_ = n_in
        shaper.reset_noise()
        return shaper

    def training_metrics(self) -> dict[str, Any]:
        if not hasattr(self, "history_"):
            return {}
        return {
            "history": self.history_,
            "sigma": self.sigma_,
            "seconds": self.fit_seconds_,
        }


def _noise_cholesky(features: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of the feature covariance C (Procedure 2), jittered if singular."""
    cov = np.atleast_2d(np.cov(features.astype(np.float64), rowvar=False))
    jitter = 1e-6 * max(float(np.trace(cov)) / cov.shape[0], 1e-12)
    for _ in range(8):
        try:
            return np.linalg.cholesky(cov + jitter * np.eye(cov.shape[0])).astype(np.float32)
        except np.linalg.LinAlgError:
            jitter *= 10.0
    raise ConfigError("dpfe: the feature covariance is not positive definite; reduce n_components")
