"""Data shapers behind one registry (``SHAPERS``): InfoShape, the paper's baselines, peer methods."""

from shared.shapers.base import SHAPERS, Shaper
from shared.shapers.baselines import GaussianNoiseShaper, IdentityShaper, RandomEncoderShaper
from shared.shapers.clustmix import ClustMixShaper
from shared.shapers.infoshape import InfoShapeEncoder

__all__ = [
    "SHAPERS",
    "ClustMixShaper",
    "GaussianNoiseShaper",
    "IdentityShaper",
    "InfoShapeEncoder",
    "RandomEncoderShaper",
    "Shaper",
]
