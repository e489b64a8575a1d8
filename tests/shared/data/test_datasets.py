"""Built-in datasets: paper-synthetic (paper §4), digits, UCI Adult (from a user path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shared.data import DATASETS, InputSchema, load_dataset
from shared.errors import ConfigError, DataFileError

ADULT_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "adult"

UCI_ROWS = [
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, "
    "Male, 2174, 0, 40, United-States, <=50K",
    "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, "
    "White, Male, 0, 0, 13, United-States, >50K",
    "38, Private, 215646, HS-grad, 9, Divorced, ?, Not-in-family, White, Female, 0, 0, 40, "
    "United-States, <=50K",
    "31, Private, 45781, Masters, 14, Never-married, Prof-specialty, Not-in-family, White, "
    "Female, 14084, 0, 50, United-States, >50K",
]


def test_names() -> None:
    assert DATASETS == ("paper-synthetic", "adult", "digits")


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(
        ConfigError, match="unknown dataset 'mnist'; valid names: paper-synthetic, adult, digits"
    ):
        load_dataset("mnist")


def test_bad_seed_and_path_for_built_in(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="seed must be an integer"):
        load_dataset("paper-synthetic", seed=-1)
    with pytest.raises(ConfigError, match="'digits' is built in and takes no path"):
        load_dataset("digits", path=tmp_path)


def test_paper_synthetic(seed: int) -> None:
    data = load_dataset("paper-synthetic", seed=seed)
    frame = data.frame
    assert frame.shape == (10000, 12)
    assert list(frame.columns) == [f"x{i}" for i in range(10)] + ["y", "s"]
    assert data.spec.label == "y" and data.spec.sensitive == ["s"]
    assert data.spec.features == [f"x{i}" for i in range(10)]
    classes = (2 * frame["s"] + frame["y"]).value_counts()
    assert sorted(classes.index) == [0, 1, 2, 3]
    assert classes.min() > 2300 and classes.max() < 2700  # balanced, 1% flipped
    assert frame[[f"x{i}" for i in range(10)]].dtypes.eq(np.float64).all()


def test_paper_synthetic_matches_sklearn_and_is_seeded(seed: int) -> None:
    from sklearn.datasets import make_classification

    x, c = make_classification(
        n_samples=10000,
        n_features=10,
        n_informative=3,
        n_redundant=2,
        n_repeated=0,
        n_classes=4,
        n_clusters_per_class=2,
        flip_y=0.01,
        class_sep=1.0,
        hypercube=True,
        shuffle=True,
        random_state=seed,
    )
    frame = load_dataset("paper-synthetic", seed=seed).frame
    np.testing.assert_array_equal(frame.iloc[:, :10].to_numpy(), x)
    np.testing.assert_array_equal(frame["s"], c >> 1)
    np.testing.assert_array_equal(frame["y"], c & 1)
    again = load_dataset("paper-synthetic", seed=seed).frame
    pd.testing.assert_frame_equal(frame, again)
    other = load_dataset("paper-synthetic", seed=seed + 1).frame
    assert not frame.equals(other)


def test_digits() -> None:
    data = load_dataset("digits")
    frame = data.frame
    assert frame.shape == (1797, 68)
    assert data.spec.features == [f"p{i}" for i in range(64)]
    assert data.spec.label == "loop" and data.spec.sensitive == ["digit"]
    assert sorted(frame["digit"].unique()) == list(range(10))
    assert (frame["loop"] == frame["digit"].isin([0, 6, 8, 9])).all()
    assert (frame["parity"] == frame["digit"] % 2).all()
    assert (frame["ge5"] == (frame["digit"] >= 5)).all()
    schema = InputSchema.fit(frame, data.spec)
    assert schema.n_outputs == 64 and len(schema.sensitive_classes["digit"]) == 10


def test_adult_needs_a_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'adult' needs path=DIR, the directory holding"):
        load_dataset("adult")
    with pytest.raises(DataFileError, match="has no adult.data file"):
        load_dataset("adult", path=tmp_path)
    with pytest.raises(DataFileError, match="does not exist"):
        load_dataset("adult", path=tmp_path / "nope")


def test_adult_raw_uci_files(tmp_path: Path) -> None:
    """The files as UCI ships them: no header, a banner in adult.test, '.' after test labels."""
    (tmp_path / "adult.data").write_text("\n".join(UCI_ROWS[:3]) + "\n\n")
    test_rows = [r + "." for r in UCI_ROWS[1:]]
    (tmp_path / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(test_rows) + "\n")
    data = load_dataset("adult", path=tmp_path)
    frame = data.frame
    assert len(frame) == 2 + 2  # the '?' row is dropped from both files
    assert frame["income"].tolist() == [0, 1, 1, 1]
    assert frame["split"].tolist() == ["train", "train", "test", "test"]
    assert frame["workclass"].iloc[0] == "State-gov"
    assert "split" not in data.spec.features and "sex" not in data.spec.features
    assert "fnlwgt" in data.spec.features


def test_adult_bad_label(tmp_path: Path) -> None:
    (tmp_path / "adult.data").write_text(UCI_ROWS[0].replace("<=50K", "maybe") + "\n")
    with pytest.raises(DataFileError, match="income value 'maybe'"):
        load_dataset("adult", path=tmp_path)


@pytest.mark.skipif(not ADULT_DIR.is_dir(), reason="UCI Adult files not present")
def test_adult_full() -> None:
    data = load_dataset("adult", path=ADULT_DIR)
    frame = data.frame
    assert 45000 <= len(frame) <= 45500  # 45,222 complete rows
    assert sorted(frame["income"].unique()) == [0, 1]
    assert sorted(frame["sex"].unique()) == ["Female", "Male"]
    assert not frame.isna().any().any()
    assert not frame["workclass"].str.startswith(" ").any()
    schema = InputSchema.fit(frame, data.spec)
    assert "workclass=Private" in schema.output_names
    assert schema.label_classes == ["0", "1"]
    assert "split" not in schema.features
