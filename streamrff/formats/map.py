"""Map files: a fitted feature map as a small JSON file, so every site sketches with one map. No pickle.

Layout (version 1)::

    {
      "format": "streamrff.map",
      "version": 1,
      "spec": {...},                  the map's JSON spec (FeatureMap.spec)
      "fingerprint": "...",           sha256 of the spec and the map's parameters
      "arrays": {                     fitted state the spec does not give (K-JL landmarks)
        "landmarks": {"dtype": "<f8", "shape": [n, d], "data": "<base64 of the little-endian C-order bytes>"}
      }
    }

Floats in the spec are written with Python's shortest round-trip repr, so the
bandwidth reads back bit for bit; arrays are stored losslessly as base64 of
their bytes with an explicit dtype and shape. :func:`load_map` rebuilds the map
from the spec and arrays and checks that its fingerprint equals the stored one.
Any sketch file (directory, ``.zip`` or URL) and any model file
(:mod:`streamrff.ridge.modelfile`) is also accepted by :func:`load_map`: its map is
returned.

A module of its own rather than part of :mod:`streamrff.formats.sketch`: a map
file is plain JSON and needs neither zarr nor a sketch, and the command line
reads it before anything else. The map of a sketch file is read through the
sketch file reader (:func:`streamrff.formats.sketch.read_sketch_file`), which
checks the whole file but rebuilds only the map: no sketch class is needed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._base.validation import check_format_version
from .._files.bounded_read import read_regular_file
from .._files.publish import check_output_location, publish_text
from ..errors import InputError, MapFormatError, SketchFormatError, SketchSignatureError, SourceError, StreamRFFError
from ..typing import PathOrURL, StorageOptions

if TYPE_CHECKING:  # pragma: no cover - zarr (the reader) and scikit-learn (the maps): loaded only when needed
    from ..maps import FeatureMap
    from .sketch import StoredSketch

__all__ = ["MAP_FORMAT_NAME", "MAP_FORMAT_VERSION", "save_map", "load_map", "map_to_json", "map_from_json"]

MAP_FORMAT_NAME = "streamrff.map"
MAP_FORMAT_VERSION = 1
#: Largest map file read (a K-JL map with 2**22 float64 landmark values is ~45 MB of base64).
MAX_MAP_FILE_BYTES = 2**28
_ARRAY_DTYPES = ("<f8", "<f4", "<i8", "<i4")
#: Most elements of one map array (as for a sketch's arrays, see streamrff.formats.sketch).
MAX_ARRAY_ELEMENTS = 2**28


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local_path(path: str) -> Path:
    return Path(path[len("file://") :] if path.startswith("file://") else path)


def _encode_array(array: np.ndarray) -> dict[str, Any]:
    little = np.ascontiguousarray(array)
    little = little.astype(little.dtype.newbyteorder("<"), copy=False)
    return {
        "dtype": little.dtype.str,
        "shape": list(little.shape),
        "data": base64.b64encode(little.tobytes()).decode("ascii"),
    }


#: Domain separation: a map signature is never valid as a sketch's, a model's or any other HMAC of the same key.
_SIGNATURE_CONTEXT = b"streamrff.map signature v1\n"


def map_signature_value(document: dict[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex) of the sha256 of the canonical JSON of a map document without its signature."""
    covered = {name: value for name, value in document.items() if name != "signature"}
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    return hmac.new(key, _SIGNATURE_CONTEXT + digest.encode("ascii"), hashlib.sha256).hexdigest()


def map_to_json(feature_map: FeatureMap, signing_key: bytes | None = None) -> str:
    """The map file's text for a fitted ``feature_map`` (see the module docstring for the layout).

    With ``signing_key``, the document carries ``"signature": {"algorithm": "hmac-sha256", "value":
    HMAC-SHA256(key, "streamrff.map signature v1\\n" + sha256 hex of the canonical JSON of every other
    key)}`` (docs/security.rst).

    Raises
    ------
    InputError
        If ``feature_map`` is not a fitted streamrff FeatureMap.
    """
    from ..maps import FeatureMap

    if not isinstance(feature_map, FeatureMap):
        raise InputError(
            f"feature_map must be a fitted streamrff FeatureMap (e.g. RFF().fit(X), or a sketch's "
            f".feature_map). Got {type(feature_map).__name__}."
        )
    if not feature_map.is_fitted():
        raise InputError(
            f"feature_map must be fitted before it is saved: got an unfitted {type(feature_map).__name__}. "
            "Call feature_map.fit(X) first (CLI: streamrff map SOURCE -o map.json)."
        )
    document = {
        "format": MAP_FORMAT_NAME,
        "version": MAP_FORMAT_VERSION,
        "spec": feature_map.spec,
        "fingerprint": feature_map.fingerprint,
        "arrays": {name: _encode_array(value) for name, value in sorted(feature_map.state_arrays().items())},
    }
    if signing_key is not None:
        from .._files.signed import SIGNATURE_ALGORITHM, check_signing_key  # here: that module imports zarr

        signing_key = check_signing_key(signing_key, "signing_key")
        document = json.loads(json.dumps(document, allow_nan=False))  # exactly what the file will hold
        document["signature"] = {"algorithm": SIGNATURE_ALGORITHM, "value": map_signature_value(document, signing_key)}
    return json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"


def _publish(data: bytes, target: str, storage_options: StorageOptions, overwrite: bool) -> None:
    """Write ``data`` at ``target`` in one step (:func:`streamrff._files.publish.publish_text` locally).

    Without ``overwrite`` an existing target is refused, also when it appears while
    writing; on object storage one PUT is atomic.
    """
    if _is_url(target):
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
            exists = fs.exists(root)
        except Exception as error:  # fsspec backends raise many types
            raise SourceError(f"Cannot reach {target}: {type(error).__name__}: {error}") from error
        if exists and not overwrite:
            raise FileExistsError(
                f"{target} already exists. Choose another output or pass overwrite=True (CLI: --overwrite)."
            )
        try:
            fs.pipe_file(root, data)
        except Exception as error:
            raise SourceError(f"Cannot write {target}: {type(error).__name__}: {error}") from error
        return
    path = _local_path(target)
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{path} already exists. Choose another output or pass overwrite=True (CLI: --overwrite)."
        )
    if not path.parent.is_dir():
        raise SourceError(f"Cannot write {path}: directory {path.parent} does not exist. Create it first.")
    if path.is_dir():
        raise FileExistsError(f"{path} is a directory. Choose a file name for the map, e.g. {path / 'map.json'}.")
    check_output_location(path, len(data))  # read-only, forbidden or full: one OutputError line
    publish_text(path, data.decode("utf-8"), overwrite)  # never replaces without overwrite, also in a race


def save_map(
    feature_map: FeatureMap,
    path_or_url: PathOrURL,
    storage_options: StorageOptions = None,
    overwrite: bool = False,
    signing_key: bytes | None = None,
) -> None:
    """Write a fitted feature map to a JSON map file (local path, ``file://`` or fsspec URL).

    Every site that loads the file with :func:`load_map` gets the identical map
    (same fingerprint), so their sketches merge and can be tested against
    each other.

    Parameters
    ----------
    feature_map : FeatureMap
        A fitted map (``RFF().fit(X)``, a sketch's ``feature_map``, ...).
    path_or_url : str or PathLike
        Where to write, e.g. ``"map.json"`` or ``"s3://bucket/map.json"``.
    storage_options : dict, optional
        fsspec options for URLs. Never logged.
    overwrite : bool, default=False
        Replace an existing file.
    signing_key : bytes, optional
        Sign the map file (HMAC-SHA256, at least 16 bytes; docs/security.rst):
        ``load_map(path, verify_key=key)`` then proves a holder of the key wrote it.

    Raises
    ------
    InputError
        If ``feature_map`` is not a fitted FeatureMap, or ``signing_key`` is not a key.
    FileExistsError
        If the target exists and ``overwrite`` is False.
    SourceError
        If the target cannot be written.
    OutputError
        If the local file system is read-only, forbids writing or is full.

    Examples
    --------
    >>> import numpy as np, tempfile, os, streamrff as srf
    >>> rff = srf.RFF(n_features=64, bandwidth="median").fit(np.random.default_rng(0).normal(size=(100, 3)))
    >>> path = os.path.join(tempfile.mkdtemp(), "map.json")
    >>> srf.save_map(rff, path)
    >>> srf.load_map(path).fingerprint == rff.fingerprint
    True
    """
    text = map_to_json(feature_map, signing_key)
    _publish(text.encode("utf-8"), os.fspath(path_or_url), storage_options, overwrite)


def _decode_array(name: str, entry: Any, target: str) -> np.ndarray:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data"}:
        raise MapFormatError(f"{target}: array {name!r} must be an object with keys dtype, shape and data.")
    dtype, shape, data = entry["dtype"], entry["shape"], entry["data"]
    if dtype not in _ARRAY_DTYPES:
        raise MapFormatError(f"{target}: array {name!r} has dtype {dtype!r}; expected one of {list(_ARRAY_DTYPES)}.")
    if (
        not isinstance(shape, list)
        or len(shape) > 2
        or not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape)
    ):
        raise MapFormatError(f"{target}: array {name!r} has shape {_short(shape)}; expected a list of at most 2 sizes.")
    elements = math.prod(shape)  # Python integers: no int64 overflow (2**32 x 2**32 is not 0)
    if elements > MAX_ARRAY_ELEMENTS:
        raise MapFormatError(
            f"{target}: array {name!r} declares shape {_short(shape)}; a map array holds at most "
            f"{MAX_ARRAY_ELEMENTS:,} elements (tampered or not a streamrff map file)."
        )
    if not isinstance(data, str):
        raise MapFormatError(f"{target}: array {name!r} data must be a base64 string.")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise MapFormatError(f"{target}: array {name!r} data is not valid base64 ({error}).") from error
    expected = elements * np.dtype(dtype).itemsize  # the data decoded costs at most 3/4 of the file already read
    if len(raw) != expected:
        raise MapFormatError(
            f"{target}: array {name!r} declares {dtype} of shape {tuple(shape)} ({expected} bytes) but holds "
            f"{len(raw)} bytes (truncated or tampered)."
        )
    value = np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape)
    return value.astype(value.dtype.newbyteorder("="))


def _short(value: Any) -> str:
    """``repr(value)`` cut to 80 characters: a tampered field may be megabytes long."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def map_from_json(text: str | bytes, target: str = "<map>", verify_key: bytes | None = None) -> FeatureMap:
    """Rebuild and verify the map of a map file's text (the inverse of :func:`map_to_json`).

    With ``verify_key``, the map document must be signed with it (a model file's embedded map
    document is signed when the model is).

    Raises
    ------
    MapFormatError
        On anything but a complete, untampered map file of a known version.
    SketchSignatureError
        If ``verify_key`` is given and the map is unsigned, signed with another key or edited.
    """
    if len(text) > MAX_MAP_FILE_BYTES:
        raise MapFormatError(f"{target} holds {len(text):,} bytes; a map file holds at most {MAX_MAP_FILE_BYTES:,}.")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, bad UTF-8, integers of > 4300 digits, nesting
        raise MapFormatError(
            f"{target} is not a streamrff map file: not JSON ({type(error).__name__}: "
            f"{str(error)[:200]}). Expected a file written by `streamrff map` or streamrff.save_map, or a sketch file."
        ) from None
    is_model = isinstance(document, dict) and document.get("format") == "streamrff.model"
    if is_model and isinstance(document.get("map"), dict):
        # A model file (streamrff.ridge.modelfile) embeds its map file's document: its map serves as a map file too.
        document, target = document["map"], f"{target} (the model's map)"
    if not isinstance(document, dict) or document.get("format") != MAP_FORMAT_NAME:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise MapFormatError(
            f"{target} is not a streamrff map file: expected format={MAP_FORMAT_NAME!r}, got {found!r}. "
            "Pass a file written by `streamrff map` or streamrff.save_map, or a sketch file."
        )
    check_format_version(document.get("version"), MAP_FORMAT_VERSION, target, "map", MapFormatError)
    spec, fingerprint, arrays = document.get("spec"), document.get("fingerprint"), document.get("arrays", {})
    if not isinstance(spec, dict) or not isinstance(fingerprint, str) or not isinstance(arrays, dict):
        raise MapFormatError(
            f"{target}: a map file needs a 'spec' object, a 'fingerprint' string and an 'arrays' object."
        )
    from .sketch import check_map_cost

    try:
        check_map_cost(spec, target)  # before any parameter is drawn: a tampered size costs nothing
    except SketchFormatError as error:
        raise MapFormatError(str(error)) from error
    decoded = {name: _decode_array(name, entry, target) for name, entry in arrays.items()}
    try:
        from ..maps import map_from_spec

        feature_map = map_from_spec(spec, decoded)
    except StreamRFFError as error:
        raise MapFormatError(f"{target}: the map spec does not rebuild a map: {error}") from error
    except (TypeError, ValueError, KeyError, OverflowError, MemoryError) as error:  # spec numbers out of range
        raise MapFormatError(
            f"{target}: the map spec does not rebuild a map: {type(error).__name__}: {str(error)[:200]}"
        ) from error
    if set(feature_map.state_arrays()) != set(decoded):
        raise MapFormatError(
            f"{target}: the file holds arrays {sorted(decoded)}, but this map has {sorted(feature_map.state_arrays())}."
        )
    if feature_map.fingerprint != fingerprint:
        raise MapFormatError(
            f"{target}: the stored fingerprint does not match the map rebuilt from its spec "
            "(tampered file, or written with an incompatible numpy random stream)."
        )
    if verify_key is not None:
        from .._files.signed import check_signature_record  # here: that module imports zarr

        check_signature_record(
            document.get("signature"), map_signature_value(document, verify_key), target, "map",
            "save_map(..., signing_key=...), or `streamrff map` / `ridge` with --sign-key FILE", SketchSignatureError,
        )  # fmt: skip
    return feature_map


def _read_map_bytes(target: str, storage_options: StorageOptions) -> bytes | None:
    """The bytes of a map file at ``target``; None when ``target`` is a sketch (directory, zip)."""
    if _is_url(target):
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
            if not fs.isfile(root) or root.endswith(".zip"):
                return None
            if fs.size(root) > MAX_MAP_FILE_BYTES:
                raise MapFormatError(f"{target} is larger than {MAX_MAP_FILE_BYTES:,} bytes: not a map file.")
            return fs.cat_file(root)
        except StreamRFFError:
            raise
        except Exception as error:
            raise SourceError(f"Cannot read {target}: {type(error).__name__}: {error}") from error
    path = _local_path(target)
    if not path.exists():
        raise MapFormatError(f"No map file at {path}: the path does not exist. Check the path.")
    if path.is_dir() or path.suffix == ".zip":
        return None
    try:  # a regular file only (not /dev/zero, not a FIFO), read up to the cap and no further
        return read_regular_file(path, MAX_MAP_FILE_BYTES, "a map file or sketch")
    except SketchFormatError as error:
        raise MapFormatError(str(error)) from None


def load_map(
    path_or_url: PathOrURL, storage_options: StorageOptions = None, verify_key: bytes | None = None
) -> FeatureMap:
    """Read the fitted map of a map file, or of any sketch file, validating everything.

    Parameters
    ----------
    path_or_url : str or PathLike
        A map file written by :func:`save_map` / ``streamrff map``, a model file
        (:func:`streamrff.save_model`), or a sketch (directory, ``.zip``,
        ``file://`` or fsspec URL): its map is returned.
    storage_options : dict, optional
        fsspec options for URLs. Never logged.
    verify_key : bytes, optional
        Accept only a file signed with this key (a map file signed by :func:`save_map`, a
        sketch, or a model's map; see docs/security.rst).

    Returns
    -------
    FeatureMap
        The fitted map, with the stored fingerprint.

    Raises
    ------
    MapFormatError
        If the file is missing, not a map file, of a newer format version,
        tampered with (the rebuilt fingerprint differs), or too large.
    SketchFormatError
        If a sketch file given instead is invalid.
    SketchSignatureError
        If ``verify_key`` is given and the file is not signed with it.
    SourceError
        If a URL cannot be read.

    Examples
    --------
    >>> import numpy as np, tempfile, os, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(50, 2))
    >>> s = srf.sketch_array(X, srf.RFF(n_features=16, bandwidth=1.0).fit(X))
    >>> path = os.path.join(tempfile.mkdtemp(), "x.sketch")
    >>> s.save(path)
    >>> srf.load_map(path).fingerprint == s.fingerprint
    True
    """
    target = os.fspath(path_or_url)
    if verify_key is not None:
        from .._files.signed import check_signing_key  # here: that module imports zarr

        verify_key = check_signing_key(verify_key, "verify_key")
    data = _read_map_bytes(target, storage_options)
    if data is not None:
        return map_from_json(data, target, verify_key)
    from .sketch import read_sketch_file  # here, not at the top: zarr only when a sketch is read

    try:
        return read_sketch_file(
            target, _rebuild_map, kinds=None, storage_options=storage_options, verify_key=verify_key
        )
    except SketchSignatureError:
        raise
    except SketchFormatError as error:
        raise MapFormatError(f"{target} is neither a map file nor a readable sketch: {error}") from error


def _rebuild_map(stored: StoredSketch) -> FeatureMap:
    """The map of a sketch file (its spec and ``map/`` arrays), which must have the stored fingerprint."""
    from ..maps import map_from_spec

    feature_map = map_from_spec(stored.spec, stored.map_arrays)
    stored.check_fingerprint(feature_map.fingerprint)
    return feature_map
