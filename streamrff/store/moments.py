"""Second moments of a sketch store, kept at coarse levels only: the ``moments`` group of a store.

A store made with ``moments=k`` keeps, besides its bucket records (counts and feature sums,
``8 (32 + D) + 4`` bytes a bucket whatever ``k``), one moment record per aligned block of
``2**k`` buckets: the block's whole sketch with its second moment ``sum z z^T`` (the upper
triangle, ``D (D + 1) / 2`` float64 values), in ``<store>/moments``, a store of the same format
whose bucket is ``2**k`` of the store's, with its own dyadic rollups (so a range on block edges
reads O(log n) moment records, as a range of sums does). ``k = 0`` keeps a moment per bucket.

Why blocks and not rollups of fine moments: a moment cannot be rebuilt from sums, so a coarse
moment needs the rows of its whole block. An append that is given every row of a block (a batch
job, or the stream so far) sketches the block's buckets with moments (one pass over the rows,
``O(n D^2)`` instead of ``O(n D)``) and publishes the block's moment record once its last bucket
is published; one given only part of a block (``watch`` writing one bucket at a time) writes
the bucket records only, and appending the block's rows again later writes its moment record
(the stored buckets are checked by their digests and not rewritten). A killed appender leaves a
moment record absent or whole, like any record.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Any

import numpy as np

from ..formats.store import HEADER, Record, create_store, now, pack_moment, unpack_moment
from ..sketches.mean import MeanSketch

__all__ = [
    "MomentBlocks", "check_moment_records", "create_moment_tier", "merge_moments", "moment_sketch", "open_moment_tier",
]  # fmt: skip

_TIER = "moments"

#: A :class:`~streamrff.store.SketchStore` (not imported: it imports this module).
Store = Any


def _tier_path(store: Store) -> str:
    return f"{store.path.rstrip('/')}/{_TIER}"


def create_moment_tier(store: Store, signing_key: bytes | None = None) -> None:
    """Make ``<store>/moments`` for a store made with ``moments=k`` (nothing if another process made it);
    ``signing_key`` signs its root, as the store's (so it verifies while empty)."""
    root, level = store._root, store._root.moment_level
    seconds = root.bucket_seconds << level
    try:
        create_store(
            _tier_path(store), root.feature_map, root.bucket_rows << level, root.levels - level, root.signed,
            store._storage_options, seconds, f"{seconds}s" if seconds else "", moment_sums=True,
            signing_key=signing_key,
        )  # fmt: skip
    except FileExistsError:
        pass


def open_moment_tier(store: Store, create: bool = False, signing_key: bytes | None = None) -> Any:
    """The moment store of ``store`` (cached on it), or None: the store keeps no moments, or (not ``create``)
    their group was never made. ``create`` makes it, its root signed with ``signing_key``."""
    if store._root.moment_level is None:
        return None
    tier = getattr(store, "_moments", None)
    if tier is None:
        from ..errors import SketchFormatError

        if create:
            create_moment_tier(store, signing_key)
        try:
            tier = type(store).open(_tier_path(store), storage_options=store._storage_options,
                                    verify_key=store._verify_key)  # fmt: skip
        except SketchFormatError as error:
            if not create and "is missing" in str(error):
                return None
            raise
        size = 1 << store._root.moment_level
        fits = tier._root.key_width == store._root.key_width * size and tier._root.moment_sums
        if not fits or tier.feature_map.fingerprint != store.feature_map.fingerprint:
            raise SketchFormatError(
                f"{tier.path}: its grid, map or records are not those of moments of {size} of the store's buckets "
                "(tampered). Restore the store from a copy."
            )
        store._moments = tier
    return tier


class _Recent(dict):  # type: ignore[type-arg]
    """A rollup cache holding the last few records only: moment records are D^2 values each."""

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > 4:
            del self[next(iter(self))]

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


class MomentBlocks:
    """The moment records one append writes: blocks of ``2**k`` buckets all given to it and not stored yet."""

    def __init__(self, store: Store, tier: Any, wanted: set[int], signing_key: bytes | None) -> None:
        self.store, self.tier, self.wanted, self.signing_key = store, tier, wanted, signing_key
        self.level = store._root.moment_level
        self.known = [int(block) for block in tier._stored_buckets()]
        self.open: dict[int, list[Any]] = {}
        self.written: list[int] = []

    @classmethod
    def plan(cls, store: Store, buckets: list[int], signing_key: bytes | None) -> MomentBlocks | None:
        """The blocks of which ``buckets`` (those the append was given, in order) hold every bucket and whose
        moment record is not stored; None if the store keeps no moments."""
        level = store._root.moment_level
        if level is None:
            return None
        tier = open_moment_tier(store, create=True, signing_key=signing_key)
        held: dict[int, int] = {}
        for bucket in buckets:
            held[bucket >> level] = held.get(bucket >> level, 0) + 1
        stored = set(int(block) for block in tier._stored_buckets())
        wanted = {block for block, n in held.items() if n == 1 << level and block not in stored}
        return cls(store, tier, wanted, signing_key)

    def wants(self, bucket: int) -> bool:
        """Whether ``bucket`` must be sketched with its second moment."""
        return (bucket >> self.level) in self.wanted

    def add(self, bucket: int, sketch: MeanSketch | None, digest: str) -> None:
        """Add a bucket's sketch (None: a bucket without rows) and digest; publish its block once complete."""
        block = bucket >> self.level
        width = self.store._root.n_features
        parts = self.open.setdefault(block, [0, 0, 0.0, np.zeros(width), np.zeros((width, width)), []])
        if sketch is not None:
            parts[0] += sketch.count
            parts[1] += sketch.n_invalid
            parts[2] += float(sketch.squared_norm_sum)
            parts[3] += sketch.feature_sum
            parts[4] += sketch.moment
        parts[5].append(bytes.fromhex(digest))
        if len(parts[5]) < 1 << self.level:
            return
        del self.open[block]
        key = self.tier._root.key_width
        record = Record(
            level=0, index=block, count=parts[0], n_invalid=parts[1], squared_norm_sum=parts[2],
            first_row=block * key, stop_row=(block + 1) * key, written_at=now(),
            source_digest=hashlib.sha256(b"streamrff moments v1\n" + b"".join(parts[5])).hexdigest(),
            signed=self.signing_key is not None, feature_sum=np.concatenate([parts[3], pack_moment(parts[4])]),
        )  # fmt: skip
        self.tier._publish(record, self.signing_key)
        bisect.insort(self.known, block)
        self.tier._roll_up(block, self.known, _Recent(), self.signing_key)
        self.written.append(block)


def moment_sketch(store: Store, first: int, stop: int) -> tuple[MeanSketch | None, str]:
    """The sketch with second moments of buckets ``[first, stop)`` from moment records, or (None, why not)."""
    from ..errors import InputError

    level = store._root.moment_level
    size = 1 << level
    how = (
        f"Ask for a range on blocks of {size} bucket(s) ({store._describe(0, size)} from the grid's start), "
        f"or append the rows of each whole block again (the stored buckets are not rewritten)."
    )
    if first % size or stop % size:
        return None, (
            f"{store.path} keeps second moments per {size} bucket(s): the range {store._describe(first, stop)} is "
            f"not on their edges, so it has none. {how}"
        )
    tier = open_moment_tier(store)
    try:
        if tier is None:
            raise InputError("its moments group is missing")
        records = tier._records_covering(first // size, stop // size)
    except InputError:
        return None, (
            f"{store.path}: a block of {store._describe(first, stop)} has no moment record (appended in parts), so "
            f"the range has no second moments. {how}"
        )
    width = store._root.n_features
    total = np.zeros(tier._root.width - HEADER)
    for record in records:
        total += record.feature_sum
    norms = float(sum(r.squared_norm_sum for r in records))
    sketch = MeanSketch(
        store.feature_map, sum(r.count for r in records), total[:width], norms, unpack_moment(total[width:], width),
        sum(r.n_invalid for r in records),
    )  # fmt: skip
    return sketch, ""


def merge_moments(target: Store, others: tuple[Store, ...], signing_key: bytes | None) -> list[int]:
    """The moment records of a merge of ``others`` into ``target`` (both made with the same ``moments=k``).

    A block's merged moment is the sum of the sites' moment records for it, written only when every
    site holding a bucket of the block has its moment record (otherwise the sum would miss rows).
    Returns the blocks written.
    """
    from .compact import _merge_batch  # here: compact imports the store, which imports this module

    level = target._root.moment_level
    tier = open_moment_tier(target, create=True, signing_key=signing_key)
    if tier is None:
        return []
    sites: dict[int, list[int]] = {}
    for position, other in enumerate(others):
        for block in sorted({int(bucket) >> level for bucket in other._stored_buckets()}):
            sites.setdefault(block, []).append(position)
    tiers = [open_moment_tier(other) if other._root.moment_level == level else None for other in others]
    held = [set() if other is None else {int(b) for b in other._stored_buckets()} for other in tiers]
    blocks = [block for block in sorted(sites) if all(block in held[position] for position in sites[block])]
    for block in blocks:  # one block's records at a time: each is D (D + 1) / 2 values
        parts = [tiers[position]._read([(0, block)])[(0, block)] for position in sites[block]]  # type: ignore[union-attr]
        _merge_batch(tier, {block: parts}, blocks, _Recent(), signing_key)
    return blocks


def check_moment_records(store: Store) -> int:
    """Read (and so check: size, crc32c, header, signature with the store's verify key) every moment record,
    one at a time (each is D (D + 1) / 2 values); returns how many."""
    tier = open_moment_tier(store)
    if tier is None:
        return 0
    slots = [int(slot) for slot in tier._slots()]
    for slot in slots:
        tier._read([tier._root.block_of(slot)])
    return len(slots)
