"""Each attacker: interface, label handling, determinism, errors, and plain-weight export."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from shared.attacks import ATTACKERS, attacker_from_weights
from shared.attacks.models import KNNAttacker, MLPAttacker
from shared.errors import ColumnError, ConfigError, LabelError, NotFittedError, ValueRangeError

NAMES = ["logistic-regression", "gradient-boosting", "mlp", "knn"]


def _blobs(seed: int, n: int = 600, labels: tuple[int, ...] = (-3, 7, 42)) -> tuple:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, len(labels), n)
    centres = 2.5 * rng.normal(size=(len(labels), 3))
    Z = centres[codes] + rng.normal(size=(n, 3))
    return Z, np.asarray(labels)[codes]


def test_registry_lists_the_four_and_rejects_unknown_names() -> None:
    assert ATTACKERS.names() == sorted(NAMES)
    with pytest.raises(ConfigError, match="svm.*gradient-boosting, knn, logistic-regression, mlp"):
        ATTACKERS.get("svm")


@pytest.mark.parametrize("name", NAMES)
def test_multiclass_with_arbitrary_int_labels(name: str, seed: int) -> None:
    Z, y = _blobs(seed)
    att = ATTACKERS.create(name, seed=seed).fit(Z[:450], y[:450])
    assert att.classes_.tolist() == [-3, 7, 42]
    proba = att.predict_proba(Z[450:])
    assert proba.shape == (150, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)
    assert set(att.predict(Z[450:]).tolist()) <= {-3, 7, 42}
    assert np.mean(att.predict(Z[450:]) == y[450:]) > 0.8
    assert att.params_ and att.search_, "the small search ran and recorded its candidates"


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_for_a_seed(name: str, seed: int) -> None:
    Z, y = _blobs(seed, labels=(0, 1))
    a = ATTACKERS.create(name, seed=seed).fit(Z, y).predict_proba(Z[:50])
    b = ATTACKERS.create(name, seed=seed).fit(Z, y).predict_proba(Z[:50])
    np.testing.assert_array_equal(a, b)


def test_mlp_leaves_global_rng_and_threads_alone(seed: int) -> None:
    Z, y = _blobs(seed, n=200, labels=(0, 1))
    state, threads = torch.random.get_rng_state(), torch.get_num_threads()
    MLPAttacker(seed=seed).fit(Z, y)
    assert torch.equal(state, torch.random.get_rng_state())
    assert torch.get_num_threads() == threads


def test_search_is_subsampled_but_refit_sees_every_row(seed: int) -> None:
    Z, y = _blobs(seed, n=1000, labels=(0, 1))
    att = KNNAttacker(seed=seed, max_search_rows=200).fit(Z, y)
    assert att.model_.n_samples_fit_ == 1000


def _roundtrip(config: dict, arrays: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """Ship the export the way a site gets it: JSON text and a pickle-free .npz."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:
        loaded = {k: npz[k] for k in npz.files}
    return json.loads(json.dumps(config)), loaded


@pytest.mark.parametrize("name", ["logistic-regression", "mlp"])
@pytest.mark.parametrize("labels", [(0, 1), (-3, 7, 42)])
def test_export_reproduces_predict_proba_exactly(name: str, labels: tuple, seed: int) -> None:
    Z, y = _blobs(seed, n=400, labels=labels)
    att = ATTACKERS.create(name, seed=seed).fit(Z, y)
    config, arrays = att.export_weights()
    assert all(type(v) is np.ndarray for v in arrays.values())
    rebuilt = attacker_from_weights(*_roundtrip(config, arrays))
    assert type(rebuilt) is type(att)
    probe = np.random.default_rng(seed + 1).normal(size=(300, 3)) * 3
    np.testing.assert_array_equal(rebuilt.predict_proba(probe), att.predict_proba(probe))
    np.testing.assert_array_equal(rebuilt.predict(probe), att.predict(probe))
    assert rebuilt.classes_.tolist() == list(labels)


@pytest.mark.parametrize("name", ["gradient-boosting", "knn"])
def test_non_exportable_attackers_say_to_ship_the_training_set(name: str, seed: int) -> None:
    Z, y = _blobs(seed, n=200, labels=(0, 1))
    att = ATTACKERS.create(name, seed=seed).fit(Z, y)
    with pytest.raises(ConfigError, match="training set"):
        att.export_weights()


def test_from_weights_rejects_damaged_exports(seed: int) -> None:
    Z, y = _blobs(seed, n=200, labels=(0, 1))
    config, arrays = ATTACKERS.create("mlp", seed=seed).fit(Z, y).export_weights()
    with pytest.raises(ConfigError, match="w1"):
        attacker_from_weights(config, {**arrays, "w1": arrays["w1"][:, :-1]})
    with pytest.raises(ConfigError, match="b0"):
        attacker_from_weights(config, {k: v for k, v in arrays.items() if k != "b0"})
    with pytest.raises(ConfigError, match="format"):
        attacker_from_weights({**config, "format": "pickle"}, arrays)
    with pytest.raises(ConfigError, match="valid names"):
        attacker_from_weights({**config, "attacker": "svm"}, arrays)


def test_input_errors(seed: int) -> None:
    Z, y = _blobs(seed, n=100, labels=(0, 1))
    att = ATTACKERS.create("logistic-regression", seed=seed)
    with pytest.raises(NotFittedError):
        att.predict_proba(Z)
    with pytest.raises(NotFittedError):
        att.export_weights()
    with pytest.raises(LabelError, match="single class"):
        att.fit(Z, np.zeros(100, dtype=int))
    bad = Z.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueRangeError, match="NaN"):
        att.fit(bad, y)
    with pytest.raises(ConfigError, match="rows"):
        att.fit(Z, y[:-1])
    att.fit(Z, y)
    with pytest.raises(ColumnError, match="fitted on 3"):
        att.predict_proba(Z[:, :2])
    with pytest.raises(ConfigError, match="n_jobs"):
        ATTACKERS.create("knn", n_jobs=4)


@pytest.mark.parametrize("name", NAMES)
def test_rare_class_and_subsampled_search_do_not_break_fit(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(300, 2))
    y = (Z[:, 0] > 0).astype(int)
    y[:2] = 5  # two rows of a rare class: may miss the subsampled search split entirely
    att = ATTACKERS.create(name, seed=seed, max_search_rows=100).fit(Z, y)
    assert att.predict_proba(Z).shape == (300, 3)
    y[:1] = 9  # a class with a single row: the search is skipped, the fit still works
    assert ATTACKERS.create(name, seed=seed).fit(Z, y).predict_proba(Z).shape == (300, 4)
