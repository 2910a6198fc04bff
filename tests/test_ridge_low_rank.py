"""The low-rank regression sketch (``NystromRegressionSketch``) and kernel ridge with ``rank``, against numpy.

References: the sums against numpy on explicit features (the test matrix rebuilt from its documented
recipe); with the range capturing everything (sketch_size = D) the solve against numpy's dense
normal equations, and the rank-k solve and GCV scores against numpy's truncated ``eigh`` of the exact
centred moment (principal-component ridge: the same math); for rank < sketch_size < D, predictions
against the dense fit on data whose spectrum decays (Friedman #1, digits).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_friedman1

import streamrff as srf
from streamrff.cli import main
from streamrff.errors import InputError, SketchMismatchError

RNG = np.random.default_rng(4)
X = RNG.normal(size=(600, 3))
Y = np.column_stack([np.sin(X[:, 0]) + X[:, 1] ** 2, np.cos(X[:, 2])]) + 0.1 * RNG.normal(size=(600, 2))
MAP = srf.RFF(n_features=64, bandwidth=1.5, seed=1).fit(X)


def reference_test_matrix(seed: int, width: int, size: int) -> np.ndarray:
    """The documented recipe: N(0, 1/D) entries from PCG64 keyed by (seed, stream, D, l)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4E595354, width, size]))
    return rng.standard_normal((width, size)) / np.sqrt(width)


def centred(rows: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Explicit float64 features (of the float32 map output), centred, and centred targets; and the means."""
    Z = MAP.transform(rows).astype(np.float64)
    return Z - Z.mean(axis=0), targets - targets.mean(axis=0), Z.mean(axis=0), targets.mean(axis=0)


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


# -- the sketch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("targets", [Y[:, 0], Y], ids=["1-D", "2-D"])
def test_low_rank_regression_sketch_sums_equal_numpy(targets):
    sketch = srf.regression_sketch_array(X, targets, MAP, sketch_size=10, test_seed=7)
    assert isinstance(sketch, srf.NystromRegressionSketch) and sketch.kind == "nystrom-regression"
    Z = MAP.transform(X).astype(np.float64)
    omega = reference_test_matrix(7, 64, 10)
    T = targets.reshape(600, -1) - targets.reshape(600, -1)[0]  # the targets about their shift, the first row
    np.testing.assert_array_equal(sketch.target_shift, targets.reshape(600, -1)[0])
    # float64 products of the float32 features: only float64 summation order differs from numpy
    np.testing.assert_allclose(sketch.range_sketch, Z.T @ (Z @ omega), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sketch.cross_moment, Z.T @ T, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sketch.target_sum, T.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(sketch.target_moment, T.T @ T, rtol=1e-12)
    assert sketch.squared_norm_sum == pytest.approx((Z**2).sum(), rel=1e-12)
    assert (sketch.count, sketch.sketch_size) == (600, 10)
    assert (sketch.n_targets, sketch.target_ndim) == (T.shape[1], targets.ndim)


def test_low_rank_regression_sketch_merges_to_the_whole_and_refuses_mismatches():
    parts = [srf.regression_sketch_array(rows, Y[index], MAP, sketch_size=12, test_seed=1)
             for rows, index in zip(np.split(X, [123, 400]), np.split(np.arange(600), [123, 400]))]  # fmt: skip
    whole = srf.regression_sketch_array(X, Y, MAP, sketch_size=12, test_seed=1)
    for merged in (parts[0].merge(parts[1]).merge(parts[2]), parts[2].merge(parts[0].merge(parts[1]))):
        assert isinstance(merged, srf.NystromRegressionSketch) and merged.count == 600
        merged = merged.with_target_shift(whole.target_shift)  # the parts' shifts differ: exact algebra
        for name in ("range_sketch", "cross_moment", "feature_sum", "target_sum", "target_moment"):
            expected = getattr(whole, name)
            np.testing.assert_allclose(getattr(merged, name), expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    first = parts[0]
    others = {
        "sketch_size": srf.regression_sketch_array(X, Y, MAP, sketch_size=11, test_seed=1),
        "test_seed": srf.regression_sketch_array(X, Y, MAP, sketch_size=12, test_seed=2),
        "targets": srf.regression_sketch_array(X, Y[:, 0], MAP, sketch_size=12, test_seed=1),
        "map": srf.regression_sketch_array(X, Y, srf.RFF(n_features=64, bandwidth=1.5, seed=2).fit(X),
                                           sketch_size=12, test_seed=1),  # fmt: skip
        "kind": srf.regression_sketch_array(X, Y, MAP),
        "classes": srf.regression_sketch_array(
            X, srf.KernelRidgeClassifier.encode_targets(np.arange(600) % 2, [0, 1]), MAP, classes=[0, 1],
            sketch_size=12, test_seed=1,
        ),
    }  # fmt: skip
    for what, other in others.items():
        with pytest.raises(SketchMismatchError):
            first.merge(other)
        assert what  # every mismatch is refused, in both orders
        with pytest.raises(SketchMismatchError):
            other.merge(first)


def test_low_rank_regression_sketch_saves_and_loads_with_its_classes(tmp_path):
    targets = srf.KernelRidgeClassifier.encode_targets(np.arange(600) % 3, [0, 1, 2])
    sketch = srf.regression_sketch_array(X, targets, MAP, classes=[0, 1, 2], sketch_size=9, test_seed=5)
    sketch.save(tmp_path / "s.zarr")
    loaded = srf.load(tmp_path / "s.zarr")
    assert isinstance(loaded, srf.NystromRegressionSketch) and loaded == sketch
    assert loaded.classes == (0, 1, 2) and loaded.test_seed == 5
    np.testing.assert_array_equal(loaded.range_sketch, sketch.range_sketch)


def test_engine_nystrom_sketch_with_target_equals_in_memory_for_chunked_and_zarr_sources(tmp_zarr):
    whole = srf.regression_sketch_array(X, Y, MAP, sketch_size=16, test_seed=3)
    chunked = srf.nystrom_sketch(X, MAP, sketch_size=16, seed=3, target=Y, chunk_rows=170)
    rows_path, target_path = tmp_zarr(X, 250, "rows.zarr"), tmp_zarr(Y, 100, "targets.zarr")
    from_zarr = srf.nystrom_sketch(rows_path, MAP, sketch_size=16, seed=3, target=target_path)
    for result in (chunked, from_zarr):
        assert isinstance(result, srf.NystromRegressionSketch) and result.count == 600
        for name in ("range_sketch", "cross_moment", "target_moment"):
            expected = getattr(whole, name)
            np.testing.assert_allclose(getattr(result, name), expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    with pytest.raises(InputError, match="one row per row|rows"):
        srf.nystrom_sketch(X, MAP, sketch_size=16, target=Y[:500], chunk_rows=170)


# -- the solve ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1e-3, 0.1, 10.0])
def test_full_rank_low_rank_fit_equals_numpy_dense_normal_equations(alpha):
    sketch = srf.regression_sketch_array(X, Y, MAP, sketch_size=64, test_seed=2)  # the range holds everything
    model = srf.KernelRidge(alpha=alpha, rank=64).fit_from_sketch(sketch)
    Zc, Yc, mean, target_mean = centred(X, Y)
    coef = np.linalg.solve(Zc.T @ Zc + alpha * np.eye(64), Zc.T @ Yc)
    assert relative_error(model.coef_.T, coef) < 1e-8
    np.testing.assert_allclose(model.intercept_, target_mean - mean @ coef, rtol=1e-8)


def test_rank_k_fit_and_gcv_equal_numpy_truncated_eigendecomposition():
    # sketch_size = D: the Nystrom reconstruction is C itself, so its top k eigenpairs are those of
    # numpy's eigh of the exact centred moment, and the fit is ridge on the top-k principal directions.
    Zc, Yc, mean, target_mean = centred(X, Y)
    values, vectors = np.linalg.eigh(Zc.T @ Zc)
    values, vectors = values[::-1][:20], vectors[:, ::-1][:, :20]
    projected = vectors.T @ (Zc.T @ Yc)
    alphas = [1e-2, 1.0, 30.0]
    low_rank = srf.regression_sketch_array(X, Y, MAP, sketch_size=64, test_seed=2)
    full = srf.regression_sketch_array(X, Y, MAP)
    for sketch in (low_rank, full):
        model = srf.KernelRidge(alphas=alphas, rank=20).fit_from_sketch(sketch)
        table = srf.ridge_gcv(sketch, alphas, rank=20)
        scores = []
        for alpha in alphas:
            coef = vectors @ (projected / (values + alpha)[:, None])
            residual = Yc - Zc @ coef
            dof = 1.0 + np.sum(values / (values + alpha))
            scores.append(np.sum(600 * (residual**2).sum(axis=0) / (600 - dof) ** 2))
            # the full sketch's float32 tile products: 1e-5 (its top 20 eigenvalues are far above their rounding)
            tolerance = 1e-9 if sketch is low_rank else 1e-5
            if alpha == model.alpha_:
                assert relative_error(model.coef_.T, coef) < tolerance
                np.testing.assert_allclose(model.intercept_, target_mean - mean @ coef, rtol=tolerance)
        np.testing.assert_allclose(table["scores"], scores, rtol=tolerance)
        np.testing.assert_allclose(model.gcv_["scores"], scores, rtol=tolerance)
        assert model.alpha_ == alphas[int(np.argmin(scores))]


def test_low_rank_merged_halves_fit_equals_the_whole():
    halves = [srf.regression_sketch_array(X[part], Y[part], MAP, sketch_size=32, test_seed=0)
              for part in (slice(0, 250), slice(250, 600))]  # fmt: skip
    whole = srf.KernelRidge(rank=16).fit_from_sketch(srf.regression_sketch_array(X, Y, MAP, sketch_size=32))
    merged = srf.KernelRidge(rank=16).fit_from_sketch(srf.merge(*halves))
    assert merged.alpha_ == pytest.approx(whole.alpha_, rel=1e-12)  # the grid follows the (summed) trace
    assert relative_error(merged.coef_, whole.coef_) < 1e-9
    np.testing.assert_allclose(merged.gcv_["scores"], whole.gcv_["scores"], rtol=1e-9)


def test_low_rank_friedman1_r2_is_that_of_the_dense_fit():
    # Friedman #1 (noise 1): the spectrum of the RFF covariance decays; with rank 384 of D = 1 024
    # (sketch_size 768 < D) and rank 512 (sketch_size = D: the top half of the exact range) the test
    # R^2 stays within 0.01 of the dense fit (measured 0.9454 and 0.9469 against 0.9480; rank 320:
    # 0.936). D = 2 048 on 20 000 rows: docs/guide/ridge.rst.
    inputs, targets = make_friedman1(n_samples=5000, noise=1.0, random_state=0)
    train, test = slice(0, 4000), slice(4000, None)
    dense = srf.KernelRidge(n_features=1024).fit(inputs[train], targets[train])
    dense_r2 = dense.score(inputs[test], targets[test])
    assert dense_r2 > 0.93
    for rank in (384, 512):
        low = srf.KernelRidge(n_features=1024, rank=rank).fit(inputs[train], targets[train])
        assert isinstance(low.feature_map_, srf.RFF) and low.feature_map_.fingerprint == dense.feature_map_.fingerprint
        assert low.score(inputs[test], targets[test]) > dense_r2 - 0.01


def test_low_rank_classifier_digits_accuracy():
    data, labels = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(data))
    train, test = order[:1200], order[1200:]
    model = srf.KernelRidgeClassifier(n_features=1024, rank=256, seed=0).fit(data[train], labels[train])
    assert model.score(data[test], labels[test]) >= 0.985  # dense at D = 1 024: 0.993; exact KernelRidge 0.995


def test_low_rank_classifier_from_a_saved_sketch_and_model_round_trip(tmp_path):
    labels = np.where(np.hypot(X[:, 0], X[:, 1]) < 1.2, "in", "out")
    targets = srf.KernelRidgeClassifier.encode_targets(labels, ["in", "out"])
    srf.regression_sketch_array(X, targets, MAP, classes=["in", "out"], sketch_size=32).save(tmp_path / "s.zarr")
    model = srf.KernelRidgeClassifier(rank=24).fit_from_sketch(tmp_path / "s.zarr")
    assert model.classes_.tolist() == ["in", "out"] and model.score(X, labels) > 0.9
    srf.save_model(model, tmp_path / "model.json")
    loaded = srf.load_model(tmp_path / "model.json")
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))


def test_low_rank_bad_input_errors():
    sketch = srf.regression_sketch_array(X, Y, MAP, sketch_size=16)
    with pytest.raises(InputError, match="rank must be <= the low-rank sketch's sketch_size \\(16\\)"):
        srf.KernelRidge(rank=17).fit_from_sketch(sketch)
    with pytest.raises(InputError, match="rank must be <= the map's output width D = 64"):
        srf.KernelRidge(rank=65).fit_from_sketch(srf.regression_sketch_array(X, Y, MAP))
    with pytest.raises(InputError, match="rank must be <= the map's output width D = 32"):
        srf.KernelRidge(n_features=32, bandwidth=1.0, rank=33).fit(X, Y)
    for rank in (0, -3, 2.5, "8"):
        with pytest.raises(InputError, match="rank"):
            srf.KernelRidge(rank=rank).fit_from_sketch(sketch)
    with pytest.raises(InputError, match="sketch_size must be <= the map's output width D = 64"):
        srf.regression_sketch_array(X, Y, MAP, sketch_size=65)
    with pytest.raises(InputError, match="NystromRegressionSketch"):
        srf.ridge_gcv(srf.NystromSketch.from_rows(X, MAP, sketch_size=8), [1.0])
    with pytest.raises(InputError, match="at least 2 samples"):
        srf.KernelRidge(rank=4).fit_from_sketch(srf.regression_sketch_array(X[:1], Y[:1], MAP, sketch_size=8))


def test_cli_ridge_rank_fits_the_low_rank_model(tmp_zarr, tmp_path, capsys):
    rows_path, target_path = tmp_zarr(X, 200, "rows.zarr"), tmp_zarr(Y[:, 0], 200, "targets.zarr")
    output = tmp_path / "model.json"
    code = main(["ridge", rows_path, "--target", target_path, "-o", str(output), "--features", "64",
                 "--bandwidth", "1.5", "--rank", "16", "--alpha", "0.5"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "rank 16" in printed
    model = srf.load_model(output)
    reference = srf.KernelRidge(alpha=0.5, rank=16, feature_map=model.feature_map_).fit_from_sketch(
        srf.regression_sketch_array(X, Y[:, 0], model.feature_map_, sketch_size=32)
    )
    assert relative_error(model.coef_, reference.coef_) < 1e-9
