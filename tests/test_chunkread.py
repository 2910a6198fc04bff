"""Whole stored chunks decompressed directly (streamrff.sources.chunkread), against the rows written."""

from __future__ import annotations

import dask.array as da
import numcodecs
import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff.errors import SourceError
from streamrff.sources.chunkread import ChunkRows, frame_content_size
from streamrff.sources.rows import open_source

ROWS = np.random.default_rng(3).standard_normal((1_003, 7)).astype(np.float32)


def write(path, rows: np.ndarray, chunks: tuple[int, int], **options) -> zarr.Array:
    stored = zarr.create_array(store=str(path), shape=rows.shape, chunks=chunks, dtype=rows.dtype, **options)
    stored[...] = rows
    return zarr.open_array(str(path), mode="r")


def test_chunk_rows_as_dask_to_zarr_writes_them_are_read_directly_and_exactly(tmp_path):
    path = str(tmp_path / "rows.zarr")
    da.to_zarr(da.from_array(ROWS, chunks=(100, 7)), path)  # 11 chunks, the last one of 3 rows

    source = open_source(path)

    assert ChunkRows(source.zarr_array).direct
    assert source.row_chunks == (100,) * 10 + (3,)
    np.testing.assert_array_equal(source.array.compute(), ROWS)
    np.testing.assert_array_equal(source.array.blocks[10].compute(), ROWS[1000:])


@pytest.mark.parametrize("dtype", ["float64", "int16", "uint8", "bool"])
def test_chunk_rows_read_every_native_numeric_dtype_directly(tmp_path, dtype):
    rows = (ROWS * 50).astype(dtype)
    stored = write(tmp_path / "rows.zarr", rows, (256, 7))

    reader = ChunkRows(stored)

    assert reader.direct
    np.testing.assert_array_equal(da.from_array(reader, chunks=reader.chunks).compute(), rows)


def test_chunk_rows_slices_other_than_whole_chunks_are_read_by_zarr(tmp_path):
    reader = ChunkRows(write(tmp_path / "rows.zarr", ROWS, (100, 7)))

    np.testing.assert_array_equal(reader[slice(37, 351), slice(0, 7)], ROWS[37:351])
    np.testing.assert_array_equal(reader[slice(100, 200), slice(2, 5)], ROWS[100:200, 2:5])
    np.testing.assert_array_equal(reader[slice(100, 200), slice(None)], ROWS[100:200])
    np.testing.assert_array_equal(reader[5], ROWS[5])


def test_chunk_rows_never_written_refused_unless_allowed_then_read_as_the_fill_value(tmp_path):
    stored = zarr.create_array(
        store=str(tmp_path / "rows.zarr"), shape=(30, 4), chunks=(10, 4), dtype="float32", fill_value=7.5
    )
    stored[0:10] = 1.0
    stored[20:30] = 2.0
    expected = np.concatenate([np.full((10, 4), 1.0), np.full((10, 4), 7.5), np.full((10, 4), 2.0)]).astype(np.float32)

    with pytest.raises(SourceError, match=r"Chunk 'c/1/0' of the zarr array at .*rows.zarr is missing"):
        open_source(str(tmp_path / "rows.zarr")).array.compute()
    array = open_source(str(tmp_path / "rows.zarr"), allow_missing_chunks=True).array

    np.testing.assert_array_equal(array.compute(), expected)


@pytest.mark.parametrize("options", [{"compressors": zarr.codecs.BloscCodec(cname="lz4")}, {"shards": (20, 4)}])
def test_chunk_rows_read_by_zarr_refuse_a_missing_chunk_too(tmp_path, options):
    stored = zarr.create_array(store=str(tmp_path / "rows.zarr"), shape=(40, 4), chunks=(10, 4), dtype="float32",
                               **options)  # fmt: skip
    stored[0:20] = 1.0  # the rows of the second shard (or chunks 2 and 3) were never written

    with pytest.raises(SourceError, match=r"Chunk 'c/[123]/0' of the zarr array at .* is missing"):
        open_source(str(tmp_path / "rows.zarr")).array.compute()


@pytest.mark.parametrize(
    "options",
    [
        {"compressors": zarr.codecs.BloscCodec(cname="lz4")},
        {"compressors": None},
        {"shards": (200, 7)},
        {"serializer": zarr.codecs.BytesCodec(endian="big")},
        {"zarr_format": 2},
    ],
    ids=["blosc", "uncompressed", "sharded", "big-endian", "zarr-v2"],
)
def test_chunk_rows_other_codecs_and_formats_are_read_by_zarr(tmp_path, options):
    stored = write(tmp_path / "rows.zarr", ROWS, (100, 7), **options)

    reader = ChunkRows(stored)

    assert not reader.direct
    np.testing.assert_array_equal(open_source(str(tmp_path / "rows.zarr")).array.compute(), ROWS)


def test_chunk_rows_split_across_columns_are_read_by_zarr(tmp_path):
    stored = write(tmp_path / "rows.zarr", ROWS, (100, 3))

    assert not ChunkRows(stored).direct
    np.testing.assert_array_equal(open_source(str(tmp_path / "rows.zarr")).array.compute(), ROWS)


def test_chunk_rows_damaged_chunk_fails_naming_the_chunk_and_the_fix(tmp_path):
    path = tmp_path / "rows.zarr"
    write(path, ROWS, (100, 7))
    chunk_file = path / "c" / "2" / "0"
    chunk_file.write_bytes(chunk_file.read_bytes()[:-40])

    with pytest.raises(
        SourceError, match=r"Cannot decode chunk 'c/2/0' of the zarr array at .*rows\.zarr.*Rewrite the array"
    ):
        srf.sketch(str(path), srf.RFF(n_features=16, bandwidth=1.0, seed=0))


def test_chunk_rows_from_object_storage_are_read_directly(s3_server, s3_bucket):
    url = f"s3://{s3_bucket}/rows.zarr"
    store = zarr.storage.FsspecStore.from_url(url, storage_options=s3_server.storage_options, read_only=False)
    zarr.create_array(store=store, shape=ROWS.shape, chunks=(250, 7), dtype="float32")[...] = ROWS

    source = open_source(url, storage_options=s3_server.storage_options)

    assert ChunkRows(source.zarr_array).direct
    np.testing.assert_array_equal(source.array.compute(), ROWS)


def test_chunk_rows_sketch_equals_the_in_memory_sketch(tmp_path):
    path = str(tmp_path / "rows.zarr")
    da.to_zarr(da.from_array(ROWS, chunks=(100, 7)), path)
    feature_map = srf.RFF(n_features=64, bandwidth=2.0, seed=1).fit(ROWS[:10])

    stored = srf.sketch(path, feature_map)
    in_memory = srf.sketch(ROWS, feature_map, chunk_rows=100)

    np.testing.assert_allclose(stored.feature_sum, in_memory.feature_sum, rtol=1e-12)


@pytest.mark.parametrize("n_bytes", [4, 200, 255, 256, 257, 4_000, 65_791, 65_792, 1_000_000])
def test_frame_content_size_is_the_size_numcodecs_decompresses(n_bytes):
    frame = numcodecs.Zstd().encode(np.random.default_rng(n_bytes).integers(0, 4, n_bytes, dtype=np.uint8))

    declared = frame_content_size(np.frombuffer(frame, np.uint8))

    assert declared == len(numcodecs.Zstd().decode(frame)) == n_bytes


def test_frame_content_size_refuses_what_is_not_a_zstd_frame():
    with pytest.raises(ValueError, match="not a zstd frame"):
        frame_content_size(np.frombuffer(b"PK\x03\x04 not zstd", np.uint8))


def test_chunk_rows_chunk_of_the_wrong_size_fails_instead_of_returning_unwritten_memory(tmp_path):
    path = tmp_path / "rows.zarr"
    write(path, ROWS, (100, 7))
    (path / "c" / "1" / "0").write_bytes(numcodecs.Zstd().encode(ROWS[:50].tobytes()))  # half a chunk

    with pytest.raises(SourceError, match=r"chunk 'c/1/0' .*holds 1400 bytes, not 2800"):
        open_source(str(path)).array.compute()


def without_declared_size(frame: bytes) -> bytes:
    """The same zstd frame with its content size left out of the header (RFC 8878 3.1.1.1): a
    window descriptor of 2^12 bytes instead of a single-segment frame's size field."""
    descriptor = frame[4]
    assert descriptor >> 5 & 1 and descriptor >> 6 == 1, "expected a single-segment frame with a 2-byte size"
    header = bytes([descriptor & 0b00011111]) + bytes([(12 - 10) << 3])
    return frame[:4] + header + frame[7:]


def test_chunk_rows_frame_without_declared_size_is_read_by_zarr(tmp_path):
    path = tmp_path / "rows.zarr"
    write(path, ROWS, (100, 7))
    frame = without_declared_size(numcodecs.Zstd().encode(ROWS[100:200].tobytes()))
    assert frame_content_size(np.frombuffer(frame, np.uint8)) is None
    (path / "c" / "1" / "0").write_bytes(frame)

    np.testing.assert_array_equal(open_source(str(path)).array.compute(), ROWS)


def test_chunk_rows_whole_chunk_keys_without_start_or_stop(tmp_path):
    reader = ChunkRows(write(tmp_path / "rows.zarr", ROWS, (100, 7)))

    np.testing.assert_array_equal(reader[slice(None, 100), slice(None)], ROWS[:100])
    np.testing.assert_array_equal(reader[slice(1000, None), slice(0, 7)], ROWS[1000:])
