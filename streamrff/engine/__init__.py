"""The Dask engine: run a sketch kind's chunk kernel over a source's planned chunks and tree-merge the partials.

:mod:`.jobs` holds the jobs (:func:`sketch`, :func:`nystrom_sketch`) and :func:`run_chunks`,
:mod:`.tasks` groups chunks into tasks, :mod:`.checkpoint` keeps per-chunk partials tied to their
source, :mod:`.connection` talks to a scheduler. Imports the sources, the sketches, the maps and the
layers below; never an analysis or a surface.
"""

from __future__ import annotations

from .connection import connect
from .jobs import auto_chunk_rows, fit_map, landmark_sample, nystrom_sketch, run_chunks, sketch, write_zarr

__all__ = [
    "auto_chunk_rows", "connect", "fit_map", "landmark_sample", "nystrom_sketch", "run_chunks", "sketch", "write_zarr",
]
