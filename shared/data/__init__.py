"""Tables for InfoShape: specs, validated loading, the fitted input schema, datasets, partitions.

Everything a site or the coordinator needs to turn a CSV/Parquet table into the float matrix an
encoder reads, with errors that name the file, column, value and row.
"""

from shared.data.datasets import DATASETS, Dataset, load_dataset
from shared.data.loaders import load_table, read_table, validate_table
from shared.data.partition import (
    Scheme,
    parse_scheme,
    partition_indices,
    split_frame,
    split_indices,
)
from shared.data.schema import InputSchema, fingerprint_frame
from shared.data.spec import TableSpec

__all__ = [
    "DATASETS",
    "Dataset",
    "InputSchema",
    "Scheme",
    "TableSpec",
    "fingerprint_frame",
    "load_dataset",
    "load_table",
    "parse_scheme",
    "partition_indices",
    "read_table",
    "split_frame",
    "split_indices",
    "validate_table",
]
