"""Tests of the aggregated multi-bandwidth two-sample test against independent references.

References: Gram matrices of each map's features with explicitly permuted index sets
(``permutation_indices``), plain-numpy standardisation / maximum / log-mean-exp / pairwise
rank counts for the aggregated statistics, brute-force nearest-neighbour and median
distances for the bandwidth grid, and the exact level of a permutation test under H0.
"""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from streamrff.cli import main
from streamrff.errors import InputError, SketchMismatchError
from streamrff.maps import RFF
from streamrff.twosample import (
    AggregatedTwoSampleResult,
    AggregatedTwoSampleSketch,
    aggregated_permutation_test,
    auto_bandwidths,
    bandwidth_maps,
    permutation_indices,
    permutation_test,
    shared_map_seed,
    two_sample_sketch_of_chunk,
    two_sample_sketches_of_chunk,
    two_sample_test,
)
from streamrff.twosample.aggregated import aggregated_p_value

ALPHA = 0.05


pytestmark = pytest.mark.usefixtures("single_threaded_blas")  # many small GEMMs (conftest.py)


def _data(seed=0, n_x=70, n_y=55, d=2):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n_x, d)), rng.normal(0.2, 1.1, size=(n_y, d))


def _sketch(X, Y, maps, n_permutations, seed, bounds=()):
    """The aggregated sketch of the pooled rows cut at ``bounds`` (chunks may straddle X and Y), merged."""
    pooled = np.vstack([X, Y])
    edges = [0, *sorted(set(bounds)), pooled.shape[0]]
    parts = [
        AggregatedTwoSampleSketch(
            two_sample_sketches_of_chunk(pooled[a:b], maps, a, len(X), len(Y), n_permutations, seed)
        )
        for a, b in zip(edges[:-1], edges[1:])
        if b > a
    ]
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    return merged


def unbiased_mmd2_from_gram(K: np.ndarray, in_x: np.ndarray) -> float:
    """Unbiased MMD^2 (Gretton et al. 2012, eq. 3) from a Gram matrix and a boolean X mask."""
    kxx, kyy, kxy = K[np.ix_(in_x, in_x)], K[np.ix_(~in_x, ~in_x)], K[np.ix_(in_x, ~in_x)]
    n, m = kxx.shape[0], kyy.shape[0]
    return (kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean()


# ---------------------------------------------------------------------------
# Exactness: every bandwidth's null equals explicitly permuted features
# ---------------------------------------------------------------------------
def test_aggregated_null_statistics_equal_explicitly_permuted_features():
    X, Y = _data()
    n_x, n_y, n_permutations, seed = len(X), len(Y), 40, 9
    maps = bandwidth_maps([0.2, 0.7, 2.5], n_features_in=2, n_features=128, seed=3)
    result = aggregated_permutation_test(_sketch(X, Y, maps, n_permutations, seed, bounds=[33, 90, 101]))

    pooled = np.vstack([X, Y])
    pi = permutation_indices(seed, np.arange(n_permutations), n_x + n_y, np.arange(n_x + n_y))
    observed_mask = np.arange(n_x + n_y) < n_x
    expected = np.empty((len(maps), n_permutations + 1))
    for row, feature_map in enumerate(maps):
        Z = feature_map.transform(pooled).astype(np.float64)
        K = Z @ Z.T
        expected[row] = [unbiased_mmd2_from_gram(K, mask) for mask in [observed_mask, *(pi < n_x)]]
    scale = np.abs(expected).max()
    np.testing.assert_allclose(result.statistics, expected[:, 0], rtol=1e-6, atol=1e-6 * scale)
    np.testing.assert_allclose(result.null_statistics, expected[:, 1:], rtol=1e-6, atol=1e-6 * scale)
    np.testing.assert_array_equal(result.bandwidths, [0.2, 0.7, 2.5])

    # Per-bandwidth (uncorrected) p-values and the aggregated one: (1 + #{null >= observed}) / (1 + B).
    own = (1 + (expected[:, 1:] >= expected[:, :1]).sum(axis=1)) / (1 + n_permutations)
    np.testing.assert_allclose(result.p_values_uncorrected, own)
    z = (expected - expected.mean(axis=1, keepdims=True)) / expected.std(axis=1, keepdims=True)
    np.testing.assert_allclose(result.standardised, z, rtol=1e-5, atol=1e-5)
    aggregated = z.max(axis=0)
    assert result.statistic == pytest.approx(aggregated[0], rel=1e-6)
    np.testing.assert_allclose(result.null, aggregated[1:], rtol=1e-5, atol=1e-5)
    assert result.p_value == pytest.approx((1 + np.sum(aggregated[1:] >= aggregated[0])) / (1 + n_permutations))


def test_aggregated_p_value_of_each_aggregation_matches_numpy():
    # Independent formulas on the same (L, B + 1) statistics: log-mean-exp for "fuse", pairwise
    # rank counts for "mmdagg" (MMDAgg's minimum of per-bandwidth permutation p-values).
    rng = np.random.default_rng(1)
    values = rng.gamma(2.0, size=(4, 60)) * [[1.0], [1e-3], [5.0], [0.2]]
    z = (values - values.mean(axis=1, keepdims=True)) / values.std(axis=1, keepdims=True)
    ranks = (values[:, :, None] >= values[:, None, :]).sum(axis=1) / values.shape[1]  # p of column j
    references = {"max": z.max(axis=0), "fuse": np.log(np.exp(z).mean(axis=0)), "mmdagg": -ranks.min(axis=0)}
    for aggregation, reference in references.items():
        p_value, statistics, _ = aggregated_p_value(values, aggregation, np.zeros(4))
        np.testing.assert_allclose(statistics, reference, rtol=1e-12, atol=1e-12)
        if aggregation == "mmdagg":  # ties of the minimum p-value are broken by the max statistic
            at_least = (reference[1:] > reference[0]) | (
                (reference[1:] == reference[0]) & (references["max"][1:] >= references["max"][0])
            )
        else:
            at_least = reference[1:] >= reference[0]
        assert p_value == (1 + np.sum(at_least)) / values.shape[1], aggregation


def test_aggregated_p_value_extremes_and_ties():
    B = 19
    values = np.tile(np.arange(B + 1, dtype=float), (3, 1))  # observed smallest everywhere
    assert aggregated_p_value(values, "max", np.zeros(3))[0] == 1.0
    assert aggregated_p_value(values[:, ::-1].copy(), "max", np.zeros(3))[0] == 1 / (B + 1)
    tied = values[:, ::-1].copy()
    tied[:, 5] = tied[:, 0]  # one permutation ties the observed split at every bandwidth
    assert aggregated_p_value(tied, "max", np.zeros(3))[0] == 2 / (B + 1)
    tied[:, 5] -= 1e-13  # float rounding below the tolerance still counts as a tie
    assert aggregated_p_value(tied, "max", np.full(3, 1e-12))[0] == 2 / (B + 1)


# ---------------------------------------------------------------------------
# The bandwidth grid and the map seeds
# ---------------------------------------------------------------------------
def test_auto_bandwidths_span_half_the_nearest_neighbour_distance_to_twice_the_median():
    rng = np.random.default_rng(2)
    sample = np.vstack([rng.normal(size=(300, 3)), np.zeros((2, 3))])  # a duplicate row is ignored
    distances = cdist(sample, sample)
    median = np.median(distances[np.triu_indices(len(sample), 1)][distances[np.triu_indices(len(sample), 1)] > 0])
    distances[distances == 0] = np.inf
    nearest = np.median(distances.min(axis=1))
    grid = auto_bandwidths(sample)
    assert grid.shape == (10,)
    assert grid[0] == pytest.approx(nearest / 2, rel=1e-12)
    assert grid[-1] == pytest.approx(2 * median, rel=1e-12)
    np.testing.assert_allclose(np.diff(np.log(grid)), np.log(grid[1] / grid[0]), rtol=1e-9)
    np.testing.assert_array_equal(auto_bandwidths(np.ones((5, 2))), np.geomspace(0.5, 2.0, 10))


def test_bandwidth_maps_are_scaled_copies_of_one_seeded_draw():
    maps = bandwidth_maps([0.5, 1.0], n_features_in=2, n_features=64, seed=7)
    again = bandwidth_maps([0.5, 1.0], n_features_in=2, n_features=64, seed=7)
    assert [m.fingerprint for m in maps] == [m.fingerprint for m in again]
    assert [m.seed_ for m in maps] == [shared_map_seed(7)] * 2 and shared_map_seed(8) != shared_map_seed(7)
    # Each map is the RFF map its spec names (independent reference: a map built from scratch).
    for feature_map, bandwidth in zip(maps, [0.5, 1.0]):
        reference = RFF(n_features=64, bandwidth=bandwidth, seed=shared_map_seed(7)).fit(np.zeros((1, 2)))
        assert feature_map.fingerprint == reference.fingerprint
    np.testing.assert_allclose(
        0.5 * maps[0]._params()["frequencies"], 1.0 * maps[1]._params()["frequencies"], rtol=1e-15
    )


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_shared_projection_sketches_equal_each_maps_own_sketch(variant):
    # The shared projection (one X G for every bandwidth) against each map's own single-map kernel,
    # whose features come from that map's frequencies: equal up to float32 rounding of the phases.
    rng = np.random.default_rng(4)
    rows = rng.normal(size=(700, 3))
    maps = bandwidth_maps([0.05, 0.3, 1.0, 4.0], n_features_in=3, n_features=128, seed=2, variant=variant)
    parts = two_sample_sketches_of_chunk(rows, maps, 100, 400, 500, 19, seed=5)
    for part, feature_map in zip(parts, maps):
        alone = two_sample_sketch_of_chunk(rows, feature_map, 100, 400, 500, 19, seed=5)
        features = feature_map.transform(rows).astype(np.float64)
        for name in ("feature_sum_x", "feature_sum_y", "permutation_sums"):
            np.testing.assert_allclose(getattr(part, name), getattr(alone, name), rtol=0, atol=2e-5 * 700)
        np.testing.assert_allclose(part.feature_sum_x, features[:300].sum(axis=0), rtol=0, atol=2e-5 * 700)
        assert part.squared_norm_sum_x == pytest.approx(alone.squared_norm_sum_x, rel=1e-6)


# ---------------------------------------------------------------------------
# Calibration under H0 (exact level of a permutation test)
# ---------------------------------------------------------------------------
def _gaussian(rng, n):
    return rng.normal(size=(n, 2))


def _student_t3(rng, n):
    return rng.standard_t(3, size=(n, 3))


def _separated_clusters(rng, n):
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    return centres[rng.integers(0, 4, n)] + rng.normal(scale=0.3, size=(n, 2))


@pytest.mark.parametrize("sampler", [_gaussian, _student_t3, _separated_clusters], ids=["gaussian", "t3", "clusters"])
def test_aggregated_test_is_calibrated_under_the_null(sampler):
    # H0: both samples of 30 rows from one law, the grid from the pooled rows (auto_bandwidths, as the
    # engine does), D = 16, B = 99, 400 seeds. A valid permutation test rejects at alpha = 0.05 with
    # probability 5/100; the rate over 400 seeds has sd 0.011, so [0.02, 0.08] is +-2.75 sd. Every
    # aggregation is read from the same per-bandwidth statistics.
    n, n_permutations, seeds = 30, 99, 400
    rejections = {"max": 0, "fuse": 0, "mmdagg": 0}
    for seed in range(seeds):
        rng = np.random.default_rng([20, seed])
        pooled = np.vstack([sampler(rng, n), sampler(rng, n)])
        maps = bandwidth_maps(auto_bandwidths(pooled), pooled.shape[1], n_features=16, seed=seed)
        sketch = AggregatedTwoSampleSketch(two_sample_sketches_of_chunk(pooled, maps, 0, n, n, n_permutations, seed))
        result = aggregated_permutation_test(sketch)
        values = np.column_stack([result.statistics, result.null_statistics])
        for aggregation in rejections:
            rejections[aggregation] += aggregated_p_value(values, aggregation, np.zeros(len(maps)))[0] <= ALPHA
    rates = {aggregation: count / seeds for aggregation, count in rejections.items()}
    print(f"{sampler.__name__}: rejection rates under H0 at alpha=0.05: {rates}")
    for aggregation, rate in rates.items():
        assert 0.02 <= rate <= 0.08, (aggregation, rate)


# ---------------------------------------------------------------------------
# The public function: in memory, out of core, on a real cluster
# ---------------------------------------------------------------------------
def test_two_sample_test_aggregated_from_zarr_on_a_real_cluster_equals_in_memory(dask_client, tmp_zarr):
    X, Y = _data()
    kwargs = dict(n_features=32, n_permutations=19, seed=4, method="aggregated")
    in_memory = two_sample_test(X, Y, **kwargs)
    out_of_core = two_sample_test(tmp_zarr(X, 11, "x.zarr"), tmp_zarr(Y, 7, "y.zarr"), client=dask_client, **kwargs)
    assert isinstance(out_of_core, AggregatedTwoSampleResult)
    np.testing.assert_array_equal(out_of_core.bandwidths, in_memory.bandwidths)  # same landmark rows
    assert out_of_core.p_value == in_memory.p_value
    np.testing.assert_array_equal(out_of_core.p_values_uncorrected, in_memory.p_values_uncorrected)
    # Other chunks, other float32 rounding of the tiles' sums: 1e-6 of each bandwidth's statistics' scale.
    scale = np.abs(in_memory.null_statistics).max(axis=1, keepdims=True)
    for name in ("statistics", "null_statistics"):
        ours, reference = (np.reshape(getattr(r, name), (scale.shape[0], -1)) for r in (out_of_core, in_memory))
        np.testing.assert_allclose(ours / scale, reference / scale, rtol=1e-6, atol=1e-6, err_msg=name)


def test_two_sample_test_aggregated_components_equal_single_bandwidth_sketches():
    # Sharing the permutation masks between maps must not mix them: component l equals the
    # single-bandwidth permutation test of map l alone (same seed, same permutations).
    X, Y = _data()
    result = two_sample_test(
        da.from_array(X, chunks=20), Y, n_features=64, n_permutations=29, seed=5, method="aggregated",
        bandwidths=[0.4, 1.6],
    )  # fmt: skip
    # The aggregated kernel projects once for both bandwidths (phases X G / sigma instead of X (G / sigma)):
    # features agree to float32 rounding, so MMD^2 values agree to ~1e-7 of the kernel's scale (k(x, x) = 1).
    for index, feature_map in enumerate(bandwidth_maps([0.4, 1.6], 2, n_features=64, seed=5)):
        alone = permutation_test(two_sample_sketch_of_chunk(np.vstack([X, Y]), feature_map, 0, len(X), len(Y), 29, 5))
        assert result.statistics[index] == pytest.approx(alone.statistic, rel=1e-6, abs=1e-7)
        np.testing.assert_allclose(result.null_statistics[index], alone.null, rtol=1e-6, atol=1e-7)
        assert result.p_values_uncorrected[index] == alone.p_value


def test_aggregated_result_repr_and_json():
    X, Y = _data()
    result = two_sample_test(X, Y, n_features=32, n_permutations=19, method="aggregated", aggregation="fuse")
    text = repr(result)
    assert "NOT corrected" in text and "p-value (aggregated)" in text and text.count("\n") >= 7 + 10
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["method"] == "aggregated" and payload["aggregation"] == "fuse"
    assert payload["p_value"] == result.p_value and len(payload["bandwidths"]) == 10 == len(payload["maps"])
    assert payload["bandwidths"][0]["p_value_uncorrected"] == result.p_values_uncorrected[0]
    assert len(payload["null"]) == 19 and "null" not in result.to_dict(include_null=False)
    assert not result.null_statistics.flags.writeable


# ---------------------------------------------------------------------------
# Errors at the public boundary
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bandwidths=[1.0]), "bandwidths applies to method='aggregated' only"),
        (dict(aggregation="max"), "aggregation applies to method='aggregated' only"),
        (dict(method="aggregated", bandwidth=1.0), "bandwidth=1.0 is for one kernel.*bandwidths="),
        (dict(method="aggregated", aggregation="mean"), "aggregation must be one of.*'mean'"),
        (dict(method="aggregated", bandwidths="median"), "bandwidths must be 'auto' or a list.*'median'"),
        (dict(method="aggregated", bandwidths=[]), "at least one bandwidth"),
        (dict(method="aggregated", bandwidths=[1.0, -2.0]), "positive finite numbers. Got -2.0"),
        (dict(method="aggregated", bandwidths=[1.0, 1.0]), "distinct"),
        (
            dict(method="aggregated", feature_map=RFF(n_features=32, bandwidth=1.0).fit(np.ones((2, 2)))),
            "one map per bandwidth.*feature_map does not apply",
        ),
        (
            dict(method="aggregated", n_features=1024, n_permutations=1000, max_accumulator_bytes=2**20),
            r"10 x \(1000 \+ 2\) x 1024 x 8 = 78\.3 MiB.*max_accumulator_bytes",
        ),
    ],
)
def test_two_sample_test_aggregated_rejects_bad_input(kwargs, match):
    X, Y = _data()
    with pytest.raises(InputError, match=match):
        two_sample_test(X, Y, **{"n_features": 32, **kwargs})


def test_two_sample_test_aggregated_refuses_a_design_over_a_task_threads_memory():
    # 10 x (1000 + 2) x 2**20 float64 sums in each of the merge tree's 9 partials: ~750 GiB per task thread.
    X, Y = _data()
    expected = r"aggregated test with 10 bandwidths .* GiB per task thread.*fewer bandwidths"
    with pytest.raises(InputError, match=expected):
        two_sample_test(X, Y, n_features=2**20, n_permutations=1000, method="aggregated", max_accumulator_bytes=2**50)


def test_aggregated_sketch_refuses_other_bandwidth_lists():
    X, Y = _data()
    maps = bandwidth_maps([0.5, 1.0, 2.0], 2, n_features=16)
    three = AggregatedTwoSampleSketch(two_sample_sketches_of_chunk(X, maps, 0, len(X), len(Y), 9, 0))
    two = AggregatedTwoSampleSketch(two_sample_sketches_of_chunk(Y, maps[:2], len(X), len(X), len(Y), 9, 0))
    with pytest.raises(SketchMismatchError, match="3 bandwidths with 2"):
        three.merge(two)
    other = AggregatedTwoSampleSketch(two_sample_sketches_of_chunk(Y, maps[::-1], len(X), len(X), len(Y), 9, 0))
    with pytest.raises(SketchMismatchError, match="different feature maps"):
        three.merge(other)
    with pytest.raises(InputError, match="incomplete"):
        aggregated_permutation_test(three)


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------
def test_cli_test_aggregated_prints_the_table_json_and_plot(capsys, tmp_zarr, tmp_path):
    X, Y = _data(n_x=80, n_y=60)
    x_path, y_path = tmp_zarr(X, 25, "x.zarr"), tmp_zarr(Y, 25, "y.zarr")
    common = ["test", x_path, y_path, "--null", "aggregated", "--features", "32", "--permutations", "19"]
    assert main([*common, "--bandwidths", "0.5,1,2", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    reference = two_sample_test(X, Y, n_features=32, n_permutations=19, method="aggregated", bandwidths=[0.5, 1, 2])
    assert [row["bandwidth"] for row in payload["bandwidths"]] == [0.5, 1.0, 2.0]
    assert payload["p_value"] == reference.p_value and payload["aggregation"] == "max"
    statistics = [row["statistic"] for row in payload["bandwidths"]]
    np.testing.assert_allclose(statistics, reference.statistics, rtol=1e-6, atol=1e-8)  # float32 rounding near 0
    assert [row["at_floor"] for row in payload["bandwidths"]] == [p == 1 / 20 for p in reference.p_values_uncorrected]
    plot = tmp_path / "scales.png"
    assert main([*common, "--aggregation", "mmdagg", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "aggregation:  mmdagg over 10 bandwidths" in out and "NOT corrected" in out
    assert "interval (needs --moments)" in out and "MMD runs from 0 to sqrt(2)" in out  # one table, no moments
    assert len(out.splitlines()) == 7 + 10 + 1 and plot.stat().st_size > 1000
    for argv in (
        ["test", x_path, y_path, "--bandwidths", "auto"],
        [*common, "--bandwidth", "1.0"],
        [*common, "--map", x_path],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        main([*common, "--bandwidths", "0,1"])
    assert "comma-separated positive numbers" in capsys.readouterr().err


def test_docstring_examples_run():
    import doctest

    from streamrff.sketches import twosample as sketch
    from streamrff.twosample import aggregated

    for module in (aggregated, sketch):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__
