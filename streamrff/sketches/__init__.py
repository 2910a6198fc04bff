"""Mergeable sketches: one module per sketch kind, each a pure per-chunk kernel and an associative merge.

Every kind is immutable, subclasses :class:`Sketch` (:mod:`.base`: the verbs every kind shares,
``merge``, ``save``, :func:`load`, ``==``) and registers under its ``kind``, so a file's ``kind`` finds
its class once this package is imported. Kinds: :mod:`.mean` (count, feature sums, second moments),
:mod:`.landmark` (the keyed bottom-k row sample), :mod:`.columns` (the per-column part of a mean
sketch), :mod:`.nystrom` (the streaming Nystrom range sketch), :mod:`.regression` (moment sketch plus
target sums), :mod:`.cluster` (one Lloyd step of kernel k-means), :mod:`.twosample` (the one-pass
permutation test) and :mod:`.index` (a nearest-point-set index); :mod:`.moments` is the second-moment
kernel they share. Imports the file formats (the sketch file reader, which :func:`load` hands the
kind's class), the maps, the compiled kernels, the safe-file writer and the foundations.
"""

from __future__ import annotations

from .base import ChunkJob, MappedSketch, Sketch, SumSketch, load, merge
from .cluster import ClusterSketch, cluster_sketch_of_chunk
from .index import SketchIndex, kernel_distance
from .landmark import LandmarkSketch
from .mean import MeanSketch, mmd2, sketch_array
from .nystrom import NystromSketch
from .regression import NystromRegressionSketch, RegressionSketch, regression_sketch_array
from .twosample import TwoSampleSketch

__all__ = [
    "ChunkJob", "ClusterSketch", "LandmarkSketch", "MappedSketch", "MeanSketch", "NystromRegressionSketch",
    "NystromSketch",
    "RegressionSketch", "Sketch", "SketchIndex", "SumSketch", "TwoSampleSketch", "cluster_sketch_of_chunk",
    "kernel_distance", "load", "merge", "mmd2", "regression_sketch_array", "sketch_array",
]
