"""One call to estimate I(A; B) from samples: ``estimate_mi(a, b)``.

A fresh critic is trained on 80% of the rows and the bound is read on the held-out 20%, averaged
over held-out batches. Reading it on the training rows would let an over-fitted critic report
information that is not there (the failure that makes a critic "see" MI in independent data).
"""

from __future__ import annotations

import numpy as np
import torch

from shared.errors import ConfigError
from shared.mi.estimators import MI_ESTIMATORS, LabelCoding


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ConfigError(f"{name}: must be 1-D or 2-D, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ConfigError(f"{name}: holds NaN or inf")
    return arr


def estimate_mi(
    a: np.ndarray,
    b: np.ndarray,
    *,
    estimator: str = "remine",
    discrete: bool | None = None,
    steps: int = 3000,
    batch_size: int = 512,
    lr: float = 1e-3,
    hidden: tuple[int, ...] = (100, 100),
    seed: int = 0,
) -> float:
    """Estimate I(A; B) in nats with a neural lower bound.

    Args:
        a: (n,) or (n, d) continuous samples (e.g. T(x)).
        b: labels (int, discrete) or continuous (n,)/(n, e) samples.
        estimator: a name from ``MI_ESTIMATORS`` (``remine``, ``mine``, ``infonce``).
        discrete: treat ``b`` as class labels; default: integer dtype means discrete.
        steps: critic updates.
    """
    a_mat = _as_matrix(a, "a")
    b_arr = np.asarray(b)
    if b_arr.shape[0] != a_mat.shape[0]:
        raise ConfigError(f"b: needs {a_mat.shape[0]} rows like a, got {b_arr.shape[0]}")
    if steps < 1:
        raise ConfigError(f"steps: must be >= 1, got {steps}")
    if discrete is None:
        discrete = np.issubdtype(b_arr.dtype, np.integer) or b_arr.dtype == bool
    rng = np.random.default_rng(seed)
    order = rng.permutation(a_mat.shape[0])
    cut = int(0.8 * len(order))
    train, test = order[:cut], order[cut:]
    if len(test) < 16:
        raise ConfigError(f"a: need at least 80 rows to estimate MI, got {a_mat.shape[0]}")

    a_t = torch.from_numpy(a_mat)
    if discrete:
        _, codes = np.unique(b_arr, return_inverse=True)
        coding = LabelCoding.from_labels(codes[train])
        b_t = torch.from_numpy(codes.astype(np.int64).reshape(-1))
        est = MI_ESTIMATORS.get(estimator)(a_mat.shape[1], coding, hidden=hidden, lr=lr, seed=seed)
    else:
        b_mat = _as_matrix(b_arr, "b")
        b_t = torch.from_numpy(b_mat)
        est = MI_ESTIMATORS.get(estimator)(
            a_mat.shape[1], b_mat.shape[1], hidden=hidden, lr=lr, seed=seed
        )
        # Contrastive estimators score every pair of a group: keep one group per batch, so a
        # step costs group² critic calls rather than (batch/group)·group².
        batch_size = min(batch_size, getattr(est, "pair_group", batch_size))

    gen = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        train_t = torch.from_numpy(train)
        for _ in range(steps):
            pick = torch.randint(len(train_t), (min(batch_size, len(train_t)),), generator=gen)
            idx = train_t[pick]
            est.step(a_t[idx], b_t[idx])
        test_t = torch.from_numpy(test)
        values = [
            est.evaluate(a_t[chunk], b_t[chunk])
            for chunk in torch.split(test_t, max(batch_size, 256))
            if len(chunk) >= 16
        ]
    finally:
        torch.random.set_rng_state(torch_state)
    return float(np.mean(values))
