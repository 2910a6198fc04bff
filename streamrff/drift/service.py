"""The state directory of a drift service (``streamrff watch --state DIR``): fit once, calibrate once, resume.

A state directory holds, all written atomically (staged beside, then published in one step)::

    DIR/monitor/                 the monitor and its cursor (:meth:`DriftMonitor.save`); a restart resumes it
    DIR/fit/                     the fit before its calibration (a monitor group whose thresholds are NaN,
                                 plus the calibration's bank and inputs): the first thing saved, so a kill
                                 during the calibration does not redo the fit; removed once monitor/ exists
    DIR/calibrations/<key>.json  calibrated thresholds, keyed by what they depend on (:func:`calibration_key`)
    DIR/service.json             the reference the state was fitted on (for the restart's log line)

The calibration (simulated streams, seconds) is the slow part of a fit; its result is a pure function of
the map, the reference (through the simulation bank drawn from it), the window, the ERT, the number of
streams and the seed, so it is cached under a digest of exactly those: a restart or a refit with the same
inputs never recalibrates. An analysis module: it imports the monitor and the file helpers, never a surface.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._files.publish import publish_text, remove_path
from ..errors import SketchFormatError
from ..formats.monitor import read_monitor_group, write_monitor_group
from .monitor import DriftMonitor

__all__ = ["StatePaths", "calibration_key", "save_fit", "load_fit", "cached_thresholds", "store_thresholds"]

#: Version of the calibration key's recipe (a change of recipe invalidates every cached calibration).
_KEY_VERSION = 1


class StatePaths:
    """The files of a state directory ``root`` (see the module docstring).

    Examples
    --------
    >>> paths = StatePaths("/srv/drift")
    >>> paths.monitor, paths.fit, paths.calibration("ab12")
    ('/srv/drift/monitor', '/srv/drift/fit', '/srv/drift/calibrations/ab12.json')
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self.monitor = os.path.join(self.root, "monitor")
        self.fit = os.path.join(self.root, "fit")
        self.service = os.path.join(self.root, "service.json")
        self.calibrations = os.path.join(self.root, "calibrations")

    def calibration(self, key: str) -> str:
        return os.path.join(self.calibrations, f"{key}.json")

    def remove_leftovers(self) -> None:
        """Remove what a killed writer left half-written (staging names): only while holding the state's lock."""
        for folder in (Path(self.root), Path(self.calibrations)):
            if folder.is_dir():
                for staging in folder.glob(".*.partial-*"):
                    remove_path(staging)


def _digest(array: np.ndarray) -> str:
    little = np.ascontiguousarray(array)
    little = little.astype(little.dtype.newbyteorder("<"), copy=False)
    return hashlib.sha256(str((little.dtype.str, little.shape)).encode() + little.tobytes()).hexdigest()


def calibration_key(monitor: DriftMonitor) -> str:
    """The digest of everything the calibration of a fitted, not yet calibrated ``monitor`` depends on.

    The map (its fingerprint), the reference (its count and feature sum, and the simulation bank drawn
    from it), the simulation kind, the window, the ERT, the number of simulated streams and the seed.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rows = np.random.default_rng(0).normal(size=(300, 2))
    >>> def fitted(window):
    ...     return srf.DriftMonitor(window, 100, n_features=16, n_streams=50)._fit_uncalibrated(rows)
    >>> calibration_key(fitted(10)) == calibration_key(fitted(10)), calibration_key(fitted(10)) == calibration_key(
    ...     fitted(11))
    (True, False)
    """
    bank, window, ert, n_streams, seed = monitor.calibration_inputs_
    record = {
        "version": _KEY_VERSION,
        "map": monitor.feature_map_.fingerprint,
        "reference": [int(monitor.reference_count_), _digest(np.asarray(monitor.reference_sum_))],
        "bank": _digest(np.asarray(bank)),
        "simulation": monitor.simulation_,
        "window": int(window),
        "ert": float(ert),
        "n_streams": int(n_streams),
        "seed": int(seed),
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _record_signature(digest: str, key: bytes) -> str:
    return hmac.new(key, b"streamrff.calibration v1\n" + digest.encode(), hashlib.sha256).hexdigest()


def cached_thresholds(paths: StatePaths, key: str, window: int, verify_key: bytes | None = None) -> np.ndarray | None:
    """The thresholds cached under ``key``, or None (absent, or not a valid record: it is then recalibrated).

    With ``verify_key`` a record must carry its HMAC under that key (:func:`store_thresholds` with the
    same ``signing_key``); an unsigned or edited one is recalibrated, never trusted.
    """
    try:
        record = json.loads(Path(paths.calibration(key)).read_text())
        thresholds = np.array(record["thresholds"], dtype=np.float64)
        if record.get("key") != key or thresholds.shape != (window + 1,) or not np.isfinite(thresholds[1:]).all():
            return None
        digest = _digest(thresholds)
        if record.get("digest") != digest:
            return None
        if verify_key is not None and not hmac.compare_digest(
            str(record.get("signature", "")), _record_signature(digest, verify_key)
        ):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return thresholds


def store_thresholds(paths: StatePaths, key: str, thresholds: np.ndarray, signing_key: bytes | None = None) -> None:
    """Cache ``thresholds`` under ``key`` (JSON: Python's float repr round-trips float64 exactly), signed with
    ``signing_key`` if given."""
    os.makedirs(paths.calibrations, exist_ok=True)
    digest = _digest(thresholds)
    record = {"key": key, "thresholds": [float(value) for value in thresholds], "digest": digest}
    if signing_key is not None:
        record["signature"] = _record_signature(digest, signing_key)
    publish_text(paths.calibration(key), json.dumps(record), overwrite=True)


def save_fit(path: str, monitor: DriftMonitor, signing_key: bytes | None = None) -> None:
    """Save a fitted, not yet calibrated ``monitor`` (:meth:`DriftMonitor._fit_uncalibrated`) to ``path``.

    A monitor group whose thresholds are NaN (so :func:`~streamrff.load_monitor` refuses it as a monitor),
    with the calibration's bank as one more array and its other inputs as the attribute ``calibration``.
    """
    bank, window, ert, n_streams, seed = monitor.calibration_inputs_
    pending = np.full(window + 1, np.nan)
    pending[0] = np.inf
    monitor.thresholds_ = pending
    try:
        attrs, arrays = monitor._state()
    finally:
        del monitor.thresholds_
    arrays["calibration_bank"] = np.asarray(bank)
    attrs["calibration"] = {"window": int(window), "ert": float(ert), "n_streams": int(n_streams), "seed": int(seed)}
    write_monitor_group(path, attrs, arrays, overwrite=True, signing_key=signing_key)


def load_fit(path: str, verify_key: bytes | None = None) -> DriftMonitor:
    """A monitor saved by :func:`save_fit`: fitted, its ``calibration_inputs_`` set, not calibrated yet.

    Raises
    ------
    SketchFormatError
        If ``path`` is not a fit saved by :func:`save_fit`.
    """
    attrs, arrays = read_monitor_group(path, verify_key=verify_key)
    inputs = attrs.get("calibration")
    bank = arrays.pop("calibration_bank", None)
    if not isinstance(inputs, dict) or bank is None or bank.ndim != 2 or bank.dtype != np.float32:
        raise SketchFormatError(f"{path}: not a saved fit (no calibration bank and inputs). Remove it to fit anew.")
    try:
        window, ert = int(inputs["window"]), float(inputs["ert"])
        n_streams, seed = int(inputs["n_streams"]), int(inputs["seed"])
    except (KeyError, TypeError, ValueError) as error:
        raise SketchFormatError(f"{path}: its calibration inputs are not valid ({error}). Remove it.") from None
    arrays["thresholds"] = np.zeros(window + 1)  # a placeholder for the checks; replaced by the calibration
    monitor = DriftMonitor._from_state(attrs, arrays, path)
    del monitor.thresholds_
    monitor.calibration_inputs_ = (bank, window, ert, n_streams, seed)
    return monitor


def read_service_record(paths: StatePaths) -> dict[str, Any]:
    """``service.json`` (what the state was fitted on), or ``{}``."""
    try:
        record = json.loads(Path(paths.service).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write_service_record(paths: StatePaths, record: dict[str, Any]) -> None:
    publish_text(paths.service, json.dumps(record, sort_keys=True), overwrite=True)
