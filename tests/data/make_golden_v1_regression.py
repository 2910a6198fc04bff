"""Write the golden regression sketch (kind "regression", format version 1) under tests/data/.

    python tests/data/make_golden_v1_regression.py

The kind was added to format version 1 after golden_v1_mean.*, so it has its own files and
script. They are a contract: tests/test_fileformat.py checks that they keep loading and that
their numbers equal an independent numpy recomputation. Never regenerate them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from make_golden_v1 import golden_rows

import streamrff as srf


def golden_targets() -> np.ndarray:
    """12 x 2 targets of exact binary fractions, derived from the golden rows."""
    rows = golden_rows()
    return np.column_stack([rows @ np.array([1.0, -0.5, 0.25]), rows[:, 0] * rows[:, 1]])


def main() -> None:
    here = Path(__file__).parent
    feature_map = srf.RFF(n_features=16, bandwidth=1.5, variant="sincos", seed=0).fit(golden_rows())
    sketch = srf.regression_sketch_array(golden_rows(), golden_targets(), feature_map)
    sketch.save(here / "golden_v1_regression.zarr")
    sketch.save(here / "golden_v1_regression.zip")


if __name__ == "__main__":
    main()
