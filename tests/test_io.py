"""Data sources as row-chunked dask arrays: numpy, dask, xarray, local and s3 zarr."""

from __future__ import annotations

import os

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from streamrff.errors import InputError, SourceError
from streamrff.sources.rows import as_row_chunked, describe_source, open_zarr_array

X = np.random.default_rng(0).standard_normal((1_000, 6)).astype(np.float32)


def write_s3_zarr(url: str, rows: np.ndarray, chunk_rows: int, storage_options: dict) -> None:
    store = zarr.storage.FsspecStore.from_url(url, storage_options=storage_options, read_only=False)
    stored = zarr.create_array(
        store=store, shape=rows.shape, chunks=(chunk_rows, rows.shape[1]), dtype=rows.dtype, zarr_format=3
    )
    stored[...] = rows


def assert_whole_rows(array: da.Array, rows_per_chunk: int) -> None:
    assert array.chunks[1] == (array.shape[1],)
    assert set(array.chunks[0][:-1]) <= {rows_per_chunk}


@pytest.mark.parametrize("chunk_rows", [None, 64, 1_000])
def test_as_row_chunked_numpy_keeps_values_and_whole_rows(chunk_rows):
    array = as_row_chunked(X, chunk_rows=chunk_rows)

    np.testing.assert_array_equal(array.compute(), X)
    assert array.chunks[1] == (6,)
    if chunk_rows:
        assert_whole_rows(array, chunk_rows)


def test_as_row_chunked_dask_split_by_columns_becomes_whole_rows():
    source = da.from_array(X, chunks=(300, 2))

    array = as_row_chunked(source)

    assert array.chunks == ((300, 300, 300, 100), (6,))
    np.testing.assert_array_equal(array.compute(), X)


def test_as_row_chunked_zarr_keeps_its_chunking(tmp_zarr):
    path = tmp_zarr(X, 128)
    array = as_row_chunked(path)
    rechunked = as_row_chunked(path, chunk_rows=500)

    assert_whole_rows(array, 128)
    assert rechunked.chunks == ((500, 500), (6,))
    np.testing.assert_array_equal(array.compute(), X)
    np.testing.assert_array_equal(rechunked.compute(), X)


def test_as_row_chunked_reads_relative_path_from_any_directory(tmp_zarr, tmp_path, monkeypatch):
    # Dask workers run in their own directory; a relative path opened here must still read
    # this data there (zarr reads chunks it cannot find as fill values, silently).
    tmp_zarr(X, 100, name="rel.zarr")
    monkeypatch.chdir(tmp_path)
    array = as_row_chunked("rel.zarr")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    np.testing.assert_array_equal(array.compute(), X)


def test_as_row_chunked_file_url(tmp_zarr):
    path = tmp_zarr(X, 100)
    np.testing.assert_array_equal(as_row_chunked("file://" + path).compute(), X)


@pytest.mark.parametrize("sample_dim, layout", [(None, X), ("sample", X.T)])
def test_as_row_chunked_dataarray_uses_sample_dim(sample_dim, layout):
    dims = ("sample", "feature") if sample_dim is None else ("feature", "sample")
    source = xr.DataArray(layout, dims=dims).chunk({dims[0]: 250})

    array = as_row_chunked(source, sample_dim=sample_dim, chunk_rows=200)

    np.testing.assert_array_equal(array.compute(), X)
    assert_whole_rows(array, 200)


def test_as_row_chunked_dataarray_errors():
    with pytest.raises(InputError, match="sample_dim 'time' is not a dimension"):
        as_row_chunked(xr.DataArray(X, dims=("sample", "feature")), sample_dim="time")
    with pytest.raises(InputError, match="2-D DataArray"):
        as_row_chunked(xr.DataArray(np.ones((2, 3, 4)), dims=("a", "b", "c")))


@pytest.mark.parametrize(
    "values, message",
    [
        (np.arange(6).astype("datetime64[s]").reshape(3, 2), "real numbers. Got dtype datetime64"),
        (np.array([["x", "y"], ["z", "w"]]), "real numbers"),
        (np.ones((3, 2), dtype=np.complex64), "real numbers"),
        (np.array([[1, "a"]], dtype=object), "object array"),
        (np.ones(5), "Got 1-D data"),
        (np.ones((0, 3)), "at least 1 row"),
    ],
    ids=["datetime", "string", "complex", "object", "1-D", "empty"],
)
def test_as_row_chunked_rejects(values, message):
    with pytest.raises(InputError, match=message):
        as_row_chunked(values)


@pytest.mark.parametrize("dtype", [bool, np.int16, np.float64])
def test_as_row_chunked_accepts_real_dtypes(dtype):
    values = (X > 0).astype(dtype)
    np.testing.assert_array_equal(as_row_chunked(values).compute(), values)


@pytest.mark.parametrize("chunk_rows", [0, -5, 2.5, True])
def test_as_row_chunked_rejects_bad_chunk_rows(chunk_rows):
    with pytest.raises(InputError, match="chunk_rows"):
        as_row_chunked(X, chunk_rows=chunk_rows)


def test_as_row_chunked_rejects_other_objects():
    with pytest.raises(InputError, match="Cannot read dict"):
        as_row_chunked({"a": 1})


def test_open_zarr_array_missing_path(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        open_zarr_array(str(tmp_path / "missing.zarr"))


def test_open_zarr_array_group_with_one_or_more_arrays(tmp_path):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("features", data=X, chunks=(100, 6))
    group.create_array("labels", data=np.arange(1_000), chunks=(100,))  # 1-D: not a candidate

    np.testing.assert_array_equal(open_zarr_array(str(tmp_path / "g.zarr"))[...], X)

    group.create_array("other", data=X[:10], chunks=(5, 6))
    with pytest.raises(SourceError, match=r"2 2-D arrays \(features, other\).*Name the array"):
        open_zarr_array(str(tmp_path / "g.zarr"))
    np.testing.assert_array_equal(open_zarr_array(str(tmp_path / "g.zarr/other"))[...], X[:10])


def test_open_zarr_array_from_s3(s3_server, s3_bucket):
    url = f"s3://{s3_bucket}/data.zarr"
    write_s3_zarr(url, X, 250, s3_server.storage_options)

    array = as_row_chunked(url, storage_options=s3_server.storage_options)

    assert array.chunks[0] == (250, 250, 250, 250)
    np.testing.assert_array_equal(array.compute(), X)


def test_open_zarr_array_s3_errors_never_show_storage_options(s3_server, s3_bucket):
    options = dict(s3_server.storage_options, secret="hunter2-TOPSECRET-value")
    for url in (f"s3://{s3_bucket}/missing.zarr", "s3://streamrff-no-such-bucket/x.zarr"):
        with pytest.raises(SourceError) as caught:
            as_row_chunked(url, storage_options=options)
        assert url in str(caught.value)
        assert "TOPSECRET" not in str(caught.value)


def test_describe_source_is_short_and_secret_free():
    assert describe_source("s3://bucket/x.zarr") == "s3://bucket/x.zarr"
    assert describe_source(X) == "ndarray of shape (1000, 6)"
    assert describe_source(os.path.join("a", "b")) == os.path.join("a", "b")
