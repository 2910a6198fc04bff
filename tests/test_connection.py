"""One deadline for the whole scheduler handshake (issue 27, item 2).

Each test runs a tiny TCP server on 127.0.0.1 that misbehaves the way the probe of issue 27
found: it accepts and sends one byte then nothing, answers with HTTP text, or declares a huge
message. Connecting must end in one ClusterError line naming the address and the fix, within the
deadline, without allocating a buffer for the declared size (pytest-timeout caps the wall time;
no timed assertions).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import dask
import numpy as np
import pytest

import streamrff as srf
from streamrff.engine.connection import probe_scheduler

ROWS = np.random.default_rng(27).normal(size=(40, 3))


def _one_byte_then_silence(connection: socket.socket) -> None:
    connection.sendall(b"\x08")


def _http_text(connection: socket.socket) -> None:
    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def _huge_length_prefix(connection: socket.socket) -> None:
    connection.sendall(struct.pack("<Q", 2**62) + b"\x00" * 64)


def _garbage_frames(connection: socket.socket) -> None:
    # A plausible total length, then a frame count that does not fit in it.
    connection.sendall(struct.pack("<QQ", 24, 2**40) + b"\xff" * 16)


def _closes_at_once(connection: socket.socket) -> None:
    connection.close()


@pytest.fixture
def misbehaving_server() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """Start a server on 127.0.0.1 whose connections get ``behaviour`` and then silence; yield its address."""
    servers: list[tuple[socket.socket, threading.Event, threading.Thread, list[socket.socket]]] = []

    def start(behaviour: Callable[[socket.socket], None]) -> str:
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.2)
        stop = threading.Event()
        accepted: list[socket.socket] = []

        def serve() -> None:
            while not stop.is_set():
                try:
                    connection = server.accept()[0]
                except OSError:
                    continue
                accepted.append(connection)
                try:
                    behaviour(connection)
                except OSError:
                    pass  # the client hung up first

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        servers.append((server, stop, thread, accepted))
        return f"tcp://127.0.0.1:{server.getsockname()[1]}"

    yield start
    for server, stop, thread, accepted in servers:
        stop.set()
        thread.join(timeout=10)
        for connection in accepted:
            connection.close()
        server.close()


CASES = [
    (_one_byte_then_silence, "accepted the connection but did not answer like a Dask scheduler within 2 s"),
    (_http_text, "does not speak Dask's protocol (its first 8 bytes declare a message of"),
    (_huge_length_prefix, "does not speak Dask's protocol (its first 8 bytes declare a message of 4,611,686,018,427"),
    (_garbage_frames, "does not speak Dask's protocol (its message declares 1,099,511,627,776 frames)"),
    (_closes_at_once, "closed the connection without answering like a Dask scheduler"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("behaviour", "fragment"), CASES, ids=[case[0].__name__.strip("_") for case in CASES])
def test_connect_to_a_server_that_is_not_dask_fails_in_one_line(misbehaving_server, behaviour, fragment) -> None:
    address = misbehaving_server(behaviour)
    with dask.config.set({"streamrff.connect-timeout": "2s"}):
        with pytest.raises(srf.ClusterError) as raised:
            srf.sketch(ROWS, srf.RFF(n_features=8, bandwidth=1.0), client=address)
    message = str(raised.value)
    assert fragment in message, message
    assert f"The server at {address} " in message and "`dask scheduler`" in message, message
    assert "\n" not in message


@pytest.mark.timeout(60)
def test_probe_of_a_huge_length_prefix_allocates_nothing_for_it(misbehaving_server) -> None:
    # The declared 4 EiB is refused from the 8 bytes that declare it: the probe's peak memory stays that of
    # the 8 bytes, measured in a child so that this process's own allocations do not count.
    address = misbehaving_server(_huge_length_prefix)
    script = (
        "import resource, sys\n"
        "from streamrff.engine.connection import probe_scheduler\n"
        "from streamrff.errors import ClusterError\n"
        "try:\n"
        f"    probe_scheduler({address!r}, 5.0)\n"
        "except ClusterError as error:\n"
        # VmHWM: this process's own peak in kB (ru_maxrss can carry the test runner's peak across fork and exec).
        "    peak = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "    print(peak, error)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    peak_kib, message = completed.stdout.split(" ", 1)
    assert "does not speak Dask's protocol" in message
    assert int(peak_kib) < 512 * 1024, peak_kib  # well below any buffer for the declared size


def test_probe_accepts_a_real_scheduler_and_refuses_its_worker() -> None:
    from distributed import Client

    from streamrff.testing import LocalProcessCluster

    with LocalProcessCluster(n_workers=1, nanny=False) as cluster:
        assert 0 < probe_scheduler(cluster.address, 30.0) <= 30.0
        with Client(cluster.address) as client:
            (worker,) = client.scheduler_info()["workers"]
        with pytest.raises(srf.ClusterError, match=f"The server at {worker} is a Dask Worker, not a scheduler"):
            probe_scheduler(worker, 30.0)
        sketch = srf.sketch(ROWS, srf.RFF(n_features=8, bandwidth=1.0, seed=3), client=cluster.address)
    reference = srf.sketch_array(ROWS, srf.RFF(n_features=8, bandwidth=1.0, seed=3))
    np.testing.assert_allclose(sketch.feature_sum, reference.feature_sum, rtol=1e-12)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("behaviour", "fragment"),
    [(_one_byte_then_silence, "within 2 s"), (_http_text, "does not speak Dask's protocol")],
    ids=["one_byte_then_silence", "http_text"],
)
def test_cli_sketch_on_a_server_that_is_not_dask_exits_1_with_one_line(
    misbehaving_server, behaviour, fragment, tmp_path: Path, tmp_zarr
) -> None:
    address = misbehaving_server(behaviour)
    source = tmp_zarr(ROWS.astype(np.float32), chunk_rows=20)
    completed = subprocess.run(
        [sys.executable, "-m", "streamrff.cli", "sketch", source, "-o", str(tmp_path / "out.sketch"),
         "--scheduler", address],
        capture_output=True, text=True, timeout=100, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "DASK_STREAMRFF__CONNECT_TIMEOUT": "2s"},
    )  # fmt: skip
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.startswith(f"streamrff sketch: error: The server at {address} "), completed.stderr
    assert fragment in completed.stderr, completed.stderr
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr, completed.stderr
    assert not (tmp_path / "out.sketch").exists()
