"""The encoder's headline promise on the paper's §4 data, measured by the strongest attacker.

Privacy is judged by the attacker suite (logistic regression, gradient boosting, MLP, kNN) trained
on T(P_attack) → S and scored on held-out rows — never by the critic's own estimate.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.attacks import run_attack_suite
from shared.data import load_dataset, split_frame
from shared.pipeline import encoder_from_fitted, fit_shaper


def _release_scores(seed: int, shaper: str = "infoshape") -> tuple[float, float, float]:
    data = load_dataset("paper-synthetic", seed=seed)
    parts = split_frame(
        data.frame, {"public": 0.6, "attack": 0.2, "test": 0.2}, seed=seed, stratify="s"
    )
    fitted = fit_shaper(parts["public"], data.spec, shaper=shaper, seed=seed)
    encoder = encoder_from_fitted(fitted)
    z_attack, y_attack = encoder.encode_frame(parts["attack"])
    z_test, y_test = encoder.encode_frame(parts["test"])
    s_attack = encoder.encode_sensitive(parts["attack"])[:, 0]
    s_test = encoder.encode_sensitive(parts["test"])[:, 0]
    utility = run_attack_suite(z_attack, y_attack, z_test, y_test, seed=seed)
    privacy = run_attack_suite(z_attack, s_attack, z_test, s_test, seed=seed)
    return utility.best_auc, privacy.best_auc, privacy.majority


@pytest.mark.slow
def test_defaults_keep_the_label_and_hide_the_sensitive_attribute() -> None:
    scores = [_release_scores(seed) for seed in (0, 1, 2)]
    public = float(np.mean([s[0] for s in scores]))
    private = float(np.mean([s[1] for s in scores]))
    assert public >= 0.93, scores
    assert private <= 0.62, scores


@pytest.mark.slow
def test_raw_data_leaks_so_the_attackers_are_not_blind() -> None:
    public, private, majority = _release_scores(0, shaper="identity")
    assert private >= 0.80 and public >= 0.93
    assert 0.4 <= majority <= 0.6
