"""Power of the three nulls of streamrff's two-sample test against the exact Gram-matrix test.

For each problem and sample size, over ``--reps`` data sets, the share rejected at level 0.05 by:

- exact: the unbiased-MMD^2 permutation test with the exact Gaussian kernel, in NumPy (the Gram
  matrix of the pooled rows and the same keyed permutations as ours; ``bench_two_sample.py``);
- permutation: ``streamrff.two_sample_test`` (the one-pass exact permutation test of the RFF
  statistic);
- spectral and hotelling: :func:`streamrff.mmd_test` on the moment sketches of X and Y.

All use one kernel per data set: a sincos RFF map (D = ``--features``) with the median-heuristic
bandwidth fitted on the pooled rows; the exact test uses that bandwidth. Problems:

- blobs (Gretton et al. 2012; Jitkrittum et al. 2016): a 3 x 3 grid of Gaussian clusters with
  spacing 3; X's clusters are N(mu, I), Y's have covariance eigenvalues (eps, 1) rotated by 45
  degrees, eps = 1 + 3 sqrt(200 / n) (4 at n = 200; at eps = 4 every test has power 1.00 at
  n = 2 000). The samples differ at the scale of a cluster, below the median distance (~4.8); with
  spacing 10 the median bandwidth (~13) sees no difference at all (power ~ level);
- mean shift: N(0, I_5) against N(delta e_1, I_5), delta = 0.25 sqrt(200 / n): as hard at every n
  for a test of the means (at delta = 0.25 every test has power 1.00 at n = 2 000);
- same (level): blobs against blobs from the same law, so the rejection rate is the test's size.

Run: python benchmarks/bench_null_power.py [--sizes 200 2000] [--reps 100 40] [--permutations 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_two_sample import exact_permutation_test
from threadpoolctl import threadpool_limits

import streamrff as srf

LEVEL = 0.05
METHODS = ("exact", "permutation", "spectral", "hotelling")


def blobs(rng: np.random.Generator, n: int, ratio: float) -> np.ndarray:
    """n rows from a 3 x 3 grid of clusters (spacing 3) with covariance eigenvalues (ratio, 1) at 45 degrees."""
    centres = 3.0 * rng.integers(0, 3, size=(n, 2))
    angle = np.pi / 4
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    scales = np.sqrt([ratio, 1.0])
    return centres + (rng.normal(size=(n, 2)) * scales) @ rotation.T


def problem(name: str, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    if name == "blobs":
        return blobs(rng, n, 1.0), blobs(rng, n, 1.0 + 3.0 * np.sqrt(200 / n))
    if name == "mean shift":
        return rng.normal(size=(n, 5)), rng.normal(size=(n, 5)) + np.r_[0.25 * np.sqrt(200 / n), np.zeros(4)]
    return blobs(rng, n, 1.0), blobs(rng, n, 1.0)  # "same": the level


def rejections(
    name: str, n: int, reps: int, features: int, permutations: int
) -> tuple[dict[str, float], dict[str, float]]:
    rejected = {method: 0 for method in METHODS}
    seconds = {method: 0.0 for method in METHODS}
    for rep in range(reps):
        X, Y = problem(name, np.random.default_rng(1000 * n + rep), n)
        feature_map = srf.RFF(n_features=features, seed=rep).fit(np.vstack([X, Y]))
        started = time.perf_counter()
        _, p_exact = exact_permutation_test(X, Y, feature_map.bandwidth_, permutations, seed=rep)
        seconds["exact"] += time.perf_counter() - started
        started = time.perf_counter()
        p_values = {"exact": p_exact}
        result = srf.two_sample_test(X, Y, feature_map=feature_map, n_permutations=permutations, seed=rep)
        p_values["permutation"] = result.p_value
        seconds["permutation"] += time.perf_counter() - started
        started = time.perf_counter()
        sketch_x = srf.sketch_array(X, feature_map, moments=True)
        sketch_y = srf.sketch_array(Y, feature_map, moments=True)
        shared = time.perf_counter() - started
        for method in ("spectral", "hotelling"):
            started = time.perf_counter()
            p_values[method] = srf.mmd_test(sketch_x, sketch_y, method=method, seed=rep).p_value
            seconds[method] += shared + time.perf_counter() - started
        for method, p_value in p_values.items():
            rejected[method] += p_value <= LEVEL
    return {method: rejected[method] / reps for method in METHODS}, {m: s / reps for m, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 2000], help="rows per sample")
    parser.add_argument("--reps", type=int, nargs="+", default=[100, 40], help="data sets per size")
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--problems", nargs="+", default=["blobs", "mean shift", "same"])
    args = parser.parse_args()
    # One BLAS thread: on a shared machine, threaded eigh / GEMMs of D x D moments oversubscribe the
    # cores and run 10-50x slower (the tests' answers do not depend on it).
    threadpool_limits(1)
    reps = dict(zip(args.sizes, args.reps + args.reps[-1:] * len(args.sizes)))
    print(f"Rejection rate at level {LEVEL} (power; size for 'same'), D = {args.features}, "
          f"B = {args.permutations}, median bandwidth")  # fmt: skip
    print(f"{'problem':<12}{'n':>6}{'reps':>6}" + "".join(f"{method:>13}" for method in METHODS))
    for name in args.problems:
        for n in args.sizes:
            rates, seconds = rejections(name, n, reps[n], args.features, args.permutations)
            print(f"{name:<12}{n:>6}{reps[n]:>6}" + "".join(f"{rates[method]:>13.2f}" for method in METHODS)
                  + "   s/test: " + " ".join(f"{seconds[method]:.2f}" for method in METHODS))  # fmt: skip


if __name__ == "__main__":
    main()
