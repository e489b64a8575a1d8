"""Data shapers behind one registry (``SHAPERS``): InfoShape and the paper's baselines."""

from shared.shapers.base import SHAPERS, Shaper
from shared.shapers.baselines import GaussianNoiseShaper, IdentityShaper, RandomEncoderShaper
from shared.shapers.infoshape import InfoShapeEncoder

__all__ = [
    "SHAPERS",
    "GaussianNoiseShaper",
    "IdentityShaper",
    "InfoShapeEncoder",
    "RandomEncoderShaper",
    "Shaper",
]
