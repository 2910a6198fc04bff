"""The unbiased MMD^2 from sums and the null distributions that calibrate it.

Pure NumPy over sums and moment sketches: the permuted statistics of the
permutation test, the weighted chi-square null of the spectral test (Gretton et
al. 2009) and Hotelling's T^2 with its chi-square null (Chwialkowski et al.
2015), and the Monte-Carlo p-value ``(1 + #{null >= T}) / (1 + len(null))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special, stats

from ..sketches.mean import MeanSketch

__all__ = ["DEFAULT_SPECTRAL_DRAWS", "HOTELLING_EXPLAINED_VARIANCE", "chi2_log_survival"]

#: Monte-Carlo draws of the spectral null.
DEFAULT_SPECTRAL_DRAWS = 10_000
#: Share of the pooled feature variance kept by the Hotelling test's projection.
HOTELLING_EXPLAINED_VARIANCE = 0.95


def _unbiased_mmd2(
    sum_x: np.ndarray, sum_y: np.ndarray, norms_x: Any, norms_y: Any, n_x: int, n_y: int
) -> np.ndarray:
    """Unbiased MMD^2 from feature sums and squared-norm sums; vectorised over leading axes."""
    within_x = (np.einsum("...j,...j->...", sum_x, sum_x) - norms_x) / (n_x * (n_x - 1.0))
    within_y = (np.einsum("...j,...j->...", sum_y, sum_y) - norms_y) / (n_y * (n_y - 1.0))
    return within_x + within_y - 2.0 * np.einsum("...j,...j->...", sum_x, sum_y) / (n_x * n_y)


def _permutation_null(sketch: Any) -> tuple[float, np.ndarray, float]:
    """Observed unbiased MMD^2, the B permuted ones and the tie tolerance of a complete TwoSampleSketch.

    The b-th null statistic applies the MMD^2 formula to ``S_x^b = P_b``,
    ``S_y^b = S_x + S_y - P_b``, ``Q_x^b = q_b``, ``Q_y^b = Q_x + Q_y - q_b``;
    statistics within ``1e-12`` times the mean kernel diagonal count as ties.
    """
    n_x, n_y = sketch.n_x, sketch.n_y
    statistic = float(
        _unbiased_mmd2(
            sketch.feature_sum_x, sketch.feature_sum_y, sketch.squared_norm_sum_x, sketch.squared_norm_sum_y, n_x, n_y
        )
    )
    total_sum = sketch.feature_sum_x + sketch.feature_sum_y
    total_norms = sketch.squared_norm_sum_x + sketch.squared_norm_sum_y
    null = _unbiased_mmd2(
        sketch.permutation_sums,
        total_sum - sketch.permutation_sums,
        sketch.permutation_squared_norms,
        total_norms - sketch.permutation_squared_norms,
        n_x,
        n_y,
    )
    return statistic, null, 1e-12 * max(total_norms / (n_x + n_y), 1e-300)


def _monte_carlo_p_value(null: np.ndarray, statistic: float, tolerance: float) -> float:
    """``(1 + #{null >= statistic}) / (1 + len(null))``, counting ties within ``tolerance`` as >=."""
    return float((1 + np.count_nonzero(null >= statistic - tolerance)) / (1 + null.shape[0]))


def _pooled_covariance(a: MeanSketch, b: MeanSketch) -> np.ndarray:
    """Pooled within-sample covariance ``(W_x + W_y) / (n + m - 2)``, ``W = M - S S^T / n``."""
    scatter = a.moment - np.outer(a.feature_sum, a.feature_sum) / a.count
    scatter = scatter + (b.moment - np.outer(b.feature_sum, b.feature_sum) / b.count)
    covariance = scatter / (a.count + b.count - 2.0)
    return (covariance + covariance.T) / 2.0


def _spectral_test(a: MeanSketch, b: MeanSketch, statistic: float, rng: np.random.Generator, n_draws: int):
    eigenvalues = np.clip(np.linalg.eigvalsh(_pooled_covariance(a, b))[::-1], 0.0, None)
    # Drop the tail whose terms carry < 1e-9 of the null variance 2 sum lambda^2 (and mean 0):
    # the spectrum of a smooth kernel decays fast, so this often keeps a few dozen of D terms.
    tail = np.cumsum((eigenvalues**2)[::-1])[::-1]
    eigenvalues = eigenvalues[tail > 1e-9 * tail[0]] if tail[0] > 0 else eigenvalues[:0]
    scale = 1.0 / a.count + 1.0 / b.count
    draws = np.empty(n_draws)
    block = max(1, 2**20 // max(1, eigenvalues.shape[0]))
    for start in range(0, n_draws, block):
        size = min(block, n_draws - start)
        chi2 = rng.standard_normal((size, eigenvalues.shape[0])) ** 2
        draws[start : start + size] = scale * ((chi2 - 1.0) @ eigenvalues)
    tolerance = 1e-12 * max(eigenvalues.sum(), 1e-300) * scale
    return _monte_carlo_p_value(draws, statistic, tolerance), draws


def chi2_log_survival(statistic: float, dof: int) -> float:
    """``log P(chi2_dof >= statistic)``, accurate where the probability itself underflows float64.

    scipy's ``chi2.logsf`` is the log of ``chi2.sf``: -inf once the tail
    probability falls below ~1e-308 (T^2 > ~1420 at one degree of freedom). There
    the regularised upper incomplete gamma function ``Q(a, x)``, ``a = dof / 2``,
    ``x = statistic / 2``, is evaluated in log space from its continued fraction
    (Legendre; DLMF 8.9.2), which converges fast for ``x > a + 1``, where every
    such tail lies:

    ``log Q(a, x) = -x + a log x - log Gamma(a) - log(x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / ...))``.

    Parameters
    ----------
    statistic : float
        Non-negative chi-square statistic (may be inf).
    dof : int
        Degrees of freedom, >= 1.

    Returns
    -------
    float
        The natural log of the survival function (``-inf`` only for an infinite statistic).

    References
    ----------
    NIST Digital Library of Mathematical Functions, eq. 8.9.2 (the continued fraction of the
    incomplete gamma function).

    Examples
    --------
    Two degrees of freedom: ``P(chi2_2 >= t) = exp(-t / 2)``, far beyond float64's range:

    >>> from streamrff.twosample.nulls import chi2_log_survival
    >>> float(chi2_log_survival(3000.0, 2))
    -1500.0
    """
    log_p = float(stats.chi2.logsf(statistic, dof))
    a, x = 0.5 * dof, 0.5 * statistic
    # Inside float64's normal range scipy is exact enough; beyond it, or for an infinite statistic, it is not used.
    if log_p > -700.0 or not np.isfinite(x) or x <= a + 1.0:
        return log_p
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    fraction = d
    for i in range(1, 10_000):  # modified Lentz; converges in a handful of terms for x >> a
        term = -i * (i - a)
        b += 2.0
        d = term * d + b
        d = tiny if abs(d) < tiny else d
        c = b + term / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        fraction *= step
        if abs(step - 1.0) < 1e-16:
            break
    return float(-x + a * np.log(x) - special.gammaln(a) + np.log(fraction))


def _hotelling_test(a: MeanSketch, b: MeanSketch):
    n_x, n_y = a.count, b.count
    n_total = n_x + n_y
    eigenvalues, vectors = np.linalg.eigh(_pooled_covariance(a, b))
    eigenvalues, vectors = eigenvalues[::-1], vectors[:, ::-1]
    eigenvalues = np.clip(eigenvalues, 0.0, None)
    trace = eigenvalues.sum()
    if trace <= 0:
        # Every feature is constant within both samples: the means differ or they don't.
        difference = a.mean - b.mean
        same = bool(np.allclose(difference, 0.0, atol=1e-12))
        return (1.0 if same else 0.0), np.array([0.0 if same else np.inf, 1.0]), (0.0 if same else -np.inf)
    explained = np.cumsum(eigenvalues) / trace
    n_components = int(np.searchsorted(explained, HOTELLING_EXPLAINED_VARIANCE) + 1)
    rank = int(np.count_nonzero(eigenvalues > 1e-10 * eigenvalues[0]))
    n_components = max(1, min(n_components, rank, int(np.sqrt(n_total))))
    ridge = 1e-8 * trace / eigenvalues.shape[0]
    projected = vectors[:, :n_components].T @ (a.mean - b.mean)
    t_squared = n_x * n_y / n_total * float(projected**2 @ (1.0 / (eigenvalues[:n_components] + ridge)))
    log_p = chi2_log_survival(t_squared, n_components)
    # p as a float64 (0.0 below ~1e-308) and its log10, which carries the p-values that float64 cannot.
    return float(np.exp(log_p)), np.array([t_squared, n_components], dtype=np.float64), log_p / np.log(10.0)
