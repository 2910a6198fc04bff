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

Importing this package registers every map kind with :func:`map_from_spec`. The maps layer imports
only the compiled kernels (:mod:`streamrff._kernels`, inside functions: numba loads on first use)
and the foundations.

Convention (see DESIGN.md): ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` with
``sigma = bandwidth``.
"""

from __future__ import annotations

from .base import FeatureMap, exact_kernel, map_from_spec, spec_bandwidth
from .base import tile_column_sums as tile_column_sums
from .fourier import RFF
from .jl import JL
from .kjl import KJL
from .relative import RELATIVE_RFF_VARIANCE_LIMIT as RELATIVE_RFF_VARIANCE_LIMIT
from .relative import RelativeErrorRFF as RelativeErrorRFF

# As before the split. The names re-exported above by an alias are imported from here but stay outside
# __all__: RelativeErrorRFF is documented as streamrff.RelativeErrorRFF, the others are internal.
__all__ = ["FeatureMap", "RFF", "JL", "KJL", "exact_kernel", "map_from_spec", "spec_bandwidth"]
