"""Structured (SORF) against dense random Fourier features for high-dimensional rows: pass speed and kernel error.

Both passes are ``srf.sketch`` calls with the same options, taken in turns in one run (the ratio
is the median of the turns' ratios, so a machine whose speed drifts moves both alike):

* dense      - ``srf.sketch(source, RFF(n_features=D, bandwidth=sqrt(d)))``;
* structured - ``srf.sketch(source, RFF(n_features=D, bandwidth=sqrt(d), structured=True))``
               (d padded to a power of two, D/2 frequencies in SORF blocks);
* read       - reading and decoding the chunks alone (zarr only, a dask pass over ``da.from_zarr``
               that touches every chunk): the floor a pass can reach through zarr;
* engine read - the same pass over the array as the engine reads it (``srf.open_source``: whole
               stored chunks decompressed directly, ``streamrff.sources.chunkread``).

for rows in memory (a numpy array, chunked by ``--chunk-rows``) and for a zarr array written by
``dask.array.to_zarr`` (zarr 3's default zstd codec). Prints rows/s and structured/dense ratios for
every d in ``--dims`` and D in ``--features``, and checks that both sketches estimate the same
squared norm of the kernel mean embedding.

Then the kernel error table: the mean squared error of the 400 x 400 Gram matrix ``Z Z^T``
against the exact Gaussian kernel, rows N(0, I_d), bandwidth sqrt(d), sin/cos variant, mean of
three seeds, for dense iid, dense orthogonal (``RFF(orthogonal=True)``), structured
(``RFF(structured=True)``), Fastfood (``streamrff._kernels.sorf``, method "fastfood", not an option
of the map) and, where it imports, scikit-learn-extra's ``Fastfood`` (cos+phase features, its own
scaling).

Timings on a shared machine are not trustworthy; run on an idle one for figures (the script
prints the load averages before and after).

Run: python benchmarks/bench_highdim.py [--rows 60000] [--dims 128,384,768,1024] [--features 1024,4096]
     [--chunk-rows 10000] [--repeat 3] [--error-only] [--error-dims DIMS] [--error-features FEATURES]
     (the error table's d and D default to --dims and --features)
Quick run (a smoke test, seconds): python benchmarks/bench_highdim.py --quick
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time

import dask
import dask.array as da
import numpy as np
from threadpoolctl import threadpool_limits

import streamrff as srf
from streamrff._kernels.sorf import structured_features, structured_params

ERROR_ROWS = 400
SEEDS = (0, 1, 2)
NO_OFFSETS = np.zeros(0, np.float32)


def integers(text: str) -> list[int]:
    return [int(float(part)) for part in text.split(",") if part.strip()]


def read_only(rows: np.ndarray) -> np.ndarray:
    return np.array([[float(rows[0, 0])]])


def timed_read(repeat: int, array: da.Array) -> float:
    """Best wall time of a dask pass that reads and decodes every chunk and does nothing else."""
    tasks = [dask.delayed(read_only)(block) for block in array.to_delayed().ravel()]
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        dask.compute(*tasks, scheduler="threads")
        best = min(best, time.perf_counter() - start)
    return best


def timed_sketches(
    repeat: int, source, maps: tuple[srf.RFF, srf.RFF], chunk_rows: int | None
) -> tuple[list[float], list[srf.MeanSketch], float]:
    """Wall times of ``srf.sketch(source, feature_map)`` for both (fitted) maps, taken in turns.

    Returns each map's best time, its sketch, and the median over the ``repeat`` turns of the
    ratio of the first map's time to the second's: a machine whose speed drifts over a run
    (a cloud machine's neighbours) moves both passes of a turn alike.
    """
    sketches = [srf.sketch(source, feature_map, chunk_rows=chunk_rows) for feature_map in maps]  # compile first
    times: list[list[float]] = [[], []]
    for _ in range(repeat):
        for index, feature_map in enumerate(maps):
            start = time.perf_counter()
            sketches[index] = srf.sketch(source, feature_map, chunk_rows=chunk_rows)
            times[index].append(time.perf_counter() - start)
    ratio = float(np.median(np.array(times[0]) / np.array(times[1])))
    return [min(each) for each in times], sketches, ratio


def speed_table(n_rows: int, dims: list[int], features: list[int], chunk_rows: int, repeat: int) -> None:
    print(f"srf.sketch pass, {n_rows} rows, chunks of {chunk_rows} rows: rows/s, seconds and ratios")
    print(
        "(rows/s and seconds: best of --repeat passes, dense and structured in turns; ratio: the median over the "
        "turns of structured over dense speed; read: a pass that only reads and decodes the zarr chunks)"
    )
    columns = ("dense", "structured", "ratio", "read", "dense s", "struct s", "read s", "struct/read", "engine read s")
    print(f"{'d':>5} {'D':>5} {'source':>7} " + " ".join(f"{name:>11}" for name in columns))
    with tempfile.TemporaryDirectory() as folder:
        for d in dims:
            rows = np.random.default_rng(d).standard_normal((n_rows, d), dtype=np.float32)
            path = f"{folder}/rows_{d}.zarr"
            da.to_zarr(da.from_array(rows, chunks=(chunk_rows, d)), path)
            sources = {"memory": (rows, chunk_rows), "zarr": (path, None)}  # zarr: its own chunks
            for n_features in features:
                bandwidth = math.sqrt(d)
                dense = srf.RFF(n_features=n_features, bandwidth=bandwidth).fit(rows[:1])
                structured = srf.RFF(n_features=n_features, bandwidth=bandwidth, structured=True).fit(rows[:1])
                for name, (source, source_chunks) in sources.items():
                    (dense_seconds, structured_seconds), (dense_sketch, structured_sketch), ratio = timed_sketches(
                        repeat, source, (dense, structured), source_chunks
                    )
                    # Both estimate the kernel mean embedding's squared norm (sampling error ~ D^-1/2).
                    dense_norm = float(np.sum(dense_sketch.feature_sum**2)) / n_rows**2
                    structured_norm = float(np.sum(structured_sketch.feature_sum**2)) / n_rows**2
                    assert abs(dense_norm - structured_norm) < 0.1, (dense_norm, structured_norm)
                    read = read_time = read_ratio = engine_read = ""
                    if name == "zarr":
                        read_seconds = timed_read(repeat, da.from_zarr(path))
                        read = f"{n_rows / read_seconds:.0f}"
                        read_time = f"{read_seconds:.3f}"
                        read_ratio = f"{structured_seconds / read_seconds:.2f}"
                        engine_read = f"{timed_read(repeat, srf.open_source(path).array):.3f}"
                    print(
                        f"{d:5d} {n_features:5d} {name:>7} {n_rows / dense_seconds:11.0f} "
                        f"{n_rows / structured_seconds:11.0f} {ratio:11.2f} "
                        f"{read:>11} {dense_seconds:11.3f} {structured_seconds:11.3f} {read_time:>11} {read_ratio:>11} "
                        f"{engine_read:>13}"
                    )


def gram_mse(features: np.ndarray, kernel: np.ndarray) -> float:
    features = features.astype(np.float64)
    return float(np.mean((features @ features.T - kernel) ** 2))


def sklearn_extra_fastfood(rows: np.ndarray, n_features: int, bandwidth: float, seed: int) -> np.ndarray | None:
    try:
        from sklearn_extra.kernel_approximation import Fastfood
    except (ImportError, ValueError):  # 0.3.0 beside numpy 2: "numpy.dtype size changed" (ValueError)
        return None
    sampler = Fastfood(sigma=bandwidth, n_components=n_features, random_state=seed)
    return sampler.fit(rows).transform(rows)


def error_table(dims: list[int], features: list[int]) -> None:
    print(f"kernel MSE of the {ERROR_ROWS} x {ERROR_ROWS} Gram matrix, rows N(0, I_d), bandwidth sqrt(d), sin/cos,")
    print(f"mean of seeds {SEEDS}")
    names = ("iid", "orthogonal", "SORF", "Fastfood", "sklearn-extra")
    print(f"{'d':>5} {'D':>5} " + " ".join(f"{name:>13}" for name in names) + f" {'SORF/orth':>9}")
    for d in dims:
        rows = np.random.default_rng(123).standard_normal((ERROR_ROWS, d)).astype(np.float32)
        bandwidth = math.sqrt(d)
        kernel = srf.exact_kernel(rows, rows, bandwidth)
        for n_features in features:
            m = n_features // 2
            errors: dict[str, list[float]] = {name: [] for name in names}
            for seed in SEEDS:
                for name, orthogonal in (("iid", False), ("orthogonal", True)):
                    rff = srf.RFF(n_features=n_features, bandwidth=bandwidth, orthogonal=orthogonal, seed=seed)
                    errors[name].append(gram_mse(rff.fit(rows).transform(rows), kernel))
                rff = srf.RFF(n_features=n_features, bandwidth=bandwidth, structured=True, seed=seed)
                errors["SORF"].append(gram_mse(rff.fit(rows).transform(rows), kernel))
                params = structured_params(np.random.default_rng(seed), d, m, bandwidth, method="fastfood")
                out = np.empty((ERROR_ROWS, n_features), np.float32)
                errors["Fastfood"].append(gram_mse(structured_features(rows, params, NO_OFFSETS, m**-0.5, out), kernel))
                theirs = sklearn_extra_fastfood(rows, n_features, bandwidth, seed)
                if theirs is not None:
                    errors["sklearn-extra"].append(gram_mse(theirs, kernel))
            means = {
                name: (f"{np.mean(values):13.3e}" if values else f"{'n/a':>13}") for name, values in errors.items()
            }
            ratio = np.mean(errors["SORF"]) / np.mean(errors["orthogonal"])
            print(f"{d:5d} {n_features:5d} " + " ".join(means[name] for name in names) + f" {ratio:9.2f}")
    print("sklearn-extra: n/a when scikit-learn-extra does not import beside this numpy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda text: int(float(text)), default=60_000)
    parser.add_argument("--dims", type=integers, default=[128, 384, 768, 1024])
    parser.add_argument("--features", type=integers, default=[1024, 4096])
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--error-only", action="store_true", help="print only the kernel error table")
    parser.add_argument("--error-dims", type=integers, default=None, help="default: --dims")
    parser.add_argument("--error-features", type=integers, default=None, help="default: --features")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small run: 4000 rows in chunks of 1000, d in 128,768, D = 1024, one repeat",
    )
    args = parser.parse_args()
    if args.quick:
        args.rows, args.chunk_rows, args.dims, args.features, args.repeat = 4000, 1000, [128, 768], [1024], 1
    print(f"load averages (1, 5, 15 min) before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if not args.error_only:
        with threadpool_limits(1):  # one BLAS thread per task thread, as the engine runs its chunk kernels
            speed_table(args.rows, args.dims, args.features, min(args.chunk_rows, args.rows), args.repeat)
        print()
    error_table(args.error_dims or args.dims, args.error_features or args.features)
    print(f"load averages (1, 5, 15 min) after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
