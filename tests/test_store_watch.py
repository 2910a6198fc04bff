"""``watch --store`` on a store of time buckets (issue #45): real watcher processes, a writer growing the array and
its time coordinate, kill -9 and restart. References: direct sketches of each bucket's rows (same chunking) and
float64 feature sums in numpy; the buckets expected are computed from the times in numpy."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from watching import ENVIRONMENT, communicate, read_until, watch_process

import streamrff as srf

CHUNK, N_CHUNKS, BUCKET_SECONDS = 60, 10, 300
UNITS = "seconds since 2026-03-01 00:00:00"
T0 = np.datetime64("2026-03-01T00:00:00", "ns")

WRITER = """
import sys, time
import numpy as np, zarr
sys.path.insert(0, sys.argv[3])
from test_store_watch import stream
group = zarr.open_group(sys.argv[1], mode="r+")
rows, seconds = stream()
x, t = group["x"], group["time"]
chunk, pause = int(sys.argv[2]), 0.3
for index in range(x.shape[0] // chunk, rows.shape[0] // chunk):
    part = slice(index * chunk, (index + 1) * chunk)
    t.resize((t.shape[0] + chunk,))  # each row's time first, then the row
    t[part] = seconds[part]
    x.resize((x.shape[0] + chunk, 3))
    x[part] = rows[part]
    time.sleep(pause)
"""


def stream() -> tuple[np.ndarray, np.ndarray]:
    """The rows and their times (int seconds since T0): gaps of 0..39 s, and one of 20 min (empty buckets)."""
    rng = np.random.default_rng(17)
    rows = rng.normal(size=(N_CHUNKS * CHUNK, 3)).astype(np.float32)
    gaps = rng.integers(0, 40, size=rows.shape[0])
    gaps[250] = 1200
    return rows, np.cumsum(gaps).astype(np.int64)


def _map() -> srf.RFF:
    return srf.RFF(n_features=32, bandwidth=1.0, seed=3).fit(np.zeros((1, 3)))


def _monitor(path: Path) -> str:
    reference = np.random.default_rng(5).normal(size=(500, 3)).astype(np.float32)
    srf.DriftMonitor(50, 10_000, n_features=32, bandwidth=1.5, n_streams=200, seed=0).fit(reference).save(str(path))
    return str(path)


def _source(path: Path, n_rows: int) -> str:
    rows, seconds = stream()
    group = zarr.open_group(str(path), mode="w")
    group.create_array("x", shape=(n_rows, 3), chunks=(CHUNK, 3), dtype="float32")[:] = rows[:n_rows]
    times = group.create_array("time", shape=(n_rows,), chunks=(CHUNK,), dtype="int64", attributes={"units": UNITS})
    times[:] = seconds[:n_rows]
    return f"{path}/x"


def _files(path: str) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(Path(path).rglob("*")) if p.is_file()}


@pytest.mark.slow  # three watcher processes and a writer: about 40 s on a loaded machine
def test_watch_store_of_time_buckets_survives_kill_9_and_equals_direct_sketches(tmp_path):
    source = _source(tmp_path / "live.zarr", 2 * CHUNK)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "t.store", rff, bucket=f"{BUCKET_SECONDS}s")
    state = _monitor(tmp_path / "state")
    argv = [source, "--reference", state, "--save-monitor", state, "--overwrite", "--follow", "--poll", "0.05",
            "--settle", "0.1", "--save-interval", "0", "--json",
            "--store", store.path, "--time-coordinate", "time"]  # fmt: skip
    tests = os.path.dirname(os.path.abspath(__file__))
    total, writer = N_CHUNKS * CHUNK, None
    try:
        first = watch_process([*argv, "--from-row", "0"])
        try:
            read_until(first, lambda line: json.loads(line)["event"] == "store")
            writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(tmp_path / "live.zarr"),
                                       str(CHUNK), tests], env=ENVIRONMENT)  # fmt: skip
            stored = [1]

            def three_stores(line: str) -> bool:
                stored[0] += json.loads(line)["event"] == "store"
                return stored[0] >= 3

            read_until(first, three_stores)
            time.sleep(random.Random(3).uniform(0.0, 0.3))  # a random moment: reading, appending, saving
        finally:
            first.kill()  # SIGKILL: no handler runs
            first.wait(timeout=60)
        assert first.returncode == -signal.SIGKILL
        resumed = srf.load_monitor(state).source_cursor_["next_row"]
        assert 0 < resumed < total  # killed mid-stream: the next watcher resumes there, inside a bucket
        second = watch_process(argv)
        read_until(second, lambda line: json.loads(line).get("rows", [0, 0])[1] == total, seconds=240)
        second.send_signal(signal.SIGTERM)
        _, err = communicate(second, timeout=60)
        assert second.returncode == 0, err
    finally:
        if writer is not None:
            writer.wait(timeout=240)
    rows, seconds = stream()
    ns = T0.astype(np.int64) + seconds * 10**9
    width = BUCKET_SECONDS * 10**9
    buckets = ns // width
    complete = list(range(int(buckets[0]), int(buckets[-1])))  # the last bucket waits for a later row
    assert [int(b) for b in store._stored_buckets()] == complete
    empty = 0
    edges = (np.datetime64(complete[0] * width, "ns"), np.datetime64((complete[-1] + 1) * width, "ns"))
    for bucket, sketch in zip(complete, store.buckets(*edges)):
        mine = rows[buckets == bucket]
        assert sketch.count == mine.shape[0]  # exact: no row lost or counted twice
        if not mine.shape[0]:
            empty += 1
            continue
        direct = srf.sketch(mine, rff)
        np.testing.assert_allclose(sketch.feature_sum, direct.feature_sum, rtol=1e-9, atol=1e-12)
        exact = np.asarray(rff.transform(mine.astype(np.float64)), dtype=np.float64).sum(axis=0)
        np.testing.assert_allclose(sketch.feature_sum, exact, atol=2e-4)
    assert empty >= 2  # the 20-minute gap: empty buckets stored, so ranges across it are whole
    # Exactly once: a watcher reading the whole stream again from row 0 finds every bucket stored, same bytes.
    before = _files(store.path)
    again = subprocess.run(
        [sys.executable, "-m", "streamrff.cli", "watch", source, "--reference", _monitor(tmp_path / "fresh"),
         "--json", "--store", store.path, "--time-coordinate", "time"],
        capture_output=True, text=True, env=ENVIRONMENT, timeout=240,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    seen = [
        b for line in again.stdout.splitlines() if (e := json.loads(line))["event"] == "store" for b in e["buckets"]
    ]
    assert seen == complete
    assert _files(store.path) == before


def test_watch_store_refuses_unsorted_times_naming_the_row_and_times_without_a_time_store(tmp_path, cli_main):
    source = _source(tmp_path / "s.zarr", 2 * CHUNK)
    rows, seconds = stream()
    times = T0 + seconds[: 2 * CHUNK].astype("timedelta64[s]")
    times[70] = times[69] - np.timedelta64(1, "s")
    np.save(tmp_path / "times.npy", times)
    store = srf.SketchStore.create(tmp_path / "t.store", _map(), bucket=f"{BUCKET_SECONDS}s")
    watch = ["watch", source, "--reference", _monitor(tmp_path / "m"), "--json", "--store", store.path]
    result = cli_main(*watch, "--times", str(tmp_path / "times.npy"))
    assert result.code == 1
    assert "Row 70 of the stream" in result.err and "comes before row 69" in result.err
    assert "Traceback" not in result.err
    expected = sorted(set(times[:CHUNK].astype("datetime64[ns]").astype(np.int64) // (BUCKET_SECONDS * 10**9)))
    assert [int(b) for b in store._stored_buckets()] == expected[:-1]  # the first chunk's complete buckets
    absent = cli_main(*watch, "--time-coordinate", "nope")
    assert absent.code == 1 and "nope" in absent.err and "Traceback" not in absent.err
    missing = cli_main(*watch)
    assert missing.code != 0 and "--times PATH" in missing.err and "--time-coordinate NAME" in missing.err
    rows_store = srf.SketchStore.create(tmp_path / "r.store", _map(), bucket=50)
    wrong = cli_main("watch", source, "--reference", str(tmp_path / "m"), "--store", rows_store.path, "--times",
                     str(tmp_path / "times.npy"))  # fmt: skip
    assert wrong.code != 0 and "apply to a store of time buckets" in wrong.err
