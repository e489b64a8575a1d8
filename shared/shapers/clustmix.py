"""``clustmix``: paper 004's differentially private synthetic release (3A: approximate, adapt,
anonymize) behind the shaper interface.

What ClustMix is (paper 004, Algorithm 2)
----------------------------------------
1. **Approximate** — per public class, a size-constrained clustering: an isotropic Gaussian
   mixture whose hard assignment maximises Eq. 3 with a step-function size prior, i.e. every
   cluster holds at least ``l_min`` rows (solved exactly as a transportation LP, which is totally
   unimodular, so the LP optimum is an integral assignment; classes too large for the LP on two
   cores use a greedy size repair instead). If the LP fails or runs past ``assign_timeout_s`` the
   class falls back to constrained k-means (Lloyd steps with the greedy size repair), as the
   paper's implementation does "at timeout or if no solution was found".
2. **Adapt** — the cluster centroids become the support set of kernel inducing points (KIP)
   under a fully-connected ReLU neural tangent kernel (:func:`ntk_relu`, written in torch), moved
   by Adam on Eq. 5:
   ``α · ‖X_s − X̃_s‖²_F / ‖X̃_s‖²_F + (1 − α) · ½ ‖y_t − K_ts (K_ss + λI)⁻¹ y_s‖²``.
   (The paper's prose says α = 0 keeps the GMM centroids; its Eq. 5 says α = 1 does. We follow
   the equation: α weights fidelity to the centroids.)
3. **Anonymize** — rows are grouped around the adapted centroids, each group of ``l`` rows is
   clipped to [0, 1]^D, averaged, and released with N(0, σ_l² I_D) added, σ_l solved from Eq. 7
   for the target (ε, δ) (:func:`shared.gdp.mixing_sigma`). Every group meets (ε, δ) by itself
   whatever its size (small groups just get more noise); ``l_min`` only caps the noise at
   ``sigma_max``.

How it fits the shaper interface (the design choice)
----------------------------------------------------
A shaper is fitted on the coordinator's *public* table and applied at each site by
``transform(X)``; the site releases ``z_0..z_{k-1}`` plus the label, one row per input row. So:

* ``fit`` runs steps 1-2 on public data only. Nothing private enters the centroids, so no privacy
  budget is spent on them (the paper runs them on the private data and has to account for it).
* ``transform(X)`` at a site runs step 3 on the rows it is given, which are the private rows the
  (ε, δ) protects. Each row is assigned to its nearest adapted centroid (the site does not pass
  labels to ``transform``, so grouping is across classes, unlike the paper's per-class mixing);
  groups smaller than ``l_min`` are dissolved into their rows' next-nearest surviving centroid
  (the largest-first rule of Algorithm 2 line 14). **Each input row is then replaced by its
  group's noisy mean**: the output has the input's width and units (``n_components ==
  n_features_in``; the noisy mean is mapped back from [0, 1] to the standardised feature space),
  so the release format, the encoder, and the attacker suite work unchanged, and a model trained
  on the release can be evaluated on real rows (paper 004's protocol).
* The release holds ``n`` rows but only one distinct feature vector per group; it is exactly the
  paper's synthetic set (one noisy centroid per group) with every member's label attached.

What (ε, δ) covers, precisely
-----------------------------
* The reported (ε, δ) (``epsilon_``, ``delta_``, ``training_metrics()["privacy"]``) is the paper's
  Eq. 7 accounting for **one** ``transform`` call: each group's noisy mean is μ-GDP with
  μ = √(C·D)/(l·σ_l), and groups are disjoint (parallel composition). C defaults to the number of
  public classes as in the paper — conservative here, since our centroids do not depend on site
  rows (``accounting_classes=1`` would follow the same argument).
* Like the paper's, the guarantee is **conditional on the partition**: group membership (and
  hence the group sizes, visible as repeated rows) depends on the data and is not privatised, and
  the label column is released exactly, as it is for every shaper. It is the paper's guarantee,
  not an end-to-end DP proof of the row-aligned release.
* Calling ``transform`` again on the same rows is a second release: the budgets compose (μ adds
  in quadrature, :func:`shared.gdp.compose_mu`). Encoding a table in chunks is fine (chunks are
  disjoint), but small chunks mean small groups and more noise.
* The noise comes from the operating system's entropy unless ``noise_seed`` is set. A noise seed
  is for tests and benchmarks only: it is never written to the bundle (whoever holds a seed can
  subtract the noise), and a shaper rebuilt from a bundle always draws fresh entropy.
* ClustMix ignores ``y_sensitive``: differential privacy protects each *record*, not an
  attribute. Population-level inference of S from the released features is what the bake-off's
  attacker suite measures.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from shared import gdp
from shared.errors import ConfigError
from shared.shapers.base import SHAPERS, Shaper, as_label_matrix

__all__ = ["ClustMixShaper", "constrained_assign", "gmm_constrained", "kip_adapt", "ntk_relu"]


# ---------------------------------------------------------------------- size-constrained clustering
def _greedy_repair(cost: np.ndarray, min_size: int) -> np.ndarray:
    """A feasible assignment (every cluster >= min_size rows) close to the unconstrained argmin.

    Why greedy: it always succeeds when ``n >= K * min_size`` and costs O(n K log n), so it is
    the fallback when the exact LP is too slow. Undersized clusters, smallest first, take the
    rows whose move costs least from clusters that can spare them.
    """
    n, k = cost.shape
    assign = np.argmin(cost, axis=1)
    sizes = np.bincount(assign, minlength=k)
    for _ in range(k):
        short = np.flatnonzero(sizes < min_size)
        if short.size == 0:
            break
        target = int(short[np.argmin(sizes[short])])
        need = int(min_size - sizes[target])
        donors = sizes[assign] > min_size
        candidates = np.flatnonzero(donors & (assign != target))
        extra = cost[candidates, target] - cost[candidates, assign[candidates]]
        order = candidates[np.argsort(extra, kind="stable")]
        taken: list[int] = []
        for row in order:
            if len(taken) == need:
                break
            source = assign[row]
            if sizes[source] > min_size:
                sizes[source] -= 1
                taken.append(int(row))
        assign[taken] = target
        sizes[target] += len(taken)
    return assign


#: Largest LP (rows × clusters) solved exactly; ~0.4 s at 2·10⁴ cells on a busy 2-core machine,
#: growing faster than linearly, so larger problems take the greedy repair.
LP_MAX_CELLS = 60_000


def constrained_assign(
    cost: np.ndarray,
    min_size: int,
    *,
    time_limit: float | None = None,
    max_cells: int = LP_MAX_CELLS,
) -> tuple[np.ndarray, str]:
    """Assign n rows to K clusters minimising total cost with every cluster >= ``min_size`` rows.

    The exact solution is a transportation LP (HiGHS); its constraint matrix is totally
    unimodular, so the optimum is integral. When the unconstrained argmin is already feasible no
    LP is solved. Returns (assignment, method) with method ``argmin``, ``lp``, ``greedy`` (the
    problem has more than ``max_cells`` cells: the greedy repair, not exact) or ``lp-failed``
    (the LP failed or ran past ``time_limit`` seconds; the greedy repair's answer is returned).
    """
    import scipy.sparse as sp
    from scipy.optimize import linprog

    n, k = cost.shape
    if k * min_size > n:
        raise ConfigError(f"cannot make {k} clusters of >= {min_size} rows from {n} rows")
    assign = np.argmin(cost, axis=1)
    if np.bincount(assign, minlength=k).min() >= min_size:
        return assign, "argmin"
    if n * k > max_cells:
        return _greedy_repair(cost, min_size), "greedy"
    cols = np.arange(n * k)
    a_eq = sp.csr_matrix((np.ones(n * k), (np.repeat(np.arange(n), k), cols)), shape=(n, n * k))
    a_ub = sp.csr_matrix((-np.ones(n * k), (np.tile(np.arange(k), n), cols)), shape=(k, n * k))
    options = {} if time_limit is None else {"time_limit": float(time_limit)}
    shifted = cost - cost.min(axis=1, keepdims=True)  # same optimum, better conditioned
    try:
        res = linprog(
            shifted.ravel(),
            A_ub=a_ub,
            b_ub=-float(min_size) * np.ones(k),
            A_eq=a_eq,
            b_eq=np.ones(n),
            bounds=(0, 1),
            method="highs",
            options=options,
        )
    except (ValueError, MemoryError):  # pragma: no cover - HiGHS refusing the problem
        res = None
    if res is not None and res.status == 0 and res.x is not None:
        lp_assign = np.argmax(res.x.reshape(n, k), axis=1)
        if np.bincount(lp_assign, minlength=k).min() >= min_size:
            return lp_assign, "lp"
    return _greedy_repair(cost, min_size), "lp-failed"


def _spherical_cost(X: np.ndarray, means: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """−log N(x | m_k, v_k I) for every row and cluster (the Eq. 3 data term)."""
    d = X.shape[1]
    sq = np.sum(X**2, axis=1)[:, None] - 2.0 * X @ means.T + np.sum(means**2, axis=1)[None, :]
    sq = np.maximum(sq, 0.0)
    return 0.5 * d * np.log(2.0 * np.pi * variances)[None, :] + sq / (2.0 * variances[None, :])


def _sq_dist(X: np.ndarray, means: np.ndarray) -> np.ndarray:
    sq = np.sum(X**2, axis=1)[:, None] - 2.0 * X @ means.T + np.sum(means**2, axis=1)[None, :]
    return np.maximum(sq, 0.0)


def gmm_constrained(
    X: np.ndarray,
    n_clusters: int,
    min_size: int,
    *,
    max_iter: int = 5,
    time_limit: float = 30.0,
    seed: int = 0,
) -> tuple[np.ndarray, dict[str, Any]]:
    """``GMMConstrained(X, n, l_min)`` of paper 004: n clusters, each with >= ``min_size`` rows.

    Hard (classification) EM on an isotropic Gaussian mixture: the E-step is the size-constrained
    MAP assignment of Eq. 3 (step-function size prior, :func:`constrained_assign`), the M-step
    re-estimates each cluster's mean and variance. Initialised by k-means++. Problems larger than
    :data:`LP_MAX_CELLS` use the greedy repair for the E-step (method ``gmm-greedy``: feasible,
    not exactly optimal). If an LP times out or fails, or a variance collapses, the remaining
    iterations run as constrained k-means (squared distance cost, greedy repair; method
    ``kmeans-fallback``), as the paper's implementation falls back to constrained KMeans.

    Returns (assignment (n,), info) with info = {method, iterations, sizes}.
    """
    from sklearn.cluster import KMeans

    n = X.shape[0]
    if n_clusters < 1 or min_size < 1 or n_clusters * min_size > n:
        raise ConfigError(f"cannot make {n_clusters} clusters of >= {min_size} rows from {n} rows")
    if n_clusters == 1:
        return np.zeros(n, dtype=np.int64), {"method": "single", "iterations": 0, "sizes": [n]}
    X64 = X.astype(np.float64)
    km = KMeans(n_clusters=n_clusters, n_init=1, random_state=seed, max_iter=50).fit(X64)
    means = km.cluster_centers_.copy()
    d = X.shape[1]
    variances = np.full(n_clusters, max(float(np.mean(np.var(X64, axis=0))), 1e-6))
    method = "gmm"
    assign = np.full(n, -1, dtype=np.int64)
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007  (reported after the loop)
        if method == "gmm":
            cost = _spherical_cost(X64, means, variances)
            new, how = constrained_assign(cost, min_size, time_limit=time_limit)
            if how == "lp-failed":  # the exact E-step failed: the paper's constrained-KMeans path
                method = "kmeans-fallback"
                new = _greedy_repair(_sq_dist(X64, means), min_size)
            elif how == "greedy":
                method = "gmm-greedy"
        elif method == "gmm-greedy":
            new = _greedy_repair(_spherical_cost(X64, means, variances), min_size)
        else:
            new = _greedy_repair(_sq_dist(X64, means), min_size)
        if np.array_equal(new, assign):
            break
        assign = new
        for c in range(n_clusters):
            members = X64[assign == c]
            means[c] = members.mean(axis=0)
            variances[c] = float(np.mean(np.sum((members - means[c]) ** 2, axis=1))) / d
        if method.startswith("gmm") and variances.min() < 1e-8:
            method = "kmeans-fallback"  # a collapsed component: the likelihood is degenerate
        variances = np.maximum(variances, 1e-8)
    sizes = np.bincount(assign, minlength=n_clusters)
    return assign, {"method": method, "iterations": iterations, "sizes": sizes.tolist()}


# ---------------------------------------------------------------------- neural tangent kernel + KIP
def ntk_relu(
    x1: Any,
    x2: Any,
    *,
    depth: int = 2,
    weight_std: float = math.sqrt(2.0),
    bias_std: float = 0.1,
) -> Any:
    """Infinite-width NTK of a fully-connected ReLU network (NTK parameterisation), in torch.

    ``depth`` hidden Dense+ReLU layers and a Dense read-out, the recursion of Jacot et al. (2018)
    as implemented by neural_tangents' ``stax.Dense`` / ``stax.Relu`` (paper 004 uses that library
    with a fully-connected architecture; we reimplement it so nothing outside torch is needed):

        Σ¹ = w² x·x'/d + b²,  Θ¹ = Σ¹
        per hidden layer: ρ = Σ/√(Σ_xx Σ_x'x'), θ = arccos ρ,
            E[φ φ'] = √(Σ_xx Σ_x'x') (sin θ + (π − θ) cos θ) / 2π,  E[φ̇ φ̇'] = (π − θ) / 2π
            Σ ← w² E[φ φ'] + b²,   Θ ← w² E[φ̇ φ̇'] Θ + Σ

    Differentiable in both arguments (KIP back-propagates into the support set).
    """
    import torch

    w2, b2 = float(weight_std) ** 2, float(bias_std) ** 2
    d = x1.shape[1]
    cross = w2 * (x1 @ x2.T) / d + b2
    diag1 = w2 * torch.sum(x1 * x1, dim=1) / d + b2
    diag2 = w2 * torch.sum(x2 * x2, dim=1) / d + b2
    theta = cross
    for _ in range(depth):
        norm = torch.sqrt(torch.clamp(diag1[:, None] * diag2[None, :], min=1e-30))
        rho = torch.clamp(cross / norm, -1.0 + 1e-7, 1.0 - 1e-7)
        angle = torch.arccos(rho)
        e_phi = norm * (torch.sin(angle) + (math.pi - angle) * rho) / (2.0 * math.pi)
        e_dphi = (math.pi - angle) / (2.0 * math.pi)
        cross = w2 * e_phi + b2
        theta = w2 * e_dphi * theta + cross
        diag1 = w2 * diag1 / 2.0 + b2  # E[relu(u)²] = Σ_xx / 2
        diag2 = w2 * diag2 / 2.0 + b2
    return theta


def kip_adapt(
    support: np.ndarray,
    support_labels: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    alpha: float = 0.5,
    steps: int = 200,
    lr: float = 0.01,
    batch_size: int = 512,
    ridge: float = 1e-3,
    depth: int = 2,
    seed: int = 0,
) -> tuple[np.ndarray, dict[str, list[float]]]:
    """Move the support points (cluster centroids) by Adam on paper 004's Eq. 5 (α-weighted KIP).

    Labels are one-hot minus 1/C (zero-mean targets for kernel ridge regression); the support
    labels stay fixed (each centroid keeps its class). λ is ``ridge`` × mean(diag K_ss), so the
    regulariser follows the kernel's scale; the KRR term is averaged over the target batch.
    Returns (adapted support (K, D) float64, curves {step, loss, fidelity, krr}).
    """
    import torch

    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must lie in [0, 1]; got {alpha}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # kernels of a few hundred entries: threads only add contention
    try:
        return _kip_loop(
            support,
            support_labels,
            X,
            y,
            n_classes,
            alpha=alpha,
            steps=steps,
            lr=lr,
            batch_size=batch_size,
            ridge=ridge,
            depth=depth,
            seed=seed,
        )
    finally:
        torch.set_num_threads(threads)


def _kip_loop(
    support: np.ndarray,
    support_labels: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    alpha: float,
    steps: int,
    lr: float,
    batch_size: int,
    ridge: float,
    depth: int,
    seed: int,
) -> tuple[np.ndarray, dict[str, list[float]]]:
    import torch

    init = torch.as_tensor(support, dtype=torch.float64)
    xs = init.clone().requires_grad_(True)
    eye = torch.eye(n_classes, dtype=torch.float64)
    ys = eye[torch.as_tensor(support_labels)] - 1.0 / n_classes
    xt_all = torch.as_tensor(X, dtype=torch.float64)
    yt_all = eye[torch.as_tensor(y)] - 1.0 / n_classes
    denom = torch.clamp(torch.sum(init**2), min=1e-12)
    gen = torch.Generator().manual_seed(seed)
    # Adam by hand (β = 0.9, 0.999): torch.optim's first use imports torch._dynamo, seconds of
    # start-up that a sub-second KIP run on a shared two-core machine should not pay.
    m1 = torch.zeros_like(xs)
    m2 = torch.zeros_like(xs)
    curves: dict[str, list[float]] = {"step": [], "loss": [], "fidelity": [], "krr": []}
    k_eye = torch.eye(xs.shape[0], dtype=torch.float64)
    record_every = max(1, steps // 20)
    for step in range(steps + 1):
        idx = torch.randint(xt_all.shape[0], (min(batch_size, xt_all.shape[0]),), generator=gen)
        xt, yt = xt_all[idx], yt_all[idx]
        k_ss = ntk_relu(xs, xs, depth=depth)
        k_ts = ntk_relu(xt, xs, depth=depth)
        reg = ridge * torch.mean(torch.diagonal(k_ss))
        coef = torch.linalg.solve(k_ss + reg * k_eye, ys)
        krr = 0.5 * torch.mean(torch.sum((yt - k_ts @ coef) ** 2, dim=1))
        fidelity = torch.sum((xs - init) ** 2) / denom
        loss = alpha * fidelity + (1.0 - alpha) * krr
        if step % record_every == 0 or step == steps:
            curves["step"].append(step)
            curves["loss"].append(float(loss.detach()))
            curves["fidelity"].append(float(fidelity.detach()))
            curves["krr"].append(float(krr.detach()))
        if step == steps:
            break
        (grad,) = torch.autograd.grad(loss, xs)
        with torch.no_grad():
            m1.mul_(0.9).add_(grad, alpha=0.1)
            m2.mul_(0.999).addcmul_(grad, grad, value=0.001)
            m1_hat = m1 / (1.0 - 0.9 ** (step + 1))
            m2_hat = m2 / (1.0 - 0.999 ** (step + 1))
            xs.sub_(lr * m1_hat / (torch.sqrt(m2_hat) + 1e-8))
    return xs.detach().numpy().copy(), curves


# ---------------------------------------------------------------------- the shaper
@SHAPERS.register("clustmix")
class ClustMixShaper(Shaper):
    """Paper 004's ClustMix: public centroids (size-constrained GMM + KIP), Gaussian mixing at
    the site with σ from Eq. 7 for a target (ε, δ). See the module docstring for what a site
    releases and what the reported (ε, δ) covers.

    Args:
        epsilon, delta: the target (ε, δ) of one release (paper 004 evaluates ε = 1, δ = 1/N;
            the default δ = 1e-5 is the stricter, conventional choice for tables of 10⁴-10⁵ rows).
        sigma_max: largest noise standard deviation (in [0, 1]-clipped units) a group may get;
            sets l_min, the minimum mixture size (Algorithm 2, "Initialize").
        alpha: Eq. 5 weight of fidelity to the GMM centroids against the KIP loss.
        accounting_classes: C in Eq. 7; ``None`` = number of public classes (the paper).
        clip_quantile: features are clipped to public quantiles [q, 1 − q] before mixing (the
            sensitivity bound needs a fixed, data-independent range; quantiles keep one outlier
            from stretching the range and with it the noise). 0 means public min/max.
        kip_steps, kip_lr, kip_batch, ridge, ntk_depth: KIP optimisation and kernel.
        max_em_iter, assign_timeout_s: size-constrained GMM iterations and LP time limit.
        seed: seeds clustering and KIP (public-data steps; deterministic for a seed).
        noise_seed: seeds the release noise. Tests/benchmarks only — never stored in a bundle.
    """

    #: A row's release depends on the rows released with it (its group's noisy mean).
    row_independent = False

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        sigma_max: float = 0.1,
        alpha: float = 0.5,
        accounting_classes: int | None = None,
        clip_quantile: float = 0.005,
        kip_steps: int = 200,
        kip_lr: float = 0.01,
        kip_batch: int = 512,
        ridge: float = 1e-3,
        ntk_depth: int = 2,
        max_em_iter: int = 5,
        assign_timeout_s: float = 30.0,
        seed: int = 0,
        noise_seed: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.sigma_max = sigma_max
        self.alpha = alpha
        self.accounting_classes = accounting_classes
        self.clip_quantile = clip_quantile
        self.kip_steps = kip_steps
        self.kip_lr = kip_lr
        self.kip_batch = kip_batch
        self.ridge = ridge
        self.ntk_depth = ntk_depth
        self.max_em_iter = max_em_iter
        self.assign_timeout_s = assign_timeout_s
        self.seed = seed
        self.noise_seed = noise_seed

    # -- validation --------------------------------------------------------------------------
    def _check_params(self) -> None:
        gdp.mu_for_epsilon_delta(self.epsilon, self.delta)  # validates ε >= 0, 0 < δ < 1
        if float(self.epsilon) <= 0:
            raise ConfigError(f"epsilon must be > 0 for a release; got {self.epsilon}")
        if not (math.isfinite(float(self.sigma_max)) and float(self.sigma_max) > 0):
            raise ConfigError(f"sigma_max must be a finite number > 0; got {self.sigma_max}")
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise ConfigError(f"alpha must lie in [0, 1]; got {self.alpha}")
        if not 0.0 <= float(self.clip_quantile) < 0.5:
            raise ConfigError(f"clip_quantile must lie in [0, 0.5); got {self.clip_quantile}")
        if self.accounting_classes is not None and int(self.accounting_classes) < 1:
            raise ConfigError(
                f"accounting_classes must be >= 1 or None; got {self.accounting_classes}"
            )
        for name in ("kip_steps", "kip_batch", "ntk_depth", "max_em_iter"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or int(value) != value
                or int(value) < (0 if name == "kip_steps" else 1)
            ):
                raise ConfigError(f"{name} must be a positive integer; got {value!r}")

    # -- fit (public data only) --------------------------------------------------------------
    def _fit(self, X: np.ndarray, y_public: Any, y_sensitive: Any) -> None:
        self._check_params()
        # One BLAS / OpenMP thread: the problems are small and the machines we run on are shared.
        with threadpool_limits(limits=1):
            self._fit_public(X, y_public)

    def _fit_public(self, X: np.ndarray, y_public: Any) -> None:
        import torch

        if y_public is None:
            raise ConfigError("clustmix needs y_public: it clusters and adapts per public class")
        y = as_label_matrix(y_public, X.shape[0], "y_public")[:, 0]
        n_classes = int(y.max()) + 1
        d = X.shape[1]
        start = time.perf_counter()

        # Fixed clipping range from public data (the mixing sensitivity needs it data-independent).
        q = float(self.clip_quantile)
        lo = np.quantile(X, q, axis=0) if q > 0 else X.min(axis=0)
        hi = np.quantile(X, 1.0 - q, axis=0) if q > 0 else X.max(axis=0)
        narrow = (hi - lo) < 1e-6
        lo[narrow], hi[narrow] = X.min(axis=0)[narrow], X.max(axis=0)[narrow]
        flat = (hi - lo) < 1e-6
        hi[flat] = lo[flat] + 1.0  # a constant feature: any range; it maps to 0

        big_c = int(self.accounting_classes) if self.accounting_classes is not None else n_classes
        mu = gdp.mu_for_epsilon_delta(self.epsilon, self.delta)
        l_min = gdp.min_mixture_size(self.epsilon, self.delta, self.sigma_max, big_c, d)

        # 1. Approximate: per-class size-constrained GMM (Algorithm 2 lines 3-9).
        centroids: list[np.ndarray] = []
        classes: list[int] = []
        sizes: list[int] = []
        clustering: list[dict[str, Any]] = []
        for c in range(n_classes):
            Xc = X[y == c].astype(np.float64)
            if Xc.shape[0] == 0:
                continue
            n_clusters = max(1, Xc.shape[0] // l_min)
            assign, info = gmm_constrained(
                Xc,
                n_clusters,
                min(l_min, Xc.shape[0]),
                max_iter=int(self.max_em_iter),
                time_limit=float(self.assign_timeout_s),
                seed=int(self.seed) + c,
            )
            for k in range(n_clusters):
                members = Xc[assign == k]
                centroids.append(members.mean(axis=0))
                classes.append(c)
                sizes.append(int(members.shape[0]))
            clustering.append({"class": c, "rows": int(Xc.shape[0]), **info})
        init = np.stack(centroids)
        cls = np.asarray(classes, dtype=np.int64)
        cluster_seconds = time.perf_counter() - start

        # 2. Adapt: α-weighted KIP on the centroids (Algorithm 2 line 11).
        threads = torch.get_num_threads()
        state = torch.random.get_rng_state()
        torch.set_num_threads(1)  # small kernels; more threads only contend on shared machines
        try:
            torch.manual_seed(int(self.seed))
            if len(np.unique(cls)) >= 2 and int(self.kip_steps) > 0:
                adapted, curves = kip_adapt(
                    init,
                    cls,
                    X,
                    y,
                    n_classes,
                    alpha=float(self.alpha),
                    steps=int(self.kip_steps),
                    lr=float(self.kip_lr),
                    batch_size=int(self.kip_batch),
                    ridge=float(self.ridge),
                    depth=int(self.ntk_depth),
                    seed=int(self.seed),
                )
            else:  # nothing to adapt for (one class, or KIP switched off)
                adapted, curves = init.copy(), {"step": [], "loss": [], "fidelity": [], "krr": []}
        finally:
            torch.set_num_threads(threads)
            torch.random.set_rng_state(state)

        self.lo_ = lo.astype(np.float32)
        self.hi_ = hi.astype(np.float32)
        self.initial_centroids_ = init.astype(np.float32)
        self.centroids_ = adapted.astype(np.float32)
        self.centroid_classes_ = cls
        self.cluster_sizes_ = np.asarray(sizes, dtype=np.int64)
        self.n_classes_ = n_classes
        self.accounting_classes_ = big_c
        self.l_min_ = int(l_min)
        self.mu_ = float(mu)
        self.epsilon_ = float(self.epsilon)
        self.delta_ = float(self.delta)
        self._fit_info = {
            "clustering": clustering,
            "kip": curves,
            "seconds": {
                "cluster": cluster_seconds,
                "total": time.perf_counter() - start,
            },
        }
        self._rng = self._new_rng()

    def _new_rng(self) -> np.random.Generator:
        """Fresh OS entropy unless a (test-only) noise seed was given to this instance."""
        if self.noise_seed is None:
            return np.random.default_rng()
        return np.random.default_rng(int(self.noise_seed))

    # -- release (site rows) -----------------------------------------------------------------
    def group_rows(self, X: np.ndarray) -> np.ndarray:
        """Group index (into ``centroids_``) of each row: nearest adapted centroid, then groups
        under ``l_min`` rows dissolved, smallest first, into their rows' next-nearest surviving
        centroid (Algorithm 2 line 14). One group remains at least, whatever its size."""
        self.check_fitted()
        dist = _sq_dist(X.astype(np.float64), self.centroids_.astype(np.float64))
        alive = np.ones(dist.shape[1], dtype=bool)
        assign = np.argmin(dist, axis=1)
        while True:
            sizes = np.bincount(assign, minlength=dist.shape[1])
            alive &= sizes > 0
            small = np.flatnonzero(alive & (sizes < self.l_min_))
            if small.size == 0 or alive.sum() <= 1:
                break
            victim = int(small[np.argmin(sizes[small])])
            alive[victim] = False
            rows = np.flatnonzero(assign == victim)
            masked = np.where(alive[None, :], dist[rows], np.inf)
            assign[rows] = np.argmin(masked, axis=1)
        return assign

    def release_sigma(self, size: int) -> float:
        """σ (in [0, 1] units) that Eq. 7 gives a group of ``size`` rows at the target (ε, δ)."""
        self.check_fitted()
        return gdp.mixing_sigma(
            self.epsilon_, self.delta_, int(size), self.accounting_classes_, self.n_features_in_
        )

    def _transform(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "_rng"):
            self._rng = self._new_rng()
        span = (self.hi_ - self.lo_).astype(np.float64)
        unit = np.clip((X.astype(np.float64) - self.lo_) / span, 0.0, 1.0)
        assign = self.group_rows(X)
        out = np.empty(X.shape, dtype=np.float32)
        groups, sizes, sigmas = [], [], []
        for g in np.unique(assign):
            rows = np.flatnonzero(assign == g)
            sigma = self.release_sigma(rows.size)
            noisy = unit[rows].mean(axis=0) + self._rng.normal(0.0, sigma, size=X.shape[1])
            out[rows] = (self.lo_ + noisy * span).astype(np.float32)
            groups.append(int(g))
            sizes.append(int(rows.size))
            sigmas.append(float(sigma))
        # What this release spent: every group meets (ε, δ) by Eq. 7 (parallel composition).
        self.last_release_ = {
            "rows": int(X.shape[0]),
            "groups": groups,
            "group_sizes": sizes,
            "sigmas": sigmas,
            "epsilon": self.epsilon_,
            "delta": max(
                gdp.mixing_delta(self.epsilon_, s, n, self.accounting_classes_, X.shape[1])
                for s, n in zip(sigmas, sizes, strict=True)
            ),
        }
        return out

    def _n_components(self) -> int:
        return int(self.n_features_in_)

    # -- reporting ----------------------------------------------------------------------------
    def privacy_report(self) -> dict[str, Any]:
        """(ε, δ), μ, l_min and the noise at l_min, with what the accounting assumes."""
        self.check_fitted()
        return {
            "epsilon": self.epsilon_,
            "delta": self.delta_,
            "mu": self.mu_,
            "accounting": "paper 004 Eq. 7, per transform call, conditional on the partition",
            "accounting_classes": int(self.accounting_classes_),
            "n_features": int(self.n_features_in_),
            "l_min": int(self.l_min_),
            "sigma_at_l_min": self.release_sigma(self.l_min_),
            "sigma_max": float(self.sigma_max),
        }

    def training_metrics(self) -> dict[str, Any]:
        if not hasattr(self, "centroids_"):
            return {}
        out: dict[str, Any] = {
            "privacy": self.privacy_report(),
            "n_centroids": int(self.centroids_.shape[0]),
            "centroid_classes": self.centroid_classes_.tolist(),
            "cluster_sizes": self.cluster_sizes_.tolist(),
            "adaptation_shift": float(
                np.sum((self.centroids_ - self.initial_centroids_) ** 2)
                / max(float(np.sum(self.initial_centroids_**2)), 1e-12)
            ),
        }
        if hasattr(self, "_fit_info"):
            out.update(self._fit_info)
        return out

    # -- bundle round trip -------------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.check_fitted()
        arch = {
            "type": "clustmix",
            "n_features_in": int(self.n_features_in_),
            "n_components": int(self.n_features_in_),
        }
        params = {
            "epsilon": self.epsilon_,
            "delta": self.delta_,
            "sigma_max": float(self.sigma_max),
            "alpha": float(self.alpha),
            "accounting_classes": int(self.accounting_classes_),
            "n_classes": int(self.n_classes_),
            "clip_quantile": float(self.clip_quantile),
            "l_min": int(self.l_min_),
            "mu": self.mu_,
            "seed": int(self.seed),
            # noise_seed deliberately absent: a bundle must never let anyone replay the noise.
        }
        tensors = {
            "centroids": self.centroids_.astype(np.float32),
            "initial_centroids": self.initial_centroids_.astype(np.float32),
            "centroid_classes": self.centroid_classes_.astype(np.int64),
            "cluster_sizes": self.cluster_sizes_.astype(np.int64),
            "clip_low": self.lo_.astype(np.float32),
            "clip_high": self.hi_.astype(np.float32),
        }
        return {"architecture": arch, "params": params}, tensors

    @classmethod
    def from_state(cls, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> ClustMixShaper:
        try:
            arch = config["architecture"]
            params = config["params"]
            d = int(arch["n_features_in"])
            shaper = cls(
                epsilon=float(params["epsilon"]),
                delta=float(params["delta"]),
                sigma_max=float(params["sigma_max"]),
                alpha=float(params["alpha"]),
                accounting_classes=int(params["accounting_classes"]),
                clip_quantile=float(params["clip_quantile"]),
                seed=int(params.get("seed", 0)),
            )
            centroids = np.asarray(tensors["centroids"], dtype=np.float32)
            init = np.asarray(tensors["initial_centroids"], dtype=np.float32)
            classes = np.asarray(tensors["centroid_classes"], dtype=np.int64)
            sizes = np.asarray(tensors["cluster_sizes"], dtype=np.int64)
            lo = np.asarray(tensors["clip_low"], dtype=np.float32)
            hi = np.asarray(tensors["clip_high"], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"clustmix state is malformed ({exc!r}); re-train the bundle"
            ) from None
        shaper._check_params()
        k = centroids.shape[0]
        if (
            arch.get("type") != "clustmix"
            or centroids.shape != (k, d)
            or init.shape != (k, d)
            or classes.shape != (k,)
            or sizes.shape != (k,)
            or lo.shape != (d,)
            or hi.shape != (d,)
            or k < 1
            or not np.all(hi > lo)
            or not np.isfinite(centroids).all()
        ):
            raise ConfigError("clustmix state has inconsistent shapes or ranges; re-train it")
        n_classes = int(params.get("n_classes", int(classes.max()) + 1))
        # The σ a site uses must follow from (ε, δ) and C, not from a number in the bundle: the
        # site recomputes l_min and refuses a bundle whose stored value disagrees.
        l_min = gdp.min_mixture_size(
            shaper.epsilon, shaper.delta, shaper.sigma_max, int(params["accounting_classes"]), d
        )
        if int(params["l_min"]) != l_min:
            raise ConfigError(
                f"clustmix state says l_min={params['l_min']} but (epsilon, delta, sigma_max) "
                f"give {l_min}; the bundle is inconsistent"
            )
        shaper.centroids_ = centroids
        shaper.initial_centroids_ = init
        shaper.centroid_classes_ = classes
        shaper.cluster_sizes_ = sizes
        shaper.lo_, shaper.hi_ = lo, hi
        shaper.n_classes_ = n_classes
        shaper.accounting_classes_ = int(params["accounting_classes"])
        shaper.l_min_ = l_min
        shaper.mu_ = gdp.mu_for_epsilon_delta(shaper.epsilon, shaper.delta)
        shaper.epsilon_ = float(shaper.epsilon)
        shaper.delta_ = float(shaper.delta)
        shaper.n_features_in_ = d
        shaper._rng = shaper._new_rng()
        return shaper
