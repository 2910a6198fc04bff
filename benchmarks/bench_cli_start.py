"""Start time of the CLI (#50 item 8): wall seconds of fresh processes next to the targets.

Run: ``python benchmarks/bench_cli_start.py [--repeats N]`` (from the checkout root; each figure is the median
of N fresh ``python -m streamrff.cli ...`` processes on two small sketches made in a temporary folder).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

TARGETS = {"--help": 0.3, "info SKETCH": 1.0, "merge A B -o C": 1.0}


def wall(argv: list[str], repeats: int) -> float:
    """Median wall seconds of ``repeats`` fresh processes running the CLI with ``argv``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "streamrff.cli", *argv], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    import streamrff as srf

    with tempfile.TemporaryDirectory() as folder:
        rows = np.random.default_rng(0).normal(size=(200, 3)).astype("float32")
        feature_map = srf.RFF(n_features=32, bandwidth=1.0, seed=0)
        a, b, c = (os.path.join(folder, name) for name in ("a.sketch", "b.sketch", "c.sketch"))
        srf.sketch_array(rows[:100], feature_map).save(a)
        srf.sketch_array(rows[100:], feature_map).save(b)
        cases = {
            "--help": ["--help"],
            "info SKETCH": ["info", a],
            "merge A B -o C": ["merge", a, b, "-o", c, "--overwrite"],
        }
        print(f"load average {os.getloadavg()[0]:.2f}; median of {repeats} fresh processes")
        for name, argv in cases.items():
            seconds = wall(argv, repeats)
            target = TARGETS[name]
            print(f"{name:<16} {seconds:6.3f} s   target <= {target:.1f} s   ratio {seconds / target:.2f}")


if __name__ == "__main__":
    main()
