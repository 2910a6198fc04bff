"""Kernel ridge regression on Friedman #1: streamrff's one-pass regression sketch against baselines.

In one run, on the same data and kernel (RBF, sigma = the median heuristic of streamrff's row
sample), each method in its own subprocess (so that one method's peak memory does not count for the
next; peak RSS from ``getrusage``):

1. scikit-learn ``KernelRidge`` (exact, n x n Gram matrix) on the first ``min(N, --max-exact-rows)``
   training rows, alpha chosen from a small grid on a held-out tenth;
2. scikit-learn ``RBFSampler`` + ``RidgeCV`` in memory (float32 features; skipped when the N x D
   feature matrix would exceed ``--max-feature-bytes``);
3. dask-ml ``Incremental(SGDRegressor)`` over RBF features, one epoch over the chunks (needs the
   ``bench`` extra: ``pip install 'streamrff[bench]'``; the column says so when it is missing);
4. streamrff ``KernelRidge(alpha="auto")`` fitted from zarr arrays on disk (out of core).

Friedman #1 (``make_friedman1(noise=1.0)``) at N = 2e4 and 2e5 training rows (``--huge`` adds 2e6),
4 000 test rows; the R^2 ceiling with noise 1 is 0.960. Then the cost of the fit pass against a
moment-sketch pass on the same rows (1e6 x 10, D = 1024, chunks of 50 000 rows; target <= 1.3),
in one process: the per-chunk kernels on one core, and whole jobs through ``srf.sketch``, each
pair taken in turns (moments, then fit) so that a drifting machine moves both alike; the ratio
printed is the median of the turns' ratios. Both take their tile products in float32 on tiles
centred on their means (``streamrff.sketches.moments``); the fit adds ``Z^T y`` and the target sums.

Timings are only meaningful on an otherwise idle machine (the load average is printed).

Run: python benchmarks/bench_ridge.py [--quick] [--huge] [--features 2048]
     python benchmarks/bench_ridge.py --pass-ratio [--quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

TEST_ROWS = 4_000


def friedman(n_train: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import make_friedman1

    X, y = make_friedman1(n_samples=n_train + TEST_ROWS, noise=1.0, random_state=0)
    X = X.astype(np.float32)
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def median_bandwidth(X: np.ndarray) -> float:
    import streamrff as srf

    return float(srf.RFF(n_features=2, bandwidth="median", seed=0).fit(X).bandwidth_)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def r2(truth: np.ndarray, predicted: np.ndarray) -> float:
    return float(1.0 - np.sum((truth - predicted) ** 2) / np.sum((truth - truth.mean()) ** 2))


def run_exact(config: dict) -> dict:
    from sklearn.kernel_ridge import KernelRidge

    X, y, X_test, y_test = friedman(config["rows"])
    n = min(config["rows"], config["max_exact_rows"])
    gamma = 1.0 / (2.0 * median_bandwidth(X) ** 2)
    started = time.perf_counter()
    split = n * 9 // 10
    scores = []
    for alpha in (1e-3, 1e-2, 1e-1, 1.0):
        held_out = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(X[:split], y[:split])
        scores.append((r2(y[split:n], held_out.predict(X[split:n])), alpha))
    best = max(scores)[1]
    model = KernelRidge(alpha=best, kernel="rbf", gamma=gamma).fit(X[:n], y[:n])
    seconds = time.perf_counter() - started
    return {"r2": r2(y_test, model.predict(X_test)), "seconds": seconds, "rows_used": n, "alpha": best}


def run_rbf_ridge(config: dict) -> dict:
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import RidgeCV

    X, y, X_test, y_test = friedman(config["rows"])
    if config["rows"] * config["features"] * 4 > config["max_feature_bytes"]:
        return {"skipped": f"N x D float32 features exceed {config['max_feature_bytes'] / 2**30:.1f} GiB"}
    gamma = 1.0 / (2.0 * median_bandwidth(X) ** 2)
    started = time.perf_counter()
    sampler = RBFSampler(gamma=gamma, n_components=config["features"], random_state=0).fit(X)
    model = RidgeCV(alphas=np.logspace(-6, 2, 17)).fit(sampler.transform(X), y)
    seconds = time.perf_counter() - started
    return {
        "r2": r2(y_test, model.predict(sampler.transform(X_test))),
        "seconds": seconds,
        "alpha": float(model.alpha_),
    }


def run_dask_ml(config: dict) -> dict:
    try:
        from dask_ml.wrappers import Incremental
    except ImportError as error:
        return {"skipped": f"dask-ml not importable ({error}); pip install 'streamrff[bench]'"}
    import dask.array as da
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.linear_model import SGDRegressor

    X, y, X_test, y_test = friedman(config["rows"])
    gamma = 1.0 / (2.0 * median_bandwidth(X) ** 2)
    started = time.perf_counter()
    sampler = RBFSampler(gamma=gamma, n_components=config["features"], random_state=0).fit(X[:1])
    rows = da.from_array(X, chunks=(config["chunk_rows"], X.shape[1]))
    features = rows.map_blocks(sampler.transform, dtype=np.float32, chunks=(rows.chunks[0], (config["features"],)))
    targets = da.from_array(y, chunks=config["chunk_rows"])
    model = Incremental(SGDRegressor(tol=None, random_state=0), scoring=None, shuffle_blocks=False)
    model.fit(features, targets)  # one epoch: one partial_fit per chunk
    seconds = time.perf_counter() - started
    return {"r2": r2(y_test, model.estimator_.predict(sampler.transform(X_test))), "seconds": seconds}


def run_streamrff(config: dict) -> dict:
    import zarr

    import streamrff as srf

    X, y, X_test, y_test = friedman(config["rows"])
    with tempfile.TemporaryDirectory() as folder:
        x_path, y_path = os.path.join(folder, "X.zarr"), os.path.join(folder, "y.zarr")
        for path, values in ((x_path, X), (y_path, y)):
            stored = zarr.create_array(
                store=path, shape=values.shape, chunks=(config["chunk_rows"], *values.shape[1:]), dtype=values.dtype
            )
            stored[...] = values
        del X, y
        started = time.perf_counter()
        model = srf.KernelRidge(alpha="auto", n_features=config["features"], seed=0).fit(x_path, y_path)
        seconds = time.perf_counter() - started
    return {"r2": float(model.score(X_test, y_test)), "seconds": seconds, "alpha": model.alpha_}


def run_pass_ratio(config: dict) -> dict:
    """Seconds of a moment-sketch pass and of a fit pass on the same rows, in turns: the per-chunk kernels on
    one core, chunk by chunk, and whole jobs through ``srf.sketch`` (the engine); every turn's ratio."""
    import streamrff as srf
    from streamrff.sketches.mean import mean_sketch_of_chunk
    from streamrff.sketches.regression import regression_sketch_of_chunk

    rng = np.random.default_rng(0)
    X = rng.normal(size=(config["rows"], 10)).astype(np.float32)
    y = X[:, 0] + rng.normal(size=config["rows"])
    feature_map = srf.RFF(n_features=config["features"], bandwidth=3.0, seed=0).fit(X[:1])
    chunk = config["chunk_rows"]
    starts = range(0, config["rows"], chunk)
    pairs = {
        "kernel": (
            lambda: [mean_sketch_of_chunk(X[i : i + chunk], feature_map, moments=True) for i in starts],
            lambda: [regression_sketch_of_chunk(X[i : i + chunk], y[i : i + chunk], feature_map) for i in starts],
        ),
        "srf.sketch": (
            lambda: srf.sketch(X, feature_map, moments=True, chunk_rows=chunk),
            lambda: srf.sketch(X, feature_map, target=y, chunk_rows=chunk),
        ),
    }
    srf.sketch(X[:chunk], feature_map, moments=True)  # warm-up: numba compilation, thread pools
    turns: dict[str, list[tuple[float, float]]] = {name: [] for name in pairs}
    for _ in range(config["repeats"]):
        for name, (moments_pass, fit_pass) in pairs.items():
            seconds = []
            for run in (moments_pass, fit_pass):
                started = time.perf_counter()
                run()
                seconds.append(time.perf_counter() - started)
            turns[name].append((seconds[0], seconds[1]))
    return {"turns": turns, "load": os.getloadavg()}


def print_pass_ratio(result: dict, rows: int, features: int) -> None:
    if "turns" not in result:
        print(f"\nfit pass ratio: {describe(result)}")
        return
    print(f"\nfit pass / moment-sketch pass ({rows:,} x 10, D = {features}; target <= 1.3), in turns, "
          f"load average before/after {result['load_before'][0]:.2f} / {result['load'][0]:.2f}")  # fmt: skip
    print(f"  {'':12s} {'moments (s)':>12s} {'fit (s)':>9s}   ratio per turn -> median")
    for name, turns in result["turns"].items():
        moments, fits = (np.median([turn[i] for turn in turns]) for i in (0, 1))
        ratios = [fit / moment for moment, fit in turns]
        listed = ", ".join(f"{ratio:.2f}" for ratio in ratios)
        print(f"  {name:12s} {moments:12.2f} {fits:9.2f}   {listed} -> {np.median(ratios):.2f}")


METHODS = {
    "exact KernelRidge": run_exact,
    "RBFSampler+RidgeCV": run_rbf_ridge,
    "dask-ml Incremental(SGD)": run_dask_ml,
    "streamrff KernelRidge": run_streamrff,
    "pass ratio": run_pass_ratio,
}


def in_subprocess(config: dict) -> dict:
    """Run one method in a fresh interpreter; a failure (MemoryError, a crash) is reported, not raised."""
    completed = subprocess.run(
        [sys.executable, __file__, "--config", json.dumps(config)], capture_output=True, text=True, check=False
    )
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        return {"failed": (completed.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def describe(result: dict) -> str:
    if "skipped" in result or "failed" in result:
        return result.get("skipped") or f"failed: {result['failed']}"
    extra = f", {result['rows_used']} rows used" if "rows_used" in result else ""
    return f"R^2 {result['r2']:.4f}, {result['seconds']:.1f} s, peak RSS {result['peak_mib']:.0f} MiB{extra}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 000 rows, D = 256, ratio on 1e5 rows")
    parser.add_argument("--huge", action="store_true", help="also 2e6 training rows")
    parser.add_argument("--features", type=int, default=2048, help="D of the random-feature methods")
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--max-exact-rows", type=int, default=8_000, help="memory cap of the exact n x n Gram")
    parser.add_argument("--max-feature-bytes", type=float, default=2 * 2**30, help="cap on RBFSampler's N x D")
    parser.add_argument("--pass-ratio", action="store_true", help="only the fit-pass / moment-pass ratio")
    parser.add_argument("--repeats", type=int, default=3, help="turns of the pass ratio (its median is printed)")
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pass_ratio:
        pass_ratio(args)
        return
    if args.config:
        config = json.loads(args.config)
        result = METHODS[config["method"]](config)
        print(json.dumps({**result, "peak_mib": peak_rss_mib()}))
        return
    sizes = [2_000] if args.quick else [20_000, 200_000] + ([2_000_000] if args.huge else [])
    features = 256 if args.quick else args.features
    common = {
        "features": features,
        "chunk_rows": min(args.chunk_rows, sizes[0] // 2),
        "max_exact_rows": args.max_exact_rows,
        "max_feature_bytes": args.max_feature_bytes,
    }
    print(f"Friedman #1, noise 1 (R^2 ceiling 0.960), {TEST_ROWS} test rows, D = {features}")
    for rows in sizes:
        print(f"\nN = {rows:,} training rows")
        for method in ("exact KernelRidge", "RBFSampler+RidgeCV", "dask-ml Incremental(SGD)", "streamrff KernelRidge"):
            result = in_subprocess({**common, "method": method, "rows": rows})
            print(f"  {method:26s} {describe(result)}", flush=True)
    pass_ratio(args)


def pass_ratio(args: argparse.Namespace) -> None:
    rows = 100_000 if args.quick else 1_000_000
    config = {"method": "pass ratio", "rows": rows, "features": 1024, "chunk_rows": 50_000, "repeats": args.repeats}
    load_before = os.getloadavg()
    print_pass_ratio({**in_subprocess(config), "load_before": load_before}, rows, 1024)


if __name__ == "__main__":
    main()
