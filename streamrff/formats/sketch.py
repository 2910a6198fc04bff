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
verified, their scalar attributes (count, norms) cannot be. ``streamrff.load(...,
require_digest=True)`` refuses them instead, and checkpoint partials are always
loaded that way (delete a refused partial to recompute its chunk). Saving such a
sketch again adds the digest. The version stays 1 because a reader that does not
know the digest still reads these files correctly.

Arrays are little-endian with an explicit ``bytes`` codec. The attributes are
written last, so an interrupted write to object storage leaves a group that
:func:`read_sketch_file` rejects as incomplete; local directories and zip files are written
under a temporary name and published in one step that never replaces an
existing output unless asked to (:func:`publish`).

The writer lives in :mod:`streamrff._files.signed` (:meth:`streamrff.Sketch.save` saves
through it); this module reads (:func:`read_sketch_file`) and re-exports :func:`check_writable`
(the CLI's check of an output before any work). It sits below the sketch kinds and knows
none of them: the reader checks everything a file holds and leaves the one step that needs
a kind's class to a ``build`` function its caller passes in (:func:`streamrff.load` builds
the sketch, :func:`streamrff.load_map` only its map).
"""

from __future__ import annotations

import functools
import json
import os
import time
import warnings
import zipfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.errors import ContainsArrayError

from .._base.memory import memory_available
from .._base.validation import check_format_version
from .._files.bounded_read import MAX_JSON_BYTES, GuardedLocalStore, GuardedZipStore, _file_type
from .._files.publish import publish
from .._files.signed import (
    DIGEST_ATTRIBUTE,
    FORMAT_NAME,
    FORMAT_VERSION,
    SIGNATURE_ATTRIBUTE,
    SketchParts,
    _attributes_digest,
    _checksum,
    _is_url,
    _local_path,
    check_signature_record,
    check_signing_key,
    check_writable,
    read_signing_key,
    signature_value,
    write_state_path,
)
from .._files.zarrcheck import check_stored_chunks, read_by_chunk
from ..errors import (
    SketchBeingWrittenError,
    SketchFormatError,
    SketchFormatWarning,
    SketchSignatureError,
    StreamRFFError,
)
from ..typing import PathOrURL, StorageOptions

__all__ = [
    "FORMAT_NAME", "FORMAT_VERSION", "read_sketch_file", "StoredSketch", "check_writable",
    "check_map_cost", "publish", "read_signing_key", "is_signed",
]  # fmt: skip

#: What a ``build`` function makes of a sketch file (a sketch, or only its map).
Built = TypeVar("Built")


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
            stacklevel=6,  # the caller of streamrff.load or load_map, through read_sketch_file and two more
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


def _open_store(target: str, storage_options: StorageOptions) -> Any:
    if _is_url(target):
        _check_remote_metadata_sizes(target, storage_options)
        return zarr.storage.FsspecStore.from_url(target, storage_options=storage_options, read_only=True)
    path = _local_path(target)
    if not path.exists():
        raise SketchFormatError(f"No sketch at {path}: the path does not exist.")
    if not path.is_file() and not path.is_dir():
        raise SketchFormatError(
            f"{path} is {_file_type(path.stat().st_mode)}, not a sketch directory or .zip file. Pass a "
            "sketch written by Sketch.save or `streamrff sketch`."
        )
    if path.is_file():
        # ZipStore opens lazily: a non-zip file would fail inside zarr and then again in
        # close(), hiding the cause behind "'ZipStore' object has no attribute '_zf'".
        if not zipfile.is_zipfile(path):
            raise SketchFormatError(
                f"{path} is a file but not a zip archive, so not a streamrff sketch. Expected a "
                "sketch directory or .zip written by Sketch.save or `streamrff sketch`."
            )
        return GuardedZipStore(path, mode="r")
    return GuardedLocalStore(path, read_only=True)


def _check_remote_metadata_sizes(url: str, storage_options: StorageOptions) -> None:
    """Refuse, unread, a sketch on object storage whose metadata objects are larger than a sketch's ever are.

    One listing of the group (a sketch holds a few objects); the local stores cap their reads themselves.
    """
    import fsspec

    try:
        filesystem, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        listing = filesystem.find(root, detail=True)
    except Exception:  # missing or unreachable: the load itself reports it
        return
    for path, info in listing.items():
        size = info.get("size") or 0
        if path.rsplit("/", 1)[-1] == "zarr.json" and size > MAX_JSON_BYTES:
            raise SketchFormatError(
                f"{url}: its metadata object {path[len(root.rstrip('/')) + 1 :] or 'zarr.json'} holds {size:,} bytes; "
                f"a sketch's metadata is at most {MAX_JSON_BYTES:,}. Refused unread: not a sketch written by streamrff."
            )


def read_sketch_file(
    path_or_url: PathOrURL,
    build: Callable[[StoredSketch], Built],
    kinds: Collection[str] | None,
    storage_options: StorageOptions = None,
    require_digest: bool = False,
    verify_key: bytes | None = None,
) -> Built:
    """Read a sketch file, validating everything, and return what ``build`` makes of its contents.

    The reader behind :func:`streamrff.load` (which documents the checks) and
    :func:`streamrff.load_map`. It checks the format name and version, the kind,
    every array's metadata, size and checksum and the map spec's cost before
    calling ``build``, and the attributes digest and the signature after it. A
    local directory replaced by a concurrent save while it is read is read again.

    Parameters
    ----------
    path_or_url : str or PathLike
        Directory, ``.zip`` file, ``file://`` or fsspec URL.
    build : callable
        ``build(stored)`` rebuilds the object from the file's checked contents
        (:class:`StoredSketch`) and compares it with them
        (:meth:`StoredSketch.check_written` for a sketch,
        :meth:`StoredSketch.check_fingerprint` for a map alone). An error of
        streamrff it raises is reported as the file's :class:`SketchFormatError`.
    kinds : collection of str or None
        The sketch kinds the caller can build (``Sketch._registry``); a file of
        another kind is refused. None accepts any kind (``build`` reads only the map).
    storage_options : dict, optional
        fsspec options for URLs. Never logged.
    require_digest : bool, default=False
        Refuse a file without an attributes digest instead of warning.
    verify_key : bytes, optional
        Accept only a sketch signed with this key.

    Returns
    -------
    object
        What ``build`` returned.

    Raises
    ------
    SketchFormatError, SketchSignatureError, SketchBeingWrittenError
        As :func:`streamrff.load` says.
    """
    target = os.fspath(path_or_url)
    if not isinstance(require_digest, (bool, np.bool_)):
        raise SketchFormatError(f"require_digest must be True or False. Got {require_digest!r}.")
    if verify_key is not None:
        verify_key = check_signing_key(verify_key, "verify_key")
    read = functools.partial(
        _read_sketch, require_digest=bool(require_digest), verify_key=verify_key, build=build, kinds=kinds
    )
    for attempt in range(_CONCURRENT_SAVE_ATTEMPTS):
        before = _publication_identity(target, storage_options)
        try:
            return _load_once(target, storage_options, read)
        except SketchFormatError:
            # A save with overwrite=True swapped the directory (or, on object storage, rewrote
            # the group) while it was read, so the files read may mix both versions: read
            # again. A failure on a place that stayed as it was, with no save under way, is
            # the file's own.
            after = _publication_identity(target, storage_options)
            if (before is None and after is None) or (after == before and not _being_written(after)):
                raise
        if _is_url(target):
            time.sleep(min(0.02 * 2**attempt, 0.25))  # let the writer finish (about 4 s in all)
    raise SketchBeingWrittenError(
        f"{target} is being written by another process: it changed {_CONCURRENT_SAVE_ATTEMPTS} times while "
        "being read, or a save is still under way. Retry when the save has finished (if none is running, "
        "an interrupted save left it: write the sketch again)."
    )


#: Reads of a local sketch directory that another process replaced meanwhile, before giving up.
_CONCURRENT_SAVE_ATTEMPTS = 20


def _publication_identity(target: str, storage_options: StorageOptions) -> Any:
    """What changes when a save publishes a sketch: the directory's identity, or the object store's write state."""
    return _write_state(target, storage_options) if _is_url(target) else _directory_identity(target)


def _being_written(identity: Any) -> bool:
    return isinstance(identity, dict) and identity.get("state") != "complete"


def _write_state(url: str, storage_options: StorageOptions) -> dict[str, Any] | None:
    """The write-state object a save keeps beside a sketch on object storage; None if absent (older files)."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        data = fs.cat_file(write_state_path(root), start=0, end=_WRITE_STATE_BYTES)
    except Exception:  # absent (written before write states), or unreachable: the load itself reports that
        return None
    try:
        state = json.loads(data)
    except ValueError:
        state = None
    return state if isinstance(state, dict) else {"state": "unreadable", "bytes": data.hex()}


#: Bytes of a write-state object read at most (it holds a short JSON document).
_WRITE_STATE_BYTES = 1024


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


def _load_once(target: str, storage_options: StorageOptions, read: Callable[[Any, str], Built]) -> Built:
    """``read(store, target)`` on the opened store, anything but a SketchFormatError reported as one."""
    try:
        store = _open_store(target, storage_options)
        try:
            return read(store, target)
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
#: The reader refuses larger declared shapes before reading, so a tampered few-kB file cannot make
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
    check), so a tampered size field could make a load draw gigabytes of normals first.
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


#: Array elements the reader reads before it has verified the attributes digest (8 MiB of float64).
_UNVERIFIED_READ_ELEMENTS = 2**20
#: An array may lack chunks only if it declares at most this many bytes: earlier streamrff let
#: zarr skip all-zero chunks (read back as the fill value 0); it now writes every chunk, so an
#: absent chunk of a larger array is a partial copy or a tampered file, refused before reading.
_MISSING_CHUNK_BYTES = 8 * _UNVERIFIED_READ_ELEMENTS
#: Integer attributes that size a sketch's arrays besides the map spec (permutations B,
#: clusters k, target columns t, the stacked per-column moments' rows d * D_c of a sketch with
#: columns). A new sketch kind with another sizing attribute adds its name here.
_SIZE_ATTRIBUTES = ("n_permutations", "n_clusters", "n_targets", "column_moment_rows")


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


def _check_memory(nodes: dict[str, Any], target: str) -> None:
    """Refuse arrays that this process cannot hold (:func:`~streamrff._base.memory.memory_available`), before reading.

    The declared sizes are consistent at this point (spec, attributes and shapes agree), yet a
    file of a few kilobytes can still declare a 2 GiB moment whose chunks are missing (zeros).
    """
    chunks = [int(np.prod(node.chunks)) * np.dtype(node.dtype).itemsize for node in nodes.values() if node.size]
    need = sum(int(node.nbytes) for node in nodes.values()) + max(chunks, default=0)
    available = memory_available()
    if need > available:
        raise SketchFormatError(
            f"{target} declares arrays of {need / 2**30:.2f} GiB, but this process can allocate "
            f"{available / 2**30:.2f} GiB (free memory, ulimit -v and cgroup limit). Load it on a machine "
            "with more memory, or check where the file came from (a few-kB file declaring this much is tampered)."
        )


def _describe_sizes(level: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{key}={level[key]!r}" for key in _SPEC_SIZE_KEYS if key in level) + ")"


@dataclass(frozen=True)
class StoredSketch:
    """A sketch file's contents, every array read and matched with its checksum, the digest not yet verified.

    What a ``build`` function of :func:`read_sketch_file` receives: it rebuilds
    the sketch (or only its map) from these and compares the result with them.

    Attributes
    ----------
    target : str
        The place read (named in every error).
    kind : str
        The ``kind`` attribute.
    spec : dict
        The map spec (``map`` attribute).
    attrs : dict
        Every group attribute.
    arrays : dict of str to ndarray
        The sketch's arrays (native byte order).
    map_arrays : dict of str to ndarray
        The fitted map's arrays (stored under ``map/``).
    """

    target: str
    kind: str
    spec: dict[str, Any]
    attrs: dict[str, Any]
    arrays: dict[str, np.ndarray]
    map_arrays: dict[str, np.ndarray]

    def check_fingerprint(self, fingerprint: str) -> None:
        """Refuse a file whose stored fingerprint is not the one of the map rebuilt from its spec."""
        if fingerprint != self.attrs.get("fingerprint"):
            raise SketchFormatError(
                f"{self.target}: the stored fingerprint does not match the map rebuilt from its spec "
                "(tampered file, or written with an incompatible numpy random stream)."
            )

    def check_written(self, parts: SketchParts) -> None:
        """Refuse a file unless the sketch rebuilt from it writes back exactly what it holds (``parts``).

        The fingerprint first, then the set of arrays, then every attribute.
        """
        self.check_fingerprint(parts.fingerprint)
        # The sketch must write back exactly what is stored: otherwise an edited attribute (say
        # moments=false beside a stored moment array) would silently load as a different sketch.
        stored = set(self.arrays) | {f"map/{name}" for name in self.map_arrays}
        written = set(parts.arrays)
        if written != stored:
            raise SketchFormatError(
                f"{self.target}: the file holds arrays {sorted(stored)}, but a {self.kind!r} sketch with these "
                f"attributes holds {sorted(written)} (tampered attributes or arrays)."
            )
        for key, value in parts.attrs.items():
            if not _same_value(value, self.attrs.get(key)):
                raise SketchFormatError(
                    f"{self.target}: attribute {key!r} is {self.attrs.get(key)!r}; expected {value!r} for this "
                    "sketch (tampered attributes)."
                )


def _read_sketch(
    store: Any,
    target: str,
    require_digest: bool,
    verify_key: bytes | None,
    build: Callable[[StoredSketch], Built],
    kinds: Collection[str] | None,
) -> Built:
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
    check_format_version(attrs.get("version"), FORMAT_VERSION, target, "sketch", SketchFormatError)
    kind = attrs.get("kind")
    if kinds is None and not isinstance(kind, str):
        raise SketchFormatError(f"{target}: the sketch kind is {kind!r}; expected a string.")
    if kinds is not None and kind not in kinds:
        raise SketchFormatError(f"{target}: unknown sketch kind {kind!r}; expected one of {sorted(kinds)}.")
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
        nodes[name] = node
    for name, node in nodes.items():
        # Before the memory check, so that a file whose chunks were deleted is named for that. The column
        # part came after the rule that every chunk is written: none of its chunks may be absent.
        allowed = 0 if name.startswith("columns/") else _MISSING_CHUNK_BYTES
        check_stored_chunks(node, name, target, missing_allowed_bytes=allowed)
    _check_memory(nodes, target)
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
        value = read_by_chunk(nodes[name])
        if _checksum(value) != expected:
            raise SketchFormatError(f"{target}: array {name!r} does not match its checksum (tampered or corrupt).")
        arrays[name] = value.astype(value.dtype.newbyteorder("="), copy=False)
    map_arrays = {k[len("map/") :]: v for k, v in arrays.items() if k.startswith("map/")}
    sketch_arrays = {k: v for k, v in arrays.items() if not k.startswith("map/")}
    stored = StoredSketch(target, kind, spec, attrs, sketch_arrays, map_arrays)
    try:
        built = build(stored)  # rebuilds the sketch (or its map) and compares it with what is stored
    except SketchFormatError:
        raise
    except StreamRFFError as error:
        raise SketchFormatError(f"{target}: {error}") from error
    # Last, so that the specific checks above name what is wrong; this one catches the edits
    # that leave a valid-looking sketch (a count off by one).
    _check_attributes_digest(attrs, target, require_digest)
    if verify_key is not None:
        _check_signature(attrs, verify_key, target)
    return built


def _check_signature(attrs: dict[str, Any], verify_key: bytes, target: str) -> None:
    """Refuse a sketch not signed with ``verify_key`` (after the digest verified every value it covers)."""
    check_signature_record(
        attrs.get(SIGNATURE_ATTRIBUTE), signature_value(attrs, verify_key), target, "sketch",
        "Sketch.save(..., signing_key=...) or `streamrff sketch/merge --sign-key FILE`", SketchSignatureError,
    )  # fmt: skip


def is_signed(path_or_url: PathOrURL, storage_options: StorageOptions = None) -> bool:
    """Whether the sketch file carries a signature (not verified: use ``load(..., verify_key=)`` for that).

    Examples
    --------
    >>> import numpy as np, tempfile, os, streamrff as srf
    >>> path = os.path.join(tempfile.mkdtemp(), "s.zarr")
    >>> srf.sketch_array(np.ones((3, 2)), srf.RFF(n_features=8)).save(path, signing_key=b"k" * 32)
    >>> is_signed(path), srf.load(path, verify_key=b"k" * 32).count
    (True, 3)
    """
    target = os.fspath(path_or_url)
    store = _open_store(target, storage_options)
    try:
        return isinstance(zarr.open_group(store=store, mode="r", zarr_format=3).attrs.get(SIGNATURE_ATTRIBUTE), dict)
    finally:
        if isinstance(store, zarr.storage.ZipStore):
            store.close()


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
