"""The drift monitor file format: one zarr v3 group per monitor, written atomically. No pickle.

The state of a :class:`~streamrff.DriftMonitor` (format ``"streamrff.drift-monitor"``,
version 1)::

    <monitor>/zarr.json               group; attrs: format, version, map (spec),
                                      fingerprint, params, counters, checksums,
                                      attributes_digest
    <monitor>/reference_sum           (D,) float64
    <monitor>/thresholds              (window + 1,) float64; [0] is +inf
    <monitor>/window_features         (window, D) float32 ring buffer
    <monitor>/window_squared_norms    (window,) float64 ring buffer
    <monitor>/window_sum              (D,) float64
    <monitor>/map/<array>             fitted map arrays the spec does not give (K-JL)

Arrays are little-endian with an explicit ``bytes`` codec; ``checksums`` holds the
sha256 of each array's little-endian bytes and ``attributes_digest`` the sha256 of
the canonical JSON of every other attribute, so every saved value is verified on
load. The group is written under a temporary name beside the target, its
attributes last, and published in one step (:func:`streamrff._publish.publish`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._bounded_read import GuardedLocalStore
from .._publish import publish, remove_path, staging_path
from .._sketchfile import _attributes_digest, _checksum
from ..errors import InputError, SketchFormatError
from ..typing import PathOrURL

__all__ = ["MONITOR_FORMAT_NAME", "MONITOR_FORMAT_VERSION", "write_monitor_group", "read_monitor_group"]

MONITOR_FORMAT_NAME = "streamrff.drift-monitor"
MONITOR_FORMAT_VERSION = 1


def write_monitor_group(
    path: PathOrURL, attrs: dict[str, Any], arrays: dict[str, np.ndarray], overwrite: bool = False
) -> None:
    """Write a monitor's attributes and arrays as a new local zarr group (see :meth:`DriftMonitor.save`)."""
    import zarr  # here, not at the top: `import streamrff.drift` stays light until a monitor is saved
    from zarr.codecs import BytesCodec

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
    attrs["attributes_digest"] = _attributes_digest(attrs)
    staging = staging_path(target)
    try:
        root = zarr.open_group(store=zarr.storage.LocalStore(staging), mode="w", zarr_format=3)
        for name, value in arrays.items():
            little = np.ascontiguousarray(value)
            little = little.astype(little.dtype.newbyteorder("<"), copy=False)
            node = root.create_array(
                name, shape=little.shape, dtype=little.dtype, chunks=little.shape if little.size else "auto",
                serializer=BytesCodec(endian="little"), fill_value=0,
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


def read_monitor_group(path: PathOrURL) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The attributes and arrays of a saved monitor, after checking its format, digest and checksums.

    Regular files only, no link inside the group (as for sketch files).

    Raises
    ------
    SketchFormatError
        If the directory is not a monitor of this format version, or fails a check.
    """
    import zarr  # here, not at the top: `import streamrff.drift` stays light until a monitor is loaded

    target = _local_target(path)
    if not Path(target).is_dir():
        raise SketchFormatError(f"No drift monitor at {target}: expected a directory written by DriftMonitor.save.")
    try:
        root = zarr.open_group(store=GuardedLocalStore(target, read_only=True), mode="r", zarr_format=3)
        attrs = dict(root.attrs)
    except Exception as error:  # zarr raises many types for a damaged group
        raise SketchFormatError(f"{target} is not a readable zarr group: {type(error).__name__}: {error}") from error
    if attrs.get("format") != MONITOR_FORMAT_NAME or attrs.get("version") != MONITOR_FORMAT_VERSION:
        raise SketchFormatError(
            f"Expected format {MONITOR_FORMAT_NAME!r} version {MONITOR_FORMAT_VERSION} at {target}. Got format "
            f"{attrs.get('format')!r} version {attrs.get('version')!r}; a sketch loads with srf.load instead."
        )
    digest = attrs.get("attributes_digest")
    try:
        matches = digest == _attributes_digest(attrs)
    except (TypeError, ValueError):
        matches = False
    if not matches:
        raise SketchFormatError(f"{target}: the group attributes do not match their digest (tampered or incomplete).")
    arrays: dict[str, np.ndarray] = {}
    checksums = attrs["checksums"]
    for name, expected in checksums.items():
        try:
            value = np.asarray(root[name][...])
        except Exception as error:
            raise SketchFormatError(f"{target}: array {name!r} is missing or unreadable ({error}).") from error
        if _checksum(value) != expected:
            raise SketchFormatError(f"{target}: array {name!r} does not match its checksum (corrupt).")
        arrays[name] = value.astype(value.dtype.newbyteorder("="), copy=False)
    return attrs, arrays
