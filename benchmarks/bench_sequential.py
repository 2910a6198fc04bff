"""The anytime-valid SequentialTest (issue #46): its cost per row and its power, side by side.

1. cost: rows per second of ``SequentialTest.update`` (both samples' rows counted) against
   ``DriftMonitor.update`` on the same fitted RFF map (d = 4, D = ``--features``), both fed batches of
   ``--batch`` rows, one BLAS thread; the ratio of times per row (target <= 1.5);
2. power: on a 0.5 sd mean shift of the first of d = 4 coordinates (B's rows), and on a variance change
   (sd x 1.2 in all of d = 10 coordinates), the median pairs to
   rejection at alpha = 0.05 over ``--streams`` streams (capped at ``--max-pairs``; a stream that does
   not reject counts as the cap), against the smallest n of a doubling grid at which the fixed-n
   spectral test (``srf.two_sample_test(..., method="spectral")``, the same map, n rows per sample)
   rejects at 0.05 in >= 80% of ``--repeats`` data sets, refined by bisection to within 1/8 of n
   (target: median pairs <= 2x that n).

Timings on a shared, loaded machine are not figures: the lead takes them on an idle machine.

Run: python benchmarks/bench_sequential.py [--features 256] [--streams 40] [--repeats 40]
[--max-pairs 20000] [--rows 200000] [--batch 1000] [--only cost|power] [--scenarios shift,variance]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

DIM = 4
SHIFT = 0.5
#: The power scenarios: name -> (d, how B's rows differ from A's standard normal rows, description).
SCENARIOS = {
    "shift": (4, lambda rows: rows + np.eye(rows.shape[1])[0] * SHIFT, f"{SHIFT} sd shift of one of d=4 coordinates"),
    "variance": (10, lambda rows: rows * 1.2, "sd x 1.2 in all of d=10 coordinates"),
}
ALPHA = 0.05


def fitted_map(features: int, dim: int = DIM):
    import streamrff as srf

    return srf.RFF(n_features=features, bandwidth="median", seed=0).fit(
        np.random.default_rng(0).normal(size=(2000, dim))
    )


def cost_table(args: argparse.Namespace) -> None:
    from threadpoolctl import threadpool_limits

    import streamrff as srf

    feature_map = fitted_map(args.features)
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(args.rows, DIM))
    monitor = srf.DriftMonitor(200, 1000, feature_map=feature_map, seed=0, n_streams=500).fit(
        rng.normal(size=(5000, DIM))
    )
    test = srf.SequentialTest(feature_map, alpha=ALPHA)
    half = args.batch // 2
    with threadpool_limits(1):
        monitor.update(rows[:2])
        test.update(rows[:2], rows[2:4])  # compile both kernels outside the timing
        start = time.perf_counter()
        for offset in range(0, args.rows, args.batch):
            monitor.update(rows[offset : offset + args.batch])
        monitor_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for offset in range(0, args.rows, args.batch):
            batch = rows[offset : offset + args.batch]
            test.update(batch[:half], batch[half:])
        test_seconds = time.perf_counter() - start
    print(f"1. Cost per row: d={DIM}, D={args.features}, {args.rows} rows in batches of {args.batch}, one BLAS thread")
    print(f"  DriftMonitor.update    {args.rows / monitor_seconds / 1e6:7.3f} M rows/s")
    print(f"  SequentialTest.update  {args.rows / test_seconds / 1e6:7.3f} M rows/s ({args.batch // 2} + {half} rows)")
    print(f"  time per row, sequential / monitor: {test_seconds / monitor_seconds:5.2f} (target <= 1.5)")


def pairs_to_rejection(feature_map, seed: int, max_pairs: int, scenario: str) -> int:
    import streamrff as srf

    rng = np.random.default_rng(1000 + seed)
    test = srf.SequentialTest(feature_map, alpha=ALPHA)
    step = 500
    while test.n_pairs < max_pairs and not test.rejected:
        dim, change, _ = SCENARIOS[scenario]
        test.update(rng.normal(size=(step, dim)), change(rng.normal(size=(step, dim))))
    return test.rejected_at if test.rejected else max_pairs


def fixed_n_power(feature_map, n: int, repeats: int, scenario: str) -> float:
    import streamrff as srf

    rejections = 0
    for repeat in range(repeats):
        rng = np.random.default_rng(5000 + repeat)
        dim, change, _ = SCENARIOS[scenario]
        x = rng.normal(size=(n, dim))
        y = change(rng.normal(size=(n, dim)))
        rejections += srf.two_sample_test(x, y, method="spectral", feature_map=feature_map).p_value <= ALPHA
    return rejections / repeats


def power_table(args: argparse.Namespace, scenario: str) -> None:
    dim, _, description = SCENARIOS[scenario]
    feature_map = fitted_map(args.features, dim)
    start = time.perf_counter()
    pairs = np.array([pairs_to_rejection(feature_map, seed, args.max_pairs, scenario) for seed in range(args.streams)])
    seconds = time.perf_counter() - start
    print(f"\n2. Power ({scenario}): {description}, alpha={ALPHA}, D={args.features}, median bandwidth")
    print(
        f"  sequential: median pairs to rejection {np.median(pairs):.0f} (quartiles {np.percentile(pairs, 25):.0f}, "
        f"{np.percentile(pairs, 75):.0f}; {np.mean(pairs >= args.max_pairs):.2f} not rejected by {args.max_pairs}) "
        f"over {args.streams} streams, {seconds:.1f} s"
    )
    n, found = 25, None
    while n <= args.max_pairs and found is None:
        power = fixed_n_power(feature_map, n, args.repeats, scenario)
        print(f"  fixed-n spectral test, n={n:6d} per sample: power {power:.2f} over {args.repeats} data sets")
        if power >= 0.8:
            found = n
        n *= 2
    if found is None:
        print("  the fixed-n test did not reach 80% power within the grid")
        return
    low = found // 2  # below 80% power (or the grid's start)
    while found - low > max(2, found // 8):
        middle = (low + found) // 2
        power = fixed_n_power(feature_map, middle, args.repeats, scenario)
        print(f"  fixed-n spectral test, n={middle:6d} per sample: power {power:.2f} over {args.repeats} data sets")
        low, found = (low, middle) if power >= 0.8 else (middle, found)
    resampled = np.median(np.random.default_rng(0).choice(pairs, size=(2000, pairs.size)), axis=1)
    print(
        f"  median pairs / smallest n with 80% power ({found}): {np.median(pairs) / found:.2f} "
        f"(s.e. {resampled.std() / found:.2f} from the median's bootstrap; the n is set to within 1/8 by powers over "
        f"{args.repeats} data sets, s.e. {np.sqrt(0.16 / args.repeats):.3f} at 80%) (target <= 2)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--max-pairs", type=int, default=20_000)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--only", choices=("cost", "power"))
    parser.add_argument("--scenarios", default="shift,variance", help="comma-separated: shift, variance")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if args.only in (None, "cost"):
        cost_table(args)
    if args.only in (None, "power"):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):  # the spectral test's eigendecompositions: one thread, not oversubscribed
            for scenario in args.scenarios.split(","):
                power_table(args, scenario)


if __name__ == "__main__":
    main()
