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

Ratios are relative to the ``streamrff.sketch`` pass. Usage::

    python benchmarks/bench_kmeans.py                     # N = 1e6, d = 16, k = 10, D = 1024
    python benchmarks/bench_kmeans.py --rows 200000 --iterations 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import dask
import dask.array as da
import numpy as np
import zarr
from sklearn.cluster import MiniBatchKMeans
from sklearn.kernel_approximation import RBFSampler

import streamrff as srf
from streamrff.engine import fit_map


def write_mixture(path: str, rows: int, dim: int, k: int, chunk_rows: int, seed: int) -> None:
    """A k-component Gaussian mixture, written chunk by chunk (never all in memory)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=1.0, size=(k, dim))  # overlapping: Lloyd keeps moving rows for a few passes
    array = zarr.create_array(store=path, shape=(rows, dim), chunks=(chunk_rows, dim), dtype="float32", zarr_format=3)
    for start in range(0, rows, chunk_rows):
        size = min(chunk_rows, rows - start)
        labels = rng.integers(0, k, size)
        array[start : start + size] = (centres[labels] + rng.normal(size=(size, dim))).astype(np.float32)


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


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
    args = parser.parse_args(argv)

    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-kmeans-")
    path = os.path.join(workdir, "mixture.zarr")
    try:
        _, seconds = timed(write_mixture, path, args.rows, args.dim, args.clusters, args.chunk_rows, args.seed)
        print(
            f"data: {args.rows} x {args.dim} float32 zarr, {args.chunk_rows}-row chunks, k={args.clusters}, "
            f"D={args.features} (written in {seconds:.1f} s); scheduler: {args.scheduler or 'local threads'}, "
            f"{os.cpu_count()} cores"
        )
        rows = []  # (name, seconds per pass, note)
        source = da.from_zarr(path)
        rff = fit_map(srf.RFF(n_features=args.features, bandwidth="median", seed=args.seed), [source])
        sigma = rff.bandwidth_

        sketch_result, sketch_seconds = timed(srf.sketch, path, rff, client=args.scheduler)
        rows.append(("streamrff.sketch (1 pass)", sketch_seconds, f"count={sketch_result.count}"))

        stamps: list[float] = []
        model = srf.KernelKMeans(
            args.clusters, n_features=args.features, bandwidth=sigma, seed=args.seed, max_iter=args.iterations, tol=0.0
        )
        start = time.perf_counter()
        model.fit(path, client=args.scheduler, callback=lambda report: stamps.append(time.perf_counter()))
        total = time.perf_counter() - start
        per_pass = float(np.median(np.diff([start, *stamps])[1:])) if len(stamps) > 1 else stamps[0] - start
        setup = total - per_pass * len(stamps)
        rows.append(
            (
                "KernelKMeans Lloyd pass",
                per_pass,
                f"{len(stamps)} passes; sample + init {setup:.2f} s; total {total:.2f} s",
            )
        )

        sampler = RBFSampler(gamma=1.0 / (2.0 * sigma * sigma), n_components=args.features, random_state=args.seed)
        sampler.fit(np.zeros((1, args.dim), dtype=np.float32))
        stored = zarr.open_array(path, mode="r")
        minibatch = MiniBatchKMeans(args.clusters, random_state=args.seed, n_init=1)
        epochs = []
        for _ in range(args.iterations):
            start = time.perf_counter()
            for chunk_start in range(0, args.rows, args.chunk_rows):
                block = stored[chunk_start : chunk_start + args.chunk_rows]
                minibatch.partial_fit(sampler.transform(block))
            epochs.append(time.perf_counter() - start)
        rows.append(("MiniBatchKMeans epoch", float(np.median(epochs)), "partial_fit per chunk of RBFSampler features"))

        try:
            from dask_ml.cluster import KMeans as DaskKMeans
        except ImportError as error:  # pragma: no cover - optional baseline
            rows.append(("dask-ml KMeans iteration", float("nan"), f"skipped: {error}"))
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
                    _, seconds = timed(estimator.fit, features)
                runs.append((seconds, estimator.n_iter_))
            per_iteration = (runs[1][0] - runs[0][0]) / (runs[1][1] - runs[0][1])
            rows.append(
                (
                    "dask-ml KMeans iteration",
                    per_iteration,
                    f"fit with max_iter=1: {runs[0][0]:.2f} s, max_iter={1 + args.iterations}: {runs[1][0]:.2f} s",
                )
            )

        print(f"\n{'method':<28} {'s / pass':>9} {'x sketch':>9}  note")
        for name, seconds, note in rows:
            print(f"{name:<28} {seconds:9.2f} {seconds / sketch_seconds:9.2f}  {note}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
