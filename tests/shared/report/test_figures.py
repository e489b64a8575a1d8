"""Figures come back as PNG bytes from JSON-shaped data, including thin or partial data."""

from __future__ import annotations

import io

import matplotlib.image as mpimg
import numpy as np

from shared.report import figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _pixels(png: bytes) -> np.ndarray:
    assert png.startswith(PNG_MAGIC)
    return mpimg.imread(io.BytesIO(png), format="png")


def test_roc_figure_one_panel_per_label() -> None:
    curve = {"fpr": [0.0, 0.5, 1.0], "tpr": [0.0, 0.9, 1.0], "auc": 0.7, "attacker": "knn"}
    settings = {
        "raw": {
            "label": "raw data",
            "roc": {"public": curve, "sensitive": {"s": curve, "t": curve}},
        },
        "encoder": {"label": "infoshape λ=1", "roc": {"public": curve, "sensitive": {"s": {}}}},
    }
    img = _pixels(figures.roc_figure(settings))
    assert img.shape[1] > 2.5 * img.shape[0]  # three panels side by side: L, s, t
    assert figures.roc_figure({}).startswith(PNG_MAGIC)


def test_mi_figure_with_and_without_references() -> None:
    history = {
        "step": [25, 50, 75],
        "mi_public": [0.3, 0.35, 0.36],
        "mi_sensitive": [[0.2, 0.1], [0.05, 0.02], [0.01, 0.0]],
    }
    with_ref = figures.mi_figure(
        history,
        ["s", "t"],
        reference={"public": 0.4, "sensitive": {"s": 0.3, "t": 0.2}},
        final={"public": 0.3, "sensitive": {"s": 0.01}},
    )
    with_entropy = figures.mi_figure(
        history, ["s", "t"], entropy={"public": 0.69, "sensitive": {"s": 0.69}}
    )
    assert with_ref != with_entropy
    assert figures.mi_figure({}, []).startswith(PNG_MAGIC)


def test_attackers_and_frontier_figures() -> None:
    suites = {
        "central": {"per_attacker": {"knn": {"auc": 0.6}, "mlp": {"auc": None}}},
        "federated": {"per_attacker": {"knn": {"auc": 0.55}}},
    }
    assert figures.attackers_figure(suites, threshold=0.7).startswith(PNG_MAGIC)
    points = [
        {"kind": "raw", "private_auc": 0.93, "utility_auc": 0.95, "pareto": True},
        {
            "kind": "infoshape",
            "param": "lambda",
            "value": 1.0,
            "private_auc": 0.53,
            "utility_auc": 0.93,
            "pareto": True,
        },
        {
            "kind": "gaussian-noise",
            "param": "sigma",
            "value": 2.0,
            "private_auc": None,
            "utility_auc": 0.8,
            "pareto": False,
        },
    ]
    assert figures.frontier_figure(points, threshold=0.7).startswith(PNG_MAGIC)
    assert figures.frontier_figure([]).startswith(PNG_MAGIC)
    # Means over several fits (error bars) and the chance band draw a different picture.
    points[1] |= {"private_auc_sd": 0.01, "utility_auc_sd": 0.005}
    band = figures.chance_band({"min": 0.49, "max": 0.53, "mean": 0.51})
    assert band == (0.49, 0.53)
    with_band = figures.frontier_figure(points, chance=band)
    assert with_band.startswith(PNG_MAGIC) and with_band != figures.frontier_figure(points)
    assert figures.chance_band(None) is None and figures.chance_band({"min": None}) is None


def test_same_data_same_bytes_and_no_pyplot() -> None:
    """Deterministic bytes (no version or date stamp) and no global pyplot state."""
    suites = {"central": {"per_attacker": {"knn": {"auc": 0.6}}}}
    assert figures.attackers_figure(suites) == figures.attackers_figure(suites)
    assert b"Software" not in figures.attackers_figure(suites)
    code = open(figures.__file__, encoding="utf-8").read().split('"""', 2)[2]  # after docstring
    assert "pyplot" not in code
