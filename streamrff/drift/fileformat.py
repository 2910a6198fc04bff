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

import hashlib
import json
import numbers
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._publish import publish, remove_path, staging_path
from .._validation import normalize_seed
from ..errors import InputError, SketchFormatError
from ..maps import map_from_spec
from ..typing import PathOrURL
from .monitor import DriftMonitor

__all__ = ["MONITOR_FORMAT_NAME", "MONITOR_FORMAT_VERSION", "save_monitor", "load_monitor", "monitor_state"]

MONITOR_FORMAT_NAME = "streamrff.drift-monitor"
MONITOR_FORMAT_VERSION = 1


def _checksum(array: np.ndarray) -> str:
    little = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
    return hashlib.sha256(little.tobytes()).hexdigest()


def _canonical_digest(attrs: dict[str, Any]) -> str:
    text = json.dumps(attrs, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def monitor_state(monitor: DriftMonitor) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The group attributes and arrays that describe ``monitor`` (see the module docstring)."""
    arrays = {
        "reference_sum": monitor.reference_sum_,
        "thresholds": monitor.thresholds_,
        "window_features": monitor.window_features_,
        "window_squared_norms": monitor.window_squared_norms_,
        "window_sum": monitor.window_sum_,
    }
    arrays.update({f"map/{name}": value for name, value in monitor.feature_map_.state_arrays().items()})
    params = monitor.get_params(deep=False)
    params["feature_map"] = None  # the fitted map is stored as the map spec
    params["seed"] = normalize_seed(monitor.seed) if isinstance(monitor.seed, numbers.Integral) else None
    attrs = {
        "format": MONITOR_FORMAT_NAME,
        "version": MONITOR_FORMAT_VERSION,
        "map": monitor.feature_map_.spec,
        "fingerprint": monitor.feature_map_.fingerprint,
        "params": params,
        "simulation": monitor.simulation_,
        "n_streams": monitor.n_streams_,
        "n_features_in": monitor.n_features_in_,
        "reference_count": monitor.reference_count_,
        "reference_squared_norm_sum": monitor.reference_squared_norm_sum_,
        "window_squared_norm_sum": monitor.window_squared_norm_sum_,
        "run_length": monitor.run_length_,
        "n_rows_seen": monitor.n_rows_seen_,
        "drift_at": monitor.drift_at_,
        "checksums": {name: _checksum(np.asarray(value)) for name, value in arrays.items()},
    }
    return attrs, arrays


def save_monitor(monitor: DriftMonitor, path: PathOrURL, overwrite: bool = False) -> None:
    """Write ``monitor`` to a new local zarr directory (see :meth:`DriftMonitor.save`)."""
    import zarr
    from zarr.codecs import BytesCodec

    monitor._check_fitted()
    target = Path(_local_target(path))
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists. Choose another path or pass overwrite=True.")
    attrs, arrays = monitor_state(monitor)
    attrs = json.loads(json.dumps(attrs))
    attrs["attributes_digest"] = _canonical_digest(attrs)
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


def load_monitor(path: PathOrURL) -> DriftMonitor:
    """Read a :class:`DriftMonitor` saved with :meth:`DriftMonitor.save`, validating everything.

    Checks the format name and version, the attributes' digest, every array's
    checksum, shape and dtype, and rebuilds the map from its spec (its
    fingerprint must match).

    Parameters
    ----------
    path : str or PathLike
        The saved monitor's directory.

    Returns
    -------
    DriftMonitor

    Raises
    ------
    SketchFormatError
        If the directory is not a valid monitor of this format version.

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(1)
    >>> monitor = srf.DriftMonitor(window=20, ert=100, n_features=64, n_streams=500).fit(rng.normal(size=(500, 2)))
    >>> _ = monitor.update(rng.normal(size=(30, 2)))
    >>> path = os.path.join(tempfile.mkdtemp(), "monitor")
    >>> monitor.save(path)
    >>> loaded = srf.load_monitor(path)
    >>> rows = rng.normal(size=(10, 2))
    >>> bool(np.array_equal(loaded.update(rows).statistic, monitor.update(rows).statistic))
    True
    """
    import zarr

    target = _local_target(path)
    if not Path(target).is_dir():
        raise SketchFormatError(f"No drift monitor at {target}: expected a directory written by DriftMonitor.save.")
    try:
        root = zarr.open_group(store=zarr.storage.LocalStore(target, read_only=True), mode="r", zarr_format=3)
        attrs = dict(root.attrs)
    except Exception as error:  # zarr raises many types for a damaged group
        raise SketchFormatError(f"{target} is not a readable zarr group: {type(error).__name__}: {error}") from error
    if attrs.get("format") != MONITOR_FORMAT_NAME or attrs.get("version") != MONITOR_FORMAT_VERSION:
        raise SketchFormatError(
            f"Expected format {MONITOR_FORMAT_NAME!r} version {MONITOR_FORMAT_VERSION} at {target}. Got format "
            f"{attrs.get('format')!r} version {attrs.get('version')!r}; a sketch loads with srf.load instead."
        )
    digest = attrs.pop("attributes_digest", None)
    try:
        matches = digest == _canonical_digest(attrs)
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
    try:
        feature_map = map_from_spec(
            attrs["map"], {name[4:]: value for name, value in arrays.items() if name.startswith("map/")}
        )
        if feature_map.fingerprint != attrs["fingerprint"]:
            raise SketchFormatError(f"{target}: the map rebuilt from its spec does not match the stored fingerprint.")
        monitor = DriftMonitor(**attrs["params"])
        window, width = int(attrs["params"]["window"]), feature_map.n_features_out_
        expected_shapes = {
            "reference_sum": ((width,), np.float64),
            "thresholds": ((window + 1,), np.float64),
            "window_features": ((window, width), np.float32),
            "window_squared_norms": ((window,), np.float64),
            "window_sum": ((width,), np.float64),
        }
        for name, (shape, dtype) in expected_shapes.items():
            if name not in arrays or arrays[name].shape != shape or arrays[name].dtype != dtype:
                raise SketchFormatError(
                    f"{target}: array {name!r} must have shape {shape} and dtype {np.dtype(dtype)}."
                )
        monitor.feature_map_ = feature_map
        monitor.n_features_in_ = int(attrs["n_features_in"])
        monitor.simulation_ = str(attrs["simulation"])
        monitor.n_streams_ = int(attrs["n_streams"])
        monitor.reference_count_ = int(attrs["reference_count"])
        monitor.reference_sum_ = np.array(arrays["reference_sum"])
        monitor.reference_squared_norm_sum_ = float(attrs["reference_squared_norm_sum"])
        monitor.thresholds_ = np.array(arrays["thresholds"])
        monitor.window_features_ = np.array(arrays["window_features"])
        monitor.window_squared_norms_ = np.array(arrays["window_squared_norms"])
        monitor.window_sum_ = np.array(arrays["window_sum"])
        monitor.window_squared_norm_sum_ = float(attrs["window_squared_norm_sum"])
        monitor.run_length_ = int(attrs["run_length"])
        monitor.n_rows_seen_ = int(attrs["n_rows_seen"])
        monitor.drift_at_ = None if attrs["drift_at"] is None else int(attrs["drift_at"])
    except SketchFormatError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise SketchFormatError(f"{target}: not a valid drift monitor ({type(error).__name__}: {error}).") from error
    if monitor.reference_count_ < 2 or not np.isfinite(monitor.thresholds_[1:]).all():
        raise SketchFormatError(f"{target}: expected a reference of >= 2 rows and finite thresholds.")
    return monitor
