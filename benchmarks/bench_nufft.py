"""The type-3 NUFFT fast path (``streamrff.maps.nufft``) next to the direct path, side by side in one run.

Generates N float32 rows of a d-dimensional Gaussian mixture in memory, fits one ``RFF`` on them
(bandwidth by the median heuristic unless given), splits the rows into chunks of ``--chunk-rows``
(default 1e6, or N / threads if smaller)
and times, on a pool of ``--threads`` Python threads with BLAS limited to one thread per task
(as the engine runs chunk tasks):

* direct - ``streamrff.sketches.mean.mean_sketch_of_chunk(chunk, rff, method="direct")`` per chunk (float32 embedding,
           float64 sums), partial sums added;
* nufft  - ``streamrff.maps.nufft.nufft_mean_sums(chunk, rff, nthreads=1)`` per chunk on the same pool,
           at each size of ``--sweep-chunk-rows`` (default: 1e5, 1e6 and all rows in one chunk,
           which runs on one core; all rows are also timed as one call with ``nthreads=--threads``,
           which uses every core).

Both paths use the same rows and the same number of cores. It prints seconds, the ratio
direct / nufft (the issue's target: >= 20x at N = 1e7, d = 2, D = 4096) and the norm-wise
relative differences ``||a - b|| / ||b||`` of the feature sums and of the squared-norm sums against
the direct path, plus the cost model's predicted speed-up and its decision (``nufft_applies``).
``--engine`` also times ``streamrff.sketch`` (the embedded local default) on the same rows, to
show that the pool above runs the direct path as fast as the engine does.

``--calibrate`` instead measures the cost model's constants on this machine (a minute or two)
and prints them in the form ``streamrff/nufft.py`` keeps them.

Run: python benchmarks/bench_nufft.py [--rows 1e7] [--dim 2] [--features 4096] [--chunk-rows 1e6]
     [--threads 2] [--bandwidth median] [--variant sincos] [--sweep-chunk-rows 1e5,1e6,1e7]
     [--engine] [--repeat 1]
     python benchmarks/bench_nufft.py --calibrate
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from bench_sketch import count, counts  # same directory: the shared "1e6"-style argument parsers


def mixture(n_rows: int, dim: int, seed: int = 0) -> np.ndarray:
    """Float32 rows from a mixture of 6 Gaussians in [-5, 5]^dim with unequal widths and weights."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-5.0, 5.0, size=(6, dim))
    widths = rng.uniform(0.3, 1.2, size=6)
    weights = rng.dirichlet(np.ones(6))
    labels = rng.choice(6, size=n_rows, p=weights)
    rows = rng.standard_normal((n_rows, dim), dtype=np.float32)
    rows *= widths[labels, None].astype(np.float32)
    rows += centres[labels].astype(np.float32)
    return rows


def chunks_of(rows: np.ndarray, chunk_rows: int) -> list[np.ndarray]:
    return [rows[start : start + chunk_rows] for start in range(0, rows.shape[0], chunk_rows)]


def pooled_sums(chunks: list[np.ndarray], kernel, threads: int) -> tuple[np.ndarray, float, float]:
    """Apply ``kernel(chunk) -> (feature_sum, squared_norm_sum)`` on a thread pool; return the totals and seconds."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=threads) as pool:
        start = time.perf_counter()
        partials = list(pool.map(kernel, chunks))
        seconds = time.perf_counter() - start
    feature_sum = np.sum([partial[0] for partial in partials], axis=0)
    return feature_sum, float(sum(partial[1] for partial in partials)), seconds


def best_of(repeat: int, run):
    """Run ``run()`` ``repeat`` times and keep the result with the smallest time (the last element)."""
    results = [run() for _ in range(repeat)]
    return min(results, key=lambda result: result[-1])


def relative(a, b) -> float:
    return float(np.linalg.norm(np.subtract(a, b)) / np.linalg.norm(b))


def compare(args: argparse.Namespace) -> None:
    import finufft

    import streamrff as srf
    from streamrff.maps.nufft import nufft_applies, nufft_cost, nufft_mean_sums
    from streamrff.sketches.mean import mean_sketch_of_chunk

    bandwidth = args.bandwidth if args.bandwidth == "median" else float(args.bandwidth)
    start = time.perf_counter()
    rows = mixture(args.rows, args.dim)
    rff = srf.RFF(n_features=args.features, bandwidth=bandwidth, variant=args.variant, seed=0).fit(rows)
    print(
        f"rows N={args.rows:,} d={args.dim} float32 (mixture, generated in {time.perf_counter() - start:.1f} s); "
        f"RFF D={args.features} {args.variant} bandwidth={rff.bandwidth_:.4g}; threads={args.threads} "
        f"(cores: {os.cpu_count()}); finufft {finufft.__version__}"
    )

    def direct(chunk):
        sketch = mean_sketch_of_chunk(chunk, rff, method="direct")
        return sketch.feature_sum, sketch.squared_norm_sum

    def nufft(chunk):
        return nufft_mean_sums(chunk, rff, nthreads=1)

    direct_sum, direct_norms, direct_seconds = best_of(
        args.repeat, lambda: pooled_sums(chunks_of(rows, args.chunk_rows), direct, args.threads)
    )
    cores = min(args.threads, -(-args.rows // args.chunk_rows))
    print(f"direct  chunk_rows={args.chunk_rows:>11,}: {direct_seconds:8.3f} s on {cores} core(s)")
    if args.engine:
        start = time.perf_counter()
        engine = srf.sketch(rows, rff, chunk_rows=args.chunk_rows, method="direct")
        seconds = time.perf_counter() - start
        print(
            f"engine  chunk_rows={args.chunk_rows:>11,}: {seconds:8.3f} s  (streamrff.sketch, direct path; "
            f"feature-sum difference to the pool {relative(engine.feature_sum, direct_sum):.1e})"
        )

    def report(label: str, chunk_rows: int, feature_sum, norms: float, seconds: float, cores: int) -> None:
        cost = nufft_cost(rff, rows[:chunk_rows])
        print(
            f"{label} chunk_rows={chunk_rows:>11,}: {seconds:8.3f} s on {cores} core(s)  "
            f"ratio direct/nufft {direct_seconds / seconds:6.1f}x  "
            f"rel. error feature_sum {relative(feature_sum, direct_sum):.1e}  squared_norm_sum "
            f"{abs(norms - direct_norms) / direct_norms:.1e}  | model: speed-up {cost.speedup:.0f}x, "
            f"upsampfac {cost.upsampfac}, grid {cost.grid_shape}, applies={nufft_applies(rff, rows[:chunk_rows])}"
        )

    for chunk_rows in args.sweep_chunk_rows:
        chunk_rows = min(chunk_rows, args.rows)
        feature_sum, norms, seconds = best_of(
            args.repeat, lambda: pooled_sums(chunks_of(rows, chunk_rows), nufft, args.threads)
        )
        report("nufft  ", chunk_rows, feature_sum, norms, seconds, min(args.threads, -(-args.rows // chunk_rows)))
    if args.threads > 1:

        def one_call():
            start = time.perf_counter()
            feature_sum, norms = nufft_mean_sums(rows, rff, nthreads=args.threads)
            return feature_sum, norms, time.perf_counter() - start

        feature_sum, norms, seconds = best_of(args.repeat, one_call)
        report(f"nufft/{args.threads}t", args.rows, feature_sum, norms, seconds, args.threads)

    # An independent float64 reference on a subset of the features: the NUFFT's own accuracy.
    frequencies = rff._params()["frequencies"][:16]
    sample = rows[: min(args.rows, 1_000_000)].astype(np.float64)
    phases = sample @ frequencies.T
    if args.variant == "sincos":
        reference = np.cos(phases).sum(axis=0) / math.sqrt(args.features // 2)
    else:
        phases += rff._params()["phases"][:16]
        reference = np.cos(phases).sum(axis=0) * math.sqrt(2.0 / args.features)
    feature_sum, _ = nufft_mean_sums(rows[: sample.shape[0]], rff)
    direct_subset = mean_sketch_of_chunk(rows[: sample.shape[0]], rff, method="direct").feature_sum[:16]
    print(
        f"float64 reference (first 16 features, {sample.shape[0]:,} rows): nufft rel. error "
        f"{relative(feature_sum[:16], reference):.1e}, direct rel. error {relative(direct_subset, reference):.1e}"
    )


# -- calibration of the cost model -------------------------------------------------------------


def calibrate(args: argparse.Namespace) -> None:
    """Fit the constants of streamrff.maps.nufft's cost model by non-negative least squares on timings."""
    import warnings

    import finufft
    from scipy.optimize import nnls

    import streamrff as srf
    from streamrff.maps import nufft as fast
    from streamrff.sketches.mean import mean_sketch_of_chunk

    warnings.simplefilter("ignore")  # finufft warns about copies of non-contiguous inputs
    rng = np.random.default_rng(0)
    transforms = {1: finufft.nufft1d3, 2: finufft.nufft2d3, 3: finufft.nufft3d3}

    def fastest(run, repeat=3) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times)

    rows_x = rng.standard_normal((100_000, 2)).astype(np.float32)
    rff = srf.RFF(n_features=1024, bandwidth=1.0).fit(rows_x[:2])
    per_feature = fastest(lambda: mean_sketch_of_chunk(rows_x, rff, method="direct")) / (rows_x.shape[0] * 1024)
    print(f"_DIRECT_SECONDS_PER_FEATURE = {per_feature:.2e}  # sincos, d = 2, D = 1024, 1e5 rows")

    samples, times, labels = [], [], []
    for dim in (1, 2, 3):
        for n_rows in (20_000, 200_000, 1_000_000):
            points = rng.standard_normal((n_rows, dim))
            axes = [np.ascontiguousarray(points[:, axis]) for axis in range(dim)]
            strengths = np.ones(n_rows, dtype=np.complex128)
            for bandwidth in (1.0, 0.1, 0.02) if dim < 3 else (1.0, 0.2, 0.1):
                for n_targets in (512, 4096):
                    targets = rng.standard_normal((n_targets, dim)) / bandwidth
                    frequencies = [np.ascontiguousarray(targets[:, axis]) for axis in range(dim)]
                    half_x, half_s = fast._extents(points), fast._extents(targets)
                    for upsampfac, width in fast._KERNEL_WIDTH.items():
                        sizes = [fast._grid_sizes(x, s, upsampfac, width) for x, s in zip(half_x, half_s)]
                        outer = math.prod(size for size, _ in sizes)
                        inner = math.prod(size for _, size in sizes)
                        if 16 * (outer + inner) > fast.MAX_GRID_BYTES:
                            continue
                        seconds = fastest(
                            lambda: transforms[dim](
                                *axes,
                                strengths,
                                *frequencies,
                                eps=fast.NUFFT_TOLERANCE,
                                isign=1,
                                nthreads=1,
                                upsampfac=upsampfac,
                            ),
                            repeat=2,
                        )
                        labels.append(f"d={dim} n={n_rows} targets={n_targets} upsampfac={upsampfac} grid={inner}")
                        cells = [0.0, 0.0, 0.0]
                        cells[dim - 1] = (n_rows + n_targets) * width**dim
                        samples.append([1.0, n_rows, *cells, inner * math.log2(inner)])
                        times.append(seconds)
    design, measured = np.array(samples), np.array(times)
    weights = 1.0 / measured  # fit relative errors: small and large calls count alike
    coefficients, _ = nnls(design * weights[:, None], measured * weights)
    predicted = design @ coefficients
    ratio = predicted / measured
    names = [
        "_NUFFT_SECONDS_PER_CALL",
        "_NUFFT_SECONDS_PER_ROW",
        "cell d=1",
        "cell d=2",
        "cell d=3",
        "_NUFFT_SECONDS_PER_GRID_LOG",
    ]
    for name, value in zip(names, coefficients):
        print(f"{name} = {value:.2e}")
    print(
        f"_NUFFT_SECONDS_PER_CELL = {{1: {coefficients[2]:.1e}, 2: {coefficients[3]:.1e}, 3: {coefficients[4]:.1e}}}\n"
        f"model / measured over {len(times)} calls: min {ratio.min():.2f}, median {np.median(ratio):.2f}, "
        f"max {ratio.max():.2f}"
    )
    current = np.array(
        [
            fast._NUFFT_SECONDS_PER_CALL,
            fast._NUFFT_SECONDS_PER_ROW,
            *(fast._NUFFT_SECONDS_PER_CELL[d] for d in (1, 2, 3)),
            fast._NUFFT_SECONDS_PER_GRID_LOG,
        ]
    )
    ratio = (design @ current) / measured
    for index in np.argsort(np.abs(np.log(ratio)))[::-1][:4]:
        print(f"  worst: {labels[index]}: measured {measured[index]:.4f} s, model {ratio[index]:.2f}x that")
    print(
        f"the constants in streamrff/nufft.py: model / measured min {ratio.min():.2f}, median "
        f"{np.median(ratio):.2f}, max {ratio.max():.2f}; direct path per feature now "
        f"{per_feature:.2e} s (module: {fast._DIRECT_SECONDS_PER_FEATURE:.2e} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=count, default=10_000_000)
    parser.add_argument("--dim", type=int, choices=(1, 2, 3), default=2)
    parser.add_argument("--features", type=count, default=4096)
    parser.add_argument("--variant", choices=("sincos", "cosphase"), default="sincos")
    parser.add_argument("--bandwidth", default="median", help="a number or 'median' (default)")
    parser.add_argument(
        "--chunk-rows",
        type=count,
        default=None,
        help="chunk size of the direct path (default: 1e6, or fewer so that every thread has a chunk)",
    )
    parser.add_argument(
        "--sweep-chunk-rows", type=counts, default=None, help="chunk sizes of the NUFFT path (default: 1e5,1e6,N)"
    )
    parser.add_argument("--threads", type=count, default=os.cpu_count() or 1)
    parser.add_argument("--engine", action="store_true", help="also time streamrff.sketch on the same rows")
    parser.add_argument("--repeat", type=count, default=1, help="keep the fastest of this many runs")
    parser.add_argument("--calibrate", action="store_true", help="fit the cost model's constants instead")
    args = parser.parse_args()
    if args.calibrate:
        calibrate(args)
        return
    if args.chunk_rows is None:
        args.chunk_rows = min(1_000_000, -(-args.rows // args.threads))
    if args.sweep_chunk_rows is None:
        args.sweep_chunk_rows = sorted({min(size, args.rows) for size in (100_000, 1_000_000, args.rows)})
    compare(args)


if __name__ == "__main__":
    main()
