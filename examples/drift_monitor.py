"""Watch a stream for a change of distribution, with an alarm calibrated to an expected run time.

The reference: scikit-learn's bundled digits 0-6 (64 pixel features, standing in for a model's
inputs or embeddings). The stream: held-out digits 0-6, then digits 7-9 from row ``--change``.
Shows: DriftMonitor.fit (reference sketch + thresholds calibrated from the reference alone),
update in batches, save and load mid-stream (a loaded monitor continues exactly), the alarm and
its delay, reset.

Run: python examples/drift_monitor.py [--window 100] [--ert 2000] [--change 300]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
from sklearn.datasets import load_digits

import streamrff as srf


def main(window: int, ert: int, change: int, features: int) -> None:
    digits = load_digits()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(digits.target))
    X, y = digits.data[order].astype("float32"), digits.target[order]
    seen, unseen = X[y <= 6], X[y > 6]
    reference, calm = seen[:900], seen[900:]
    stream = np.vstack([calm[:change], unseen])
    monitor = srf.DriftMonitor(window=window, ert=ert, n_features=features, seed=0).fit(reference)
    print(f"reference: {monitor.reference_count_} rows; steady threshold {monitor.thresholds_[-1]:.4f}")

    first = monitor.update(stream[: change // 2])
    path = os.path.join(tempfile.mkdtemp(), "monitor")
    monitor.save(path)  # e.g. before a restart
    restarted = srf.load_monitor(path)
    update = restarted.update(stream[change // 2 :])
    same = np.array_equal(update.statistic, monitor.update(stream[change // 2 :]).statistic)
    print(f"loaded monitor continues identically: {same}")
    print(f"alarm before the change: {first.drift or (update.drift and update.drift_at < change)}")
    if update.drift:
        print(f"alarm at row {update.drift_at} (change at row {change}): delay {update.drift_at - change + 1} rows")
    else:
        print("no alarm")
    restarted.reset()
    print(f"after reset: drift {restarted.update(calm[change : change + 50]).drift}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--ert", type=int, default=2000)
    parser.add_argument("--change", type=int, default=300)
    parser.add_argument("--features", type=int, default=512)
    args = parser.parse_args()
    main(args.window, args.ert, args.change, args.features)
