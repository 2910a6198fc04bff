"""A parquet dataset that gains files, as ``streamrff watch DATASET --follow`` reads it: files in name order.

A *dataset* is a folder (local, or a prefix on object storage such as ``s3://bucket/events``) of
``*.parquet`` files, found at any depth under it, less those under a name that starts with ``_`` or
``.`` (a writer's staging, such as Spark's ``_temporary/``: pyarrow.dataset's rule). Its rows are those
of its files in **name order**: the files sorted by their path under the folder, as Python sorts
strings (code point by code point), so ``part-00010.parquet`` comes after ``part-00009.parquet`` but
``part-10.parquet`` before ``part-9.parquet``: a writer names its files with a zero-padded counter or
a UTC time stamp. A file that appears with a name before one already consumed cannot be consumed in
order: a follower refuses it (:func:`ready_chunks`).

Each row group of a file is a chunk, read with pyarrow and encoded by
:func:`streamrff.sources.frames.encode_frame` (numeric columns as they are, the others and those named
categorical as category codes, float64), with the column selection of the dataset's first complete file.

A file is *complete* once it has a parquet footer and its listing (size, and modification time or S3's
ETag) stayed the same for the follower's settle time; a file being written (no footer yet, or growing) is
not read, and the files after it wait for it. Its stored bytes are digested
(:func:`~streamrff.sources.chunkread.object_digest`: S3's ETag, or a CRC-32C of the bytes, never decoded)
before its first row group is read and after its last: a file that changed while read is settled again
if none of its rows was consumed, and refused otherwise.

The watch cursor of a dataset (:mod:`streamrff.drift.follow` keeps it with the monitor) records the file
in hand, the rows of it consumed and the digest of its stored bytes::

    {"version": 2, "kind": "parquet", "source": "parquet /data/events", "identity": "parquet:...",
     "n_columns": 3, "dtype": "float64", "next_row": 2000, "file": "part-003.parquet", "file_row": 500,
     "file_rows": 500, "file_object": [20511, "crc32c:5a1c03e2"], "drift_at_row": null}

``next_row`` counts the rows consumed over all files (the row numbers ``watch`` prints). A restart, or
the next poll, continues after ``file_row`` rows of ``file``, once its digest is checked: a consumed file
rewritten since (even with its size and modification time kept) is a change of the source, named in one
line; a file removed once wholly consumed is not (a retention job), the files after it are read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import SourceChangedError, SourceError
from .chunkread import object_digest

__all__ = [
    "KIND",
    "ParquetFolder",
    "open_folder",
    "new_cursor",
    "advance",
    "source_change",
    "ready_chunks",
    "check_map_columns",
]

#: The ``kind`` of a dataset's cursor (a zarr cursor has none).
KIND = "parquet"
_FOOTERS: dict[tuple[str, Any], Any] = {}  # (path, listing stamp) -> footer facts, for every poll of a session
_FOOTER_CACHE_SIZE = 1 << 16


@dataclasses.dataclass(frozen=True)
class _File:
    name: str  # the path under the folder, with "/"
    path: str  # what the filesystem opens
    stamp: tuple[Any, ...]  # size and modification time (or ETag): what a listing says, no read


@dataclasses.dataclass(frozen=True, eq=False)
class ParquetFolder:
    """One look at a parquet dataset: its files in name order, with what the listing says of each.

    Made by :func:`open_folder`. Footers are read when first needed (and kept for the process, by
    file and listing); nothing else is read until a row group is.

    Attributes
    ----------
    url : str
        The dataset as given.
    description : str
        ``"parquet <url>"``, for messages.
    files : tuple
        The ``*.parquet`` files, in name order.
    """

    url: str
    description: str
    files: tuple[_File, ...]
    filesystem: Any = dataclasses.field(repr=False)
    root: str = ""
    columns: tuple[str, ...] | None = None
    categorical: tuple[str, ...] | None = None

    kind = KIND
    zarr_array = None  # not a zarr array: the zarr-only paths of watch see it

    def footer(self, file: _File) -> Any:
        """The file's footer facts ``(rows per row group, pandas dtypes)``, or None if it has no footer yet."""
        key = (file.path, file.stamp)
        if key not in _FOOTERS:
            import pyarrow.parquet as pq

            try:
                with self.filesystem.open(file.path, "rb") as handle:
                    metadata = pq.ParquetFile(handle).metadata
            except FileNotFoundError:
                return None
            except Exception:  # no footer yet (being written), or not parquet: not complete
                return None
            groups = tuple(metadata.row_group(index).num_rows for index in range(metadata.num_row_groups))
            dtypes = dict(metadata.schema.to_arrow_schema().empty_table().to_pandas().dtypes.items())
            if len(_FOOTERS) >= _FOOTER_CACHE_SIZE:
                _FOOTERS.clear()
            _FOOTERS[key] = (groups, dtypes)
        return _FOOTERS[key]

    @cached_property
    def complete(self) -> tuple[_File, ...]:
        """The files in name order up to the first without a footer (being written): the rows known now."""
        out = []
        for file in self.files:
            if self.footer(file) is None:
                break
            out.append(file)
        return tuple(out)

    @cached_property
    def kinds(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The selected columns and the indices of the categorical ones, from the first complete file."""
        if not self.complete:
            raise SourceError(f"{self.description} has no complete parquet file yet.")
        return self.kinds_of(self.complete[0])

    def kinds_of(self, file: _File) -> tuple[tuple[str, ...], tuple[int, ...]]:
        from .frames import _column_kinds

        return _column_kinds(self.footer(file)[1], self.columns, self.categorical, f"{self.description} ({file.name})")

    @property
    def shape(self) -> tuple[int, int]:
        """Rows of the complete files, and the selected columns."""
        rows = sum(sum(self.footer(file)[0]) for file in self.complete)
        return (rows, len(self.kinds[0]) if self.complete else 0)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64)

    @cached_property
    def identity(self) -> str:
        """The dataset's location and column selection (names, and which are categories): files may come and go."""
        columns, categorical = self.kinds
        from .rows import _absolute_location

        location = _absolute_location(self.url).rstrip("/")
        text = json.dumps({"location": location, "columns": columns, "categorical": categorical})
        return f"{KIND}:" + hashlib.sha256(text.encode()).hexdigest()

    def stored(self, name: str) -> list[Any] | None:
        """``[size, digest]`` of the file's stored bytes (:func:`object_digest`), None if it does not exist."""
        path = f"{self.root}/{name}" if self.root else name
        try:
            self.filesystem.invalidate_cache(path)
            return object_digest(self.filesystem, path)
        except Exception as error:  # fsspec/botocore raise many types
            raise SourceError(f"Cannot read {name} of {self.description}: {type(error).__name__}: {error}") from error

    def stamp(self, file: _File) -> tuple[Any, ...] | None:
        """What a listing says of ``file`` now (None if it is gone)."""
        try:
            self.filesystem.invalidate_cache(file.path)
            return _stamp(self.filesystem.info(file.path))
        except FileNotFoundError:
            return None

    def read_row_group(self, file: _File, index: int) -> np.ndarray:
        """Row group ``index`` of ``file``: the selected columns as float64 rows (category codes where categorical)."""
        import pyarrow.parquet as pq

        from .frames import encode_frame

        columns, categorical = self.kinds
        try:
            with self.filesystem.open(file.path, "rb") as handle:
                table = pq.ParquetFile(handle).read_row_group(index, columns=list(columns))
        except Exception as error:  # removed or rewritten under us, or damaged
            raise SourceError(
                f"Cannot read row group {index} of {file.name} in {self.description}: {type(error).__name__}: {error}"
            ) from None
        return encode_frame(table.to_pandas(), columns, categorical)


def _stamp(info: dict[str, Any]) -> tuple[Any, ...]:
    return (info.get("size"), info.get("ETag") or info.get("mtime") or info.get("LastModified"))


def _hidden(name: str) -> bool:
    """Whether a path under the dataset is left out: a part starting with "_" or "." (pyarrow.dataset's rule), as
    a writer's staging (Spark's ``_temporary/``, ``.part.parquet.crc``)."""
    return any(part.startswith(("_", ".")) for part in name.split("/"))


def open_folder(
    url: str,
    storage_options: dict[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
) -> ParquetFolder:
    """One look at the parquet dataset at ``url``: its ``*.parquet`` files, listed (not read), in name order.

    Parameters
    ----------
    url : str
        A folder, or an object-storage prefix (``s3://bucket/events``); it may not exist yet (no files).
    storage_options : dict, optional
        fsspec options of a URL.
    columns, categorical : sequence of str, optional
        As for :func:`streamrff.sources.frames.table_rows`.

    Returns
    -------
    ParquetFolder

    Raises
    ------
    SourceError
        If the store cannot be listed.

    Examples
    --------
    >>> import os, tempfile, pandas as pd
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("b.parquet", "a.parquet"):
    ...     pd.DataFrame({"x": [1.0, 2.0], "colour": ["red", "blue"]}).to_parquet(os.path.join(folder, name))
    >>> dataset = open_folder(folder)
    >>> [file.name for file in dataset.files], dataset.shape, dataset.kinds
    (['a.parquet', 'b.parquet'], (4, 2), (('x', 'colour'), (1,)))
    """
    import fsspec

    try:
        filesystem, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        root = root.rstrip("/")
        filesystem.invalidate_cache(root)
        if filesystem.isfile(root):
            found = {root: filesystem.info(root)}
            root = root.rsplit("/", 1)[0] if "/" in root else ""
        elif filesystem.isdir(root):
            found = filesystem.find(root, detail=True)
        else:
            found = {}
    except Exception as error:  # fsspec/botocore raise many types
        raise SourceError(f"Cannot list the parquet dataset {url}: {type(error).__name__}: {error}") from None
    prefix = root + "/" if root else ""
    files = sorted(
        (_File(path[len(prefix) :], path, _stamp(info)) for path, info in found.items()
         if path.endswith(".parquet") and path.startswith(prefix) and info.get("type", "file") == "file"
         and not _hidden(path[len(prefix) :])),
        key=lambda file: file.name,
    )  # fmt: skip
    return ParquetFolder(
        url, f"parquet {url}", tuple(files), filesystem, root,
        None if columns is None else tuple(columns), None if categorical is None else tuple(categorical),
    )  # fmt: skip


# The cursor: new, moved, checked.


def new_cursor(folder: ParquetFolder, next_row: int) -> dict[str, Any]:
    """A cursor at row ``next_row`` of the dataset (counted over its complete files in name order).

    Examples
    --------
    >>> import os, tempfile, pandas as pd
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("a.parquet", "b.parquet"):
    ...     pd.DataFrame({"x": [1.0, 2.0, 3.0]}).to_parquet(os.path.join(folder, name))
    >>> cursor = new_cursor(open_folder(folder), 4)
    >>> cursor["next_row"], cursor["file"], cursor["file_row"], cursor["file_rows"]
    (4, 'b.parquet', 1, 3)
    """
    cursor = {
        "version": 2, "kind": KIND, "source": folder.description, "identity": folder.identity,
        "n_columns": folder.shape[1], "dtype": str(folder.dtype), "next_row": 0, "file": None, "file_row": 0,
        "file_rows": 0, "file_object": None, "drift_at_row": None,
    }  # fmt: skip
    start = 0
    for file in folder.complete:
        rows = sum(folder.footer(file)[0])
        if start + rows >= next_row and (rows or next_row == start):
            if next_row == 0:
                return cursor
            return cursor | {"next_row": int(next_row), "file": file.name, "file_row": int(next_row - start),
                             "file_rows": rows, "file_object": folder.stored(file.name)}  # fmt: skip
        start += rows
    if next_row > start:
        raise SourceError(
            f"Row {next_row:,} is past the end of {folder.description} ({start:,} rows in its complete files). Give "
            "a smaller --from-row."
        )
    return cursor


def advance(cursor: dict[str, Any], stop: int) -> dict[str, Any]:
    """The cursor after its file's rows up to dataset row ``stop`` were consumed (the file is already the cursor's)."""
    return {**cursor, "next_row": int(stop), "file_row": int(cursor["file_row"]) + int(stop) - int(cursor["next_row"])}


def _malformed(cursor: dict[str, Any]) -> str | None:
    name, row, rows = cursor.get("file"), cursor.get("file_row"), cursor.get("file_rows")
    counts = all(isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in (row, rows))
    named = name is None or (isinstance(name, str) and name and ".." not in name.split("/") and name[0] != "/")
    stored = cursor.get("file_object")
    if not (counts and named and row <= rows and (stored is None or isinstance(stored, list))):
        return "its cursor's file fields are malformed (tampered or damaged)"
    return None


def source_change(cursor: dict[str, Any], folder: ParquetFolder) -> str | None:
    """What makes ``folder`` no longer the dataset of ``cursor``, in words; None if it is the same, grown or not.

    Another location or column selection, a malformed cursor, or the cursor's file rewritten (its stored
    bytes' digest changed) after rows of it were consumed, or removed before all were.
    """
    if cursor.get("kind") != KIND:
        return (
            f"it is another kind of source: the state follows the zarr array {cursor.get('source')}, not the "
            f"parquet dataset {folder.url}"
        )
    malformed = _malformed(cursor)
    if malformed is not None:
        return malformed
    if folder.complete and cursor.get("identity") != folder.identity:
        if cursor.get("source") != folder.description:
            return f"it is another dataset: the state follows {cursor.get('source')}, not {folder.description}"
        return (
            f"its columns changed (identity {cursor.get('identity')} when the state was saved, now "
            f"{folder.identity}): select the columns the state was built on (--select, --categorical)"
        )
    name, consumed = cursor.get("file"), int(cursor.get("file_row") or 0)
    if name is None or consumed == 0:
        return None
    now = folder.stored(name)
    if now is None and consumed == int(cursor["file_rows"]):
        return None  # removed once wholly consumed (retention): the files after it are read
    if now != cursor.get("file_object"):
        first = int(cursor["next_row"]) - consumed
        return (
            f"its file {name}, already consumed from row {first:,} ({consumed:,} of its rows), was "
            f"{'removed' if now is None else 'rewritten'} since"
        )
    return None


def ready_chunks(
    folder: ParquetFolder, cursor: dict[str, Any], follow: bool, settle: float, settling: dict[str, Any]
) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
    """The chunks (row groups) after ``cursor`` that may be consumed now, in order, each with its cursor fields.

    Yields ``(fields, rows)``: ``fields`` set on the cursor before ``rows`` are consumed (``file``, the row of
    the file the rows start at, its rows, the digest of its stored bytes). Stops at the first file not ready:
    with ``follow``, one whose listing changed within ``settle`` seconds (``settling`` keeps, per name, the
    listing and when it was first seen, across polls) or with no footer yet. Without ``follow`` a file with no
    footer ends the dataset.

    Raises
    ------
    SourceChangedError
        A file that appeared with a name before the cursor's (it cannot be consumed in order), or a file
        rewritten while its rows were read; the message holds ``{saved}`` for where the state is.
    """
    name, consumed = cursor.get("file"), int(cursor.get("file_row") or 0)
    seen = settling.setdefault("", set())  # names listed at an earlier poll of this session
    late = [file.name for file in folder.files if name is not None and file.name < name and file.name not in seen]
    if late and seen:
        raise SourceChangedError(
            f"{late[0]} appeared in {folder.description} after {name} was consumed: files are consumed in name order, "
            f"so it cannot be; {{saved}}. Name new files so that they sort after the others (a zero-padded counter, "
            "a UTC time stamp), or move it and name it so."
        )
    seen.update(file.name for file in folder.files)
    now = time.monotonic()
    for file in folder.files:
        if name is not None and (file.name < name or (file.name == name and consumed >= int(cursor["file_rows"]))):
            continue
        start = consumed if file.name == name else 0
        if follow:
            first = settling.get(file.name)
            if first is None or first[0] != file.stamp:
                settling[file.name] = first = (file.stamp, now)
            if now - first[1] < settle:
                return
        footer = folder.footer(file)
        if footer is None:
            return  # being written (or damaged): the files after it wait
        if start == 0 and folder.kinds_of(file) != folder.kinds:
            raise SourceChangedError(
                f"{file.name} of {folder.description} has other column kinds than its first file "
                f"({folder.kinds_of(file)[1]} categorical, not {folder.kinds[1]}); {{saved}}. Write the dataset's "
                "files with one schema."
            )
        stored = folder.stored(file.name)
        if file.name == name and stored != cursor.get("file_object"):
            raise SourceChangedError(f"{file.name} of {folder.description} was rewritten while read; {{saved}}.")
        groups, offset = footer[0], 0
        for index, size in enumerate(groups):
            if offset + size <= start:
                offset += size
                continue
            rows = folder.read_row_group(file, index)[max(start - offset, 0) :]
            last = index == len(groups) - 1
            changed = folder.stamp(file) != file.stamp or (last and folder.stored(file.name) != stored)
            if changed:
                if start == 0 and offset == 0:
                    settling.pop(file.name, None)  # nothing of it consumed: settle it again
                    return
                raise SourceChangedError(
                    f"{file.name} of {folder.description} changed while its rows were read (from row "
                    f"{offset:,} of it); {{saved}}. A writer must not rewrite a file once written; write a new one."
                )
            fields = {"file": file.name, "file_row": max(start, offset), "file_rows": sum(groups),
                      "file_object": stored}  # fmt: skip
            yield fields, rows
            offset += size
        settling.pop(file.name, None)


def check_map_columns(folder: ParquetFolder, feature_map: Any) -> None:
    """Refuse a dataset whose categorical columns are not those of the monitor's map (one line, the fix).

    Raises
    ------
    InputError
        If the column indices read as categories differ from the map's ``categorical``.
    """
    from ..errors import InputError

    wanted = tuple(sorted(int(column) for column in (getattr(feature_map, "categorical", None) or ())))
    columns, have = folder.kinds
    if tuple(have) != wanted:
        raise InputError(
            f"SOURCE {folder.url} reads columns {list(have)} of {list(columns)} as categories, but the monitor's map "
            f"compares columns {list(wanted)} as categories. Give the --select and --categorical the reference was "
            "read with."
        )
