"""Kernel PCA memory and accuracy: the full D x D moment against the streaming Nystrom sketch.

Prints, in one run, each configuration measured in its own subprocess (so that one run's peak
memory does not contaminate the next; peak RSS from ``getrusage``):

1. ``streamrff kpca`` (the CLI, default settings) on an N x d float32 zarr array: peak RSS and
   time for D = 1024, 4096, 16384 with ``--moments full`` (only where a D x D partial fits:
   D <= 4096) and ``--moments low-rank``, next to the peak-memory formula
   ``base + min(chunks, threads + split_every) x 8 D^2`` (full) or ``x 8 D l`` (low-rank);
2. the relative residual error ``|R_hat_k / R_k - 1|`` on scikit-learn's digits (k = 20,
   sigma = median distance) against the exact eigenvalues of ``H K H``, for the same D and
   sketches, with peak RSS and time;
3. scikit-learn's exact ``KernelPCA`` on the largest subset of the zarr rows it can hold under
   the memory limit (doubling from 1000 rows);
4. with ``--large``: 1e6 x 32 rows, D = 4096, k = 10, default settings, under ``ulimit -v``
   (RLIMIT_AS) of ``--memory-limit`` (4 GB by default), both sketches.

Run: python benchmarks/bench_kpca.py [--rows 200000] [--dim 8] [--large]
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

SPLIT_EVERY = 8  # streamrff.sketch's default fan-in


def write_data(path: str, rows: int, dim: int, chunk_rows: int, seed: int = 0) -> None:
    """A mixture of 8 Gaussian clusters in ``dim`` dimensions, float32, written chunk by chunk."""
    import zarr

    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(8, dim))
    stored = zarr.create_array(store=path, shape=(rows, dim), chunks=(chunk_rows, dim), dtype="float32", zarr_format=3)
    for start in range(0, rows, chunk_rows):
        size = min(chunk_rows, rows - start)
        labels = rng.integers(0, 8, size)
        stored[start : start + size] = (centers[labels] + rng.normal(size=(size, dim))).astype(np.float32)


# -- one configuration, in a fresh process ---------------------------------------------------


def run_config(config: dict) -> dict:
    """Run one measured configuration in this process and return its numbers."""
    if config.get("memory_limit"):
        resource.setrlimit(resource.RLIMIT_AS, (config["memory_limit"], config["memory_limit"]))
    started = time.perf_counter()
    result: dict = {}
    if config["task"] == "cli":
        from streamrff.cli import main

        argv = ["kpca", config["source"], "--components", str(config["k"]), "--features", str(config["D"]),
                "--moments", config["moments"], "-o", config["output"], "--json"]  # fmt: skip
        import contextlib
        import io

        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            code = main(argv)
        result = {
            "code": code,
            **{k: v for k, v in json.loads(captured.getvalue()).items() if k in ("moments", "residual")},
        }
    elif config["task"] == "digits":
        from sklearn.datasets import load_digits

        import streamrff as srf

        X = load_digits().data.astype(np.float64)
        model = srf.KernelPCA(n_components=config["k"], n_features=config["D"], bandwidth=config["sigma"],
                              moments=config["moments"]).fit(X)  # fmt: skip
        result = {"residual": model.residual_, "moments": model.moments_}
    elif config["task"] == "sklearn":
        import zarr
        from sklearn.decomposition import KernelPCA as ExactKernelPCA

        rows = np.asarray(zarr.open_array(config["source"], mode="r")[: config["rows"]], dtype=np.float64)
        gamma = 1.0 / (2.0 * config["sigma"] ** 2)
        ExactKernelPCA(n_components=config["k"], kernel="rbf", gamma=gamma, eigen_solver="arpack", random_state=0).fit(
            rows
        )
    result["seconds"] = time.perf_counter() - started
    result["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def measure(config: dict) -> dict:
    """Run ``config`` in a subprocess; a failure (e.g. MemoryError under the limit) is reported, not raised."""
    completed = subprocess.run(
        [sys.executable, __file__, "--config", json.dumps(config)], capture_output=True, text=True, check=False
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        tail = (completed.stderr.strip().splitlines() or ["?"])[-1]
        return {"failed": tail[:100]}
    return json.loads(lines[-1])


def baseline_mib() -> float:
    """Peak RSS of a process that imports streamrff and runs a tiny sketch (interpreter, dask, numba)."""
    code = ("import resource, numpy as np, streamrff as srf; srf.sketch(np.ones((10, 2), 'float32'), "
            "srf.RFF(n_features=8, bandwidth=1.0)); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")  # fmt: skip
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def predicted_mib(base: float, D: int, moments: str, chunks: int, threads: int, k: int, chunk_bytes: int) -> float:
    """The peak-memory formula of streamrff.kpca's docstring, in MiB: the larger of its two phases.

    Sketch: ``min(chunks, threads + split_every)`` partials alive, per thread one chunk and one tile
    product; solve: the full path's merged moment, covariance and one temporary (3 x 8 D^2), or the
    low-rank path's ~9 D x l float64 matrices.
    """
    if moments == "full":
        partial, per_thread, solve = 8 * D * D, 4 * D * D, 3 * 8 * D * D
    else:
        size = min(D, max(4 * k, 512))  # the sketch size l
        tile_rows = max(256, 2**18 // D)
        partial, per_thread, solve = 8 * D * size, 8 * D * size + 4 * tile_rows * D, 9 * 8 * D * size
        base += 8 * D * size / 2**20  # the cached test matrix
    alive = min(chunks, threads + SPLIT_EVERY)
    sketch_phase = alive * partial + threads * (per_thread + chunk_bytes)
    return base + max(sketch_phase, solve) / 2**20


def fmt(result: dict, key: str, spec: str) -> str:
    return format(result[key], spec) if key in result else "-"


def run_large(args: argparse.Namespace, scratch: str) -> None:
    """Section 4: 1e6 x 32 rows, D = 4096, k = 10, default settings and low-rank, under RLIMIT_AS."""
    large = os.path.join(scratch, "large.zarr")
    write_data(large, 1_000_000, 32, 50_000)
    print(f"\n4. streamrff kpca, 1e6 x 32 (20 chunks), D = 4096, k = 10, RLIMIT_AS {args.memory_limit / 1e9:.1f} GB")
    for moments in ("auto", "low-rank"):
        result = measure({"task": "cli", "source": large, "output": os.path.join(scratch, f"l-{moments}.zarr"),
                          "D": 4096, "k": 10, "moments": moments, "memory_limit": int(args.memory_limit)})  # fmt: skip
        print(f"  --moments {moments:<9}({result.get('moments', '?')}): {fmt(result, 'seconds', '.1f')} s, "
              f"peak {fmt(result, 'peak_mib', '.0f')} MiB  {result.get('failed', 'completed')}",
              flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--features", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--components", type=int, default=5, help="k of the CLI runs")
    parser.add_argument("--digits-components", type=int, default=20)
    parser.add_argument("--memory-limit", type=float, default=4e9, help="RLIMIT_AS of the sklearn and --large runs")
    parser.add_argument("--max-sklearn-rows", type=int, default=32_000)
    parser.add_argument("--large", action="store_true", help="also 1e6 x 32, D = 4096, k = 10 under the memory limit")
    parser.add_argument("--only-large", action="store_true", help="run section 4 alone")
    args = parser.parse_args()
    if args.config:
        print(json.dumps(run_config(json.loads(args.config))))
        return

    threads = os.cpu_count() or 1
    print(f"{threads} cores; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    base = baseline_mib()
    print(f"baseline peak RSS (import streamrff, a tiny sketch): {base:.0f} MiB\n")
    with tempfile.TemporaryDirectory() as scratch:
        if args.only_large:
            run_large(args, scratch)
            return
        source = os.path.join(scratch, "rows.zarr")
        write_data(source, args.rows, args.dim, args.chunk_rows)
        chunks = -(-args.rows // args.chunk_rows)
        chunk_bytes = args.chunk_rows * args.dim * 9  # float64 rows + finite mask, as the engine counts
        print(f"1. streamrff kpca, {args.rows:,} x {args.dim} float32 zarr ({chunks} chunks), k = {args.components}")
        print(f"{'D':>7}{'moments':>10}{'seconds':>10}{'peak MiB':>10}{'formula MiB':>13}")
        for D in args.features:
            for moments in ("full", "low-rank"):
                if moments == "full" and 8 * D * D > 256 * 2**20:
                    print(f"{D:>7}{moments:>10}{'skipped: one D x D partial is ' + str(8 * D * D >> 20) + ' MiB':>40}")
                    continue
                output = os.path.join(scratch, f"scores-{D}-{moments}.zarr")
                result = measure({"task": "cli", "source": source, "output": output, "D": D, "k": args.components,
                                  "moments": moments})  # fmt: skip
                formula = predicted_mib(base, D, moments, chunks, threads, args.components, chunk_bytes)
                print(f"{D:>7}{moments:>10}{fmt(result, 'seconds', '.1f'):>10}{fmt(result, 'peak_mib', '.0f'):>10}"
                      f"{formula:>13.0f}  {result.get('failed', '')}")  # fmt: skip

        # 2. digits against exact eigenvalues
        from scipy.spatial.distance import pdist, squareform
        from sklearn.datasets import load_digits

        X = load_digits().data.astype(np.float64)
        distances = pdist(X)
        sigma = float(np.median(distances))
        gram = np.exp(-squareform(distances**2) / (2 * sigma * sigma))
        centred = gram - gram.mean(axis=0) - gram.mean(axis=1)[:, None] + gram.mean()
        exact = np.linalg.eigvalsh(centred)[::-1]
        k = args.digits_components
        r_k = float(exact[k:].sum())
        print(f"\n2. digits (1 797 x 64), k = {k}, sigma = median distance = {sigma:.1f}: exact R_k = {r_k:.2f}")
        print(f"{'D':>7}{'moments':>10}{'seconds':>10}{'peak MiB':>10}{'|R_hat_k/R_k - 1|':>20}")
        for D in args.features:
            for moments in ("full", "low-rank"):
                if moments == "full" and 8 * D * D > 256 * 2**20:
                    print(f"{D:>7}{moments:>10}{'skipped (6.3 GiB before this change)':>40}")
                    continue
                result = measure({"task": "digits", "D": D, "k": k, "sigma": sigma, "moments": moments})
                error = abs(result["residual"] / r_k - 1) if "residual" in result else float("nan")
                print(f"{D:>7}{moments:>10}{fmt(result, 'seconds', '.1f'):>10}{fmt(result, 'peak_mib', '.0f'):>10}"
                      f"{error:>20.4f}  {result.get('failed', '')}")  # fmt: skip

        # 3. scikit-learn's exact KernelPCA on the largest subset it holds
        print(
            "\n3. scikit-learn KernelPCA (exact, arpack) on the first n rows, "
            f"RLIMIT_AS {args.memory_limit / 1e9:.1f} GB"
        )
        rows, largest = 1000, None
        while rows <= min(args.max_sklearn_rows, args.rows):
            result = measure({"task": "sklearn", "source": source, "rows": rows, "k": args.components,
                              "sigma": sigma, "memory_limit": int(args.memory_limit)})  # fmt: skip
            print(f"  n = {rows:>7,}: {fmt(result, 'seconds', '.1f'):>6} s, "
                  f"peak {fmt(result, 'peak_mib', '.0f'):>6} MiB  {result.get('failed', '')}")  # fmt: skip
            if "failed" in result:
                break
            largest, rows = rows, rows * 2
        print(f"  largest subset held: {largest:,} rows of {args.rows:,}" if largest else "  none")

        if args.large:
            run_large(args, scratch)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
