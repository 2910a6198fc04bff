"""The feature maps are scikit-learn transformers: check_estimator, Pipeline, clone, params, pickle."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import streamrff as srf

X = np.random.default_rng(0).normal(size=(60, 4))


@parametrize_with_checks(
    [
        srf.RFF(),
        srf.RFF(variant="cosphase", bandwidth="median"),
        srf.RFF(n_features=256, bandwidth="median", structured=True),
        srf.JL(srf.RFF(n_features=64, bandwidth=1.0), n_components=16),
    ]
)
@pytest.mark.filterwarnings("ignore::streamrff.BiasWarning")  # the checks' data have few columns
def test_feature_map_passes_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_feature_map_declares_float32_output():
    for estimator in (srf.RFF(bandwidth=1.0), srf.JL(srf.RFF(n_features=64, bandwidth=1.0), n_components=16)):
        tags = estimator.__sklearn_tags__()
        assert tags.transformer_tags.preserves_dtype == ["float32"]
        assert tags.input_tags.allow_nan is False


def test_rff_in_pipeline_equals_manual_steps():
    pipeline = make_pipeline(StandardScaler(), srf.RFF(n_features=128, bandwidth=2.0, seed=3))
    features = pipeline.fit_transform(X)
    scaled = StandardScaler().fit_transform(X)
    expected = srf.RFF(n_features=128, bandwidth=2.0, seed=3).fit(scaled).transform(scaled)
    np.testing.assert_array_equal(features, expected)
    assert features.dtype == np.float32


def test_feature_map_pipeline_with_regressor_fits_a_smooth_function():
    # Kernel ridge regression through features: a smooth target is learned well.
    rng = np.random.default_rng(1)
    inputs = rng.uniform(-2, 2, size=(400, 1))
    target = np.sin(2 * inputs[:, 0])
    model = Pipeline([("features", srf.RFF(n_features=256, bandwidth=0.5, seed=0)), ("ridge", Ridge(alpha=1e-3))])
    model.fit(inputs, target)
    grid = np.linspace(-1.8, 1.8, 50)[:, None]
    assert np.abs(model.predict(grid) - np.sin(2 * grid[:, 0])).max() < 0.05


def test_feature_map_pipeline_grid_parameters_reach_nested_maps():
    pipeline = make_pipeline(srf.JL(srf.RFF(n_features=64, bandwidth=1.0), n_components=16))
    pipeline.set_params(jl__inner_map__n_features=32, jl__n_components=8)
    assert pipeline.fit_transform(X).shape == (len(X), 8)
    assert pipeline[-1].inner_map_.n_features_out_ == 32


def test_rff_get_params_and_set_params():
    rff = srf.RFF(n_features=64, bandwidth="median", variant="cosphase", orthogonal=True, seed=5)
    assert rff.get_params() == {
        "n_features": 64,
        "bandwidth": "median",
        "variant": "cosphase",
        "orthogonal": True,
        "structured": False,
        "seed": 5,
        "phase_precision": "auto",
        "categorical": None,
        "mismatch": "auto",
        "kernel": "gaussian",
    }
    assert rff.set_params(n_features=32, bandwidth=1.5) is rff
    assert rff.fit(X).transform(X).shape == (len(X), 32)
    assert rff.spec["bandwidth"] == 1.5


def test_jl_get_params_and_set_params_nested():
    jl = srf.JL(srf.RFF(n_features=64, bandwidth=1.0, seed=2), n_components=16, seed=1)
    params = jl.get_params(deep=True)
    assert params["n_components"] == 16 and params["seed"] == 1
    assert params["inner_map__n_features"] == 64 and params["inner_map__seed"] == 2
    jl.set_params(inner_map__n_features=128, inner_map__bandwidth=3.0)
    assert jl.inner_map.n_features == 128
    jl.fit(X)
    assert jl.spec["inner"]["n_features"] == 128 and jl.spec["inner"]["bandwidth"] == 3.0
    assert jl.spec["inner_width"] == 128


def test_jl_fit_does_not_modify_inner_map():
    inner = srf.RFF(n_features=32, bandwidth="median")
    jl = srf.JL(inner, n_components=8).fit(X)
    assert not inner.is_fitted()
    assert jl.inner_map_ is not inner and jl.inner_map_.is_fitted()


@pytest.mark.parametrize(
    "estimator",
    [
        srf.RFF(n_features=32, bandwidth=1.0, seed=4),
        srf.JL(srf.RFF(n_features=64, bandwidth=1.0, seed=1), n_components=16, seed=2),
    ],
    ids=["rff", "jl"],
)
def test_feature_map_clone_gives_unfitted_equal_params(estimator):
    fitted = clone(estimator).fit(X)
    copy = clone(fitted)
    assert not copy.is_fitted()
    assert copy.get_params(deep=False).keys() == fitted.get_params(deep=False).keys()
    assert copy.fit(X).fingerprint == fitted.fingerprint
    np.testing.assert_array_equal(copy.transform(X), fitted.transform(X))


@pytest.mark.parametrize(
    "estimator",
    [
        srf.RFF(n_features=32, bandwidth=1.0, seed=4),
        srf.RFF(n_features=33, variant="cosphase", bandwidth="median", orthogonal=True, seed=4),
        srf.RFF(n_features=64, structured=True, seed=4),
        srf.JL(srf.RFF(n_features=64, bandwidth=1.0, seed=1), n_components=16, seed=2),
    ],
    ids=["rff", "rff-cosphase-median", "rff-structured", "jl"],
)
@pytest.mark.filterwarnings("ignore::streamrff.BiasWarning")  # X has 4 columns
def test_feature_map_pickle_round_trip(estimator):
    fitted = estimator.fit(X)
    restored = pickle.loads(pickle.dumps(fitted))
    assert restored.fingerprint == fitted.fingerprint
    assert restored.transform(X).tobytes() == fitted.transform(X).tobytes()


def test_feature_map_feature_names_out():
    rff = srf.RFF(n_features=4, bandwidth=1.0).fit(X)
    assert list(rff.get_feature_names_out()) == ["rff0", "rff1", "rff2", "rff3"]


@parametrize_with_checks(
    [
        srf.KernelRidge(n_features=64),
        srf.KernelRidge(alpha=0.1, n_features=64, bandwidth=2.0),
        srf.KernelRidgeClassifier(n_features=64),
    ]
)
def test_kernel_ridge_passes_sklearn_estimator_checks(estimator, check):
    check(estimator)
