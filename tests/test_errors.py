"""Tests of streamrff.errors: the exception hierarchy and the not-fitted errors the estimators raise.

References are the exception types themselves: Python's built-ins and scikit-learn's
``sklearn.exceptions.NotFittedError``.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import streamrff as srf
from streamrff import errors

ROWS = np.random.default_rng(0).normal(size=(20, 3))


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (errors.InputError, (ValueError,)),
        (errors.NotFittedMapError, (NotFittedError, ValueError, AttributeError)),
        (errors.SketchMismatchError, (ValueError,)),
        (errors.SketchFormatError, (ValueError,)),
        (errors.SourceError, (OSError,)),
        (errors.ClusterError, (ConnectionError,)),
    ],
)
def test_error_subclasses_streamrff_error_and_its_builtin(error, bases):
    assert issubclass(error, errors.StreamRFFError)
    for base in bases:
        assert issubclass(error, base)


def test_not_fitted_map_error_is_sklearn_not_fitted_error():
    assert issubclass(errors.NotFittedMapError, NotFittedError)
    assert issubclass(srf.NotFittedMapError, NotFittedError)


@pytest.mark.parametrize(
    ("estimator", "method", "argument"),
    [
        pytest.param(srf.RFF(n_features=16, bandwidth=1.0), "transform", ROWS, id="RFF-sincos"),
        pytest.param(srf.RFF(n_features=16, bandwidth=1.0, variant="cosphase"), "transform", ROWS, id="RFF-cosphase"),
        pytest.param(srf.JL(srf.RFF(n_features=16, bandwidth=1.0), n_components=4), "transform", ROWS, id="JL"),
        pytest.param(srf.KJL(n_landmarks=8), "transform", ROWS, id="KJL"),
        pytest.param(srf.RelativeErrorRFF(n_features=16, bandwidth=1.0), "transform", ROWS, id="RelativeErrorRFF"),
        pytest.param(srf.KernelPCA(n_features=16), "transform", ROWS, id="KernelPCA-transform"),
        pytest.param(srf.KernelPCA(n_features=16), "residual", 1, id="KernelPCA-residual"),
        pytest.param(srf.KernelKMeans(n_clusters=2, n_features=16), "predict", ROWS, id="KernelKMeans-predict"),
    ],
)
def test_estimator_used_before_fit_raises_sklearn_not_fitted_error(estimator, method, argument):
    try:
        getattr(estimator, method)(argument)
    except NotFittedError as caught:
        error = caught
    else:
        pytest.fail(f"{type(estimator).__name__}.{method} before fit raised nothing")
    # The same error is also streamrff's, so either family of handlers catches it.
    assert isinstance(error, srf.NotFittedMapError)
    assert "not fitted yet" in str(error)
