"""``import streamrff`` is lazy (so ``streamrff --help`` stays fast) but behaves as the eager import did."""

from __future__ import annotations

import subprocess
import sys


def test_package_public_names_and_submodules_resolve_in_a_fresh_process():
    probe = (
        "import sys, streamrff as srf\n"
        "assert 'dask' not in sys.modules and 'numba' not in sys.modules\n"
        "from streamrff.maps import RFF\n"
        "from streamrff.sketches import load\n"
        "assert srf.RFF is RFF and srf.load is load\n"
        "missing = [name for name in srf.__all__ if getattr(srf, name, None) is None]\n"
        "assert not missing, missing\n"
        "assert srf.sources.as_row_chunked and srf.engine.sketch is srf.sketch\n"
        "from streamrff.sketches import KIND_NAMES\n"  # the kinds a sketch file may name, known without importing them
        "assert sorted(srf.Sketch._registry) == sorted(KIND_NAMES) == "
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


#: The layers, bottom to top: a module may import its own layer and the layers below it, never one above.
#: A room is a top-level module or a subpackage; the face (``streamrff/__init__.py``) stands above all.
LAYERS = (
    ("foundations", ("errors", "typing", "_base")),
    ("compiled kernels", ("_kernels",)),
    ("safe files", ("_files",)),
    ("maps", ("maps",)),
    ("file formats", ("formats",)),
    ("sketches", ("sketches",)),
    ("sources", ("sources",)),
    ("engine", ("engine",)),
    ("analyses", ("_estimators", "twosample", "kmeans", "kpca", "ridge", "drift", "store")),
    ("surfaces", ("cli", "demo", "plot", "testing")),
)
LAYER_OF = {room: index for index, (_, rooms) in enumerate(LAYERS) for room in rooms}


def _module_imports() -> dict[str, set[str]]:
    """``{module: modules of streamrff it imports}``, function-local imports and package ``__init__`` included.

    A module is named by its dotted path (``streamrff.sketches`` for ``sketches/__init__.py``); an
    import of a name that is a submodule counts as an import of that submodule.
    """
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "streamrff"
    modules = {
        ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): path
        for path in package.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                stem = node.module or ""
                if node.level:
                    stem = ".".join(base[: len(base) - node.level + 1] + ([stem] if stem else []))
                for alias in node.names:
                    targets.add(f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {target for target in targets if target in modules} - {name}
    return graph


def _room(module: str) -> str:
    """The room of a module: ``streamrff.sketches.mean`` -> ``sketches``; the face is ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_package_imports_only_run_down_the_layers_counting_function_local_imports():
    graph = _module_imports()
    rooms = {_room(module) for module in graph} - {""}
    assert rooms == set(LAYER_OF), f"every room has one layer; unlisted or gone: {rooms ^ set(LAYER_OF)}"
    upward = sorted(
        f"{module} ({LAYERS[LAYER_OF[_room(module)]][0]}) imports {target} ({LAYERS[LAYER_OF[_room(target)]][0]})"
        for module, targets in graph.items()
        if _room(module)
        for target in targets
        if _room(target) and LAYER_OF[_room(target)] > LAYER_OF[_room(module)]
    )
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)
    surfaces = set(LAYERS[-1][1])
    face = sorted(
        module for module, targets in graph.items() if "streamrff" in targets and _room(module) not in surfaces
    )
    assert not face, f"modules below the surfaces that import the package face: {face}"


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle a depth-first walk of ``graph`` meets, as ``a -> b -> a``."""
    state: dict[str, str] = {}
    cycles: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_package_rooms_have_no_import_cycle_counting_function_local_imports():
    graph = _module_imports()
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(_room(module), set()).update(_room(target) for target in targets)
    rooms = {room: targets - {room, ""} for room, targets in rooms.items() if room}
    assert "engine" in rooms["kpca"] and "sketches" in rooms["engine"]  # the walk sees the package
    assert not _cycles(rooms)


def test_package_import_graph_has_no_cycle_counting_function_local_imports():
    # A package is its __init__ module, which imports what it re-exports.
    graph = _module_imports()
    assert len(graph) > 30 and "streamrff.engine" in graph["streamrff.kpca"]  # the walk sees the package
    assert not _cycles(graph)


def test_package_modules_stay_under_900_lines_and_the_top_level_under_15_modules():
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "streamrff"
    long_modules = {
        str(path.relative_to(package)): n
        for path in package.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 900
    }
    assert not long_modules, f"split these modules (the house keeps modules under 900 lines): {long_modules}"
    top = sorted(path.name for path in package.glob("*.py") if path.name != "__init__.py")
    assert len(top) <= 14, (
        f"{len(top)} modules at the top of streamrff/ (at most 14; give them a layer's folder): {top}"
    )
