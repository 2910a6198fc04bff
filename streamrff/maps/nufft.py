"""Low-dimensional fast path for mean sketches: the kernel-mean sums as one type-3 non-uniform FFT.

For rows in d <= 3 dimensions, every feature sum of a random Fourier feature map
is a value of one exponential sum at the map's frequencies::

    F(w) = sum_i exp(i w . x_i)

``sum_i cos(w . x_i) = Re F(w)`` and ``sum_i sin(w . x_i) = Im F(w)``. A type-3
NUFFT (non-uniform points to non-uniform frequencies; Lee & Greengard 2005)
evaluates ``F`` at all D frequencies in ``O(n w^d + M w^d + G log G)`` work
(``w`` the spreading-kernel width, ``G`` a grid whose size grows with the
data's extent times the frequencies' extent) instead of the direct path's
``O(n D)`` cosines and sines. The FINUFFT library (Barnett, Magland & af
Klinteberg 2019) computes it; it is the optional extra ``streamrff[nufft]``.

Maps served (everything else, and moment sketches, take the direct path):

* :class:`~streamrff.RFF` ``"sincos"`` (``z = m^-1/2 [cos Wx, sin Wx]``):
  ``feature_sum = m^-1/2 [Re F(W), Im F(W)]``; ``||z||^2 = 1`` exactly, so
  ``squared_norm_sum = n``.
* :class:`~streamrff.RFF` ``"cosphase"`` (``z = sqrt(2/D) cos(Wx + b)``):
  ``feature_sum_j = sqrt(2/D) Re(exp(i b_j) F(w_j))`` and, as
  ``cos^2 t = (1 + cos 2t) / 2``, ``sum_i ||z_i||^2 = n + D^-1 sum_j
  Re(exp(2 i b_j) F(2 w_j))``: one transform at the 2D targets ``[W; 2W]``.
* :class:`~streamrff.RelativeErrorRFF` (``z = [a_j cos v_j.x, a_j sin v_j.x]``
  with weights ``a``): ``feature_sum = [a Re F(V), a Im F(V)]`` and
  ``squared_norm_sum = n sum_j a_j^2``.
* Orthogonal frequencies (``RFF(orthogonal=True)``) are just another ``W``, and so are
  structured ones (``RFF(structured=True)``, formed once).

Not served: :class:`~streamrff.JL` after an RFF. Its feature sum would be
cheap (``sum_i P^T z_i = P^T sum_i z_i``), but a mean sketch also needs
``sum_i ||P^T z_i||^2 = sum_i z_i^T P P^T z_i``, a quadratic form in ``z``
that needs ``F`` at all ``m^2`` pairwise sums and differences of frequencies.
K-JL is not a Fourier map.

The sums are computed in float64 from the map's float64 parameters, to
relative accuracy about ``NUFFT_TOLERANCE`` (1e-7) in the 2-norm over the
features. The direct path rounds rows, frequencies and phases to float32, so
it is the less accurate of the two; its error grows with the largest phase
``|w.x|`` (measured: 4e-6 norm-wise at ``max|w.x|`` = 900, against 1e-5 promised).

References
----------
Lee, J.-Y. & Greengard, L. (2005). The type 3 nonuniform FFT and its
applications. J. Comput. Phys. 206(1), 1-5.
Barnett, A. H., Magland, J. & af Klinteberg, L. (2019). A parallel nonuniform
fast Fourier transform library based on an "exponential of semicircle"
kernel. SIAM J. Sci. Comput. 41(5), C479-C504.
Sutherland, D. J. & Schneider, J. (2015). On the error of random Fourier
features. UAI. Eqs. (1) and (2).
Phillips, J. M. & Tai, W. M. (2018). Relative error RKHS embeddings for
Gaussian kernels. Sec. 2.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import numbers
from typing import Any

import numpy as np

from ..errors import InputError
from . import RFF, FeatureMap, RelativeErrorRFF

__all__ = [
    "NUFFT_TOLERANCE",
    "MAX_GRID_BYTES",
    "MAX_DIMENSION",
    "ROWS_PER_CALL",
    "SPEEDUP_MARGIN",
    "NufftCost",
    "nufft_available",
    "nufft_supports",
    "nufft_cost",
    "nufft_applies",
    "nufft_mean_sums",
]

#: Requested FINUFFT precision. Its norm-wise relative error stays near this value even when
#: every sum is incoherent (~sqrt(n)); 1e-6 measured up to 1.5e-6, too close to the 1e-5 promise.
NUFFT_TOLERANCE = 1e-7
#: Largest FFT grids (outer plus upsampled inner, complex128) one call may allocate. Small
#: bandwidths on wide data need grids that grow like (extent / bandwidth)^d: those take the
#: direct path, whose memory does not depend on the data's extent.
MAX_GRID_BYTES = 256 * 2**20
#: Rows per single-threaded FINUFFT call: it needs about 80 bytes per row (2-D: float64
#: coordinates, complex strengths, its sorted and rescaled copies), so longer chunks are
#: transformed in slices and the extra memory stays near 8 MB whatever the chunk size. Slices of
#: 1e5 rows ran 1.2x faster per row than slices of 1e6 (1e7 rows, d = 2, D = 4096: 0.86 s against
#: 1.04 s; FINUFFT's sorted points and grids stay in cache).
ROWS_PER_CALL = 100_000
#: Rows per thread of a multi-threaded call (``nthreads > 1``), whose OpenMP start-up wants longer
#: slices: 2 threads on 1e7 rows took 0.69 s in slices of 2e6 rows, 0.93 s in slices of 2e5.
_THREADED_CALL_ROWS_PER_THREAD = 1_000_000
#: FINUFFT transforms points in 1, 2 or 3 dimensions.
MAX_DIMENSION = 3
#: The NUFFT is used only when the cost model predicts it at least this many times faster:
#: the model is within about 2x of measured times, so near the crossover the direct path stays.
SPEEDUP_MARGIN = 2.0

# Cost model, in seconds on one core (fitted by `python benchmarks/bench_nufft.py --calibrate`
# on the project's 2-core x86-64 machine, finufft 2.5.1, numpy 2.4, tolerance 1e-7). The model
# is within 0.5-1.5x of measured times over d = 1..3, n = 2e4..1e6, 512/4096 targets and grids
# up to 256 MiB (re-runs on the shared machine varied by as much). Only the ratio of the two
# predictions decides, and both paths slow down alike on a slower or busier machine.
#: Direct path: float32 projection, cos/sin and sums (RFF's compiled kernel), per row and feature
#: (the fastest measured, sincos with d = 2: 3.7e-10 s with the compiled sin/cos kernel, 5.3e-10 s
#: with numpy's, 1.5e-9 s before the fused kernel; cosphase and RelativeErrorRFF cost more).
_DIRECT_SECONDS_PER_FEATURE = 3.7e-10
#: NUFFT: per row (sorting, rescaling, phases), per spread/interpolated kernel cell (by d),
#: per FFT grid point and log2 of the grid, and per call.
_NUFFT_SECONDS_PER_ROW = 3.9e-8
_NUFFT_SECONDS_PER_CELL = {1: 2.0e-9, 2: 5.7e-10, 3: 3.0e-10}
_NUFFT_SECONDS_PER_GRID_LOG = 1.45e-9
_NUFFT_SECONDS_PER_CALL = 1e-4
#: FINUFFT 2.5's spreading-kernel width at tolerance 1e-7 for its two upsampling factors:
#: 2.0 spreads fewer cells, 1.25 has a smaller grid (what wins depends on the extents).
_KERNEL_WIDTH = {2.0: 8, 1.25: 12}
#: Grid sizes per axis beyond which the exact FFT size is not worth computing (1e9 points).
_HUGE_AXIS = 10**9
#: FINUFFT centres an axis only when its centre is off by more than this fraction of its half-width.
_CENTRE_FRACTION = 0.1


@functools.lru_cache(maxsize=1)
def nufft_available() -> bool:
    """Whether the optional dependency finufft is importable (``pip install 'streamrff[nufft]'``).

    Returns
    -------
    bool

    Examples
    --------
    >>> from streamrff.maps.nufft import nufft_available
    >>> nufft_available()
    True
    """
    try:
        importlib.import_module("finufft")
    except ImportError:  # also raised when its shared library fails to load
        return False
    return True


def _import_finufft() -> Any:
    try:
        import finufft
    except ImportError as error:
        raise ImportError(
            "The NUFFT fast path needs the optional dependency finufft. Install it with "
            "pip install 'streamrff[nufft]', or use streamrff.sketches.mean.mean_sketch_of_chunk (the direct path)."
        ) from error
    return finufft


def nufft_supports(feature_map: FeatureMap) -> bool:
    """Whether ``feature_map`` is a fitted map whose mean sums the NUFFT computes.

    True for fitted :class:`~streamrff.RFF` (either variant, orthogonal or not)
    and :class:`~streamrff.RelativeErrorRFF` maps on at most 3 input
    dimensions; False for every other map (JL, K-JL, unfitted maps), whether
    or not finufft is installed.

    Parameters
    ----------
    feature_map : FeatureMap

    Returns
    -------
    bool
        True when :func:`nufft_mean_sums` can sketch with this map.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.maps.nufft import nufft_supports
    >>> X = np.zeros((1, 2))
    >>> nufft_supports(srf.RFF(64, bandwidth=1.0).fit(X)), nufft_supports(srf.JL(srf.RFF(64, bandwidth=1.0), 8).fit(X))
    (True, False)
    """
    return (
        isinstance(feature_map, (RFF, RelativeErrorRFF))
        and feature_map.is_fitted()
        and 1 <= feature_map.n_features_in_ <= MAX_DIMENSION
        and "categorical" not in feature_map.spec  # the sign hashes are no Fourier transform of the rows
    )


def _targets(feature_map: FeatureMap) -> np.ndarray:
    """The (M, d) float64 frequencies at which ``F`` is needed: W, or [W; 2W] for cosphase."""
    frequencies = feature_map._frequencies()  # formed once per process for a structured RFF
    if isinstance(feature_map, RFF) and feature_map.variant == "cosphase":
        return np.concatenate([frequencies, 2.0 * frequencies])
    return frequencies


def _sums_from_transform(feature_map: FeatureMap, transform: np.ndarray, n_rows: int) -> tuple[np.ndarray, float]:
    """``feature_sum`` and ``squared_norm_sum`` from ``F`` at :func:`_targets` (module docstring)."""
    params = feature_map._params()
    if isinstance(feature_map, RelativeErrorRFF):
        weights = params["weights"]
        feature_sum = np.concatenate([weights * transform.real, weights * transform.imag])
        return feature_sum, float(n_rows * (weights @ weights))
    if feature_map.variant == "sincos":
        scale = 1.0 / math.sqrt(transform.shape[0])
        return np.concatenate([transform.real, transform.imag]) * scale, float(n_rows)
    n_features = params["phases"].shape[0]
    phases = np.exp(1j * params["phases"])
    feature_sum = math.sqrt(2.0 / n_features) * (phases * transform[:n_features]).real
    double_angle = float((phases * phases * transform[n_features:]).real.sum())
    return feature_sum, float(n_rows + double_angle / n_features)


@dataclasses.dataclass(frozen=True)
class NufftCost:
    """Predicted cost of one chunk's mean sums by the NUFFT and by the direct path.

    Attributes
    ----------
    upsampfac : float
        FINUFFT upsampling factor to use (2.0 or 1.25, the cheaper one whose grid fits).
    grid_shape : tuple of int
        Shape of FINUFFT's largest (upsampled inner) FFT grid.
    grid_bytes : int
        Bytes of its outer and inner complex128 grids.
    nufft_seconds : float
        Predicted single-thread time of :func:`nufft_mean_sums`.
    direct_seconds : float
        Predicted single-thread time of the direct path (``mean_sketch_of_chunk``).
    """

    upsampfac: float
    grid_shape: tuple[int, ...]
    grid_bytes: int
    nufft_seconds: float
    direct_seconds: float

    @property
    def speedup(self) -> float:
        """Predicted ``direct_seconds / nufft_seconds``."""
        return self.direct_seconds / self.nufft_seconds


def _next_235_even(n: int) -> int:
    """Smallest even integer >= n whose only prime factors are 2, 3 and 5 (FINUFFT's FFT sizes)."""
    n = max(2, n + (n % 2))
    while True:
        rest = n
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            return n
        n += 2


def _half_width(low: float, high: float) -> float:
    """FINUFFT's half-width of an axis: it re-centres only axes clearly off the origin."""
    half, centre = (high - low) / 2.0, (high + low) / 2.0
    return half + abs(centre) if abs(centre) < _CENTRE_FRACTION * half else half


def _grid_sizes(half_x: float, half_s: float, upsampfac: float, width: int) -> tuple[int, int]:
    """Outer and upsampled inner grid sizes of one axis of a FINUFFT type-3 plan (its set_nhg_type3)."""
    if half_x == 0.0:
        half_x, half_s = (1.0, 1.0) if half_s == 0.0 else (1.0 / half_s, half_s)
    else:
        half_s = max(half_s, 1.0 / half_x)
    outer = max(2.0 * upsampfac * half_s * half_x / math.pi + width + 1, 2 * width)
    if outer * upsampfac > _HUGE_AXIS:  # far beyond any memory: skip the 2-3-5 search
        return _HUGE_AXIS, _HUGE_AXIS
    outer = _next_235_even(int(outer))
    return outer, _next_235_even(max(int(upsampfac * outer), 2 * width))


def _extents(values: np.ndarray) -> np.ndarray:
    """Per-axis half-widths of an (n, d) array; NaN or inf when it holds non-finite values."""
    # Reduced along rows of the transposed copy: numpy's reduction of an (n, d <= 3) array over
    # axis 0 took 33 ms per 1e6 rows, the copy and its reduction 1.4 ms.
    columns = np.ascontiguousarray(values.T)
    lows, highs = columns.min(axis=1), columns.max(axis=1)
    return np.array([_half_width(float(low), float(high)) for low, high in zip(lows, highs)])


def _finite_extents(rows: np.ndarray) -> np.ndarray:
    """:func:`_extents` of trusted rows, or InputError if they hold NaN or inf (FINUFFT would misbehave)."""
    half_x = _extents(rows)
    if not np.isfinite(half_x).all():
        raise InputError("rows must contain only finite values. Got NaN or inf; drop or impute those rows.")
    return half_x


def _cost(n_rows: int, half_x: np.ndarray, targets: np.ndarray, n_features: int) -> NufftCost:
    """Cost of ``n_rows`` rows with finite per-axis half-widths ``half_x`` at ``targets``."""
    d = half_x.shape[0]
    half_s = _extents(targets)
    options = []
    for upsampfac, width in _KERNEL_WIDTH.items():
        sizes = [_grid_sizes(float(x), float(s), upsampfac, width) for x, s in zip(half_x, half_s)]
        outer = math.prod(size for size, _ in sizes)
        inner_shape = tuple(size for _, size in sizes)
        inner = math.prod(inner_shape)
        n_calls = -(-n_rows // ROWS_PER_CALL)
        seconds = (
            n_rows * (_NUFFT_SECONDS_PER_ROW + _NUFFT_SECONDS_PER_CELL[d] * width**d)
            + n_calls * _NUFFT_SECONDS_PER_CELL[d] * targets.shape[0] * width**d
            + n_calls * (_NUFFT_SECONDS_PER_CALL + _NUFFT_SECONDS_PER_GRID_LOG * inner * math.log2(inner))
        )
        options.append((16 * (outer + inner) > MAX_GRID_BYTES, seconds, upsampfac, inner_shape, 16 * (outer + inner)))
    too_big, seconds, upsampfac, inner_shape, grid_bytes = min(options)
    if too_big:  # neither fits: report the smaller grid, which nufft_mean_sums then refuses
        too_big, seconds, upsampfac, inner_shape, grid_bytes = min(options, key=lambda option: option[4])
    return NufftCost(upsampfac, inner_shape, grid_bytes, seconds, _DIRECT_SECONDS_PER_FEATURE * n_rows * n_features)


def _check_map(feature_map: Any, caller: str) -> None:
    if not isinstance(feature_map, FeatureMap):
        raise InputError(f"{caller} needs a streamrff FeatureMap such as RFF(). Got {type(feature_map).__name__}.")
    feature_map._check_fitted()
    if not nufft_supports(feature_map):
        if isinstance(feature_map, (RFF, RelativeErrorRFF)):
            problem = f"an {type(feature_map).__name__} on {feature_map.n_features_in_} input dimensions"
        else:
            problem = f"a {type(feature_map).__name__} map"
        raise InputError(
            f"{caller} needs an RFF or RelativeErrorRFF map on at most {MAX_DIMENSION} input dimensions. "
            f"Got {problem}; use streamrff.sketches.mean.mean_sketch_of_chunk (the direct path), or check "
            "nufft_applies() first."
        )


def _check_rows(rows: Any, feature_map: FeatureMap, caller: str) -> np.ndarray:
    if not isinstance(rows, np.ndarray) or rows.ndim != 2 or rows.dtype.kind != "f":
        raise InputError(
            f"{caller} needs rows as a 2-D float32 or float64 numpy array. Got "
            f"{type(rows).__name__} {getattr(rows, 'shape', '')} {getattr(rows, 'dtype', '')}."
        )
    if rows.shape[1] != feature_map.n_features_in_:
        raise InputError(
            f"rows have {rows.shape[1]} columns, but the {type(feature_map).__name__} expects "
            f"{feature_map.n_features_in_}. Pass rows with {feature_map.n_features_in_} columns."
        )
    return rows


def nufft_cost(feature_map: FeatureMap, rows: np.ndarray) -> NufftCost:
    """Predict the cost of :func:`nufft_mean_sums` and of the direct path on ``rows``.

    The grid of a type-3 NUFFT grows with the product of the rows' extent and
    the frequencies' extent along each axis (about ``2.5 X S / pi`` points per
    axis at upsampling 1.25, ``4 X S / pi`` at 2, for half-widths X and S), so
    a small bandwidth on widely spread rows makes it large; the spreading cost
    grows with ``n w^d``. The direct path costs ``n D`` cosines.

    Parameters
    ----------
    feature_map : FeatureMap
        A map for which :func:`nufft_supports` is True.
    rows : ndarray of shape (n, d)
        The rows to sketch (float32 or float64).

    Returns
    -------
    NufftCost

    Raises
    ------
    InputError
        If the map is not supported, or ``rows`` is not a 2-D float array of the map's width.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.maps.nufft import nufft_cost
    >>> X = np.random.default_rng(0).normal(size=(100_000, 2))
    >>> cost = nufft_cost(srf.RFF(4096, bandwidth=1.0).fit(X), X)
    >>> cost.speedup > 10, cost.grid_bytes < 2**20
    (True, True)
    """
    _check_map(feature_map, "nufft_cost")
    rows = _check_rows(rows, feature_map, "nufft_cost")
    if rows.shape[0] == 0:
        raise InputError("nufft_cost needs at least 1 row. Got 0.")
    return _cost(rows.shape[0], _finite_extents(rows), _targets(feature_map), feature_map.n_features_out_)


def nufft_applies(feature_map: FeatureMap, rows: np.ndarray, *, moments: bool = False) -> bool:
    """Whether :func:`nufft_mean_sums` should replace the direct path for this chunk.

    True only when finufft is installed, the map is supported
    (:func:`nufft_supports`), no second moment is wanted, the rows are a
    non-empty finite 2-D float array of the map's width, FINUFFT's grids fit
    in ``MAX_GRID_BYTES`` and the cost model (:func:`nufft_cost`) predicts the
    NUFFT at least ``SPEEDUP_MARGIN`` (2) times faster. Never raises.

    Parameters
    ----------
    feature_map : FeatureMap
    rows : ndarray of shape (n, d)
        The chunk's trusted rows.
    moments : bool, default=False
        Whether the sketch needs ``sum z z^T``, which the NUFFT does not compute.

    Returns
    -------
    bool
        True to take the NUFFT path for this chunk.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.maps.nufft import nufft_applies
    >>> X = np.random.default_rng(0).normal(size=(100_000, 2)).astype("float32")
    >>> rff = srf.RFF(n_features=2048, bandwidth=1.0).fit(X)
    >>> nufft_applies(rff, X), nufft_applies(rff, X, moments=True), nufft_applies(rff, X[:10])
    (True, False, False)
    """
    if moments or not nufft_available() or not nufft_supports(feature_map):
        return False
    if not isinstance(rows, np.ndarray) or rows.ndim != 2 or rows.dtype.kind != "f" or rows.shape[0] == 0:
        return False
    if rows.shape[1] != feature_map.n_features_in_:
        return False
    half_x = _extents(rows)
    if not np.isfinite(half_x).all():  # NaN or inf rows: leave them to the direct path's checks
        return False
    cost = _cost(rows.shape[0], half_x, _targets(feature_map), feature_map.n_features_out_)
    return cost.grid_bytes <= MAX_GRID_BYTES and cost.nufft_seconds * SPEEDUP_MARGIN <= cost.direct_seconds


def nufft_mean_sums(rows: np.ndarray, feature_map: FeatureMap, *, nthreads: int = 1) -> tuple[np.ndarray, float]:
    """Feature sum and squared-norm sum of a chunk's rows by one type-3 NUFFT (d <= 3).

    Computes what :func:`streamrff.sketches.mean.mean_sketch_of_chunk` accumulates
    without moments - ``feature_sum = sum_i z(x_i)`` and ``squared_norm_sum =
    sum_i ||z(x_i)||^2`` - from ``F(w) = sum_i exp(i w . x_i)`` at the map's
    frequencies (formulas in the module docstring), in float64, to a relative
    2-norm error of about ``NUFFT_TOLERANCE`` (1e-7).

    Parameters
    ----------
    rows : ndarray of shape (n, d), float32 or float64
        Trusted finite rows, d <= 3 (used in float64 as given).
    feature_map : RFF or RelativeErrorRFF
        A fitted map on d input dimensions.
    nthreads : int, default=1
        FINUFFT's OpenMP threads for this call. Keep 1 inside a Dask task (the
        engine already runs one task per core); raise it for one large call.
        FINUFFT releases the GIL, so concurrent calls from threads run in parallel.

    Returns
    -------
    feature_sum : ndarray of shape (D,), float64
    squared_norm_sum : float

    Raises
    ------
    ImportError
        If finufft is not installed (the extra ``streamrff[nufft]``).
    InputError
        If the map is not a fitted RFF/RelativeErrorRFF on at most 3 dimensions,
        ``rows`` is not a 2-D float array of the map's width or holds NaN/inf,
        ``nthreads`` is not a positive integer, or FINUFFT's grids would exceed
        ``MAX_GRID_BYTES`` (a small bandwidth on widely spread rows: use the
        direct path).

    Notes
    -----
    Check :func:`nufft_applies` first: it says whether this is faster than the
    direct path for the chunk at hand.

    Memory: about 80 bytes per row (2-D) for at most ``ROWS_PER_CALL`` rows
    (``nthreads`` million with several threads) at a time - longer chunks are
    transformed in slices whose transforms are added - plus FINUFFT's FFT
    grids (at most ``MAX_GRID_BYTES``).

    References
    ----------
    Lee, J.-Y. & Greengard, L. (2005). The type 3 nonuniform FFT and its
    applications. J. Comput. Phys. 206(1), 1-5.
    Barnett, A. H., Magland, J. & af Klinteberg, L. (2019). A parallel
    nonuniform fast Fourier transform library based on an "exponential of
    semicircle" kernel. SIAM J. Sci. Comput. 41(5), C479-C504.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.maps.nufft import nufft_mean_sums
    >>> from streamrff.sketches.mean import mean_sketch_of_chunk
    >>> X = np.random.default_rng(0).normal(size=(20_000, 2)).astype("float32")
    >>> rff = srf.RFF(n_features=1024, bandwidth=0.5, variant="cosphase").fit(X)
    >>> feature_sum, squared_norm_sum = nufft_mean_sums(X, rff)
    >>> direct = mean_sketch_of_chunk(X, rff)
    >>> error = np.linalg.norm(feature_sum - direct.feature_sum) / np.linalg.norm(direct.feature_sum)
    >>> bool(error < 1e-5), bool(abs(squared_norm_sum - direct.squared_norm_sum) < 1e-5 * direct.squared_norm_sum)
    (True, True)
    """
    finufft = _import_finufft()
    _check_map(feature_map, "nufft_mean_sums")
    rows = _check_rows(rows, feature_map, "nufft_mean_sums")
    if isinstance(nthreads, bool) or not isinstance(nthreads, numbers.Integral) or nthreads < 1:
        raise InputError(f"nthreads must be an integer >= 1. Got {nthreads!r}.")
    n_rows, d = rows.shape
    targets = _targets(feature_map)
    if n_rows == 0:
        return np.zeros(feature_map.n_features_out_), 0.0
    cost = _cost(n_rows, _finite_extents(rows), targets, feature_map.n_features_out_)
    if cost.grid_bytes > MAX_GRID_BYTES:
        raise InputError(
            f"The NUFFT grid for these rows would need {cost.grid_bytes / 2**20:.0f} MiB (grid "
            f"{cost.grid_shape}); expected at most MAX_GRID_BYTES = {MAX_GRID_BYTES / 2**20:.0f} MiB. The "
            "rows' extent is large compared with the bandwidth: use streamrff.sketches.mean.mean_sketch_of_chunk "
            "(the direct path), whose memory does not grow with the extent."
        )
    transform = {1: finufft.nufft1d3, 2: finufft.nufft2d3, 3: finufft.nufft3d3}[d]
    frequencies = [np.ascontiguousarray(targets[:, axis]) for axis in range(d)]
    values = np.zeros(targets.shape[0], dtype=np.complex128)
    slice_rows = ROWS_PER_CALL if nthreads == 1 else _THREADED_CALL_ROWS_PER_THREAD * int(nthreads)
    for start in range(0, n_rows, slice_rows):
        rows_slice = rows[start : start + slice_rows]
        points = [np.ascontiguousarray(rows_slice[:, axis], dtype=np.float64) for axis in range(d)]
        strengths = np.ones(rows_slice.shape[0], dtype=np.complex128)
        # isign=+1: F(w) = sum_i exp(+i w.x_i), so Re F = sum cos and Im F = sum sin.
        values += transform(
            *points,
            strengths,
            *frequencies,
            eps=NUFFT_TOLERANCE,
            isign=1,
            nthreads=int(nthreads),
            upsampfac=cost.upsampfac,
        )
    return _sums_from_transform(feature_map, values, n_rows)
