"""Wall time and p-value of streamrff.two_sample_test (one-pass permutation) vs an exact Gram-matrix test.

Data: sec. 4.2 of Sutherland & Schneider (2015) in d dimensions, X ~ N(0, I_d) and
Y ~ 0.95 N(0, I_d) + 0.05 N(0, I_d / 4), n rows each, Gaussian kernel of fixed bandwidth sigma.

Part 1, side by side for each n in ``--sizes``:

- ours: ``streamrff.two_sample_test(X, Y, n_features=D, bandwidth=sigma, n_permutations=B)`` on
  in-memory arrays with the embedded default scheduler (dask threads);
- exact: the permutation test with the exact kernel, in NumPy. The N x N Gram matrix (N = 2n) is
  built once; each permutation's statistic is read from index sums over it: with m the 0/1
  indicator of the permuted X rows, ``sum K[X, X] = m^T K m`` and ``sum K[X, Y] = m^T K 1 - m^T K m``,
  all B of them in one GEMM ``M K`` (M: B x N masks). It uses the same permutations pi_b as
  ours (``streamrff.permutation_indices``), so the two tests differ only in the kernel.
  Sizes whose Gram matrix (8 N^2 bytes) exceeds ``--max-gram-gb`` are skipped.

Part 2: ours alone at ``--big-rows`` rows per sample (d = ``--big-dim``) read from zarr arrays
that the script writes to a temporary directory, in a child process whose peak RSS comes from
the child's ``VmHWM`` (peak resident set since its exec).

Run: python benchmarks/bench_two_sample.py [--sizes 2000 5000 10000 20000] [--permutations 200]
     [--big-rows 1e6] [--features 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import streamrff as srf


def sample_problem(rng: np.random.Generator, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    X = rng.normal(size=(n, dim))
    Y = rng.normal(size=(n, dim))
    Y[rng.random(n) < 0.05] *= 0.5
    return X, Y


def exact_permutation_test(X: np.ndarray, Y: np.ndarray, bandwidth: float, n_permutations: int, seed: int):
    """Unbiased-MMD^2 permutation test with the exact Gaussian Gram matrix: (statistic, p-value)."""
    Z = np.vstack([X, Y])
    n, n_total = X.shape[0], Z.shape[0]
    m = n_total - n
    gram = np.empty((n_total, n_total))
    for start in range(0, n_total, 2000):  # row blocks keep the temporaries small
        gram[start : start + 2000] = srf.exact_kernel(Z[start : start + 2000], Z, bandwidth)
    permuted = srf.permutation_indices(seed, np.arange(n_permutations), n_total, np.arange(n_total))
    masks = np.vstack([np.arange(n_total) < n, permuted < n]).astype(np.float64)  # row 0: the observed split
    row_sums = gram.sum(axis=1)
    trace = float(np.trace(gram))  # = N for the Gaussian kernel
    sum_xx = np.einsum("bj,bj->b", masks @ gram, masks)
    mass_x = masks @ row_sums
    sum_xy = mass_x - sum_xx
    sum_yy = row_sums.sum() - 2 * mass_x + sum_xx
    diagonal_x = masks @ np.diag(gram)
    statistics = (
        (sum_xx - diagonal_x) / (n * (n - 1))
        + (sum_yy - (trace - diagonal_x)) / (m * (m - 1))
        - 2 * sum_xy / (n * m)
    )
    p_value = (1 + np.sum(statistics[1:] >= statistics[0])) / (n_permutations + 1)
    return float(statistics[0]), float(p_value)


_CHILD = """
import json, sys, time
import streamrff as srf
x_path, y_path, features, bandwidth, permutations, seed = sys.argv[1:7]
started = time.perf_counter()
result = srf.two_sample_test(x_path, y_path, n_features=int(features), bandwidth=float(bandwidth),
                             n_permutations=int(permutations), seed=int(seed))
print(json.dumps({"seconds": time.perf_counter() - started, "statistic": result.statistic,
                  "p_value": result.p_value,
                  "peak_rss_kb": int(next(line.split()[1] for line in open("/proc/self/status")
                                          if line.startswith("VmHWM:")))}))
"""


def write_zarr(path: str, rng: np.random.Generator, rows: int, dim: int, chunk_rows: int, mixture: bool) -> None:
    import zarr

    array = zarr.create_array(path, shape=(rows, dim), chunks=(chunk_rows, dim), dtype="float64")
    for start in range(0, rows, chunk_rows):
        block = rng.normal(size=(min(chunk_rows, rows - start), dim))
        if mixture:
            block[rng.random(block.shape[0]) < 0.05] *= 0.5
        array[start : start + block.shape[0]] = block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10_000, 20_000], help="rows per sample")
    parser.add_argument("--permutations", type=int, default=200, help="B, for both tests")
    parser.add_argument("--features", type=int, default=1024, help="D of ours")
    parser.add_argument("--bandwidth", type=float, default=1.0, help="sigma, for both tests")
    parser.add_argument("--dim", type=int, default=2, help="d of part 1")
    parser.add_argument("--max-gram-gb", type=float, default=12.0, help="skip exact tests with a larger Gram matrix")
    parser.add_argument("--big-rows", type=float, default=1e6, help="rows per sample of part 2 (0: skip)")
    parser.add_argument("--big-dim", type=int, default=16, help="d of part 2")
    parser.add_argument("--chunk-rows", type=int, default=100_000, help="zarr chunk rows of part 2")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    B = args.permutations

    print(f"Part 1: n rows per sample, d = {args.dim}, sigma = {args.bandwidth}, B = {B}, ours D = {args.features}, "
          f"{os.cpu_count()} cores")  # fmt: skip
    header = (
        f"{'n':>7} | {'ours s':>8} {'exact s':>8} {'exact/ours':>10} | {'ours MMD2':>10} {'exact MMD2':>10} | "
        f"{'ours p':>7} {'exact p':>7}"
    )
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        X, Y = sample_problem(np.random.default_rng([args.seed, n]), n, args.dim)
        started = time.perf_counter()
        ours = srf.two_sample_test(
            X, Y, n_features=args.features, bandwidth=args.bandwidth, n_permutations=B, seed=args.seed
        )
        ours_seconds = time.perf_counter() - started
        gram_gb = 8 * (2 * n) ** 2 / 1e9
        if gram_gb > args.max_gram_gb:
            print(
                f"{n:>7} | {ours_seconds:>8.2f} {'skipped':>8} {'':>10} | {ours.statistic:>10.3e} {'':>10} | "
                f"{ours.p_value:>7.3f} {'':>7}   (exact Gram matrix {gram_gb:.1f} GB > {args.max_gram_gb:g} GB)"
            )
            continue
        started = time.perf_counter()
        statistic, p_value = exact_permutation_test(X, Y, args.bandwidth, B, args.seed)
        exact_seconds = time.perf_counter() - started
        print(
            f"{n:>7} | {ours_seconds:>8.2f} {exact_seconds:>8.2f} {exact_seconds / ours_seconds:>10.2f} | "
            f"{ours.statistic:>10.3e} {statistic:>10.3e} | {ours.p_value:>7.3f} {p_value:>7.3f}"
        )

    rows = int(args.big_rows)
    if rows <= 0:
        return
    print(f"\nPart 2: ours alone, n = {rows} rows per sample from zarr, d = {args.big_dim}, D = {args.features}, "
          f"B = {B}, embedded default scheduler, chunks of {args.chunk_rows} rows")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_two_sample_") as directory:
        rng = np.random.default_rng([args.seed, rows])
        started = time.perf_counter()
        paths = [os.path.join(directory, name) for name in ("X.zarr", "Y.zarr")]
        write_zarr(paths[0], rng, rows, args.big_dim, args.chunk_rows, mixture=False)
        write_zarr(paths[1], rng, rows, args.big_dim, args.chunk_rows, mixture=True)
        print(f"wrote 2 x {rows * args.big_dim * 8 / 1e6:.0f} MB of zarr in {time.perf_counter() - started:.1f} s")
        command = [sys.executable, "-c", _CHILD, *paths, str(args.features), str(args.bandwidth), str(B), str(args.seed)]
        started = time.perf_counter()
        child = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if child.returncode != 0:
            sys.exit(f"the child process failed:\n{child.stderr}")
        result = json.loads(child.stdout.strip().splitlines()[-1])
        # The child's own high-water mark (VmHWM, reset by exec): ru_maxrss survives exec and would
        # count the parent's pages that the forked child mapped before it (part 1's Gram matrices).
        peak_mb = result["peak_rss_kb"] / 1024  # kB on Linux
        print(f"{'n':>9} | {'test s':>8} {'process s':>9} | {'MMD2':>10} {'p':>7} | {'peak RSS MB':>11}")
        print(
            f"{rows:>9} | {result['seconds']:>8.1f} {wall:>9.1f} | {result['statistic']:>10.3e} "
            f"{result['p_value']:>7.3f} | {peak_mb:>11.0f}"
        )


if __name__ == "__main__":
    main()
