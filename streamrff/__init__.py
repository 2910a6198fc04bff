"""streamrff: mergeable kernel-space sketches of out-of-core data on Dask.

>>> import streamrff as srf
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .engine import sketch
from .errors import (
    ClusterError,
    InputError,
    NotFittedMapError,
    SketchFormatError,
    SketchMismatchError,
    SourceError,
    StreamRFFError,
    VarianceWarning,
)
from .fileformat import load
from .kmeans import ClusterSketch, KernelKMeans
from .kpca import KernelPCA
from .maps import JL, KJL, RFF, FeatureMap, RelativeErrorRFF, exact_kernel, map_from_spec
from .pointsets import SketchIndex, kernel_distance
from .sketches import LandmarkSketch, MeanSketch, Sketch, merge, mmd2, sketch_array
from .twosample import (
    AggregatedTwoSampleResult,
    TwoSampleResult,
    TwoSampleSketch,
    mmd_test,
    permutation_indices,
    permutation_test,
    two_sample_test,
)

try:
    __version__ = version("streamrff")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "RFF",
    "JL",
    "KJL",
    "RelativeErrorRFF",
    "KernelPCA",
    "KernelKMeans",
    "ClusterSketch",
    "kernel_distance",
    "SketchIndex",
    "FeatureMap",
    "exact_kernel",
    "map_from_spec",
    "Sketch",
    "MeanSketch",
    "LandmarkSketch",
    "merge",
    "mmd2",
    "sketch_array",
    "sketch",
    "load",
    "StreamRFFError",
    "InputError",
    "NotFittedMapError",
    "SketchMismatchError",
    "SketchFormatError",
    "SourceError",
    "ClusterError",
    "VarianceWarning",
    "TwoSampleSketch",
    "TwoSampleResult",
    "AggregatedTwoSampleResult",
    "two_sample_test",
    "mmd_test",
    "permutation_test",
    "permutation_indices",
]
