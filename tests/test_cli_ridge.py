"""``streamrff ridge``, ``streamrff predict`` and ``streamrff sketch --target`` on real zarr arrays on disk.

A ridge fit from sketches and a predict run the console script in a subprocess; the sites'
sketches, the other fits and predictions and the error cases run in-process
(:func:`streamrff.cli.main`, for speed). References are independent: in-memory fits of the Python
API on the same rows and map (numpy arrays, not zarr), and scikit-learn's ``r2_score`` / numpy
accuracy on the written predictions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.metrics import r2_score

import streamrff as srf

RNG = np.random.default_rng(11)
N_ROWS = 1_600
X = RNG.normal(size=(N_ROWS, 3)).astype(np.float32)
Y = np.column_stack([np.sin(2 * X[:, 0]) + X[:, 1] ** 2, np.cos(X[:, 2])]) + 0.1 * RNG.normal(size=(N_ROWS, 2))
LABELS = np.where(X[:, 0] + X[:, 1] > 0.5, 2, np.where(X[:, 2] > 0, 0, 1)).astype(np.int64)
HALF = 700


def cli_command() -> list[str]:
    script = Path(sys.executable).with_name("streamrff")
    return [str(script)] if script.exists() else [sys.executable, "-m", "streamrff.cli"]


def run_cli(*args: str) -> dict:
    """Run the console script; returns its --json payload (and fails the test on a non-zero exit)."""
    done = subprocess.run([*cli_command(), *args, "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_in_process(cli_main, *args: str) -> dict:
    """Run in-process with conftest's ``cli_main`` (faster: no interpreter start); returns the --json payload."""
    code, out, err = cli_main(*args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def arrays(tmp_zarr) -> dict[str, str]:
    """X, 2-column targets and integer labels as zarr arrays (whole, and as two sites' halves)."""
    paths = {}
    for name, values, chunk in (("X", X, 400), ("Y", Y, 300), ("labels", LABELS, 500)):
        paths[name] = tmp_zarr(values, chunk, f"{name}.zarr")
        paths[f"{name}_a"] = tmp_zarr(values[:HALF], 250, f"{name}_a.zarr")
        paths[f"{name}_b"] = tmp_zarr(values[HALF:], 250, f"{name}_b.zarr")
    return paths


def test_cli_ridge_predictions_equal_an_in_memory_kernel_ridge(cli_main, arrays, tmp_path):
    model_path, output = str(tmp_path / "model.json"), str(tmp_path / "predictions.zarr")
    payload = run_in_process(cli_main, "ridge", arrays["X"], "--target", arrays["Y"], "-o", model_path,
                             "--features", "96", "--seed", "5")  # fmt: skip
    run_cli("predict", model_path, arrays["X"], "-o", output)  # the console script, in a subprocess
    predictions = zarr.open_array(output, mode="r")[...]

    # In memory, chunked like the zarr arrays (sums merged in the same order): equal to rounding.
    reference = srf.KernelRidge(n_features=96, seed=5).fit(
        da.from_array(X, chunks=(400, 3)), da.from_array(Y, chunks=(300, 2))
    )
    assert payload["alpha"] == pytest.approx(reference.alpha_, rel=1e-10)
    np.testing.assert_allclose(predictions, reference.predict(X), rtol=0, atol=1e-10)
    # Chunked otherwise: other float32 tile products, whose rounding GCV's alpha (the foot of its grid here)
    # leaves in the predictions at 5e-3 of std(y) (docs/guide/ridge.rst, the merge contract).
    otherwise = srf.KernelRidge(n_features=96, seed=5).fit(X, Y).predict(X)
    assert np.abs(predictions - otherwise).max() < 2e-2 * Y.std()
    # The R^2 printed from the sketch's sums is scikit-learn's on the written predictions.
    per_target = r2_score(Y, predictions, multioutput="raw_values")
    # to 1e-4: the sketch's float32-rounded moment, seen through the coefficients of a small alpha (4e-5 measured)
    np.testing.assert_allclose(payload["training_r2"], per_target, rtol=0, atol=1e-4)
    assert payload["n_samples"] == N_ROWS and payload["n_targets"] == 2
    assert len(payload["gcv"]["alphas"]) == len(payload["gcv"]["scores"]) > 1


def test_cli_sketch_halves_then_ridge_sketches_give_the_whole_data_fit(cli_main, arrays, tmp_path):
    map_path = str(tmp_path / "map.json")
    srf.save_map(srf.RFF(n_features=64, seed=2).fit(X), map_path)  # the map every site is given
    parts = []
    for site in ("a", "b"):
        parts.append(str(tmp_path / f"{site}.sketch"))
        summary = run_in_process(
            cli_main, "sketch", arrays[f"X_{site}"], "--target", arrays[f"Y_{site}"], "--map", map_path, "-o", parts[-1]
        )
        assert summary["kind"] == "regression" and summary["n_targets"] == 2
    model_path = str(tmp_path / "model.json")
    payload = run_cli("ridge", *parts, "-o", model_path, "--alpha", "0.01")
    assert payload["alpha"] == 0.01 and payload["n_samples"] == N_ROWS

    whole = srf.KernelRidge(alpha=0.01, feature_map=srf.load_map(map_path)).fit(X, Y)
    loaded = srf.load_model(model_path)
    # The merge contract: predictions (float32 tile products: 1e-4 of std(y) at this alpha), not coefficients.
    assert np.abs(loaded.predict(X) - whole.predict(X)).max() < 1e-3 * Y.std()


def test_cli_sketch_target_prints_rows_target_summary_and_ridge_command(cli_main, arrays, tmp_path):
    map_path = str(tmp_path / "map.json")
    srf.save_map(srf.RFF(n_features=32, bandwidth=1.0).fit(X), map_path)
    output = str(tmp_path / "a.sketch")
    code, text, err = cli_main("sketch", arrays["X_a"], "--target", arrays["Y_a"], "--map", map_path, "-o", output)
    assert code == 0, err
    mean, std = Y[:HALF].mean(axis=0), Y[:HALF].std(axis=0)  # numpy's, on the same rows
    assert f"wrote {output}: {HALF:,} rows sketched" in text
    assert f"target mean (std): {mean[0]:.4g} ({std[0]:.4g}), {mean[1]:.4g} ({std[1]:.4g})" in text
    assert f"next: streamrff ridge {output} [other sites' sketches] -o model.json" in text
    assert "explained variance" not in text  # kernel PCA's spectrum is not what a ridge user needs
    payload = run_in_process(cli_main, "sketch", arrays["X_a"], "--target", arrays["Y_a"], "--map", map_path,
                             "-o", str(tmp_path / "b.sketch"))  # fmt: skip
    np.testing.assert_allclose(payload["target"]["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(payload["target"]["std"], std, rtol=1e-9)
    assert "explained_variance_ratio" not in payload and payload["count"] == HALF
    labelled = str(tmp_path / "c.sketch")
    code, text, err = cli_main("sketch", arrays["X_a"], "--target", arrays["labels_a"], "--classes", "0,1,2",
                               "--map", map_path, "-o", labelled)  # fmt: skip
    assert code == 0, err
    assert f"next: streamrff ridge {labelled} [other sites' sketches] --classify --classes 0,1,2" in text


def test_cli_classification_at_two_sites_and_from_one_source(cli_main, arrays, tmp_path):
    map_path = str(tmp_path / "map.json")
    srf.save_map(srf.RFF(n_features=64, bandwidth=1.0).fit(X), map_path)
    parts = [str(tmp_path / f"{site}.sketch") for site in ("a", "b")]
    for site, part in zip(("a", "b"), parts):
        run_in_process(cli_main, "sketch", arrays[f"X_{site}"], "--target", arrays[f"labels_{site}"],
                       "--classes", "2,0,1", "--map", map_path, "-o", part)  # fmt: skip
    assert srf.load(parts[0]).classes == (0, 1, 2)
    merged_path = str(tmp_path / "merged.json")
    payload = run_in_process(
        cli_main, "ridge", *parts, "--classify", "--classes", "0,1,2", "-o", merged_path
    )
    assert payload["classes"] == [0, 1, 2] and "training_accuracy" not in payload
    # A site that encoded other classes (as many columns) does not merge with the others.
    shifted = str(tmp_path / "shifted.sketch")
    labels_path = str(tmp_path / "shifted_labels.zarr")
    stored = zarr.create_array(store=labels_path, shape=(N_ROWS - HALF,), chunks=(250,), dtype=np.int64)
    stored[...] = LABELS[HALF:] + 1
    run_in_process(cli_main, "sketch", arrays["X_b"], "--target", labels_path, "--classes", "1,2,3",
                   "--map", map_path, "-o", shifted)  # fmt: skip
    code, _, error = cli_main("ridge", parts[0], shifted, "--classify", "--classes", "0,1,2",
                            "-o", str(tmp_path / "refused.json"))  # fmt: skip
    assert code == 1 and "different classes: classes [0, 1, 2] vs classes [1, 2, 3]" in error

    whole = srf.KernelRidgeClassifier(feature_map=srf.load_map(map_path)).fit(X, LABELS)
    merged = srf.load_model(merged_path)
    assert merged.alpha_ == pytest.approx(whole.alpha_, rel=1e-6)  # the grid follows the trace: float32 sums
    # The merge contract on predictions; float32 tile products leave 1e-4 of the +-1 scale here.
    np.testing.assert_allclose(merged.decision_function(X), whole.decision_function(X), rtol=0, atol=1e-3)

    # From the source: the accuracy printed is numpy's on the labels `predict` writes.
    model_path, output = str(tmp_path / "model.json"), str(tmp_path / "predicted.zarr")
    payload = run_in_process(cli_main, "ridge", arrays["X"], "--target", arrays["labels"], "--classify",
                             "--map", map_path, "-o", model_path)  # fmt: skip
    run_in_process(cli_main, "predict", model_path, arrays["X"], "-o", output)
    predicted = zarr.open_array(output, mode="r")[...]
    np.testing.assert_array_equal(predicted, whole.predict(X))
    assert payload["training_accuracy"] == pytest.approx(np.mean(predicted == LABELS), abs=1e-12)
    assert payload["training_accuracy"] > 0.9


@pytest.fixture
def fitted(arrays, tmp_path) -> dict[str, str]:
    """A model file, a map file and a mean sketch, made through the Python API (fast)."""
    feature_map = srf.RFF(n_features=16, bandwidth=1.0).fit(X)
    paths = {"model": str(tmp_path / "model.json"), "map": str(tmp_path / "map.json"),
             "mean": str(tmp_path / "mean.sketch")}  # fmt: skip
    srf.save_model(srf.KernelRidge(alpha=0.1, feature_map=feature_map).fit(X, Y), paths["model"])
    srf.save_map(feature_map, paths["map"])
    srf.sketch_array(X, feature_map, moments=True).save(paths["mean"])
    return {**arrays, **paths}


def test_cli_ridge_errors_are_one_line_with_exit_code_1_for_bad_data(cli_main, fitted, tmp_path):
    out = str(tmp_path / "out")
    tampered = tmp_path / "tampered.json"
    document = json.loads(Path(fitted["model"]).read_text())
    document["intercept_scale"] = 2.0
    tampered.write_text(json.dumps(document))
    cases = [
        (("sketch", fitted["X"], "--target", fitted["Y_a"], "--map", fitted["map"], "-o", out),
         "Expected a target with one row per row"),
        (("ridge", fitted["mean"], "-o", out), "'mean' sketch; ridge needs regression sketches"),
        (("predict", fitted["map"], fitted["X"], "-o", out), "It is a map file"),
        (("predict", str(tampered), fitted["X"], "-o", out), "does not match its digest"),
        (("predict", fitted["model"], fitted["labels"], "-o", out), "Expected"),
        (("sketch", fitted["X"], "--target", fitted["labels"], "--classes", "cat,dog", "--map", fitted["map"],
          "-o", out), "reads as text"),
    ]  # fmt: skip
    for argv, message in cases:
        code, _, err = cli_main(*argv)
        assert code == 1, (argv, err)
        assert err.count("\n") == 1 and message in err, err
    assert not Path(out).exists()


def test_cli_ridge_usage_errors_exit_2(cli_main, fitted, tmp_path):
    out = str(tmp_path / "out.json")
    cases = [
        (("ridge", "-o", out), "Got neither"),
        (("ridge", fitted["X"], "--target", fitted["Y"], "--sketches", fitted["mean"], "-o", out), "by position"),
        (("ridge", fitted["X"], "-o", out), "SOURCE needs --target"),
        (("ridge", fitted["mean"], "--features", "8", "-o", out), "Drop --features"),
        (("ridge", fitted["mean"], "--classify", "-o", out), "needs --classes"),
        (("ridge", fitted["X"], "--target", fitted["Y"], "--classes", "0,1", "--classify", "-o", out),
         "--classes is for sketch inputs"),
        (("ridge", fitted["X"], "--target", fitted["Y"], "--alpha", "-1", "-o", out), "a positive number or 'auto'"),
        (("ridge", fitted["X"], "--target", fitted["Y"], "--map", fitted["map"], "--seed", "3", "-o", out),
         "Drop --seed"),
        (("sketch", fitted["X"], "--classes", "0,1", "-o", out), "--classes encodes the labels of --target"),
        (("sketch", fitted["X"], "--target", fitted["labels"], "--classes", "0,0", "-o", out), "distinct"),
        (("predict", fitted["model"], fitted["X"], "-o", fitted["map"]), "already exists"),
    ]  # fmt: skip
    for argv, message in cases:
        code, _, err = cli_main(*argv)
        assert code == 2, (argv, err)
        assert message in err, err
    assert not Path(out).exists()
