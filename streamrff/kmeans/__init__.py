"""Kernel k-means of out-of-core data: Lloyd iterations in feature space, one pass per iteration.

A feature map (RFF, or K-JL as in Kpotufe & Sriperumbudur sec. 5.2) is fitted
once on the seeded row sample; candidate starts (spectral and k-means++) are
refined by Lloyd iterations on the embedded sample and the best one starts the
full-data passes; then every Lloyd iteration is one pass over the data that
builds a mergeable :class:`ClusterSketch` (per-cluster counts and feature
sums, inertia, moved rows) from pure per-chunk kernels, tree-merged by the
engine. New centres are ``sums / counts``.

A chunk is scored against the centres by float32 dot products (compiled
register blocks for RFF maps up to 24 centres, BLAS otherwise), with the rows that
float32 rounding could send elsewhere rescored in float64, so labels and
counts are those of float64 arithmetic; cluster sums are float32 per row tile
and float64 across tiles. Partials merge in a tree fixed by the chunk order:
the same seed gives bit-identical centres however many workers run, and
centres equal to float32 rounding of the tile sums (rel 1e-6; the same labels
in practice) whatever the chunking.

Modules: :mod:`~streamrff.sketches.cluster` (:class:`ClusterSketch`, its chunk
kernel :func:`cluster_sketch_of_chunk`, the float32 nearest-centre scores with
float64 rescoring, and the labels of rows), :mod:`streamrff._kernels.lloyd` (the
compiled Lloyd step of RFF maps), :mod:`~streamrff.kmeans.initialization`
(spectral starts, Lloyd on the init sample, the exact kernel k-means objective
that ranks the candidates) and
:mod:`~streamrff.kmeans.estimator` (:class:`KernelKMeans` and
:class:`LloydIteration`). Everything is importable from ``streamrff.kmeans``. An
analysis: it imports the engine, the sketches, the maps and the layers below, never a surface.
"""

from __future__ import annotations

from ..sketches.cluster import ClusterSketch, cluster_sketch_of_chunk
from . import estimator
from .estimator import KernelKMeans, LloydIteration

__all__ = ["ClusterSketch", "KernelKMeans", "LloydIteration", "cluster_sketch_of_chunk"]

# Every module of the package logs to "streamrff.kmeans".
logger = estimator.logger
