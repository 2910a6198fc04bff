"""The sketch store: a stream kept as buckets of mean sketches; any range one merge, any two ranges tested.

:mod:`.buckets` holds :class:`SketchStore` (create, open, append through the engine, ranges and
complements, merging stores bucket by bucket); :mod:`.records` record I/O and the O(log n) dyadic
layout; :mod:`.moments` second moments per coarse block; :mod:`.permutation` the bucket permutation
test between two ranges and the series of windows against a reference.
The file format is :mod:`streamrff.formats.store`. An analysis room: it imports the engine, the
sketch kinds, the formats and the layers below, never a surface.
"""

from __future__ import annotations

from .buckets import SketchStore
from .digest import rows_digest
from .permutation import StoreSeries

__all__ = ["SketchStore", "StoreSeries", "rows_digest"]
