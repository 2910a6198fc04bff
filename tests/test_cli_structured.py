"""``--structured`` on the analysis commands (``test``, ``kmeans``, ``kpca``): the CLI runs what the Python
API runs with ``feature_map=RFF(..., structured=True)``, and the results check against numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from sklearn.metrics import adjusted_rand_score

import streamrff as srf
from streamrff.cli import main

WIDTH = 24  # wider than 16 columns: structured blocks are unbiased there


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def unbiased_mmd2(Zx: np.ndarray, Zy: np.ndarray) -> float:
    n, m = len(Zx), len(Zy)
    kxx, kyy, kxy = Zx @ Zx.T, Zy @ Zy.T, Zx @ Zy.T
    return float(
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean()
    )


@pytest.fixture
def blobs(tmp_zarr):
    rng = np.random.default_rng(3)
    centres = rng.normal(scale=4.0, size=(3, WIDTH))
    truth = np.repeat(np.arange(3), 400)
    X = (centres[truth] + rng.normal(size=(truth.size, WIDTH))).astype(np.float32)
    return X, truth, tmp_zarr(X, 300, "blobs.zarr")


def test_cli_test_structured_equals_the_api_and_numpy(capsys, tmp_zarr):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(500, WIDTH)).astype(np.float32)
    Y = (rng.normal(size=(400, WIDTH)) + 0.4).astype(np.float32)
    x_path, y_path = tmp_zarr(X, 200, "x.zarr"), tmp_zarr(Y, 150, "y.zarr")
    code, out, err = run(capsys, "test", x_path, y_path, "--structured", "--features", "256", "--permutations", "49",
                         "--seed", "2", "--json")  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["map"]["structured"] is True and payload["map"]["bandwidth"] != "median"
    feature_map = srf.map_from_spec(payload["map"])
    Zx, Zy = (feature_map.transform(A).astype(np.float64) for A in (X, Y))
    assert payload["statistic"] == pytest.approx(unbiased_mmd2(Zx, Zy), rel=1e-6)
    fitted = srf.fit_map(srf.RFF(n_features=256, structured=True, seed=2), [x_path, y_path])
    assert fitted.spec == payload["map"]  # the median bandwidth of the same pooled sample
    api = srf.two_sample_test(x_path, y_path, n_permutations=49, seed=2, feature_map=fitted)
    assert (payload["statistic"], payload["p_value"]) == (api.statistic, api.p_value)
    assert payload["p_value"] == pytest.approx(1 / 50)  # a 0.4 shift in 24 columns: no permutation comes close


def test_cli_kmeans_structured_equals_the_api(capsys, blobs, tmp_path):
    X, truth, source = blobs
    labels_path = tmp_path / "labels.zarr"
    code, out, err = run(capsys, "kmeans", source, "--clusters", "3", "--structured", "--features", "256",
                         "--bandwidth", "6", "-o", str(labels_path), "--json")  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["map"]["structured"] is True and payload["map"]["bandwidth"] == 6.0
    labels = zarr.open_array(str(labels_path), mode="r")[...]
    assert adjusted_rand_score(truth, labels) == 1.0
    feature_map = srf.RFF(n_features=256, bandwidth=6.0, structured=True, seed=0).fit(X)
    model = srf.KernelKMeans(n_clusters=3, seed=0, feature_map=feature_map).fit(source)
    np.testing.assert_array_equal(labels, model.predict(source))
    assert payload["inertia"] == model.inertia_


def test_cli_kpca_structured_equals_the_api(capsys, blobs, tmp_path):
    X, _, source = blobs
    scores_path = tmp_path / "scores.zarr"
    code, out, err = run(capsys, "kpca", source, "--components", "3", "--structured", "--features", "256",
                         "-o", str(scores_path), "--json")  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["map"]["structured"] is True
    scores = zarr.open_array(str(scores_path), mode="r")[...].astype(np.float64)
    np.testing.assert_allclose(scores.var(axis=0), payload["explained_variance"], rtol=1e-4)
    model = srf.KernelPCA(n_components=3, seed=0, feature_map=srf.RFF(n_features=256, structured=True, seed=0))
    model.fit(source)
    assert model.feature_map_.spec == payload["map"]
    np.testing.assert_allclose(scores, model.transform(source), rtol=0, atol=1e-6 * np.abs(scores).max())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["kmeans", "{source}", "--clusters", "2", "--structured", "--map-kind", "kjl"], "--map-kind rff only"),
        (["kpca", "{source}", "--components", "2", "--structured", "--map", "{source}"], "--structured"),
        (["test", "{source}", "{source}", "--structured", "--null", "aggregated"], "not --structured"),
        (["test", "--sketches", "{source}", "{source}", "--structured"], "--structured do not apply"),
    ],
)
def test_cli_structured_usage_errors_exit_2_before_reading(capsys, tmp_path, argv, message):
    source = str(tmp_path / "never-read.zarr")  # no data: the options are refused first
    with pytest.raises(SystemExit) as raised:
        main([part.format(source=source) for part in argv] + ["-o", str(tmp_path / "out.zarr")] * (argv[0] != "test"))
    assert raised.value.code == 2
    assert message in capsys.readouterr().err
