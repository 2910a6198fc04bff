"""The sketch store format: a stream kept as buckets of mean-sketch sums, one zarr v3 group. No pickle.

Layout (version 1)::

    <store>/zarr.json             group; attributes below
    <store>/map.json              the store's fitted feature map (a map file, :mod:`streamrff.formats.map`)
    <store>/records/zarr.json     array (n_slots, HEADER + D) float64, chunks (1, HEADER + D),
                                  codecs: bytes (little-endian), crc32c; fill value NaN
    <store>/records/c/<slot>/0    one chunk per record: written once, whole, never rewritten

Group attributes::

    format            "streamrff.sketch-store"
    version           1
    map               the feature map's JSON spec
    fingerprint       sha256 of the spec and the map's parameters
    n_features        D, the width of the feature sums
    bucket            {"rows": R}: bucket b holds rows [b R, (b + 1) R); or, a time grid,
                      {"seconds": S, "duration": "1h"}: bucket b holds the rows whose time t
                      (UTC, seconds since 1970-01-01) has b S <= t < (b + 1) S
    levels            L: the store holds at most 2**L buckets
    signed            whether every record carries an HMAC-SHA256 (key kept by its owners)
    created_at        ISO 8601 UTC time of creation
    moments           optional, {"level": k}: the store keeps second moments for aligned blocks of
                      2**k buckets (and their rollups) in ``<store>/moments``, below
    moment_sums       optional, true: this group's records carry second moments (the ``moments``
                      group of a store; its bucket is 2**k of the store's, its levels L - k)
    columns           optional, {"n_columns": d, "n_features": D_c, "bandwidth": s_c or null}: every
                      record also holds the column part's sums, d x D_c float64 after the feature
                      sums (the 1-D maps of :func:`streamrff.sketches.columns.derive_column_maps`:
                      D_c features a column, bandwidth s_c, or null for the map's s / sqrt(d))
    root_signature    (a store created with a key) {"algorithm": "hmac-sha256", "value": hex}: the HMAC of
                      the canonical JSON of every attribute but itself and the digest
    attributes_digest sha256 of the canonical JSON of every other attribute

Second moments. A record of a group with ``moment_sums`` is ``HEADER`` values, the D feature
sums, then the ``D (D + 1) / 2`` float64 values of the upper triangle of ``sum z z^T`` row by
row (``numpy.triu_indices(D)`` order): a whole sketch with moments of its block. The store's own
records never carry moments, so a fine bucket costs ``8 (HEADER + D) + 4`` bytes whatever ``k``;
a moment record costs ``8 (HEADER + D + D (D + 1) / 2) + 4`` bytes per ``2**k`` buckets.

Records. A record is the sum of an aligned dyadic block of buckets: level ``k``, index ``i``
holds buckets ``[i 2**k, (i + 1) 2**k)`` (level 0: one bucket). Its slot (row of ``records``)
is ``offset(k) + i`` with ``offset(k) = sum_{j < k} 2**(L - j)``. A row is
``HEADER`` float64 header values, then the D float64 feature sums (then, with ``columns``, the
column part's d x D_c sums; in a ``moment_sums`` group, the packed moment instead)::

    0 level  1 index  2 count  3 n_invalid  4 squared_norm_sum  5 first row  6 stop row
    (5-6 of a time grid: the block's first and stop time, seconds since the epoch)
    7 written at (Unix seconds)  8-15 source digest (8 x 32-bit words)
    16-23 HMAC-SHA256 of the row with these words zeroed (8 x 32-bit words; zeros unsigned)
    24 signed (0 or 1)  25 sites (stores merged into it, >= 1)  26-31 reserved (0)

The HMAC binds the record to its store: its message is ``"streamrff.sketch-store record v1\\n"``,
then ``"<fingerprint> <bucket rows> <levels>\\n"`` of the store's root, then the row's
little-endian bytes. A signed record is thus valid only under the map and bucket grid it was
written for: a root whose map or grid was replaced (digest recomputed) fails at its first
record, and so does a signed record copied from another store. With a key set, every record
read must verify (docs/security.rst), and so must the root, at open: a store created with the key
carries ``root_signature``, and a root without one is accepted only when it holds records (which
bind it); an empty store whose root is unsigned has nothing that vouches for its map and grid.
Without a key, the root's map spec must be the one in map.json, whose fingerprint is the root's.

Every integer in the header is exact in float64 (at most 2**53, checked on read with every
field's type and range: a header that disagrees with its slot or the grid is refused naming the
bucket). The source digest is the identity of the
rows the record holds (:func:`streamrff.store.rows_digest` for a bucket; for a block, the
sha256 of its two children's digests).

Why one chunk per record, and records rather than an index: a chunk object is written in one
step (local: under a temporary name, then :func:`~streamrff._files.publish.publish` without
replacing; object storage: one PUT), so a record is absent or complete, and appenders of
distinct buckets never write the same object. What indexes the buckets is the set of stored
chunk objects itself: there is no second mutable file that could disagree with the records.
Reading a record is one object read (the array metadata is read once per open), its crc32c
checks it, and its header must name its own slot: a record under another slot's name is
refused naming the bucket. The store is an ordinary zarr array: ``zarr.open_array(store +
"/records")[slot, HEADER:]`` reads the same sums.

This module reads and writes the root and the records; what a record means (a mean sketch,
the engine that sketches buckets) is :mod:`streamrff.store`'s.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._base.memory import memory_available
from .._base.validation import check_format_version
from .._files.bounded_read import MAX_JSON_BYTES, _read_inside, check_json_depth
from .._files.publish import publish, remove_path, staging_path
from .._files.signed import DIGEST_ATTRIBUTE, SIGNATURE_ALGORITHM, _attributes_digest, _is_url, _local_path
from ..errors import SketchFormatError, SketchSignatureError, SourceError
from ..maps import FeatureMap
from ..typing import StorageOptions
from .map import map_from_json, map_to_json

__all__ = [
    "STORE_FORMAT_NAME", "STORE_FORMAT_VERSION", "HEADER", "StoreRoot", "Record", "RecordFiles",
    "create_store", "read_store_root", "encode_record", "moment_width", "pack_moment", "unpack_moment",
    "root_signature",
]  # fmt: skip

STORE_FORMAT_NAME = "streamrff.sketch-store"
STORE_FORMAT_VERSION = 1
#: Header values before the feature sums in a record row.
HEADER = 32
#: Largest number of dyadic levels (a store of at most 2**40 buckets).
MAX_LEVELS = 40
#: Most features of a store's records (as a sketch's largest vector).
MAX_FEATURES = 2**24
_DIGEST_COLUMNS = slice(8, 16)
_SIGNATURE_COLUMNS = slice(16, 24)
_SIGNED_COLUMN = 24
_SITES_COLUMN = 25
_RESERVED_COLUMNS = slice(26, HEADER)
#: Largest integer a header holds exactly (float64).
_EXACT = 2**53
#: Largest map file a store's map.json may be (as :data:`streamrff.formats.map.MAX_MAP_FILE_BYTES`).
_MAX_MAP_BYTES = 2**28
_RECORD_CONTEXT = b"streamrff.sketch-store record v1\n"
_ROOT_CONTEXT = b"streamrff.sketch-store root v1\n"
#: The attribute holding the HMAC of a store's other attributes (a store created with a key).
ROOT_SIGNATURE_ATTRIBUTE = "root_signature"


def root_signature(attrs: dict[str, Any], key: bytes) -> dict[str, str]:
    """The ``root_signature`` record of a store's group attributes: HMAC-SHA256 of every other one under ``key``.

    Examples
    --------
    >>> root_signature({"format": "streamrff.sketch-store", "levels": 3}, b"k" * 32)["algorithm"]
    'hmac-sha256'
    """
    covered = {name: value for name, value in attrs.items() if name not in (DIGEST_ATTRIBUTE, ROOT_SIGNATURE_ATTRIBUTE)}
    message = _ROOT_CONTEXT + _attributes_digest(covered).encode("ascii")
    return {"algorithm": SIGNATURE_ALGORITHM, "value": hmac.new(key, message, hashlib.sha256).hexdigest()}


@dataclasses.dataclass(frozen=True)
class StoreRoot:
    """A store's checked root: its map, bucket grid and record layout."""

    target: str
    feature_map: FeatureMap
    bucket_rows: int
    levels: int
    signed: bool
    created_at: str
    #: S of a time grid (bucket_rows is then 0); 0 for a grid of rows.
    bucket_seconds: int = 0
    #: The time grid's duration as given ("1h"); "" for a grid of rows.
    bucket_label: str = ""
    #: k: the store keeps second moments for blocks of 2**k buckets (its ``moments`` group); None: none.
    moment_level: int | None = None
    #: Whether this group's records carry the packed second moment (the ``moments`` group).
    moment_sums: bool = False
    #: d and D_c of the column part's sums every record holds (0, 0: none), and its explicit bandwidth (0: the map's).
    n_columns: int = 0
    column_features: int = 0
    column_bandwidth: float = 0.0

    @property
    def key_width(self) -> int:
        """A bucket's width in the units of a record's key (header 5-6): rows, or seconds of a time grid."""
        return self.bucket_seconds or self.bucket_rows

    @property
    def n_features(self) -> int:
        return int(self.feature_map.n_features_out_)

    @property
    def column_width(self) -> int:
        """Values of the column part's sums in a record (d x D_c; 0 without columns)."""
        return self.n_columns * self.column_features

    @property
    def width(self) -> int:
        moments = moment_width(self.n_features) if self.moment_sums else 0
        return HEADER + self.n_features + moments + self.column_width

    @property
    def capacity(self) -> int:
        """The most buckets the store holds (``2**levels``)."""
        return 1 << self.levels

    @property
    def n_slots(self) -> int:
        return 2 * self.capacity - 1

    def slot(self, level: int, index: int) -> int:
        """The row of ``records`` that holds block ``index`` of ``level``."""
        offset = 2 * self.capacity - (2 * self.capacity >> level)  # sum_{j < level} capacity >> j
        return offset + index

    def block_of(self, slot: int) -> tuple[int, int]:
        """(level, index) of a slot (the inverse of :meth:`slot`)."""
        level = 0
        while slot >= self.slot(level + 1, 0):
            level += 1
        return level, slot - self.slot(level, 0)


@dataclasses.dataclass(frozen=True)
class Record:
    """One record: the sums of the buckets of block ``index`` of ``level``, and what identifies them."""

    level: int
    index: int
    count: int
    n_invalid: int
    squared_norm_sum: float
    first_row: int
    stop_row: int
    written_at: float
    source_digest: str
    signed: bool
    #: The D feature sums; in a ``moment_sums`` group, followed by the packed second moment.
    feature_sum: np.ndarray
    sites: int = 1
    #: The column part's sums (d x D_c, flattened row by row) of a store made with columns; None otherwise.
    columns: np.ndarray | None = None

    @property
    def first_bucket(self) -> int:
        return self.index << self.level

    @property
    def stop_bucket(self) -> int:
        return (self.index + 1) << self.level


def moment_width(n_features: int) -> int:
    """Values of a packed second moment of ``n_features`` features (its upper triangle)."""
    return n_features * (n_features + 1) // 2


def pack_moment(moment: np.ndarray) -> np.ndarray:
    """The upper triangle of a symmetric (D, D) moment, row by row (float64)."""
    return np.asarray(moment, dtype=np.float64)[np.triu_indices(moment.shape[0])]


def unpack_moment(packed: np.ndarray, n_features: int) -> np.ndarray:
    """The symmetric (D, D) float64 moment of its packed upper triangle."""
    moment = np.zeros((n_features, n_features))
    rows, columns = np.triu_indices(n_features)
    moment[rows, columns] = packed
    moment[columns, rows] = packed
    return moment


def _words(digest: bytes) -> np.ndarray:
    return np.frombuffer(digest, dtype=">u4").astype(np.float64)


def _digest_of(words: np.ndarray) -> bytes:
    return np.asarray(words, dtype=np.float64).astype(">u4").tobytes()


def record_signature(row: np.ndarray, key: bytes, root: StoreRoot) -> bytes:
    """HMAC-SHA256 of a record row (little-endian bytes, signature words zeroed), bound to ``root``'s map and grid."""
    unsigned = np.array(row, dtype="<f8")
    unsigned[_SIGNATURE_COLUMNS] = 0.0
    binding = f"{root.feature_map.fingerprint} {root.bucket_rows} {root.levels}\n".encode("ascii")
    return hmac.new(key, _RECORD_CONTEXT + binding + unsigned.tobytes(), hashlib.sha256).digest()


def encode_record(record: Record, root: StoreRoot, signing_key: bytes | None = None) -> bytes:
    """The chunk bytes of a record: the little-endian row and its crc32c (zarr's ``bytes`` + ``crc32c`` codecs)."""
    import google_crc32c

    extra = 0 if record.columns is None else record.columns.shape[0]
    row = np.zeros(HEADER + record.feature_sum.shape[0] + extra, dtype="<f8")
    row[:8] = (
        record.level, record.index, record.count, record.n_invalid, record.squared_norm_sum, record.first_row,
        record.stop_row, record.written_at,
    )  # fmt: skip
    if row.shape[0] != root.width:  # e.g. a record of a store with columns merged into one without
        raise SketchFormatError(
            f"{record_place(root, root.slot(record.level, record.index))}: a record of {row.shape[0] - HEADER} values; "
            f"this store's records hold {root.width - HEADER}. Merge or copy between stores made alike."
        )
    row[_DIGEST_COLUMNS] = _words(bytes.fromhex(record.source_digest))
    row[_SIGNED_COLUMN] = 1.0 if signing_key is not None else 0.0
    row[_SITES_COLUMN] = record.sites
    row[HEADER : HEADER + record.feature_sum.shape[0]] = record.feature_sum
    if record.columns is not None:
        row[HEADER + record.feature_sum.shape[0] :] = record.columns
    if signing_key is not None:
        row[_SIGNATURE_COLUMNS] = _words(record_signature(row, signing_key, root))
    payload = row.tobytes()
    return payload + np.uint32(google_crc32c.value(payload)).astype("<u4").tobytes()


def decode_record(data: bytes, root: StoreRoot, slot: int, verify_key: bytes | None) -> Record:
    """The record in chunk ``data`` of ``slot``, checked: size, crc32c, header, slot, signature."""
    import google_crc32c

    level, index = root.block_of(slot)
    where = record_place(root, slot)
    expected = 8 * root.width + 4
    if len(data) != expected:
        raise SketchFormatError(f"{where} holds {len(data)} bytes; expected {expected} (truncated or tampered).")
    payload, crc = data[:-4], data[-4:]
    if np.uint32(google_crc32c.value(payload)).astype("<u4").tobytes() != crc:
        raise SketchFormatError(f"{where} does not match its crc32c checksum (corrupt or tampered).")
    row = np.frombuffer(payload, dtype="<f8").astype(np.float64)
    header = row[:8]
    integral = row[[0, 1, 2, 3, 5, 6, _SITES_COLUMN]]
    if not np.isfinite(row).all() or (integral != np.floor(integral)).any():
        raise SketchFormatError(f"{where} holds non-finite or non-integral header values (tampered).")
    _check_header_ranges(row, integral, where)
    record = Record(
        level=int(header[0]), index=int(header[1]), count=int(header[2]), n_invalid=int(header[3]),
        squared_norm_sum=float(header[4]), first_row=int(header[5]), stop_row=int(header[6]),
        written_at=float(header[7]), source_digest=_digest_of(row[_DIGEST_COLUMNS]).hex(),
        signed=bool(row[_SIGNED_COLUMN]), feature_sum=row[HEADER : row.shape[0] - root.column_width],
        sites=int(row[_SITES_COLUMN]), columns=row[row.shape[0] - root.column_width :] if root.column_width else None,
    )  # fmt: skip
    rows = root.key_width
    if (record.level, record.index) != (level, index):
        raise SketchFormatError(
            f"{where} says it holds level {record.level}, index {record.index}: the index disagrees with the "
            "records (a record copied or renamed into another slot). Remove it and append its rows again."
        )
    if (record.first_row, record.stop_row) != (record.first_bucket * rows, record.stop_bucket * rows):
        raise SketchFormatError(
            f"{where} says it holds rows {record.first_row}..{record.stop_row - 1}; the bucket grid of {rows} rows "
            f"gives {record.first_bucket * rows}..{record.stop_bucket * rows - 1} (tampered)."
        )
    block_rows = (record.stop_row - record.first_row) * record.sites if root.bucket_rows else 2**53
    if record.count < 0 or record.n_invalid < 0 or record.sites < 1 or record.count + record.n_invalid > block_rows:
        raise SketchFormatError(
            f"{where} counts {record.count} rows and {record.n_invalid} invalid ones in a block of "
            f"{record.stop_row - record.first_row} rows from {record.sites} site(s) (tampered)."
        )
    if verify_key is not None:
        stored = _digest_of(row[_SIGNATURE_COLUMNS])
        if not record.signed or not hmac.compare_digest(stored, record_signature(row, verify_key, root)):
            raise SketchSignatureError(
                f"{where} is {'not signed with the verify key' if record.signed else 'not signed'} (signed with "
                "another key, edited, copied from another store, or the store's map or grid replaced). Expected "
                "records appended with the store's signing key (store.append(..., signing_key=...); CLI "
                "--sign-key FILE), or pass --allow-unsigned (verify_key=None) to read it on purpose."
            )
    return record


def record_place(root: StoreRoot, slot: int) -> str:
    """``"<store>: the record of buckets a..b (level k)"``: how every message names a record."""
    level, index = root.block_of(slot)
    return f"{root.target}: the record of buckets {index << level}..{((index + 1) << level) - 1} (level {level})"


def _check_header_ranges(row: np.ndarray, integral: np.ndarray, where: str) -> None:
    """Refuse header words out of their type's range: counts and rows past 2**53, a ``signed`` flag other than
    0 or 1, reserved words that are not 0, digest and signature words that are not 32-bit unsigned integers."""
    words = row[8:24]
    problem = None
    if (np.abs(integral) > _EXACT).any() or not 0.0 <= row[4] <= float(_EXACT) ** 2 or row[7] < 0:
        problem = "header values out of range (counts and rows at most 2**53, sums and times >= 0)"
    elif row[_SIGNED_COLUMN] not in (0.0, 1.0):
        problem = f"a signed flag of {row[_SIGNED_COLUMN]!r} (0 or 1 expected)"
    elif row[_RESERVED_COLUMNS].any():
        problem = "non-zero reserved header words"
    elif (words != np.floor(words)).any() or (words < 0).any() or (words >= 2.0**32).any():
        problem = "digest or signature words that are not 32-bit unsigned integers"
    if problem is not None:
        raise SketchFormatError(f"{where} holds {problem} (tampered).")


def check_slots(root: StoreRoot, slots: np.ndarray) -> np.ndarray:
    """``slots`` (a listing of stored records), refusing a record outside the store's layout in one line."""
    if slots.size and int(slots[-1]) >= root.n_slots:
        raise SketchFormatError(
            f"{root.target}: a record is stored at slot {int(slots[-1]):,}, past the {root.n_slots:,} slots of a store "
            f"of {root.levels} levels: the listing disagrees with the records array (tampered). Remove "
            f"records/c/{int(slots[-1])} or restore the store from a copy."
        )
    return slots


class RecordFiles:
    """The chunk objects of a store's records: read by slot, published once, listed.

    Local directories are read with plain file reads and written under a temporary name that
    :func:`~streamrff._files.publish.publish` moves into place without replacing; other places
    through fsspec (one GET per record, ``cat`` of many at once; one PUT per record).
    """

    def __init__(self, target: str, storage_options: StorageOptions) -> None:
        self.target = target
        self.remote = _is_url(target)
        if self.remote:
            import fsspec

            self.filesystem, self.root = fsspec.core.url_to_fs(target, **(storage_options or {}))
            self.root = self.root.rstrip("/")
        else:
            self.filesystem, self.root = None, str(_local_path(target))

    def _path(self, slot: int) -> str:
        return f"{self.root}/records/c/{slot}/0"

    def read(self, slots: list[int], limit: int, place: Any = str) -> dict[int, bytes | None]:
        """The chunk bytes of each slot (None for a slot with no record), never more than ``limit`` + 1 bytes each.

        Local records are regular files reached without following a link inside the store
        (a FIFO or ``/dev/zero`` planted as a record is refused, not waited on or read);
        ``place(slot)`` names a refused record (:func:`record_place`).
        """
        if not self.remote:
            found: dict[int, bytes | None] = {}
            for slot in slots:
                try:
                    found[slot] = _read_inside(Path(self.root), f"records/c/{slot}/0", limit, None)
                except FileNotFoundError:
                    found[slot] = None
                except SketchFormatError as error:
                    raise SketchFormatError(f"{place(slot)}: {error}".replace("a sketch file", "a record")) from None
            return found
        paths = [self._path(slot) for slot in slots]
        try:
            contents = self._get_all(paths, limit)
        except Exception as error:
            raise SourceError(f"Cannot read records of {self.target}: {type(error).__name__}: {error}") from error
        return dict(zip(slots, contents))

    def _get_all(self, paths: list[str], limit: int) -> list[bytes | None]:
        """One GET per object, all at once on an asynchronous filesystem (``cat`` would add a HEAD per path)."""
        filesystem = self.filesystem
        if getattr(filesystem, "async_impl", False):
            import asyncio
            import inspect

            from fsspec.asyn import sync

            # s3fs asks for an object's size first (a HEAD) unless told to read it in one request
            parameters = inspect.signature(filesystem._cat_file).parameters
            single = {"max_concurrency": 1} if "max_concurrency" in parameters else {}
            if "end" in parameters:  # a ranged GET: an object larger than a record costs no more than one
                single.update(start=0, end=limit + 1)

            async def get_all() -> list[Any]:
                reads = (filesystem._cat_file(path, **single) for path in paths)
                return await asyncio.gather(*reads, return_exceptions=True)

            results = sync(filesystem.loop, get_all)
        else:
            results = []
            for path in paths:
                try:
                    results.append(filesystem.cat_file(path))
                except FileNotFoundError as error:
                    results.append(error)
        found: list[bytes | None] = []
        for result in results:
            if isinstance(result, FileNotFoundError):
                found.append(None)
            elif isinstance(result, BaseException):
                raise result
            else:
                found.append(result)
        return found

    def publish(self, slot: int, data: bytes) -> bool:
        """Write the record of ``slot`` once; False (nothing written) if a record is already there."""
        path = self._path(slot)
        if self.remote:
            try:
                if self.filesystem.exists(path):
                    return False
                self.filesystem.pipe_file(path, data)  # one PUT: the object appears whole or not at all
            except Exception as error:
                raise SourceError(f"Cannot write a record of {self.target}: {type(error).__name__}: {error}") from error
            return True
        os.makedirs(os.path.dirname(path), exist_ok=True)
        staging = staging_path(path)
        try:
            # No fsync (1-20 ms a record, most of an append's overhead): publishing under the final
            # name in one step is what makes a killed appender leave the record absent or whole; a
            # record torn by a power loss fails its size or crc32c check and is refused, naming it.
            with open(staging, "wb") as handle:
                handle.write(data)
            publish(staging, path)
        except FileExistsError:
            return False
        finally:
            remove_path(staging)
        return True

    def remove(self, slots: list[int]) -> None:
        """Delete the records of ``slots`` (those already gone are skipped): compaction's last step."""
        if self.remote:
            paths = [self._path(slot) for slot in slots]
            try:
                if paths:
                    self.filesystem.rm(paths)
            except FileNotFoundError:
                pass
            except Exception as error:
                raise SourceError(f"Cannot delete records of {self.target}: {type(error).__name__}: {error}") from error
            return
        for slot in slots:
            remove_path(self._path(slot))
            try:
                os.rmdir(os.path.dirname(self._path(slot)))
            except OSError:
                pass

    def slots(self, below: int | None = None) -> np.ndarray:
        """The sorted slots that hold a record (one listing; the stored objects are the index); with ``below``,
        only those below it (on disk, the others' files are then not looked at)."""
        base = f"{self.root}/records/c"
        if self.remote:
            try:
                names = [path.rsplit("/", 2) for path in self.filesystem.find(base)]
            except FileNotFoundError:
                return np.zeros(0, dtype=np.int64)
            except Exception as error:
                raise SourceError(
                    f"Cannot list the records of {self.target}: {type(error).__name__}: {error}"
                ) from error
            found = [int(parts[-2]) for parts in names if parts[-1] == "0" and parts[-2].isdigit()]
        else:
            try:
                entries = os.listdir(base)
            except FileNotFoundError:
                return np.zeros(0, dtype=np.int64)
            limit = below if below is not None else float("inf")
            found = [
                int(name) for name in entries
                if name.isdigit() and int(name) < limit and os.path.isfile(f"{base}/{name}/0")
            ]  # fmt: skip
        return np.array(sorted(found), dtype=np.int64)


def _record_array_metadata(n_slots: int, width: int) -> dict[str, Any]:
    """The ``records`` array's zarr.json (what :func:`create_store` writes and the reader expects)."""
    return {
        "zarr_format": 3, "node_type": "array", "shape": [n_slots, width], "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, width]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "attributes": {}, "dimension_names": ["slot", "value"], "storage_transformers": [],
    }  # fmt: skip


def create_store(
    target: str,
    feature_map: FeatureMap,
    bucket_rows: int,
    levels: int,
    signed: bool,
    storage_options: StorageOptions,
    bucket_seconds: int = 0,
    bucket_label: str = "",
    moment_level: int | None = None,
    moment_sums: bool = False,
    columns: dict[str, Any] | None = None,
    *,
    signing_key: bytes | None = None,
) -> None:
    """Write a new, empty store at ``target``; FileExistsError if something is there.

    Local: the group is written under a temporary name and published in one step. Object
    storage: the map and the records' metadata first, the group's ``zarr.json`` (which
    readers require) last. With ``signing_key`` the root carries ``root_signature``.
    """
    attrs: dict[str, Any] = {
        "format": STORE_FORMAT_NAME, "version": STORE_FORMAT_VERSION, "map": feature_map.spec,
        "fingerprint": feature_map.fingerprint, "n_features": int(feature_map.n_features_out_),
        "bucket": (
            {"seconds": int(bucket_seconds), "duration": bucket_label} if bucket_seconds else {"rows": int(bucket_rows)}
        ),
        "levels": int(levels), "signed": bool(signed),
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }  # fmt: skip
    if moment_level is not None:
        attrs["moments"] = {"level": int(moment_level)}
    if moment_sums:
        attrs["moment_sums"] = True
    if columns is not None:
        attrs["columns"] = dict(columns)
    if signing_key is not None:
        attrs[ROOT_SIGNATURE_ATTRIBUTE] = root_signature(attrs, signing_key)
    attrs[DIGEST_ATTRIBUTE] = _attributes_digest(attrs)
    group = {"zarr_format": 3, "node_type": "group", "attributes": attrs}
    n_features = int(feature_map.n_features_out_)
    column_width = 0 if columns is None else int(columns["n_columns"]) * int(columns["n_features"])
    records = _record_array_metadata(
        2 * (1 << levels) - 1, HEADER + n_features + (moment_width(n_features) if moment_sums else 0) + column_width
    )
    files = {
        "map.json": map_to_json(feature_map).encode("utf-8"),
        "records/zarr.json": json.dumps(records, indent=2).encode("ascii"),
        "zarr.json": json.dumps(group, indent=2, allow_nan=False).encode("ascii"),
    }
    if _is_url(target):
        import fsspec

        try:
            filesystem, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
            if filesystem.exists(f"{root}/zarr.json"):
                raise FileExistsError(
                    f"{target} already exists. Open it with SketchStore.open, or choose another place."
                )
            for name, data in files.items():  # zarr.json last: the store exists once it is written
                filesystem.pipe_file(f"{root.rstrip('/')}/{name}", data)
        except FileExistsError:
            raise
        except Exception as error:
            raise SourceError(f"Cannot create the store {target}: {type(error).__name__}: {error}") from error
        return
    path = _local_path(target)
    if path.exists():
        raise FileExistsError(f"{target} already exists. Open it with SketchStore.open, or choose another place.")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(path)
    try:
        for name, data in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(data)
        publish(staging, path)
    finally:
        remove_path(staging)


def _read_small(target: str, name: str, storage_options: StorageOptions, limit: int) -> bytes:
    """A small document of the store: a regular file under ``limit`` bytes, no link inside the store."""
    if _is_url(target):
        import fsspec

        try:
            filesystem, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
            path = f"{root.rstrip('/')}/{name}"
            size = filesystem.size(path)
            if size is not None and size > limit:
                raise SketchFormatError(
                    f"{target}: {name} holds {size:,} bytes; at most {limit:,} expected (tampered)."
                )
            return filesystem.cat_file(path)
        except FileNotFoundError as error:
            raise SketchFormatError(f"No sketch store at {target}: {name} is missing.") from error
        except SketchFormatError:
            raise
        except Exception as error:
            raise SourceError(f"Cannot read {name} of {target}: {type(error).__name__}: {error}") from error
    try:
        return _read_inside(Path(_local_path(target)), name, limit, None)
    except (FileNotFoundError, NotADirectoryError) as error:
        raise SketchFormatError(f"No sketch store at {target}: {name} is missing.") from error
    except OSError as error:
        raise SourceError(f"Cannot read {name} of {target}: {error.strerror}.") from None


def _json_document(target: str, name: str, storage_options: StorageOptions) -> Any:
    """A store's JSON document, parsed and depth-checked: one line for bad JSON or nesting, never a traceback."""
    data = _read_small(target, name, storage_options, MAX_JSON_BYTES)
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, bad UTF-8, huge integers, deep nesting
        raise SketchFormatError(
            f"{target}: {name} is not JSON ({type(error).__name__}: {str(error)[:120]}); not a sketch store."
        ) from None
    check_json_depth(document, f"{target}/{name}", "a sketch store")
    return document


def _is_count(value: Any, least: int = 0, most: int = _EXACT) -> bool:
    """An integer (not a bool) in ``[least, most]``."""
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= most


def read_store_root(target: str, storage_options: StorageOptions = None, verify_key: bytes | None = None) -> StoreRoot:
    """Read and check a store's group attributes, its records' metadata and its map.

    Refuses another format or version, attributes that fail their digest, a records array whose
    declared shape, chunks, dtype or codecs are not the ones the map and bucket grid give (before
    anything is read from it), a map whose fingerprint or spec is not the stored one, and, with
    ``verify_key``, a root whose signature does not verify or an unsigned root of an empty store.
    """
    group = _json_document(target, "zarr.json", storage_options)
    attrs = group.get("attributes") if isinstance(group, dict) else None
    if not isinstance(attrs, dict) or attrs.get("format") != STORE_FORMAT_NAME:
        found = attrs.get("format") if isinstance(attrs, dict) else None
        raise SketchFormatError(
            f"{target} is not a streamrff sketch store: expected attribute format={STORE_FORMAT_NAME!r}, got "
            f"{found!r}. Create one with SketchStore.create (CLI: streamrff store create)."
        )
    check_format_version(attrs.get("version"), STORE_FORMAT_VERSION, target, "sketch store", SketchFormatError)
    try:
        digest_ok = attrs.get(DIGEST_ATTRIBUTE) == _attributes_digest(attrs)
    except (TypeError, ValueError):
        digest_ok = False
    if not digest_ok:
        raise SketchFormatError(f"{target}: the store's attributes do not match their digest (tampered or corrupt).")
    bucket, levels, n_features = attrs.get("bucket"), attrs.get("levels"), attrs.get("n_features")
    rows = bucket.get("rows") if isinstance(bucket, dict) else None
    seconds, label = _time_grid(bucket)
    rows = 0 if seconds > 0 else rows if seconds == 0 else None
    if not (_is_count(levels, 0, MAX_LEVELS) and (seconds > 0 or _is_count(rows, 1, _EXACT >> levels))):
        raise SketchFormatError(
            f"{target}: malformed bucket grid {_short(bucket)} or levels {_short(levels)}; expected integers with "
            f"levels in 0..{MAX_LEVELS} and rows x 2**levels at most 2**53, or a time grid (tampered)."
        )
    if not _is_count(n_features, 1, MAX_FEATURES):
        raise SketchFormatError(f"{target}: n_features is {_short(n_features)}; expected 1..{MAX_FEATURES} (tampered).")
    for name, kind in (("signed", bool), ("created_at", str), ("fingerprint", str), ("map", dict)):
        if not isinstance(attrs.get(name), kind):
            raise SketchFormatError(
                f"{target}: the attribute {name!r} is {_short(attrs.get(name))}; expected a {kind.__name__} (tampered)."
            )
    moment_level, moment_sums = _moment_attributes(attrs, levels, target)
    n_columns, column_features, column_bandwidth = _column_attributes(attrs, target)
    values = n_features + (moment_width(n_features) if moment_sums else 0) + n_columns * column_features
    check_records_fit(StoreRoot(target, None, rows, levels, False, "", seconds, label), 1, values)  # type: ignore[arg-type]
    _check_store_sizes_fit(n_features, attrs["map"].get("n_features_in"), target)
    records = _json_document(target, "records/zarr.json", storage_options)
    expected = _record_array_metadata(2 * (1 << levels) - 1, HEADER + values)
    for key in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "codecs"):
        if not isinstance(records, dict) or records.get(key) != expected[key]:
            raise SketchFormatError(
                f"{target}: the records array declares {key}={records.get(key) if isinstance(records, dict) else None!r}; "  # noqa: E501
                f"this store's map and levels give {expected[key]!r} (tampered metadata)."
            )
    map_text = _read_small(target, "map.json", storage_options, _MAX_MAP_BYTES)
    _check_declared_width(map_text, n_features, target)
    feature_map = map_from_json(map_text, f"{target}/map.json")
    if n_columns and feature_map.n_features_in_ != n_columns:
        raise SketchFormatError(
            f"{target}: the column part declares {n_columns} columns; the map takes {feature_map.n_features_in_} "
            "(tampered)."
        )
    if feature_map.fingerprint != attrs.get("fingerprint") or feature_map.n_features_out_ != n_features:
        raise SketchFormatError(
            f"{target}: the map in map.json (fingerprint {feature_map.fingerprint[:12]}) is not the store's "
            f"({str(attrs.get('fingerprint'))[:12]}); the store was tampered with."
        )
    if _canonical(feature_map.spec) != _canonical(attrs["map"]):
        raise SketchFormatError(
            f"{target}/zarr.json: the map spec of the store's attributes is not the one of its map.json (fingerprint "
            f"{feature_map.fingerprint[:12]}); the store was tampered with. Restore it from a copy."
        )
    root = StoreRoot(
        target, feature_map, rows, levels, bool(attrs.get("signed")), str(attrs.get("created_at")), seconds, label,
        moment_level, moment_sums, n_columns, column_features, column_bandwidth,
    )  # fmt: skip
    if verify_key is not None:
        _verify_root(root, attrs, storage_options, verify_key)
    return root


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def _verify_root(root: StoreRoot, attrs: dict[str, Any], storage_options: StorageOptions, key: bytes) -> None:
    """With a key: the root's signature must verify; an unsigned root only passes if records (which bind it) exist."""
    where = f"{root.target}/zarr.json"
    stored = attrs.get(ROOT_SIGNATURE_ATTRIBUTE)
    if stored is None:
        if len(RecordFiles(root.target, storage_options).slots()):
            return  # its records are verified as read, and each names this root's map and grid
        raise SketchSignatureError(
            f"{where}: the store is empty and its root is not signed, so nothing vouches for its map and bucket grid "
            "under the verify key. Create the store with the key (streamrff store create --sign-key FILE), or pass "
            "--allow-unsigned (verify_key=None) to open it on purpose."
        )
    value = stored.get("value") if isinstance(stored, dict) else None
    expected = root_signature(attrs, key)
    if (
        not isinstance(value, str)
        or stored.get("algorithm") != SIGNATURE_ALGORITHM
        or not hmac.compare_digest(value.encode("utf-8"), expected["value"].encode("ascii"))
    ):
        raise SketchSignatureError(
            f"{where}: the store's root signature does not match the verify key (signed with another key, or its "
            "map or bucket grid replaced). Check that both sites use the same key file, or restore the store."
        )


def _column_attributes(attrs: dict[str, Any], target: str) -> tuple[int, int, float]:
    """(d, D_c, explicit bandwidth or 0) of a root's optional ``columns`` attribute, checked."""
    columns = attrs.get("columns")
    if columns is None:
        return 0, 0, 0.0
    fields = columns if isinstance(columns, dict) and set(columns) == {"n_columns", "n_features", "bandwidth"} else {}
    n_columns, width, bandwidth = fields.get("n_columns"), fields.get("n_features"), fields.get("bandwidth")
    explicit = bandwidth is None or (
        isinstance(bandwidth, float) and np.isfinite(bandwidth) and bandwidth > 0  # a JSON number with a point
    )
    if not (_is_count(n_columns, 1, 2**20) and _is_count(width, 2, 2**16) and width % 2 == 0 and explicit):
        raise SketchFormatError(
            f"{target}: malformed columns {_short(columns)}; expected n_columns >= 1, an even n_features and a "
            "bandwidth > 0 or null (tampered)."
        )
    if n_columns * width > MAX_FEATURES:
        raise SketchFormatError(f"{target}: the column part declares {n_columns * width:,} sums (tampered).")
    return n_columns, width, 0.0 if bandwidth is None else float(bandwidth)


def _moment_attributes(attrs: dict[str, Any], levels: int, target: str) -> tuple[int | None, bool]:
    """(k, moment_sums) of a root's optional ``moments`` and ``moment_sums`` attributes, checked."""
    moments, sums = attrs.get("moments"), attrs.get("moment_sums", False)
    level = moments.get("level") if isinstance(moments, dict) and len(moments) == 1 else None
    if (moments is not None and not _is_count(level, 0, levels)) or not isinstance(sums, bool):
        raise SketchFormatError(
            f"{target}: malformed moments {_short(moments)} or moment_sums {_short(sums)}; expected "
            f'{{"level": 0..{levels}}} and a bool (tampered).'
        )
    return level, sums

def _time_grid(bucket: Any) -> tuple[int, str]:
    """(S, duration) of a time grid's bucket attribute; (0, "") for a grid of rows."""
    if not isinstance(bucket, dict) or "seconds" not in bucket:
        return 0, ""
    seconds, label = bucket.get("seconds"), bucket.get("duration")
    if not (isinstance(seconds, int) and seconds > 0 and isinstance(label, str)):
        return -1, ""  # refused by the caller's check of the grid
    return seconds, label


def _check_store_sizes_fit(n_features: int, n_features_in: Any, target: str) -> None:
    """The declared width through the shared memory check (:func:`streamrff._base.memory.check_sizes_fit`),
    before the map is built: a store whose buckets no task of this machine could sketch is refused."""
    import types

    from .._base.memory import check_sizes_fit
    from ..errors import InputError

    columns = n_features_in if _is_count(n_features_in, 1, 2**31) else 1
    try:
        check_sizes_fit(types.SimpleNamespace(n_features=n_features), columns, memory_available())
    except InputError as error:
        raise SketchFormatError(f"{target}: the store declares {n_features:,} features: {error}") from None


def _check_declared_width(map_text: bytes, n_features: int, target: str) -> None:
    """Refuse, before the map is built, a map.json whose spec declares another output width than the root."""
    try:
        document = json.loads(map_text)
    except (ValueError, RecursionError):
        return  # map_from_json reports it in one line
    spec = document.get("spec") if isinstance(document, dict) else None
    if not isinstance(spec, dict):
        return
    declared = spec.get("n_components", spec.get("n_features"))
    if isinstance(declared, int) and not isinstance(declared, bool) and declared != n_features:
        raise SketchFormatError(
            f"{target}: map.json declares a map of {_short(declared)} features; the store's records hold "
            f"{n_features} (tampered). Restore the store from a copy."
        )


def check_records_fit(root: StoreRoot, n_records: int, n_features: int | None = None) -> None:
    """Refuse, before reading, ``n_records`` rows that this process cannot hold (the shared memory check).

    ``n_features``: the declared values after the header, before the map is built (default: the root's).
    """
    width = root.width if n_features is None else HEADER + n_features
    need = 2 * n_records * (8 * width + 4)
    if need > memory_available():
        raise SketchFormatError(
            f"{root.target}: reading {n_records:,} records of {width:,} values needs {need / 2**30:.2f} GiB, "
            "more than this process can allocate. Query a shorter range, or use a machine with more memory."
        )


def _short(value: Any) -> str:
    """``repr(value)`` cut to 60 characters: a tampered field may be megabytes long."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def now() -> float:
    """The time a record is written (Unix seconds)."""
    return time.time()
