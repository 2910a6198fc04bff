"""Relative-error random Fourier features (Phillips & Tai 2018): the :class:`RelativeErrorRFF` map.

Frequencies drawn uniformly from a box ``[-gamma, gamma]^d`` and weighted by the
kernel's spectrum, rather than drawn from it as in :class:`~streamrff.maps.fourier.RFF`,
so that kernel distances between point sets keep a relative error down to a
floor ``alpha``. Everything else (parameters, fit, spec, the cos/sin features)
comes from :class:`~streamrff.maps.fourier.FourierFeatureMap`. The module also
holds the box's half-width ``gamma`` (their sec. 2 and Lemma 13) and the variance
limit above which fitting warns.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .._base.validation import check_bandwidth
from ..errors import InputError, VarianceWarning
from ..typing import Seed
from .fourier import FourierFeatureMap, _check_paired_n_features
from .params import relative_rff_gamma

__all__ = ["RelativeErrorRFF", "RELATIVE_RFF_VARIANCE_LIMIT"]

#: RelativeErrorRFF warns (VarianceWarning) when the per-feature second moment exceeds this many
#: times a sincos RFF's: it then needs that many times more features for the same accuracy.
RELATIVE_RFF_VARIANCE_LIMIT = 50.0


def _check_fraction(value: Any, name: str, upper: float, include_upper: bool) -> float:
    """Return ``value`` as a float in (0, upper) (or (0, upper] with ``include_upper``) or raise InputError."""
    interval = f"(0, {upper:g}{']' if include_upper else ')'}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number in {interval}. Got {value!r}.")
    number = float(value)
    if not (0.0 < number < upper or (include_upper and number == upper)):
        raise InputError(f"{name} must be in {interval}. Got {value!r}.")
    return number


class RelativeErrorRFF(FourierFeatureMap):
    """Relative-error random features for the Gaussian kernel distance between point sets (Phillips & Tai 2018).

    ``m = D/2`` frequency vectors ``v ~ Unif([-gamma, gamma]^d)`` are weighted
    rather than sampled from the kernel's spectrum::

        w(v) = (2 gamma)^(d/2) (4 pi)^(-d/4) exp(-||v||^2 / 8)
        z(x) = m^-1/2 [w(v_j) cos <v_j, x'>, w(v_j) sin <v_j, x'>]_j,   x' = x / (sigma sqrt 2)

    with ``gamma = sqrt(4 ln(16 d / (sqrt(pi) eps alpha)))``. Then
    ``E[z(x).z(y)] = k(x, y) + E_xy`` with ``|E_xy| <= eps alpha / 4`` (their
    Lemma 2 and 13), and the mean embeddings ``F(P)`` of point sets with
    ``D_K^2(P, Q) >= alpha`` satisfy ``||F(P) - F(Q)|| in (1 +- eps) D_K(P, Q)``
    with high probability once D is large enough (Theorems 9 and 12; D grows
    like ``gamma^(2d)`` times the squared volume of the data's region).

    When it helps (measured, ``benchmarks/bench_relative_error.py``, 2-D sets
    of 200 points, sigma = 1, 3 maps each). Sincos RFF's error is not
    additive-and-growing for every small ``D_K^2``: when P and Q differ by a
    shift, a rescaling or noise, the difference lies at the low frequencies
    the Gaussian spectrum samples well, and RFF's relative error stays flat as
    ``D_K^2`` shrinks. On disks, circles and squares against shifted copies of
    themselves, ``D_K^2`` from 1 down to 1.6e-5, RFF's RMS relative error was
    0.004-0.005 at D = 16 384 (0.007-0.009 at 4 096) in every decade, 3-5x
    below this map's 0.014-0.019 (0.030-0.037) with ``alpha = 1e-4``: there,
    use :class:`RFF`. This map wins when the sets differ at frequencies well
    above ``1 / sigma``, which RFF rarely draws: on stripe pairs (a grid split
    by the sign of ``cos(w x_1)``, ``D_K^2`` from 1.2e-2 down to 1.2e-3) its
    RMS relative error was 0.024 against RFF's 0.071 at D = 16 384, worst 0.06
    against 0.24 (0.042 against 0.089 at 4 096), and every (pair, map) stayed
    within 10% against 79-92% for RFF.

    The paper's kernel is ``exp(-||x - t||^2)``; streamrff's is
    ``exp(-||x - y||^2 / (2 sigma^2))``, hence the input scaling ``x'``.

    The price is variance: one hash's estimate of ``k(x, x)`` has second moment
    ``(2 gamma)^d (4 pi)^-d (2 pi)^(d/2) ~= (gamma / sqrt(2 pi))^d``
    (``variance_factor_``) against 1 for sincos RFF: about 8 for d = 2, 22 for
    d = 3, 66 for d = 4 with the defaults. The map is meant for small d
    (point sets, shapes, low-dimensional distributions); fitting warns with
    :class:`~streamrff.errors.VarianceWarning` when the factor exceeds
    ``RELATIVE_RFF_VARIANCE_LIMIT`` (50).

    There is no structured variant: ``structured=True`` is an option of
    :class:`RFF` only. Structured (SORF) blocks give Gaussian-like rows, not
    uniform ones on the box, and they pay off for hundreds of columns, where
    this map's variance factor is astronomical; at the 1-3 columns it is made
    for, a dense projection costs next to nothing.

    Parameters
    ----------
    n_features : int, default=1024
        Output width D (even, >= 2): D/2 frequencies, a cos and a sin feature each.
    bandwidth : float or "median", default="median"
        Kernel width sigma; ``"median"`` (the median heuristic) as for :class:`RFF`.
    alpha : float, default=1e-3
        Smallest squared kernel distance ``D_K^2(P, Q)`` to be approximated with
        relative error, in (0, 1). Enters only through ``gamma`` (logarithmically).
    eps : float, default=0.1
        Target relative error, in (0, 1/2] (the paper assumes eps < 1/2).
    seed : int, numpy.random.Generator or None, default=0
        Seed of the frequencies (drawn from a stream of their own: independent of
        an :class:`RFF`'s with the same seed) and of the row sample for ``"median"``.

    Attributes
    ----------
    n_features_in_ : int
        Input width d.
    bandwidth_ : float
        Bandwidth sigma in use; inputs are scaled by ``1 / (sigma sqrt 2)`` to the paper's kernel.
    gamma_ : float
        Half-width of the frequency box (in units of the paper's kernel).
    variance_factor_ : float
        ``(gamma / sqrt(2 pi))^d``: per-feature second moment relative to sincos RFF.
    seed_ : int
        Integer seed recorded in :attr:`spec`.

    Raises
    ------
    InputError
        On an odd or too small ``n_features``, ``alpha`` outside (0, 1), ``eps``
        outside (0, 1/2], a non-positive bandwidth, or bad input rows.

    Warns
    -----
    VarianceWarning
        When ``variance_factor_ > RELATIVE_RFF_VARIANCE_LIMIT`` (e.g. d >= 4 with the defaults).

    References
    ----------
    Phillips, J. M. & Tai, W. M. (2018). Relative error RKHS embeddings for
    Gaussian kernels. Sec. 2 (hash family), Lemma 2, Theorems 9 and 12, Lemma 13.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> P, Q = rng.normal(size=(60, 2)), rng.normal(size=(60, 2)) + [0.5, 0.0]
    >>> rel = srf.RelativeErrorRFF(n_features=8192, bandwidth=1.0, seed=0).fit(P)
    >>> rel.transform(P).shape, rel.transform(P).dtype, round(rel.gamma_, 2)
    ((60, 8192), dtype('float32'), 6.96)

    The squared kernel distance of the two point sets, from their mean
    embeddings, is within ``eps`` (10%) of the exact one from Gram matrices:

    >>> gap = rel.transform(P).mean(axis=0, dtype=np.float64) - rel.transform(Q).mean(axis=0, dtype=np.float64)
    >>> exact = srf.exact_kernel(P, P).mean() + srf.exact_kernel(Q, Q).mean() - 2 * srf.exact_kernel(P, Q).mean()
    >>> bool(abs(gap @ gap / exact - 1) < 0.1)
    True
    """

    kind = "relative_rff"
    _family_params = {"alpha": float, "eps": float}

    def __init__(
        self,
        n_features: int = 1024,
        bandwidth: float | str = "median",
        alpha: float = 1e-3,
        eps: float = 0.1,
        seed: Seed = 0,
    ) -> None:
        super().__init__(n_features, bandwidth, seed, alpha=alpha, eps=eps)

    def _check_params(self) -> None:
        _check_paired_n_features(self.n_features, ": a cos and a sin feature per frequency")
        _check_fraction(self.alpha, "alpha", upper=1.0, include_upper=False)
        _check_fraction(self.eps, "eps", upper=0.5, include_upper=True)
        check_bandwidth(self.bandwidth)

    def _setup(self, n_features_in: int) -> None:
        super()._setup(n_features_in)
        self.gamma_ = relative_rff_gamma(self.n_features_in_, float(self.alpha), float(self.eps))
        self.variance_factor_ = float((self.gamma_ / np.sqrt(2.0 * np.pi)) ** self.n_features_in_)

    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        sample_request = super()._begin_fit(n_features_in)
        if self.variance_factor_ > RELATIVE_RFF_VARIANCE_LIMIT:
            warnings.warn(
                f"RelativeErrorRFF on {self.n_features_in_}-dimensional input: each feature has up to "
                f"{self.variance_factor_:.3g} times the variance of a sincos RFF feature "
                f"((gamma / sqrt(2 pi))^d with gamma = {self.gamma_:.3g}), so it needs about that many "
                "times more features for the same accuracy. It is meant for small d (point sets and "
                "shapes in 1-3 dimensions); use RFF for higher d, or raise alpha or eps to shrink gamma.",
                VarianceWarning,
                stacklevel=3,
            )
        return sample_request

    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        params = self._params()
        projection = X.astype(np.float64, copy=False) @ params["frequencies"].T
        self._cos_sin(projection, out)
        m = projection.shape[1]
        weights = params["weights"].astype(out.dtype)
        out[:, :m] *= weights
        out[:, m:] *= weights
