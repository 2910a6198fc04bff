"""Feeding a store from a stream read chunk by chunk (``watch --store``): each bucket appended once complete.

A reader of a growing array (``streamrff watch``) hands its rows over as it reads them; the feed
keeps the rows since the last bucket edge (at most one bucket and one chunk) and appends each
bucket through :meth:`SketchStore.append` the moment its last row arrives. A feed that starts, or
resumes, inside a bucket reads that bucket's earlier rows from the source first, so a restarted
watcher stores its buckets whole; a bucket already stored with the same rows changes nothing.

Time buckets (:class:`TimeBucketFeed`) take each row's time from a companion array of times or a
time coordinate of the watched zarr group (as xarray writes it: integers with CF ``units``), read
as the rows arrive (:class:`TimeColumn`). A time bucket is complete once a row of a later bucket
is read (as in :meth:`SketchStore.append`); rows whose time is not yet written wait (the writer
writes a row's time before, or with, the row). A feed that starts, or resumes, at row ``r`` goes
back to the first row of the bucket of row ``r - 1`` (or, if the store's last stored bucket is
older, of the bucket after it, at most :data:`RESUME_BUCKETS` buckets back), so a watcher killed
at any point stores each bucket exactly once: a re-append of a stored bucket with the same rows
and times changes no byte. Times must not go back: a row earlier than the one before it is
refused, naming both rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InputError, SourceError
from .timegrid import format_ns

__all__ = ["BucketFeed", "TimeBucketFeed", "TimeColumn", "watch_feed"]

#: How many missing buckets before the resumed one a feed fills from the source (a watcher's own failure).
RESUME_BUCKETS = 16

_NS = 1_000_000_000


class BucketFeed:
    """Append the complete row buckets of a stream to ``store`` as its rows arrive.

    Parameters
    ----------
    store : SketchStore
        A store of row buckets.
    read_rows : callable
        ``read_rows(start, stop)``: rows ``start..stop-1`` of the stream (to complete a bucket the
        feed starts inside).
    **options
        Job options of each append (``on_invalid``, ``client``, ...).

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> from streamrff.store.feed import BucketFeed
    >>> X = np.random.default_rng(0).normal(size=(250, 2))
    >>> rff = srf.RFF(n_features=16, bandwidth=1.0).fit(X)
    >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
    >>> feed = BucketFeed(store, lambda start, stop: X[start:stop])
    >>> feed.add(0, X[:70]), feed.add(70, X[70:130]), feed.add(130, X[130:250])
    ((), (0,), (1,))
    """

    def __init__(self, store: Any, read_rows: Callable[[int, int], Any], **options: Any) -> None:
        if store.bucket_seconds:
            raise InputError(
                f"{store.path} has time buckets: feed it with TimeBucketFeed (watch --times or --time-coordinate)."
            )
        self.store = store
        self._read_rows = read_rows
        self._options = options
        self._start: int | None = None
        self._parts: list[np.ndarray] = []
        self._held = 0

    def add(self, first: int, rows: Any) -> tuple[int, ...]:
        """Take rows ``first..`` of the stream; returns the buckets appended now."""
        size = self.store.bucket_rows
        if self._start is None or first != self._start + self._held:  # the first rows, or a jump: restart
            edge = first - first % size
            self._parts = [np.asarray(self._read_rows(edge, first))] if first > edge else []
            self._start, self._held = edge, first - edge
        rows = np.asarray(rows)
        self._parts.append(rows)
        self._held += rows.shape[0]
        complete = self._held - self._held % size
        if not complete:
            return ()
        block = np.concatenate(self._parts)
        result = self.store.append(block[:complete], start=self._start, **self._options)
        rest = block[complete:]
        self._parts, self._held = ([rest] if rest.shape[0] else []), rest.shape[0]
        self._start += complete
        return tuple(result.appended) + tuple(result.unchanged)


class TimeColumn:
    """The times of a stream's rows, read as they are written: a zarr array or ``.npy`` file of times.

    ``path`` holds ``datetime64`` values, or integers with CF ``units`` (``"minutes since
    2026-03-01"``, as xarray writes a time coordinate). Each read opens the array again (it
    grows); rows without a time yet (past its end, or NaT) are not returned.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "t.npy")
    >>> np.save(path, np.datetime64("2026-01-01T00:00") + np.arange(5) * np.timedelta64(1, "h"))
    >>> TimeColumn(path).read(1, 9).size  # rows 1..4 have a time
    4
    """

    def __init__(self, path: str, storage_options: Any = None) -> None:
        self.path = str(path)
        self._storage_options = storage_options

    def _open(self) -> Any:
        if self.path.endswith(".npy"):
            try:
                return np.load(self.path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as error:
                message = f"Cannot read the times {self.path}: {error}. Pass a .npy file of datetime64."
                raise SourceError(message) from None
        from ..sources.rows import open_zarr_array

        return open_zarr_array(self.path, self._storage_options)

    def read(self, start: int, stop: int) -> np.ndarray:
        """The times of rows ``start..stop-1`` that are written, as int64 UTC nanoseconds (maybe fewer rows)."""
        array = self._open()
        values = np.asarray(array[start : min(stop, array.shape[0])]) if start < array.shape[0] else None
        if values is None or not values.size:
            return np.zeros(0, dtype=np.int64)
        if values.dtype.kind != "M":
            units = dict(getattr(array, "attrs", {})).get("units")
            if values.dtype.kind not in "iuf" or not isinstance(units, str) or " since " not in units:
                raise InputError(
                    f"The times {self.path} hold {values.dtype} values without CF units ('<unit> since <time>'). "
                    "Pass an array of datetime64, or a time coordinate written by xarray."
                )
            from xarray.coding.times import decode_cf_datetime

            values = decode_cf_datetime(values, units, dict(array.attrs).get("calendar"))
        values = np.asarray(values, dtype="datetime64[ns]")
        missing = np.flatnonzero(np.isnat(values))
        values = values[: missing[0]] if missing.size else values
        return values.astype(np.int64)


class TimeBucketFeed:
    """Append the complete time buckets of a stream to ``store`` as its rows arrive.

    Parameters
    ----------
    store : SketchStore
        A store of time buckets.
    read_rows : callable
        ``read_rows(start, stop)``: rows ``start..stop-1`` of the stream.
    times : TimeColumn
        The rows' times.
    **options
        Job options of each append (``on_invalid``, ``client``, ...).

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> folder = tempfile.mkdtemp()
    >>> X = np.random.default_rng(0).normal(size=(300, 2))
    >>> np.save(os.path.join(folder, "t.npy"), np.datetime64("2026-01-01") + np.arange(300) * np.timedelta64(1, "m"))
    >>> rff = srf.RFF(n_features=16, bandwidth=1.0).fit(X)
    >>> store = srf.SketchStore.create(os.path.join(folder, "s"), rff, bucket="1h")
    >>> feed = TimeBucketFeed(store, lambda a, b: X[a:b], TimeColumn(os.path.join(folder, "t.npy")))
    >>> len(feed.add(0, X[:100])), len(feed.add(100, X[100:300]))  # hours complete once a later row is read
    (1, 3)
    >>> store.range("2026-01-01T01:00", "2026-01-01T04:00").count
    180
    """

    def __init__(self, store: Any, read_rows: Callable[[int, int], Any], times: TimeColumn, **options: Any) -> None:
        if not store.bucket_seconds:
            raise InputError(
                f"{store.path} has buckets of {store.bucket_rows} rows: --times and --time-coordinate apply to a "
                "store of time buckets (store create --bucket 1h). Drop them."
            )
        self.store = store
        self._read_rows = read_rows
        self._times = times
        self._options = options
        self._width = store.bucket_seconds * _NS
        self._start: int | None = None  # the stream row of the first held row
        self._edge = 0  # the bucket the held rows start in
        self._rows: list[np.ndarray] = []
        self._held = 0

    def _resume(self, first: int) -> None:
        """Hold the rows from the first row of the bucket to complete before row ``first``."""
        self._rows, self._held, self._start = [], 0, first
        if first == 0:
            self._edge = -1  # from the first row's bucket
            return
        before = self._times.read(first - 1, first)
        if not before.size:
            raise InputError(
                f"Row {first - 1:,} was read but {self._times.path} holds no time for it. Write each row's time "
                "before (or with) the row."
            )
        bucket = int(before[0] // self._width)
        stored = self.store._stored_buckets()
        older = stored[stored < bucket]
        if older.size and bucket - RESUME_BUCKETS <= int(older[-1]) + 1 < bucket:
            bucket = int(older[-1]) + 1  # buckets after the last stored one: completed by a watcher that failed
        lo = self._first_row_at(bucket * self._width, first)
        self._edge = bucket
        if lo < first:
            self._rows, self._held, self._start = [np.asarray(self._read_rows(lo, first))], first - lo, lo

    def _first_row_at(self, ns: int, stop: int) -> int:
        """The first row before ``stop`` whose time is >= ``ns`` (times are sorted), read backwards in blocks."""
        end = stop
        while end > 0:
            lo = max(0, end - 65_536)
            block = self._times.read(lo, end)
            position = int(np.searchsorted(block, ns, side="left"))
            if position > 0 or lo == 0:
                return lo + position
            end = lo
        return 0

    def add(self, first: int, rows: Any) -> tuple[int, ...]:
        """Take rows ``first..`` of the stream; returns the buckets appended (or found stored) now."""
        if self._start is None or first != self._start + self._held:  # the first rows, or a jump: resume
            self._resume(first)
        rows = np.asarray(rows)
        self._rows.append(rows)
        self._held += rows.shape[0]
        assert self._start is not None
        times = self._times.read(self._start, self._start + self._held)
        if not times.size:
            return ()
        back = np.flatnonzero(np.diff(times) < 0)
        if back.size:
            row = self._start + int(back[0]) + 1
            raise InputError(
                f"Row {row:,} of the stream ({format_ns(times[back[0] + 1])}) comes before row {row - 1:,} "
                f"({format_ns(times[back[0]])}): time buckets take time-sorted rows. Write the rows in time order."
            )
        block = np.concatenate(self._rows) if len(self._rows) > 1 else self._rows[0]
        timed = times.size
        start = None if self._edge < 0 else format_ns(self._edge * self._width)
        result = self.store.append(
            block[:timed], start=start, times=times.astype("datetime64[ns]"), **self._options
        )  # fmt: skip
        done = tuple(result.appended) + tuple(result.unchanged) + tuple(result.compacted)
        if done:
            used = timed - result.rows_left
            rest = block[used:]
            self._rows, self._start, self._held = ([rest] if rest.shape[0] else []), self._start + used, rest.shape[0]
            self._edge = max(done) + 1
        return done


def watch_feed(
    path: str,
    source: Any,
    source_path: str,
    storage_options: Any,
    times: str | None,
    time_coordinate: str | None,
    **options: Any,
) -> BucketFeed | TimeBucketFeed:
    """The feed of ``watch --store PATH`` on ``source`` (SOURCE opened): rows, or time buckets with the times of
    ``times`` (a path) or of ``time_coordinate`` (an array of SOURCE's zarr group, beside SOURCE)."""
    from . import SketchStore

    store = SketchStore.open(path, storage_options=storage_options)

    def read_rows(start: int, stop: int) -> Any:
        return source.zarr_array[start:stop]

    if not store.bucket_seconds:
        if times is not None or time_coordinate is not None:
            raise InputError(
                f"{path} has buckets of {store.bucket_rows} rows: --times and --time-coordinate apply to a store of "
                "time buckets (store create --bucket 1h). Drop them."
            )
        return BucketFeed(store, read_rows, **options)
    if (times is None) == (time_coordinate is None):
        raise InputError(
            f"{path} has time buckets: pass the rows' times, --times PATH (a zarr array or .npy file of times) or "
            "--time-coordinate NAME (an array of SOURCE's zarr group, as xarray writes it), one of them."
        )
    if time_coordinate is not None:
        group = str(source_path).rstrip("/").rsplit("/", 1)[0]
        times = f"{group}/{time_coordinate}"
    column = TimeColumn(times, storage_options)
    column.read(0, 0)  # a missing or unreadable times array fails at start, not at the first bucket
    return TimeBucketFeed(store, read_rows, column, **options)
