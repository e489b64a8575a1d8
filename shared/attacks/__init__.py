"""Attackers and privacy metrics: the auditor's side of the threat model.

``ATTACKERS`` maps names (``logistic-regression``, ``gradient-boosting``, ``mlp``, ``knn``) to
attacker classes; :func:`run_attack_suite` fits them all and reports the strongest next to the
majority-class baseline; :func:`score_utility` does the same on the public label;
:func:`log_rank_privacy` is paper 003's Definition 10.
"""

from __future__ import annotations

from shared.attacks import models as _models  # noqa: F401  (registers the attackers)
from shared.attacks.base import ATTACKERS, WEIGHTS_FORMAT, Attacker, attacker_from_weights
from shared.attacks.logrank import (
    log_rank_privacy,
    log_rank_privacy_from_proba,
    plugin_conditional_proba,
)
from shared.attacks.metrics import majority_baseline, score_predictions
from shared.attacks.models import (
    GradientBoostingAttacker,
    KNNAttacker,
    LogisticRegressionAttacker,
    MLPAttacker,
)
from shared.attacks.suite import (
    DEFAULT_ATTACKERS,
    SuiteResult,
    run_attack_suite,
    score_utility,
    split_for_attack,
)

__all__ = [
    "ATTACKERS",
    "DEFAULT_ATTACKERS",
    "WEIGHTS_FORMAT",
    "Attacker",
    "GradientBoostingAttacker",
    "KNNAttacker",
    "LogisticRegressionAttacker",
    "MLPAttacker",
    "SuiteResult",
    "attacker_from_weights",
    "log_rank_privacy",
    "log_rank_privacy_from_proba",
    "majority_baseline",
    "plugin_conditional_proba",
    "run_attack_suite",
    "score_predictions",
    "score_utility",
    "split_for_attack",
]
