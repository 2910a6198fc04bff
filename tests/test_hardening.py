"""Hardening (issue 22): every saved byte verified, no unbounded wait, no silently lost write.

Each test reproduces one failure the probe found: scalar attributes that loaded unverified,
concurrent writers that silently replaced each other's output, loads that reported "tampered"
during a concurrent save, declared shapes that cost gigabytes, unbounded waits for a scheduler,
sizes that cannot fit, and stray tracebacks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import SketchFormatError, SketchFormatWarning

DATA = Path(__file__).parent / "data"
ROWS = np.random.default_rng(22).normal(size=(51, 3))


def _save(tmp_path: Path, name: str, sketch: srf.Sketch | None = None) -> Path:
    path = tmp_path / name
    (sketch or srf.sketch_array(ROWS, srf.RFF(n_features=8, bandwidth=1.0, seed=1), moments=True)).save(path)
    return path


def _edit_group_attrs(directory: Path, **changes: object) -> None:
    document = json.loads((directory / "zarr.json").read_text())
    document["attributes"].update(changes)
    (directory / "zarr.json").write_text(json.dumps(document))


def _zip(directory: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w") as packed:
        for file in sorted(directory.rglob("*")):
            if file.is_file():
                packed.write(file, file.relative_to(directory).as_posix())
    return archive


# -- 1. scalar attributes are covered by a digest -------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [{"count": 52}, {"squared_norm_sum": 52.0}, {"n_invalid": 1}, {"count": 52, "n_invalid": 1}],
    ids=lambda changes: ",".join(changes),
)
@pytest.mark.parametrize("as_zip", [False, True], ids=["directory", "zip"])
def test_load_refuses_edited_scalar_attributes(tmp_path: Path, changes: dict, as_zip: bool) -> None:
    directory = _save(tmp_path, "s.sketch")
    _edit_group_attrs(directory, **changes)
    target = _zip(directory, tmp_path / "s.zip") if as_zip else directory
    with pytest.raises(SketchFormatError, match="attributes do not match their digest"):
        srf.load(target)


def test_cli_merge_of_an_edited_count_fails_instead_of_reporting_wrong_rows(tmp_path: Path, cli_main) -> None:
    # The probe: count edited from 51 to 52 in one input, merge then info reported 5 101 rows for 5 100.
    first, second = _save(tmp_path, "a.sketch"), _save(tmp_path, "b.sketch")
    _edit_group_attrs(second, count=52)
    code, _, err = cli_main("merge", str(first), str(second), "-o", str(tmp_path / "m.sketch"))
    assert code == 1
    assert err.startswith("streamrff merge: error: ") and "b.sketch" in err and "digest" in err
    assert not (tmp_path / "m.sketch").exists()


def test_golden_v1_without_digest_loads_with_a_warning_and_require_digest_refuses(tmp_path: Path) -> None:
    assert "attributes_digest" not in json.loads((DATA / "golden_v1_mean.zarr" / "zarr.json").read_text())["attributes"]
    for name in ("golden_v1_mean.zarr", "golden_v1_mean.zip"):
        with pytest.warns(SketchFormatWarning, match="not verified"):
            sketch = srf.load(DATA / name)
        assert sketch.count == 12  # the golden rows: 12 x 3 (tests/data/make_golden_v1.py)
        with pytest.raises(SketchFormatError, match="no attributes digest"):
            srf.load(DATA / name, require_digest=True)
    # A tampered copy of a digest-less file cannot be detected: it loads, with the same warning.
    tampered = tmp_path / "golden.zarr"
    shutil.copytree(DATA / "golden_v1_mean.zarr", tampered)
    _edit_group_attrs(tampered, count=13)
    with pytest.warns(SketchFormatWarning, match="not verified"):
        assert srf.load(tampered).count == 13
    with pytest.raises(SketchFormatError, match="no attributes digest"):
        srf.load(tampered, require_digest=True)
    # Saved again, it carries a digest: the same edit is then refused.
    resaved = tmp_path / "resaved.zarr"
    with pytest.warns(SketchFormatWarning):
        srf.load(DATA / "golden_v1_mean.zarr").save(resaved)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert srf.load(resaved).count == 12
    _edit_group_attrs(resaved, count=13)
    with pytest.raises(SketchFormatError, match="digest"):
        srf.load(resaved)


def test_load_refuses_a_removed_digest_only_when_required(tmp_path: Path) -> None:
    directory = _save(tmp_path, "s.sketch")
    document = json.loads((directory / "zarr.json").read_text())
    del document["attributes"]["attributes_digest"]
    (directory / "zarr.json").write_text(json.dumps(document))
    with pytest.warns(SketchFormatWarning):
        srf.load(directory)
    with pytest.raises(SketchFormatError, match="no attributes digest"):
        srf.load(directory, require_digest=True)


def test_sketch_with_an_edited_checkpoint_partial_is_refused(tmp_path: Path, tmp_zarr) -> None:
    # The probe: count edited in one partial, the rerun reported 4 001 000 rows for 4 000 000, exit 0.
    source = tmp_zarr(ROWS.astype(np.float32), chunk_rows=17)
    feature_map = srf.RFF(n_features=8, bandwidth=1.0, seed=1)
    checkpoint = tmp_path / "checkpoint"
    first = srf.sketch(source, feature_map, checkpoint=checkpoint)
    assert first.count == 51
    partials = sorted(checkpoint.rglob("rows-*.zarr"))
    assert len(partials) == 3
    _edit_group_attrs(partials[1], count=18)
    with pytest.raises(SketchFormatError, match=f"{partials[1].name}.*digest.*delete it to recompute"):
        srf.sketch(source, feature_map, checkpoint=checkpoint)
    shutil.rmtree(partials[1])  # as the message says: the rerun recomputes that chunk
    assert srf.sketch(source, feature_map, checkpoint=checkpoint).count == 51


def test_sketch_with_a_checkpoint_partial_missing_a_chunk_is_refused_naming_it(tmp_path: Path, tmp_zarr) -> None:
    # Issue 38: zarr reads an absent chunk as zeros; a partial's moment above 8 MiB (D = 1100) must be whole.
    source = tmp_zarr(ROWS[:20].astype(np.float32), chunk_rows=10)
    feature_map = srf.RFF(n_features=1100, bandwidth=1.0, seed=1)
    checkpoint = tmp_path / "checkpoint"
    first = srf.sketch(source, feature_map, moments=True, checkpoint=checkpoint)
    partial = sorted(checkpoint.rglob("rows-*.zarr"))[1]
    (partial / "moment" / "c" / "0" / "0").unlink()
    with pytest.raises(SketchFormatError, match=r"array 'moment' chunk c/0/0 is missing.*delete it to recompute"):
        srf.sketch(source, feature_map, moments=True, checkpoint=checkpoint)
    shutil.rmtree(partial)
    again = srf.sketch(source, feature_map, moments=True, checkpoint=checkpoint)
    reference = feature_map.fit(ROWS[:20]).transform(ROWS[:20].astype(np.float32)).astype(np.float64)
    np.testing.assert_allclose(again.moment, reference.T @ reference, rtol=1e-5, atol=1e-6)
    assert again == first


# -- 3. concurrent writers: exactly one wins, nothing is silently replaced -------------------------------


def _cli(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "streamrff.cli", *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


# Each trial is two processes (about 4 s): one trial per format in the default suite, 3 and 2 in the slow one.
@pytest.mark.parametrize(
    ("suffix", "trials"),
    [
        ("sketch", 1),
        ("zip", 1),
        pytest.param("sketch", 3, marks=pytest.mark.slow),
        pytest.param("zip", 2, marks=pytest.mark.slow),
    ],
)
def test_cli_merges_racing_to_one_output_exactly_one_wins(tmp_path: Path, suffix: str, trials: int) -> None:
    # The probe: two `merge -o same` at once both exited 0 and one result was gone (10 of 10 trials).
    feature_map = srf.RFF(n_features=8, bandwidth=1.0, seed=1).fit(ROWS)
    big = _save(tmp_path, "big.sketch", srf.sketch_array(ROWS, feature_map))  # 51 rows
    small = _save(tmp_path, "small.sketch", srf.sketch_array(ROWS[:20], feature_map))  # 20 rows
    for trial in range(trials):
        output = tmp_path / f"out-{trial}.{suffix}"
        writers = {
            102: _cli("merge", str(big), str(big), "-o", str(output)),
            40: _cli("merge", str(small), str(small), "-o", str(output)),
        }
        finished = {count: writer.communicate(timeout=120) + (writer.returncode,) for count, writer in writers.items()}
        codes = sorted(code for _, _, code in finished.values())
        # The loser is refused either before its job (the winner had finished: exit 2, an existing
        # output) or when it publishes (both ran: exit 1, the result could not be published).
        assert codes in ([0, 1], [0, 2]), finished
        (winner,) = [count for count, (_, _, code) in finished.items() if code == 0]
        (loser_err,) = [err for _, err, code in finished.values() if code != 0]
        assert loser_err.startswith("streamrff merge: error: ") and "already exists" in loser_err, loser_err
        assert "Traceback" not in loser_err and loser_err.count("\n") == 1, loser_err
        assert srf.load(output).count == winner  # the surviving file is the winner's, whole
    assert not [p.name for p in tmp_path.iterdir() if ".partial-" in p.name]


@pytest.mark.parametrize("is_directory", [False, True], ids=["file", "directory"])
def test_publish_never_replaces_without_overwrite_and_replaces_whole_with_it(
    tmp_path: Path, is_directory: bool
) -> None:
    from streamrff._files.publish import staging_path
    from streamrff.formats.sketch import publish

    target = tmp_path / "out"

    def staged(text: str) -> Path:
        staging = staging_path(target)
        if is_directory:
            staging.mkdir()
            (staging / "content").write_text(text)
        else:
            staging.write_text(text)
        return staging

    def content() -> str:
        return (target / "content" if is_directory else target).read_text()

    publish(staged("first"), target)
    refused = staged("second")
    with pytest.raises(FileExistsError, match="already exists"):
        publish(refused, target)
    assert content() == "first" and refused.exists()  # the caller cleans up its staging
    publish(refused, target, overwrite=True)
    assert content() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_write_zarr_never_replaces_an_output_that_appeared_during_the_job(tmp_path: Path) -> None:
    import dask
    import dask.array as da

    from streamrff.engine import write_zarr

    target = tmp_path / "labels.zarr"

    def labels_while_another_writer_publishes() -> np.ndarray:
        (target / "theirs").mkdir(parents=True)  # the other job's complete output, published first
        return np.arange(10, dtype=np.int64)

    labels = da.from_delayed(dask.delayed(labels_while_another_writer_publishes)(), shape=(10,), dtype=np.int64)
    with pytest.raises(FileExistsError, match="another process wrote it"):
        write_zarr(labels, target)
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.zarr"]  # no staging left


def test_cli_test_plot_refuses_an_existing_file_unless_overwrite(tmp_path: Path, tmp_zarr, cli_main) -> None:
    pytest.importorskip("matplotlib")
    x = tmp_zarr(ROWS[:25].astype(np.float32), chunk_rows=25, name="x.zarr")
    y = tmp_zarr(ROWS[25:].astype(np.float32), chunk_rows=26, name="y.zarr")
    plot = tmp_path / "null.png"
    plot.write_bytes(b"\x89PNG mine")  # a figure (--overwrite replaces only a figure)
    arguments = ["test", x, y, "--features", "8", "--permutations", "9", "--bandwidth", "1.0", "--plot", str(plot)]
    code, _, err = cli_main(*arguments)  # an existing output is bad usage: exit 2, before any work
    assert code == 2
    assert "already exists" in err and plot.read_bytes() == b"\x89PNG mine"
    assert cli_main(*arguments, "--overwrite").code == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- 6. a load during a concurrent save sees the old or the new sketch, never "tampered" -----------------

_SAVE_LOOP = """
import sys
import numpy as np
import streamrff as srf

target, n_saves = sys.argv[1], int(sys.argv[2])
rows = np.random.default_rng(22).normal(size=(51, 3))
feature_map = srf.RFF(n_features=64, bandwidth=1.0, seed=1).fit(rows)
sketches = [srf.sketch_array(rows[:n], feature_map, moments=True) for n in (30, 51)]
sketches[0].save(target)
print("ready", flush=True)
for index in range(n_saves):
    sketches[index % 2].save(target, overwrite=True)
"""


def test_load_while_another_process_saves_returns_a_whole_sketch(tmp_path: Path) -> None:
    # The probe: 4 in 204 loads during a save failed with "does not match its checksum (tampered or corrupt)".
    target = tmp_path / "busy.sketch"
    writer = subprocess.Popen(
        [sys.executable, "-c", _SAVE_LOOP, str(target), "150"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "ready", writer.communicate()
        counts: list[int] = []
        while writer.poll() is None:
            counts.append(srf.load(target).count)  # raises on a mixed read
    finally:
        if writer.poll() is None:
            writer.kill()
        _, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert set(counts) <= {30, 51} and len(counts) > 20, counts


# -- 4. declared shapes are checked against the stored chunk bytes -----------------------------------------


@pytest.mark.parametrize("n_bytes", [8, 255, 256, 32_768, 65_791, 65_792, 1_000_000])
def test_zstd_content_size_reads_the_size_numcodecs_wrote(n_bytes: int) -> None:
    from numcodecs import Zstd

    from streamrff._files.zarrcheck import zstd_content_size as _zstd_content_size

    frame = Zstd(level=1).encode(np.random.default_rng(n_bytes).integers(0, 4, n_bytes, dtype=np.uint8).tobytes())
    assert _zstd_content_size(frame[:18]) == n_bytes
    assert _zstd_content_size(b"not a zstd frame") is None


def test_load_refuses_a_chunk_smaller_than_its_declared_shape_before_allocating(tmp_path: Path) -> None:
    # A digest-less file (written before the digest) whose moment claims 16384 x 16384 in one chunk,
    # with the spec raised to match: the stored 14 kB chunk says it decodes to 32 kB, not 2 GiB.
    directory = _save(
        tmp_path, "s.sketch", srf.sketch_array(ROWS, srf.RFF(n_features=64, bandwidth=1.0, seed=1), moments=True)
    )
    document = json.loads((directory / "zarr.json").read_text())
    del document["attributes"]["attributes_digest"]
    document["attributes"]["map"]["n_features"] = 2**14
    (directory / "zarr.json").write_text(json.dumps(document))
    metadata = json.loads((directory / "moment" / "zarr.json").read_text())
    metadata.update(
        shape=[2**14, 2**14], chunk_grid={"name": "regular", "configuration": {"chunk_shape": [2**14, 2**14]}}
    )
    (directory / "moment" / "zarr.json").write_text(json.dumps(metadata))
    with pytest.raises(SketchFormatError, match=r"chunk c/0/0 decodes to 32,768 bytes.*needs 2,147,483,648"):
        srf.load(directory)


# -- 2. every connection attempt has a deadline; bad addresses are refused at once -------------------------


@pytest.fixture
def silent_server() -> str:
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a hung scheduler)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(timeout=10)
    for connection in accepted:
        connection.close()
    server.close()


def test_sketch_on_a_silent_scheduler_fails_after_the_configured_deadline(silent_server: str) -> None:
    # The probe: the client hung for 881 s until interrupted.
    import dask

    with dask.config.set({"streamrff.connect-timeout": "1s"}):
        with pytest.raises(srf.ClusterError, match=f"{silent_server} accepted the connection but did not answer.*1 s"):
            srf.sketch(ROWS, srf.RFF(n_features=8, bandwidth=1.0), client=silent_server)


def test_sketch_on_an_http_port_fails_after_the_configured_deadline() -> None:
    # The probe: the same hang on an HTTP port (an HTTP server waits for a request, silently).
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    import dask

    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    address = f"tcp://127.0.0.1:{server.server_address[1]}"
    try:
        with dask.config.set({"streamrff.connect-timeout": 1}):
            with pytest.raises(srf.ClusterError, match=f"{address} accepted the connection but did not answer"):
                srf.sketch(ROWS, srf.RFF(n_features=8, bandwidth=1.0), client=address)
    finally:
        server.shutdown()
        server.server_close()


def _run_cli_process(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "streamrff.cli", *arguments],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip


# One process per case (about 4 s): the silent server and one malformed address in the default suite.
@pytest.mark.parametrize(
    ("case", "env", "fragment"),
    [
        ("silent", {"DASK_STREAMRFF__CONNECT_TIMEOUT": "2s"}, "did not answer like a Dask scheduler within 2 s"),
        ("notanaddress", {}, "Got 'notanaddress': no port."),
        pytest.param("tcp://127.0.0.1:99999", {}, "port is not a number", marks=pytest.mark.slow),
        pytest.param("http://127.0.0.1:8786", {}, "unknown scheme 'http'", marks=pytest.mark.slow),
        pytest.param(
            "tcp://127.0.0.1:8786",
            {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"},
            "requires encryption",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["silent-server", "no-port", "port-not-a-number", "http-scheme", "requires-encryption"],
)
def test_cli_silent_scheduler_and_bad_addresses_print_one_line_and_exit_1(
    request: pytest.FixtureRequest, tmp_path: Path, tmp_zarr, case: str, env: dict[str, str], fragment: str
) -> None:
    source = tmp_zarr(ROWS.astype(np.float32), chunk_rows=17)
    address = request.getfixturevalue("silent_server") if case == "silent" else case
    completed = _run_cli_process("sketch", source, "-o", str(tmp_path / "out.sketch"), "--scheduler", address, env=env)
    assert completed.returncode == 1, (address, completed.stderr)
    assert completed.stderr.startswith("streamrff sketch: error: ") and fragment in completed.stderr, completed.stderr
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr, completed.stderr
    assert not (tmp_path / "out.sketch").exists()


def test_job_fails_naming_the_scheduler_when_its_last_worker_died(tmp_path: Path) -> None:
    import os
    import signal
    import time

    import dask

    from streamrff.engine.connection import wait_for_result
    from streamrff.testing import LocalProcessCluster

    with LocalProcessCluster(n_workers=1, nanny=False) as cluster, cluster.client() as client:
        future = client.submit(time.sleep, 3600, pure=False)  # a task that outlives its worker
        deadline = time.monotonic() + 60
        while not any(client.processing().values()):
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.05)
        (worker_pid,) = cluster.launcher_pids()
        os.kill(worker_pid, signal.SIGKILL)
        with dask.config.set({"streamrff.no-workers-timeout": "2s"}):
            with pytest.raises(srf.ClusterError, match=f"scheduler at {cluster.address} has had no workers for 2 s"):
                wait_for_result(future, client)


# -- 5. sizes that cannot fit are refused before any work ----------------------------------------------------


def test_cli_features_too_large_for_memory_names_the_flag_and_the_largest_that_fits(tmp_path: Path, tmp_zarr) -> None:
    # The probe: --features 1000000000 tried a 59.6 GiB allocation and died with _ArrayMemoryError.
    import os
    import re

    import psutil

    source = tmp_zarr(ROWS.astype(np.float32), chunk_rows=17)
    completed = _run_cli_process("sketch", source, "-o", str(tmp_path / "out.sketch"), "--features", "1000000000")
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.startswith("streamrff sketch: error: n_features (CLI --features) = 1,000,000,000 needs")
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr
    # Per output feature: map parameters (d + 1) x 8 bytes, a 256-row float64 tile, and 9 partial sums
    # of 8 bytes in the merge tree (split_every = 8); a thread has the machine's memory / cores.
    per_feature = (ROWS.shape[1] + 1) * 8 + 256 * 8 + 9 * 8
    memory = psutil.virtual_memory().total / os.cpu_count()
    largest = int(re.search(r"largest n_features that fits is ([\d,]+)", completed.stderr).group(1).replace(",", ""))
    assert largest == int(memory // per_feature)
    assert not (tmp_path / "out.sketch").exists()


def test_cli_map_features_too_large_for_memory_is_the_same_one_line_as_sketch(tmp_path: Path, tmp_zarr) -> None:
    # Issue 38: `map --features 1000000000000` ended in "Unable to allocate 29.1 TiB" (a traceback).
    import os
    import re

    import psutil

    source = tmp_zarr(ROWS.astype(np.float32), chunk_rows=17)
    output = tmp_path / "map.json"
    completed = _run_cli_process("map", source, "-o", str(output), "--features", "1000000000000", "--bandwidth", "1")
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.startswith("streamrff map: error: n_features (CLI --features) = 1,000,000,000,000 needs")
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr
    per_feature = (ROWS.shape[1] + 1) * 8 + 256 * 8 + 9 * 8  # as for sketch, above
    largest = int(re.search(r"largest n_features that fits is ([\d,]+)", completed.stderr).group(1).replace(",", ""))
    assert largest == int(psutil.virtual_memory().total / os.cpu_count() // per_feature)
    assert not output.exists()


def test_sketch_with_moments_too_large_is_refused_before_any_work() -> None:
    import dask.array as da

    untouchable = da.from_delayed(  # any read of the data would fail the test
        __import__("dask").delayed(pytest.fail)("the data was read"), shape=(100, 3), dtype=np.float64
    )
    with pytest.raises(srf.InputError, match=r"n_features \(CLI --features\) = 1,000,000 needs .*D x D second moment"):
        srf.sketch(untouchable, srf.RFF(n_features=1_000_000, bandwidth=1.0), moments=True)


# -- 7. smaller items --------------------------------------------------------------------------------------


# One process per command (about 4 s): reading a source and writing a sketch in the default suite.
@pytest.mark.parametrize(
    "command",
    [
        "sketch-from-s3",
        "sketch-to-s3",
        pytest.param("info", marks=pytest.mark.slow),
        pytest.param("kmeans", marks=pytest.mark.slow),
    ],
)
def test_cli_s3_endpoint_refusing_connections_prints_only_our_message(tmp_path: Path, tmp_zarr, command: str) -> None:
    # The probe: the right message, then two "Exception ignored ... Token was created in a different
    # Context" tracebacks from zarr's abandoned concurrent reads.
    pytest.importorskip("s3fs")
    import socket

    with socket.socket() as probe:  # a port on 127.0.0.1 that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = json.dumps(
        {"key": "k", "secret": "s", "endpoint_url": f"http://127.0.0.1:{port}",
         "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2, "read_timeout": 2}}
    )  # fmt: skip
    source = tmp_zarr(ROWS.astype(np.float32), chunk_rows=17)
    arguments = {
        "sketch-from-s3": ("sketch", "s3://bucket/x.zarr", "-o", str(tmp_path / "x.sketch")),
        "sketch-to-s3": ("sketch", source, "-o", "s3://bucket/x.sketch"),
        "info": ("info", "s3://bucket/x.sketch"),
        "kmeans": ("kmeans", "s3://bucket/x.zarr", "--clusters", "2", "-o", str(tmp_path / "labels.zarr")),
    }[command]
    completed = _run_cli_process(*arguments, "--storage-options", options)
    assert completed.returncode == 1, (arguments, completed.stderr)
    assert completed.stderr.startswith(f"streamrff {arguments[0]}: error: ") and "Could not connect" in completed.stderr
    assert completed.stderr.count("\n") == 1, completed.stderr


@pytest.mark.parametrize("source", ["nan", "inf-and-nan"])
def test_median_bandwidth_with_no_finite_row_is_refused(source: str) -> None:
    X = np.full((40, 3), np.nan)
    if source == "inf-and-nan":
        X[::2] = np.inf
    with pytest.raises(
        srf.InputError, match="bandwidth='median' needs at least one finite row to sample. Got 0 finite rows"
    ):
        srf.sketch(X, srf.RFF(n_features=8, bandwidth="median"), on_invalid="skip")
    # A numeric bandwidth needs no sample: every row is skipped and counted.
    assert srf.sketch(X, srf.RFF(n_features=8, bandwidth=1.0), on_invalid="skip").n_invalid == 40


# -- issue 38, item 5: ridge names the target row and suggests only its own flags --------------------------


def test_cli_ridge_names_a_non_finite_target_row_and_suggests_its_own_flag(tmp_path: Path, tmp_zarr, cli_main) -> None:
    y = np.sin(ROWS[:, 0])
    y[37] = np.nan
    X_bad = ROWS.copy()
    X_bad[40, 1] = np.inf
    source, target = tmp_zarr(ROWS, 17, "x.zarr"), tmp_zarr(y, 17, "y.zarr")
    fit = ["--features", "16", "--bandwidth", "1", "-o", str(tmp_path / "model.json")]
    code, _, err = cli_main("ridge", source, "--target", target, *fit)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "first bad row: target row 37" in err and "data row" not in err  # rows 34..50: chunk 2
    assert "pass --on-invalid skip" in err and "on_invalid=" not in err, err  # ridge's own flag, not the library's
    code, _, err = cli_main("ridge", tmp_zarr(X_bad, 17, "xbad.zarr"), "--target", tmp_zarr(ROWS[:, 0], 17), *fit)
    assert code == 1 and "first bad row: data row 40" in err and "pass --on-invalid skip" in err, err
    # `sketch --target` has --on-invalid: it names the target row and suggests the flag.
    code, _, err = cli_main("sketch", source, "--target", target, "--features", "16", "-o", str(tmp_path / "s.sketch"))
    assert code == 1 and "first bad row: target row 37" in err and "--on-invalid skip" in err, err
    import dask.array as da

    with pytest.raises(srf.InputError, match=r"target row 37\. Clean the data first") as caught:
        srf.KernelRidge(n_features=16, bandwidth=1.0).fit(da.from_array(ROWS, chunks=17), da.from_array(y, chunks=17))
    assert "on_invalid" not in str(caught.value)
    assert not (tmp_path / "model.json").exists()


@pytest.mark.parametrize(
    "labels", [np.array(["a", "b"] * 25 + ["c"]), np.array(["1.5"] * 51), np.array([object()] * 51)]
)
def test_ridge_refuses_non_numeric_targets_with_one_line_naming_y(labels: np.ndarray) -> None:
    with pytest.raises(
        srf.InputError, match=r"^y must be numbers \(regression targets\)\. Got dtype .*KernelRidgeClassifier"
    ) as caught:
        srf.KernelRidge(n_features=16, bandwidth=1.0).fit(ROWS, labels)
    assert "\n" not in str(caught.value)


def test_cli_ridge_refuses_a_text_target_column_with_one_line(tmp_path: Path, cli_main) -> None:
    import zarr

    text = zarr.create_array(str(tmp_path / "labels.zarr"), shape=(51,), chunks=(17,), dtype=str)
    text[...] = np.array(["a", "b"] * 25 + ["c"])
    code, _, err = cli_main("ridge", _x_zarr(tmp_path), "--target", str(tmp_path / "labels.zarr"),
                            "--features", "16", "--bandwidth", "1", "-o", str(tmp_path / "m.json"))  # fmt: skip
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "The target must be real numbers" in err and "labels.zarr" in err


def _x_zarr(tmp_path: Path) -> str:
    import zarr

    zarr.create_array(str(tmp_path / "x.zarr"), shape=ROWS.shape, chunks=(17, 3), dtype="f8")[...] = ROWS
    return str(tmp_path / "x.zarr")


# Issue 49: an output never destroys an input; --overwrite replaces only what the command writes.


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_an_output_naming_an_input_is_refused_even_with_overwrite(tmp_path: Path, tmp_zarr, cli_main) -> None:
    rng = np.random.default_rng(49)
    data = Path(tmp_zarr(rng.normal(size=(120, 3)), 40, name="X.zarr"))
    (tmp_path / "alias.zarr").symlink_to(data)
    model = tmp_path / "model.json"  # never read: the paths are refused first
    before = _tree(data)
    cases = [
        ("sketch", str(data), "-o", str(data), "--overwrite"),  # the example
        ("sketch", str(tmp_path / "alias.zarr"), "-o", str(data), "--overwrite"),  # an alias of the input
        ("sketch", str(data), "-o", f"file://{tmp_path}/alias.zarr", "--overwrite"),  # a URL alias
        ("sketch", str(data), "-o", str(data / "inside.sketch")),  # inside the input
        ("sketch", str(data), "-o", str(tmp_path), "--overwrite"),  # containing the input
        ("predict", str(model), str(data), "-o", str(data), "--overwrite"),
        ("watch", str(data), "--reference", str(data), "--window", "10", "--save-monitor", str(data), "--overwrite"),
    ]
    for case in cases:
        code, _, err = cli_main(*case)

        assert code == 2, case
        assert err.count("\n") == 1 and "would destroy the input" in err and str(data.name) in err, err
        assert _tree(data) == before


def test_overwrite_replaces_only_an_output_of_the_kind_the_command_writes(tmp_path: Path, tmp_zarr, cli_main) -> None:
    rng = np.random.default_rng(49)
    data = tmp_zarr(rng.normal(size=(120, 3)), 40, name="X.zarr")
    other = Path(tmp_zarr(rng.normal(size=(60, 3)), 30, name="other.zarr"))
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    before = _tree(other)
    for case in [
        ("sketch", data, "-o", str(other), "--overwrite", "--features", "8"),  # a data array is no sketch
        ("sketch", data, "-o", str(notes), "--overwrite", "--features", "8"),
        ("watch", data, "--reference", data, "--window", "10", "--save-monitor", str(other), "--overwrite"),
        ("test", data, data, "--plot", str(notes), "--overwrite", "--features", "8", "--permutations", "9"),
    ]:
        code, _, err = cli_main(*case)

        assert code == 2 and err.count("\n") == 1 and "--overwrite replaces only" in err, (case, err)
    assert _tree(other) == before and notes.read_text() == "keep me"
    sketch = tmp_path / "x.sketch"
    for _ in range(2):  # a sketch replaces a sketch
        code, _, err = cli_main("sketch", data, "-o", str(sketch), "--overwrite", "--features", "8")
        assert code == 0, err
