"""Random Fourier features: the :class:`RFF` map and the base it shares with RelativeErrorRFF.

:class:`FourierFeatureMap` holds what every random Fourier feature map of the
Gaussian kernel does alike (Rahimi & Recht 2007): its parameters ``n_features``,
``bandwidth`` and ``seed``, the bandwidth chosen by the median heuristic on the
seeded row sample, its spec and its rebuilding from a spec, and the cosine and
sine features of a projection. Its subclasses say how they draw their frequencies
and weight their features: :class:`RFF` here (frequencies from the kernel's
spectrum, i.i.d. or orthogonal), :class:`~streamrff.maps.relative.RelativeErrorRFF`
in :mod:`streamrff.maps.relative` (uniform frequencies, weighted).

An RFF's frequencies come from one small function, ``params.gaussian_frequencies``
(i.i.d. rows, or orthogonal blocks), drawn from the spec by :mod:`.params`; the
structured variant (``structured=True``) draws SORF diagonals instead
(:mod:`streamrff.maps.structured`). The float32 hot paths run the compiled
kernels of :mod:`streamrff._kernels.sincos` (dense) and :mod:`streamrff._kernels.sorf`
(structured).
"""

from __future__ import annotations

import functools
import json
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from .._base.blas import single_blas_thread
from .._base.sampling import MEDIAN_SAMPLE_ROWS, median_heuristic
from .._base.validation import check_bandwidth, check_positive_int, is_positive_real, normalize_seed
from ..errors import InputError
from ..typing import MapSpec, Seed
from . import categorical as mixed
from .base import FeatureMap, _fitted_bandwidth, _require, tile_column_sums
from .params import cached_params, spec_key
from .structured import structured_frequency_matrix, warn_if_biased

__all__ = ["FourierFeatureMap", "KERNELS", "PHASE_PRECISION_LIMIT", "RFF"]

#: Fewest rows per projection GEMM in the compiled RFF sums (see RFF._feature_sums).
_MIN_PROJECTION_ROWS = 256
#: The offsets argument of the compiled kernels for the sincos variant (which has none).
_NO_OFFSETS = np.zeros(0, np.float32)
_NO_OFFSETS.setflags(write=False)  # read-only like the cosphase offsets: one numba type for both
#: ``phase_precision="auto"`` takes float64 phases when a phase |W x| (+ 2 pi for cosphase) of the
#: fit's sample exceeds this many radians (the bound is derived in RFF's Notes).
PHASE_PRECISION_LIMIT = 64.0
#: The phase precisions of RFF (``"auto"`` resolves to one of the other two at fit time).
_PHASE_PRECISIONS = ("auto", "float32", "float64")
#: Sample rows projected at once by the phase check (bounds its memory at 128 x m float64).
_PHASE_CHECK_ROWS = 128


class FourierFeatureMap(FeatureMap):
    """Base of the random Fourier feature maps: ``n_features`` cos/sin features of seeded frequencies.

    Subclasses declare ``kind`` and the spec entries of their own parameters in
    ``_family_params`` (name -> JSON type, in spec order), and implement
    ``__init__`` (the full signature, which scikit-learn's ``get_params`` reads,
    passing every argument on to this class's), ``_check_params``, a draw
    of their parameters in :mod:`.params` and ``_embed_tile``. This base gives them the fit
    (validation, seed, the median heuristic on the seeded row sample), the spec
    and its inverse, and the output width.

    Examples
    --------
    RFF and RelativeErrorRFF both build on this class, and their specs share a layout:

    >>> import numpy as np, streamrff as srf
    >>> from streamrff.maps.fourier import FourierFeatureMap
    >>> X = np.random.default_rng(0).normal(size=(4, 2))
    >>> maps = [srf.RFF(n_features=8).fit(X), srf.RelativeErrorRFF(n_features=8).fit(X)]
    >>> all(isinstance(feature_map, FourierFeatureMap) for feature_map in maps)
    True
    >>> [list(feature_map.spec) for feature_map in maps]  # doctest: +NORMALIZE_WHITESPACE
    [['kind', 'n_features_in', 'n_features', 'bandwidth', 'variant', 'orthogonal', 'seed'],
     ['kind', 'n_features_in', 'n_features', 'bandwidth', 'alpha', 'eps', 'seed']]
    """

    #: The subclass's own spec entries, in spec order, each with the JSON type it is stored as.
    _family_params: ClassVar[dict[str, type]] = {}
    #: Entries written after those only when they differ from their default (name -> default): options
    #: added later, so that the specs, fingerprints and files of maps without them stay as they were.
    _optional_params: ClassVar[dict[str, Any]] = {}
    #: Like ``_optional_params``, for options the fit resolves (``"auto"``): the spec records the
    #: fitted value (attribute ``name + "_"``) when it differs from the default, and a map rebuilt
    #: from a spec is constructed with the recorded value.
    _fitted_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, n_features: int, bandwidth: float | str, seed: Seed, **family_params: Any) -> None:
        # scikit-learn's rule: store the arguments unchanged (get_params reads the subclass's
        # signature), validate them in fit.
        self.n_features = n_features
        self.bandwidth = bandwidth
        self.seed = seed
        for name, value in family_params.items():
            setattr(self, name, value)

    @abstractmethod
    def _check_params(self) -> None:
        """Validate the constructor's parameters (raise InputError naming the argument and the fix)."""

    def _setup(self, n_features_in: int) -> None:
        """Validate the parameters and record the seed and the input width (no sample needed)."""
        self._check_params()
        self.seed_ = normalize_seed(self.seed)
        self.n_features_in_ = int(n_features_in)

    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        self._setup(n_features_in)
        return (MEDIAN_SAMPLE_ROWS if self.bandwidth == "median" else 0), self.seed_

    def _finish_fit(self, sample: np.ndarray) -> FourierFeatureMap:
        self.bandwidth_ = median_heuristic(sample) if self.bandwidth == "median" else float(self.bandwidth)
        return self

    def _spec_entries(self) -> MapSpec:
        return {
            "n_features": int(self.n_features),
            "bandwidth": self.bandwidth_,
            **{name: json_type(getattr(self, name)) for name, json_type in self._family_params.items()},
            **{
                name: type(default)(getattr(self, name))
                for name, default in self._optional_params.items()
                if getattr(self, name) != default
            },
            **{
                name: type(default)(getattr(self, name + "_"))
                for name, default in self._fitted_options.items()
                if getattr(self, name + "_") != default
            },
            "seed": self.seed_,
        }

    @classmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> FourierFeatureMap:
        bandwidth = _fitted_bandwidth(spec)
        feature_map = cls(
            n_features=_require(spec, "n_features"),
            bandwidth=bandwidth,
            **{name: _require(spec, name) for name in cls._family_params},
            **{name: spec.get(name, default) for name, default in cls._optional_params.items()},
            **{name: spec.get(name, default) for name, default in cls._fitted_options.items()},
            seed=_require(spec, "seed"),
        )
        # _setup, not _begin_fit: warnings about the parameters were given when the map was
        # fitted, not on every load.
        feature_map._setup(check_positive_int(_require(spec, "n_features_in"), "n_features_in"))
        return feature_map._finish_fit(np.empty((0, spec["n_features_in"])))

    def _output_width(self) -> int:
        return int(self.n_features)

    def _frequencies(self) -> np.ndarray:
        """The frequency matrix W (m x d, float64, read-only) of the fitted map, formed if it is structured."""
        return _frequency_matrix(self.kind, spec_key(self.spec))

    @staticmethod
    def _cos_sin(projection: np.ndarray, out: np.ndarray) -> None:
        """``out = [cos(projection), sin(projection)]``, in ``out``'s dtype, unscaled."""
        m = projection.shape[1]
        np.cos(projection, out=out[:, :m], dtype=out.dtype)
        np.sin(projection, out=out[:, m:], dtype=out.dtype)


def _check_paired_n_features(n_features: Any, reason: str, alternative: str = "") -> int:
    """Return ``n_features`` if it is even and >= 2 (a cos and a sin feature per frequency), else raise.

    ``reason`` and ``alternative`` complete the message: "n_features must be even
    and >= 2{reason} (got 5); use 6{alternative}."
    """
    checked = check_positive_int(n_features, "n_features", minimum=1)
    if checked < 2 or checked % 2:
        raise InputError(
            f"n_features must be even and >= 2{reason} (got {n_features}); use {max(2, checked + 1)}{alternative}."
        )
    return checked


#: The kernel families of RFF: Gaussian, Laplace (l1 distance) and Matern nu = 1/2, 3/2, 5/2 (l2 distance).
KERNELS = ("gaussian", "laplace", "matern12", "matern32", "matern52")
@functools.lru_cache(maxsize=16)
def _frequency_matrix(kind: str, spec_json: str) -> np.ndarray:
    """The frequencies W (m x d, float64) of a map: its parameter, or formed from its structured blocks."""
    params = cached_params(kind, spec_json)
    if "frequencies" in params:
        return params["frequencies"]
    frequencies = structured_frequency_matrix(params, json.loads(spec_json)["n_features_in"])
    frequencies.setflags(write=False)
    return frequencies


@functools.lru_cache(maxsize=64)
def _projection_params(kind: str, spec_json: str, dtype_char: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Transposed frequencies (d x m) and phases in the embedding's dtype, for the hot path."""
    params = cached_params(kind, spec_json)
    frequencies = np.ascontiguousarray(_frequency_matrix(kind, spec_json).T, dtype=dtype_char)
    phases = params["phases"].astype(dtype_char) if "phases" in params else None
    for array in (frequencies, phases):
        if array is not None:
            array.setflags(write=False)
    return frequencies, phases


def _project(X: np.ndarray, frequencies: np.ndarray, out: np.ndarray) -> None:
    """``out = X @ frequencies``. With one input column numpy's matmul does not call BLAS and
    runs ~3x slower than the equal outer product."""
    if frequencies.shape[0] == 1:
        np.multiply(X, frequencies, out=out)
    else:
        np.matmul(X, frequencies, out=out)


@functools.lru_cache(maxsize=64)
def _float32_offsets(kind: str, spec_json: str) -> np.ndarray:
    """The float32 phases of a cosphase map, or the empty offsets of a sincos one (compiled kernels)."""
    params = cached_params(kind, spec_json)
    if "phases" not in params:
        return _NO_OFFSETS
    offsets = params["phases"].astype(np.float32)
    offsets.setflags(write=False)
    return offsets


def _largest_phase_bound(rows: np.ndarray, frequencies: np.ndarray, variant: str, exact: bool = True) -> float:
    """An upper bound of ``|W x|`` (+ 2 pi for cosphase) over ``rows``: the product
    ``max ||x|| max ||w||`` when that is within PHASE_PRECISION_LIMIT (one pass over the norms) or
    ``exact`` is False, else the largest phase itself (a product of the rows and ``W`` in tiles)."""
    offset = 2.0 * np.pi if variant == "cosphase" else 0.0
    if rows.shape[0] == 0:
        return offset
    norms = float(np.sqrt(np.einsum("ij,ij->i", rows, rows).max()))  # in the rows' dtype: a bound
    bound = norms * float(np.sqrt(np.einsum("ij,ij->i", frequencies, frequencies).max())) + offset
    if bound <= PHASE_PRECISION_LIMIT or not exact:
        return bound
    rows = np.asarray(rows, dtype=np.float64)
    largest = 0.0
    for start in range(0, rows.shape[0], _PHASE_CHECK_ROWS):
        largest = max(largest, float(np.abs(rows[start : start + _PHASE_CHECK_ROWS] @ frequencies.T).max()))
    return largest + offset


@functools.lru_cache(maxsize=16)
def _zero_offsets(m: int) -> np.ndarray:
    """Read-only float32 zeros of length m: the offsets of a cosphase map whose phases b are already
    in the reduced phase (read-only like the cached offsets: one numba type for both)."""
    zeros = np.zeros(m, np.float32)
    zeros.setflags(write=False)
    return zeros


@functools.cache
def _compiled_sincos() -> Any:
    """The compiled float32 sin/cos kernels, imported on first use (numba takes ~0.2 s to import)."""
    from .._kernels import sincos as _sincos

    return _sincos


@functools.cache
def _compiled_feature_dots() -> Any:
    """The compiled fused feature-direction dot products, imported on first use."""
    from .._kernels import featuredot as _featuredot

    return _featuredot


@functools.cache
def _compiled_structured() -> Any:
    """The compiled structured (SORF) kernels, imported on first use."""
    from .._kernels import sorf as _structured

    return _structured


#: The structure arguments of the compiled Lloyd kernel for a dense map (see RFF._structure_args).
_NO_STRUCTURE = (
    np.zeros((0, 3, 0), np.float32),
    np.zeros((0, 0), np.int64),
    np.zeros((0, 0), np.float32),
    np.zeros(0, np.float32),
)
for _array in _NO_STRUCTURE:
    _array.setflags(write=False)  # read-only like a structured map's cached parameters: one numba type


class RFF(FourierFeatureMap):
    """Random Fourier features for the Gaussian kernel (Rahimi & Recht 2007).

    Parameters
    ----------
    n_features : int, default=1024
        Output width D. Must be even and >= 2 for ``variant="sincos"``.
    bandwidth : float or "median", default="median"
        Kernel width sigma; ``"median"`` (the median heuristic, the default of
        every streamrff estimator, function and command) takes the median
        pairwise distance of a seeded sample of 1 000 rows (the same rows the
        Dask engine samples), so the map must be fitted on data before
        :meth:`transform`.
    variant : {"sincos", "cosphase"}, default="sincos"
        ``"sincos"``: ``z(x) = m^-1/2 [cos(Wx), sin(Wx)]`` with m = D/2
        frequencies (Sutherland & Schneider 2015, eq. 1); ``z(x).z(x) = 1`` and
        lower variance for the Gaussian kernel (their eqs. 5-7).
        ``"cosphase"``: ``z(x) = sqrt(2/D) cos(Wx + b)`` with D frequencies and
        phases b ~ U[0, 2 pi) (their eq. 2; scikit-learn's ``RBFSampler``).
    orthogonal : bool, default=False
        Draw frequencies as orthogonal random features (Yu et al. 2016): rows of
        ``W`` orthogonal within blocks of ``d``, with chi(d) norms. Lower variance
        at the same D.
    structured : bool, default=False
        Structured orthogonal random features (SORF; Yu et al. 2016, sec. 4):
        ``W`` is a stack of blocks ``(1 / sigma) S H D1 H D2 H D3`` of
        Walsh-Hadamard transforms ``H`` (d zero-padded to a power of two n),
        random sign diagonals and chi(n) row norms S, never formed: a row
        costs O(D log d) instead of O(D d), and the rows are orthogonal within
        a block, so the kernel error is that of ``orthogonal=True`` (measured
        0.84x at d = 768, D = 4096; :mod:`streamrff._kernels.sorf`). For inputs
        of hundreds of columns and more. Warns
        (:class:`~streamrff.errors.BiasWarning`) on 16 columns or fewer, where
        the estimate is biased (:mod:`streamrff.maps.structured`). Cannot be
        combined with ``orthogonal=True`` (it already is orthogonal).
    seed : int, numpy.random.Generator or None, default=0
        Seed of the frequencies (and of the row sample for ``"median"``).
    categorical : sequence of int, optional
        Indices of input columns that hold category codes (a table's
        ``RowSource.categorical_columns``; :func:`streamrff.sources.frames.category_code`).
        The kernel is then the Gaussian kernel on the other columns times
        ``exp(-mismatch * number of differing categorical columns)``: each
        frequency's features are multiplied, per categorical column and with
        probability ``1 - exp(-mismatch)``, by a seeded +/-1 hash of the code
        (:mod:`streamrff.maps.categorical`), so the estimate is unbiased and no
        vocabulary is stored. Codes must come as float64 (float32 rounds them).
        Its phases follow ``phase_precision`` on the numeric columns; the
        compiled kernels of k-means, the drift window and the shared-draw
        tests serve numeric maps only. Cannot be ``structured``.
    mismatch : float or "auto", default="auto"
        lambda of the categorical factor (with ``categorical``).
        ``"auto"``: ``1 / max(1, median number of differing categorical columns
        between pairs of the fit sample)``, so a typical pair's factor is about
        ``e^-1``. The fitted value is ``mismatch_`` and is stored in the map file.
    kernel : {"gaussian", "laplace", "matern12", "matern32", "matern52"}, default="gaussian"
        The kernel family (on the numeric columns): Gaussian
        ``exp(-||x - y||^2 / (2 sigma^2))``, Laplace ``exp(-||x - y||_1 / sigma)``
        (Cauchy frequencies), Matern nu = 1/2, 3/2, 5/2 on ``||x - y||_2 / sigma``
        (Student-t frequencies with 2 nu degrees of freedom). Recorded in the
        spec when not Gaussian (docs/guide/feature_maps.rst, "Kernel families").
    phase_precision : {"auto", "float32", "float64"}, default="auto"
        Precision of the phases ``W x`` behind the float32 features.
        ``"float32"``: a float32 projection (the fast path). ``"float64"``: the
        rows, as given, are projected in float64 and every phase is reduced
        modulo 2 pi in float64 before the float32 sine and cosine (about 2x
        the time of a dense embedding): for data far from the origin in units
        of the bandwidth. ``"auto"``: float64 when a phase of the rows the fit
        sees exceeds ``PHASE_PRECISION_LIMIT`` (64 radians; see Notes), else
        float32. The spec records ``"phase_precision": "float64"`` only: maps
        with float32 phases keep the specs, fingerprints and files they had.
        Mixed maps follow the rule on their numeric columns; before 2026-11
        they had float64 phases only, and every spec of theirs recorded it.

    Attributes
    ----------
    n_features_in_ : int
        Input width d.
    bandwidth_ : float
        Bandwidth in use.
    seed_ : int
        Integer seed recorded in :attr:`spec`.
    phase_precision_ : {"float32", "float64"}
        Phase precision in use.

    Raises
    ------
    InputError
        On an odd or too small ``n_features`` for sincos, a non-positive
        bandwidth, an unknown variant, ``orthogonal`` and ``structured`` both
        True, or bad input rows.

    Warns
    -----
    BiasWarning
        With ``structured=True`` on 16 input columns or fewer.

    Notes
    -----
    Phase precision. A float32 phase ``theta = w.x`` carries a rounding error
    of about ``|theta| 2^-24`` radians (the rounding of the rows, of the
    frequencies and of the product; a GEMM's accumulation adds a few ulps).
    Two rows ``delta`` apart have phase differences of about ``delta / sigma``,
    so this error moves their feature distance by a relative
    ``|theta| 2^-24 sigma / delta``, while the float32 sines and cosines
    themselves already carry ``2^-24``, a relative ``2^-24 sigma / delta``:
    the phase rounding is ``|theta|`` times the features' own. With every
    phase within ``PHASE_PRECISION_LIMIT`` = 64 radians it stays below
    ``2^-18 sigma / delta`` (1% for rows 4e-4 sigma apart), and ``"auto"``
    keeps float32. Standardised data with the median bandwidth have
    ``theta ~ N(0, ||x||^2 / sigma^2)`` with ``||x|| ~ sigma / sqrt 2``:
    phases below ~6 on a sample of 1 000 rows, far under the limit, and the
    check costs one pass over the sample's norms (a product of the sample
    and ``W`` only when ``max ||x|| max ||w||`` exceeds the limit). Chen &
    Phillips' demo (rows in a ball of radius 500, sigma = 1) has phases of
    ~1 000: with float32 phases pairs 1e-4 apart come out ~25% off whatever
    D; with float64 phases the error falls as their sec. 7 shows.

    The rows the fit sees: the seeded sample of the median heuristic, which
    an in-memory :meth:`fit` also takes for a numeric bandwidth (only when
    ``max ||x|| max ||w||`` over all its rows exceeds the limit: otherwise
    every sample's phases are within it, and no sample is drawn). The Dask
    engine draws no sample for a numeric bandwidth (that would be a pass of
    its own), so ``"auto"`` gives float32 there: pass
    ``phase_precision="float64"``, or fit the map on a sample first.

    References
    ----------
    Sutherland, D. J. & Schneider, J. (2015). On the error of random Fourier
    features. UAI. Eqs. (1), (2), (5), (6).
    Yu, F. X. et al. (2016). Orthogonal random features. NeurIPS. Sec. 3
    (orthogonal), sec. 4 (structured).
    Chen, D. & Phillips, J. M. (2016). Relative error embeddings of the
    Gaussian kernel distance. Sec. 7 (pairs in a ball of radius 500).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(5, 3))
    >>> rff = srf.RFF(n_features=4096, bandwidth=1.0, seed=0).fit(X)
    >>> Z = rff.transform(X)
    >>> Z.shape, Z.dtype
    ((5, 4096), dtype('float32'))
    >>> bool(np.abs(Z @ Z.T - srf.exact_kernel(X, X, 1.0)).max() < 0.1)
    True

    Structured features for wide rows, the same estimate at O(D log d) per row:

    >>> X = np.random.default_rng(1).normal(size=(5, 300))
    >>> sorf = srf.RFF(n_features=4096, bandwidth=20.0, structured=True).fit(X)
    >>> Z = sorf.transform(X)
    >>> bool(np.abs(Z @ Z.T - srf.exact_kernel(X, X, 20.0)).max() < 0.1), sorf.spec["structured"]
    (True, True)

    The Laplace kernel:

    >>> laplace = srf.RFF(n_features=8192, bandwidth=2.0, kernel="laplace").fit(X)
    >>> Z = laplace.transform(X)
    >>> exact = np.exp(-np.abs(X[:, None] - X[None]).sum(-1) / 2.0)
    >>> bool(np.abs(Z @ Z.T - exact).max() < 0.06), laplace.spec["kernel"]
    (True, 'laplace')

    Rows far from the origin (in units of the bandwidth) get float64 phases:

    >>> far = 500.0 + np.random.default_rng(2).normal(size=(5, 2))
    >>> srf.RFF(n_features=64, bandwidth=1.0).fit(far).phase_precision_
    'float64'
    """

    kind = "rff"
    _family_params = {"variant": str, "orthogonal": bool}
    _optional_params = {"structured": False, "kernel": "gaussian"}
    _fitted_options = {"phase_precision": "float32"}
    #: The feature layouts: cos and sin of D/2 frequencies, or the cosine of D frequencies plus phases.
    _variants = ("sincos", "cosphase")

    def __init__(
        self,
        n_features: int = 1024,
        bandwidth: float | str = "median",
        variant: Literal["sincos", "cosphase"] = "sincos",
        orthogonal: bool = False,
        structured: bool = False,
        seed: Seed = 0,
        phase_precision: Literal["auto", "float32", "float64"] = "auto",
        categorical: Sequence[int] | None = None,
        mismatch: float | str = "auto",
        kernel: Literal["gaussian", "laplace", "matern12", "matern32", "matern52"] = "gaussian",
    ) -> None:
        super().__init__(
            n_features, bandwidth, seed, variant=variant, orthogonal=orthogonal, structured=structured,
            phase_precision=phase_precision, categorical=categorical, mismatch=mismatch, kernel=kernel,
        )  # fmt: skip

    @property
    def _categorical_columns(self) -> tuple[int, ...]:
        """The categorical input columns, sorted (empty for a Gaussian map)."""
        return tuple(sorted(int(column) for column in self.categorical)) if self.categorical is not None else ()

    def _numeric_columns(self) -> np.ndarray:
        return np.setdiff1d(np.arange(self.n_features_in_), self._categorical_columns)

    def _check_params(self) -> None:
        if self.variant not in self._variants:
            raise InputError(f"variant must be 'sincos' or 'cosphase'. Got {self.variant!r}.")
        if self.variant == "sincos":
            _check_paired_n_features(self.n_features, " for the sincos variant", " or variant='cosphase'")
        else:
            check_positive_int(self.n_features, "n_features", minimum=1)
        if not isinstance(self.orthogonal, (bool, np.bool_)):
            raise InputError(f"orthogonal must be True or False. Got {self.orthogonal!r}.")
        if not isinstance(self.structured, (bool, np.bool_)):
            raise InputError(f"structured must be True or False. Got {self.structured!r}.")
        if self.orthogonal and self.structured:
            raise InputError(
                "orthogonal=True and structured=True cannot be combined: structured (SORF) frequencies are "
                "already orthogonal within each block. Pass structured=True alone for fast orthogonal "
                "features, or orthogonal=True alone for dense ones."
            )
        if not isinstance(self.phase_precision, str) or self.phase_precision not in _PHASE_PRECISIONS:
            raise InputError(f"phase_precision must be 'auto', 'float32' or 'float64'. Got {self.phase_precision!r}.")
        check_bandwidth(self.bandwidth)
        if self.categorical is not None:
            columns = self.categorical
            if isinstance(columns, (str, bytes)) or not all(
                isinstance(column, (int, np.integer)) and not isinstance(column, bool) and column >= 0
                for column in columns
            ):
                raise InputError(
                    f"categorical must be column indices (non-negative integers). Got {columns!r}. Names are "
                    "resolved by the source: pass RowSource.categorical_columns."
                )
            if len(set(int(column) for column in columns)) != len(columns):
                raise InputError(f"categorical names a column twice. Got {list(columns)!r}.")
            if self.structured and len(columns):
                raise InputError("categorical columns need a dense map: pass structured=False with categorical.")
        if not (self.mismatch == "auto" or is_positive_real(self.mismatch)):
            raise InputError(f"mismatch must be 'auto' or a positive finite number. Got {self.mismatch!r}.")
        if not isinstance(self.kernel, str) or self.kernel not in KERNELS:
            raise InputError(f"kernel must be one of {', '.join(map(repr, KERNELS))}. Got {self.kernel!r}.")
        if self.kernel != "gaussian" and self.structured:
            raise InputError(
                f"structured=True draws Gaussian-kernel frequencies only. Got kernel={self.kernel!r}; pass "
                "structured=False for that kernel, or kernel='gaussian'."
            )
        if self.kernel == "laplace" and self.orthogonal:
            raise InputError(
                "orthogonal=True needs a rotation-invariant kernel; the Laplace kernel (a product over columns) "
                "is not. Pass orthogonal=False, or a Matern kernel (kernel='matern12', ...)."
            )

    def _setup(self, n_features_in: int) -> None:
        super()._setup(n_features_in)
        outside = [column for column in self._categorical_columns if column >= self.n_features_in_]
        if outside:
            raise InputError(
                f"categorical names columns {outside}, but the data has {self.n_features_in_} columns "
                f"(indices 0 to {self.n_features_in_ - 1})."
            )

    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        sample_rows, sample_seed = super()._begin_fit(n_features_in)
        if self.structured:
            warn_if_biased(self.n_features_in_, stacklevel=3)
        if self._categorical_columns and self.mismatch == "auto":
            sample_rows = max(sample_rows, MEDIAN_SAMPLE_ROWS)
        return sample_rows, sample_seed

    def _in_memory_sample_rows(self, X: np.ndarray) -> int:
        mixed_auto = self._categorical_columns and self.mismatch == "auto"
        if mixed_auto or self.phase_precision != "auto" or self.bandwidth == "median":
            return 0  # nothing to decide, or a sample is drawn anyway (the median's, or lambda's)
        # The norm bound over all rows first (one cheap pass, no hashing of row indices): if it is
        # within the limit, so is every sample's, and the sample would decide float32 too.
        super()._finish_fit(X[:0])  # the numeric bandwidth, which the frequencies need
        self.phase_precision_, self.mismatch_ = "float32", float(self.mismatch) if self._categorical_columns else 0.0
        numeric = X[:, self._numeric_columns()] if self._categorical_columns else X
        if _largest_phase_bound(numeric, self._frequencies(), self.variant, exact=False) <= PHASE_PRECISION_LIMIT:
            return 0
        return MEDIAN_SAMPLE_ROWS

    def _finish_fit(self, sample: np.ndarray) -> RFF:
        if self._categorical_columns:
            # The Gaussian part sees the numeric columns only; the categorical factor its lambda.
            numeric = sample[:, self._numeric_columns()]
            median = self.bandwidth == "median"  # a map rebuilt from its spec has its fitted bandwidth
            self.bandwidth_ = (
                (median_heuristic(numeric) if numeric.shape[1] else 1.0) if median else float(self.bandwidth)
            )
            codes = sample[:, list(self._categorical_columns)]
            self.mismatch_ = mixed.median_mismatch_rate(codes) if self.mismatch == "auto" else float(self.mismatch)
            self._resolve_phase_precision(numeric)
            return self
        self.mismatch_ = 0.0
        super()._finish_fit(sample)
        self._resolve_phase_precision(sample)
        return self

    def _resolve_phase_precision(self, numeric: np.ndarray) -> None:
        """``phase_precision_`` from the fit sample's numeric columns (see the class's Notes)."""
        # float32 first: the spec (which the frequencies are regenerated from) needs a value.
        self.phase_precision_ = "float32" if self.phase_precision == "auto" else str(self.phase_precision)
        if self.phase_precision == "auto" and numeric.shape[0]:
            if _largest_phase_bound(numeric, self._frequencies(), self.variant) > PHASE_PRECISION_LIMIT:
                self.phase_precision_ = "float64"

    def _float32_phases(self) -> bool:
        """Whether the compiled kernels that project float32 rows themselves (k-means' Lloyd step, the
        drift window, the shared-draw two-sample embedder) serve this map: float32 phases and no
        categorical column. The others take :meth:`_embed_tile`."""
        return self.phase_precision_ == "float32" and not self._categorical_columns

    def _spec_entries(self) -> MapSpec:
        entries = super()._spec_entries()
        if self._categorical_columns:
            seed = entries.pop("seed")
            entries.update(categorical=list(self._categorical_columns), mismatch=float(self.mismatch_), seed=seed)
        return entries

    @classmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> RFF:
        if "categorical" not in spec:
            return super()._from_spec(spec, arrays)
        feature_map = super()._from_spec(
            {k: v for k, v in spec.items() if k not in ("categorical", "mismatch")}, arrays
        )
        feature_map.categorical = [int(column) for column in _require(spec, "categorical")]
        feature_map.mismatch = float(_require(spec, "mismatch"))
        feature_map._check_params()
        feature_map._setup(feature_map.n_features_in_)
        return feature_map._finish_fit(np.empty((0, feature_map.n_features_in_)))

    def _scale(self, m: int) -> float:
        """The features' common factor: ``m^-1/2`` for sincos (m frequencies), ``sqrt(2/D)`` for cosphase."""
        return 1.0 / np.sqrt(m) if self.variant == "sincos" else np.sqrt(2.0 / m)

    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        if not self._categorical_columns:
            self._embed_numeric_tile(X, out)
            return
        for _ in self._mixed_tiles(X, out.dtype, X.shape[0], out):
            pass

    def _mixed_setup(self, X: np.ndarray, char: str = "d") -> tuple[tuple, np.ndarray, np.ndarray, np.ndarray]:
        """Signs of ``X`` (:func:`category_flips`), then the rows to project (``char`` "d": the
        numeric columns as float64; "f": ``X`` itself, whose numeric columns the compiled float32 pass reads
        a tile at a time), the frequencies and the phases (length 0 for sincos) in that precision."""
        params = self._params()
        flips = mixed.category_flips(X, params["category_mask"], params["category_keys"], self._categorical_columns)
        numeric = X if char == "f" else np.ascontiguousarray(X[:, self._numeric_columns()], dtype=np.float64)
        frequencies, phases = _projection_params(self.kind, spec_key(self.spec), char)
        return flips, numeric, frequencies, np.zeros(0, char) if phases is None else phases

    def _mixed_tiles(self, X: np.ndarray, dtype: Any, step: int, out: np.ndarray | None = None) -> Iterator:
        """Yield ``(start, features)`` of a mixed map for tiles of ``step`` rows of ``X``, in ``out`` or one
        buffer, after the signs of all of ``X`` (:meth:`_mixed_setup`): the numeric tile's features
        (:meth:`_embed_numeric_tile`; float64 phases by ``mixed.reduced_phase_features``), signed."""
        flips, numeric, frequencies, phases = self._mixed_setup(X)
        words, m, scale = mixed.gather_flips(flips), frequencies.shape[1], np.float32(self._scale(frequencies.shape[1]))
        buffer = np.empty((min(step, X.shape[0]), self._output_width()), dtype=dtype) if out is None else None
        for start in range(0, X.shape[0], step):
            rows = numeric[start : start + step]
            tile = buffer[: rows.shape[0]] if out is None else out[start : start + rows.shape[0]]
            if np.dtype(dtype) != np.float32 or self.phase_precision_ == "float32":
                self._embed_numeric_tile(rows, tile)
            else:
                mixed.reduced_phase_features(rows, frequencies, phases, scale, tile)
            mixed.flip_category_signs(words[start : start + rows.shape[0]], tile, m)
            yield start, tile

    @single_blas_thread
    def _embed(self, X: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
        if not self._categorical_columns:
            return super()._embed(X, dtype)
        out = np.empty((X.shape[0], self._output_width()), dtype=dtype)
        for _ in self._mixed_tiles(X, dtype, self._tile_rows(self._output_width()), out):
            pass
        return out

    def embed_tiles(
        self, X: np.ndarray, tile_rows: int | None = None, dtype: Any = np.float32
    ) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`streamrff.maps.base.FeatureMap.embed_tiles`; a mixed map hashes each distinct category once."""
        if not self._categorical_columns:
            yield from super().embed_tiles(X, tile_rows, dtype)
            return
        yield from self._mixed_tiles(X, dtype, int(tile_rows) if tile_rows else self._tile_rows(self._output_width()))

    def _mixed_feature_sums(self, X: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, float]:
        """float32: a compiled pass per tile writing no feature (``signed_sums``; sincos norms m scale^2)."""
        if dtype != np.float32:
            return super()._feature_sums(X, dtype)
        flips, numeric, frequencies, phases = self._mixed_setup(X, "f" if self.phase_precision_ == "float32" else "d")
        m, scale = frequencies.shape[1], float(np.float32(self._scale(frequencies.shape[1])))
        step = self._tile_rows(self._output_width())
        totals = mixed.signed_sums(numeric, frequencies, phases, flips, step, self._numeric_columns())
        if self.variant == "sincos":
            return totals.reshape(-1) * scale, X.shape[0] * m * scale * scale
        return totals[0] * scale, float(totals[1].sum()) * scale * scale

    def _embed_numeric_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        # The projection runs in the output's precision. For float32 nothing is lost by
        # it: the phase is rounded to float32 before the cosine anyway, and a float64
        # projection would cost twice the GEMM. It goes to its own contiguous buffer: numpy's
        # matmul, cos and sin run ~15% faster on it than on column halves of `out`.
        if out.dtype == np.float32 and self.phase_precision_ == "float64":
            self._embed_float64_phases(X, out)
            return
        if out.dtype == np.float32 and self.structured:
            # The SORF blocks, never formed; the same compiled call as the Lloyd kernel's.
            _, offsets, scale = self._float32_kernel_args()
            rows = np.ascontiguousarray(X, dtype=np.float32)
            _compiled_structured().structured_features(rows, self._params(), offsets, scale, out)
            return
        if out.dtype == np.float32:
            # One compiled call, shared with the compiled Lloyd kernel (same features bit for bit).
            frequencies, offsets, scale = self._float32_kernel_args()
            projection = np.empty((X.shape[0], frequencies.shape[1]), dtype=np.float32)
            rows = np.ascontiguousarray(X, dtype=np.float32)
            _compiled_sincos().rff_features(rows, frequencies, offsets, scale, projection, out)
            return
        frequencies, phases = _projection_params(self.kind, spec_key(self.spec), out.dtype.char)
        projection = np.empty((X.shape[0], frequencies.shape[1]), dtype=out.dtype)
        _project(X, frequencies, out=projection)
        if self.variant == "sincos":
            self._cos_sin(projection, out)
        else:
            np.add(projection, phases, out=out)
            np.cos(out, out=out)
        out *= out.dtype.type(self._scale(frequencies.shape[1]))

    def _embed_float64_phases(self, X: np.ndarray, out: np.ndarray) -> None:
        """Float32 features from float64 phases: ``X @ W`` (plus the phases b) in float64, reduced
        to [-pi, pi] in float64 (exact to ~|phase| 2^-53), then the compiled float32 sin/cos of the
        reduced phase, whose float32 rounding is at most pi 2^-24 whatever the phase."""
        frequencies, phases = _projection_params(self.kind, spec_key(self.spec), "d")
        projection = np.empty((X.shape[0], frequencies.shape[1]))
        _project(X.astype(np.float64, copy=False), frequencies, out=projection)
        with np.errstate(invalid="ignore"):  # a non-finite row gives NaN features, as on the float32 path
            if phases is not None:
                projection += phases
            turns = np.rint(projection * (1.0 / (2.0 * np.pi)))
            projection -= turns * (2.0 * np.pi)
        reduced = projection.astype(np.float32)
        scale = np.float32(self._scale(frequencies.shape[1]))
        if self.variant == "sincos":
            _compiled_sincos().sincos_features(reduced, scale, out)
        else:
            _compiled_sincos().cos_features(reduced, _zero_offsets(frequencies.shape[1]), scale, out)

    def _float32_kernel_args(self) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """``(frequencies (d, m), offsets, scale)`` of :func:`streamrff._kernels.sincos.rff_features`:
        float32, with offsets of length 0 for the sincos variant. A structured map's frequencies
        are an empty (0, m) array: its kernels take :meth:`_structure_args` instead."""
        spec_json = spec_key(self.spec)
        offsets = _float32_offsets(self.kind, spec_json)
        if self.structured:
            m = self._params()["row_scales"].shape[0]
            frequencies = np.zeros((0, m), np.float32)
            frequencies.setflags(write=False)
        else:
            frequencies = _projection_params(self.kind, spec_json, "f")[0]
        return frequencies, offsets, np.float32(self._scale(frequencies.shape[1]))

    def _structure_args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(signs, permutation, gaussian, row_scales)`` of
        :func:`streamrff._kernels.sorf.structured_rff_features` for a structured map; empty arrays
        (row_scales of length 0) for a dense one."""
        if not self.structured:
            return _NO_STRUCTURE
        params = self._params()
        return params["signs"], params["permutation"], params["gaussian"], params["row_scales"]

    def _feature_sums(self, X: np.ndarray, dtype: Any = np.float32) -> tuple[np.ndarray, float]:
        # Fused for speed:
        # - float32: one compiled call per chunk (streamrff._kernels.sincos) projects each tile and
        #   accumulates its cosines and sines without writing them, holding the GIL once (so
        #   the chunk's threads are not slowed by other threads' Python, such as zarr's reads);
        # - float64 (numpy): a tile's cosines and sines go to two contiguous blocks (numpy's
        #   matmul, sin and cos run 15-50% faster on those than on column halves of a tile);
        # - the scale multiplies the float64 sums, not every feature (a pass over the tile);
        # - with sines and cosines, every row's squared norm is m * scale^2 (cos^2 + sin^2 = 1).
        # The sums agree with those of transform's features to float32 rounding.
        dtype = np.dtype(dtype)
        if self._categorical_columns:
            return self._mixed_feature_sums(X, dtype)
        if dtype == np.float32 and not self._float32_phases():
            return super()._feature_sums(X, dtype)  # tile by tile through _embed_tile
        if dtype == np.float32 and self.structured:
            return self._structured_feature_sums(X)
        frequencies, phases = _projection_params(self.kind, spec_key(self.spec), dtype.char)
        sincos = self.variant == "sincos"
        m = frequencies.shape[1]
        scale = float(dtype.type(self._scale(m)))
        sums = np.zeros((2 if sincos else 1, m))
        squares = 0.0
        if dtype == np.float32:
            rows = np.ascontiguousarray(X, dtype=np.float32)
            # Only the projection is held: a cache-sized (rows, m) block, but at least 256 rows,
            # below which the projection GEMM slows (d = 128, D = 4096: 323 ms per 50k rows in
            # 64-row tiles, 244 ms in 256-row ones; equal or better for every D in 256..4096).
            step = max(_MIN_PROJECTION_ROWS, self._tile_rows(m))
            if sincos:
                _compiled_sincos().sincos_feature_sums(rows, frequencies, step, sums)
            else:
                squares = _compiled_sincos().cos_feature_sums(rows, frequencies, phases, step, sums[0])
        else:
            step = self._tile_rows(self._output_width())
            buffers = np.empty((sums.shape[0], min(step, X.shape[0]), m), dtype=dtype)
            for start in range(0, X.shape[0], step):
                tile = X[start : start + step]
                blocks = buffers[:, : tile.shape[0]]
                projection = blocks[-1]
                _project(tile.astype(dtype, copy=False), frequencies, out=projection)
                if sincos:
                    np.cos(projection, out=blocks[0])
                    np.sin(projection, out=projection)
                else:
                    projection += phases
                    np.cos(projection, out=projection)
                    squares += float(np.einsum("ij,ij->i", projection, projection).sum(dtype=np.float64))
                sums += tile_column_sums(blocks)
        if sincos:
            squares = float(X.shape[0] * m)
        return sums.reshape(-1) * scale, squares * scale * scale

    def _feature_dots(self, X: np.ndarray, direction: np.ndarray) -> np.ndarray:
        # Fused (streamrff._kernels.featuredot): one compiled call per chunk projects each tile and sums
        # each row's sin/cos times the direction, features never written; the scale multiplies
        # the float64 results. Structured maps and float64 phases take the tile-by-tile GEMV.
        if self.structured or not self._float32_phases():
            return super()._feature_dots(X, direction)
        frequencies, offsets, scale = self._float32_kernel_args()
        rows = np.ascontiguousarray(X, dtype=np.float32)
        weights = np.ascontiguousarray(direction, dtype=np.float32)
        out = np.empty(rows.shape[0], dtype=np.float64)
        step = max(_MIN_PROJECTION_ROWS, self._tile_rows(frequencies.shape[1]))
        _compiled_feature_dots().rff_feature_dots(rows, frequencies, offsets, weights, step, out)
        out *= float(scale)
        return out

    def _structured_feature_sums(self, X: np.ndarray) -> tuple[np.ndarray, float]:
        """:meth:`_feature_sums` of a structured map in float32: one compiled call per chunk
        (transforms, sin/cos and column sums per tile of 32 rows, features never written)."""
        _, offsets, scale = self._float32_kernel_args()
        m = self._params()["row_scales"].shape[0]
        sums = np.zeros((2, m))
        rows = np.ascontiguousarray(X, dtype=np.float32)
        squares = _compiled_structured().structured_feature_sums(rows, self._params(), offsets, sums)
        scale = float(scale)
        if self.variant == "sincos":
            return sums.reshape(-1) * scale, squares * scale * scale
        return sums[0] * scale, squares * scale * scale
