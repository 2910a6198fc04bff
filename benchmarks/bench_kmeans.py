"""Seconds per Lloyd iteration of streamrff.KernelKMeans on a zarr array, against baselines.

Side by side, on the same N x d float32 zarr array and the same kernel (Gaussian, median
bandwidth, D random features):

- one ``streamrff.sketch`` pass (the cost floor of any one-pass method: read, embed, sum);
- ``KernelKMeans``: seconds per full-data Lloyd pass (from the per-pass callback) and the
  one-off cost of the seeded sample and the initialisation;
- scikit-learn ``MiniBatchKMeans.partial_fit`` on ``RBFSampler`` features, chunk by chunk:
  seconds per epoch;
- dask-ml ``KMeans`` on the same features, computed lazily per chunk
  (``map_blocks(RBFSampler.transform)``): seconds per Lloyd iteration, from the difference of
  two runs with different ``max_iter`` (dask-ml adds a NaN-scan pass and a final labelling
  pass to every fit). Skipped if dask-ml is not installed.

Ratios are relative to the ``streamrff.sketch`` pass (timed before and after the k-means run,
the faster of the two). Next to wall seconds the table gives process CPU seconds (all threads),
which on a shared machine vary less than wall time. After the table: the fraction of rows whose
float32 scores against the fitted centres were too close to call and were rescored in float64.

``--fit-only`` writes the data, fits ``KernelKMeans`` and prints the process's peak RSS and
nothing else (run it at two sizes to see that a fit's memory does not grow with N). Usage::

    python benchmarks/bench_kmeans.py                     # N = 1e6, d = 16, k = 10, D = 1024
    python benchmarks/bench_kmeans.py --rows 200000 --iterations 3
    python benchmarks/bench_kmeans.py --dim 32 --clusters 50 --features 4096
    python benchmarks/bench_kmeans.py --fit-only --rows 10000000 --dim 32
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

import dask
import dask.array as da
import numpy as np
import zarr
from scipy.spatial.distance import cdist
from sklearn.cluster import MiniBatchKMeans
from sklearn.kernel_approximation import RBFSampler

import streamrff as srf
from streamrff.engine import fit_map
from streamrff.sketches.cluster import _compiled_lloyd_step


def write_mixture(path: str, rows: int, dim: int, k: int, chunk_rows: int, seed: int, spread: float = 1.0) -> None:
    """A k-component Gaussian mixture, written chunk by chunk (never all in memory); ``spread`` 0
    gives one Gaussian: no cluster structure, so Lloyd keeps moving rows from pass to pass."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=spread, size=(k, dim))  # overlapping: Lloyd keeps moving rows for a few passes
    array = zarr.create_array(store=path, shape=(rows, dim), chunks=(chunk_rows, dim), dtype="float32", zarr_format=3)
    for start in range(0, rows, chunk_rows):
        size = min(chunk_rows, rows - start)
        labels = rng.integers(0, k, size)
        array[start : start + size] = (centres[labels] + rng.normal(size=(size, dim))).astype(np.float32)


def timed(function, *args, **kwargs):
    """Result, wall seconds and process CPU seconds of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--features", type=int, default=1024, help="random features D")
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--iterations", type=int, default=3, help="Lloyd passes timed per method")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scheduler", default=None, help="dask scheduler address (default: local threads)")
    parser.add_argument("--workdir", default=None, help="where to write the zarr array (default: a temp dir)")
    parser.add_argument("--fit-only", action="store_true", help="only fit KernelKMeans and print the peak RSS")
    parser.add_argument("--no-structure", action="store_true", help="one Gaussian instead of a k-component mixture")
    args = parser.parse_args(argv)

    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-kmeans-")
    path = os.path.join(workdir, "mixture.zarr")
    try:
        _, seconds, _ = timed(
            write_mixture,
            path,
            args.rows,
            args.dim,
            args.clusters,
            args.chunk_rows,
            args.seed,
            0.0 if args.no_structure else 1.0,
        )
        print(
            f"data: {args.rows} x {args.dim} float32 zarr, {args.chunk_rows}-row chunks, k={args.clusters}, "
            f"D={args.features} (written in {seconds:.1f} s); scheduler: {args.scheduler or 'local threads'}, "
            f"{os.cpu_count()} cores"
        )
        if args.fit_only:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            model = srf.KernelKMeans(
                args.clusters, n_features=args.features, seed=args.seed, max_iter=args.iterations, tol=0.0
            )
            _, seconds, _ = timed(model.fit, path, client=args.scheduler)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"KernelKMeans.fit: {seconds:.1f} s, {model.n_iter_} passes; peak RSS {peak:.0f} MiB "
                f"(after writing the data: {before:.0f} MiB)"
            )
            return
        rows = []  # (name, wall seconds per pass, CPU seconds per pass, note)
        source = da.from_zarr(path)
        rff = fit_map(srf.RFF(n_features=args.features, bandwidth="median", seed=args.seed), [source])
        sigma = rff.bandwidth_

        sketch_result, sketch_seconds, sketch_cpu = timed(srf.sketch, path, rff, client=args.scheduler)

        stamps: list[tuple[float, float]] = []
        model = srf.KernelKMeans(
            args.clusters, n_features=args.features, bandwidth=sigma, seed=args.seed, max_iter=args.iterations, tol=0.0
        )
        start, cpu_start = time.perf_counter(), time.process_time()
        model.fit(
            path,
            client=args.scheduler,
            callback=lambda report: stamps.append((time.perf_counter(), time.process_time())),
        )
        total = time.perf_counter() - start
        walls = np.diff([start, *(wall for wall, _ in stamps)])
        cpus = np.diff([cpu_start, *(cpu for _, cpu in stamps)])
        # The first pass also holds the sample pass and the initialisation; later passes are Lloyd only.
        per_pass = float(np.median(walls[1:])) if len(stamps) > 1 else float(walls[0])
        per_pass_cpu = float(np.median(cpus[1:])) if len(stamps) > 1 else float(cpus[0])
        setup = total - per_pass * len(stamps)

        _, again, again_cpu = timed(srf.sketch, path, rff, client=args.scheduler)
        sketch_seconds, sketch_cpu = min(sketch_seconds, again), min(sketch_cpu, again_cpu)
        rows.append(
            ("streamrff.sketch (1 pass)", sketch_seconds, sketch_cpu, f"count={sketch_result.count}; best of 2")
        )
        moved = ", ".join(f"{report.moved_fraction:.4f}" for report in model.history_)
        rows.append(
            (
                "KernelKMeans Lloyd pass",
                per_pass,
                per_pass_cpu,
                f"{len(stamps)} passes (moved {moved}); sample + init {setup:.2f} s; total {total:.2f} s",
            )
        )

        sampler = RBFSampler(gamma=1.0 / (2.0 * sigma * sigma), n_components=args.features, random_state=args.seed)
        sampler.fit(np.zeros((1, args.dim), dtype=np.float32))
        stored = zarr.open_array(path, mode="r")
        minibatch = MiniBatchKMeans(args.clusters, random_state=args.seed, n_init=1)
        epochs = []
        for _ in range(args.iterations):
            start, cpu_start = time.perf_counter(), time.process_time()
            for chunk_start in range(0, args.rows, args.chunk_rows):
                block = stored[chunk_start : chunk_start + args.chunk_rows]
                minibatch.partial_fit(sampler.transform(block))
            epochs.append((time.perf_counter() - start, time.process_time() - cpu_start))
        epoch_wall, epoch_cpu = np.median(epochs, axis=0)
        rows.append(
            (
                "MiniBatchKMeans epoch",
                float(epoch_wall),
                float(epoch_cpu),
                "partial_fit per chunk of RBFSampler features",
            )
        )

        try:
            from dask_ml.cluster import KMeans as DaskKMeans
        except ImportError as error:  # pragma: no cover - optional baseline
            rows.append(("dask-ml KMeans iteration", float("nan"), float("nan"), f"skipped: {error}"))
        else:
            features = source.map_blocks(
                sampler.transform, dtype=np.float32, chunks=(source.chunks[0], (args.features,))
            )
            init = sampler.transform(np.asarray(source[: args.clusters]))
            warm_up = da.from_array(sampler.transform(np.asarray(source[:1000])), chunks=(500, args.features))
            DaskKMeans(n_clusters=args.clusters, init=init, max_iter=2).fit(warm_up)  # numba compiles once
            runs = []
            for max_iter in (1, 1 + args.iterations):
                estimator = DaskKMeans(n_clusters=args.clusters, init=init, max_iter=max_iter, tol=0.0)
                with dask.config.set(scheduler="threads"):
                    _, seconds, cpu = timed(estimator.fit, features)
                runs.append((seconds, cpu, estimator.n_iter_))
            iterations = runs[1][2] - runs[0][2]
            rows.append(
                (
                    "dask-ml KMeans iteration",
                    (runs[1][0] - runs[0][0]) / iterations,
                    (runs[1][1] - runs[0][1]) / iterations,
                    f"fit with max_iter=1: {runs[0][0]:.2f} s, max_iter={1 + args.iterations}: {runs[1][0]:.2f} s",
                )
            )

        print(f"\n{'method':<28} {'s / pass':>9} {'x sketch':>9} {'cpu s':>7} {'x sketch':>9}  note")
        for name, seconds, cpu, note in rows:
            print(
                f"{name:<28} {seconds:9.2f} {seconds / sketch_seconds:9.2f} {cpu:7.2f} {cpu / sketch_cpu:9.2f}  {note}"
            )
        if isinstance(model.feature_map_, srf.RFF):
            rescored = sum(
                _compiled_lloyd_step(
                    stored[start : start + args.chunk_rows], model.feature_map_, model.cluster_centers_, None
                )[2]
                for start in range(0, args.rows, args.chunk_rows)
            )
            print(
                f"\nrows rescored in float64 against the fitted centres: {rescored} of {args.rows} "
                f"({rescored / args.rows:.2e})"
            )
        # Labels against float64 arithmetic on the same float32 features (exact squared distances).
        head = np.asarray(stored[:10_000])
        features = model.feature_map_.transform(head).astype(np.float64)
        expected = cdist(features, model.cluster_centers_, "sqeuclidean").argmin(axis=1)
        mismatches = int(np.count_nonzero(model.predict(head) != expected))
        print(f"labels of the first {len(head)} rows unequal to a float64 reference: {mismatches}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
