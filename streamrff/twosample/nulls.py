"""The unbiased MMD^2 from sums and the null distributions that calibrate it.

Pure NumPy over sums and moment sketches: the permuted statistics of the
permutation test, the weighted chi-square null of the spectral test (Gretton et
al. 2009) and Hotelling's T^2 with its chi-square null (Chwialkowski et al.
2015), and the Monte-Carlo p-value ``(1 + #{null >= T}) / (1 + len(null))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from ..sketches import MeanSketch

__all__ = ["DEFAULT_SPECTRAL_DRAWS", "HOTELLING_EXPLAINED_VARIANCE"]

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
        return (1.0 if same else 0.0), np.array([0.0 if same else np.inf, 1.0])
    explained = np.cumsum(eigenvalues) / trace
    n_components = int(np.searchsorted(explained, HOTELLING_EXPLAINED_VARIANCE) + 1)
    rank = int(np.count_nonzero(eigenvalues > 1e-10 * eigenvalues[0]))
    n_components = max(1, min(n_components, rank, int(np.sqrt(n_total))))
    ridge = 1e-8 * trace / eigenvalues.shape[0]
    projected = vectors[:, :n_components].T @ (a.mean - b.mean)
    t_squared = n_x * n_y / n_total * float(projected**2 @ (1.0 / (eigenvalues[:n_components] + ridge)))
    p_value = float(stats.chi2.sf(t_squared, n_components))
    return p_value, np.array([t_squared, n_components], dtype=np.float64)
