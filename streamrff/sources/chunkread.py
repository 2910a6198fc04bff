"""Whole stored chunks of a zarr array, decompressed straight into the rows a task gets.

A sketch pass reads each stored chunk once, whole. zarr's general read path costs about a third
more than the decompression itself for such a read: for a 10 000 x 768 float32 chunk as dask's
``to_zarr`` writes it (zstd), ``array[0:10000]`` takes 35 ms on one core where reading the file
takes 2 ms and decompressing it 25 ms; the rest is the codec pipeline's copies of the bytes and
of the decoded chunk into the output, and its hand-offs between threads. Read here, the same
chunk takes 30 ms.

:class:`ChunkRows` wraps a zarr array for ``dask.array.from_array``: a whole-chunk read of an
array whose only compression is zstd (zarr 3's default) fetches the stored bytes through the
array's own store (local files, object storage) and decompresses them into a new array; every
other read goes to zarr unchanged.

:func:`object_digest` names a stored object by its content, for checkpoints and the watch cursor:
the store's own content hash where it gives one, else a CRC-32C of its stored bytes (read, never
decoded).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from ..errors import SourceError

__all__ = ["ChunkRows", "frame_content_size", "object_digest", "stored_chunk_keys", "missing_chunk_message"]

#: Stores whose ``info`` gives a hash of the object's content (not of its size and time), by protocol: the field
#: and its name in a digest. S3's ETag is the MD5 of a single-part object's bytes (of its parts' MD5s for a
#: multipart one); GCS gives a CRC-32C.
_CONTENT_HASH_FIELDS = {"s3": ("ETag", "etag"), "s3a": ("ETag", "etag"), "gs": ("crc32c", "gcs-crc32c"),
                        "gcs": ("crc32c", "gcs-crc32c")}  # fmt: skip
_DIGEST_BLOCK = 1 << 23


def _crc_of_blocks() -> tuple[str, Any, Any]:
    """The CRC that digests stored bytes: CRC-32C, compiled (google-crc32c, a zarr dependency: ~14 GB/s on one
    core), else zlib's CRC-32 (~6 GB/s); its name in a digest, its start value and its ``extend(crc, block)``."""
    try:
        import google_crc32c

        if google_crc32c.implementation == "c":
            return "crc32c", 0, google_crc32c.extend
    except ImportError:  # pragma: no cover - zarr 3 requires it
        pass
    return "crc32", 0, lambda crc, block: zlib.crc32(block, crc)  # pragma: no cover - no compiled CRC-32C


_CRC_NAME, _CRC_START, _crc_extend = _crc_of_blocks()


def object_digest(filesystem: Any, path: str, info: dict[str, Any] | None = None) -> list[Any] | None:
    """What a stored object holds, as ``[size, digest]``; None if the object does not exist.

    The digest is the store's content hash where ``info`` gives one (``"etag:..."``
    on S3, ``"gcs-crc32c:..."`` on GCS: no data is read), else ``"crc32c:..."``,
    the CRC-32C of the object's stored bytes, read in blocks and never decoded
    (``"crc32:..."``, zlib's CRC-32, where no compiled CRC-32C is installed). A
    rewrite that keeps the object's size and modification time (``cp -p``,
    ``rsync -t``, a restore) changes it; a size and a time would not. An absent
    object (a chunk zarr reads as its fill value, which the array's metadata
    gives) is None.

    Examples
    --------
    >>> import os, tempfile, fsspec
    >>> path = os.path.join(tempfile.mkdtemp(), "c0")
    >>> with open(path, "wb") as file:
    ...     _ = file.write(b"stored bytes")
    >>> object_digest(fsspec.filesystem("file"), path)
    [12, 'crc32c:c48c07e0']
    >>> object_digest(fsspec.filesystem("file"), path + "-never-written") is None
    True
    """
    protocol = filesystem.protocol if isinstance(filesystem.protocol, str) else filesystem.protocol[0]
    field, name = _CONTENT_HASH_FIELDS.get(protocol, (None, None))
    if field is not None:
        try:
            info = info if info is not None else filesystem.info(path)
        except FileNotFoundError:
            return None
        if info.get(field):
            return [info.get("size"), f"{name}:{str(info[field]).strip(chr(34))}"]
    crc, size = _CRC_START, 0
    try:
        with filesystem.open(path, "rb") as stored:
            while block := stored.read(_DIGEST_BLOCK):
                crc, size = _crc_extend(crc, block), size + len(block)
    except FileNotFoundError:
        return None
    return [size, f"{_CRC_NAME}:{crc:08x}"]


def stored_chunk_keys(zarr_array: Any, row_start: int, row_stop: int) -> list[str]:
    """The keys of the stored objects (chunks, or shards) that hold rows ``row_start..row_stop-1``, all columns.

    Examples
    --------
    >>> import zarr
    >>> array = zarr.create_array(zarr.storage.MemoryStore(), shape=(10, 6), chunks=(4, 3), dtype="float32")
    >>> stored_chunk_keys(array, 3, 5)
    ['c/0/0', 'c/0/1', 'c/1/0', 'c/1/1']
    >>> stored_chunk_keys(zarr.create_array(zarr.storage.MemoryStore(), shape=(10,), chunks=(4,), dtype="f4"), 3, 9)
    ['c/0', 'c/1', 'c/2']
    """
    metadata = zarr_array.metadata
    grid = metadata.chunk_grid.chunk_shape if metadata.zarr_format == 3 else metadata.chunks
    row_blocks = range(row_start // int(grid[0]), (row_stop - 1) // int(grid[0]) + 1)
    if zarr_array.ndim == 1:  # a vector read as one column (targets)
        return [metadata.encode_chunk_key((row_block,)) for row_block in row_blocks]
    column_blocks = -(-int(zarr_array.shape[1]) // int(grid[1]))
    return [
        metadata.encode_chunk_key((row_block, column_block))
        for row_block in row_blocks
        for column_block in range(column_blocks)
    ]


def missing_chunk_message(key: str, zarr_array: Any, n_missing: int = 1, location: str | None = None) -> str:
    """One line: chunk ``key`` of ``zarr_array`` (at ``location``, default its store path) is absent from its
    store, and what to do."""
    others = f" (about {n_missing - 1:,} more chunks are missing too)" if n_missing > 1 else ""
    return (
        f"Chunk {key!r} of the zarr array at {location or zarr_array.store_path} is missing from its store{others}: "
        f"zarr would read it as the fill value ({zarr_array.fill_value}), rows that were never written. Copy the array "
        "completely, or, if its writer left chunks of only the fill value unstored (zarr's default), pass "
        "allow_missing_chunks=True (CLI --allow-missing-chunks) to read missing chunks as the fill value."
    )


def _direct_codec(zarr_array: Any) -> Any:
    """The numcodecs Zstd that decodes a stored chunk of ``zarr_array`` into its C-ordered bytes,
    or None when zarr must read it (another format, codec chain, byte order or column chunking)."""
    from zarr.codecs import BytesCodec, ZstdCodec

    metadata = zarr_array.metadata
    if metadata.zarr_format != 3 or zarr_array.ndim != 2 or zarr_array.chunks[1] != zarr_array.shape[1]:
        return None
    codecs = tuple(metadata.codecs)
    if len(codecs) != 2 or type(codecs[0]) is not BytesCodec or type(codecs[1]) is not ZstdCodec:
        return None
    dtype = np.dtype(zarr_array.dtype)
    native = "little" if np.little_endian else "big"
    endian = codecs[0].endian
    if dtype.kind not in "fiub" or (dtype.itemsize > 1 and (endian is None or endian.value != native)):
        return None
    import numcodecs

    return numcodecs.Zstd()


class ChunkRows:
    """A read-only, dask-shippable view of a 2-D zarr array that reads whole row chunks directly.

    Parameters
    ----------
    zarr_array : zarr.Array
        The stored rows. Whole-chunk reads of a zarr v3 array with the codecs ``bytes`` (native
        byte order) + ``zstd`` and one chunk across the columns are decompressed directly; any
        other read, or any other array, is read by zarr.
    allow_missing : bool, default=False
        Read a chunk absent from the store as the fill value (zarr's reading); by default it is a
        :class:`~streamrff.errors.SourceError` naming the chunk.
    check_stored : bool, default=True
        Reads that zarr does (other codecs, partial chunks) first ask the store whether each
        chunk they touch exists (one request per chunk on object storage); False when the
        store's listing was checked before the job.
    location : str, optional
        The array's path or URL, for messages (default: its store path).

    Attributes
    ----------
    shape, dtype, ndim, chunks
        Those of ``zarr_array``.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr, dask.array as da
    >>> from streamrff.sources.chunkread import ChunkRows
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.zarr")
    >>> X = np.arange(50, dtype="float32").reshape(10, 5)
    >>> zarr.create_array(path, shape=X.shape, chunks=(4, 5), dtype="float32")[:] = X
    >>> rows = ChunkRows(zarr.open_array(path, mode="r"))
    >>> rows.direct
    True
    >>> bool((da.from_array(rows, chunks=rows.chunks).compute() == X).all())
    True
    """

    def __init__(
        self, zarr_array: Any, allow_missing: bool = False, check_stored: bool = True, location: str | None = None
    ) -> None:
        self.zarr_array = zarr_array
        self.location = location
        self.allow_missing = bool(allow_missing)
        self.check_stored = bool(check_stored)
        self.shape = tuple(zarr_array.shape)
        self.dtype = np.dtype(zarr_array.dtype)
        self.ndim = len(self.shape)
        self.chunks = tuple(zarr_array.chunks)
        self._codec = _direct_codec(zarr_array)

    @property
    def direct(self) -> bool:
        """Whether whole row chunks are decompressed here rather than read by zarr."""
        return self._codec is not None

    def __dask_tokenize__(self) -> Any:
        from dask.base import tokenize

        return ("streamrff.ChunkRows", tokenize(self.zarr_array), self.allow_missing)

    def __getitem__(self, key: Any) -> np.ndarray:
        chunk = self._whole_chunk(key)
        rows = None if chunk is None else self._read_chunk(*chunk)
        if rows is not None:
            return rows
        if not self.allow_missing and self.check_stored:
            self._check_stored(key)
        return np.asarray(self.zarr_array[key])

    def _check_stored(self, key: Any) -> None:
        """Refuse a read by zarr that touches a chunk absent from the store (zarr would fill it)."""
        from zarr.core.sync import sync

        rows = key[0] if isinstance(key, tuple) else key
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            return  # not a read the engine does
        start, stop, _ = rows.indices(self.shape[0])
        for chunk_key in stored_chunk_keys(self.zarr_array, start, stop) if stop > start else ():
            if not sync((self.zarr_array.store_path / chunk_key).exists()):
                raise SourceError(missing_chunk_message(chunk_key, self.zarr_array, location=self.location))

    def _whole_chunk(self, key: Any) -> tuple[int, int] | None:
        """The row-chunk index that ``key`` selects whole and its row count, or None."""
        if self._codec is None or not isinstance(key, tuple) or len(key) != 2:
            return None
        rows, columns = key
        if not (isinstance(rows, slice) and isinstance(columns, slice)):
            return None
        if rows.step not in (None, 1) or (columns != slice(0, self.shape[1], None) and columns != slice(None)):
            return None
        chunk_rows = self.chunks[0]
        start, stop = rows.start or 0, self.shape[0] if rows.stop is None else rows.stop
        if start % chunk_rows or stop != min(start + chunk_rows, self.shape[0]) or start >= stop:
            return None
        return start // chunk_rows, stop - start

    def _read_chunk(self, index: int, n_rows: int) -> np.ndarray | None:
        """The first ``n_rows`` rows of stored chunk ``index``, or None for zarr to read (a zstd
        frame that does not declare its size, which numcodecs decodes by streaming)."""
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        key = self.zarr_array.metadata.encode_chunk_key((index, 0))
        stored = sync((self.zarr_array.store_path / key).get(prototype=default_buffer_prototype()))
        if stored is None:  # never written: zarr's fill value, as zarr reads it, if allowed
            if not self.allow_missing:
                raise SourceError(missing_chunk_message(key, self.zarr_array, location=self.location))
            return np.full((n_rows, self.shape[1]), self.zarr_array.fill_value, self.dtype)
        compressed = stored.as_numpy_array()
        chunk = np.empty(self.chunks, self.dtype)  # edge chunks are stored whole
        try:
            size = frame_content_size(compressed)
            if size is None:
                return None
            if size != chunk.nbytes:  # numcodecs would fill only the start of a larger output
                raise ValueError(f"the zstd frame holds {size} bytes, not {chunk.nbytes}")
            self._codec.decode(compressed, out=chunk)
        except Exception as error:  # numcodecs raises RuntimeError/ValueError for corrupt or short data
            raise SourceError(
                f"Cannot decode chunk {key!r} of the zarr array at {self.zarr_array.store_path}: "
                f"{type(error).__name__}: {error}. Expected zstd-compressed {self.dtype} rows of shape "
                f"{self.chunks}; the chunk file is damaged or was written by another tool. Rewrite the array."
            ) from error
        return chunk[:n_rows]


def frame_content_size(compressed: np.ndarray) -> int | None:
    """The decompressed size a zstd frame declares in its header (RFC 8878, section 3.1.1.1), or
    None when it declares none.

    Examples
    --------
    >>> import numcodecs, numpy as np
    >>> frame = numcodecs.Zstd().encode(np.zeros(1000, np.float32))
    >>> frame_content_size(np.frombuffer(frame, np.uint8))
    4000
    """
    if compressed.size < 5 or int.from_bytes(compressed[:4].tobytes(), "little") != 0xFD2FB528:
        raise ValueError("not a zstd frame (its magic number is missing)")
    descriptor = int(compressed[4])
    size_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    field = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if field == 0:
        return None
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    if compressed.size < start + field:
        raise ValueError("the zstd frame header is cut short")
    size = int.from_bytes(compressed[start : start + field].tobytes(), "little")
    return size + 256 if field == 2 else size
