"""Ranking and family-wise calibration of ``streamrff.marginal_tests`` (per-column tests, Holm-adjusted).

* ranking: 16 standard normal columns, one shifted by 0.3 sd in B; the share of ``--seeds`` seeds
  where that column is ranked first (target >= 19 of 20);
* calibration: no change; the share of ``--null-seeds`` seeds where the Holm-adjusted family
  rejects anything at 0.05 (target <= 7% of 100);
* ordering (issue #48): 16 normal columns at ``--rank-rows`` rows per sample, every column of B changed
  by a different amount (eight shifted by 0.01-0.08 sd, eight scaled by 1.01-1.08); the Spearman rank
  correlation between the table's order and the order of the columns' exact Gaussian-kernel MMD at the
  table's bandwidths (closed form for normals), for ``marginal_tests`` and for the column table of
  ``explain`` (``column_tests`` of two sketches made with ``columns=True``). Target >= 0.9.

    python benchmarks/check_marginal_tests.py                 # 20 + 100 seeds, n = 2 000; ordering at 200 000
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

import streamrff as srf
from streamrff.twosample.explain import column_tests


def gaussian_mmd(shift: np.ndarray, scale: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """MMD of N(0, 1) and N(shift, scale^2) under the Gaussian kernel of the bandwidth (closed form)."""

    def mean_kernel(variance_sum: np.ndarray, mean_gap: np.ndarray) -> np.ndarray:
        total = bandwidth**2 + variance_sum
        return bandwidth / np.sqrt(total) * np.exp(-(mean_gap**2) / (2.0 * total))

    zero = np.zeros_like(shift)
    mmd2 = mean_kernel(2.0 + zero, zero) + mean_kernel(2.0 * scale**2, zero) - 2.0 * mean_kernel(1.0 + scale**2, shift)
    return np.sqrt(np.maximum(mmd2, 0.0))


def ordering(rows: int, seed: int) -> None:
    """Spearman correlation of the column tables' order with the exact per-column MMD order."""
    rng = np.random.default_rng(seed)
    amounts = 0.01 * (1 + rng.permutation(8))
    shift = np.concatenate([amounts, np.zeros(8)])
    scale = np.concatenate([np.ones(8), 1.0 + 0.01 * (1 + rng.permutation(8))])
    A = rng.normal(size=(rows, 16))
    B = rng.normal(size=(rows, 16)) * scale + shift
    rff = srf.RFF(n_features=64, bandwidth="median", seed=seed).fit(np.concatenate([A[:1000], B[:1000]]))
    tables = {
        "marginal_tests": srf.marginal_tests(A, B, n_permutations=999, seed=seed),
        "explain column table": column_tests(
            srf.sketch_array(A, rff, columns=True), srf.sketch_array(B, rff, columns=True), seed=seed
        ),
    }
    for name, table in tables.items():
        bandwidth = np.empty(16)
        bandwidth[table.columns] = table.bandwidths
        truth = gaussian_mmd(shift, scale, bandwidth)
        position = np.empty(16)
        position[table.columns] = np.arange(16)  # 0 = ranked first
        rho = stats.spearmanr(-position, truth).statistic
        print(f"ordering, {name}, n = {rows:,} per sample, 16 columns all changed: Spearman {rho:.3f} "
              f"(target >= 0.9); table MMD {np.round(table.mmd, 4).tolist()}; "
              f"exact MMD in the table's order {np.round(truth[table.columns], 4).tolist()}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--columns", type=int, default=16)
    parser.add_argument("--shift", type=float, default=0.3)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--null-seeds", type=int, default=100)
    parser.add_argument("--permutations", type=int, default=500)
    parser.add_argument("--rank-rows", type=int, default=200_000)
    parser.add_argument("--rank-seeds", type=int, default=3)
    parser.add_argument("--only-ordering", action="store_true")
    args = parser.parse_args()
    for seed in range(args.rank_seeds):
        ordering(args.rank_rows, seed)
    if args.only_ordering:
        return
    first = 0
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        shifted = int(rng.integers(args.columns))
        A = rng.normal(size=(args.rows, args.columns))
        B = rng.normal(size=(args.rows, args.columns))
        B[:, shifted] += args.shift
        result = srf.marginal_tests(A, B, n_permutations=args.permutations, seed=seed)
        first += int(result.columns[0]) == shifted
    print(f"shift {args.shift} sd in 1 of {args.columns} columns, n = {args.rows:,} per sample: "
          f"ranked first in {first} of {args.seeds} seeds", flush=True)  # fmt: skip
    rejections = 0
    for seed in range(args.null_seeds):
        rng = np.random.default_rng(10_000 + seed)
        A, B = rng.normal(size=(args.rows, args.columns)), rng.normal(size=(args.rows, args.columns))
        rejections += srf.marginal_tests(A, B, n_permutations=args.permutations, seed=seed).rejected(0.05).size > 0
    print(f"no change: the Holm family rejected at 0.05 in {rejections} of {args.null_seeds} seeds "
          f"({rejections / args.null_seeds:.0%})")  # fmt: skip


if __name__ == "__main__":
    main()
