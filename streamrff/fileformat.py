"""The sketch file format: one zarr v3 group per sketch. No pickle.

Layout (version 1)::

    <sketch>/zarr.json              group; attrs below
    <sketch>/<array>                e.g. feature_sum (D,) float64, moment (D, D) float64
    <sketch>/map/<array>            fitted map arrays not given by the spec (K-JL landmarks)

Group attributes::

    format            "streamrff.sketch"
    version           1
    kind              "mean" | "landmark" | ...
    map               the feature map's JSON spec
    fingerprint       sha256 of the spec and the map's parameters
    count             rows sketched
    checksums         {array path: sha256 of its little-endian C-order bytes}
    ...               kind-specific scalars (squared_norm_sum, n_invalid, moments)
    attributes_digest sha256 of the canonical JSON of every other attribute (sorted
                      keys, no spaces, ASCII, no NaN); it covers the checksums, so
                      every saved byte that carries a value is verified on load

Files written before the attributes digest (older streamrff, still version 1)
load with a :class:`~streamrff.errors.SketchFormatWarning`: their arrays are
verified, their scalar attributes (count, norms) cannot be. ``load(...,
require_digest=True)`` refuses them instead, and checkpoint partials are always
loaded that way (delete a refused partial to recompute its chunk). Saving such a
sketch again adds the digest. The version stays 1 because a reader that does not
know the digest still reads these files correctly.

Arrays are little-endian with an explicit ``bytes`` codec. The attributes are
written last, so an interrupted write to object storage leaves a group that
:func:`load` rejects as incomplete; local directories and zip files are written
under a temporary name and published in one step that never replaces an
existing output unless asked to (:func:`publish`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.errors import ContainsArrayError

from ._publish import publish, remove_path, staging_path
from .errors import SketchFormatError, SketchFormatWarning, SourceError, StreamRFFError
from .sketches import Sketch
from .typing import PathOrURL, StorageOptions

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "save_sketch", "load", "check_writable", "check_map_cost", "publish"]

FORMAT_NAME = "streamrff.sketch"
FORMAT_VERSION = 1


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


def _check_attributes_digest(attrs: dict[str, Any], target: str, require_digest: bool) -> None:
    stored = attrs.get(DIGEST_ATTRIBUTE)
    if stored is None:
        if require_digest:
            raise SketchFormatError(
                f"{target} has no attributes digest, so its scalar attributes (count, norms) cannot be "
                "verified. Expected a sketch written by this streamrff; load it with require_digest=False "
                "and save it again to add one (or delete a checkpoint partial to recompute it)."
            )
        warnings.warn(
            f"{target} was written before attribute digests: its arrays are verified, but its scalar "
            "attributes (count, norms) are not verified. Save it again (e.g. `streamrff merge OLD -o NEW`) to add one.",
            SketchFormatWarning,
            stacklevel=5,  # the caller of load(), through _load_once and _read_sketch
        )
        return
    if not _digest_matches(attrs):
        raise _digest_error(target)


def _digest_matches(attrs: dict[str, Any]) -> bool:
    try:
        return attrs.get(DIGEST_ATTRIBUTE) == _attributes_digest(attrs)
    except (TypeError, ValueError):  # NaN or values JSON cannot hold
        return False


def _digest_error(target: str) -> SketchFormatError:
    return SketchFormatError(
        f"{target}: the group attributes do not match their digest (tampered or corrupt). Expected "
        "the attributes as saved; restore the file from its source or sketch the data again."
    )


def _write_group(store: Any, sketch: Sketch) -> None:
    root = zarr.open_group(store=store, mode="w", zarr_format=3)
    arrays = dict(sketch._arrays())
    arrays.update({f"map/{name}": value for name, value in sketch.state_arrays().items()})
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
        "kind": sketch.kind,
        "map": sketch.spec,
        "fingerprint": sketch.fingerprint,
        "checksums": {name: _checksum(np.asarray(value)) for name, value in arrays.items()},
    }
    attrs.update(sketch._attrs())
    attrs = json.loads(json.dumps(attrs, default=_json_value))  # exactly what zarr.json will hold
    attrs[DIGEST_ATTRIBUTE] = _attributes_digest(attrs)
    root.attrs.update(attrs)  # last: marks the group complete


def save_sketch(
    sketch: Sketch, path_or_url: PathOrURL, storage_options: StorageOptions = None, overwrite: bool = False
) -> None:
    """Write ``sketch`` to a directory, a ``.zip`` file or an fsspec URL (``s3://...``).

    Parameters
    ----------
    sketch : Sketch
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
    if not isinstance(sketch, Sketch):
        raise SketchFormatError(f"save_sketch writes sketches. Got {type(sketch).__name__}.")
    target = os.fspath(path_or_url)
    check_writable(target, storage_options, overwrite)
    if _is_url(target):
        _save_remote(sketch, target, storage_options, overwrite)
        return
    path = _local_path(target)
    staging = staging_path(path)
    try:
        _write_group(zarr.storage.LocalStore(staging), sketch)
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


def _save_remote(sketch: Sketch, url: str, storage_options: StorageOptions, overwrite: bool) -> None:
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
        _write_group(store, sketch)
    except (StreamRFFError, FileExistsError):
        raise
    except Exception as error:
        raise SourceError(f"Cannot write the sketch to {url}: {type(error).__name__}: {error}") from error


def _open_store(target: str, storage_options: StorageOptions) -> Any:
    if _is_url(target):
        return zarr.storage.FsspecStore.from_url(target, storage_options=storage_options, read_only=True)
    path = _local_path(target)
    if not path.exists():
        raise SketchFormatError(f"No sketch at {path}: the path does not exist.")
    if path.is_file():
        # ZipStore opens lazily: a non-zip file would fail inside zarr and then again in
        # close(), hiding the cause behind "'ZipStore' object has no attribute '_zf'".
        if not zipfile.is_zipfile(path):
            raise SketchFormatError(
                f"{path} is a file but not a zip archive, so not a streamrff sketch. Expected a "
                "sketch directory or .zip written by Sketch.save or `streamrff sketch`."
            )
        return zarr.storage.ZipStore(path, mode="r")
    return zarr.storage.LocalStore(path, read_only=True)


def load(path_or_url: PathOrURL, storage_options: StorageOptions = None, require_digest: bool = False) -> Sketch:
    """Read a sketch written by :meth:`Sketch.save`, validating everything.

    Checks the format name and version, the kind, the map spec (rebuilt and
    re-fingerprinted), every array's shape, dtype, finiteness and checksum, and
    the scalar attributes, and the attributes digest. Array sizes, codecs and
    chunking, declared shapes against the map spec and attributes (no array
    larger than the square of their largest size), the decoded size each stored
    zstd chunk declares, and the size of the map to rebuild, are checked before
    any data is read or any parameter drawn, so a tampered file fails fast
    instead of allocating gigabytes; large arrays are read only after the
    attributes digest matched. Arrays are read one chunk at a time, so a failing
    chunk leaves no background reads behind.

    A local directory replaced by a concurrent save while it is read is read
    again (the save publishes a complete directory in one step), so a load never
    mixes two versions.

    Parameters
    ----------
    path_or_url : str or PathLike
        Directory, ``.zip`` file, ``file://`` or fsspec URL.
    storage_options : dict, optional
        fsspec options for URLs. Never logged.
    require_digest : bool, default=False
        Refuse a file without an attributes digest (written by an older streamrff)
        instead of loading it with a :class:`SketchFormatWarning`.

    Returns
    -------
    Sketch

    Raises
    ------
    SketchFormatError
        If the place is missing, unreadable, not a sketch, incomplete, tampered
        with, or written by a newer format version.

    Examples
    --------
    >>> import numpy as np, tempfile, os, streamrff as srf
    >>> s = srf.sketch_array(np.ones((3, 2)), srf.RFF(n_features=8, bandwidth=1.0))
    >>> path = os.path.join(tempfile.mkdtemp(), "s.zarr")
    >>> s.save(path)
    >>> srf.load(path) == s
    True
    """
    target = os.fspath(path_or_url)
    if not isinstance(require_digest, (bool, np.bool_)):
        raise SketchFormatError(f"require_digest must be True or False. Got {require_digest!r}.")
    for _ in range(_CONCURRENT_SAVE_ATTEMPTS):
        before = _directory_identity(target)
        try:
            return _load_once(target, storage_options, bool(require_digest))
        except SketchFormatError:
            # A save with overwrite=True swapped the directory while it was read, so the
            # files read may mix both versions: read the new one again. A failure on a
            # directory that stayed in place is the file's own.
            if before is None or _directory_identity(target) == before:
                raise
    raise SketchFormatError(
        f"{target} is being written by another process: it was replaced {_CONCURRENT_SAVE_ATTEMPTS} times "
        "while being read. Retry when the save has finished."
    )


#: Reads of a local sketch directory that another process replaced meanwhile, before giving up.
_CONCURRENT_SAVE_ATTEMPTS = 20


def _directory_identity(target: str) -> tuple[int, int, int] | None:
    """(device, inode, ctime) of a local sketch directory, None for other places.

    A save with overwrite=True renames a new directory into place, so the identity
    changes; the ctime tells a new directory from an old one whose inode was reused.
    """
    if _is_url(target):
        return None
    try:
        status = os.stat(_local_path(target))
    except OSError:
        return None
    if not os.path.isdir(_local_path(target)):
        return None  # zip files are replaced whole and read through one open handle
    return status.st_dev, status.st_ino, status.st_ctime_ns


def _load_once(target: str, storage_options: StorageOptions, require_digest: bool) -> Sketch:
    try:
        store = _open_store(target, storage_options)
        try:
            return _read_sketch(store, target, require_digest)
        finally:
            if isinstance(store, zarr.storage.ZipStore):
                store.close()
    except StreamRFFError as error:
        if isinstance(error, SketchFormatError):
            raise
        raise SketchFormatError(f"{target} is not a valid streamrff sketch: {error}") from error
    except Exception as error:  # anything zarr, json or fsspec raise on a malformed file
        raise SketchFormatError(
            f"Cannot read a streamrff sketch from {target}: {type(error).__name__}: {error}"
        ) from error


#: Largest array a version-1 sketch holds (a 16384 x 16384 float64 second moment, 2 GiB).
#: load() refuses larger declared shapes before reading, so a tampered few-kB file cannot make
#: it allocate and fill gigabytes.
MAX_ARRAY_ELEMENTS = 2**28
#: save_sketch writes 1-D arrays as one chunk and 2-D arrays in row blocks of about 2**22
#: elements; a file declaring far more chunks (e.g. one per element) was not written by it, and
#: reading it would take one store request per chunk.
_MIN_ELEMENTS_PER_CHUNK = 2**21
_COMPRESSORS = (ZstdCodec, GzipCodec, BloscCodec, Crc32cCodec)


def _check_array_metadata(node: Any, name: str, target: str) -> None:
    """Refuse arrays whose metadata no sketch writer produces, before any data is read."""
    dtype = np.dtype(node.dtype)
    if dtype.kind not in "biuf" or node.ndim > 2:
        raise SketchFormatError(
            f"{target}: array {name!r} has dtype {dtype} and {node.ndim} dimensions; sketch arrays are "
            "numeric with at most 2 dimensions (tampered or not a streamrff sketch)."
        )
    if (
        not isinstance(node.serializer, BytesCodec)
        or node.filters
        or not all(isinstance(codec, _COMPRESSORS) for codec in node.compressors)
    ):
        # Other codecs (vlen-bytes, sharding, numcodecs filters) are never written and would
        # trust sizes stored in the chunk bytes.
        codecs = [type(codec).__name__ for codec in (*node.filters, node.serializer, *node.compressors)]
        raise SketchFormatError(
            f"{target}: array {name!r} uses codecs {codecs}; sketch arrays use the plain 'bytes' "
            "codec with an optional zstd, gzip or blosc compressor (tampered or not a streamrff sketch)."
        )
    if node.size > MAX_ARRAY_ELEMENTS:
        raise SketchFormatError(
            f"{target}: array {name!r} declares shape {node.shape} ({node.size:,} elements); a sketch "
            f"array holds at most {MAX_ARRAY_ELEMENTS:,} (tampered or not a streamrff sketch)."
        )
    if node.nchunks > 1 + -(-node.size // _MIN_ELEMENTS_PER_CHUNK):
        raise SketchFormatError(
            f"{target}: array {name!r} of shape {node.shape} declares {node.nchunks:,} chunks of shape "
            f"{node.chunks}; sketches are written in few large chunks (tampered or not a streamrff sketch)."
        )


#: Map spec fields that size the random parameters a map regenerates on load.
_SPEC_SIZE_KEYS = ("n_features_in", "n_features", "n_components", "n_landmarks", "inner_width", "k")


def _check_spec_sizes(spec: dict[str, Any], shapes: dict[str, tuple[int, ...]], target: str) -> None:
    """Refuse a map spec that would cost far more to rebuild than the sketch it describes.

    Maps regenerate their random parameters from the spec (K-JL even eagerly, before any shape
    check), so a tampered size field could make load() draw gigabytes of normals first.
    """
    check_map_cost(spec, target)
    # Every sketch stores something per output feature (a sum, a moment, per-cluster sums).
    width = spec.get("n_components", spec.get("n_features"))
    if isinstance(width, int) and not isinstance(width, bool):
        widths = {shape[-1] for name, shape in shapes.items() if len(shape) and not name.startswith("map/")}
        if width not in widths:
            raise SketchFormatError(
                f"{target}: the map spec declares {width} output features, but the stored arrays have widths "
                f"{sorted(widths)} (tampered spec or arrays)."
            )


def check_map_cost(spec: dict[str, Any], target: str) -> None:
    """Refuse a map spec whose random parameters would cost more than :data:`MAX_ARRAY_ELEMENTS` to rebuild.

    Used by sketch and map files alike, before the map is rebuilt.
    """
    levels = [spec]
    while levels:
        level = levels.pop()
        levels.extend(value for value in level.values() if isinstance(value, dict))  # nested specs (JL's inner)
        sizes = sorted(
            value for key, value in level.items()
            if key in _SPEC_SIZE_KEYS and isinstance(value, int) and not isinstance(value, bool) and value > 0
        )  # fmt: skip
        landmarks = level.get("n_landmarks") if isinstance(level.get("n_landmarks"), int) else 0
        # parameters ~ the product of the two largest sizes; K-JL also builds the landmarks' Gram matrix
        cost = max(sizes[-1] * (sizes[-2] if len(sizes) > 1 else 1) if sizes else 0, landmarks**2)
        if cost > MAX_ARRAY_ELEMENTS:
            raise SketchFormatError(
                f"{target}: the map spec {_describe_sizes(level)} would need about {cost:,} random "
                f"parameters to rebuild; a sketch's map has at most {MAX_ARRAY_ELEMENTS:,} (tampered spec?)."
            )


#: Array elements load() reads before it has verified the attributes digest (8 MiB of float64).
_UNVERIFIED_READ_ELEMENTS = 2**20
#: Integer attributes that size a sketch's arrays besides the map spec (permutations B,
#: clusters k, target columns t). A new sketch kind with another sizing attribute adds its name here.
_SIZE_ATTRIBUTES = ("n_permutations", "n_clusters", "n_targets")


def _declared_sizes(spec: dict[str, Any], attrs: dict[str, Any]) -> list[int]:
    """The sizes the spec and the attributes declare: widths, k, B, the number of names."""
    sizes = []
    levels = [spec]
    while levels:
        level = levels.pop()
        levels.extend(value for value in level.values() if isinstance(value, dict))
        sizes += [level.get(key) for key in _SPEC_SIZE_KEYS]
    sizes += [attrs.get(key) for key in _SIZE_ATTRIBUTES]
    if isinstance(attrs.get("names"), list):
        sizes.append(len(attrs["names"]))
    return [size for size in sizes if isinstance(size, int) and not isinstance(size, bool) and size > 0]


def _check_declared_size(node: Any, name: str, spec: dict[str, Any], attrs: dict[str, Any], target: str) -> None:
    """Refuse an array declaring more elements than the spec and attributes allow, before reading it.

    No sketch array is larger than the square of the largest size they declare (a D x D
    second moment, B x D permutation sums); zarr would fill a declared shape whose chunks
    are missing with zeros, so a lie there costs gigabytes of memory and time.
    """
    largest = max(_declared_sizes(spec, attrs), default=1)
    if node.size > largest**2:
        raise SketchFormatError(
            f"{target}: array {name!r} declares shape {node.shape} ({node.size:,} elements); the map spec and "
            f"attributes allow at most {largest:,}^2 = {largest**2:,} (tampered array metadata or spec)."
        )


def _zstd_content_size(header: bytes) -> int | None:
    """The decoded size a zstd frame header declares (RFC 8878 sec. 3.1.1.1), None if absent."""
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


def _check_stored_chunks(node: Any, name: str, target: str) -> None:
    """Compare each stored chunk's declared decoded size with the array's chunk shape, before reading.

    zarr allocates the declared chunk shape before decoding, so a small chunk under a lied
    shape would cost the lie. zstd frames (what save_sketch writes) state their decoded size
    in their header; other compressors are left to the size bounds.
    """
    from zarr.abc.store import RangeByteRequest
    from zarr.codecs import ZstdCodec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    if node.size == 0 or [type(codec) for codec in node.compressors] != [ZstdCodec]:
        return
    expected = int(np.prod(node.chunks)) * np.dtype(node.dtype).itemsize
    grid = [range(-(-extent // step)) for extent, step in zip(node.shape, node.chunks)]
    for coords in itertools.product(*grid):
        key = node.metadata.encode_chunk_key(coords)
        header = sync(
            (node.store_path / key).get(prototype=default_buffer_prototype(), byte_range=RangeByteRequest(0, 18))
        )
        if header is None:
            continue  # not stored: a chunk of zeros (zarr skips writing those); bounded by the size checks
        declared = _zstd_content_size(header.to_bytes())
        if declared is not None and declared != expected:
            raise SketchFormatError(
                f"{target}: array {name!r} chunk {key} decodes to {declared:,} bytes, but its declared chunk "
                f"shape {node.chunks} of {np.dtype(node.dtype)} needs {expected:,} (tampered array metadata or chunk)."
            )


def _read_array(node: Any) -> np.ndarray:
    """Read ``node`` one chunk at a time.

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


def _describe_sizes(level: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{key}={level[key]!r}" for key in _SPEC_SIZE_KEYS if key in level) + ")"


def _read_sketch(store: Any, target: str, require_digest: bool = False) -> Sketch:
    try:
        root = zarr.open_group(store=store, mode="r", zarr_format=3)
    except FileNotFoundError as error:
        raise SketchFormatError(f"No sketch at {target}: no zarr group found.") from error
    except ContainsArrayError as error:
        raise SketchFormatError(
            f"{target} is a zarr array, not a streamrff sketch. Pass a sketch written by "
            "`streamrff sketch` or Sketch.save (sketch the array first)."
        ) from error
    attrs = dict(root.attrs)
    if attrs.get("format") != FORMAT_NAME:
        raise SketchFormatError(
            f"{target} is not a complete streamrff sketch: expected attribute format={FORMAT_NAME!r}, "
            f"got {attrs.get('format')!r}. It may be another zarr group or an incomplete (interrupted) write."
        )
    version = attrs.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SketchFormatError(f"{target}: invalid format version {version!r}.")
    if version > FORMAT_VERSION:
        raise SketchFormatError(
            f"{target} was written in sketch format version {version}; this streamrff reads up to "
            f"version {FORMAT_VERSION}. Upgrade streamrff (pip install -U streamrff)."
        )
    kind = attrs.get("kind")
    if kind not in Sketch._registry:
        raise SketchFormatError(f"{target}: unknown sketch kind {kind!r}; expected one of {sorted(Sketch._registry)}.")
    checksums = attrs.get("checksums")
    if not isinstance(checksums, dict):
        raise SketchFormatError(f"{target}: missing or malformed checksums attribute.")
    spec = attrs.get("map")
    nodes: dict[str, Any] = {}
    for name in checksums:
        try:
            node = root[name]
        except KeyError as error:
            raise SketchFormatError(f"{target}: array {name!r} is missing (truncated file?).") from error
        if not isinstance(node, zarr.Array):
            raise SketchFormatError(f"{target}: {name!r} is not an array.")
        _check_array_metadata(node, name, target)  # before reading: a tampered shape costs nothing
        if isinstance(spec, dict):
            _check_declared_size(node, name, spec, attrs, target)
        _check_stored_chunks(node, name, target)
        nodes[name] = node
    if not isinstance(spec, dict):
        raise SketchFormatError(f"{target}: missing map spec.")
    _check_spec_sizes(spec, {name: node.shape for name, node in nodes.items()}, target)
    if (
        sum(node.size for node in nodes.values()) > _UNVERIFIED_READ_ELEMENTS
        and DIGEST_ATTRIBUTE in attrs
        and not _digest_matches(attrs)
    ):
        # Large arrays described by attributes (spec, sizes) that fail their digest: refuse
        # before reading them. Small ones are read first, so that the checks below can
        # name what exactly was edited.
        raise _digest_error(target)
    arrays: dict[str, np.ndarray] = {}
    for name, expected in checksums.items():
        value = _read_array(nodes[name])
        if _checksum(value) != expected:
            raise SketchFormatError(f"{target}: array {name!r} does not match its checksum (tampered or corrupt).")
        arrays[name] = value.astype(value.dtype.newbyteorder("="), copy=False)
    map_arrays = {k[len("map/") :]: v for k, v in arrays.items() if k.startswith("map/")}
    sketch_arrays = {k: v for k, v in arrays.items() if not k.startswith("map/")}
    try:
        sketch = Sketch._registry[kind]._from_parts(spec, map_arrays, attrs, sketch_arrays)
    except StreamRFFError as error:
        raise SketchFormatError(f"{target}: {error}") from error
    if sketch.fingerprint != attrs.get("fingerprint"):
        raise SketchFormatError(
            f"{target}: the stored fingerprint does not match the map rebuilt from its spec "
            "(tampered file, or written with an incompatible numpy random stream)."
        )
    # The sketch must write back exactly what is stored: otherwise an edited attribute (say
    # moments=false beside a stored moment array) would silently load as a different sketch.
    written = set(sketch._arrays()) | {f"map/{name}" for name in sketch.state_arrays()}
    if written != set(checksums):
        raise SketchFormatError(
            f"{target}: the file holds arrays {sorted(checksums)}, but a {kind!r} sketch with these "
            f"attributes holds {sorted(written)} (tampered attributes or arrays)."
        )
    for key, value in sketch._attrs().items():
        if not _same_value(value, attrs.get(key)):
            raise SketchFormatError(
                f"{target}: attribute {key!r} is {attrs.get(key)!r}; expected {value!r} for this sketch "
                "(tampered attributes)."
            )
    # Last, so that the specific checks above name what is wrong; this one catches the edits
    # that leave a valid-looking sketch (a count off by one).
    _check_attributes_digest(attrs, target, require_digest)
    return sketch


def _same_value(expected: Any, stored: Any) -> bool:
    """JSON-level equality that keeps bools apart from numbers (``1 == True`` in Python)."""
    if isinstance(expected, (bool, np.bool_)) or isinstance(stored, bool):
        return isinstance(stored, bool) and isinstance(expected, (bool, np.bool_)) and stored == bool(expected)
    if isinstance(expected, dict):
        return (
            isinstance(stored, dict)
            and expected.keys() == stored.keys()
            and all(_same_value(expected[key], stored[key]) for key in expected)
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(stored, list)
            and len(stored) == len(expected)
            and all(_same_value(a, b) for a, b in zip(expected, stored))
        )
    return bool(expected == stored)
