"""Coverage of the 95% confidence interval of MMD^2 (``TwoSampleResult.confidence_interval``).

For each scenario: the population MMD^2 of the sketch's kernel (``||mu_A - mu_B||^2`` for the
fixed random-feature map) from 2e6 rows per sample, then ``--repetitions`` independent pairs of
samples of ``--rows`` rows each, sketched with moments and tested with ``mmd_test``; prints the
fraction of intervals that cover the population value (target 0.93-0.97 at 200 repetitions,
n = 2 000 per sample).

    python benchmarks/check_interval_coverage.py                 # 200 repetitions, n = 2 000
    python benchmarks/check_interval_coverage.py --repetitions 50
"""

from __future__ import annotations

import argparse

import numpy as np

import streamrff as srf

#: name -> (d, draw(rng, n, which)): which 0 is A, 1 is B.
SCENARIOS = {
    "mean shift 0.5, d=2": (2, lambda rng, n, which: rng.normal(0.5 * which, 1.0, size=(n, 2))),
    "scale 1 vs 1.3, d=5": (5, lambda rng, n, which: rng.normal(0.0, 1.0 + 0.3 * which, size=(n, 5))),
    "mean shift 0.2, d=2": (2, lambda rng, n, which: rng.normal(0.2 * which, 1.0, size=(n, 2))),
    "t3 vs normal, d=3": (
        3,
        lambda rng, n, which: rng.standard_t(3, size=(n, 3)) if which else rng.normal(size=(n, 3)),
    ),
}


def population_mmd2(feature_map: srf.FeatureMap, draw, rows: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    means = []
    for which in (0, 1):
        total = None
        for _ in range(rows // 200_000):
            part = srf.sketch_array(draw(rng, 200_000, which), feature_map)
            total = part if total is None else total.merge(part)
        means.append(total.mean)
    return float(np.sum((means[0] - means[1]) ** 2))


def coverage(name: str, repetitions: int, rows: int, features: int, population_rows: int, level: float) -> None:
    width, draw = SCENARIOS[name]
    feature_map = srf.RFF(n_features=features, bandwidth="median", seed=0).fit(
        np.vstack([draw(np.random.default_rng(99), 500, which) for which in (0, 1)])
    )
    truth = population_mmd2(feature_map, draw, population_rows, seed=12345)
    rng = np.random.default_rng(2024)
    covered, widths, estimates = 0, [], []
    for _ in range(repetitions):
        sx = srf.sketch_array(draw(rng, rows, 0), feature_map, moments=True)
        sy = srf.sketch_array(draw(rng, rows, 1), feature_map, moments=True)
        result = srf.mmd_test(sx, sy, method="hotelling")
        low, high = result.confidence_interval(level)
        covered += low <= truth <= high
        widths.append(high - low)
        estimates.append(result.statistic)
    print(
        f"{name:<22} population MMD^2 {truth:.3e}  mean estimate {np.mean(estimates):.3e}  "
        f"coverage {covered / repetitions:.3f} ({covered}/{repetitions})  mean width {np.mean(widths):.2e}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--population-rows", type=int, default=2_000_000)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--scenario", choices=list(SCENARIOS), action="append")
    args = parser.parse_args()
    for name in args.scenario or list(SCENARIOS):
        coverage(name, args.repetitions, args.rows, args.features, args.population_rows, args.level)


if __name__ == "__main__":
    main()
