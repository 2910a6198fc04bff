"""A job over very many small chunks: client peak RSS and time per chunk, 1e6 chunks against 1e4.

A dask source of N chunks of 4 rows each (``dask.array.from_array(rows, chunks=(4, d))``) is
sketched with the engine's default ``max_tasks`` (10 000): beyond it, consecutive chunks are grouped
into one task (docs/guide/engine.rst, "How tasks are grouped"). Each size runs in a fresh process,
so its peak RSS is its own; the same rows sketched in large chunks (100 000 rows) are the
reference, equal to float32 rounding of the features (max |difference| / count of the feature sums).

What dominates at 1e6 chunks is dask's own graph of the source (a getitem task per chunk, and the
rechunk tasks that hand each group its chunks): a few kilobytes and a fraction of a millisecond
per chunk on the client, which the engine bounds by running such a source in waves of 32 768
chunks (``streamrff.engine.tasks.WAVE_CHUNKS``). A zarr source of as many
stored chunks costs far less: its grouped tasks read their stored chunks themselves, so the graph
holds only the groups.

Timings on a shared, loaded machine are not figures: the lead takes them on an idle machine.

Run: python benchmarks/bench_many_chunks.py [--chunks 10000,1000000] [--features 256]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROWS_PER_CHUNK, WIDTH = 4, 8


def measure(n_chunks: int, n_features: int) -> dict[str, float]:
    """In this process: sketch N chunks of 4 rows; peak RSS right after, then the large-chunk reference."""
    import dask.array as da
    import numpy as np

    import streamrff as srf

    rows = np.random.default_rng(0).standard_normal((n_chunks * ROWS_PER_CHUNK, WIDTH), dtype=np.float32)
    rff = srf.RFF(n_features=n_features, bandwidth=2.0, seed=0).fit(rows[:10])
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    small = srf.sketch(da.from_array(rows, chunks=(ROWS_PER_CHUNK, WIDTH)), rff)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    large = srf.sketch(da.from_array(rows, chunks=(100_000, WIDTH)), rff)
    difference = float(np.abs(small.feature_sum - large.feature_sum).max() / small.count)
    return {
        "chunks": n_chunks,
        "seconds": seconds,
        "us_per_chunk": seconds / n_chunks * 1e6,
        "peak_rss_mb": peak / 2**20,
        "rss_before_mb": baseline / 2**20,
        "mean_difference": difference,
        "equal_counts": small.count == large.count == rows.shape[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="10000,1000000", help="comma-separated chunk counts")
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(measure(args.worker, args.features)))
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a loaded machine: indicative only)")
    print(f"{'chunks':>10} {'seconds':>9} {'us/chunk':>9} {'peak RSS MB':>12} {'(before) MB':>12} {'|diff|/n':>10}")
    results = []
    for n_chunks in (int(text) for text in args.chunks.split(",")):
        command = [sys.executable, __file__, "--worker", str(n_chunks), "--features", str(args.features)]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        result = json.loads(output.strip().splitlines()[-1])
        results.append(result)
        print(
            f"{result['chunks']:>10,} {result['seconds']:>9.1f} {result['us_per_chunk']:>9.1f} "
            f"{result['peak_rss_mb']:>12.0f} {result['rss_before_mb']:>12.0f} {result['mean_difference']:>10.1e}"
        )
    if len(results) > 1:
        ratio = results[-1]["us_per_chunk"] / results[0]["us_per_chunk"]
        print(f"time per chunk, {results[-1]['chunks']:,} chunks / {results[0]['chunks']:,} chunks: {ratio:.2f}x")


if __name__ == "__main__":
    main()
