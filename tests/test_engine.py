"""The Dask engine against independent references: in-memory sketches, numpy, real services.

References: :func:`streamrff.sketch_array` on the in-memory rows (a separate code path, no
Dask), plain numpy for the landmark sample and the median heuristic. Engine-vs-engine
comparisons only where the point is invariance (chunking, workers, sources, merge order).
Real services come from ``conftest.py``: ``dask scheduler`` + 2 ``dask worker`` processes,
moto's S3 server.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.array as da
import numpy as np
import psutil
import pytest
import xarray as xr
import zarr
from scipy.spatial.distance import pdist

import streamrff as srf
from streamrff._base.sampling import MEDIAN_SAMPLE_ROWS, row_keys
from streamrff.engine import JobOptions, auto_chunk_rows, fit_map_and_sample, landmark_sample, run_chunks
from streamrff.errors import InputError, SourceError
from streamrff.sketches import MeanSketch
from streamrff.sketches.mean import mean_sketch_of_chunk
from streamrff.sources.rows import open_source

N_ROWS, N_COLUMNS, N_FEATURES = 20_000, 8, 128
POLL_INTERVAL = 0.02
CHUNKS_LOG = re.compile(r"sketching (\d+) chunk\(s\): (\d+) from checkpoint, (\d+) to compute")


def make_rows(n_rows: int = N_ROWS, seed: int = 0) -> np.ndarray:
    """float32 rows with unequal column scales, so the median bandwidth is not trivial."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n_rows, N_COLUMNS)) * np.linspace(0.5, 2.0, N_COLUMNS) + 1.0).astype(np.float32)


X = make_rows()


def median_map(n_features: int = N_FEATURES) -> srf.RFF:
    return srf.RFF(n_features=n_features, bandwidth="median", seed=3)


def assert_sketches_close(actual: srf.MeanSketch, expected: srf.MeanSketch, rtol: float) -> None:
    """Same map and counts; sums equal to ``rtol`` relative to the largest reference entry.

    Entries of a feature sum cancel towards zero (sin terms), so an element-wise relative
    tolerance would test rounding noise; the scale is the sum's largest magnitude.
    """
    assert actual.fingerprint == expected.fingerprint
    assert (actual.count, actual.n_invalid) == (expected.count, expected.n_invalid)
    assert actual.has_moments == expected.has_moments
    scale = np.abs(expected.feature_sum).max()
    np.testing.assert_allclose(actual.feature_sum, expected.feature_sum, rtol=0, atol=rtol * scale)
    assert actual.squared_norm_sum == pytest.approx(expected.squared_norm_sum, rel=rtol)
    if expected.has_moments:
        scale = np.abs(expected.moment).max()
        np.testing.assert_allclose(actual.moment, expected.moment, rtol=0, atol=rtol * scale)


def wait_until(condition, timeout: float, message: str):
    """Poll ``condition()`` until it returns something truthy (returned); fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{message} (waited {timeout:g} s)")
        time.sleep(POLL_INTERVAL)


def chunk_counts(caplog) -> tuple[int, int, int]:
    """(total, from checkpoint, computed) of the last mean-sketch pass logged by the engine."""
    matches = [CHUNKS_LOG.search(record.getMessage()) for record in caplog.records if record.name == "streamrff.engine"]
    matches = [m for m in matches if m]
    assert matches, "the engine logged no 'sketching N chunk(s)' line"
    return tuple(int(g) for g in matches[-1].groups())


def write_s3_zarr(url: str, rows: np.ndarray, chunk_rows: int, storage_options: dict) -> None:
    store = zarr.storage.FsspecStore.from_url(url, storage_options=storage_options, read_only=False)
    stored = zarr.create_array(
        store=store, shape=rows.shape, chunks=(chunk_rows, rows.shape[1]), dtype=rows.dtype, zarr_format=3
    )
    stored[...] = rows


def bottom_k_rows(rows: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Independent reference: the finite rows whose keyed global row index is among the k smallest."""
    keys = row_keys(seed, 0, rows.shape[0])
    finite = np.flatnonzero(np.isfinite(rows).all(axis=1))
    order = finite[np.argsort(keys[finite], kind="stable")]
    return rows[order[:k]]


def numpy_median_distance(rows: np.ndarray) -> float:
    distances = pdist(rows.astype(np.float64))
    return float(np.median(distances[distances > 0]))


# -- same numbers everywhere ---------------------------------------------------------------


@pytest.mark.parametrize("moments", [False, True])
def test_sketch_matches_sketch_array_across_chunk_sizes(moments):
    reference = srf.sketch_array(X, median_map(), moments=moments)

    small_chunks = srf.sketch(X, median_map(), moments=moments, chunk_rows=1_000)
    odd_chunks = srf.sketch(X, median_map(), moments=moments, chunk_rows=7_777)

    assert small_chunks.count == N_ROWS
    assert_sketches_close(small_chunks, reference, rtol=1e-6)
    assert_sketches_close(odd_chunks, reference, rtol=1e-6)
    assert_sketches_close(odd_chunks, small_chunks, rtol=1e-6)


def test_auto_chunk_rows_follows_width_moments_and_memory():
    # ~2**27 feature values per task; at least 8 D rows with moments; input under memory / 8.
    assert auto_chunk_rows(10**8, 32, 1024, False, memory_per_thread=4e9) == 2**27 // 1024
    assert auto_chunk_rows(10**8, 32, 4096, True, memory_per_thread=4e9) == 2**27 // 4096
    assert auto_chunk_rows(10**8, 32, 2**16, True, memory_per_thread=4e9) == 8 * 2**16
    assert auto_chunk_rows(5_000, 32, 1024, False, memory_per_thread=4e9) == 5_000
    assert auto_chunk_rows(10**8, 1000, 16, False, memory_per_thread=9e6) == 9e6 / 8 // 9000
    assert auto_chunk_rows(10**8, 10**9, 16, False, memory_per_thread=1e6) == 1


def test_in_memory_data_is_split_by_auto_chunk_rows_and_zarr_keeps_its_chunks(caplog, tmp_zarr):
    rows = np.random.default_rng(2).normal(size=(300_000, 2)).astype(np.float32)
    fitted = srf.RFF(n_features=1024, bandwidth=1.0).fit(rows[:10])
    with caplog.at_level(logging.INFO, logger="streamrff.engine"):
        result = srf.sketch(rows, fitted)
    expected_chunks = -(-300_000 // (2**27 // 1024))
    assert chunk_counts(caplog)[0] == expected_chunks == 3
    assert_sketches_close(result, srf.sketch_array(rows, fitted), rtol=1e-6)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="streamrff.engine"):
        srf.sketch(tmp_zarr(rows, chunk_rows=50_000), fitted)
    assert chunk_counts(caplog)[0] == 6


@pytest.mark.parametrize("moments", [False, True])
def test_float64_sketch_equals_float64_numpy_reference_on_dask(moments):
    fitted = srf.RFF(n_features=N_FEATURES, bandwidth=2.0, variant="cosphase", seed=7).fit(X)
    params = fitted._params()
    Z = np.sqrt(2.0 / N_FEATURES) * np.cos(X.astype(np.float64) @ params["frequencies"].T + params["phases"])
    result = srf.sketch(X, fitted, moments=moments, chunk_rows=3_000, dtype="float64")
    np.testing.assert_allclose(result.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-12 * np.abs(Z.sum(axis=0)).max())
    if moments:
        np.testing.assert_allclose(result.moment, Z.T @ Z, rtol=0, atol=1e-12 * np.abs(Z.T @ Z).max())
    with pytest.raises(InputError, match=r"dtype must be 'float32' or 'float64'. Got 'int8'"):
        srf.sketch(X, fitted, dtype="int8")


def test_sketch_is_invariant_to_source_type(tmp_zarr, s3_server, s3_bucket):
    s3_url = f"s3://{s3_bucket}/x.zarr"
    write_s3_zarr(s3_url, X, 1_000, s3_server.storage_options)
    by_feature_first = xr.DataArray(X.T, dims=("feature", "sample"))
    sources = {
        "dask": dict(source=da.from_array(X, chunks=(1_000, N_COLUMNS))),
        "xarray": dict(source=by_feature_first, sample_dim="sample", chunk_rows=1_000),
        "local zarr": dict(source=tmp_zarr(X, 1_000)),
        "s3 zarr": dict(source=s3_url, storage_options=s3_server.storage_options),
    }
    from_numpy = srf.sketch(X, median_map(), moments=True, chunk_rows=1_000)
    assert_sketches_close(from_numpy, srf.sketch_array(X, median_map(), moments=True), rtol=1e-6)

    for name, kwargs in sources.items():
        result = srf.sketch(feature_map=median_map(), moments=True, **kwargs)
        assert result.feature_map.bandwidth_ == from_numpy.feature_map.bandwidth_, name
        assert_sketches_close(result, from_numpy, rtol=1e-12)


def test_sketch_is_invariant_to_merge_order():
    fitted = srf.RFF(n_features=N_FEATURES, bandwidth=2.5, seed=1).fit(X[:1])
    pairs = srf.sketch(X, fitted, moments=True, chunk_rows=1_000, split_every=2)
    eights = srf.sketch(X, fitted, moments=True, chunk_rows=1_000, split_every=8)
    # The in-memory path sketches each chunk; merging those partials backwards is a
    # different association and order than either engine tree.
    partials = [srf.sketch_array(X[start : start + 1_000], fitted, moments=True) for start in range(0, N_ROWS, 1_000)]
    backwards = srf.merge(*reversed(partials))

    assert_sketches_close(pairs, eights, rtol=1e-12)
    assert_sketches_close(backwards, eights, rtol=1e-12)
    assert_sketches_close(eights, srf.sketch_array(X, fitted, moments=True), rtol=1e-6)


@pytest.mark.parametrize("chunk_rows", [333, 1_000, 7_777, N_ROWS])
def test_sketch_median_bandwidth_equals_in_memory_fit(chunk_rows):
    expected = srf.RFF(bandwidth="median", seed=3).fit(X).bandwidth_

    result = srf.sketch(X, median_map(), chunk_rows=chunk_rows)

    assert result.feature_map.bandwidth_ == expected
    assert result.feature_map.bandwidth_ == numpy_median_distance(bottom_k_rows(X, MEDIAN_SAMPLE_ROWS, 3))


@pytest.mark.parametrize("chunk_rows", [100, 1_000, 7_777])
def test_landmark_sample_is_bottom_k_of_row_keys(chunk_rows):
    k, seed = 500, 11
    expected_keys = np.sort(row_keys(seed, 0, N_ROWS))[:k]

    sample = landmark_sample([da.from_array(X, chunks=(chunk_rows, N_COLUMNS))], k, seed)

    np.testing.assert_array_equal(sample.keys, expected_keys)
    np.testing.assert_array_equal(sample.rows, bottom_k_rows(X, k, seed).astype(np.float64))


@pytest.mark.parametrize("n_rows", [0, 300, 4096])
def test_fit_map_and_sample_shares_one_bottom_k_sample_with_the_map(n_rows):
    source = open_source(da.from_array(X, chunks=(1_000, N_COLUMNS)))
    fitted, sample = fit_map_and_sample(median_map(), [source], n_rows, seed=99)
    # the map's sample is the bottom MEDIAN_SAMPLE_ROWS by its own seed (3), the extra rows follow in key order
    assert fitted.bandwidth_ == numpy_median_distance(bottom_k_rows(X, MEDIAN_SAMPLE_ROWS, 3))
    np.testing.assert_array_equal(sample, bottom_k_rows(X, n_rows, 3).astype(np.float64))
    fixed, fixed_sample = fit_map_and_sample(srf.RFF(n_features=16, bandwidth=2.0), [source], n_rows, seed=99)
    assert fixed.bandwidth_ == 2.0  # a map that takes no sample leaves the seed to the caller
    np.testing.assert_array_equal(fixed_sample, bottom_k_rows(X, n_rows, 99).astype(np.float64))


@pytest.mark.parametrize("nan_fraction", [0.05, 0.95])
def test_landmark_sample_skips_non_finite_rows(nan_fraction):
    # With 95% of rows NaN, most candidate keys belong to skipped rows: the sample must
    # still be the k smallest keys among the finite rows, wherever those live.
    k, seed = 10, 5
    rows = X.astype(np.float64)
    rows[np.random.default_rng(1).random(N_ROWS) < nan_fraction, 2] = np.nan

    sample = landmark_sample([da.from_array(rows, chunks=(100, N_COLUMNS))], k, seed)

    assert np.isfinite(sample.rows).all()
    np.testing.assert_array_equal(sample.rows, bottom_k_rows(rows, k, seed))


def test_sketch_skip_with_median_bandwidth_samples_only_finite_rows():
    rows = X.copy()
    invalid = np.random.default_rng(2).random(N_ROWS) < 0.3
    rows[invalid, 0] = np.nan
    rows[np.flatnonzero(invalid)[::2], 5] = np.inf

    result = srf.sketch(rows, median_map(), chunk_rows=1_000, on_invalid="skip")

    assert result.n_invalid == invalid.sum()
    assert result.count == N_ROWS - invalid.sum()
    finite_sample = bottom_k_rows(rows, MEDIAN_SAMPLE_ROWS, 3)
    assert np.isfinite(finite_sample).all()
    assert result.feature_map.bandwidth_ == numpy_median_distance(finite_sample)
    expected = srf.sketch_array(rows[~invalid], result.feature_map)
    scale = np.abs(expected.feature_sum).max()
    np.testing.assert_allclose(result.feature_sum, expected.feature_sum, rtol=0, atol=1e-6 * scale)


def test_embedded_default_runs_chunk_tasks_with_one_blas_thread():
    # The task threads already use every core; BLAS threads on top oversubscribe them.
    from threadpoolctl import threadpool_info

    def blas_threads() -> set[int]:
        return {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}

    fitted = srf.RFF(n_features=N_FEATURES, bandwidth=2.0).fit(X[:1])
    seen = []

    def kernel(rows, row_offset, valid):
        seen.append(blas_threads())
        return mean_sketch_of_chunk(rows, fitted)

    before = blas_threads()
    result = run_chunks([da.from_array(X, chunks=(2_000, N_COLUMNS))], kernel)

    assert len(seen) == N_ROWS // 2_000
    assert all(threads == {1} for threads in seen)
    assert blas_threads() == before  # restored after the job
    assert_sketches_close(result, srf.sketch_array(X, fitted), rtol=1e-6)


# -- a real cluster ------------------------------------------------------------------------


def test_sketch_on_cluster_via_client_and_address(dask_cluster, dask_client, tmp_zarr, tmp_path, monkeypatch):
    from dask.utils import key_split
    from distributed import get_task_stream

    path = tmp_zarr(X, 1_000)
    embedded = srf.sketch(path, median_map(), moments=True)
    # Relative to this process's directory: the workers run elsewhere.
    monkeypatch.chdir(tmp_path)

    with get_task_stream(client=dask_client) as stream:
        via_client = srf.sketch("array.zarr", median_map(), moments=True, client=dask_client)
    via_address = srf.sketch("array.zarr", median_map(), moments=True, client=dask_cluster.address)

    chunk_tasks = [task for task in stream.data if key_split(task["key"]) == "chunk_task"]
    assert len(chunk_tasks) == 2 * (N_ROWS // 1_000)  # the median's sample pass, then the sketch
    assert {task["worker"] for task in chunk_tasks} <= set(dask_cluster.worker_pids())
    assert_sketches_close(via_client, srf.sketch_array(X, median_map(), moments=True), rtol=1e-6)
    assert_sketches_close(via_client, embedded, rtol=1e-12)
    assert_sketches_close(via_address, embedded, rtol=1e-12)


def test_sketch_survives_sigkill_of_a_worker(dask_cluster, dask_client, tmp_zarr):
    from dask.utils import key_split

    # Long enough to kill mid-job: 40 chunks, D=1024 with the D x D second moment.
    rows = make_rows(20_000, seed=7)
    path = tmp_zarr(rows, 500)
    fitted = srf.RFF(n_features=1_024, bandwidth=3.0, seed=2).fit(rows[:1])
    clean = srf.sketch(path, fitted, moments=True)

    def busy_worker():
        processing = dask_client.processing()
        return next((w for w, keys in processing.items() if any(key_split(k) == "chunk_task" for k in keys)), None)

    with ThreadPoolExecutor(max_workers=1) as pool:
        job = pool.submit(srf.sketch, path, fitted, moments=True, client=dask_client)
        victim = wait_until(busy_worker, 60, "no worker started a chunk task")
        pid = dask_cluster.worker_pids()[victim]
        os.kill(pid, signal.SIGKILL)
        assert not job.done(), "the job finished before the kill; make it longer"
        result = job.result(timeout=240)

    wait_until(lambda: not psutil.pid_exists(pid), 30, f"killed worker {pid} still exists")
    assert pid not in dask_cluster.worker_pids().values()
    assert_sketches_close(result, clean, rtol=1e-12)
    assert_sketches_close(result, srf.sketch_array(rows, fitted, moments=True), rtol=1e-6)


# -- object storage ------------------------------------------------------------------------


def test_sketch_from_s3_and_save_sketch_to_s3(s3_server, s3_bucket):
    url = f"s3://{s3_bucket}/x.zarr"
    write_s3_zarr(url, X, 1_000, s3_server.storage_options)

    result = srf.sketch(url, median_map(), moments=True, storage_options=s3_server.storage_options)
    result.save(f"s3://{s3_bucket}/x.sketch", storage_options=s3_server.storage_options)
    loaded = srf.load(f"s3://{s3_bucket}/x.sketch", storage_options=s3_server.storage_options)

    assert_sketches_close(result, srf.sketch_array(X, median_map(), moments=True), rtol=1e-6)
    assert loaded == result
    with pytest.raises(FileExistsError, match="already holds a sketch"):
        result.save(f"s3://{s3_bucket}/x.sketch", storage_options=s3_server.storage_options)


def test_sketch_from_s3_on_cluster(dask_cluster, dask_client, s3_server, s3_bucket):
    # The workers are other processes without the test's AWS environment: the storage
    # options must travel inside the task graph.
    url = f"s3://{s3_bucket}/x.zarr"
    write_s3_zarr(url, X, 1_000, s3_server.storage_options)
    embedded = srf.sketch(url, median_map(), storage_options=s3_server.storage_options)

    result = srf.sketch(url, median_map(), storage_options=s3_server.storage_options, client=dask_client)

    assert_sketches_close(result, embedded, rtol=1e-12)
    assert_sketches_close(result, srf.sketch_array(X, median_map()), rtol=1e-6)


def test_sketch_checkpoint_on_s3(s3_server, s3_bucket, caplog):
    caplog.set_level(logging.INFO, logger="streamrff.engine")
    options = s3_server.storage_options
    fitted = srf.RFF(n_features=N_FEATURES, bandwidth=2.0).fit(X[:1])
    checkpoint = f"s3://{s3_bucket}/checkpoints"

    first = srf.sketch(X, fitted, chunk_rows=5_000, checkpoint=checkpoint, storage_options=options)
    assert chunk_counts(caplog) == (4, 0, 4)
    second = srf.sketch(X, fitted, chunk_rows=5_000, checkpoint=checkpoint, storage_options=options)

    assert chunk_counts(caplog) == (4, 4, 0)
    assert second == first
    assert_sketches_close(second, srf.sketch_array(X, fitted), rtol=1e-6)


# -- checkpoints ---------------------------------------------------------------------------


def test_sketch_checkpoint_reruns_only_missing_chunks(tmp_zarr, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamrff.engine")
    rows = X.copy()
    rows[19_345, 3] = np.nan  # chunk 19 of 20 fails
    path = tmp_zarr(rows, 1_000)
    feature_map = srf.RFF(n_features=N_FEATURES, bandwidth=2.0)  # fixed bandwidth: no sampling pass
    checkpoint = tmp_path / "checkpoint"

    # One thread: when chunk 19 fails no other chunk is still running, so the files
    # counted below are all the first run wrote.
    with dask.config.set(num_workers=1), pytest.raises(InputError, match=r"chunk 19 \(rows 19000\.\.19999\)"):
        srf.sketch(path, feature_map, checkpoint=checkpoint)
    saved = {p.name: p.joinpath("zarr.json").stat().st_mtime_ns for p in checkpoint.glob("*/rows-*.zarr")}
    assert 1 <= len(saved) < 20
    assert "rows-000000019000-000000020000.zarr" not in saved

    zarr.open_array(path, mode="r+")[19_345, 3] = X[19_345, 3]
    resumed = srf.sketch(path, feature_map, checkpoint=checkpoint)

    assert chunk_counts(caplog) == (20, len(saved), 20 - len(saved))
    after = {p.name: p.joinpath("zarr.json").stat().st_mtime_ns for p in checkpoint.glob("*/rows-*.zarr")}
    assert len(after) == 20
    assert {name: after[name] for name in saved} == saved  # reused, not rewritten
    assert_sketches_close(resumed, srf.sketch(path, feature_map), rtol=1e-12)
    assert_sketches_close(resumed, srf.sketch_array(X, resumed.feature_map), rtol=1e-6)

    again = srf.sketch(path, feature_map, checkpoint=checkpoint)
    assert chunk_counts(caplog) == (20, 20, 0)
    assert again == resumed


def test_sketch_checkpoint_after_appending_rows(tmp_zarr, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamrff.engine")
    path = tmp_zarr(X[:10_500], 1_000)  # 11 chunks, the last one half full
    fitted = median_map().fit(X[:10_500])
    checkpoint = tmp_path / "checkpoint"
    srf.sketch(path, fitted, moments=True, checkpoint=checkpoint)
    assert chunk_counts(caplog) == (11, 0, 11)

    stored = zarr.open_array(path, mode="r+")
    stored.resize((13_000, N_COLUMNS))
    stored[10_500:] = X[10_500:13_000]
    extended = srf.sketch(path, fitted, moments=True, checkpoint=checkpoint)

    # Chunks 0-9 are unchanged; 10 grew (rows 10000..10999) and 11-12 are new.
    assert chunk_counts(caplog) == (13, 10, 3)
    assert len(list(checkpoint.glob("*/rows-*.zarr"))) == 11 + 3
    assert_sketches_close(extended, srf.sketch(path, fitted, moments=True), rtol=1e-12)
    assert_sketches_close(extended, srf.sketch_array(X[:13_000], fitted, moments=True), rtol=1e-6)


# -- bad input -----------------------------------------------------------------------------


def test_sketch_missing_path_names_it(tmp_path):
    missing = tmp_path / "nowhere.zarr"
    with pytest.raises(SourceError, match="nowhere.zarr"):
        srf.sketch(str(missing), median_map())
    assert not missing.exists()


def test_sketch_missing_bucket_is_a_source_error(s3_server):
    with pytest.raises(SourceError, match="s3://streamrff-no-such-bucket/x.zarr"):
        srf.sketch("s3://streamrff-no-such-bucket/x.zarr", median_map(), storage_options=s3_server.storage_options)


@pytest.mark.parametrize(
    "values",
    [
        np.arange(30).astype("datetime64[s]").reshape(10, 3),
        np.array([["a", "b"], ["c", "d"]]),
        np.ones((4, 2), dtype=complex),
    ],
    ids=["datetime", "string", "complex"],
)
def test_sketch_rejects_non_numeric_data(values):
    with pytest.raises(InputError, match="real numbers"):
        srf.sketch(values, median_map())


def test_sketch_rejects_non_numeric_zarr(tmp_zarr):
    path = tmp_zarr(np.arange(30).astype("datetime64[s]").reshape(10, 3), 5)
    with pytest.raises(InputError, match="datetime64"):
        srf.sketch(path, median_map())


def test_sketch_accepts_bool_rows():
    rows = np.random.default_rng(0).random((500, 4)) < 0.5
    fitted = srf.RFF(n_features=64, bandwidth=1.0).fit(rows[:1].astype(float))

    result = srf.sketch(rows, fitted, chunk_rows=100)

    assert_sketches_close(result, srf.sketch_array(rows.astype(np.float64), fitted), rtol=1e-6)


@pytest.mark.parametrize("shape", [(100,), (10, 5, 2)])
def test_sketch_rejects_data_that_is_not_2d(tmp_zarr, shape):
    values = np.ones(shape, dtype=np.float32)
    with pytest.raises(InputError, match=f"Got {len(shape)}-D data"):
        srf.sketch(values, median_map())
    with pytest.raises(InputError, match=f"Got {len(shape)}-D data"):
        srf.sketch(tmp_zarr(values, 10), median_map())


def test_sketch_nan_rows_raise_naming_chunk_and_rows():
    rows = X.copy()
    rows[[4_100, 4_321], 1] = np.nan

    with pytest.raises(
        InputError, match=r"2 row\(s\) of data chunk 4 \(rows 4000\.\.4999\); first bad row: data row 4100"
    ):
        srf.sketch(rows, median_map(), chunk_rows=1_000)


def test_sketch_skip_counts_invalid_rows_and_sums_finite_ones():
    rows = X.copy()
    rows[[10, 4_100, 4_321, 19_999], [0, 1, 1, 7]] = [np.nan, np.inf, -np.inf, np.nan]
    finite = np.isfinite(rows).all(axis=1)
    fitted = median_map().fit(X)

    result = srf.sketch(rows, fitted, moments=True, chunk_rows=1_000, on_invalid="skip")

    assert (result.count, result.n_invalid) == (N_ROWS - 4, 4)
    expected = srf.sketch_array(rows[finite], fitted, moments=True)
    np.testing.assert_allclose(
        result.feature_sum, expected.feature_sum, rtol=0, atol=1e-6 * np.abs(expected.feature_sum).max()
    )
    np.testing.assert_allclose(result.moment, expected.moment, rtol=0, atol=1e-6 * np.abs(expected.moment).max())


# RFF sums with float32 features take no finiteness pass: a chunk's rows are checked only when its
# feature sum comes out non-finite. Bad values in the first, a middle and the last column, in the
# first and the last row of chunks, for dense and structured maps (d = 100 is padded to 128).
_BAD_CELLS = ([0, 999, 1_000, 2_345, 2_999], [0, 57, 99, 3, 99], [np.nan, np.inf, -np.inf, np.nan, np.inf])


@pytest.mark.filterwarnings("ignore::streamrff.BiasWarning")
@pytest.mark.parametrize("structured", [False, True], ids=["dense", "structured"])
@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
@pytest.mark.parametrize("moments", [False, True], ids=["sums", "moments"])
def test_rff_sketch_without_finiteness_pass_skips_and_raises_like_numpy(structured, variant, moments):
    rows = np.random.default_rng(5).standard_normal((3_000, 100)).astype(np.float32)
    bad_rows, bad_columns, values = _BAD_CELLS
    rows[bad_rows, bad_columns] = values
    finite = np.isfinite(rows).all(axis=1)
    fitted = srf.RFF(n_features=256, bandwidth=10.0, variant=variant, structured=structured, seed=2).fit(rows[1:2])

    result = srf.sketch(rows, fitted, moments=moments, chunk_rows=1_000, on_invalid="skip")

    assert (result.count, result.n_invalid) == (3_000 - 5, 5)
    features = fitted.transform(rows[finite]).astype(np.float64)  # numpy on the finite rows
    expected = features.sum(axis=0)
    np.testing.assert_allclose(result.feature_sum, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
    assert result.squared_norm_sum == pytest.approx(float((features**2).sum()), rel=1e-6)
    if moments:
        gram = features.T @ features
        np.testing.assert_allclose(result.moment, gram, rtol=0, atol=1e-6 * np.abs(gram).max())
    for chunk, n_bad, first_bad in [(0, 2, 0), (1, 1, 1_000), (2, 2, 2_345)]:
        one_bad_chunk = np.where(finite[:, None] | (np.arange(3_000) // 1_000 == chunk)[:, None], rows, 0.0)
        message = rf"{n_bad} row\(s\) of data chunk {chunk} \(rows .*\); first bad row: data row {first_bad}\."
        with pytest.raises(InputError, match=message):
            srf.sketch(one_bad_chunk, fitted, moments=moments, chunk_rows=1_000)


def test_rff_sketch_without_finiteness_pass_equals_the_check_first_pass_bit_for_bit():
    rows = X.copy()
    rows[[10, 4_100, 4_321, 19_999], [0, 1, 1, 7]] = [np.nan, np.inf, -np.inf, np.nan]
    fitted = srf.RFF(n_features=128, bandwidth=2.0, seed=4).fit(X[:1])
    job = MeanSketch.chunk_job(fitted)
    kernel = job.kernel
    for data in (X, rows):
        source = open_source(data, chunk_rows=1_000)
        check_first = run_chunks([source], kernel, JobOptions(on_invalid="skip"))
        folded = run_chunks([source], kernel, JobOptions(on_invalid="skip"), shows_non_finite=job.shows_non_finite)
        assert folded.feature_sum.tobytes() == check_first.feature_sum.tobytes()
        assert (folded.count, folded.n_invalid) == (check_first.count, check_first.n_invalid)


def test_rff_sketch_of_finite_rows_that_overflow_is_not_an_input_error():
    rows = np.full((40, 3), 3e38, np.float32)  # finite, but their phases overflow to inf
    fitted = srf.RFF(n_features=16, bandwidth=0.1, seed=0).fit(rows[:1])

    result = srf.sketch(rows, fitted, chunk_rows=20)

    assert (result.count, result.n_invalid) == (40, 0)


def test_sketch_fitted_map_of_other_width_is_rejected():
    fitted = median_map().fit(X[:, :5])
    with pytest.raises(InputError, match=r"8 features.*expecting 5"):
        srf.sketch(X, fitted)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(on_invalid="drop"), "on_invalid"),
        (dict(split_every=1), "split_every"),
        (dict(moments="yes"), "moments"),
        (dict(chunk_rows=0), "chunk_rows"),
        (dict(client=42), "client"),
    ],
)
def test_sketch_rejects_bad_arguments(kwargs, message):
    with pytest.raises(InputError, match=message):
        srf.sketch(X[:100], median_map(), **kwargs)


def test_sketch_job_opens_lists_and_checks_its_zarr_source_once(tmp_zarr, monkeypatch):
    # srf.sketch on a zarr path with a median map runs two passes (the row sample, then the sketch): the source
    # is opened once (one zarr open), its store listed once, and the sum method checked once, then handed down.
    import sys
    from collections import Counter
    from functools import cached_property

    import streamrff.sketches.mean
    import streamrff.sources.rows as rows_module

    path = tmp_zarr(X, 2_500)
    counts: Counter[str] = Counter()

    def counted(name, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return wrapper

    originals = {
        "open_source": rows_module.open_source,
        "open_zarr_array": rows_module.open_zarr_array,
        "check_sum_method": streamrff.sketches.mean.check_sum_method,
    }
    for module in [module for name, module in sys.modules.items() if name.startswith("streamrff")]:
        for name, original in originals.items():
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted(name, original))
    listing = rows_module.RowSource._stored_keys.func
    monkeypatch.setattr(rows_module.RowSource, "_stored_keys", cached_property(counted("store listing", listing)))
    monkeypatch.setattr(rows_module.RowSource._stored_keys, "attrname", "_stored_keys")
    result = srf.sketch(path, median_map(), moments=True)
    assert result.count == N_ROWS
    assert counts == {"open_source": 1, "open_zarr_array": 1, "check_sum_method": 1, "store listing": 1}


def test_client_credentials_travel_to_workers_without_them(s3_server, s3_bucket, tmp_path, cli_main, monkeypatch):
    # Workers started without any AWS variable, as on a deployed cluster; the client has them only in
    # its environment (MotoS3Server sets them), and the options name just the endpoint.
    import s3fs

    from streamrff.testing import LocalProcessCluster

    url = f"s3://{s3_bucket}/x.zarr"
    write_s3_zarr(url, X, 5_000, s3_server.storage_options)
    endpoint_only = json.dumps({"endpoint_url": s3_server.endpoint_url})
    unset = {name: None for name in s3_server.ENVIRONMENT} | {"AWS_EC2_METADATA_DISABLED": "true"}
    out = tmp_path / "x.sketch"
    with LocalProcessCluster(n_workers=1, environment=unset) as cluster:
        result = cli_main(
            "sketch", url, "-o", str(out), "--features", "64", "--bandwidth", "2", "--seed", "0",
            "--scheduler", cluster.address, "--storage-options", endpoint_only,
        )  # fmt: skip
        assert result.code == 0, result.err
        made = srf.load(out)
        assert_sketches_close(made, srf.sketch_array(X, made.feature_map), rtol=1e-6)

        # No credentials anywhere: one line before any task, saying how to pass them.
        for name in s3_server.ENVIRONMENT:
            monkeypatch.delenv(name)
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no request leaves 127.0.0.1
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        s3fs.S3FileSystem.clear_instance_cache()
        refused = cli_main(
            "sketch", url, "-o", str(tmp_path / "y.sketch"), "--features", "64", "--bandwidth", "2",
            "--scheduler", cluster.address, "--storage-options", endpoint_only,
        )  # fmt: skip
    assert refused.code != 0
    assert len(refused.err.strip().splitlines()) == 1, refused.err
    assert "credentials" in refused.err and "--storage-options" in refused.err
    assert not (tmp_path / "y.sketch").exists()


def _worker_s3_configs() -> list[dict]:
    """The ``config_kwargs`` of every S3 file system this worker made (run on the worker)."""
    import s3fs

    return [filesystem.config_kwargs for filesystem in s3fs.S3FileSystem._cache.values()]


@pytest.mark.slow  # a worker process and two sketches through it (20-60 s on a loaded machine)
def test_client_store_deadlines_travel_to_workers(s3_server, s3_bucket, tmp_path, cli_main):
    # The CLI's deadlines are its process's fsspec defaults; a worker has its own configuration (none here), so
    # without them in the shipped options its reads would wait botocore's 60 s per attempt on a silent store.
    import s3fs

    from streamrff.cli.faults import STORE_DEADLINES
    from streamrff.testing import LocalProcessCluster

    url = f"s3://{s3_bucket}/x.zarr"
    write_s3_zarr(url, X, 5_000, s3_server.storage_options)
    given = {"read_timeout": 42, "connect_timeout": 7}
    cases = [(s3_server.storage_options, STORE_DEADLINES)]  # the user set none: the client's deadlines
    cases += [({**s3_server.storage_options, "config_kwargs": given}, {**STORE_DEADLINES, **given})]  # theirs win
    with LocalProcessCluster(n_workers=1) as cluster, cluster.client() as client:
        for number, (options, expected) in enumerate(cases):
            client.run(s3fs.S3FileSystem.clear_instance_cache)
            result = cli_main(
                "sketch", url, "-o", str(tmp_path / f"x{number}.sketch"), "--features", "16", "--bandwidth", "2",
                "--scheduler", cluster.address, "--storage-options", json.dumps(options),
                "--checkpoint", f"s3://{s3_bucket}/checkpoint-{number}",  # written by the worker from the options
            )  # fmt: skip
            assert result.code == 0, result.err
            configs = [config for found in client.run(_worker_s3_configs).values() for config in found]
            assert configs, "the worker read no S3 chunk"
            assert all(config == expected for config in configs), (configs, expected)
