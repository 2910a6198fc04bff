"""The column table of ``explain`` from sketches made with ``columns=True``: ranking, calibration, cost.

* ranking: 16 standard normal columns, one shifted by 0.3 sd in B; the share of ``--seeds`` seeds
  where the column table (spectral null from the column moments, Holm) ranks it first;
* calibration: no change; the share of single-column p-values below 0.05 (about 5% expected), and
  of ``--null-seeds`` seeds where the Holm-adjusted family rejects anything at 0.05;
* cost: a sketch pass of the same rows with and without the column part, side by side
  (``--cost-rows`` rows, D = 1 024), best of 3.

    python benchmarks/check_column_sketch.py              # 20 + 100 seeds, n = 2 000 per sample
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import streamrff as srf
from streamrff.twosample.explain import column_tests


def _tables(rows: int, columns: int, shift: float, seed: int):
    rng = np.random.default_rng(seed)
    shifted = int(rng.integers(columns))
    A, B = rng.normal(size=(rows, columns)), rng.normal(size=(rows, columns))
    B[:, shifted] += shift
    rff = srf.RFF(n_features=256, bandwidth="median", seed=seed).fit(np.vstack([A, B]))
    sketches = [srf.sketch_array(X, rff, columns=True) for X in (A, B)]
    return shifted, column_tests(*sketches, seed=seed)


def _best_of_three(run) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--columns", type=int, default=16)
    parser.add_argument("--shift", type=float, default=0.3)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--null-seeds", type=int, default=100)
    parser.add_argument("--cost-rows", type=int, default=200_000)
    args = parser.parse_args()
    first = sum(
        int(table.columns[0]) == shifted
        for shifted, table in (_tables(args.rows, args.columns, args.shift, seed) for seed in range(args.seeds))
    )
    print(f"shift {args.shift} sd in 1 of {args.columns} columns, n = {args.rows:,} per sample: "
          f"ranked first in {first} of {args.seeds} seeds", flush=True)  # fmt: skip
    rejections, p_values = 0, []
    for seed in range(args.null_seeds):
        _, table = _tables(args.rows, args.columns, 0.0, 10_000 + seed)
        rejections += table.rejected(0.05).size > 0
        p_values += list(table.p_values)
    p_values = np.array(p_values)
    if args.null_seeds:
            print(f"no change: single-column p < 0.05 in {np.mean(p_values < 0.05):.1%} of {p_values.size} tests, "
              f"mean p {p_values.mean():.3f}; the Holm family rejected at 0.05 in {rejections} of "
              f"{args.null_seeds} seeds ({rejections / args.null_seeds:.0%})", flush=True)  # fmt: skip
    X = np.random.default_rng(0).normal(size=(args.cost_rows, args.columns)).astype(np.float32)
    rff = srf.RFF(n_features=1024, bandwidth="median").fit(X)
    plain = _best_of_three(lambda: srf.sketch(X, rff, chunk_rows=50_000))
    moments = _best_of_three(lambda: srf.sketch(X, rff, chunk_rows=50_000, moments=True))
    both = _best_of_three(lambda: srf.sketch(X, rff, chunk_rows=50_000, moments=True, columns=True))
    print(f"sketch pass, {args.cost_rows:,} x {args.columns} rows, D = 1024: sums {plain:.2f} s, with moments "
          f"{moments:.2f} s, with moments and columns (64 features each) {both:.2f} s "
          f"({both / moments:.2f}x the moments pass)")  # fmt: skip


if __name__ == "__main__":
    main()
