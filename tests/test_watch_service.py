"""``streamrff watch`` as a service: exact resume after any stop (kill -9 included), clean signals, one owner per
state, a source that changes, rows never written, invalid rows, object storage. Real processes and signals.

The reference of every exact check is a DriftMonitor fed the whole array in one in-memory call in this process
(its window sums are the same bit for bit however the rows are split into batches)."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from watching import (
    ENVIRONMENT,
    assert_same_state,
    communicate,
    expected_state,
    read_line,
    read_until,
    remaining_lines,
    watch_process,
)

import streamrff as srf
from streamrff.cli import main
from streamrff.drift import load_monitor

WINDOW, FEATURES, CHUNK = 50, 64, 250


@pytest.fixture(scope="module")
def fitted():
    """A monitor fitted on N(0, I_3) rows, without a cursor (as DriftMonitor.save writes it)."""
    reference = np.random.default_rng(5).normal(size=(1000, 3)).astype(np.float32)
    monitor = srf.DriftMonitor(WINDOW, 100_000, n_features=FEATURES, bandwidth=1.5, n_streams=2000, seed=0)
    return monitor.fit(reference)


def initial_state(fitted, folder: Path) -> str:
    path = str(folder / "state")
    fitted.save(path)
    return path


def stream_rows(n_rows: int, seed: int = 11, shift_from: int | None = None) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n_rows, 3)).astype(np.float32)
    if shift_from is not None:
        rows[shift_from:, 0] += 2.0
    return rows


WRITER = """
import sys, time
import numpy as np, zarr
path, (n_chunks, chunk), pause, wait_chunk = sys.argv[1], map(int, sys.argv[2:4]), float(sys.argv[4]), int(sys.argv[5])
rows = np.random.default_rng(11).normal(size=(n_chunks * chunk, 3)).astype(np.float32)
array = zarr.open_array(path, mode="r+")
for index in range(array.shape[0] // chunk, n_chunks):
    array.resize((array.shape[0] + chunk, 3))  # as zarr's append does: resize first, then write
    if index == wait_chunk:
        time.sleep(3.0)  # the new rows exist in the shape only: their chunk is not stored yet
    array[index * chunk : (index + 1) * chunk] = rows[index * chunk : (index + 1) * chunk]
    time.sleep(pause)
"""


def start_writer(path: str, n_chunks: int, pause: float, wait_chunk: int = -1) -> subprocess.Popen:
    script = textwrap.dedent(WRITER)
    return subprocess.Popen(
        [sys.executable, "-c", script, path, str(n_chunks), str(CHUNK), str(pause), str(wait_chunk)], env=ENVIRONMENT
    )


def follow_argv(path: str, state: str, *extra: str) -> list[str]:
    return [path, "--reference", state, "--save-monitor", state, "--overwrite", "--follow", "--poll", "0.05",
            "--save-interval", "0", "--json", *extra]  # fmt: skip


def chunk_end(line: str) -> int:
    event = json.loads(line)
    return event["rows"][1] if event["event"] == "chunk" else -1


def kill_and_restart(fitted, tmp_path, n_kills: int, n_chunks: int, pause: float):
    """A writer appends ``n_chunks`` chunks; the watcher is killed -9 ``n_kills`` times at random moments and
    restarted from its state each time; at the end SIGTERM. Returns the final saved state, the rows and the lines."""
    path = str(tmp_path / "live.zarr")
    zarr.create_array(path, shape=(0, 3), chunks=(CHUNK, 3), dtype="float32")
    state = initial_state(fitted, tmp_path)
    writer = start_writer(path, n_chunks, pause)
    lines = []
    randomness = random.Random(n_kills * 7919 + n_chunks)
    try:
        for kill in range(n_kills):
            watcher = watch_process(follow_argv(path, state, *(["--from-row", "0"] if kill == 0 else [])))
            try:
                target, seen = randomness.randint(1, 3), [0]

                def enough(line, seen=seen, target=target):
                    seen[0] += line.startswith('{"event": "chunk"')
                    return seen[0] >= target

                lines += read_until(watcher, enough)
                time.sleep(randomness.uniform(0.0, 0.15))  # a random moment: reading, updating, saving or polling
            finally:
                watcher.kill()  # SIGKILL: no handler runs
                watcher.wait(timeout=60)
                lines += remaining_lines(watcher)  # printed before the kill
            assert watcher.returncode == -signal.SIGKILL
            assert (tmp_path / ".state.lock").exists()  # left behind: the next watcher takes it over
        watcher = watch_process(follow_argv(path, state))
        total = n_chunks * CHUNK
        lines += read_until(watcher, lambda line: chunk_end(line) == total, seconds=180)
        watcher.send_signal(signal.SIGTERM)
        out, err = communicate(watcher, timeout=60)
    finally:
        writer.wait(timeout=180)
    assert watcher.returncode == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["event"] == "summary" and summary["stopped_by"] == "SIGTERM" and summary["next_row"] == total
    assert not list(tmp_path.glob(".state.partial-*"))  # staging copies of killed saves are removed by the next owner
    return load_monitor(state), stream_rows(total), lines


def test_kill_9_then_restart_ends_in_the_uninterrupted_state(fitted, tmp_path):
    saved, rows, _ = kill_and_restart(fitted, tmp_path, n_kills=1, n_chunks=12, pause=0.05)
    assert saved.source_cursor_["next_row"] == rows.shape[0]
    assert_same_state(saved, expected_state(fitted, rows))


@pytest.mark.slow
def test_three_kill_9_at_random_moments_then_sigterm_see_every_row_exactly_once(fitted, tmp_path):
    saved, rows, lines = kill_and_restart(fitted, tmp_path, n_kills=3, n_chunks=40, pause=0.1)
    assert saved.n_rows_seen_ == rows.shape[0]  # every row once: none skipped, none counted twice
    assert_same_state(saved, expected_state(fitted, rows))
    # printed lines are at least once: every chunk was printed, some twice (read again after a kill)
    printed = {tuple(json.loads(line)["rows"]) for line in lines if line.startswith('{"event": "chunk"')}
    assert {(start, start + CHUNK) for start in range(0, rows.shape[0], CHUNK)} <= printed


def test_a_writer_that_resizes_waits_then_writes_is_never_read_as_zeros(fitted, tmp_path):
    path = str(tmp_path / "live.zarr")
    zarr.create_array(path, shape=(0, 3), chunks=(CHUNK, 3), dtype="float32")
    state = initial_state(fitted, tmp_path)
    n_chunks = 6
    writer = start_writer(path, n_chunks, pause=0.02, wait_chunk=3)
    watcher = watch_process(follow_argv(path, state, "--from-row", "0", "--max-rows", str(n_chunks * CHUNK)))
    try:
        out, err = communicate(watcher, timeout=180)
    finally:
        watcher.kill()
        writer.wait(timeout=60)
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert not any(event["event"] == "alarm" for event in events)
    assert [e["rows"] for e in events if e["event"] == "chunk"] == [[s, s + CHUNK] for s in range(0, 1500, CHUNK)]
    assert_same_state(load_monitor(state), expected_state(fitted, stream_rows(n_chunks * CHUNK)))


def test_a_second_watcher_is_refused_with_one_line_naming_the_holder(fitted, tmp_path):
    path = str(tmp_path / "live.zarr")
    zarr.create_array(path, data=stream_rows(300), chunks=(CHUNK, 3))
    state = initial_state(fitted, tmp_path)
    first = watch_process(follow_argv(path, state, "--from-row", "0"))
    try:
        read_until(first, lambda line: line.startswith('{"event": "chunk"'))
        started = time.monotonic()
        second = watch_process(follow_argv(path, state))
        out, err = communicate(second, timeout=60)
        assert time.monotonic() - started < 60  # refused at once (start-up included), not after a wait
        assert second.returncode == 4 and out == ""
        assert err.count("\n") == 1 and f"process {first.pid} on " in err and "one watcher per state" in err
        # Issue 49 item 4: neither a symbolic link to the state nor a deleted lock file admits a second owner.
        alias = tmp_path / "alias-of-state"
        alias.symlink_to(state)
        lock_file = Path(state).with_name(f".{Path(state).name}.lock")
        for how in ("alias", "lock file deleted"):
            if how == "lock file deleted":
                lock_file.unlink()
            second = watch_process(follow_argv(path, str(alias) if how == "alias" else state))
            out, err = communicate(second, timeout=60)
            assert second.returncode == 4 and err.count("\n") == 1 and "one watcher per state" in err, (how, err)
        first.send_signal(signal.SIGTERM)
        out, err = communicate(first, timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["rows_seen"] == 250


@pytest.mark.parametrize(
    "how", ["SIGTERM", "SIGINT ignored at start", pytest.param("SIGHUP", marks=pytest.mark.slow)]
)  # SIGHUP: the same handler as SIGTERM
def test_every_stop_signal_saves_and_prints_the_summary(fitted, tmp_path, how):
    path = str(tmp_path / "idle.zarr")
    zarr.create_array(path, data=stream_rows(300), chunks=(CHUNK, 3))
    state = initial_state(fitted, tmp_path)
    ignore_sigint = how.startswith("SIGINT")  # as a non-interactive shell starts a background job
    watcher = watch_process(
        [path, "--reference", state, "--save-monitor", state, "--overwrite", "--follow", "--poll", "0.05",
         "--from-row", "0", "--save-interval", "3600"],
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None,
    )  # fmt: skip
    try:
        assert read_line(watcher).startswith("rows 0-249 (250 seen)")
        watcher.send_signal(getattr(signal, how.split()[0]))
        out, err = communicate(watcher, timeout=60)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    word = "interrupted" if ignore_sigint else f"stopped by {how}"
    assert out.splitlines()[0] == f"{word} after 250 rows of {path} from row 0 (1 chunks): no drift"
    assert out.splitlines()[-1] == f"wrote {state}" and "Traceback" not in err
    saved = load_monitor(state)  # saved at the stop (the interval had not passed)
    assert saved.source_cursor_["next_row"] == 250 and saved.n_rows_seen_ == 250


def run_cli(argv, capsys):
    status = main(["watch", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def watched_state(fitted, tmp_path, rows, capsys, max_rows=None):
    """An array of ``rows`` watched to its end (or ``max_rows``) into a saved state; returns (array path, state)."""
    path = str(tmp_path / "stream.zarr")
    zarr.create_array(path, data=rows, chunks=(CHUNK, 3))
    state = initial_state(fitted, tmp_path)
    argv = [path, "--reference", state, "--save-monitor", state, "--overwrite"]
    status, _, err = run_cli([*argv, *(["--max-rows", str(max_rows)] if max_rows else [])], capsys)
    assert status == 0, err
    return path, state


def test_a_restart_continues_at_the_saved_row_and_from_row_overrides_it(fitted, tmp_path, capsys):
    rows = stream_rows(1500)
    path, state = watched_state(fitted, tmp_path, rows, capsys, max_rows=600)
    assert load_monitor(state).source_cursor_["next_row"] == 600
    status, out, err = run_cli([path, "--reference", state, "--save-monitor", state, "--overwrite"], capsys)
    assert status == 0, err
    assert "after 900 rows of" in out and "from row 600" in out
    assert_same_state(load_monitor(state), expected_state(fitted, rows))
    status, out, _ = run_cli([path, "--reference", state, "--from-row", "1250"], capsys)
    assert status == 0 and "after 250 rows of" in out and "(1,750 seen)" in out


@pytest.mark.parametrize("change", ["replaced", "shrunk", "wider", "moved"])
def test_a_changed_source_is_refused_with_the_state_unchanged(fitted, tmp_path, capsys, change):
    rows = stream_rows(1000)
    path, state = watched_state(fitted, tmp_path, rows, capsys)
    before = (Path(state) / "zarr.json").read_bytes()
    given = path
    shutil.rmtree(path)
    if change == "replaced":  # another array at the same path, longer, shifted by 5
        zarr.create_array(path, data=stream_rows(1500, seed=3) + 5, chunks=(CHUNK, 3))
    elif change == "shrunk":
        zarr.create_array(path, data=rows[:500], chunks=(CHUNK, 3))
    elif change == "wider":
        zarr.create_array(path, data=np.hstack([rows, rows[:, :1]]), chunks=(CHUNK, 4))
    else:
        given = str(tmp_path / "other.zarr")
        zarr.create_array(given, data=rows, chunks=(CHUNK, 3))
    status, out, err = run_cli([given, "--reference", state, "--save-monitor", state, "--overwrite"], capsys)
    assert status == 3 and out == ""
    assert err.count("\n") == 1 and "Last row consumed: row 999 (next row 1,000)" in err and "--restart" in err
    expected = {"replaced": "rewritten", "shrunk": "shrank to 500 rows", "moved": "another array",
                "wider": "its width went from 3 to 4 columns"}[change]  # fmt: skip
    assert expected in err
    assert (Path(state) / "zarr.json").read_bytes() == before
    if change in ("replaced", "moved"):  # on purpose: --restart starts anew on it (an empty window)
        status, out, err = run_cli([given, "--reference", state, "--restart", "--from-row", "0"], capsys)
        assert status == 0, err


def test_a_nan_row_names_the_array_row_saves_before_it_and_skip_continues(fitted, tmp_path, capsys):
    rows = stream_rows(1000)
    rows[605, 1] = np.nan
    path, state = str(tmp_path / "stream.zarr"), initial_state(fitted, tmp_path)
    zarr.create_array(path, data=rows, chunks=(CHUNK, 3))
    argv = [path, "--reference", state, "--save-monitor", state, "--overwrite"]
    status, out, err = run_cli(argv, capsys)
    assert status == 1 and err.count("\n") == 1
    assert "row 605 of " in err and "row 105 of its chunk from row 500" in err and "--on-invalid skip" in err
    assert "saved up to row 604 (next row 605)" in err
    saved = load_monitor(state)
    assert saved.source_cursor_["next_row"] == 605 and saved.n_rows_seen_ == 605
    status, out, err = run_cli([*argv, "--on-invalid", "skip", "--json"], capsys)
    assert status == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["rows"] == [605, 750] and events[0]["skipped"] == [605]
    assert events[-1]["rows_skipped"] == 1
    saved = load_monitor(state)
    assert saved.n_rows_skipped_ == 1
    assert_same_state(saved, expected_state(fitted, np.delete(rows, 605, axis=0)))


def test_a_chunk_never_written_is_refused_not_read_as_zeros(fitted, tmp_path, capsys):
    rows = stream_rows(1000)
    path, state = str(tmp_path / "holes.zarr"), initial_state(fitted, tmp_path)
    array = zarr.create_array(path, shape=(1000, 3), chunks=(CHUNK, 3), dtype="float32")
    array[:500] = rows[:500]  # rows 500-999 are in the shape, never written
    argv = [path, "--reference", state, "--save-monitor", state, "--overwrite", "--from-row", "0"]
    status, _, err = run_cli(argv, capsys)
    assert status == 3 and err.count("\n") == 1 and "rows 500-749" in err and "c/2/0 is absent" in err
    assert load_monitor(state).source_cursor_["next_row"] == 500
    status, _, err = run_cli([*argv[:-2], "--follow", "--poll", "0.05", "--missing-chunk-timeout", "0.3"], capsys)
    assert status == 3 and "still absent after" in err
    assert_same_state(load_monitor(state), expected_state(fitted, rows[:500]))


def test_exit_on_drift_stops_at_the_alarm_with_status_5(fitted, tmp_path, capsys):
    rows = stream_rows(2000, shift_from=1000)
    path, state = str(tmp_path / "stream.zarr"), initial_state(fitted, tmp_path)
    zarr.create_array(path, data=rows, chunks=(CHUNK, 3))
    status, out, _ = run_cli([path, "--reference", state, "--save-monitor", state, "--overwrite", "--json",
                              "--exit-on-drift"], capsys)  # fmt: skip
    assert status == 5
    events = [json.loads(line) for line in out.splitlines()]
    alarm = next(event for event in events if event["event"] == "alarm")
    assert 1000 <= alarm["drift_at_row"] < 1250 and events[-1]["next_row"] == 1250
    expected = expected_state(fitted, rows[:1250])
    assert expected.drift_at_ == alarm["drift_at"]
    assert_same_state(load_monitor(state), expected)


def test_a_corrupt_monitor_and_a_window_too_large_are_one_line(fitted, tmp_path, capsys):
    rows = stream_rows(500)
    path, state = watched_state(fitted, tmp_path, rows, capsys)
    metadata = Path(state) / "zarr.json"
    metadata.write_bytes(metadata.read_bytes()[:200])
    status, out, err = run_cli([path, "--reference", state], capsys)
    assert status == 1 and err.count("\n") == 1 and "is a corrupt drift monitor" in err
    status, out, err = run_cli([path, "--reference", path, "--window", "1000000000", "--ert", "100"], capsys)
    assert status == 1 and err.count("\n") == 1 and "window (CLI --window) = 1,000,000,000" in err


def test_watch_resumes_and_refuses_on_s3_as_on_disk(fitted, tmp_path, capsys, s3_server, s3_bucket):
    storage = json.dumps(s3_server.storage_options)
    rows = stream_rows(1000)
    url = f"s3://{s3_bucket}/live.zarr"
    store = zarr.storage.FsspecStore.from_url(url, storage_options=s3_server.storage_options, read_only=False)
    array = zarr.create_array(store=store, data=rows[:500], chunks=(CHUNK, 3), zarr_format=3)
    state = initial_state(fitted, tmp_path)
    argv = [url, "--reference", state, "--save-monitor", state, "--overwrite", "--storage-options", storage]
    status, _, err = run_cli([*argv, "--from-row", "0"], capsys)
    assert status == 0, err
    cursor = load_monitor(state).source_cursor_
    assert cursor["next_row"] == 500 and all(len(str(v[1])) > 8 for v in cursor["last_chunk"]["objects"].values())
    array.append(rows[500:])
    status, out, err = run_cli(argv, capsys)
    assert status == 0 and "from row 500" in out, err
    assert_same_state(load_monitor(state), expected_state(fitted, rows))
    before = (Path(state) / "zarr.json").read_bytes()
    array[750:] = rows[750:] + 5  # a consumed chunk rewritten in place: another array now
    status, _, err = run_cli(argv, capsys)
    assert status == 3 and "rows 750-999, already consumed, was rewritten" in err
    assert (Path(state) / "zarr.json").read_bytes() == before
