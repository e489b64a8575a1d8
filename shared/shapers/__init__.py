"""Data shapers behind one registry (``SHAPERS``): InfoShape, baselines, peer methods."""

from shared.shapers.base import SHAPERS, Shaper
from shared.shapers.baselines import GaussianNoiseShaper, IdentityShaper, RandomEncoderShaper
from shared.shapers.clustmix import ClustMixShaper
from shared.shapers.dpfe import DPFEShaper
from shared.shapers.gen_filter import GenFilterShaper
from shared.shapers.infoshape import InfoShapeEncoder

__all__ = [
    "SHAPERS",
    "ClustMixShaper",
    "DPFEShaper",
    "GenFilterShaper",
    "GaussianNoiseShaper",
    "IdentityShaper",
    "InfoShapeEncoder",
    "RandomEncoderShaper",
    "Shaper",
]
