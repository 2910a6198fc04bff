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
(:func:`mmd2_variance`), and the statistic's asymptotic normality under the
alternative (Gretton et al. 2012, Corollary 16) gives the interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from ..errors import InputError
from ..maps import FeatureMap
from ..sketches.mean import MeanSketch

__all__ = ["EffectSize", "mmd2_variance", "effect_of_sketches", "effect_of_sums", "normal_interval"]

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
    variance : float or None
        Estimated ``Var[MMD^2_u]`` (:func:`mmd2_variance`); None without moments.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(np.zeros((1, 2)))
    >>> rng = np.random.default_rng(0)
    >>> sx, sy = (srf.sketch_array(rng.normal(size=(100, 2)), rff, moments=True) for _ in range(2))
    >>> effect = effect_of_sketches(sx, sy)
    >>> effect.kernel_diagonal, effect.variance > 0, effect.mean_x.shape
    (1.0, True, (64,))
    """

    feature_map: FeatureMap = field(repr=False)
    mean_x: np.ndarray = field(repr=False)
    mean_y: np.ndarray = field(repr=False)
    kernel_diagonal: float = 1.0
    variance: float | None = None


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
    linear_x = max(float(delta @ cov_x @ delta) - square_x / n - cross / m, 0.0)
    linear_y = max(float(delta @ cov_y @ delta) - cross / n - square_y / m, 0.0)
    return (
        4.0 * linear_x / n
        + 4.0 * linear_y / m
        + 2.0 * square_x / (n * (n - 1.0))
        + 2.0 * square_y / (m * (m - 1.0))
        + 4.0 * cross / (n * m)
    )


def normal_interval(statistic: float, variance: float, level: float) -> tuple[float, float]:
    """The two-sided normal interval ``statistic -/+ z_{(1+level)/2} sqrt(variance)`` for MMD^2, clipped at 0.

    MMD^2 is never negative, so the lower end is at least 0 (which can only add coverage).

    Examples
    --------
    >>> normal_interval(0.1, 0.0001, 0.95)
    (0.08040036015459947, 0.11959963984540054)
    >>> normal_interval(0.001, 0.0001, 0.95)[0]
    0.0
    """
    level = check_level(level)
    half_width = NormalDist().inv_cdf(0.5 + level / 2.0) * float(np.sqrt(max(variance, 0.0)))
    return max(statistic - half_width, 0.0), statistic + half_width


def check_level(level: object) -> float:
    """``level`` as a float strictly between 0 and 1, or an InputError naming it."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0.0 < float(level) < 1.0:
        raise InputError(f"level must be a number strictly between 0 and 1, such as 0.95. Got {level!r}.")
    return float(level)


def effect_of_sketches(sketch_x: MeanSketch, sketch_y: MeanSketch) -> EffectSize:
    """The :class:`EffectSize` of two mean sketches of one map (the variance when both have moments)."""
    count = sketch_x.count + sketch_y.count
    diagonal = (sketch_x.squared_norm_sum + sketch_y.squared_norm_sum) / count
    variance = mmd2_variance(sketch_x, sketch_y) if sketch_x.has_moments and sketch_y.has_moments else None
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
