"""RFF phase precision: Chen & Phillips' far-from-origin demo, and the cost on standardised data.

1. Chen & Phillips (2016) sec. 7: pairs with x uniform in a ball of radius 500 and y at distance
   r from x, r geometric from 1e-4 to 1e4, sigma = 1. For each t (= n_features) the worst relative
   error of the kernel distance ``||z(x) - z(y)|| / D_K(x, y) - 1`` against numpy's float64
   ``D_K = sqrt(-2 expm1(-||x - y||^2 / 2))``, through: float32 phases (``phase_precision="float32"``,
   what ``transform`` did before), the public ``transform`` (``"auto"``: float64 phases here), and the
   float64 path (float64 features). The target: transform <= 1.2x the float64 path at t = 800.
2. Standardised data (N(0, 1) rows, median bandwidth): ``fit`` and ``transform`` with ``"auto"``
   (which resolves to float32 phases there) side by side with ``"float32"`` given, in alternating
   turns (the median of the turns' ratios): the decision must cost nothing measurable. Forced
   float64 phases are shown for information.

Run: python benchmarks/bench_phase_precision.py [--pairs 2000] [--seeds 3] [--rows 200000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import streamrff as srf


def chen_phillips_pairs(n_pairs: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    directions = rng.normal(size=(n_pairs, d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    x = directions * 500.0 * rng.uniform(size=(n_pairs, 1)) ** (1.0 / d)
    offsets = rng.normal(size=(n_pairs, d))
    offsets /= np.linalg.norm(offsets, axis=1, keepdims=True)
    return x, x + offsets * rng.permutation(np.geomspace(1e-4, 1e4, n_pairs))[:, None]


def worst_error(features: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    exact = np.sqrt(-2.0 * np.expm1(-((x - y) ** 2).sum(axis=1) / 2.0))
    gaps = features[: len(x)].astype(np.float64) - features[len(x) :].astype(np.float64)
    return float(np.abs(np.linalg.norm(gaps, axis=1) / exact - 1.0).max())


def demo(n_pairs: int, seeds: int, dims: tuple[int, ...]) -> None:
    print(f"Chen & Phillips sec. 7 demo: {n_pairs} pairs, ball radius 500, r in [1e-4, 1e4], sigma = 1;")
    print("worst relative error of the kernel distance (median over seeds; max over seeds in brackets)")
    print(f"{'d':>2} {'t':>5} {'float32 phases':>18} {'transform (auto)':>18} {'float64 path':>18} {'ratio':>6}")
    for d in dims:
        for t in (100, 200, 400, 800):
            rows = {"float32": [], "auto": [], "float64": []}
            for seed in range(seeds):
                x, y = chen_phillips_pairs(n_pairs, d, np.random.default_rng(seed))
                X = np.vstack([x, y])
                for name in ("float32", "auto"):
                    rff = srf.RFF(n_features=t, bandwidth=1.0, seed=seed, phase_precision=name).fit(X)
                    rows[name].append(worst_error(rff.transform(X), x, y))
                rows["float64"].append(worst_error(rff._embed(X, np.float64), x, y))
            medians = {name: float(np.median(values)) for name, values in rows.items()}
            cells = [f"{medians[name]:.3f} [{max(rows[name]):.3f}]" for name in ("float32", "auto", "float64")]
            ratio = max(a / b for a, b in zip(rows["auto"], rows["float64"]))
            print(f"{d:>2} {t:>5} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18} {ratio:>6.3f}")


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def speed(n_rows: int, d: int, n_features: int, turns: int) -> None:
    X = np.random.default_rng(0).normal(size=(n_rows, d)).astype(np.float32)
    auto = srf.RFF(n_features=n_features).fit(X)
    given = srf.RFF(n_features=n_features, phase_precision="float32").fit(X)
    forced = srf.RFF(n_features=n_features, phase_precision="float64").fit(X)
    assert auto.phase_precision_ == "float32" and auto.fingerprint == given.fingerprint
    auto.transform(X[:1000]), forced.transform(X[:1000])  # compile and warm the caches
    fit_ratios, transform_ratios, float64_ratios = [], [], []
    for _ in range(turns):
        fit_auto = timed(lambda: srf.RFF(n_features=n_features).fit(X))
        fit_given = timed(lambda: srf.RFF(n_features=n_features, phase_precision="float32").fit(X))
        transform_auto = timed(lambda: auto.transform(X))
        transform_given = timed(lambda: given.transform(X))
        transform_float64 = timed(lambda: forced.transform(X))
        fit_ratios.append(fit_auto / fit_given)
        transform_ratios.append(transform_auto / transform_given)
        float64_ratios.append(transform_float64 / transform_given)
    print(f"\nStandardised data: {n_rows} x {d} float32 rows, D = {n_features}, median bandwidth, {turns} turns")
    print(f"  fit:       auto / float32 given = {np.median(fit_ratios):.3f}x (last turn {fit_given:.3f} s given)")
    print(f"  transform: auto / float32 given = {np.median(transform_ratios):.3f}x "
          f"(last turn {transform_given:.3f} s given)")  # fmt: skip
    print(f"  transform: float64 phases forced / float32 = {np.median(float64_ratios):.2f}x (for information)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--dims", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    demo(args.pairs, args.seeds, tuple(args.dims))
    speed(args.rows, 32, 1024, args.turns)


if __name__ == "__main__":
    main()
