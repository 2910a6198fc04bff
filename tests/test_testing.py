"""The real-service fixtures are real: OS processes, TCP sockets on 127.0.0.1, an S3 server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import dask.array as da
import numpy as np
import psutil
import pytest
import zarr

from streamrff.errors import ClusterError
from streamrff.testing import LocalProcessCluster, MotoS3Server

POLL_INTERVAL = 0.05


def wait_until(condition, timeout: float, message: str) -> None:
    """Poll ``condition()`` until it is true; fail the test with ``message`` at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{message} (waited {timeout:g} s)")
        time.sleep(POLL_INTERVAL)


def listening_ports(pid: int) -> set[tuple[str, int]]:
    return {
        (connection.laddr.ip, connection.laddr.port)
        for connection in psutil.Process(pid).net_connections(kind="tcp")
        if connection.status == psutil.CONN_LISTEN
    }


def gone(pid: int) -> bool:
    """True if no process ``pid`` exists any more (a zombie still counts as existing)."""
    return not psutil.pid_exists(pid)


# -- LocalProcessCluster -------------------------------------------------------------------


def test_dask_cluster_workers_are_distinct_processes_listening_on_loopback(dask_cluster):
    dask_cluster.wait_for_workers()
    worker_pids = dask_cluster.worker_pids()

    assert len(worker_pids) == 2
    assert len(set(worker_pids.values())) == 2
    assert os.getpid() not in worker_pids.values()
    # With nannies, the task-running processes are children of the `dask worker` commands.
    assert set(worker_pids.values()).isdisjoint(dask_cluster.launcher_pids())
    for address, pid in worker_pids.items():
        process = psutil.Process(pid)
        assert process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        assert process.parent().pid in dask_cluster.launcher_pids()
        host_port = urlsplit(address)
        assert host_port.hostname == "127.0.0.1"
        assert ("127.0.0.1", host_port.port) in listening_ports(pid)
    scheduler = urlsplit(dask_cluster.address)
    assert scheduler.scheme == "tcp" and scheduler.hostname == "127.0.0.1"
    assert ("127.0.0.1", scheduler.port) in listening_ports(dask_cluster.scheduler_pid)


def test_dask_client_sum_matches_numpy(dask_client):
    values = np.random.default_rng(0).standard_normal((1_000, 7))
    array = da.from_array(values, chunks=(100, 7))

    total = array.sum(axis=0).compute()

    np.testing.assert_allclose(total, values.sum(axis=0), rtol=1e-12)
    assert len(dask_client.scheduler_info(n_workers=-1)["workers"]) == 2


def test_dask_cluster_survives_sigkill_of_a_worker_process(dask_cluster, dask_client):
    launchers = dask_cluster.launcher_pids()
    victim = sorted(dask_cluster.worker_pids().values())[0]

    os.kill(victim, signal.SIGKILL)

    def replaced() -> bool:
        pids = dask_cluster.worker_pids().values()
        return len(pids) == 2 and victim not in pids

    wait_until(replaced, timeout=60, message="the nanny did not restart the killed worker")
    assert dask_cluster.launcher_pids() == launchers
    assert all(psutil.Process(pid).is_running() for pid in dask_cluster.worker_pids().values())
    values = np.arange(10_000, dtype=np.float64).reshape(1_000, 10)
    total = dask_client.compute(da.from_array(values, chunks=(50, 10)).sum(), retries=2).result()
    assert total == values.sum()


def test_local_process_cluster_stop_leaves_no_process_and_restarts():
    cluster = LocalProcessCluster(n_workers=1, nanny=True)
    with cluster:
        first_pids = [
            cluster.scheduler_pid, *cluster.launcher_pids(), *cluster.worker_pids().values()
        ]
        log_dir = cluster.log_dir
        assert len(set(first_pids)) == 3 and log_dir.is_dir()
    assert [pid for pid in first_pids if not gone(pid)] == []
    assert not log_dir.exists()
    cluster.stop()  # idempotent
    with pytest.raises(ClusterError, match="not running"):
        _ = cluster.address

    with cluster:  # a stopped cluster can be started again
        with cluster.client(set_as_default=False) as client:
            assert client.submit(sum, [1, 2, 3]).result() == 6
        second_pids = [
            cluster.scheduler_pid, *cluster.launcher_pids(), *cluster.worker_pids().values()
        ]
        assert set(second_pids).isdisjoint(first_pids)
    assert [pid for pid in second_pids if not gone(pid)] == []


def test_local_process_cluster_startup_failure_raises_cluster_error_with_logs():
    cluster = LocalProcessCluster(n_workers=1, memory_limit="not-a-size", startup_timeout=60)

    with pytest.raises(ClusterError) as failure:
        cluster.start()

    message = str(failure.value)
    assert "`dask worker` (worker-0)" in message
    assert "--- worker-0.log" in message and "Could not interpret" in message
    assert cluster.log_dir is None  # cleaned up after the failure


def test_testing_cli_prints_address_and_stops_on_sigterm():
    command = [
        sys.executable, "-m", "streamrff.testing", "cluster", "--workers", "1", "--no-nanny"
    ]
    with subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        try:
            address = process.stdout.readline().strip()
            assert address.startswith("tcp://127.0.0.1:"), address
            children = psutil.Process(process.pid).children(recursive=True)
            assert len(children) >= 2  # scheduler and worker (no nanny)
            from distributed import Client

            with Client(address, set_as_default=False, timeout=30) as client:
                assert client.submit(pow, 2, 10).result() == 1024
        finally:
            process.send_signal(signal.SIGTERM)
            returncode = process.wait(timeout=60)
    assert returncode == 0
    wait_until(lambda: all(gone(child.pid) for child in children), timeout=30,
               message="cluster processes outlived the CLI")


# -- MotoS3Server --------------------------------------------------------------------------


def test_s3_server_zarr_v3_round_trip(s3_server, s3_bucket):
    values = np.random.default_rng(1).standard_normal((40, 5)).astype(np.float32)
    url = f"s3://{s3_bucket}/x.zarr"

    written = zarr.open_array(
        url, mode="w", storage_options=s3_server.storage_options,
        shape=values.shape, chunks=(8, 5), dtype=values.dtype, zarr_format=3,
    )
    written[...] = values
    loaded = da.from_zarr(url, storage_options=s3_server.storage_options)

    assert urlsplit(s3_server.endpoint_url).hostname == "127.0.0.1"
    assert loaded.chunks == ((8,) * 5, (5,))
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded.compute(scheduler="sync"), values)
    metadata = zarr.open_array(url, mode="r", storage_options=s3_server.storage_options).metadata
    assert metadata.zarr_format == 3


def test_s3_server_read_by_cluster_workers(s3_server, s3_bucket, dask_client):
    values = np.arange(600, dtype=np.float64).reshape(60, 10)
    url = f"s3://{s3_bucket}/y.zarr"
    da.from_array(values, chunks=(15, 10)).to_zarr(
        url, storage_options=s3_server.storage_options, zarr_format=3, compute=True
    )

    loaded = da.from_zarr(url, storage_options=s3_server.storage_options)
    column_sums = dask_client.compute(loaded.sum(axis=0)).result()

    np.testing.assert_array_equal(column_sums, values.sum(axis=0))


@pytest.mark.parametrize("operation", ["write", "read"])
def test_s3_server_missing_bucket_raises(s3_server, s3_bucket, operation):
    url = f"s3://{s3_bucket}-missing/x.zarr"

    with pytest.raises(FileNotFoundError):
        if operation == "write":
            zarr.open_array(
                url, mode="w", storage_options=s3_server.storage_options,
                shape=(4,), chunks=(2,), dtype="f4", zarr_format=3,
            )[...] = 1.0
        else:
            da.from_zarr(url, storage_options=s3_server.storage_options)


def test_moto_s3_server_sets_dummy_credentials_only_while_running(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "real-looking-key")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)

    with MotoS3Server() as server:
        assert os.environ["AWS_ACCESS_KEY_ID"] == server.storage_options["key"]
        assert os.environ["AWS_ACCESS_KEY_ID"] != "real-looking-key"
        assert "AWS_SESSION_TOKEN" in os.environ
        assert server.endpoint_url.startswith("http://127.0.0.1:")

    assert os.environ["AWS_ACCESS_KEY_ID"] == "real-looking-key"
    assert "AWS_SESSION_TOKEN" not in os.environ
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.endpoint_url


# -- tmp_zarr ------------------------------------------------------------------------------


def test_tmp_zarr_writes_zarr_v3_with_row_chunks(tmp_zarr):
    values = np.arange(23 * 4, dtype=np.float32).reshape(23, 4)

    path = tmp_zarr(values, chunk_rows=5)

    stored = zarr.open_array(path, mode="r")
    assert stored.metadata.zarr_format == 3
    assert stored.chunks == (5, 4)
    assert stored.dtype == np.float32
    np.testing.assert_array_equal(stored[...], values)
    assert da.from_zarr(path).chunks[0] == (5, 5, 5, 5, 3)
