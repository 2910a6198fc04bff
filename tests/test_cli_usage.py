"""A newcomer's rough edges (issue 29): option names, exit codes, every problem at once, early checks.

One sketch runs the console script as a subprocess (what a user types); the other commands run
in-process through the same ``main`` (conftest's ``cli_main``, no interpreter start per command).
The sketches they read are made with the Python API on small in-memory data, and the rows they
report are checked against the rows written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import streamrff as srf


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("streamrff")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "streamrff.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, timeout=180)


def run_in_process(cli_main, *args: str) -> subprocess.CompletedProcess:
    """``run_cli`` through conftest's ``cli_main``: the console script's ``main`` without an interpreter start."""
    code, out, err = cli_main(*args)
    return subprocess.CompletedProcess(["streamrff", *args], code, out, err)


@pytest.fixture(scope="module")
def sketch_files(tmp_path_factory):
    """a8 (8 columns, moments), b8 (8 columns, another seed, no moments), c3 (3 columns, no moments)."""
    folder = tmp_path_factory.mktemp("sketches")
    rng = np.random.default_rng(5)
    rows = {"a8": rng.normal(size=(300, 8)), "b8": rng.normal(size=(200, 8)) + 0.5, "c3": rng.normal(size=(250, 3))}
    made = {
        "a8": srf.sketch_array(rows["a8"], srf.RFF(n_features=32, bandwidth=1.0, seed=0), moments=True),
        "b8": srf.sketch_array(rows["b8"], srf.RFF(n_features=32, bandwidth=1.0, seed=1)),
        "c3": srf.sketch_array(rows["c3"], srf.RFF(n_features=32, bandwidth=1.0, seed=0)),
    }
    paths = {}
    for name, sketch in made.items():
        paths[name] = str(folder / f"{name}.sketch")
        sketch.save(paths[name])
    return paths, rows


# -- item 4: one name per meaning, the old --method a deprecated alias --------------------


def test_cli_test_null_option_and_deprecated_method_alias_give_the_same_result(cli_main, sketch_files, tmp_path):
    paths, rows = sketch_files
    first = srf.load(paths["a8"])
    second = srf.sketch_array(rows["b8"], first.feature_map, moments=True)
    second.save(tmp_path / "b.sketch")

    new = run_in_process(
        cli_main, "test", paths["a8"], str(tmp_path / "b.sketch"), "--null", "hotelling", "--json"
    )
    old = run_in_process(
        cli_main, "test", paths["a8"], str(tmp_path / "b.sketch"), "--method", "hotelling", "--json"
    )

    assert new.returncode == 0 and new.stderr == "", new.stderr
    assert old.returncode == 0, old.stderr
    assert old.stderr.splitlines() == [
        "streamrff test: warning: --method is deprecated and will be removed in the next release; use --null hotelling."
    ]
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert json.loads(new.stdout)["method"] == "hotelling"


@pytest.mark.parametrize(
    "command, new, old",
    [("test", "--null", "--method"), ("sketch", "--sum-method", "--method"), ("kmeans", "--map-kind", "--method"),
     ("kpca", "--map-kind", "--method"), ("map", "--map-kind", "--method")],
)  # fmt: skip
def test_cli_help_names_the_new_option_and_hides_the_deprecated_one(cli_main, command, new, old):
    result = run_in_process(cli_main, command, "--help")

    assert result.returncode == 0
    assert new in result.stdout
    assert f"{old} " not in result.stdout and f"[{old}" not in result.stdout


def test_cli_old_and_new_spelling_that_disagree_exit_2(cli_main, tmp_path):
    result = run_in_process(cli_main, "map", str(tmp_path / "absent.zarr"), "-o", str(tmp_path / "m.json"),
                     "--method", "kjl", "--map-kind", "rff")  # fmt: skip

    assert result.returncode == 2
    assert "--method kjl contradicts --map-kind rff" in result.stderr
    assert not (tmp_path / "m.json").exists()


# -- items 6 and 7: exit codes, every problem at once, a fix that fits the cause ------------


def test_cli_test_reports_missing_moments_and_map_mismatch_together_with_exit_1(cli_main, sketch_files):
    paths, _ = sketch_files

    result = run_in_process(cli_main, "test", paths["a8"], paths["b8"], "--null", "spectral")

    assert result.returncode == 1  # the data are wrong, not the command line
    assert result.stderr.startswith("streamrff test: error: 2 problems with the input sketches:")
    assert f"{paths['b8']} was sketched without second moments, which --null spectral needs" in result.stderr
    assert f"{paths['a8']} and {paths['b8']} were sketched with different maps: seed 0 vs 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_merge_of_different_widths_names_different_data_not_a_map(cli_main, sketch_files, tmp_path):
    paths, _ = sketch_files
    output = tmp_path / "m.sketch"

    result = run_in_process(cli_main, "merge", paths["a8"], paths["c3"], "-o", str(output))

    assert result.returncode == 1
    assert "n_features_in 8 vs 3" in result.stderr
    assert "different widths (8 vs 3 columns), so they are different data" in result.stderr
    assert "--map" not in result.stderr  # no map can fix different data
    assert f"{paths['a8']} and {paths['c3']} differ in second moments" in result.stderr  # the second problem too
    assert not output.exists()


def test_merge_of_different_widths_in_python_names_different_data(sketch_files):
    paths, _ = sketch_files
    with pytest.raises(srf.SketchMismatchError, match=r"different widths \(8 vs 3 columns\)") as raised:
        srf.merge(srf.load(paths["a8"]), srf.load(paths["c3"]).feature_map and srf.load(paths["c3"]))
    assert "feature_map=first.feature_map" not in str(raised.value)


def test_cli_command_line_problems_are_reported_together_with_exit_2(cli_main, sketch_files):
    paths, _ = sketch_files

    result = run_in_process(
        cli_main, "test", paths["a8"], paths["b8"], "--null", "permutation", "--features", "64"
    )

    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "streamrff test: error: 2 problems with the command line:"
    assert "the permutation test needs the data" in lines[1] and "--features do not apply" in lines[2]


# -- item 8: options checked against each other before any data is read ------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["kpca", "--components", "600", "--features", "512"],
         "--components 600 exceeds the width of the feature space, D = 512 (--features 512)"),
        (["kpca", "--components", "1100"], "D = 1024 (the default --features 1024)"),
        (["kpca", "--components", "2", "--landmarks", "50"], "--landmarks applies to --map-kind kjl only"),
        (["kmeans", "--clusters", "2", "--landmarks", "50"], "--landmarks applies to --map-kind kjl only"),
        (["kmeans", "--clusters", "2", "--map-kind", "kjl", "--landmarks", "1"], "--landmarks must be at least 2"),
        (["sketch", "--features", "63"], "--features must be even for --variant sincos"),
        (["map", "--features", "63"], "--features must be even for --variant sincos"),
        (["test", "--features", "63"], "--features must be even for --variant sincos"),
    ],
)  # fmt: skip
def test_cli_contradicting_options_exit_2_before_reading_the_data(tmp_path, args, message, cli_main):
    # The source does not exist: reading it would fail with exit 1, so exit 2 shows that it was never read.
    missing = str(tmp_path / "absent.zarr")
    sources = [missing, missing] if args[0] == "test" else [missing]
    output = tmp_path / "out"

    # In-process (conftest's cli_main: the console script's `main`, without 3 s of interpreter start).
    code, _, err = cli_main(args[0], *sources, "-o" if args[0] != "test" else "--seed", str(output) if args[0] != "test"
                            else "0", *args[1:])  # fmt: skip

    assert code == 2, err
    assert message in err
    assert not output.exists()


def test_cli_demo_refuses_an_odd_feature_count_before_writing_data(cli_main, tmp_path):
    out = tmp_path / "demo"

    result = run_in_process(cli_main, "demo", "--rows", "1000", "--features", "255", "--out", str(out))

    assert result.returncode == 2
    assert "--features must be even" in result.stderr
    # --out is the old spelling of -o/--output: still taken for one release, with a warning.
    assert "--out is deprecated" in result.stderr and "use -o/--output" in result.stderr
    assert not out.exists()


def test_cli_kpca_components_beyond_the_width_of_a_map_file_exit_2(cli_main, sketch_files, tmp_path):
    paths, _ = sketch_files

    result = run_in_process(cli_main, "kpca", str(tmp_path / "absent.zarr"), "--components", "40", "--map", paths["a8"],
                     "-o", str(tmp_path / "s.zarr"))  # fmt: skip

    assert result.returncode == 2
    assert f"D = 32 (the map of --map {paths['a8']})" in result.stderr


# -- item 3: sketch and merge say how many rows ------------------------------------------


def test_cli_sketch_and_merge_print_the_rows_they_sketched_and_merged(cli_main, tmp_path):
    rng = np.random.default_rng(9)
    for name, n_rows in (("a", 1_234), ("b", 766)):
        zarr.create_array(str(tmp_path / f"{name}.zarr"), data=rng.normal(size=(n_rows, 3)).astype(np.float32),
                          chunks=(500, 3))  # fmt: skip
    sketched = run_cli(  # the console script, in a subprocess
        "sketch", str(tmp_path / "a.zarr"), "-o", str(tmp_path / "a.sketch"), "--features", "16"
    )
    assert sketched.returncode == 0, sketched.stderr
    assert sketched.stdout.splitlines()[0] == f"wrote {tmp_path / 'a.sketch'}: 1,234 rows sketched"
    other = run_in_process(cli_main, "sketch", str(tmp_path / "b.zarr"), "-o", str(tmp_path / "b.sketch"), "--map",
                    str(tmp_path / "a.sketch"), "--json")  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["count"] == 766

    merged = run_in_process(
        cli_main, "merge", str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch"), "-o", str(tmp_path / "ab")
    )
    merged_json = run_in_process(cli_main, "merge", str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch"), "-o",
                          str(tmp_path / "ab2"), "--json")  # fmt: skip

    assert merged.stdout.splitlines()[0] == f"merged 2 sketches (2,000 rows) into {tmp_path / 'ab'}"
    payload = json.loads(merged_json.stdout)
    assert payload["count"] == 2_000 and payload["input_counts"] == [1_234, 766]
