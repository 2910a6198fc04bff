"""The centred ridge system in eigen-coordinates and generalized cross-validation over it (:mod:`~streamrff.ridge`).

What the solve and ``alpha="auto"`` need from a regression sketch: the eigenpairs of the centred
second moment counted by a rank tolerance (:func:`rank_tolerance`), the rounding level that the
alpha grid starts above (:func:`rounding_level`), and the GCV scores, degrees of freedom and
residual sums of squares for a grid of alphas, written without cancellation.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._base.blas import one_blas_thread
from ..sketches.nystrom import nystrom_reconstruction
from ..sketches.regression import NystromRegressionSketch, RegressionSketch

__all__ = ["rank_tolerance", "rounding_level"]


class _Spectrum(NamedTuple):
    """The centred system in eigen-coordinates: what the solve and GCV need."""

    eigenvalues: np.ndarray  # (r,), > 0: of the centred moment C above its rank tolerance (or the rank-k range)
    eigenvectors: np.ndarray  # (D, r), orthonormal columns
    projected: np.ndarray  # (r, t): eigenvectors^T c
    target_total: np.ndarray  # (t,): ||y_c||^2 per target
    mean: np.ndarray  # (D,): feature mean
    noise: float  # rounding level of the eigenvalues (alphas below 10 times it are not compared)
    trace: float  # trace(C), exact


def _centred_targets(sketch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mu, c, ||y_c||^2)``: feature mean, centred cross moment ``Z^T y - n mu ybar^T`` and centred target norms.

    The target sums are about the sketch's shift ``c0`` (``y - c0``); centring does not depend on it."""
    n = sketch.count
    mean = sketch.feature_sum / n
    target_mean = sketch.target_sum / n
    cross = sketch.cross_moment - n * np.outer(mean, target_mean)
    target_total = np.diag(sketch.target_moment) - n * target_mean**2
    return mean, cross, np.clip(target_total, 0.0, None)


#: Unit roundoff of the tile products behind the centred second moment: float32
#: (:func:`streamrff.sketches.regression.regression_sketch_of_chunk`); see :func:`rounding_level`.
_PRODUCT_EPSILON = float(np.finfo(np.float32).eps)


def rank_tolerance(eigenvalues: np.ndarray, n_rows: int) -> float:
    """The eigenvalue of the centred moment at or below which a direction is not counted (``numpy.linalg.matrix_rank``).

    ``matrix_rank`` of a Hermitian D x D matrix counts the eigenvalues above
    ``S.max() * D * eps`` (float64 eps: the backward error of the decomposition), and so
    does this: ``s.max() * max(n, D) * eps64``. The centred moment of n rows has rank at
    most n - 1 besides, so at most the n - 1 largest count.

    Why not a float32 tolerance, although the moment's tile products are float32? Their
    rounding moves every eigenvalue by up to its spectral norm, measured at 0.2 to 0.8 times
    ``s.max() * eps32`` (D = 1024; 331 diabetes, 1 500 Friedman #1 and 1 500 digits rows),
    but the directions below that are still mostly real variance: cutting at
    ``s.max() * eps32`` dropped 6 of 330 directions on diabetes and 145 of 1 023 on Friedman
    #1 and moved GCV by up to 7e-3 from numpy's on the same float32 features, where counting
    them kept it within 4e-5 (float64 features: 4e-12). Below n rows, the rounding-level
    directions beyond the n - 1 that rows can span are what numpy would count and this does
    not. The float32 rounding instead sets the floor of the alpha grid
    (:func:`rounding_level`, :func:`streamrff.ridge.estimators.default_alphas`): an alpha 10 times above it gives a
    direction it perturbs at most a tenth of a degree of freedom's change.

    Parameters
    ----------
    eigenvalues : ndarray
        Computed eigenvalues of the centred moment (any order).
    n_rows : int
        Rows sketched.

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.ridge.estimators import rank_tolerance
    >>> bool(rank_tolerance(np.array([4.0, 1.0, 1e-9]), 100) == 4.0 * 100 * np.finfo(np.float64).eps)
    True
    """
    largest = float(np.max(eigenvalues, initial=0.0))
    return largest * max(int(n_rows), int(np.size(eigenvalues))) * float(np.finfo(np.float64).eps)


def rounding_level(eigenvalues: np.ndarray) -> float:
    """How far the float32 tile products move the centred moment's eigenvalues: ``max(s.max() * eps32, noise)``.

    ``noise`` is the magnitude of the most negative computed eigenvalue (the exact moment is
    positive semi-definite, so at least that much rounding is present); ``s.max() * eps32``
    bounds what was measured (0.2 to 0.8 times it, see :func:`rank_tolerance`) when no
    eigenvalue comes out negative. The ``alpha="auto"`` grid starts at 10 times it.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.ridge.estimators import rounding_level
    >>> bool(rounding_level(np.array([-1e-3, 0.5, 4.0])) == 1e-3)
    True
    """
    largest = float(np.max(eigenvalues, initial=0.0))
    return max(largest * _PRODUCT_EPSILON, -float(np.min(eigenvalues, initial=0.0)))


def _centred_system(sketch: RegressionSketch, rank: int | None = None) -> _Spectrum:
    """Eigenpairs of the centred moment above its rank tolerance (:func:`rank_tolerance`; at most n - 1 of them,
    the rank of n centred rows; the top ``rank`` if given) and ``V^T c``; ``noise`` is :func:`rounding_level`."""
    n = sketch.count
    mean, cross, target_total = _centred_targets(sketch)
    centred = sketch.moment - n * np.outer(mean, mean)
    centred += centred.T
    centred /= 2.0
    with one_blas_thread():  # deterministic, and faster than spinning threads on a busy machine
        eigenvalues, eigenvectors = np.linalg.eigh(centred)
    trace = float(np.clip(eigenvalues, 0.0, None).sum())
    resolved = min(int(np.count_nonzero(eigenvalues > rank_tolerance(eigenvalues, n))), n - 1)
    if rank is not None:
        resolved = min(resolved, rank)
    noise = rounding_level(eigenvalues)
    eigenvalues, eigenvectors = eigenvalues[::-1][:resolved], eigenvectors[:, ::-1][:, :resolved]
    return _Spectrum(eigenvalues, eigenvectors, eigenvectors.T @ cross, target_total, mean, noise, trace)


def _low_rank_system(sketch: NystromRegressionSketch, rank: int) -> _Spectrum:
    """The rank-``rank`` Nystrom eigenpairs of the centred moment (those resolved above the shift) and ``U^T c``."""
    n = sketch.count
    mean, cross, target_total = _centred_targets(sketch)
    with one_blas_thread():  # deterministic, and faster than spinning threads on a busy machine
        # float64 epsilon: the range sketch's tile products are float64 (regression_sketch_of_chunk)
        values, vectors, trace, shift = nystrom_reconstruction(sketch, rank, epsilon=float(np.finfo(float).eps))
    resolved = np.flatnonzero(values > 0.0)[: n - 1]  # at or below the shift: no variance resolved, no direction
    eigenvalues, eigenvectors = n * values[resolved], vectors[:, resolved]
    return _Spectrum(eigenvalues, eigenvectors, eigenvectors.T @ cross, target_total, mean, n * shift, n * trace)


def _gcv_from_spectrum(
    eigenvalues: np.ndarray, projected: np.ndarray, target_total: np.ndarray, n: int, alphas: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GCV scores (summed over targets), effective degrees of freedom and RSS per alpha.

    Over the r counted eigenvalues ``s`` (all > 0, r <= n - 1; :func:`rank_tolerance`) and
    ``b = V^T c``, written so that neither ``n - df`` nor the RSS is a difference of two
    nearly equal numbers where that can be avoided:

    - ``n - df = (n - 1 - r) + sum alpha / (s + alpha)``: positive for every alpha > 0, where
      ``n - 1 - sum s / (s + alpha)`` loses it to rounding at small alphas (and below full rank
      reached 0, an infinite score);
    - ``RSS = ||y_c||^2 - sum b^2 (s + 2 alpha) / (s + alpha)^2``, term by term the same as
      ``[||y_c||^2 - sum b^2 / s] + sum b^2 alpha^2 / (s (s + alpha)^2)``: the second form for the
      directions with ``s >= alpha`` (the least-squares fit they hold, less what the penalty
      leaves of it, without cancelling), the first for those below alpha (where ``b^2 / s``
      would amplify the rounding of a small ``s``).
    """
    squared = projected**2  # (r, t)
    rank = eigenvalues.shape[0]
    scores, dofs, residuals = [], [], []
    for alpha in alphas:
        kept = alpha / (eigenvalues + alpha)  # the share of each direction that the penalty keeps out of the fit
        large = eigenvalues >= alpha
        fitted = np.where(large, 1.0 / eigenvalues, (eigenvalues + 2.0 * alpha) / (eigenvalues + alpha) ** 2)
        left_in_large = np.where(large, kept**2 / eigenvalues, 0.0)
        rss = np.clip(target_total - fitted @ squared, 0.0, None) + left_in_large @ squared  # (t,)
        left = (n - 1 - rank) + float(np.sum(kept))  # n - df
        dofs.append(n - left)
        residuals.append(float(rss.sum()))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            score = float(np.sum(n * rss / left**2))
        scores.append(score if np.isfinite(score) else np.inf)
    return np.array(scores), np.array(dofs), np.array(residuals)
