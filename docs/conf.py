"""Sphinx configuration of the streamrff documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html``.
"""

from __future__ import annotations

import os
from importlib.metadata import version as _installed_version

# Figures made by the plot directive must not try to open a window.
os.environ.setdefault("MPLBACKEND", "Agg")

project = "streamrff"
author = "the streamrff developers"
copyright = "the streamrff developers"
# The one place the version is written is pyproject.toml; the installed metadata carries it here.
release = _installed_version("streamrff")
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinxarg.ext",
    "matplotlib.sphinxext.plot_directive",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# -- API reference -------------------------------------------------------------------------------
# ``streamrff`` imports its public names lazily (PEP 562 ``__getattr__`` over ``_LOCATIONS``);
# autosummary resolves ``streamrff.RFF`` by getattr, which loads them on first use.
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"  # the numpydoc Parameters sections carry the types
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()
numpydoc_xref_param_type = False

# -- figures -------------------------------------------------------------------------------------
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 100)]
plot_rcparams = {"figure.figsize": (6.0, 3.2), "figure.dpi": 100}

# -- HTML ----------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"streamrff {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []


def _skip_scikit_learn_members(app, what, name, obj, skip, options):
    """Leave out members that scikit-learn's base classes define (``set_output``, metadata routing).

    Their docstrings link into scikit-learn's own documentation and are documented there; the
    estimator pages list what streamrff defines, including what ``FeatureMap`` gives every map.
    """
    if name.startswith("set_") and name.endswith("_request"):
        return True
    if getattr(obj, "__module__", None) and obj.__module__.split(".")[0] == "sklearn":
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_scikit_learn_members)
