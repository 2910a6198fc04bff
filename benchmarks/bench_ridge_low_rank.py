"""Low-rank kernel ridge (``rank=k``) against the full D x D solve: test R^2 and accuracy, side by side.

The set-ups of docs/guide/ridge.rst ("Wide maps: the low-rank solve"): Friedman #1
(``make_friedman1(noise=1.0, random_state=0)``, N training rows and the next 4 000 as test rows,
R^2 ceiling 0.960) and digits (1 200 / 597 rows of a seeded permutation, one vs rest), each fitted
once in full and once per rank with the same map (same seed and median bandwidth). Prints the
score of each and its difference from the full fit; the low-rank sketch uses sketch_size
``min(D, 2 k)``. Timings are not printed: only the scores are meaningful on a busy machine.

Run: python benchmarks/bench_ridge_low_rank.py friedman [--rows 20000] [--features 2048] [--ranks 256 384 512]
     python benchmarks/bench_ridge_low_rank.py digits [--features 4096] [--ranks 256 512]
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits, make_friedman1

import streamrff as srf


def friedman(rows: int, n_features: int, ranks: list[int]) -> None:
    inputs, targets = make_friedman1(n_samples=rows + 4000, noise=1.0, random_state=0)
    train, test = slice(0, rows), slice(rows, None)
    full = srf.KernelRidge(n_features=n_features).fit(inputs[train], targets[train])
    full_r2 = full.score(inputs[test], targets[test])
    print(f"Friedman #1, {rows} rows, D = {n_features}: full test R^2 {full_r2:.4f} (alpha {full.alpha_:.3g})")
    for rank in ranks:
        low = srf.KernelRidge(n_features=n_features, rank=rank).fit(inputs[train], targets[train])
        r2 = low.score(inputs[test], targets[test])
        print(f"  rank {rank:5d} (sketch_size {min(n_features, 2 * rank):5d}): test R^2 {r2:.4f} "
              f"({r2 - full_r2:+.4f}; alpha {low.alpha_:.3g})")  # fmt: skip


def digits(n_features: int, ranks: list[int]) -> None:
    data, labels = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(data))
    train, test = order[:1200], order[1200:]
    full = srf.KernelRidgeClassifier(n_features=n_features, seed=0).fit(data[train], labels[train])
    full_accuracy = full.score(data[test], labels[test])
    print(f"digits, D = {n_features}: full test accuracy {full_accuracy:.4f} (alpha {full.alpha_:.3g})")
    for rank in ranks:
        low = srf.KernelRidgeClassifier(n_features=n_features, seed=0, rank=rank).fit(data[train], labels[train])
        accuracy = low.score(data[test], labels[test])
        print(f"  rank {rank:5d} (sketch_size {min(n_features, 2 * rank):5d}): test accuracy {accuracy:.4f} "
              f"({accuracy - full_accuracy:+.4f}; alpha {low.alpha_:.3g})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=["friedman", "digits"])
    parser.add_argument("--rows", type=int, default=20000, help="Friedman training rows (default: 20000)")
    parser.add_argument("--features", type=int, default=None, help="D (default: 2048 Friedman, 4096 digits)")
    parser.add_argument("--ranks", type=int, nargs="+", default=None, help="ranks k (default: 256 384 512 / 256 512)")
    args = parser.parse_args()
    if args.dataset == "friedman":
        friedman(args.rows, args.features or 2048, args.ranks or [256, 384, 512])
    else:
        digits(args.features or 4096, args.ranks or [256, 512])


if __name__ == "__main__":
    main()
