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
        "['cluster', 'index', 'landmark', 'mean', 'nystrom', 'nystrom-regression', 'regression', 'twosample']\n"
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


def _module_imports() -> dict[str, set[str]]:
    """``{module: modules of streamrff it imports}``, function-local imports included, package ``__init__`` aside."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "streamrff"
    modules = {
        ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): path
        for path in package.rglob("*.py")
    }
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name in packages:
            continue
        base = name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                stem = node.module or ""
                if node.level:
                    stem = ".".join(base[: len(base) - node.level + 1] + ([stem] if stem else []))
                for alias in node.names:
                    target = f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem
                    targets.add(target)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {target for target in targets if target in modules and target not in packages} - {name}
    return graph


def test_package_import_graph_has_no_cycle_counting_function_local_imports():
    graph = _module_imports()
    state: dict[str, str] = {}
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert len(graph) > 30 and "streamrff.engine" in graph["streamrff.kpca"]  # the walk sees the package
    assert not cycles, " ; ".join(" -> ".join(cycle) for cycle in cycles)


def test_package_modules_stay_under_900_lines():
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "streamrff"
    long_modules = {
        str(path.relative_to(package)): n
        for path in package.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 900
    }
    assert not long_modules, f"split these modules (the house keeps modules under 900 lines): {long_modules}"
