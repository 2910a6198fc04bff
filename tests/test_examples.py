"""Every script in examples/ runs at a small size and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


def test_examples_each_has_a_header_and_stays_short():
    scripts = sorted(EXAMPLES.glob("*.py"))
    assert len(scripts) >= 8
    for script in scripts:
        text = script.read_text()
        assert text.startswith('"""'), f"{script.name} lacks a header docstring"
        assert len(text.splitlines()) < 100, f"{script.name} is over 100 lines"


def test_example_quickstart_in_memory_estimate_is_close_to_exact():
    out = run_example("quickstart_in_memory.py", "--rows", "400")
    estimate, exact = (float(part.split()[-1]) for part in out.splitlines()[-1].split("exact:"))
    assert abs(estimate - exact) < 0.02


def test_example_zarr_on_disk_round_trips(tmp_path):
    out = run_example("zarr_on_disk.py", "--rows", "4000", "--out", str(tmp_path))
    assert "round trip exact: True" in out


def test_example_merge_sites_merge_equals_whole():
    out = run_example("merge_sites.py", "--rows", "2000")
    assert "merge equals sketching all rows: True" in out
    assert "refused as expected" in out


def test_example_xarray_input_equals_in_memory():
    out = run_example("xarray_input.py", "--rows", "3000")
    assert "equals the in-memory sketch: True" in out


def test_example_kernel_pca_merged_fit_equals_whole():
    out = run_example("kernel_pca.py", "--features", "128")
    assert "merged fit equals whole fit: True" in out


def test_example_drift_monitor_alarms_after_the_change_and_reloads_identically():
    out = run_example("drift_monitor.py", "--features", "128", "--ert", "1000")
    assert "loaded monitor continues identically: True" in out
    assert "alarm before the change: False" in out
    alarm = next(line for line in out.splitlines() if line.startswith("alarm at row"))
    assert 300 <= int(alarm.split()[3]) < 300 + 100  # within one window of the change at row 300


def test_example_submit_to_cluster(dask_cluster):
    out = run_example("submit_to_cluster.py", dask_cluster.address, "--rows", "4000")
    assert "workers: 2" in out
    assert "same as the embedded local default: True" in out


def test_example_object_storage(s3_server):
    env = {
        "STREAMRFF_S3_ENDPOINT": s3_server.endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "STREAMRFF_S3_BUCKET": "example-bucket",
    }
    out = run_example("object_storage.py", "--rows", "2000", "--create-bucket", env=env)
    assert "MeanSketch(count=2000" in out


def test_example_object_storage_without_environment_says_what_is_missing():
    env = {name: "" for name in ("STREAMRFF_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "object_storage.py")], capture_output=True, text=True, timeout=120,
        env={**os.environ, **env},
    )  # fmt: skip
    assert completed.returncode == 1
    assert "needs the environment variables STREAMRFF_S3_ENDPOINT, AWS_ACCESS_KEY_ID" in completed.stderr
    assert "Traceback" not in completed.stderr and "KeyError" not in completed.stderr


def test_example_three_sites_on_moto_merges_to_all_rows():
    out = run_example("three_sites.py", "--rows", "3000")
    assert "fingerprints equal the map's: True" in out
    assert "merged 9,000 rows; merge equals sketching all rows: True" in out


@pytest.mark.parametrize("name", ["kernel_kmeans.py"])
def test_example_kernel_kmeans(name):
    if not (EXAMPLES / name).exists():
        pytest.fail(f"examples/{name} is missing")
    out = run_example(name, "--rows", "2000")
    assert "adjusted Rand index" in out


def test_example_kernel_ridge_accuracy_and_merged_fit():
    out = run_example("kernel_ridge.py", "--features", "1024")
    assert "merged fit predicts like the whole fit: True" in out
    accuracy = float(out.split("digits test accuracy:")[1].split()[0])
    assert accuracy >= 0.985
    r2 = float(out.split("friedman #1 test R^2:")[1].split()[0])
    assert r2 >= 0.93
