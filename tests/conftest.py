"""Shared fixtures: real services (Dask processes, moto's S3 server) and zarr files on disk.

Session fixtures start lazily, the first time a test asks for them, so a run that needs no
cluster or S3 server starts none.

Fixtures
--------
dask_cluster (session)
    A running :class:`streamrff.testing.LocalProcessCluster`: a ``dask scheduler`` and two
    ``dask worker`` processes (nanny, one thread each) on 127.0.0.1.
dask_client (function)
    A ``distributed.Client`` to ``dask_cluster`` with both workers up; closed after the test.
s3_server (session)
    A running :class:`streamrff.testing.MotoS3Server`; use ``s3_server.storage_options``.
s3_bucket (function)
    The name of a fresh, empty bucket on ``s3_server``.
tmp_zarr (function)
    ``tmp_zarr(array, chunk_rows, name="array.zarr") -> str``: writes ``array`` as a zarr v3
    array under ``tmp_path`` with ``chunk_rows`` rows per chunk and returns its path.
cli_main (function)
    ``cli_main(*args) -> CliResult(code, out, err)``: runs ``streamrff.cli.main(args)`` in this
    process (no interpreter start) and returns its exit code (usage errors' ``SystemExit``
    included) and what it printed to stdout and stderr. Tests of the console script itself (a
    fresh process, signals, environment) still run it as a subprocess.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pytest
from hypothesis import settings
from threadpoolctl import threadpool_limits

from streamrff.testing import LocalProcessCluster, MotoS3Server

if TYPE_CHECKING:
    from distributed import Client

# CI replays the same examples on every run (a failure there can be reproduced); developers get
# fresh random examples unless they ask for the CI profile with HYPOTHESIS_PROFILE=ci.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def single_threaded_blas() -> Iterator[None]:
    """One BLAS thread for tests that loop over many small GEMMs and eighs: on a shared 2-core
    machine multi-threaded BLAS spends its time spinning, not computing."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="session")
def dask_cluster() -> Iterator[LocalProcessCluster]:
    with LocalProcessCluster(n_workers=2, threads_per_worker=1, nanny=True) as cluster:
        yield cluster


@pytest.fixture
def dask_client(dask_cluster: LocalProcessCluster) -> Iterator[Client]:
    # A test before may have killed a worker; start from a full cluster.
    dask_cluster.wait_for_workers()
    with dask_cluster.client() as client:
        yield client


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3Server]:
    with MotoS3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: MotoS3Server) -> Iterator[str]:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    name = f"streamrff-test-{uuid.uuid4().hex[:16]}"
    s3_server.make_bucket(name)
    yield name
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def tmp_zarr(tmp_path: Path) -> Callable[..., str]:
    import zarr

    def write(array: np.ndarray, chunk_rows: int, name: str = "array.zarr") -> str:
        array = np.asarray(array)
        path = tmp_path / name
        stored = zarr.create_array(
            store=str(path),
            shape=array.shape,
            chunks=(chunk_rows, *array.shape[1:]),
            dtype=array.dtype,
            zarr_format=3,
        )
        stored[...] = array
        return str(path)

    return write


class CliResult(NamedTuple):
    """What one in-process run of the CLI returned and printed."""

    code: int | str | None
    out: str
    err: str


@pytest.fixture
def cli_main(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    from streamrff.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()  # only this run's output
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's usage errors and --help/--version
            code = exit_.code
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
