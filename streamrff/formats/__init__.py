"""File formats: sketch, map and drift-monitor files, each a reader and a writer side by side. No pickle.

:mod:`.sketch` reads and writes sketch files (zarr groups; the writer's signed-group machinery is
:mod:`streamrff._files.signed`), :mod:`.map` map files (JSON, or the map of a sketch file) and
:mod:`.monitor` drift monitor states. They import the maps and the layers below, never the sketch
kinds, the sources, the engine or an analysis: the sketch reader checks a file and leaves building
its sketch to a function its caller passes in (:func:`streamrff.load`, in :mod:`streamrff.sketches`).
The ridge model file is the ridge estimator's own (:mod:`streamrff.ridge.modelfile`).
"""

from __future__ import annotations

from .map import load_map, save_map
from .sketch import read_signing_key

__all__ = ["load_map", "read_signing_key", "save_map"]
