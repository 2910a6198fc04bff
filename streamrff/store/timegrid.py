"""Time buckets: durations, times as UTC nanoseconds, and the complete buckets of a time-sorted append.

A time grid of ``S`` seconds puts a row of time ``t`` (UTC) in bucket ``floor(t / S)`` counted
from 1970-01-01T00:00Z. A bucket is *complete* once a row of a later bucket is given (rows are
time-sorted), or when the caller says the rows given are final (``final=True``): its rows can
no longer change, so it is sketched and published; an incomplete last bucket waits.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import re
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["parse_bucket", "to_ns", "times_ns", "time_buckets", "times_digest", "format_ns", "time_levels"]

_NS = 1_000_000_000
_UNITS = {"s": 1, "sec": 1, "min": 60, "t": 60, "h": 3600, "d": 86400}
_PANDAS = re.compile(r"^\s*(\d+)?\s*([a-zA-Z]+)\s*$")
_ISO = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")


def parse_bucket(bucket: Any) -> tuple[int, int, str]:
    """``(rows, seconds, label)`` of a bucket argument: rows per bucket, or a duration.

    Durations: pandas-style ``"<n><unit>"`` with unit ``s``, ``min`` (or ``T``), ``h``, ``d``
    (``"1h"``, ``"15min"``, ``"2d"``), ISO 8601 ``"PT1H"``, ``"P1D"``, ``"PT1H30M"``, or a
    :class:`datetime.timedelta` / ``numpy.timedelta64`` of whole seconds.

    Examples
    --------
    >>> parse_bucket("1h"), parse_bucket("PT15M"), parse_bucket(10_000)
    ((0, 3600, '1h'), (0, 900, 'PT15M'), (10000, 0, ''))
    """
    if isinstance(bucket, (int, np.integer)) and not isinstance(bucket, (bool, np.timedelta64)):
        if bucket <= 0:
            raise InputError(f"bucket must be a positive number of rows or a duration (e.g. '1h'). Got {bucket!r}.")
        return int(bucket), 0, ""
    seconds = None
    if isinstance(bucket, np.timedelta64):
        bucket = bucket.astype("timedelta64[us]").item()
    if isinstance(bucket, datetime.timedelta):
        total = bucket / datetime.timedelta(seconds=1)
        seconds = int(total) if total == int(total) else None
        label = f"{seconds}s"
    elif isinstance(bucket, str):
        label = bucket.strip()
        iso = _ISO.match(label.upper())
        pandas = _PANDAS.match(label)
        if iso and any(iso.groups()):
            days, hours, minutes, secs = (int(part or 0) for part in iso.groups())
            seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
        elif pandas and pandas.group(2).lower() in _UNITS:
            seconds = int(pandas.group(1) or 1) * _UNITS[pandas.group(2).lower()]
    if not seconds or seconds <= 0:
        raise InputError(
            f"bucket={bucket!r} is not a number of rows or a duration of whole seconds. Pass rows (10_000), "
            "'<n>s', '<n>min', '<n>h', '<n>d' or ISO 8601 ('PT1H', 'P1D')."
        )
    return 0, int(seconds), label


def time_levels(seconds: int) -> int:
    """Dyadic levels of a time grid: enough buckets from the epoch to 2242 (2**33 seconds)."""
    return max(1, math.ceil(math.log2(2**33 / seconds)))


def to_ns(value: Any, name: str) -> int:
    """A time (datetime, numpy.datetime64, pandas Timestamp, ISO 8601 string) as UTC nanoseconds since the epoch.

    Naive times are taken as UTC.

    Examples
    --------
    >>> to_ns("1970-01-01T01:00", "start"), to_ns(np.datetime64("1970-01-02"), "stop")
    (3600000000000, 86400000000000)
    """
    try:
        if isinstance(value, str):
            value = datetime.datetime.fromisoformat(value.strip())
        if isinstance(value, datetime.datetime):
            if value.tzinfo is not None:
                value = value.astimezone(datetime.UTC).replace(tzinfo=None)
            value = np.datetime64(value, "us")
        if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
            value = np.datetime64(value, "D")
        if isinstance(value, np.datetime64) and not np.isnat(value):
            return int(value.astype("datetime64[ns]").astype(np.int64))
    except (ValueError, OverflowError):
        pass
    raise InputError(
        f"{name}={value!r} is not a time. Pass a datetime, numpy.datetime64 or ISO 8601 string "
        "('2026-01-01T00:00', UTC unless it names an offset)."
    )


def format_ns(ns: int) -> str:
    """UTC nanoseconds as an ISO 8601 string (seconds precision, 'Z')."""
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")) + "Z"


def times_ns(times: Any, n_rows: int) -> np.ndarray:
    """Row times as int64 UTC nanoseconds, checked: one per row, no NaT, sorted."""
    array = np.asarray(times)
    if array.dtype == object or array.dtype.kind in "US":
        try:
            import pandas

            array = pandas.to_datetime(array.ravel(), utc=True).tz_localize(None).to_numpy()
        except (ValueError, TypeError) as error:
            raise InputError(f"times hold values that are not times ({error}). Pass datetime64 values.") from None
    if array.dtype.kind != "M" or array.ndim != 1:
        raise InputError(
            f"times must be a 1-D array of datetime64 values, one per row. Got dtype {array.dtype}, shape "
            f"{array.shape}. Pass the rows' time coordinate."
        )
    if array.shape[0] != n_rows:
        raise InputError(f"times holds {array.shape[0]} values for {n_rows} rows. Pass one time per row.")
    if np.isnat(array).any():
        raise InputError(f"times holds NaT at row {int(np.flatnonzero(np.isnat(array))[0])}. Give every row a time.")
    ns = array.astype("datetime64[ns]").astype(np.int64)
    backwards = np.flatnonzero(np.diff(ns) < 0)
    if backwards.size:
        row = int(backwards[0]) + 1
        raise InputError(
            f"Rows must be time-sorted within an append: row {row} ({format_ns(ns[row])}) comes before row "
            f"{row - 1} ({format_ns(ns[row - 1])}). Sort the rows by time first."
        )
    return ns


def time_buckets(ns: np.ndarray, seconds: int, first: int | None, final: bool) -> list[tuple[int, int, int]]:
    """The complete buckets of sorted row times ``ns``: (bucket, first row, stop row), empty buckets included.

    From bucket ``first`` (default: the first row's) to the last row's bucket, which is complete
    only if ``final``. Rows before bucket ``first`` are left out.
    """
    if not ns.size:
        return []
    width = seconds * _NS
    last = int(ns[-1] // width) + (1 if final else 0)
    first = int(ns[0] // width) if first is None else first
    if last <= first:
        return []
    edges = np.searchsorted(ns, np.arange(first, last + 1, dtype=np.int64) * width, side="left")
    return [(first + i, int(edges[i]), int(edges[i + 1])) for i in range(last - first)]


def times_digest(rows_digest: str, ns: np.ndarray) -> str:
    """A time bucket's identity: the digest of its rows (positions from the bucket's first row) and of their times."""
    times = hashlib.sha256(np.ascontiguousarray(ns, dtype="<i8").tobytes()).digest()
    return hashlib.sha256(b"streamrff time bucket v1\n" + bytes.fromhex(rows_digest) + times).hexdigest()


def source_times(source: Any, times: Any, time_coordinate: str | None, sample_dim: str | None) -> Any:
    """The row times of an append to a time grid: ``times``, or an xarray source's time coordinate."""
    is_xarray = type(source).__module__.split(".")[0] == "xarray" and hasattr(source, "coords")
    if is_xarray and times is None:
        name = time_coordinate or sample_dim or source.dims[0]
        if name not in source.coords:
            raise InputError(
                f"The DataArray has no coordinate {name!r} (coordinates: {list(source.coords)}). Pass "
                "time_coordinate= naming the rows' times, or times=."
            )
        return source[name].values
    if time_coordinate is not None:
        raise InputError(
            f"time_coordinate={time_coordinate!r} applies to an xarray DataArray source (or, with times=, to none). "
            "Pass times= for numpy, dask and zarr sources."
        )
    if times is None:
        raise InputError(
            "This store has time buckets: pass times= (one datetime64 per row, time-sorted) or an xarray "
            "DataArray whose sample dimension has a time coordinate."
        )
    return times


def append_spans(
    root: Any, n_rows: int, start: Any, times: Any, final: bool
) -> tuple[np.ndarray | None, list[tuple[int, int, int]]]:
    """The row times (UTC ns; None on a grid of rows) and the complete buckets of an append: (bucket, lo, hi).

    ``root`` is the store's :class:`~streamrff.formats.store.StoreRoot`; ``lo..hi`` are rows of the source.
    """
    capacity = root.capacity
    if not root.bucket_seconds:
        start = 0 if start is None else start
        if not isinstance(start, (int, np.integer)) or isinstance(start, bool) or start < 0:
            raise InputError(f"start must be a row index >= 0. Got {start!r}.")
        rows, start = root.bucket_rows, int(start)
        first_bucket = -(-start // rows)
        stop_bucket = min((start + n_rows) // rows, capacity)
        return None, [(b, b * rows - start, (b + 1) * rows - start) for b in range(first_bucket, stop_bucket)]
    ns = times_ns(times, n_rows)
    width = root.bucket_seconds * _NS
    first = None
    if start is not None:
        start_ns = to_ns(start, "start")
        if start_ns % width:
            raise InputError(
                f"start={start!r} is not on a bucket edge of {root.bucket_label}. "
                f"Use {format_ns(start_ns - start_ns % width)}."
            )
        first = start_ns // width
    spans = time_buckets(ns, root.bucket_seconds, first, final)
    if spans and (spans[0][0] < 0 or spans[-1][0] >= capacity):
        bad = spans[0][0] if spans[0][0] < 0 else spans[-1][0]
        raise InputError(
            f"Rows of the bucket from {format_ns(bad * width)} lie outside the store's grid (1970 to "
            f"{format_ns(capacity * width)}). Append rows of that span to another store."
        )
    return ns, spans
