"""Data sources: numpy, dask, xarray and zarr (local or any fsspec URL), opened once into a :class:`RowSource`.

:func:`open_source` is the one place that turns what a user passes into a
2-D dask array whose chunks span all columns (one task reads one block of whole
rows). The :class:`RowSource` it returns carries what is known about the data
from then on: a secret-free description, the chunk plan, and the source's
identity (for zarr: the store URL, the array metadata and, per row chunk, a
digest of the stored bytes of its objects, or their ETag; for in-memory data: a
content hash of each chunk, taken as the chunk is read). Public functions accept
a :class:`RowSource` wherever they accept a source, and pass it down, so a store
is opened once per job. Storage options travel inside the task graph to the
workers and are never written to messages or logs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import dask.array as da
import numpy as np

from ..errors import InputError, SourceError
from ..typing import StorageOptions
from .chunkread import ChunkRows, missing_chunk_message, object_digest, stored_chunk_keys
from .frames import is_table, table_rows

__all__ = [
    "RowSource",
    "open_source",
    "open_sources",
    "as_row_chunked",
    "chunk_digest",
    "describe_source",
    "open_zarr_array",
    "MAX_CHUNKS",
    "MAX_COLUMN_CHUNKS",
    "check_chunk_count",
    "check_column_chunk_count",
]

#: Most row chunks a source is planned in. The client keeps every chunk's place (its row count in
#: dask's chunk tuple, about a hundred bytes each), so the plan is bounded here, before dask builds
#: it, whatever size a store declares; the engine then groups chunks into at most ``max_tasks`` tasks.
MAX_CHUNKS = 2**22


def check_chunk_count(n_rows: int, chunk_rows: int, description: str, what: str = "chunks of") -> int:
    """The number of row chunks of ``n_rows`` rows in chunks of ``chunk_rows``, by arithmetic alone;
    raises SourceError (one line, the numbers and the fix) above :data:`MAX_CHUNKS`.

    Examples
    --------
    >>> check_chunk_count(10_000, 1_000, "data.zarr")
    10
    >>> check_chunk_count(10**15, 1_000, "data.zarr")
    Traceback (most recent call last):
    ...
    streamrff.errors.SourceError: data.zarr declares 1,000,000,000,000,000 rows in 1,000,000,000,000 chunks of
    1,000 rows; a job plans at most 4,194,304 chunks per source (the client keeps each chunk's place). Rewrite
    the array with chunks of at least 238,418,580 rows, or check its metadata if it is not meant to hold that
    many rows.
    """
    n_chunks = -(-int(n_rows) // max(int(chunk_rows), 1))
    if n_chunks <= MAX_CHUNKS:
        return n_chunks
    needed = -(-int(n_rows) // MAX_CHUNKS)
    raise SourceError(
        f"{description} declares {int(n_rows):,} rows in {n_chunks:,} {what} {int(chunk_rows):,} rows; a job plans at "
        f"most {MAX_CHUNKS:,} chunks per source (the client keeps each chunk's place). Rewrite the array with chunks "
        f"of at least {needed:,} rows, or check its metadata if it is not meant to hold that many rows."
    )


#: Most column chunks a source may be stored in: every row of a task is read whole, so its column
#: chunks are joined (rechunked) as the job is planned, at a cost per column chunk per row chunk.
MAX_COLUMN_CHUNKS = 2**12


def check_column_chunk_count(n_columns: int, chunk_columns: int, n_row_chunks: int, description: str) -> int:
    """The number of column chunks, by arithmetic alone; raises SourceError (one line) above
    :data:`MAX_COLUMN_CHUNKS`, or when column chunks times row chunks pass :data:`MAX_CHUNKS`.

    Examples
    --------
    >>> check_column_chunk_count(1_000, 100, 10, "data.zarr")
    10
    >>> check_column_chunk_count(2**40, 2**20, 1, "data.zarr")
    Traceback (most recent call last):
    ...
    streamrff.errors.SourceError: data.zarr declares 1,099,511,627,776 columns in 1,048,576 chunks of 1,048,576
    columns; a job plans at most 4,096 column chunks and 4,194,304 chunks in all. Rewrite the array with whole
    rows per chunk, or check its metadata if it is not meant to hold that many columns.
    """
    n_chunks = -(-int(n_columns) // max(int(chunk_columns), 1))
    if n_chunks <= MAX_COLUMN_CHUNKS and n_chunks * max(int(n_row_chunks), 1) <= MAX_CHUNKS:
        return n_chunks
    raise SourceError(
        f"{description} declares {int(n_columns):,} columns in {n_chunks:,} chunks of {int(chunk_columns):,} columns; "
        f"a job plans at most {MAX_COLUMN_CHUNKS:,} column chunks and {MAX_CHUNKS:,} chunks in all. Rewrite the "
        "array with whole rows per chunk, or check its metadata if it is not meant to hold that many columns."
    )


def describe_source(source: Any) -> str:
    """A short, secret-free description of a source for messages."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    shape = getattr(source, "shape", None)
    return f"{type(source).__name__} of shape {shape}" if shape is not None else type(source).__name__


#: What a path/URL source may be, for messages about sources that are something else.
_READABLE = (
    "streamrff reads zarr arrays (v2 or v3): a directory, a zarr group path + '/array', or such a URL "
    "(s3://, gs://, file://); in Python also numpy, dask and xarray arrays. Convert other formats first, e.g. "
    "a CSV: zarr.save_array('data.zarr', numpy.loadtxt('data.csv', delimiter=',', dtype='float32'))."
)


#: Names of the metadata objects of a zarr array (v3, v2), which are not chunks.
_METADATA_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def credentials_hint(error: BaseException) -> str:
    """What to do about a storage error that is a lack of credentials ("" for any other error)."""
    if type(error).__name__ not in ("NoCredentialsError", "PartialCredentialsError"):
        return ""
    return (
        ". This process found no S3 credentials (environment, profile or config file), so neither it nor "
        "the cluster's workers can read: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a profile, "
        'or pass them with --storage-options \'{"key": ..., "secret": ...}\' (storage_options= in Python); '
        'for a public bucket, \'{"anon": true}\''
    )


def open_zarr_array(url: str, storage_options: StorageOptions = None) -> Any:
    """Open a zarr array read-only: an array path/URL, or a group holding exactly one 2-D array.

    A group + array name is written as the group's path followed by the array
    name (``data.zarr/features`` or ``s3://bucket/data.zarr/features``).
    """
    import zarr

    location = url[len("file://") :] if url.startswith("file://") else url
    if not _is_remote(location) and not os.path.exists(location):
        raise SourceError(f"No zarr data at {url}: the path does not exist. Check the path.")
    if not _is_remote(location) and not os.path.isdir(location):
        raise SourceError(f"{url} is a file, not a zarr array. {_READABLE}")
    try:
        if _is_remote(location):
            import fsspec

            # One request first: an unreachable endpoint fails here, not inside zarr's concurrent
            # metadata reads, whose abandoned coroutines print "Exception ignored ... Token was
            # created in a different Context" tracebacks at exit.
            filesystem, root = fsspec.core.url_to_fs(location, **(storage_options or {}))
            filesystem.invalidate_cache(root)  # a listing cached before the array was written would hide it
            filesystem.exists(root)
            store = zarr.storage.FsspecStore.from_url(location, storage_options=storage_options, read_only=True)
            store.fs.invalidate_cache(store.path)  # its own (asynchronous) file system's listings too
        else:
            # Absolute: workers run in other directories and would read a relative path
            # there, where zarr returns fill values for the chunks it cannot find.
            store = zarr.storage.LocalStore(os.path.abspath(location), read_only=True)
        node = zarr.open(store=store, mode="r")
    except FileNotFoundError as error:
        raise SourceError(f"{url} is not a zarr array or group (no zarr metadata found there). {_READABLE}") from error
    except Exception as error:  # fsspec/botocore raise many types (NoSuchBucket, PermissionError, ...)
        raise SourceError(f"Cannot open {url}: {type(error).__name__}: {error}{credentials_hint(error)}") from error
    if isinstance(node, zarr.Group):
        arrays = [name for name, child in node.arrays() if child.ndim == 2]
        if len(arrays) != 1:
            raise SourceError(
                f"{url} is a zarr group with {len(arrays)} 2-D arrays ({', '.join(sorted(arrays)) or 'none'}). "
                f"Name the array: '{url.rstrip('/')}/<array>'."
            )
        node = node[arrays[0]]
    return node


@dataclasses.dataclass(frozen=True, eq=False)
class RowSource:
    """A data source opened once: its rows as a row-chunked dask array, with what is known about it.

    Made by :func:`open_source`; every public function that takes a source
    also takes a ``RowSource`` and passes it down unopened, so one job opens a
    zarr store once. Nothing here is read from the data until a task reads its
    chunk, and in-memory data is never copied.

    Attributes
    ----------
    array : dask Array of shape (n_rows, n_columns)
        The rows; every chunk spans all columns (one task reads whole rows).
    description : str
        A short, secret-free description for messages: the path or URL, or the
        array type and shape.
    name : str
        What messages call the source ("data", "X", "Y").
    location : str or None
        The zarr array's absolute path or URL (the store URL plus the array's
        path in it); None for numpy, dask and xarray sources.
    zarr_array : zarr.Array or None
        The opened zarr array (read-only), for its metadata.
    storage_options : dict or None
        fsspec options of ``location``. Never logged.
    given_ndim : int
        2, or 1 for a vector read as one column (``open_source(..., allow_vector=True)``).
    joined : tuple of RowSource
        For a source made by :meth:`with_columns_of`, the sources whose columns it joins.
    rows : ndarray or None
        The rows themselves when they are a numpy array in this process (not
        copied: every chunk of ``array`` is a view of them); their rows per
        task are planned freely, where a zarr or dask source keeps its own
        chunks (they are the unit of reading).
    allow_missing_chunks : bool
        Whether a zarr chunk absent from its store is read as the fill value
        (on purpose); by default it is an error naming the chunk.
    columns : tuple of str or None
        For a table (DataFrame or parquet): its column names, in the rows' order.
    categorical_columns : tuple of int
        For a table: the indices of the columns that hold category codes
        (:func:`streamrff.sources.frames.category_code`); empty otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff import open_source
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> source = open_source(X, chunk_rows=4)
    >>> source.shape, source.row_chunks, source.description
    ((6, 2), (4, 2), 'ndarray of shape (6, 2)')
    >>> bool((source.array.blocks[1].compute() == X[4:]).all())
    True
    """

    array: da.Array
    description: str
    name: str = "data"
    location: str | None = None
    zarr_array: Any = dataclasses.field(default=None, repr=False)
    storage_options: StorageOptions = dataclasses.field(default=None, repr=False)
    rows: np.ndarray | None = dataclasses.field(default=None, repr=False)
    given_ndim: int = 2
    joined: tuple[RowSource, ...] = dataclasses.field(default=(), repr=False)
    allow_missing_chunks: bool = False
    columns: tuple[str, ...] | None = None
    categorical_columns: tuple[int, ...] = ()

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.array.shape[0]), int(self.array.shape[1]))

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    @property
    def row_chunks(self) -> tuple[int, ...]:
        """Rows of each chunk, in order: the chunk plan."""
        return tuple(int(size) for size in self.array.chunks[0])

    @property
    def row_offsets(self) -> tuple[int, ...]:
        """Index of the first row of each chunk."""
        return tuple(int(start) for start in np.cumsum((0, *self.row_chunks[:-1])))

    @property
    def in_memory(self) -> bool:
        """Whether the rows are a numpy array in this process (see ``rows``)."""
        return self.rows is not None

    def with_chunk_rows(self, chunk_rows: int) -> RowSource:
        """The same source read ``chunk_rows`` rows per task (the last chunk may be shorter)."""
        check_chunk_count(self.shape[0], chunk_rows, self.description, "tasks of")
        if self.rows is not None:
            return dataclasses.replace(self, array=_row_views(self.rows, int(chunk_rows)))
        return dataclasses.replace(self, array=self.array.rechunk({0: int(chunk_rows), 1: -1}))

    def with_missing_chunks_allowed(self, allow: bool) -> RowSource:
        """The same source, reading a zarr chunk absent from its store as the fill value (``allow``) or refusing it."""
        if self.zarr_array is None:
            return dataclasses.replace(self, allow_missing_chunks=allow)
        array = _zarr_rows(self.zarr_array, allow, self.location)
        if array.chunks[0] != self.array.chunks[0]:
            array = array.rechunk({0: self.array.chunks[0], 1: -1})
        return dataclasses.replace(self, array=array, allow_missing_chunks=allow)

    def with_columns_of(self, other: RowSource) -> RowSource:
        """This source with ``other``'s columns appended, row by row (e.g. regression targets beside the rows).

        ``other`` is read in this source's row chunks, so one task reads a chunk
        of both. The joined source's identity names both; its chunks are
        identified by their content as they are read.

        Raises
        ------
        InputError
            If ``other`` has another number of rows.
        """
        if other.shape[0] != self.shape[0]:
            raise InputError(
                f"Expected a {other.name} with one row per row of the {self.name} ({self.shape[0]} rows). Got "
                f"{other.shape[0]} rows from {other.description}. Pass the {other.name} of exactly these rows, "
                "in the same order."
            )
        columns = other.array.rechunk({0: self.array.chunks[0], 1: -1})
        return RowSource(
            array=da.concatenate([self.array, columns], axis=1).rechunk({1: -1}),
            description=f"{self.description} with {other.name} {other.description}",
            name=self.name,
            joined=(self, other),
        )

    @cached_property
    def identity(self) -> str:
        """Which array this is: for zarr, a digest of its location and layout; else its kind, width and dtype.

        The layout is the array metadata less its row count, so rows appended
        to the array keep its identity. Whether a chunk's rows are unchanged
        is told per chunk: by :meth:`chunk_identities` (zarr) or by
        :func:`chunk_digest` of the rows (other sources, whose identity names
        no location).
        """
        if self.joined:
            return " + ".join(part.identity for part in self.joined)
        if self.zarr_array is None:
            return f"{type(self.array).__name__}:{self.shape[1]}:{self.dtype}"
        layout = self.zarr_array.metadata.to_dict()
        layout["shape"] = list(layout["shape"][1:])
        text = json.dumps({"location": self.location, "layout": layout}, sort_keys=True, default=str)
        return "zarr:" + hashlib.sha256(text.encode()).hexdigest()

    def chunk_identities(self) -> tuple[str, ...] | None:
        """Per row chunk of the plan, a digest of the stored objects that hold its rows; None unless zarr.

        A stored object is known by its key and its content
        (:func:`~streamrff.sources.chunkread.object_digest`: the store's content
        hash, S3's ETag, or a CRC-32C of its stored bytes, read and not decoded);
        an absent object (a chunk of fill values) is recorded as absent. So a
        chunk rewritten with its size and modification time kept gets another
        identity. One listing of the store, then one read of each local (or
        other hash-less) object, a few at once.
        """
        if self.zarr_array is None:
            return None
        keys = [
            stored_chunk_keys(self.zarr_array, start, start + size)
            for start, size in zip(self.row_offsets, self.row_chunks)
        ]
        digests = self._stored_object_digests(sorted({key for chunk in keys for key in chunk}))
        identities = []
        for chunk in keys:
            listing = json.dumps([[key, digests.get(key)] for key in chunk], default=str)
            identities.append(hashlib.sha256(f"{self.identity}\n{listing}".encode()).hexdigest())
        return tuple(identities)

    def stored_objects(self, start: int, stop: int) -> dict[str, list[Any] | None]:
        """The stored objects that hold rows ``start..stop-1`` of a zarr source, each asked for on its own.

        For each object key (every column block of the stored chunks or shards
        those rows fall in): ``[size, digest]`` of its content
        (:func:`~streamrff.sources.chunkread.object_digest`: S3's ETag, or a
        CRC-32C of its stored bytes), or None if the object does not exist (zarr
        would read fill values there). One request (or one read of the object)
        per object, no listing: cheap enough for every poll of a followed array.

        Raises
        ------
        SourceError
            If the source is not a zarr array, or the store cannot be asked.

        Examples
        --------
        >>> import os, tempfile, numpy as np, zarr
        >>> from streamrff import open_source
        >>> path = os.path.join(tempfile.mkdtemp(), "rows.zarr")
        >>> array = zarr.create_array(path, shape=(10, 2), chunks=(4, 2), dtype="float32")
        >>> array[:4] = 1.0
        >>> objects = open_source(path).stored_objects(2, 6)
        >>> sorted(objects), objects["c/0/0"][0] > 0, objects["c/1/0"]
        (['c/0/0', 'c/1/0'], True, None)
        """
        if self.zarr_array is None or self.location is None:
            raise SourceError(f"{self.description} is not a zarr array: it has no stored objects.")
        keys = stored_chunk_keys(self.zarr_array, start, max(stop, start + 1))
        filesystem, root = self._filesystem()
        try:
            objects: dict[str, list[Any] | None] = {}
            for key in keys:
                path = f"{root}/{key}"
                filesystem.invalidate_cache(path)  # a cached listing would hide an object written since
                objects[key] = object_digest(filesystem, path)
        except Exception as error:  # fsspec/botocore raise many types
            raise SourceError(
                f"Cannot look up the chunks of {self.description}: {type(error).__name__}: {error}"
            ) from error
        return objects

    def _filesystem(self) -> tuple[Any, str]:
        import fsspec

        options = (self.storage_options or {}) if _is_remote(self.location) else {}
        try:
            filesystem, root = fsspec.core.url_to_fs(self.location, **options)
        except Exception as error:  # fsspec raises many types
            raise SourceError(
                f"Cannot open the store of {self.description}: {type(error).__name__}: {error}"
            ) from error
        return filesystem, root.rstrip("/")

    def check_chunks_stored(self) -> bool:
        """Refuse a zarr source with a chunk absent from its store, from one listing of the store's keys.

        Returns whether the listing was made (True also for sources that are
        not zarr, or that allow missing chunks); False when the store cannot be
        listed, and each task then asks for its chunks as it reads them.

        Raises
        ------
        SourceError
            Naming the first missing chunk, the array and how many are missing.
        """
        return self._chunks_stored_checked

    @cached_property
    def _chunks_stored_checked(self) -> bool:
        if self.joined:
            return all([part.check_chunks_stored() for part in self.joined])
        if self.zarr_array is None or self.allow_missing_chunks:
            return True
        stored = self._stored_keys
        if stored is None:
            return False
        metadata = self.zarr_array.metadata
        grid = metadata.chunk_grid.chunk_shape if metadata.zarr_format == 3 else metadata.chunks
        blocks = [-(-int(size) // int(step)) for size, step in zip(self.zarr_array.shape, grid)]
        row_blocks, column_blocks = blocks[0], (blocks[1] if len(blocks) > 1 else 1)
        for row_block in range(row_blocks):  # stops at the first missing chunk: no list of every key
            for column_block in range(column_blocks):
                key = metadata.encode_chunk_key((row_block, column_block)[: len(blocks)])
                if key not in stored:
                    n_stored = len([name for name in stored if name.rsplit("/", 1)[-1] not in _METADATA_FILES])
                    n_missing = max(1, row_blocks * column_blocks - n_stored)
                    raise SourceError(missing_chunk_message(key, self.zarr_array, n_missing, self.location))
        return True

    @cached_property
    def _stored_keys(self) -> set[str] | None:
        """The keys stored under the array (names only, no sizes), or None if the store cannot list them."""
        if not _is_remote(self.location):
            root = self.location[len("file://") :] if self.location.startswith("file://") else self.location
            keys = set()
            for folder, _, files in os.walk(root):
                prefix = os.path.relpath(folder, root).replace(os.sep, "/")
                keys.update(name if prefix == "." else f"{prefix}/{name}" for name in files)
            return keys
        import fsspec

        try:
            filesystem, root = fsspec.core.url_to_fs(self.location, **(self.storage_options or {}))
            filesystem.invalidate_cache(root)  # a listing cached before the chunks were written would miss them
            found = filesystem.find(root)
        except Exception:  # fsspec/botocore raise many types; HTTP stores cannot list: checked as read
            return None
        root = root.rstrip("/") + "/"
        return {path[len(root) :] for path in found if path.startswith(root)}

    def _stored_object_digests(self, keys: Sequence[str]) -> dict[str, list[Any] | None]:
        """:func:`object_digest` of each key stored under the array (None for the absent ones): one listing, then
        one read (or none, where the listing gives a content hash) per stored key."""
        from concurrent.futures import ThreadPoolExecutor

        filesystem, root = self._filesystem()
        try:
            filesystem.invalidate_cache(root)
            found = filesystem.find(root, detail=True)
            listing = {path[len(root) + 1 :]: info for path, info in found.items() if path.startswith(root + "/")}
            stored = [key for key in keys if key in listing]
            with ThreadPoolExecutor(8) as pool:  # reads release the GIL, and so does zlib's CRC of a block
                digests = pool.map(lambda key: object_digest(filesystem, f"{root}/{key}", listing[key]), stored)
                return dict.fromkeys(keys) | dict(zip(stored, digests))
        except Exception as error:  # fsspec/botocore raise many types
            raise SourceError(
                f"Cannot read the chunks of {self.description}: {type(error).__name__}: {error}"
            ) from error


def chunk_digest(rows: np.ndarray) -> str:
    """A content digest of a block of rows (dtype, shape and bytes): the identity of an in-memory chunk."""
    rows = np.ascontiguousarray(rows)
    digest = hashlib.blake2b(f"{rows.dtype.str}{rows.shape}".encode(), digest_size=20)
    digest.update(memoryview(rows).cast("B"))
    return digest.hexdigest()


def open_source(
    source: Any,
    storage_options: StorageOptions = None,
    sample_dim: str | None = None,
    chunk_rows: int | None = None,
    name: str | None = None,
    allow_vector: bool = False,
    allow_missing_chunks: bool | None = None,
    columns: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
) -> RowSource:
    """Open ``source`` once: the one place where data becomes a row-chunked dask array.

    Parameters
    ----------
    source : ndarray, dask Array, xarray DataArray, DataFrame, str/PathLike or RowSource
        A zarr array path or URL (``file://``, plain path, ``s3://...``), or a
        group path with the array name appended. A pandas or dask DataFrame, or
        the path or URL of a parquet file or folder of parquet files
        (``*.parquet``), is read as a table (:mod:`streamrff.sources.frames`:
        numeric columns as they are, the others as category codes). A
        :class:`RowSource` is returned as it is (re-planned to ``chunk_rows``,
        renamed to ``name``).
    storage_options : dict, optional
        fsspec options for URLs.
    sample_dim : str, optional
        For a DataArray: the dimension along which samples run (default: the first).
    chunk_rows : int, optional
        Rows per task. Defaults to the source's own chunking (zarr, dask) or
        dask's automatic chunking (numpy).
    name : str, optional
        What to call the source in error messages (e.g. "X"; default "data").
    allow_vector : bool, default=False
        Read a 1-D source as one column (regression targets).
    allow_missing_chunks : bool, optional
        Read a zarr chunk absent from its store as the array's fill value, on
        purpose. By default (None: the dask config key
        ``streamrff.allow-missing-chunks``, False unless set) a job refuses it,
        naming the chunk: zarr would read rows that were never written as
        fill values. A :class:`RowSource` keeps its own setting unless this is
        given.
    columns : sequence of str, optional
        For a table: the columns to read, in this order (default: all).
    categorical : sequence of str, optional
        For a table: numeric columns to read as categories too (category,
        string, object and boolean columns always are).

    Returns
    -------
    RowSource

    Raises
    ------
    InputError
        For a non-numeric or non-2-D source, an unknown ``sample_dim``, or a
        bad ``chunk_rows``.
    SourceError
        For a missing path, bucket or array, or a store that declares more
        chunks than a job can plan (:data:`MAX_CHUNKS`), checked from its
        metadata before anything is built.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr
    >>> from streamrff import open_source
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.zarr")
    >>> X = np.arange(40, dtype="float32").reshape(10, 4)
    >>> zarr.create_array(path, shape=X.shape, chunks=(4, 4), dtype="float32")[:] = X
    >>> source = open_source(path)
    >>> source.row_chunks, len(source.chunk_identities())
    ((4, 4, 2), 3)
    >>> bool((source.array.compute() == X).all())
    True
    """
    if chunk_rows is not None and (
        isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1
    ):
        raise InputError(f"chunk_rows must be a positive integer or None. Got {chunk_rows!r}.")
    if isinstance(source, RowSource):
        if sample_dim is not None:
            raise InputError(
                f"sample_dim applies when a DataArray is opened; {source.description} is already open. "
                "Pass sample_dim to open_source instead."
            )
        opened = source if name is None or name == source.name else dataclasses.replace(source, name=name)
        if allow_missing_chunks is not None and bool(allow_missing_chunks) != opened.allow_missing_chunks:
            opened = opened.with_missing_chunks_allowed(bool(allow_missing_chunks))
        return opened if chunk_rows is None else opened.with_chunk_rows(chunk_rows)
    name = name or "data"
    allow_missing = _allow_missing_chunks(allow_missing_chunks)
    location, zarr_array, table = None, None, None
    table_source = is_table(source, storage_options)
    if (columns is not None or categorical is not None) and not table_source:
        raise InputError(
            f"columns and categorical apply to tables (DataFrames, *.parquet); {describe_source(source)} is not one. "
            "Drop them, or select the array's columns first."
        )
    if table_source:
        table = table_rows(source, storage_options, columns, categorical)
        array = table.array
    elif isinstance(source, (str, os.PathLike)):
        location = _absolute_location(os.fspath(source))
        zarr_array = open_zarr_array(os.fspath(source), storage_options)
        if zarr_array.path:
            location = location.rstrip("/") + "/" + zarr_array.path
        _check_declared_size(zarr_array, describe_source(source), chunk_rows)
        array = _zarr_rows(zarr_array, allow_missing, location)
    else:
        array = _as_array(source, sample_dim, allow_vector)
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool) or np.issubdtype(
        array.dtype, np.complexfloating
    ):
        raise InputError(
            f"The {name} must be real numbers. Got dtype {array.dtype} from {describe_source(source)}. "
            "Convert it to float32."
        )
    given_ndim = array.ndim
    if allow_vector and array.ndim == 1:
        array = array.reshape(-1, 1)
    if array.ndim != 2:
        raise InputError(
            f"Expected 2-D {name} (rows = samples, columns = features). Got {array.ndim}-D {name} of shape "
            f"{array.shape} from {describe_source(source)}. Reshape it to (n_samples, n_features)."
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InputError(f"The {name} must have at least 1 row and 1 column. Got shape {array.shape}.")
    rows = array if isinstance(array, np.ndarray) else None
    if chunk_rows:
        check_chunk_count(array.shape[0], chunk_rows, describe_source(source), "tasks of")
    if rows is not None:
        array = _row_views(rows, chunk_rows)
    elif chunk_rows or len(array.chunks[1]) > 1:
        array = array.rechunk({0: int(chunk_rows) if chunk_rows else array.chunks[0], 1: -1})
    return RowSource(
        array=array,
        description=table.description if table is not None else describe_source(source),
        name=name,
        location=location,
        zarr_array=zarr_array,
        storage_options=storage_options if location is not None and _is_remote(location) else None,
        rows=rows,
        given_ndim=given_ndim,
        allow_missing_chunks=allow_missing,
        columns=table.columns if table is not None else None,
        categorical_columns=table.categorical_columns if table is not None else (),
    )


def _allow_missing_chunks(allow_missing_chunks: bool | None) -> bool:
    """The ``allow_missing_chunks`` argument, or the dask config key ``streamrff.allow-missing-chunks``."""
    if allow_missing_chunks is None:
        import dask

        allow_missing_chunks = dask.config.get("streamrff.allow-missing-chunks", False)
    if not isinstance(allow_missing_chunks, (bool, np.bool_)):
        raise InputError(f"allow_missing_chunks must be True or False. Got {allow_missing_chunks!r}.")
    return bool(allow_missing_chunks)


def _check_declared_size(zarr_array: Any, description: str, chunk_rows: int | None) -> None:
    """Refuse, from the metadata alone, a zarr array whose rows cannot be planned (before dask lists its chunks)."""
    shape = tuple(int(size) for size in zarr_array.shape)
    if len(shape) != 2:
        return  # refused as not 2-D by the caller
    n_row_chunks = check_chunk_count(shape[0], int(zarr_array.chunks[0]), description)
    check_column_chunk_count(shape[1], int(zarr_array.chunks[1]), n_row_chunks, description)
    if chunk_rows:
        check_chunk_count(shape[0], chunk_rows, description, "tasks of")


def open_sources(
    sources: Sequence[Any],
    storage_options: StorageOptions = None,
    argument: str = "sources",
    allow_missing_chunks: bool | None = None,
) -> list[RowSource]:
    """:func:`open_source` for each of several sources of one width (the pooled sample of a map)."""
    if isinstance(sources, (str, os.PathLike, RowSource)) or not isinstance(sources, Sequence) or not sources:
        raise InputError(f"{argument} must be a non-empty list of sources. Got {type(sources).__name__}.")
    opened = [
        open_source(source, storage_options=storage_options, allow_missing_chunks=allow_missing_chunks)
        for source in sources
    ]
    width = opened[0].shape[1]
    for other in opened[1:]:
        if other.shape[1] != width:
            raise InputError(f"All samples must have the same number of columns. Got {width} and {other.shape[1]}.")
    return opened


def as_row_chunked(
    source: Any,
    storage_options: StorageOptions = None,
    sample_dim: str | None = None,
    chunk_rows: int | None = None,
    name: str = "data",
) -> da.Array:
    """``open_source(...).array``: the rows of ``source`` as a 2-D dask array chunked by rows only.

    For code that needs only the dask array (``predict`` and ``transform`` on
    out-of-core data); jobs keep the :class:`RowSource`.
    """
    return open_source(source, storage_options, sample_dim, chunk_rows, name).array


def _absolute_location(url: str) -> str:
    location = url[len("file://") :] if url.startswith("file://") else url
    return location if _is_remote(location) else os.path.abspath(location)


def _zarr_rows(zarr_array: Any, allow_missing: bool = False, location: str | None = None) -> da.Array:
    """The stored array as dask reads it, one task per stored chunk, whole row chunks decoded
    without zarr's extra copies (:class:`streamrff.sources.chunkread.ChunkRows`); a chunk absent from
    the store is an error unless ``allow_missing``."""
    from dask.base import tokenize

    rows = ChunkRows(zarr_array, allow_missing=allow_missing, location=location)
    return da.from_array(
        rows, chunks=rows.chunks, name="from-zarr-" + tokenize(rows), meta=np.empty((0,) * rows.ndim, rows.dtype)
    )


def _row_views(rows: np.ndarray, chunk_rows: int | None) -> da.Array:
    """A dask array whose chunks are views of ``rows`` (``da.from_array`` would copy them first)."""
    chunks = da.core.normalize_chunks((chunk_rows or "auto", -1), rows.shape, dtype=rows.dtype)
    name = f"rows-{uuid.uuid4().hex}"
    starts = np.cumsum((0, *chunks[0][:-1]))
    graph = {(name, index, 0): rows[start : start + size] for index, (start, size) in enumerate(zip(starts, chunks[0]))}
    return da.Array(graph, name, chunks, dtype=rows.dtype, meta=rows[:0])


def _as_array(source: Any, sample_dim: str | None, allow_vector: bool = False) -> da.Array | np.ndarray:
    """An in-memory or dask source as a dask array, or as the numpy array it is (not copied)."""
    if isinstance(source, da.Array):
        return source
    if _is_dataarray(source):
        dims = list(source.dims)
        dim = dims[0] if sample_dim is None else sample_dim
        if dim not in dims:
            raise InputError(f"sample_dim {sample_dim!r} is not a dimension of the DataArray. Got dims {tuple(dims)}.")
        if len(dims) != 2 and not (allow_vector and len(dims) == 1):
            raise InputError(
                f"Expected a 2-D DataArray (samples x features). Got dims {tuple(dims)}. "
                "Stack the feature dimensions first, e.g. da.stack(feature=[...])."
            )
        data = source.transpose(dim, *[d for d in dims if d != dim]).data
        return data if isinstance(data, da.Array) else np.asarray(data)
    if isinstance(source, (np.ndarray, list, tuple)) or hasattr(source, "__array__"):
        array = np.asarray(source)
        if array.dtype == object:
            raise InputError("The data must be real numbers. Got an object array; convert it with X.astype('float32').")
        return array
    raise InputError(
        f"Cannot read {type(source).__name__} as data. Pass a numpy or dask array, an xarray "
        "DataArray, or a zarr path/URL."
    )


def _is_dataarray(source: Any) -> bool:
    try:
        import xarray
    except ImportError:  # pragma: no cover - xarray is a dependency
        return False
    return isinstance(source, xarray.DataArray)
