"""Write the golden sketch with a column part (``columns=True``, column format version 1) under tests/data/.

    python tests/data/make_golden_v1_columns.py

The column part was added to sketch format version 1 after golden_v1_mean.*, so it has its own
file and script. It is a contract: tests/test_columns.py checks that it keeps loading and that its
numbers equal an independent numpy recomputation from the documented derivation of the column
maps (docs/file_format.rst). Never regenerate it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import streamrff as srf


def golden_column_rows() -> np.ndarray:
    """12 x 3 rows of exact binary fractions (no random stream involved)."""
    return ((np.arange(36.0).reshape(12, 3) * 5) % 7 - 3) / 2


def main() -> None:
    here = Path(__file__).parent
    feature_map = srf.RFF(n_features=16, bandwidth=1.5, variant="sincos", seed=0)
    sketch = srf.sketch_array(golden_column_rows(), feature_map, moments=True, columns=True, column_features=8)
    sketch.save(here / "golden_v1_columns.zarr")


if __name__ == "__main__":
    main()
