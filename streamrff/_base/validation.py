"""Input checks at the public boundary; internal functions trust their inputs."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..errors import InputError

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

__all__ = [
    "check_rows",
    "check_finite_rows",
    "check_width",
    "check_positive_int",
    "check_bandwidth",
    "check_feature_dtype",
    "normalize_seed",
    "is_in_memory",
    "validate_estimator_input",
    "store_params",
]


_FINITE_FIX = "Drop or impute those rows, or pass on_invalid='skip' to streamrff.sketch to skip them."


def check_finite_rows(
    X: np.ndarray, name: str = "X", where: str = "", fix: str = _FINITE_FIX, row_offset: int = 0
) -> None:
    """Raise InputError naming the first rows that hold NaN or inf.

    ``fix`` says what to do; it may name the first such row as ``{first}`` (in ``X``) and ``{row}``
    (``row_offset + first``: e.g. its row in a stream).
    """
    bad = ~np.isfinite(X).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        shown = ", ".join(str(r) for r in rows[:5]) + (" ..." if rows.size > 5 else "")
        raise InputError(
            f"{name} must contain only finite values. Got NaN or inf in {rows.size} row(s)"
            f"{where} (rows {shown}). {fix.format(first=int(rows[0]), row=row_offset + int(rows[0]))}"
        )


def check_rows(
    X: Any, name: str = "X", allow_empty: bool = False, fix: str = _FINITE_FIX, row_offset: int = 0
) -> np.ndarray:
    """Return ``X`` as a 2-D float32/float64 array with finite values, or raise InputError."""
    if type(X) is np.ndarray and X.ndim == 2 and X.dtype in _FLOAT_DTYPES and (allow_empty or X.size):
        # What most callers pass, checked in ~1 us instead of ~3 us (a monitor's one-row update pays this per
        # row); the row-wise check that words the error runs only on a failure.
        if not np.isfinite(X).all():
            check_finite_rows(X, name, fix=fix, row_offset=row_offset)
        return X
    array = np.asarray(X)
    if array.dtype == object:
        try:
            array = array.astype(np.float64)
        except (TypeError, ValueError) as error:
            raise TypeError(f"{name} must be numeric: {error}") from error
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool) or np.iscomplexobj(array):
        raise InputError(
            f"{name} must be a real numeric array. Got dtype {array.dtype}. "
            "Convert it with X.astype('float32')."
        )
    if array.ndim != 2:
        fix = (
            "Reshape your data with X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single sample."
            if array.ndim < 2
            else "Flatten the trailing axes with X.reshape(len(X), -1)."
        )
        raise InputError(
            f"Expected a 2-D array for {name} (rows = samples, columns = features). "
            f"Got {array.ndim}-D array of shape {array.shape}. {fix}"
        )
    if not allow_empty and (array.shape[0] == 0 or array.shape[1] == 0):
        raise InputError(
            f"{name} must have at least 1 sample and 1 feature. Got shape {array.shape}."
        )
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    check_finite_rows(array, name, fix=fix, row_offset=row_offset)
    return array


def check_width(array: np.ndarray, n_features_in: int, owner: str, name: str = "X") -> None:
    """Raise InputError if ``array`` does not have ``n_features_in`` columns."""
    if array.shape[1] != n_features_in:
        raise InputError(
            f"{name} has {array.shape[1]} features, but {owner} is expecting {n_features_in} "
            f"features as input. Pass data with {n_features_in} columns, or fit a new {owner} on "
            "the new data."
        )


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int >= ``minimum`` or raise InputError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}. Got {value!r}.")
    return int(value)


def is_positive_real(value: Any) -> bool:
    """Whether ``value`` is a positive finite real number (a bool is not)."""
    return (
        not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real) and bool(np.isfinite(value))
        and value > 0
    )  # fmt: skip


def check_bandwidth(value: Any, name: str = "bandwidth") -> float | str:
    """Return a positive finite float, or the string ``"median"``."""
    if isinstance(value, str):
        if value == "median":
            return value
        raise InputError(f"{name} must be a positive number or 'median'. Got {value!r}.")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a positive number or 'median'. Got {value!r}.")
    if not np.isfinite(value) or value <= 0:
        raise InputError(
            f"{name} must be a positive finite number or 'median'. Got {value!r}; "
            "use e.g. bandwidth=1.0 or bandwidth='median'."
        )
    return float(value)


def check_feature_dtype(value: Any, name: str = "dtype") -> np.dtype:
    """Return the features' dtype, float32 or float64, or raise InputError."""
    try:
        dtype = np.dtype(value)
    except TypeError:
        dtype = None
    if dtype not in (np.float32, np.float64) or isinstance(value, bool):
        raise InputError(
            f"{name} must be 'float32' or 'float64'. Got {value!r}. float32 is the default; "
            "float64 features cost about 10x the time."
        )
    return dtype


def normalize_seed(seed: Any, name: str = "seed") -> int:
    """Turn an int, a ``numpy.random.Generator`` or None into a non-negative int seed.

    A Generator (or None, meaning fresh OS entropy) is drawn from once; the int
    that results is what a map records in its spec, so the map can be rebuilt.
    """
    if seed is None:
        return int(np.random.default_rng().integers(2**63))
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(2**63))
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**63:
        raise InputError(
            f"{name} must be an int in [0, 2**63), a numpy.random.Generator or None. Got {seed!r}."
        )
    return int(seed)


def is_in_memory(X: Any) -> bool:
    """numpy arrays, lists, pandas frames and scipy sparse matrices; not dask, xarray or paths.

    Sparse input counts as in memory so that validation rejects it with scikit-learn's
    message ("dense data is required").
    """
    from scipy.sparse import issparse

    if isinstance(X, (str, bytes)) or hasattr(X, "dask") or hasattr(X, "dims") or hasattr(X, "__fspath__"):
        return False
    return isinstance(X, (np.ndarray, list, tuple)) or hasattr(X, "__array__") or issparse(X)


def store_params(estimator: Any, arguments: dict[str, Any]) -> None:
    """Keep an estimator's constructor arguments unchanged, as scikit-learn's contract asks.

    Called as ``store_params(self, locals())``, the whole body of an ``__init__``: each argument
    becomes the attribute of its name (``get_params`` reads them back through the signature and
    ``clone`` passes them again), and validation waits for ``fit``.

    Examples
    --------
    >>> class Model:
    ...     def __init__(self, alpha=1.0, seed=0):
    ...         store_params(self, locals())
    >>> vars(Model(alpha=0.5))
    {'alpha': 0.5, 'seed': 0}
    """
    for name, value in arguments.items():
        if name != "self" and not name.startswith("__"):  # "__class__" is a local when __init__ calls super()
            setattr(estimator, name, value)


def validate_estimator_input(model: Any, X: Any, reset: bool, y: Any = None, **y_checks: Any) -> Any:
    """scikit-learn's ``validate_data`` (n_features_in_, feature names) plus streamrff's finite-row check.

    Returns the checked rows; with ``y``, ``(rows, y)``, y checked by ``validate_data`` with ``y_checks``
    (``multi_output``, ``y_numeric``, ...). scikit-learn's ValueErrors become InputErrors.
    """
    from sklearn.utils.validation import validate_data

    targets = () if y is None else (y,)  # an explicit y=None would be "y is required" for a regressor
    try:
        validated = validate_data(
            model, X, *targets, reset=reset, dtype=[np.float64, np.float32], ensure_all_finite=False, **y_checks
        )
    except ValueError as error:
        if isinstance(error, InputError):
            raise
        raise InputError(str(error)) from error
    if y is None:
        return check_rows(validated, "X")
    rows, y = validated
    return check_rows(rows, "X"), y


def check_format_version(version: Any, newest: int, target: str, noun: str, error: type[Exception]) -> None:
    """The ``version`` attribute of a ``noun`` ("sketch", "map") file: an int in ``1..newest``, or ``error``.

    Examples
    --------
    >>> from streamrff.errors import MapFormatError
    >>> check_format_version(1, 1, "m.json", "map", MapFormatError)
    >>> check_format_version(0, 1, "m.json", "map", MapFormatError)
    Traceback (most recent call last):
    ...
    streamrff.errors.MapFormatError: m.json: invalid format version 0 of a map file; expected a positive integer.
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise error(f"{target}: invalid format version {version!r} of a {noun} file; expected a positive integer.")
    if version > newest:
        raise error(
            f"{target} was written in {noun} format version {version}; this streamrff reads up to version "
            f"{newest}. Upgrade streamrff (pip install -U streamrff)."
        )
