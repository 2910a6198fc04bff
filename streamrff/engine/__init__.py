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

from .._base.registry import lazy_names

#: Each public name and the module that defines it. Loaded on first use (PEP 562), so importing
#: :mod:`.options` (what the command line needs for every command) costs no scikit-learn, scipy or
#: numba import.
_HOMES = {
    "connect": "connection", "compute": "run", "read_chunks_in_order": "run", "run_chunks": "run", "fit_map": "fitting",
    "fit_map_and_sample": "fitting", "landmark_sample": "fitting", "nystrom_sketch": "jobs",
    "open_job_source": "jobs", "run_row_pass": "jobs", "run_sketch": "jobs", "sketch": "jobs", "write_zarr": "jobs",
    "JOB_OPTIONS": "options", "JobOptions": "options", "current_job_options": "options", "job_options": "options",
    "worker_storage_options": "options", "auto_chunk_rows": "tasks", "memory_per_thread": "tasks",
    "plan_chunks": "tasks",
}  # fmt: skip

__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_names(__name__, _HOMES)
