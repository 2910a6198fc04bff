"""Mergeable sketches: sums against numpy, the monoid laws, MMD^2 against the exact Gram matrix.

MMD references are computed from ``streamrff.exact_kernel`` with numpy (Gretton et
al. 2012 biased and unbiased estimators); the tolerance comes from Sutherland &
Schneider (2015), sec. 3.3.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamrff as srf
from streamrff.errors import InputError, SketchMismatchError

#: Maps under test, by id (all fitted on 4-column data).
MAPS = {
    "rff-sincos": lambda: srf.RFF(n_features=64, bandwidth=1.2, seed=0),
    "rff-cosphase": lambda: srf.RFF(n_features=64, bandwidth=1.2, variant="cosphase", seed=0),
    "rff-orthogonal": lambda: srf.RFF(n_features=64, bandwidth=1.2, orthogonal=True, seed=0),
    "jl": lambda: srf.JL(srf.RFF(n_features=128, bandwidth=1.2, seed=0), n_components=32, seed=0),
}

ROWS = np.random.default_rng(5).normal(size=(90, 4))
FITTED = {name: make().fit(ROWS) for name, make in MAPS.items()}


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """Norm-wise relative difference (entries near zero make element-wise rtol meaningless)."""
    return float(np.linalg.norm(np.asarray(actual) - expected) / np.linalg.norm(expected))


def assert_sketches_close(actual: srf.MeanSketch, expected: srf.MeanSketch, rel: float) -> None:
    assert actual.count == expected.count
    assert actual.fingerprint == expected.fingerprint
    assert actual.has_moments == expected.has_moments
    assert relative_error(actual.feature_sum, expected.feature_sum) <= rel
    assert actual.squared_norm_sum == pytest.approx(expected.squared_norm_sum, rel=rel)
    if expected.has_moments:
        assert relative_error(actual.moment, expected.moment) <= rel


# -- sums against numpy ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mean_sketch_sums_equal_numpy_sums_of_features(name, dtype):
    feature_map = FITTED[name]
    X = ROWS.astype(dtype)
    Z = feature_map.transform(X).astype(np.float64)
    sketch = srf.sketch_array(X, feature_map, moments=True)
    assert sketch.count == len(X)
    assert sketch.feature_sum.dtype == np.float64 and sketch.moment.dtype == np.float64
    # Sums: float32 GEMVs over <= 256-row segments, accumulated in float64 (like the moment).
    assert relative_error(sketch.feature_sum, Z.sum(axis=0)) < 1e-6
    # The second moment is a float32 rank-k update per tile (issue 7), accumulated in float64:
    # equal to float32 rounding of the products.
    np.testing.assert_allclose(sketch.moment, Z.T @ Z, rtol=0, atol=1e-6 * np.abs(Z.T @ Z).max())
    np.testing.assert_array_equal(sketch.moment, sketch.moment.T)
    # Row norms are float32 dot products (the hot path), summed in float64.
    assert sketch.squared_norm_sum == pytest.approx((Z.astype(np.float64) ** 2).sum(), rel=1e-6)
    assert relative_error(sketch.mean, Z.mean(axis=0)) < 1e-6


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
@pytest.mark.parametrize("orthogonal", [False, True])
def test_rff_sums_equal_float64_numpy_features(variant, orthogonal):
    # The fused RFF sums path (no moments) against features computed in float64 by numpy from
    # the map's frequencies, over several tiles, with a scale 1/sqrt(m) that float32 rounds.
    feature_map = srf.RFF(n_features=96, bandwidth=1.5, variant=variant, orthogonal=orthogonal, seed=2)
    X = np.random.default_rng(8).normal(size=(7000, 4))
    feature_map.fit(X)
    assert feature_map._tile_rows(96) < len(X)
    params = feature_map._params()
    phase = X @ params["frequencies"].T
    if variant == "sincos":
        Z = np.hstack([np.cos(phase), np.sin(phase)]) / np.sqrt(48)
    else:
        Z = np.sqrt(2.0 / 96) * np.cos(phase + params["phases"])
    sketch = srf.sketch_array(X, feature_map)
    assert relative_error(sketch.feature_sum, Z.sum(axis=0)) < 1e-6
    assert sketch.squared_norm_sum == pytest.approx((Z**2).sum(), rel=1e-6)


def test_mean_sketch_second_moment_over_many_tiles():
    # Wide enough that the chunk is embedded in several row tiles.
    feature_map = srf.RFF(n_features=1024, bandwidth=1.0, seed=1).fit(ROWS)
    X = np.random.default_rng(0).normal(size=(10_000, 4))  # 4096-row float32 tiles with moments: 2 full, 1 part
    Z = feature_map.transform(X).astype(np.float64)
    sketch = srf.sketch_array(X, feature_map, moments=True)
    assert relative_error(sketch.moment, Z.T @ Z) < 1e-6
    assert relative_error(sketch.feature_sum, Z.sum(axis=0)) < 1e-6


def test_mean_sketch_centred_moment_is_float64_close_when_the_mean_dominates():
    # A wide bandwidth: the mean direction holds a third of the raw moment's trace. Tiles centred on
    # their means keep the float32 rounding to that of the within-tile variance (uncentred float32
    # tile products: 2.8e-8), over more than 64 tiles (the rank-2 terms are added in batches).
    X = np.random.default_rng(3).normal(size=(140_000, 10)).astype(np.float32)
    feature_map = srf.RFF(n_features=256, bandwidth=3.0, seed=0).fit(X[:1])
    sketch = srf.sketch_array(X, feature_map, moments=True)
    Z = feature_map.transform(X).astype(np.float64)
    centred = (Z - Z.mean(axis=0)).T @ (Z - Z.mean(axis=0))
    sketched = sketch.moment - np.outer(sketch.feature_sum, sketch.feature_sum) / sketch.count
    assert np.linalg.norm(sketched - centred, 2) < 1.5e-8 * np.linalg.norm(centred, 2)
    assert relative_error(sketch.moment, Z.T @ Z) < 1e-7
    assert relative_error(sketch.feature_sum, Z.sum(axis=0)) < 1e-8
    assert sketch.squared_norm_sum == pytest.approx((Z**2).sum(), rel=1e-8)


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_float64_features_equal_float64_numpy_features(variant):
    feature_map = srf.RFF(n_features=256, bandwidth=0.7, variant=variant, seed=3).fit(ROWS)
    params = feature_map._params()
    X = np.random.default_rng(1).normal(size=(700, 4))
    phase = X @ params["frequencies"].T
    if variant == "sincos":
        Z = np.hstack([np.cos(phase), np.sin(phase)]) / np.sqrt(phase.shape[1])
    else:
        Z = np.sqrt(2.0 / 256) * np.cos(phase + params["phases"])
    sketch = srf.sketch_array(X, feature_map, moments=True, dtype="float64")
    assert relative_error(sketch.feature_sum, Z.sum(axis=0)) < 1e-12
    assert relative_error(sketch.moment, Z.T @ Z) < 1e-12
    assert sketch.squared_norm_sum == pytest.approx((Z**2).sum(), rel=1e-12)
    # float32 features are that to float32 rounding: the phase error grows with |w.x|.
    float32 = srf.sketch_array(X, feature_map)
    assert 1e-9 < relative_error(float32.feature_sum, Z.sum(axis=0)) < 1e-5


def test_sketch_array_rejects_an_unknown_dtype():
    with pytest.raises(srf.InputError, match=r"dtype must be 'float32' or 'float64'.*'float16'"):
        srf.sketch_array(ROWS, FITTED["rff-sincos"], dtype="float16")


def test_sketch_array_fits_a_clone_of_an_unfitted_map():
    unfitted = srf.RFF(n_features=32, bandwidth="median", seed=2)
    sketch = srf.sketch_array(ROWS, unfitted)
    assert not unfitted.is_fitted()
    expected = srf.RFF(n_features=32, bandwidth="median", seed=2).fit(ROWS)
    assert sketch.fingerprint == expected.fingerprint


def test_mean_sketch_mean_of_empty_sketch_raises():
    with pytest.raises(InputError, match="empty sketch"):
        _ = srf.MeanSketch.empty(FITTED["rff-sincos"]).mean


# -- the monoid laws ----------------------------------------------------------------------------


@st.composite
def row_splits(draw: st.DrawFn, n_rows: int = len(ROWS)) -> list[tuple[int, int]]:
    """A random split of range(n_rows) into 1-6 contiguous chunks (some possibly empty)."""
    cuts = draw(st.lists(st.integers(0, n_rows), min_size=0, max_size=5))
    bounds = [0, *sorted(cuts), n_rows]
    return list(zip(bounds[:-1], bounds[1:]))


def sketch_chunks(feature_map, splits, moments):
    return [
        srf.sketch_array(ROWS[start:stop], feature_map, moments=moments)
        if stop > start
        else srf.MeanSketch.empty(feature_map, moments=moments)
        for start, stop in splits
    ]


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(list(MAPS)),
    moments=st.booleans(),
    splits=row_splits(),
    data=st.data(),
)
def test_mean_sketch_merge_is_independent_of_chunking_and_order(name, moments, splits, data):
    feature_map = FITTED[name]
    whole = srf.sketch_array(ROWS, feature_map, moments=moments)
    parts = sketch_chunks(feature_map, splits, moments)
    order = data.draw(st.permutations(range(len(parts))))
    shuffled = [parts[i] for i in order]
    # Sketching [A; B; ...] equals merging the sketches of A, B, ... in any order and grouping.
    assert_sketches_close(srf.merge(*shuffled), whole, rel=1e-6)
    while len(shuffled) > 1:  # a random binary tree of merges
        i = data.draw(st.integers(0, len(shuffled) - 2))
        shuffled[i : i + 2] = [shuffled[i].merge(shuffled[i + 1])]
    assert_sketches_close(shuffled[0], whole, rel=1e-6)


@settings(max_examples=20, deadline=None, database=None)
@given(
    name=st.sampled_from(list(MAPS)),
    moments=st.booleans(),
    cuts=st.lists(st.integers(1, 89), min_size=2, max_size=2, unique=True),
)
def test_mean_sketch_merge_is_commutative_and_associative(name, moments, cuts):
    feature_map = FITTED[name]
    i, j = sorted(cuts)
    a, b, c = sketch_chunks(feature_map, [(0, i), (i, j), (j, len(ROWS))], moments)
    assert a.merge(b) == b.merge(a)  # float addition commutes exactly
    assert_sketches_close(a.merge(b).merge(c), a.merge(b.merge(c)), rel=1e-12)
    assert srf.merge(a, b, c).count == len(ROWS)


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("moments", [False, True])
def test_mean_sketch_empty_is_neutral(name, moments):
    feature_map = FITTED[name]
    sketch = srf.sketch_array(ROWS, feature_map, moments=moments)
    empty = srf.MeanSketch.empty(feature_map, moments=moments)
    assert empty.is_empty and empty.count == 0 and not sketch.is_empty
    assert empty.merge(sketch) == sketch
    assert sketch.merge(empty) == sketch
    assert empty.merge(empty) == empty


def test_mean_sketch_merge_returns_new_object_and_keeps_inputs():
    feature_map = FITTED["rff-sincos"]
    a, b = srf.sketch_array(ROWS[:30], feature_map), srf.sketch_array(ROWS[30:], feature_map)
    before = a.feature_sum.copy()
    merged = a.merge(b)
    assert merged is not a and merged is not b
    np.testing.assert_array_equal(a.feature_sum, before)
    assert a.count == 30 and b.count == 60


def test_merge_accepts_one_iterable_and_rejects_nothing():
    feature_map = FITTED["rff-sincos"]
    parts = [srf.sketch_array(part, feature_map) for part in np.array_split(ROWS, 3)]
    assert srf.merge(parts).count == len(ROWS)
    with pytest.raises(InputError, match="at least one sketch"):
        srf.merge()
    with pytest.raises(InputError, match="merge takes sketches"):
        srf.merge(parts[0], "sketch")


@settings(max_examples=25, deadline=None, database=None)
@given(splits=row_splits(n_rows=300), k=st.integers(1, 40))
def test_landmark_sketch_sample_is_independent_of_chunking(splits, k):
    X = np.random.default_rng(3).normal(size=(300, 2))
    whole = srf.LandmarkSketch.from_rows(X, k, seed=8)
    parts = [srf.LandmarkSketch.from_rows(X[start:stop], k, 8, row_offset=start) for start, stop in splits]
    merged = srf.merge(*reversed(parts))
    assert merged == whole
    assert merged.count == 300 and merged.rows.shape == (k, 2)


# -- mismatches ----------------------------------------------------------------------------------


def test_mean_sketch_merge_refuses_different_maps_naming_both_fingerprints():
    first = srf.sketch_array(ROWS, srf.RFF(n_features=64, bandwidth=1.2, seed=0).fit(ROWS))
    second = srf.sketch_array(ROWS, srf.RFF(n_features=64, bandwidth=1.2, seed=1).fit(ROWS))
    for left, right in ((first, second), (second, first)):
        with pytest.raises(SketchMismatchError) as raised:
            left.merge(right)
        message = str(raised.value)
        assert left.fingerprint[:16] in message and right.fingerprint[:16] in message
        # Only the differing parameter is named, with both values in the order of the merge.
        assert f"seed {left.spec['seed']} vs {right.spec['seed']}" in message and "bandwidth" not in message
        assert "one fitted map" in message
    with pytest.raises(SketchMismatchError, match=first.fingerprint[:16]):
        srf.mmd2(first, second)


@pytest.mark.parametrize(
    "other",
    [
        srf.RFF(n_features=66, bandwidth=1.2, seed=0),
        srf.RFF(n_features=64, bandwidth=2.4, seed=0),
        srf.RFF(n_features=64, bandwidth=1.2, variant="cosphase", seed=0),
        srf.RFF(n_features=64, bandwidth=1.2, orthogonal=True, seed=0),
    ],
)
def test_mean_sketch_merge_refuses_any_map_difference(other):
    base = srf.sketch_array(ROWS, FITTED["rff-sincos"])
    with pytest.raises(SketchMismatchError, match="different feature maps"):
        base.merge(srf.sketch_array(ROWS, other.fit(ROWS)))


def test_sketch_merge_refuses_different_kinds():
    mean = srf.sketch_array(ROWS, FITTED["rff-sincos"])
    landmarks = srf.LandmarkSketch.from_rows(ROWS, 5, seed=0)
    with pytest.raises(SketchMismatchError) as raised:
        mean.merge(landmarks)
    assert "'mean'" in str(raised.value) and "'landmark'" in str(raised.value)
    with pytest.raises(SketchMismatchError, match="'landmark' sketch with a 'mean'"):
        landmarks.merge(mean)


def test_mean_sketch_merge_refuses_moments_with_no_moments():
    feature_map = FITTED["rff-sincos"]
    with pytest.raises(SketchMismatchError, match="moments=True"):
        srf.sketch_array(ROWS, feature_map, moments=True).merge(srf.sketch_array(ROWS, feature_map))


def test_landmark_sketch_merge_refuses_different_seed_or_k():
    base = srf.LandmarkSketch.from_rows(ROWS, 5, seed=0)
    for other in (srf.LandmarkSketch.from_rows(ROWS, 5, seed=1), srf.LandmarkSketch.from_rows(ROWS, 6, seed=0)):
        with pytest.raises(SketchMismatchError, match=base.fingerprint[:16]):
            base.merge(other)


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_sketch_array_rejects_nonfinite_rows(value):
    X = ROWS.copy()
    X[[3, 40], 1] = value
    with pytest.raises(InputError) as raised:
        srf.sketch_array(X, FITTED["rff-sincos"])
    message = str(raised.value)
    assert "finite" in message and "rows 3, 40" in message and "on_invalid='skip'" in message


@pytest.mark.parametrize(("shape", "fix"), [((6,), "reshape(-1, 1)"), ((2, 3, 4), "reshape(len(X), -1)")])
def test_sketch_array_rejects_non_2d_input(shape, fix):
    with pytest.raises(InputError) as raised:
        srf.sketch_array(np.ones(shape), FITTED["rff-sincos"])
    assert f"Got {len(shape)}-D array of shape {shape}" in str(raised.value)
    assert fix in str(raised.value)


def test_sketch_array_rejects_wrong_width():
    with pytest.raises(InputError) as raised:
        srf.sketch_array(np.ones((5, 3)), FITTED["rff-sincos"])
    message = str(raised.value)
    assert "X has 3 features" in message and "expecting 4" in message and "4 columns" in message


def test_sketch_array_rejects_non_map():
    with pytest.raises(InputError, match="feature_map must be a streamrff FeatureMap"):
        srf.sketch_array(ROWS, "rff")


def test_mmd2_needs_two_rows_per_side_for_unbiased():
    feature_map = FITTED["rff-sincos"]
    one, many = srf.sketch_array(ROWS[:1], feature_map), srf.sketch_array(ROWS, feature_map)
    with pytest.raises(InputError, match="has 1 row"):
        srf.mmd2(one, many, unbiased=True)
    assert srf.mmd2(one, many, unbiased=False) >= 0
    with pytest.raises(InputError, match="MeanSketch"):
        srf.mmd2(srf.LandmarkSketch.from_rows(ROWS, 3, 0), many)


# -- MMD^2 ------------------------------------------------------------------------------------------


def exact_mmd2(X: np.ndarray, Y: np.ndarray, sigma: float) -> tuple[float, float]:
    """Biased and unbiased MMD^2 from exact Gram matrices (Gretton et al. 2012, eqs. 2-3)."""
    n, m = len(X), len(Y)
    Kxx = srf.exact_kernel(X, X, sigma)
    Kyy = srf.exact_kernel(Y, Y, sigma)
    cross = srf.exact_kernel(X, Y, sigma).mean()
    biased = Kxx.mean() + Kyy.mean() - 2.0 * cross
    unbiased = (Kxx.sum() - np.trace(Kxx)) / (n * (n - 1)) + (Kyy.sum() - np.trace(Kyy)) / (m * (m - 1)) - 2.0 * cross
    return float(biased), float(unbiased)


def gram_mmd2(Zx: np.ndarray, Zy: np.ndarray) -> tuple[float, float]:
    """The same two estimators with the kernel replaced by the features' inner products."""
    return exact_mmd2_from_gram(Zx @ Zx.T, Zy @ Zy.T, Zx @ Zy.T)


def exact_mmd2_from_gram(Kxx: np.ndarray, Kyy: np.ndarray, Kxy: np.ndarray) -> tuple[float, float]:
    n, m = len(Kxx), len(Kyy)
    biased = Kxx.mean() + Kyy.mean() - 2.0 * Kxy.mean()
    unbiased = (
        (Kxx.sum() - np.trace(Kxx)) / (n * (n - 1)) + (Kyy.sum() - np.trace(Kyy)) / (m * (m - 1)) - 2.0 * Kxy.mean()
    )
    return float(biased), float(unbiased)


@pytest.mark.parametrize("name", list(MAPS))
def test_mmd2_equals_gram_formula_on_the_features(name):
    # The algebra: the sums give the same estimators as the n x m Gram matrices of z,
    # including maps with ||z|| != 1 (cosphase, JL), where the unbiased one needs sum ||z||^2.
    # RFF sums scale float32 cosines in float64 where transform rounds each scaled feature to
    # float32, and sum ||z||^2 = n for sincos: both agree to float32 rounding (~1e-7 relative).
    feature_map = FITTED[name]
    X, Y = ROWS[:25], ROWS[25:] + 0.5
    Zx = feature_map.transform(X).astype(np.float64)
    Zy = feature_map.transform(Y).astype(np.float64)
    biased, unbiased = gram_mmd2(Zx, Zy)
    a, b = srf.sketch_array(X, feature_map), srf.sketch_array(Y, feature_map)
    assert srf.mmd2(a, b, unbiased=False) == pytest.approx(biased, rel=1e-7, abs=1e-12)
    assert srf.mmd2(a, b, unbiased=True) == pytest.approx(unbiased, rel=1e-7, abs=1e-12)
    assert srf.mmd2(a, b) == srf.mmd2(a, b, unbiased=True)  # unbiased is the default


@pytest.fixture(scope="module")
def two_samples() -> tuple[np.ndarray, np.ndarray, float, float, float]:
    rng = np.random.default_rng(3)
    n = 2000
    X = rng.normal(size=(n, 2))
    Y = rng.normal(size=(n, 2)) + np.array([1.0, 0.0])
    sigma = 0.5  # small against the shift, so MMD^2 depends strongly on sigma (0.038 here)
    biased, unbiased = exact_mmd2(X, Y, sigma)
    return X, Y, sigma, biased, unbiased


@pytest.mark.parametrize(("variant", "orthogonal"), [("sincos", False), ("cosphase", False), ("sincos", True)])
def test_mmd2_from_sketches_matches_exact_mmd2(two_samples, variant, orthogonal):
    """MMD^2 of 2 000 vs 2 000 points from D = 4096 features against the exact Gram matrices.

    Sutherland & Schneider (2015), sec. 3.3 (McDiarmid): Pr(|MMD_z - MMD| >= eps) <=
    2 exp(-D eps^2 / 128). For delta = 0.01: eps = sqrt(128 log(2 / delta) / D) = 0.407
    at D = 4096. The bound is loose: over 12 seeds the error's standard deviation is
    about 2e-3 (sincos), 1.4e-3 (cosphase), 0.9e-3 (orthogonal), so we also assert
    |error| < 1e-2 (5 standard deviations, 40x tighter than the bound). A factor-2
    bandwidth error moves the exact MMD^2 from 0.038 to 0.090 (2 sigma) or 0.012 (sigma/2).
    """
    X, Y, sigma, biased, unbiased = two_samples
    D, delta = 4096, 0.01
    eps = np.sqrt(128.0 * np.log(2.0 / delta) / D)  # solves 2 exp(-D eps^2 / 128) = delta: 0.407
    rff = srf.RFF(n_features=D, bandwidth=sigma, variant=variant, orthogonal=orthogonal, seed=0).fit(X)
    a, b = srf.sketch_array(X, rff), srf.sketch_array(Y, rff)
    approx_biased, approx_unbiased = srf.mmd2(a, b, unbiased=False), srf.mmd2(a, b, unbiased=True)
    for approx, exact in ((approx_biased, biased), (approx_unbiased, unbiased)):
        assert abs(approx - exact) < eps
        assert abs(approx - exact) < 1e-2, f"MMD^2 {approx:.5f} vs exact {exact:.5f}"
    # The bias correction itself is exact up to O(1/(n D^1/2)): the two estimators differ
    # by what the exact ones differ by (measured: within 7e-6; exact gap 9e-4).
    assert abs((approx_biased - approx_unbiased) - (biased - unbiased)) < 1e-4


def _sum_sketch_builders(rff, rows):
    from streamrff.kmeans import cluster_sketch_of_chunk
    from streamrff.sketches.regression import regression_sketch_of_chunk
    from streamrff.twosample import two_sample_sketch_of_chunk

    centers = rff.transform(rows[:3]).astype(np.float64)
    n = rows.shape[0]
    return {
        "mean": lambda part, offset: srf.sketch_array(part, rff, moments=True),
        "nystrom": lambda part, offset: srf.NystromSketch.from_rows(part, rff, 8, 1),
        # One target shift for every part, as the engine gives every chunk of a job (parts of different
        # shifts merge by exact algebra, equal to float64 rounding, not bit for bit).
        "regression": lambda part, offset: regression_sketch_of_chunk(part, part[:, :2], rff, target_shift=rows[0, :2]),
        "nystrom-regression": lambda part, offset: regression_sketch_of_chunk(
            part, part[:, :2], rff, sketch_size=8, test_seed=1, target_shift=rows[0, :2]
        ),
        "cluster": lambda part, offset: cluster_sketch_of_chunk(part, rff, centers, centers + 0.01),
        "twosample": lambda part, offset: two_sample_sketch_of_chunk(part, rff, offset, n // 2, n - n // 2, 7, 0),
    }


@pytest.mark.parametrize("kind", ["mean", "nystrom", "regression", "nystrom-regression", "cluster", "twosample"])
def test_sum_sketch_merge_many_equals_pairwise_fold_and_numpy_sums(kind):
    rows = np.random.default_rng(7).normal(size=(120, 3))
    rff = srf.RFF(n_features=32, bandwidth=1.0).fit(rows)
    build = _sum_sketch_builders(rff, rows)[kind]
    offsets = np.cumsum([0, 30, 25, 40])
    sketches = [build(part, int(offset)) for part, offset in zip(np.split(rows, offsets[1:]), offsets)]
    fold = sketches[0]
    for other in sketches[1:]:
        fold = fold.merge(other)
    merged = sketches[0].merge_many(sketches[1:])
    assert type(merged) is type(fold) and merged == fold  # every array and attribute, bit for bit
    assert merged.count == rows.shape[0]
    features = rff.transform(rows).astype(np.float64)
    stored_sums = merged.sums.sum(axis=0) if kind == "cluster" else (
        merged.feature_sum_x + merged.feature_sum_y if kind == "twosample" else merged.feature_sum
    )
    np.testing.assert_allclose(stored_sums, features.sum(axis=0), rtol=0, atol=1e-4)
    assert all(not array.flags.writeable for array in merged._arrays().values())
