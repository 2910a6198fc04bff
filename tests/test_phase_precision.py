"""RFF's phase precision: float64 phases for rows far from the origin (issue 39, item 4).

References are numpy's float64 formulas: the kernel distance
``sqrt(-2 expm1(-||x - y||^2 / (2 sigma^2)))`` (no cancellation down to 1e-4 apart) and the
RFF features ``m^-1/2 [cos(X W^T / sigma), sin(X W^T / sigma)]`` with ``W`` drawn as the
spec says (``default_rng(seed).standard_normal((m, d))``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError
from streamrff.maps.fourier import PHASE_PRECISION_LIMIT


def chen_phillips_pairs(n_pairs: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Chen & Phillips (2016) sec. 7: x uniform in a ball of radius 500, y on the sphere of radius
    r around x, r geometric from 1e-4 to 1e4."""
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(n_pairs, d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    x = directions * 500.0 * rng.uniform(size=(n_pairs, 1)) ** (1.0 / d)
    offsets = rng.normal(size=(n_pairs, d))
    offsets /= np.linalg.norm(offsets, axis=1, keepdims=True)
    radii = rng.permutation(np.geomspace(1e-4, 1e4, n_pairs))
    return x, x + offsets * radii[:, None]


def exact_kernel_distance(x: np.ndarray, y: np.ndarray, sigma: float) -> np.ndarray:
    """``D_K(x, y) = sqrt(k(x, x) + k(y, y) - 2 k(x, y))`` in float64, via expm1."""
    return np.sqrt(-2.0 * np.expm1(-((x - y) ** 2).sum(axis=1) / (2.0 * sigma**2)))


def worst_relative_error(features: np.ndarray, exact: np.ndarray) -> float:
    n = exact.shape[0]
    gaps = features[:n].astype(np.float64) - features[n:].astype(np.float64)
    return float(np.abs(np.linalg.norm(gaps, axis=1) / exact - 1.0).max())


def numpy_sincos_features(X: np.ndarray, n_features: int, sigma: float, seed: int) -> np.ndarray:
    m = n_features // 2
    projection = X @ np.random.default_rng(seed).standard_normal((m, X.shape[1])).T / sigma
    return np.hstack([np.cos(projection), np.sin(projection)]) / np.sqrt(m)


@pytest.fixture(scope="module")
def demo() -> tuple[np.ndarray, np.ndarray]:
    return chen_phillips_pairs(600, 2, seed=3)


def test_rff_phase_precision_chen_phillips_demo_within_float64_path(demo):
    x, y = demo
    rows = np.vstack([x, y])
    exact = exact_kernel_distance(x, y, 1.0)
    rff = srf.RFF(n_features=800, bandwidth=1.0, seed=0).fit(rows)
    assert rff.phase_precision_ == "float64" and rff.spec["phase_precision"] == "float64"
    float64_path = worst_relative_error(rff._embed(rows, np.float64), exact)
    public = worst_relative_error(rff.transform(rows), exact)
    assert public <= 1.2 * float64_path
    assert float64_path < 0.15  # t eps^2 ~ 1.5-1.9 (Chen & Phillips fig. 2): eps ~ 0.05 at t = 800
    # The float32 phases this replaces: the rounding of |W x| ~ 1e3 swamps pairs 1e-4 apart.
    float32_phases = srf.RFF(n_features=800, bandwidth=1.0, seed=0, phase_precision="float32").fit(rows)
    assert worst_relative_error(float32_phases.transform(rows), exact) > 2.0 * float64_path


@pytest.mark.parametrize("structured", [False, True])
def test_rff_float64_phases_match_numpy_features_far_from_origin(structured):
    X = 300.0 + np.random.default_rng(0).normal(size=(40, 2))
    rff = srf.RFF(n_features=64, bandwidth=0.5, seed=4, phase_precision="float64", structured=structured)
    with pytest.warns(srf.errors.BiasWarning) if structured else contextlib.nullcontext():
        rff.fit(X)
    Z = rff.transform(X)
    if structured:  # the formed SORF frequencies, in float64 numpy
        projection = X @ rff._frequencies().T
        expected = np.hstack([np.cos(projection), np.sin(projection)]) / np.sqrt(32)
    else:
        expected = numpy_sincos_features(X, 64, 0.5, seed=4)
    # float32 sin/cos of a phase reduced to [-pi, pi] in float64: ~3e-7 of each unit cosine.
    np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-6 / np.sqrt(32))
    # float32 phases of |W x| ~ 1e3 are off by ~1e-4 of a unit cosine.
    float32_phases = srf.RFF(n_features=64, bandwidth=0.5, seed=4, phase_precision="float32").fit(X)
    if not structured:
        assert np.abs(float32_phases.transform(X) - expected).max() > 1e-5 / np.sqrt(32)


def test_rff_float64_phases_cosphase_matches_numpy():
    X = 200.0 + np.random.default_rng(1).normal(size=(30, 3))
    rff = srf.RFF(n_features=96, bandwidth=1.0, variant="cosphase", seed=2).fit(X)
    assert rff.phase_precision_ == "float64"
    rng = np.random.default_rng(2)
    frequencies = rng.standard_normal((96, 3))
    phases = rng.uniform(0.0, 2.0 * np.pi, size=96)
    expected = np.sqrt(2.0 / 96) * np.cos(X @ frequencies.T + phases)
    np.testing.assert_allclose(rff.transform(X), expected, rtol=0, atol=1e-6 * np.sqrt(2.0 / 96))


def test_rff_phase_precision_auto_keeps_float32_on_standardised_data():
    X = np.random.default_rng(5).normal(size=(3000, 20))
    for bandwidth in ("median", 1.0, 0.5):
        rff = srf.RFF(n_features=256, bandwidth=bandwidth).fit(X)
        assert rff.phase_precision_ == "float32" and "phase_precision" not in rff.spec
        # The spec and fingerprint are those of a map that never heard of phase precision.
        assert rff.fingerprint == srf.RFF(n_features=256, bandwidth=rff.bandwidth_, phase_precision="float32").fit(
            X
        ).fingerprint
    # Largest phase on this sample, in numpy: far under the limit.
    rff = srf.RFF(n_features=256, bandwidth="median").fit(X)
    assert np.abs(X @ rff._frequencies().T).max() < PHASE_PRECISION_LIMIT / 4


def test_rff_phase_precision_spec_round_trip_and_map_file(tmp_path):
    X = 1e4 + np.random.default_rng(6).normal(size=(50, 2)) * 3.0
    rff = srf.RFF(n_features=32, bandwidth="median").fit(X)
    assert rff.phase_precision_ == "float64"
    rebuilt = srf.map_from_spec(rff.spec)
    assert rebuilt.phase_precision_ == "float64" and rebuilt.fingerprint == rff.fingerprint
    float32_phases = srf.RFF(n_features=32, bandwidth=rff.bandwidth_, phase_precision="float32").fit(X)
    assert rff.fingerprint != float32_phases.fingerprint
    # The engine fits the map on the same seeded sample: the same decision, the same map.
    assert srf.sketch(X, srf.RFF(n_features=32), chunk_rows=20).fingerprint == rff.fingerprint
    srf.save_map(rff, tmp_path / "map.zarr")
    loaded = srf.load_map(tmp_path / "map.zarr")
    assert loaded.fingerprint == rff.fingerprint
    np.testing.assert_array_equal(loaded.transform(X), rff.transform(X))


def test_rff_float64_phases_every_path_agrees_with_numpy():
    """Engine sums and moments, k-means labels and the drift window use the float64 phases."""
    X = 400.0 + np.random.default_rng(7).normal(size=(900, 2)) * 0.3
    rff = srf.RFF(n_features=64, bandwidth=0.2, seed=1).fit(X)
    assert rff.phase_precision_ == "float64"
    expected = numpy_sincos_features(X, 64, 0.2, seed=1)
    sketch = srf.sketch(X, rff, moments=True, chunk_rows=256)
    np.testing.assert_allclose(sketch.feature_sum, expected.sum(axis=0), rtol=0, atol=1e-5)
    np.testing.assert_allclose(sketch.moment, expected.T @ expected, rtol=0, atol=1e-5)
    # Sums without moments take the fused sum path of float32-phase maps; here the tile path.
    sums = srf.sketch(X, rff, chunk_rows=300)
    np.testing.assert_allclose(sums.feature_sum, expected.sum(axis=0), rtol=0, atol=1e-5)
    # k-means labels: nearest centre in numpy's float64 features.
    centers = expected[[0, 450]]
    labels = srf.kmeans.cluster_sketch_of_chunk(X, rff, centers.astype(np.float32)).counts
    distances = ((expected[:, None, :] - centers[None]) ** 2).sum(axis=-1)
    np.testing.assert_array_equal(labels, np.bincount(distances.argmin(axis=1), minlength=2))
    # The drift window's sum of the last `window` rows' features.
    monitor = srf.DriftMonitor(window=50, ert=100, feature_map=rff, n_streams=1000).fit(X[:600])
    monitor.update(X[600:700])
    np.testing.assert_allclose(monitor.window_sum_, expected[650:700].sum(axis=0), rtol=0, atol=1e-5)


def test_rff_phase_precision_rejects_unknown_value():
    with pytest.raises(InputError, match="phase_precision must be 'auto', 'float32' or 'float64'. Got 'double'"):
        srf.RFF(n_features=8, bandwidth=1.0, phase_precision="double").fit(np.zeros((3, 2)))
