"""One spelling across commands: sketch files by position, ``--on-invalid`` on every command that reads rows,
no abbreviations and a "did you mean" line on every (sub)command.

References for ``--on-invalid skip`` are the library run in memory on the rows without the invalid ones
(numpy arrays): the skipped rows' outputs must be the missing marker, the others equal to that run.
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff.cli import Parser, build_parser

#: The rows made NaN / inf in the data of the --on-invalid tests (two in one chunk, one in another).
BAD = [3, 7, 70]


@pytest.fixture
def dirty(tmp_zarr):
    """Three well-separated blobs of 120 rows (chunks of 32); rows BAD hold NaN or inf. The clean rows too."""
    rng = np.random.default_rng(5)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    X = (centres[np.arange(120) % 3] + 0.3 * rng.normal(size=(120, 2))).astype(np.float32)
    X[BAD[0], 0], X[BAD[1], 1], X[BAD[2], 0] = np.nan, np.inf, -np.inf
    keep = np.ones(120, bool)
    keep[BAD] = False
    return tmp_zarr(X, 32, "dirty.zarr"), X, keep


def test_kmeans_skip_marks_invalid_rows_and_matches_a_clean_run(cli_main, dirty, tmp_path):
    path, X, keep = dirty
    out = str(tmp_path / "labels.zarr")
    flags = ["--clusters", "3", "--features", "64", "--bandwidth", "1.0", "--seed", "0"]

    refused = cli_main("kmeans", path, "-o", out, *flags)
    assert refused.code == 1 and re.search(r"row (3|7|70)\b", refused.err) and refused.err.count("\n") == 1

    result = cli_main("kmeans", path, "-o", out, *flags, "--on-invalid", "skip", "--json")
    assert result.code == 0, result.err
    labels = zarr.open_array(out)[:]
    assert labels.shape == (120,) and (labels[BAD] == -1).all()
    expected = srf.KernelKMeans(n_clusters=3, n_features=64, bandwidth=1.0, seed=0).fit(X[keep]).predict(X[keep])
    np.testing.assert_array_equal(labels[keep], np.asarray(expected))
    payload = json.loads(result.out)
    assert payload["n_invalid"] == 3 and sum(payload["cluster_sizes"]) == 117


def test_predict_skip_marks_nan_and_matches_in_memory_predictions(cli_main, dirty, tmp_path):
    path, X, keep = dirty
    rng = np.random.default_rng(1)
    clean = rng.normal(size=(80, 2))
    model = srf.KernelRidge(alpha=0.1, n_features=32, bandwidth=1.0).fit(clean, clean[:, 0] - clean[:, 1])
    model_path = str(tmp_path / "model.json")
    from streamrff.ridge.modelfile import save_model

    save_model(model, model_path)
    out = str(tmp_path / "pred.zarr")

    refused = cli_main("predict", model_path, path, "-o", out)
    assert refused.code == 1 and len(refused.err.strip().splitlines()) == 1
    named = re.search(r"Row (\d+) of this chunk is row (\d+) of X", refused.err)  # the array's row, not the chunk's
    assert named and int(named[2]) in BAD and int(named[1]) == int(named[2]) % 32, refused.err

    result = cli_main("predict", model_path, path, "-o", out, "--on-invalid", "skip")
    assert result.code == 0, result.err
    predicted = zarr.open_array(out)[:]
    assert predicted.shape == (120,) and np.isnan(predicted[BAD]).all()
    np.testing.assert_allclose(predicted[keep], np.asarray(model.predict(X[keep].astype(np.float64))),
                               rtol=1e-6, atol=1e-5)  # fmt: skip


def test_kpca_skip_writes_nan_rows(cli_main, dirty, tmp_path):
    path, _, keep = dirty
    out = str(tmp_path / "scores.zarr")
    result = cli_main("kpca", path, "--components", "2", "--features", "32", "-o", out, "--on-invalid", "skip")
    assert result.code == 0, result.err
    scores = zarr.open_array(out)[:]
    assert scores.shape == (120, 2) and np.isnan(scores[BAD]).all() and np.isfinite(scores[keep]).all()


def test_two_sample_test_skip_equals_the_test_without_those_rows(cli_main, dirty, tmp_zarr):
    path, X, keep = dirty
    Y = (np.random.default_rng(2).normal(size=(90, 2)) + 1.0).astype(np.float32)
    y_path = tmp_zarr(Y, 32, "y.zarr")
    flags = ["--features", "64", "--bandwidth", "1.0", "--permutations", "99", "--seed", "3", "--json"]

    refused = cli_main("test", path, y_path, *flags)
    assert refused.code == 1 and "row" in refused.err and len(refused.err.strip().splitlines()) == 1
    assert "pass --on-invalid skip" in refused.err

    result = cli_main("test", path, y_path, *flags, "--on-invalid", "skip")
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    expected = srf.two_sample_test(X[keep], Y, n_features=64, bandwidth=1.0, n_permutations=99, seed=3)
    assert payload["n_x"] == 117 and payload["n_invalid"] == [3, 0]
    # the unbiased MMD^2 by numpy on the map's features of the clean rows
    feature_map = srf.RFF(n_features=64, bandwidth=1.0, seed=3).fit(X[keep])
    zx, zy = np.asarray(feature_map.transform(X[keep]), np.float64), np.asarray(feature_map.transform(Y), np.float64)

    def unbiased(z, w):
        kzz, kww, kzw = z @ z.T, w @ w.T, z @ w.T
        n, m = len(z), len(w)
        return ((kzz.sum() - np.trace(kzz)) / (n * (n - 1)) + (kww.sum() - np.trace(kww)) / (m * (m - 1))
                - 2 * kzw.mean())  # fmt: skip

    assert payload["statistic"] == pytest.approx(unbiased(zx, zy), rel=1e-6, abs=1e-5)
    assert payload["statistic"] == pytest.approx(expected.statistic, rel=1e-6, abs=1e-5)


def test_sketch_inputs_by_position_the_alias_and_a_mix(cli_main, dirty, tmp_path):
    path, X, keep = dirty
    feature_map = srf.RFF(n_features=16, bandwidth=1.0).fit(X[keep])
    a, b = str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch")
    srf.sketch_array(X[keep][:60], feature_map, moments=True).save(a)
    srf.sketch_array(X[keep][60:], feature_map, moments=True).save(b)

    positional = cli_main("test", a, b, "--json")
    alias = cli_main("test", "--sketches", a, b, "--json")
    assert positional.code == alias.code == 0 and positional.err == ""
    assert json.loads(positional.out) == json.loads(alias.out)
    assert alias.err.count("\n") == 1 and "--sketches is deprecated" in alias.err and f"test {a} {b}" in alias.err

    mixed = cli_main("test", a, path)
    assert mixed.code == 2 and f"{a} is a sketch file but {path} is data" in mixed.err
    missing = cli_main("test", a, str(tmp_path / "missing.sketch"))  # read as sketches: the load names the file
    assert missing.code == 1 and "missing.sketch" in missing.err and missing.err.count("\n") == 1
    explained = cli_main("explain", a, path, "--source", path)
    assert explained.code == 2 and f"{path} is no sketch file" in explained.err
    both = cli_main("explain", a, "--sketches", a, b, "--source", path)
    assert both.code == 2 and "once, by position" in both.err


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from _parsers(subparser, (*path, name))


def test_every_command_refuses_abbreviations_and_suggests(cli_main):
    found = list(_parsers(build_parser()))
    assert any(path == ("store", "append") for path, _ in found)
    for path, parser in found:
        assert isinstance(parser, Parser) and parser.allow_abbrev is False, path
    for argv, hint in [
        (["store", "apend"], "did you mean append?"),
        (["store", "append", "s.store", "x.zarr", "--on-invalidd", "skip"], "did you mean --on-invalid?"),
        (["kmeans", "x.zarr", "--clusters", "2", "-o", "l.zarr", "--on-inv", "skip"], "did you mean --on-invalid?"),
    ]:
        result = cli_main(*argv)
        assert result.code == 2 and hint in result.err, (argv, result.err)
    hidden = cli_main("test", "a.sketch", "b.sketch", "--sketchs")  # never a deprecated spelling
    assert hidden.code == 2 and "did you mean --sketches" not in hidden.err
    unknown_here = cli_main("info", "x.sketch", "--on-invalidd")  # an option of other commands only: no hint
    assert unknown_here.code == 2 and "did you mean" not in unknown_here.err


@pytest.mark.parametrize("command", ["test", "explain", "ridge", "kmeans", "kpca", "predict", "sketch", "store append"])
def test_on_invalid_and_missing_chunks_on_every_command_that_reads_rows(command):
    parser = dict(_parsers(build_parser()))[tuple(command.split())]
    actions = {option: action for action in parser._actions for option in action.option_strings}
    assert list(actions["--on-invalid"].choices) == ["raise", "skip"] and actions["--on-invalid"].default == "raise"
    assert "--allow-missing-chunks" in actions


def test_ridge_skip_fits_the_finite_rows(cli_main, dirty, tmp_zarr, tmp_path):
    path, X, keep = dirty
    y = np.where(np.isfinite(X).all(axis=1), np.nan_to_num(X[:, 0] - 2 * X[:, 1], posinf=0, neginf=0), 0.0)
    target = tmp_zarr(y, 32, "y.zarr")
    out = str(tmp_path / "model.json")
    flags = ["--features", "32", "--bandwidth", "1.0", "--seed", "0", "--alpha", "0.5", "--json"]
    result = cli_main("ridge", path, "--target", target, "-o", out, *flags, "--on-invalid", "skip")
    assert result.code == 0, result.err
    assert json.loads(result.out)["n_invalid"] == 3
    from streamrff.ridge.modelfile import load_model

    expected = srf.KernelRidge(alpha=0.5, n_features=32, bandwidth=1.0, seed=0).fit(X[keep], y[keep])
    probe = np.random.default_rng(4).normal(size=(20, 2))
    np.testing.assert_allclose(np.asarray(load_model(out).predict(probe)), np.asarray(expected.predict(probe)),
                               rtol=1e-6, atol=1e-5)  # fmt: skip
    # A NaN target leaves its row out too.
    y[50] = np.nan
    keep[50] = False
    result = cli_main("ridge", path, "--target", tmp_zarr(y, 32, "y2.zarr"), "-o", out, "--overwrite", *flags,
                      "--on-invalid", "skip")  # fmt: skip
    assert result.code == 0 and json.loads(result.out)["n_invalid"] == 4, result.err
    expected = srf.KernelRidge(alpha=0.5, n_features=32, bandwidth=1.0, seed=0).fit(X[keep], y[keep])
    np.testing.assert_allclose(np.asarray(load_model(out).predict(probe)), np.asarray(expected.predict(probe)),
                               rtol=1e-6, atol=1e-5)  # fmt: skip
