"""Plumbing shared by the estimators (:class:`~streamrff.KernelPCA`, :class:`~streamrff.KernelKMeans`,
:class:`~streamrff.KernelRidge`): the map an estimator builds from its parameters, and the sketch
that ``fit_from_sketch`` takes as an object or as the path of a saved one."""

from __future__ import annotations

from typing import Any

from .errors import InputError
from .fileformat import load
from .maps import KJL, RFF, FeatureMap
from .sketches import Sketch
from .typing import Seed, StorageOptions


def initial_feature_map(
    method: str, n_features: int, bandwidth: float | str, seed: Seed, n_landmarks: int | None = None
) -> FeatureMap:
    """The unfitted map of an estimator's parameters: ``RFF(n_features)``, or ``KJL`` for ``method="kjl"``.

    Examples
    --------
    >>> initial_feature_map("kjl", 16, 2.0, 0, n_landmarks=50)
    KJL(bandwidth=2.0, n_components=16, n_landmarks=50)
    """
    if method == "kjl":
        return KJL(n_landmarks=n_landmarks, n_components=n_features, bandwidth=bandwidth, seed=seed)
    return RFF(n_features=n_features, bandwidth=bandwidth, seed=seed)


def sketch_or_load(
    sketch: Any, kinds: tuple[type[Sketch], ...], storage_options: StorageOptions, takes: str, needs: str
) -> Any:
    """``sketch`` itself when it is one of ``kinds``, else the sketch saved at the path or URL ``sketch``.

    ``takes`` says what ``fit_from_sketch`` takes, ``needs`` which kinds the estimator needs; each
    names the fix in the InputError raised for another object or another kind of saved sketch.

    Examples
    --------
    >>> from streamrff.sketches import MeanSketch
    >>> sketch_or_load(3, (MeanSketch,), None, "a MeanSketch or the path/URL of a saved one", "A mean sketch")
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: fit_from_sketch takes a MeanSketch or the path/URL of a saved one. Got int.
    """
    if isinstance(sketch, kinds):
        return sketch
    if not isinstance(sketch, (str, bytes)) and not hasattr(sketch, "__fspath__"):
        raise InputError(f"fit_from_sketch takes {takes}. Got {type(sketch).__name__}.")
    loaded = load(sketch, storage_options=storage_options)
    if not isinstance(loaded, kinds):
        raise InputError(f"{needs}. Got a {loaded.kind!r} sketch.")
    return loaded
