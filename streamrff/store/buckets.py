"""A store of bucket sketches: append buckets through the engine, read any range from O(log n) records.

Layout and safety are :mod:`streamrff.formats.store`'s. Ranges use a dyadic (segment-tree)
layout: level ``k`` holds the sums of the ``2**k`` aligned buckets ``[i 2**k, (i + 1) 2**k)``,
written as soon as its two halves are stored. A range of buckets ``[a, b)`` is the sum of at
most ``2 log2(b - a)`` such blocks (the greedy cover by the largest aligned block that fits), so
a year of hourly buckets (8 760) takes at most 26 record reads, whatever the range. Rollups are
written by whichever appender completes a block (it publishes its bucket first and then reads
the sibling, so of two appenders completing the two halves at once at least one sees both);
a rollup an appender did not live to write is rebuilt by the next append, and until then a
range reads its halves instead. Mean sketches are linear, so a complement is a difference.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import warnings
from typing import Any

import numpy as np

from .._base.validation import check_feature_dtype, check_positive_int
from .._files.signed import check_signing_key
from ..engine.connection import connect
from ..engine.jobs import open_job_source
from ..engine.options import current_job_options
from ..errors import InputError
from ..formats.store import (
    MAX_LEVELS,
    Record,
    RecordFiles,
    StoreRoot,
    create_store,
    now,
    read_store_root,
)
from ..maps import FeatureMap
from ..sketches.columns import DEFAULT_COLUMN_FEATURES, ColumnMaps, derive_column_maps
from ..sketches.mean import MeanSketch, check_sum_method
from ..sources.rows import RowSource, open_source
from ..typing import PathOrURL, StorageOptions
from .compact import sketch_between
from .digest import sketch_with_digest, source_digest
from .moments import MomentBlocks, moment_sketch, open_moment_tier
from .records import _EMPTY, StoreRecords, _holds_any, _runs
from .timegrid import append_spans, format_ns, parse_bucket, source_times, time_levels, times_digest, to_ns

__all__ = ["SketchStore"]

#: Levels of a new store: at most 2**24 buckets (1 914 years of hours); a record per level per bucket.
DEFAULT_LEVELS = 24


def _rows_between(source: RowSource, start: int, stop: int) -> RowSource:
    """Rows ``start..stop-1`` of an opened source, as a source of their own (read through dask)."""
    if source.rows is not None:
        return open_source(source.rows[start:stop])
    return dataclasses.replace(
        source, array=source.array[start:stop], description=f"rows {start}..{stop - 1} of {source.description}",
        zarr_array=None, location=None,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class AppendResult:
    """What :meth:`SketchStore.append` did: the buckets written, and those already stored with the same rows."""

    appended: tuple[int, ...]
    unchanged: tuple[int, ...]
    rows_left: int
    #: Buckets given but already compacted into coarser ones (left as they are).
    compacted: tuple[int, ...] = ()
    #: Blocks whose moment record was written (a store made with ``moments=``).
    moment_blocks: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        found = {"appended": list(self.appended), "unchanged": list(self.unchanged), "rows_left": self.rows_left}
        if self.compacted:
            found["compacted"] = list(self.compacted)
        if self.moment_blocks:
            found["moment_blocks"] = list(self.moment_blocks)
        return found


class SketchStore(StoreRecords):
    """A stream kept as buckets of mean sketches (a versioned zarr group, local or on object storage).

    Make one with :meth:`create`, open one with :meth:`open`. Buckets are by row count: bucket
    ``b`` holds rows ``[b R, (b + 1) R)`` of the stream. :meth:`append` sketches the complete
    buckets not yet stored; :meth:`range` returns the :class:`~streamrff.MeanSketch` of any span on
    bucket edges from O(log n) records; :meth:`complement` the sketch of the other rows;
    :meth:`test` and :meth:`series` compare ranges with the bucket permutation null.

    Attributes
    ----------
    path : str
        The store's place.
    feature_map : FeatureMap
        The map every bucket is sketched with.
    bucket_rows : int
        R, the rows of a bucket.
    moment_level : int or None
        k of a store that keeps second moments per block of ``2**k`` buckets.

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(1_000, 3))
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
    >>> path = os.path.join(tempfile.mkdtemp(), "stream.store")
    >>> store = srf.SketchStore.create(path, rff, bucket=100)
    >>> store.append(X).appended
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
    >>> part = store.range(200, 700)  # from at most 2 log2(5) records
    >>> direct = srf.sketch_array(X[200:700], rff)
    >>> part.count, bool(np.allclose(part.feature_sum, direct.feature_sum, rtol=1e-6, atol=1e-5))
    (500, True)
    >>> store.complement(200, 700).count
    500
    """

    def __init__(self, root: StoreRoot, storage_options: StorageOptions, verify_key: bytes | None) -> None:
        self._root = root
        self._storage_options = storage_options
        self._verify_key = verify_key
        self._files = RecordFiles(root.target, storage_options)
        self._tier: SketchStore | None = None  # the coarse store of compacted buckets, once seen
        self._columns: ColumnMaps | None = None

    # Making and opening.

    @classmethod
    def create(
        cls,
        path: PathOrURL,
        feature_map: FeatureMap,
        bucket: int | str,
        levels: int | None = None,
        signed: bool = False,
        storage_options: StorageOptions = None,
        moments: int | None = None,
        columns: bool = False,
        column_features: int = DEFAULT_COLUMN_FEATURES,
        column_bandwidth: float | None = None,
        signing_key: bytes | None = None,
    ) -> SketchStore:
        """Make a new, empty store at ``path`` (local directory or fsspec URL) and open it.

        Parameters
        ----------
        path : str or PathLike
            Where: a directory or ``s3://...`` (with ``storage_options``). Must not exist.
        feature_map : FeatureMap
            A fitted map; every bucket is sketched with it.
        bucket : int or str
            Rows per bucket (a grid: bucket ``b`` holds rows ``[b bucket, (b + 1) bucket)``), or a
            duration: a time grid from 1970-01-01T00:00Z (UTC), bucket ``b`` holding the rows of
            times ``[b S, (b + 1) S)``. Durations: ``"<n>s"``, ``"<n>min"``, ``"<n>h"``, ``"<n>d"``
            or ISO 8601 (``"PT1H"``, ``"P1D"``); appends then take the rows' times.
        levels : int, optional
            The store holds at most ``2**levels`` buckets (default: 24 for rows; for a time grid,
            enough buckets from the epoch to 2242).
        signed : bool, default=False
            Every record must carry an HMAC-SHA256 under a key given to :meth:`append`.
        storage_options : dict, optional
            fsspec options. Never logged.
        moments : int, optional
            Keep second moments (``sum z z^T``, D x D) for aligned blocks of ``2**moments``
            buckets (0: every bucket), in moment records of their own
            (:mod:`streamrff.store.moments`): a range on block edges then has its moment, so
            :func:`streamrff.mmd_test` gives confidence intervals. Bucket records never hold
            moments, so the store grows by ``8 D (D + 1) / 2`` bytes per block, not per bucket.
            Default: no moments.
        columns : bool, default=False
            Every bucket also keeps the sums of the column part (per input column, the sums of a
            1-D map of that column: :mod:`streamrff.sketches.columns`, as ``sketch(...,
            columns=True)``), ``d x column_features`` values a bucket, so :meth:`test` can
            return the column table (``columns=True``).
        column_features, column_bandwidth : optional
            The column maps' features (even) and width (default: the map's bandwidth over
            ``sqrt(d)``), as :func:`streamrff.sketch` takes them.
        signing_key : bytes, optional
            Sign the store's root (its map and bucket grid), which :meth:`open` with the key then verifies.

        Returns
        -------
        SketchStore

        Raises
        ------
        InputError
            An unfitted map, a bucket that is neither a positive number of rows nor a duration of
            whole seconds, bad levels or moments.
        FileExistsError
            If something is at ``path``.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(np.zeros((1, 2)))
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=1_000)
        >>> store.bucket_rows, store.info()["buckets"]
        (1000, 0)
        >>> hourly = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "h"), rff, bucket="1h")
        >>> hourly.bucket_seconds, hourly.bucket_rows
        (3600, 0)
        """
        if not isinstance(feature_map, FeatureMap) or not feature_map.is_fitted:
            raise InputError(
                f"feature_map must be a fitted FeatureMap. Got {feature_map!r}; fit it first (rff.fit(X))."
            )
        rows, seconds, label = parse_bucket(bucket)
        if levels is None:
            levels = time_levels(seconds) if seconds else DEFAULT_LEVELS
        levels = check_positive_int(levels, "levels", minimum=0) if levels != 0 else 0
        if levels > MAX_LEVELS:
            raise InputError(f"levels must be at most {MAX_LEVELS}. Got {levels}.")
        if moments is not None and (
            isinstance(moments, bool) or not isinstance(moments, (int, np.integer)) or not 0 <= moments <= levels
        ):
            raise InputError(
                f"moments must be a level in 0..{levels} (moments for blocks of 2**moments buckets) or None. "
                f"Got {moments!r}; pass e.g. moments=5 for blocks of 32 buckets."
            )
        target = os.fspath(path)
        key = None if signing_key is None else check_signing_key(signing_key, "signing_key")
        level = None if moments is None else int(moments)
        part = None
        if columns:
            maps = derive_column_maps(feature_map, column_features, column_bandwidth)
            bandwidth = maps.bandwidth if maps.bandwidth_rule == "explicit" else None
            part = {"n_columns": maps.n_columns, "n_features": maps.n_features, "bandwidth": bandwidth}
        create_store(
            target, feature_map, rows, levels, bool(signed), storage_options, seconds, label, level, columns=part,
            signing_key=key,
        )  # fmt: skip
        store = cls.open(target, storage_options=storage_options)
        open_moment_tier(store, create=True, signing_key=key)
        return store

    @classmethod
    def open(
        cls, path: PathOrURL, storage_options: StorageOptions = None, verify_key: bytes | None = None
    ) -> SketchStore:
        """Open a store, checking its attributes, records metadata and map (records are checked as read).

        Parameters
        ----------
        path : str or PathLike
        storage_options : dict, optional
        verify_key : bytes, optional
            Accept only records signed with this key (and bound to this store's map and bucket
            grid: see :mod:`streamrff.formats.store`); every record read is verified.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(np.zeros((1, 2)))
        >>> path = os.path.join(tempfile.mkdtemp(), "s")
        >>> _ = srf.SketchStore.create(path, rff, bucket=10)
        >>> srf.SketchStore.open(path).feature_map.fingerprint == rff.fingerprint
        True
        """
        if verify_key is not None:
            verify_key = check_signing_key(verify_key, "verify_key")
        return cls(read_store_root(os.fspath(path), storage_options, verify_key), storage_options, verify_key)

    @property
    def path(self) -> str:
        return self._root.target

    @property
    def feature_map(self) -> FeatureMap:
        return self._root.feature_map

    @property
    def bucket_rows(self) -> int:
        """R, rows per bucket; 0 for a time grid."""
        return self._root.bucket_rows

    @property
    def bucket_seconds(self) -> int:
        """S, seconds per bucket of a time grid; 0 for a grid of rows."""
        return self._root.bucket_seconds

    @property
    def column_maps(self) -> ColumnMaps | None:
        """The 1-D maps of the column part every bucket keeps (``create(..., columns=True)``); None: none."""
        root = self._root
        if not root.column_width:
            return None
        if self._columns is None:
            self._columns = derive_column_maps(root.feature_map, root.column_features, root.column_bandwidth or None)
        return self._columns

    @property
    def moment_level(self) -> int | None:
        """k: second moments are kept per block of ``2**k`` buckets (``create(..., moments=k)``); None: none."""
        return self._root.moment_level

    # Appending.

    def append(
        self,
        source: Any,
        start: Any = None,
        signing_key: bytes | None = None,
        dtype: Any = "float32",
        times: Any = None,
        time_coordinate: str | None = None,
        final: bool = False,
        **options: Any,
    ) -> AppendResult:
        """Sketch the complete buckets of ``source`` not yet stored, one published record at a time.

        ``source`` holds the stream's rows from global row ``start`` on (the whole stream so far,
        or the rows from a bucket edge on). Each complete bucket is sketched by the engine
        (:func:`streamrff.engine.run_chunks` on its rows: a Dask client, object storage and
        retries through the job options; its chunk tasks hash the rows they embed, so the digest
        costs no second read) and published atomically; then the rollups it
        completes. A bucket already stored is compared with the rows given by their digest
        (:func:`rows_digest`): the same rows change nothing, other rows are refused naming the
        bucket. Rows after the last complete bucket are left for a later append.

        Parameters
        ----------
        source : ndarray, dask Array, xarray DataArray, str/PathLike or RowSource
            Rows, as :func:`streamrff.sketch` takes them.
        start : int or time, optional
            Rows: the global row index of the first row of ``source`` (default 0). Time grid: a
            bucket edge (datetime, numpy.datetime64 or ISO 8601 string); ``source`` then holds
            every row from ``start`` on (rows before it are left out, buckets from it on with no
            rows are stored empty). Default: from the bucket of the first row.
        signing_key : bytes, optional
            Sign each record (HMAC-SHA256); required by a signed store. The records an append
            reads (a bucket already stored, the halves of a rollup it signs) are verified only if
            the store was opened with ``verify_key=`` (CLI: always, when a key is set).
        dtype : {"float32", "float64"}, default="float32"
            Precision of the features (sums are float64 either way).
        times : array-like of datetime64, optional
            Time grid: each row's time (UTC), time-sorted; for numpy, dask and zarr sources.
        time_coordinate : str, optional
            Time grid, xarray source: the coordinate holding the rows' times (default: the
            sample dimension's, e.g. ``time``).
        final : bool, default=False
            Time grid: the rows given are all there will be up to the last row's bucket, so that
            bucket is complete too. Otherwise a bucket is complete once a row of a later one is given.
        **options
            Job options (:class:`~streamrff.engine.JobOptions`): ``client``, ``storage_options``
            (of the source), ``chunk_rows``, ``on_invalid``, ... A checkpoint is not used: the
            store keeps every finished bucket.

        Returns
        -------
        AppendResult
            ``appended`` and ``unchanged`` bucket numbers, ``rows_left`` after the last complete bucket.

        Raises
        ------
        SourceChangedError
            If a stored bucket holds other rows than those given.
        InputError
            A width other than the map's, a ``start`` off the grid, an unsigned append to a signed store.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> X = np.random.default_rng(1).normal(size=(250, 2))
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
        >>> store.append(X).to_dict()
        {'appended': [0, 1], 'unchanged': [], 'rows_left': 50}
        >>> store.append(X[100:], start=100).to_dict()  # the same rows again: nothing written
        {'appended': [], 'unchanged': [1], 'rows_left': 50}

        A time grid takes the rows' times; the last hour waits for a later row (or ``final=True``):

        >>> hourly = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "h"), rff, bucket="1h")
        >>> times = np.datetime64("2026-01-01T00:00") + np.arange(250) * np.timedelta64(1, "m")
        >>> hourly.append(X, times=times).to_dict()
        {'appended': [490896, 490897, 490898, 490899], 'unchanged': [], 'rows_left': 10}
        >>> hourly.range("2026-01-01T01:00", "2026-01-01T03:00").count
        120
        """
        if signing_key is not None:
            signing_key = check_signing_key(signing_key, "signing_key")
        if self._root.signed and signing_key is None:
            raise InputError(f"{self.path} is a signed store: pass signing_key= (CLI: --sign-key FILE) to append.")
        dtype = check_feature_dtype(dtype)
        method = check_sum_method("auto", False, dtype)
        job = current_job_options(**options).replace(checkpoint=None)
        if self.bucket_seconds:
            times = source_times(source, times, time_coordinate, job.sample_dim)
        elif times is not None or time_coordinate is not None or final:
            raise InputError(
                f"{self.path} has buckets of {self.bucket_rows} rows: times=, time_coordinate= and final= apply to a "
                "time grid (SketchStore.create(..., bucket='1h')). Pass start= (a row index) instead."
            )
        opened = open_job_source(source, job)
        width = self.feature_map.n_features_in_
        if opened.shape[1] != width:
            raise InputError(
                f"The store's map takes rows of {width} columns. Got {opened.shape[1]} columns from "
                f"{opened.description}. Append rows of the stream the store was made for."
            )
        ns, spans = append_spans(self._root, opened.shape[0], start, times, bool(final))
        known = [int(bucket) for bucket in self._stored_buckets()]
        compacted = self._compacted_buckets()
        cache: dict[tuple[int, int], Record | None] = {}
        appended, unchanged, skipped = [], [], []
        given = [bucket for bucket, _, _ in spans if compacted is None or not compacted.holds(bucket)]
        moments = MomentBlocks.plan(self, given, signing_key)
        with connect(job.client) as active:
            job = job.replace(client=active)
            for bucket, lo, hi in spans:
                if compacted is not None and compacted.holds(bucket):
                    skipped.append(bucket)
                    continue
                first_row = 0 if ns is not None else bucket * self.bucket_rows
                moment = moments is not None and moments.wants(bucket)
                partial = None
                if _holds_any(known, bucket, bucket + 1):
                    stored = self._read([(0, bucket)])[(0, bucket)]
                    if stored is not None:  # only the rows' digest is needed, and the moment of a block to write
                        if moment and hi > lo:
                            partial, digest = sketch_with_digest(
                                _rows_between(opened, lo, hi), self.feature_map, job, first_row, moments=True,
                                dtype=dtype, method="auto",
                            )  # fmt: skip
                        else:
                            digest = source_digest(opened, lo, hi, first_row, active) if hi > lo else _EMPTY(width)
                        digest = digest if ns is None else times_digest(digest, ns[lo:hi])
                        self._check_same_rows(stored, digest)
                        unchanged.append(bucket)
                        if moment:
                            moments.add(bucket, partial, digest)  # type: ignore[union-attr]
                        continue
                if hi > lo:
                    partial, digest = sketch_with_digest(
                        _rows_between(opened, lo, hi), self.feature_map, job, first_row, moments=moment, dtype=dtype,
                        method="auto" if moment or self.column_maps else method, column_maps=self.column_maps,
                    )  # fmt: skip
                    count, n_invalid, norms = partial.count, partial.n_invalid, partial.squared_norm_sum
                    sums = np.asarray(partial.feature_sum, dtype=np.float64)
                    parts = None if partial.columns is None else partial.columns.feature_sum.ravel().astype(np.float64)
                else:  # a time bucket without rows: stored, so that ranges across it are whole
                    count, n_invalid, norms, sums, digest = 0, 0, 0.0, np.zeros(self._root.n_features), _EMPTY(width)
                    parts = np.zeros(self._root.column_width) if self._root.column_width else None
                key = self._root.key_width
                record = Record(
                    level=0, index=bucket, count=count, n_invalid=n_invalid, squared_norm_sum=norms,
                    first_row=bucket * key, stop_row=(bucket + 1) * key, written_at=now(),
                    source_digest=digest if ns is None else times_digest(digest, ns[lo:hi]),
                    signed=signing_key is not None, feature_sum=sums, columns=parts,
                )  # fmt: skip
                published = self._publish(record, signing_key)
                if published is not record:  # another appender stored this bucket meanwhile
                    self._check_same_rows(published, record.source_digest)
                    unchanged.append(bucket)
                else:
                    appended.append(bucket)
                if moment:
                    moments.add(bucket, partial, record.source_digest)  # type: ignore[union-attr]
                if not _holds_any(known, bucket, bucket + 1):
                    bisect.insort(known, bucket)
                cache[(0, bucket)] = published
                self._roll_up(bucket, known, cache, signing_key)
                if len(cache) > 4096:  # bounded memory: a rollup reads what it needs again
                    cache = {}
        rows_left = opened.shape[0] - spans[-1][2] if spans else (opened.shape[0] if ns is not None else 0)
        if ns is None and not spans:
            start = 0 if start is None else int(start)
            rows_left = start + opened.shape[0] - max(-(-start // self.bucket_rows), 0) * self.bucket_rows
        written = () if moments is None else tuple(moments.written)
        return AppendResult(tuple(appended), tuple(unchanged), int(max(rows_left, 0)), tuple(skipped), written)

    def repair(self, signing_key: bytes | None = None) -> int:
        """Write every missing rollup whose halves are stored (after an appender was killed); returns how many."""
        known = [int(bucket) for bucket in self._stored_buckets()]
        before = len(self._slots())
        cache: dict[tuple[int, int], Record | None] = {}
        for bucket in sorted(known):
            self._roll_up(bucket, known, cache, signing_key)
        return len(self._slots()) - before

    # Ranges.

    def _bucket_span(self, start: Any, stop: Any) -> tuple[int, int]:
        """Buckets [a, b) of [start, stop) (rows, or times of a time grid), both on bucket edges; None ends are
        the stored extent's."""
        extent = self._extent() if start is None or stop is None else (0, 0)
        first = extent[0] if start is None else self._edge(start, "start")
        last = extent[1] if stop is None else self._edge(stop, "stop")
        if last <= first:
            raise InputError(f"A range needs stop > start. Got start={start!r}, stop={stop!r}.")
        if last > self._root.capacity:
            raise InputError(f"stop={stop!r} is past the store's last possible bucket ({self._describe(last)}).")
        return first, last

    def _extent(self) -> tuple[int, int]:
        """The first and stop bucket of the stored ones (compacted included)."""
        listed = self._stored_buckets()
        stored = [int(listed[0]), int(listed[-1])] if listed.size else []
        compacted = self._compacted_buckets()
        if compacted is not None and compacted.extent is not None:
            stored += list(compacted.extent)
        if not stored:
            raise InputError(f"{self.path} holds no bucket yet: append rows first.")
        return min(stored), max(stored) + 1

    def _edge(self, value: Any, name: str) -> int:
        """The bucket number of a bucket edge given as a row (grid of rows) or a time (time grid)."""
        if self.bucket_seconds:
            width = self.bucket_seconds * 10**9
            ns = to_ns(value, name)
            if ns % width or ns < 0:
                raise InputError(
                    f"{name}={value!r} is not on a bucket edge of {self._root.bucket_label} from 1970-01-01 (UTC). "
                    f"Use {format_ns(max(ns - ns % width, 0))}."
                )
            return ns // width
        rows = self.bucket_rows
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0 or value % rows:
            raise InputError(
                f"{name} must be a row on a bucket edge (a multiple of {rows} rows, >= 0). Got {value!r}; "
                f"use {rows * (int(value) // rows) if isinstance(value, (int, np.integer)) else 0}."
            )
        return int(value) // rows

    def range(self, start: Any = None, stop: Any = None, moments: bool | None = None) -> MeanSketch:
        """The mean sketch of ``[start, stop)`` (rows, or times of a time grid, on bucket edges) from O(log n) records.

        ``None`` ends are the first and last stored bucket's. Every bucket in the range must be
        stored. Times are datetimes, ``numpy.datetime64`` or ISO 8601 strings (UTC unless they name
        an offset). A range that takes compacted buckets (:meth:`compact`) is the sketch of the
        compacted map: with fewer features, its fine part is truncated to them (the prefix of the
        features, rescaled), so the whole range has ``k`` features.

        A store made with ``moments=k`` returns the sketch with its second moment when the range
        is on blocks of ``2**k`` buckets that all have their moment record: it is then read from
        those records alone (O(log n) of them, all D features, compacted or not). Otherwise the
        sketch has sums only, and a one-line ``UserWarning`` says why and how to get moments.

        Parameters
        ----------
        start, stop : int or time, optional
            Bucket edges: rows, or times of a time grid.
        moments : bool, optional
            True: the sketch with its second moment, or InputError saying why there is none.
            False: sums only (no moment record read). Default: moments when the store has them.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> X = np.random.default_rng(2).normal(size=(800, 2))
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
        >>> _ = store.append(X)
        >>> store.range(100, 800).count, store.range().count
        (700, 800)

        Second moments, kept per block of ``2**2`` buckets: a range on block edges has them.

        >>> kept = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "m"), rff, bucket=100, moments=2)
        >>> kept.append(X).moment_blocks
        (0, 1)
        >>> kept.range(400, 800).moment.shape, kept.range(400, 800, moments=False).has_moments
        ((32, 32), False)
        """
        first, stop_bucket = self._bucket_span(start, stop)
        if moments is not None and not isinstance(moments, bool):
            raise InputError(f"moments must be True, False or None. Got {moments!r}.")
        if moments and self._root.moment_level is None:
            raise InputError(
                f"{self.path} keeps no second moments. Make a store with SketchStore.create(..., moments=k) "
                "(CLI: store create --moments K) and append the rows to it, or pass moments=None."
            )
        if moments is not False and self._root.moment_level is not None:
            found, why = moment_sketch(self, first, stop_bucket)
            if found is not None:
                return found
            if moments:
                raise InputError(why)
            warnings.warn(why, UserWarning, stacklevel=2)
        return sketch_between(self, first, stop_bucket)

    def complement(self, start: int, stop: int, within: tuple[int, int] | None = None) -> MeanSketch:
        """The sketch of the rows of ``within`` (default: the stored extent) outside ``[start, stop)``.

        ``range(*within) - range(start, stop)``: exact, since mean sketches are linear. A store
        made with ``moments=k`` subtracts the moments too when both spans have them (see :meth:`range`).

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> X = np.random.default_rng(3).normal(size=(600, 2))
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
        >>> _ = store.append(X)
        >>> rest = store.complement(200, 300)
        >>> direct = srf.sketch_array(np.vstack([X[:200], X[300:]]), rff)
        >>> rest.count, bool(np.allclose(rest.feature_sum, direct.feature_sum, rtol=1e-6, atol=1e-5))
        (500, True)
        """
        outer = self._bucket_span(*(within if within is not None else (None, None)))
        inner = self._bucket_span(start, stop)
        if inner[0] < outer[0] or inner[1] > outer[1]:
            raise InputError(
                f"The left-out span [{start}, {stop}) must lie within {self._describe(*outer)}. "
                "Pass within= that holds them."
            )
        if self._root.moment_level is not None:  # both sides from moment records: the complement has moments
            whole, why = moment_sketch(self, *outer)
            part, why = moment_sketch(self, *inner) if whole is not None else (None, why)
            if whole is not None and part is not None:
                return whole - part
            warnings.warn(why, UserWarning, stacklevel=2)
        whole, part = sketch_between(self, *outer), sketch_between(self, *inner)
        if whole.feature_map.fingerprint != part.feature_map.fingerprint:  # one of them takes compacted buckets
            compacted = self._compacted_buckets()
            whole, part = compacted.truncate(whole), compacted.truncate(part)
        return whole - part

    # Retention.

    def compact(
        self, older_than: Any, to: Any, features: int | None = None, signing_key: bytes | None = None
    ) -> dict[str, Any]:
        """Roll fine buckets older than ``older_than`` into coarse buckets of ``to``, optionally with fewer features.

        Each complete coarse bucket (all its fine buckets stored) ending by the horizon is summed
        from the fine records, published in one step into the coarse store (``<store>/compact``,
        with its own rollups), and its fine records are then deleted: readers see each fine
        bucket either fine or coarse, never both or neither, and a killed compactor leaves no
        torn record (:mod:`streamrff.store.compact`). With ``features=k`` the coarse buckets keep
        the first ``k`` features (the sums of the map of ``k`` features with the same seed: an
        unbiased sketch, kernel-estimate variance ``D / k`` times the full map's, at most
        ``2 / k``); a range that takes compacted buckets is truncated to ``k`` features.
        Appends of compacted buckets are skipped; :meth:`buckets` reads fine buckets only;
        :meth:`test` and :meth:`series` permute compacted buckets as units of their span
        (:mod:`streamrff.store.permutation`).

        Parameters
        ----------
        older_than : int, time or duration
            The horizon: a row (grid of rows), a time, or a duration before now (``"30d"``).
        to : int or str
            The coarse bucket: rows, or a duration, a multiple (> 1) of the store's bucket.
            Every compaction of a store uses the same ``to`` and ``features``.
        features : int, optional
            Keep the first ``features`` features (even, less than D) in the coarse buckets.
        signing_key : bytes, optional
            Sign the coarse records; required by a signed store.

        Returns
        -------
        dict
            ``compacted`` (coarse buckets written), ``incomplete`` (old coarse buckets with a fine
            bucket missing, left fine), ``deleted_records`` and ``horizon_bucket``.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> X = np.random.default_rng(7).normal(size=(1_000, 2))
        >>> rff = srf.RFF(n_features=64, bandwidth=1.0, seed=1).fit(X)
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
        >>> _ = store.append(X)
        >>> store.compact(older_than=600, to=300, features=16)["compacted"]
        [0, 1]
        >>> old = store.range(0, 600)  # from the coarse buckets: the map of 16 features
        >>> direct = srf.sketch_array(X[:600], srf.RFF(n_features=16, bandwidth=1.0, seed=1).fit(X))
        >>> old.count, bool(np.allclose(old.feature_sum, direct.feature_sum, rtol=1e-6, atol=1e-4))
        (600, True)
        >>> store.range(0, 1_000).feature_sum.shape  # mixed: truncated to 16 features
        (16,)
        """
        from .compact import compact

        return compact(self, older_than, to, features, signing_key)

    def buckets(self, start: int | None = None, stop: int | None = None) -> list[MeanSketch]:
        """The sketch of every bucket of ``[start, stop)`` (one record read per bucket)."""
        first, stop_bucket = self._bucket_span(start, stop)
        return [self._sketch_of([record]) for record in self._bucket_records(first, stop_bucket)]

    # Tests.

    def test(
        self, a: tuple[int, int], b: tuple[int, int], n_permutations: int = 999, seed: Any = 0, columns: bool = False
    ) -> Any:
        """Two-sample test between rows ``a = (start, stop)`` and ``b``, with the bucket permutation null.

        The statistic is the unbiased MMD^2 of the two range sketches (:func:`streamrff.mmd2`).
        Under no change the buckets are exchangeable, so relabelling whole buckets between the
        two ranges gives an exact permutation null from the bucket sums alone (no rows, no
        second moments): ``p = (1 + #{null >= statistic}) / (1 + B)``. Reads one record per bucket.
        Ranges holding compacted buckets are permuted in units of one span, at the common feature
        prefix (:func:`streamrff.store.permutation.exchangeable_units`).

        Parameters
        ----------
        a, b : (int, int)
            Two disjoint row ranges on bucket edges.
        n_permutations : int, default=999
        seed : int or numpy.random.Generator, default=0
        columns : bool, default=False
            Return the column table instead: per input column, the bucket permutation test of the
            column part's sums (a store made with ``columns=True``), Holm-adjusted
            (:mod:`streamrff.store.columns`).

        Returns
        -------
        TwoSampleResult or MarginalTestResult
            ``method`` is ``"bucket-permutation"``; ``null`` the B relabelled statistics. With
            ``columns=True``, the column table, its ``joint`` that result.

        Raises
        ------
        InputError
            Overlapping ranges, or too few buckets for a p-value below 0.05 (fewer than 20
            distinct relabellings).

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(4)
        >>> X = np.vstack([rng.normal(size=(1_000, 2)), rng.normal(1.0, 1.0, size=(1_000, 2))])
        >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
        >>> _ = store.append(X)
        >>> result = store.test((0, 1_000), (1_000, 2_000))
        >>> result.method, result.p_value < 0.01
        ('bucket-permutation', True)

        Which columns differ, from a store that keeps the column part:

        >>> Y = X.copy(); Y[1_000:, 0] = X[:1_000, 0]  # only column 1 shifts
        >>> kept = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "c"), rff, bucket=100, columns=True)
        >>> _ = kept.append(Y)
        >>> table = kept.test((0, 1_000), (1_000, 2_000), columns=True)
        >>> table.rejected(0.05).tolist(), table.joint.method
        ([1], 'bucket-permutation')
        """
        if columns:
            from .columns import store_column_test

            return store_column_test(self, a, b, n_permutations, seed)
        from .permutation import store_test

        return store_test(self, a, b, n_permutations, seed)

    def series(
        self, reference: tuple[int, int], every: int = 1, start: int | None = None, stop: int | None = None,
        n_permutations: int = 999, seed: Any = 0, alpha: float = 0.05,
    ) -> Any:  # fmt: skip
        """MMD^2 of each window of ``every`` buckets against ``reference``, with bucket-permutation p-values.

        Windows tile ``[start, stop)`` (default: the stored extent) from its start; windows that
        overlap the reference, and a last incomplete one, are left out. Each p-value is the bucket
        permutation test of the window's buckets against the reference's (:meth:`test`), with the
        same seed for every window.

        Returns
        -------
        StoreSeries
            Per window: rows, statistic, p-value, the null's ``1 - alpha`` quantile (the band) and the alarm.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(5)
        >>> X = np.vstack([rng.normal(size=(2_000, 2)), rng.normal(1.0, 1.0, size=(200, 2))])
        >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
        >>> _ = store.append(X)
        >>> series = store.series(reference=(0, 1_900), every=1)
        >>> [int(row) for row in series.first_row[series.alarm]]
        [2000, 2100]
        """
        from .permutation import store_series

        return store_series(self, reference, every, start, stop, n_permutations, seed, alpha)

    # Describing and merging.

    def info(self) -> dict[str, Any]:
        """The store's map, grid and stored buckets (one listing of the records).

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(np.zeros((1, 2)))
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=10)
        >>> _ = store.append(np.zeros((35, 2)))
        >>> info = store.info()
        >>> info["buckets"], info["runs"], info["rows"], info["records"]
        (3, [[0, 30]], 30, 4)
        """
        slots = self._slots()
        buckets = slots[slots < self._root.capacity]
        rows = self.bucket_rows
        runs = list(_runs([int(b) for b in buckets]))
        found = {
            "path": self.path, "format": "streamrff.sketch-store", "map": self.feature_map.spec,
            "fingerprint": self.feature_map.fingerprint, "n_features": self._root.n_features, "bucket_rows": rows,
            "levels": self._root.levels, "signed": self._root.signed, "created_at": self._root.created_at,
            "buckets": int(buckets.size), "records": int(slots.size), "rows": int(buckets.size) * rows,
            "runs": [[lo * rows, hi * rows] for lo, hi in runs], "bytes_per_record": 8 * self._root.width + 4,
        }  # fmt: skip
        if self.bucket_seconds:  # a time grid: runs of times; rows are the records' counts, not read here
            width = self.bucket_seconds * 10**9
            found.update(
                bucket=self._root.bucket_label, bucket_seconds=self.bucket_seconds, rows=None,
                runs=[[format_ns(lo * width), format_ns(hi * width)] for lo, hi in runs],
            )  # fmt: skip
        compacted = self._compacted_buckets()
        if compacted is not None:
            found["compacted"] = compacted.describe()
        if self.column_maps is not None:
            maps = self.column_maps
            found["columns"] = {"n_columns": maps.n_columns, "n_features": maps.n_features, "bandwidth": maps.bandwidth}
        tier = open_moment_tier(self)
        if tier is not None:
            level = self._root.moment_level
            found["moments"] = {
                "level": level, "buckets_per_record": 1 << level, "blocks": int(tier._stored_buckets().size),
                "records": int(tier._slots().size), "bytes_per_record": 8 * tier._root.width + 4,
            }  # fmt: skip
        return found

    def merge_from(self, *others: SketchStore, signing_key: bytes | None = None) -> list[int]:
        """Add the buckets of stores with the same map and grid (two sites), bucket by bucket, into this empty store.

        A bucket held by several stores is their sum (count and sums add; its digest is the sha256
        of theirs in order). Returns the buckets written. A store made with ``moments=k`` also merges
        the moment records of stores with the same ``k``, block by block: a block's moment is written
        when every store holding a bucket of it has that block's moment.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(6)
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(np.zeros((1, 2)))
        >>> folder = tempfile.mkdtemp()
        >>> a, b = (srf.SketchStore.create(os.path.join(folder, n), rff, bucket=10) for n in "ab")
        >>> _ = a.append(rng.normal(size=(30, 2))); _ = b.append(rng.normal(size=(20, 2)))
        >>> both = srf.SketchStore.create(os.path.join(folder, "both"), rff, bucket=10)
        >>> both.merge_from(a, b), both.range(0, 20).count
        ([0, 1, 2], 40)
        """
        from .compact import merge_stores
        from .moments import merge_moments

        merged = merge_stores(self, others, signing_key)
        if self._root.moment_level is not None:
            merge_moments(self, others, signing_key)
        return merged
