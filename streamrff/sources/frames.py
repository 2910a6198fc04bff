"""Tables as rows: pandas and dask DataFrames and parquet files or datasets, read as float64 rows.

Numeric columns (integers, floats) keep their values; the other columns (category, string, object,
boolean), and numeric ones named ``categorical``, become **category codes**: one float64 per label,
:func:`category_code`, the same in every process and on every machine, so a map hashes categories
without a vocabulary. A missing label (None, NaN, ``pd.NA``) is one category of its own. Nothing
here imports pandas or pyarrow until a table is opened (``pip install "streamrff[tables]"``).

A parquet source is read file by file: each file is one chunk of rows, its row count taken from the
file's footer before anything is read, and one task reads its file with pyarrow. A dask DataFrame
is read partition by partition (one pass counts the partitions' rows first); a pandas DataFrame is
encoded in memory.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np

from ..errors import InputError, SourceError

__all__ = ["MISSING_CODE", "TableRows", "category_code", "category_codes", "is_table", "table_rows"]

_CODE_BITS = 52  # a code is an integer below 2^52: exact in float64


def _code_of_key(key: str) -> float:
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, person=b"srf-category").digest()
    return float(int.from_bytes(digest, "little") >> (64 - _CODE_BITS))


#: The code of a missing label (None, NaN, ``pd.NA``, ``NaT``): a category of its own.
MISSING_CODE = _code_of_key("missing")


def _is_missing(label: Any) -> bool:
    if label is None:
        return True
    try:
        import pandas as pd

        return bool(pd.isna(label)) if np.ndim(label) == 0 else False
    except ImportError:  # pragma: no cover - only tables reach here
        return isinstance(label, float) and math.isnan(label)


def category_code(label: Any) -> float:
    """The float64 code of one category label: equal labels, equal codes, in every process.

    A 52-bit integer (exact in float64) from a BLAKE2b digest of the label's type and value:
    ``"s:<text>"`` for strings, ``"b:True"`` for booleans, ``"i:<n>"`` for integers (and floats
    with an integer value, so a column read as float after a missing value keeps its codes),
    ``"f:<repr>"`` for other floats, ``"y:<hex>"`` for bytes, ``"o:<str>"`` otherwise. None, NaN,
    ``pd.NA`` and ``NaT`` give :data:`MISSING_CODE`.

    Parameters
    ----------
    label : object
        A category label.

    Returns
    -------
    float
        Its code, an integer in [0, 2^52).

    Examples
    --------
    >>> from streamrff.sources.frames import category_code, MISSING_CODE
    >>> category_code("red") == category_code("red") != category_code("blue")
    True
    >>> category_code(3) == category_code(3.0), category_code(None) == category_code(float("nan")) == MISSING_CODE
    (True, True)
    """
    return MISSING_CODE if _is_missing(label) else _present_code(label)


def _present_code(label: Any) -> float:
    """:func:`category_code` of a label known not to be missing."""
    if isinstance(label, (bool, np.bool_)):
        key = f"b:{bool(label)}"
    elif isinstance(label, (int, np.integer)):
        key = f"i:{int(label)}"
    elif isinstance(label, (float, np.floating)):
        key = f"i:{int(label)}" if float(label).is_integer() else f"f:{float(label)!r}"
    elif isinstance(label, str):
        key = f"s:{label}"
    elif isinstance(label, bytes):
        key = f"y:{label.hex()}"
    else:
        key = f"o:{label}"
    return _code_of_key(key)


def category_codes(values: Any) -> np.ndarray:
    """The codes of a column of labels (a pandas Series, array or sequence), one digest per distinct label.

    Examples
    --------
    >>> from streamrff.sources.frames import category_codes, category_code
    >>> codes = category_codes(["a", "b", "a", None])
    >>> bool(codes[0] == codes[2] == category_code("a")), codes.dtype
    (True, dtype('float64'))
    """
    import pandas as pd

    labels, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    # factorize leaves the missing labels out of ``uniques`` (they get the sentinel -1)
    table = np.array([_present_code(label) for label in uniques] + [MISSING_CODE], dtype=np.float64)
    return table[labels]  # the sentinel -1 picks MISSING_CODE, the last entry


_ZARR_METADATA = ("zarr.json", ".zarray", ".zgroup")


def is_table(source: Any, storage_options: dict | None = None) -> bool:
    """Whether ``source`` is a pandas or dask DataFrame, or a path or URL of a parquet file or dataset.

    A path or URL is a parquet source when it ends with ``.parquet``, or when it is a folder (local, or
    a prefix on object storage) that holds ``*.parquet`` files and no zarr metadata (``zarr.json``,
    ``.zarray``, ``.zgroup``). A path ending with ``.zarr`` is never listed.

    Examples
    --------
    >>> import os, tempfile
    >>> from streamrff.sources.frames import is_table
    >>> folder = tempfile.mkdtemp()
    >>> is_table(folder), is_table("rows.parquet"), is_table("rows.zarr")
    (False, True, False)
    >>> open(os.path.join(folder, "part-0.parquet"), "wb").close()
    >>> is_table(folder)
    True
    """
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source).rstrip("/")
        if path.endswith(".parquet"):
            return True
        if path.endswith(".zarr") or ".zarr/" in path:
            return False
        return _is_parquet_folder(path, storage_options)
    module = type(source).__module__
    return type(source).__name__ == "DataFrame" and module.startswith(("pandas", "dask"))


def _is_parquet_folder(path: str, storage_options: dict | None) -> bool:
    """Whether ``path`` is a folder of ``*.parquet`` files with no zarr metadata at its top (one listing)."""
    remote = "://" in path and not path.lower().startswith("file://")
    if not remote:
        local = path[len("file://") :] if path.lower().startswith("file://") else path
        if not os.path.isdir(local):
            return False
        names = os.listdir(local)
        if any(name in _ZARR_METADATA for name in names):
            return False
        return any(name.endswith(".parquet") for name in names) or any(
            name.endswith(".parquet") for _, _, files in os.walk(local) for name in files
        )
    try:
        import fsspec

        filesystem, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        names = [str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in filesystem.ls(root, detail=False)]
    except Exception:  # not a listable folder (an object, a missing bucket): the zarr reader says why
        return False
    return not any(name in _ZARR_METADATA for name in names) and any(name.endswith(".parquet") for name in names)


@dataclasses.dataclass(frozen=True)
class TableRows:
    """A table's rows as float64 (codes for categorical columns), with its column names and kinds.

    Attributes
    ----------
    array : ndarray or dask Array of shape (n_rows, n_columns), float64
    description : str
    columns : tuple of str
        The column names, in the order of the rows' columns.
    categorical_columns : tuple of int
        Indices of the columns that hold category codes.
    """

    array: Any
    description: str
    columns: tuple[str, ...]
    categorical_columns: tuple[int, ...]


def _tables_missing() -> InputError:
    return InputError('Reading tables needs pandas and pyarrow. Install them: pip install "streamrff[tables]".')


def _column_kinds(
    dtypes: dict[str, Any], columns: Sequence[str] | None, categorical: Sequence[str] | None, description: str
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The selected columns and the indices of the categorical ones, from each column's dtype."""
    names = tuple(str(name) for name in dtypes)
    chosen = names if columns is None else tuple(str(name) for name in columns)
    for label, wanted in (("columns", chosen), ("categorical", tuple(categorical or ()))):
        unknown = [name for name in wanted if str(name) not in names]
        if unknown:
            raise InputError(f"{label} names {unknown} that {description} does not have. Its columns: {list(names)}.")
    if not chosen:
        raise InputError(f"columns selects no column of {description}. Pass at least one of {list(names)}.")
    from pandas.api import types

    named = {str(name) for name in categorical or ()}
    by_name = {str(name): dtype for name, dtype in dtypes.items()}
    flags = []
    for name in chosen:
        dtype = by_name[name]
        if types.is_datetime64_any_dtype(dtype) or types.is_timedelta64_dtype(dtype):
            raise InputError(
                f"Column {name!r} of {description} holds times ({dtype}). Drop it (columns=...) or "
                "convert it to numbers first."
            )
        numeric = types.is_numeric_dtype(dtype) and not types.is_bool_dtype(dtype)
        flags.append(name in named or not numeric)
    return chosen, tuple(index for index, flag in enumerate(flags) if flag)


def encode_frame(frame: Any, columns: Sequence[str], categorical_columns: Sequence[int]) -> np.ndarray:
    """A pandas DataFrame's ``columns`` as float64 rows: numeric values, category codes where categorical."""
    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for index, name in enumerate(columns):
        column = frame[name]
        if index in categorical_columns:
            out[:, index] = category_codes(column)
        else:
            out[:, index] = column.to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def _read_parquet_file(
    path: str,
    storage_options: dict | None,
    columns: tuple[str, ...],
    categorical: tuple[int, ...],
    text: tuple[str, ...],
) -> np.ndarray:
    """One task: a parquet file's rows, encoded; its ``text`` columns (the dataset's categorical text
    columns) read dictionary-encoded (each distinct label decoded and coded once, :func:`encode_table`)."""
    import fsspec
    import pyarrow.parquet as pq
    from fsspec.implementations.local import LocalFileSystem

    filesystem, local_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    # A local file is opened (memory-mapped) by pyarrow itself: no Python file object in between. One
    # thread: the engine runs a task per core already, and pyarrow's pool beside them only competes
    # (1e7 rows, 2 cores: parquet/zarr 0.80-0.84x against 0.76-0.82x with it, alternated).
    local = isinstance(filesystem, LocalFileSystem)
    with contextlib.nullcontext(local_path) if local else filesystem.open(path, "rb") as source:
        file = pq.ParquetFile(source, read_dictionary=list(text), memory_map=local)
        table = file.read(columns=list(columns), use_threads=False)
    return encode_table(table, columns, categorical)


def encode_table(table: Any, columns: Sequence[str], categorical_columns: Sequence[int]) -> np.ndarray:
    """A pyarrow Table's ``columns`` as float64 rows, as :func:`encode_frame` encodes its pandas frame, but
    column-major (a parquet file is one chunk, whose columns are written and then read in place).

    A categorical column of text, booleans, floats or integers without nulls is coded through a
    dictionary (its own, or one :func:`pyarrow.compute.dictionary_encode` builds): one code per
    distinct label (cached across calls), then gathered by the indices. Others go through pandas.
    """
    out = np.empty((table.num_rows, len(columns)), dtype=np.float64, order="F")  # written column by column
    for index, name in enumerate(columns):
        column = table.column(name)
        if index in categorical_columns:
            out[:, index] = _arrow_codes(column, name)
        elif column.null_count == 0 and _is_number(column.type):
            out[:, index] = column.to_numpy()  # the values pandas would give, without building a Series
        else:
            out[:, index] = column.to_pandas().to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def _is_number(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_floating(kind) or pa.types.is_integer(kind)


def _dictionary_codable(kind: Any, null_count: int) -> bool:
    """Whether an arrow type's values become the same Python labels as pandas gives (so, the same codes)."""
    import pyarrow as pa

    if pa.types.is_integer(kind):  # pandas reads integers with nulls as floats, rounding those above 2^53
        return null_count == 0
    return _is_text(kind) or pa.types.is_boolean(kind) or pa.types.is_floating(kind)


def _is_text(kind: Any) -> bool:
    """Whether an arrow type is text or bytes (the columns parquet can read dictionary-encoded)."""
    import pyarrow as pa

    return any(
        check(kind)
        for check in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    )


#: Labels met in earlier dictionaries of a column and their codes, per column name and arrow type of
#: label (true and 1 are not one category), as ``(labels, codes)``: an arrow array and float64 codes in
#: the same order. Past ``_KNOWN_LABELS_LIMIT`` labels of a column they start afresh.
_KNOWN_LABELS: dict[tuple[str, str], tuple[Any, np.ndarray]] = {}
_KNOWN_LABELS_LIMIT = 1 << 20
_KNOWN_LABELS_LOCK = threading.Lock()


def _dictionary_codes(dictionary: Any, name: str) -> np.ndarray:
    """The codes of one arrow dictionary's labels (:func:`category_code`), then ``MISSING_CODE``.

    The labels are looked up among those of column ``name``'s earlier dictionaries by arrow
    (``index_in``, without the GIL); only labels not met before become Python objects, to be coded.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    key = (name, str(dictionary.type))
    with _KNOWN_LABELS_LOCK:
        labels, codes = _KNOWN_LABELS.get(key) or (pa.array([], type=dictionary.type), np.empty(0))
    found = pc.index_in(dictionary, value_set=labels)
    positions = found.fill_null(0).to_numpy().astype(np.int64)  # a writable copy
    new = found.is_null().to_numpy(zero_copy_only=False)
    if new.any():  # a label met first here: coded, and kept
        fresh = dictionary.filter(pa.array(new))
        fresh_codes = np.array([category_code(label) for label in fresh.to_pylist()], dtype=np.float64)
        afresh = len(labels) + len(fresh) > _KNOWN_LABELS_LIMIT
        positions[new] = (0 if afresh else len(labels)) + np.arange(len(fresh))
        if afresh:
            labels, codes = fresh, fresh_codes
        else:
            labels, codes = pa.concat_arrays([labels, fresh]), np.concatenate([codes, fresh_codes])
        with _KNOWN_LABELS_LOCK:
            _KNOWN_LABELS[key] = (labels, codes)
    return np.append(codes[positions], MISSING_CODE)


def _arrow_codes(column: Any, name: str) -> np.ndarray:
    """The codes of a pyarrow ChunkedArray of labels (column ``name``), one code per distinct label of each
    chunk's dictionary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if not _dictionary_codable(kind, column.null_count):
        return category_codes(column.to_pandas())
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    out = np.empty(len(column), dtype=np.float64)
    start = 0
    for chunk in column.chunks:
        table = _dictionary_codes(chunk.dictionary, name)
        indices = chunk.indices
        indices = (indices.fill_null(len(chunk.dictionary)) if indices.null_count else indices).to_numpy()
        np.take(table, indices, out=out[start : start + len(chunk)])
        start += len(chunk)
    return out


#: Footers of a parquet dataset on object storage read at once when it is opened.
_FOOTER_READERS = 16


def _parquet_rows(
    url: str, storage_options: dict | None, columns: Sequence[str] | None, categorical: Sequence[str] | None
) -> TableRows:
    import fsspec

    try:
        import pyarrow.parquet as pq
    except ImportError as error:  # pragma: no cover - pyarrow is in the tables extra
        raise _tables_missing() from error
    filesystem, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    protocol = filesystem.protocol if isinstance(filesystem.protocol, str) else filesystem.protocol[0]
    try:
        if filesystem.isdir(root):
            files = sorted(path for path in filesystem.find(root) if path.endswith(".parquet"))
        elif filesystem.exists(root):
            files = [root]
        else:
            files = []
    except OSError as error:
        raise SourceError(f"Cannot list the parquet source {url}: {type(error).__name__}.") from None
    if not files:
        raise SourceError(f"No parquet file at {url}. Check the path; a dataset is a folder of *.parquet files.")

    def footer(path: str) -> Any:
        try:
            with filesystem.open(path, "rb") as handle:
                return pq.ParquetFile(handle).metadata
        except Exception as error:  # a file that is not parquet, or cut short
            raise SourceError(f"Cannot read the parquet footer of {path}: {error}.") from None

    if protocol in ("file", "local"):
        footers = [footer(path) for path in files]
    else:  # side by side: on object storage each footer is a round trip or two
        with concurrent.futures.ThreadPoolExecutor(min(_FOOTER_READERS, len(files))) as readers:
            footers = list(readers.map(footer, files))
    counts, schema = [], None
    for path, metadata in zip(files, footers):
        file_schema = metadata.schema.to_arrow_schema()
        if schema is None:
            schema = file_schema
        elif not file_schema.equals(schema):
            raise SourceError(f"{path} has other columns than {files[0]}: a dataset's files must share one schema.")
        counts.append(metadata.num_rows)
    dtypes = dict(schema.empty_table().to_pandas().dtypes.items())  # dictionary columns as pandas categories
    description = f"parquet {url}"
    chosen, categorical_columns = _column_kinds(dtypes, columns, categorical, description)
    full = [path if protocol in ("file", "local") else f"{protocol}://{path}" for path in files]
    text = tuple(chosen[index] for index in categorical_columns if _is_text(schema.field(chosen[index]).type))
    kept = [(path, count) for path, count in zip(full, counts) if count]
    if not kept:
        raise InputError(f"The parquet source {url} has no rows.")
    reader = functools.partial(
        _read_parquet_file, storage_options=storage_options, columns=chosen, categorical=categorical_columns, text=text
    )
    # One task per file, written out (a graph of O(files), built without a delayed object per file).
    name = "parquet-" + dask.base.tokenize(reader, kept)
    graph = {(name, index, 0): (reader, path) for index, (path, _) in enumerate(kept)}
    chunks = (tuple(count for _, count in kept), (len(chosen),))
    rows = da.Array(graph, name, chunks=chunks, dtype=np.float64, meta=np.empty((0, len(chosen))))
    return TableRows(rows, description, chosen, categorical_columns)


def table_rows(
    source: Any,
    storage_options: dict | None = None,
    columns: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
) -> TableRows:
    """A table's rows as float64, for :func:`streamrff.sources.rows.open_source`.

    Parameters
    ----------
    source : pandas DataFrame, dask DataFrame, or str
        A DataFrame, or the path or URL of a parquet file or of a folder of parquet files (``*.parquet``).
    storage_options : dict, optional
        fsspec options of a URL.
    columns : sequence of str, optional
        The columns to read, in this order (default: all).
    categorical : sequence of str, optional
        Numeric columns to read as categories too (category, string, object and boolean columns always are).

    Returns
    -------
    TableRows

    Examples
    --------
    >>> import pandas as pd
    >>> from streamrff.sources.frames import table_rows, category_code
    >>> frame = pd.DataFrame({"x": [0.5, 1.5], "colour": ["red", "blue"], "n": [1, 2]})
    >>> rows = table_rows(frame, categorical=["n"])
    >>> rows.columns, rows.categorical_columns
    (('x', 'colour', 'n'), (1, 2))
    >>> bool(rows.array[1, 1] == category_code("blue"))
    True
    """
    if isinstance(source, (str, os.PathLike)):
        return _parquet_rows(os.fspath(source), storage_options, columns, categorical)
    try:
        import pandas  # noqa: F401
    except ImportError as error:  # pragma: no cover - pandas is in the tables extra
        raise _tables_missing() from error
    kind = "dask DataFrame" if type(source).__module__.startswith("dask") else "DataFrame"
    description = f"{kind} of {len(source.columns)} columns"
    chosen, categorical_columns = _column_kinds(dict(source.dtypes.items()), columns, categorical, description)
    if kind == "DataFrame":
        return TableRows(encode_frame(source, chosen, categorical_columns), description, chosen, categorical_columns)
    # A dask DataFrame: one pass counts each partition's rows, then one task encodes each partition.
    lengths = dask.compute(*[dask.delayed(len)(part) for part in source.to_delayed()])
    blocks = [
        da.from_delayed(
            dask.delayed(encode_frame, pure=True)(part, chosen, categorical_columns),
            shape=(int(length), len(chosen)),
            dtype=np.float64,
        )
        for part, length in zip(source.to_delayed(), lengths)
        if length
    ]
    if not blocks:
        raise InputError(f"The {description} has no rows.")
    return TableRows(da.concatenate(blocks, axis=0), description, chosen, categorical_columns)
