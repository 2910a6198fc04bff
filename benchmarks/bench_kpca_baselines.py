"""Kernel PCA of N rows from zarr: streamrff's one-pass moment sketch against scikit-learn baselines.

In one run, on the same data and kernel (RBF, sigma = median heuristic of streamrff's row sample):

1. streamrff: one plain sketch pass (sums only), one pass with second moments, and the full
   ``KernelPCA.fit`` from the zarr path (landmark sample for the median bandwidth, moment pass,
   eigendecomposition of the D x D covariance);
2. scikit-learn ``KernelPCA`` (exact, n x n Gram matrix) on growing subsamples, reporting the
   largest that fits in the time streamrff needed for all N rows;
3. scikit-learn ``RBFSampler`` + ``IncrementalPCA`` streaming all N rows chunk by chunk.

Quality: the overlap (mean squared cosine of the principal angles, 1 = same subspace) between each
method's top-k score subspace and exact KPCA's (fitted on the largest subsample, ARPACK solver, the
fastest exact one for small k) on evaluation rows taken from the end of the data.

Run: python benchmarks/bench_kpca_baselines.py [--rows 1000000] [--features 1024] [--components 10]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import zarr
from bench_kpca import write_data  # benchmarks/ is on sys.path when run as a script
from scipy.linalg import subspace_angles
from sklearn.decomposition import IncrementalPCA
from sklearn.decomposition import KernelPCA as ExactKernelPCA
from sklearn.kernel_approximation import RBFSampler
from threadpoolctl import threadpool_limits

import streamrff as srf


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def subspace_overlap(reference: np.ndarray, scores: np.ndarray) -> float:
    """Mean squared cosine of the principal angles between the column spaces (1 = identical)."""
    return float(np.mean(np.cos(subspace_angles(reference.astype(np.float64), scores.astype(np.float64))) ** 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=16, help="input dimension d of the synthetic data")
    parser.add_argument("--features", type=int, default=1024, help="D")
    parser.add_argument("--components", type=int, default=10, help="k")
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--zarr", default=None, help="existing (rows, dim) zarr array to use instead of synthetic data")
    parser.add_argument("--max-sklearn-rows", type=int, default=16_000, help="memory cap for the exact n x n Gram")
    parser.add_argument("--eval-rows", type=int, default=2_000, help="rows on which the score subspaces are compared")
    parser.add_argument("--blas-threads", type=int, default=None, help="limit BLAS threads (all methods)")
    args = parser.parse_args()

    with threadpool_limits(limits=args.blas_threads, user_api="blas"), tempfile.TemporaryDirectory() as scratch:
        path = args.zarr
        if path is None:
            path = os.path.join(scratch, "rows.zarr")
            _, seconds = timed(write_data, path, args.rows, args.dim, args.chunk_rows)
            print(f"wrote {args.rows:,} x {args.dim} float32 rows to zarr in {seconds:.1f} s")
        source = zarr.open_array(path, mode="r")
        n_rows, dim = source.shape
        evaluation = np.asarray(source[n_rows - args.eval_rows :], dtype=np.float64)
        D, k = args.features, args.components
        print(f"N = {n_rows:,} rows, d = {dim}, D = {D}, k = {k}, chunks of {source.chunks[0]:,} rows, "
              f"{os.cpu_count()} cores, BLAS threads: {args.blas_threads or 'default'}\n")

        # 1. streamrff
        plain, plain_s = timed(srf.sketch, path, srf.RFF(n_features=D, bandwidth="median"))
        sigma = plain.feature_map.bandwidth_
        _, moments_s = timed(srf.sketch, path, plain.feature_map, moments=True)
        kpca, fit_s = timed(srf.KernelPCA(n_components=k, n_features=D, bandwidth="median").fit, path)
        assert kpca.feature_map_.bandwidth_ == sigma
        gamma = 1.0 / (2.0 * sigma * sigma)

        # 2. exact KPCA on the largest subsample that fits in streamrff's fit time
        exact_rows, exact_s, exact_model, trials = 0, 0.0, None, []
        rows = 1000
        while rows <= min(args.max_sklearn_rows, n_rows - args.eval_rows):
            sample = np.asarray(source[:rows], dtype=np.float64)
            fit = ExactKernelPCA(n_components=k, kernel="rbf", gamma=gamma, eigen_solver="arpack", random_state=0).fit
            model, seconds = timed(fit, sample)
            trials.append((rows, seconds))
            if seconds > fit_s:
                break
            exact_rows, exact_s, exact_model = rows, seconds, model
            if seconds * 6 > 2 * fit_s:  # n^2 memory and ~n^2-n^3 time: the next doubling would not fit
                break
            rows *= 2

        # 3. RBFSampler + IncrementalPCA over all rows
        def sampler_ipca():
            sampler = RBFSampler(gamma=gamma, n_components=D, random_state=0).fit(np.zeros((1, dim)))
            ipca = IncrementalPCA(n_components=k)
            step = source.chunks[0]
            for start in range(0, n_rows, step):
                ipca.partial_fit(sampler.transform(np.asarray(source[start : start + step], dtype=np.float64)))
            return sampler, ipca

        (sampler, ipca), ipca_s = timed(sampler_ipca)

        print(f"{'method':<58}{'rows':>11}{'seconds':>10}{'x one pass':>12}{'overlap':>11}")
        reference = exact_model.transform(evaluation) if exact_model is not None else None

        def row(label, rows_used, seconds, scores=None):
            quality = ""
            if reference is not None and scores is not None:
                quality = f"{subspace_overlap(reference, scores):>11.4f}"
            print(f"{label:<58}{rows_used:>11,}{seconds:>10.1f}{seconds / plain_s:>12.2f}{quality}")

        row("streamrff sketch, one pass (sums only)", n_rows, plain_s)
        row("streamrff sketch, one pass with D x D moments", n_rows, moments_s)
        row("streamrff KernelPCA.fit (median sample + moments + eig)", n_rows, fit_s, kpca.transform(evaluation))
        if exact_model is not None:
            row(f"sklearn KernelPCA (exact) on largest subsample in {fit_s:.0f} s", exact_rows, exact_s,
                exact_model.transform(evaluation))
        row("sklearn RBFSampler + IncrementalPCA (all rows)", n_rows, ipca_s,
            ipca.transform(sampler.transform(evaluation)))
        print("\nexact KPCA trials (rows, s): " + ", ".join(f"({r:,}, {s:.1f})" for r, s in trials))
        print(f"sigma (median heuristic) = {sigma:.3f}; overlap: mean cos^2 of the principal angles between top-{k} "
              f"score subspaces on the last {len(evaluation):,} rows and exact KPCA's (1 = same subspace)")


if __name__ == "__main__":
    main()
