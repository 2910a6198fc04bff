"""Every public name documents itself with an example that runs.

The examples themselves run as doctests (``--doctest-modules`` in pyproject.toml's pytest
options); these tests make sure no public name loses its ``Examples`` section.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import re

import pytest

import streamrff

#: Public names outside ``streamrff.__all__``: the subpackages' and the CLI's entry points.
_EXTRA_MODULES = ("streamrff.kmeans", "streamrff.twosample", "streamrff.testing")
_CLI_NAMES = ("build_parser", "main", "sketch_summary")


def _public_objects() -> dict[str, object]:
    objects = {f"streamrff.{name}": getattr(streamrff, name) for name in streamrff.__all__}
    for module_name in _EXTRA_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):  # constants carry no docstring
                objects[f"{module_name}.{name}"] = value
    cli = importlib.import_module("streamrff.cli")
    objects.update({f"streamrff.cli.{name}": getattr(cli, name) for name in _CLI_NAMES})
    return objects


_PUBLIC = _public_objects()


def _examples_section(docstring: str) -> str | None:
    """The text of a numpydoc ``Examples`` section, up to the next section or the end."""
    text = inspect.cleandoc(docstring)
    match = re.search(r"^Examples\n-{8,}\n(.*?)(?=^\w[\w ]*\n-{3,}\n|\Z)", text, re.MULTILINE | re.DOTALL)
    return match.group(1) if match else None


def test_public_api_is_covered():
    # The lists above must find the whole public API, including the lazy names of streamrff.
    assert len(_PUBLIC) >= len(streamrff.__all__) + 10
    assert "streamrff.KernelKMeans" in _PUBLIC and "streamrff.cli.main" in _PUBLIC


@pytest.mark.parametrize("qualified_name", sorted(_PUBLIC))
def test_public_name_has_running_example(qualified_name):
    obj = _PUBLIC[qualified_name]
    # obj.__doc__, not inspect.getdoc: a class must not borrow its base class's examples.
    docstring = obj.__doc__
    assert docstring, f"{qualified_name} has no docstring."
    section = _examples_section(docstring)
    assert section is not None, f"{qualified_name}'s docstring has no numpydoc 'Examples' section."
    examples = doctest.DocTestParser().get_examples(section)
    running = [example for example in examples if not example.options.get(doctest.SKIP)]
    assert running, f"{qualified_name}'s Examples section has no '>>>' line that runs (all skipped or none)."
    assert any(example.want for example in running), (
        f"{qualified_name}'s examples print nothing, so doctest checks no result."
    )


def test_examples_section_parser():
    docstring = """Summary.

    Examples
    --------
    >>> 1 + 1
    2

    Notes
    -----
    >>> not_in_the_section
    """
    assert _examples_section(docstring).strip() == ">>> 1 + 1\n2"
    assert _examples_section("Summary.\n\n>>> 1 + 1\n2\n") is None
