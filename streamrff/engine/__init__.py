"""The Dask engine: run a sketch kind's chunk kernel over a source's planned chunks and tree-merge the partials.

The engine knows no sketch kind by name: a kind hands it a :class:`~streamrff.sketches.ChunkJob` (a
pure chunk kernel, the class of its partials, a checkpoint key). :mod:`.run` maps a kernel over the
chunks and merges (:func:`run_chunks`) or hands them over in row order
(:func:`read_chunks_in_order`), :mod:`.tasks` plans rows per task and groups chunks into
tasks, :mod:`.jobs` opens a source once and runs a kind's job (:func:`sketch`,
:func:`nystrom_sketch`), :mod:`.fitting` fits maps on the seeded row sample, :mod:`.checkpoint` keeps
per-chunk partials tied to their source, :mod:`.connection` talks to a scheduler and :mod:`.options`
holds the options every job shares (:func:`job_options`). Imports the sources, the sketches, the file
formats, the maps and the layers below; never an analysis or a surface.
"""

from __future__ import annotations

from .connection import connect
from .fitting import fit_map, fit_map_and_sample, landmark_sample
from .jobs import nystrom_sketch, open_job_source, run_row_pass, run_sketch, sketch, write_zarr
from .options import JOB_OPTIONS, JobOptions, current_job_options, job_options
from .run import compute, read_chunks_in_order, run_chunks
from .tasks import auto_chunk_rows, memory_per_thread, plan_chunks

__all__ = [
    "JOB_OPTIONS", "JobOptions", "auto_chunk_rows", "compute", "connect", "current_job_options", "fit_map",
    "fit_map_and_sample", "job_options", "landmark_sample", "memory_per_thread", "nystrom_sketch", "open_job_source",
    "plan_chunks", "read_chunks_in_order", "run_chunks", "run_row_pass", "run_sketch", "sketch", "write_zarr",
]
