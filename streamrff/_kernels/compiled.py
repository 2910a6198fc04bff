"""numba's compiled kernels, cached in a per-user folder and never inside the installed package.

``numba.njit(cache=True)`` writes its ``.nbi``/``.nbc`` files next to the
source, in ``site-packages/streamrff/__pycache__``; ``pip uninstall`` does not
know them, and the folder they keep alive shadows a later editable install as
a namespace package. Every streamrff kernel is decorated with :func:`jit`
instead, which caches under :func:`kernel_cache_directory`:

1. ``$STREAMRFF_CACHE_DIR/numba`` if ``STREAMRFF_CACHE_DIR`` is set;
2. else ``$NUMBA_CACHE_DIR`` if the user set numba's own cache folder;
3. else the platform's per-user cache folder: ``$XDG_CACHE_HOME/streamrff/numba``
   (default ``~/.cache/streamrff/numba``) on Linux and other POSIX systems,
   ``~/Library/Caches/streamrff/numba`` on macOS,
   ``%LOCALAPPDATA%\\streamrff\\Cache\\numba`` on Windows.

When that folder cannot be created or written, the kernels compile on every
import (no cache) rather than fail.

Inside the folder each source file gets its own subfolder named after the
hash of the file's directory (numba's convention), so two installs never
share entries; an entry is valid only for the SHA-256 of the source file's
content, the numba and Python versions and the CPU it was compiled for, so a
different streamrff version at the same path recompiles instead of loading a
stale kernel.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numba
from numba.core import caching
from numba.core.dispatcher import Dispatcher

__all__ = ["CACHE_DIR_VARIABLE", "jit", "kernel_cache_directory"]

#: Environment variable naming streamrff's cache folder (compiled kernels go to its ``numba`` subfolder).
CACHE_DIR_VARIABLE = "STREAMRFF_CACHE_DIR"


def _platform_cache_home(environ: Mapping[str, str], platform: str, home: Path) -> Path:
    """The per-user cache folder of the platform (the XDG base directory spec, Apple's and Microsoft's)."""
    if platform == "darwin":
        return home / "Library" / "Caches" / "streamrff"
    if platform == "win32":
        local = environ.get("LOCALAPPDATA", "")
        return (Path(local) if local else home / "AppData" / "Local") / "streamrff" / "Cache"
    xdg = environ.get("XDG_CACHE_HOME", "")
    # The XDG spec: a relative path is invalid and must be ignored.
    return (Path(xdg) if os.path.isabs(xdg) else home / ".cache") / "streamrff"


def kernel_cache_directory(
    environ: Mapping[str, str] | None = None, platform: str | None = None, home: Path | None = None
) -> Path:
    """The folder that holds streamrff's compiled-kernel cache (it may not exist yet).

    Parameters
    ----------
    environ : mapping, optional
        Environment variables (default ``os.environ``).
    platform : str, optional
        ``sys.platform`` value (default: this interpreter's).
    home : Path, optional
        The user's home folder (default ``Path.home()``).

    Returns
    -------
    Path
        ``$STREAMRFF_CACHE_DIR/numba``, else ``$NUMBA_CACHE_DIR``, else the
        platform's per-user cache folder followed by ``numba``.

    Examples
    --------
    >>> from pathlib import Path
    >>> kernel_cache_directory({"XDG_CACHE_HOME": "/var/cache/me"}, "linux", Path("/home/me")).as_posix()
    '/var/cache/me/streamrff/numba'
    >>> kernel_cache_directory({}, "darwin", Path("/Users/me")).as_posix()
    '/Users/me/Library/Caches/streamrff/numba'
    >>> kernel_cache_directory({"STREAMRFF_CACHE_DIR": "/scratch/srf"}, "linux", Path("/home/me")).as_posix()
    '/scratch/srf/numba'
    """
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    own = environ.get(CACHE_DIR_VARIABLE, "")
    if own:
        return Path(own).expanduser() / "numba"
    numba_own = environ.get("NUMBA_CACHE_DIR", "")
    if numba_own:
        return Path(numba_own).expanduser()
    return _platform_cache_home(environ, platform, Path.home() if home is None else home) / "numba"


@functools.lru_cache(maxsize=1)
def _writable_cache_directory() -> Path | None:
    """:func:`kernel_cache_directory`, created; None when it cannot be created or written."""
    directory = kernel_cache_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return None
    return directory


class _UserCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """Locates a kernel's cache entries under the per-user folder, never next to its source."""

    def __init__(self, py_func: Callable[..., Any], py_file: str, root: Path) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(root, self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        # The content, not (mtime, size) as numba < 0.61 uses: a reinstall of another version
        # at the same path with the same size and timestamp must not load stale kernels.
        with open(self._py_file, "rb") as source:
            return hashlib.sha256(source.read()).hexdigest()

    @classmethod
    def from_function(cls, py_func: Callable[..., Any], py_file: str) -> _UserCacheLocator | None:
        root = _writable_cache_directory()
        if root is None or not os.path.exists(py_file):
            return None
        locator = cls(py_func, py_file, root)
        try:
            locator.ensure_cache_path()
        except OSError:
            return None
        return locator


class _UserCacheImpl(caching.CompileResultCacheImpl):
    _locator_classes = [_UserCacheLocator]


class _UserFunctionCache(caching.FunctionCache):
    _impl_class = _UserCacheImpl


def jit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(**options)`` with its cache in :func:`kernel_cache_directory` (none if not writable).

    Parameters
    ----------
    **options
        numba's ``njit`` options except ``cache``, which this decorator owns.

    Returns
    -------
    callable
        A decorator that returns the numba dispatcher.

    Examples
    --------
    >>> import numpy as np
    >>> @jit(nogil=True)
    ... def total(values):
    ...     result = 0.0
    ...     for value in values:
    ...         result += value
    ...     return result
    >>> bool(total(np.arange(5.0)) == np.arange(5.0).sum())
    True
    """
    if "cache" in options:
        raise TypeError("streamrff._kernels.compiled.jit chooses the cache itself; drop cache=.")

    def decorate(function: Callable[..., Any]) -> Any:
        dispatcher = numba.njit(**options)(function)
        # NUMBA_DISABLE_JIT returns the Python function; a doctest or a console has no source file.
        if isinstance(dispatcher, Dispatcher) and _writable_cache_directory() is not None:
            try:
                dispatcher._cache = _UserFunctionCache(function)
            except RuntimeError:  # no locator: the source file is not on disk
                pass
        return dispatcher

    return decorate
