"""Where and how much two samples differ: the MMD^2 interval, the witness and its top rows, per-column tests."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.spatial.distance import cdist

import streamrff as srf
from streamrff.errors import InputError
from streamrff.twosample import holm, mmd2_variance


def _gaussian_kernel(X: np.ndarray, Y: np.ndarray, bandwidth: float) -> np.ndarray:
    return np.exp(-cdist(X, Y, "sqeuclidean") / (2.0 * bandwidth**2))


def _fitted_rff(n_features: int, bandwidth: float, width: int, seed: int = 0) -> srf.RFF:
    return srf.RFF(n_features=n_features, bandwidth=bandwidth, seed=seed).fit(np.zeros((1, width)))


# ---------------------------------------------------------------- effect size and its interval


def test_mmd2_variance_matches_the_spread_of_the_statistic_over_repeated_samples(single_threaded_blas):
    rff = _fitted_rff(64, 1.0, 2)
    rng = np.random.default_rng(5)
    draws = []
    for _ in range(400):
        X, Y = rng.normal(size=(200, 2)), rng.normal(0.4, 1.2, size=(150, 2))
        Zx, Zy = rff.transform(X).astype(np.float64), rff.transform(Y).astype(np.float64)
        Kxx, Kyy = Zx @ Zx.T, Zy @ Zy.T  # the exact unbiased U-statistic of the feature kernel
        draws.append(
            (Kxx.sum() - np.trace(Kxx)) / (200 * 199)
            + (Kyy.sum() - np.trace(Kyy)) / (150 * 149)
            - 2 * (Zx @ Zy.T).mean()
        )
    estimates = [
        mmd2_variance(
            srf.sketch_array(rng.normal(size=(200, 2)), rff, moments=True),
            srf.sketch_array(rng.normal(0.4, 1.2, size=(150, 2)), rff, moments=True),
        )
        for _ in range(20)
    ]
    ratio = np.sqrt(np.mean(estimates)) / np.std(draws)
    assert 0.85 < ratio < 1.15, ratio


def _shifted_normal_embedding(feature_map: srf.RFF, shift: float) -> np.ndarray:
    """Closed form: the mean sincos features of N(shift, 1), ``E e^{iwx} = e^{iw shift - w^2/2}``."""
    w = np.asarray(feature_map._frequencies(), dtype=np.float64)[:, 0]
    phi = np.exp(-(w**2) / 2.0) / np.sqrt(w.shape[0])
    return np.concatenate([np.cos(w * shift) * phi, np.sin(w * shift) * phi])


def _coverage(n: int, shift: float, repetitions: int, interval: str, n_features: int, seed: int) -> float:
    """Share of 95% intervals that cover the closed-form MMD^2: of the drawn features' kernel, or of the
    Gaussian kernel (``2 (1 - exp(-h^2/6)) / sqrt(3)`` at bandwidth 1; a new map per repetition)."""
    rng = np.random.default_rng(seed)
    covered = 0
    for repetition in range(repetitions):
        rff = _fitted_rff(n_features, 1.0, 1, seed=repetition if interval == "kernel" else 0)
        if interval == "kernel":
            truth = 2.0 * (1.0 - np.exp(-(shift**2) / 6.0)) / np.sqrt(3.0)
        else:
            delta = _shifted_normal_embedding(rff, 0.0) - _shifted_normal_embedding(rff, shift)
            truth = float(delta @ delta)
        sx = srf.sketch_array(rng.normal(size=(n, 1)), rff, moments=True)
        sy = srf.sketch_array(rng.normal(shift, 1.0, size=(n, 1)), rff, moments=True)
        low, high = srf.mmd_test(sx, sy, method="hotelling").confidence_interval(0.95, interval=interval)
        covered += low <= truth <= high
    return covered / repetitions


def test_confidence_interval_covers_a_small_mmd2_of_the_features_and_of_the_gaussian_kernel(single_threaded_blas):
    # Shift 0.1 at n = 1 000 puts MMD^2 at ~1.3 standard errors, where the plug-in normal interval covered
    # ~0.83 (issue #48). 60 repetitions: a binomial band of about 3 standard errors around 0.95.
    assert _coverage(1000, 0.1, 60, "features", 128, seed=11) >= 0.85
    assert _coverage(1000, 0.1, 60, "kernel", 128, seed=12) >= 0.85


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n", "shift", "interval", "n_features"),
    [
        (2000, 0.0, "features", 256),
        (2000, 0.14, "features", 256),
        (2000, 0.28, "kernel", 512),
        (50, 0.87, "kernel", 256),
    ],
)
def test_confidence_interval_coverage_near_and_away_from_zero(single_threaded_blas, n, shift, interval, n_features):
    # 0, 2, 4 and 2 standard errors (benchmarks/check_interval_coverage.py prints the whole grid).
    coverage = _coverage(n, shift, 150, interval, n_features, seed=13)
    assert 0.90 <= coverage <= (1.0 if shift == 0.0 else 0.99), coverage


def _reference_inverted_interval(Zx: np.ndarray, Zy: np.ndarray, level: float) -> tuple[float, float]:
    """The inverted interval of the drawn features' MMD^2 from the features themselves (numpy/scipy, 200 000
    draws of the noise ``e ~ N(0, C)``, ``C = C_x / n + C_y / m``, by Cholesky): theta passes when the
    U-statistic lies between the quantiles of ``theta + sqrt(V_0) S + 2 sqrt(theta) u'e``, with
    ``S = (||e||^2 - tr C) / sd`` and u the observed difference d of the means shrunk toward C's leading
    eigenvector by the share ``tr C / ||d||^2`` of noise."""
    n, m = Zx.shape[0], Zy.shape[0]
    Kxx, Kyy = Zx @ Zx.T, Zy @ Zy.T
    statistic = (Kxx.sum() - np.trace(Kxx)) / (n * (n - 1)) + (Kyy.sum() - np.trace(Kyy)) / (m * (m - 1))
    statistic -= 2 * (Zx @ Zy.T).mean()
    Cx, Cy = np.cov(Zx.T), np.cov(Zy.T)

    def square(C, rows):  # tr(C^2) without the (tr C)^2 / rows bias of tr(S^2)
        return (rows - 1) / rows * (np.sum(C * C) - np.trace(C) ** 2 / (rows - 1))

    V0 = 2 * square(Cx, n) / (n * (n - 1)) + 2 * square(Cy, m) / (m * (m - 1)) + 4 * np.sum(Cx * Cy) / (n * m)
    covariance = Cx / n + Cy / m
    d = Zx.mean(axis=0) - Zy.mean(axis=0)
    rng = np.random.default_rng(2024)
    e = rng.standard_normal((200_000, d.shape[0])) @ np.linalg.cholesky(covariance).T
    S = np.sum(e * e, axis=1) - np.trace(covariance)
    S = (S - S.mean()) / S.std()
    share = np.clip(1 - np.trace(covariance) / (d @ d), 0, 1)  # of ||d||^2 that is not noise
    leading = np.linalg.eigh(covariance)[1][:, -1]
    u = np.sqrt(share) * d / np.linalg.norm(d) + np.sqrt(1 - share) * np.sign(leading @ d) * leading
    linear = 2 * (e @ (u / np.linalg.norm(u)))
    rank = int((0.5 - level / 2) * S.shape[0]), int((0.5 + level / 2) * S.shape[0])

    def quantile(theta, which):
        return np.partition(theta + np.sqrt(V0) * S + np.sqrt(theta) * linear, rank[which])[rank[which]]

    low = 0.0 if quantile(0.0, 1) >= statistic else brentq(lambda t: quantile(t, 1) - statistic, 0.0, statistic)
    start = max(statistic, 0.0)
    high = brentq(lambda t: quantile(t, 0) - statistic, start, 10 * start + 10 * np.sqrt(V0))
    return low, high


@pytest.mark.parametrize("shift", [0.0, 0.4])
def test_interval_ends_match_a_numpy_inversion_of_the_same_law(shift):
    # 8 features, so every eigenvalue carries its own normal in both computations (no normal remainder). The
    # reference draws the noise by Cholesky, 200 000 times; the library in the eigenbasis, 4 000 times with a
    # fixed seed: its ends are 3.8% of the width off at most here (the reference's own Monte Carlo spread
    # over seeds is 1-2%). The previous law, its linear part independent of the degenerate one, was 150%
    # off at shift 0 (upper end) and 6% at shift 0.4 (lower end).
    rff = _fitted_rff(8, 1.0, 1, seed=3)
    rng = np.random.default_rng(int(1000 * shift))
    X, Y = rng.normal(size=(400, 1)), rng.normal(shift, 1.0, size=(400, 1))
    Zx, Zy = rff.transform(X).astype(np.float64), rff.transform(Y).astype(np.float64)
    result = srf.mmd_test(srf.sketch_array(X, rff, moments=True), srf.sketch_array(Y, rff, moments=True))
    for level in (0.9, 0.95):
        reference = _reference_inverted_interval(Zx, Zy, level)
        got = result.confidence_interval(level, interval="features")
        np.testing.assert_allclose(got, reference, rtol=0.0, atol=0.05 * (reference[1] - reference[0]))


def test_confidence_interval_of_a_permutation_test_with_moments_equals_the_moment_sketches_one():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(600, 3)), rng.normal(0.3, 1.0, size=(500, 3))
    rff = _fitted_rff(128, 1.5, 3)
    result = srf.two_sample_test(X, Y, feature_map=rff, n_permutations=19, moments=True)
    reference = srf.mmd_test(srf.sketch_array(X, rff, moments=True), srf.sketch_array(Y, rff, moments=True))
    np.testing.assert_allclose(result.confidence_interval(0.9), reference.confidence_interval(0.9), rtol=1e-6)
    assert result.to_dict()["confidence_interval"]["level"] == 0.95
    assert result.mmd == pytest.approx(np.sqrt(result.statistic))


def test_confidence_interval_without_moments_says_to_sketch_with_moments():
    rng = np.random.default_rng(0)
    result = srf.two_sample_test(rng.normal(size=(50, 2)), rng.normal(size=(50, 2)), n_features=64, n_permutations=9)
    with pytest.raises(InputError, match="--moments"):
        result.confidence_interval()
    assert result.to_dict()["confidence_interval"] is None
    assert "--moments" in repr(result)


def test_confidence_interval_refuses_a_level_outside_zero_one():
    rng = np.random.default_rng(0)
    rff = _fitted_rff(32, 1.0, 1)
    result = srf.mmd_test(*(srf.sketch_array(rng.normal(size=(30, 1)), rff, moments=True) for _ in range(2)))
    with pytest.raises(InputError, match="level must be"):
        result.confidence_interval(95)


def test_kernel_interval_adds_the_feature_variance_and_says_what_it_covers():
    rng = np.random.default_rng(0)
    rff = _fitted_rff(64, 1.0, 1)
    sx = srf.sketch_array(rng.normal(size=(400, 1)), rff, moments=True)
    sy = srf.sketch_array(rng.normal(0.3, 1.0, size=(400, 1)), rff, moments=True)
    result = srf.mmd_test(sx, sy)
    kernel, features = result.confidence_interval(0.9), result.confidence_interval(0.9, interval="features")
    assert kernel[0] <= features[0] < result.statistic < features[1] <= kernel[1]
    payload = result.to_dict()["confidence_interval"]
    assert payload["interval"] == "kernel" and payload["covers"] == "Gaussian kernel"
    np.testing.assert_allclose(payload["mmd"], np.sqrt(payload["mmd2"]))
    assert "(Gaussian kernel)" in result.effect_text() and "range 0 to sqrt(2)" in result.effect_text()
    with pytest.raises(InputError, match="interval must be 'kernel'"):
        result.confidence_interval(interval="gaussian")
    jl = srf.RelativeErrorRFF(n_features=32, bandwidth=1.0).fit(np.zeros((1, 1)))  # not kind "rff"
    other = srf.mmd_test(*(srf.sketch_array(rng.normal(size=(100, 1)), jl, moments=True) for _ in range(2)))
    with pytest.raises(InputError, match="interval='features'"):
        other.confidence_interval()
    assert "(drawn features' kernel)" in other.effect_text() and other.confidence_interval(interval="features")


def test_aggregated_result_gives_one_interval_and_one_witness_per_bandwidth():
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(300, 2)), rng.normal(0.5, 1.0, size=(300, 2))
    result = srf.two_sample_test(
        X, Y, n_features=64, n_permutations=19, method="aggregated", bandwidths=[0.5, 2.0], moments=True
    )
    intervals = result.confidence_interval()
    assert intervals.shape == (2, 2) and np.all(intervals[:, 0] <= result.statistics)
    assert np.all(result.statistics <= intervals[:, 1])
    assert isinstance(result.witness(2.0), srf.Witness)
    with pytest.raises(InputError, match="bandwidths"):
        result.witness(3.0)


# ---------------------------------------------------------------- the witness


def test_witness_correlates_with_the_exact_kernel_witness():
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(1000, 3)), rng.normal(0.3, 1.3, size=(1000, 3))
    rff = _fitted_rff(4096, 1.5, 3, seed=1)
    f = srf.witness(srf.sketch_array(A, rff), srf.sketch_array(B, rff))
    points = rng.normal(0.0, 1.5, size=(2000, 3))
    exact = _gaussian_kernel(points, A, 1.5).mean(axis=1) - _gaussian_kernel(points, B, 1.5).mean(axis=1)
    values = f(points)
    assert values.dtype == np.float64 and values.shape == (2000,)
    assert np.corrcoef(values, exact)[0, 1] >= 0.99
    assert np.abs(values - exact).max() < 0.05  # kernel units, not just correlated


def test_witness_of_a_test_result_points_at_the_over_represented_sample():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(400, 1)), rng.normal(2.0, 0.5, size=(400, 1))
    f = srf.two_sample_test(X, Y, n_features=256, bandwidth=0.5, n_permutations=9).witness()
    assert f(np.array([[-1.0]]))[0] > 0.05 and f(np.array([[2.0]]))[0] < -0.1


def test_witness_is_lazy_on_dask_and_zarr_sources(tmp_zarr):
    rng = np.random.default_rng(2)
    A, B = rng.normal(size=(300, 2)), rng.normal(1.0, 1.0, size=(300, 2))
    rff = _fitted_rff(128, 1.0, 2)
    f = srf.witness(srf.sketch_array(A, rff), srf.sketch_array(B, rff))
    rows = rng.normal(size=(250, 2)).astype(np.float32)
    expected = rff.transform(rows).astype(np.float64) @ (
        rff.transform(A).astype(np.float64).mean(0) - rff.transform(B).astype(np.float64).mean(0)
    )
    for source in (da.from_array(rows, chunks=60), tmp_zarr(rows, 70)):
        lazy = f(source)
        assert isinstance(lazy, da.Array)
        np.testing.assert_allclose(lazy.compute(), expected, atol=1e-5)


def test_top_rows_are_those_of_a_full_sort_whatever_the_chunking():
    rng = np.random.default_rng(3)
    A, B = rng.normal(size=(500, 2)), rng.normal(0.7, 1.0, size=(500, 2))
    rff = _fitted_rff(256, 1.0, 2)
    f = srf.witness(srf.sketch_array(A, rff), srf.sketch_array(B, rff))
    source = rng.normal(0.0, 1.5, size=(3000, 2))
    values = rff.transform(source).astype(np.float64) @ f.direction
    for which, order in (
        ("largest", np.argsort(-values, kind="stable")),
        ("smallest", np.argsort(values, kind="stable")),
    ):
        for chunks in (3000, 257, 1000):
            rows, top = f.top_rows(da.from_array(source, chunks=(chunks, 2)), k=15, which=which)
            np.testing.assert_array_equal(rows, order[:15])
            np.testing.assert_allclose(top, values[order[:15]], atol=1e-5)


def test_top_rows_on_a_real_cluster_and_with_skipped_rows(dask_client, tmp_zarr):
    rng = np.random.default_rng(4)
    A, B = rng.normal(size=(400, 2)), rng.normal(size=(400, 2))
    B[:20] = 4.0 + 0.1 * rng.normal(size=(20, 2))
    rff = _fitted_rff(256, 1.0, 2)
    f = srf.witness(srf.sketch_array(A, rff), srf.sketch_array(B, rff))
    B[5] = np.nan  # a planted row that cannot be ranked
    rows, _ = f.top_rows(tmp_zarr(B, 90), k=10, which="smallest", client=dask_client, on_invalid="skip")
    assert 5 not in rows and set(rows.tolist()) <= set(range(20))
    with pytest.raises(InputError, match="NaN or inf"):
        f.top_rows(B, k=3)


def test_top_rows_find_a_planted_cluster():
    rng = np.random.default_rng(6)
    n, d = 20_000, 16
    A = rng.normal(size=(n, d)).astype(np.float32)
    B = rng.normal(size=(n, d)).astype(np.float32)
    planted = rng.choice(n, n // 20, replace=False)
    B[planted] = 2.5 + 0.3 * rng.normal(size=(planted.size, d))
    sketch_a = srf.sketch(A, srf.RFF(n_features=1024, bandwidth="median"))
    f = srf.witness(sketch_a, srf.sketch(B, sketch_a.feature_map))
    rows, _ = f.top_rows(B, k=100, which="smallest")
    assert np.isin(rows, planted).mean() >= 0.9


def test_witness_and_top_rows_refuse_bad_arguments():
    rff = _fitted_rff(32, 1.0, 2)
    sketch = srf.sketch_array(np.zeros((3, 2)), rff)
    with pytest.raises(InputError, match="MeanSketch"):
        srf.witness(sketch, np.zeros(3))
    f = srf.witness(sketch, srf.sketch_array(np.ones((3, 2)), rff))
    with pytest.raises(InputError, match="which must be"):
        f.top_rows(np.zeros((5, 2)), which="biggest")
    with pytest.raises(InputError, match="3 columns"):
        f.top_rows(np.zeros((5, 3)))


# ---------------------------------------------------------------- per-column tests


def test_holm_matches_the_step_down_by_hand():
    # sorted 0.01, 0.02, 0.03, 0.2 -> 4*0.01, max(.04, 3*.02), max(.06, 2*.03), max(.06, .2)
    np.testing.assert_allclose(holm([0.2, 0.01, 0.03, 0.02]), [0.2, 0.04, 0.06, 0.06])


def test_marginal_statistics_are_each_columns_exact_unbiased_mmd2():
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(300, 3)), rng.normal(size=(250, 3))
    B[:, 1] *= 2.0
    result = srf.marginal_tests(A, B, n_features=2048, n_permutations=49)
    assert sorted(result.columns.tolist()) == [0, 1, 2] and int(result.columns[0]) == 1
    assert np.all(np.diff(result.adjusted_p_values) >= 0)
    for position, column in enumerate(result.columns):
        bandwidth = result.bandwidths[position]
        # the exact kernel the RFF approximates: the statistic is near the exact Gram-matrix MMD^2
        Kxx = _gaussian_kernel(A[:, [column]], A[:, [column]], bandwidth)
        Kyy = _gaussian_kernel(B[:, [column]], B[:, [column]], bandwidth)
        exact = (
            (Kxx.sum() - 300) / (300 * 299)
            + (Kyy.sum() - 250) / (250 * 249)
            - 2 * _gaussian_kernel(A[:, [column]], B[:, [column]], bandwidth).mean()
        )
        assert result.statistics[position] == pytest.approx(exact, abs=0.01)
    np.testing.assert_allclose(result.adjusted_p_values, holm(result.p_values))  # Holm in the table order


def test_marginal_tests_rank_a_shifted_column_first():
    firsts = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        A, B = rng.normal(size=(2000, 16)), rng.normal(size=(2000, 16))
        B[:, 9] += 0.3
        result = srf.marginal_tests(A, B, n_features=32, n_permutations=199, seed=seed)
        firsts += int(result.columns[0]) == 9
    assert firsts == 4


def _gaussian_mmd2_of_a_shift(shift: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """Closed form: Gaussian-kernel MMD^2 of N(0, 1) against N(shift, 1) in one dimension."""
    scale = bandwidth**2 + 2.0
    return 2.0 * bandwidth / np.sqrt(scale) * (1.0 - np.exp(-(shift**2) / (2.0 * scale)))


def test_marginal_table_ranks_columns_by_effect_when_the_p_values_saturate():
    # 16 columns shifted by different amounts: nearly all p-values sit at their floor 1/(B+1), so only
    # the effect can order them; the table's order must follow the true per-column MMD.
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    shifts = np.linspace(0.06, 0.5, 16)[rng.permutation(16)]
    A, B = rng.normal(size=(20_000, 16)), rng.normal(size=(20_000, 16)) + shifts
    result = srf.marginal_tests(A, B, n_features=64, n_permutations=99, seed=0)
    assert np.sum(result.p_values == 1 / 100) >= 12
    truth = _gaussian_mmd2_of_a_shift(shifts[result.columns], result.bandwidths)
    assert spearmanr(np.arange(16), -truth).statistic >= 0.9
    assert "< 1/100 (0.01)" in "\n".join(result.table_lines()) and "standardised" not in repr(result)
    assert result.to_dict()["at_floor"][0] is True


def test_marginal_tests_run_the_joint_test_in_the_same_pass_and_on_components():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(400, 5)), rng.normal(size=(400, 5))
    B[:, 0] += 1.0
    rff = srf.RFF(n_features=128, bandwidth="median")
    result = srf.marginal_tests(A, B, n_permutations=99, feature_map=rff)
    joint = srf.two_sample_test(A, B, n_features=128, n_permutations=99)
    assert result.joint.statistic == pytest.approx(joint.statistic, rel=1e-6)
    assert result.joint.p_value == joint.p_value  # the same keyed permutations
    components = srf.marginal_tests(A, B, n_permutations=99, components=2)
    assert components.kind == "components" and sorted(components.columns.tolist()) == [0, 1]
    assert "component" in repr(components)


def test_marginal_tests_refuse_bad_arguments():
    X = np.zeros((10, 2))
    with pytest.raises(InputError, match="same number of columns"):
        srf.marginal_tests(X, np.zeros((10, 3)))
    with pytest.raises(InputError, match="n_features must be even"):
        srf.marginal_tests(X, X, n_features=33)
    with pytest.raises(InputError, match="components"):
        srf.marginal_tests(X, X, components=0)


@pytest.mark.slow
def test_marginal_holm_family_rejects_rarely_under_no_change(single_threaded_blas):
    rejections = 0
    for seed in range(30):
        rng = np.random.default_rng(100 + seed)
        A, B = rng.normal(size=(300, 4)), rng.normal(size=(300, 4))
        result = srf.marginal_tests(A, B, n_features=16, n_permutations=199, seed=seed)
        rejections += result.rejected(0.05).size > 0
    assert rejections <= 5  # level 0.05: expected 1.5 of 30


def test_marginal_tests_on_a_real_cluster_equal_the_local_run(dask_client, tmp_zarr):
    rng = np.random.default_rng(8)
    A, B = rng.normal(size=(600, 3)), rng.normal(size=(500, 3))
    B[:, 2] += 0.6
    a_path, b_path = tmp_zarr(A, 150, "a.zarr"), tmp_zarr(B, 170, "b.zarr")
    local = srf.marginal_tests(A, B, n_permutations=99, components=2)
    remote = srf.marginal_tests(a_path, b_path, n_permutations=99, components=2, client=dask_client)
    np.testing.assert_array_equal(remote.columns, local.columns)
    np.testing.assert_allclose(remote.statistics, local.statistics, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(remote.p_values, local.p_values)
