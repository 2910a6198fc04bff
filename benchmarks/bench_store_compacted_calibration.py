"""Calibration of the store's bucket-permutation test and series over compacted ranges (issue #45).

Under no change (every row N(0, I_3)), a store of 10-row buckets is compacted into buckets of 20
rows at 16 of its 32 features (the common prefix). Each of R disjoint segments gives:

* the test of 4 compacted buckets against 8 fine ones (mixed: 8 units of one span, 70 labellings,
  every one used): the share of p <= 0.05 (target: 3-7% at R = 200);
* the series p-value of a window of 4 fine buckets (2 units) against a reference of 16 compacted
  buckets (153 labellings): uniform (target: KS p > 0.01).

Segments hold disjoint rows, so the R p-values of each kind are independent. Printed: the
rejection rate and its ratio to 0.05, the KS p-value and its ratio to 0.01.

Run: python benchmarks/bench_store_compacted_calibration.py [--reps 200] [--permutations 199]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from scipy import stats

import streamrff as srf

ROWS, RATIO = 10, 2
COMPACTED, FINE = 32, 8  # fine buckets per segment: compacted (16 coarse), and left fine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--permutations", type=int, default=199)
    args = parser.parse_args()
    reps = args.reps
    rff = srf.RFF(n_features=32, bandwidth=1.0, seed=1).fit(np.zeros((1, 3)))
    store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s.store"), rff, bucket=ROWS)
    n_buckets = reps * (COMPACTED + FINE)
    started = time.perf_counter()
    store.append(np.random.default_rng(2026).normal(size=(n_buckets * ROWS, 3)).astype(np.float32))
    horizon = reps * COMPACTED * ROWS  # segment r: compacted rows [r C R, (r+1) C R), fine: horizon + [r F R, ...)
    store.compact(older_than=horizon, to=RATIO * ROWS, features=16)
    print(f"store: {n_buckets} buckets appended and compacted in {time.perf_counter() - started:.1f} s")
    test_p, series_p = [], []
    started = time.perf_counter()
    for rep in range(reps):
        old = rep * COMPACTED * ROWS
        new = horizon + rep * FINE * ROWS
        test_p.append(store.test((old, old + 8 * ROWS), (new, new + FINE * ROWS), args.permutations, seed=rep).p_value)
        series = store.series(
            reference=(old, old + COMPACTED * ROWS), every=4, start=new, stop=new + 4 * ROWS,
            n_permutations=args.permutations, seed=rep,
        )  # fmt: skip
        series_p.append(float(series.p_value[0]))
    rejected = float(np.mean(np.array(test_p) <= 0.05))
    ks = float(stats.kstest(series_p, "uniform").pvalue)
    print(f"{reps} segments tested in {time.perf_counter() - started:.1f} s (loaded machine: not a timing figure)")
    print(f"mixed test (4 compacted vs 8 fine buckets, 16 features): rejects {rejected:.3f} at 5% "
          f"(ratio to 0.05: {rejected / 0.05:.2f}; target 3-7%: {'met' if 0.03 <= rejected <= 0.07 else 'NOT met'})")
    print(f"series over a compacted reference: KS p = {ks:.3f} (ratio to 0.01: {ks / 0.01:.1f}; target > 0.01: "
          f"{'met' if ks > 0.01 else 'NOT met'})")  # fmt: skip


if __name__ == "__main__":
    main()
