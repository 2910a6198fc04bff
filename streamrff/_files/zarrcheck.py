"""A zarr array's stored chunks checked against its declared sizes before any chunk is read.

Shared by every file kind kept as a zarr group (sketches and checkpoint
partials in :mod:`streamrff.formats.sketch`, drift monitors): a file's metadata can
declare any shape, and zarr allocates the declared chunk shape before it decodes
a chunk, fills an absent chunk with the fill value, and trusts what a
decompressor produces. :func:`check_stored_chunks` compares every chunk's stored
object with the declared shape without reading its value (file system, zip
directory or object-store listing, through :func:`streamrff._files.bounded_read.stored_size`),
so a few-kilobyte file declaring gigabytes is refused before anything of that
size is allocated; :func:`read_by_chunk` then reads an array one chunk at a time.

Examples
--------
>>> import os, tempfile, zarr, numpy as np
>>> from streamrff._files.bounded_read import GuardedLocalStore
>>> path = os.path.join(tempfile.mkdtemp(), "g.zarr")
>>> group = zarr.open_group(path, mode="w", zarr_format=3)
>>> group.create_array("a", shape=(4, 3), chunks=(2, 3), dtype="f8", config={"write_empty_chunks": True})[...] = 1.0
>>> node = zarr.open_group(GuardedLocalStore(path, read_only=True), mode="r")["a"]
>>> check_stored_chunks(node, "a", path)
>>> os.remove(os.path.join(path, "a", "c", "1", "0"))
>>> check_stored_chunks(node, "a", "g.zarr")
Traceback (most recent call last):
...
streamrff.errors.SketchFormatError: g.zarr: array 'a' chunk c/1/0 is missing, ...
"""

from __future__ import annotations

import itertools
import zlib
from typing import Any

import numpy as np
from zarr.abc.store import RangeByteRequest
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from ..errors import SketchFormatError
from .bounded_read import stored_size

__all__ = ["check_stored_chunks", "read_by_chunk", "zstd_content_size", "largest_encoding"]


def zstd_content_size(header: bytes) -> int | None:
    """The decoded size a zstd frame header declares (RFC 8878 sec. 3.1.1.1), None if absent.

    Examples
    --------
    >>> zstd_content_size(b"not a zstd frame") is None
    True
    """
    if len(header) < 6 or header[:4] != b"\x28\xb5\x2f\xfd":
        return None
    descriptor = header[4]
    single_segment = bool(descriptor & 0x20)
    size_bytes = {0: 1 if single_segment else 0, 1: 2, 2: 4, 3: 8}[descriptor >> 6]
    start = 5 + (0 if single_segment else 1) + {0: 0, 1: 1, 2: 2, 3: 4}[descriptor & 0x03]
    field = header[start : start + size_bytes]
    if not size_bytes or len(field) != size_bytes:
        return None
    return int.from_bytes(field, "little") + (256 if size_bytes == 2 else 0)


def largest_encoding(n_bytes: int) -> int:
    """Most bytes a compressor may make of ``n_bytes`` it cannot shrink.

    zstd's bound is about n/256 + 64, deflate's n/1000 + 18, blosc's a 16-32 byte
    header; a stored chunk beyond this was not encoded from the declared chunk shape.

    Examples
    --------
    >>> largest_encoding(6400)
    7524
    """
    return n_bytes + n_bytes // 64 + 1024


def _chunk_header(node: Any, key: str, n_bytes: int) -> bytes:
    request = RangeByteRequest(0, n_bytes)
    value = sync((node.store_path / key).get(prototype=default_buffer_prototype(), byte_range=request))
    return b"" if value is None else value.to_bytes()


def _decoded_size(node: Any, key: str, compressor: Any, stored: int, crc_bytes: int, expected: int) -> int | None:
    """The size the stored chunk ``key`` decodes to, as its compressor's header says (or a bounded inflate)."""
    if isinstance(compressor, ZstdCodec):
        return zstd_content_size(_chunk_header(node, key, 18))  # None: a frame that hides its size
    if isinstance(compressor, BloscCodec):
        header = _chunk_header(node, key, 16)  # version, versionlz, flags, typesize, nbytes (u32 LE), ...
        return int.from_bytes(header[4:8], "little") if len(header) == 16 else None
    # gzip states its size only modulo 2**32, at the end: inflate, never past the expected size
    member = _chunk_header(node, key, stored)[: stored - crc_bytes]
    inflater = zlib.decompressobj(wbits=31)
    try:
        decoded = len(inflater.decompress(member, expected + 1))
    except zlib.error:
        return None
    return decoded if inflater.eof and not inflater.unused_data else None


def check_stored_chunks(
    node: Any,
    name: str,
    target: str,
    *,
    missing_allowed_bytes: int = 0,
    error: type[Exception] = SketchFormatError,
) -> None:
    """Check that each chunk of ``node`` is stored, and plausible for its codec, before any is read.

    A chunk without compressor must have exactly the chunk's bytes; a compressed
    one at most what its codec can make of them (:func:`largest_encoding`), and
    its zstd or blosc header must state exactly the chunk's decoded size (gzip
    chunks are inflated up to that size, no further, into no buffer). The stored
    size comes from the file system, the zip directory (the size an entry
    declares, past which Python's zipfile never inflates) or the object store,
    without reading the chunk.

    Parameters
    ----------
    node : zarr.Array
        The array, opened from a guarded store (:mod:`streamrff._files.bounded_read`).
    name : str
        Its path in the file, for messages.
    target : str
        The file, for messages.
    missing_allowed_bytes : int, default=0
        An absent chunk reads as the fill value; it is refused unless the whole
        array declares at most this many bytes (writers that skipped all-zero
        chunks of small arrays), so an absent chunk never costs more than that.
    error : type, default=SketchFormatError
        The exception raised (a file kind's own format error).

    Raises
    ------
    error
        Naming the file, the array, the chunk key and the sizes.
    """
    if node.size == 0:
        return
    expected = int(np.prod(node.chunks)) * np.dtype(node.dtype).itemsize
    compressors = list(node.compressors)
    crc_bytes = 4 * sum(isinstance(codec, Crc32cCodec) for codec in compressors)
    shrinking = [codec for codec in compressors if not isinstance(codec, Crc32cCodec)]
    if len(shrinking) > 1 or (shrinking and compressors.index(shrinking[0]) != 0):
        raise error(
            f"{target}: array {name!r} stacks compressors {[type(codec).__name__ for codec in compressors]}; its "
            "arrays have at most one, optionally followed by crc32c (tampered, or not written by streamrff)."
        )
    largest = largest_encoding(expected) + crc_bytes if shrinking else expected + crc_bytes
    missing_allowed = int(node.nbytes) <= missing_allowed_bytes
    grid = [range(-(-extent // step)) for extent, step in zip(node.shape, node.chunks)]
    for coords in itertools.product(*grid):
        key = node.metadata.encode_chunk_key(coords)
        stored = stored_size(node.store_path.store, f"{node.store_path.path}/{key}".lstrip("/"))
        if stored is None:
            if missing_allowed:
                continue
            raise error(
                f"{target}: array {name!r} chunk {key} is missing, so its {expected:,} declared bytes were never "
                f"written (array shape {node.shape}, chunks {node.chunks}); streamrff writes every chunk. Refused "
                "before reading: restore the file from its source (a partial copy?) or write it again."
            )
        if stored > largest or (not shrinking and stored != largest):
            raise error(
                f"{target}: array {name!r} chunk {key} stores {stored:,} bytes, but its declared chunk shape "
                f"{node.chunks} of {np.dtype(node.dtype)} encodes to {'at most ' if shrinking else ''}{largest:,} "
                "(tampered array metadata or chunk)."
            )
        if not shrinking:
            continue
        declared = _decoded_size(node, key, shrinking[0], stored, crc_bytes, expected)
        if declared != expected:
            found = "does not state its decoded size" if declared is None else f"decodes to {declared:,} bytes"
            raise error(
                f"{target}: array {name!r} chunk {key} {found}, but its declared chunk shape {node.chunks} of "
                f"{np.dtype(node.dtype)} needs {expected:,} (tampered array metadata or chunk)."
            )


def read_by_chunk(node: Any) -> np.ndarray:
    """Read ``node`` one chunk at a time, allocating the whole only after the first chunk decoded.

    A failing chunk (wrong size, bad compression) then leaves no other reads pending
    in zarr's event loop, which would otherwise print "Task was destroyed but it is
    pending!" and "Event loop is closed" noise at exit.
    """
    if node.size == 0 or node.ndim == 0:
        return np.asarray(node[...])
    grid = [range(0, extent, step) for extent, step in zip(node.shape, node.chunks)]
    value = None
    for corner in itertools.product(*grid):
        region = tuple(slice(start, start + step) for start, step in zip(corner, node.chunks))
        chunk = node[region]
        if value is None:  # allocate after the first chunk decoded: a wrong-sized one fails first
            value = np.empty(node.shape, dtype=node.dtype)
        value[region] = chunk
    return value
