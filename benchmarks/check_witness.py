"""The witness against the exact kernel witness, and top rows on a planted difference (issue #40's targets).

* exact: correlation of ``srf.witness(a, b)(points)`` with the numpy witness
  ``mean_i k(x, a_i) - mean_j k(x, b_j)`` over 2 000 points at D = 4 096 (target >= 0.99);
* planted: B is A's distribution (d = 16, 200 000 rows each) with 5% of its rows moved to a new
  small cluster; the share of planted rows among B's top 100 rows by witness (target >= 0.9),
  for ``--seeds`` seeds.

    python benchmarks/check_witness.py
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.spatial.distance import cdist

import streamrff as srf


def exact_correlation(seed: int) -> float:
    rng = np.random.default_rng(seed)
    A, B = rng.normal(size=(2000, 3)), rng.normal(0.3, 1.3, size=(2000, 3))
    bandwidth = 1.5
    rff = srf.RFF(n_features=4096, bandwidth=bandwidth, seed=seed).fit(A)
    f = srf.witness(srf.sketch_array(A, rff), srf.sketch_array(B, rff))
    points = rng.normal(0.0, 1.5, size=(2000, 3))

    def kernel(X, Y):
        return np.exp(-cdist(X, Y, "sqeuclidean") / (2 * bandwidth**2))

    exact = kernel(points, A).mean(axis=1) - kernel(points, B).mean(axis=1)
    return float(np.corrcoef(f(points), exact)[0, 1])


def planted_share(seed: int, rows: int, width: int) -> float:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(rows, width)).astype(np.float32)
    B = rng.normal(size=(rows, width)).astype(np.float32)
    planted = rng.choice(rows, rows // 20, replace=False)
    centre = rng.normal(size=width) * 0.5 + 2.0
    B[planted] = centre + 0.3 * rng.normal(size=(planted.size, width))
    rff = srf.fit_map(srf.RFF(n_features=1024, bandwidth="median", seed=seed), [A, B])
    f = srf.witness(srf.sketch(A, rff), srf.sketch(B, rff))
    top, _ = f.top_rows(B, k=100, which="smallest")
    return float(np.isin(top, planted).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    for seed in range(args.seeds):
        print(
            f"seed {seed}: correlation with the exact witness {exact_correlation(seed):.4f}; "
            f"planted rows among B's top 100: {planted_share(seed, args.rows, 16):.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
