"""Store files from a stranger (issue 49 item 5): time and peak memory of ``streamrff store`` refusing them.

Each case is a small store edited as a hostile sender would (digests and crc32c recomputed) and
read by a fresh ``streamrff store`` process; the issue's targets are one line, a non-zero status,
at most 10 s and 500 MB. An honest store's ``store info`` is the baseline: most of every figure is
the command's start-up (importing dask and the engine), not the refusal.

Run: ``python benchmarks/bench_store_refusals.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import streamrff as srf

TARGET_SECONDS, TARGET_MB = 10.0, 500.0

_MEASURE = """
import resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"{elapsed} {peak} {done.returncode} {done.stderr.count(chr(10))}")
"""


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def edit_attrs(path: Path, **changes: object) -> None:
    document = json.loads((path / "zarr.json").read_text())
    attrs = document["attributes"]
    attrs.update(changes)
    covered = {key: value for key, value in attrs.items() if key != "attributes_digest"}
    attrs["attributes_digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    (path / "zarr.json").write_text(json.dumps(document))


def make_cases(folder: Path) -> dict[str, list[str]]:
    rff = srf.RFF(n_features=64, bandwidth=1.0, seed=0).fit(np.zeros((1, 3)))
    rows = np.random.default_rng(0).normal(size=(400, 3))
    names = ["honest", "deep-json", "n_features-1e12", "consistent-2**24", "record-16GiB", "record-fifo"]
    for name in names:
        srf.SketchStore.create(folder / name, rff, bucket=50).append(rows)
    text = (folder / "deep-json" / "zarr.json").read_text()
    (folder / "deep-json" / "zarr.json").write_text(
        text.replace('"map": {', '"map": ' + "[" * 100_000 + "]" * 100_000 + ', "x": {', 1)
    )
    edit_attrs(folder / "n_features-1e12", n_features=10**12)
    big = folder / "consistent-2**24"  # root, records metadata and map.json all declare 2**24 features
    document = json.loads((big / "map.json").read_text())
    document["spec"]["n_features"] = 2**24
    (big / "map.json").write_text(json.dumps(document))
    edit_attrs(big, n_features=2**24)
    meta = json.loads((big / "records" / "zarr.json").read_text())
    meta["shape"][1] = meta["chunk_grid"]["configuration"]["chunk_shape"][1] = 32 + 2**24
    (big / "records" / "zarr.json").write_text(json.dumps(meta))
    record = folder / "record-16GiB" / "records" / "c" / "3" / "0"
    record.unlink()
    with open(record, "wb") as handle:
        handle.truncate(2**34)  # sparse
    fifo = folder / "record-fifo" / "records" / "c" / "3" / "0"
    fifo.unlink()
    os.mkfifo(fifo)
    commands = {}
    for name in names:
        if name.startswith("record"):
            commands[name] = ["range", str(folder / name), "--start", "150", "--stop", "200", "-o", str(folder / "x")]
        else:
            commands[name] = ["info", str(folder / name)]
    return commands


def main() -> None:
    print("machine: measure with the load you have; the figures include the command's start-up")
    with tempfile.TemporaryDirectory() as directory:
        commands = make_cases(Path(directory))
        print(f"{'case':<20} {'status':>6} {'lines':>5} {'seconds':>8} {'x 10 s':>7} {'peak MB':>8} {'x 500 MB':>8}")
        for name, command in commands.items():
            argv = [sys.executable, "-c", _MEASURE, sys.executable, "-m", "streamrff.cli", "store", *command]
            seconds, peak, status, lines = subprocess.run(argv, capture_output=True, text=True).stdout.split()
            seconds_f, peak_f = float(seconds), float(peak)
            print(
                f"{name:<20} {status:>6} {lines:>5} {seconds_f:>8.2f} {seconds_f / TARGET_SECONDS:>7.2f} "
                f"{peak_f:>8.0f} {peak_f / TARGET_MB:>8.2f}"
            )


if __name__ == "__main__":
    main()
