"""``import streamrff`` is lazy (so ``streamrff --help`` stays fast) but behaves as the eager import did."""

from __future__ import annotations

import subprocess
import sys


def test_package_public_names_and_submodules_resolve_in_a_fresh_process():
    probe = (
        "import sys, streamrff as srf\n"
        "assert 'dask' not in sys.modules and 'numba' not in sys.modules\n"
        "from streamrff.maps import RFF\n"
        "from streamrff.fileformat import load\n"
        "assert srf.RFF is RFF and srf.load is load\n"
        "missing = [name for name in srf.__all__ if getattr(srf, name, None) is None]\n"
        "assert not missing, missing\n"
        "assert srf.io.as_row_chunked and srf.engine.sketch is srf.sketch\n"
        "assert sorted(srf.Sketch._registry) == "
        "['cluster', 'index', 'landmark', 'mean', 'nystrom', 'regression', 'twosample']\n"
        "assert set(srf.__all__) <= set(dir(srf)) and srf.__version__\n"
        "print('ok')\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"


def test_package_ships_its_type_hints_marker():
    # PEP 561: type checkers use the inline hints of an installed package only if it ships py.typed.
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with open(root / "pyproject.toml", "rb") as handle:
        package_data = tomllib.load(handle)["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["streamrff"]
    assert (root / "streamrff" / "py.typed").is_file()
