"""Write the golden low-rank regression sketch (kind "nystrom-regression", format version 1).

    python tests/data/make_golden_v1_nystrom_regression.py

The rows, map and test matrix of golden_v1_nystrom.* with the targets of golden_v1_regression.*;
tests/test_fileformat.py recomputes every number in numpy. A contract like the other golden files:
never regenerate them.
"""

from __future__ import annotations

from pathlib import Path

from make_golden_v1 import golden_rows
from make_golden_v1_regression import golden_targets

import streamrff as srf


def main() -> None:
    here = Path(__file__).parent
    feature_map = srf.RFF(n_features=16, bandwidth=1.5, variant="sincos", seed=0).fit(golden_rows())
    sketch = srf.regression_sketch_array(golden_rows(), golden_targets(), feature_map, sketch_size=6, test_seed=3)
    sketch.save(here / "golden_v1_nystrom_regression.zarr")
    sketch.save(here / "golden_v1_nystrom_regression.zip")


if __name__ == "__main__":
    main()
