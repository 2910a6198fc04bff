"""Rewriting records: retention (fine buckets rolled into coarse ones, optionally with fewer features) and
merging the stores of two sites bucket by bucket.

The coarse buckets are a store of their own inside the store (``<store>/compact``: the same
format, a coarser grid, its own dyadic rollups, and the map of ``k`` features when features are
dropped). Compacting coarse bucket ``c`` (fine buckets ``[c r, (c + 1) r)``, ``r`` the ratio of
the grids) publishes its record there in one step and then deletes the fine records whose
blocks lie inside compacted buckets. What is compacted is the set of coarse records itself, so
a reader sees, for every fine bucket, either its fine record or the coarse one that holds it:

* a reader lists the coarse buckets first and takes those from the coarse store, the rest from
  the fine records (fine leftovers of a compacted bucket are never read);
* a fine record is deleted only after its coarse record is published, so a fine record a
  reader misses was compacted meanwhile: the reader lists again and retries;
* a compactor killed at any step leaves a coarse record absent or whole and fine leftovers
  that the next ``compact`` deletes.

Fewer features: a prefix of the frequencies of a seeded ``sincos`` map is the map of fewer
features with the same seed (its frequencies are drawn one after the other), so the first
``k / 2`` cosine and sine sums, times ``sqrt(D / k)``, are exactly the sums of that ``k``-feature
map: an unbiased sketch with the variance of ``k`` features. The prefix is checked on probe rows
before anything is written; maps whose smaller instance is not a prefix are refused.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import hashlib
import math
import os
import time
from typing import Any

import numpy as np

from .._files.signed import check_signing_key
from ..errors import InputError, SketchFormatError
from ..formats.store import Record, create_store, now
from ..maps import FeatureMap
from ..maps.base import map_from_spec
from ..sketches.mean import MeanSketch
from .timegrid import format_ns, parse_bucket, to_ns

__all__ = ["Compacted", "compact", "merge_stores", "read_compacted", "prefix_columns", "sketch_between"]

_TIER = "compact"

#: A :class:`~streamrff.store.SketchStore` (not imported: it imports this module).
Store = Any


def prefix_columns(feature_map: FeatureMap, k: int) -> tuple[FeatureMap, np.ndarray, float]:
    """The ``k``-feature map whose sums are a prefix of ``feature_map``'s: (map, columns, scale).

    Its feature sums are ``scale * sums[columns]`` of the ``D``-feature map's, checked on probe
    rows; InputError if the map has no such prefix (only seeded ``sincos`` Fourier maps do).
    """
    spec = dict(feature_map.spec)
    total = int(feature_map.n_features_out_)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 2 <= k < total or k % 2:
        raise InputError(f"features must be an even number of features in 2..{total - 2}. Got {k!r}.")
    k = int(k)
    if spec.get("variant") != "sincos" or "n_features" not in spec:
        raise InputError(
            f"features={k}: only a seeded sincos Fourier map (RFF, variant='sincos') keeps a prefix of its features; "
            f"this store's map is {spec.get('kind')!r} variant {spec.get('variant')!r}. Compact without features=."
        )
    spec["n_features"] = k
    smaller = map_from_spec(spec)
    half, total_half = k // 2, total // 2
    columns = np.r_[0:half, total_half : total_half + half]
    scale = math.sqrt(total / k)
    probe = np.random.default_rng(0).normal(size=(16, int(feature_map.n_features_in_)))
    bandwidth = spec.get("bandwidth")
    if isinstance(bandwidth, (int, float)):
        probe = probe * float(bandwidth)
    expected = np.asarray(feature_map.transform(probe), dtype=np.float64)[:, columns] * scale
    if not np.allclose(np.asarray(smaller.transform(probe), dtype=np.float64), expected, rtol=1e-4, atol=1e-5):
        raise InputError(
            f"features={k}: the {k}-feature map of this spec is not a prefix of the store's {total}-feature map "
            "(its frequencies are not drawn one after the other, e.g. structured=True). Compact without features=."
        )
    return smaller, columns, scale


@dataclasses.dataclass
class Compacted:
    """The compacted part of a store: the coarse store, the grid ratio and the coarse buckets it holds."""

    tier: Store
    ratio: int
    buckets: list[int]
    columns: np.ndarray | None
    scale: float

    def holds(self, bucket: int) -> bool:
        """Whether fine bucket ``bucket`` is compacted."""
        position = bisect.bisect_left(self.buckets, bucket // self.ratio)
        return position < len(self.buckets) and self.buckets[position] == bucket // self.ratio

    @property
    def extent(self) -> tuple[int, int] | None:
        """First and last compacted fine bucket."""
        if not self.buckets:
            return None
        return self.buckets[0] * self.ratio, (self.buckets[-1] + 1) * self.ratio - 1

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.tier.path, "bucket": self.tier._root.bucket_label or self.tier.bucket_rows,
            "ratio": self.ratio, "n_features": self.tier._root.n_features, "buckets": len(self.buckets),
            "records": int(self.tier._files.slots().size),
        }  # fmt: skip

    def truncate(self, sketch: MeanSketch) -> MeanSketch:
        """A sketch of the fine map at the coarse map's features (the prefix, rescaled; norms are 1 a row)."""
        if self.columns is None or sketch.feature_map.fingerprint == self.tier.feature_map.fingerprint:
            return sketch
        return MeanSketch(
            self.tier.feature_map, sketch.count, sketch.feature_sum[self.columns] * self.scale, float(sketch.count),
            None, sketch.n_invalid,
        )  # fmt: skip

    def fully_compacted(self, first: int, stop: int) -> bool:
        """Whether every fine bucket of ``[first, stop)`` is compacted."""
        return _all_compacted(self.buckets, self.ratio, first, stop)

    def sketch(self, store: Store, first: int, stop: int) -> MeanSketch:
        """The sketch of fine buckets ``[first, stop)``: compacted runs from the coarse store, the rest fine."""
        inside = self.buckets[bisect.bisect_left(self.buckets, first // self.ratio) :]
        inside = inside[: bisect.bisect_left(inside, -(-stop // self.ratio))]
        for coarse in (inside[0], inside[-1]) if inside else ():
            lo, hi = coarse * self.ratio, (coarse + 1) * self.ratio
            if lo < first or hi > stop:
                raise InputError(
                    f"The range cuts compacted bucket {coarse} ({store._describe(lo, hi)}) of {store.path}. Ask for "
                    "a range on the coarse bucket edges in the compacted part."
                )
        fine: list[Record] = []
        coarse_records: list[Record] = []
        cursor = first
        for lo, hi in _runs(inside):
            if cursor < lo * self.ratio:
                fine += store._records_covering(cursor, lo * self.ratio)
            coarse_records += self.tier._records_covering(lo, hi)
            cursor = hi * self.ratio
        if cursor < stop:
            fine += store._records_covering(cursor, stop)
        fine_sketch = store._sketch_of(fine) if fine else None
        if not coarse_records:
            assert fine_sketch is not None
            return fine_sketch
        total = self.tier._sketch_of(coarse_records)
        return total if fine_sketch is None else total.merge(self.truncate(fine_sketch))


def _all_compacted(buckets: list[int], ratio: int, first: int, stop: int) -> bool:
    """Whether the sorted coarse ``buckets`` hold every fine bucket of ``[first, stop)``."""
    lo, hi = first // ratio, (stop - 1) // ratio
    left, right = bisect.bisect_left(buckets, lo), bisect.bisect_right(buckets, hi)
    return right - left == hi - lo + 1


def _runs(buckets: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for bucket in buckets:
        if runs and runs[-1][1] == bucket:
            runs[-1] = (runs[-1][0], bucket + 1)
        else:
            runs.append((bucket, bucket + 1))
    return runs


def _tier_exists(store: Store) -> bool:
    files = store._files
    if files.remote:
        try:
            return bool(files.filesystem.exists(f"{files.root}/{_TIER}/zarr.json"))
        except Exception:  # an unreadable place: the open below says why
            return True
    return os.path.exists(f"{files.root}/{_TIER}/zarr.json")


def _open_tier(store: Store) -> Any:
    """The coarse store (cached on the store: its grid and map never change), or None."""
    tier = getattr(store, "_tier", None)
    if tier is None and _tier_exists(store):
        tier = type(store).open(
            f"{store.path.rstrip('/')}/{_TIER}", storage_options=store._storage_options, verify_key=store._verify_key
        )
        if tier._root.key_width % store._root.key_width or bool(tier.bucket_seconds) != bool(store.bucket_seconds):
            raise SketchFormatError(
                f"{tier.path}: its grid ({tier._describe(0)}) is not a multiple of the store's (tampered)."
            )
        store._tier = tier
    return tier


def read_compacted(store: Store) -> Compacted | None:
    """The compacted part of ``store`` (one listing of the coarse records), or None if it was never compacted."""
    tier = _open_tier(store)
    if tier is None:
        return None
    columns, scale = None, 1.0
    if tier._root.n_features != store._root.n_features:
        _, columns, scale = prefix_columns(store.feature_map, tier._root.n_features)
        columns = np.asarray(columns)
    ratio = tier._root.key_width // store._root.key_width
    return Compacted(tier, ratio, [int(b) for b in tier._stored_buckets()], columns, scale)


def sketch_between(store: Store, first: int, stop: int) -> MeanSketch:
    """The sketch of fine buckets ``[first, stop)``, compacted parts included (retried if compacted meanwhile)."""
    compacted = read_compacted(store)
    for attempt in range(3):
        try:
            if compacted is None:
                return store._sketch_of(store._records_covering(first, stop))
            return compacted.sketch(store, first, stop)
        except InputError:
            again = read_compacted(store)
            unchanged = again is None or (compacted is not None and again.buckets == compacted.buckets)
            if unchanged or attempt == 2:
                raise
            compacted = again  # compacted while we read: read again
    raise AssertionError("unreachable")  # pragma: no cover


def _horizon(store: Store, older_than: Any) -> int:
    """The fine bucket before which buckets are old: a row (grid of rows), a time, or a duration before now."""
    if not store.bucket_seconds:
        if isinstance(older_than, bool) or not isinstance(older_than, (int, np.integer)) or older_than < 0:
            raise InputError(f"older_than must be a row index >= 0 for a store of row buckets. Got {older_than!r}.")
        return int(older_than) // store.bucket_rows
    ns = None
    if isinstance(older_than, (str, datetime.timedelta, np.timedelta64)):
        try:
            _, seconds, _ = parse_bucket(older_than)
            ns = time.time_ns() - seconds * 10**9
        except InputError:
            ns = None
    if ns is None:
        ns = to_ns(older_than, "older_than")
    return max(ns, 0) // (store.bucket_seconds * 10**9)


def _create_tier(store: Store, to: Any, features: int | None, signing_key: bytes | None = None) -> Store:
    """Open the coarse store, making it on the first compaction; refuse another grid or feature count."""
    rows, seconds, label = parse_bucket(to)
    fine = store._root.key_width
    coarse = seconds or rows
    if bool(seconds) != bool(store.bucket_seconds) or coarse % fine or coarse <= fine:
        unit = "a duration" if store.bucket_seconds else "a number of rows"
        raise InputError(
            f"to={to!r} must be {unit}, a multiple (> 1) of the store's buckets ({store._describe(0)}). "
            + ("Pass e.g. to='1d' for hourly buckets." if store.bucket_seconds else "Pass e.g. 10 times bucket rows.")
        )
    feature_map = store.feature_map if features is None else prefix_columns(store.feature_map, features)[0]
    tier = _open_tier(store)
    if tier is None:
        ratio = coarse // fine
        levels = max(1, math.ceil(math.log2(max(store._root.capacity // ratio, 2))))
        try:
            create_store(
                f"{store.path.rstrip('/')}/{_TIER}", feature_map, rows, levels, store._root.signed,
                store._storage_options, seconds, label, signing_key=signing_key,  # its root verifies while empty
            )  # fmt: skip
        except FileExistsError:
            pass  # another compactor made it first: checked below like any existing one
        tier = _open_tier(store)
        assert tier is not None
    if tier._root.key_width != coarse or tier.feature_map.fingerprint != feature_map.fingerprint:
        raise InputError(
            f"{store.path} is compacted into buckets of {tier._describe(0)} with {tier._root.n_features} features; "
            f"to={to!r}, features={features!r} asks for another. Compact with the same to= and features=."
        )
    return tier


def compact(
    store: Store, older_than: Any, to: Any, features: int | None = None, signing_key: bytes | None = None
) -> dict[str, Any]:
    """Roll the complete coarse buckets older than the horizon into the coarse store; delete their fine records.

    See :meth:`SketchStore.compact`. Returns what was done: the coarse buckets written, those
    left fine because a fine bucket of theirs is missing, and the fine records deleted.
    """
    if signing_key is not None:
        signing_key = check_signing_key(signing_key, "signing_key")
    if store._root.signed and signing_key is None:
        raise InputError(f"{store.path} is a signed store: pass signing_key= (CLI: --sign-key FILE) to compact.")
    horizon = _horizon(store, older_than)
    tier = _create_tier(store, to, features, signing_key)
    compacted = read_compacted(store)
    assert compacted is not None
    ratio = compacted.ratio
    stored = [int(b) for b in store._stored_buckets()]
    counts: dict[int, int] = {}
    for bucket in stored:
        counts[bucket // ratio] = counts.get(bucket // ratio, 0) + 1
    old = [coarse for coarse in sorted(counts) if (coarse + 1) * ratio <= horizon and not compacted.fully_compacted(
        coarse * ratio, (coarse + 1) * ratio)]  # fmt: skip
    written, incomplete = [], []
    known = list(compacted.buckets)
    cache: dict[tuple[int, int], Record | None] = {}
    for coarse in old:
        if counts[coarse] < ratio:
            incomplete.append(coarse)
            continue
        records = store._records_covering(coarse * ratio, (coarse + 1) * ratio)
        sketch = compacted.truncate(store._sketch_of(records))
        digest = hashlib.sha256(
            b"streamrff compacted v1\n" + b"".join(bytes.fromhex(r.source_digest) for r in records)
        ).hexdigest()  # fmt: skip
        key = tier._root.key_width
        record = Record(
            level=0, index=coarse, count=sketch.count, n_invalid=sketch.n_invalid,
            squared_norm_sum=float(sketch.squared_norm_sum), first_row=coarse * key, stop_row=(coarse + 1) * key,
            written_at=now(), source_digest=digest, signed=signing_key is not None,
            feature_sum=np.asarray(sketch.feature_sum, dtype=np.float64), sites=max(r.sites for r in records),
        )  # fmt: skip
        cache[(0, coarse)] = tier._publish(record, signing_key)  # one step: from now on readers take it
        bisect.insort(known, coarse)
        tier._roll_up(coarse, known, cache, signing_key)
        written.append(coarse)
    deleted = _delete_compacted(store, known, ratio)
    return {"compacted": written, "incomplete": incomplete, "deleted_records": deleted, "horizon_bucket": horizon}


def _delete_compacted(store: Store, compacted: list[int], ratio: int) -> int:
    """Delete the fine records (buckets and rollups) whose blocks lie inside compacted coarse buckets."""
    doomed = []
    for slot in store._files.slots():
        level, index = store._root.block_of(int(slot))
        if _all_compacted(compacted, ratio, index << level, (index + 1) << level):
            doomed.append(int(slot))
    store._files.remove(doomed)
    return len(doomed)


def describe_horizon(store: Store, bucket: int) -> str:
    """A fine bucket edge as a reader gives it (row or time)."""
    if store.bucket_seconds:
        return format_ns(bucket * store.bucket_seconds * 10**9)
    return str(bucket * store.bucket_rows)


def merge_stores(target: Store, others: tuple[Store, ...], signing_key: bytes | None) -> list[int]:
    """:meth:`SketchStore.merge_from`: the buckets of ``others`` (one map and grid) summed bucket by bucket."""
    for other in others:
        if not isinstance(other, type(target)):
            raise InputError(f"merge_from takes SketchStore objects. Got {type(other).__name__}.")
        same_grid = (other.bucket_rows, other.bucket_seconds) == (target.bucket_rows, target.bucket_seconds)
        mine, theirs = target.column_maps, other.column_maps
        if (mine is None) != (theirs is None) or (mine is not None and mine.differences(theirs)):
            raise InputError(
                f"{other.path} and {target.path} keep different column parts (columns=True, column_features, "
                "column_bandwidth). Merge into a store made like the stores merged."
            )
        if other.feature_map.fingerprint != target.feature_map.fingerprint or not same_grid:
            raise InputError(
                f"{other.path} has map {other.feature_map.fingerprint[:12]} and buckets of {other._describe(0)}; "
                f"{target.path} has {target.feature_map.fingerprint[:12]} and {target._describe(0)}. Merge stores "
                "made with one map file and one bucket size."
            )
    if target._stored_buckets().size:
        raise InputError(f"{target.path} already holds buckets: merge into a new, empty store.")
    held = [set(int(b) for b in other._stored_buckets()) for other in others]
    known = sorted(set().union(*held))
    for batch in range(0, len(known), _MERGE_BATCH):  # the records of a batch of buckets at a time
        buckets = known[batch : batch + _MERGE_BATCH]
        holders: dict[int, list[Record]] = {}
        for other, stored in zip(others, held):
            for record in other._read_buckets([bucket for bucket in buckets if bucket in stored]):
                holders.setdefault(record.index, []).append(record)
        _merge_batch(target, holders, known, {}, signing_key)  # a new cache: earlier records are read if needed
    return known


#: Buckets whose records a merge holds at once (8 MB at D = 1 024 per store).
_MERGE_BATCH = 1024


def _merge_batch(
    target: Store, holders: dict[int, list[Record]], known: list[int], cache: dict[tuple[int, int], Record | None],
    signing_key: bytes | None,
) -> None:  # fmt: skip
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
            columns=None if parts[0].columns is None else np.sum([part.columns for part in parts], axis=0),
        )  # fmt: skip
        cache[(0, bucket)] = target._publish(record, signing_key)
        target._roll_up(bucket, known, cache, signing_key)
