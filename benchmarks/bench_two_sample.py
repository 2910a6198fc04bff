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

Part 3 (``--power``): power of the aggregated multi-bandwidth test (``method="aggregated"``, its
``bandwidths="auto"`` grid of 10 widths) next to the single-bandwidth median-heuristic test and the
exact in-memory (Gram-matrix) versions of both, on the same data and the same permutations, at
``--power-rows`` rows per sample over ``--power-reps`` data sets per alternative:

- periodic-1d: X ~ U[0, 1], Y with density 1 + a sin(2 pi k y) (k = 12, a = 0.6): a fine periodic
  perturbation of a smooth density, as in the perturbed-uniform experiments of MMDAgg
  (Schrab et al. 2023, sec. 5);
- periodic-2d: X ~ U[0, 1]^2, Y with density 1 + a sin(2 pi k y1) sin(2 pi k y2) (k = 5, a = 0.8);
- mixture-scale: both samples the same 3 x 3 grid of Gaussian clusters (spacing 1); the clusters
  of Y have 1.4 times the standard deviation (0.05) of those of X: the components differ only
  below the scale of the median distance;
- mean-shift: N(0, I_2) vs N((delta, 0), I_2), delta = 0.2.

The aggregated test's other aggregations (fuse, mmdagg) are computed from the same run's per-bandwidth
statistics. Power = share of data sets rejected at alpha = 0.05; ratios aggregated / median.
Measured (2026-11-24, 2 shared cores, load 2-7, ``--power`` defaults): aggregated (max) / median
power 0.80 / 0.04 (periodic-1d), 0.42 / 0.08 (periodic-2d), 0.92 / 0.08 (mixture-scale), 0.73 / 0.83
(mean-shift); exact aggregated 0.84, 0.50, 0.95, 0.76. Ours took 0.17-0.22 s per aggregated test
and 0.04-0.06 s per median test (10 bandwidths: 3.7-4.3x), the exact aggregated test 0.67-0.98 s.

Part 4 (``--ratio``): the cost of the aggregated test over the single-bandwidth test at equal B, on
``--ratio-rows`` rows per sample (default 200 000) of the part-1 data in d = ``--dim``: both
``streamrff.two_sample_test`` calls with their defaults (``bandwidths="auto"``, 10 widths, against
``bandwidth="median"``), best of ``--ratio-repeats`` interleaved runs. The 10 bandwidths' maps are
scaled copies of one Gaussian draw, so each row tile is projected once for all of them and the
permutation membership is evaluated once; what stays per bandwidth is the sin/cos evaluation, the
rows' squared norms and the B x t x D float32 GEMM of each tile (most of it). Target: ratio <= 5.

Run: python benchmarks/bench_two_sample.py [--sizes 2000 5000 10000 20000] [--permutations 200]
     [--big-rows 1e6] [--features 1024]
     python benchmarks/bench_two_sample.py --power [--power-reps 100] [--power-rows 500]
     python benchmarks/bench_two_sample.py --ratio [--ratio-rows 200000] [--permutations 200]
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


def exact_permutation_statistics(gram: np.ndarray, n: int, masks: np.ndarray) -> np.ndarray:
    """Unbiased MMD^2 of each X mask (rows of ``masks``) from the exact Gram matrix of the pooled rows."""
    n_total = gram.shape[0]
    m = n_total - n
    row_sums = gram.sum(axis=1)
    trace = float(np.trace(gram))  # = N for the Gaussian kernel
    sum_xx = np.einsum("bj,bj->b", masks @ gram, masks)
    mass_x = masks @ row_sums
    sum_xy = mass_x - sum_xx
    sum_yy = row_sums.sum() - 2 * mass_x + sum_xx
    diagonal_x = masks @ np.diag(gram)
    return (
        (sum_xx - diagonal_x) / (n * (n - 1))
        + (sum_yy - (trace - diagonal_x)) / (m * (m - 1))
        - 2 * sum_xy / (n * m)
    )


def permutation_masks(seed: int, n_permutations: int, n: int, n_total: int) -> np.ndarray:
    """X masks of the observed split (row 0) and of streamrff's permutations pi_1..pi_B."""
    permuted = srf.permutation_indices(seed, np.arange(n_permutations), n_total, np.arange(n_total))
    return np.vstack([np.arange(n_total) < n, permuted < n]).astype(np.float64)


def exact_permutation_test(X: np.ndarray, Y: np.ndarray, bandwidth: float, n_permutations: int, seed: int):
    """Unbiased-MMD^2 permutation test with the exact Gaussian Gram matrix: (statistic, p-value)."""
    Z = np.vstack([X, Y])
    n, n_total = X.shape[0], Z.shape[0]
    gram = np.empty((n_total, n_total))
    for start in range(0, n_total, 2000):  # row blocks keep the temporaries small
        gram[start : start + 2000] = srf.exact_kernel(Z[start : start + 2000], Z, bandwidth)
    masks = permutation_masks(seed, n_permutations, n, n_total)
    statistics = exact_permutation_statistics(gram, n, masks)
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


# ---------------------------------------------------------------------------
# Part 3: power of the aggregated test
# ---------------------------------------------------------------------------
def _rejection_sample(rng: np.random.Generator, n: int, dim: int, density, bound: float) -> np.ndarray:
    """n rows on [0, 1]^dim with density proportional to ``density`` (at most ``bound``), by rejection."""
    rows = np.empty((0, dim))
    while rows.shape[0] < n:
        proposals = rng.random((2 * n, dim))
        accepted = proposals[rng.random(2 * n) * bound < density(proposals)]
        rows = np.vstack([rows, accepted])
    return rows[:n]


def periodic_1d(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    k, a = 12, 0.6
    Y = _rejection_sample(rng, n, 1, lambda y: 1 + a * np.sin(2 * np.pi * k * y[:, 0]), 1 + a)
    return rng.random((n, 1)), Y


def periodic_2d(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    k, a = 4, 1.0
    density = lambda y: 1 + a * np.sin(2 * np.pi * k * y[:, 0]) * np.sin(2 * np.pi * k * y[:, 1])  # noqa: E731
    return rng.random((n, 2)), _rejection_sample(rng, n, 2, density, 1 + a)


def mixture_scale(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    centres = np.array([(i, j) for i in range(3) for j in range(3)], dtype=float)

    def draw(scale: float) -> np.ndarray:
        return centres[rng.integers(0, 9, n)] + rng.normal(scale=scale, size=(n, 2))

    return draw(0.02), draw(0.02 * 1.4)


def mean_shift(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(size=(n, 2)), rng.normal(size=(n, 2)) + [0.2, 0.0]


ALTERNATIVES = {"periodic-1d": periodic_1d, "periodic-2d": periodic_2d, "mixture-scale": mixture_scale,
                "mean-shift": mean_shift}  # fmt: skip
ALPHA = 0.05


def _squared_distances(Z: np.ndarray) -> np.ndarray:
    norms = np.einsum("ij,ij->i", Z, Z)
    return np.maximum(norms[:, None] + norms[None, :] - 2 * Z @ Z.T, 0.0)


def power_of(sampler, reps: int, n: int, features: int, permutations: int, seed: int) -> dict[str, float]:
    """Rejection rates at ALPHA of ours (aggregated, median) and of the exact Gram-matrix versions."""
    from streamrff.twosample.aggregated import aggregated_p_value

    rejections: dict[str, int] = {}
    seconds = {"ours agg": 0.0, "ours median": 0.0, "exact agg": 0.0}

    def count(name: str, p_value: float) -> None:
        rejections[name] = rejections.get(name, 0) + int(p_value <= ALPHA)

    for rep in range(reps):
        X, Y = sampler(np.random.default_rng([seed, rep]), n)
        started = time.perf_counter()
        aggregated = srf.two_sample_test(
            X, Y, n_features=features, n_permutations=permutations, seed=rep, method="aggregated"
        )
        seconds["ours agg"] += time.perf_counter() - started
        started = time.perf_counter()
        median = srf.two_sample_test(X, Y, n_features=features, n_permutations=permutations, seed=rep)
        seconds["ours median"] += time.perf_counter() - started
        values = np.column_stack([aggregated.statistics, aggregated.null_statistics])
        for aggregation in ("max", "fuse", "mmdagg"):
            count(f"ours agg-{aggregation}", aggregated_p_value(values, aggregation, np.zeros(values.shape[0]))[0])
        count("ours median", median.p_value)
        # The exact versions: the same bandwidths and the same permutations, Gram matrices instead of features.
        started = time.perf_counter()
        Z = np.vstack([X, Y])
        squared = _squared_distances(Z)
        masks = permutation_masks(rep, permutations, n, 2 * n)
        exact = np.vstack([
            exact_permutation_statistics(np.exp(-squared / (2 * bandwidth**2)), n, masks)
            for bandwidth in aggregated.bandwidths
        ])  # fmt: skip
        count("exact agg-max", aggregated_p_value(exact, "max", np.zeros(exact.shape[0]))[0])
        seconds["exact agg"] += time.perf_counter() - started
        single = exact_permutation_statistics(np.exp(-squared / (2 * median.bandwidth**2)), n, masks)
        count("exact median", float((1 + np.sum(single[1:] >= single[0])) / (permutations + 1)))
    power = {name: value / reps for name, value in rejections.items()}
    return power, {name: value / reps for name, value in seconds.items()}


def power_table(args: argparse.Namespace) -> None:
    names = ["ours agg-max", "ours agg-fuse", "ours agg-mmdagg", "ours median", "exact agg-max", "exact median"]
    print(f"Part 3: power at alpha = {ALPHA}, n = {args.power_rows} + {args.power_rows}, {args.power_reps} data sets "
          f"per alternative, B = {args.power_permutations}, D = {args.power_features} per bandwidth, "
          "bandwidths='auto' (10)")  # fmt: skip
    timings = []
    header = f"{'alternative':>14} | " + " ".join(f"{name:>15}" for name in names) + " | agg-max/median"
    print(header)
    print("-" * len(header))
    for label in args.alternatives:
        started = time.perf_counter()
        power, seconds = power_of(ALTERNATIVES[label], args.power_reps, args.power_rows, args.power_features,
                                  args.power_permutations, args.seed)  # fmt: skip
        ratio = power["ours agg-max"] / max(power["ours median"], 1e-12)
        print(f"{label:>14} | " + " ".join(f"{power[name]:>15.2f}" for name in names) + f" | {ratio:>8.2f}"
              f"   ({time.perf_counter() - started:.0f} s)")  # fmt: skip
        timings.append((label, seconds))
    print("\nseconds per test (wall; ours on the embedded local scheduler; exact agg: 10 Gram matrices and "
          "their (B + 1) x N x N products in numpy)")  # fmt: skip
    print(f"{'alternative':>14} | {'ours agg':>9} {'ours median':>11} {'agg/median':>10} | {'exact agg':>9}")
    for label, seconds in timings:
        print(f"{label:>14} | {seconds['ours agg']:>9.3f} {seconds['ours median']:>11.3f} "
              f"{seconds['ours agg'] / seconds['ours median']:>10.2f} | {seconds['exact agg']:>9.3f}")  # fmt: skip


def cost_ratio(args: argparse.Namespace) -> None:
    """Part 4: wall time of the aggregated test (10 bandwidths) over the single-bandwidth test, equal B."""
    n, B = args.ratio_rows, args.permutations
    X, Y = sample_problem(np.random.default_rng([args.seed, n, 4]), n, args.dim)
    print(f"Part 4: aggregated (bandwidths='auto', 10 widths) / single-bandwidth (median) permutation test, "
          f"n = {n} rows per sample, d = {args.dim}, D = {args.features} per bandwidth, B = {B}, best of "
          f"{args.ratio_repeats}")  # fmt: skip
    srf.two_sample_test(X[:500], Y[:500], n_features=args.features, n_permutations=B, method="aggregated")  # compile
    seconds: dict[str, float] = {}
    for _ in range(args.ratio_repeats):  # interleaved, so that a change of load hits both
        for method in ("permutation", "aggregated"):
            started = time.perf_counter()
            srf.two_sample_test(X, Y, n_features=args.features, n_permutations=B, seed=args.seed, method=method)
            seconds[method] = min(seconds.get(method, np.inf), time.perf_counter() - started)
    ratio = seconds["aggregated"] / seconds["permutation"]
    print(f"{'single s':>9} {'aggregated s':>12} {'ratio':>6}")
    print(f"{seconds['permutation']:>9.2f} {seconds['aggregated']:>12.2f} {ratio:>6.2f}   (target <= 5)")


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
    parser.add_argument("--power", action="store_true", help="run part 3 (power of the aggregated test) only")
    parser.add_argument("--power-reps", type=int, default=100, help="data sets per alternative in part 3")
    parser.add_argument("--power-rows", type=int, default=500, help="rows per sample in part 3")
    parser.add_argument("--power-features", type=int, default=512, help="D per bandwidth in part 3")
    parser.add_argument("--power-permutations", type=int, default=199, help="B in part 3")
    parser.add_argument("--alternatives", nargs="+", default=list(ALTERNATIVES), choices=list(ALTERNATIVES))
    parser.add_argument("--ratio", action="store_true", help="run part 4 (aggregated / single-bandwidth cost) only")
    parser.add_argument("--ratio-rows", type=int, default=200_000, help="rows per sample in part 4")
    parser.add_argument("--ratio-repeats", type=int, default=3, help="runs of each test in part 4 (best kept)")
    args = parser.parse_args()
    if args.power:
        power_table(args)
        return
    if args.ratio:
        cost_ratio(args)
        return
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
        command = [
            sys.executable, "-c", _CHILD, *paths, str(args.features), str(args.bandwidth), str(B), str(args.seed)
        ]  # fmt: skip
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
