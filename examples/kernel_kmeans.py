"""Kernel k-means on nested rings, where linear k-means cannot separate the clusters.

Shows: KernelKMeans with random Fourier features (method="rff") and with the K-JL sketch
(method="kjl"), one pass over the data per Lloyd iteration, per-iteration progress, and lazy labels
for out-of-core input (a dask array here; a zarr path works the same way).

Run: python examples/kernel_kmeans.py [--rows 5000]
"""

from __future__ import annotations

import argparse

import dask.array as da
from sklearn.cluster import KMeans
from sklearn.datasets import make_circles
from sklearn.metrics import adjusted_rand_score

from streamrff.kmeans import KernelKMeans


def main(rows: int) -> None:
    X, truth = make_circles(rows, factor=0.3, noise=0.05, random_state=0)
    linear = KMeans(n_clusters=2, n_init=10, random_state=0).fit_predict(X)
    print(f"linear k-means: adjusted Rand index {adjusted_rand_score(truth, linear):.3f}")

    for method in ("rff", "kjl"):
        model = KernelKMeans(n_clusters=2, method=method, bandwidth=0.3, seed=0)
        model.fit(da.from_array(X, chunks=max(1, rows // 4)),
                  callback=lambda step: print(f"  iteration {step.iteration}: inertia {step.inertia:.4g}"))
        labels = model.predict(da.from_array(X, chunks=max(1, rows // 4))).compute()  # lazy until here
        print(f"kernel k-means ({method}): adjusted Rand index {adjusted_rand_score(truth, labels):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    main(parser.parse_args().rows)
