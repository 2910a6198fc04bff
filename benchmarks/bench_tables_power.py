"""Power of the mixed-kernel two-sample test on tables against per-column tests (issue 47), n = 5 000 per sample.

Two alternatives on a table of 2 numeric and 2 categorical columns (x ~ N(0, 1), z ~ N(0, 1),
c in {a, b} at 50/50, d uniform over 10 levels):

(a) ``frequency``: in B, ``--delta`` of d's probability moves from its level 0 to its level 1;
(b) ``dependence``: in A, ``x | c = a ~ N(+mu, 1)`` and ``x | c = b ~ N(-mu, 1)``; in B the signs swap.
    Every column's marginal is the same in A and B (x is the mixture 0.5 N(mu, 1) + 0.5 N(-mu, 1) in
    both), so per-column tests stay at their size; only how c and x go together changed.

Each repetition runs, at level 0.05:

* ``streamrff``: the exact permutation test (B = ``--permutations``) of the mixed map
  ``srf.RFF(categorical=[2, 3], mismatch=...)`` (median bandwidth) fitted on the pooled rows, once per
  ``--mismatch`` value (default: ``auto``, which gives lambda = 1 here, and 10: a kernel that weighs
  agreement on the categories more);
* ``aggregated``: ``srf.two_sample_test(method="aggregated", categorical=[2, 3])`` (B = ``--permutations``,
  D = ``--features`` per map): the mixed kernel at 5 bandwidths x lambda in (auto, 10), combined by
  ``max``, and the delta kernel of each categorical column alone, under the same permutations; the
  smallest of the three questions' p-values, calibrated on those permutations;
* ``per-column (scipy)``: what alibi-detect's ``TabularDrift`` does, written with scipy: a two-sample
  KS test per numeric column and a chi-square test of homogeneity per categorical column,
  Bonferroni-corrected (drift if any p <= 0.05 / 4);
* ``TabularDrift``: alibi-detect's own, when ``--alibi-python`` names a Python that has alibi-detect
  (the ``bench`` extra). alibi-detect 0.13 pins numpy < 2, so it lives in a venv of its own; this
  script runs itself there with ``--only-alibi`` on the same seeded tables.

Measured (2026-11-29, 2 cores, load average about 4), the library's defaults B = 500, D = 1 024, one
process per alternative (PY: /tmp/venv-alibi/bin/python, alibi-detect 0.13):

    python benchmarks/bench_tables_power.py --mismatch "" --repetitions 400 --alternatives A --alibi-python PY
    aggregated against TabularDrift: no change 0.037 against 0.043; (a) 0.468 against 0.425 (paired
    +0.043, Monte Carlo s.e. 0.016); (b) 0.993 against 0.028. Under no change the questions' shares of
    the 0.05: the whole row 0.015, c 0.017, d 0.018. Before the test asked questions (the maximum of all
    12 standardised statistics), (a) was 0.400 against 0.415 on the first 200 tables
    (docs/guide/tables.rst, "Calibration and power, measured").

    python benchmarks/bench_tables_power.py                                  # 100 repetitions each
    python benchmarks/bench_tables_power.py --alibi-python /tmp/venv-alibi/bin/python
    python benchmarks/bench_tables_power.py --mismatch "" --alternatives frequency  # the aggregated test, (a)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

ALTERNATIVES = ("null", "frequency", "dependence")


def tables(alternative: str, repetition: int, rows: int, delta: float, mu: float) -> tuple[np.ndarray, np.ndarray]:
    """Samples A and B of one repetition: columns x, z (numeric), c, d (category codes)."""
    rng = np.random.default_rng([47, ALTERNATIVES.index(alternative), repetition])

    def sample(sign: float, d_probabilities: np.ndarray) -> np.ndarray:
        c = rng.integers(0, 2, rows).astype(np.float64)
        x = rng.normal(size=rows) + sign * mu * np.where(c == 0, 1.0, -1.0)
        d = rng.choice(10, size=rows, p=d_probabilities).astype(np.float64)
        return np.column_stack([x, rng.normal(size=rows), c, d])

    uniform = np.full(10, 0.1)
    moved = uniform.copy()
    if alternative == "frequency":
        moved[0] -= delta
        moved[1] += delta
    dependence = alternative == "dependence"
    if alternative == "null":
        return sample(1.0 if mu else 0.0, uniform), sample(1.0 if mu else 0.0, uniform)
    return sample(1.0 if dependence else 0.0, uniform), sample(-1.0 if dependence else 0.0, moved)


def per_column_drift(A: np.ndarray, B: np.ndarray, level: float = 0.05) -> bool:
    """TabularDrift's rule with scipy: KS per numeric column, chi-square per categorical one, Bonferroni."""
    from scipy.stats import chi2_contingency, ks_2samp

    p_values = [ks_2samp(A[:, j], B[:, j]).pvalue for j in (0, 1)]
    for j in (2, 3):
        levels = np.union1d(A[:, j], B[:, j])
        table = np.array([[np.sum(S[:, j] == v) for v in levels] for S in (A, B)])
        p_values.append(chi2_contingency(table, correction=False).pvalue if len(levels) > 1 else 1.0)
    return min(p_values) <= level / len(p_values)


def level_shares(result, level: float = 0.05) -> np.ndarray:
    """Per question of the aggregated test (the whole row, each column), its share of the test's level on one
    null table: of the permutations whose aggregated statistic is above its (1 - level) quantile, the
    fraction whose smallest question p-value is that question's, times ``level``."""
    from streamrff.twosample.aggregated import aggregate, question_groups

    columns = [None if not label.startswith("column ") else label for label in result.kernels]
    values = np.column_stack([result.statistics, result.null_statistics])
    questions = np.array([aggregate(values[group], result.aggregation) for group in question_groups(columns)])
    ranks = np.array([[np.mean(row >= value) for value in row] for row in questions])[:, 1:]
    above = result.null >= np.quantile(result.null, 1 - level)
    return level * np.bincount(ranks[:, above].argmin(axis=0), minlength=questions.shape[0]) / max(1, above.sum())


def alibi_drifts(args: argparse.Namespace) -> dict[str, list[int]]:
    """TabularDrift (Bonferroni) per alternative and repetition, 1 for drift: run inside the venv that has
    alibi-detect."""
    from alibi_detect.cd import TabularDrift

    drifts = {}
    for alternative in args.alternatives.split(","):
        drifts[alternative] = []
        for repetition in range(args.repetitions):
            A, B = tables(alternative, repetition, args.rows, args.delta, args.mu)
            detector = TabularDrift(A, p_val=0.05, categories_per_feature={2: None, 3: None}, correction="bonferroni")
            drifts[alternative].append(int(detector.predict(B)["data"]["is_drift"]))
    return drifts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5000, help="rows per sample")
    parser.add_argument("--repetitions", type=int, default=100)
    parser.add_argument("--permutations", type=int, default=None, help="B (default: the library's, 500)")
    parser.add_argument("--features", type=int, default=None, help="D per map (default: the library's, 1 024)")
    parser.add_argument("--delta", type=float, default=0.015, help="(a): probability moved between two levels of d")
    parser.add_argument("--mu", type=float, default=0.1, help="(b): the mean of x given c, +-mu")
    parser.add_argument("--mismatch", default="auto,10",
                        help="comma-separated lambdas of the single mixed map ('' for none)")  # fmt: skip
    parser.add_argument("--no-aggregated", action="store_true", help="skip the aggregated test")
    parser.add_argument("--alternatives", default=",".join(ALTERNATIVES), help=f"comma-separated, of {ALTERNATIVES}")
    parser.add_argument("--alibi-python", default=None, help="a Python with alibi-detect installed")
    parser.add_argument("--only-alibi", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only_alibi:
        print(json.dumps(alibi_drifts(args)))
        return
    import inspect

    import streamrff as srf

    defaults = inspect.signature(srf.two_sample_test).parameters  # what a user gets
    args.permutations = args.permutations or defaults["n_permutations"].default
    args.features = args.features or defaults["n_features"].default
    alibi = None
    if args.alibi_python:
        command = [args.alibi_python, __file__, "--only-alibi"] + [
            f"--{name}={getattr(args, name)}" for name in ("rows", "repetitions", "delta", "mu", "alternatives")
        ]
        alibi = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    print(f"power at level 0.05, n = {args.rows:,} per sample, {args.repetitions} repetitions; streamrff: "
          f"permutation test, B = {args.permutations}, D = {args.features}; (a) delta = {args.delta}, "
          f"(b) mu = {args.mu}", flush=True)  # fmt: skip
    mismatches = [value if value == "auto" else float(value) for value in args.mismatch.split(",") if value]
    heads = "".join(f"{'lambda=' + str(value):>12}" for value in mismatches)
    heads += "" if args.no_aggregated else f"{'aggregated':>12}"
    print(f"{'alternative':>12}{heads} {'per-column (scipy)':>19} {'TabularDrift':>13} {'seconds':>8}")
    for alternative in args.alternatives.split(","):
        start, ours, theirs = time.perf_counter(), np.zeros(len(mismatches) + (not args.no_aggregated)), 0
        shares, labels, aggregated = 0.0, (), []
        for repetition in range(args.repetitions):
            A, B = tables(alternative, repetition, args.rows, args.delta, args.mu)
            for index, mismatch in enumerate(mismatches):
                feature_map = srf.RFF(
                    n_features=args.features, categorical=[2, 3], mismatch=mismatch, seed=repetition
                ).fit(np.vstack([A, B]))
                result = srf.two_sample_test(
                    A, B, n_permutations=args.permutations, seed=repetition, feature_map=feature_map
                )  # fmt: skip
                ours[index] += result.p_value <= 0.05
            if not args.no_aggregated:
                result = srf.two_sample_test(
                    A, B, n_features=args.features, n_permutations=args.permutations, seed=repetition,
                    method="aggregated", categorical=[2, 3],
                )  # fmt: skip
                ours[-1] += result.p_value <= 0.05
                aggregated.append(int(result.p_value <= 0.05))
                shares = shares + level_shares(result) / args.repetitions
                labels = [label for label, _ in result.questions]
            theirs += per_column_drift(A, B)
        shown = "n/a" if alibi is None else f"{np.mean(alibi[alternative]):.3f}"
        powers = "".join(f"{value / args.repetitions:>12.3f}" for value in ours)
        print(f"{alternative:>12}{powers} {theirs / args.repetitions:>19.3f} {shown:>13} "
              f"{time.perf_counter() - start:>8.0f}", flush=True)  # fmt: skip
        if alibi is not None and aggregated:
            paired = np.array(aggregated) - np.array(alibi[alternative])
            print(f"  aggregated - TabularDrift, paired over the same tables: {paired.mean():+.4f} "
                  f"(Monte Carlo s.e. {paired.std(ddof=1) / np.sqrt(paired.size):.4f})", flush=True)  # fmt: skip
        if alternative == "null" and labels:
            print("  null: each question's share of the aggregated test's 0.05 (the one whose p-value is smallest): "
                  + ", ".join(f"{label} {share:.4f}" for label, share in zip(labels, shares)), flush=True)  # fmt: skip
    print("targets: (a) streamrff >= TabularDrift; (b) streamrff >= 0.8 while per-column tests stay near 0.05")


if __name__ == "__main__":
    sys.exit(main())
