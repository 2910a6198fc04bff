"""Reading files that may be hostile: regular files only, no symbolic links inside, every size capped first.

A sketch directory, a sketch zip, a checkpoint partial and a map file are read
through these helpers, so that no declared or stored size costs more than it
should before it has been checked:

- inside a local sketch, every directory and file is opened without following
  symbolic links (``O_NOFOLLOW`` from the sketch's own directory down, which the
  user named and may itself be a link), and only regular files are read: a chunk
  that is a link to ``/dev/zero`` or a FIFO is refused at once, not read until
  memory runs out or waited on forever;
- a metadata document (``zarr.json``) is read only up to :data:`MAX_JSON_BYTES`;
  in a zip archive the size an entry declares is checked before it is inflated
  (Python's zipfile never inflates past it);
- :func:`stored_size` gives a chunk's stored size without reading it, for the
  format's per-codec plausibility checks.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path
from typing import Any

import zarr
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from ..errors import SketchFormatError

__all__ = [
    "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "GuardedLocalStore", "GuardedZipStore", "read_regular_file", "stored_size",
    "check_json_depth",
]  # fmt: skip

#: Largest metadata document read (a group's zarr.json holds the map spec, checksums and names).
MAX_JSON_BYTES = 2**24
#: Nesting deeper than this in a document's attributes is refused (no file written by streamrff comes near).
MAX_JSON_DEPTH = 32


def check_json_depth(value: object, target: str, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a parsed JSON value nested deeper than ``limit`` (checked without recursion), naming ``what`` it is not.

    Examples
    --------
    >>> check_json_depth({"a": [1, {"b": 2}]}, "x", "a store")
    >>> deep: list = []
    >>> for _ in range(40):
    ...     deep = [deep]
    >>> check_json_depth(deep, "x", "a store")
    Traceback (most recent call last):
    ...
    streamrff.errors.SketchFormatError: x: the attributes nest deeper than 32 levels (not a store).
    """
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > limit:
            raise SketchFormatError(f"{target}: the attributes nest deeper than {limit} levels (not {what}).")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        pending.extend((child, depth + 1) for child in children)

_FILE_TYPES = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


def _file_type(mode: int) -> str:
    return _FILE_TYPES.get(stat.S_IFMT(mode), "not a regular file")


def _is_json_key(key: str) -> bool:
    return key == "zarr.json" or key.endswith("/zarr.json")


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, refusing devices, FIFOs, sockets and files above ``limit``.

    ``path`` itself may be a symbolic link (the user named it); what it points at
    must be a regular file. Opening does not block on a FIFO.

    Raises
    ------
    SketchFormatError
        Naming ``path`` and ``what`` was expected there.
    FileNotFoundError
        If nothing is at ``path``.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return _read_descriptor(descriptor, limit, f"{path}", what)
    finally:
        os.close(descriptor)


def _read_descriptor(descriptor: int, limit: int, name: str, what: str) -> bytes:
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        raise SketchFormatError(
            f"{name} is {_file_type(status.st_mode)}, not a regular file, so not {what}. Pass the file "
            "itself, not a device, pipe or socket."
        )
    if status.st_size > limit:
        raise SketchFormatError(f"{name} holds {status.st_size:,} bytes; {what} holds at most {limit:,}.")
    os.set_blocking(descriptor, True)
    pieces, size = [], 0
    while True:
        piece = os.read(descriptor, min(limit + 1 - size, 2**24))
        if not piece:
            return b"".join(pieces)
        pieces.append(piece)
        size += len(piece)
        if size > limit:  # grew while read
            raise SketchFormatError(f"{name} holds more than {limit:,} bytes; {what} holds at most {limit:,}.")


def _open_inside(root: Path, key: str) -> int:
    """A read-only descriptor of the regular file ``root/key``, following no link below ``root``."""
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise SketchFormatError(f"{root}: refused to read the store key {key!r} (not a plain relative path).")
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                opened = os.open(part, flags, dir_fd=directory)
            except OSError as error:
                # O_NOFOLLOW met a link: ELOOP, or ENOTDIR beside O_DIRECTORY on Linux, EMLINK on the BSDs.
                if error.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR) and _is_link(part, directory):
                    raise SketchFormatError(
                        f"{root / key}: a symbolic link inside the sketch ({'/'.join(parts[: depth + 1])}). A sketch, "
                        "checkpoint partial or map holds only regular files and directories, and no link inside "
                        "one is followed; replace the link by what it points to."
                    ) from None
                raise
            if last:
                return opened
            os.close(directory)
            directory = opened
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        os.close(directory)


def _is_link(name: str, directory: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=directory).st_mode)
    except OSError:
        return False


def _read_inside(root: Path, key: str, limit: int, byte_range: ByteRequest | None) -> bytes:
    descriptor = _open_inside(root, key)
    try:
        status = os.fstat(descriptor)
        name = str(root / key)
        if byte_range is None:
            return _read_descriptor(descriptor, limit, name, "a sketch file")
        if not stat.S_ISREG(status.st_mode):
            raise SketchFormatError(f"{name} is {_file_type(status.st_mode)}, not a regular file inside a sketch.")
        os.set_blocking(descriptor, True)
        size = status.st_size
        if isinstance(byte_range, RangeByteRequest):
            start, stop = byte_range.start, byte_range.end
        elif isinstance(byte_range, OffsetByteRequest):
            start, stop = byte_range.offset, size
        elif isinstance(byte_range, SuffixByteRequest):
            start, stop = max(0, size - byte_range.suffix), size
        else:
            raise TypeError(f"Unexpected byte_range, got {byte_range}.")
        stop = min(stop, size)
        return os.pread(descriptor, max(0, stop - start), start) if stop > start else b""
    finally:
        os.close(descriptor)


class GuardedLocalStore(zarr.storage.LocalStore):
    """A read-only LocalStore that reads regular files only, follows no link inside, and caps metadata."""

    def _limit(self, key: str) -> int:
        return MAX_JSON_BYTES if _is_json_key(key) else 2**62

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        prototype = prototype or default_buffer_prototype()
        if not self._is_open:
            await self._open()
        try:
            data = await asyncio.to_thread(_read_inside, self.root, key, self._limit(key), byte_range)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return prototype.buffer.from_bytes(data)

    async def get_partial_values(self, prototype: BufferPrototype, key_ranges: Any) -> list[Buffer | None]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._regular_size, key) is not None

    async def getsize(self, key: str) -> int:
        size = await asyncio.to_thread(self._regular_size, key)
        if size is None:
            raise FileNotFoundError(str(self.root / key))
        return size

    def _regular_size(self, key: str) -> int | None:
        """Stored size of ``key``; None if absent; SketchFormatError if a link or not a regular file."""
        try:
            descriptor = _open_inside(self.root, key)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        try:
            status = os.fstat(descriptor)
        finally:
            os.close(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise SketchFormatError(
                f"{self.root / key} is {_file_type(status.st_mode)}, not a regular file: a sketch holds only "
                "regular files (tampered or not a streamrff sketch)."
            )
        return status.st_size


class GuardedZipStore(zarr.storage.ZipStore):
    """A read-only ZipStore that refuses a metadata entry declaring more than :data:`MAX_JSON_BYTES`."""

    def _get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        if not self._is_open:
            self._sync_open()
        if _is_json_key(key):
            size = self._entry_size(key)
            if size is not None and size > MAX_JSON_BYTES:
                raise SketchFormatError(
                    f"{self.path}: entry {key} declares {size:,} bytes; a sketch's metadata holds at most "
                    f"{MAX_JSON_BYTES:,} (tampered or not a streamrff sketch)."
                )
        return super()._get(key, prototype, byte_range)

    def _entry_size(self, key: str) -> int | None:
        """The uncompressed size the archive declares for ``key`` (zipfile never inflates past it)."""
        if not self._is_open:
            self._sync_open()
        try:
            return int(self._zf.getinfo(key).file_size)
        except KeyError:
            return None


def stored_size(store: Any, key: str) -> int | None:
    """Bytes stored under ``key`` (for a zip entry: its declared uncompressed size), None if absent.

    Read from the file system, the zip directory or the object store's listing:
    the value itself is not read.
    """
    if isinstance(store, GuardedLocalStore):
        return store._regular_size(key)
    if isinstance(store, GuardedZipStore):
        return store._entry_size(key)
    from zarr.core.sync import sync

    try:
        return int(sync(store.getsize(key)))
    except FileNotFoundError:
        return None
