"""Streaming drift monitoring: a reference kernel-mean sketch against a sliding window of the last rows.

A :class:`DriftMonitor` holds the reference as sums of features (count, feature
sum, sum of squared norms: any number of rows, sketched out of core and merged
across sites) and the last ``window`` rows of the stream as a ring buffer of
their features. Each new row costs O(D): its features enter the window sums,
the features of the row that leaves are subtracted, and the unbiased MMD^2 of
the window against the reference is read off the sums. The alarm thresholds
are calibrated, from the reference alone, to an expected run time under no
change (Cobb, Van Looveren & Klaise 2022; :mod:`streamrff.drift.calibration`).
The monitor saves to a zarr group (:mod:`streamrff.formats.monitor`). An analysis: it imports the
engine, the sources, the file formats, the sketches, the maps and the layers below, never a surface.
"""

from __future__ import annotations

from ..formats.monitor import MONITOR_FORMAT_NAME, MONITOR_FORMAT_VERSION
from .calibration import calibrate_thresholds
from .edetector import EDetector
from .monitor import ALARM_TOP_ROWS, DriftMonitor, DriftUpdate, load_monitor
from .ranking import RATIO_FLOOR, kernel_mean_ratio

__all__ = [
    "DriftMonitor",
    "DriftUpdate",
    "EDetector",
    "load_monitor",
    "calibrate_thresholds",
    "MONITOR_FORMAT_NAME",
    "MONITOR_FORMAT_VERSION",
    "ALARM_TOP_ROWS",
    "RATIO_FLOOR",
    "kernel_mean_ratio",
]
