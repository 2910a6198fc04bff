"""Type-I error of the mixed-kernel two-sample test on tables (issue 47): target 0.03-0.07 at level 0.05.

Both samples come from one table distribution: 2 standard normal columns and categorical columns whose
categories follow a Zipf law (p_k proportional to 1 / (k + 1)) over L levels, L from 1 to 1e5 (at 1e5
most categories are seen once, or never: the hard case for a vocabulary-free hash); the "mixed" table
has three categorical columns of 1, 100 and 1e5 levels. Each repetition fits the mixed map
(``srf.RFF(categorical=...)``, median bandwidth, ``mismatch="auto"``) on the pooled rows, then runs the
exact permutation test (B permutations) and the spectral null (``srf.mmd_test`` on moment sketches),
and counts p <= 0.05. With ``--method aggregated`` it runs the aggregated test on tables instead
(``srf.two_sample_test(method="aggregated", categorical=...)``: the mixed kernel over bandwidths x lambdas
and each categorical column's delta kernel, aggregation ``max``, B permutations, D features per map).

    python benchmarks/check_tables_calibration.py                   # 200 repetitions, n = 500 per sample
    python benchmarks/check_tables_calibration.py --repetitions 50  # a quick look
    python benchmarks/check_tables_calibration.py --method aggregated

With 200 repetitions the binomial standard error at 0.05 is 0.015: the target band is about +-1.3 of it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import streamrff as srf

#: (name, levels of each categorical column)
TABLES = (
    ("1e5 levels", (100_000, 100_000)),
    ("mixed 1/100/1e5", (1, 100, 100_000)),
    ("1e3 levels", (1000, 1000)),
    ("10 levels", (10, 10)),
    ("1 level", (1, 1)),
)


def zipf_codes(rng: np.random.Generator, levels: int, size: int) -> np.ndarray:
    """Category codes 0..levels-1 with p_k proportional to 1 / (k + 1)."""
    weights = 1.0 / np.arange(1, levels + 1)
    return rng.choice(levels, size=size, p=weights / weights.sum()).astype(np.float64)


def mixed_table(rng: np.random.Generator, levels: tuple[int, ...], rows: int, numeric: int = 2) -> np.ndarray:
    """Rows of ``numeric`` standard normal columns, then one Zipf categorical column per entry of ``levels``."""
    return np.column_stack([rng.normal(size=(rows, numeric))] + [zipf_codes(rng, level, rows) for level in levels])


def rejection_rates(
    levels: tuple[int, ...],
    rows: int,
    repetitions: int,
    permutations: int,
    features: int,
    draws: int = 2000,
    seed: int = 0,
    progress: int = 0,
    method: str = "mixed",
) -> dict[str, float]:
    """Share of repetitions with p <= 0.05: the permutation and the spectral null, or the aggregated test."""
    rejected = {"permutation": 0, "spectral": 0} if method == "mixed" else {"aggregated": 0}
    categorical = list(range(2, 2 + len(levels)))
    for repetition in range(repetitions):
        rng = np.random.default_rng([seed, repetition])
        X, Y = mixed_table(rng, levels, rows), mixed_table(rng, levels, rows)
        if method == "aggregated":
            result = srf.two_sample_test(
                X, Y, n_features=features, n_permutations=permutations, seed=repetition, method="aggregated",
                categorical=categorical,
            )  # fmt: skip
            rejected["aggregated"] += result.p_value <= 0.05
            if progress and (repetition + 1) % progress == 0:
                print(f"    {repetition + 1} repetitions: {rejected}", flush=True)
            continue
        feature_map = srf.RFF(n_features=features, categorical=categorical, seed=repetition).fit(np.vstack([X, Y]))
        permutation = srf.two_sample_test(X, Y, n_permutations=permutations, seed=repetition, feature_map=feature_map)
        rejected["permutation"] += permutation.p_value <= 0.05
        # the spectral null reads moment sketches: made here in memory (no engine), the null from n_draws draws
        moments = [srf.sketch_array(rows, feature_map, moments=True) for rows in (X, Y)]
        spectral = srf.mmd_test(*moments, method="spectral", seed=repetition, n_draws=draws)
        rejected["spectral"] += spectral.p_value <= 0.05
        if progress and (repetition + 1) % progress == 0:
            print(f"    {repetition + 1} repetitions: {rejected}", flush=True)
    return {method: count / repetitions for method, count in rejected.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500, help="rows per sample")
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--permutations", type=int, default=199)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--draws", type=int, default=2000, help="Monte-Carlo draws of the spectral null")
    parser.add_argument("--seed", type=int, default=0, help="block of seeded tables (repetition r: [seed, r])")
    parser.add_argument("--method", choices=("mixed", "aggregated"), default="mixed",
                        help="the mixed map's permutation and spectral nulls, or the aggregated test")  # fmt: skip
    parser.add_argument("--table", action="append", default=None, choices=[name for name, _ in TABLES],
                        help="only this table (repeatable; default: all)")  # fmt: skip
    args = parser.parse_args()
    print(f"type-I error at 0.05, n = {args.rows} per sample, D = {args.features}, {args.repetitions} repetitions, "
          f"B = {args.permutations}, {args.draws} spectral draws (target 0.03-0.07)", flush=True)  # fmt: skip
    methods = ("permutation", "spectral") if args.method == "mixed" else ("aggregated",)
    print(f"{'table':>18}" + "".join(f" {name:>12}" for name in methods) + f" {'seconds':>8}")
    for name, levels in TABLES:
        if args.table is not None and name not in args.table:
            continue
        start = time.perf_counter()
        rates = rejection_rates(
            levels, args.rows, args.repetitions, args.permutations, args.features, args.draws, seed=args.seed,
            progress=50, method=args.method,
        )  # fmt: skip
        shown = "".join(f" {rates[m]:>10.3f}{'' if 0.03 <= rates[m] <= 0.07 else ' *':2}" for m in methods)
        print(f"{name:>18}{shown} {time.perf_counter() - start:>8.0f}", flush=True)
    print("(* outside 0.03-0.07)")


if __name__ == "__main__":
    main()
