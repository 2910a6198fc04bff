"""Throughput and peak memory of ``streamrff.sketch`` next to scikit-learn and dask-ml baselines.

Writes a generated float32 zarr array (d = 32 columns) to disk, then measures, each in a fresh
Python subprocess so that peak RSS belongs to one job only:

* ours      - ``streamrff.sketch(path, RFF(n_features=1024))`` on the embedded local default
              (reads the zarr array chunk by chunk; default sincos variant);
* ours-cos  - the same with ``variant="cosphase"`` (1024 frequencies, what RBFSampler computes);
* sklearn   - ``RBFSampler(n_components=1024).fit(X).transform(X).mean(0)`` on the same rows
              held in memory as float64 (scikit-learn's default path; loading is not timed);
* dask-ml   - ``ParallelPostFit(RBFSampler(n_components=1024)).transform(dask_array).mean(0)``
              on ``da.from_zarr(path)`` with dask's threaded scheduler (if dask-ml is installed);
* before    - ours, imported from another source tree of streamrff (``--baseline-tree DIR``, e.g. a
              ``git worktree add DIR <commit>`` of the release before a change), run alternately with
              ours, round by round, so that both see the same machine (the ratio ours / before).

Every job computes the mean feature vector (the kernel mean embedding) with the same kernel
width (sigma = sqrt(d), gamma = 1 / (2 sigma^2)). Rows/s is rows / wall time of the job's
compute call; peak RSS is the job process's ``ru_maxrss`` (cross-checked by polling the process
tree with psutil) and includes the interpreter and its imports (``baseline``). Finally ours runs
at each ``--compare-rows`` size to show that its peak RSS does not grow with the rows.

Run: python benchmarks/bench_sketch.py [--rows 1e6] [--compare-rows 1000000,10000000]
     [--jobs ours,dask-ml] [--repeat 3] [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

N_COLUMNS = 32
N_FEATURES = 1024
SIGMA = math.sqrt(N_COLUMNS)
GAMMA = 1.0 / (2.0 * SIGMA**2)
JOBS = ("ours", "ours-cos", "sklearn", "dask-ml", "before")


def count(text: str) -> int:
    value = float(text)
    if not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number such as 1e6, got {text!r}")
    return int(value)


def counts(text: str) -> list[int]:
    return [count(part) for part in text.split(",") if part.strip()]


def write_data(path: str, n_rows: int, chunk_rows: int) -> None:
    """Standard normal float32 rows, written chunk by chunk (never all in memory)."""
    import zarr

    array = zarr.create_array(
        path, shape=(n_rows, N_COLUMNS), chunks=(chunk_rows, N_COLUMNS), dtype="float32", overwrite=True
    )
    for index, start in enumerate(range(0, n_rows, chunk_rows)):
        stop = min(n_rows, start + chunk_rows)
        array[start:stop] = np.random.default_rng([7, index]).standard_normal(
            (stop - start, N_COLUMNS), dtype=np.float32
        )


def peak_rss_bytes() -> int:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) * 1024  # Linux reports KiB


# -- one job, in its own process ------------------------------------------------------------


def run_job(job: str, path: str) -> dict:
    import dask.array as da
    import zarr

    if job in ("ours", "ours-cos", "before"):
        import streamrff as srf

        variant = "cosphase" if job == "ours-cos" else "sincos"  # "before" is ours from another tree
        feature_map = srf.RFF(n_features=N_FEATURES, bandwidth=SIGMA, variant=variant)
        baseline = peak_rss_bytes()
        start = time.perf_counter()
        result = srf.sketch(path, feature_map)
        seconds = time.perf_counter() - start
        n_rows, mean = result.count, result.mean
    elif job == "sklearn":
        from sklearn.kernel_approximation import RBFSampler

        rows = zarr.open_array(path, mode="r")[...].astype(np.float64)
        baseline = peak_rss_bytes()
        start = time.perf_counter()
        mean = RBFSampler(n_components=N_FEATURES, gamma=GAMMA, random_state=0).fit(rows).transform(rows).mean(0)
        seconds = time.perf_counter() - start
        n_rows = rows.shape[0]
    elif job == "dask-ml":
        try:
            from dask_ml.wrappers import ParallelPostFit
        except ImportError as error:
            return {"job": job, "skipped": f"dask-ml is not importable ({error}); try pip install dask-ml"}
        from sklearn.kernel_approximation import RBFSampler

        array = da.from_zarr(path)
        baseline = peak_rss_bytes()
        start = time.perf_counter()
        # RBFSampler.fit only reads the number of columns; transform runs per dask chunk.
        model = ParallelPostFit(RBFSampler(n_components=N_FEATURES, gamma=GAMMA, random_state=0))
        model.fit(array[:1_000].compute())
        mean = model.transform(array).mean(axis=0).compute(scheduler="threads")
        seconds = time.perf_counter() - start
        n_rows = array.shape[0]
    else:  # pragma: no cover - guarded by argparse choices
        raise ValueError(job)
    return {
        "job": job,
        "rows": int(n_rows),
        "seconds": seconds,
        "rows_per_s": n_rows / seconds,
        "peak_rss": peak_rss_bytes(),
        "baseline_rss": baseline,
        "mean_norm": float(np.linalg.norm(mean)),
    }


# -- the driver -------------------------------------------------------------------------------


def measure(job: str, path: str, baseline_tree: str | None = None) -> dict:
    """Run one job in a fresh interpreter (``before`` imports streamrff from ``baseline_tree``); poll its process
    tree's RSS as a cross-check."""
    import psutil

    command = [sys.executable, os.path.abspath(__file__), "--job", job, "--path", path]
    env = dict(os.environ)
    if job == "before":
        env["PYTHONPATH"] = os.path.abspath(baseline_tree)
        command = [sys.executable, "-P", *command[1:]]  # -P: the script's folder must not shadow the tree
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    polled_peak = 0
    watched = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            tree = [watched, *watched.children(recursive=True)]
            polled_peak = max(polled_peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            pass
        time.sleep(0.05)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        return {
            "job": job,
            "failed": stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {process.returncode}",
        }
    result = json.loads(stdout.strip().splitlines()[-1])
    if "peak_rss" in result:
        result["peak_rss"] = max(result["peak_rss"], polled_peak)
    return result


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.0f} MiB"


def describe(result: dict) -> str:
    if "skipped" in result:
        return f"  {result['job']:<9} skipped: {result['skipped']}"
    if "failed" in result:
        return f"  {result['job']:<9} FAILED: {result['failed']}"
    return (
        f"  {result['job']:<9} {result['rows']:>11,} rows  {result['seconds']:8.2f} s  "
        f"{result['rows_per_s']:>12,.0f} rows/s  peak RSS {mib(result['peak_rss']):>10} "
        f"(baseline {mib(result['baseline_rss'])})  |mean z| = {result['mean_norm']:.4f}"
    )


def ratio(numerator: dict, denominator: dict) -> str:
    if "rows_per_s" not in numerator or "rows_per_s" not in denominator:
        return "n/a (" + denominator.get("skipped", denominator.get("failed", "not measured")) + ")"
    return f"{numerator['rows_per_s'] / denominator['rows_per_s']:.2f}x"


def sklearn_fits_in_memory(n_rows: int) -> tuple[bool, str]:
    import psutil

    # rows as float64 + the (n, D) float64 features, which transform materialises.
    needed = n_rows * (N_COLUMNS + N_FEATURES) * 8 * 1.2
    available = psutil.virtual_memory().available
    return needed < 0.8 * available, f"needs ~{needed / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=count, default=1_000_000, help="rows for the side-by-side comparison (default 1e6)"
    )
    parser.add_argument(
        "--compare-rows",
        type=counts,
        default=[1_000_000, 10_000_000],
        help="comma-separated row counts at which to measure ours' peak RSS (default 1000000,10000000)",
    )
    parser.add_argument("--chunk-rows", type=count, default=50_000, help="rows per zarr chunk (default 50000)")
    parser.add_argument(
        "--workdir", default=None, help="where to write the generated arrays (default: a temporary directory)"
    )
    parser.add_argument(
        "--jobs",
        type=lambda text: [j for j in text.split(",") if j],
        default=list(JOBS),
        help=f"comma-separated subset of {','.join(JOBS)} (default: all)",
    )
    parser.add_argument(
        "--repeat",
        type=count,
        default=1,
        help="runs per job, each in a fresh process; the fastest is reported (for busy machines)",
    )
    parser.add_argument(
        "--baseline-tree", default=None, metavar="DIR",
        help="a source tree of another streamrff version (a git worktree): adds the job 'before', run alternately "
        "with 'ours' in every round, and prints ours / before",
    )  # fmt: skip
    parser.add_argument("--job", choices=JOBS, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.jobs) - set(JOBS))
    if unknown:
        parser.error(f"--jobs: unknown job(s) {', '.join(unknown)}; choose from {', '.join(JOBS)}")
    if args.baseline_tree is None:
        args.jobs = [job for job in args.jobs if job != "before"]
    elif not os.path.isdir(os.path.join(args.baseline_tree, "streamrff")):
        parser.error(f"--baseline-tree {args.baseline_tree}: no streamrff package in it (a checkout of the repo)")

    if args.job:  # child mode: one measurement, one JSON line
        print(json.dumps(run_job(args.job, args.path)))
        return 0

    import dask
    import sklearn

    import streamrff

    with tempfile.TemporaryDirectory(prefix="streamrff-bench-", dir=args.workdir) as workdir:
        paths = {}

        def data(n_rows: int) -> str:
            if n_rows not in paths:
                paths[n_rows] = os.path.join(workdir, f"rows-{n_rows}.zarr")
                started = time.perf_counter()
                write_data(paths[n_rows], n_rows, args.chunk_rows)
                print(f"(wrote {n_rows:,} x {N_COLUMNS} float32 in {time.perf_counter() - started:.1f} s)", flush=True)
            return paths[n_rows]

        print(
            f"streamrff {streamrff.__version__}, dask {dask.__version__}, scikit-learn {sklearn.__version__}, "
            f"{os.cpu_count()} cores; d = {N_COLUMNS}, D = {N_FEATURES}, float32 zarr, "
            f"{args.chunk_rows:,} rows per chunk"
        )
        print(f"\nside by side at {args.rows:,} rows (each job in a fresh process):", flush=True)

        def fastest(runs: list[dict]) -> dict:
            timed = [run for run in runs if "rows_per_s" in run]
            return max(timed, key=lambda run: run["rows_per_s"]) if timed else runs[0]

        def best(job: str, n_rows: int) -> dict:
            return fastest([measure(job, data(n_rows), args.baseline_tree) for _ in range(args.repeat)])

        results = {job: {"job": job, "skipped": "not selected (--jobs)"} for job in JOBS}
        if "before" in args.jobs:  # ours and before alternate, round by round: the same machine for both
            rounds: dict[str, list[dict]] = {"ours": [], "before": []}
            for _ in range(args.repeat):
                for job in rounds:
                    rounds[job].append(measure(job, data(args.rows), args.baseline_tree))
            for job, runs in rounds.items():
                results[job] = fastest(runs)
                seconds = ", ".join(f"{run['seconds']:.2f}" for run in runs if "seconds" in run)
                print(describe(results[job]) + f"  (rounds: {seconds} s)", flush=True)
        alternated = {"ours", "before"} if "before" in args.jobs else set()
        for job in [job for job in args.jobs if job not in alternated]:
            if job == "sklearn":
                fits, note = sklearn_fits_in_memory(args.rows)
                if not fits:
                    results[job] = {"job": job, "skipped": f"not enough memory for the in-memory baseline ({note})"}
                    print(describe(results[job]), flush=True)
                    continue
            results[job] = best(job, args.rows)
            print(describe(results[job]), flush=True)

        print("\nratios of rows/s:")
        if "before" in args.jobs:
            print(f"  ours / before        {ratio(results['ours'], results['before'])}  (before: {args.baseline_tree})")
        print(f"  ours / sklearn       {ratio(results['ours'], results['sklearn'])}")
        print(f"  ours / dask-ml       {ratio(results['ours'], results['dask-ml'])}")
        print(f"  ours-cos / sklearn   {ratio(results['ours-cos'], results['sklearn'])}")
        print(f"  ours-cos / dask-ml   {ratio(results['ours-cos'], results['dask-ml'])}")
        if "peak_rss" in results["ours"] and "peak_rss" in results["sklearn"]:
            print(f"  peak RSS sklearn / ours  {results['sklearn']['peak_rss'] / results['ours']['peak_rss']:.1f}x")

        print("\npeak RSS of ours by rows (constant memory: it streams chunks):", flush=True)
        by_rows = {}
        for n_rows in args.compare_rows:
            reuse = n_rows == args.rows and "peak_rss" in results["ours"]
            by_rows[n_rows] = results["ours"] if reuse else measure("ours", data(n_rows))
            print(describe(by_rows[n_rows]), flush=True)
        measured = [r for r in by_rows.values() if "peak_rss" in r]
        if len(measured) >= 2:
            first, last = measured[0], measured[-1]
            print(
                f"  {last['rows']:,} vs {first['rows']:,} rows: {last['rows'] / first['rows']:.0f}x the rows, "
                f"{last['peak_rss'] / first['peak_rss']:.2f}x the peak RSS "
                f"({mib(first['peak_rss'])} -> {mib(last['peak_rss'])})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
