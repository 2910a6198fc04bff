"""Relative-error embeddings: RelativeErrorRFF (Phillips & Tai 2018), RFF between points (Chen & Phillips 2016).

References are independent of the code under test: numpy closed forms of the kernel, the
paper's gamma, and scipy quadrature of the truncated Fourier integral.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.spatial.distance import cdist
from sklearn.utils.estimator_checks import parametrize_with_checks
from threadpoolctl import threadpool_limits

import streamrff as srf


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # Dense linear algebra dominates; OpenBLAS's spinning threads run ~7x slower on an
    # oversubscribed CI runner (measured for eigh on 2 busy cores).
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def gaussian(squared_distance, sigma):
    return np.exp(-np.asarray(squared_distance) / (2.0 * sigma**2))


def paper_gamma(d, alpha, eps):
    # Phillips & Tai 2018, sec. 2.
    return np.sqrt(4.0 * np.log(16.0 * d / (np.sqrt(np.pi) * eps * alpha)))


X2 = np.random.default_rng(0).normal(size=(40, 2))


# -- scikit-learn contract -----------------------------------------------------------


@parametrize_with_checks(
    [srf.RelativeErrorRFF(n_features=64, bandwidth=1.0), srf.RelativeErrorRFF(n_features=64, bandwidth="median")]
)
def test_relative_rff_passes_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", srf.VarianceWarning)  # some checks use d >= 4
        check(estimator)


def test_relative_rff_declares_float32_output_and_float32_agrees_with_float64():
    rel = srf.RelativeErrorRFF(n_features=512, bandwidth=0.7, seed=3).fit(X2)
    assert rel.__sklearn_tags__().transformer_tags.preserves_dtype == ["float32"]
    z64 = rel.transform(X2)
    z32 = rel.transform(X2.astype(np.float32))
    assert z64.dtype == z32.dtype == np.float32
    np.testing.assert_allclose(z32, z64, atol=1e-5)


def test_relative_rff_attributes_follow_the_paper():
    rel = srf.RelativeErrorRFF(n_features=256, bandwidth=1.0, alpha=1e-3, eps=0.1).fit(X2)
    assert rel.gamma_ == pytest.approx(paper_gamma(2, 1e-3, 0.1), rel=1e-12)
    assert rel.variance_factor_ == pytest.approx((rel.gamma_ / np.sqrt(2 * np.pi)) ** 2, rel=1e-12)
    assert rel.n_features_out_ == 256
    # z(x).z(x) = (1/m) sum w_j^2 with E[w^2] = (4 pi)^-1 int_box exp(-|v|^2/4) dv (2 gamma)^2 / (2 gamma)^2 ~ 1.
    norms = (rel.transform(X2[:1]).astype(np.float64) ** 2).sum()
    assert 0.5 < norms < 1.5


# -- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, match",
    [
        ({"alpha": 0.0}, "alpha must be in \\(0, 1\\)"),
        ({"alpha": 1.0}, "alpha must be in \\(0, 1\\)"),
        ({"alpha": -1e-3}, "alpha must be in"),
        ({"alpha": "small"}, "alpha must be a number"),
        ({"alpha": True}, "alpha must be a number"),
        ({"eps": 0.0}, "eps must be in \\(0, 0.5\\]"),
        ({"eps": 0.6}, "eps must be in \\(0, 0.5\\]"),
        ({"eps": float("nan")}, "eps must be in"),
        ({"n_features": 1023}, "n_features must be even.*use 1024"),
        ({"n_features": 0}, "n_features must be an integer >= 1"),
        ({"bandwidth": -1.0}, "bandwidth must be a positive finite number"),
    ],
)
def test_relative_rff_rejects_bad_parameters(params, match):
    with pytest.raises(srf.InputError, match=match):
        srf.RelativeErrorRFF(**params).fit(X2)


def test_relative_rff_accepts_eps_one_half():
    assert srf.RelativeErrorRFF(n_features=8, bandwidth=1.0, eps=0.5).fit(X2).is_fitted()


def test_relative_rff_warns_when_variance_explodes_but_not_in_low_dimensions():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        srf.RelativeErrorRFF(n_features=8, bandwidth=1.0).fit(np.zeros((3, 3)))  # factor ~22: no warning
    with pytest.warns(srf.VarianceWarning, match="4-dimensional input.*66.4 times"):
        fitted = srf.RelativeErrorRFF(n_features=8, bandwidth=1.0).fit(np.zeros((3, 4)))
    assert issubclass(srf.VarianceWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        srf.map_from_spec(fitted.spec)  # rebuilding a fitted map (loading a sketch) does not warn again


# -- works wherever an RFF does --------------------------------------------------------


def test_relative_rff_spec_round_trip_is_bit_for_bit():
    rel = srf.RelativeErrorRFF(n_features=128, bandwidth="median", alpha=0.01, eps=0.2, seed=7).fit(X2)
    twin = srf.map_from_spec(rel.spec)
    assert twin.spec == rel.spec and twin.fingerprint == rel.fingerprint
    assert twin.transform(X2).tobytes() == rel.transform(X2).tobytes()
    assert srf.RelativeErrorRFF(n_features=128, bandwidth=1.0, seed=8).fit(X2).fingerprint != rel.fingerprint
    restored = pickle.loads(pickle.dumps(rel))
    assert restored.transform(X2).tobytes() == rel.transform(X2).tobytes()


def test_relative_rff_median_bandwidth_is_the_median_distance():
    rel = srf.RelativeErrorRFF(bandwidth="median").fit(X2)
    assert rel.bandwidth_ == pytest.approx(np.median(cdist(X2, X2)[np.triu_indices(len(X2), 1)]))


def test_relative_rff_sketch_saves_and_loads(tmp_path):
    rel = srf.RelativeErrorRFF(n_features=64, bandwidth=0.5, seed=2).fit(X2)
    sketch = srf.sketch_array(X2, rel, moments=True)
    sketch.save(tmp_path / "s.zarr")
    loaded = srf.load(tmp_path / "s.zarr")
    assert loaded == sketch
    assert loaded.feature_map.transform(X2).tobytes() == rel.transform(X2).tobytes()


def test_relative_rff_engine_sketch_equals_in_memory_sketch():
    rows = np.random.default_rng(1).normal(size=(3000, 2)).astype(np.float32)
    distributed = srf.sketch(rows, srf.RelativeErrorRFF(n_features=128, bandwidth="median"), chunk_rows=700)
    in_memory = srf.sketch_array(rows, distributed.feature_map)
    assert distributed.feature_map.bandwidth_ == srf.RelativeErrorRFF(bandwidth="median").fit(rows).bandwidth_
    # Other chunks, other float32 tile sums: equal to float32 rounding of the features (norm-wise).
    difference = np.linalg.norm(distributed.feature_sum - in_memory.feature_sum)
    assert difference <= 1e-6 * np.linalg.norm(in_memory.feature_sum)


def test_relative_rff_mmd2_estimates_the_exact_mmd2():
    rng = np.random.default_rng(4)
    sample_x, sample_y = rng.normal(size=(300, 2)), rng.normal(0.5, 1.0, size=(300, 2))
    sigma = 1.0
    exact = (
        gaussian(cdist(sample_x, sample_x, "sqeuclidean"), sigma).mean()
        + gaussian(cdist(sample_y, sample_y, "sqeuclidean"), sigma).mean()
        - 2 * gaussian(cdist(sample_x, sample_y, "sqeuclidean"), sigma).mean()
    )
    # One map's relative error here is ~7% (1 sd, measured; sincos RFF: ~1%, the variance price
    # of the uniform frequency box): the mean over 8 maps is within 10% (> 4 sd).
    estimates = []
    for seed in range(8):
        rel = srf.RelativeErrorRFF(n_features=8192, bandwidth=sigma, seed=seed).fit(sample_x)
        estimates.append(srf.mmd2(srf.sketch_array(sample_x, rel), srf.sketch_array(sample_y, rel), unbiased=False))
    assert np.mean(estimates) == pytest.approx(exact, rel=0.1)


def test_relative_rff_composes_with_jl_and_feeds_kernel_pca():
    jl = srf.JL(srf.RelativeErrorRFF(n_features=1024, bandwidth=1.0), n_components=128).fit(X2)
    assert jl.transform(X2).shape == (len(X2), 128)
    assert srf.map_from_spec(jl.spec).fingerprint == jl.fingerprint
    rows = np.random.default_rng(5).normal(size=(400, 2))
    kpca = srf.KernelPCA(n_components=3, feature_map=srf.RelativeErrorRFF(n_features=2048, bandwidth=1.0)).fit(rows)
    centred = gaussian(cdist(rows, rows, "sqeuclidean"), 1.0)
    centred = centred - centred.mean(0) - centred.mean(1)[:, None] + centred.mean()
    top = np.linalg.eigvalsh(centred)[::-1][:3]
    # Measured over 4 seeds at D = 2048: relative errors of the top eigenvalues <= 12%.
    np.testing.assert_allclose(kpca.eigenvalues_, top, rtol=0.2)
    assert kpca.transform(rows).shape == (400, 3)


# -- statistics: expectation and truncation (Phillips & Tai Lemma 2, 13) ------------------


def _average_products(estimator_params, x, ys, n_seeds):
    products = np.empty((n_seeds, len(ys)))
    for seed in range(n_seeds):
        rel = srf.RelativeErrorRFF(**estimator_params, seed=seed).fit(x)
        zx = rel.transform(x).astype(np.float64)
        products[seed] = (rel.transform(ys).astype(np.float64) @ zx.T)[:, 0]
    return products.mean(axis=0), products.std(axis=0, ddof=1) / np.sqrt(n_seeds)


def test_relative_rff_inner_products_are_unbiased_up_to_truncation():
    # E[z(x).z(y)] = k(x, y) + E_xy with |E_xy| <= eps alpha / 4 (Lemma 2, Lemma 13). Averaged
    # over 300 independent maps, the mean is within the truncation bound plus 4 standard errors.
    sigma, alpha, eps = 0.8, 1e-3, 0.1
    rng = np.random.default_rng(11)
    directions = rng.normal(size=(5, 2))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    radii = sigma * np.array([0.0, 0.4, 0.8, 1.6, 2.4])
    x = np.array([[0.3, -0.2]])
    ys = x + radii[:, None] * directions
    mean, standard_error = _average_products(
        {"n_features": 512, "bandwidth": sigma, "alpha": alpha, "eps": eps}, x, ys, n_seeds=300
    )
    expected = gaussian(radii**2, sigma)
    assert np.all(np.abs(mean - expected) <= eps * alpha / 4 + 4 * standard_error), (mean, expected, standard_error)
    assert standard_error.max() < 0.02  # the test has power: a 2x bandwidth error would move k(x, y) by > 0.1


def test_relative_rff_truncation_bias_matches_the_truncated_fourier_integral():
    # With a large alpha and eps the box [-gamma, gamma] is small (gamma ~ 3.46 for d = 1) and the
    # bias E_xy is visible: the average equals (4 pi)^-1/2 int_-gamma^gamma exp(-v^2/4) cos(v t) dv
    # with t = |x - y| / (sigma sqrt 2), and differs from the untruncated kernel.
    sigma, alpha, eps = 1.0, 0.9, 0.5
    gamma = paper_gamma(1, alpha, eps)
    radii = np.array([0.0, 0.5, 1.5])
    x = np.zeros((1, 1))
    ys = radii[:, None]
    mean, standard_error = _average_products(
        {"n_features": 2048, "bandwidth": sigma, "alpha": alpha, "eps": eps}, x, ys, n_seeds=300
    )
    truncated = np.array(
        [
            quad(lambda v, t: np.exp(-v * v / 4) * np.cos(v * t), -gamma, gamma, args=(r / (sigma * np.sqrt(2)),))[0]
            / np.sqrt(4 * np.pi)
            for r in radii
        ]
    )
    np.testing.assert_array_less(np.abs(mean - truncated), 4 * standard_error)
    untruncated = gaussian(radii**2, sigma)
    assert abs(truncated[0] - untruncated[0]) <= eps * alpha / 4  # Lemma 13's bound holds
    assert abs(mean[0] - untruncated[0]) > 4 * standard_error[0]  # and the bias is real


# -- Chen & Phillips 2016, Fig. 2: RFF's pairwise relative error --------------------------


def _pairs(rng, n_pairs, d, sigma):
    # x uniform in a ball of radius sigma (kept small so that float32 phases keep ~1e-7
    # precision), y on the sphere of radius r around x, r log-spaced from 1e-4 to 1e4 sigma.
    x = rng.normal(size=(n_pairs, d))
    x *= (sigma * rng.uniform(size=n_pairs) ** (1 / d) / np.linalg.norm(x, axis=1))[:, None]
    u = rng.normal(size=(n_pairs, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    radii = sigma * np.logspace(-4, 4, n_pairs)
    return x, x + radii[:, None] * u, radii


def test_rff_relative_error_of_kernel_distance_between_points_scales_as_one_over_sqrt_t():
    # Seed 000 sec. 7.1 (Fig. 2): for t feature pairs (D = 2t, sincos), the ratio
    # ||z(x) - z(y)|| / D_K(x, y), D_K = sqrt(2 - 2 k(x, y)), stays in 1 +- eps_max over
    # distances from 1e-4 to 1e4 bandwidths, and eps_max^-2 grows linearly with t.
    sigma, d, n_pairs = 1.0, 3, 2000
    ts = np.array([64, 128, 256, 512, 1024, 2048])
    eps_max = []
    for t in ts:
        per_map = []
        for seed in range(4):
            x, y, radii = _pairs(np.random.default_rng([int(t), seed]), n_pairs, d, sigma)
            rff = srf.RFF(n_features=2 * int(t), bandwidth=sigma, seed=seed).fit(x)
            difference = rff.transform(x).astype(np.float64) - rff.transform(y).astype(np.float64)
            kernel_distance = np.sqrt(-2.0 * np.expm1(-(radii**2) / (2 * sigma**2)))  # no cancellation at 1e-4
            ratio = np.linalg.norm(difference, axis=1) / kernel_distance
            per_map.append(np.abs(ratio - 1).max())
            if t >= 256:
                assert np.all(np.abs(ratio - 1) < 0.15), (t, seed)  # relative error at every scale
        eps_max.append(np.mean(per_map))
    inverse_square = np.array(eps_max) ** -2.0
    slope, intercept = np.polyfit(ts, inverse_square, 1)
    predicted = slope * ts + intercept
    r_squared = 1 - ((inverse_square - predicted) ** 2).sum() / ((inverse_square - inverse_square.mean()) ** 2).sum()
    loglog_slope = np.polyfit(np.log(ts), np.log(inverse_square), 1)[0]
    print(f"\nFig. 2: t={ts.tolist()} eps_max={np.round(eps_max, 4).tolist()} slope={slope:.3f} R^2={r_squared:.4f}")
    assert slope > 0
    assert r_squared > 0.95
    assert 0.85 < loglog_slope < 1.15


def test_relative_rff_drives_kernel_kmeans_lloyd_steps(tmp_path):
    # KernelKMeans has no feature_map= override, so exercise its per-chunk kernel: Lloyd steps
    # from two centres in the same blob must split two unit blobs 6 apart (the two rows that
    # sit past the midpoint go with the other blob, as they do with sincos RFF).
    from streamrff.kmeans import cluster_sketch_of_chunk

    rng = np.random.default_rng(6)
    blobs = np.r_[rng.normal(size=(200, 2)), rng.normal(size=(200, 2)) + [6.0, 0.0]]
    truth = np.repeat([0, 1], 200)
    rel = srf.RelativeErrorRFF(n_features=512, bandwidth=2.0, seed=0).fit(blobs)
    centers = rel.transform(blobs[[0, 1]]).astype(np.float64)
    for _ in range(10):
        step = srf.merge(*(cluster_sketch_of_chunk(part, rel, centers) for part in np.array_split(blobs, 3)))
        centers = step.sums / np.maximum(step.counts, 1)[:, None]
    features = rel.transform(blobs).astype(np.float64)
    labels = np.argmin(cdist(features, centers, "sqeuclidean"), axis=1)
    assert max(np.mean(labels == truth), np.mean(labels != truth)) >= 0.99
    step.save(tmp_path / "clusters.zarr")
    assert srf.load(tmp_path / "clusters.zarr") == step
