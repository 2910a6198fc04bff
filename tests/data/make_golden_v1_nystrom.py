"""Write the golden Nystrom sketch (kind "nystrom", format version 1) under tests/data/.

    python tests/data/make_golden_v1_nystrom.py

The kind was added to format version 1 after golden_v1_mean.*, so it has its own files and
script. They are a contract: tests/test_fileformat.py checks that they keep loading and that
their numbers equal an independent numpy recomputation (the test matrix included). Never
regenerate them; a changed test-matrix construction gets a new scheme name and new files.
"""

from __future__ import annotations

from pathlib import Path

from make_golden_v1 import golden_rows

import streamrff as srf


def main() -> None:
    here = Path(__file__).parent
    feature_map = srf.RFF(n_features=16, bandwidth=1.5, variant="sincos", seed=0).fit(golden_rows())
    sketch = srf.NystromSketch.from_rows(golden_rows(), feature_map, sketch_size=6, test_seed=3)
    sketch.save(here / "golden_v1_nystrom.zarr")
    sketch.save(here / "golden_v1_nystrom.zip")


if __name__ == "__main__":
    main()
