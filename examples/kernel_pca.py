"""Kernel PCA from one mergeable moment sketch, on scikit-learn's bundled digits.

Shows: KernelPCA.fit (one pass with second moments), explained variance, the residual R_k, and
fitting from two sites' merged sketches (equal to fitting on all rows).

Run: python examples/kernel_pca.py [--features 1024]
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits

import streamrff as srf


def main(n_features: int) -> None:
    X = load_digits().data.astype("float32")
    kpca = srf.KernelPCA(n_components=10, n_features=n_features, bandwidth="median").fit(X)
    print("explained variance ratio:", np.round(kpca.explained_variance_ratio_, 3))
    print(f"residual R_10 = {kpca.residual_:.1f}")

    half = len(X) // 2
    site_a = srf.sketch(X[:half], kpca.feature_map_, moments=True)
    site_b = srf.sketch(X[half:], kpca.feature_map_, moments=True)
    merged = srf.KernelPCA(n_components=10).fit_from_sketch(srf.merge(site_a, site_b))
    print("merged fit equals whole fit:", np.allclose(merged.explained_variance_, kpca.explained_variance_, rtol=1e-6))
    print("scores of the first digit:", np.round(kpca.transform(X[:1])[0, :3], 3))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=1024)
    main(parser.parse_args().features)
