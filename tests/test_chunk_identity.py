"""A stored chunk is known by its bytes, not by its size and modification time (issue #49, item 3).

Chunks are rewritten as ``cp -p``, ``rsync -t`` or a restore do: other values, the same byte length (the arrays
are stored uncompressed) and the old modification time put back with ``os.utime``. A checkpoint resume then
sketches the new rows, a watcher restarted on them refuses them, and a chunk filled in two writes is consumed
only once it settled. References: in-memory numpy sketches, and a monitor fed the final rows in one call."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import s3fs
import zarr
from watching import ENVIRONMENT, assert_same_state, communicate, watch_process

import streamrff as srf
from streamrff.cli import main
from streamrff.drift import load_monitor

ROWS = np.random.default_rng(0).normal(size=(4_000, 4)).astype(np.float32)
NEW = np.random.default_rng(1).normal(loc=1.0, size=(4_000, 4)).astype(np.float32)
FEATURE_MAP = srf.RFF(n_features=32, bandwidth=1.5, seed=2).fit(ROWS[:1])
WINDOW, CHUNK = 50, 250


def uncompressed(path: Path, rows: np.ndarray, chunk_rows: int) -> str:
    """An array whose chunk files hold the raw bytes: a rewrite with other values keeps their length."""
    zarr.create_array(str(path), data=rows, chunks=(chunk_rows, rows.shape[1]), compressors=None)
    return str(path)


def chunk_files(path: str) -> dict[str, os.stat_result]:
    return {str(file): file.stat() for file in sorted(Path(path, "c").rglob("*")) if file.is_file()}


def rewrite_keeping_size_and_mtime(path: str, start: int, rows: np.ndarray, scratch: Path) -> None:
    """Rows ``start..`` of the array replaced by ``rows`` as ``cp -p`` does: each chunk file written with the new
    bytes in place (same inode), then its times put back."""
    changed = zarr.open_array(shutil.copytree(path, scratch), mode="r+")
    changed[start : start + rows.shape[0]] = rows
    before = chunk_files(path)
    for name, stat in before.items():
        shutil.copyfile(Path(scratch) / Path(name).relative_to(path), name)  # truncates and writes: same inode
        os.utime(name, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = chunk_files(path)
    old_identity = {n: (s.st_size, s.st_mtime_ns, s.st_ino) for n, s in before.items()}
    assert {n: (s.st_size, s.st_mtime_ns, s.st_ino) for n, s in after.items()} == old_identity  # all it looked at


def test_a_checkpoint_resume_after_every_chunk_was_rewritten_keeping_size_and_mtime_sketches_the_new_rows(
    tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="streamrff.engine")
    path = uncompressed(tmp_path / "rows.zarr", ROWS, 1_000)
    checkpoint = tmp_path / "ck"
    srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)
    rewrite_keeping_size_and_mtime(path, 0, NEW, tmp_path / "scratch.zarr")

    resumed = srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)

    assert "0 from checkpoint, 4 to compute" in caplog.text
    reference = srf.sketch_array(NEW.astype(np.float64), FEATURE_MAP, dtype="float64")  # in memory
    assert resumed.count == NEW.shape[0]
    np.testing.assert_allclose(resumed.feature_sum, reference.feature_sum, rtol=0, atol=1e-6 * NEW.shape[0])
    assert len(list(checkpoint.glob("*/rows-*.zarr"))) == 4  # the superseded partials are removed
    again = srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)  # nothing changed: every partial reused
    assert "4 from checkpoint, 0 to compute" in caplog.text.splitlines()[-1]
    assert again == resumed


@pytest.fixture(scope="module")
def fitted():
    reference = np.random.default_rng(5).normal(size=(1000, 3)).astype(np.float32)
    monitor = srf.DriftMonitor(WINDOW, 100_000, n_features=64, bandwidth=1.5, n_streams=2000, seed=0)
    return monitor.fit(reference)


def saved(monitor, path: Path) -> str:
    monitor.save(str(path))
    return str(path)


def fed(fitted, tmp_path: Path, rows: np.ndarray):
    """The reference state: a copy of the fitted monitor fed every row at once, in memory."""
    monitor = load_monitor(saved(fitted, tmp_path / "reference-copy"))
    monitor.update(rows)
    return monitor


def run_watch(argv, capsys):
    status = main(["watch", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_restart_after_the_last_consumed_chunk_was_rewritten_keeping_size_and_mtime_is_refused(
    fitted, tmp_path, capsys
):
    rows = np.random.default_rng(11).normal(size=(1_000, 3)).astype(np.float32)
    path = uncompressed(tmp_path / "live.zarr", rows, CHUNK)
    state = saved(fitted, tmp_path / "state")
    argv = [path, "--reference", state, "--save-monitor", state, "--overwrite"]
    assert run_watch(argv, capsys)[0] == 0
    before = (Path(state) / "zarr.json").read_bytes()
    rewrite_keeping_size_and_mtime(path, 750, rows[750:] + 5.0, tmp_path / "scratch.zarr")

    status, out, err = run_watch(argv, capsys)

    assert status == 3 and out == "" and err.count("\n") == 1
    assert "rows 750-999, already consumed, was rewritten" in err and "Last row consumed: row 999" in err
    assert (Path(state) / "zarr.json").read_bytes() == before  # the state is kept as it was


def test_a_cursor_that_knew_chunks_by_size_and_mtime_is_refused_not_trusted(fitted, tmp_path, capsys):
    rows = np.random.default_rng(11).normal(size=(500, 3)).astype(np.float32)
    path = uncompressed(tmp_path / "live.zarr", rows, CHUNK)
    state = saved(fitted, tmp_path / "state")
    argv = [path, "--reference", state, "--save-monitor", state, "--overwrite"]
    assert run_watch(argv, capsys)[0] == 0
    monitor = load_monitor(state)
    last = monitor.source_cursor_["last_chunk"]
    old = {key: [value[0], "1764000000.0", 1234] for key, value in last["objects"].items()}  # as version 1 saved it
    monitor.source_cursor_ = {**monitor.source_cursor_, "version": 1, "last_chunk": {**last, "objects": old}}
    monitor.save(state, overwrite=True)

    status, out, err = run_watch(argv, capsys)

    assert status == 3 and err.count("\n") == 1 and "(version 1)" in err and "--restart" in err
    monitor.source_cursor_ = {**monitor.source_cursor_, "last_chunk": None}  # version 1, no chunk recorded yet
    monitor.save(state, overwrite=True)
    rows = np.vstack([rows, rows + 0.5])
    zarr.open_array(path, mode="r+").append(rows[500:])
    assert run_watch(argv, capsys)[0] == 0  # nothing to check: it continues, and its new record is version 2
    assert load_monitor(state).source_cursor_["version"] == 2
    assert run_watch(argv, capsys)[0] == 0


WRITER = """
import sys, time
import numpy as np, zarr
path, (n_chunks, chunk), (gap, pause) = sys.argv[1], map(int, sys.argv[2:4]), map(float, sys.argv[4:6])
rows = np.random.default_rng(11).normal(size=(n_chunks * chunk, 3)).astype(np.float32)
array = zarr.open_array(path, mode="r+")
half = chunk // 2
for index in range(n_chunks):
    start = index * chunk
    array.resize((start + chunk, 3))
    array[start : start + half] = rows[start : start + half]  # stored: these rows, the rest the fill value
    time.sleep(gap)
    array[start + half : start + chunk] = rows[start + half : start + chunk]
    time.sleep(pause)
"""


def watch_two_write_chunks(fitted, tmp_path, n_chunks: int, gap: float, pause: float, *timing: str):
    """A writer fills each chunk in two writes ``gap`` s apart; a watcher follows with ``timing``; returns the
    watcher's chunk events, its final state and the rows written."""
    path = str(tmp_path / "live.zarr")
    zarr.create_array(path, shape=(0, 3), chunks=(CHUNK, 3), dtype="float32", compressors=None)
    state = saved(fitted, tmp_path / "state")
    total = n_chunks * CHUNK
    argv = [path, "--reference", state, "--save-monitor", state, "--overwrite", "--follow", "--from-row", "0",
            "--max-rows", str(total), "--json", *timing]  # fmt: skip
    script = textwrap.dedent(WRITER)
    writer = subprocess.Popen(
        [sys.executable, "-c", script, path, str(n_chunks), str(CHUNK), str(gap), str(pause)], env=ENVIRONMENT
    )
    watcher = watch_process(argv)
    try:
        out, err = communicate(watcher, timeout=300)
    finally:
        watcher.kill()
        writer.kill()
        writer.wait(timeout=60)
    assert watcher.returncode == 0, err  # a half-written chunk consumed, then completed, would be refused (3)
    events = [json.loads(line) for line in out.splitlines()]
    rows = np.random.default_rng(11).normal(size=(total, 3)).astype(np.float32)
    return [event["rows"] for event in events if event["event"] == "chunk"], load_monitor(state), rows


def test_a_chunk_filled_in_two_writes_is_consumed_only_once_settled(fitted, tmp_path):
    # Every chunk, the last too, is written in two halves 0.5 s apart; at a poll of 0.2 s two looks see the first
    # half unchanged (what watch waited for before --settle), a settle time of 1.2 s does not end before the second.
    n_chunks = 3
    timing = ("--poll", "0.2", "--settle", "1.2")
    chunks, state, rows = watch_two_write_chunks(fitted, tmp_path, n_chunks, 0.5, 0.1, *timing)

    assert chunks == [[start, start + CHUNK] for start in range(0, n_chunks * CHUNK, CHUNK)]
    # the window holds the last chunk's second half
    assert_same_state(state, fed(fitted, tmp_path, rows), probe=rows[:7])


@pytest.mark.slow
def test_the_issue_scenario_two_writes_12_s_apart_polled_every_5_s(fitted, tmp_path):
    # The settle time must exceed the writer's pause: the first write may be seen at once, so two polls
    # (10 s) could end before a write 12 s later; three polls (15 s) cannot.
    chunks, state, rows = watch_two_write_chunks(fitted, tmp_path, 1, 12.0, 0.0, "--poll", "5", "--settle", "15")

    assert chunks == [[0, CHUNK]]
    assert_same_state(state, fed(fitted, tmp_path, rows), probe=rows[:7])


def test_settle_goes_with_follow(tmp_path, cli_main):
    result = cli_main("watch", str(tmp_path / "x.zarr"), "--reference", str(tmp_path / "r"), "--settle", "3")
    assert result.code == 2 and "--settle goes with --follow" in result.err


def test_on_s3_a_chunk_is_known_by_its_etag_the_md5_of_its_bytes(s3_server, s3_bucket):
    url = f"s3://{s3_bucket}/rows.zarr"
    store = zarr.storage.FsspecStore.from_url(url, storage_options=s3_server.storage_options, read_only=False)
    zarr.create_array(store=store, data=ROWS[:2_000], chunks=(1_000, 4), zarr_format=3)
    source = srf.open_source(url, storage_options=s3_server.storage_options)

    objects = source.stored_objects(0, 2_000)

    filesystem = s3fs.S3FileSystem(**s3_server.storage_options)
    for key, (size, digest) in objects.items():
        stored = filesystem.cat_file(f"{s3_bucket}/rows.zarr/{key}")
        assert (size, digest) == (len(stored), "etag:" + hashlib.md5(stored).hexdigest())
    assert len(set(source.chunk_identities())) == 2
