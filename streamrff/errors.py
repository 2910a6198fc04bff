"""Exception types raised by streamrff.

Every error the library raises on purpose is a :class:`StreamRFFError`; each
subclass also derives from the built-in exception that fits, so callers can
catch either ``streamrff.InputError`` or plain ``ValueError``.
:class:`NotFittedMapError` is also scikit-learn's ``NotFittedError``.
"""

from __future__ import annotations

import functools

__all__ = [
    "StreamRFFError",
    "CheckpointMismatchError",
    "InputError",
    "NotFittedMapError",  # noqa: F822 - given by the module __getattr__ (built on first use)
    "SketchMismatchError",
    "SketchFormatError",
    "MapFormatError",
    "SketchSignatureError",
    "SketchBeingWrittenError",
    "ModelFormatError",
    "ModelSignatureError",
    "SourceError",
    "SourceChangedError",
    "OutputError",
    "StateLockedError",
    "ClusterError",
    "VarianceWarning",
    "BiasWarning",
    "SketchFormatWarning",
]


class StreamRFFError(Exception):
    """Base class of every error raised by streamrff.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> try:
    ...     srf.RFF(n_features=3, bandwidth=1.0).fit(np.zeros((4, 2)))
    ... except srf.StreamRFFError as error:
    ...     print(type(error).__name__)
    InputError
    >>> all(issubclass(getattr(srf, name), srf.StreamRFFError) for name in srf.__all__ if name.endswith("Error"))
    True
    """


class InputError(StreamRFFError, ValueError):
    """An argument has the wrong type, shape, value or contains NaN/inf.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> srf.RFF(n_features=3, bandwidth=1.0).fit(np.zeros((4, 2)))
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: n_features must be even and >= 2 for the sincos variant (got 3);
    use 4 or variant='cosphase'.
    >>> try:
    ...     srf.sketch_array(np.array([[0.0, np.nan]]), srf.RFF(n_features=8, bandwidth=1.0))
    ... except ValueError as error:  # also a ValueError
    ...     print(isinstance(error, srf.InputError))
    True
    """


class CheckpointMismatchError(InputError):
    """A checkpoint folder holds partial sketches of another source, or another job is using it.

    Its partials would sketch rows of the wrong data, so the job is refused before
    any work (CLI exit status 2, as for any other wrong argument); pass another
    checkpoint folder or delete it. See :mod:`streamrff.engine.checkpoint`.

    Examples
    --------
    >>> import streamrff as srf
    >>> issubclass(srf.CheckpointMismatchError, srf.InputError)
    True
    """


@functools.cache
def _not_fitted_map_error() -> type:
    """Build :class:`NotFittedMapError` on first use (scikit-learn loads only then)."""
    from sklearn.exceptions import NotFittedError

    class NotFittedMapError(StreamRFFError, NotFittedError, ValueError, AttributeError):
        """A feature map or estimator was used before ``fit``.

        Also scikit-learn's ``NotFittedError`` (itself a ``ValueError`` and an
        ``AttributeError``), so ``except NotFittedError`` and scikit-learn's
        estimator checks catch it.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> from sklearn.exceptions import NotFittedError
        >>> srf.RFF().transform(np.zeros((2, 3)))
        Traceback (most recent call last):
        ...
        streamrff.errors.NotFittedMapError: This RFF is not fitted yet (bandwidth='median' is chosen from a sample ...
        >>> issubclass(srf.NotFittedMapError, NotFittedError)
        True
        """

    NotFittedMapError.__module__ = __name__
    NotFittedMapError.__qualname__ = "NotFittedMapError"
    return NotFittedMapError


def __getattr__(name: str) -> type:
    """Give ``NotFittedMapError`` lazily, so importing the errors does not import scikit-learn."""
    if name == "NotFittedMapError":
        return _not_fitted_map_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SketchMismatchError(StreamRFFError, ValueError):
    """Sketches of different kinds or different feature maps were combined.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(20, 3))
    >>> a = srf.sketch_array(X, srf.RFF(n_features=8, bandwidth=1.0, seed=0))
    >>> b = srf.sketch_array(X, srf.RFF(n_features=8, bandwidth=1.0, seed=1))
    >>> srf.merge(a, b)
    Traceback (most recent call last):
    ...
    streamrff.errors.SketchMismatchError: Cannot merge sketches of different feature maps: seed 0 vs 1 ...
    """


class SketchFormatError(StreamRFFError, ValueError):
    """A sketch file is missing, unreadable, incomplete, tampered with or of an unknown version.

    Examples
    --------
    >>> import os, tempfile, streamrff as srf
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     srf.load(os.path.join(folder, "missing.zarr"))
    Traceback (most recent call last):
    ...
    streamrff.errors.SketchFormatError: No sketch at ...missing.zarr: the path does not exist.
    """


class MapFormatError(SketchFormatError):
    """A map file is missing, not a map file, tampered with or of an unknown version.

    A subclass of :class:`SketchFormatError`, since any sketch file also serves as a map file.

    Examples
    --------
    >>> import os, tempfile, streamrff as srf
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     try:
    ...         srf.load_map(os.path.join(folder, "missing.zarr"))
    ...     except srf.SketchFormatError as error:
    ...         print(type(error).__name__, "-", str(error).split(": ", 1)[1])
    MapFormatError - the path does not exist. Check the path.
    """


class SketchSignatureError(SketchFormatError):
    """A sketch loaded with a verify key is unsigned, signed with another key, or edited after signing.

    A subclass of :class:`SketchFormatError`. See the threat model in the
    documentation (Security): the attribute digest proves a file is intact, the
    signature that a holder of the key wrote it.

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "s.zarr")
    ...     srf.sketch_array(np.ones((3, 2)), srf.RFF(n_features=8)).save(path, signing_key=b"site A key......")
    ...     try:
    ...         srf.load(path, verify_key=b"another site key")
    ...     except srf.SketchSignatureError as error:
    ...         print(str(error).split(": ", 1)[1].split(" (")[0])
    the signature does not match the verify key
    """


class SketchBeingWrittenError(SketchFormatError):
    """A sketch was being written by another process while it was read: retry when the save has finished.

    :func:`streamrff.load` reads again while a concurrent save replaces a local
    directory or rewrites a group on object storage (where saves announce
    themselves in a small write-state object beside the group), and raises this
    only if the sketch kept changing, or a save stayed under way, for a few
    seconds. A subclass of :class:`SketchFormatError`; it never means the file
    is corrupt.

    Examples
    --------
    >>> import streamrff as srf
    >>> issubclass(srf.SketchBeingWrittenError, srf.SketchFormatError)
    True
    """


class ModelFormatError(MapFormatError):
    """A model file is missing, not a model file, tampered with or of an unknown version.

    A subclass of :class:`MapFormatError`: a model file is a map file plus the
    fitted coefficients (:func:`streamrff.save_model`).

    Examples
    --------
    A map file named where a model file is expected:

    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> path = os.path.join(tempfile.mkdtemp(), "map.json")
    >>> srf.save_map(srf.RFF(n_features=8, bandwidth=1.0).fit(np.zeros((2, 2))), path)
    >>> try:
    ...     srf.load_model(path)
    ... except srf.MapFormatError as error:
    ...     print(type(error).__name__, "-", str(error).split(": ", 1)[1].split(". ")[0])
    ModelFormatError - expected format='streamrff.model', got 'streamrff.map'
    """


class ModelSignatureError(ModelFormatError):
    """A model file loaded with a verify key is unsigned, signed with another key, or edited after signing.

    A subclass of :class:`ModelFormatError`; the model-file twin of
    :class:`SketchSignatureError` (same keys, same HMAC rule; see Security).

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(40, 2))
    >>> model = srf.KernelRidge(n_features=8, bandwidth=1.0).fit(X, X[:, 0])
    >>> path = os.path.join(tempfile.mkdtemp(), "model.json")
    >>> srf.save_model(model, path, signing_key=b"site A key......")
    >>> try:
    ...     srf.load_model(path, verify_key=b"another site key")
    ... except srf.ModelSignatureError as error:
    ...     print(str(error).split(": ", 1)[1].split(" (")[0])
    the signature does not match the verify key
    """


class SourceError(StreamRFFError, OSError):
    """A data source (path, zarr array, bucket) cannot be read.

    Examples
    --------
    >>> import os, tempfile, streamrff as srf
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     try:
    ...         srf.sketch(os.path.join(folder, "data.zarr"), srf.RFF(n_features=8, bandwidth=1.0))
    ...     except OSError as error:  # also an OSError
    ...         print(type(error).__name__, "-", str(error).split(": ", 1)[1])
    SourceError - the path does not exist. Check the path.
    """


class SourceChangedError(SourceError):
    """A followed source is no longer the one a saved state was built on: replaced, shrunk, re-laid-out.

    ``streamrff watch`` refuses such a source (CLI exit status 3) rather than mix
    two arrays in one window, with one line naming what changed and the last row
    consumed; the state stays as saved at that row. Also raised when a stored chunk
    inside the array stays missing past the deadline (its rows were never written).

    Examples
    --------
    >>> import streamrff as srf
    >>> issubclass(srf.SourceChangedError, srf.SourceError), issubclass(srf.SourceChangedError, OSError)
    (True, True)
    """


class StateLockedError(StreamRFFError, RuntimeError):
    """Another running process holds the lock of a state (a drift monitor, a checkpoint folder).

    The message names the holder (host and process id) as the holder recorded it.
    A lock left by a process that died is released by the operating system and
    taken over by the next process (CLI exit status 4 for ``watch``).

    Examples
    --------
    >>> import streamrff as srf
    >>> issubclass(srf.StateLockedError, srf.StreamRFFError), issubclass(srf.StateLockedError, RuntimeError)
    (True, True)
    """


class OutputError(StreamRFFError, OSError):
    """An output cannot be written: its file system is full, read-only, or refuses permission.

    Raised before a job starts when the output's folder cannot take a file (or,
    where the file system says, lacks room for the declared size), and for
    ``ENOSPC``, ``EDQUOT``, ``EROFS``, ``EACCES`` and ``EPERM`` met anywhere in a
    write; the partly written output is removed first. ``errno`` holds the
    operating system's code; the message is one line.

    Examples
    --------
    >>> import errno, streamrff as srf

    A folder no one may write to (Linux's ``/sys``, even for root):

    >>> try:
    ...     srf.sketch_array([[0.0, 1.0]], srf.RFF(n_features=8)).save("/sys/streamrff.sketch")
    ... except srf.OutputError as error:
    ...     print(errno.errorcode[error.errno], "-", error)
    EACCES - Cannot write /sys/streamrff.sketch: permission denied. Choose an output in a folder you may write to.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.errno = code

    def __reduce__(self) -> tuple[type, tuple[str, int | None]]:  # keep errno across processes (Dask workers)
        return type(self), (str(self), self.errno)


class ClusterError(StreamRFFError, ConnectionError):
    """A Dask scheduler cannot be reached.

    Examples
    --------
    Port 9 (discard) has no scheduler, so the connection is refused at once:

    >>> import numpy as np, streamrff as srf
    >>> srf.sketch(np.zeros((4, 2)), srf.RFF(n_features=8, bandwidth=1.0), client="tcp://127.0.0.1:9")
    Traceback (most recent call last):
    ...
    streamrff.errors.ClusterError: Cannot reach the Dask scheduler at tcp://127.0.0.1:9: ...
    >>> issubclass(srf.ClusterError, ConnectionError)
    True
    """


class VarianceWarning(UserWarning):
    """A feature map's estimates will be much noisier than usual (e.g. RelativeErrorRFF in many dimensions).

    Examples
    --------
    >>> import warnings, numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(20, 10))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = srf.RelativeErrorRFF(n_features=64, bandwidth=1.0).fit(X)
    >>> [warning.category.__name__ for warning in caught]
    ['VarianceWarning']
    >>> "10-dimensional input" in str(caught[0].message)
    True
    """


class BiasWarning(UserWarning):
    """A feature map's kernel estimate is biased at this input width (``RFF(structured=True)`` on <= 16 columns).

    Structured orthogonal (SORF) blocks of a small padded width are far from
    random rotations; see :mod:`streamrff.maps.structured` for the measured bias.

    Examples
    --------
    >>> import warnings, numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(20, 6))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = srf.RFF(n_features=64, structured=True).fit(X)
    >>> [warning.category.__name__ for warning in caught]
    ['BiasWarning']
    >>> "6-dimensional input" in str(caught[0].message)
    True
    """


class SketchFormatWarning(UserWarning):
    """A sketch file loads, but part of it could not be verified (e.g. written before attribute digests).

    Examples
    --------
    A file whose attribute digest was removed (as in files written before digests existed):

    >>> import os, tempfile, warnings, numpy as np, zarr, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(20, 3))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "old.zarr")
    ...     srf.sketch_array(X, srf.RFF(n_features=8, bandwidth=1.0)).save(path)
    ...     del zarr.open_group(path, mode="r+").attrs["attributes_digest"]
    ...     with warnings.catch_warnings(record=True) as caught:
    ...         warnings.simplefilter("always")
    ...         loaded = srf.load(path)
    >>> loaded.count, [warning.category.__name__ for warning in caught]
    (20, ['SketchFormatWarning'])
    """
