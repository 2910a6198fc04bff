"""Checkpoints: per-chunk partial sketches of one job, tied to the source they were computed from.

A checkpoint folder (a local directory or an fsspec URL) holds one subfolder per
job (the job's name says the map fingerprint, the sketch kind and its options)::

    <checkpoint>/<job>/source.json                               what the partials were computed from
    <checkpoint>/<job>/rows-<start>-<stop>-<chunk identity>.zarr  one partial sketch per chunk

``source.json`` records the source's description and identity
(:attr:`streamrff.sources.rows.RowSource.identity`: for zarr, the array's location and
layout; for other data, its kind, width and dtype). A job refuses a folder made
for another source (:class:`~streamrff.errors.CheckpointMismatchError`, naming
both). Within one source, a partial is keyed by its row range and by the
identity of the chunk's rows: for zarr, a digest of the stored bytes of the
objects that hold them (S3's ETag, GCS's CRC-32C, else a CRC-32C of the bytes,
read and never decoded; an object never written, read as the fill value, is
recorded as absent: :meth:`~streamrff.sources.rows.RowSource.chunk_identities`);
for numpy rows, a content digest (:func:`streamrff.sources.rows.chunk_digest`); for other
dask arrays, the digest taken by the task as it reads the chunk. So a partial is
reused only for the same, unchanged rows: a chunk rewritten upstream is
recomputed, and the partial it supersedes is removed, even when the rewrite kept
the chunk's size and modification time (``cp -p``, ``rsync -t``, a restore).
Partials saved by versions that keyed zarr chunks by size and modification time
have names no digest gives: they are never read, their chunks are recomputed once
and the new partials replace them.

Local folders are locked while a job runs (``fcntl.flock`` on ``source.json``):
a second job on the same folder is refused, and staging files left by a job
that was killed (``.*.partial-*``) are removed when the next job takes the lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .._files.lock import LockHeld, exclusive_lock
from .._files.publish import publish_text, remove_path
from ..errors import CheckpointMismatchError, SketchFormatError
from ..sketches.base import load
from ..sources.rows import RowSource, chunk_digest
from ..typing import StorageOptions

__all__ = ["CHECKPOINT_FORMAT", "JobCheckpoint", "PartialSlot", "open_checkpoint", "chunk_identities", "load_partial"]

CHECKPOINT_FORMAT = "streamrff.checkpoint"
_PARTIAL = re.compile(r"rows-(\d{12})-(\d{12})-([0-9a-f]{16,64})\.zarr")
_STAGING = re.compile(r"^\..*\.partial-[0-9a-f]{32}")


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


class JobCheckpoint:
    """The partials of one job in one checkpoint folder, as found when the job started (:func:`open_checkpoint`)."""

    def __init__(self, folder: str, storage_options: StorageOptions, stored: set[str]) -> None:
        self.folder = folder
        self.storage_options = storage_options
        self.stored = stored

    def slot(self, start: int, stop: int, identity: str | None) -> PartialSlot:
        """Where the partial of rows ``start..stop-1`` goes; ``identity`` None: taken by the task that reads them."""
        prefix = f"rows-{start:012d}-{stop:012d}-"
        same_rows = tuple(sorted(name for name in self.stored if name.startswith(prefix)))
        return PartialSlot(self.folder, start, stop, identity, self.storage_options, same_rows)


@dataclasses.dataclass(frozen=True)
class PartialSlot:
    """One chunk's place in a checkpoint, small enough to ship with its task.

    ``same_rows`` are the partials of the same rows found when the job started:
    the one with this chunk's identity is reused, the others are superseded
    (their rows changed since) and removed once the new partial is saved.
    """

    folder: str
    start: int
    stop: int
    identity: str | None
    storage_options: StorageOptions = dataclasses.field(repr=False)
    same_rows: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return f"{self.folder}/{partial_name(self.start, self.stop, self.identity)}"

    @property
    def saved(self) -> bool:
        return self.identity is not None and partial_name(self.start, self.stop, self.identity) in self.same_rows

    def identified(self, identity: str) -> PartialSlot:
        return dataclasses.replace(self, identity=identity)

    def save(self, partial: Any) -> None:
        partial.save(self.path, storage_options=self.storage_options, overwrite=True)
        keep = partial_name(self.start, self.stop, self.identity)
        for name in self.same_rows:
            if name != keep:
                _remove(f"{self.folder}/{name}", self.storage_options)


def _remove(path: str, storage_options: StorageOptions) -> None:
    if _is_remote(path):
        import fsspec

        filesystem, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        with contextlib.suppress(FileNotFoundError):
            filesystem.rm(root, recursive=True)
    else:
        remove_path(_local(path))


def partial_name(start: int, stop: int, identity: str) -> str:
    return f"rows-{start:012d}-{stop:012d}-{identity[:32]}.zarr"


@contextlib.contextmanager
def open_checkpoint(
    checkpoint: str | os.PathLike[str], job: str, source: RowSource, storage_options: StorageOptions = None
) -> Iterator[JobCheckpoint]:
    """The job's folder in ``checkpoint``, checked against ``source`` (and locked, if local) while in use.

    Raises
    ------
    CheckpointMismatchError
        If the folder holds partials of another source, or another job is using it.
    """
    checkpoint = os.fspath(checkpoint)
    if not _is_remote(checkpoint):
        # Workers run in other directories: a relative path would land there, not here.
        checkpoint = os.path.abspath(_local(checkpoint))
    folder = checkpoint.rstrip("/") + "/" + job
    record = {"format": CHECKPOINT_FORMAT, "version": 1, "source": source.description, "identity": source.identity}
    if _is_remote(folder):
        import fsspec

        filesystem, root = fsspec.core.url_to_fs(folder, **(storage_options or {}))
        _check_record(_read_remote_record(filesystem, root), record, checkpoint)
        stored = {path.rstrip("/").rsplit("/", 1)[-1] for path in _listing(filesystem, root)}
        if "source.json" not in stored:
            filesystem.pipe(root + "/source.json", json.dumps(record).encode())
        yield JobCheckpoint(folder, storage_options, {name for name in stored if _PARTIAL.fullmatch(name)})
        return
    os.makedirs(folder, exist_ok=True)
    with _locked_record(Path(folder), record, checkpoint):
        stored = set(os.listdir(folder))
        for name in stored:
            if _STAGING.match(name):  # left by a job that was killed: no job holds the lock but us
                remove_path(Path(folder) / name)
        # A partial that is a link is never read (it could point anywhere): its chunk is recomputed.
        partials = {name for name in stored if _PARTIAL.fullmatch(name) and not os.path.islink(f"{folder}/{name}")}
        yield JobCheckpoint(folder, None, partials)


@contextlib.contextmanager
def _locked_record(folder: Path, record: dict[str, Any], checkpoint: str) -> Iterator[None]:
    path = folder / "source.json"
    if not path.exists():
        with contextlib.suppress(FileExistsError):  # another job may have written it meanwhile: checked below
            publish_text(path, json.dumps(record))
    try:
        with exclusive_lock(path) as handle:  # released by the kernel if this process is killed
            _check_record(_parse_record(handle.read(1 << 16), str(path)), record, checkpoint)
            yield
    except LockHeld as error:
        raise CheckpointMismatchError(
            f"Checkpoint folder {checkpoint} is in use by another running job on {record['source']}. Wait "
            "for it to finish, or pass another --checkpoint folder."
        ) from error


def _check_record(stored: dict[str, Any] | None, record: dict[str, Any], checkpoint: str) -> None:
    if stored is None or stored.get("identity") == record["identity"]:
        return
    raise CheckpointMismatchError(
        f"Checkpoint folder {checkpoint} holds partial sketches of {stored.get('source')!s}, not of "
        f"{record['source']}: reusing them would sketch the wrong rows. Pass another --checkpoint folder for "
        f"{record['source']}, or delete {checkpoint} to start over."
    )


def _parse_record(text: str | bytes, where: str) -> dict[str, Any]:
    try:
        stored = json.loads(text)
    except ValueError as error:
        raise SketchFormatError(f"{where} is not a checkpoint record (not JSON). Delete it to start over.") from error
    if not isinstance(stored, dict) or stored.get("format") != CHECKPOINT_FORMAT:
        raise SketchFormatError(f"{where} is not a streamrff checkpoint record. Delete it to start over.")
    return stored


def _read_remote_record(filesystem: Any, root: str) -> dict[str, Any] | None:
    try:
        return _parse_record(filesystem.cat_file(root + "/source.json", start=0, end=1 << 16), root + "/source.json")
    except FileNotFoundError:
        return None


def _listing(filesystem: Any, root: str) -> list[str]:
    try:
        return filesystem.ls(root, detail=False)
    except FileNotFoundError:
        return []


def chunk_identities(source: RowSource) -> Sequence[str | None]:
    """Each planned chunk's identity, where it is known before the chunk is read (zarr, numpy rows)."""
    stored = source.chunk_identities()
    if stored is not None:
        return stored
    if source.rows is not None:
        bounds = zip(source.row_offsets, source.row_chunks)
        return [chunk_digest(source.rows[start : start + size]) for start, size in bounds]
    return [None] * len(source.row_chunks)


def load_partial(path: str, storage_options: StorageOptions) -> Any:
    """A saved partial, as exactly what a job saved: refused without its attributes digest."""
    try:
        return load(path, storage_options=storage_options, require_digest=True)
    except SketchFormatError as error:
        raise SketchFormatError(
            f"{error} This is a checkpoint partial: delete it to recompute its chunk on the next run."
        ) from error
