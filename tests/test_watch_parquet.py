"""``streamrff watch DATASET`` on a parquet dataset that gains files: files in name order, row groups as chunks,
exactly once through kill -9, a file being written never read, a consumed file rewritten refused, S3 (moto).

Real processes, signals and files written with pyarrow. The reference of every exact check is a DriftMonitor fitted
in this process and fed every row in one in-memory call (the rows as :func:`streamrff.open_source` encodes the
concatenated pandas frame)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from watching import (
    ENVIRONMENT,
    assert_same_state,
    communicate,
    expected_state,
    read_lines,
    remaining_lines,
    watch_process,
)

import streamrff as srf
from streamrff.cli import main
from streamrff.drift import load_monitor

pd = pytest.importorskip("pandas")
pq = pytest.importorskip("pyarrow.parquet")

WINDOW, FEATURES, STREAMS, ERT, GROUP = 50, 64, 300, 100_000, 150
SELECT, CATEGORICAL = ["x", "city", "zone"], ["zone"]
TABLE = ["--select", ",".join(SELECT), "--categorical", ",".join(CATEGORICAL)]


def frame(seed: int, rows: int = 2 * GROUP) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.normal(size=rows),
            "city": rng.choice(["north", "south", "east"], rows),
            "zone": rng.integers(0, 5, rows),
            "unused": rng.normal(size=rows),
        }
    )


def encoded(frames) -> np.ndarray:
    """The rows every frame gives, in order: the reference's reading of the dataset (independent of the watcher)."""
    whole = pd.concat(frames, ignore_index=True)
    return np.asarray(srf.open_source(whole, columns=SELECT, categorical=CATEGORICAL).array, dtype=np.float64)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A monitor fitted here on a reference frame, saved: the watcher's --reference (it becomes the state)."""
    monitor = srf.DriftMonitor(WINDOW, ERT, n_features=FEATURES, bandwidth=1.5, n_streams=STREAMS, seed=0)
    monitor.fit(srf.open_source(frame(5, 1000), columns=SELECT, categorical=CATEGORICAL))
    path = str(tmp_path_factory.mktemp("fitted") / "monitor")
    monitor.save(path)
    return path


def chunk_rows(lines) -> list[list[int]]:
    return [json.loads(line)["rows"] for line in lines if line.startswith('{"event": "chunk"')]


# The writer: each staged frame becomes a file of the dataset, written row group by row group with a pause between
# (a file without its footer for a while), the dataset folder created at the first file.
WRITER = """
import os, sys, time
import pyarrow.parquet as pq
staging, dataset, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
for name in sorted(os.listdir(staging)):
    table = pq.read_table(os.path.join(staging, name))
    os.makedirs(dataset, exist_ok=True)
    with pq.ParquetWriter(os.path.join(dataset, name), table.schema) as writer:
        for start in range(0, table.num_rows, {group}):
            writer.write_table(table.slice(start, {group}))
            time.sleep(pause)
""".replace("{group}", str(GROUP))


def staged(tmp_path: Path, n_files: int, first_seed: int = 100) -> list[pd.DataFrame]:
    frames = [frame(first_seed + index) for index in range(n_files)]
    (tmp_path / "staging").mkdir()
    for index, part in enumerate(frames):
        part.to_parquet(tmp_path / "staging" / f"part-{index:04d}.parquet")
    return frames


@pytest.mark.slow
def test_a_dataset_gaining_files_killed_twice_sees_every_row_once(fitted, tmp_path):
    """Started before the dataset exists; a writer adds files (each without a footer for a while); kill -9 twice at
    random moments, restarted with the same command line, then SIGTERM: every row once, the state as in memory."""
    frames = staged(tmp_path, n_files=6)
    dataset, state = str(tmp_path / "events"), str(tmp_path / "state")
    argv = [dataset, "--state", state, "--reference", fitted, *TABLE, "--follow", "--poll", "0.05", "--settle", "0.2",
            "--save-interval", "0", "--json"]  # fmt: skip
    total = sum(len(part) for part in frames)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "staging"), dataset, "0.3"],
                              env=ENVIRONMENT)  # fmt: skip
    randomness, lines = random.Random(47), []
    try:
        for _ in range(2):
            watcher = watch_process(argv)
            try:
                target, seen = randomness.randint(1, 3), [0]

                def enough(line, seen=seen, target=target):
                    seen[0] += line.startswith('{"event": "chunk"')
                    return seen[0] >= target

                got, accepted = read_lines(watcher, enough, 180)
                lines += got
                assert accepted, communicate(watcher, timeout=10)[1] if watcher.poll() is not None else got[-3:]
                time.sleep(randomness.uniform(0.0, 0.15))  # reading, updating, saving or polling
            finally:
                watcher.kill()
                watcher.wait(timeout=60)
                lines += remaining_lines(watcher)
            assert watcher.returncode == -signal.SIGKILL
        watcher = watch_process(argv)
        got, accepted = read_lines(watcher, lambda line: line.startswith('{"event": "chunk"') and
                                   json.loads(line)["rows"][1] == total, 180)  # fmt: skip
        lines += got
        watcher.send_signal(signal.SIGTERM)
        out, err = communicate(watcher, timeout=60)
    finally:
        writer.wait(timeout=180)
    assert accepted and watcher.returncode == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["stopped_by"] == "SIGTERM" and summary["next_row"] == total
    saved = load_monitor(os.path.join(state, "monitor"))
    assert saved.n_rows_seen_ == total  # none skipped, none counted twice
    cursor = saved.source_cursor_
    assert cursor["kind"] == "parquet" and cursor["file"] == "part-0005.parquet" and cursor["file_row"] == 2 * GROUP
    rows = encoded(frames)
    assert_same_state(saved, expected_state(fitted, rows, tmp_path), probe=rows[:7])
    # every row group was printed (some twice: read again after a kill), in row groups of the files
    assert {(start, start + GROUP) for start in range(0, total, GROUP)} <= {tuple(r) for r in chunk_rows(lines)}


def test_a_file_without_its_footer_or_not_settled_is_not_read(tmp_path):
    """In this process: a file with a row group written and no footer yet is not read, nor the files after it;
    a file first seen less than --settle ago is not read; once closed and settled, it is, from its first row."""
    import pyarrow as pa

    from streamrff.sources.parquetfolder import new_cursor, open_folder, ready_chunks

    frames = [frame(210), frame(211), frame(212)]
    dataset = tmp_path / "events"
    dataset.mkdir()
    frames[0].to_parquet(dataset / "part-0.parquet", row_group_size=GROUP)
    frames[2].to_parquet(dataset / "part-2.parquet", row_group_size=GROUP)
    table = pa.Table.from_pandas(frames[1], preserve_index=False)
    writer = pq.ParquetWriter(str(dataset / "part-1.parquet"), table.schema)
    try:
        writer.write_table(table.slice(0, GROUP))
        folder = open_folder(str(dataset), columns=SELECT, categorical=CATEGORICAL)
        cursor, settling = new_cursor(folder, 0), {}
        assert list(ready_chunks(folder, cursor, True, 30.0, settling)) == []  # just seen: not settled
        got = [(fields["file"], len(rows)) for fields, rows in ready_chunks(folder, cursor, True, 0.0, settling)]
        assert got == [("part-0.parquet", GROUP), ("part-0.parquet", GROUP)]  # stops before the half-written file
        writer.write_table(table.slice(GROUP))
    finally:
        writer.close()
    cursor = new_cursor(folder, 2 * GROUP)
    chunks = list(ready_chunks(open_folder(str(dataset), columns=SELECT, categorical=CATEGORICAL), cursor, True,
                               0.0, settling))  # fmt: skip
    assert [fields["file"] for fields, _ in chunks] == ["part-1.parquet"] * 2 + ["part-2.parquet"] * 2
    np.testing.assert_array_equal(np.concatenate([rows for _, rows in chunks]), encoded(frames)[2 * GROUP :])


@pytest.mark.slow
def test_a_file_being_written_is_not_read_until_its_footer_is_written(fitted, tmp_path):
    frames = [frame(200), frame(201)]
    dataset = tmp_path / "events"
    dataset.mkdir()
    frames[0].to_parquet(dataset / "part-0.parquet", row_group_size=GROUP)
    table = __import__("pyarrow").Table.from_pandas(frames[1], preserve_index=False)
    writer = pq.ParquetWriter(str(dataset / "part-1.parquet"), table.schema)
    writer.write_table(table.slice(0, GROUP))  # one row group written, no footer: a reader would see half the file
    state = str(tmp_path / "state")
    total = 4 * GROUP
    watcher = watch_process([str(dataset), "--state", state, "--reference", fitted, *TABLE, "--follow", "--poll",
                             "0.05", "--settle", "0.2", "--max-rows", str(total), "--json"])  # fmt: skip
    try:
        first, accepted = read_lines(watcher, lambda line: chunk_rows([line]) == [[GROUP, 2 * GROUP]], 120)
        assert accepted, first[-3:]
        more, _ = read_lines(watcher, lambda line: False, 2.0)  # polled some 40 times meanwhile
        assert chunk_rows(more) == []  # the half-written file is not read
        writer.write_table(table.slice(GROUP))
        writer.close()
        out, err = communicate(watcher, timeout=120)
    finally:
        watcher.kill()
        writer.close()
    assert watcher.returncode == 0, err
    lines = first + more + out.splitlines(keepends=True)
    assert chunk_rows(lines) == [[start, start + GROUP] for start in range(0, total, GROUP)]  # each row once
    rows = encoded(frames)
    expected = expected_state(fitted, rows, tmp_path)
    assert_same_state(load_monitor(os.path.join(state, "monitor")), expected, probe=rows[:7])


def run_cli(argv, capsys):
    status = main(["watch", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_consumed_file_rewritten_is_refused_in_one_line_and_a_new_file_is_read(fitted, tmp_path, capsys):
    dataset = tmp_path / "events"
    dataset.mkdir()
    frames = [frame(300), frame(301), frame(302)]
    for index, part in enumerate(frames[:2]):
        part.to_parquet(dataset / f"part-{index}.parquet", row_group_size=GROUP)
    state = str(tmp_path / "state")
    shutil.copytree(fitted, state)
    argv = [str(dataset), "--reference", state, "--save-monitor", state, "--overwrite", *TABLE]
    status, _, err = run_cli([*argv, "--from-row", "0"], capsys)
    assert status == 0, err
    frames[2].to_parquet(dataset / "part-2.parquet", row_group_size=GROUP)
    status, out, err = run_cli(argv, capsys)
    assert status == 0 and f"from row {4 * GROUP:,}" in out, err
    rows = encoded(frames)
    assert_same_state(load_monitor(state), expected_state(fitted, rows, tmp_path), probe=rows[:7])
    before = (Path(state) / "zarr.json").read_bytes()
    shifted = frames[2].assign(x=frames[2]["x"] + 5.0)
    stamp = os.stat(dataset / "part-2.parquet")
    shifted.to_parquet(dataset / "part-2.parquet", row_group_size=GROUP)
    os.utime(dataset / "part-2.parquet", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # as cp -p: mtime kept
    status, _, err = run_cli(argv, capsys)
    assert status == 3 and err.count("\n") == 1 and "part-2.parquet, already consumed from row 600" in err, err
    assert "was rewritten since" in err and (Path(state) / "zarr.json").read_bytes() == before
    status, _, err = run_cli([str(dataset), "--reference", state, "--select", "x,city,zone", "--restart"], capsys)
    assert status == 1 and err.count("\n") == 1 and "reads columns [1] of ['x', 'city', 'zone'] as categories" in err


def test_files_are_read_in_name_order_staging_left_out_and_one_named_before_the_consumed_refused(tmp_path):
    from streamrff.errors import SourceChangedError
    from streamrff.sources.parquetfolder import new_cursor, open_folder, ready_chunks

    dataset = tmp_path / "events"
    dataset.mkdir()
    (dataset / "_temporary").mkdir()
    for name in ("part-1.parquet", "part-3.parquet", "_temporary/part-0.parquet", ".part-0.parquet"):
        frame(400).to_parquet(dataset / name)
    folder = open_folder(str(dataset), columns=SELECT)
    assert [file.name for file in folder.files] == ["part-1.parquet", "part-3.parquet"]  # a writer's staging: left
    cursor = new_cursor(folder, 4 * GROUP)  # both files consumed
    settling: dict = {}
    assert list(ready_chunks(folder, cursor, True, 0.0, settling)) == []
    frame(401).to_parquet(dataset / "part-2.parquet")  # sorts before part-3, already consumed
    with pytest.raises(SourceChangedError, match="part-2.parquet appeared .* after part-3.parquet was consumed"):
        list(ready_chunks(open_folder(str(dataset), columns=SELECT), cursor, True, 0.0, settling))


def test_watch_follows_a_parquet_dataset_on_s3_and_resumes(fitted, tmp_path, capsys, s3_server, s3_bucket):
    import s3fs

    filesystem = s3fs.S3FileSystem(**s3_server.storage_options)
    url = f"s3://{s3_bucket}/events"
    frames = [frame(500), frame(501), frame(502)]

    def put(index):
        with filesystem.open(f"{s3_bucket}/events/part-{index}.parquet", "wb") as handle:
            frames[index].to_parquet(handle, row_group_size=GROUP)

    put(0), put(1)
    state = str(tmp_path / "state")
    shutil.copytree(fitted, state)
    argv = [url, "--reference", state, "--save-monitor", state, "--overwrite", *TABLE, "--storage-options",
            json.dumps(s3_server.storage_options)]  # fmt: skip
    status, _, err = run_cli([*argv, "--from-row", "0"], capsys)
    assert status == 0, err
    cursor = load_monitor(state).source_cursor_
    assert cursor["file"] == "part-1.parquet" and cursor["file_object"][1].startswith("etag:")
    put(2)
    status, out, err = run_cli(argv, capsys)
    assert status == 0 and f"from row {4 * GROUP:,}" in out, err
    rows = encoded(frames)
    assert_same_state(load_monitor(state), expected_state(fitted, rows, tmp_path), probe=rows[:7])


def test_a_cursor_inside_a_file_reads_the_rest_in_row_groups_and_a_consumed_file_removed_is_no_change(tmp_path):
    from streamrff.drift.follow import moved_to
    from streamrff.sources.parquetfolder import new_cursor, open_folder, ready_chunks, source_change

    dataset = tmp_path / "events"
    dataset.mkdir()
    frames = [frame(600), frame(601)]
    for index, part in enumerate(frames):
        part.to_parquet(dataset / f"part-{index}.parquet", row_group_size=GROUP)
    folder = open_folder(str(dataset), columns=SELECT, categorical=CATEGORICAL)
    cursor = new_cursor(folder, 100)  # inside the first row group of part-0
    chunks = list(ready_chunks(folder, cursor, False, 0.0, {}))
    assert [(fields["file"], fields["file_row"], len(rows)) for fields, rows in chunks] == [
        ("part-0.parquet", 100, 50), ("part-0.parquet", 150, 150), ("part-1.parquet", 0, 150),
        ("part-1.parquet", 150, 150)]  # fmt: skip
    np.testing.assert_array_equal(np.concatenate([rows for _, rows in chunks]), encoded(frames)[100:])
    moved = moved_to({**cursor, "drift_at_row": 7}, folder, 450)
    assert (moved["file"], moved["file_row"], moved["drift_at_row"]) == ("part-1.parquet", 150, 7)
    whole, part = new_cursor(folder, 2 * GROUP), new_cursor(folder, GROUP)
    (dataset / "part-0.parquet").unlink()
    later = open_folder(str(dataset), columns=SELECT, categorical=CATEGORICAL)
    assert source_change(whole, later) is None  # removed once wholly consumed: a retention job
    assert "its file part-0.parquet, already consumed from row 0 (150 of its rows), was removed" in source_change(
        part, later
    )
