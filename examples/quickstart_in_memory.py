"""Quickstart in memory: sketch two numpy samples with one random Fourier feature map and compare them.

Shows: fitting a map with the median-heuristic bandwidth, sketching in memory, the unbiased MMD^2 from
two sketches, and how close it is to the exact value from the full Gram matrix.

Run: python examples/quickstart_in_memory.py [--rows 2000]
"""

from __future__ import annotations

import argparse

import numpy as np

import streamrff as srf


def main(rows: int) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 4)).astype("float32")
    Y = rng.normal(loc=0.3, size=(rows, 4)).astype("float32")

    rff = srf.RFF(n_features=2048, bandwidth="median", seed=0).fit(np.vstack([X, Y]))
    sketch_x, sketch_y = srf.sketch_array(X, rff), srf.sketch_array(Y, rff)
    estimate = srf.mmd2(sketch_x, sketch_y)

    sigma = rff.bandwidth_
    kxx, kyy, kxy = (srf.exact_kernel(A, B, sigma) for A, B in ((X, X), (Y, Y), (X, Y)))
    n = rows
    exact = (kxx.sum() - n) / (n * (n - 1)) + (kyy.sum() - n) / (n * (n - 1)) - 2 * kxy.mean()
    print(f"bandwidth (median heuristic): {sigma:.3f}")
    print(f"MMD^2 from sketches: {estimate:.5f}   exact: {exact:.5f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    main(parser.parse_args().rows)
