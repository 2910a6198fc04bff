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
        "assert sorted(srf.Sketch._registry) == ['cluster', 'index', 'landmark', 'mean', 'nystrom', 'twosample']\n"
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


def _streamrff_imports(path, package: str) -> set[str]:
    """Every streamrff module the file ``path`` of ``package`` imports, at module level or inside functions."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in names if name.startswith("streamrff."))
    return found


def test_sketches_never_reach_the_sketch_reader():
    # Layering maps -> sketches -> fileformat: the sketch classes save through the lower
    # _sketchfile writer; no import of sketches (not even a function-local one), nor of
    # anything it imports, reaches fileformat, which imports the sketch classes.
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "streamrff"
    modules = {}  # module name -> (file, the package its relative imports start from)
    for path in root.rglob("*.py"):
        parts = ("streamrff", *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            modules[".".join(parts[:-1])] = (path, ".".join(parts[:-1]))
        else:
            modules[".".join(parts)] = (path, ".".join(parts[:-1]))
    reached, frontier = set(), ["streamrff.sketches"]
    while frontier:
        name = frontier.pop()
        if name in reached or name not in modules:
            continue
        reached.add(name)
        frontier.extend(_streamrff_imports(*modules[name]))
    assert {"streamrff._sketchfile", "streamrff.maps"} <= reached
    assert "streamrff.fileformat" not in reached, sorted(reached)
