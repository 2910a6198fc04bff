"""Per-column tests from quantile-bin counts (``streamrff.marginal_tests``), against numpy references."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import streamrff as srf
from streamrff._kernels.binning import ColumnBins, bin_chunk, column_median_heuristics, quantile_bins
from streamrff.errors import InputError
from streamrff.twosample.marginal import _column_maps, _marginal_result, _relabelled_counts


def _numpy_unbiased_mmd2(features_a: np.ndarray, features_b: np.ndarray) -> float:
    """Unbiased MMD^2 from the full Gram matrices of two feature sets (the diagonals left out)."""
    n, m = features_a.shape[0], features_b.shape[0]
    gram_aa, gram_bb = features_a @ features_a.T, features_b @ features_b.T
    return float(
        (gram_aa.sum() - np.trace(gram_aa)) / (n * (n - 1))
        + (gram_bb.sum() - np.trace(gram_bb)) / (m * (m - 1))
        - 2 * (features_a @ features_b.T).mean()
    )


def _features(feature_map, values: np.ndarray) -> np.ndarray:
    return np.asarray(feature_map.transform(values[:, None].astype(np.float64)), dtype=np.float64)


def test_binned_statistic_is_numpys_unbiased_mmd2_of_the_binned_values():
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(700, 2)), rng.standard_t(4, size=(600, 2)) + [0.3, 0.0]
    bins = quantile_bins(np.vstack([A[::7], B[::7]]), 32)
    merged = bin_chunk(np.vstack([A, B]), 0, 700, bins)
    maps = _column_maps([0.8, 1.3], 16, seed=5)
    result = _marginal_result(merged, maps, 700, 600, 19, 32, 5, "columns")
    for position, column in enumerate(result.columns):
        pooled = np.concatenate([A[:, column], B[:, column]])
        edges = bins.edges[column, : bins.n_edges[column]]
        index = np.searchsorted(edges, pooled, side="right")  # bin k: k edges <= value
        means = np.bincount(index, weights=pooled) / np.maximum(np.bincount(index), 1)
        binned = means[index]  # every value replaced by its bin's pooled mean
        expected = _numpy_unbiased_mmd2(_features(maps[column], binned[:700]), _features(maps[column], binned[700:]))
        assert result.statistics[position] == pytest.approx(expected, rel=1e-9, abs=1e-13)


def test_marginal_statistic_on_few_distinct_values_is_numpys_unbiased_mmd2_of_the_rows():
    rng = np.random.default_rng(1)
    A = rng.integers(0, 12, size=(500, 3)).astype(np.float64)
    B = rng.integers(0, 12, size=(400, 3)).astype(np.float64)
    B[:, 2] = rng.integers(2, 14, size=400)
    result = srf.marginal_tests(A, B, n_features=32, n_permutations=99, seed=4, n_bins=64)
    assert int(result.columns[0]) == 2
    order = np.argsort(result.columns)
    maps = _column_maps(list(result.bandwidths[order]), 32, 4)  # the maps of columns 0, 1, 2
    for position, column in enumerate(result.columns):
        expected = _numpy_unbiased_mmd2(_features(maps[column], A[:, column]), _features(maps[column], B[:, column]))
        assert result.statistics[position] == pytest.approx(expected, rel=1e-9, abs=1e-13)


def test_bin_counts_do_not_depend_on_chunking_or_merge_order():
    rng = np.random.default_rng(2)
    rows = rng.lognormal(size=(1000, 3)).astype(np.float32)
    bins = quantile_bins(rows[::9], 100)
    whole = bin_chunk(rows, 0, 450, bins)
    cuts = [0, 130, 450, 451, 800, 1000]
    parts = [bin_chunk(rows[lo:hi], 0, max(0, min(450 - lo, hi - lo)), bins) for lo, hi in zip(cuts, cuts[1:])]
    for merged in (parts[0].merge_many(parts[1:]), parts[4].merge_many(parts[3::-1])):
        np.testing.assert_array_equal(merged.counts, whole.counts)
        np.testing.assert_allclose(merged.sums, whole.sums, rtol=1e-12, atol=1e-12)
    # the reference: numpy's bins of every column
    for column in range(3):
        index = np.searchsorted(bins.edges[column, : bins.n_edges[column]], rows[:, column].astype(np.float64), "right")
        width = whole.counts.shape[2]
        np.testing.assert_array_equal(whole.counts[0, column], np.bincount(index[:450], minlength=width))
        np.testing.assert_array_equal(whole.counts[1, column], np.bincount(index[450:], minlength=width))


def test_marginal_tests_do_not_depend_on_chunking():
    rng = np.random.default_rng(3)
    A, B = rng.normal(size=(900, 4)), rng.normal(size=(800, 4))
    B[:, 1] *= 1.5
    one = srf.marginal_tests(A, B, n_permutations=99, seed=7)
    many = srf.marginal_tests(
        da.from_array(A, chunks=(97, 4)), da.from_array(B, chunks=(250, 4)), n_permutations=99, seed=7
    )
    np.testing.assert_array_equal(many.columns, one.columns)
    np.testing.assert_allclose(many.statistics, one.statistics, rtol=1e-9, atol=1e-14)
    np.testing.assert_array_equal(many.p_values, one.p_values)
    assert "99 relabellings" in one.null and "quantile bins" in repr(one)


def test_relabelled_counts_have_the_hypergeometric_mean_and_variance():
    rng = np.random.default_rng(4)
    for totals, n_x in ((np.array([30, 50, 20]), 40), (np.array([4 * 10**8, 7 * 10**8, 10**8]), 6 * 10**8)):
        draws = _relabelled_counts(totals, n_x, 4000, rng)
        total = totals.sum()
        assert np.all(draws.sum(axis=1) == n_x) and np.all((draws >= 0) & (draws <= totals))
        share = totals / total
        variance = n_x * share * (1 - share) * (total - n_x) / (total - 1)
        assert np.all(np.abs(draws.mean(axis=0) - n_x * share) <= 5 * np.sqrt(variance / 4000))
        np.testing.assert_allclose(draws.var(axis=0), variance, rtol=0.1)


def test_marginal_p_values_are_roughly_uniform_under_no_change():
    p_values = []
    for seed in range(15):
        rng = np.random.default_rng(200 + seed)
        A, B = rng.normal(size=(300, 2)), rng.normal(size=(250, 2))
        p_values.extend(srf.marginal_tests(A, B, n_features=16, n_permutations=99, seed=seed).p_values)
    p_values = np.array(p_values)  # 30 p-values: mean 0.5 (sd 0.053), about 3 below 0.1
    assert 0.3 <= p_values.mean() <= 0.7
    assert np.mean(p_values <= 0.1) <= 0.3


def test_marginal_tests_refuse_non_finite_rows_and_bad_bins():
    A = np.zeros((10, 2))
    A[3, 1] = np.nan
    with pytest.raises(InputError, match="NaN or inf"):
        srf.marginal_tests(A, np.ones((10, 2)))
    with pytest.raises(InputError, match="n_bins"):
        srf.marginal_tests(np.ones((10, 2)), np.ones((10, 2)), n_bins=0)


def test_column_bins_partial_merges_by_addition():
    a = ColumnBins(np.ones((2, 1, 3), dtype=np.int64), np.full((1, 3), 0.5))
    merged = a.merge(a)
    assert merged.counts.tolist() == [[[2, 2, 2]], [[2, 2, 2]]] and merged.sums.tolist() == [[1.0, 1.0, 1.0]]
    assert not merged.shows_non_finite()


def test_column_median_heuristics_equal_scipys_pairwise_distance_medians():
    from scipy.spatial.distance import pdist

    rng = np.random.default_rng(5)
    sample = np.column_stack(
        [rng.normal(size=400), rng.integers(0, 4, size=400), 1e3 * rng.standard_t(2, size=400), np.full(400, 2.5)]
    )
    expected = []
    for column in sample.T:
        distances = pdist(column[:, None])
        distances = distances[distances > 0]
        expected.append(float(np.median(distances)) if distances.size else 1.0)
    assert column_median_heuristics(sample).tolist() == expected
