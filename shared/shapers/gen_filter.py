"""``gen-filter``: a frozen VAE and a small generative adversarial filter on its latent (paper 002).

What it is
    1. A VAE (encoder → latent mean μ(x) and log-variance, decoder → x̂) is trained once on the
       public rows, unsupervised, and frozen. Only its encoder travels; the decoder is not needed
       to release or to fit a filter (the paper's classifiers also read the latent).
    2. A small generative filter g reads (μ(x), ε), ε ~ N(0, I), and perturbs the latent:
       z' = μ(x) + Π_b(g(μ(x), ε)), where Π_b projects each row's perturbation onto the distortion
       budget b. It is trained min-max: an adversary classifier h_a learns S from z', a utility
       classifier h_u learns L from z', and the filter minimises CE(h_u) − λ·CE(h_a)
       (paper 002 Eqs. 2–5: the owner maximises the adversary's loss and minimises the utility
       loss subject to D(z', z) ≤ b).
    3. ``transform`` releases z' (numpy forward pass; a fresh ε per row, from OS entropy unless a
       ``noise_seed`` is given for tests and benchmarks — never stored in the bundle, since whoever
       holds it could replay ε).

Distortion budget (``distortion``)
    ``"norm"``: ‖z' − μ‖₂ ≤ b per row. ``"kl"``: KL(N(z', Σ_x) ‖ N(μ, Σ_x)) ≤ b nats per row, with
    Σ_x the frozen encoder's diagonal posterior covariance — i.e. ½ Σ_k (z'_k − μ_k)² / σ_k²(x) ≤ b,
    the form paper 002 §6.2.1 reduces its KL constraint to for Gaussian latents. The paper states
    the budget as a constraint on the distributions; we enforce it *per row by projection*, which
    implies the paper's constraint and can be checked on every released row.

Departure from the paper, on purpose
    The paper's filter (its Eq. 23) reads ε concatenated with a one-hot of the *private label*, so
    releasing needs S at encoding time. ``Shaper.transform`` sees features only, so our filter reads
    (μ(x), ε) instead: a filter that can compute anything from μ(x) can also compute its best guess
    of S, and the part of S that μ(x) does not reveal needs no hiding in z'.

Sites (``fit_site_filter``): a site with its own private label fits its own small filter on the
frozen VAE, locally; see ``docs/methods.md`` for what the coordinator must then trust.

Fitted state (plain arrays, no pickle): ``vae.layer{i}.weight/bias`` (encoder; its last layer
outputs [μ, log σ²]) and ``filter.layer{i}.weight/bias``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.errors import ConfigError
from shared.shapers.base import SHAPERS, Shaper, as_features, as_label_matrix
from shared.shapers.dpfe import (
    ACTIVATIONS,
    build_mlp,
    check_int,
    check_mlp_arrays,
    check_number,
    check_widths,
    mlp_arrays,
    mlp_forward,
)

DISTORTIONS = ("kl", "norm")
#: Bounds on the encoder's log-variance, so a σ_k(x) → 0 cannot turn the KL ball into a point and
#: a σ_k(x) → ∞ cannot turn it into the whole space (and exp() stays finite in float32).
LOGVAR_CLIP = (-12.0, 6.0)


def project_to_budget(
    delta: np.ndarray, budget: float, distortion: str, logvar: np.ndarray | None = None
) -> np.ndarray:
    """Scale each row of ``delta`` back onto the distortion ball (numpy; used by ``transform``).

    ``norm``: ‖δ‖₂ ≤ b. ``kl``: ½‖δ / σ‖₂² ≤ b, σ = exp(½·logvar) (needs ``logvar``).
    Rows already inside are unchanged; rows outside keep their direction.
    """
    if distortion == "kl":
        if logvar is None:
            raise ConfigError("distortion: 'kl' needs the encoder's log-variance")
        sigma = np.exp(0.5 * np.clip(logvar, *LOGVAR_CLIP))
        size = np.sqrt(0.5 * np.sum((delta / sigma) ** 2, axis=1, keepdims=True))
        radius = math.sqrt(budget)  # ½‖δ/σ‖² ≤ b  ⇔  sqrt(½‖δ/σ‖²) ≤ sqrt(b)
    else:
        size = np.linalg.norm(delta, axis=1, keepdims=True)
        radius = budget
    # A hair inside the ball, so the float32 result still satisfies D ≤ b when re-checked.
    scale = np.minimum(1.0, radius * (1.0 - 1e-5) / np.maximum(size, 1e-12))
    return (delta * scale).astype(np.float32, copy=False)


def distortion_of(
    delta: np.ndarray, distortion: str, logvar: np.ndarray | None = None
) -> np.ndarray:
    """Per-row distortion D(z', μ) of a perturbation δ = z' − μ (what the budget bounds)."""
    if distortion == "kl":
        if logvar is None:
            raise ConfigError("distortion: 'kl' needs the encoder's log-variance")
        sigma = np.exp(0.5 * np.clip(logvar, *LOGVAR_CLIP))
        return 0.5 * np.sum((delta / sigma) ** 2, axis=1)
    return np.linalg.norm(delta, axis=1)


def _torch_project(delta: Any, budget: float, distortion: str, logvar: Any) -> Any:
    """The projection of :func:`project_to_budget` in torch (differentiable a.e.)."""
    import torch

    if distortion == "kl":
        sigma = torch.exp(0.5 * logvar.clamp(*LOGVAR_CLIP))
        size = torch.sqrt(0.5 * ((delta / sigma) ** 2).sum(dim=1, keepdim=True) + 1e-24)
        radius = math.sqrt(budget)
    else:
        size = torch.sqrt((delta * delta).sum(dim=1, keepdim=True) + 1e-24)
        radius = budget
    return delta * torch.clamp(radius / size, max=1.0)


@SHAPERS.register("gen-filter")
class GenFilterShaper(Shaper):
    """Frozen VAE + generative adversarial filter on its latent (paper 002).

    Args:
        budget: distortion budget b (> 0): latent units for ``norm``, nats for ``kl``.
        distortion: ``"kl"`` (default, the paper's main constraint) or ``"norm"`` (see the module
            docstring).
        lam: weight of the adversary's cross-entropy against the utility cross-entropy in the
            filter's loss (the toolkit's common privacy weight, so ``--lambda`` sets it).
        latent_dim: width k of the VAE latent, hence of the release.
        vae_hidden: hidden widths of the VAE encoder (the decoder mirrors them).
        vae_kl_weight: weight of KL(q(z|x) ‖ N(0, I)) in the VAE loss (1 = the ELBO).
        vae_steps: optimiser steps of the VAE.
        filter_hidden: hidden widths of the filter g.
        noise_dim: width of the filter's noise input ε (0: a deterministic filter).
        classifier_hidden: hidden widths of the adversary and utility classifiers.
        activation: ``tanh`` or ``relu`` for every hidden layer.
        adversary_steps: adversary (and utility classifier) steps per filter step.
        warmup_steps: classifier steps on the unfiltered latent before the filter moves, so the
            filter starts against an adversary that already reads S.
        max_steps: filter steps.
        lr: Adam learning rate (VAE, filter, classifiers).
        batch_size: rows per step.
        seed: seeds initialisation and batches (CPU fits are deterministic for a seed).
        noise_seed: seeds the filter's noise stream at ``transform``, for tests and benchmarks;
            ``None`` (the default) draws from OS entropy. Never stored in the bundle.
    """

    def __init__(
        self,
        budget: float = 2.0,
        *,
        distortion: str = "kl",
        lam: float = 1.0,
        latent_dim: int = 4,
        vae_hidden: Sequence[int] = (32,),
        vae_kl_weight: float = 1.0,
        vae_steps: int = 1500,
        filter_hidden: Sequence[int] = (16,),
        noise_dim: int = 4,
        classifier_hidden: Sequence[int] = (32,),
        activation: str = "tanh",
        adversary_steps: int = 5,
        warmup_steps: int = 200,
        max_steps: int = 800,
        lr: float = 3e-3,
        batch_size: int = 256,
        seed: int = 0,
        noise_seed: int | None = None,
    ) -> None:
        self.budget = budget
        self.distortion = distortion
        self.lam = lam
        self.latent_dim = latent_dim
        self.vae_hidden = vae_hidden
        self.vae_kl_weight = vae_kl_weight
        self.vae_steps = vae_steps
        self.filter_hidden = filter_hidden
        self.noise_dim = noise_dim
        self.classifier_hidden = classifier_hidden
        self.activation = activation
        self.adversary_steps = adversary_steps
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps
        self.lr = lr
        self.batch_size = batch_size
        self.seed = seed
        self.noise_seed = noise_seed

    # -- validation --------------------------------------------------------------------------
    def _check_params(self) -> None:
        self.budget = check_number("budget", self.budget)
        if self.distortion not in DISTORTIONS:
            raise ConfigError(
                f"distortion: must be one of {', '.join(DISTORTIONS)}, got {self.distortion!r}"
            )
        self.lam = check_number("lam", self.lam, allow_zero=True)
        self.latent_dim = check_int("latent_dim", self.latent_dim, 1)
        self.vae_hidden = check_widths("vae_hidden", self.vae_hidden)
        self.vae_kl_weight = check_number("vae_kl_weight", self.vae_kl_weight, allow_zero=True)
        self.vae_steps = check_int("vae_steps", self.vae_steps, 1)
        self.filter_hidden = check_widths("filter_hidden", self.filter_hidden)
        self.noise_dim = check_int("noise_dim", self.noise_dim, 0)
        self.classifier_hidden = check_widths("classifier_hidden", self.classifier_hidden)
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"activation: must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}"
            )
        self.adversary_steps = check_int("adversary_steps", self.adversary_steps, 1)
        self.warmup_steps = check_int("warmup_steps", self.warmup_steps, 0)
        self.max_steps = check_int("max_steps", self.max_steps, 1)
        self.lr = check_number("lr", self.lr)
        self.batch_size = check_int("batch_size", self.batch_size, 2)
        self.seed = check_int("seed", self.seed, 0)
        if self.noise_seed is not None:
            self.noise_seed = check_int("noise_seed", self.noise_seed, 0)

    # -- fitting -----------------------------------------------------------------------------
    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None:
        self._check_params()
        if y_public is None or y_sensitive is None:
            raise ConfigError("y_public, y_sensitive: gen-filter needs both labels to fit")
        n = X.shape[0]
        y = as_label_matrix(y_public, n, "y_public")
        if y.shape[1] != 1:
            raise ConfigError(f"y_public: must be one label column, got {y.shape[1]}")
        s = as_label_matrix(y_sensitive, n, "y_sensitive")
        start = time.perf_counter()
        with _TorchSession(self.seed):
            vae, vae_history = _train_vae(X, self)
        self.vae_ = vae
        self.vae_history_ = vae_history
        self._fit_filter(X, s, y[:, 0], start)

    def _fit_filter(
        self, X: np.ndarray, s: np.ndarray, y: np.ndarray | None, start: float
    ) -> None:
        """Train the filter on the frozen ``self.vae_`` (shared by ``fit`` and site filters)."""
        mu, logvar = self._encode(X)
        with _TorchSession(self.seed):
            arrays, history = _train_filter(mu, logvar, s, y, self)
        self.filter_ = arrays
        self.filter_history_ = history
        self.fit_seconds_ = time.perf_counter() - start
        self.reset_noise()

    # -- transform ---------------------------------------------------------------------------
    def _encode(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Frozen VAE encoder: (μ(x), log σ²(x)), float32."""
        out = mlp_forward(self.vae_, "vae", len(self.vae_hidden) + 1, self.activation, X)
        k = self.latent_dim
        return np.ascontiguousarray(out[:, :k]), np.ascontiguousarray(out[:, k:])

    def latent(self, X: Any) -> np.ndarray:
        """The unfiltered latent mean μ(x): what the release would be without a filter."""
        self.check_fitted()
        X = as_features(X)
        if X.shape[1] != self.n_features_in_:
            raise ConfigError(
                f"X: has {X.shape[1]} features, but GenFilterShaper was fitted with "
                f"{self.n_features_in_}"
            )
        return self._encode(X)[0]

    def reset_noise(self) -> None:
        """Start a new noise stream for ε: at ``noise_seed`` if set, else from OS entropy."""
        self._rng = np.random.default_rng(self.noise_seed)

    def perturbation(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(μ, projected δ, log σ²) for validated rows; draws ε from the noise stream."""
        mu, logvar = self._encode(X)
        if not hasattr(self, "_rng"):
            self.reset_noise()
        # One fresh ε per row from one stream: chunked encoding equals encoding at once.
        eps = self._rng.standard_normal((X.shape[0], self.noise_dim), dtype=np.float32)
        inputs = np.concatenate([mu, eps], axis=1)
        delta = mlp_forward(self.filter_, "filter", len(self.filter_hidden) + 1,
                            self.activation, inputs)
        delta = project_to_budget(delta, self.budget, self.distortion, logvar)
        return mu, delta, logvar

    def _transform(self, X: np.ndarray) -> np.ndarray:
        mu, delta, _ = self.perturbation(X)
        return mu + delta

    def _n_components(self) -> int:
        return int(self.latent_dim)

    # -- bundle round trip -------------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.check_fitted()
        config = {
            "architecture": {
                "type": "gen-filter",
                "n_features_in": int(self.n_features_in_),
                "latent_dim": int(self.latent_dim),
                "vae_hidden": list(self.vae_hidden),
                "filter_hidden": list(self.filter_hidden),
                "noise_dim": int(self.noise_dim),
                "activation": self.activation,
            },
            "params": {
                "budget": float(self.budget),
                "distortion": self.distortion,
                "lam": float(self.lam),
                "seed": int(self.seed),
                # noise_seed deliberately absent: a bundle must never let anyone replay ε.
            },
        }
        tensors = {k: np.array(v, dtype=np.float32) for k, v in self.vae_.items()}
        tensors.update({k: np.array(v, dtype=np.float32) for k, v in self.filter_.items()})
        return config, tensors

    @classmethod
    def from_state(cls, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> GenFilterShaper:
        try:
            arch = config["architecture"]
            params = config.get("params", {})
            shaper = cls(
                budget=params["budget"],
                distortion=params["distortion"],
                lam=params.get("lam", 1.0),
                latent_dim=arch["latent_dim"],
                vae_hidden=arch["vae_hidden"],
                filter_hidden=arch["filter_hidden"],
                noise_dim=arch["noise_dim"],
                activation=arch["activation"],
                seed=params.get("seed", 0),
            )
            n_in = check_int("n_features_in", arch["n_features_in"], 1)
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"gen-filter state: malformed architecture/params ({exc!r})"
            ) from None
        shaper._check_params()
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
        k = shaper.latent_dim
        check_mlp_arrays(arrays, "vae", [n_in, *shaper.vae_hidden, 2 * k])
        check_mlp_arrays(arrays, "filter", [k + shaper.noise_dim, *shaper.filter_hidden, k])
        if not all(np.isfinite(a).all() for a in arrays.values()):
            raise ConfigError("gen-filter state: arrays hold NaN or inf")
        shaper.vae_ = {key: v for key, v in arrays.items() if key.startswith("vae.")}
        shaper.filter_ = {key: v for key, v in arrays.items() if key.startswith("filter.")}
        shaper.n_features_in_ = n_in
        shaper.reset_noise()
        return shaper

    def frozen_vae_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The frozen encoder alone, (config, arrays): what a site needs to fit its own filter."""
        config, tensors = self.get_state()
        return config, {k: v for k, v in tensors.items() if k.startswith("vae.")}

    def training_metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if hasattr(self, "vae_history_"):
            out["vae"] = self.vae_history_
        if hasattr(self, "filter_history_"):
            out["filter"] = self.filter_history_
        if hasattr(self, "fit_seconds_"):
            out["seconds"] = self.fit_seconds_
        return out


def fit_site_filter(
    frozen_state: GenFilterShaper | tuple[dict[str, Any], dict[str, np.ndarray]],
    X_site: Any,
    y_private: Any,
    y_utility: Any = None,
    *,
    budget: float | None = None,
    distortion: str | None = None,
    lam: float | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    noise_seed: int | None = None,
) -> GenFilterShaper:
    """A site's own filter for its own private label, on the coordinator's frozen VAE.

    The VAE encoder is reused exactly (never retrained); only a new filter, adversary and
    (optional) utility classifier are trained, on the site's rows, locally. The result is a
    complete :class:`GenFilterShaper` (same VAE arrays, new filter) that encodes the site's
    rows and can be saved in a bundle the *site* signs.

    Args:
        frozen_state: a fitted :class:`GenFilterShaper` (e.g. ``open_bundle(bundle).shaper`` of a
            verified coordinator bundle) or its ``get_state()`` / ``frozen_vae_state()`` output.
        X_site: the site's feature matrix, preprocessed by the bundle's input schema.
        y_private: the site's private label(s) to hide, (n,) or (n, j).
        y_utility: a label to keep (optional). Without one the filter only fights the adversary
            and the budget alone bounds how much else changes.
        budget, distortion, lam, max_steps: override the coordinator's values (default: keep).
        seed: seeds the site's training (deterministic for a seed).
        noise_seed: seeds the release noise ε, for tests only; ``None`` draws OS entropy.
    """
    if isinstance(frozen_state, GenFilterShaper):
        frozen_state.check_fitted()
        config, tensors = frozen_state.frozen_vae_state()
    else:
        try:
            config, tensors = frozen_state
        except (TypeError, ValueError):
            raise ConfigError(
                "frozen_state: must be a fitted GenFilterShaper or its (config, tensors) state"
            ) from None
    try:
        arch = config["architecture"]
        params = dict(config.get("params", {}))
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"frozen_state: malformed config ({exc!r})") from None
    if arch.get("type") != "gen-filter":
        raise ConfigError(
            f"frozen_state: must come from a gen-filter shaper, got type {arch.get('type')!r}"
        )
    shaper = GenFilterShaper(
        budget=params.get("budget", 2.0) if budget is None else budget,
        distortion=params.get("distortion", "kl") if distortion is None else distortion,
        lam=params.get("lam", 1.0) if lam is None else lam,
        latent_dim=arch.get("latent_dim"),
        vae_hidden=arch.get("vae_hidden"),
        filter_hidden=arch.get("filter_hidden"),
        noise_dim=arch.get("noise_dim"),
        activation=arch.get("activation"),
        seed=seed,
        noise_seed=noise_seed,
    )
    if max_steps is not None:
        shaper.max_steps = max_steps
    shaper._check_params()
    n_in = check_int("n_features_in", arch.get("n_features_in"), 1)
    vae = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items() if k.startswith("vae.")}
    check_mlp_arrays(vae, "vae", [n_in, *shaper.vae_hidden, 2 * shaper.latent_dim])
    X = as_features(X_site, "X_site")
    if X.shape[1] != n_in:
        raise ConfigError(f"X_site: has {X.shape[1]} features, the frozen VAE takes {n_in}")
    n = X.shape[0]
    s = as_label_matrix(y_private, n, "y_private")
    y = None
    if y_utility is not None:
        y_mat = as_label_matrix(y_utility, n, "y_utility")
        if y_mat.shape[1] != 1:
            raise ConfigError(f"y_utility: must be one label column, got {y_mat.shape[1]}")
        y = y_mat[:, 0]
    shaper.vae_ = vae
    shaper.vae_history_ = {"frozen": True}
    shaper.n_features_in_ = n_in
    shaper._fit_filter(X, s, y, time.perf_counter())
    return shaper


# -- training (torch only from here on) -------------------------------------------------------
class _TorchSession:
    """Seed torch, run on one thread, and restore both afterwards (the host is shared)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        import torch

        self._state = torch.random.get_rng_state()
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)
        torch.manual_seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.random.set_rng_state(self._state)
        torch.set_num_threads(self._threads)


def _record_every(steps: int) -> int:
    return max(steps // 20, 1)


def _train_vae(X: np.ndarray, cfg: GenFilterShaper) -> tuple[dict[str, np.ndarray], dict]:
    """Stage 1: the VAE (Gaussian reconstruction of standardised features + KL to N(0, I))."""
    import torch

    n, k = X.shape[0], cfg.latent_dim
    encoder = build_mlp(X.shape[1], cfg.vae_hidden, 2 * k, cfg.activation)
    decoder = build_mlp(k, tuple(reversed(cfg.vae_hidden)), X.shape[1], cfg.activation)
    opt = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    Xt = torch.from_numpy(X)
    batch = min(cfg.batch_size, n)
    history: dict[str, list[float]] = {"step": [], "reconstruction": [], "kl": []}
    every = _record_every(cfg.vae_steps)
    for step in range(1, cfg.vae_steps + 1):
        xb = Xt[torch.randint(n, (batch,), generator=gen)]
        out = encoder(xb)
        mu, logvar = out[:, :k], out[:, k:].clamp(*LOGVAR_CLIP)
        z = mu + torch.exp(0.5 * logvar) * torch.randn(mu.shape, generator=gen)
        recon = 0.5 * ((decoder(z) - xb) ** 2).sum(dim=1).mean()
        kl = 0.5 * (mu * mu + logvar.exp() - 1.0 - logvar).sum(dim=1).mean()
        loss = recon + cfg.vae_kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % every == 0 or step == cfg.vae_steps:
            history["step"].append(step)
            history["reconstruction"].append(float(recon.detach()))
            history["kl"].append(float(kl.detach()))
    return mlp_arrays(encoder, "vae"), history


def _train_filter(
    mu: np.ndarray,
    logvar: np.ndarray,
    s: np.ndarray,
    y: np.ndarray | None,
    cfg: GenFilterShaper,
) -> tuple[dict[str, np.ndarray], dict]:
    """Stage 2: the min-max game on the frozen latent (paper 002 Eqs. 2–5)."""
    import torch
    from torch import nn

    n, k = mu.shape
    ce = nn.functional.cross_entropy
    g = build_mlp(k + cfg.noise_dim, cfg.filter_hidden, k, cfg.activation)
    # Start as the identity release (δ = 0), so the budget is spent only where the game asks.
    last = [m for m in g if isinstance(m, nn.Linear)][-1]
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    s_classes = [int(s[:, j].max()) + 1 for j in range(s.shape[1])]
    adversaries = [build_mlp(k, cfg.classifier_hidden, c, cfg.activation) for c in s_classes]
    utility = (
        build_mlp(k, cfg.classifier_hidden, int(y.max()) + 1, cfg.activation)
        if y is not None else None
    )
    adv_params = [p for a in adversaries for p in a.parameters()]
    adv_opt = torch.optim.Adam(adv_params, lr=cfg.lr)
    gen_params = [*g.parameters(), *(utility.parameters() if utility is not None else [])]
    gen_opt = torch.optim.Adam(gen_params, lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)

    mu_t, lv_t = torch.from_numpy(mu), torch.from_numpy(logvar)
    s_t = torch.from_numpy(s)
    y_t = torch.from_numpy(y) if y is not None else None
    batch = min(cfg.batch_size, n)

    def release(idx: Any) -> Any:
        eps = torch.randn((idx.shape[0], cfg.noise_dim), generator=gen)
        delta = g(torch.cat([mu_t[idx], eps], dim=1))
        return mu_t[idx] + _torch_project(delta, cfg.budget, cfg.distortion, lv_t[idx])

    def adversary_loss(z: Any, idx: Any) -> Any:
        return sum(ce(a(z), s_t[idx, j]) for j, a in enumerate(adversaries))

    history: dict[str, list[float]] = {
        "step": [], "adversary_ce": [], "utility_ce": [], "distortion_mean": []
    }
    for _ in range(cfg.warmup_steps):
        idx = torch.randint(n, (batch,), generator=gen)
        loss = adversary_loss(mu_t[idx], idx)
        adv_opt.zero_grad(set_to_none=True)
        loss.backward()
        adv_opt.step()
    every = _record_every(cfg.max_steps)
    for step in range(1, cfg.max_steps + 1):
        for _ in range(cfg.adversary_steps):
            idx = torch.randint(n, (batch,), generator=gen)
            with torch.no_grad():
                z = release(idx)
            loss = adversary_loss(z, idx)
            adv_opt.zero_grad(set_to_none=True)
            loss.backward()
            adv_opt.step()
        idx = torch.randint(n, (batch,), generator=gen)
        z = release(idx)
        for p in adv_params:
            p.requires_grad_(False)
        adv = adversary_loss(z, idx)
        util = ce(utility(z), y_t[idx]) if utility is not None else torch.zeros(())
        loss = util - cfg.lam * adv
        gen_opt.zero_grad(set_to_none=True)
        loss.backward()
        gen_opt.step()
        for p in adv_params:
            p.requires_grad_(True)
        if step % every == 0 or step == cfg.max_steps:
            with torch.no_grad():
                dist = distortion_of((z - mu_t[idx]).numpy(), cfg.distortion,
                                     logvar[idx.numpy()])
            history["step"].append(step)
            history["adversary_ce"].append(float(adv.detach()))
            history["utility_ce"].append(float(util.detach()))
            history["distortion_mean"].append(float(np.mean(dist)))
    return mlp_arrays(g, "filter"), history
