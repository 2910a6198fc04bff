"""Data sources: numpy, dask, xarray and zarr (local or any fsspec URL) as row-chunked dask arrays.

Every source becomes a 2-D dask array whose chunks span all columns, so that
one task reads one block of whole rows. Storage options travel inside the task
graph to the workers and are never written to messages or logs.
"""

from __future__ import annotations

import os
from typing import Any

import dask.array as da
import numpy as np

from .errors import InputError, SourceError
from .typing import StorageOptions

__all__ = ["as_row_chunked", "describe_source", "open_zarr_array", "write_zarr"]


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


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


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
            filesystem.exists(root)
            store = zarr.storage.FsspecStore.from_url(location, storage_options=storage_options, read_only=True)
        else:
            # Absolute: workers run in other directories and would read a relative path
            # there, where zarr returns fill values for the chunks it cannot find.
            store = zarr.storage.LocalStore(os.path.abspath(location), read_only=True)
        node = zarr.open(store=store, mode="r")
    except FileNotFoundError as error:
        raise SourceError(f"{url} is not a zarr array or group (no zarr metadata found there). {_READABLE}") from error
    except Exception as error:  # fsspec/botocore raise many types (NoSuchBucket, PermissionError, ...)
        raise SourceError(f"Cannot open {url}: {type(error).__name__}: {error}") from error
    if isinstance(node, zarr.Group):
        arrays = [name for name, child in node.arrays() if child.ndim == 2]
        if len(arrays) != 1:
            raise SourceError(
                f"{url} is a zarr group with {len(arrays)} 2-D arrays ({', '.join(sorted(arrays)) or 'none'}). "
                f"Name the array: '{url.rstrip('/')}/<array>'."
            )
        node = node[arrays[0]]
    return node


def as_row_chunked(
    source: Any,
    storage_options: StorageOptions = None,
    sample_dim: str | None = None,
    chunk_rows: int | None = None,
    name: str = "data",
) -> da.Array:
    """Return ``source`` as a 2-D dask array chunked by rows only.

    Parameters
    ----------
    source : ndarray, dask Array, xarray DataArray, or str/PathLike
        A zarr array path or URL (``file://``, plain path, ``s3://...``), or a
        group path with the array name appended.
    storage_options : dict, optional
        fsspec options for URLs.
    sample_dim : str, optional
        For a DataArray: the dimension along which samples run (default: the first).
    chunk_rows : int, optional
        Rows per task. Defaults to the source's own chunking (zarr, dask) or
        dask's automatic chunking (numpy).
    name : str, default="data"
        What to call the source in error messages (e.g. "X").

    Raises
    ------
    InputError
        For a non-numeric or non-2-D source, or an unknown ``sample_dim``.
    SourceError
        For a missing path, bucket or array.
    """
    if chunk_rows is not None and (
        isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1
    ):
        raise InputError(f"chunk_rows must be a positive integer or None. Got {chunk_rows!r}.")
    array = _to_dask(source, storage_options, sample_dim)
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool) or np.issubdtype(
        array.dtype, np.complexfloating
    ):
        raise InputError(
            f"The {name} must be real numbers. Got dtype {array.dtype} from {describe_source(source)}. "
            "Convert it to float32."
        )
    if array.ndim != 2:
        raise InputError(
            f"Expected 2-D {name} (rows = samples, columns = features). Got {array.ndim}-D {name} of shape "
            f"{array.shape} from {describe_source(source)}. Reshape it to (n_samples, n_features)."
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InputError(f"The {name} must have at least 1 row and 1 column. Got shape {array.shape}.")
    return array.rechunk({0: int(chunk_rows) if chunk_rows else array.chunks[0], 1: -1})


def _to_dask(source: Any, storage_options: StorageOptions, sample_dim: str | None) -> da.Array:
    if isinstance(source, da.Array):
        return source
    if isinstance(source, (str, os.PathLike)):
        return da.from_zarr(open_zarr_array(os.fspath(source), storage_options))
    if _is_dataarray(source):
        dims = list(source.dims)
        dim = dims[0] if sample_dim is None else sample_dim
        if dim not in dims:
            raise InputError(f"sample_dim {sample_dim!r} is not a dimension of the DataArray. Got dims {tuple(dims)}.")
        if len(dims) != 2:
            raise InputError(
                f"Expected a 2-D DataArray (samples x features). Got dims {tuple(dims)}. "
                "Stack the feature dimensions first, e.g. da.stack(feature=[...])."
            )
        data = source.transpose(dim, *[d for d in dims if d != dim]).data
        return data if isinstance(data, da.Array) else da.from_array(np.asarray(data))
    if isinstance(source, np.ndarray) or hasattr(source, "__array__"):
        array = np.asarray(source)
        if array.dtype == object:
            raise InputError("The data must be real numbers. Got an object array; convert it with X.astype('float32').")
        return da.from_array(array)
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


def write_zarr(
    array: da.Array,
    path_or_url: str | os.PathLike,
    storage_options: StorageOptions = None,
    client: Any = None,
    overwrite: bool = False,
) -> str:
    """Compute a lazy dask array (labels, scores) into a zarr array, chunk by chunk.

    A local target is written under a temporary name and published in one
    step, so an interrupted job never leaves a half-written array at
    ``path_or_url`` and a concurrent writer's output is never replaced without
    ``overwrite``. A URL target is written in place (object stores have no rename).

    Raises
    ------
    FileExistsError
        If the target exists and ``overwrite`` is False: checked before any work
        and, for a local target, again atomically when publishing.
    OutputError
        If the local file system is read-only or forbids writing (checked
        before computing), or fills up while writing; the staging copy is removed.
    """
    from ._publish import check_output_location, output_errors, publish, remove_path, staging_path
    from .engine import connect

    target = os.fspath(path_or_url)
    remote = _is_remote(target)
    if remote:
        import fsspec

        fs, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
        if fs.exists(root) and not overwrite:
            raise FileExistsError(f"{target} already exists. Choose another output or pass --overwrite.")
        staging = target
    else:
        local = target[len("file://") :] if target.startswith("file://") else target
        if os.path.exists(local) and not overwrite:
            raise FileExistsError(f"{local} already exists. Choose another output or pass --overwrite.")
        parent = os.path.dirname(os.path.abspath(local))
        if not os.path.isdir(parent):
            raise SourceError(f"Cannot write {local}: directory {parent} does not exist. Create it first.")
        staging = os.fspath(staging_path(os.path.join(parent, os.path.basename(local))))
        check_output_location(local)  # read-only or forbidden: fail before the compute (compressed size unknown)
    try:
        with output_errors(target):
            stored = array.to_zarr(
                staging, storage_options=storage_options if remote else None, overwrite=True, compute=False
            )
            with connect(client) as active:
                if active is None:
                    stored.compute(scheduler="threads")
                else:
                    active.compute(stored).result()
            if not remote:
                publish(staging, local, overwrite)  # never replaces an output that appeared meanwhile
    finally:
        if not remote:
            remove_path(staging)
    return target
