"""Cost of "where do they differ?" next to the passes it is measured against, in one process.

Writes two generated float32 zarr arrays (A and B, ``--rows`` x 16 columns, B with a planted
cluster and one shifted column) and times, in turns (each turn runs every job once; the figure
is the median over the turns, so a machine whose load drifts moves every job alike):

* sketch      - ``srf.sketch(a.zarr, map)``: a mean sketch pass of A (D = 1024, no moments);
* top_rows    - ``srf.witness(sa, sb).top_rows(a.zarr, k=100)``: the per-chunk top-k pass of A;
* explain     - ``srf.explain(sa, sb, a.zarr, k=100)``: top k at both ends, histogram, mean;
* joint test  - ``srf.two_sample_test(a.zarr, b.zarr, n_features=1024, n_permutations=B)``: the
                joint exact permutation test (both sources, one pass);
* marginal    - ``srf.marginal_tests(a.zarr, b.zarr, n_permutations=B)``: 16 per-column tests
                from quantile-bin counts (both sources, one pass, plus the pooled row sample);
* sketch A+B  - a mean sketch pass of A then of B (the rows marginal_tests reads).

Prints the ratios top_rows / sketch, explain / sketch, marginal / joint test and
marginal / sketch A+B (target <= 1.5). The joint permutation test's cost is its B keyed
permutations evaluated per row; the per-column tests bin each value once per row (a compiled
lookup) and draw their B relabellings from the bins' counts after the pass: see
docs/guide/where.rst, "Cost".

Run: python benchmarks/bench_where.py [--rows 400000] [--permutations 200] [--turns 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import streamrff as srf

N_COLUMNS = 16


def write(path: Path, rows: np.ndarray, chunk_rows: int) -> str:
    import zarr

    array = zarr.create_array(
        store=str(path), shape=rows.shape, chunks=(chunk_rows, rows.shape[1]), dtype="float32", zarr_format=3
    )
    array[...] = rows
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    A = rng.normal(size=(args.rows, N_COLUMNS)).astype(np.float32)
    B = rng.normal(size=(args.rows, N_COLUMNS)).astype(np.float32)
    B[: args.rows // 20] = 2.5 + 0.3 * rng.normal(size=(args.rows // 20, N_COLUMNS))
    B[:, 3] += 0.3
    with tempfile.TemporaryDirectory() as folder:
        a_path = write(Path(folder) / "a.zarr", A, args.chunk_rows)
        b_path = write(Path(folder) / "b.zarr", B, args.chunk_rows)
        del A, B
        rff = srf.fit_map(srf.RFF(n_features=1024, bandwidth="median"), [a_path, b_path])
        sketch_a, sketch_b = srf.sketch(a_path, rff), srf.sketch(b_path, rff)
        witness = srf.witness(sketch_a, sketch_b)
        jobs = {
            "sketch": lambda: srf.sketch(a_path, rff),
            "top_rows": lambda: witness.top_rows(a_path, k=100),
            "explain": lambda: srf.explain(sketch_a, sketch_b, a_path, k=100),
            "joint test": lambda: srf.two_sample_test(
                a_path, b_path, feature_map=rff, n_permutations=args.permutations
            ),
            "marginal": lambda: srf.marginal_tests(a_path, b_path, n_permutations=args.permutations),
            "sketch A+B": lambda: (srf.sketch(a_path, rff), srf.sketch(b_path, rff)),
        }
        for job in jobs.values():  # warm-up: compiled kernels, imports
            job()
        times: dict[str, list[float]] = {name: [] for name in jobs}
        for _ in range(args.turns):
            for name, job in jobs.items():
                start = time.perf_counter()
                job()
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"rows per source: {args.rows:,} x {N_COLUMNS}; B = {args.permutations}; median of {args.turns} turns")
    for name, seconds in median.items():
        print(f"  {name:<11} {seconds:8.3f} s")
    print("ratios:")
    print(f"  top_rows / sketch        {median['top_rows'] / median['sketch']:6.2f}")
    print(f"  explain / sketch         {median['explain'] / median['sketch']:6.2f}")
    print(f"  marginal / joint test    {median['marginal'] / median['joint test']:6.2f}")
    print(f"  marginal / sketch A+B    {median['marginal'] / median['sketch A+B']:6.2f}   (target <= 1.5)")


if __name__ == "__main__":
    main()
