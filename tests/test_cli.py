"""The ``streamrff`` command line: exit codes, messages, JSON output, real cluster and S3.

Most commands run in-process through :func:`streamrff.cli.main` (fast: conftest's ``cli_main``
fixture); the ones that matter as processes (``--scheduler``, ``--storage-options``, ``-v``
logging, ``demo``) run the installed console script in a subprocess. References are the Python
API's in-memory path (:func:`streamrff.sketch_array`).
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import zarr

import streamrff as srf

N_ROWS, N_COLUMNS, N_FEATURES = 20_000, 8, 128
X = (np.random.default_rng(0).standard_normal((N_ROWS, N_COLUMNS)) * np.linspace(0.5, 2.0, N_COLUMNS)).astype(
    np.float32
)
COMMANDS = ["sketch", "merge", "info", "demo"]
#: Secret-looking storage options: accepted by moto, never to be printed.
SECRET_KEY_ID = "AKIASTREAMRFFKEYID0042"
SECRET_ACCESS_KEY = "wJalrXUtnFEMI-K7MDENG-streamrff-SECRET"


def cli_command() -> list[str]:
    script = Path(sys.executable).with_name("streamrff")
    return [str(script)] if script.exists() else [sys.executable, "-m", "streamrff.cli"]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def assert_sketches_close(actual, expected, rtol: float) -> None:
    assert actual.fingerprint == expected.fingerprint
    assert actual.count == expected.count
    scale = np.abs(expected.feature_sum).max()
    np.testing.assert_allclose(actual.feature_sum, expected.feature_sum, rtol=0, atol=rtol * scale)
    if expected.has_moments:
        np.testing.assert_allclose(actual.moment, expected.moment, rtol=0, atol=rtol * np.abs(expected.moment).max())


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def closed_port_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def data_zarr(tmp_zarr) -> str:
    return tmp_zarr(X, 1_000, name="data.zarr")


# -- help and usage ------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_cli_help_of_every_command_shows_an_example(cli_main, command):
    code, out, _ = cli_main(command, "--help")

    assert code == 0
    assert re.search(rf"example: streamrff {command} ", out)


def test_cli_console_script_help_and_version(cli_main):
    top = run_cli("--help")
    code, out, _ = cli_main("--version")

    assert top.returncode == 0
    assert all(command in top.stdout for command in COMMANDS)
    assert code == 0 and out.startswith("streamrff ")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bandwidth", "-1"], "--bandwidth: expected a positive number or 'median'"),
        (["--bandwidth", "wide"], "--bandwidth: expected a positive number or 'median'"),
        (["--features", "0"], "--features: expected a positive integer"),
        (["--chunk-rows", "1.5"], "--chunk-rows: expected a positive integer"),
        (["--storage-options", "{bad json"], "--storage-options must be a JSON object"),
        (["--storage-options", "[1, 2]"], "--storage-options must be a JSON object. Got list"),
        (["--on-invalid", "ignore"], "--on-invalid: invalid choice"),
    ],
)
def test_cli_usage_errors_exit_2_and_write_nothing(cli_main, data_zarr, tmp_path, args, message):
    output = tmp_path / "out.sketch"

    code, out, err = cli_main("sketch", data_zarr, "-o", str(output), *args)

    assert code == 2
    assert message in err
    assert out == ""
    assert not output.exists()


def test_cli_usage_errors_exit_2_from_the_console_script(cli_main, data_zarr, tmp_path):
    bad_json = run_cli("sketch", data_zarr, "-o", str(tmp_path / "o.sketch"), "--storage-options", "{nope")
    missing_output = cli_main("sketch", data_zarr)
    no_command = cli_main()

    assert bad_json.returncode == 2
    assert "streamrff sketch: error: --storage-options must be a JSON object" in bad_json.stderr
    assert not (tmp_path / "o.sketch").exists()
    assert missing_output[0] == 2 and "-o/--output" in missing_output[2]
    assert no_command[0] == 2 and "usage: streamrff" in no_command[2]


# -- sketch, info, merge -------------------------------------------------------------------


def test_cli_sketch_json_matches_sketch_array(cli_main, data_zarr, tmp_path):
    output = tmp_path / "out.sketch"

    code, out, err = cli_main(
        "sketch",
        data_zarr,
        "-o",
        str(output),
        "--features",
        str(N_FEATURES),
        "--moments",
        "--seed",
        "4",
        "--json",
    )

    assert code == 0, err
    summary = json.loads(out)
    loaded = srf.load(output)
    reference = srf.sketch_array(X, srf.RFF(n_features=N_FEATURES, bandwidth="median", seed=4), moments=True)
    assert summary["count"] == N_ROWS
    assert summary["fingerprint"] == loaded.fingerprint == reference.fingerprint
    assert summary["map"]["bandwidth"] == reference.feature_map.bandwidth_
    assert summary["has_moments"] is True and summary["n_invalid"] == 0
    assert_sketches_close(loaded, reference, rtol=1e-6)

    code, out, _ = cli_main("info", str(output), "--json")
    assert code == 0
    assert json.loads(out) == summary


def test_cli_sketch_float64_features(cli_main, data_zarr, tmp_path):
    output = tmp_path / "out64.sketch"
    code, _, err = cli_main("sketch", data_zarr, "-o", str(output), "--features", "64", "--dtype", "float64")
    assert code == 0, err
    loaded = srf.load(output)
    params = loaded.feature_map._params()
    phase = X.astype(np.float64) @ params["frequencies"].T
    Z = np.hstack([np.cos(phase), np.sin(phase)]) / np.sqrt(phase.shape[1])
    np.testing.assert_allclose(loaded.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-12 * np.abs(Z.sum(axis=0)).max())


def test_cli_sketch_text_output_and_info(cli_main, data_zarr, tmp_path):
    output = tmp_path / "out.sketch"

    code, out, _ = cli_main("sketch", data_zarr, "-o", str(output), "--features", "64", "--bandwidth", "2.0")
    info_code, info_out, _ = cli_main("info", str(output))

    assert code == 0 and info_code == 0
    assert f"wrote {output}" in out
    assert "mean sketch of 20,000 rows" in info_out
    assert "bandwidth=2.0" in info_out


def test_cli_sketch_existing_output_is_refused_and_unchanged(cli_main, data_zarr, tmp_path):
    output = tmp_path / "out.sketch"
    assert cli_main("sketch", data_zarr, "-o", str(output), "--features", "64")[0] == 0
    before = snapshot(output)

    code, out, err = cli_main("sketch", data_zarr, "-o", str(output), "--features", "32")

    assert code == 2  # bad usage, as in every command
    assert f"streamrff sketch: error: {output} already exists. Pass --overwrite to replace it" in err
    assert snapshot(output) == before

    code, _, err = cli_main("sketch", data_zarr, "-o", str(output), "--features", "32", "--overwrite")
    assert code == 0, err
    assert srf.load(output).feature_sum.shape == (32,)


def test_cli_sketch_bad_data_exits_1_and_writes_nothing(cli_main, tmp_zarr, tmp_path):
    output = tmp_path / "out.sketch"
    cases = {
        str(tmp_path / "missing.zarr"): "missing.zarr: the path does not exist",
        tmp_zarr(np.arange(30).astype("datetime64[s]").reshape(10, 3), 5, name="dates.zarr"): "real numbers",
        tmp_zarr(np.ones(100, dtype=np.float32), 10, name="flat.zarr"): "Expected 2-D data",
    }
    for source, message in cases.items():
        code, out, err = cli_main("sketch", source, "-o", str(output))

        assert code == 1, source
        assert err.startswith("streamrff sketch: error: ") and message in err
        assert "Traceback" not in err
        assert not output.exists()


def test_cli_sketch_nan_rows_raise_or_skip(cli_main, tmp_zarr, tmp_path):
    rows = X.copy()
    rows[[3_003, 3_500], 2] = np.nan
    source = tmp_zarr(rows, 1_000)
    output = tmp_path / "out.sketch"

    code, _, err = cli_main("sketch", source, "-o", str(output), "--features", "64")
    assert code == 1
    assert "2 row(s) of data chunk 3 (rows 3000..3999); first bad row: data row 3003" in err
    assert "--on-invalid skip" in err
    assert not output.exists()

    code, out, _ = cli_main("sketch", source, "-o", str(output), "--features", "64", "--on-invalid", "skip", "--json")
    assert code == 0
    summary = json.loads(out)
    assert (summary["count"], summary["n_invalid"]) == (N_ROWS - 2, 2)
    loaded = srf.load(output)
    finite = np.isfinite(rows).all(axis=1)
    expected = srf.sketch_array(rows[finite], loaded.feature_map)
    np.testing.assert_allclose(
        loaded.feature_sum, expected.feature_sum, rtol=0, atol=1e-6 * np.abs(expected.feature_sum).max()
    )


def test_cli_merge_of_halves_equals_whole(cli_main, tmp_zarr, tmp_path):
    halves = [tmp_zarr(X[:12_000], 1_000, name="a.zarr"), tmp_zarr(X[12_000:], 1_000, name="b.zarr")]
    parts = []
    for index, source in enumerate(halves):
        parts.append(str(tmp_path / f"part{index}.sketch"))
        assert cli_main("sketch", source, "-o", parts[-1], "--features", "64", "--bandwidth", "1.5")[0] == 0

    code, out, err = cli_main("merge", *parts, "-o", str(tmp_path / "all.sketch"), "--json")

    assert code == 0, err
    assert json.loads(out)["inputs"] == parts
    merged = srf.load(tmp_path / "all.sketch")
    assert_sketches_close(merged, srf.sketch_array(X, merged.feature_map), rtol=1e-6)


IMPORTS_AFTER = """
import json, sys
from streamrff.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
print(json.dumps({"codes": codes, "sklearn": "sklearn" in sys.modules}))
"""


@pytest.mark.parametrize(
    "feature_map",
    [
        srf.RFF(n_features=32, bandwidth=1.5, seed=3),
        srf.RFF(n_features=32, bandwidth=1.5, variant="cosphase", orthogonal=True),
        srf.RelativeErrorRFF(n_features=32, bandwidth=1.5),
        srf.JL(srf.RFF(n_features=64, bandwidth=1.5), n_components=16),
    ],
    ids=["rff", "cosphase", "relative", "jl"],
)
def test_info_and_merge_read_without_scikit_learn_and_write_what_the_library_writes(feature_map, tmp_path):
    rows = X[:600, :3]
    fitted = feature_map.fit(rows)
    parts = [srf.sketch_array(half, fitted, moments=True) for half in (rows[:250], rows[250:])]
    paths = [str(tmp_path / f"part{index}.sketch") for index in range(2)]
    for part, path in zip(parts, paths):
        part.save(path)
    merged_path, sums_path = str(tmp_path / "merged.sketch"), str(tmp_path / "sums.sketch")
    srf.sketch_array(rows[:250], fitted).save(sums_path)  # info of a moment sketch adds kernel PCA's spectrum
    argvs = [["info", sums_path, "--json"], ["merge", *paths, "-o", merged_path]]

    ran = subprocess.run(
        [sys.executable, "-c", IMPORTS_AFTER, json.dumps(argvs)], capture_output=True, text=True, timeout=120
    )

    report = json.loads(ran.stdout.splitlines()[-1])
    assert report == {"codes": [0, 0], "sklearn": False}, ran.stderr
    described = json.loads(ran.stdout[: ran.stdout.index("\n}") + 2])
    assert described["fingerprint"] == fitted.fingerprint and described["count"] == 250
    merged = srf.load(merged_path)  # the whole check of the library's reader, with the estimator
    expected = parts[0].merge(parts[1])
    assert merged.fingerprint == fitted.fingerprint and merged.count == 600
    np.testing.assert_array_equal(merged.feature_sum, expected.feature_sum)
    np.testing.assert_array_equal(merged.moment, expected.moment)
    Z = fitted.transform(rows).astype(np.float64)  # independent of any sketch: the features themselves
    np.testing.assert_allclose(merged.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-4)


def test_info_refuses_a_sketch_whose_spec_no_longer_matches_its_fingerprint(cli_main, tmp_path):
    path = tmp_path / "s.sketch"
    srf.sketch_array(X[:100, :3], srf.RFF(n_features=16, bandwidth=1.0, seed=1)).save(path)
    document = json.loads((path / "zarr.json").read_text())
    attributes = document["attributes"]
    spec_key = next(key for key in attributes if isinstance(attributes[key], dict) and "seed" in attributes[key])
    attributes[spec_key]["seed"] = 2  # another map, same stored fingerprint
    (path / "zarr.json").write_text(json.dumps(document))

    code, out, err = cli_main("info", str(path))

    assert code == 1 and out == "" and str(path) in err and "Traceback" not in err


def test_cli_merge_of_different_maps_names_both(cli_main, data_zarr, tmp_path):
    for seed in ("1", "2"):
        assert (
            cli_main("sketch", data_zarr, "-o", str(tmp_path / f"s{seed}"), "--features", "32", "--seed", seed)[0] == 0
        )
    fingerprints = [srf.load(tmp_path / f"s{seed}").fingerprint[:16] for seed in ("1", "2")]

    code, _, err = cli_main("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "-o", str(tmp_path / "m"))

    assert code == 1
    assert all(fingerprint in err for fingerprint in fingerprints)
    assert not (tmp_path / "m").exists()


def test_cli_info_of_something_else_exits_1(cli_main, data_zarr, tmp_path):
    code, out, err = cli_main("info", data_zarr)
    missing_code, _, missing_err = cli_main("info", str(tmp_path / "nothing"))

    assert code == 1 and "is a zarr array, not a streamrff sketch" in err
    assert missing_code == 1 and "does not exist" in missing_err
    assert out == ""


# -- real cluster, object storage ----------------------------------------------------------


def test_cli_sketch_on_cluster_with_relative_paths(dask_cluster, tmp_path):
    # Relative source and checkpoint: the workers run in another directory.
    zarr.create_array(str(tmp_path / "data.zarr"), data=X, chunks=(2_000, N_COLUMNS), zarr_format=3)

    result = run_cli(
        "sketch",
        "data.zarr",
        "-o",
        "out.sketch",
        "--features",
        str(N_FEATURES),
        "--moments",
        "--checkpoint",
        "ckpt",
        "--scheduler",
        dask_cluster.address,
        "--json",
        cwd=tmp_path,
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["count"] == N_ROWS
    loaded = srf.load(tmp_path / "out.sketch")
    assert_sketches_close(
        loaded, srf.sketch_array(X, srf.RFF(n_features=N_FEATURES, bandwidth="median"), moments=True), rtol=1e-6
    )
    assert len(list((tmp_path / "ckpt").glob("*/rows-*.zarr"))) == N_ROWS // 2_000
    embedded = srf.sketch(str(tmp_path / "data.zarr"), loaded.feature_map, moments=True)
    assert_sketches_close(loaded, embedded, rtol=1e-12)


def test_unreachable_scheduler_fails_naming_address_in_api_and_cli(data_zarr, tmp_path):
    # Both wait out the same connect timeout, so they run side by side.
    address = closed_port_address()
    command = [*cli_command(), "sketch", data_zarr, "-o", str(tmp_path / "out.sketch"), "--scheduler", address]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        with ThreadPoolExecutor(max_workers=1) as pool:
            job = pool.submit(srf.sketch, X[:100], srf.RFF(n_features=32, bandwidth=1.0), client=address)
            with pytest.raises(srf.ClusterError, match=re.escape(address)):
                job.result(timeout=30)
        _, stderr = process.communicate(timeout=60)

    assert process.returncode == 1
    assert stderr.startswith("streamrff sketch: error: Cannot reach the Dask scheduler at " + address)
    assert "Traceback" not in stderr
    assert not (tmp_path / "out.sketch").exists()


def test_cli_sketch_s3_to_s3_with_storage_options(cli_main, s3_server, s3_bucket):
    options = json.dumps(s3_server.storage_options)
    store = zarr.storage.FsspecStore.from_url(
        f"s3://{s3_bucket}/x.zarr", storage_options=s3_server.storage_options, read_only=False
    )
    zarr.create_array(store=store, data=X, chunks=(5_000, N_COLUMNS), zarr_format=3)
    output = f"s3://{s3_bucket}/x.sketch"

    result = run_cli(
        "sketch", f"s3://{s3_bucket}/x.zarr", "-o", output, "--features", "64", "--storage-options", options, "--json"
    )
    info = cli_main("info", output, "--storage-options", options, "--json")
    again = cli_main("sketch", f"s3://{s3_bucket}/x.zarr", "-o", output, "--storage-options", options)

    assert result.returncode == 0, result.stderr
    assert info[0] == 0, info[2]
    assert json.loads(info[1]) == json.loads(result.stdout)
    loaded = srf.load(output, storage_options=s3_server.storage_options)
    assert_sketches_close(loaded, srf.sketch_array(X, srf.RFF(n_features=64, bandwidth="median")), rtol=1e-6)
    assert again[0] == 2 and f"{output} already exists. Pass --overwrite" in again[2]


def test_cli_missing_bucket_exits_1(cli_main, s3_server, tmp_path):
    options = json.dumps(s3_server.storage_options)

    code, _, err = cli_main(
        "sketch",
        "s3://streamrff-no-such-bucket/x.zarr",
        "-o",
        str(tmp_path / "o"),
        "--storage-options",
        options,
    )

    assert code == 1
    assert "s3://streamrff-no-such-bucket/x.zarr" in err
    assert not (tmp_path / "o").exists()


def test_cli_never_prints_storage_options(cli_main, caplog, s3_server, s3_bucket):
    secret_options = dict(s3_server.storage_options, key=SECRET_KEY_ID, secret=SECRET_ACCESS_KEY)
    options = json.dumps(secret_options)
    store = zarr.storage.FsspecStore.from_url(
        f"s3://{s3_bucket}/x.zarr", storage_options=secret_options, read_only=False
    )
    zarr.create_array(store=store, data=X[:2_000], chunks=(500, N_COLUMNS), zarr_format=3)
    output = f"s3://{s3_bucket}/x.sketch"

    # One real process with -v (INFO logging of every library to stderr) ...
    sketched = run_cli(
        "sketch", f"s3://{s3_bucket}/x.zarr", "-o", output, "--features", "32", "--storage-options", options, "-v"
    )
    assert sketched.returncode == 0, sketched.stderr
    assert "streamrff.engine: sketching" in sketched.stderr  # -v does log
    texts = {"sketch -v": sketched.stdout + sketched.stderr}
    # ... and the other commands in-process, with every INFO log record captured like -v.
    caplog.set_level(logging.INFO)
    runs = {
        "info -v": ["info", output, "--storage-options", options, "-v"],
        "info --json": ["info", output, "--storage-options", options, "--json"],
        "info missing": ["info", f"s3://{s3_bucket}/missing.sketch", "--storage-options", options],
        "sketch missing": [
            "sketch",
            f"s3://{s3_bucket}/missing.zarr",
            "-o",
            f"s3://{s3_bucket}/o",
            "--storage-options",
            options,
        ],
        "merge onto existing": ["merge", output, output, "-o", output, "--storage-options", options],
    }
    codes = {}
    for name, args in runs.items():
        caplog.clear()
        codes[name], out, err = cli_main(*args)
        texts[name] = out + err + "\n".join(record.getMessage() for record in caplog.records)

    assert codes == {"info -v": 0, "info --json": 0, "info missing": 1, "sketch missing": 1, "merge onto existing": 2}
    assert "fingerprint" in texts["info --json"]
    for name, text in texts.items():
        assert SECRET_KEY_ID not in text, name
        assert SECRET_ACCESS_KEY not in text, name


# -- demo ----------------------------------------------------------------------------------


@pytest.mark.slow  # about 15 s: the whole demo at its Quickstart size (CI's Quickstart step runs it too)
def test_cli_demo_writes_report_with_finite_mmd(tmp_path):
    out = tmp_path / "demo"

    result = run_cli("demo", "--rows", "20000", "-o", str(out))

    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert f"MMD^2 (unbiased) between the sites: {report['mmd2_unbiased']:.3e}" in result.stdout
    sizes = report["kmeans_on_sample"]["cluster_sizes"]
    assert f"cluster sizes {sizes}" in result.stdout and sum(sizes) == report["kmeans_on_sample"]["rows"]
    assert report["kmeans_on_sample"]["stop_reason"] in ("converged", "max_iter")
    kpca = report["kpca"]
    assert 0 < kpca["residual_fraction"] < 1 and "R_k" in kpca["residual_meaning"]
    shared = srf.load_map(out / "map.json")  # one map pooled across both sites, as `streamrff map` writes
    assert shared.spec == report["map"]
    # The map is written once; each test refers to it by fingerprint (issue 29: it was repeated 4 times).
    assert json.dumps(report).count('"n_features_in"') == 1
    for name, test in report["tests"].items():
        assert "map" not in test and test["map_fingerprint"] == shared.fingerprint, name
    # The sites differ in the share of rows of one cluster (clusters 1 and 2 trade 5%): k-means shows it.
    shares = report["kmeans_on_sample"]["cluster_shares_by_site"]
    gaps = sorted(abs(a - b) for a, b in zip(shares["site_a"], shares["site_b"]))
    assert gaps[0] < 0.02 and gaps[1] > 0.02 and gaps[2] > 0.02
    assert "cluster shares, site A vs site B" in result.stdout
    # A monitor on site A's sketch: no alarm in site A's rows, the alarm after site B's rows began.
    drift = report["drift"]
    assert not drift["alarm_during_calm_rows"] and drift["calm_rows"] <= drift["alarm_row"] < 25_000
    assert f"alarm at row {drift['alarm_row']:,} of the stream" in result.stdout
    assert all(test["p_value"] < 0.05 for test in report["tests"].values())  # the tests detect the shift
    assert report["rows_per_site"] == 20_000 and report["pooled_count"] == 40_000
    assert math.isfinite(report["mmd2_unbiased"]) and math.isfinite(report["mmd2_biased"])
    assert report["mmd2_biased"] >= 0
    pooled = srf.load(out / "pooled.sketch")
    assert pooled.count == 40_000 and pooled.has_moments
    site_a, site_b = srf.load(out / "site_a.sketch"), srf.load(out / "site_b.sketch")
    assert site_a.fingerprint == site_b.fingerprint == shared.fingerprint
    mean_gap = site_a.feature_sum / site_a.count - site_b.feature_sum / site_b.count
    assert report["mmd2_biased"] == pytest.approx(float(mean_gap @ mean_gap), rel=1e-9)
    shutil.rmtree(out)
