"""The demo's generated data: three clusters that kernel k-means finds, whose shares differ between the sites.

References: each row's nearest true centre (the clusters are 4 standard deviations from the
origin) and the shares the data were drawn with, with binomial tolerances.
"""

from __future__ import annotations

import numpy as np
import zarr
from scipy.spatial.distance import cdist

import streamrff as srf
from streamrff.demo import DEMO_SHARES, demo_cluster_centres, write_demo_data

N_ROWS, N_COLUMNS = 6_000, 16


def nearest_centre(rows: np.ndarray) -> np.ndarray:
    return cdist(rows, demo_cluster_centres(N_COLUMNS)).argmin(axis=1)


def test_demo_data_shares_differ_between_sites_as_drawn(tmp_path):
    for shifted, seed in ((False, 1), (True, 2)):
        rows = zarr.open_array(
            write_demo_data(tmp_path / f"{seed}.zarr", N_ROWS, N_COLUMNS, shifted=shifted, seed=seed, chunk_rows=2_500)
        )[...]
        shares = np.bincount(nearest_centre(rows), minlength=3) / N_ROWS
        tolerance = 4 * np.sqrt(0.25 / N_ROWS)  # 4 binomial standard deviations at most
        np.testing.assert_allclose(shares, DEMO_SHARES[shifted], atol=tolerance)


def test_demo_data_clusters_are_found_by_kernel_kmeans(tmp_path):
    rows = zarr.open_array(write_demo_data(tmp_path / "a.zarr", N_ROWS, N_COLUMNS, shifted=False, seed=1))[...]
    truth = nearest_centre(rows)

    labels = srf.KernelKMeans(n_clusters=3, n_features=256, seed=0).fit(rows).labels_

    # Up to the numbering of the clusters, every row but a few on the boundaries lands with its centre.
    agreement = max(
        np.mean(np.asarray(order)[labels] == truth)
        for order in ([0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0])
    )
    assert agreement > 0.97
