"""RFF kernel families (Laplace, Matern) and the aggregated test over kernel families (issue #47 item 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError
from streamrff.formats.map import map_from_json, map_to_json


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


def test_nufft_sums_refuse_a_map_with_categorical_columns() -> None:
    X = np.column_stack([np.random.default_rng(10).normal(size=(200, 1)), np.arange(200) % 3])
    feature_map = srf.RFF(64, 1.0, categorical=[1], mismatch=0.5).fit(X)
    with pytest.raises(InputError, match="nufft"):
        srf.sketch_array(X, feature_map, method="nufft")
