"""Compiled kernels cache in a per-user folder, never inside the installed package (streamrff._kernels.compiled)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba.core.caching import NullCache

from streamrff._kernels import compiled as _compiled
from streamrff._kernels import sincos as _sincos

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "streamrff"

_KERNEL_SOURCE = '''
from streamrff._kernels.compiled import jit


@jit(nogil=True)
def weighted_total(values, weight):
    total = 0.0
    for value in values:
        total += weight * value
    return total
'''


def _compiled_cache_files(folder: Path) -> set[Path]:
    return {path for pattern in ("*.nbi", "*.nbc") for path in folder.rglob(pattern)}


@pytest.fixture
def kernel_cache(tmp_path, monkeypatch):
    """STREAMRFF_CACHE_DIR set to a fresh folder for this test only (the resolved folder is memoised)."""
    monkeypatch.setenv(_compiled.CACHE_DIR_VARIABLE, str(tmp_path / "cache"))
    _compiled._writable_cache_directory.cache_clear()
    yield tmp_path / "cache"
    _compiled._writable_cache_directory.cache_clear()


def _import_kernel_module(folder: Path, name: str):
    """A module holding one @jit kernel, imported from ``folder`` as an installed module would be."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(_KERNEL_SOURCE)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("environ", "platform", "expected"),
    [
        ({}, "linux", "/home/me/.cache/streamrff/numba"),
        ({"XDG_CACHE_HOME": "/var/cache/me"}, "linux", "/var/cache/me/streamrff/numba"),
        ({"XDG_CACHE_HOME": "relative/ignored"}, "linux", "/home/me/.cache/streamrff/numba"),
        ({}, "darwin", "/home/me/Library/Caches/streamrff/numba"),
        ({"LOCALAPPDATA": "/c/Users/me/AppData/Local"}, "win32", "/c/Users/me/AppData/Local/streamrff/Cache/numba"),
        ({}, "win32", "/home/me/AppData/Local/streamrff/Cache/numba"),
        ({"NUMBA_CACHE_DIR": "/scratch/numba"}, "linux", "/scratch/numba"),
        ({"NUMBA_CACHE_DIR": "/scratch/numba", "STREAMRFF_CACHE_DIR": "/scratch/srf"}, "darwin", "/scratch/srf/numba"),
    ],
)
def test_kernel_cache_directory_follows_platform_conventions_and_overrides(environ, platform, expected):
    assert _compiled.kernel_cache_directory(environ, platform, Path("/home/me")).as_posix() == expected


def test_compiled_kernel_cache_is_written_under_the_configured_folder_only(kernel_cache, tmp_path):
    package = tmp_path / "site-packages" / "installed"
    module = _import_kernel_module(package, "kernels_written")
    values = np.arange(10.0)
    assert module.weighted_total(values, 0.5) == 0.5 * values.sum()
    written = _compiled_cache_files(kernel_cache)
    assert {path.suffix for path in written} == {".nbi", ".nbc"}
    assert all(path.name.startswith("kernels_written.weighted_total") for path in written)
    assert not _compiled_cache_files(package)
    assert sorted(path.name for path in package.iterdir()) == ["kernels_written.py"]
    # A second process-local dispatcher of the same source loads the entry instead of compiling.
    again = _import_kernel_module(package, "kernels_written")
    assert again.weighted_total(values, 2.0) == 2.0 * values.sum()
    assert sum(again.weighted_total.stats.cache_hits.values()) == 1


def test_compiled_kernel_without_a_writable_cache_folder_compiles_uncached(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv(_compiled.CACHE_DIR_VARIABLE, str(blocker))
    _compiled._writable_cache_directory.cache_clear()
    try:
        module = _import_kernel_module(tmp_path / "package", "kernels_uncached")
        assert isinstance(module.weighted_total._cache, NullCache)
        assert module.weighted_total(np.ones(4), 3.0) == 12.0
    finally:
        _compiled._writable_cache_directory.cache_clear()
    assert not _compiled_cache_files(tmp_path)


def test_streamrff_kernels_cache_outside_the_package():
    # Every kernel module of the package uses the decorator: none caches in its __pycache__.
    kernels = [_sincos.rff_features, _sincos.sincos_feature_sums]
    from streamrff._kernels import lloyd as _lloyd
    from streamrff._kernels import rowdot as _rowdot

    kernels += [_rowdot._block_row, _lloyd.lloyd_chunk]
    for kernel in kernels:
        cache_path = Path(kernel.stats.cache_path or "")
        assert cache_path.parts, kernel
        assert PACKAGE not in cache_path.parents and cache_path != PACKAGE
    sources = "".join(path.read_text() for path in PACKAGE.rglob("*.py") if path.name != "compiled.py")
    assert not re.search(r"jit\([^)]*cache\s*=\s*True", sources)


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _run(command: list[str], **options) -> subprocess.CompletedProcess:
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, **options)
    assert completed.returncode == 0, f"{command}\n{completed.stdout}\n{completed.stderr}"
    return completed


def _setuptools_builds_wheels() -> bool:
    """setuptools >= 70.1 builds wheels on its own (older ones need the ``wheel`` package)."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit()) >= (70, 1)


def _dependency_view(folder: Path) -> Path:
    """Links to every distribution this interpreter imports, except streamrff: a venv that puts
    ``folder`` on its path (through a .pth file) installs streamrff without downloading anything."""
    folder.mkdir()
    for directory in map(Path, sys.path):
        if directory.name not in ("site-packages", "dist-packages") or not directory.is_dir():
            continue
        for entry in directory.iterdir():
            skipped = entry.name.lower().startswith(("streamrff", "__editable__", "_virtualenv", "__pycache__"))
            if not skipped and entry.suffix != ".pth" and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not _setuptools_builds_wheels(), reason="needs setuptools>=70.1: pip install -e '.[test]'")
def test_install_run_uninstall_leaves_nothing_and_editable_install_imports_anywhere(tmp_path):
    # The README's order: a regular install, the demo, then an editable install. pip and the build
    # backend come from this interpreter's packages (no network, no build isolation).
    dependencies = _dependency_view(tmp_path / "dependencies")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(_venv_python(venv))
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = Path(_run([python, "-c", purelib]).stdout.strip())
    (site_packages / "dependencies.pth").write_text(f"{dependencies}\n")
    source = tmp_path / "source"  # a copy, so that the build writes nothing into the checkout
    shutil.copytree(
        ROOT, source, ignore=shutil.ignore_patterns(".git", "__pycache__", "build", "*.egg-info", "_build", ".*cache*")
    )
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "user-cache")}
    for name in ("PYTHONPATH", "STREAMRFF_CACHE_DIR", "NUMBA_CACHE_DIR"):
        environment.pop(name, None)
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "install", "--no-deps", "--no-build-isolation", "--no-index", str(source)], env=environment)
    installed = site_packages / "streamrff"
    assert installed.is_dir() and not (installed / "__init__.py").is_symlink()

    workdir = tmp_path / "work"
    workdir.mkdir()
    demo = [str(venv / "bin" / "streamrff"), "demo", "--rows", "2000", "--features", "32", "-o", "demo"]
    _run(demo, cwd=workdir, env=environment)
    assert (workdir / "demo" / "report.json").is_file()
    assert _compiled_cache_files(tmp_path / "user-cache" / "streamrff" / "numba")
    assert not _compiled_cache_files(installed)

    _run([*pip, "uninstall", "-y", "streamrff"], env=environment)
    leftovers = sorted(path.name for path in site_packages.iterdir() if path.name.lower().startswith("streamrff"))
    assert leftovers == []

    _run([*pip, "install", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(source)], env=environment)
    probe = "import streamrff as srf, pathlib; print(pathlib.Path(srf.__file__).parent); print(srf.load.__name__)"
    completed = _run([python, "-c", probe], cwd=workdir, env=environment)
    assert completed.stdout.split() == [str(source / "streamrff"), "load"]
