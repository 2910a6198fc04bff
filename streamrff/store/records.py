"""Record I/O and the dyadic layout of a sketch store: reading, publishing and rolling up records.

:class:`StoreRecords` is the part of :class:`~streamrff.store.buckets.SketchStore` that knows
records: reading blocks (checked as :mod:`streamrff.formats.store` decodes them), publishing a
record once, writing the rollups a bucket completes, the greedy dyadic cover of a range and the
sketch of a list of records. :mod:`.buckets` holds the public surface (create, open, append,
ranges, tests, retention).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import InputError, SourceChangedError
from ..formats.store import (
    MAX_LEVELS,
    Record,
    RecordFiles,
    StoreRoot,
    check_records_fit,
    check_slots,
    decode_record,
    encode_record,
    now,
    record_place,
)
from ..sketches.mean import MeanSketch
from .digest import rows_digest
from .timegrid import format_ns

__all__ = ["StoreRecords"]


def _EMPTY(width: int) -> str:  # noqa: N802 - a constant of the width
    """The digest of a bucket without rows."""
    return rows_digest(np.zeros((0, width)))


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


class StoreRecords:
    """Records of a store: read, published, rolled up and summed (the base of :class:`SketchStore`)."""

    _root: StoreRoot
    _files: RecordFiles
    _verify_key: bytes | None

    # path, bucket_rows, bucket_seconds: SketchStore's properties.

    def _describe(self, first: int, stop: int | None = None) -> str:
        """Buckets ``[first, stop)`` as a reader knows them: their rows, or their times."""
        stop = first + 1 if stop is None else stop
        if self.bucket_seconds:
            width = self.bucket_seconds * 10**9
            return f"{format_ns(first * width)}..{format_ns(stop * width)}"
        return f"rows {first * self.bucket_rows}..{stop * self.bucket_rows - 1}"

    # Records.

    def _read(self, blocks: list[tuple[int, int]]) -> dict[tuple[int, int], Record | None]:
        check_records_fit(self._root, len(blocks))
        slots = {self._root.slot(level, index): (level, index) for level, index in blocks}
        found = self._files.read(list(slots), 8 * self._root.width + 4, lambda slot: record_place(self._root, slot))
        return {
            slots[slot]: None if data is None else decode_record(data, self._root, slot, self._verify_key)
            for slot, data in found.items()
        }

    def _compacted_buckets(self) -> Any:
        """The compacted part (:class:`~streamrff.store.compact.Compacted`), or None if never compacted."""
        from .compact import read_compacted  # here: compact imports this module

        return read_compacted(self)

    def _stored_buckets(self) -> np.ndarray:
        """The stored buckets (level 0), sorted: one listing of the records."""
        return (slots := self._slots())[slots < self._root.capacity]

    def _slots(self) -> np.ndarray:
        """The slots that hold a record (one listing), refusing one outside the layout."""
        return check_slots(self._root, self._files.slots())

    def _publish(self, record: Record, signing_key: bytes | None) -> Record:
        """Write ``record`` once; the record already there if another appender was first."""
        slot = self._root.slot(record.level, record.index)
        if self._files.publish(slot, encode_record(record, self._root, signing_key)):
            return record
        existing = self._read([(record.level, record.index)])[(record.level, record.index)]
        assert existing is not None  # published by someone else: it is there
        return existing

    def _sum_record(self, level: int, index: int, halves: list[Record]) -> Record:
        rows = self._root.key_width
        digest = hashlib.sha256(b"".join(bytes.fromhex(half.source_digest) for half in halves)).hexdigest()
        return Record(
            level=level, index=index, count=sum(h.count for h in halves), n_invalid=sum(h.n_invalid for h in halves),
            squared_norm_sum=float(halves[0].squared_norm_sum + halves[1].squared_norm_sum),
            first_row=(index << level) * rows, stop_row=((index + 1) << level) * rows, written_at=now(),
            source_digest=digest, signed=False, feature_sum=halves[0].feature_sum + halves[1].feature_sum,
            sites=max(half.sites for half in halves),
            columns=None if halves[0].columns is None else halves[0].columns + halves[1].columns,
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

    def _check_same_rows(self, stored: Record, digest: str) -> None:
        if stored.source_digest != digest:
            raise SourceChangedError(
                f"Bucket {stored.index} ({self._describe(stored.index)}) of {self.path} is stored "
                f"with other rows (digest {stored.source_digest[:12]}, given {digest[:12]}). A stored bucket is never "
                "rewritten: pass the stream's rows from their true start (start=), or use a new store."
            )

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
                        f"Bucket {index} ({self._describe(index)}) of "
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

    def _bucket_records(self, first: int, stop: int) -> list[Record]:
        read = self._read([(0, bucket) for bucket in range(first, stop)])
        missing = [bucket for bucket in range(first, stop) if read[(0, bucket)] is None]
        if missing:
            raise InputError(
                f"Bucket {missing[0]} ({self._describe(missing[0])}) of {self.path} is not stored. Ask for stored "
                "buckets (store.info()), or append it."
            )
        return [read[(0, bucket)] for bucket in range(first, stop)]  # type: ignore[misc]

    def _read_buckets(self, buckets: list[int]) -> list[Record]:
        records: list[Record] = []
        for run_start, run_stop in _runs(buckets):
            records += self._bucket_records(run_start, run_stop)
        return records
