"""RFF with categorical columns: the mixed kernel, its unbiased features, lambda, files and analyses."""

from __future__ import annotations

import json

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError
from streamrff.formats.map import map_from_json, map_to_json


def mixed_rows(n: int, seed: int = 0, levels: int = 4) -> np.ndarray:
    """Two numeric columns then two categorical ones (codes: small integers and large 52-bit values)."""
    rng = np.random.default_rng(seed)
    big = rng.integers(0, 2**52, size=levels).astype(np.float64)
    return np.column_stack(
        [rng.normal(size=(n, 2)), rng.integers(0, levels, n).astype(float), big[rng.integers(0, levels, n)]]
    )


def exact_mixed_kernel(X: np.ndarray, bandwidth: float, mismatch: float, categorical: list[int]) -> np.ndarray:
    """The mixed kernel in plain numpy: Gaussian on the numeric columns times exp(-lambda #mismatches)."""
    numeric = [i for i in range(X.shape[1]) if i not in categorical]
    squared = ((X[:, None, numeric] - X[None, :, numeric]) ** 2).sum(-1)
    mismatches = (X[:, None, categorical] != X[None, :, categorical]).sum(-1)
    return np.exp(-squared / (2.0 * bandwidth**2) - mismatch * mismatches)


def entry_variance(X: np.ndarray, bandwidth: float, mismatch: float, categorical: list[int], variant: str, D: int):
    """The closed-form variance of each Gram entry (docs/guide/feature_maps.rst, "mixed kernel")."""
    k = exact_mixed_kernel(X, bandwidth, mismatch, categorical)
    gaussian4 = exact_mixed_kernel(X, bandwidth, 0.0, categorical) ** 4  # k_gauss(2 delta)
    if variant == "sincos":
        return (0.5 * (1.0 + gaussian4) - k**2) / (D // 2)
    return (1.0 + 0.5 * gaussian4 - k**2) / D


def per_frequency_terms(Z: np.ndarray, variant: str) -> np.ndarray:
    """Each frequency's own estimate of the mean Gram entry: the Gram mean is their average (i.i.d.)."""
    means = Z.mean(axis=0)
    if variant == "sincos":
        m = Z.shape[1] // 2
        return m * (means[:m] ** 2 + means[m:] ** 2)
    return Z.shape[1] * means**2


def check_gram(variant: str, n_rows: int, n_maps: int) -> None:
    """One map on ``n_rows`` rows: the mean Gram error within 2 s.e. of 0 (s.e. from its i.i.d. frequencies);
    ``n_maps`` independent maps on 40 of the rows: the mean squared error within 10% of the closed form."""
    X = mixed_rows(n_rows, seed=1)
    categorical, bandwidth, mismatch, D = [2, 3], 1.3, 0.6, 1024
    feature_map = srf.RFF(D, bandwidth, variant=variant, categorical=categorical, mismatch=mismatch, seed=5).fit(X)
    Z = feature_map.transform(X).astype(np.float64)
    error = Z @ Z.T - exact_mixed_kernel(X, bandwidth, mismatch, categorical)
    terms = per_frequency_terms(Z, variant)
    assert abs(error.mean()) < 2.0 * terms.std(ddof=1) / np.sqrt(terms.size)
    rows = X[:40]
    K = exact_mixed_kernel(rows, bandwidth, mismatch, categorical)
    squares = []
    for seed in range(n_maps):
        Z = srf.RFF(D, bandwidth, variant=variant, categorical=categorical, mismatch=mismatch, seed=100 + seed)
        Z = Z.fit(rows).transform(rows).astype(np.float64)
        squares.append((Z @ Z.T - K) ** 2)
    off = ~np.eye(rows.shape[0], dtype=bool)
    predicted = entry_variance(rows, bandwidth, mismatch, categorical, variant, D)[off].mean()
    assert float(np.mean(squares, axis=0)[off].mean()) == pytest.approx(predicted, rel=0.1)


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_gram_matrix_is_unbiased_with_the_documented_variance(variant: str) -> None:
    check_gram(variant, n_rows=400, n_maps=150)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_gram_matrix_on_2000_rows(variant: str) -> None:
    check_gram(variant, n_rows=2000, n_maps=600)


def test_unseen_categories_negative_zero_and_the_features_scale() -> None:
    X = mixed_rows(200, seed=2)
    feature_map = srf.RFF(256, 1.0, categorical=[2, 3], mismatch=1.0).fit(X)
    unseen = X[:5].copy()
    unseen[:, 2] = [17.0, 1e12, -3.5, 99.0, 4.0]  # codes never seen at fit
    Z = feature_map.transform(unseen)
    assert np.all(np.isfinite(Z)) and np.allclose((Z * Z).sum(axis=1), 1.0, atol=1e-5)
    zero, negative_zero = X[:3].copy(), X[:3].copy()
    zero[:, 2], negative_zero[:, 2] = 0.0, -0.0
    assert np.array_equal(feature_map.transform(zero), feature_map.transform(negative_zero))


def test_equal_and_different_categories_average_to_the_factor() -> None:
    # Numeric parts equal: the Gram entry estimates exp(-lambda #mismatches) alone; over 8 maps of D = 4096
    # the mean is within 4 standard errors (per entry variance (1 - k^2) / m).
    rows = np.array([[0.0, 1.0, 1.0], [0.0, 1.0, 2.0], [0.0, 2.0, 2.0]])
    estimates = []
    for seed in range(8):
        Z = srf.RFF(4096, 1.0, categorical=[1, 2], mismatch=0.5, seed=seed).fit(rows).transform(rows)
        estimates.append((Z.astype(np.float64) @ Z.T.astype(np.float64))[0])
    expected = np.exp(-0.5 * np.array([0, 1, 2]))
    spread = np.sqrt((1.0 - expected**2) / 2048 / 8)
    assert np.all(np.abs(np.mean(estimates, axis=0) - expected) <= 4 * spread + 1e-6)


def test_auto_mismatch_is_one_over_the_median_number_of_mismatches() -> None:
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.normal(size=300), rng.integers(0, 2, size=(300, 4)).astype(float)])
    feature_map = srf.RFF(64, categorical=[1, 2, 3, 4]).fit(X)
    i, j = np.triu_indices(300, k=1)
    median = np.median((X[i, 1:] != X[j, 1:]).sum(axis=1))
    assert feature_map.mismatch_ == pytest.approx(1.0 / max(1.0, median))
    # The numeric bandwidth comes from the numeric column alone.
    distances = np.abs(X[i, 0] - X[j, 0])
    assert feature_map.bandwidth_ == pytest.approx(float(np.median(distances)), rel=1e-9)


def test_map_file_records_the_columns_and_lambda_and_plain_maps_are_unchanged() -> None:
    X = mixed_rows(100)
    feature_map = srf.RFF(64, categorical=[3, 2], seed=1).fit(X)
    document = json.loads(map_to_json(feature_map))
    assert document["spec"]["categorical"] == [2, 3]
    assert document["spec"]["mismatch"] == feature_map.mismatch_
    loaded = map_from_json(map_to_json(feature_map))
    assert np.array_equal(loaded.transform(X), feature_map.transform(X))
    plain = srf.RFF(64, 1.0).fit(X[:, :2])
    assert list(plain.spec) == ["kind", "n_features_in", "n_features", "bandwidth", "variant", "orthogonal", "seed"]
    # A plain map equals the mixed one with every column numeric and lambda irrelevant.
    reference = np.sqrt(1.0 / 32) * np.hstack([np.cos(X[:, :2] @ plain._frequencies().T)] * 1)
    assert np.allclose(plain.transform(X[:, :2])[:, :32], reference, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"categorical": [7]}, "out of range"),
        ({"categorical": "a"}, "sequence of column indices"),
        ({"categorical": [1.5]}, "integer column indices"),
        ({"categorical": [2], "mismatch": -1.0}, "mismatch"),
        ({"categorical": [2], "structured": True}, "structured"),
    ],
)
def test_bad_parameters_raise_input_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        srf.RFF(16, 1.0, **kwargs).fit(mixed_rows(20))


def test_analyses_take_the_mixed_map_unchanged() -> None:
    rng = np.random.default_rng(4)
    X = mixed_rows(600, seed=4)
    Y = mixed_rows(600, seed=5)
    Y[:, 2] = np.where(rng.random(600) < 0.5, 0.0, Y[:, 2])  # a shift in one column's frequencies only
    feature_map = srf.RFF(256, categorical=[2, 3], seed=0).fit(np.vstack([X, Y]))
    assert srf.two_sample_test(X, Y, feature_map=feature_map, n_permutations=200).p_value < 0.01
    assert srf.two_sample_test(X, mixed_rows(600, seed=6), feature_map=feature_map).p_value > 0.001
    monitor = srf.DriftMonitor(window=50, ert=500, feature_map=feature_map, n_streams=500).fit(X)
    update = monitor.update(Y[:200])
    assert update.statistic.shape == (200,)
    clusters = np.column_stack(
        [np.r_[rng.normal(-3, 0.3, 100), rng.normal(3, 0.3, 100)], np.r_[[1.0] * 100, [2.0] * 100]]
    )
    kmap = srf.RFF(256, categorical=[1], mismatch=1.0).fit(clusters)
    labels = srf.KernelKMeans(n_clusters=2, feature_map=kmap, seed=0).fit(clusters).labels_
    assert len(set(labels[:100])) == 1 and len(set(labels[100:])) == 1 and labels[0] != labels[150]


def exact_family_kernel(X: np.ndarray, Y: np.ndarray, kernel: str, sigma: float) -> np.ndarray:
    """The kernel families in plain numpy (Laplace on the l1 distance, Matern on the l2 distance)."""
    delta = X[:, None, :] - Y[None, :, :]
    if kernel == "laplace":
        return np.exp(-np.abs(delta).sum(-1) / sigma)
    r = np.sqrt((delta**2).sum(-1)) / sigma
    if kernel == "gaussian":
        return np.exp(-(r**2) / 2.0)
    if kernel == "matern12":
        return np.exp(-r)
    if kernel == "matern32":
        return (1.0 + np.sqrt(3.0) * r) * np.exp(-np.sqrt(3.0) * r)
    return (1.0 + np.sqrt(5.0) * r + 5.0 * r**2 / 3.0) * np.exp(-np.sqrt(5.0) * r)


@pytest.mark.parametrize("kernel", ["gaussian", "laplace", "matern12", "matern32", "matern52"])
@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_kernel_families_gram_error_matches_the_variance_formula(kernel: str, variant: str) -> None:
    # n_maps independent maps of D = 1024 on 30 rows: the mean error within 3 s.e. of 0 and the mean
    # squared error within 10% of var = [(1 + k(2 delta)) / 2 - k^2] / m (sincos), [1 + k(2 delta) / 2 - k^2] / D.
    rows = np.random.default_rng(7).normal(size=(30, 3))
    sigma, D, n_maps = 1.7, 1024, 120
    K, K2 = exact_family_kernel(rows, rows, kernel, sigma), exact_family_kernel(2 * rows, 2 * rows, kernel, sigma)
    errors = []
    for seed in range(n_maps):
        Z = srf.RFF(D, sigma, variant=variant, kernel=kernel, seed=seed).fit(rows).transform(rows).astype(np.float64)
        errors.append(Z @ Z.T - K)
    errors = np.array(errors)
    off = ~np.eye(rows.shape[0], dtype=bool)
    means = errors[:, off].mean(axis=1)
    assert abs(means.mean()) < 3.0 * means.std(ddof=1) / np.sqrt(n_maps)
    variance = (0.5 * (1.0 + K2) - K**2) / (D // 2) if variant == "sincos" else (1.0 + 0.5 * K2 - K**2) / D
    assert float((errors[:, off] ** 2).mean()) == pytest.approx(float(variance[off].mean()), rel=0.1)


def test_kernel_family_is_recorded_and_old_specs_read_as_gaussian() -> None:
    X = np.random.default_rng(8).normal(size=(50, 2))
    laplace = srf.RFF(32, 1.0, kernel="laplace").fit(X)
    assert json.loads(map_to_json(laplace))["spec"]["kernel"] == "laplace"
    assert map_from_json(map_to_json(laplace)).fingerprint == laplace.fingerprint
    gaussian = srf.RFF(32, 1.0).fit(X)
    assert "kernel" not in gaussian.spec and srf.map_from_spec(gaussian.spec).kernel == "gaussian"
    with pytest.raises(InputError, match="kernel must be one of"):
        srf.RFF(32, 1.0, kernel="cauchy").fit(X)
    with pytest.raises(InputError, match="orthogonal"):
        srf.RFF(32, 1.0, kernel="laplace", orthogonal=True).fit(X)


def test_aggregated_test_over_kernel_families() -> None:
    rng = np.random.default_rng(9)
    X, Y = rng.standard_t(2, size=(300, 2)), rng.standard_t(2, size=(300, 2)) + np.array([0.5, 0.0])
    both = srf.two_sample_test(
        X, Y, method="aggregated", kernels=("gaussian", "laplace"), n_features=128, n_permutations=199
    )
    kernels = [spec.get("kernel", "gaussian") for spec in both.map_specs]
    assert kernels == ["gaussian"] * 5 + ["laplace"] * 5
    assert both.p_value <= 0.01
    # Each component is the map's own permutation test: the same statistic as the permutation method.
    laplace = srf.map_from_spec(both.map_specs[7])
    alone = srf.two_sample_test(X, Y, feature_map=laplace, n_permutations=199)
    assert both.statistics[7] == pytest.approx(alone.statistic, rel=1e-5)
    with pytest.raises(InputError, match="kernels"):
        srf.two_sample_test(X, Y, method="aggregated", kernels=("gaussian", "cauchy"))
    with pytest.raises(InputError, match="kernels applies to method='aggregated' only"):
        srf.two_sample_test(X, Y, kernels=("laplace",))
