"""Built-in datasets: the InfoShape paper's synthetic task, UCI Adult and scikit-learn's digits.

Each comes with the :class:`TableSpec` the papers use, so ``--dataset NAME`` is enough to train.
Nothing here downloads: ``paper-synthetic`` is generated, ``digits`` ships with scikit-learn, and
``adult`` is read from a directory the user passes (no hard-coded paths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path

import numpy as np
import pandas as pd

from shared.data.loaders import validate_table
from shared.data.spec import TableSpec
from shared.errors import ConfigError, DataFileError

DATASETS: tuple[str, ...] = ("paper-synthetic", "adult", "digits")

ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)
ADULT_CATEGORICAL = (
    "workclass",
    "education",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "native-country",
)
_ADULT_LABELS = {"<=50K": 0, ">50K": 1}


@dataclass
class Dataset:
    """A table with the spec that says which columns are features, label and sensitive."""

    name: str
    frame: pd.DataFrame
    spec: TableSpec
    description: str = field(default="")


def load_dataset(name: str, *, path: str | Path | None = None, seed: int = 0) -> Dataset:
    """Load a built-in dataset by name (see :data:`DATASETS`).

    ``path`` is required by ``adult`` (the directory of the UCI files) and refused by the others.
    ``seed`` drives ``paper-synthetic``'s generator; the other datasets are fixed files.
    """
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    if isinstance(seed, bool) or not isinstance(seed, Integral) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed must be an integer in [0, 2**32); got {seed!r}")
    if name == "adult":
        return load_adult(path)
    if path is not None:
        raise ConfigError(
            f"dataset {name!r} is built in and takes no path; got path={str(path)!r} (pass a "
            "table file with a spec instead to use your own data)"
        )
    if name == "paper-synthetic":
        return paper_synthetic(seed=int(seed))
    return digits()


def paper_synthetic(*, seed: int = 0) -> Dataset:
    """InfoShape paper §4: 10,000 samples, 10 features, 4 classes as two bits (S = MSB, L = LSB).

    ``make_classification`` with 3 informative, 2 redundant and 5 noise features, 2 clusters per
    class on a hypercube of side 2 (``class_sep=1``), 1% of labels flipped, shuffled.
    """
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
    features = [f"x{i}" for i in range(10)]
    frame = pd.DataFrame(x, columns=features)
    c = c.astype(np.int64)
    frame["y"] = c & 1
    frame["s"] = c >> 1
    return Dataset(
        name="paper-synthetic",
        frame=frame,
        spec=TableSpec(label="y", sensitive=["s"], features=features),
        description=(
            "InfoShape paper §4 synthetic task (seed "
            f"{seed}): class c in 0..3 as bits, public label y = c & 1, sensitive s = c >> 1"
        ),
    )


def digits() -> Dataset:
    """scikit-learn's 8x8 digits (1,797 images) with paper 002's MNIST label choices.

    Features ``p0..p63`` (pixel intensities 0-16). Public label ``loop`` = digit in {0, 6, 8, 9};
    sensitive ``digit``. ``parity`` (digit % 2) and ``ge5`` (digit >= 5) are there for other
    label/sensitive choices; none of the four is a feature.
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    features = [f"p{i}" for i in range(bunch.data.shape[1])]
    frame = pd.DataFrame(bunch.data.astype(np.float64), columns=features)
    digit = bunch.target.astype(np.int64)
    frame["loop"] = np.isin(digit, [0, 6, 8, 9]).astype(np.int64)
    frame["digit"] = digit
    frame["parity"] = digit % 2
    frame["ge5"] = (digit >= 5).astype(np.int64)
    return Dataset(
        name="digits",
        frame=frame,
        spec=TableSpec(label="loop", sensitive=["digit"], features=features),
        description="scikit-learn digits: label loop (0/6/8/9), sensitive digit identity",
    )


def load_adult(path: str | Path | None) -> Dataset:
    """UCI Adult from a directory holding ``adult.data`` and optionally ``adult.test``.

    Accepts the files as UCI distributes them (no header; ``adult.test`` starts with a
    ``|1x3 Cross validator`` line) or with a header line; a single file path works too. Rows with
    a missing value (``?``) are dropped, the test labels' trailing ``.`` is removed, and
    ``income`` is 1 for ``>50K``. ``sex`` is the sensitive column. ``fnlwgt`` (the census
    sampling weight) is kept as a numeric feature, as in most uses of the dataset. A ``split``
    column (``train``/``test``) records the source file; it is not a feature.
    """
    if path is None:
        raise ConfigError(
            "dataset 'adult' needs path=DIR, the directory holding the UCI files adult.data "
            "(and optionally adult.test); got None"
        )
    root = Path(path).expanduser()
    if root.is_dir():
        files = [("train", root / "adult.data"), ("test", root / "adult.test")]
        if not files[0][1].is_file():
            raise DataFileError(
                f"adult directory '{root}' has no adult.data file; pass the directory holding "
                "the UCI Adult files"
            )
        files = [(split, f) for split, f in files if f.is_file()]
    elif root.is_file():
        files = [("test" if root.name.endswith(".test") else "train", root)]
    else:
        raise DataFileError(
            f"adult path '{root}' does not exist; pass the directory holding adult.data"
        )
    frames = [_read_adult_file(f, split) for split, f in files]
    frame = pd.concat(frames, ignore_index=True)
    features = [c for c in ADULT_COLUMNS if c not in ("sex", "income")]
    spec = TableSpec(
        label="income", sensitive=["sex"], features=features, categorical=list(ADULT_CATEGORICAL)
    )
    frame = validate_table(frame, spec, source=f"adult data in '{root}'")
    return Dataset(
        name="adult",
        frame=frame,
        spec=spec,
        description="UCI Adult: label income >50K, sensitive sex; rows with missing values dropped",
    )


def _read_adult_file(path: Path, split: str) -> pd.DataFrame:
    with path.open(encoding="utf-8", errors="replace") as handle:
        first = handle.readline()
    if not first.strip():
        raise DataFileError(f"adult file '{path}' is empty; pass the UCI Adult files")
    skip = 0
    if first.startswith("|"):
        skip = 1  # UCI's adult.test banner line
    elif first.split(",")[0].strip().lower() == "age":
        header = [h.strip() for h in first.split(",")]
        expected = list(ADULT_COLUMNS[:-1])
        if len(header) != len(ADULT_COLUMNS) or header[:-1] != expected:
            raise DataFileError(
                f"adult file '{path}' has header {', '.join(header)}; expected the 15 UCI "
                f"columns {', '.join(expected)} and a label column"
            )
        skip = 1
    try:
        frame = pd.read_csv(
            path,
            header=None,
            names=list(ADULT_COLUMNS),
            skiprows=skip,
            sep=",",
            skipinitialspace=True,
            na_values=["?"],
            index_col=False,
        )
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        detail = str(exc).strip().splitlines()[0]
        raise DataFileError(f"adult file '{path}' cannot be parsed ({detail})") from None
    for column in frame.columns:
        if frame[column].dtype == object or pd.api.types.is_string_dtype(frame[column].dtype):
            frame[column] = frame[column].str.strip()
    frame = frame.dropna().reset_index(drop=True)
    label = frame["income"].str.rstrip(".")
    known = label.isin(list(_ADULT_LABELS))
    if not known.all():
        row = int(np.argmax(~known.to_numpy()))
        raise DataFileError(
            f"adult file '{path}' has income value {label.iloc[row]!r} (complete row {row + 1}); "
            f"expected one of {', '.join(_ADULT_LABELS)}"
        )
    frame["income"] = label.map(_ADULT_LABELS).astype(np.int64)
    frame["split"] = split
    return frame
