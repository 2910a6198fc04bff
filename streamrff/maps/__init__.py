"""Oblivious, seeded feature maps for the Gaussian kernel, one module per family.

A fitted map is fully described by its JSON-able :attr:`FeatureMap.spec`; the
random parameters are regenerated from the spec wherever the map is used, so
the same spec gives the same map on every worker and every machine, and a
pickled map (as Dask ships it) carries only the spec.

- :mod:`~streamrff.maps.base`: :class:`FeatureMap`, the spec registry behind
  :func:`map_from_spec`, fingerprints, :func:`tile_column_sums` and
  :func:`exact_kernel`;
- :mod:`~streamrff.maps.fourier`: :class:`RFF` and ``FourierFeatureMap``, the base it shares with
  :mod:`~streamrff.maps.relative`: :class:`RelativeErrorRFF`;
- :mod:`~streamrff.maps.structured`: the SORF frequencies of ``RFF(structured=True)``;
- :mod:`~streamrff.maps.jl`: :class:`JL`, a Gaussian projection after another map;
- :mod:`~streamrff.maps.kjl`: :class:`KJL`, the landmark-fitted Kernel-JL sketch;
- :mod:`~streamrff.maps.nufft`: a chunk's kernel-mean sums as one non-uniform FFT (d <= 3).

The names are loaded on first use (PEP 562), and :func:`map_from_spec` loads every map kind, so
:mod:`~streamrff.maps.params` (the spec's random parameters and the fingerprint, without the
estimators) is read without importing scikit-learn. The maps layer imports only the compiled
kernels (:mod:`streamrff._kernels`, inside functions: numba loads on first use) and the
foundations.

Convention (see DESIGN.md): ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` with
``sigma = bandwidth``.
"""

from __future__ import annotations

from .._base.registry import lazy_names

#: Each public name and the module that defines it, loaded on first use (PEP 562): the estimators import
#: scikit-learn, which a command that only reads a sketch file does not need.
_HOMES = {
    "FeatureMap": "base", "exact_kernel": "base", "map_from_spec": "base", "spec_bandwidth": "base",
    "tile_column_sums": "base", "RFF": "fourier", "JL": "jl", "KJL": "kjl", "RelativeErrorRFF": "relative",
    "RELATIVE_RFF_VARIANCE_LIMIT": "relative",
}  # fmt: skip

# RelativeErrorRFF is documented as streamrff.RelativeErrorRFF; the other names outside __all__ are internal.
__all__ = ["FeatureMap", "RFF", "JL", "KJL", "exact_kernel", "map_from_spec", "spec_bandwidth"]


__getattr__, __dir__ = lazy_names(__name__, _HOMES)
