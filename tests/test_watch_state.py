"""``streamrff watch SOURCE --state DIR --reference REF``: one command line for every start of a service, a start
before the data, the calibration cache, metrics, health and the status page (in a real headless browser).

Real processes and signals. The reference of every exact check is a DriftMonitor fitted in this process with the
same options and fed the whole array in one in-memory call."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import zarr
from watching import (
    ENVIRONMENT,
    assert_same_state,
    communicate,
    expected_state,
    read_until,
    remaining_lines,
    watch_process,
)

import streamrff as srf
from streamrff.cli import main
from streamrff.drift import load_monitor

WINDOW, FEATURES, CHUNK, STREAMS, ERT = 50, 64, 250, 300, 100_000
FIT = ["--window", str(WINDOW), "--ert", str(ERT), "--features", str(FEATURES), "--bandwidth", "1.5",
       "--streams", str(STREAMS)]  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The reference array on disk, and a monitor fitted on it here with the options of FIT."""
    path = str(tmp_path_factory.mktemp("reference") / "ref.zarr")
    rows = np.random.default_rng(5).normal(size=(1000, 3)).astype(np.float32)
    zarr.create_array(path, data=rows, chunks=(500, 3))
    monitor = srf.DriftMonitor(WINDOW, ERT, n_features=FEATURES, bandwidth=1.5, n_streams=STREAMS, seed=0)
    return path, monitor.fit(path)


def stream_rows(n_rows: int, shift_from: int | None = None) -> np.ndarray:
    rows = np.random.default_rng(11).normal(size=(n_rows, 3)).astype(np.float32)
    if shift_from is not None:
        rows[shift_from:, 0] += 3.0
    return rows


def service_argv(source: str, state: str, reference: str, *extra: str) -> list[str]:
    """The one command line of the unit: the same for every start."""
    return [source, "--state", state, "--reference", reference, *FIT, "--follow", "--poll", "0.05",
            "--save-interval", "0", "--json", *extra]  # fmt: skip


def chunk_end(line: str) -> int:
    event = json.loads(line)
    return event["rows"][1] if event["event"] == "chunk" else -1


WRITER = """
import sys, time
import numpy as np, zarr
path, n_rows, chunk, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rows = np.random.default_rng(11).normal(size=(n_rows, 3)).astype(np.float32)
array = zarr.open_array(path, mode="r+") if len(sys.argv) < 6 else zarr.create_array(path, shape=(0, 3),
    chunks=(chunk, 3), dtype="float32")
for start in range(array.shape[0], n_rows, chunk):
    array.resize((start + chunk, 3))
    array[start : start + chunk] = rows[start : start + chunk]
    time.sleep(pause)
"""


def start_writer(path: str, n_rows: int, pause: float, create: bool = False) -> subprocess.Popen:
    argv = [sys.executable, "-c", WRITER, path, str(n_rows), str(CHUNK), str(pause)] + (["create"] if create else [])
    return subprocess.Popen(argv, env=ENVIRONMENT)


def kill_restart(reference, tmp_path, n_kills: int, n_chunks: int, pause: float):
    """The unit's one command line, killed -9 ``n_kills`` times (the first before the first saved state, then at
    random moments), restarted each time, then SIGTERM; a writer appends meanwhile."""
    ref_path, _ = reference
    path, state = str(tmp_path / "live.zarr"), tmp_path / "state"
    zarr.create_array(path, shape=(0, 3), chunks=(CHUNK, 3), dtype="float32")
    total = n_chunks * CHUNK
    argv = service_argv(path, str(state), ref_path)
    randomness = random.Random(n_kills * 7919 + n_chunks)
    writer = None
    lines: list[str] = []
    try:
        watcher = watch_process(argv)
        try:  # the first kill: as soon as the state directory exists, long before the fit is saved
            deadline = time.monotonic() + 120
            while not state.exists() and time.monotonic() < deadline and watcher.poll() is None:
                time.sleep(0.01)
        finally:
            watcher.kill()
            watcher.wait(timeout=60)
        assert watcher.returncode == -signal.SIGKILL
        assert not (state / "monitor").exists() and not (state / "fit").exists()  # killed before any saved state
        writer = start_writer(path, total, pause)
        for _ in range(n_kills - 1):
            watcher = watch_process(argv)
            try:
                target, seen = randomness.randint(1, 3), [0]

                def enough(line, seen=seen, target=target):
                    seen[0] += line.startswith('{"event": "chunk"')
                    return seen[0] >= target

                lines += read_until(watcher, enough)
                time.sleep(randomness.uniform(0.0, 0.15))  # reading, updating, saving or polling
            finally:
                watcher.kill()
                watcher.wait(timeout=60)
                lines += remaining_lines(watcher)
            assert watcher.returncode == -signal.SIGKILL
        watcher = watch_process(argv)
        lines += read_until(watcher, lambda line: chunk_end(line) == total)
        watcher.send_signal(signal.SIGTERM)
        out, err = communicate(watcher, timeout=60)
    finally:
        if writer is not None:
            writer.wait(timeout=180)
    assert watcher.returncode == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["stopped_by"] == "SIGTERM" and summary["next_row"] == total
    assert "fitting" not in err and "calibrated" not in err  # the last start resumed: no fit, no calibration
    return load_monitor(state / "monitor"), total, lines


def test_one_command_line_killed_before_the_first_save_and_after_a_chunk_sees_every_row_once(reference, tmp_path):
    saved, total, _ = kill_restart(reference, tmp_path, n_kills=2, n_chunks=8, pause=0.05)
    assert saved.n_rows_seen_ == total and saved.source_cursor_["next_row"] == total
    assert_same_state(saved, expected_state(reference[1], stream_rows(total), tmp_path))


@pytest.mark.slow
def test_one_command_line_killed_three_times_then_sigterm_sees_every_row_exactly_once(reference, tmp_path):
    saved, total, lines = kill_restart(reference, tmp_path, n_kills=3, n_chunks=40, pause=0.1)
    assert saved.n_rows_seen_ == total  # none skipped, none counted twice
    assert_same_state(saved, expected_state(reference[1], stream_rows(total), tmp_path))
    printed = {tuple(json.loads(line)["rows"]) for line in lines if line.startswith('{"event": "chunk"')}
    assert {(start, start + CHUNK) for start in range(0, total, CHUNK)} <= printed


@pytest.mark.parametrize("start", [pytest.param("not created", marks=pytest.mark.slow), "empty"])
def test_a_start_before_the_data_waits_then_sees_every_row_once(reference, tmp_path, start):
    ref_path, fitted = reference
    path, state, total = str(tmp_path / "live.zarr"), str(tmp_path / "state"), 6 * CHUNK
    if start == "empty":
        zarr.create_array(path, shape=(0, 3), chunks=(CHUNK, 3), dtype="float32")
    watcher = watch_process(service_argv(path, state, ref_path, "--metrics-port", "0"))
    writer = None
    try:
        port = _served_port(watcher)
        why = "does not exist yet" if start == "not created" else "has no rows yet"
        read_until(watcher, stream=watcher.stderr, accept=lambda line: why in line)  # logged while waiting
        assert (Path(state) / "monitor").is_dir()  # the state is published before the data exists
        assert _get(port, "/healthz")[0] == 200  # alive while waiting: the loop turns
        status, text = _get(port, "/readyz")
        assert status == 503 and why in text
        writer = start_writer(path, total, 0.02, create=start == "not created")
        lines = read_until(watcher, lambda line: chunk_end(line) == total)
        watcher.send_signal(signal.SIGTERM)
        out, err = communicate(watcher, timeout=60)
    finally:
        watcher.kill()
        if writer is not None:
            writer.wait(timeout=60)
    assert watcher.returncode == 0, err
    starts = [json.loads(line)["rows"][0] for line in lines + out.splitlines() if '"event": "chunk"' in line]
    assert starts == list(range(0, total, CHUNK))  # every row once, from row 0
    assert_same_state(load_monitor(Path(state) / "monitor"), expected_state(fitted, stream_rows(total), tmp_path))


@pytest.mark.parametrize("start", ["not created", "empty"])
def test_without_follow_no_data_is_one_line_and_status_6(reference, tmp_path, capsys, start):
    path = str(tmp_path / "live.zarr")
    if start == "empty":
        zarr.create_array(path, shape=(0, 3), chunks=(CHUNK, 3), dtype="float32")
    status = main(["watch", path, "--reference", reference[0], "--window", "50", "--ert", "1000"])
    err = capsys.readouterr().err
    assert status == 6 and err.count("\n") == 1 and "--follow" in err and err.startswith("streamrff watch: error:")


def test_a_restart_resumes_without_recalibrating_and_refit_reuses_the_cached_calibration(reference, tmp_path, capsys):
    ref_path, fitted = reference
    path, state = str(tmp_path / "live.zarr"), tmp_path / "state"
    zarr.create_array(path, data=stream_rows(2 * CHUNK), chunks=(CHUNK, 3))
    argv = ["watch", path, "--state", str(state), "--reference", ref_path, *FIT]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "fitting a new monitor" in err and "calibrated the thresholds" in err
    first = load_monitor(state / "monitor")
    np.testing.assert_array_equal(first.thresholds_, fitted.thresholds_)  # the same fit as in this process
    assert main([*argv[:-2], "--streams", "400"]) == 0  # a restart: resumed; the differing option is named
    err = capsys.readouterr().err
    assert "fitting" not in err and "calibrat" not in err and "ignoring --streams 400" in err
    assert load_monitor(state / "monitor").n_rows_seen_ == 2 * CHUNK
    assert main([*argv, "--refit"]) == 0  # refit on purpose: the cached calibration serves it
    err = capsys.readouterr().err
    assert "fitting a new monitor" in err and "from the cached calibration" in err and "calibrated the" not in err
    np.testing.assert_array_equal(load_monitor(state / "monitor").thresholds_, fitted.thresholds_)


def _served_port(watcher) -> int:
    line = read_until(watcher, stream=watcher.stderr, accept=lambda line: "serving metrics on" in line)[-1]
    return int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line).group(1))


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _saved_after(path: Path, n_rows: int):
    """The saved state once it holds ``n_rows`` (the save follows the chunk's line; a read during a save retries)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            saved = load_monitor(path)
            if saved.n_rows_seen_ >= n_rows:
                return saved
        except srf.SketchFormatError:  # read while the directory was being replaced
            pass
        assert time.monotonic() < deadline, "the state was not saved after the last chunk"
        time.sleep(0.05)


def _page_values(dom: str) -> dict[str, str]:
    return dict(re.findall(r'<td id="(\w+)">([^<]*)</td>', dom))


def test_metrics_health_and_the_status_page_in_a_headless_browser_match_the_json_lines(reference, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    ref_path, _ = reference
    path, state = str(tmp_path / "live.zarr"), str(tmp_path / "state")
    rows = stream_rows(6 * CHUNK + 100, shift_from=3 * CHUNK)  # an alarm; the last 100 rows: a chunk still growing
    zarr.create_array(path, data=rows, chunks=(CHUNK, 3))
    watcher = watch_process(service_argv(path, state, ref_path, "--metrics-port", "0"))
    try:
        port = _served_port(watcher)
        lines = read_until(watcher, lambda line: chunk_end(line) == 6 * CHUNK)
        last = json.loads(lines[-1])
        alarm = next(json.loads(line) for line in lines if '"event": "alarm"' in line)
        assert _get(port, "/healthz")[0] == 200 and _get(port, "/readyz")[0] == 200
        status, text = _get(port, "/metrics")
        assert status == 200
        metrics = {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }  # fmt: skip
        saved = _saved_after(Path(state) / "monitor", 6 * CHUNK)
        assert metrics["streamrff_watch_rows_seen"] == saved.n_rows_seen_ == 6 * CHUNK
        assert metrics["streamrff_watch_next_row"] == saved.source_cursor_["next_row"]
        assert metrics["streamrff_watch_rows_behind"] == rows.shape[0] - saved.source_cursor_["next_row"] == 100
        assert metrics["streamrff_watch_statistic"] == last["statistic"]
        assert metrics["streamrff_watch_threshold"] == last["threshold"]
        assert metrics["streamrff_watch_drift"] == 1
        assert metrics["streamrff_watch_drift_at_row"] == alarm["drift_at_row"]
        assert metrics["streamrff_watch_chunks_total"] == 6 and metrics["streamrff_watch_seconds_since_save"] >= 0
        chromium = shutil.which("chromium")
        if chromium is None:
            pytest.skip("no chromium: the status page is checked in a headless browser (.ci/run installs it)")
        browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'chrome'}"]
        url = f"http://127.0.0.1:{port}/"
        dom = subprocess.run([*browser, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        screenshot = tmp_path / "status.png"
        subprocess.run([*browser, f"--screenshot={screenshot}", "--window-size=900,1000", url], capture_output=True,
                       timeout=120)  # fmt: skip
        watcher.send_signal(signal.SIGTERM)
        out, err = communicate(watcher, timeout=60)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    summary = json.loads(out.splitlines()[-1])
    shown = _page_values(dom)
    assert float(shown["statistic"]) == last["statistic"] and float(shown["threshold"]) == last["threshold"]
    assert int(shown["rows_seen"]) == summary["rows_seen"] and int(shown["next_row"]) == summary["next_row"]
    assert int(shown["rows_behind"]) == 100 and int(shown["drift_at_row"]) == summary["drift_at_row"]
    assert f'id="alarm_row">{alarm["drift_at_row"]}<' in dom and "<polyline" in dom  # the alarm and the plot
    assert re.search(r'class="column">0 \(', dom)  # the moved column (0) is named first
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 5000


@pytest.mark.slow
def test_health_and_readiness_while_waiting_for_the_source(reference, tmp_path):
    watcher = watch_process(service_argv(str(tmp_path / "later.zarr"), str(tmp_path / "state"), reference[0],
                                         "--metrics-port", "0"))  # fmt: skip
    try:
        port = _served_port(watcher)
        read_until(watcher, stream=watcher.stderr, accept=lambda line: "does not exist yet" in line)
        assert _get(port, "/healthz")[0] == 200  # alive: the loop turns
        status, text = _get(port, "/readyz")
        assert status == 503 and "does not exist yet" in text
        assert _get(port, "/nothing")[0] == 404
        watcher.send_signal(signal.SIGTERM)
        out, _ = communicate(watcher, timeout=60)
    finally:
        watcher.kill()
    summary = json.loads(out.splitlines()[-1])  # --json: the start-up's summary
    assert watcher.returncode == 0 and summary["stopped_by"] == "SIGTERM" and summary["during"] == "start-up"


def test_an_s3_path_not_created_yet_is_one_line_without_follow(reference, capsys, s3_server, s3_bucket):
    storage = json.dumps(s3_server.storage_options)
    url = f"s3://{s3_bucket}/later.zarr"
    status = main(["watch", url, "--reference", reference[0], "--window", "50", "--ert", "1000",
                   "--storage-options", storage])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 6 and err.count("\n") == 1 and "does not exist yet" in err


@pytest.mark.slow
def test_an_s3_path_not_created_yet_is_waited_for_then_every_row_seen_once(reference, tmp_path, s3_server, s3_bucket):
    ref_path, fitted = reference
    url, state, total = f"s3://{s3_bucket}/later.zarr", str(tmp_path / "state"), 4 * CHUNK
    storage = json.dumps(s3_server.storage_options)
    watcher = watch_process(service_argv(url, state, ref_path, "--storage-options", storage))
    try:
        read_until(watcher, stream=watcher.stderr, accept=lambda line: "does not exist yet" in line)
        store = zarr.storage.FsspecStore.from_url(url, storage_options=s3_server.storage_options, read_only=False)
        zarr.create_array(store=store, data=stream_rows(total), chunks=(CHUNK, 3), zarr_format=3)
        lines = read_until(watcher, lambda line: chunk_end(line) == total)
        watcher.send_signal(signal.SIGTERM)
        out, err = communicate(watcher, timeout=60)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    starts = [json.loads(line)["rows"][0] for line in lines + out.splitlines() if '"event": "chunk"' in line]
    assert starts == list(range(0, total, CHUNK))
    assert_same_state(load_monitor(Path(state) / "monitor"), expected_state(fitted, stream_rows(total), tmp_path))


def test_a_fit_saved_before_its_calibration_is_resumed_not_refitted(reference, tmp_path, capsys):
    """A kill during the calibration leaves DIR/fit: the next start calibrates it without fitting again."""
    from streamrff.drift.service import StatePaths, save_fit

    ref_path, fitted = reference
    path, state = str(tmp_path / "live.zarr"), tmp_path / "state"
    zarr.create_array(path, data=stream_rows(CHUNK), chunks=(CHUNK, 3))
    pending = srf.DriftMonitor(WINDOW, ERT, n_features=FEATURES, bandwidth=1.5, n_streams=STREAMS, seed=0)
    save_fit(StatePaths(state).fit, pending._fit_uncalibrated(ref_path))
    with pytest.raises(srf.SketchFormatError, match="finite thresholds"):
        load_monitor(StatePaths(state).fit)  # a fit is not a monitor: its thresholds are not there yet
    assert main(["watch", path, "--state", str(state), "--reference", ref_path, *FIT]) == 0
    err = capsys.readouterr().err
    assert "resuming the fit saved" in err and "fitting a new monitor" not in err
    assert not (state / "fit").exists()
    saved = load_monitor(state / "monitor")
    np.testing.assert_array_equal(saved.thresholds_, fitted.thresholds_)
    assert_same_state(saved, expected_state(fitted, stream_rows(CHUNK), tmp_path))
