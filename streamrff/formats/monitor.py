"""The drift monitor file format: one zarr v3 group per monitor, written atomically. No pickle.

The state of a :class:`~streamrff.DriftMonitor` (format ``"streamrff.drift-monitor"``,
version 2; version 1 files load too)::

    <monitor>/zarr.json               group; attrs: format, version, map (spec),
                                      fingerprint, params, counters, checksums,
                                      attributes_digest; version 2 adds
                                      n_rows_skipped and cursor (null, or where in
                                      its source a follower stopped:
                                      :mod:`streamrff.drift.follow`)
    <monitor>/reference_sum           (D,) float64
    <monitor>/thresholds              (window + 1,) float64; [0] is +inf
    <monitor>/window_features         (window, D) float32 ring buffer
    <monitor>/window_squared_norms    (window,) float64 ring buffer
    <monitor>/window_sum              (D,) float64
    <monitor>/map/<array>             fitted map arrays the spec does not give (K-JL)

Version 2, optional (a monitor fitted on reference data; absent for a reference
given as a sketch, and in version 1 files: the alarm's per-column statistic is then None)::

    <monitor>/reference_column_mean      (d,) float64, d = n_features_in
    <monitor>/reference_column_variance  (d,) float64 (ddof=1)
    <monitor>/window_rows                (window, d) float64 ring buffer of the window's raw rows

Version 2, a monitor with ``params.method = "e-detector"`` only (its thresholds are all
``log(1/alpha)``; its window's ring buffers serve the alarm's explanation)::

    <monitor>/detector_witness_sum       (D,) float64: sum of z(x) - reference mean over the run
    <monitor>/detector_scalars           (4,) float64: betting fraction, ONS curvature sum,
                                         log e-value, its running max

Arrays are little-endian with an explicit ``bytes`` codec; ``checksums`` holds the
sha256 of each array's little-endian bytes and ``attributes_digest`` the sha256 of
the canonical JSON of every other attribute, so every saved value is verified on
load. The group is written under a temporary name beside the target, its
attributes last, and published in one step (:func:`streamrff._files.publish.publish`).

Reading is bounded: before any array is read, every array's declared shape and
dtype must be the ones the attributes imply (the window and the reference width),
its one stored chunk must have exactly the bytes of that shape, and the arrays
together must fit in the memory available (the checks sketch files pass,
:mod:`streamrff.formats.sketch`). Version 2 stores every chunk (zeros
too), so a missing chunk is a damaged file; in version 1, whose all-zero arrays
were not stored, only an empty window (``run_length`` 0) may lack its chunks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._files.bounded_read import MAX_JSON_DEPTH, GuardedLocalStore, check_json_depth
from .._files.publish import publish, remove_path, staging_path
from .._files.signed import (
    SIGNATURE_ALGORITHM,
    SIGNATURE_ATTRIBUTE,
    _attributes_digest,
    _checksum,
    check_signature_record,
    check_signing_key,
    signature_value,
)
from .._files.zarrcheck import check_stored_chunks
from ..errors import InputError, SketchFormatError, SketchSignatureError
from ..typing import PathOrURL

__all__ = ["MONITOR_FORMAT_NAME", "MONITOR_FORMAT_VERSION", "write_monitor_group", "read_monitor_group"]

MONITOR_FORMAT_NAME = "streamrff.drift-monitor"
MONITOR_FORMAT_VERSION = 2
#: Versions :func:`read_monitor_group` reads (1: no cursor, no skipped-row count).
READABLE_VERSIONS = (1, 2)
#: Elements of an absent (all-zero) array a version 1 file may imply.
_MAX_IMPLIED_ELEMENTS = 2**24
#: Optional version 2 arrays: all present (a monitor fitted on data) or none (fitted on a sketch).
COLUMN_ARRAYS = ("reference_column_mean", "reference_column_variance", "window_rows")
#: The e-detector's arrays: both present exactly when ``params.method`` is "e-detector".
DETECTOR_ARRAYS = ("detector_witness_sum", "detector_scalars")


def write_monitor_group(
    path: PathOrURL,
    attrs: dict[str, Any],
    arrays: dict[str, np.ndarray],
    overwrite: bool = False,
    signing_key: bytes | None = None,
) -> None:
    """Write a monitor's attributes and arrays as a new local zarr group (see :meth:`DriftMonitor.save`).

    With ``signing_key``, a ``signature`` attribute by the rule of sketch files
    (:func:`streamrff._files.signed.signature_value`: the attributes and the array checksums).
    """
    if signing_key is not None:
        signing_key = check_signing_key(signing_key, "signing_key")
    import zarr  # here, not at the top: `import streamrff.drift` stays light until a monitor is saved
    from zarr.codecs import BytesCodec

    attrs = {"n_rows_skipped": 0, "cursor": None, **attrs}

    target = Path(_local_target(path))
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists. Choose another path or pass overwrite=True.")
    attrs = {
        "format": MONITOR_FORMAT_NAME,
        "version": MONITOR_FORMAT_VERSION,
        **attrs,
        "checksums": {name: _checksum(np.asarray(value)) for name, value in arrays.items()},
    }
    attrs = json.loads(json.dumps(attrs))
    if signing_key is not None:
        attrs[SIGNATURE_ATTRIBUTE] = {"algorithm": SIGNATURE_ALGORITHM, "value": signature_value(attrs, signing_key)}
    attrs["attributes_digest"] = _attributes_digest(attrs)
    staging = staging_path(target)
    try:
        root = zarr.open_group(store=zarr.storage.LocalStore(staging), mode="w", zarr_format=3)
        for name, value in arrays.items():
            little = np.ascontiguousarray(value)
            little = little.astype(little.dtype.newbyteorder("<"), copy=False)
            node = root.create_array(
                name, shape=little.shape, dtype=little.dtype, chunks=little.shape if little.size else "auto",
                serializer=BytesCodec(endian="little"), fill_value=0, config={"write_empty_chunks": True},
            )  # fmt: skip
            if little.size:
                node[...] = little
        root.attrs.update(attrs)  # last: marks the group complete
        publish(staging, target, overwrite)
    finally:
        remove_path(staging)


def _local_target(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a local path (str or PathLike). Got {type(path).__name__}.")
    target = os.fspath(path)
    if "://" in target and not target.startswith("file://"):
        raise InputError(f"Expected a local path for a drift monitor. Got the URL {target!r}; save it locally.")
    return target[len("file://") :] if target.startswith("file://") else target


def read_monitor_group(
    path: PathOrURL, verify_key: bytes | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The attributes and arrays of a saved monitor, after checking its format, digest, signature and checksums.

    Regular files only, no link inside the group (as for sketch files). With ``verify_key`` the
    state must be signed with it (before any array is read).

    Raises
    ------
    SketchFormatError
        If the directory is not a monitor of this format version, or fails a check.
    SketchSignatureError
        If ``verify_key`` is given and the state is unsigned, signed with another key or edited.
    """
    if verify_key is not None:
        verify_key = check_signing_key(verify_key, "verify_key")
    import zarr  # here, not at the top: `import streamrff.drift` stays light until a monitor is loaded

    target = _local_target(path)
    if not Path(target).is_dir():
        raise SketchFormatError(f"No drift monitor at {target}: expected a directory written by DriftMonitor.save.")
    try:
        root = zarr.open_group(store=GuardedLocalStore(target, read_only=True), mode="r", zarr_format=3)
        attrs = dict(root.attrs)
    except Exception as error:  # zarr raises many types for a damaged group
        raise SketchFormatError(f"{target} is not a readable zarr group: {type(error).__name__}: {error}") from error
    if not attrs:
        raise SketchFormatError(f"{target}: the state's zarr.json has no attributes (a corrupt monitor state).")
    if attrs.get("format") != MONITOR_FORMAT_NAME or attrs.get("version") not in READABLE_VERSIONS:
        raise SketchFormatError(
            f"Expected format {MONITOR_FORMAT_NAME!r} version {' or '.join(map(str, READABLE_VERSIONS))} at "
            f"{target}. Got format {attrs.get('format')!r} version {attrs.get('version')!r}; a sketch loads with "
            "srf.load instead."
        )
    digest = attrs.get("attributes_digest")
    try:
        _check_depth(attrs, target)
        matches = digest == _attributes_digest(attrs)
    except (TypeError, ValueError, RecursionError):
        matches = False
    if not matches:
        raise SketchFormatError(f"{target}: the group attributes do not match their digest (tampered or incomplete).")
    if verify_key is not None:
        check_signature_record(
            attrs.get(SIGNATURE_ATTRIBUTE), signature_value(attrs, verify_key), target, "monitor state",
            "DriftMonitor.save(..., signing_key=...) or `streamrff watch --sign-key FILE --save-monitor`",
            SketchSignatureError,
        )  # fmt: skip
    check_cursor_fields(attrs.get("cursor"), target)
    arrays: dict[str, np.ndarray] = {}
    checksums = attrs["checksums"]
    if not isinstance(checksums, dict):
        raise SketchFormatError(f"{target}: the attribute 'checksums' is not a mapping (not a drift monitor).")
    _check_declared_arrays(root, attrs, target)
    for name, expected in checksums.items():
        try:
            value = np.asarray(root[name][...])
        except Exception as error:
            raise SketchFormatError(f"{target}: array {name!r} is missing or unreadable ({error}).") from error
        if _checksum(value) != expected:
            raise SketchFormatError(f"{target}: array {name!r} does not match its checksum (corrupt).")
        arrays[name] = value.astype(value.dtype.newbyteorder("="), copy=False)
    return attrs, arrays


def _expected_shapes(attrs: dict[str, Any], width: int, target: str) -> dict[str, tuple[tuple[int, ...], str]]:
    window = attrs.get("params", {}).get("window") if isinstance(attrs.get("params"), dict) else None
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise SketchFormatError(f"{target}: params.window must be an integer >= 2. Got {window!r} (not a monitor).")
    expected = {
        "reference_sum": ((width,), "float64"),
        "thresholds": ((window + 1,), "float64"),
        "window_features": ((window, width), "float32"),
        "window_squared_norms": ((window,), "float64"),
        "window_sum": ((width,), "float64"),
    }
    present = [name for name in COLUMN_ARRAYS if name in attrs["checksums"]]
    if present:
        columns = attrs.get("n_features_in")
        if attrs.get("version") == 1 or len(present) != len(COLUMN_ARRAYS):
            raise SketchFormatError(
                f"{target}: the arrays {', '.join(COLUMN_ARRAYS)} come together, in version 2 only. Got {present} "
                f"in version {attrs.get('version')!r} (tampered or damaged)."
            )
        if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
            raise SketchFormatError(f"{target}: n_features_in must be an integer >= 1. Got {columns!r}.")
        expected.update({
            "reference_column_mean": ((columns,), "float64"),
            "reference_column_variance": ((columns,), "float64"),
            "window_rows": ((window, columns), "float64"),
        })  # fmt: skip
    expected.update(_detector_shapes(attrs, width, target))
    return expected


def _detector_shapes(attrs: dict[str, Any], width: int, target: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """The e-detector's arrays and their shapes: both for ``params.method = "e-detector"``, none otherwise."""
    method = attrs["params"].get("method", "ert")
    present = [name for name in DETECTOR_ARRAYS if name in attrs["checksums"]]
    if method not in ("ert", "e-detector") or (method == "e-detector") != (len(present) == len(DETECTOR_ARRAYS)) or (
        method == "ert" and present
    ):  # fmt: skip
        raise SketchFormatError(
            f"{target}: params.method {method!r} with the arrays {present}: an 'e-detector' monitor has "
            f"{', '.join(DETECTOR_ARRAYS)}, an 'ert' monitor neither (tampered or damaged)."
        )
    if method == "ert":
        return {}
    return {"detector_witness_sum": ((width,), "float64"), "detector_scalars": ((4,), "float64")}


def _check_declared_arrays(root: Any, attrs: dict[str, Any], target: str) -> None:
    """Refuse, before reading any array, shapes the attributes do not imply, chunks of the wrong size, absent
    chunks a file of this version stores, and arrays that would not fit in memory (see the module docstring)."""
    from .._base.memory import memory_available

    names = list(attrs["checksums"])
    nodes = {}
    for name in names:
        try:
            nodes[name] = root[name]
        except Exception as error:  # zarr raises many types for damaged metadata
            raise SketchFormatError(f"{target}: array {name!r} is missing or unreadable ({error}).") from error
    if "reference_sum" not in nodes or nodes["reference_sum"].ndim != 1:
        raise SketchFormatError(f"{target}: no 1-D array 'reference_sum' (not a drift monitor, or damaged).")
    expected = _expected_shapes(attrs, int(nodes["reference_sum"].shape[0]), target)
    _check_map_sizes(attrs.get("map"), int(nodes["reference_sum"].shape[0]), target)
    empty_window = attrs.get("version") == 1 and attrs.get("run_length") == 0
    total = 0
    for name, node in nodes.items():
        shape, dtype = expected.get(name, (tuple(node.shape), str(node.dtype)))
        if tuple(node.shape) != shape or str(node.dtype) != dtype:
            raise SketchFormatError(
                f"{target}: array {name!r} declares shape {tuple(node.shape)} and dtype {node.dtype}; the monitor's "
                f"attributes imply {shape} and {dtype} (tampered or damaged)."
            )
        n_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        total += n_bytes
        if not n_bytes:
            continue
        if node.nchunks != 1:
            raise SketchFormatError(
                f"{target}: array {name!r} declares {node.nchunks:,} chunks; a monitor stores each array as one "
                "chunk (tampered or damaged)."
            )
        if not _chunk_stored(target, name, node):
            implied = empty_window and name.startswith("window_") and node.size <= _MAX_IMPLIED_ELEMENTS
            if not implied:
                raise SketchFormatError(
                    f"{target}: array {name!r} of shape {shape} has no stored chunk (damaged or tampered: a monitor "
                    "stores its arrays). Restore the monitor from a copy, or fit a new one."
                )
            continue  # a version 1 file's empty window: zeros, implied by run_length 0
        check_stored_chunks(node, name, target)  # its stored and decoded sizes against the declared shape
    available = memory_available()
    if total > available:
        raise SketchFormatError(
            f"{target}: the monitor declares {total / 2**30:.1f} GiB of arrays; this process has "
            f"{available / 2**30:.1f} GiB available. Load it on a machine with more memory."
        )


def _chunk_stored(target: str, name: str, node: Any) -> bool:
    """Whether the one chunk of a monitor array is stored (zarr reads an absent one as zeros)."""
    key = node.metadata.encode_chunk_key((0,) * node.ndim)
    return os.path.lexists(Path(target) / name / key)


#: Nesting deeper than this in a monitor's attributes is refused (no state written by streamrff comes near).
MAX_ATTRIBUTE_DEPTH = MAX_JSON_DEPTH


def _check_depth(value: Any, target: str) -> None:
    """Refuse attributes nested deeper than :data:`MAX_ATTRIBUTE_DEPTH` (checked without recursion)."""
    check_json_depth(value, target, "a monitor state", MAX_ATTRIBUTE_DEPTH)


def _check_map_sizes(spec: Any, width: int, target: str) -> None:
    """Refuse a map spec whose declared sizes exceed the state's own arrays, before the map is built.

    The map's output width is the width of ``reference_sum`` (checked against memory with the other
    arrays), so no declared size of its spec may exceed it (issue 49: ``n_features`` 1e12 tried to
    allocate 10.9 TiB).
    """
    if not isinstance(spec, dict):
        raise SketchFormatError(
            f"{target}: the attribute 'map' must be a mapping (a map spec). Got {type(spec).__name__}."
        )
    for name in ("n_features", "n_components", "n_landmarks"):
        value = spec.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max(width, 1):
            raise SketchFormatError(
                f"{target}: the map spec declares {name} = {value!r}; the state's arrays hold {width} features, "
                "so it must be an integer in [1, that] (tampered or damaged)."
            )


#: Cursor fields that are row counts, and the least value each may take.
_CURSOR_COUNTS = {"n_columns": 1, "chunk_rows": 1, "next_row": 0, "drift_at_row": 0}


def check_cursor_fields(cursor: Any, target: str) -> None:
    """Refuse a source cursor whose fields have the wrong type or range (one line, before any use)."""
    if cursor is None:
        return
    if not isinstance(cursor, dict):
        raise SketchFormatError(f"{target}: the attribute 'cursor' must be null or a mapping.")
    for name, least in _CURSOR_COUNTS.items():
        value = cursor.get(name)
        if name not in cursor or (value is None and name == "drift_at_row"):
            continue  # absent fields are the reader's concern (a version 1 cursor is refused there)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SketchFormatError(
                f"{target}: the cursor's {name} must be an integer >= {least}. Got {value!r} (tampered or damaged)."
            )
    for name in ("source", "identity", "dtype"):
        if name in cursor and not isinstance(cursor[name], str):
            raise SketchFormatError(f"{target}: the cursor's {name} must be a string. Got {cursor[name]!r}.")
    last = cursor.get("last_chunk")
    if last is not None:
        rows = last.get("rows") if isinstance(last, dict) else None
        if (
            not isinstance(rows, list)
            or len(rows) != 2
            or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in rows)
            or not isinstance(last.get("objects", {}), dict)
        ):
            raise SketchFormatError(f"{target}: the cursor's last_chunk is malformed (tampered or damaged).")
