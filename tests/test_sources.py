"""Sources are opened once (counted on the store), in-memory rows are never copied, identities track chunks."""

from __future__ import annotations

import contextlib
import os
import sys
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff.sources.rows import RowSource, open_source

X = np.random.default_rng(0).normal(size=(6_000, 5)).astype(np.float32)
Y = np.random.default_rng(1).normal(loc=0.3, size=(4_000, 5)).astype(np.float32)

_opened: list[str] | None = None


def _record_opens(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], (str, os.PathLike)):
        _opened.append(os.fspath(args[0]))


sys.addaudithook(_record_opens)  # process-wide and permanent: records only inside counting_opens()


@contextlib.contextmanager
def counting_opens() -> Iterator[list[str]]:
    """Every file this process opens meanwhile (Python's audit events: what the store really reads)."""
    global _opened
    _opened = opened = []
    try:
        yield opened
    finally:
        _opened = None


def metadata_reads(opened: list[str], path: str) -> int:
    return sum(os.path.abspath(name) == os.path.join(os.path.abspath(path), "zarr.json") for name in opened)


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(lambda path: srf.sketch(path, srf.RFF(n_features=32, bandwidth="median")), id="sketch"),
        pytest.param(lambda path: srf.KernelPCA(n_components=2, n_features=32).fit(path), id="KernelPCA.fit"),
        pytest.param(
            lambda path: srf.KernelKMeans(n_clusters=2, n_features=32, max_iter=2, seed=0).fit(path),
            id="KernelKMeans.fit",
        ),
        pytest.param(
            lambda path: srf.nystrom_sketch(path, srf.RFF(n_features=32, bandwidth=1.0), sketch_size=8), id="nystrom"
        ),
    ],
)
def test_zarr_source_metadata_is_read_once_per_job(tmp_zarr, job):
    path = tmp_zarr(X, chunk_rows=1_000)

    with counting_opens() as opened:
        job(path)

    assert metadata_reads(opened, path) == 1
    # every chunk is read (the sample pass reads a few of them again), nothing else of the store is opened
    chunk_files = {name for name in opened if os.sep + "c" + os.sep in name}
    assert len(chunk_files) == 6


def test_two_sample_test_of_two_paths_reads_each_store_once(tmp_zarr):
    path_x, path_y = tmp_zarr(X, chunk_rows=1_000, name="x.zarr"), tmp_zarr(Y, chunk_rows=1_000, name="y.zarr")

    with counting_opens() as opened:
        result = srf.two_sample_test(path_x, path_y, n_features=32, n_permutations=50)

    assert (metadata_reads(opened, path_x), metadata_reads(opened, path_y)) == (1, 1)
    assert result.p_value < 0.05  # Y is shifted by 0.3 sd in every column


def test_opened_source_is_passed_down_without_reopening(tmp_zarr):
    path = tmp_zarr(X, chunk_rows=1_500)
    source = open_source(path)
    feature_map = srf.RFF(n_features=32, bandwidth=1.0, seed=3).fit(X)

    with counting_opens() as opened:
        sketch = srf.sketch(source, feature_map)
        pooled = srf.fit_map(srf.RFF(n_features=32, bandwidth="median"), [source, Y])

    assert metadata_reads(opened, path) == 0
    reference = feature_map.transform(X.astype(np.float64)).astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(sketch.feature_sum, reference, rtol=0, atol=1e-5 * len(X))
    expected = srf.RFF(n_features=32, bandwidth="median").fit(np.vstack([X, Y]))
    assert pooled.fingerprint == expected.fingerprint


def test_in_memory_source_is_not_copied():
    rows = np.random.default_rng(2).normal(size=(400_000, 32)).astype(np.float32)
    feature_map = srf.RFF(n_features=64, bandwidth=1.0, seed=0).fit(rows[:10])
    srf.sketch(rows[:1_000], feature_map)  # compile the kernels before measuring

    tracemalloc.start()
    try:
        source = open_source(rows, chunk_rows=50_000)
        opened_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        sketch = srf.sketch(source, feature_map)
        sketch_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert opened_bytes < 1e-3 * rows.nbytes
    assert sketch_peak < 0.5 * rows.nbytes  # chunk-sized temporaries only; a copy would be rows.nbytes
    assert sketch.count == len(rows)
    assert all(np.shares_memory(chunk, rows) for chunk in source.array.dask.values() if isinstance(chunk, np.ndarray))


def test_chunk_identities_change_only_for_rewritten_chunks(tmp_zarr):
    path = tmp_zarr(X, chunk_rows=1_000)
    before = open_source(path, chunk_rows=2_000).chunk_identities()

    array = zarr.open_array(path, mode="r+")
    array[2_500:2_600] = 0.0  # inside the second planned chunk (rows 2000..3999)
    after = open_source(path, chunk_rows=2_000)

    assert open_source(path).identity == after.identity  # same store, same metadata
    changed = [a != b for a, b in zip(before, after.chunk_identities())]
    assert changed == [False, True, False]


def test_identity_tells_stores_apart_even_with_equal_content(tmp_zarr):
    first, second = tmp_zarr(X, 1_000, name="a.zarr"), tmp_zarr(X, 1_000, name="b.zarr")

    assert open_source(first).identity != open_source(second).identity
    assert open_source(first).identity == open_source("file://" + os.path.abspath(first)).identity
    assert open_source(X).chunk_identities() is None


def test_open_source_returns_an_opened_source_as_it_is(tmp_zarr):
    source = open_source(tmp_zarr(X, 1_000))

    assert open_source(source) is source
    assert open_source(source, name="X").name == "X"
    assert open_source(source, chunk_rows=2_500).row_chunks == (2_500, 2_500, 1_000)
    assert isinstance(open_source(source, chunk_rows=2_500), RowSource)
    with pytest.raises(srf.InputError, match="sample_dim"):
        open_source(source, sample_dim="time")


def test_s3_zarr_source_metadata_is_requested_once(s3_bucket, s3_server, tmp_path, monkeypatch):
    import requests

    url = f"s3://{s3_bucket}/rows.zarr"
    store = zarr.storage.FsspecStore.from_url(url, storage_options=s3_server.storage_options, read_only=False)
    zarr.create_array(store=store, shape=X.shape, chunks=(1_000, 5), dtype=X.dtype)[...] = X
    monkeypatch.chdir(tmp_path)  # moto's recorder appends to ./moto_recording of this process
    recorder = s3_server.endpoint_url + "/moto-api/recorder"
    requests.post(recorder + "/reset-recording", timeout=10)
    requests.post(recorder + "/start-recording", timeout=10)
    try:
        srf.KernelPCA(n_components=2, n_features=32).fit(url, storage_options=s3_server.storage_options)
    finally:
        requests.post(recorder + "/stop-recording", timeout=10)
    log = requests.get(recorder + "/download-recording", timeout=10).text

    metadata_gets = [line for line in log.splitlines() if '"GET"' in line and "rows.zarr/zarr.json" in line]
    assert len(metadata_gets) == 1
