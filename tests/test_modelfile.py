"""Model files (:mod:`streamrff.ridge.modelfile`): a fitted kernel ridge model round-trips bit for bit, no pickle.

References are independent: predictions are checked against numpy's ``z(X) @ coef + intercept``
on the map's features, and the file against the JSON standard library.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import streamrff as srf
from streamrff.ridge.modelfile import MODEL_FORMAT_NAME, _canonical_digest

RNG = np.random.default_rng(7)
X = RNG.normal(size=(300, 3))
Y = np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 1]) * X[:, 2]]) + 0.05 * RNG.normal(size=(300, 2))


def fitted_models() -> dict[str, tuple[object, np.ndarray]]:
    ring = np.hypot(X[:, 0], X[:, 1])
    return {
        "regression": srf.KernelRidge(n_features=64, bandwidth=1.0, seed=1).fit(X, Y[:, 0]),
        "multi-output": srf.KernelRidge(n_features=64, bandwidth="median", seed=2).fit(X, Y),
        "three classes": srf.KernelRidgeClassifier(n_features=64, bandwidth=1.0).fit(X, np.digitize(ring, [0.8, 1.5])),
        "two text classes": srf.KernelRidgeClassifier(alpha=0.1, n_features=32).fit(
            X, np.where(ring < 1.2, "in", "out")
        ),
    }


MODELS = fitted_models()


@pytest.mark.parametrize("name", list(MODELS))
def test_model_file_round_trip_predicts_exactly(tmp_path, name):
    model = MODELS[name]
    path = tmp_path / "model.json"
    srf.save_model(model, path)
    loaded = srf.load_model(path)
    assert type(loaded) is type(model)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_array_equal(loaded.coef_, model.coef_)
    np.testing.assert_array_equal(loaded.intercept_, model.intercept_)
    assert loaded.alpha_ == model.alpha_ and loaded.n_samples_ == 300 and loaded.n_features_in_ == 3
    assert loaded.feature_map_.fingerprint == model.feature_map_.fingerprint
    for key in ("alphas", "scores", "df"):
        np.testing.assert_array_equal(loaded.gcv_[key], model.gcv_[key])
    # Independent reference: the scores are the map's features times the stored coefficients.
    features = model.feature_map_.transform(X).astype(np.float64)
    scores = features @ np.atleast_2d(loaded.coef_).T + loaded.intercept_
    if hasattr(model, "classes_"):
        assert loaded.classes_.tolist() == model.classes_.tolist()
        assert loaded.classes_.dtype.kind == model.classes_.dtype.kind
        np.testing.assert_allclose(np.atleast_2d(loaded.decision_function(X).T).T, scores.reshape(300, -1), atol=1e-10)
    else:
        np.testing.assert_allclose(loaded.predict(X), scores.reshape(loaded.predict(X).shape), atol=1e-10)


def test_model_file_is_plain_json_with_the_map_file_inside(tmp_path):
    path = tmp_path / "model.json"
    srf.save_model(MODELS["three classes"], path)
    document = json.loads(path.read_text())
    assert document["format"] == MODEL_FORMAT_NAME and document["version"] == 1
    assert document["kind"] == "kernel_ridge_classifier"
    assert document["classes"] == {"dtype": "<i8", "values": [0, 1, 2]}
    assert document["map"]["format"] == "streamrff.map"
    coef = document["arrays"]["coef"]
    raw = np.frombuffer(base64.b64decode(coef["data"]), dtype=coef["dtype"]).reshape(coef["shape"])
    np.testing.assert_array_equal(raw, MODELS["three classes"].coef_.T)
    # The model's map serves as a map file, so new sites sketch with the model's map.
    assert srf.load_map(path).fingerprint == MODELS["three classes"].feature_map_.fingerprint


def write_document(path, document, redigest: bool) -> None:
    if redigest:
        document["digest"] = _canonical_digest(document)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("edit", "redigest", "message"),
    [
        (lambda d: d.update(alpha=d["alpha"] * 2), False, "does not match its digest"),
        (lambda d: d.update(version=2), True, "Upgrade streamrff"),
        (lambda d: d.update(kind="svm"), True, "unknown model kind"),
        (lambda d: d["arrays"]["coef"].update(shape=[10, 1]), True, "declares"),
        (lambda d: d["map"]["spec"].update(seed=99), True, "fingerprint does not match"),
        (lambda d: d.update(classes={"dtype": "<i8", "values": [0, 1]}), True, "no classes"),
        (lambda d: d.update(alpha=-1.0), True, "'alpha' must be a positive number"),
        (lambda d: d.update(target_ndim=3), True, "'target_ndim'"),
    ],
)
def test_load_model_refuses_a_tampered_file(tmp_path, edit, redigest, message):
    path = tmp_path / "model.json"
    srf.save_model(MODELS["regression"], path)
    document = json.loads(path.read_text())
    edit(document)
    write_document(path, document, redigest)
    with pytest.raises(srf.ModelFormatError, match=message):
        srf.load_model(path)


def test_load_model_refuses_a_map_file_a_sketch_and_text(tmp_path):
    srf.save_map(MODELS["regression"].feature_map_, tmp_path / "map.json")
    with pytest.raises(srf.ModelFormatError, match="It is a map file"):
        srf.load_model(tmp_path / "map.json")
    srf.sketch_array(X, MODELS["regression"].feature_map_).save(tmp_path / "x.sketch")
    with pytest.raises(srf.ModelFormatError, match="is a directory"):
        srf.load_model(tmp_path / "x.sketch")
    (tmp_path / "notes.txt").write_text("not json")
    with pytest.raises(srf.ModelFormatError, match="not JSON"):
        srf.load_model(tmp_path / "notes.txt")
    with pytest.raises(srf.MapFormatError, match="does not exist"):
        srf.load_model(tmp_path / "missing.json")


def test_save_model_refuses_unfitted_models_other_estimators_and_existing_files(tmp_path):
    with pytest.raises(srf.NotFittedMapError):
        srf.save_model(srf.KernelRidge(), tmp_path / "a.json")
    with pytest.raises(srf.InputError, match="KernelRidge"):
        srf.save_model(srf.KernelPCA(n_components=2), tmp_path / "a.json")
    path = tmp_path / "model.json"
    srf.save_model(MODELS["regression"], path)
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        srf.save_model(MODELS["multi-output"], path)
    assert path.read_bytes() == before
    srf.save_model(MODELS["multi-output"], path, overwrite=True)
    assert srf.load_model(path).predict(X).shape == (300, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["model.json"]  # no staging file left behind
