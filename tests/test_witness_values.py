"""The witness's values from the fused feature-dot kernel (streamrff._kernels.featuredot) against exact features."""

from __future__ import annotations

import numpy as np
import pytest

import streamrff as srf


def _exact_features(feature_map: srf.RFF, X: np.ndarray) -> np.ndarray:
    """Float64 RFF features from the map's frequencies and phases, by numpy (independent of any kernel)."""
    params = feature_map._params()
    phases = X.astype(np.float64) @ params["frequencies"].T
    m = phases.shape[0 if phases.ndim == 1 else 1]
    if feature_map.variant == "sincos":
        return np.hstack([np.cos(phases), np.sin(phases)]) / np.sqrt(m)
    return np.sqrt(2.0 / m) * np.cos(phases + params["phases"])


def _witness(feature_map, A, B) -> srf.Witness:
    return srf.witness(srf.sketch_array(A, feature_map), srf.sketch_array(B, feature_map))


def _rounding_bound(features: np.ndarray, direction: np.ndarray, X: np.ndarray, feature_map) -> np.ndarray:
    """Per row: float32 features (1.5 ulp each, plus the float32 phase's rounding, |x| |w_j| 2^-23 radians)
    summed in float32 (Higham's gamma_D), times sum_j |z_j w_j| and sum_j |w_j| scale."""
    D = direction.shape[0]
    eps = 2.0**-24
    magnitude = np.abs(features) @ np.abs(direction)
    frequency_norm = np.linalg.norm(feature_map._params()["frequencies"], axis=1).max()
    phase_error = np.linalg.norm(X, axis=1) * frequency_norm * X.shape[1] * 2 * eps
    scale = np.abs(features).max()
    return 2 * D * eps * magnitude + (3 * eps + phase_error) * scale * np.abs(direction).sum() + 1e-12


@pytest.mark.parametrize(
    ("variant", "n_features"), [("sincos", 1024), ("cosphase", 512), ("sincos", 74), ("cosphase", 53)]
)
def test_witness_values_equal_exact_features_dotted_with_the_direction(variant, n_features):
    rng = np.random.default_rng(3)
    A = rng.normal(size=(700, 6))
    B = rng.normal(0.7, 1.0, size=(600, 6))
    rff = srf.RFF(n_features=n_features, bandwidth=1.5, variant=variant, seed=2).fit(A)
    f = _witness(rff, A, B)
    X = rng.normal(0.3, 1.2, size=(1000, 6))
    values = f(X)
    features = _exact_features(rff, X)
    error = np.abs(values - features @ f.direction)
    assert (error <= _rounding_bound(features, f.direction, X, rff)).all(), error.max()


def test_witness_values_of_rows_beyond_the_fast_phase_range_use_exact_sines():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(300, 3))
    rff = srf.RFF(n_features=96, bandwidth=1.0, phase_precision="float32", seed=1).fit(A)
    f = _witness(rff, A, A + 0.5)
    X = rng.normal(size=(64, 3))
    X[[5, 40]] *= 3000.0  # largest phases 16 471 (beyond MAX_FAST_PHASE, 8192: exact sines) and 6 526 (checked)
    features = _exact_features(rff, X.astype(np.float32).astype(np.float64))  # float32 phases carry |x| 6e-8
    values = f(X)
    np.testing.assert_allclose(values[[5, 40]], (features @ f.direction)[[5, 40]], rtol=0, atol=5e-3)
    rest = np.setdiff1d(np.arange(64), [5, 40])
    bound = _rounding_bound(features[rest], f.direction, X[rest], rff)
    assert (np.abs(values[rest] - features[rest] @ f.direction) <= bound).all()


def test_witness_values_do_not_depend_on_how_rows_are_split():
    rng = np.random.default_rng(5)
    A, B = rng.normal(size=(500, 4)), rng.normal(0.5, 1.0, size=(500, 4))
    for variant in ("sincos", "cosphase"):
        rff = srf.RFF(n_features=400, bandwidth=1.0, variant=variant).fit(A)
        f = _witness(rff, A, B)
        X = rng.normal(size=(1500, 4)).astype(np.float32)
        whole = f.values(X)
        pieces = np.concatenate([f.values(X[start : start + 97]) for start in range(0, 1500, 97)])
        np.testing.assert_array_equal(whole, pieces)  # bit for bit: a row's value depends on that row alone
        np.testing.assert_array_equal(whole[::-1], f.values(np.ascontiguousarray(X[::-1])))


@pytest.mark.filterwarnings("ignore::streamrff.errors.BiasWarning")  # structured blocks of width 16
def test_witness_values_of_other_map_kinds_take_the_tiled_features():
    rng = np.random.default_rng(6)
    A, B = rng.normal(size=(400, 16)), rng.normal(0.5, 1.0, size=(400, 16))
    X = rng.normal(size=(300, 16))
    for feature_map in (
        srf.RFF(n_features=128, bandwidth=3.0, phase_precision="float64").fit(A),
        srf.RFF(n_features=256, bandwidth=3.0, structured=True).fit(A),
        srf.JL(n_components=32).fit(A),
    ):
        f = _witness(feature_map, A, B)
        reference = feature_map._embed(X, np.float64) @ f.direction  # float64 features (numpy's path)
        np.testing.assert_allclose(f(X), reference, rtol=0, atol=1e-5 * np.abs(f.direction).sum())
