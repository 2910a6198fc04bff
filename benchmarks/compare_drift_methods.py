"""The e-detector against the ERT-calibrated DriftMonitor (issue #46, item 5): false alarms and delay.

Both watch d = 8 columns of N(0, I) rows against a reference of ``--reference`` rows of the same
law, with the same map (sincos RFF, D = ``--features``, bandwidth sqrt(d)). The e-detector
(:class:`streamrff.drift.EDetector`) alarms when its e-value reaches ``1/alpha``; the monitor
(window ``--window``) is calibrated to ``ert = 1/alpha`` rows, the same nominal rate. Per stream:

* no change: ``--horizon`` rows of the reference's law; the share of streams with an alarm;
* change: ``--before`` rows of the reference's law, then column 0 shifted by 1 sd; the delay is
  the alarm's row minus ``--before`` (an alarm before the change is counted apart; none within
  ``--horizon`` rows counts as the horizon).

Prints the median delays and their ratio, e-detector / monitor (the issue's target: <= 1.5).

Run: python benchmarks/compare_drift_methods.py [--streams 100] [--alpha 1e-4] [--window 200]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import streamrff as srf
from streamrff.drift import EDetector

DIM = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--alpha", type=float, default=1e-4)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--reference", type=int, default=20_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--before", type=int, default=500)
    parser.add_argument("--horizon", type=int, default=3000)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    feature_map = srf.RFF(n_features=args.features, bandwidth=float(np.sqrt(DIM)), seed=0).fit(np.zeros((4, DIM)))
    rng = np.random.default_rng(1)
    reference = rng.normal(size=(args.reference, DIM))
    mean = feature_map.transform(reference).astype(np.float64).mean(axis=0)
    monitor = srf.DriftMonitor(window=args.window, ert=1 / args.alpha, feature_map=feature_map, seed=0).fit(reference)
    results: dict[str, dict[str, list[int]]] = {name: {"null": [], "delay": []} for name in ("e-detector", "monitor")}
    for _ in range(args.streams):
        calm = rng.normal(size=(args.horizon, DIM))
        changed = rng.normal(size=(args.before + args.horizon, DIM))
        changed[args.before :, 0] += 1.0
        for name in results:
            for kind, rows in (("null", calm), ("delay", changed)):
                if name == "e-detector":
                    alarm = EDetector(feature_map, mean, alpha=args.alpha).update(rows).alarm_at
                    alarm = None if alarm is None else alarm - 1  # 0-based row of the alarm
                else:
                    update = monitor.reset().update(rows)
                    alarm = update.drift_at - update.n_rows_seen + rows.shape[0] if update.drift else None
                results[name][kind].append(-1 if alarm is None else alarm)
    print(
        f"d = {DIM}, D = {args.features}, reference {args.reference} rows, alpha = {args.alpha:g} "
        f"(monitor: W = {args.window}, ERT = {1 / args.alpha:g}), {args.streams} streams"
    )
    medians = {}
    for name, result in results.items():
        null = np.array(result["null"])
        alarms = np.array(result["delay"])
        early = np.mean((alarms >= 0) & (alarms < args.before))
        delays = np.where(alarms < 0, args.horizon, alarms - args.before)[(alarms < 0) | (alarms >= args.before)]
        medians[name] = np.median(delays)
        print(
            f"  {name:10s}: no change, alarm within {args.horizon} rows in {np.mean(null >= 0):.3f} of streams; "
            f"1 sd shift of column 0 after {args.before} rows: median delay {medians[name]:.0f} rows "
            f"(quartiles {np.percentile(delays, 25):.0f}, {np.percentile(delays, 75):.0f}; alarm before the "
            f"change {early:.3f}, none {np.mean(alarms < 0):.3f})"
        )
    print(f"  median delay, e-detector / monitor: {medians['e-detector'] / medians['monitor']:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
