"""E-detector (issue #46 item 5, partial): run length to a false alarm vs 1/alpha, and delay after a shift.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_edetector.py [--streams 200] [--horizon 2000] [--alpha 0.01]``.
Under no change every stream is N(0, I_8) against a reference of ``--reference`` rows of the same law;
the e-CUSUM's average run length to a false alarm is >= 1/alpha by construction (reference mean taken
as exact). After the change, column 0 shifts by 1 sd at row 0 of the monitored stream; the delay is the
alarm row. The comparison against the ERT-calibrated ``DriftMonitor`` at the same false-alarm rate is
not in this script yet.
"""

from __future__ import annotations

import argparse

import numpy as np

import streamrff as srf
from streamrff.drift import EDetector


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--horizon", type=int, default=2000)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--reference", type=int, default=20000)
    parser.add_argument("--features", type=int, default=128)
    args = parser.parse_args()
    d = 8
    rff = srf.RFF(n_features=args.features, bandwidth=float(np.sqrt(d)), seed=0).fit(np.zeros((4, d)))
    rng = np.random.default_rng(1)
    mean = rff.transform(rng.normal(size=(args.reference, d))).astype(np.float64).mean(axis=0)
    runs, delays = [], []
    for _ in range(args.streams):
        detector = EDetector(rff, mean, alpha=args.alpha).update(rng.normal(size=(args.horizon, d)))
        runs.append(args.horizon + 1 if detector.alarm_at is None else detector.alarm_at)
        shifted = rng.normal(size=(args.horizon, d))
        shifted[:, 0] += 1.0
        detector = EDetector(rff, mean, alpha=args.alpha).update(shifted)
        delays.append(args.horizon + 1 if detector.alarm_at is None else detector.alarm_at)
    runs, delays = np.array(runs), np.array(delays)
    target = 1.0 / args.alpha
    print(f"no change: {args.streams} streams, horizon {args.horizon}, 1/alpha = {target:g}")
    print(f"  false alarm within horizon: {np.mean(runs <= args.horizon):.3f}")
    print(f"  run length >= 1/alpha: {np.mean(runs >= target):.3f}")
    print(f"  run length quantiles 5/25/50 %: {np.percentile(runs, [5, 25, 50])} (horizon+1 = no alarm)")
    print(
        f"1 sd shift in 1 of {d} columns: median delay {np.median(delays):g} rows, "
        f"no alarm {np.mean(delays > args.horizon):.3f}"
    )


if __name__ == "__main__":
    main()
