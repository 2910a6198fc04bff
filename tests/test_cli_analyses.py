"""The analysis commands of the CLI: ``test``, ``kmeans``, ``kpca`` and ``info`` on moment sketches.

References are independent numpy computations on the features of the map the command reports.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from sklearn.datasets import make_circles
from sklearn.metrics import adjusted_rand_score

import streamrff as srf
from streamrff.cli import main


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
def two_samples(tmp_zarr):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 3)).astype(np.float32)
    Y = (rng.normal(size=(500, 3)) + [0.8, 0.0, 0.0]).astype(np.float32)
    return X, Y, tmp_zarr(X, 200, "x.zarr"), tmp_zarr(Y, 150, "y.zarr")


def test_cli_test_permutation_statistic_equals_numpy_on_the_features(capsys, two_samples, tmp_path):
    X, Y, x_path, y_path = two_samples
    plot = tmp_path / "null.png"
    code, out, _ = run(capsys, "test", x_path, y_path, "--features", "128", "--permutations", "49",
                       "--json", "--plot", str(plot))  # fmt: skip
    assert code == 0
    payload = json.loads(out)
    feature_map = srf.map_from_spec(payload["map"])
    Zx, Zy = (feature_map.transform(A).astype(np.float64) for A in (X, Y))
    assert payload["statistic"] == pytest.approx(unbiased_mmd2(Zx, Zy), rel=1e-6)
    assert payload["method"] == "permutation" and payload["n_x"] == 600 and payload["n_y"] == 500
    assert payload["p_value"] == pytest.approx(1 / 50)  # a 0.8 shift: no permutation comes close
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("method", ["spectral", "hotelling"])
def test_cli_test_from_sketches(capsys, two_samples, tmp_path, method):
    X, Y, x_path, y_path = two_samples
    for path, name in ((x_path, "a.sketch"), (y_path, "b.sketch")):
        code, _, _ = run(capsys, "sketch", path, "-o", str(tmp_path / name), "--features", "64",
                         "--bandwidth", "1.5", "--moments")  # fmt: skip
        assert code == 0
    code, out, _ = run(capsys, "test", str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch"),
                       "--null", method, "--json")  # fmt: skip
    assert code == 0
    payload = json.loads(out)
    feature_map = srf.map_from_spec(payload["map"])
    Zx, Zy = (feature_map.transform(A).astype(np.float64) for A in (X, Y))
    assert payload["statistic"] == pytest.approx(unbiased_mmd2(Zx, Zy), rel=1e-6)
    assert payload["method"] == method and 0.0 <= payload["p_value"] < 0.01


def test_cli_test_usage_errors_exit_2(capsys, two_samples, tmp_path):
    _, _, x_path, y_path = two_samples
    with pytest.raises(SystemExit) as raised:
        main(["test", x_path])
    assert raised.value.code == 2
    with pytest.raises(SystemExit) as raised:
        main(["test", "--sketches", x_path, y_path, "--null", "permutation"])
    assert raised.value.code == 2
    assert "needs the data" in capsys.readouterr().err


def test_cli_kmeans_separates_rings_and_refuses_existing_output(capsys, tmp_zarr, tmp_path):
    X, truth = make_circles(3000, factor=0.3, noise=0.05, random_state=0)
    source = tmp_zarr(X.astype(np.float32), 700, "rings.zarr")
    labels_path = tmp_path / "labels.zarr"
    code, out, err = run(capsys, "kmeans", source, "--clusters", "2", "--bandwidth", "0.3", "--features", "512",
                         "-o", str(labels_path), "--json")  # fmt: skip
    assert code == 0, err
    labels = zarr.open_array(str(labels_path), mode="r")[...]
    assert labels.shape == (3000,)
    assert adjusted_rand_score(truth, labels) >= 0.9
    assert json.loads(out)["n_iter"] >= 1
    before = labels.copy()
    with pytest.raises(SystemExit) as raised:
        main(["kmeans", source, "--clusters", "3", "-o", str(labels_path)])
    err = capsys.readouterr().err
    assert raised.value.code == 2 and f"{labels_path} already exists. Pass --overwrite" in err
    np.testing.assert_array_equal(zarr.open_array(str(labels_path), mode="r")[...], before)


def test_cli_kpca_scores_have_the_reported_variances(capsys, tmp_zarr, tmp_path):
    X = np.random.default_rng(2).normal(size=(2000, 4)).astype(np.float32)
    source = tmp_zarr(X, 500, "x.zarr")
    scores_path, plot = tmp_path / "scores.zarr", tmp_path / "scatter.png"
    code, out, err = run(capsys, "kpca", source, "--components", "3", "--features", "256", "-o", str(scores_path),
                         "--plot", str(plot), "--json")  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    scores = zarr.open_array(str(scores_path), mode="r")[...].astype(np.float64)
    assert scores.shape == (2000, 3)
    # Scores are centred projections on eigenvectors: their variances are the eigenvalues.
    np.testing.assert_allclose(scores.var(axis=0), payload["explained_variance"], rtol=1e-4)
    np.testing.assert_allclose(scores.mean(axis=0), 0.0, atol=1e-5)
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_cli_info_reports_explained_variance_of_moment_sketches(capsys, tmp_path):
    X = np.random.default_rng(3).normal(size=(500, 3))
    rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
    path = tmp_path / "m.sketch"
    srf.sketch_array(X, rff, moments=True).save(path)
    code, out, _ = run(capsys, "info", str(path), "--json")
    assert code == 0
    Z = rff.transform(X).astype(np.float64)
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(Z.T, bias=True)))[::-1]
    expected = eigenvalues[:10] / eigenvalues.sum()
    np.testing.assert_allclose(json.loads(out)["explained_variance_ratio"], expected, rtol=1e-6, atol=1e-9)


def test_cli_sketch_tls_address_without_certificates_fails_clearly(capsys, two_samples, tmp_path):
    _, _, x_path, _ = two_samples
    code, _, err = run(capsys, "sketch", x_path, "-o", str(tmp_path / "s"), "--scheduler", "tls://127.0.0.1:9")
    assert code == 1
    assert "tls://127.0.0.1:9 is a TLS scheduler, but no client certificate is configured" in err
    assert not (tmp_path / "s").exists()


# --structured on the analysis commands: the CLI runs what the Python API runs with
# feature_map=RFF(..., structured=True), and the results check against numpy.

WIDTH = 24  # wider than 16 columns: structured blocks are unbiased there


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
