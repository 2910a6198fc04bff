"""The shared-map workflow on the command line: ``streamrff map``, ``--map FILE``, and the errors around it.

Real zarr arrays on disk and on moto's S3 server. References: in-memory sketches of the
same rows with the map the command wrote (numpy sums), and the unbiased MMD^2 computed
in numpy on the features.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import zarr
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import streamrff as srf
from streamrff.cli import main

RNG = np.random.default_rng(21)
A = RNG.normal(size=(3_000, 4)).astype(np.float32)
B = (RNG.normal(size=(2_000, 4)) * 1.2 + [0.4, 0, 0, 0]).astype(np.float32)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    script = os.path.join(os.path.dirname(sys.executable), "streamrff")
    return subprocess.run(
        [script, *args], capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})}, cwd=cwd
    )


def unbiased_mmd2(Zx: np.ndarray, Zy: np.ndarray) -> float:
    n, m = len(Zx), len(Zy)
    kxx, kyy, kxy = Zx @ Zx.T, Zy @ Zy.T, Zx @ Zy.T
    return float(
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean()
    )


@pytest.fixture
def sites(tmp_zarr):
    return tmp_zarr(A, 700, name="a.zarr"), tmp_zarr(B, 500, name="b.zarr")


def test_cli_map_then_sketch_map_at_each_site_merges_and_tests(capsys, sites, tmp_path):
    a, b = sites
    map_path, sa, sb, both = (str(tmp_path / name) for name in ("map.json", "a.sketch", "b.sketch", "both.sketch"))

    code, out, err = run(capsys, "map", a, b, "-o", map_path, "--features", "128", "--json")
    assert code == 0, err
    fingerprint = json.loads(out)["fingerprint"]
    for source, output in ((a, sa), (b, sb)):
        code, out, err = run(capsys, "sketch", source, "--map", map_path, "--moments", "-o", output, "--json")
        assert code == 0, err
        assert json.loads(out)["fingerprint"] == fingerprint
    code, _, err = run(capsys, "merge", sa, sb, "-o", both)
    assert code == 0, err
    code, out, err = run(capsys, "test", sa, sb, "--null", "spectral", "--json")
    assert code == 0, err

    feature_map = srf.load_map(map_path)
    merged = srf.load(both)
    expected = srf.sketch_array(np.vstack([A, B]), feature_map, moments=True)
    scale = np.abs(expected.feature_sum).max()
    np.testing.assert_allclose(merged.feature_sum, expected.feature_sum, rtol=0, atol=1e-6 * scale)
    Za, Zb = (feature_map.transform(rows).astype(np.float64) for rows in (A, B))
    payload = json.loads(out)
    assert payload["statistic"] == pytest.approx(unbiased_mmd2(Za, Zb), rel=1e-6)
    assert payload["p_value"] < 0.01  # a 0.4 shift and 1.2 scale on 5 000 rows


def test_cli_sketch_with_map_of_another_sketch_and_text_of_map(capsys, sites, tmp_path):
    a, b = sites
    code, out, _ = run(capsys, "map", a, b, "-o", str(tmp_path / "m.json"), "--features", "32")
    assert code == 0
    assert "median pairwise distance of one seeded sample pooled across 2 sources" in out
    assert run(capsys, "sketch", a, "-o", str(tmp_path / "a.sketch"), "--features", "32")[0] == 0

    code, out, err = run(
        capsys, "sketch", b, "--map", str(tmp_path / "a.sketch"), "-o", str(tmp_path / "b.sketch"), "--json"
    )

    assert code == 0, err
    assert json.loads(out)["fingerprint"] == srf.load(tmp_path / "a.sketch").fingerprint


@pytest.mark.parametrize(
    "command, extra, flags",
    [
        ("sketch", ["--bandwidth", "2.0", "--seed", "3"], "--bandwidth, --seed would contradict it"),
        ("sketch", ["--features", "64"], "--features would contradict it"),
        ("test", ["--variant", "cosphase"], "--variant would contradict it"),
        ("kmeans", ["--clusters", "2", "--map-kind", "kjl"], "--map-kind would contradict it"),
        ("kpca", ["--components", "2", "--landmarks", "50"], "--landmarks would contradict it"),
    ],
)
def test_cli_map_refuses_contradicting_options_with_exit_2(capsys, sites, tmp_path, command, extra, flags):
    a, b = sites
    srf.save_map(srf.RFF(n_features=16, bandwidth=1.0).fit(A), tmp_path / "m.json")
    output = tmp_path / "out"
    sources = [a, b] if command == "test" else [a]

    code, out, err = (
        run(capsys, command, *sources, "--map", str(tmp_path / "m.json"), *extra, "-o", str(output))
        if command != "test"
        else run(capsys, command, *sources, "--map", str(tmp_path / "m.json"), *extra)
    )

    assert code == 2
    assert f"streamrff {command}: error: --map {tmp_path / 'm.json'} fixes the feature map, so {flags}" in err
    assert out == "" and not output.exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"format": "streamrff.map", "version": 7, "spec": {}, "fingerprint": "", "arrays": {}}',
         "map format version 7; this streamrff reads up to version 1. Upgrade streamrff"),
        ("x,y\n1,2\n", "is not a streamrff map file: not JSON"),
    ],
)  # fmt: skip
def test_cli_bad_or_newer_map_file_exits_1_without_traceback_or_output(sites, tmp_path, content, message):
    a, _ = sites
    (tmp_path / "m.json").write_text(content)

    result = cli("sketch", a, "--map", str(tmp_path / "m.json"), "-o", str(tmp_path / "out.sketch"))

    assert result.returncode == 1
    assert result.stderr.startswith("streamrff sketch: error: ") and message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.sketch").exists() and result.stdout == ""


def test_cli_merge_and_test_of_two_median_maps_name_the_difference_and_the_fix(capsys, sites, tmp_path):
    a, b = sites
    for source, name in ((a, "a.sketch"), (b, "b.sketch")):
        assert run(capsys, "sketch", source, "-o", str(tmp_path / name), "--features", "32", "--moments")[0] == 0
    bandwidths = [srf.load(tmp_path / name).feature_map.bandwidth_ for name in ("a.sketch", "b.sketch")]

    merge_code, _, merge_err = run(
        capsys, "merge", str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch"), "-o", str(tmp_path / "m")
    )
    test_code, _, test_err = run(capsys, "test", str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch"))

    difference = f"bandwidth {bandwidths[0]:.4g} vs {bandwidths[1]:.4g}"
    for code, err in ((merge_code, merge_err), (test_code, test_err)):
        assert code == 1
        assert difference in err
        assert f"--map {tmp_path / 'a.sketch'}" in err and "streamrff map SOURCE" in err
        assert "feature_map" not in err and "sketch_x" not in err
    assert not (tmp_path / "m").exists()


def test_cli_test_sketches_without_moments_names_the_cli_fix(capsys, sites, tmp_path):
    a, b = sites
    assert run(capsys, "sketch", a, "-o", str(tmp_path / "a.sketch"), "--features", "32", "--bandwidth", "1.0")[0] == 0
    assert run(capsys, "sketch", b, "-o", str(tmp_path / "b.sketch"), "--map", str(tmp_path / "a.sketch"))[0] == 0

    code, _, err = run(capsys, "test", str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch"))

    assert code == 1  # the data lack what the test needs: exit 1 by the table of docs/cli.rst (was 2)
    assert "was sketched without second moments" in err and "--moments" in err
    assert "moments=True" not in err and "sketch_x" not in err


def test_cli_kmeans_and_kpca_with_a_map_file(capsys, tmp_zarr, tmp_path):
    X, truth = make_blobs(3_000, centers=[[0, 0], [6, 0], [0, 6]], cluster_std=0.6, random_state=0)
    source = tmp_zarr(X.astype(np.float32), 1_000, "blobs.zarr")
    assert run(capsys, "map", source, "-o", str(tmp_path / "m.json"), "--features", "256", "--bandwidth", "1.5")[0] == 0
    fingerprint = srf.load_map(tmp_path / "m.json").fingerprint

    code, out, err = run(capsys, "kmeans", source, "--clusters", "3", "--map", str(tmp_path / "m.json"),
                         "--tol", "1e-3", "-o", str(tmp_path / "labels.zarr"), "--json")  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    labels = zarr.open_array(str(tmp_path / "labels.zarr"), mode="r")[...]
    assert adjusted_rand_score(truth, labels) > 0.95
    assert payload["cluster_sizes"] == np.bincount(labels, minlength=3).tolist()
    assert payload["stop_reason"] == "converged" and payload["tol"] == 1e-3
    assert srf.map_from_spec(payload["map"]).fingerprint == fingerprint

    code, out, err = run(capsys, "kmeans", source, "--clusters", "3", "--map", str(tmp_path / "m.json"),
                         "--max-iter", "1", "--tol", "0", "-o", str(tmp_path / "l1.zarr"))  # fmt: skip
    assert code == 0, err
    assert "stopped at --max-iter 1 before converging" in out and "cluster sizes: 0: " in out
    header, first = err.splitlines()[:2]
    assert header.split() == ["pass", "inertia", "moved", "centre", "shift"]
    ends = [{match.end() for match in re.finditer(r"\S+", line)} for line in (header, first)]
    assert len(ends[1]) == 4 and ends[1] <= ends[0]  # right-aligned under the header

    code, out, err = run(capsys, "kpca", source, "--components", "2", "--map", str(tmp_path / "m.json"),
                         "-o", str(tmp_path / "scores.zarr"), "--json")  # fmt: skip
    assert code == 0, err
    assert srf.map_from_spec(json.loads(out)["map"]).fingerprint == fingerprint


def test_cli_test_with_map_file_uses_its_features(capsys, sites, tmp_path):
    a, b = sites
    feature_map = srf.RFF(n_features=64, bandwidth=1.3, seed=9).fit(A)
    srf.save_map(feature_map, tmp_path / "m.json")

    code, out, err = run(capsys, "test", a, b, "--map", str(tmp_path / "m.json"), "--permutations", "19", "--json")

    assert code == 0, err
    Za, Zb = (feature_map.transform(rows).astype(np.float64) for rows in (A, B))
    payload = json.loads(out)
    assert payload["statistic"] == pytest.approx(unbiased_mmd2(Za, Zb), rel=1e-6)
    assert payload["map"] == feature_map.spec


def test_cli_map_and_sketch_on_moto_with_options_file_and_environment(capsys, s3_server, s3_bucket, tmp_path):
    options = s3_server.storage_options
    for name, rows in (("a", A), ("b", B)):
        store = zarr.storage.FsspecStore.from_url(
            f"s3://{s3_bucket}/{name}.zarr", storage_options=options, read_only=False
        )
        zarr.create_array(store=store, data=rows, chunks=(800, 4), zarr_format=3)
    (tmp_path / "options.json").write_text(json.dumps(options))
    at_file = "@" + str(tmp_path / "options.json")
    url = f"s3://{s3_bucket}"

    code, out, err = run(capsys, "map", f"{url}/a.zarr", f"{url}/b.zarr", "-o", f"{url}/map.json", "--features", "64",
                         "--storage-options", at_file, "--json")  # fmt: skip
    assert code == 0, err
    fingerprint = json.loads(out)["fingerprint"]
    code, out, err = run(capsys, "sketch", f"{url}/a.zarr", "--map", f"{url}/map.json", "-o", f"{url}/a.sketch",
                         "--storage-options", at_file, "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["fingerprint"] == fingerprint
    # No --storage-options at all: credentials and endpoint from the standard environment.
    env = {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"],
           "AWS_ENDPOINT_URL": options["endpoint_url"], "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    result = cli("sketch", f"{url}/b.zarr", "--map", f"{url}/a.sketch", "-o", f"{url}/b.sketch", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["fingerprint"] == fingerprint
    code, _, err = run(capsys, "merge", f"{url}/a.sketch", f"{url}/b.sketch", "-o", str(tmp_path / "both.sketch"),
                       "--storage-options", at_file)  # fmt: skip
    assert code == 0, err
    merged = srf.load(tmp_path / "both.sketch")
    expected = srf.sketch_array(np.vstack([A, B]), srf.load_map(f"{url}/map.json", storage_options=options))
    np.testing.assert_allclose(
        merged.feature_sum, expected.feature_sum, rtol=0, atol=1e-6 * np.abs(expected.feature_sum).max()
    )


def test_cli_storage_options_file_errors_exit_2_without_echoing(capsys, sites, tmp_path):
    a, _ = sites
    (tmp_path / "bad.json").write_text('{"secret": "wJalrXUtnFEMI-streamrff-SECRET"')

    missing = run(
        capsys, "sketch", a, "-o", str(tmp_path / "o"), "--storage-options", "@" + str(tmp_path / "none.json")
    )
    bad = run(capsys, "sketch", a, "-o", str(tmp_path / "o"), "--storage-options", "@" + str(tmp_path / "bad.json"))

    assert missing[0] == 2 and "cannot be read" in missing[2]
    assert bad[0] == 2 and "must be a JSON object" in bad[2] and "SECRET" not in bad[1] + bad[2]
    assert not (tmp_path / "o").exists()


def test_cli_help_shows_each_default_once_and_imports_no_heavy_module(capsys):
    for command in ("map", "sketch", "merge", "info", "test", "kmeans", "kpca", "demo"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0
        assert "(default: None)" not in out and "(default: False)" not in out, command
        assert all(line.count("(default") <= 1 for line in out.split("\n  -")), command
    assert "permutations B (--null permutation and aggregated) (default: 500)" in " ".join(
        run(capsys, "test", "--help")[1].split()
    )
    seed_help = " ".join(run(capsys, "kmeans", "--help")[1].split())
    assert "seed of the map, the row sample and the initialisation" in seed_help and "k-means++" in seed_help
    probe = (
        "import sys, streamrff.cli; "
        "print(sorted(m for m in ('numpy', 'numba', 'dask', 'zarr', 'sklearn') if m in sys.modules))"
    )
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert imported == "[]"


def test_cli_csv_source_says_what_is_read(capsys, tmp_path):
    (tmp_path / "data.csv").write_text("1,2\n3,4\n")

    code, _, err = run(capsys, "sketch", str(tmp_path / "data.csv"), "-o", str(tmp_path / "o"))

    assert code == 1
    assert "data.csv is a file, not a zarr array. streamrff reads zarr arrays" in err
    assert "StorePath" not in err and "LocalStore" not in err


def test_cli_demo_refuses_an_existing_output(capsys, tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "keep.txt").write_text("mine")

    code, _, err = run(capsys, "demo", "--rows", "1000", "-o", str(tmp_path / "demo"))

    assert code == 2 and "already exists. Pass --overwrite" in err
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["keep.txt"]


def test_cli_info_reads_every_sketch_kind_and_map_files_in_a_fresh_process(tmp_path):
    from streamrff.kmeans import cluster_sketch_of_chunk

    rff = srf.RFF(n_features=16, bandwidth=1.0).fit(A)
    cluster_sketch_of_chunk(A[:200], rff, np.zeros((2, 16))).save(tmp_path / "c.sketch")
    srf.save_map(rff, tmp_path / "m.json")

    # A fresh process imports only streamrff.cli: `load` must still know the k-means sketch kind.
    sketch_info = cli("info", str(tmp_path / "c.sketch"), "--json")
    map_info = cli("info", str(tmp_path / "m.json"), "--json")

    assert sketch_info.returncode == 0, sketch_info.stderr
    assert json.loads(sketch_info.stdout)["kind"] == "cluster"
    assert map_info.returncode == 0, map_info.stderr
    assert json.loads(map_info.stdout)["fingerprint"] == rff.fingerprint
