"""The CLI answers like a Unix tool (#50 item 8): light start, no abbreviations, "did you mean"."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

import pytest

from streamrff.cli import build_parser, main

HEAVY = ("sklearn", "distributed", "numba", "xarray", "zarr", "dask", "numpy")

PROBE = """
import sys
{setup}
print(",".join(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


def _heavy_modules_after(setup: str) -> str:
    code = PROBE.format(setup=setup, heavy=HEAVY)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_help_and_errors_import_no_heavy_module() -> None:
    help_run = (
        "import contextlib, io\nfrom streamrff.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(['--help'])\n"
        "    except SystemExit:\n        pass"
    )
    assert _heavy_modules_after(help_run) == ""
    assert _heavy_modules_after("import streamrff.errors") == ""


def test_not_fitted_error_is_still_sklearns() -> None:
    from sklearn.exceptions import NotFittedError

    import streamrff.errors as errors

    assert issubclass(errors.NotFittedMapError, NotFittedError)
    assert issubclass(errors.NotFittedMapError, errors.StreamRFFError)
    assert errors.NotFittedMapError is errors.NotFittedMapError


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["sketch", "x.zarr", "-o", "y", "--feature", "64"], "did you mean --features?"),
        (["skecth", "x.zarr"], "did you mean sketch?"),
        (["sketch", "x.zarr", "-o", "y", "--moment"], "did you mean --moments?"),
    ],
)
def test_abbreviation_refused_with_suggestion(argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert hint in capsys.readouterr().err


def test_closed_pipe_is_quiet(tmp_path: object) -> None:
    import numpy as np

    import streamrff as srf

    path = str(tmp_path / "x.sketch")  # type: ignore[operator]
    rows = np.random.default_rng(0).normal(size=(20, 3)).astype("float32")
    srf.sketch_array(rows, srf.RFF(n_features=8, bandwidth=1.0, seed=0)).save(path)
    code = (
        "import os, sys\nread, write = os.pipe()\nos.close(read)\nos.dup2(write, 1)\n"
        f"from streamrff.cli import main\nsys.exit(main(['info', {path!r}]))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 141
    assert run.stderr == ""


def _command_parsers(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """``(words, parser)`` for every command and sub-command (``store append``, ...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*prefix, name), child
                yield from _command_parsers(child, (*prefix, name))


def test_help_fits_80_columns_and_every_example_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    commands = list(_command_parsers(parser))
    assert len(commands) > 10
    checked = 0
    for words, child in commands:
        text = child.format_help()
        too_wide = [line for line in text.splitlines() if len(line) > 80]
        assert not too_wide, (words, too_wide)
        lines = text[text.find("example:") :].splitlines() if "example:" in text else []
        for index, line in enumerate(lines):
            if "streamrff " not in line:
                continue
            command, follow = line[line.index("streamrff ") + len("streamrff ") :], index
            while command.endswith("\\"):
                follow += 1
                command = command.removesuffix("\\") + lines[follow].strip()
            args = shlex.split(command)
            if tuple(args[: len(words)]) == words:  # not a line naming another command
                parser.parse_args(args)  # a usage error would exit 2 here
                checked += 1
    assert checked >= 20
