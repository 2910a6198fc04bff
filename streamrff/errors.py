"""Exception types raised by streamrff.

Every error the library raises on purpose is a :class:`StreamRFFError`; each
subclass also derives from the built-in exception that fits, so callers can
catch either ``streamrff.InputError`` or plain ``ValueError``.
:class:`NotFittedMapError` is also scikit-learn's ``NotFittedError``.
"""

from __future__ import annotations

from sklearn.exceptions import NotFittedError

__all__ = [
    "StreamRFFError",
    "InputError",
    "NotFittedMapError",
    "SketchMismatchError",
    "SketchFormatError",
    "MapFormatError",
    "SourceError",
    "ClusterError",
    "VarianceWarning",
    "SketchFormatWarning",
]


class StreamRFFError(Exception):
    """Base class of every error raised by streamrff."""


class InputError(StreamRFFError, ValueError):
    """An argument has the wrong type, shape, value or contains NaN/inf."""


class NotFittedMapError(StreamRFFError, NotFittedError, ValueError, AttributeError):
    """A feature map or estimator was used before ``fit``.

    Also scikit-learn's ``NotFittedError`` (itself a ``ValueError`` and an
    ``AttributeError``), so ``except NotFittedError`` and scikit-learn's
    estimator checks catch it.
    """


class SketchMismatchError(StreamRFFError, ValueError):
    """Sketches of different kinds or different feature maps were combined."""


class SketchFormatError(StreamRFFError, ValueError):
    """A sketch file is missing, unreadable, incomplete, tampered with or of an unknown version."""


class MapFormatError(SketchFormatError):
    """A map file is missing, not a map file, tampered with or of an unknown version.

    A subclass of :class:`SketchFormatError`, since any sketch file also serves as a map file.
    """


class SourceError(StreamRFFError, OSError):
    """A data source (path, zarr array, bucket) cannot be read."""


class ClusterError(StreamRFFError, ConnectionError):
    """A Dask scheduler cannot be reached."""


class VarianceWarning(UserWarning):
    """A feature map's estimates will be much noisier than usual (e.g. RelativeErrorRFF in many dimensions)."""


class SketchFormatWarning(UserWarning):
    """A sketch file loads, but part of it could not be verified (e.g. written before attribute digests)."""
