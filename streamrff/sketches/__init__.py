"""Mergeable sketches: one module per sketch kind, each a pure per-chunk kernel and an associative merge.

Every kind is immutable, subclasses :class:`Sketch` (:mod:`.base`: the verbs every kind shares,
``merge``, ``save``, :func:`load`, ``==``) and registers under its ``kind``, so a file's ``kind`` finds
its class once its module is imported (:func:`load` imports them all). Kinds: :mod:`.mean` (count,
feature sums, second moments),
:mod:`.landmark` (the keyed bottom-k row sample), :mod:`.columns` (the per-column part of a mean
sketch), :mod:`.nystrom` (the streaming Nystrom range sketch), :mod:`.regression` (moment sketch plus
target sums), :mod:`.cluster` (one Lloyd step of kernel k-means), :mod:`.twosample` (the one-pass
permutation test) and :mod:`.index` (a nearest-point-set index); :mod:`.moments` is the second-moment
kernel they share. Imports the file formats (the sketch file reader, which :func:`load` hands the
kind's class), the maps, the compiled kernels, the safe-file writer and the foundations. The
names load on first use (PEP 562): describing or merging a sketch file (``streamrff info``,
``merge``) needs neither the other kinds nor scikit-learn.
"""

from __future__ import annotations

from importlib import import_module

from .._base.registry import lazy_names

#: Each public name and the module that defines it.
_HOMES = {
    "ChunkJob": "base", "MappedSketch": "base", "Sketch": "base", "SumSketch": "base", "load": "base",
    "merge": "base", "ClusterSketch": "cluster", "cluster_sketch_of_chunk": "cluster", "SketchIndex": "index",
    "kernel_distance": "index", "LandmarkSketch": "landmark", "MeanSketch": "mean", "mmd2": "mean",
    "sketch_array": "mean", "NystromSketch": "nystrom", "NystromRegressionSketch": "regression",
    "RegressionSketch": "regression", "regression_sketch_array": "regression", "TwoSampleSketch": "twosample",
}  # fmt: skip
#: The modules of the sketch kinds: importing them registers every kind.
KIND_MODULES = ("cluster", "index", "landmark", "mean", "nystrom", "regression", "twosample")
#: The kinds they register (the ``kind`` of a sketch file), known without importing them.
KIND_NAMES = ("cluster", "index", "landmark", "mean", "nystrom", "nystrom-regression", "regression", "twosample")

__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_names(__name__, _HOMES)


def register_kinds() -> None:
    """Import every kind's module, so that ``Sketch._registry`` names them all."""
    for module in KIND_MODULES:
        import_module(f".{module}", __name__)
