"""The type-3 NUFFT fast path of mean sketches against the direct path and a float64 numpy reference.

The direct path (``mean_sketch_of_chunk``) rounds rows, frequencies and phases to float32, so its
error grows with the largest phase ``|w.x|``; the promise is agreement to a relative 1e-5
(norm-wise over the features). Small bandwidths on wide rows reach phases ``|w.x|`` of a few
hundred, where that float32 error is largest (about 2e-6 here). The float64 reference is plain numpy: cosines and
sines of ``X W^T`` with the map's own float64 parameters.
"""

from __future__ import annotations

import doctest
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError, NotFittedMapError
from streamrff.maps import nufft
from streamrff.maps.nufft import nufft_applies, nufft_available, nufft_cost, nufft_mean_sums, nufft_supports
from streamrff.sketches.mean import mean_sketch_of_chunk

needs_finufft = pytest.mark.skipif(not nufft_available(), reason="needs finufft (pip install 'streamrff[nufft]')")

#: Bandwidths per input dimension, down to ones whose phases |w.x| reach several hundred on the rows
#: below (3D grids grow like (extent / bandwidth)^3: its smallest bandwidth is larger).
BANDWIDTHS = {1: (2.0, 0.5, 0.1), 2: (2.0, 0.5, 0.1), 3: (2.0, 0.5, 0.25)}
#: Spread of the test rows per input dimension (standard deviation).
SCALES = {1: 3.0, 2: 3.0, 3: 1.0}


def relative_error(actual, expected) -> float:
    return float(np.linalg.norm(np.subtract(actual, expected)) / np.linalg.norm(expected))


def rows_for(d: int, n: int = 3000, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(n, d)) * SCALES[d]).astype(np.float32)


def float64_sums(X: np.ndarray, feature_map) -> tuple[np.ndarray, float]:
    """Exact float64 feature and squared-norm sums from the map's float64 parameters."""
    params = feature_map._params()
    phases = np.asarray(X, np.float64) @ params["frequencies"].T
    if isinstance(feature_map, srf.RelativeErrorRFF):
        weights = params["weights"]
        features = np.hstack([np.cos(phases) * weights, np.sin(phases) * weights])
    elif feature_map.variant == "sincos":
        features = np.hstack([np.cos(phases), np.sin(phases)]) / np.sqrt(phases.shape[1])
    else:
        features = np.sqrt(2.0 / phases.shape[1]) * np.cos(phases + params["phases"])
    return features.sum(axis=0), float((features * features).sum())


@pytest.fixture
def without_finufft(monkeypatch):
    """Make ``import finufft`` fail, as on an install without the nufft extra."""
    monkeypatch.setitem(sys.modules, "finufft", None)
    nufft_available.cache_clear()
    yield
    monkeypatch.undo()
    nufft_available.cache_clear()


# -- equality with the direct path and with float64 numpy ------------------------------------------


@needs_finufft
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
@pytest.mark.parametrize("orthogonal", [False, True])
@pytest.mark.parametrize("bandwidth_index", [0, 1, 2])
def test_nufft_mean_sums_equal_direct_path(d, variant, orthogonal, bandwidth_index):
    X = rows_for(d)
    rff = srf.RFF(256, BANDWIDTHS[d][bandwidth_index], variant=variant, orthogonal=orthogonal, seed=7).fit(X)
    feature_sum, squared_norm_sum = nufft_mean_sums(X, rff)
    direct = mean_sketch_of_chunk(X, rff)
    assert feature_sum.shape == (256,) and feature_sum.dtype == np.float64
    assert isinstance(squared_norm_sum, float)
    assert relative_error(feature_sum, direct.feature_sum) <= 1e-5
    assert squared_norm_sum == pytest.approx(direct.squared_norm_sum, rel=1e-5)


@needs_finufft
def test_nufft_small_bandwidth_cases_reach_large_phases():
    # Guards the test above: its smallest bandwidths must exercise large |w.x|.
    for d in (1, 2, 3):
        X = rows_for(d)
        rff = srf.RFF(256, BANDWIDTHS[d][-1], variant="cosphase", seed=7).fit(X)
        assert np.abs(X.astype(np.float64) @ rff._params()["frequencies"].T).max() > 50


@needs_finufft
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize(
    "make_map",
    [
        lambda: srf.RFF(128, 0.4, seed=1),
        lambda: srf.RFF(128, 0.4, variant="cosphase", seed=1),
        lambda: srf.RFF(128, 0.4, variant="cosphase", orthogonal=True, seed=1),
        lambda: srf.RelativeErrorRFF(128, 0.6, seed=1),
    ],
    ids=["sincos", "cosphase", "cosphase-orthogonal", "relative"],
)
def test_nufft_mean_sums_equal_float64_reference(d, make_map):
    X = rows_for(d, seed=3).astype(np.float64)
    feature_map = make_map().fit(X)
    feature_sum, squared_norm_sum = nufft_mean_sums(X, feature_map)
    expected_sum, expected_norms = float64_sums(X, feature_map)
    # FINUFFT at tolerance 1e-7: its norm-wise error is ~1e-7, far below the direct path's.
    assert relative_error(feature_sum, expected_sum) <= 1e-6
    assert squared_norm_sum == pytest.approx(expected_norms, rel=1e-9)


@needs_finufft
@pytest.mark.parametrize("d", [1, 2, 3])
def test_nufft_relative_error_rff_equals_direct_path(d):
    X = rows_for(d)
    feature_map = srf.RelativeErrorRFF(256, 0.5, seed=2).fit(X)
    feature_sum, squared_norm_sum = nufft_mean_sums(X, feature_map)
    direct = mean_sketch_of_chunk(X, feature_map)
    assert relative_error(feature_sum, direct.feature_sum) <= 1e-5
    assert squared_norm_sum == pytest.approx(direct.squared_norm_sum, rel=1e-5)


@needs_finufft
def test_nufft_float32_and_float64_rows_agree_and_chunks_add_up():
    X = rows_for(2, n=4000).astype(np.float64)
    rff = srf.RFF(128, 0.5, variant="cosphase", seed=0).fit(X)
    whole, whole_norms = nufft_mean_sums(X, rff)
    single, single_norms = nufft_mean_sums(X.astype(np.float32), rff)
    assert relative_error(single, whole) <= 1e-5
    assert single_norms == pytest.approx(whole_norms, rel=1e-6)
    parts = [nufft_mean_sums(part, rff) for part in np.array_split(X, 3)]
    assert relative_error(sum(part[0] for part in parts), whole) <= 1e-6
    assert sum(part[1] for part in parts) == pytest.approx(whole_norms, rel=1e-9)


@needs_finufft
def test_nufft_mean_sums_in_row_slices_equal_one_call(monkeypatch):
    X = rows_for(2, n=2500)
    rff = srf.RFF(128, 0.5, variant="cosphase", seed=0).fit(X)
    whole, whole_norms = nufft_mean_sums(X, rff)
    monkeypatch.setattr(nufft, "ROWS_PER_CALL", 700)  # 4 slices, the last one short
    sliced, sliced_norms = nufft_mean_sums(X, rff)
    assert relative_error(sliced, whole) <= 1e-7
    assert sliced_norms == pytest.approx(whole_norms, rel=1e-9)


@needs_finufft
def test_nufft_sincos_squared_norm_sum_is_row_count():
    X = rows_for(1, n=500)
    rff = srf.RFF(64, 1.0).fit(X)
    assert nufft_mean_sums(X, rff)[1] == 500.0


@needs_finufft
def test_nufft_mean_sums_of_no_rows_are_zero():
    rff = srf.RFF(64, 1.0).fit(np.zeros((1, 2)))
    feature_sum, squared_norm_sum = nufft_mean_sums(np.empty((0, 2)), rff)
    assert feature_sum.shape == (64,) and not feature_sum.any() and squared_norm_sum == 0.0


@needs_finufft
def test_nufft_mean_sums_from_threads_and_with_several_finufft_threads_agree():
    X = rows_for(2, n=20_000)
    rff = srf.RFF(256, 0.5, seed=4).fit(X)
    chunks = np.array_split(X, 8)
    sequential = [nufft_mean_sums(chunk, rff)[0] for chunk in chunks]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda chunk: nufft_mean_sums(chunk, rff)[0], chunks))
    for expected, actual in zip(sequential, concurrent):
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(nufft_mean_sums(X, rff, nthreads=2)[0], nufft_mean_sums(X, rff)[0], rtol=1e-9, atol=1e-6)


# -- which maps and chunks take the fast path ------------------------------------------------------


def test_nufft_supports_low_dimensional_fourier_maps_only():
    for d in (1, 2, 3):
        X = np.zeros((2, d))
        assert nufft_supports(srf.RFF(64, bandwidth=1.0).fit(X))
        assert nufft_supports(srf.RFF(64, bandwidth=1.0, variant="cosphase", orthogonal=True).fit(X))
        assert nufft_supports(srf.RelativeErrorRFF(64, bandwidth=1.0).fit(X))
    X4 = np.random.default_rng(0).normal(size=(50, 4))
    assert not nufft_supports(srf.RFF(64, bandwidth=1.0).fit(X4))
    X2 = X4[:, :2]
    assert not nufft_supports(srf.RFF(64, bandwidth=1.0))  # not fitted
    assert not nufft_supports(srf.JL(srf.RFF(64, bandwidth=1.0), n_components=8).fit(X2))
    assert not nufft_supports(srf.KJL(n_landmarks=10, n_components=4).fit(X2))


@needs_finufft
def test_nufft_applies_to_large_low_dimensional_chunks():
    X = rows_for(2, n=100_000)
    rff = srf.RFF(2048, 1.0).fit(X)
    assert nufft_applies(rff, X)
    assert nufft_applies(srf.RFF(2048, 1.0, variant="cosphase").fit(X), X)
    assert nufft_applies(srf.RelativeErrorRFF(2048, 1.0).fit(X), X)
    cost = nufft_cost(rff, X)
    assert cost.speedup >= nufft.SPEEDUP_MARGIN and cost.upsampfac in (1.25, 2.0)
    assert cost.grid_bytes <= nufft.MAX_GRID_BYTES


@needs_finufft
def test_nufft_applies_is_false_where_the_direct_path_must_or_should_run():
    X = rows_for(2, n=100_000)
    rff = srf.RFF(2048, 1.0).fit(X)
    assert not nufft_applies(rff, X, moments=True)  # the NUFFT has no second moment
    assert not nufft_applies(rff, X[:20])  # too few rows to pay for the call
    assert not nufft_applies(rff, X[:0])
    assert not nufft_applies(srf.RFF(8, 1.0).fit(X), X[:2000])  # too few features
    assert not nufft_applies(srf.JL(srf.RFF(2048, 1.0), n_components=64).fit(X), X)
    assert not nufft_applies(srf.RFF(2048, 1.0), X)  # not fitted
    X4 = np.random.default_rng(0).normal(size=(100_000, 4))
    assert not nufft_applies(srf.RFF(2048, 1.0).fit(X4), X4)
    assert not nufft_applies(rff, X4)  # wrong width
    assert not nufft_applies(rff, X[:, 0])  # not 2-D
    assert not nufft_applies(rff, X.tolist())
    bad = X.copy()
    bad[5, 1] = np.nan
    assert not nufft_applies(rff, bad)
    # A tiny bandwidth on wide rows needs an FFT grid beyond MAX_GRID_BYTES.
    assert not nufft_applies(srf.RFF(2048, 1e-3).fit(X), X)


def test_nufft_applies_is_false_without_finufft(without_finufft):
    X = rows_for(2, n=100_000)
    assert not nufft_available()
    assert not nufft_applies(srf.RFF(2048, 1.0).fit(X), X)


@needs_finufft
def test_nufft_cost_grid_grows_with_extent_over_bandwidth():
    X = rows_for(2, n=10_000)
    costs = [nufft_cost(srf.RFF(512, bandwidth).fit(X), X) for bandwidth in (2.0, 0.2, 0.02)]
    assert costs[0].grid_bytes < costs[1].grid_bytes < costs[2].grid_bytes
    assert costs[0].nufft_seconds < costs[2].nufft_seconds
    assert costs[0].direct_seconds == costs[2].direct_seconds
    assert nufft_cost(srf.RFF(512, 0.2).fit(X), X * 10).grid_bytes > costs[1].grid_bytes


# -- bad input -------------------------------------------------------------------------------------


@needs_finufft
def test_nufft_mean_sums_rejects_unsupported_maps():
    X = rows_for(2, n=100)
    with pytest.raises(InputError, match="JL"):
        nufft_mean_sums(X, srf.JL(srf.RFF(64, bandwidth=1.0), n_components=8).fit(X))
    with pytest.raises(InputError, match="4 input dimensions"):
        X4 = np.random.default_rng(0).normal(size=(10, 4))
        nufft_mean_sums(X4, srf.RFF(64, bandwidth=1.0).fit(X4))
    with pytest.raises(NotFittedMapError):
        nufft_mean_sums(X, srf.RFF(64, bandwidth=1.0))
    with pytest.raises(InputError, match="FeatureMap"):
        nufft_mean_sums(X, "rff")


@needs_finufft
def test_nufft_mean_sums_rejects_bad_rows_and_threads():
    X = rows_for(2, n=100)
    rff = srf.RFF(64, 1.0).fit(X)
    with pytest.raises(InputError, match="2 columns"):
        nufft_mean_sums(np.zeros((5, 3)), rff)
    with pytest.raises(InputError, match="2-D float32 or float64"):
        nufft_mean_sums(X[:, 0], rff)
    with pytest.raises(InputError, match="2-D float32 or float64"):
        nufft_mean_sums(X.tolist(), rff)
    with pytest.raises(InputError, match="2-D float32 or float64"):
        nufft_mean_sums(np.ones((5, 2), dtype=np.int64), rff)
    bad = X.copy()
    bad[3, 0] = np.inf
    with pytest.raises(InputError, match="finite"):
        nufft_mean_sums(bad, rff)
    for nthreads in (0, -1, 1.5, True, "2"):
        with pytest.raises(InputError, match="nthreads"):
            nufft_mean_sums(X, rff, nthreads=nthreads)


@needs_finufft
def test_nufft_mean_sums_refuses_grids_beyond_the_memory_cap():
    X = rows_for(2, n=1000)
    rff = srf.RFF(256, 1e-3).fit(X)
    with pytest.raises(InputError, match="MAX_GRID_BYTES.*mean_sketch_of_chunk"):
        nufft_mean_sums(X, rff)


def test_nufft_mean_sums_without_finufft_names_the_extra(without_finufft):
    X = rows_for(2, n=10)
    with pytest.raises(ImportError, match=r"streamrff\[nufft\]"):
        nufft_mean_sums(X, srf.RFF(64, bandwidth=1.0).fit(X))


@needs_finufft
def test_nufft_module_examples_run():
    result = doctest.testmod(nufft, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# -- wired into the engine and the CLI ------------------------------------------------------------


@needs_finufft
def test_sketch_takes_the_nufft_path_when_it_applies_and_agrees_with_the_reference():
    X = rows_for(2, n=40_000)
    rff = srf.RFF(n_features=1024, bandwidth=1.0, seed=5).fit(X[:10])
    assert nufft_applies(rff, X[:10_000])
    expected_sum, expected_norms = float64_sums(X, rff)
    auto = srf.sketch(X, rff, chunk_rows=10_000)
    direct = srf.sketch(X, rff, chunk_rows=10_000, method="direct")
    forced = srf.sketch_array(X, rff, method="nufft")
    for result in (auto, direct, forced):
        assert result.count == X.shape[0] and not result.has_moments
        assert relative_error(result.feature_sum, expected_sum) < 1e-5
        assert result.squared_norm_sum == pytest.approx(expected_norms, rel=1e-6)
    # The auto path is the NUFFT's (accurate to ~1e-7), not the float32 direct path's sums.
    chunks = [nufft_mean_sums(X[i : i + 10_000], rff)[0] for i in range(0, X.shape[0], 10_000)]
    np.testing.assert_allclose(auto.feature_sum, np.sum(chunks, axis=0), rtol=0, atol=1e-9 * np.abs(expected_sum).max())
    assert relative_error(direct.feature_sum, auto.feature_sum) > 1e-9


@needs_finufft
def test_sketch_method_nufft_is_refused_where_it_cannot_serve():
    X = rows_for(2, n=1000)
    rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
    with pytest.raises(InputError, match="method='nufft' computes float32-accurate sums without a second moment"):
        srf.sketch(X, rff, moments=True, method="nufft")
    with pytest.raises(InputError, match="dtype='float64'"):
        srf.sketch_array(X, rff, dtype="float64", method="nufft")
    wide = np.random.default_rng(0).normal(size=(100, 5))
    with pytest.raises(InputError, match="at most 3 input columns. Got kind=rff"):
        srf.sketch(wide, srf.RFF(n_features=64, bandwidth=1.0), method="nufft")
    with pytest.raises(InputError, match=r"method must be one of \('auto', 'direct', 'nufft'\). Got 'fast'"):
        srf.sketch(X, rff, method="fast")


def test_sketch_method_nufft_without_finufft_names_the_extra(without_finufft):
    X = rows_for(2, n=1000)
    with pytest.raises(InputError, match=r"pip install 'streamrff\[nufft\]'"):
        srf.sketch_array(X, srf.RFF(n_features=64, bandwidth=1.0), method="nufft")
    # auto falls back to the direct path.
    rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
    assert relative_error(srf.sketch_array(X, rff).feature_sum, float64_sums(X, rff)[0]) < 1e-5


@needs_finufft
def test_cli_sketch_method_nufft(tmp_path, tmp_zarr, capsys):
    from streamrff.cli import main

    X = rows_for(2, n=20_000)
    output = tmp_path / "points.sketch"
    code = main(["sketch", tmp_zarr(X, chunk_rows=5_000), "-o", str(output), "--features", "512",
                 "--bandwidth", "0.5", "--sum-method", "nufft"])
    assert code == 0, capsys.readouterr().err
    loaded = srf.load(output)
    assert relative_error(loaded.feature_sum, float64_sums(X, loaded.feature_map)[0]) < 1e-5
