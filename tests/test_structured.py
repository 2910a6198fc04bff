"""Structured (SORF) frequencies against dense matrices built in numpy, the exact Gaussian kernel and
the features' own float64 sums."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.linalg

import streamrff as srf
from streamrff._kernels import sincos as _sincos
from streamrff._kernels.hadamard import padded_width
from streamrff._kernels.sorf import (
    structured_feature_sums,
    structured_features,
    structured_params,
    structured_projection,
)

NO_OFFSETS = np.zeros(0, np.float32)


def dense_frequencies(params, d):
    """W (m x d) from the parameters, by float64 matrix products with scipy's Hadamard matrix."""
    signs, permutation, gaussian, row_scales = (
        params[key].astype(np.float64) for key in ("signs", "permutation", "gaussian", "row_scales")
    )
    n = signs.shape[2]
    hadamard = scipy.linalg.hadamard(n).astype(np.float64)
    blocks = []
    for b in range(signs.shape[0]):
        if signs.shape[1] == 3:
            d3, d2, d1 = (np.diag(s) for s in signs[b])
            blocks.append(hadamard @ d1 @ hadamard @ d2 @ hadamard @ d3)
        else:
            permute = np.eye(n)[permutation[b].astype(int)]
            blocks.append(hadamard @ np.diag(gaussian[b]) @ permute @ hadamard @ np.diag(signs[b, 0]))
    return (np.concatenate(blocks)[: row_scales.shape[0], :d]) * row_scales[:, None]


def rows_of(n, d, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("method", ["sorf", "fastfood"])
@pytest.mark.parametrize(("d", "m"), [(1, 3), (5, 8), (24, 100), (64, 64), (130, 300)])
def test_structured_projection_equals_dense_product(method, d, m):
    params = structured_params(np.random.default_rng(d), d, m, bandwidth=1.5, method=method)
    assert params["signs"].shape[0] == -(-m // padded_width(d))
    X = rows_of(150, d)  # more than one tile of 64 rows, and a partial one
    out = structured_projection(X, params, np.empty((150, m), np.float32))
    expected = X.astype(np.float64) @ dense_frequencies(params, d).T
    scale = np.abs(X).sum(axis=1, keepdims=True) * np.abs(dense_frequencies(params, d)).max()
    assert np.all(np.abs(out - expected) <= 1e-5 * scale)


def test_structured_rows_orthogonal_within_a_block():
    d, m, bandwidth = 128, 384, 2.0
    params = structured_params(np.random.default_rng(3), d, m, bandwidth)
    W = structured_projection(np.eye(d, dtype=np.float32), params, np.empty((d, m), np.float32)).T.astype(np.float64)
    for block in (W[:128], W[128:256], W[256:]):
        gram = block @ block.T
        norms = np.diag(gram)
        np.testing.assert_allclose(gram, np.diag(norms), rtol=0, atol=1e-5 * norms.max())
    # chi(n) norms over sigma: E ||w||^2 = n / sigma^2, variance 2 n / sigma^4 per row.
    squared = np.diag(W @ W.T) * bandwidth**2
    assert abs(squared.mean() - d) < 4 * np.sqrt(2 * d / m)
    # Blocks are independent: rows of different blocks are not orthogonal.
    assert np.abs(W[:128] @ W[128:256].T).max() > 1.0


def test_structured_kernel_estimate_unbiased():
    d, m, bandwidth, n_seeds = 32, 64, 1.0, 400
    rng = np.random.default_rng(7)
    x = rng.standard_normal(d)
    pairs = [(x / np.linalg.norm(x) * r).astype(np.float32) for r in (0.5, 1.0, 2.0)]
    X = np.vstack([np.zeros(d, np.float32)] + pairs)
    exact = srf.exact_kernel(X[:1], X[1:], bandwidth)[0]
    estimates = []
    for seed in range(n_seeds):
        params = structured_params(np.random.default_rng(seed), d, m, bandwidth)
        Z = structured_features(X, params, NO_OFFSETS, m**-0.5, np.empty((4, 2 * m), np.float32)).astype(np.float64)
        estimates.append(Z[1:] @ Z[0])
    estimates = np.array(estimates)
    standard_error = estimates.std(axis=0, ddof=1) / np.sqrt(n_seeds)
    assert np.all(np.abs(estimates.mean(axis=0) - exact) < 4 * standard_error + 1e-6)
    assert np.all(standard_error > 0)


def kernel_mse(Z, K):
    Z = Z.astype(np.float64)
    return float(np.mean((Z @ Z.T - K) ** 2))


def test_structured_kernel_error_below_iid_and_near_dense_orthogonal():
    d, D, bandwidth = 256, 2048, 16.0
    X = rows_of(200, d, seed=5)
    K = srf.exact_kernel(X, X, bandwidth)
    errors = {"iid": [], "orthogonal": [], "structured": []}
    for seed in range(3):
        for name, orthogonal in (("iid", False), ("orthogonal", True)):
            rff = srf.RFF(n_features=D, bandwidth=bandwidth, orthogonal=orthogonal, seed=seed).fit(X)
            errors[name].append(kernel_mse(rff.transform(X), K))
        params = structured_params(np.random.default_rng(seed), d, D // 2, bandwidth)
        Z = structured_features(X, params, NO_OFFSETS, (D // 2) ** -0.5, np.empty((200, D), np.float32))
        errors["structured"].append(kernel_mse(Z, K))
    mean = {name: np.mean(values) for name, values in errors.items()}
    assert mean["structured"] < 0.6 * mean["iid"]
    assert mean["structured"] <= 1.25 * mean["orthogonal"]


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_structured_features_bit_equal_to_what_the_sums_add(variant):
    d, m = 100, 200
    params = structured_params(np.random.default_rng(4), d, m, bandwidth=3.0)
    offsets = (
        np.random.default_rng(5).uniform(0, 2 * np.pi, m).astype(np.float32) if variant == "cosphase" else NO_OFFSETS
    )
    scale = np.float32(m**-0.5)
    X = rows_of(70, d)
    features = structured_features(
        X, params, offsets, scale, np.empty((70, m if offsets.shape[0] else 2 * m), np.float32)
    )
    for i in (0, 1, 64, 69):  # one row per call: its sums are exactly the float32 values added
        sums = np.zeros((2, m))
        structured_feature_sums(X[i : i + 1], params, offsets, sums)
        added = sums[0] if offsets.shape[0] else sums.reshape(-1)
        assert np.all(added == added.astype(np.float32))
        np.testing.assert_array_equal(features[i], scale * added.astype(np.float32))


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
@pytest.mark.parametrize("bandwidth", [2.0, 1e-4])  # the second has phases beyond MAX_FAST_PHASE
def test_structured_feature_sums_match_float64_features(variant, bandwidth):
    d, m, n = 40, 96, 300
    params = structured_params(np.random.default_rng(6), d, m, bandwidth)
    offsets = (
        np.random.default_rng(7).uniform(0, 2 * np.pi, m).astype(np.float32) if variant == "cosphase" else NO_OFFSETS
    )
    X = rows_of(n, d)
    phases = X.astype(np.float64) @ dense_frequencies(params, d).T
    if bandwidth < 1:
        assert np.abs(phases).max() > _sincos.MAX_FAST_PHASE
    sums = np.zeros((2, m))
    squares = structured_feature_sums(X, params, offsets, sums)
    # Reference: float64 cos/sin of the float32 phases (the phase's own float32 rounding is the
    # map's, not the sum's, error).
    projection = structured_projection(X, params, np.empty((n, m), np.float32))
    float32_phases = projection.astype(np.float64)
    np.testing.assert_allclose(float32_phases, phases, rtol=0, atol=1e-5 * np.abs(phases).max())
    if variant == "sincos":
        expected = np.vstack([np.cos(float32_phases).sum(0), np.sin(float32_phases).sum(0)])
        assert squares == n * m
    else:
        cosines = np.cos((projection + offsets).astype(np.float64))  # the offset added in float32, as numpy's path
        expected = np.vstack([cosines.sum(0), (cosines**2).sum(0)])
        assert squares == pytest.approx((cosines**2).sum(), rel=1e-6)
    np.testing.assert_allclose(sums, expected, rtol=0, atol=2e-6 * n)


def test_structured_sums_independent_of_chunking_and_threads():
    d, m = 200, 512
    params = structured_params(np.random.default_rng(8), d, m, bandwidth=10.0)
    X = rows_of(1000, d)
    whole = np.zeros((2, m))
    structured_feature_sums(X, params, NO_OFFSETS, whole)
    bounds = [0, 37, 400, 401, 1000]

    def chunk_sums(k):
        sums = np.zeros((2, m))
        structured_feature_sums(X[bounds[k] : bounds[k + 1]], params, NO_OFFSETS, sums)
        return sums

    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(chunk_sums, range(len(bounds) - 1)))
    np.testing.assert_allclose(sum(parts), whole, rtol=0, atol=1e-6 * np.abs(whole).max())
    # The projection of a row depends on that row only: bit for bit under any split and thread.
    alone = structured_projection(X, params, np.empty((1000, m), np.float32))
    with ThreadPoolExecutor(2) as pool:
        pieces = list(
            pool.map(
                lambda k: structured_projection(
                    X[bounds[k] : bounds[k + 1]], params, np.empty((bounds[k + 1] - bounds[k], m), np.float32)
                ),
                range(len(bounds) - 1),
            )
        )
    np.testing.assert_array_equal(np.vstack(pieces), alone)


def test_structured_params_regenerate_from_the_seed():
    first = structured_params(np.random.default_rng(11), 300, 1000, 2.0)
    again = structured_params(np.random.default_rng(11), 300, 1000, 2.0)
    other = structured_params(np.random.default_rng(12), 300, 1000, 2.0)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert not np.array_equal(first["signs"], other["signs"])
    assert first["signs"].shape == (2, 3, 512) and first["signs"].dtype == np.float32
    assert set(np.unique(first["signs"])) == {-1.0, 1.0}
    assert first["row_scales"].shape == (1000,) and first["row_scales"].dtype == np.float32


def test_structured_params_unknown_method():
    with pytest.raises(srf.InputError, match="fastfood"):
        structured_params(np.random.default_rng(0), 3, 4, 1.0, method="hadamard")


@pytest.mark.slow
def test_structured_sums_and_features_do_not_depend_on_the_vector_width():
    # On AVX-512 the transforms, sin/cos and tile sums run in 16-lane vectors; a portable numba
    # target ("generic") runs the loops. Same operations in the same order: the same bits.
    # m = 300: blocks of 128, 128 and 44 frequencies (44: two groups of 16 rows of the block's lane
    # sums and 12 rows alone); both variants (the cos+phase one sums cos and cos^2).
    d, m = 100, 300
    X = rows_of(130, d, seed=9)
    code = (
        "import sys, numpy as np\n"
        "from streamrff._kernels.sorf import structured_feature_sums, structured_features, structured_params\n"
        "X = np.frombuffer(bytes.fromhex(sys.argv[1]), np.float32).reshape(130, 100).copy()\n"
        "params = structured_params(np.random.default_rng(1), 100, 300, 4.0)\n"
        "phases = np.random.default_rng(2).uniform(0, 2 * np.pi, 300).astype(np.float32)\n"
        "for offsets in (np.zeros(0, np.float32), phases):\n"
        "    sums = np.zeros((2, 300))\n"
        "    structured_feature_sums(X, params, offsets, sums)\n"
        "    out = np.empty((130, 300 if offsets.shape[0] else 600), np.float32)\n"
        "    features = structured_features(X, params, offsets, 0.5, out)\n"
        "    print(sums.tobytes().hex(), features.tobytes().hex())"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("NUMBA_CPU")}
    outputs = []
    for target in ({}, {"NUMBA_CPU_NAME": "generic"}):
        result = subprocess.run(
            [sys.executable, "-c", code, X.tobytes().hex()],
            env=env | target,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(result.stdout.split())
    assert len(outputs[0]) == 4 and outputs[0] == outputs[1]
    params = structured_params(np.random.default_rng(1), d, m, 4.0)
    sums = np.zeros((2, m))
    structured_feature_sums(X, params, NO_OFFSETS, sums)
    assert np.frombuffer(bytes.fromhex(outputs[0][0])).reshape(2, m).tolist() == sums.tolist()


@pytest.mark.parametrize("d", [1, 5, 16, 33, 100, 768])
def test_transpose_tile_is_numpy_transpose(d):
    # Whole tiles move in 16 x 16 squares of vectors on AVX-512, the last d mod 16 columns and
    # tiles of other widths by the loops; every value lands where numpy's transpose puts it.
    from streamrff._kernels.sorf import _transpose_tile

    rows = rows_of(100, 2 * d, seed=d)
    for array in (rows[:, :d], np.ascontiguousarray(rows[:, :d]), rows[:, ::2]):  # strided rows, contiguous, neither
        for start, t in ((0, 32), (37, 32), (64, 16), (90, 7)):
            scratch = np.full((d, 32), np.nan, np.float32)
            view = _transpose_tile(array, start, t, scratch)
            np.testing.assert_array_equal(view, array[start : start + t].T)
