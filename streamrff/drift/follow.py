"""Where a drift monitor is in its source: the cursor saved with the monitor, and the checks it makes possible.

A follower of a zarr array (``streamrff watch``) records, with the monitor's
state and in the same atomic save, a *cursor*: the source's identity
(:attr:`streamrff.sources.rows.RowSource.identity`: its location and its metadata less the
row count, so it survives growth), its width, dtype and rows per stored chunk,
the next source row to read, and the content of the objects of the last complete
chunk consumed (``[size, digest]`` each, :func:`~streamrff.sources.chunkread.object_digest`:
S3's ETag, or a CRC-32C of the stored bytes; null for an object never written).
A restart continues at the cursor's row, so a state is exactly once: the rows
after the last save are read again, none is skipped or counted twice.

The same record tells, at a restart and at every poll, whether the source is
still the one the state was built on (:func:`source_change`): another array or
another layout, fewer rows than were consumed, or a consumed chunk rewritten
(an array replaced by another at the same path, or its bytes rewritten with their size
and modification time kept) is a change, named in one line. A version 1 cursor, whose
last chunk was recorded by size and modification time, cannot be checked that way: it
is refused as a change (:func:`source_change`).
Only stored chunks are consumed (:func:`missing_objects`): zarr reads a chunk
that was never written as its fill value.

A parquet dataset that gains files has a cursor of its own (``"kind": "parquet"``: the file in hand,
the rows of it consumed, the digest of its stored bytes), made, moved and checked by
:mod:`streamrff.sources.parquetfolder`; the functions here hand such a source or cursor to it.

The cursor of a zarr array is a JSON mapping (``"version": 2``)::

    {"version": 2, "source": "/data/live.zarr", "identity": "zarr:...",
     "n_columns": 3, "dtype": "float32", "chunk_rows": 250, "next_row": 2000,
     "last_chunk": {"rows": [1750, 2000], "objects": {"c/7/0": [4018, "crc32c:5a1c03e2"]}},
     "drift_at_row": null}
"""

from __future__ import annotations

from typing import Any

from ..errors import SourceChangedError
from ..sources import parquetfolder
from ..sources.rows import RowSource

__all__ = ["CURSOR_VERSION", "chunk_rows", "new_cursor", "advance", "moved_to", "source_change", "missing_objects"]

CURSOR_VERSION = 2


def chunk_rows(source: RowSource) -> int:
    """Rows per stored object of a zarr source: its shards' rows if sharded, else its chunks'."""
    array = source.zarr_array
    return int((getattr(array, "shards", None) or array.chunks)[0])


def new_cursor(source: RowSource, next_row: int) -> dict[str, Any]:
    """A cursor at ``next_row`` of ``source``, with no chunk consumed yet.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr
    >>> from streamrff import open_source
    >>> path = os.path.join(tempfile.mkdtemp(), "live.zarr")
    >>> zarr.create_array(path, data=np.zeros((6, 2), "float32"), chunks=(4, 2))[:] = 1.0
    >>> cursor = new_cursor(open_source(path), 0)
    >>> cursor["next_row"], cursor["chunk_rows"], cursor["n_columns"], cursor["last_chunk"]
    (0, 4, 2, None)
    """
    if _is_dataset(source):
        return parquetfolder.new_cursor(source, next_row)
    return {
        "version": CURSOR_VERSION,
        "source": source.description,
        "identity": source.identity,
        "n_columns": source.shape[1],
        "dtype": str(source.dtype),
        "chunk_rows": chunk_rows(source),
        "next_row": int(next_row),
        "last_chunk": None,
        "drift_at_row": None,
    }


def advance(cursor: dict[str, Any], stop: int, objects: dict[str, Any] | None) -> dict[str, Any]:
    """The cursor after rows up to ``stop`` were consumed; ``objects``: those of the chunk ending at ``stop``.

    The record of the last consumed chunk moves only when ``stop`` ends a stored
    chunk (a chunk read in part is rewritten when rows are appended to it); the
    cursor is then of this version (:data:`CURSOR_VERSION`), whatever it was. A parquet dataset's cursor
    moves in its file (:func:`streamrff.sources.parquetfolder.advance`).
    """
    if cursor.get("kind") == parquetfolder.KIND:
        return parquetfolder.advance(cursor, stop)
    moved = {**cursor, "next_row": int(stop)}
    if objects is not None and stop % int(cursor["chunk_rows"]) == 0:
        moved["last_chunk"] = {"rows": [int(stop) - int(cursor["chunk_rows"]), int(stop)], "objects": objects}
        moved["version"] = CURSOR_VERSION  # its record is this version's (a version 1 cursor without one moves on)
    return moved


def moved_to(cursor: dict[str, Any], source: Any, next_row: int) -> dict[str, Any]:
    """``cursor`` moved to row ``next_row`` (``--from-row``): a parquet dataset's cursor finds that row's file."""
    if _is_dataset(source):
        return {**new_cursor(source, next_row), "drift_at_row": cursor.get("drift_at_row")}
    return {**cursor, "next_row": next_row}


def _is_dataset(source: Any) -> bool:
    return getattr(source, "kind", None) == parquetfolder.KIND


def _layout_change(cursor: dict[str, Any], source: RowSource) -> str | None:
    if cursor.get("identity") == source.identity:
        return None
    if cursor.get("source") != source.description:
        return (
            f"it is another array: the state follows {cursor.get('source')} (identity {cursor.get('identity')}), "
            f"not {source.description} (identity {source.identity})"
        )
    changes = []
    if cursor.get("n_columns") != source.shape[1]:
        changes.append(f"its width went from {cursor.get('n_columns')} to {source.shape[1]} columns")
    if cursor.get("dtype") != str(source.dtype):
        changes.append(f"its dtype went from {cursor.get('dtype')} to {source.dtype}")
    if cursor.get("chunk_rows") != chunk_rows(source):
        changes.append(f"its rows per chunk went from {cursor.get('chunk_rows')} to {chunk_rows(source)}")
    if not changes:
        changes.append("its metadata (codecs, fill value or attributes) changed")
    return (
        f"{'; '.join(changes)} (identity {cursor.get('identity')} when the state was saved, now {source.identity})"
    )


def source_change(cursor: dict[str, Any], source: RowSource) -> str | None:
    """What makes ``source`` no longer the source of ``cursor``, in words; None if it is the same, grown or not.

    Checks, in order: its identity (location and layout: width, dtype, chunks,
    codecs), its row count against the rows consumed, and the stored objects of
    the last complete chunk consumed, by the digest of their bytes (rewritten:
    the array was replaced, or its rows changed, even with the size and
    modification time kept). A cursor of another version whose last chunk is
    recorded is a change too: its record (size and modification time, in
    version 1) cannot tell a rewrite.

    Raises
    ------
    SourceError
        If the store cannot be asked.
    """
    if _is_dataset(source):
        return parquetfolder.source_change(cursor, source)
    if cursor.get("kind") == parquetfolder.KIND:
        return f"it is another kind of source: the state follows the parquet dataset {cursor.get('source')}"
    layout = _layout_change(cursor, source)
    if layout is not None:
        return layout
    next_row = int(cursor["next_row"])
    if source.shape[0] < next_row:
        return f"it shrank to {source.shape[0]:,} rows, fewer than the {next_row:,} consumed"
    last = cursor.get("last_chunk")
    if last and cursor.get("version") != CURSOR_VERSION:
        start, stop = last["rows"]
        return (
            f"its cursor (version {cursor.get('version')!r}) records its last consumed chunk, rows {start:,}-"
            f"{stop - 1:,}, by size and modification time, which a rewrite can keep, so it cannot be checked; this "
            f"version records a digest of the stored bytes (cursor version {CURSOR_VERSION})"
        )
    if last:
        start, stop = last["rows"]
        now = source.stored_objects(start, stop)
        if now != last["objects"]:
            return (
                f"the stored chunk of its rows {start:,}-{stop - 1:,}, already consumed, was rewritten or removed "
                "since (the array was replaced or its rows changed)"
            )
    return None


def refuse_change(what: str, cursor: dict[str, Any], source: RowSource, saved: str) -> SourceChangedError:
    """The one-line error for a changed source: what changed, the last row consumed, where the state is."""
    next_row = int(cursor["next_row"])
    last = f"row {next_row - 1:,} (next row {next_row:,})" if next_row else f"none (next row {next_row:,})"
    return SourceChangedError(
        f"{source.description} is not the source of the monitor state: {what}. Last row consumed: {last}; "
        f"{saved}. Watch the source it follows, or pass --restart (and --from-row R) to start anew on this one."
    )


def missing_objects(source: RowSource, start: int, stop: int) -> tuple[dict[str, Any], list[str]]:
    """The stored objects of rows ``start..stop-1`` (see :meth:`RowSource.stored_objects`) and the keys absent."""
    objects = source.stored_objects(start, stop)
    return objects, sorted(key for key, value in objects.items() if value is None)
