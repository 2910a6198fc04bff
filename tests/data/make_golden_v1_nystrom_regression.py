"""Write the golden low-rank regression sketch (kind "nystrom-regression", format version 1) under tests/data/.

    python tests/data/make_golden_v1_nystrom_regression.py

The kind was added to format version 1 after golden_v1_mean.*, so it has its own files and
script. They are a contract: tests/test_fileformat.py checks that they keep loading and that
their numbers equal an independent numpy recomputation (the test matrix included). Never
regenerate them; a changed test-matrix construction gets a new scheme name and new files.
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
