"""Write the golden sketch of a structured map (``RFF(structured=True)``, format version 1) under tests/data/.

    python tests/data/make_golden_v1_structured.py

The structured option was added to format version 1 after golden_v1_mean.*, so it has its own
files and script. They are a contract: tests/test_structured_map.py checks that they keep loading
with their stored fingerprint and that their numbers equal an independent numpy recomputation
(the SORF recipe with scipy's Hadamard matrix). Never regenerate them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import streamrff as srf


def golden_structured_rows() -> np.ndarray:
    """12 x 40 rows of exact binary fractions (no random stream involved); 40 columns pad to 64."""
    return ((np.arange(480.0).reshape(12, 40) * 5) % 7 - 3) / 2


def main() -> None:
    here = Path(__file__).parent
    # D = 160: 80 frequencies, one whole block of 64 rows and a partial one.
    feature_map = srf.RFF(n_features=160, bandwidth=4.0, variant="sincos", structured=True, seed=0)
    sketch = srf.sketch_array(golden_structured_rows(), feature_map)
    sketch.save(here / "golden_v1_structured.zarr")
    sketch.save(here / "golden_v1_structured.zip")


if __name__ == "__main__":
    main()
