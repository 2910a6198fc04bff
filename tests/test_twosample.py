"""Tests of streamrff.twosample against independent references.

References: the exact Gaussian Gram matrix (scipy cdist), plain-numpy unbiased
MMD^2 from Gram blocks, sorted index ranges for the bijection, the
hypergeometric law for random subsets, and the McDiarmid bound of Sutherland &
Schneider (2015, sec. 3.3). Statistical checks use fixed seeds; each states its
tolerance.
"""

from __future__ import annotations

import json
from fractions import Fraction

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from scipy.spatial.distance import cdist, pdist
from scipy.special import gammaln, log_ndtr, logsumexp

from streamrff._kernels.norms import squared_norms
from streamrff.errors import InputError, SketchFormatError, SketchMismatchError
from streamrff.maps import JL, RFF
from streamrff.sketches import load
from streamrff.sketches.base import merge
from streamrff.sketches.mean import mmd2, sketch_array
from streamrff.twosample import (
    TwoSampleResult,
    TwoSampleSketch,
    mmd_test,
    permutation_indices,
    permutation_test,
    two_sample_sketch_of_chunk,
    two_sample_test,
)
from streamrff.twosample.nulls import chi2_log_survival

ALPHA = 0.05


pytestmark = pytest.mark.usefixtures("single_threaded_blas")  # many small GEMMs (conftest.py)


# ---------------------------------------------------------------------------
# Independent references
# ---------------------------------------------------------------------------
def unbiased_mmd2_from_gram(K: np.ndarray, in_x: np.ndarray) -> float:
    """Unbiased MMD^2 (Gretton et al. 2012, eq. 3) from a Gram matrix and a boolean X mask."""
    kxx, kyy, kxy = K[np.ix_(in_x, in_x)], K[np.ix_(~in_x, ~in_x)], K[np.ix_(in_x, ~in_x)]
    n, m = kxx.shape[0], kyy.shape[0]
    return (
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
        + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
        - 2 * kxy.sum() / (n * m)
    )


def exact_mmd2(X: np.ndarray, Y: np.ndarray, bandwidth: float) -> float:
    """Unbiased MMD^2 with the exact Gaussian kernel, in row blocks (no N x N matrix)."""

    def block_sum(A, B, same):
        total = 0.0
        for start in range(0, A.shape[0], 1000):
            total += np.exp(-cdist(A[start : start + 1000], B, "sqeuclidean") / (2 * bandwidth**2)).sum()
        return total - (A.shape[0] if same else 0.0)

    n, m = X.shape[0], Y.shape[0]
    return (
        block_sum(X, X, True) / (n * (n - 1))
        + block_sum(Y, Y, True) / (m * (m - 1))
        - 2 * block_sum(X, Y, False) / (n * m)
    )


def exact_permutation_p_values(X, Y, bandwidth, masks):
    """p-values of the exact-kernel permutation test for given X masks (row 0: the identity split).

    Uses ``m^T K m`` and ``m^T K 1`` per mask, with K built in row blocks.
    """
    Z = np.vstack([X, Y])
    n, N = X.shape[0], Z.shape[0]
    m = N - n
    masks = masks.astype(np.float64)
    mkm = np.zeros(masks.shape[0])
    k_one = np.zeros(N)
    for start in range(0, N, 1000):
        block = np.exp(-cdist(Z[start : start + 1000], Z, "sqeuclidean") / (2 * bandwidth**2))
        mkm += np.einsum("bj,bj->b", masks[:, start : start + 1000] @ block, masks)
        k_one[start : start + 1000] = block.sum(axis=1)
    mk_one = masks @ k_one
    sxx, syy, sxy = mkm, k_one.sum() - 2 * mk_one + mkm, mk_one - mkm
    statistics = (sxx - n) / (n * (n - 1)) + (syy - m) / (m * (m - 1)) - 2 * sxy / (n * m)
    return (1 + np.sum(statistics[1:] >= statistics[0])) / masks.shape[0]


def sketch_in_chunks(X, Y, feature_map, n_permutations, seed, bounds):
    """Two-sample sketch of the pooled rows cut at ``bounds`` (chunks may straddle X and Y)."""
    pooled = np.vstack([X, Y])
    edges = [0, *sorted(set(bounds)), pooled.shape[0]]
    return [
        two_sample_sketch_of_chunk(
            pooled[a:b], feature_map, a, X.shape[0], Y.shape[0], n_permutations, seed
        )
        for a, b in zip(edges[:-1], edges[1:])
        if b > a
    ]


def student_t3(rng, n):
    return rng.standard_t(3, size=(n, 3))


def gaussian_2d(rng, n):
    return rng.normal(size=(n, 2))


def sutherland_schneider_pair(rng, n):
    """N(0, I_2) vs 0.95 N(0, I_2) + 0.05 N(0, I_2 / 4) (Sutherland & Schneider 2015, sec. 4.2)."""
    X = rng.normal(size=(n, 2))
    Y = rng.normal(size=(n, 2))
    Y[rng.random(n) < 0.05] *= 0.5
    return X, Y


# ---------------------------------------------------------------------------
# The permutations
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("n_total", [1, 2, 3, 4, 5, 16, 17, 1000, 4097, 65_537, 1_000_000])
def test_permutation_indices_is_bijection(n_total):
    for b in (0, 1, 7) if n_total < 10**6 else (3,):
        image = permutation_indices(seed=11, b=b, n_total=n_total, index=np.arange(n_total))
        assert image.dtype == np.int64
        np.testing.assert_array_equal(np.sort(image), np.arange(n_total))


def test_permutation_indices_pointwise_and_vectorised_agree():
    n_total = 1234
    index = np.array([[0, 5], [1233, 600]])
    many = permutation_indices(3, np.arange(6), n_total, index)
    assert many.shape == (6, 2, 2)
    for b in range(6):
        whole = permutation_indices(3, b, n_total, np.arange(n_total))
        np.testing.assert_array_equal(many[b], whole[index])
    # keyed: another seed or another b gives another permutation
    base = permutation_indices(3, 0, n_total, np.arange(n_total))
    assert not np.array_equal(base, permutation_indices(4, 0, n_total, np.arange(n_total)))
    assert not np.array_equal(base, permutation_indices(3, 1, n_total, np.arange(n_total)))


@pytest.mark.parametrize(
    "n_total, n_x, n_permutations",
    # 20 and 300 have an odd number of domain bits (halves of 3 and 2, 5 and 4 bits).
    [(10, 3, 10_000), (20, 7, 10_000), (64, 32, 10_000), (300, 120, 4000), (1000, 300, 4000)],
)
def test_permutation_indices_random_subsets_follow_hypergeometric_law(n_total, n_x, n_permutations):
    # The permuted X sample {i : pi_b(i) < n_x} of a uniform permutation is a uniform
    # n_x-subset: each row is in it with probability n_x/N, and the number of rows of
    # any fixed block of size a that it holds has the hypergeometric variance.
    in_x = permutation_indices(5, np.arange(n_permutations), n_total, np.arange(n_total)) < n_x
    p = n_x / n_total
    z = (in_x.mean(axis=0) - p) / np.sqrt(p * (1 - p) / n_permutations)
    assert np.abs(z).max() < 5.0  # max of <= 1000 |N(0,1)| stays below 5 w.p. > 0.999
    for lo, hi in [(0, n_x), (0, n_total // 2), (n_total // 3, n_total // 3 + n_total // 7)]:
        a = hi - lo
        variance = a * p * (1 - p) * (n_total - a) / (n_total - 1)
        ratio = in_x[:, lo:hi].sum(axis=1).var() / variance
        # The sd of a variance ratio over B draws is ~ sqrt(2/B) (0.014 for B = 10 000,
        # 0.022 for B = 4000): allow 5 sd. Four Feistel rounds failed this (1.1-1.35).
        assert abs(ratio - 1) < 5 * np.sqrt(2 / n_permutations), (lo, hi, ratio)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(seed=0, b=0, n_total=0, index=[0]), "n_total"),
        (dict(seed=0, b=-1, n_total=5, index=[0]), "b must be"),
        (dict(seed=0, b=0, n_total=5, index=[5]), r"\[0, 5\)"),
        (dict(seed=0, b=0, n_total=5, index=[-1]), r"\[0, 5\)"),
        (dict(seed=0, b=0, n_total=5, index=[0.5]), "integers"),
        (dict(seed=-3, b=0, n_total=5, index=[0]), "seed"),
    ],
)
def test_permutation_indices_rejects_bad_arguments(kwargs, match):
    with pytest.raises(InputError, match=match):
        permutation_indices(**kwargs)


# ---------------------------------------------------------------------------
# The sketch: exactness against the Gram matrix, chunking, merging, files
# ---------------------------------------------------------------------------
def _data(seed=0, n_x=70, n_y=55, d=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n_x, d)), rng.normal(0.3, 1.2, size=(n_y, d))


MAPS = {
    "rff-sincos": lambda: RFF(n_features=128, bandwidth=1.5, seed=4),
    "rff-cosphase": lambda: RFF(n_features=100, bandwidth=1.5, variant="cosphase", seed=4),
    "jl": lambda: JL(RFF(n_features=256, bandwidth=1.5, seed=4), n_components=64, seed=2),
    # On 20 columns (structured blocks pay off, and are unbiased, on wide rows).
    "rff-structured": lambda: RFF(n_features=128, bandwidth=6.0, structured=True, seed=4),
}
#: Columns of the data of each map (default 3).
MAP_WIDTHS = {"rff-structured": 20}


@pytest.mark.parametrize("map_name", sorted(MAPS))
def test_two_sample_sketch_null_statistics_equal_explicit_permutations(map_name):
    X, Y = _data(d=MAP_WIDTHS.get(map_name, 3))
    n_x, n_y, n_permutations, seed = len(X), len(Y), 40, 9
    feature_map = MAPS[map_name]().fit(np.vstack([X, Y]))
    sketch = merge(sketch_in_chunks(X, Y, feature_map, n_permutations, seed, [30, 90]))
    result = permutation_test(sketch)

    Z = feature_map.transform(np.vstack([X, Y])).astype(np.float64)
    K = Z @ Z.T  # the kernel the features define; cosphase/JL have ||z|| != 1
    pi = permutation_indices(seed, np.arange(n_permutations), n_x + n_y, np.arange(n_x + n_y))
    assert all(np.array_equal(np.sort(row), np.arange(n_x + n_y)) for row in pi)
    expected_null = np.array([unbiased_mmd2_from_gram(K, row < n_x) for row in pi])
    expected_statistic = unbiased_mmd2_from_gram(K, np.arange(n_x + n_y) < n_x)

    scale = np.abs(expected_null).max()
    np.testing.assert_allclose(result.null, expected_null, rtol=1e-6, atol=1e-6 * scale)
    np.testing.assert_allclose(result.statistic, expected_statistic, rtol=1e-6)
    expected_p = (1 + np.sum(expected_null >= expected_statistic)) / (1 + n_permutations)
    assert result.p_value == pytest.approx(expected_p)
    assert result.n_x == n_x and result.n_y == n_y and result.null.shape == (n_permutations,)


@settings(max_examples=25, deadline=None)
@given(bounds=st.lists(st.integers(min_value=1, max_value=124), max_size=6))
def test_two_sample_sketch_independent_of_chunking(bounds):
    # A change of chunk boundaries changes only float32 rounding of the tiles' GEMM sums (1e-6).
    X, Y = _data()
    feature_map = RFF(n_features=64, bandwidth=1.0, seed=1).fit(X)
    reference = two_sample_sketch_of_chunk(np.vstack([X, Y]), feature_map, 0, len(X), len(Y), 16, 3)
    merged = merge(sketch_in_chunks(X, Y, feature_map, 16, 3, bounds))
    assert (merged.count_x, merged.count_y) == (len(X), len(Y))
    for name, array in reference._arrays().items():
        scale = np.abs(array).max()
        np.testing.assert_allclose(merged._arrays()[name], array, rtol=1e-6, atol=1e-6 * scale)
    assert merged.squared_norm_sum_x == pytest.approx(reference.squared_norm_sum_x, rel=1e-6)
    assert merged.squared_norm_sum_y == pytest.approx(reference.squared_norm_sum_y, rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(
    bounds=st.lists(st.integers(min_value=1, max_value=124), max_size=6),
    order=st.randoms(use_true_random=False),
)
def test_two_sample_sketch_independent_of_merge_order(bounds, order):
    # The same chunks merged in any order: float64 rounding only (1e-12), null statistics included.
    X, Y = _data()
    feature_map = RFF(n_features=64, bandwidth=1.0, seed=1).fit(X)
    parts = sketch_in_chunks(X, Y, feature_map, 16, 3, bounds)
    in_order = merge(parts)
    order.shuffle(parts)
    shuffled = merge(parts)
    for name, array in in_order._arrays().items():
        np.testing.assert_allclose(shuffled._arrays()[name], array, rtol=1e-12, atol=1e-12 * np.abs(array).max())
    assert shuffled.squared_norm_sum_x == pytest.approx(in_order.squared_norm_sum_x, rel=1e-12)
    np.testing.assert_allclose(permutation_test(shuffled).null, permutation_test(in_order).null, rtol=1e-9)


def test_two_sample_sketch_merge_is_a_commutative_monoid():
    X, Y = _data()
    feature_map = RFF(n_features=32, bandwidth=1.0, seed=1).fit(X)
    a, b, c = sketch_in_chunks(X, Y, feature_map, 8, 0, [50, 100])  # b straddles X and Y
    assert (b.count_x, b.count_y) == (20, 30)
    empty = TwoSampleSketch.empty(feature_map, len(X), len(Y), 8, 0)
    assert empty.is_empty and a.merge(empty) == a and empty.merge(a) == a
    for name, array in a.merge(b)._arrays().items():
        np.testing.assert_array_equal(array, b.merge(a)._arrays()[name])  # + is commutative exactly
        np.testing.assert_allclose(array, (a.merge(empty)).merge(b)._arrays()[name])
    left, right = a.merge(b).merge(c), a.merge(b.merge(c))
    for name, array in left._arrays().items():
        np.testing.assert_allclose(array, right._arrays()[name], rtol=1e-12, atol=1e-14)
    assert left.is_complete and not a.merge(b).is_complete


@pytest.mark.parametrize(
    "change, name",
    [
        (dict(n_permutations=9), "n_permutations"),
        (dict(seed=1), "seed"),
        (dict(n_x=71, n_y=54), "n_x"),
    ],
)
def test_two_sample_sketch_merge_refuses_other_designs(change, name):
    X, Y = _data()
    feature_map = RFF(n_features=32, bandwidth=1.0, seed=1).fit(X)
    design = dict(n_x=70, n_y=55, n_permutations=8, seed=0)
    a = two_sample_sketch_of_chunk(X, feature_map, 0, **design)
    b = two_sample_sketch_of_chunk(Y[:10], feature_map, 70, **{**design, **change})
    with pytest.raises(SketchMismatchError, match=name) as error:
        a.merge(b)
    mine, theirs = design[name], {**design, **change}[name]
    assert f"{name}={mine}" in str(error.value) and f"{name}={theirs}" in str(error.value)


def test_two_sample_sketch_merge_refuses_other_maps():
    X, Y = _data()
    a = two_sample_sketch_of_chunk(X, RFF(n_features=32, bandwidth=1.0, seed=1).fit(X), 0, 70, 55, 8, 0)
    b = two_sample_sketch_of_chunk(Y, RFF(n_features=32, bandwidth=1.0, seed=2).fit(X), 70, 70, 55, 8, 0)
    with pytest.raises(SketchMismatchError, match="different feature maps") as error:
        a.merge(b)
    assert a.fingerprint[:16] in str(error.value) and b.fingerprint[:16] in str(error.value)


@pytest.mark.parametrize("suffix", ["sketch.zarr", "sketch.zip"])
def test_two_sample_sketch_save_load_round_trip(tmp_path, suffix):
    X, Y = _data()
    feature_map = RFF(n_features=32, bandwidth=1.0, variant="cosphase", seed=1).fit(X)
    partial = two_sample_sketch_of_chunk(np.vstack([X, Y])[40:100], feature_map, 40, 70, 55, 8, 5)
    partial.save(tmp_path / suffix)
    loaded = load(tmp_path / suffix)
    assert isinstance(loaded, TwoSampleSketch) and loaded == partial
    assert (loaded.count_x, loaded.count_y, loaded.n_x, loaded.n_y) == (30, 30, 70, 55)
    rest = sketch_in_chunks(X, Y, feature_map, 8, 5, [40, 100])
    whole = loaded.merge(rest[0]).merge(rest[2])
    np.testing.assert_allclose(permutation_test(whole).null, permutation_test(merge(rest)).null, rtol=1e-10)


def _parts_of(sketch):
    return sketch.spec, {}, json.loads(json.dumps(sketch._attrs())), dict(sketch._arrays())


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda attrs, arrays: arrays.update(permutation_sums=arrays["permutation_sums"][:3]), "permutation_sums"),
        (lambda attrs, arrays: arrays.update(feature_sum_x=arrays["feature_sum_x"].astype(np.float32)), "float64"),
        (lambda attrs, arrays: arrays.update(feature_sum_y=np.full(32, np.nan)), "NaN"),
        (lambda attrs, arrays: arrays.pop("permutation_squared_norms"), "permutation_squared_norms"),
        (lambda attrs, arrays: attrs.update(count_x=71), "count_x"),
        (lambda attrs, arrays: attrs.update(count=3), "count"),
        (lambda attrs, arrays: attrs.update(n_permutations=0), "n_permutations"),
        (lambda attrs, arrays: attrs.update(squared_norm_sum_y=-1.0), "squared_norm_sum_y"),
        (lambda attrs, arrays: attrs.update(permutation_scheme="feistel4"), "permutation_scheme"),
    ],
)
def test_two_sample_sketch_from_parts_validates(corrupt, match):
    X, _ = _data()
    feature_map = RFF(n_features=32, bandwidth=1.0, seed=1).fit(X)
    spec, map_arrays, attrs, arrays = _parts_of(two_sample_sketch_of_chunk(X, feature_map, 0, 70, 55, 8, 0))
    corrupt(attrs, arrays)
    with pytest.raises(InputError, match=match):
        TwoSampleSketch._from_parts(spec, map_arrays, attrs, arrays)


def test_two_sample_sketch_load_rejects_tampered_file(tmp_path):
    import zarr

    X, _ = _data()
    sketch = two_sample_sketch_of_chunk(X, RFF(n_features=32, bandwidth=1.0, seed=1).fit(X), 0, 70, 55, 8, 0)
    sketch.save(tmp_path / "s.zarr")
    group = zarr.open_group(tmp_path / "s.zarr", mode="r+")
    group.attrs["count_x"] = 99
    with pytest.raises(SketchFormatError, match="count_x"):
        load(tmp_path / "s.zarr")


def test_permutation_test_needs_a_complete_sketch():
    X, Y = _data()
    feature_map = RFF(n_features=32, bandwidth=1.0, seed=1).fit(X)
    with pytest.raises(InputError, match="incomplete.*70 of n_x=70.*0 of n_y=55"):
        permutation_test(two_sample_sketch_of_chunk(X, feature_map, 0, 70, 55, 8, 0))


@pytest.mark.parametrize("width", [1, 7, 8, 19, 1024])
def test_squared_norms_are_float64_sums_of_the_float32_rows(width):
    # Products of float32 values are exact in float64, so the only rounding left is the sum's.
    rows = (np.random.default_rng(width).normal(size=(33, width)) * 10.0 ** np.arange(-3, 3, 6 / width)).astype(
        np.float32
    )
    out = np.empty(33)
    squared_norms(rows, out)
    exact = [float(sum(Fraction(float(v)) ** 2 for v in row)) for row in rows]
    np.testing.assert_allclose(out, exact, rtol=1e-15)


def test_two_sample_sketch_of_chunk_rejects_rows_outside_the_design():
    X, Y = _data()
    with pytest.raises(InputError, match="outside the pooled design"):
        two_sample_sketch_of_chunk(Y, RFF(n_features=32, bandwidth=1.0).fit(X), 71, 70, 55, 8, 0)


# ---------------------------------------------------------------------------
# two_sample_test on in-memory arrays
# ---------------------------------------------------------------------------
def test_two_sample_test_median_bandwidth_comes_from_the_pooled_sample():
    X, Y = _data(n_x=300, n_y=200)  # 500 rows <= the 1000-row sample: the median sees every row
    result = two_sample_test(X, Y, n_features=64, n_permutations=9)
    assert result.bandwidth == pytest.approx(np.median(pdist(np.vstack([X, Y]))), rel=1e-12)
    assert result.bandwidth != pytest.approx(np.median(pdist(X)), rel=1e-3)


def test_two_sample_test_statistic_is_the_unbiased_mmd2_of_its_features():
    X, Y = _data(n_x=150, n_y=90)
    result = two_sample_test(X, Y, n_features=256, bandwidth=1.3, n_permutations=19, seed=5)
    Z = RFF(n_features=256, bandwidth=1.3, seed=5).fit(X).transform(np.vstack([X, Y])).astype(np.float64)
    expected = unbiased_mmd2_from_gram(Z @ Z.T, np.arange(240) < 150)
    # The sums are float32 GEMMs over tiles added in float64 (two_sample_sketches_of_chunk): 1e-6.
    assert result.statistic == pytest.approx(expected, rel=1e-6)
    assert (result.n_features, result.method, result.map_spec["seed"]) == (256, "permutation", 5)


@pytest.mark.parametrize("method", ["permutation", "spectral", "hotelling"])
def test_two_sample_test_float32_and_float64_agree(method):
    X, Y = _data(n_x=120, n_y=100)
    wide = two_sample_test(X, Y, n_features=128, method=method, n_permutations=49)
    narrow = two_sample_test(
        X.astype(np.float32), Y.astype(np.float32), n_features=128, method=method, n_permutations=49
    )
    assert narrow.statistic == pytest.approx(wide.statistic, rel=1e-3, abs=1e-5)
    assert narrow.p_value == pytest.approx(wide.p_value, abs=0.03)


def test_two_sample_test_is_deterministic_under_a_seed():
    X, Y = _data()
    a, b = (two_sample_test(X, Y, n_features=64, n_permutations=29, seed=8) for _ in range(2))
    np.testing.assert_array_equal(a.null, b.null)
    assert a.p_value == b.p_value


def test_two_sample_result_repr_and_json():
    X, Y = _data()
    for method in ("permutation", "spectral", "hotelling"):
        result = two_sample_test(X, Y, n_features=64, method=method, n_permutations=29)
        text = repr(result)
        assert text.startswith(f"TwoSampleResult(method='{method}')") and "p-value" in text and "\n" in text
        payload = json.loads(json.dumps(result.to_dict()))
        assert payload["method"] == method and payload["n_x"] == 70 and payload["map"]["kind"] == "rff"
        assert payload["p_value"] == result.p_value and 0 < result.p_value <= 1
        assert "null" not in result.to_dict(include_null=False)
    assert payload["dof"] >= 1 and payload["t_squared"] == result.null[0] and result.null.shape == (2,)
    with pytest.raises(AttributeError):
        result.p_value = 0.5  # frozen
    assert isinstance(result, TwoSampleResult) and not result.null.flags.writeable


@pytest.mark.parametrize("method", ["permutation", "spectral"])
def test_two_sample_test_same_result_for_numpy_dask_and_zarr_sources(method, tmp_zarr):
    # The in-memory rows are the reference; dask arrays with other chunkings and zarr arrays
    # on disk go through the same engine and must give the same statistic and null.
    X, Y = _data()
    kwargs = dict(n_features=32, n_permutations=19, seed=4, method=method)
    reference = two_sample_test(X, Y, **kwargs)
    chunked = two_sample_test(da.from_array(X, chunks=7), da.from_array(Y, chunks=13), **kwargs)
    on_disk = two_sample_test(tmp_zarr(X, 11, "x.zarr"), tmp_zarr(Y, 5, "y.zarr"), **kwargs)
    for other in (chunked, on_disk):
        assert other.statistic == pytest.approx(reference.statistic, rel=1e-6, abs=1e-12)
        assert other.p_value == reference.p_value
        if method == "permutation":
            # Other tiles, other float32 rounding of the tiles' sums: 1e-6 of the statistics' scale
            # (a null statistic near 0 cannot keep 1e-6 of itself).
            scale = np.abs(reference.null).max()
            np.testing.assert_allclose(other.null, reference.null, rtol=1e-6, atol=1e-6 * scale)


def test_two_sample_test_on_a_real_cluster_equals_local(dask_client):
    X, Y = _data()
    kwargs = dict(n_features=32, n_permutations=19, seed=4)
    local = two_sample_test(da.from_array(X, chunks=10), da.from_array(Y, chunks=10), **kwargs)
    remote = two_sample_test(da.from_array(X, chunks=10), da.from_array(Y, chunks=10), client=dask_client, **kwargs)
    assert remote.statistic == pytest.approx(local.statistic, rel=1e-12, abs=1e-15)
    np.testing.assert_allclose(remote.null, local.null, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------
# Errors at the public boundary
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "X, Y, kwargs, match",
    [
        (np.ones((5, 2)), np.ones((5, 3)), {}, "same number of columns.*2.*3"),
        (np.ones((1, 2)), np.ones((5, 2)), {}, "X has 1 row"),
        (np.ones((5, 2)), np.ones((1, 2)), {}, "Y has 1 row"),
        (np.ones((5, 2)), np.ones((5, 2)), dict(n_permutations=0), "n_permutations must be an integer >= 1. Got 0"),
        (np.ones((5, 2)), np.ones((5, 2)), dict(method="bootstrap"), "method must be one of.*'bootstrap'"),
        (
            np.ones((5, 2)),
            np.array([[0.0, 1.0], [np.nan, 2.0], [1.0, 1.0]]),
            {},
            "NaN or inf in 1 row.*first bad row: Y row 1",
        ),
        (np.array([[np.inf, 0.0], [1.0, 1.0]]), np.ones((5, 2)), {}, "NaN or inf in 1 row.*first bad row: X row 0"),
        (np.ones(5), np.ones((5, 2)), {}, "Expected 2-D X"),
        (np.ones((5, 2)), np.ones((5, 2)), dict(n_features=1023), "n_features must be even"),
        (np.ones((5, 2)), np.ones((5, 2)), dict(bandwidth=-1.0), "bandwidth"),
    ],
)
def test_two_sample_test_rejects_bad_input(X, Y, kwargs, match):
    with pytest.raises(InputError, match=match):
        two_sample_test(X, Y, **{"n_features": 32, **kwargs})


def test_two_sample_test_refuses_accumulators_over_the_memory_limit():
    X, Y = _data()
    with pytest.raises(InputError, match=r"1000 x 1024 x 8 = 7\.8 MiB.*max_accumulator_bytes") as error:
        two_sample_test(X, Y, n_features=1024, n_permutations=1000, max_accumulator_bytes=2**20)
    assert "raise" in str(error.value)
    # the default ceiling (1 GiB) allows it, and the spectral test has no such accumulators
    two_sample_test(X, Y, n_features=1024, n_permutations=1000, method="spectral", max_accumulator_bytes=2**20)


def test_mmd_test_explains_that_permutation_needs_the_one_pass_sketch():
    X, Y = _data()
    feature_map = RFF(n_features=32, bandwidth=1.0).fit(X)
    sketches = sketch_array(X, feature_map, moments=True), sketch_array(Y, feature_map, moments=True)
    with pytest.raises(InputError, match="TwoSampleSketch.*two_sample_test"):
        mmd_test(*sketches, method="permutation")
    with pytest.raises(InputError, match="'spectral' or 'hotelling'.*'wald'"):
        mmd_test(*sketches, method="wald")


@pytest.mark.parametrize("method", ["spectral", "hotelling"])
def test_mmd_test_needs_moments(method):
    X, Y = _data()
    feature_map = RFF(n_features=32, bandwidth=1.0).fit(X)
    with pytest.raises(InputError, match="sketch_y was sketched without them.*moments=True.*--moments"):
        mmd_test(sketch_array(X, feature_map, moments=True), sketch_array(Y, feature_map), method=method)


def test_mmd_test_refuses_sketches_of_different_maps():
    X, Y = _data()
    a = sketch_array(X, RFF(n_features=32, bandwidth=1.0, seed=1).fit(X), moments=True)
    b = sketch_array(Y, RFF(n_features=32, bandwidth=1.0, seed=2).fit(X), moments=True)
    with pytest.raises(SketchMismatchError, match="different feature maps"):
        mmd_test(a, b)
    with pytest.raises(InputError, match="Y has 1 row"):
        mmd_test(a, sketch_array(Y[:1], a.feature_map, moments=True))


def test_mmd_test_works_from_separately_merged_sketches():
    X, Y = _data(n_x=200, n_y=180)
    feature_map = RFF(n_features=128, bandwidth=1.0, seed=3).fit(X)
    whole = [sketch_array(X, feature_map, moments=True), sketch_array(Y, feature_map, moments=True)]
    parts = [
        merge(sketch_array(part, feature_map, moments=True) for part in np.array_split(sample, 3)) for sample in (X, Y)
    ]
    for method in ("spectral", "hotelling"):
        a, b = mmd_test(*whole, method=method, seed=1), mmd_test(*parts, method=method, seed=1)
        # Other chunks, other float32 tile sums: equal to float32 rounding of the features.
        assert a.statistic == pytest.approx(b.statistic, rel=1e-6)
        assert a.p_value == pytest.approx(b.p_value, rel=1e-6, abs=1e-12)


# ---------------------------------------------------------------------------
# Calibration under H0 and power
# ---------------------------------------------------------------------------
CALIBRATION_SEEDS = 400


# About 30 s per law: the heavy-tailed law runs in the slow suite.
@pytest.mark.parametrize(
    "sampler",
    [pytest.param(gaussian_2d, id="gaussian"), pytest.param(student_t3, id="student-t3", marks=pytest.mark.slow)],
)
def test_two_sample_test_is_calibrated_under_the_null(sampler):
    # H0: both samples of 200 rows from one law. Over 400 seeds the rejection rate at
    # alpha = 0.05 of a calibrated test has sd sqrt(0.05 * 0.95 / 400) = 0.011; the band
    # [0.02, 0.08] is +-2.75 sd. The permutation test (B = 99) is exact: P(p <= 0.05) = 5/100.
    rejections = {"permutation": 0, "spectral": 0, "hotelling": 0}
    for seed in range(CALIBRATION_SEEDS):
        rng = np.random.default_rng([2, seed])
        X, Y = sampler(rng, 200), sampler(rng, 200)
        for method in rejections:
            result = two_sample_test(
                X, Y, n_features=128 if method == "permutation" else 256, method=method, n_permutations=99, seed=seed
            )
            rejections[method] += result.p_value <= ALPHA
    rates = {method: count / CALIBRATION_SEEDS for method, count in rejections.items()}
    print(f"{sampler.__name__}: rejection rates under H0 at alpha=0.05: {rates}")
    for method, rate in rates.items():
        assert 0.02 <= rate <= 0.08, (method, rate)


def _power(pairs, bandwidth, n_permutations, n_features):
    """Rejections of the RFF permutation test and of the exact Gram-matrix test on the same data.

    Paired design: the exact test uses the same permutations (as X masks) so that the
    two tests differ only by the kernel (exact vs D random features).
    """
    rff_rejections = exact_rejections = 0
    for seed, (X, Y) in enumerate(pairs):
        n_x, n_total = len(X), len(X) + len(Y)
        result = two_sample_test(
            X, Y, n_features=n_features, bandwidth=bandwidth, n_permutations=n_permutations, seed=seed
        )
        permuted = permutation_indices(seed, np.arange(n_permutations), n_total, np.arange(n_total))
        masks = np.vstack([np.arange(n_total) < n_x, permuted < n_x])
        rff_rejections += result.p_value <= ALPHA
        exact_rejections += exact_permutation_p_values(X, Y, bandwidth, masks) <= ALPHA
    return rff_rejections / len(pairs), exact_rejections / len(pairs)


def test_two_sample_test_power_matches_the_exact_kernel_test_on_a_mean_shift():
    # N(0, I_2) vs N((0.3, 0), I_2), 200 rows each, sigma = 1, B = 99, D = 1024, 100 pairs.
    rng = np.random.default_rng(2024)
    pairs = [(rng.normal(size=(200, 2)), rng.normal(size=(200, 2)) + [0.3, 0.0]) for _ in range(100)]
    rff_power, exact_power = _power(pairs, bandwidth=1.0, n_permutations=99, n_features=1024)
    print(f"mean shift: power rff={rff_power:.2f} exact={exact_power:.2f}")
    assert exact_power >= 0.4  # the comparison means something
    assert rff_power >= 0.9 * exact_power


@pytest.mark.slow
def test_two_sample_test_power_matches_the_exact_kernel_test_on_sutherland_schneider_mixture():
    # Sec. 4.2's pair is a weak alternative (population MMD^2 = 3.2e-4 at sigma = 0.7): with
    # 500 rows per sample neither test beats its level, so this uses 4000 rows per sample,
    # sigma = 0.7 (the most powerful of 0.3..1.5), B = 99, D = 1024 and 80 pairs.
    rng = np.random.default_rng(4242)
    pairs = [sutherland_schneider_pair(rng, 4000) for _ in range(80)]
    rff_power, exact_power = _power(pairs, bandwidth=0.7, n_permutations=99, n_features=1024)
    print(f"Sutherland-Schneider mixture: power rff={rff_power:.2f} exact={exact_power:.2f}")
    assert exact_power >= 0.3
    assert rff_power >= 0.9 * exact_power


def test_moment_tests_have_power_on_a_mean_shift():
    # Same 60 pairs as seen by the permutation test (D = 256, B = 99). The spectral null
    # approximates the permutation null of the same statistic, so its power should match;
    # Hotelling's T^2 is another statistic (the top-k projected mean difference) and only
    # has to be well above the level.
    rng = np.random.default_rng(77)
    pairs = [(rng.normal(size=(200, 2)), rng.normal(size=(200, 2)) + [0.3, 0.0]) for _ in range(60)]
    power = {
        method: np.mean([
            two_sample_test(X, Y, n_features=256, bandwidth=1.0, method=method, n_permutations=99, seed=seed).p_value
            <= ALPHA
            for seed, (X, Y) in enumerate(pairs)
        ])
        for method in ("permutation", "spectral", "hotelling")
    }  # fmt: skip
    print(f"mean shift, D=256: power {power}")
    assert power["permutation"] >= 0.4
    assert power["spectral"] >= 0.85 * power["permutation"]
    assert power["hotelling"] >= 0.3


# ---------------------------------------------------------------------------
# The estimate (Sutherland & Schneider 2015, sec. 3.3)
# ---------------------------------------------------------------------------
def test_rff_mmd2_estimate_error_within_mcdiarmid_bound_and_unbiased():
    # Sec. 3.3: changing one frequency moves the RFF MMD^2 by at most 16/D, so
    # P(|MMD^2_z - MMD^2| >= eps) <= 2 exp(-D eps^2 / 128). With delta = 1e-6 each
    # seed's error must be below eps = sqrt(128 log(2/delta) / D). The bound is loose,
    # so also: E_omega MMD^2_z = MMD^2 exactly, hence the mean error over 30 map seeds
    # lies within 4 standard errors of 0 (a wrong bandwidth scale shows up here).
    rng = np.random.default_rng(3)
    X, Y = sutherland_schneider_pair(rng, 2000)
    exact = exact_mmd2(X, Y, bandwidth=1.0)
    D = 1024
    epsilon = np.sqrt(128 * np.log(2 / 1e-6) / D)
    errors = np.array(
        [two_sample_test(X, Y, n_features=D, bandwidth=1.0, n_permutations=1, seed=seed).statistic - exact
         for seed in range(30)]
    )  # fmt: skip
    assert np.abs(errors).max() <= epsilon
    assert np.abs(errors).mean() <= 8 * np.sqrt(2 * np.pi / D)  # the paper's bound on E|error|
    assert abs(errors.mean()) <= 4 * errors.std(ddof=1) / np.sqrt(errors.size)


def test_rff_mmd2_mean_absolute_error_falls_like_inverse_sqrt_d():
    rng = np.random.default_rng(5)
    X, Y = sutherland_schneider_pair(rng, 500)
    exact = exact_mmd2(X, Y, bandwidth=1.0)
    sizes = np.array([32, 64, 128, 256, 512, 1024, 2048])
    mean_abs_errors = []
    for D in sizes:
        feature_maps = [RFF(n_features=int(D), bandwidth=1.0, seed=seed).fit(X) for seed in range(40)]
        errors = [mmd2(sketch_array(X, rff), sketch_array(Y, rff)) - exact for rff in feature_maps]
        mean_abs_errors.append(np.mean(np.abs(errors)))
    slope = np.polyfit(np.log(sizes), np.log(mean_abs_errors), 1)[0]
    print(f"log-log slope of the mean absolute MMD^2 error vs D: {slope:.3f}")
    assert -0.6 <= slope <= -0.4


# -- p-values below float64's range ----------------------------------------------------------------


def _log_chi2_survival_by_quadrature(statistic: float, dof: int) -> float:
    """Independent reference: ``Q(a, x) = x^(a-1) e^(-x) / Gamma(a) * int_0^inf (1 + u/x)^(a-1) e^(-u) du``
    (a = dof / 2, x = statistic / 2; the substitution t = x + u in the upper incomplete gamma integral)."""
    a, x = dof / 2.0, statistic / 2.0
    integral, _ = quad(lambda u: (1.0 + u / x) ** (a - 1.0) * np.exp(-u), 0.0, np.inf, epsabs=0.0, epsrel=1e-13)
    return (a - 1.0) * np.log(x) - x - gammaln(a) + np.log(integral)


@pytest.mark.parametrize(
    ("statistic", "dof"),
    # The reference's integrand is well conditioned for x > a (statistic > dof): the upper tail.
    [(t, k) for t in (3.0, 60.0, 1300.0, 1500.0, 4_000.0, 1e5, 1e9) for k in (1, 2, 3, 7, 40, 255) if t > k],
)
def test_chi2_log_survival_matches_the_incomplete_gamma_integral(statistic, dof):
    expected = _log_chi2_survival_by_quadrature(statistic, dof)
    assert chi2_log_survival(statistic, dof) == pytest.approx(expected, rel=1e-10, abs=1e-12)


def test_chi2_log_survival_matches_closed_forms_far_beyond_float64():
    # Even dof 2m: Q = e^(-x) sum_{j<m} x^j / j!; one dof: P(|N(0,1)| >= sqrt(t)) = 2 Phi(-sqrt(t)).
    for statistic in (2_000.0, 5e4, 1e8):
        x = statistic / 2.0
        for m in (1, 3, 10):
            terms = [j * np.log(x) - gammaln(j + 1.0) for j in range(m)]
            assert chi2_log_survival(statistic, 2 * m) == pytest.approx(-x + logsumexp(terms), rel=1e-12)
        assert chi2_log_survival(statistic, 1) == pytest.approx(np.log(2.0) + log_ndtr(-np.sqrt(statistic)), rel=1e-12)
    assert chi2_log_survival(np.inf, 4) == -np.inf
    assert chi2_log_survival(0.0, 4) == 0.0


def test_hotelling_reports_a_p_value_below_float64_from_log_space():
    # Far-apart samples: T^2 ~ 1e4, p ~ 1e-2000, which float64 rounds to 0.
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(3000, 2)), rng.normal(3.0, 1.0, size=(3000, 2))
    result = two_sample_test(X, Y, n_features=64, bandwidth=2.0, method="hotelling")
    t_squared, dof = result.null
    assert result.degrees_of_freedom == int(dof) >= 1 and t_squared > 3_000
    expected = _log_chi2_survival_by_quadrature(t_squared, int(dof)) / np.log(10.0)
    assert result.log10_p_value == pytest.approx(expected, rel=1e-10)
    assert result.p_value == 0.0
    text = result.p_value_text
    assert text == "< 1e-300"  # float64 holds no digits there: said as a bound; log10_p_value keeps the value
    assert f"p-value:                    {text}" in repr(result)
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["log10_p_value"] == pytest.approx(expected, rel=1e-10) and payload["p_value_text"] == text
    assert payload["dof"] == int(dof)
    from streamrff.cli.test import _test_lines

    lines = _test_lines(result)
    assert lines[0].startswith(f"two-sample test: p {text} (differ")
    assert f"on {int(dof)} degrees of freedom" in lines[2]


def test_two_sample_p_values_of_every_method_are_never_printed_as_zero():
    # Permutation and spectral p-values have the floor 1 / (1 + len(null)): far-apart samples reach it.
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(400, 2)), rng.normal(4.0, 1.0, size=(400, 2))
    permutation = two_sample_test(X, Y, n_features=64, bandwidth=2.0, n_permutations=49)
    spectral = two_sample_test(X, Y, n_features=64, bandwidth=2.0, method="spectral")
    hotelling = two_sample_test(X, Y, n_features=64, bandwidth=2.0, method="hotelling")
    assert permutation.p_value == 1 / 50 and permutation.p_value_text == "< 1/50 (0.02)"
    assert spectral.p_value == 1 / (1 + spectral.null.shape[0]) and spectral.p_value_text == "< 1/10001 (9.999e-05)"
    assert permutation.to_dict()["at_floor"] and not hotelling.to_dict()["at_floor"]
    assert permutation.degrees_of_freedom is None and spectral.log10_p_value == pytest.approx(-4.0, abs=1e-4)
    for result in (permutation, spectral, hotelling):
        assert result.p_value_text != "0" and not result.p_value_text.startswith("0e")
        assert result.p_value_text.startswith("< ")  # every floor said as a floor


def test_p_value_text_says_floors_and_bounds():
    from streamrff._base.formatting import format_p_value, p_value_fields

    assert format_p_value(0.5) == "0.5" and format_p_value(1e-300) == "1e-300"
    assert format_p_value(0.0) == "< 1e-300" and format_p_value(9e-301) == "< 1e-300"
    # A Monte Carlo p-value (1 + #{null >= T}) / (1 + B) at 1 / (B + 1) is a floor, one above it is a value.
    assert format_p_value(1 / 201, 200) == "< 1/201 (0.004975)" and format_p_value(2 / 201, 200) == "0.00995"
    assert format_p_value(1 / 201) == "0.004975"  # no B: no floor known
    fields = {"p_value": 1e-4, "at_floor": True, "p_value_text": "< 1/10000 (0.0001)"}
    assert p_value_fields(1 / 10_000, 9_999) == fields
    assert p_value_fields(0.5, 99)["at_floor"] is False
