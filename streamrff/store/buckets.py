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
import hashlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._base.validation import check_feature_dtype, check_positive_int
from .._files.signed import check_signing_key
from ..engine.connection import connect
from ..engine.jobs import open_job_source
from ..engine.options import current_job_options
from ..errors import InputError, SourceChangedError
from ..formats.store import (
    MAX_LEVELS,
    Record,
    RecordFiles,
    StoreRoot,
    check_records_fit,
    create_store,
    decode_record,
    encode_record,
    now,
    read_store_root,
)
from ..maps import FeatureMap
from ..sketches.mean import MeanSketch, check_sum_method
from ..sources.rows import RowSource, open_source
from ..typing import PathOrURL, StorageOptions
from .digest import sketch_with_digest, source_digest

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


def _blocks(first: int, stop: int) -> list[tuple[int, int]]:
    """The greedy dyadic cover of buckets ``[first, stop)``: (level, index) of aligned blocks, in order."""
    blocks = []
    while first < stop:
        level = (first & -first).bit_length() - 1 if first else MAX_LEVELS
        while (1 << level) > stop - first:
            level -= 1
        blocks.append((level, first >> level))
        first += 1 << level
    return blocks


@dataclasses.dataclass(frozen=True)
class AppendResult:
    """What :meth:`SketchStore.append` did: the buckets written, and those already stored with the same rows."""

    appended: tuple[int, ...]
    unchanged: tuple[int, ...]
    rows_left: int

    def to_dict(self) -> dict[str, Any]:
        return {"appended": list(self.appended), "unchanged": list(self.unchanged), "rows_left": self.rows_left}


class SketchStore:
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

    # Making and opening.

    @classmethod
    def create(
        cls,
        path: PathOrURL,
        feature_map: FeatureMap,
        bucket: int,
        levels: int = DEFAULT_LEVELS,
        signed: bool = False,
        storage_options: StorageOptions = None,
    ) -> SketchStore:
        """Make a new, empty store at ``path`` (local directory or fsspec URL) and open it.

        Parameters
        ----------
        path : str or PathLike
            Where: a directory or ``s3://...`` (with ``storage_options``). Must not exist.
        feature_map : FeatureMap
            A fitted map; every bucket is sketched with it.
        bucket : int
            Rows per bucket (a grid: bucket ``b`` holds rows ``[b bucket, (b + 1) bucket)``).
        levels : int, default=24
            The store holds at most ``2**levels`` buckets.
        signed : bool, default=False
            Every record must carry an HMAC-SHA256 under a key given to :meth:`append`.
        storage_options : dict, optional
            fsspec options. Never logged.

        Returns
        -------
        SketchStore

        Raises
        ------
        InputError
            An unfitted map, a bucket that is not a positive number of rows (time buckets are not
            supported yet), bad levels.
        FileExistsError
            If something is at ``path``.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(np.zeros((1, 2)))
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=1_000)
        >>> store.bucket_rows, store.info()["buckets"]
        (1000, 0)
        """
        if not isinstance(feature_map, FeatureMap) or not feature_map.is_fitted:
            raise InputError(
                f"feature_map must be a fitted FeatureMap. Got {feature_map!r}; fit it first (rff.fit(X))."
            )
        if isinstance(bucket, str):
            raise InputError(
                f"bucket={bucket!r}: time buckets are not supported yet. Pass a number of rows per bucket (e.g. "
                "bucket=10_000), and append rows in time order."
            )
        bucket = check_positive_int(bucket, "bucket")
        levels = check_positive_int(levels, "levels", minimum=0) if levels != 0 else 0
        if levels > MAX_LEVELS:
            raise InputError(f"levels must be at most {MAX_LEVELS}. Got {levels}.")
        target = os.fspath(path)
        create_store(target, feature_map, bucket, levels, bool(signed), storage_options)
        return cls.open(target, storage_options=storage_options)

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
            Accept only records signed with this key.

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
        return cls(read_store_root(os.fspath(path), storage_options), storage_options, verify_key)

    @property
    def path(self) -> str:
        return self._root.target

    @property
    def feature_map(self) -> FeatureMap:
        return self._root.feature_map

    @property
    def bucket_rows(self) -> int:
        return self._root.bucket_rows

    # Records.

    def _read(self, blocks: list[tuple[int, int]]) -> dict[tuple[int, int], Record | None]:
        check_records_fit(self._root, len(blocks))
        slots = {self._root.slot(level, index): (level, index) for level, index in blocks}
        found = self._files.read(list(slots))
        return {
            slots[slot]: None if data is None else decode_record(data, self._root, slot, self._verify_key)
            for slot, data in found.items()
        }

    def _stored_buckets(self) -> np.ndarray:
        """The stored buckets (level 0), sorted: one listing of the records."""
        slots = self._files.slots()
        return slots[slots < self._root.capacity]

    def _publish(self, record: Record, signing_key: bytes | None) -> Record:
        """Write ``record`` once; the record already there if another appender was first."""
        slot = self._root.slot(record.level, record.index)
        if self._files.publish(slot, encode_record(record, signing_key)):
            return record
        existing = self._read([(record.level, record.index)])[(record.level, record.index)]
        assert existing is not None  # published by someone else: it is there
        return existing

    def _sum_record(self, level: int, index: int, halves: list[Record]) -> Record:
        rows = self.bucket_rows
        digest = hashlib.sha256(b"".join(bytes.fromhex(half.source_digest) for half in halves)).hexdigest()
        return Record(
            level=level, index=index, count=sum(h.count for h in halves), n_invalid=sum(h.n_invalid for h in halves),
            squared_norm_sum=float(halves[0].squared_norm_sum + halves[1].squared_norm_sum),
            first_row=(index << level) * rows, stop_row=((index + 1) << level) * rows, written_at=now(),
            source_digest=digest, signed=False, feature_sum=halves[0].feature_sum + halves[1].feature_sum,
            sites=max(half.sites for half in halves),
        )  # fmt: skip

    def _ensure(
        self, level: int, index: int, known: list[int], cache: dict[tuple[int, int], Record | None],
        signing_key: bytes | None,
    ) -> Record | None:  # fmt: skip
        """The record of block (level, index), writing the rollup when both halves are (or can be made) stored.

        Recurses only into blocks that hold a bucket known to be stored, so a block of the future
        costs one read.
        """
        if (level, index) not in cache:
            cache.update(self._read([(level, index)]))
        record = cache[(level, index)]
        if record is not None or level == 0:
            return record
        halves = []
        for half in (2 * index, 2 * index + 1):
            lo, hi = half << (level - 1), (half + 1) << (level - 1)
            if not _holds_any(known, lo, hi) and (level - 1, half) not in cache:
                cache.update(self._read([(level - 1, half)]))
                if cache[(level - 1, half)] is None:
                    return None
            found = self._ensure(level - 1, half, known, cache, signing_key)
            if found is None:
                return None
            halves.append(found)
        record = self._publish(self._sum_record(level, index, halves), signing_key)
        cache[(level, index)] = record
        return record

    def _roll_up(
        self, bucket: int, known: list[int], cache: dict[tuple[int, int], Record | None], key: bytes | None
    ) -> None:
        for level in range(1, self._root.levels + 1):
            if self._ensure(level, bucket >> level, known, cache, key) is None:
                return

    # Appending.

    def append(
        self,
        source: Any,
        start: int = 0,
        signing_key: bytes | None = None,
        dtype: Any = "float32",
        **options: Any,
    ) -> AppendResult:
        """Sketch the complete buckets of ``source`` not yet stored, one published record at a time.

        ``source`` holds the stream's rows from global row ``start`` on (the whole stream so far,
        or the rows from a bucket edge on). Each complete bucket is sketched by the engine
        (:func:`streamrff.engine.run_sketch` on its rows: a Dask client, object storage and
        retries through the job options) and published atomically; then the rollups it
        completes. A bucket already stored is compared with the rows given by their digest
        (:func:`rows_digest`): the same rows change nothing, other rows are refused naming the
        bucket. Rows after the last complete bucket are left for a later append.

        Parameters
        ----------
        source : ndarray, dask Array, xarray DataArray, str/PathLike or RowSource
            Rows, as :func:`streamrff.sketch` takes them.
        start : int, default=0
            Global row index of the first row of ``source``.
        signing_key : bytes, optional
            Sign each record (HMAC-SHA256); required by a signed store.
        dtype : {"float32", "float64"}, default="float32"
            Precision of the features (sums are float64 either way).
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
        """
        if signing_key is not None:
            signing_key = check_signing_key(signing_key, "signing_key")
        if self._root.signed and signing_key is None:
            raise InputError(f"{self.path} is a signed store: pass signing_key= (CLI: --sign-key FILE) to append.")
        if not isinstance(start, (int, np.integer)) or isinstance(start, bool) or start < 0:
            raise InputError(f"start must be a row index >= 0. Got {start!r}.")
        dtype = check_feature_dtype(dtype)
        method = check_sum_method("auto", False, dtype)
        job = current_job_options(**options)
        job = job.replace(checkpoint=None)
        opened = open_job_source(source, job)
        width = self.feature_map.n_features_in_
        if opened.shape[1] != width:
            raise InputError(
                f"The store's map takes rows of {width} columns. Got {opened.shape[1]} columns from "
                f"{opened.description}. Append rows of the stream the store was made for."
            )
        rows, start = self.bucket_rows, int(start)
        first_bucket = -(-start // rows)
        stop_bucket = min((start + opened.shape[0]) // rows, self._root.capacity)
        known = [int(bucket) for bucket in self._stored_buckets()]
        cache: dict[tuple[int, int], Record | None] = {}
        appended, unchanged = [], []
        with connect(job.client) as active:
            job = job.replace(client=active)
            for bucket in range(first_bucket, stop_bucket):
                local = bucket * rows - start
                if _holds_any(known, bucket, bucket + 1):
                    stored = self._read([(0, bucket)])[(0, bucket)]
                    if stored is not None:  # only the rows' digest is needed
                        self._check_same_rows(stored, source_digest(opened, local, local + rows, bucket * rows, active))
                        unchanged.append(bucket)
                        continue
                partial, digest = sketch_with_digest(
                    _rows_between(opened, local, local + rows), self.feature_map, job, bucket * rows, moments=False,
                    dtype=dtype, method=method,
                )  # fmt: skip
                record = Record(
                    level=0, index=bucket, count=partial.count, n_invalid=partial.n_invalid,
                    squared_norm_sum=partial.squared_norm_sum, first_row=bucket * rows, stop_row=(bucket + 1) * rows,
                    written_at=now(), source_digest=digest, signed=signing_key is not None,
                    feature_sum=np.asarray(partial.feature_sum, dtype=np.float64),
                )  # fmt: skip
                published = self._publish(record, signing_key)
                if published is not record:  # another appender stored this bucket meanwhile
                    self._check_same_rows(published, digest)
                    unchanged.append(bucket)
                else:
                    appended.append(bucket)
                if not _holds_any(known, bucket, bucket + 1):
                    bisect.insort(known, bucket)
                cache[(0, bucket)] = published
                self._roll_up(bucket, known, cache, signing_key)
        rows_left = start + opened.shape[0] - max(stop_bucket, first_bucket) * rows
        return AppendResult(tuple(appended), tuple(unchanged), int(max(rows_left, 0)))

    def _check_same_rows(self, stored: Record, digest: str) -> None:
        if stored.source_digest != digest:
            raise SourceChangedError(
                f"Bucket {stored.index} (rows {stored.first_row}..{stored.stop_row - 1}) of {self.path} is stored "
                f"with other rows (digest {stored.source_digest[:12]}, given {digest[:12]}). A stored bucket is never "
                "rewritten: pass the stream's rows from their true start (start=), or use a new store."
            )

    def repair(self, signing_key: bytes | None = None) -> int:
        """Write every missing rollup whose halves are stored (after an appender was killed); returns how many."""
        known = [int(bucket) for bucket in self._stored_buckets()]
        before = len(self._files.slots())
        cache: dict[tuple[int, int], Record | None] = {}
        for bucket in sorted(known):
            self._roll_up(bucket, known, cache, signing_key)
        return len(self._files.slots()) - before

    # Ranges.

    def _bucket_span(self, start: Any, stop: Any) -> tuple[int, int]:
        """Buckets [a, b) of rows [start, stop), both on bucket edges; None ends are the stored extent's."""
        rows = self.bucket_rows
        extent = None
        if start is None or stop is None:
            stored = self._stored_buckets()
            if not stored.size:
                raise InputError(f"{self.path} holds no bucket yet: append rows first.")
            extent = (int(stored[0]) * rows, (int(stored[-1]) + 1) * rows)
        start = extent[0] if start is None else start
        stop = extent[1] if stop is None else stop
        for name, value in (("start", start), ("stop", stop)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0 or value % rows:
                raise InputError(
                    f"{name} must be a row on a bucket edge (a multiple of {rows} rows, >= 0). Got {value!r}; "
                    f"use {rows * (int(value) // rows) if isinstance(value, (int, np.integer)) else 0}."
                )
        if stop <= start:
            raise InputError(f"A range needs stop > start. Got start={start}, stop={stop}.")
        if stop // rows > self._root.capacity:
            raise InputError(
                f"stop={stop} is past the store's last possible bucket ({self._root.capacity * rows} rows)."
            )
        return int(start) // rows, int(stop) // rows

    def _records_covering(self, first: int, stop: int) -> list[Record]:
        """Records whose blocks tile buckets [first, stop): the dyadic cover, halves where a rollup is missing."""
        wanted = _blocks(first, stop)
        found: list[Record] = []
        while wanted:
            read = self._read(wanted)
            missing = []
            for level, index in wanted:
                record = read[(level, index)]
                if record is not None:
                    found.append(record)
                elif level == 0:
                    raise InputError(
                        f"Bucket {index} (rows {index * self.bucket_rows}..{(index + 1) * self.bucket_rows - 1}) of "
                        f"{self.path} is not stored. Ask for a range of stored buckets (store.info()), or append it."
                    )
                else:
                    missing += [(level - 1, 2 * index), (level - 1, 2 * index + 1)]
            wanted = missing
        return sorted(found, key=lambda record: record.first_bucket)

    def _sketch_of(self, records: list[Record]) -> MeanSketch:
        total = np.zeros(self._root.n_features)
        for record in records:
            total += record.feature_sum
        return MeanSketch(
            self.feature_map, sum(r.count for r in records), total, float(sum(r.squared_norm_sum for r in records)),
            None, sum(r.n_invalid for r in records),
        )  # fmt: skip

    def range(self, start: int | None = None, stop: int | None = None) -> MeanSketch:
        """The mean sketch of rows ``[start, stop)`` (on bucket edges), merged from O(log n) records.

        ``None`` ends are the first and last stored bucket's. Every bucket in the range must be stored.

        Examples
        --------
        >>> import os, tempfile, numpy as np, streamrff as srf
        >>> X = np.random.default_rng(2).normal(size=(800, 2))
        >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
        >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
        >>> _ = store.append(X)
        >>> store.range(100, 800).count, store.range().count
        (700, 800)
        """
        first, stop_bucket = self._bucket_span(start, stop)
        return self._sketch_of(self._records_covering(first, stop_bucket))

    def complement(self, start: int, stop: int, within: tuple[int, int] | None = None) -> MeanSketch:
        """The sketch of the rows of ``within`` (default: the stored extent) outside ``[start, stop)``.

        ``range(*within) - range(start, stop)``: exact, since mean sketches are linear.

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
            rows = self.bucket_rows
            raise InputError(
                f"The left-out rows [{start}, {stop}) must lie within [{outer[0] * rows}, {outer[1] * rows}). "
                "Pass within= that holds them."
            )
        return self._sketch_of(self._records_covering(*outer)) - self._sketch_of(self._records_covering(*inner))

    def buckets(self, start: int | None = None, stop: int | None = None) -> list[MeanSketch]:
        """The sketch of every bucket of ``[start, stop)`` (one record read per bucket)."""
        first, stop_bucket = self._bucket_span(start, stop)
        return [self._sketch_of([record]) for record in self._bucket_records(first, stop_bucket)]

    def _bucket_records(self, first: int, stop: int) -> list[Record]:
        read = self._read([(0, bucket) for bucket in range(first, stop)])
        missing = [bucket for bucket in range(first, stop) if read[(0, bucket)] is None]
        if missing:
            raise InputError(
                f"Bucket {missing[0]} (rows {missing[0] * self.bucket_rows}..{(missing[0] + 1) * self.bucket_rows - 1})"
                f" of {self.path} is not stored. Ask for stored buckets (store.info()), or append it."
            )
        return [read[(0, bucket)] for bucket in range(first, stop)]  # type: ignore[misc]

    # Tests.

    def test(self, a: tuple[int, int], b: tuple[int, int], n_permutations: int = 999, seed: Any = 0) -> Any:
        """Two-sample test between rows ``a = (start, stop)`` and ``b``, with the bucket permutation null.

        The statistic is the unbiased MMD^2 of the two range sketches (:func:`streamrff.mmd2`).
        Under no change the buckets are exchangeable, so relabelling whole buckets between the
        two ranges gives an exact permutation null from the bucket sums alone (no rows, no
        second moments): ``p = (1 + #{null >= statistic}) / (1 + B)``. Reads one record per bucket.

        Parameters
        ----------
        a, b : (int, int)
            Two disjoint row ranges on bucket edges.
        n_permutations : int, default=999
        seed : int or numpy.random.Generator, default=0

        Returns
        -------
        TwoSampleResult
            ``method`` is ``"bucket-permutation"``; ``null`` the B relabelled statistics.

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
        """
        from .permutation import bucket_permutation_test

        spans = [self._bucket_span(*pair) for pair in (a, b)]
        if spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]:
            raise InputError(f"The two ranges overlap: a={a!r}, b={b!r}. Pass disjoint ranges.")
        return bucket_permutation_test(
            [self._bucket_records(*span) for span in spans], self.feature_map, n_permutations, seed
        )

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
        from .permutation import bucket_series

        every = check_positive_int(every, "every")
        reference_span = self._bucket_span(*reference)
        first, stop_bucket = self._bucket_span(start, stop)
        windows = [
            (lo, lo + every) for lo in range(first, stop_bucket - every + 1, every)
            if lo + every <= reference_span[0] or lo >= reference_span[1]
        ]  # fmt: skip
        if not windows:
            raise InputError(
                f"No window of {every} bucket(s) outside the reference {reference!r} in the range asked. Pass a "
                "shorter reference or a smaller every=."
            )
        needed = sorted({bucket for lo, hi in windows for bucket in range(lo, hi)})
        records = {record.index: record for record in self._read_buckets(needed)}
        return bucket_series(
            self._bucket_records(*reference_span), [[records[b] for b in range(lo, hi)] for lo, hi in windows],
            self.feature_map, n_permutations, seed, alpha,
        )  # fmt: skip

    def _read_buckets(self, buckets: list[int]) -> list[Record]:
        records: list[Record] = []
        for run_start, run_stop in _runs(buckets):
            records += self._bucket_records(run_start, run_stop)
        return records

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
        slots = self._files.slots()
        buckets = slots[slots < self._root.capacity]
        rows = self.bucket_rows
        return {
            "path": self.path, "format": "streamrff.sketch-store", "map": self.feature_map.spec,
            "fingerprint": self.feature_map.fingerprint, "n_features": self._root.n_features, "bucket_rows": rows,
            "levels": self._root.levels, "signed": self._root.signed, "created_at": self._root.created_at,
            "buckets": int(buckets.size), "records": int(slots.size), "rows": int(buckets.size) * rows,
            "runs": [[lo * rows, hi * rows] for lo, hi in _runs([int(b) for b in buckets])],
            "bytes_per_record": 8 * self._root.width + 4,
        }  # fmt: skip

    def merge_from(self, *others: SketchStore, signing_key: bytes | None = None) -> list[int]:
        """Add the buckets of stores with the same map and grid (two sites), bucket by bucket, into this empty store.

        A bucket held by several stores is their sum (count and sums add; its digest is the sha256
        of theirs in order). Returns the buckets written.

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
        for other in others:
            if not isinstance(other, SketchStore):
                raise InputError(f"merge_from takes SketchStore objects. Got {type(other).__name__}.")
            if other.feature_map.fingerprint != self.feature_map.fingerprint or other.bucket_rows != self.bucket_rows:
                raise InputError(
                    f"{other.path} has map {other.feature_map.fingerprint[:12]} and buckets of {other.bucket_rows} rows; "  # noqa: E501
                    f"{self.path} has {self.feature_map.fingerprint[:12]} and {self.bucket_rows}. Merge stores made "
                    "with one map file and one bucket size."
                )
        if self._stored_buckets().size:
            raise InputError(f"{self.path} already holds buckets: merge into a new, empty store.")
        holders: dict[int, list[Record]] = {}
        for other in others:
            stored = [int(b) for b in other._stored_buckets()]
            for record in other._read_buckets(stored):
                holders.setdefault(record.index, []).append(record)
        known = sorted(holders)
        cache: dict[tuple[int, int], Record | None] = {}
        for bucket in sorted(holders):
            parts = holders[bucket]
            total = parts[0].feature_sum.copy()
            for part in parts[1:]:
                total += part.feature_sum
            digest = parts[0].source_digest if len(parts) == 1 else hashlib.sha256(
                b"".join(bytes.fromhex(part.source_digest) for part in parts)
            ).hexdigest()  # fmt: skip
            record = dataclasses.replace(
                parts[0], count=sum(p.count for p in parts), n_invalid=sum(p.n_invalid for p in parts),
                squared_norm_sum=float(sum(p.squared_norm_sum for p in parts)), feature_sum=total,
                source_digest=digest, written_at=now(), signed=signing_key is not None,
                sites=sum(p.sites for p in parts),
            )  # fmt: skip
            cache[(0, bucket)] = self._publish(record, signing_key)
            self._roll_up(bucket, known, cache, signing_key)
        return sorted(holders)


def _holds_any(known: list[int], first: int, stop: int) -> bool:
    """Whether the sorted bucket list ``known`` holds a bucket in ``[first, stop)``."""
    position = bisect.bisect_left(known, first)
    return position < len(known) and known[position] < stop


def _runs(buckets: list[int]) -> Iterator[tuple[int, int]]:
    """Consecutive runs ``[first, stop)`` of sorted bucket numbers."""
    run_start = previous = None
    for bucket in buckets:
        if run_start is None:
            run_start = previous = bucket
        elif bucket == previous + 1:
            previous = bucket
        else:
            yield run_start, previous + 1
            run_start = previous = bucket
    if run_start is not None:
        yield run_start, previous + 1
