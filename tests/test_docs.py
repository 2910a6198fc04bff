"""The documentation covers the public API, and the version is written in one place.

Reads the Sphinx sources as text (no Sphinx needed): a public name without an entry in
docs/api.rst fails here, before anyone builds the docs. The docs build itself runs in CI
(``.ci/run``: ``python -m sphinx -W --keep-going -b html docs ...``).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import streamrff

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
API = DOCS / "api.rst"
#: Modules whose ``__all__`` the API reference documents besides ``streamrff`` itself. A name that
#: is also in ``streamrff`` counts as documented when it is the same object.
DOCUMENTED_MODULES = [
    "streamrff.twosample",
    "streamrff.kmeans",
    "streamrff.drift",
    "streamrff.store",
    "streamrff.engine",
    "streamrff.testing",
    "streamrff.plot",
    "streamrff.cli",
]


def documented_names() -> dict[str, set[str]]:
    """``{module: names}`` from the autosummary lists and ``data`` directives of docs/api.rst."""
    documented: dict[str, set[str]] = {}
    module = None
    in_autosummary = False
    for line in API.read_text().splitlines():
        if match := re.match(r"\.\. currentmodule:: (\S+)", line):
            module, in_autosummary = match.group(1), False
        elif line.startswith(".. autosummary::"):
            in_autosummary = True
        elif match := re.match(r"\.\. (?:data|function|class):: (\w+)", line):
            documented.setdefault(module, set()).add(match.group(1))
            in_autosummary = False
        elif in_autosummary and (match := re.fullmatch(r"   ~?([\w.]+)", line)):
            documented.setdefault(module, set()).add(match.group(1))
        elif line and not line.startswith(" "):
            in_autosummary = False
    return documented


def pyproject_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_docs_api_reference_lists_every_public_name():
    documented = documented_names()
    missing = sorted(set(streamrff.__all__) - documented.get("streamrff", set()))
    assert not missing, f"docs/api.rst does not document streamrff.{missing}; add them to an autosummary list."


@pytest.mark.parametrize("module_name", DOCUMENTED_MODULES)
def test_docs_api_reference_lists_every_public_name_of_documented_modules(module_name):
    documented = documented_names()
    module = importlib.import_module(module_name)
    top_level = {getattr(streamrff, name) for name in documented.get("streamrff", set()) if hasattr(streamrff, name)}
    missing = sorted(
        name
        for name in module.__all__
        if name not in documented.get(module_name, set())
        and not any(getattr(module, name) is value for value in top_level)
    )
    assert not missing, f"docs/api.rst does not document {module_name}.{missing}."


def test_docs_api_reference_names_exist():
    # The reverse direction: an entry whose name was removed or renamed would fail the build.
    for module_name, names in documented_names().items():
        module = importlib.import_module(module_name)
        absent = sorted(name for name in names if not hasattr(module, name))
        assert not absent, f"docs/api.rst documents {module_name}.{absent}, which do not exist."


def test_version_is_written_once_and_agrees_everywhere():
    version = pyproject_version()
    assert streamrff.__version__ == version, (
        f"streamrff.__version__ is {streamrff.__version__}, pyproject.toml says {version}: "
        "reinstall (pip install -e .) after changing the version."
    )
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+[^\]]*)\]", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == version, f"CHANGELOG.md's newest release is {releases[:1]}, not {version}."
    # The package and the docs read the installed metadata instead of repeating the number.
    assert 'version("streamrff")' in (REPO / "streamrff" / "__init__.py").read_text()
    assert '_installed_version("streamrff")' in (DOCS / "conf.py").read_text()
    # Container images built from this repository carry the package version as their tag.
    texts = [REPO / "README.md", *sorted(p for p in (REPO / "deploy").rglob("*") if p.is_file()), *DOCS.rglob("*.rst")]
    tags = {
        (str(path.relative_to(REPO)), tag)
        for path in texts
        for tag in re.findall(r"streamrff:(\d[\w.]*)", path.read_text())
    }
    assert tags, "expected the image tags of deploy/ (streamrff:<version>)"
    stale = sorted((where, tag) for where, tag in tags if tag != version)
    assert not stale, f"image tags other than the package version {version}: {stale}"
    helm_tags = re.findall(r'tag: "([^"]+)"', (REPO / "deploy" / "kubernetes" / "helm-values.yaml").read_text())
    assert helm_tags and set(helm_tags) == {version}, helm_tags


def test_readme_links_to_docs_pages_that_exist():
    links = re.findall(r"\]\(((?:docs|CHANGELOG)[^)#]*)", (REPO / "README.md").read_text())
    assert any(link.startswith("docs/") for link in links), "README.md links to no docs page"
    missing = sorted(link for link in links if not (REPO / link).is_file())
    assert not missing, f"README.md links to missing files: {missing}"


def test_docs_build_command_in_readme_and_ci():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html' in readme
    assert 'pip install -e ".[docs]" && python -m sphinx -W --keep-going -b html docs' in ci


def python_blocks(path: Path) -> list[str]:
    """The Python code blocks of a Markdown (```python) or reStructuredText (code-block) file."""
    text = path.read_text()
    if path.suffix == ".md":
        return re.findall(r"```python\n(.*?)```", text, re.S)
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:(?:   .*)?\n)+)", text)
    return ["\n".join(line[3:] for line in block.splitlines()) + "\n" for block in blocks]


@pytest.mark.parametrize(
    ("path", "index"),
    [("README.md", 0), ("docs/getting_started.rst", 0)],
    ids=["README", "getting_started"],
)
def test_docs_python_example_runs_as_written(path, index, tmp_path):
    # The blocks that say they run as written do (the README's and the tour's first block).
    code = python_blocks(REPO / path)[index]
    completed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert completed.returncode == 0, completed.stderr[-3000:]
