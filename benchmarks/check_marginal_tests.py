"""Ranking and family-wise calibration of ``streamrff.marginal_tests`` (per-column tests, Holm-adjusted).

* ranking: 16 standard normal columns, one shifted by 0.3 sd in B; the share of ``--seeds`` seeds
  where that column is ranked first (target >= 19 of 20);
* calibration: no change; the share of ``--null-seeds`` seeds where the Holm-adjusted family
  rejects anything at 0.05 (target <= 7% of 100).

    python benchmarks/check_marginal_tests.py                 # 20 + 100 seeds, n = 2 000 per sample
"""

from __future__ import annotations

import argparse

import numpy as np

import streamrff as srf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--columns", type=int, default=16)
    parser.add_argument("--shift", type=float, default=0.3)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--null-seeds", type=int, default=100)
    parser.add_argument("--permutations", type=int, default=500)
    args = parser.parse_args()
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
