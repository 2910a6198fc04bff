"""How much two samples differ: MMD^2 of the sketch's kernel with a confidence interval, from moment sketches.

The unbiased MMD^2 of a random-feature kernel ``k(x, y) = z(x).z(y)`` is a two-sample
U-statistic in the finite-dimensional features. With ``delta = mu_x - mu_y`` the
difference of the mean embeddings and ``C_x``, ``C_y`` the feature covariances,
its exact variance is (Gretton et al. 2012, sec. 6 for the leading terms)::

    Var[MMD^2_u] = 4 delta' C_x delta / n + 4 delta' C_y delta / m
                 + 2 tr(C_x^2) / (n (n - 1)) + 2 tr(C_y^2) / (m (m - 1)) + 4 tr(C_x C_y) / (n m)

The first two terms are ``4 Var_x[f] / n + 4 Var_y[f] / m`` for the witness
``f(x) = z(x).delta`` (the linear part of the statistic); the last three are the
variance of its degenerate, second-order part, which is all that is left when the
samples do not differ. Every term is a quadratic form in the centred second
moments, so two :class:`~streamrff.MeanSketch` made with ``moments=True`` give it
(:func:`mmd2_variance`).

The interval inverts the test of each hypothesised value theta (Wilson's interval for a
proportion does the same): theta is in the interval when the statistic lies between the quantiles
of its law at theta. With ``e`` the noise of the difference of the means and ``delta = sqrt(theta) u``,
``MMD^2_u - theta = (||e||^2 - tr C) + 2 sqrt(theta) u'e``: the degenerate part, of variance ``V_0``
whatever theta, and the linear part, of variance ``a theta`` (``a = 4 u' C u``), from the same noise
(:func:`law_draws`). The direction u is the observed difference ``d`` of the means shrunk toward
the leading eigenvector of ``C = C_x / n + C_y / m`` by the share of ``||d||^2`` that is noise
(:func:`delta_direction`). ``V_w``, for the interval of the
Gaussian kernel rather than of the drawn features, is the variance of the statistic over the
random frequencies given the data, estimated from the spread of the frequencies' own
contributions (:func:`feature_variance`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from ..errors import InputError
from ..maps import FeatureMap
from ..sketches.mean import MeanSketch

__all__ = [
    "EffectSize",
    "MMD2Variance",
    "mmd2_variance",
    "mmd2_variance_parts",
    "feature_variance",
    "effect_of_sketches",
    "effect_of_sums",
    "inverted_interval",
    "leading_eigenpairs",
    "statistic_law",
    "delta_direction",
    "law_draws",
    "INTERVAL_TARGETS",
]

#: What ``confidence_interval(interval=...)`` covers: ``"kernel"`` the MMD^2 of the Gaussian kernel the
#: features approximate (data and random frequencies both vary), ``"features"`` that of the drawn features' kernel.
INTERVAL_TARGETS = ("kernel", "features")

#: What a result says when it cannot give an interval: its samples were sketched without moments.
NO_MOMENTS_MESSAGE = (
    "The confidence interval of MMD^2 needs the second moments of both samples, which this test did not "
    "sketch. Sketch both samples with moments=True (CLI: streamrff sketch ... --moments) and test the "
    "sketches (streamrff.mmd_test; CLI: streamrff test --sketches A B), or pass moments=True to "
    "streamrff.two_sample_test (CLI: streamrff test X Y --moments)."
)


@dataclass(frozen=True, eq=False)
class EffectSize:
    """What a test keeps of its two samples beyond the statistic: the mean embeddings and, with moments,
    the variance of the unbiased MMD^2.

    Attributes
    ----------
    feature_map : FeatureMap
        The fitted map of both samples.
    mean_x, mean_y : ndarray of shape (D,), float64
        Mean feature vectors (kernel mean embeddings) of the two samples.
    kernel_diagonal : float
        Pooled mean of ``||z(x)||^2``, the features' estimate of ``k(x, x) = 1``
        (exactly 1 for sincos RFF): the witness is divided by it to read in kernel units.
    variance : MMD2Variance or None
        ``Var[MMD^2_u]`` as a function of the hypothesised MMD^2 (:func:`mmd2_variance_parts`);
        None without moments.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(np.zeros((1, 2)))
    >>> rng = np.random.default_rng(0)
    >>> sx, sy = (srf.sketch_array(rng.normal(size=(100, 2)), rff, moments=True) for _ in range(2))
    >>> effect = effect_of_sketches(sx, sy)
    >>> effect.kernel_diagonal, effect.variance.at(0.0) > 0, effect.mean_x.shape
    (1.0, True, (64,))
    """

    feature_map: FeatureMap = field(repr=False)
    mean_x: np.ndarray = field(repr=False)
    mean_y: np.ndarray = field(repr=False)
    kernel_diagonal: float = 1.0
    variance: MMD2Variance | None = None


@dataclass(frozen=True, eq=False)
class MMD2Variance:
    """``Var[MMD^2_u]`` as a function of the hypothesised population MMD^2 theta: ``degenerate + slope * theta``,
    plus ``features`` for the Gaussian kernel's interval, and the law of the statistic around theta.

    Attributes
    ----------
    degenerate : float
        ``V_0``, the variance of the statistic's degenerate second-order part (all of it when theta = 0).
    slope : float
        ``a``: the linear part ``4 delta' C delta`` (``C = C_x / n + C_y / m``) is ``a theta``,
        ``a = 4 u' C u`` for the direction u of delta (:func:`delta_direction`).
    plug_in : float
        :func:`mmd2_variance`, the estimate at the observed statistic (kept for reference).
    features : float or None
        Variance of MMD^2_u over the random frequencies given the data (:func:`feature_variance`);
        None when the map has no i.i.d. frequency blocks to resample.
    law : ndarray of shape (2, SHAPE_DRAWS) or None
        Standardised joint draws of the degenerate and the linear part (:func:`law_draws`); None for
        the normal law.

    Examples
    --------
    >>> MMD2Variance(1e-6, 2e-3, 1.5e-6, 4e-7).at(0.001), MMD2Variance(1e-6, 2e-3, 1.5e-6, 4e-7).at(0.001, "kernel")
    (3e-06, 3.4e-06)
    """

    degenerate: float
    slope: float
    plug_in: float
    features: float | None = None
    law: np.ndarray | None = field(default=None, repr=False)

    def at(self, mmd2: float, interval: str = "features") -> float:
        """The variance of MMD^2_u when the population MMD^2 is ``mmd2`` (``interval="kernel"``: plus ``features``)."""
        extra = self.features or 0.0 if interval == "kernel" else 0.0
        return self.degenerate + self.slope * max(mmd2, 0.0) + extra


def _centred_covariance(sketch: MeanSketch) -> np.ndarray:
    """The unbiased feature covariance ``(sum z z' - n zbar zbar') / (n - 1)`` of a moment sketch."""
    mean = sketch.mean
    covariance = sketch.moment - sketch.count * np.outer(mean, mean)
    covariance += covariance.T
    covariance /= 2.0 * (sketch.count - 1)
    return covariance


def _squared_frobenius_unbiased(covariance: np.ndarray, n: int) -> float:
    """``tr(C^2)`` from the sample covariance S of n rows: ``(n-1)/n (tr S^2 - (tr S)^2 / (n-1))``.

    ``E tr(S^2) = tr(C^2) (1 + 1/(n-1)) + (tr C)^2 / (n-1)`` for Gaussian rows; the
    correction removes the ``(tr C)^2 / n`` bias that dominates ``tr S^2`` when the
    spectrum is flat (many features, few rows). Clipped at 0.
    """
    raw = float(np.sum(covariance * covariance))
    trace = float(np.trace(covariance))
    return max((n - 1.0) / n * (raw - trace * trace / (n - 1.0)), 0.0)


def mmd2_variance(sketch_x: MeanSketch, sketch_y: MeanSketch) -> float:
    """Estimated variance of the unbiased MMD^2 of two moment sketches (the module's formula).

    Each covariance term is estimated without its leading bias: ``tr(C^2)`` as in
    :func:`_squared_frobenius_unbiased`, ``tr(C_x C_y)`` from the two independent
    sample covariances, and ``delta' C delta`` from ``d' S d`` with ``d = zbar_x - zbar_y``
    minus ``tr(C C_x) / n + tr(C C_y) / m`` (``E[d d'] = delta delta' + C_x / n + C_y / m``),
    clipped at 0.

    Parameters
    ----------
    sketch_x, sketch_y : MeanSketch
        Sketches of the two samples with one map, both with ``moments=True``, at least 2 rows each.

    Returns
    -------
    float

    Raises
    ------
    InputError
        If a sketch has no moments or fewer than 2 rows.

    References
    ----------
    Gretton, A., Borgwardt, K. M., Rasch, M. J., Schoelkopf, B. & Smola, A. (2012).
    A kernel two-sample test. JMLR 13, sec. 6 (Corollary 16).
    Serfling, R. J. (1980). Approximation theorems of mathematical statistics, sec. 5.2.

    Examples
    --------
    Against the spread of the statistic over repeated samples:

    >>> import numpy as np, streamrff as srf
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0, seed=0).fit(np.zeros((1, 1)))
    >>> rng = np.random.default_rng(0)
    >>> draws = [srf.mmd2(srf.sketch_array(rng.normal(size=(300, 1)), rff),
    ...                   srf.sketch_array(rng.normal(0.5, 1.0, size=(300, 1)), rff)) for _ in range(300)]
    >>> sx = srf.sketch_array(rng.normal(size=(300, 1)), rff, moments=True)
    >>> sy = srf.sketch_array(rng.normal(0.5, 1.0, size=(300, 1)), rff, moments=True)
    >>> ratio = np.sqrt(mmd2_variance(sx, sy)) / np.std(draws)
    >>> bool(0.7 < ratio < 1.4)
    True
    """
    terms = _variance_terms(sketch_x, sketch_y)
    n, m = float(sketch_x.count), float(sketch_y.count)
    return 4.0 * terms["linear_x"] / n + 4.0 * terms["linear_y"] / m + terms["degenerate"]


def _variance_terms(sketch_x: MeanSketch, sketch_y: MeanSketch) -> dict[str, Any]:
    """The covariances and the debiased terms of the variance formula (after checking both sketches)."""
    for name, sketch in (("sketch_x", sketch_x), ("sketch_y", sketch_y)):
        if not isinstance(sketch, MeanSketch):
            raise InputError(f"{name} must be a MeanSketch. Got {type(sketch).__name__}.")
        if not sketch.has_moments:
            raise InputError(NO_MOMENTS_MESSAGE)
        if sketch.count < 2:
            raise InputError(f"{name} has {sketch.count} row(s); the variance of MMD^2 needs at least 2 per sample.")
    if sketch_x.fingerprint != sketch_y.fingerprint:
        sketch_x.check_compatible(sketch_y)
    n, m = float(sketch_x.count), float(sketch_y.count)
    cov_x, cov_y = _centred_covariance(sketch_x), _centred_covariance(sketch_y)
    square_x = _squared_frobenius_unbiased(cov_x, sketch_x.count)
    square_y = _squared_frobenius_unbiased(cov_y, sketch_y.count)
    cross = float(np.sum(cov_x * cov_y))
    delta = sketch_x.mean - sketch_y.mean
    return {
        "cov_x": cov_x,
        "cov_y": cov_y,
        "delta": delta,
        "linear_x": max(float(delta @ cov_x @ delta) - square_x / n - cross / m, 0.0),
        "linear_y": max(float(delta @ cov_y @ delta) - cross / n - square_y / m, 0.0),
        "degenerate": 2.0 * square_x / (n * (n - 1.0)) + 2.0 * square_y / (m * (m - 1.0)) + 4.0 * cross / (n * m),
    }


def mmd2_variance_parts(sketch_x: MeanSketch, sketch_y: MeanSketch, eigenpairs: Callable | None = None) -> MMD2Variance:
    """``Var[MMD^2_u]`` of two moment sketches as a function of the population MMD^2 (:class:`MMD2Variance`).

    The degenerate part is :func:`mmd2_variance`'s; the linear part ``4 delta' C delta`` is written
    ``a ||delta||^2``, ``a = 4 u' C u`` for the direction u of :func:`delta_direction` (a direction,
    whose quotient is bounded by the covariance's eigenvalues and does not fall with the statistic as
    the plug-in ``d' C d`` does). ``law`` is :func:`statistic_law`'s (its eigenpairs from ``eigenpairs``,
    default :func:`leading_eigenpairs`), ``features`` :func:`feature_variance`.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0, seed=0).fit(np.zeros((1, 1)))
    >>> rng = np.random.default_rng(0)
    >>> sx = srf.sketch_array(rng.normal(size=(300, 1)), rff, moments=True)
    >>> sy = srf.sketch_array(rng.normal(0.5, 1.0, size=(300, 1)), rff, moments=True)
    >>> parts = mmd2_variance_parts(sx, sy)
    >>> bool(parts.degenerate < parts.at(0.05) < parts.at(0.1)), parts.features > 0
    (True, True)
    """
    terms = _variance_terms(sketch_x, sketch_y)
    n, m = float(sketch_x.count), float(sketch_y.count)
    slope, law = statistic_law(
        terms["cov_x"] / n + terms["cov_y"] / m, terms["delta"], eigenpairs or leading_eigenpairs
    )
    return MMD2Variance(
        degenerate=terms["degenerate"],
        slope=slope,
        plug_in=4.0 * terms["linear_x"] / n + 4.0 * terms["linear_y"] / m + terms["degenerate"],
        features=feature_variance(sketch_x, sketch_y),
        law=law,
    )


#: Draws of the statistic's law, and the leading eigenvalues that shape it (the rest is normal).
SHAPE_DRAWS = 4000
SHAPE_EIGENVALUES = 64


def leading_eigenpairs(covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``SHAPE_EIGENVALUES`` leading eigenvalues and eigenvectors of a symmetric matrix (all of them up to
    ``4 SHAPE_EIGENVALUES`` rows, else ``eigsh``)."""
    if covariance.shape[0] <= 4 * SHAPE_EIGENVALUES:
        eigenvalues, vectors = np.linalg.eigh(covariance)
        return eigenvalues[-SHAPE_EIGENVALUES:], vectors[:, -SHAPE_EIGENVALUES:]
    from scipy.sparse.linalg import eigsh

    return eigsh(covariance, k=SHAPE_EIGENVALUES, which="LA", v0=np.ones(covariance.shape[0]))


def statistic_law(
    covariance: np.ndarray, difference: np.ndarray, eigenpairs: Callable = leading_eigenpairs
) -> tuple[float, np.ndarray | None]:
    """The slope ``a`` of the linear part's variance and :func:`law_draws`, for the covariance C of the difference
    of the means and its observed value; ``eigenpairs(C)`` gives C's ``SHAPE_EIGENVALUES`` leading eigenvalues
    and eigenvectors."""
    eigenvalues, vectors = eigenpairs(covariance)
    direction = delta_direction(covariance, difference, vectors[:, int(np.argmax(eigenvalues))])
    slope = 4.0 * max(float(direction @ covariance @ direction), 0.0)
    return slope, law_draws(covariance, eigenvalues, vectors, direction)


def delta_direction(covariance: np.ndarray, difference: np.ndarray, leading: np.ndarray) -> np.ndarray:
    """The direction u of ``delta = mu_x - mu_y`` that the law takes: the observed difference d of the means,
    shrunk toward the leading eigenvector of its covariance C by the share of ``||d||^2`` that is noise.

    ``E ||d||^2 = ||delta||^2 + tr C``, so ``rho = 1 - tr C / ||d||^2`` (clipped to [0, 1]) estimates the
    share that is ``delta``; ``u`` is ``sqrt(rho) d / ||d|| + sqrt(1 - rho) v_1``, normalised. When d is
    mostly noise its direction says nothing of delta's, and ``v_1`` is where a small change of the
    distribution moves the features' mean most (and the largest linear part the covariance allows).
    """
    norm = float(np.linalg.norm(difference))
    if not norm > 0:
        return leading
    observed = difference / norm
    share = min(max(1.0 - float(np.trace(covariance)) / (norm * norm), 0.0), 1.0)
    toward = leading if float(leading @ observed) >= 0 else -leading
    direction = np.sqrt(share) * observed + np.sqrt(1.0 - share) * toward
    return direction / np.linalg.norm(direction)


def law_draws(
    covariance: np.ndarray, eigenvalues: np.ndarray, vectors: np.ndarray, direction: np.ndarray
) -> np.ndarray | None:
    """Joint draws of the statistic's two parts, each standardised (mean 0, variance 1), shape (2, SHAPE_DRAWS).

    With ``e`` the noise of the difference of the means (normal, covariance ``C = C_x / n + C_y / m``) and
    ``delta = sqrt(theta) u`` (u a unit ``direction``), ``MMD^2_u - theta`` is
    ``(||e||^2 - tr C) + 2 sqrt(theta) u'e``: a degenerate part ``sum_i mu_i (xi_i^2 - 1)`` over the
    eigenvalues mu of C (Gretton et al. 2012, Theorem 12) and a linear part of the *same* normals xi. Together
    they are a noncentral quadratic form, more right-skewed than the two parts drawn independently. The
    eigenpairs given (the leading ones) carry the normals; the rest of each part is an independent normal of
    its variance. Fixed seed: the interval is a function of the sketches. None if the degenerate part is 0.
    """
    leading = np.clip(eigenvalues, 0.0, None)
    rng = np.random.default_rng(48)
    normals = rng.standard_normal((SHAPE_DRAWS, leading.shape[0]))
    remainder = rng.standard_normal((2, SHAPE_DRAWS))
    rest = max(2.0 * float(np.sum(covariance * covariance)) - 2.0 * float(np.sum(leading * leading)), 0.0)
    degenerate = (normals * normals - 1.0) @ leading + np.sqrt(rest) * remainder[0]
    projection = np.abs(vectors.T @ direction)  # each eigenvector's sign taken along the direction
    rest = max(float(direction @ covariance @ direction) - float(np.sum(leading * projection**2)), 0.0)
    linear = normals @ (np.sqrt(leading) * projection) + np.sqrt(rest) * remainder[1]
    draws = np.stack([degenerate, linear])
    draws -= draws.mean(axis=1, keepdims=True)
    spread = draws.std(axis=1, keepdims=True)
    if not spread[0, 0] > 0:
        return None
    draws /= np.where(spread > 0, spread, 1.0)  # a linear part of variance 0 stays 0 (then the slope is 0)
    draws.setflags(write=False)
    return draws


def _frequency_groups(spec: dict[str, Any], n_features: int) -> np.ndarray | None:
    """Per feature, the index of its block of frequencies drawn independently of the other blocks, or None.

    A random Fourier map (kind ``"rff"``) has m frequencies: sincos features j and j + m share
    frequency j, cosphase feature j has its own. I.i.d. frequencies are blocks of one; orthogonal
    ones come in blocks of d, structured (SORF) ones of d padded to a power of two.
    """
    if spec.get("kind") != "rff" or spec.get("categorical") is not None:
        return None
    sincos = spec.get("variant", "sincos") == "sincos"
    n_frequencies = n_features // 2 if sincos else n_features
    width = int(spec.get("n_features_in", 1))
    if spec.get("structured"):
        block = 1 << max(width - 1, 0).bit_length()
    elif spec.get("orthogonal"):
        block = width
    else:
        block = 1
    groups = np.arange(n_frequencies) // block
    if groups[-1] < 1:
        return None
    return np.concatenate([groups, groups]) if sincos else groups


def feature_variance(sketch_x: MeanSketch, sketch_y: MeanSketch) -> float | None:
    """The variance of MMD^2_u over the random frequencies of the map, given the two samples.

    The unbiased MMD^2 is a sum over the features, ``sum_j c_j`` with
    ``c_j = (S_xj^2 - Q_xj) / (n (n-1)) + (S_yj^2 - Q_yj) / (m (m-1)) - 2 S_xj S_yj / (n m)``
    (``S`` the feature sums, ``Q`` the sums of squares: the moments' diagonal). Grouped by
    independently drawn blocks of frequencies (:func:`_frequency_groups`), the K block sums are
    i.i.d. given the data with mean the Gaussian kernel's unbiased MMD^2 divided by K, so
    ``K s^2`` (``s^2`` their sample variance) estimates the variance of the statistic over a new
    draw of the map. None for a map without such blocks (not a random Fourier map) or without moments.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(500, 1)), rng.normal(0.5, 1.0, size=(500, 1))
    >>> def statistic(seed, moments=False):
    ...     rff = srf.RFF(n_features=64, bandwidth=1.0, seed=seed).fit(X)
    ...     return srf.sketch_array(X, rff, moments=moments), srf.sketch_array(Y, rff, moments=moments)
    >>> spread = np.std([srf.mmd2(*statistic(seed)) for seed in range(200)])
    >>> bool(0.7 < np.sqrt(feature_variance(*statistic(0, True))) / spread < 1.4)
    True
    """
    if not (sketch_x.has_moments and sketch_y.has_moments):
        return None
    groups = _frequency_groups(sketch_x.feature_map.spec, sketch_x.mean.shape[0])
    if groups is None:
        return None
    n, m = float(sketch_x.count), float(sketch_y.count)
    sum_x, sum_y = sketch_x.feature_sum, sketch_y.feature_sum
    square_x, square_y = np.diagonal(sketch_x.moment), np.diagonal(sketch_y.moment)
    contributions = (
        (sum_x * sum_x - square_x) / (n * (n - 1.0))
        + (sum_y * sum_y - square_y) / (m * (m - 1.0))
        - 2.0 * sum_x * sum_y / (n * m)
    )
    blocks = np.bincount(groups, weights=contributions)
    return float(blocks.shape[0] * np.var(blocks, ddof=1))


def inverted_interval(
    statistic: float, variance: MMD2Variance, level: float, interval: str = "kernel"
) -> tuple[float, float]:
    """The ``level`` interval for MMD^2 that inverts the test of each hypothesised value theta.

    theta >= 0 is in the interval when the statistic lies between the ``(1 -/+ level) / 2`` quantiles
    of its law at theta, ``theta + sqrt(V_0) S + sqrt(a theta) L (+ sqrt(V_w) N for interval="kernel")``
    (:class:`MMD2Variance`): ``S`` the degenerate part and ``L`` the linear part along the direction of
    :func:`delta_direction`, drawn from the same normals (:func:`law_draws`), ``N`` normal. Each end is
    found by bisection (48 halvings at most, or to a relative width of 1e-7). Unlike
    ``T -/+ z sqrt(Var(T))``, the upper end takes the larger variance of the larger values it tests, so
    the interval does not shrink with a small statistic (Wilson 1927 does the same for a proportion).
    Without a law the law is normal and the ends are the roots of ``(T - theta)^2 = z^2 Var(theta)``,
    ``c -/+ sqrt(c^2 - T^2 + z^2 V)`` with ``c = T + z^2 a / 2``. Ends are clipped at 0.

    Examples
    --------
    With no linear part it is the normal interval; a slope lifts the upper end more than the lower:

    >>> inverted_interval(0.1, MMD2Variance(1e-4, 0.0, 1e-4), 0.95, "features")
    (0.08040036015459947, 0.11959963984540054)
    >>> low, high = inverted_interval(0.001, MMD2Variance(1e-6, 1e-3, 1e-6), 0.95, "features")
    >>> low, round(high, 5)
    (0.0, 0.00629)
    """
    level = check_level(level)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    constant = variance.at(0.0, interval)
    centre = statistic + z * z * variance.slope / 2.0
    discriminant = centre * centre - statistic * statistic + z * z * constant
    if discriminant < 0:  # no theta >= 0 passes (a statistic far below 0): the value closest to passing
        return 0.0, max(centre, 0.0)
    half_width = float(np.sqrt(discriminant))
    normal = max(centre - half_width, 0.0), max(centre + half_width, 0.0)
    if variance.law is None:
        return normal
    return _inverted_with_law(statistic, variance, level, interval, normal[1])


def _inverted_with_law(
    statistic: float, variance: MMD2Variance, level: float, interval: str, normal_high: float
) -> tuple[float, float]:
    """The inverted interval with the noncentral law of :func:`law_draws`, each end by bisection."""
    degenerate, linear = variance.law
    independent = np.random.default_rng(49).standard_normal(degenerate.shape[0])
    base = np.sqrt(variance.degenerate) * degenerate
    base = base + np.sqrt(variance.at(0.0, interval) - variance.degenerate) * independent
    tails = (0.5 - level / 2.0, 0.5 + level / 2.0)

    def quantiles(theta: float) -> np.ndarray:
        return np.quantile(theta + base + np.sqrt(variance.slope * theta) * linear, tails)

    def bisect(passes, inside: float, outside: float) -> float:
        for _ in range(48):
            if abs(outside - inside) <= 1e-7 * max(abs(inside), abs(outside)):
                break
            middle = (inside + outside) / 2.0
            inside, outside = (middle, outside) if passes(middle) else (inside, middle)
        return inside

    if quantiles(0.0)[1] >= statistic:
        low = 0.0
    else:  # quantiles(max(statistic, 0))[1] >= statistic: the upper quantile lies above its centre
        low = bisect(lambda theta: quantiles(theta)[1] < statistic, 0.0, max(statistic, 0.0))
    start = max(statistic, low, 0.0)
    if quantiles(start)[0] > statistic:
        return low, low
    outside = max(normal_high, start) * 2.0 + np.sqrt(variance.at(normal_high, interval)) + 1e-300
    while quantiles(outside)[0] <= statistic:
        outside *= 2.0
    return low, bisect(lambda theta: quantiles(theta)[0] <= statistic, start, outside)


def check_interval(interval: object, effect: EffectSize) -> str:
    """``interval`` (``"kernel"`` or ``"features"``), refused when ``"kernel"`` cannot be estimated for the map."""
    if interval not in INTERVAL_TARGETS:
        raise InputError(
            f"interval must be 'kernel' (the Gaussian kernel's MMD^2) or 'features' (the drawn features' kernel). "
            f"Got {interval!r}."
        )
    if interval == "kernel" and effect.variance is not None and effect.variance.features is None:
        raise InputError(
            f"interval='kernel' needs a random Fourier map (kind 'rff') to resample its frequencies; this map is "
            f"{effect.feature_map.spec.get('kind')!r}. Pass interval='features' for its own kernel's MMD^2."
        )
    return str(interval)


def default_interval(effect: EffectSize | None) -> str:
    """What a result prints: ``"kernel"`` when the feature variance is known, else ``"features"``."""
    if effect is not None and effect.variance is not None and effect.variance.features is None:
        return "features"
    return "kernel"


#: How a printed interval says what it covers.
INTERVAL_LABELS = {"kernel": "Gaussian kernel", "features": "drawn features' kernel"}


def check_level(level: object) -> float:
    """``level`` as a float strictly between 0 and 1, or an InputError naming it."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0.0 < float(level) < 1.0:
        raise InputError(f"level must be a number strictly between 0 and 1, such as 0.95. Got {level!r}.")
    return float(level)


def effect_of_sketches(sketch_x: MeanSketch, sketch_y: MeanSketch) -> EffectSize:
    """The :class:`EffectSize` of two mean sketches of one map (the variance when both have moments)."""
    count = sketch_x.count + sketch_y.count
    diagonal = (sketch_x.squared_norm_sum + sketch_y.squared_norm_sum) / count
    variance = mmd2_variance_parts(sketch_x, sketch_y) if sketch_x.has_moments and sketch_y.has_moments else None
    return EffectSize(sketch_x.feature_map, sketch_x.mean, sketch_y.mean, _positive(diagonal), variance)


def effect_of_sums(
    feature_map: FeatureMap,
    n_x: int,
    n_y: int,
    feature_sum_x: np.ndarray,
    feature_sum_y: np.ndarray,
    squared_norm_sum_x: float,
    squared_norm_sum_y: float,
) -> EffectSize:
    """The :class:`EffectSize` of a permutation test's sums: the means, no variance (no moments)."""
    diagonal = (squared_norm_sum_x + squared_norm_sum_y) / (n_x + n_y)
    return EffectSize(feature_map, feature_sum_x / n_x, feature_sum_y / n_y, _positive(diagonal), None)


def _positive(diagonal: float) -> float:
    return float(diagonal) if np.isfinite(diagonal) and diagonal > 0 else 1.0
