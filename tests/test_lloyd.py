"""The compiled Lloyd kernel (streamrff._kernels.lloyd) against a float64 numpy reference.

The reference is float64 arithmetic on the float32 features that ``transform`` returns: exact
squared distances by ``cdist`` (ties to the lowest index), cluster sums by numpy. Labels, counts
and moved rows must be equal; sums agree to float32 rounding of per-tile partial sums.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import streamrff as srf
from streamrff.sketches.cluster import (
    _compiled_lloyd_step,
    _labels_of_rows,
    _lloyd_tile_rows,
    cluster_sketch_of_chunk,
)

FLOAT32_REL = 1e-6


def reference(Z: np.ndarray, centers: np.ndarray, previous: np.ndarray | None):
    labels = cdist(Z, centers, "sqeuclidean").argmin(axis=1)
    sums = np.zeros_like(centers)
    np.add.at(sums, labels, Z)
    moved = len(Z) if previous is None else int((cdist(Z, previous, "sqeuclidean").argmin(axis=1) != labels).sum())
    return labels, sums, moved


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-300))


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
# 20 > D = 16 below; 30 > MAX_COLUMNS: scored by BLAS, not by row_dots (as is 2k = 40 for k = 20)
@pytest.mark.parametrize("k", [1, 3, 20, 30])
@pytest.mark.parametrize("tiles", [0.0, 0.5, 1.0, 1.01, 3.3])  # rows as a multiple of the tile
def test_compiled_lloyd_step_equals_float64_reference(variant, k, tiles):
    n_features = 16 if k == 20 else 256
    rng = np.random.default_rng(k)
    n_rows = max(1, int(tiles * _lloyd_tile_rows(10**9, n_features)))
    X = rng.normal(size=(n_rows + 60, 3)).astype(np.float32)
    feature_map = srf.RFF(n_features=n_features, bandwidth=1.0, variant=variant, seed=2).fit(X)
    pool = feature_map.transform(X[-60:]).astype(np.float64)
    centers, previous = pool[:k].copy(), pool[30 : 30 + k].copy()
    rows = X[:n_rows]
    Z = feature_map.transform(rows).astype(np.float64)

    for prior in (None, previous):
        sketch, labels, _ = _compiled_lloyd_step(rows, feature_map, centers, prior)
        expected_labels, expected_sums, expected_moved = reference(Z, centers, prior)
        np.testing.assert_array_equal(labels, expected_labels)
        np.testing.assert_array_equal(sketch.counts, np.bincount(expected_labels, minlength=k))
        assert sketch.n_moved == (0 if prior is not None and k == 1 else expected_moved)
        assert relative_error(sketch.sums, expected_sums) < FLOAT32_REL
        assert sketch.squared_norm_sum == pytest.approx((Z**2).sum(), rel=FLOAT32_REL)
        distances = cdist(Z, centers, "sqeuclidean").min(axis=1).sum()
        assert sketch.inertia == pytest.approx(distances, rel=1e-5, abs=1e-6 * n_rows)
    np.testing.assert_array_equal(_labels_of_rows(rows, feature_map, centers), expected_labels)  # predict's path


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_compiled_lloyd_step_rescores_tied_rows_in_float64(variant):
    # Duplicated centres tie exactly for every row nearest to them, and a centre a hair away
    # (1e-7) ties within float32 rounding: those rows must be rescored, ties to the lowest index.
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3_000, 2)).astype(np.float32)
    feature_map = srf.RFF(n_features=512, bandwidth=1.0, variant=variant, seed=3).fit(X)
    Z = feature_map.transform(X).astype(np.float64)
    base = Z[[0, 1500]]
    nudge = rng.normal(size=base.shape[1])
    centers = np.vstack([base[0], base[0], base[1], base[1] + 1e-7 * nudge / np.linalg.norm(nudge)])
    sketch, labels, n_rescored = _compiled_lloyd_step(X, feature_map, centers, None)
    expected = cdist(Z, centers, "sqeuclidean").argmin(axis=1)
    np.testing.assert_array_equal(labels, expected)
    assert not np.any(labels == 1)  # exact ties go to the lower index
    assert n_rescored >= len(X) - 1  # every row is within rounding of a tie in its pair


def test_compiled_lloyd_step_with_phases_beyond_the_fast_range():
    # A tiny bandwidth puts every phase beyond MAX_FAST_PHASE: the exact float64 cos/sin path.
    rng = np.random.default_rng(5)
    X = rng.normal(size=(700, 2)).astype(np.float32)
    feature_map = srf.RFF(n_features=64, bandwidth=1e-4, seed=1).fit(X)
    Z = feature_map.transform(X).astype(np.float64)
    centers = Z[:4].copy()
    sketch = cluster_sketch_of_chunk(X, feature_map, centers)
    labels, sums, _ = reference(Z, centers, None)
    np.testing.assert_array_equal(sketch.counts, np.bincount(labels, minlength=4))
    assert relative_error(sketch.sums, sums) < FLOAT32_REL


def test_compiled_lloyd_kernel_has_one_specialisation_whatever_the_callers_arrays():
    # Read-only or strided centres, both variants, with and without previous centres: one set of
    # argument types, so a fit never stops to compile the kernel again (seconds on a worker).
    from streamrff._kernels.lloyd import lloyd_chunk

    rng = np.random.default_rng(11)
    X = rng.normal(size=(300, 3)).astype(np.float32)
    for variant in ("sincos", "cosphase"):
        feature_map = srf.RFF(n_features=64, bandwidth=1.0, variant=variant, seed=1).fit(X)
        Z = feature_map.transform(X[:8]).astype(np.float64)
        read_only = Z[:3].copy()
        read_only.setflags(write=False)
        strided = np.asfortranarray(Z[3:6])
        for centers, previous in [(read_only, None), (strided, read_only), (Z[:3], strided)]:
            _compiled_lloyd_step(X[::-1], feature_map, centers, previous)
    assert len(lloyd_chunk.signatures) == 1, lloyd_chunk.signatures


def test_exact_labels_rescores_only_centres_within_the_bound_and_matches_float64():
    # Twelve centres in four groups of three, 1e-7 apart within a group: float32 cannot order a
    # group, so every row is unsure and each group member must be rescored; centres of the other
    # groups are beyond the bound and may be skipped. Labels must equal float64 arithmetic's
    # (scipy's cdist on the same float32 features), on the compiled and the numpy path alike.
    from streamrff._kernels.lloyd import exact_labels
    from streamrff.sketches.cluster import _NearestCentres

    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 2)).astype(np.float32)
    feature_map = srf.RFF(n_features=256, bandwidth=1.0, seed=4).fit(X)
    features = feature_map.transform(X)
    base = feature_map.transform(rng.normal(size=(4, 2))).astype(np.float64)  # not rows of X: no zero distances
    nudges = rng.normal(size=(12, base.shape[1]))
    centers = np.repeat(base, 3, axis=0) + 1e-7 * nudges / np.linalg.norm(nudges, axis=1, keepdims=True)
    expected = cdist(features.astype(np.float64), centers, "sqeuclidean").argmin(axis=1)

    nearest = _NearestCentres([centers], len(X))
    labels, margins, bound = nearest.assign(features, float(np.linalg.norm(features, axis=1).max()))
    np.testing.assert_array_equal(labels[:, 0], expected)  # the numpy path
    assert np.all(margins <= bound)  # every row was unsure

    scores = features @ nearest.scaled + nearest.norms32
    rows = np.arange(len(X), dtype=np.int64)
    out = np.full(len(X), -1, dtype=np.int64)
    exact_labels(features, rows, scores, 0, bound, nearest.exact_blocks[0], nearest.block_norms[0], out, rows)
    np.testing.assert_array_equal(out, expected)  # the compiled rescoring on its own
    np.testing.assert_array_equal(_labels_of_rows(X, feature_map, centers), expected)  # the compiled Lloyd kernel
