"""The sketch file writer: one zarr v3 group per sketch, published atomically. No pickle.

The lower half of :mod:`streamrff.fileformat` (which documents the layout and
reads files back): it writes what a sketch stores (:class:`SketchParts`: kind,
map spec, fingerprint, arrays, scalar attributes) and knows nothing of the
sketch classes, so :mod:`streamrff.sketches` saves through it without importing
the reader, which needs the sketch classes (layering maps -> sketches ->
fileformat).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BytesCodec

from ._publish import publish, remove_path, staging_path
from .errors import SourceError, StreamRFFError
from .typing import MapSpec, PathOrURL, StorageOptions

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "DIGEST_ATTRIBUTE", "SketchParts", "write_sketch", "check_writable"]

FORMAT_NAME = "streamrff.sketch"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class SketchParts:
    """What one sketch file holds, independent of the sketch class that made it.

    Attributes
    ----------
    kind : str
        The sketch kind (``"mean"``, ``"landmark"``, ...).
    spec : dict
        The feature map's JSON spec.
    fingerprint : str
        The map's fingerprint.
    arrays : dict of str to ndarray
        Array path -> value; fitted map arrays under ``map/``.
    attrs : dict
        Kind-specific scalar attributes (count, norms, ...).
    """

    kind: str
    spec: MapSpec
    fingerprint: str
    arrays: dict[str, np.ndarray]
    attrs: dict[str, Any]


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local_path(path: str) -> Path:
    return Path(path[len("file://") :] if path.startswith("file://") else path)


def _checksum(array: np.ndarray) -> str:
    little = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
    return hashlib.sha256(little.tobytes()).hexdigest()


DIGEST_ATTRIBUTE = "attributes_digest"


def _json_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"attribute value {value!r} of type {type(value).__name__} is not JSON")


def _attributes_digest(attrs: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``attrs`` without the digest itself.

    Raises ValueError for values JSON cannot hold exactly (NaN, inf).
    """
    covered = {key: value for key, value in attrs.items() if key != DIGEST_ATTRIBUTE}
    text = json.dumps(
        covered, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=_json_value
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _write_group(store: Any, parts: SketchParts) -> None:
    root = zarr.open_group(store=store, mode="w", zarr_format=3)
    arrays = parts.arrays
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        little = value.astype(value.dtype.newbyteorder("<"), copy=False)
        chunks = (
            little.shape
            if little.ndim < 2
            else (max(1, min(little.shape[0], 2**22 // max(1, little.shape[1]))), little.shape[1])
        )
        target = root.create_array(
            name,
            shape=little.shape,
            dtype=little.dtype,
            chunks=chunks if all(chunks) else "auto",
            serializer=BytesCodec(endian="little"),
            fill_value=0,
        )
        if little.size:
            target[...] = little
    attrs = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "kind": parts.kind,
        "map": parts.spec,
        "fingerprint": parts.fingerprint,
        "checksums": {name: _checksum(np.asarray(value)) for name, value in arrays.items()},
    }
    attrs.update(parts.attrs)
    attrs = json.loads(json.dumps(attrs, default=_json_value))  # exactly what zarr.json will hold
    attrs[DIGEST_ATTRIBUTE] = _attributes_digest(attrs)
    root.attrs.update(attrs)  # last: marks the group complete


def write_sketch(
    parts: SketchParts, path_or_url: PathOrURL, storage_options: StorageOptions = None, overwrite: bool = False
) -> None:
    """Write a sketch's parts to a directory, a ``.zip`` file or an fsspec URL (``s3://...``).

    Parameters
    ----------
    parts : SketchParts
        What the sketch stores (see :meth:`streamrff.Sketch.save`).
    path_or_url : str or PathLike
        Local directory, path ending in ``.zip``, ``file://`` URL or any fsspec URL.
    storage_options : dict, optional
        Passed to fsspec for URLs (credentials, ``endpoint_url``). Never logged.
    overwrite : bool, default=False
        Replace an existing sketch at that place (the last writer wins whole).

    Raises
    ------
    FileExistsError
        If something exists at the target and ``overwrite`` is False: checked
        before writing and again, atomically, when the finished sketch is
        published (:func:`streamrff._publish.publish`), so of two concurrent
        saves to one local path exactly one succeeds. On object storage
        (``s3://``...) there is no no-replace rename: the existence check runs
        before the job and again just before writing, and an existing output
        is never deleted without ``overwrite``; two writers that pass the second
        check together can still both succeed, the last complete attributes
        winning.
    SourceError
        If the target cannot be written (e.g. a bucket that does not exist).
    """
    target = os.fspath(path_or_url)
    check_writable(target, storage_options, overwrite)
    if _is_url(target):
        _save_remote(parts, target, storage_options, overwrite)
        return
    path = _local_path(target)
    staging = staging_path(path)
    try:
        _write_group(zarr.storage.LocalStore(staging), parts)
        if path.suffix == ".zip":
            # zarr rewrites zarr.json when the attrs land last; a zip cannot replace an
            # entry, so build the group as a directory and pack it once.
            packed = staging.with_name(staging.name + ".zip")
            try:
                _zip_directory(staging, packed)
                publish(packed, path, overwrite)
            finally:
                packed.unlink(missing_ok=True)
            return
        publish(staging, path, overwrite)
    finally:
        remove_path(staging)


def _zip_directory(directory: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as packed:
        for file in sorted(directory.rglob("*")):
            if file.is_file():
                packed.write(file, file.relative_to(directory).as_posix())


def check_writable(path_or_url: PathOrURL, storage_options: StorageOptions = None, overwrite: bool = False) -> None:
    """Fail early if a sketch cannot be written at ``path_or_url`` (exists, or no parent directory).

    Call it before a long job so that nothing is computed for an output that
    would be refused.
    """
    target = os.fspath(path_or_url)
    if _is_url(target):
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
            exists = fs.exists(root.rstrip("/") + "/zarr.json")
        except Exception as error:  # fsspec backends raise many types
            raise SourceError(f"Cannot reach {target}: {type(error).__name__}: {error}") from error
        if exists and not overwrite:
            raise FileExistsError(
                f"{target} already holds a sketch. Choose another URL or pass overwrite=True (CLI: --overwrite)."
            )
        return
    path = _local_path(target)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists. Choose another path or pass overwrite=True (CLI: --overwrite).")
    if not path.parent.exists():
        raise SourceError(f"Cannot write {path}: directory {path.parent} does not exist. Create it first.")


def _save_remote(parts: SketchParts, url: str, storage_options: StorageOptions, overwrite: bool) -> None:
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        if fs.exists(root):
            if not overwrite:  # another writer got there since check_writable: never delete its output
                raise FileExistsError(
                    f"{url} already exists: another process wrote it while this job ran. Choose another "
                    "URL or pass overwrite=True (CLI: --overwrite)."
                )
            fs.rm(root, recursive=True)
        store = zarr.storage.FsspecStore.from_url(url, storage_options=storage_options, read_only=False)
        _write_group(store, parts)
    except (StreamRFFError, FileExistsError):
        raise
    except Exception as error:
        raise SourceError(f"Cannot write the sketch to {url}: {type(error).__name__}: {error}") from error
