"""streamrff: mergeable kernel-space sketches of out-of-core data on Dask.

>>> import streamrff as srf
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - the names below, for type checkers and IDEs
    from .drift import DriftMonitor, DriftUpdate, load_monitor
    from .engine import JobOptions, fit_map, job_options, nystrom_sketch, sketch
    from .errors import (
        BiasWarning,
        CheckpointMismatchError,
        ClusterError,
        InputError,
        MapFormatError,
        ModelFormatError,
        ModelSignatureError,
        NotFittedMapError,
        OutputError,
        SketchBeingWrittenError,
        SketchFormatError,
        SketchFormatWarning,
        SketchMismatchError,
        SketchSignatureError,
        SourceChangedError,
        SourceError,
        StateLockedError,
        StreamRFFError,
        VarianceWarning,
    )
    from .formats import load_map, read_signing_key, save_map
    from .kmeans import KernelKMeans
    from .kpca import KernelPCA
    from .maps import JL, KJL, RFF, FeatureMap, RelativeErrorRFF, exact_kernel, map_from_spec
    from .ridge import KernelRidge, KernelRidgeClassifier, load_model, ridge_gcv, save_model
    from .sketches import (
        ClusterSketch,
        LandmarkSketch,
        MeanSketch,
        NystromRegressionSketch,
        NystromSketch,
        RegressionSketch,
        Sketch,
        SketchIndex,
        TwoSampleSketch,
        kernel_distance,
        load,
        merge,
        mmd2,
        regression_sketch_array,
        sketch_array,
    )
    from .sources import RowSource, open_source
    from .store import SketchStore
    from .twosample import (
        AggregatedTwoSampleResult,
        CombinedEvidence,
        MarginalTestResult,
        SequentialTest,
        TwoSampleResult,
        Witness,
        combine_evidence,
        explain,
        marginal_tests,
        mmd_test,
        permutation_indices,
        permutation_test,
        two_sample_test,
        witness,
    )  # fmt: skip


#: Where each public name lives (imported on first use, see _load_public_api).
_LOCATIONS = {
    "drift": ("DriftMonitor", "DriftUpdate", "load_monitor"),
    "engine": ("sketch", "fit_map", "nystrom_sketch", "job_options", "JobOptions"),
    "errors": (
        "BiasWarning", "CheckpointMismatchError", "ClusterError", "InputError", "MapFormatError", "ModelFormatError",
        "ModelSignatureError", "NotFittedMapError", "OutputError", "SketchBeingWrittenError", "SketchFormatError",
        "SketchFormatWarning", "SketchMismatchError", "SketchSignatureError", "SourceChangedError", "SourceError",
        "StateLockedError", "StreamRFFError", "VarianceWarning",
    ),
    "formats": ("read_signing_key", "load_map", "save_map"),
    "sources": ("open_source", "RowSource"),
    "store": ("SketchStore",),
    "kmeans": ("KernelKMeans",),
    "kpca": ("KernelPCA",),
    "maps": ("JL", "KJL", "RFF", "FeatureMap", "RelativeErrorRFF", "exact_kernel", "map_from_spec"),
    "ridge": ("KernelRidge", "KernelRidgeClassifier", "ridge_gcv", "load_model", "save_model"),
    "sketches": (
        "ClusterSketch", "LandmarkSketch", "MeanSketch", "NystromSketch", "NystromRegressionSketch", "RegressionSketch",
        "Sketch", "SketchIndex", "TwoSampleSketch", "kernel_distance", "load", "merge", "mmd2",
        "regression_sketch_array", "sketch_array",
    ),
    "twosample": (
        "AggregatedTwoSampleResult", "TwoSampleResult", "mmd_test", "permutation_indices",
        "permutation_test", "two_sample_test", "witness", "Witness", "marginal_tests", "MarginalTestResult", "explain",
        "SequentialTest", "CombinedEvidence", "combine_evidence",
    ),
}  # fmt: skip


def _load_public_api() -> None:
    """Import every public name (and so every module that registers a sketch kind or map) at once.

    Deferred to the first attribute access (PEP 562) so that ``streamrff --help``,
    which imports this package before ``streamrff.cli``, does not pay for numba,
    dask and zarr. ``import streamrff as srf; srf.RFF`` works exactly as before.
    """
    from importlib import import_module

    namespace = globals()
    for module_name, names in _LOCATIONS.items():
        module = import_module(f"{__name__}.{module_name}")
        for name in names:
            namespace[name] = getattr(module, name)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("streamrff")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()["__version__"] = value = _version()
        return value
    if not name.startswith("_"):
        # A public name, or a submodule that the eager import used to bind (streamrff.maps, .io, ...).
        # Not for private names: ``from . import _sincos`` asks for one before importing the submodule,
        # and loading the public API from there would import the half-initialised importer again.
        _load_public_api()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'streamrff' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})


__all__ = [
    "explain",
    "witness",
    "Witness",
    "marginal_tests",
    "MarginalTestResult",
    "RFF",
    "JL",
    "KJL",
    "RelativeErrorRFF",
    "KernelPCA",
    "KernelKMeans",
    "KernelRidge",
    "KernelRidgeClassifier",
    "ridge_gcv",
    "ClusterSketch",
    "kernel_distance",
    "SketchIndex",
    "FeatureMap",
    "exact_kernel",
    "map_from_spec",
    "Sketch",
    "MeanSketch",
    "LandmarkSketch",
    "NystromSketch",
    "RegressionSketch",
    "NystromRegressionSketch",
    "regression_sketch_array",
    "nystrom_sketch",
    "merge",
    "mmd2",
    "sketch_array",
    "sketch",
    "fit_map",
    "job_options",
    "JobOptions",
    "open_source",
    "RowSource",
    "load",
    "save_map",
    "load_map",
    "save_model",
    "load_model",
    "StreamRFFError",
    "InputError",
    "CheckpointMismatchError",
    "NotFittedMapError",
    "SketchMismatchError",
    "SketchFormatError",
    "MapFormatError",
    "ModelFormatError",
    "ModelSignatureError",
    "SourceError",
    "SourceChangedError",
    "StateLockedError",
    "OutputError",
    "SketchSignatureError",
    "SketchBeingWrittenError",
    "read_signing_key",
    "ClusterError",
    "VarianceWarning",
    "BiasWarning",
    "SketchFormatWarning",
    "TwoSampleSketch",
    "TwoSampleResult",
    "AggregatedTwoSampleResult",
    "two_sample_test",
    "mmd_test",
    "permutation_test",
    "permutation_indices",
    "SequentialTest",
    "CombinedEvidence",
    "combine_evidence",
    "DriftMonitor",
    "DriftUpdate",
    "load_monitor",
    "SketchStore",
]
