"""``streamrff watch``: a drift monitor over a zarr array on disk, read to its end or followed as another process
appends to it."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff.cli import main

WINDOW, ERT, FEATURES, STREAMS, CHUNK = 50, 100_000, 64, 20_000, 250
MONITOR_OPTIONS = ["--window", str(WINDOW), "--ert", str(ERT), "--features", str(FEATURES), "--streams", str(STREAMS)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A reference of N(0, I_3) rows and a stream of 3000 such rows, then 1000 shifted by 2 in coordinate 0."""
    folder = tmp_path_factory.mktemp("watch")
    rng = np.random.default_rng(7)
    reference = rng.normal(size=(2000, 3)).astype(np.float32)
    stream = rng.normal(size=(4000, 3)).astype(np.float32)
    stream[3000:, 0] += 2.0
    zarr.create_array(str(folder / "ref.zarr"), data=reference, chunks=(500, 3))
    zarr.create_array(str(folder / "stream.zarr"), data=stream, chunks=(CHUNK, 3))
    return folder, reference, stream


def exact_unbiased_mmd2(feature_map, reference, window):
    """Unbiased MMD^2 from the Gram matrices of the float64 features of ``reference`` and ``window`` (numpy)."""
    Zr = feature_map.transform(reference).astype(np.float64)
    Zw = feature_map.transform(window).astype(np.float64)
    n, m = len(Zr), len(Zw)
    Krr, Kww = Zr @ Zr.T, Zw @ Zw.T
    exact = (Krr.sum() - np.trace(Krr)) / (n * (n - 1)) + (Kww.sum() - np.trace(Kww)) / (m * (m - 1))
    return exact - 2 * (Zr @ Zw.T).mean()


def run_cli(argv, capsys):
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_watch_to_the_end_matches_a_monitor_updated_chunk_by_chunk(stores, capsys):
    folder, reference, stream = stores
    argv = ["watch", str(folder / "stream.zarr"), "--reference", str(folder / "ref.zarr"), *MONITOR_OPTIONS]
    status, out, _ = run_cli([*argv, "--json", "--save-monitor", str(folder / "monitor"), "--plot",
                              str(folder / "drift.png")], capsys)  # fmt: skip
    assert status == 0
    events = [json.loads(line) for line in out.splitlines()]
    chunks = [event for event in events if event["event"] == "chunk"]
    alarms = [event for event in events if event["event"] == "alarm"]
    summary = events[-1]
    assert [chunk["rows"] for chunk in chunks] == [[start, start + CHUNK] for start in range(0, 4000, CHUNK)]
    assert len(alarms) == 1 and summary["event"] == "summary"
    assert 3000 <= alarms[0]["drift_at_row"] < 3300 and summary["drift_at_row"] == alarms[0]["drift_at_row"]
    assert all(not chunk["drift"] for chunk in chunks if chunk["rows"][1] <= 3000)
    assert os.path.getsize(folder / "drift.png") > 0

    # Fitted on the same zarr array (same chunks, so the same sums to float64 rounding), updated chunk by chunk.
    monitor = srf.DriftMonitor(WINDOW, ERT, n_features=FEATURES, n_streams=STREAMS, seed=0)
    monitor.fit(str(folder / "ref.zarr"))
    expected = [monitor.update(stream[start : start + CHUNK]) for start in range(0, 4000, CHUNK)]
    np.testing.assert_allclose([c["statistic"] for c in chunks], [u.statistic[-1] for u in expected], rtol=1e-12)
    np.testing.assert_allclose([c["threshold"] for c in chunks], [u.threshold[-1] for u in expected], rtol=1e-12)
    assert alarms[0]["drift_at"] == expected[-1].drift_at

    # The last statistic against the exact unbiased MMD^2 of the last window's features and the reference's.
    exact = exact_unbiased_mmd2(monitor.feature_map_, reference, stream[-WINDOW:])
    assert chunks[-1]["statistic"] == pytest.approx(exact, rel=1e-6)

    # The saved monitor continues: its counter goes on from 4000 rows, and its alarm is the one above.
    status, out, _ = run_cli(["watch", str(folder / "stream.zarr"), "--reference", str(folder / "monitor"),
                              "--from-row", "3750"], capsys)  # fmt: skip
    assert status == 0
    assert "(4,250 seen)" in out and "drift raised before this session" in out


def test_text_output_has_one_line_per_chunk_and_an_alarm_line(stores, capsys):
    folder, _, _ = stores
    argv = ["watch", str(folder / "stream.zarr"), "--reference", str(folder / "ref.zarr"), *MONITOR_OPTIONS]
    status, out, _ = run_cli([*argv, "--max-rows", "3400", "--from-row", "100"], capsys)
    assert status == 0
    lines = out.splitlines()
    rows_lines = [line for line in lines if line.startswith("rows ")]
    # The first read stops at the chunk boundary 250, the last at row 100 + 3400.
    assert rows_lines[0].startswith("rows 100-249 ") and rows_lines[-1].startswith("rows 3,250-3,499 ")
    assert len(rows_lines) == 14
    alarm = [line for line in lines if line.startswith("ALARM")]
    assert len(alarm) == 1 and "drift at row 3," in alarm[0]
    assert "3,400 rows of" in lines[-2]


WRITER = """
import sys, time
import numpy as np, zarr
path, chunk = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(11)
array = zarr.open_array(path, mode="r+")
for index in range(16):
    rows = rng.normal(size=(chunk, 3)).astype(np.float32)
    if index >= 10:
        rows[:, 0] += 2.0
    for half in (rows[: chunk // 2], rows[chunk // 2 :]):  # half chunks: the watcher waits for whole ones
        array.append(half)
        time.sleep(0.1)
"""


def test_follow_reports_the_change_after_the_appended_shifted_rows(stores, tmp_path):
    folder, _, _ = stores
    chunk = 100
    path = str(tmp_path / "live.zarr")
    zarr.create_array(path, shape=(0, 3), chunks=(chunk, 3), dtype="float32")
    environment = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "streamrff.cli", "watch", path, "--reference", str(folder / "ref.zarr"),
         *MONITOR_OPTIONS, "--follow", "--poll", "0.2", "--from-row", "0", "--max-rows", "1600", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
    )  # fmt: skip
    writer = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITER), path, str(chunk)], env=environment, timeout=120
    )
    try:
        out, err = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
    assert writer.returncode == 0
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    chunks = [event for event in events if event["event"] == "chunk"]
    assert [c["rows"] for c in chunks] == [[start, start + chunk] for start in range(0, 1600, chunk)]
    alarms = [event for event in events if event["event"] == "alarm"]
    assert len(alarms) == 1 and 1000 <= alarms[0]["drift_at_row"] < 1100
    assert events[-1]["event"] == "summary" and events[-1]["drift_at_row"] == alarms[0]["drift_at_row"]


def start_watcher(argv):
    """``streamrff watch ARGV`` in a child process; returns it and its first output line (read with a deadline)."""
    environment = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "streamrff.cli", "watch", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
    )  # fmt: skip
    selector = selectors.DefaultSelector()
    selector.register(watcher.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 120
    while not selector.select(timeout=1.0) and time.monotonic() < deadline and watcher.poll() is None:
        pass
    selector.close()
    return watcher, watcher.stdout.readline()


def test_follow_stopped_by_ctrl_c_exits_0_with_a_summary(stores, tmp_path):
    folder, _, stream = stores
    path = str(tmp_path / "idle.zarr")
    # one complete chunk and a partial one that never completes: after the first line, watch only polls
    zarr.create_array(path, data=stream[:300], chunks=(CHUNK, 3))
    argv = [path, "--reference", str(folder / "ref.zarr"), *MONITOR_OPTIONS, "--follow", "--poll", "0.2",
            "--from-row", "0"]  # fmt: skip
    watcher, first = start_watcher(argv)
    try:
        assert first.startswith("rows 0-249 (250 seen)"), first
        watcher.send_signal(signal.SIGINT)
        rest, err = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    assert rest.splitlines() == [
        f"interrupted after 250 rows of {path} from row 0 (1 chunks): no drift",
        "  monitor: window 50, ERT 100000, D = 64, 250 rows seen",
    ]
    assert "Traceback" not in err


def test_watch_follows_an_s3_zarr_array_against_a_sketch_on_s3(stores, s3_server, s3_bucket):
    _, reference, stream = stores
    storage_options = s3_server.storage_options
    sketch = srf.sketch(reference, srf.RFF(n_features=FEATURES, bandwidth=1.5, seed=4), moments=True)
    sketch.save(f"s3://{s3_bucket}/ref.sketch", storage_options=storage_options)
    source = f"s3://{s3_bucket}/live.zarr"
    store = zarr.storage.FsspecStore.from_url(source, storage_options=storage_options, read_only=False)
    chunk = 100
    live = np.vstack([stream[:600], stream[3000:3400]])  # 600 calm rows, then 400 shifted by 2 in coordinate 0
    array = zarr.create_array(store=store, data=live[:200], chunks=(chunk, 3), zarr_format=3)
    argv = [source, "--reference", f"s3://{s3_bucket}/ref.sketch", "--window", str(WINDOW), "--ert", "10000",
            "--streams", "5000", "--follow", "--poll", "0.1", "--from-row", "0", "--max-rows", "1000", "--json",
            "--storage-options", json.dumps(storage_options)]  # fmt: skip
    watcher, first = start_watcher(argv)
    try:
        assert json.loads(first)["rows"] == [0, chunk], first
        for start in range(200, 1000, chunk):  # the rest is appended while watch follows the array
            array.append(live[start : start + chunk])
            time.sleep(0.05)
        rest, err = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in [first, *rest.splitlines()]]
    chunks = [event for event in events if event["event"] == "chunk"]
    assert [c["rows"] for c in chunks] == [[start, start + chunk] for start in range(0, 1000, chunk)]
    alarms = [event for event in events if event["event"] == "alarm"]
    assert len(alarms) == 1 and 600 <= alarms[0]["drift_at_row"] < 700
    assert all(not c["drift"] for c in chunks if c["rows"][1] <= 600)
    # the last statistic: exact unbiased MMD^2 of the last window's features against the reference rows' features
    exact = exact_unbiased_mmd2(sketch.feature_map, reference, live[-WINDOW:])
    assert chunks[-1]["statistic"] == pytest.approx(exact, rel=1e-5)
    assert events[-1]["event"] == "summary" and events[-1]["rows_seen"] == 1000


@pytest.mark.parametrize(
    "extra",
    [["--window", "0", "--ert", "100"], ["--window", "10", "--ert", "1"], ["--ert", "100"], ["--poll", "1", "--window",
     "10", "--ert", "100"]],
)  # fmt: skip
def test_usage_errors_exit_2(stores, extra, capsys):
    folder, _, _ = stores
    with pytest.raises(SystemExit) as exit:
        main(["watch", str(folder / "stream.zarr"), "--reference", str(folder / "ref.zarr"), *extra])
    assert exit.value.code == 2
    assert "streamrff watch: error:" in capsys.readouterr().err


def test_missing_reference_exits_1_with_one_line(stores, capsys):
    folder, _, _ = stores
    status, out, err = run_cli(
        ["watch", str(folder / "stream.zarr"), "--reference", str(folder / "missing.zarr"), *MONITOR_OPTIONS], capsys
    )
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and "missing.zarr" in err and err.startswith("streamrff watch: error:")
