"""Write the format-version-1 golden sketches under tests/data/ (run once per format version).

    python tests/data/make_golden_v1.py

The files are a contract: tests/test_fileformat.py checks that they keep loading and
that their numbers equal an independent numpy recomputation. Never regenerate them
for an existing version; add ``golden_v2_*`` for a new one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import streamrff as srf


def golden_rows() -> np.ndarray:
    """12 x 3 rows of exact binary fractions (no random stream involved)."""
    return ((np.arange(36.0).reshape(12, 3) * 5) % 7 - 3) / 2


def main() -> None:
    here = Path(__file__).parent
    feature_map = srf.RFF(n_features=16, bandwidth=1.5, variant="sincos", seed=0)
    sketch = srf.sketch_array(golden_rows(), feature_map, moments=True)
    sketch.save(here / "golden_v1_mean.zarr")
    sketch.save(here / "golden_v1_mean.zip")


if __name__ == "__main__":
    main()
