"""Write the golden drift monitor (format "streamrff.drift-monitor", version 1) under tests/data/.

    python tests/data/make_golden_v1_drift_monitor.py

A contract: tests/test_drift.py checks that it keeps loading and that its next statistics equal a
numpy recomputation from the stored window features and reference sums. Never regenerate it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from make_golden_v1 import golden_rows

import streamrff as srf


def main() -> None:
    here = Path(__file__).parent
    rows = golden_rows()
    feature_map = srf.RFF(n_features=16, bandwidth=1.5, variant="sincos", seed=0).fit(rows)
    monitor = srf.DriftMonitor(window=5, ert=50, feature_map=feature_map, n_streams=500, n_reference_rows=64)
    monitor.fit(rows)
    monitor.update(np.arange(21.0).reshape(7, 3) / 8)  # the window wrapped once: 7 rows of a 5-row ring
    monitor.save(here / "golden_v1_drift_monitor.zarr")


if __name__ == "__main__":
    main()
