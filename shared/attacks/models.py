"""The four registered attackers: logistic regression, gradient boosting, MLP, kNN.

Each one covers a different way S can hide in T(x): linearly (logistic regression), in axis-aligned
interactions (gradient boosting), in smooth non-linear boundaries (MLP), or only locally (kNN).
The suite reports the strongest, because the adversary of the threat model picks the best tool.

Search spaces are deliberately small (two or three candidates each) so the whole suite stays in
seconds on two cores; candidates span the regimes that matter (strong vs weak regularisation,
small vs large neighbourhoods, shallow vs deep trees) rather than fine-tuning one of them.

Shipping to sites (federated audit): ``logistic-regression`` and ``mlp`` export plain numpy arrays
plus a JSON config (:meth:`Attacker.export_weights`) and predict through the same numpy code before
and after the trip, so a site reproduces the auditor's probabilities exactly. ``gradient-boosting``
and ``knn`` are not exported; the federated audit ships their attack-training set (T(P_audit), S)
and the site refits the attacker with the same name and seed (deterministic, so the site gets the
model the auditor scored).
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

import numpy as np
import torch
from scipy.special import expit
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier, NearestNeighbors
from torch import nn

from shared.attacks.base import (
    ATTACKERS,
    WEIGHTS_FORMAT,
    Attacker,
    expand_proba,
    softmax,
)
from shared.errors import ConfigError, NotFittedError


# ---------------------------------------------------------------------- export helpers
def _export_config(att: Attacker) -> dict[str, Any]:
    if not hasattr(att, "model_"):
        raise NotFittedError(f"attacker {att.name!r} must be fitted before export_weights")
    return {
        "format": WEIGHTS_FORMAT,
        "attacker": att.name,
        "classes": att.classes_.tolist(),
        "n_features": int(att.n_features_in_),
        "seed": att.seed,
        "n_jobs": att.n_jobs,
        "params": _plain(att.params_),
    }


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def _restore(cls: type[Attacker], config: dict[str, Any], arrays: dict[str, np.ndarray]) -> Any:
    """Shared part of ``from_weights``: check the config, set scaler, classes and params."""
    if not isinstance(config, dict) or config.get("format") != WEIGHTS_FORMAT:
        raise ConfigError(f"attacker config must carry format {WEIGHTS_FORMAT!r}")
    if config.get("attacker") != cls.name:
        raise ConfigError(f"config describes attacker {config.get('attacker')!r}, not {cls.name!r}")
    try:
        d = int(config["n_features"])
        classes = np.asarray(config["classes"])
        params = dict(config["params"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"attacker config is malformed ({exc!r}); re-export it") from None
    if classes.ndim != 1 or classes.size < 2:
        raise ConfigError(f"attacker config needs at least two classes; got {classes.tolist()}")
    att = cls(seed=int(config.get("seed", 0)), n_jobs=int(config.get("n_jobs", 1)))
    att.classes_ = classes
    att.n_features_in_ = d
    att.mean_ = _array(arrays, "mean", (d,))
    att.scale_ = _array(arrays, "scale", (d,))
    att.params_ = params
    att.search_ = []
    att.fit_seconds_ = 0.0
    return att


def _array(arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...]) -> np.ndarray:
    if key not in arrays:
        raise ConfigError(f"attacker weights lack array {key!r}; present: {sorted(arrays)}")
    arr = np.asarray(arrays[key], dtype=np.float64)
    if arr.shape != shape:
        raise ConfigError(f"attacker weight {key!r} has shape {arr.shape}; expected {shape}")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"attacker weight {key!r} holds NaN or infinite values")
    return arr


# ---------------------------------------------------------------------- logistic regression
@ATTACKERS.register("logistic-regression")
class LogisticRegressionAttacker(Attacker):
    """L2-regularised logistic regression (multinomial for several classes); C in {1, 0.01, 100}.

    The model is kept as plain arrays and predicted in numpy (sigmoid for one coefficient row,
    softmax for several), which is what makes the exported copy bit-identical.
    """

    exportable: ClassVar[bool] = True

    def _candidates(self, n_rows: int, n_features: int, n_classes: int) -> list[dict[str, Any]]:
        return [{"C": 1.0}, {"C": 0.01}, {"C": 100.0}]

    def _fit_candidate(self, params, X, y, X_val, y_val, n_classes):  # type: ignore[override]
        return self._fit_final(params, X, y, n_classes), params

    def _fit_final(self, params, X, y, n_classes):  # type: ignore[override]
        lr = LogisticRegression(C=float(params["C"]), max_iter=1000, tol=1e-6)
        lr.fit(X, y)
        return {
            "coef": np.asarray(lr.coef_, dtype=np.float64),
            "intercept": np.asarray(lr.intercept_, dtype=np.float64),
            "seen": np.asarray(lr.classes_, dtype=np.int64),
        }

    def _proba(self, model, X, n_classes):  # type: ignore[override]
        logits = X @ model["coef"].T + model["intercept"]
        if model["coef"].shape[0] == 1:
            p1 = expit(logits[:, 0])
            proba = np.column_stack([1.0 - p1, p1])
        else:
            proba = softmax(logits)
        return expand_proba(proba, model["seen"], n_classes)

    def export_weights(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        config = _export_config(self)
        arrays = {
            "mean": self.mean_.copy(),
            "scale": self.scale_.copy(),
            "coef": self.model_["coef"].copy(),
            "intercept": self.model_["intercept"].copy(),
        }
        return config, arrays

    @classmethod
    def from_weights(cls, config: dict[str, Any], arrays: dict[str, np.ndarray]) -> Self:
        att = _restore(cls, config, arrays)
        k, d = att.classes_.size, att.n_features_in_
        rows = 1 if k == 2 else k
        att.model_ = {
            "coef": _array(arrays, "coef", (rows, d)),
            "intercept": _array(arrays, "intercept", (rows,)),
            "seen": np.arange(k, dtype=np.int64),
        }
        return att


# ---------------------------------------------------------------------- gradient boosting
@ATTACKERS.register("gradient-boosting")
class GradientBoostingAttacker(Attacker):
    """scikit-learn's HistGradientBoostingClassifier.

    Each candidate boosts with early stopping on the validation split; the refit on all rows uses
    the number of rounds the winner reached. Not exportable as plain weights: the federated audit
    ships (T(P_audit), S) and the site refits with the same seed.
    """

    max_rounds: ClassVar[int] = 400

    def _candidates(self, n_rows: int, n_features: int, n_classes: int) -> list[dict[str, Any]]:
        return [
            {
                "max_leaf_nodes": 31,
                "learning_rate": 0.1,
                "min_samples_leaf": 20,
                "l2_regularization": 0.0,
                "max_iter": 100,
            },
            {
                "max_leaf_nodes": 15,
                "learning_rate": 0.1,
                "min_samples_leaf": 50,
                "l2_regularization": 1.0,
                "max_iter": 100,
            },
            {
                "max_leaf_nodes": 63,
                "learning_rate": 0.05,
                "min_samples_leaf": 10,
                "l2_regularization": 0.0,
                "max_iter": 100,
            },
        ]

    def _model(self, params: dict[str, Any], early_stopping: bool) -> Any:
        return HistGradientBoostingClassifier(
            **params,
            early_stopping=early_stopping,
            n_iter_no_change=15,
            tol=1e-4,  # stop once validation loss gains < 1e-4 (else near-separable data crawls)
            random_state=self.seed,
        )

    def _fit_candidate(self, params, X, y, X_val, y_val, n_classes):  # type: ignore[override]
        model = self._model({**params, "max_iter": self.max_rounds}, early_stopping=True)
        model.fit(X, y, X_val=X_val, y_val=y_val)
        return model, {**params, "max_iter": int(max(model.n_iter_, 10))}

    def _fit_final(self, params, X, y, n_classes):  # type: ignore[override]
        return self._model(params, early_stopping=False).fit(X, y)

    def _proba(self, model, X, n_classes):  # type: ignore[override]
        return expand_proba(model.predict_proba(X), model.classes_, n_classes)


# ---------------------------------------------------------------------- k nearest neighbours
@ATTACKERS.register("knn")
class KNNAttacker(Attacker):
    """k-nearest neighbours on standardised inputs; k in {25, 5, 100} (capped by the rows).

    One neighbour query with the largest k scores every candidate during the search. Not
    exportable as plain weights (the model *is* the training set): the federated audit ships
    (T(P_audit), S) and the site refits.
    """

    def _candidates(self, n_rows: int, n_features: int, n_classes: int) -> list[dict[str, Any]]:
        return [{"n_neighbors": 25}, {"n_neighbors": 5}, {"n_neighbors": 100}]

    def _evaluate_candidates(self, candidates, X, y, X_val, y_val, n_classes):  # type: ignore[override]
        ks = [int(min(c["n_neighbors"], X.shape[0])) for c in candidates]
        nn_index = NearestNeighbors(n_neighbors=max(ks), n_jobs=self.n_jobs).fit(X)
        _, neighbours = nn_index.kneighbors(X_val)
        labels = y[neighbours]  # (n_val, k_max), nearest first
        rows = np.arange(X_val.shape[0])[:, None] * n_classes
        out = []
        for params, k in zip(candidates, ks, strict=True):
            votes = np.bincount((rows + labels[:, :k]).ravel(), minlength=rows.size * n_classes)
            out.append(({**params, "n_neighbors": k}, votes.reshape(-1, n_classes) / k))
        return out

    def _fit_final(self, params, X, y, n_classes):  # type: ignore[override]
        k = int(min(params["n_neighbors"], X.shape[0]))
        return KNeighborsClassifier(n_neighbors=k, n_jobs=self.n_jobs).fit(X, y)

    def _proba(self, model, X, n_classes):  # type: ignore[override]
        return expand_proba(model.predict_proba(X), model.classes_, n_classes)


# ---------------------------------------------------------------------- MLP
def _mlp_forward(layers: list[tuple[np.ndarray, np.ndarray]], X: np.ndarray) -> np.ndarray:
    """Numpy forward pass (ReLU hidden layers, softmax output) used before and after export."""
    h = X
    for W, b in layers[:-1]:
        h = np.maximum(h @ W.T + b, 0.0)
    W, b = layers[-1]
    return softmax(h @ W.T + b)


@ATTACKERS.register("mlp")
class MLPAttacker(Attacker):
    """A ReLU MLP trained in torch with Adam and early stopping on validation loss.

    Candidates: two hidden layers of 64 units (Adam 1e-2, weight decay 1e-4) or of 128 units
    (Adam 3e-3, weight decay 1e-3). Batches of n/8 rows (32 to 1024). The refit on all rows runs
    the number of epochs the winner needed. Torch runs single-threaded here: these matmuls are too
    small for threads to help, and extra threads collapse under CPU oversubscription. Weights are
    then held as float64 numpy arrays and predicted in numpy, so the exported copy reproduces
    ``predict_proba`` exactly.
    """

    exportable: ClassVar[bool] = True
    #: Large batches: per-step overhead dominates these small networks on CPU, so fewer, larger
    #: steps (with a higher learning rate) train as well in a fraction of the time.
    max_batch_size: ClassVar[int] = 1024
    max_epochs: ClassVar[int] = 150
    patience: ClassVar[int] = 10
    #: Adam steps per epoch are capped so huge tables keep epochs bounded in time.
    max_steps_per_epoch: ClassVar[int] = 25

    def _candidates(self, n_rows: int, n_features: int, n_classes: int) -> list[dict[str, Any]]:
        return [
            {"hidden": (64, 64), "weight_decay": 1e-4, "lr": 1e-2, "epochs": 50},
            {"hidden": (128, 128), "weight_decay": 1e-3, "lr": 3e-3, "epochs": 50},
        ]

    def _fit_candidate(self, params, X, y, X_val, y_val, n_classes):  # type: ignore[override]
        layers, best_epoch = self._train(params, X, y, n_classes, X_val, y_val)
        return layers, {**params, "epochs": best_epoch}

    def _fit_final(self, params, X, y, n_classes):  # type: ignore[override]
        layers, _ = self._train(params, X, y, n_classes, None, None)
        return layers

    def _proba(self, model, X, n_classes):  # type: ignore[override]
        return _mlp_forward(model, X)

    def _train(
        self,
        params: dict[str, Any],
        X: np.ndarray,
        y: np.ndarray,
        n_classes: int,
        X_val: np.ndarray | None,
        y_val: np.ndarray | None,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
        """Train one network; with a validation set, stop early and keep the best epoch."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny matmuls: threads add overhead, never speed
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                dims = [X.shape[1], *params["hidden"]]
                mods: list[nn.Module] = []
                for a, b in zip(dims[:-1], dims[1:], strict=True):
                    mods += [nn.Linear(a, b), nn.ReLU()]
                mods.append(nn.Linear(dims[-1], n_classes))
                net = nn.Sequential(*mods)
            gen = torch.Generator().manual_seed(self.seed)
            opt = torch.optim.Adam(
                net.parameters(),
                lr=float(params["lr"]),
                weight_decay=float(params["weight_decay"]),
                fused=True,
            )
            loss_fn = nn.CrossEntropyLoss()
            Xt = torch.as_tensor(X, dtype=torch.float32)
            yt = torch.as_tensor(y, dtype=torch.int64)
            validate = X_val is not None and y_val is not None
            if validate:
                Xv = torch.as_tensor(X_val, dtype=torch.float32)
                yv = torch.as_tensor(y_val, dtype=torch.int64)
            n = Xt.shape[0]
            batch = int(np.clip(n // 8, 32, self.max_batch_size))
            steps = min(-(-n // batch), self.max_steps_per_epoch)
            epochs = self.max_epochs if validate else max(int(params["epochs"]), 1)
            best_loss, best_epoch, best_state = np.inf, epochs, None
            for epoch in range(1, epochs + 1):
                net.train()
                perm = torch.randperm(n, generator=gen)
                for s in range(steps):
                    idx = perm[s * batch : (s + 1) * batch]
                    opt.zero_grad()
                    loss_fn(net(Xt[idx]), yt[idx]).backward()
                    opt.step()
                if validate:
                    net.eval()
                    with torch.no_grad():
                        val_loss = float(loss_fn(net(Xv), yv))
                    # Improvement must beat 0.1% (at least 1e-4): near-separable data otherwise
                    # creeps forward by crumbs for the whole epoch budget.
                    if best_state is None or val_loss < best_loss - max(1e-4, 1e-3 * best_loss):
                        best_loss, best_epoch = val_loss, epoch
                        best_state = [p.detach().clone() for p in net.parameters()]
                    elif epoch - best_epoch >= self.patience:
                        break
            if best_state is not None:
                with torch.no_grad():
                    for p, saved in zip(net.parameters(), best_state, strict=True):
                        p.copy_(saved)
        finally:
            torch.set_num_threads(threads)
        linears = [m for m in net if isinstance(m, nn.Linear)]
        layers = [
            (
                m.weight.detach().numpy().astype(np.float64),
                m.bias.detach().numpy().astype(np.float64),
            )
            for m in linears
        ]
        return layers, best_epoch

    def export_weights(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        config = _export_config(self)
        arrays: dict[str, np.ndarray] = {"mean": self.mean_.copy(), "scale": self.scale_.copy()}
        for i, (W, b) in enumerate(self.model_):
            arrays[f"w{i}"] = W.copy()
            arrays[f"b{i}"] = b.copy()
        return config, arrays

    @classmethod
    def from_weights(cls, config: dict[str, Any], arrays: dict[str, np.ndarray]) -> Self:
        att = _restore(cls, config, arrays)
        try:
            hidden = [int(h) for h in att.params_["hidden"]]
        except (KeyError, TypeError, ValueError):
            raise ConfigError("mlp attacker config lacks params.hidden (layer widths)") from None
        dims = [att.n_features_in_, *hidden, int(att.classes_.size)]
        att.model_ = [
            (_array(arrays, f"w{i}", (b, a)), _array(arrays, f"b{i}", (b,)))
            for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True))
        ]
        return att


__all__ = [
    "GradientBoostingAttacker",
    "KNNAttacker",
    "LogisticRegressionAttacker",
    "MLPAttacker",
]
