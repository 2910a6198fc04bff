"""The sketch file writer: one zarr v3 group per sketch, published atomically. No pickle.

The lower half of :mod:`streamrff.formats.sketch` (which documents the layout and
reads files back): it writes what a sketch stores (:class:`SketchParts`: kind,
map spec, fingerprint, arrays, scalar attributes), digests and signs it, and
knows nothing of the sketch classes or the maps; the monitor and model files
sign with it too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BytesCodec

from ..errors import InputError, SourceError, StreamRFFError
from ..typing import MapSpec, PathOrURL, StorageOptions
from .publish import check_output_location, output_errors, publish, remove_path, staging_path

__all__ = [
    "FORMAT_NAME", "FORMAT_VERSION", "DIGEST_ATTRIBUTE", "SIGNATURE_ATTRIBUTE", "SketchParts", "write_sketch",
    "check_writable", "check_signing_key", "read_signing_key", "signature_value",
]  # fmt: skip

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
    return hashlib.sha256(memoryview(little.reshape(-1)).cast("B")).hexdigest()  # no copy of a 2 GiB moment


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


SIGNATURE_ATTRIBUTE = "signature"
SIGNATURE_ALGORITHM = "hmac-sha256"
#: Shortest signing key accepted (128 bits); HMAC-SHA256 keys up to 64 bytes are used as they are.
MIN_KEY_BYTES = 16
#: Largest key file read (a key is a few dozen bytes; this refuses /dev/zero and data files).
MAX_KEY_FILE_BYTES = 4096
#: The environment variable that holds a signing key when no key file is given (CLI).
SIGNING_KEY_ENVIRONMENT = "STREAMRFF_SIGNING_KEY"
#: Domain separation: a streamrff sketch signature is never valid as any other HMAC of the same key.
_SIGNATURE_CONTEXT = b"streamrff.sketch signature v1\n"


def check_signing_key(key: Any, name: str) -> bytes:
    """``key`` as bytes, if it is bytes of at least :data:`MIN_KEY_BYTES`; errors never show the key.

    Examples
    --------
    >>> len(check_signing_key(b"0123456789abcdef", "signing_key"))
    16
    >>> check_signing_key(b"short", "signing_key")
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: signing_key must be at least 16 bytes. Got 5 bytes; use a longer random key ...
    """
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise InputError(
            f"{name} must be bytes. Got {type(key).__name__}; read the key file in binary mode, or use "
            "streamrff.read_signing_key(path)."
        )
    key = bytes(key)
    if len(key) < MIN_KEY_BYTES:
        raise InputError(
            f"{name} must be at least {MIN_KEY_BYTES} bytes. Got {len(key)} bytes; use a longer random key "
            "(e.g. `head -c 32 /dev/urandom > sketch.key`)."
        )
    return key


def read_signing_key(path: str | os.PathLike[str] | None = None, allow_readable: bool = False) -> bytes | None:
    """Read a sketch signing key from a file, or from ``STREAMRFF_SIGNING_KEY`` when ``path`` is None.

    A key file is read as bytes, with trailing line breaks removed (so
    ``echo SECRET > key`` and ``STREAMRFF_SIGNING_KEY=SECRET`` give the same
    key); it must be a regular file of at most 4 KiB that only its owner can
    read or write (as ssh requires of private keys: ``chmod 600 FILE``). Keys
    never come from the command line, where other users could read them in the
    process list.

    Parameters
    ----------
    path : str or PathLike, optional
        The key file. None: the environment variable, or None if it is unset. A
        variable that is set but empty is an error, never "no key" (a template
        that forgot to fill it in would otherwise switch signing off silently).
    allow_readable : bool, default=False
        Accept a key file that group or others may read or write (CLI:
        ``--allow-readable-key``), e.g. a mounted secret whose mode you cannot set.

    Returns
    -------
    bytes or None

    Raises
    ------
    InputError
        If the file cannot be read, is not a small regular file, is open to group
        or others (unless ``allow_readable``), the variable is set but empty, or the
        key is shorter than 16 bytes. Messages name the file, never the key.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "site.key")
    >>> with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as handle:
    ...     _ = handle.write(b"a shared secret of 32 bytes.....\\n")
    >>> read_signing_key(path)
    b'a shared secret of 32 bytes.....'
    >>> os.chmod(path, 0o644)
    >>> read_signing_key(path)
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: The signing key file ... is open to group or others (mode 0644)....
    """
    if path is None:
        text = os.environ.get(SIGNING_KEY_ENVIRONMENT)
        if text is None:
            return None
        if not text.strip("\r\n"):
            raise InputError(
                f"${SIGNING_KEY_ENVIRONMENT} is set but empty. Expected a key of at least {MIN_KEY_BYTES} bytes; "
                f"set it to the key, or unset it (`unset {SIGNING_KEY_ENVIRONMENT}`) to neither sign nor verify."
            )
        return check_signing_key(os.fsencode(text).rstrip(b"\r\n"), f"the key in ${SIGNING_KEY_ENVIRONMENT}")
    name = os.fspath(path)
    try:
        # Symlinks are followed (mounted secrets are symlinks); O_NONBLOCK keeps a FIFO from hanging the open.
        descriptor = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            mode = os.fstat(descriptor).st_mode
            if not stat.S_ISREG(mode):
                raise InputError(
                    f"The signing key file {name} is not a regular file. Expected a small file holding the key."
                )
            if mode & 0o077 and not allow_readable:
                raise InputError(
                    f"The signing key file {name} is open to group or others (mode {stat.S_IMODE(mode):04o}). "
                    f"Expected a file only its owner can read: `chmod 600 {name}`, or pass --allow-readable-key "
                    "(allow_readable=True) for a mounted secret whose mode you cannot set."
                )
            data = os.read(descriptor, MAX_KEY_FILE_BYTES + 1)
        finally:
            os.close(descriptor)
    except OSError as error:
        raise InputError(f"Cannot read the signing key file {name}: {error.strerror}. Check the path.") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise InputError(
            f"The signing key file {name} is over {MAX_KEY_FILE_BYTES} bytes. Expected a small file holding the key."
        )
    return check_signing_key(data.rstrip(b"\r\n"), f"the key in {name}")


def signature_value(attrs: dict[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex) of a sketch's attributes digest and array checksums under ``key``.

    The digest is taken over every attribute except the stored digest and the
    signature itself, so it covers the format, kind, map spec, fingerprint,
    count, scalars and the checksums of every array: the signature vouches for
    every value in the file.
    """
    covered = {name: value for name, value in attrs.items() if name not in (DIGEST_ATTRIBUTE, SIGNATURE_ATTRIBUTE)}
    checksums = json.dumps(covered.get("checksums"), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    message = _SIGNATURE_CONTEXT + _attributes_digest(covered).encode("ascii") + b"\n" + checksums.encode("ascii")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def check_signature_record(
    stored: Any, expected: str, target: str, kind: str, how_to_sign: str, error: type[Exception]
) -> None:
    """Refuse a file whose signature record (``{"algorithm", "value"}``) is absent or is not ``expected``.

    Shared by sketch and model files: ``kind`` ("sketch", "model") and
    ``how_to_sign`` name them in the messages; ``error`` is the kind's own
    signature error. The comparison takes constant time.
    """
    if stored is None:
        raise error(
            f"{target} is not signed. Expected a {kind} signed with the verify key ({how_to_sign}); ask its "
            "sender to sign it."
        )
    value = stored.get("value") if isinstance(stored, dict) else None
    if (
        not isinstance(value, str)
        or stored.get("algorithm") != SIGNATURE_ALGORITHM
        or not hmac.compare_digest(value.encode("utf-8"), expected.encode("ascii"))
    ):
        raise error(
            f"{target}: the signature does not match the verify key (signed with another key, or edited after "
            f"signing). Expected a {kind} signed with this key; check that both sites use the same key file."
        )


def _write_group(store: Any, parts: SketchParts, signing_key: bytes | None = None) -> None:
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
            config={"write_empty_chunks": True},  # every chunk stored: the reader refuses absent ones
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
    if signing_key is not None:
        # Inside the digest, so readers that do not know signatures still verify the file.
        attrs[SIGNATURE_ATTRIBUTE] = {"algorithm": SIGNATURE_ALGORITHM, "value": signature_value(attrs, signing_key)}
    attrs[DIGEST_ATTRIBUTE] = _attributes_digest(attrs)
    root.attrs.update(attrs)  # last: marks the group complete


def write_sketch(
    parts: SketchParts,
    path_or_url: PathOrURL,
    storage_options: StorageOptions = None,
    overwrite: bool = False,
    signing_key: bytes | None = None,
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
    signing_key : bytes, optional
        Sign the sketch: an HMAC-SHA256 of its attributes digest and array
        checksums under this key (at least 16 bytes) is stored as the
        ``signature`` attribute; ``load(..., verify_key=key)`` checks it. The key
        itself is never written.

    Raises
    ------
    FileExistsError
        If something exists at the target and ``overwrite`` is False: checked
        before writing and again, atomically, when the finished sketch is
        published (:func:`streamrff._files.publish.publish`), so of two concurrent
        saves to one local path exactly one succeeds. On object storage
        (``s3://``...) there is no no-replace rename: the existence check runs
        before the job and again just before writing, and an existing output
        is never deleted without ``overwrite``; two writers that pass the second
        check together can still both succeed, the last complete attributes
        winning.
    SourceError
        If the target cannot be written (e.g. a bucket that does not exist).
    OutputError
        If a local target's file system is read-only, forbids writing, or lacks
        room for the arrays (checked before the first byte where ``statvfs``
        tells), or fills up during the write; the staging copy is removed first.
    """
    if signing_key is not None:
        signing_key = check_signing_key(signing_key, "signing_key")
    target = os.fspath(path_or_url)
    check_writable(target, storage_options, overwrite, required_bytes=sketch_file_bytes(parts, target))
    if _is_url(target):
        _save_remote(parts, target, storage_options, overwrite, signing_key)
        return
    path = _local_path(target)
    staging = staging_path(path)
    try:
        with output_errors(path):
            _write_local(parts, path, staging, overwrite, signing_key)
    finally:
        remove_path(staging)


def sketch_file_bytes(parts: SketchParts, target: str = "") -> int:
    """Bytes the arrays of ``parts`` take on disk (twice for a ``.zip``, packed from a staging directory)."""
    data = sum(np.asarray(value).nbytes for value in parts.arrays.values())
    return 2 * data if target.endswith(".zip") else data


def _write_local(parts: SketchParts, path: Path, staging: Path, overwrite: bool, signing_key: bytes | None) -> None:
    _write_group(zarr.storage.LocalStore(staging), parts, signing_key)
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


def _zip_directory(directory: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as packed:
        for file in sorted(directory.rglob("*")):
            if file.is_file():
                packed.write(file, file.relative_to(directory).as_posix())


def check_writable(
    path_or_url: PathOrURL, storage_options: StorageOptions = None, overwrite: bool = False, required_bytes: int = 0
) -> None:
    """Fail early if a sketch cannot be written at ``path_or_url``.

    Refuses an existing output (unless ``overwrite``), a missing parent
    directory, and, for local paths, a folder that cannot take a new file
    (read-only, no permission) or lacks ``required_bytes`` of free space where
    the file system reports it (:func:`streamrff._files.publish.check_output_location`).
    Call it before a long job so that nothing is computed for an output that
    would be refused.

    Raises
    ------
    FileExistsError, SourceError, OutputError
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
    check_output_location(path, required_bytes)


#: Name of the small object, beside a sketch group on object storage, that says which save last
#: touched it and whether that save finished: ``{"write": id, "state": "writing" | "complete"}``.
WRITE_STATE_SUFFIX = ".streamrff-write"


def write_state_path(root: str) -> str:
    """``bucket/dir/.name.streamrff-write`` for the group ``bucket/dir/name`` (outside the group's prefix)."""
    parent, _, name = root.rstrip("/").rpartition("/")
    return f"{parent}/.{name}{WRITE_STATE_SUFFIX}" if parent else f".{name}{WRITE_STATE_SUFFIX}"


def _save_remote(
    parts: SketchParts, url: str, storage_options: StorageOptions, overwrite: bool, signing_key: bytes | None
) -> None:
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        exists = fs.exists(root)
        if exists and not overwrite:  # another writer got there since check_writable: never delete its output
            raise FileExistsError(
                f"{url} already exists: another process wrote it while this job ran. Choose another "
                "URL or pass overwrite=True (CLI: --overwrite)."
            )
        # Object stores have no rename: announce the write before touching the group, so that a
        # reader that meets the half-written group (or sees it change under it) can tell.
        state_path, write_id = write_state_path(root), uuid.uuid4().hex
        fs.pipe_file(state_path, json.dumps({"write": write_id, "state": "writing"}).encode("ascii"))
        if exists:
            fs.rm(root, recursive=True)
        store = zarr.storage.FsspecStore.from_url(url, storage_options=storage_options, read_only=False)
        _write_group(store, parts, signing_key)
        fs.pipe_file(state_path, json.dumps({"write": write_id, "state": "complete"}).encode("ascii"))
    except (StreamRFFError, FileExistsError):
        raise
    except Exception as error:
        raise SourceError(f"Cannot write the sketch to {url}: {type(error).__name__}: {error}") from error
