"""#49 item 6: every fault ends in one line and a documented status, fast and bounded (real subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "streamrff.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("kind", ["device", "fifo", "folder", "oversized"])
def test_option_file_is_read_only_if_regular_and_small(tmp_path: Path, kind: str, cli_main) -> None:
    if kind == "device":
        path = "/dev/zero"
    elif kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)  # nobody writes: a blocking open would hang
    elif kind == "folder":
        path = str(tmp_path)
    else:
        path = str(tmp_path / "big.json")
        Path(path).write_text(" " * (2 << 20))
    started = time.monotonic()
    result = cli_main("info", str(tmp_path / "x.sketch"), "--storage-options", "@" + path)
    assert time.monotonic() - started < 10
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    line = lines[0]
    assert f"--storage-options file {path}" in line
    assert ("larger than" if kind == "oversized" else "not a regular file") in line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--ert", "1e308"], "argument --ert: expected a number of rows > 1 and <= 1e12"),
        (["--ert", "1000", "--poll", "1e308", "--follow"], "argument --poll: expected a number from 0 to 1e+07"),
        (["--ert", "1000", "--plot", "out.txt"], "unsupported figure format 'txt'"),
        (["--ert", "1000", "--plot", "nodir/out.png"], "does not exist"),
    ],
)
def test_watch_refuses_extreme_options_and_bad_plot_paths_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_main, extra: list[str], expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "never-read.zarr")  # refused before the source is opened
    result = cli_main("watch", missing, "--reference", missing, "--window", "50", *extra)
    assert result.code == 2
    last = result.err.strip().splitlines()[-1]
    assert "Traceback" not in result.err and expected in last, result.err
    assert not (tmp_path / "out.txt").exists()


def test_a_source_declaring_too_many_column_chunks_is_refused_fast(tmp_path: Path, cli_main) -> None:
    import zarr

    path = str(tmp_path / "wide.zarr")  # metadata only: 2^40 columns in chunks of 2^20, nothing written
    zarr.create_array(path, shape=(100, 2**40), chunks=(100, 2**20), dtype="float32")
    started = time.monotonic()
    result = cli_main("sketch", path, "--features", "8", "-o", str(tmp_path / "s.sketch"))
    assert time.monotonic() - started < 10
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    assert "1,048,576 chunks of 1,048,576 columns" in lines[0]
    assert not (tmp_path / "s.sketch").exists()


def test_watch_plot_keeps_a_bounded_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_zarr, cli_main
) -> None:
    import numpy as np

    from streamrff.cli import watch

    values = [np.arange(0, 5.0), np.arange(5, 12.0), np.arange(12, 15.0)]
    thresholds = [v + 100 for v in values]
    assert watch.keep_recent(values, thresholds, 6) == 9
    np.testing.assert_array_equal(np.concatenate(values), np.arange(9, 15.0))
    np.testing.assert_array_equal(np.concatenate(thresholds), np.arange(109, 115.0))
    monkeypatch.setattr(watch, "PLOT_HISTORY_ROWS", 120)
    data = tmp_zarr(np.random.default_rng(0).normal(size=(400, 3)).astype("float32"), 100)
    plot = tmp_path / "drift.png"
    result = cli_main("watch", data, "--reference", data, "--window", "20", "--ert", "1000", "--plot", str(plot))
    assert result.code in (0, 1) and "Traceback" not in result.err, result.err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- extreme numeric options: refused by the parser (status 2, one line) before anything is read ---------------


@pytest.mark.parametrize(
    ("command", "option", "value", "expected"),
    [
        ("watch", "--bandwidth", "1e308", "a number from 1e-30 to 1e+30"),
        ("watch", "--bandwidth", "1e-308", "a number from 1e-30 to 1e+30"),
        ("watch", "--seed", "-1", "an integer from 0 to 2^63 - 1"),
        ("watch", "--max-rows", "99999999999999999999", "a positive integer up to 2^62"),
        ("sketch", "--bandwidth", "inf", "a number from 1e-30 to 1e+30"),
        ("sketch", "--column-bandwidth", "1e308", "a number from 1e-30 to 1e+30"),
        ("sketch", "--chunk-rows", "99999999999999999999", "a positive integer up to 2^62"),
        ("sketch", "--seed", "99999999999999999999", "an integer from 0 to 2^63 - 1"),
        ("test", "--bandwidths", "1,1e308", "numbers from 1e-30 to 1e+30"),
        ("test", "--bandwidth", "nan", "a number from 1e-30 to 1e+30"),
        ("test", "--permutations", "99999999999999999999", "a positive integer up to 2^62"),
    ],
)
def test_extreme_numeric_options_are_refused_in_one_line(
    tmp_path: Path, cli_main, command: str, option: str, value: str, expected: str
) -> None:
    missing = str(tmp_path / "never-read.zarr")
    head = {
        "watch": ["watch", missing, "--reference", missing, "--window", "20", "--ert", "100"],
        "sketch": ["sketch", missing, "-o", str(tmp_path / "s.sketch")],
        "test": ["test", missing, missing],
    }[command]
    result = cli_main(*head, option, value)
    assert result.code == 2
    assert "Traceback" not in result.err
    last = result.err.strip().splitlines()[-1]
    assert f"argument {option}: expected " in last and expected in last and repr(value) in last, result.err


def test_every_numeric_option_of_watch_sketch_and_test_refuses_non_finite_and_out_of_range_values() -> None:
    """The sweep of issue 49: inf, nan, 1e308, -1, 0 and 2^70 for every typed option of the three commands."""
    import argparse

    from streamrff.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    # What each option may take, by an independent reading of its meaning (None: refused).
    allowed_zero = {"--poll", "--settle", "--missing-chunk-timeout", "--save-interval", "--seed", "--from-row"}
    for name in ("watch", "sketch", "test"):
        for action in commands[name]._actions:
            if not action.option_strings or action.type is None or action.option_strings[-1] == "--classes":
                continue
            option = action.option_strings[-1]
            for text in ("inf", "-inf", "nan", "1e308", "-1", "0", str(2**70)):
                try:
                    value = action.type(text)
                except (argparse.ArgumentTypeError, ValueError):  # argparse makes a ValueError a usage error too
                    continue
                if option == "--from-row" and text == "-1":
                    continue  # refused after parsing, with the other usage problems (test above for watch)
                if option == "--from-row" and text == str(2**70):
                    continue  # past the end: refused with the source's row count
                if "bandwidth" in option and text == str(2**70):
                    continue  # 1.2e21: a kernel width within float32's reach (its frequencies are 1e-21)
                assert text == "0" and option in allowed_zero, f"{name} {option} {text} accepted as {value!r}"
