"""Neural mutual-information estimators behind one registry (``MI_ESTIMATORS``)."""

from shared.mi.critics import StatisticsNetwork
from shared.mi.estimate import estimate_mi
from shared.mi.estimators import MI_ESTIMATORS, MINE, InfoNCE, LabelCoding, MIEstimator, ReMINE

__all__ = [
    "MI_ESTIMATORS",
    "MINE",
    "InfoNCE",
    "LabelCoding",
    "MIEstimator",
    "ReMINE",
    "StatisticsNetwork",
    "estimate_mi",
]
