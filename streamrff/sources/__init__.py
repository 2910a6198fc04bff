"""Sources: numpy, dask, xarray and zarr arrays (local or any fsspec URL), opened once into a :class:`RowSource`.

:mod:`.rows` opens a source and holds its description, chunk plan and identity; :mod:`.chunkread`
reads whole stored zarr chunks straight into a task's rows; :mod:`.frames` reads tables (DataFrames,
parquet); :mod:`.parquetfolder` follows a parquet dataset that gains files (``watch``'s cursor in it).
Imports only the foundations: never the engine or anything above it.
"""

from __future__ import annotations

from .rows import RowSource, as_row_chunked, open_source, open_sources

__all__ = ["RowSource", "as_row_chunked", "open_source", "open_sources"]
