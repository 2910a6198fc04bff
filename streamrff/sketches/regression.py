"""The regression sketch: the moment sketch plus the target sums that the normal equations need.

Kernel ridge regression in random-feature space solves
``(Z_c^T Z_c + alpha I) beta = Z_c^T y_c`` on centred features and targets.
Every term is a sum over rows: the count, ``sum z``, ``sum z z^T`` (the
:class:`~streamrff.MeanSketch` with moments), ``Z^T y``, ``sum y`` and
``y^T y``. So a :class:`RegressionSketch` is built chunk by chunk and merges
like every other sketch, across chunks, workers and sites that never share rows.

For wide maps, :class:`NystromRegressionSketch` keeps the same target sums beside
the low-rank range sketch ``Y = (sum z z^T) Omega`` of :class:`~streamrff.NystromSketch`
instead of the D x D second moment (``8 D l`` bytes per partial instead of ``8 D^2``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
from sklearn.base import clone

from .._base.blas import single_blas_thread
from .._base.validation import check_feature_dtype, check_rows, check_width, normalize_seed
from ..errors import InputError, SketchMismatchError
from ..maps import FeatureMap
from ..typing import ArrayLike2D
from .base import ChunkJob, describe_spec, expect_array, expect_int, expect_squared_norm_sum, invalid_count
from .mean import MeanSketch
from .moments import CentredMoments, moment_tile_rows
from .nystrom import _MIN_TILE_ROWS, NystromSketch, _dtype_suffix, check_sketch_size, test_matrix

__all__ = [
    "RegressionSketch",
    "NystromRegressionSketch",
    "regression_sketch_of_chunk",
    "regression_sketch_array",
    "check_targets",
    "first_target_values",
]


# A dataclass (no __init__ of its own) so that its annotations are fields of the kinds that inherit it.
@dataclasses.dataclass(eq=False, repr=False, init=False)
class _TargetSums:
    """What a sketch with regression targets adds to its feature sums: the target columns, their classes,
    the merge checks and file attributes of both (shared by the full and the low-rank regression sketch).

    Keyword-only fields, so that they follow the fields (and defaults) of any sketch kind."""

    cross_moment: np.ndarray = dataclasses.field(kw_only=True)
    target_sum: np.ndarray = dataclasses.field(kw_only=True)
    target_moment: np.ndarray = dataclasses.field(kw_only=True)
    target_ndim: int = dataclasses.field(default=1, kw_only=True)
    classes: tuple[Any, ...] | None = dataclasses.field(default=None, kw_only=True)
    target_shift: np.ndarray | None = dataclasses.field(default=None, kw_only=True)

    @classmethod
    def chunk_job(
        cls, feature_map: FeatureMap, n_columns: int, rows_dtype: Any, target_ndim: int, target_head: np.ndarray,
        dtype: Any = "float32", sketch_size: int | None = None, test_seed: int = 0,
    ) -> ChunkJob:  # fmt: skip
        """The engine's pass over rows joined with their targets (``RowSource.with_columns_of``): the first
        ``n_columns`` columns of a block are the data, the rest the targets; ``target_head`` (the targets' first
        rows) gives the one shift of every chunk (:func:`first_target_values`). With ``sketch_size``, the
        low-rank kind (a :class:`NystromRegressionSketch`)."""
        target_shift = tuple(float(value) for value in first_target_values(target_head))
        kernel = functools.partial(
            _regression_kernel, feature_map=feature_map, n_columns=n_columns, rows_dtype=np.dtype(rows_dtype),
            target_ndim=target_ndim, dtype=dtype, sketch_size=sketch_size, test_seed=test_seed,
            target_shift=target_shift,
        )  # fmt: skip
        low_rank = "" if sketch_size is None else f"-{sketch_size}-{test_seed}"
        key = f"{cls.kind}-{feature_map.fingerprint[:20]}{low_rank}-{len(target_shift)}{_dtype_suffix(dtype)}"
        return ChunkJob(kernel, cls, key, feature_map.n_features_out_, moments=sketch_size is None)

    def __post_init__(self) -> None:
        if self.classes is not None:
            self.classes = check_encoded_classes(self.classes, self.target_sum.shape[0], self.target_ndim)
        self.target_shift = check_target_shift(self.target_shift, self.target_sum.shape[0])
        super().__post_init__()  # type: ignore[misc]

    @property
    def n_targets(self) -> int:
        """Number of target columns t."""
        return int(self.target_sum.shape[0])

    @property
    def target_mean(self) -> np.ndarray:
        """Mean of each target column, ``target_shift + target_sum / count`` (NaN without rows)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.target_shift + self.target_sum / self.count

    def with_target_shift(self, shift: Any) -> Any:
        """This sketch with its target sums re-expressed about another shift (a new object; exact algebra).

        With ``d = target_shift - shift`` per column, ``n`` rows and feature sum ``f``:
        ``Z^T (y - shift) = Z^T (y - target_shift) + f d^T``,
        ``sum (y - shift) = sum (y - target_shift) + n d`` and
        ``(y - shift)^T (y - shift) = M + s d^T + d s^T + n d d^T`` (``s``, ``M``
        the sums about ``target_shift``): float64 arithmetic, no pass over the rows.

        Parameters
        ----------
        shift : float or array-like of shape (t,)
            The new shift, one finite value per target column.

        Returns
        -------
        RegressionSketch or NystromRegressionSketch
            ``self`` itself when the shift is already ``shift``.

        Raises
        ------
        InputError
            Unless ``shift`` is finite with one value per target column.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(0)
        >>> X, y = rng.normal(size=(50, 2)), 1e3 + rng.normal(size=50)
        >>> s = srf.regression_sketch_array(X, y, srf.RFF(n_features=8, bandwidth=1.0))
        >>> bool(s.target_shift[0] == y[0]), bool(np.isclose(s.target_mean[0], y.mean(), rtol=1e-14))
        (True, True)
        >>> raw = s.with_target_shift(0.0)
        >>> bool(np.isclose(raw.target_moment[0, 0], y @ y, rtol=1e-12))
        True
        """
        shift = check_target_shift(np.broadcast_to(np.asarray(shift, dtype=np.float64), (self.n_targets,)),
                                   self.n_targets)  # fmt: skip
        if np.array_equal(shift, self.target_shift):
            return self
        delta = self.target_shift - shift
        target_sum = self.target_sum + self.count * delta
        target_moment = (
            self.target_moment + np.outer(self.target_sum, delta) + np.outer(delta, self.target_sum)
            + self.count * np.outer(delta, delta)
        )  # fmt: skip
        return dataclasses.replace(  # type: ignore[type-var]
            self,
            cross_moment=self.cross_moment + np.outer(self.feature_sum, delta),  # type: ignore[attr-defined]
            target_sum=target_sum,
            target_moment=(target_moment + target_moment.T) / 2.0,
            target_shift=shift,
        )

    def _sum_of(self, parts: Any) -> Any:
        """Parts of different shifts are first re-expressed about their smallest shift, column by column (a choice
        that does not depend on the order of the parts, so merges stay commutative and associative); parts of no
        rows have no say (any shift is exact for them)."""
        with_rows = [part for part in parts if part.count > 0] or list(parts)
        shift = np.min([part.target_shift for part in with_rows], axis=0)
        aligned = [part.with_target_shift(shift) for part in parts]
        return super(_TargetSums, aligned[0])._sum_of(aligned)  # type: ignore[misc]

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = dict(super()._arrays())  # type: ignore[misc]
        arrays.pop("target_shift", None)  # an attribute of the file, beside n_targets
        return arrays

    def with_classes(self, classes: Any) -> Any:
        """This sketch (a new object sharing its arrays) recording that its targets encode ``classes`` one vs rest.

        Raises
        ------
        InputError
            Unless ``classes`` are at least 2 sorted distinct labels that fit
            the target columns (see :class:`RegressionSketch`).
        """
        return dataclasses.replace(self, classes=classes)  # type: ignore[type-var]

    def check_compatible(self, other: Any) -> None:
        super().check_compatible(other)  # type: ignore[misc]
        if (other.n_targets, other.target_ndim) != (self.n_targets, self.target_ndim):
            raise SketchMismatchError(
                f"Cannot merge regression sketches of different targets: {self.n_targets} column(s) "
                f"({self.target_ndim}-D) vs {other.n_targets} column(s) ({other.target_ndim}-D). "
                "Sketch every part with the same target columns."
            )
        if other.classes != self.classes:
            raise SketchMismatchError(
                f"Cannot merge regression sketches of targets that encode different classes: "
                f"{_describe_classes(self.classes)} vs {_describe_classes(other.classes)}. The columns of one-vs-rest "
                "targets follow the class list: encode every part with the same classes "
                "(KernelRidgeClassifier.encode_targets(labels, classes); CLI: sketch --classes, the same list)."
            )

    def _target_attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"n_targets": self.n_targets}
        if self.classes is not None:  # absent, not null, for regression targets: the files of before
            attrs["classes"] = list(self.classes)
        if self.target_shift.any():  # absent for no shift: the files of before, which it reads as 0
            attrs["target_shift"] = [float(value) for value in self.target_shift]
        return attrs

    @staticmethod
    def _target_parts(attrs: dict[str, Any], arrays: dict[str, np.ndarray], width: int) -> dict[str, Any]:
        """The target fields of a sketch file, checked (shapes, dtypes, ``target_ndim``, classes)."""
        n_targets = expect_int(attrs, "n_targets")
        if n_targets < 1:
            raise InputError(f"Attribute 'n_targets' must be >= 1. Got {n_targets}.")
        target_ndim = attrs.get("target_ndim")
        if target_ndim not in (1, 2) or isinstance(target_ndim, bool) or (target_ndim == 1 and n_targets != 1):
            raise InputError(f"Attribute 'target_ndim' must be 1 (one target) or 2. Got {target_ndim!r}.")
        return {
            "cross_moment": expect_array(arrays, "cross_moment", (width, n_targets), np.float64),
            "target_sum": expect_array(arrays, "target_sum", (n_targets,), np.float64),
            "target_moment": expect_array(arrays, "target_moment", (n_targets, n_targets), np.float64),
            "target_ndim": target_ndim,
            "classes": _expect_classes(attrs),
            "target_shift": _expect_target_shift(attrs, n_targets),
        }

    def _targets_repr(self) -> str:
        classes = "" if self.classes is None else f", classes={list(self.classes)!r}"
        return f"n_targets={self.n_targets}{classes}"


# init=False: the target fields stand between ``moment`` and ``n_invalid`` in the constructor,
# an order that dataclass inheritance cannot give.
@dataclasses.dataclass(eq=False, repr=False, init=False)
class RegressionSketch(_TargetSums, MeanSketch):
    """A moment sketch of features plus float64 sums of the targets: ``Z^T y``, ``sum y`` and ``y^T y``.

    Everything kernel ridge regression needs (:class:`streamrff.KernelRidge`),
    as sums over rows, so it merges like the other kinds. Built with
    :func:`streamrff.sketch` (``target=y``) or :func:`regression_sketch_array`.

    Parameters
    ----------
    feature_map, count, feature_sum, squared_norm_sum
        As for :class:`~streamrff.MeanSketch`.
    moment : ndarray of shape (D, D), float64
        Second moment ``sum z_i z_i^T`` (never None here).
    cross_moment : ndarray of shape (D, t), float64
        ``Z^T (Y - c) = sum z_i (y_i - c)^T``, ``c`` the ``target_shift``.
    target_sum : ndarray of shape (t,), float64
        ``sum (y_i - c)``.
    target_moment : ndarray of shape (t, t), float64
        ``(Y - c)^T (Y - c)``.
    target_ndim : {1, 2}
        Whether the targets were a vector (t = 1) or a matrix; predictions
        take the same shape.
    n_invalid : int, default=0
        Rows skipped because their features or targets held NaN or inf.
    classes : array-like of shape (n_classes,), optional
        For targets that encode class labels one vs rest
        (:meth:`streamrff.KernelRidgeClassifier.encode_targets`): the sorted
        labels, numbers or text, at least 2; one target column for 2 classes,
        else one per class. Kept as a tuple of Python scalars (a list in the
        file's attributes); sketches of other classes do not merge, even with
        as many columns. None for regression targets.
    target_shift : array-like of shape (t,), optional
        The constant ``c`` the target sums are taken about, one per column
        (default 0, as in files written before it existed). Sketches fix it
        from the first target row they see (:func:`first_target_values`; the
        engine: the source's first row, for every chunk), so that a large
        offset in ``y`` (``y = 1e8 + signal``) does not cancel the signal out
        of ``(y - c)^T (y - c)``. Sketches of different shifts merge: the
        parts are re-expressed about the smallest shift of each column
        (:meth:`with_target_shift`, exact algebra). ``target_mean`` is the
        mean of ``y`` itself.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
    >>> s = srf.regression_sketch_array(X, y, rff)
    >>> Z, shifted = rff.transform(X).astype(np.float64), y - s.target_shift[0]  # about the first target
    >>> bool(np.allclose(s.cross_moment[:, 0], Z.T @ shifted))
    True
    >>> bool(np.isclose(s.target_moment[0, 0], shifted @ shifted))
    True
    >>> first, rest = srf.regression_sketch_array(X[:80], y[:80], rff), srf.regression_sketch_array(X[80:], y[80:], rff)
    >>> halves = first.merge(rest).with_target_shift(s.target_shift)  # the parts' shifts differ: exact algebra
    >>> halves.count, bool(np.allclose(halves.cross_moment, s.cross_moment))
    (200, True)

    A sketch of +-1 targets records the classes they encode:

    >>> labels = np.where(y > 0, "up", "down")
    >>> targets = srf.KernelRidgeClassifier.encode_targets(labels, ["down", "up"])
    >>> labelled = srf.regression_sketch_array(X, targets, rff, classes=["down", "up"])
    >>> labelled.classes, bool(np.allclose(labelled.target_mean * 200, [np.sum(np.where(y > 0, 1.0, -1.0))]))
    (('down', 'up'), True)
    """

    kind = "regression"
    _summed_fields = (
        "count", "feature_sum", "squared_norm_sum", "moment", "cross_moment", "target_sum", "target_moment",
        "n_invalid",
    )  # fmt: skip
    _fixed_fields = ("feature_map", "target_ndim", "classes", "target_shift")
    # A regression sketch has no per-column part (sketch(target=...) refuses columns=True); not a
    # constructor argument, so dataclasses.replace (with_classes, ...) does not pass it.
    columns: None = dataclasses.field(default=None, init=False)

    def __init__(
        self,
        feature_map: FeatureMap,
        count: int,
        feature_sum: np.ndarray,
        squared_norm_sum: float,
        moment: np.ndarray,
        cross_moment: np.ndarray,
        target_sum: np.ndarray,
        target_moment: np.ndarray,
        target_ndim: int = 1,
        n_invalid: int = 0,
        classes: Any = None,
        target_shift: Any = None,
    ) -> None:
        # The target fields first: MeanSketch's constructor then checks every field (__post_init__).
        self.cross_moment, self.target_sum, self.target_moment = cross_moment, target_sum, target_moment
        self.target_ndim, self.classes, self.target_shift = target_ndim, classes, target_shift
        MeanSketch.__init__(self, feature_map, count, feature_sum, squared_norm_sum, moment, n_invalid)

    @classmethod
    def empty(cls, feature_map: FeatureMap, n_targets: int = 1, target_ndim: int = 1) -> RegressionSketch:  # type: ignore[override]
        """The neutral element: zero rows, ``n_targets`` target columns."""
        width = feature_map.n_features_out_
        return cls(
            feature_map, 0, np.zeros(width), 0.0, np.zeros((width, width)),
            np.zeros((width, n_targets)), np.zeros(n_targets), np.zeros((n_targets, n_targets)), target_ndim,
        )  # fmt: skip

    def _extra_attrs(self) -> dict[str, Any]:
        return {**super()._extra_attrs(), **self._target_attrs()}

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> RegressionSketch:
        from ..maps import map_from_spec

        feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        if attrs.get("moments") is not True:
            raise InputError(
                f"A regression sketch always holds the second moment. Got moments={attrs.get('moments')!r}."
            )
        return cls(
            feature_map,
            expect_int(attrs, "count"),
            expect_array(arrays, "feature_sum", (width,), np.float64),
            expect_squared_norm_sum(attrs),
            expect_array(arrays, "moment", (width, width), np.float64),
            n_invalid=expect_int(attrs, "n_invalid"),
            **cls._target_parts(attrs, arrays, width),
        )

    def __repr__(self) -> str:
        return (
            f"RegressionSketch(count={self.count}, n_features={self.feature_sum.shape[0]}, "
            f"{self._targets_repr()}, map={describe_spec(self.spec)})"
        )


@dataclasses.dataclass(eq=False, repr=False)
class NystromRegressionSketch(_TargetSums, NystromSketch):
    """The low-rank regression sketch: a :class:`~streamrff.NystromSketch` plus ``Z^T y``, ``sum y`` and ``y^T y``.

    For kernel ridge regression with wide maps (:class:`streamrff.KernelRidge`
    with ``rank``): the D x D second moment of :class:`RegressionSketch`
    (2 GiB at D = 16 384) is replaced by its linear range sketch
    ``Y = (sum z z^T) Omega`` (D x l, ``8 D l`` bytes) with the seeded test
    matrix ``Omega``; the target sums are exact, as in :class:`RegressionSketch`.
    Every part is a sum over rows, so it merges (commutative and associative to
    float64 rounding) and saves like the other kinds (kind
    ``"nystrom-regression"``). Build it with ``streamrff.nystrom_sketch(X, map,
    sketch_size=l, target=y)`` or :func:`regression_sketch_array` with
    ``sketch_size``.

    Parameters
    ----------
    feature_map, count, feature_sum, squared_norm_sum, range_sketch, test_seed
        As for :class:`~streamrff.NystromSketch`.
    n_invalid : int, default=0
        Rows skipped because their features or targets held NaN or inf.
    cross_moment, target_sum, target_moment, target_ndim, classes, target_shift
        As for :class:`RegressionSketch` (keyword-only).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.sketches.nystrom import test_matrix
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
    >>> s = srf.regression_sketch_array(X, y, rff, sketch_size=8, test_seed=1)
    >>> Z = rff.transform(X).astype(np.float64)
    >>> bool(np.allclose(s.range_sketch, Z.T @ (Z @ test_matrix(1, 32, 8))))
    True
    >>> bool(np.allclose(s.cross_moment[:, 0], Z.T @ (y - y[0]))), s.n_targets
    (True, 1)
    >>> halves = srf.regression_sketch_array(X[:80], y[:80], rff, sketch_size=8, test_seed=1).merge(
    ...     srf.regression_sketch_array(X[80:], y[80:], rff, sketch_size=8, test_seed=1))
    >>> halves.count, bool(np.allclose(halves.range_sketch, s.range_sketch, rtol=1e-12, atol=1e-12))
    (200, True)
    """

    kind = "nystrom-regression"
    _summed_fields = (
        "count", "feature_sum", "squared_norm_sum", "range_sketch", "cross_moment", "target_sum", "target_moment",
        "n_invalid",
    )  # fmt: skip
    _fixed_fields = ("feature_map", "test_seed", "target_ndim", "classes", "target_shift")

    @classmethod
    def empty(  # type: ignore[override]
        cls, feature_map: FeatureMap, sketch_size: int, test_seed: int, n_targets: int = 1, target_ndim: int = 1
    ) -> NystromRegressionSketch:
        """The neutral element: zero rows, ``n_targets`` target columns."""
        width = feature_map.n_features_out_
        return cls(
            feature_map, 0, np.zeros(width), 0.0, np.zeros((width, sketch_size)), test_seed,
            cross_moment=np.zeros((width, n_targets)), target_sum=np.zeros(n_targets),
            target_moment=np.zeros((n_targets, n_targets)), target_ndim=target_ndim,
        )  # fmt: skip

    def _attrs(self) -> dict[str, Any]:
        return {**super()._attrs(), "target_ndim": self.target_ndim, **self._target_attrs()}

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> NystromRegressionSketch:
        fields = cls._range_parts(spec, map_arrays, attrs, arrays)
        return cls(**fields, **cls._target_parts(attrs, arrays, fields["feature_map"].n_features_out_))

    def __repr__(self) -> str:
        return (
            f"NystromRegressionSketch(count={self.count}, n_features={self.feature_sum.shape[0]}, "
            f"sketch_size={self.sketch_size}, test_seed={self.test_seed}, {self._targets_repr()}, "
            f"map={describe_spec(self.spec)})"
        )


def check_encoded_classes(classes: Any, n_targets: int, target_ndim: int) -> tuple[Any, ...]:
    """The classes of one-vs-rest targets as a tuple of Python scalars, or raise InputError.

    At least 2 distinct labels (numbers or text), sorted, one target column
    for 2 classes and one per class otherwise, in 2-D targets (what
    :meth:`streamrff.KernelRidgeClassifier.encode_targets` makes).
    """
    values = np.asarray(classes)
    labels = values.tolist() if values.ndim == 1 else []
    if len(labels) < 2 or not all(
        isinstance(label, (bool, int, float, str)) and type(label) is type(labels[0]) for label in labels
    ):
        raise InputError(
            f"classes must be a list of at least 2 labels of one type (numbers or text). Got {classes!r}. "
            "Pass the classes the targets were encoded with."
        )
    if len(set(labels)) != len(labels) or labels != sorted(labels):
        raise InputError(f"classes must be distinct and sorted (as numpy.unique returns them). Got {labels}.")
    if isinstance(labels[0], float) and not np.isfinite(labels).all():
        raise InputError(f"classes must be finite numbers or text. Got {labels}.")
    expected = 1 if values.size == 2 else values.size
    if (n_targets, target_ndim) != (expected, 2):
        raise InputError(
            f"Expected one-vs-rest targets of {expected} column(s) (2-D) for {values.size} classes. Got "
            f"{n_targets} column(s) ({target_ndim}-D). Encode the labels with "
            "KernelRidgeClassifier.encode_targets(labels, classes)."
        )
    return tuple(labels)


def check_target_shift(shift: Any, n_targets: int) -> np.ndarray:
    """The target shift as a float64 array of shape (n_targets,) (zeros for None), or raise InputError."""
    if shift is None:
        return np.zeros(n_targets)
    values = np.array(shift, dtype=np.float64).reshape(-1)
    if values.shape != (n_targets,) or not np.isfinite(values).all():
        raise InputError(
            f"target_shift must be {n_targets} finite number(s), one per target column. Got {shift!r}."
        )
    return values


def first_target_values(targets: np.ndarray) -> np.ndarray:
    """The shift of a regression sketch: each target column's first finite value (0 for a column with none).

    Any constant is exact algebra; one near the targets' values keeps the float64 sums
    ``Z^T (y - c)`` and ``(y - c)^T (y - c)`` free of the cancellation that a large offset in
    ``y`` causes (y = 1e8 + signal: ``y^T y`` holds the signal's variance in its last 6 digits).
    The first value, not a mean, so that it does not depend on how the rows are chunked.
    """
    columns = np.asarray(targets, dtype=np.float64).reshape(targets.shape[0], -1)
    finite = np.isfinite(columns)
    first = np.argmax(finite, axis=0)
    values = columns[first, np.arange(columns.shape[1])] if columns.shape[0] else np.zeros(columns.shape[1])
    return np.where(finite.any(axis=0), values, 0.0) if columns.shape[0] else values


def _expect_target_shift(attrs: dict[str, Any], n_targets: int) -> np.ndarray:
    """The ``target_shift`` attribute: absent (0) in files of unshifted sums and in every file before it existed."""
    shift = attrs.get("target_shift")
    if shift is None:
        return np.zeros(n_targets)
    if not isinstance(shift, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in shift):
        raise InputError(f"Attribute 'target_shift' must be a list of {n_targets} numbers. Got {shift!r}.")
    return check_target_shift(shift, n_targets)


def _describe_classes(classes: tuple[Any, ...] | None) -> str:
    return "no classes (regression targets)" if classes is None else f"classes {list(classes)!r}"


def _expect_classes(attrs: dict[str, Any]) -> list[Any] | None:
    """The ``classes`` attribute (absent in files of regression targets, and in every file before it existed)."""
    classes = attrs.get("classes")
    if classes is None:
        return None
    if not isinstance(classes, list) or not all(
        isinstance(label, (bool, int, float, str)) and type(label) is type(classes[0]) for label in classes
    ):
        raise InputError(f"Attribute 'classes' must be a list of labels of one type. Got {classes!r}.")
    return classes


def _regression_kernel(
    rows: np.ndarray, row_offset: int, valid: np.ndarray | None, feature_map: FeatureMap, n_columns: int,
    rows_dtype: np.dtype, target_ndim: int, dtype: Any = "float32", sketch_size: int | None = None,
    test_seed: int = 0, target_shift: tuple[float, ...] | None = None,
) -> RegressionSketch | NystromRegressionSketch:  # fmt: skip
    # float32 data widened to float64 beside float64 targets narrows back exactly.
    data = np.ascontiguousarray(rows[:, :n_columns], dtype=rows_dtype)
    return regression_sketch_of_chunk(
        data, rows[:, n_columns:], feature_map, n_invalid=invalid_count(valid), dtype=dtype,
        target_ndim=target_ndim, sketch_size=sketch_size, test_seed=test_seed, target_shift=target_shift,
    )  # fmt: skip


@single_blas_thread
def regression_sketch_of_chunk(
    rows: np.ndarray,
    targets: np.ndarray,
    feature_map: FeatureMap,
    n_invalid: int = 0,
    dtype: Any = "float32",
    target_ndim: int | None = None,
    classes: Any = None,
    sketch_size: int | None = None,
    test_seed: int = 0,
    target_shift: Any = None,
) -> RegressionSketch | NystromRegressionSketch:
    """Sketch trusted, finite rows and their targets: the pure per-chunk kernel of both regression sketches.

    The second moment is the moment sketch's (:func:`streamrff.sketches.mean.mean_sketch_of_chunk`
    with moments): each tile of features is centred on its own mean and its ``Z^T Z`` taken
    by a symmetric rank-k update in the features' dtype (float32 ``ssyrk``), accumulated in
    float64 with the mean's terms (:class:`streamrff.sketches.moments.CentredMoments`). So the
    sums agree with float64 arithmetic on the same features to float32 rounding (relative
    1e-6, as every sketch), and a fit pass costs little more than a moments pass. That
    rounding depends on where tiles start; the ridge solve at the alphas GCV picks amplifies
    it into the coefficients, but not into the predictions (the merge contract of
    docs/guide/ridge.rst is on the sums and the predictions).
    The targets are shifted by ``target_shift`` (float64, exact algebra) and ``Z^T (y - c)``
    is a float64 product of the centred tile widened to float64 plus ``c_tile (sum y - c)^T``;
    ``sum (y - c)`` and ``(y - c)^T (y - c)`` are float64.
    With ``sketch_size`` the tile's range sketch ``Z^T (Z Omega)`` replaces ``Z^T Z``: two
    float64 GEMMs (``4 D l`` flops per row), so the ``C Omega`` the low-rank solve
    reconstructs ``C`` from carries no float32 product rounding.

    Parameters
    ----------
    rows : ndarray of shape (n, d)
        Finite rows.
    targets : ndarray of shape (n,) or (n, t)
        Finite targets, one per row.
    feature_map : FeatureMap
        Fitted map.
    n_invalid : int, default=0
        Rows the caller dropped as non-finite (recorded in the sketch).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the features.
    target_ndim : {1, 2}, optional
        Shape of the targets to record; default ``targets.ndim``.
    classes : array-like, optional
        The classes that one-vs-rest targets encode (see :class:`RegressionSketch`).
    sketch_size : int, optional
        Make the low-rank :class:`NystromRegressionSketch` with a test matrix of
        this many columns l (``1 <= l <= D``, trusted).
    test_seed : int, default=0
        Seed of the test matrix (:func:`streamrff.sketches.nystrom.test_matrix`), with ``sketch_size``.
    target_shift : array-like of shape (t,), optional
        The constant subtracted from each target column before summing (see
        :class:`RegressionSketch`); default :func:`first_target_values` of ``targets``.
        The engine passes one shift, from the source's first rows, to every chunk.

    Returns
    -------
    RegressionSketch or NystromRegressionSketch
    """
    width = feature_map.n_features_out_
    target_ndim = targets.ndim if target_ndim is None else int(target_ndim)
    columns = np.asarray(targets, dtype=np.float64).reshape(rows.shape[0], -1)
    shift = first_target_values(columns) if target_shift is None else check_target_shift(target_shift, columns.shape[1])
    shifted = columns - shift
    dtype = np.dtype(dtype)
    if sketch_size is None:
        sums = CentredMoments(width, dtype)
        cross_moment = _centred_tile_sums(rows, shifted, feature_map, sums, dtype)
        feature_sum, squared_norm_sum, moment = sums.totals()
        return RegressionSketch(
            feature_map, rows.shape[0], feature_sum, squared_norm_sum, moment, cross_moment,
            shifted.sum(axis=0), shifted.T @ shifted, target_ndim, n_invalid, classes, shift,
        )  # fmt: skip
    omega = test_matrix(test_seed, width, sketch_size)
    range_sketch = np.zeros((width, sketch_size))

    def add_range_sketch(tile: np.ndarray) -> None:
        range_sketch[...] += tile.T @ (tile @ omega)

    tile_rows = max(_MIN_TILE_ROWS, feature_map._tile_rows(width))
    feature_sum, squared_norm_sum, cross_moment = _tile_sums(
        rows, shifted, feature_map, tile_rows, dtype, add_range_sketch
    )
    return NystromRegressionSketch(
        feature_map, rows.shape[0], feature_sum, squared_norm_sum, range_sketch, test_seed, n_invalid,
        cross_moment=cross_moment, target_sum=shifted.sum(axis=0), target_moment=shifted.T @ shifted,
        target_ndim=target_ndim, classes=classes, target_shift=shift,
    )  # fmt: skip


def _centred_tile_sums(
    rows: np.ndarray, targets: np.ndarray, feature_map: FeatureMap, sums: CentredMoments, dtype: np.dtype
) -> np.ndarray:
    """Add every tile's features to ``sums`` (centred float32 rank-k updates) and return ``Z^T targets``.

    ``Z^T y = Zc^T y + c (sum y)^T`` per tile, ``Zc`` the centred tile widened exactly to
    float64 (the features ``sums`` holds are ``Zc + c``, so both describe the same features)."""
    tile_rows = moment_tile_rows(dtype)
    cross_moment = np.zeros((feature_map.n_features_out_, targets.shape[1]))
    wide = np.empty((min(tile_rows, rows.shape[0]), feature_map.n_features_out_))
    for start, features in feature_map.embed_tiles(rows, tile_rows=tile_rows, dtype=dtype):
        tile_targets = targets[start : start + features.shape[0]]
        shift = sums.add(features)  # features now hold the centred tile
        centred = wide[: features.shape[0]]
        centred[...] = features
        cross_moment += centred.T @ tile_targets
        cross_moment += np.outer(shift, tile_targets.sum(axis=0))
    return cross_moment


def _tile_sums(
    rows: np.ndarray, targets: np.ndarray, feature_map: FeatureMap, tile_rows: int, dtype: Any, add_second_moment: Any
) -> tuple[np.ndarray, float, np.ndarray]:
    """``(sum z, sum ||z||^2, Z^T y)`` over row tiles widened to float64 (exactly);
    ``add_second_moment(tile)`` accumulates each tile's range sketch."""
    width = feature_map.n_features_out_
    feature_sum = np.zeros(width)
    cross_moment = np.zeros((width, targets.shape[1]))
    wide = np.empty((min(tile_rows, rows.shape[0]), width))
    squared_norm_sum = 0.0
    for start, features in feature_map.embed_tiles(rows, tile_rows=tile_rows, dtype=np.dtype(dtype)):
        tile = wide[: features.shape[0]]
        tile[...] = features
        feature_sum += tile.sum(axis=0)
        squared_norm_sum += float(np.einsum("ij,ij->", tile, tile))
        add_second_moment(tile)
        cross_moment += tile.T @ targets[start : start + features.shape[0]]
    return feature_sum, squared_norm_sum, cross_moment


def check_targets(y: Any, n_rows: int, name: str = "y") -> np.ndarray:
    """Return in-memory targets as a finite float64 array of shape (n_rows,) or (n_rows, t), or raise InputError."""
    targets = np.asarray(y)
    if targets.dtype == object or not (np.issubdtype(targets.dtype, np.number) or targets.dtype == bool):
        raise InputError(
            f"{name} must be real numbers. Got dtype {targets.dtype}. Convert it with y.astype('float64')."
        )
    if np.iscomplexobj(targets):
        raise InputError(f"{name} must be real numbers. Got complex dtype {targets.dtype}.")
    if targets.ndim not in (1, 2) or (targets.ndim == 2 and targets.shape[1] == 0):
        raise InputError(
            f"Expected {name} of shape (n_samples,) or (n_samples, n_targets). Got shape {targets.shape}. "
            f"Reshape it, e.g. {name}.reshape(len({name}), -1)."
        )
    if targets.shape[0] != n_rows:
        raise InputError(
            f"Expected {name} with one row per row of X ({n_rows}). Got {targets.shape[0]} rows. "
            f"Pass the targets of exactly these rows."
        )
    targets = targets.astype(np.float64)
    if not np.isfinite(targets).all():
        bad = np.flatnonzero(~np.isfinite(targets.reshape(n_rows, -1)).all(axis=1))
        raise InputError(
            f"{name} must contain only finite values. Got NaN or inf in {bad.size} row(s) (first: row {bad[0]}). "
            "Drop or impute those rows."
        )
    return targets


def regression_sketch_array(
    X: ArrayLike2D,
    y: Any,
    feature_map: FeatureMap,
    dtype: Any = "float32",
    classes: Any = None,
    sketch_size: int | None = None,
    test_seed: int = 0,
) -> RegressionSketch | NystromRegressionSketch:
    """Sketch in-memory rows and targets: counts, feature sums and moments, ``Z^T y``, ``sum y``, ``y^T y``.

    The in-memory counterpart of ``streamrff.sketch(X, feature_map, target=y)``
    (and, with ``sketch_size``, of ``streamrff.nystrom_sketch(X, feature_map,
    sketch_size, target=y)``); an unfitted map is cloned and fitted on ``X`` first.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features_in)
        Finite rows.
    y : array-like of shape (n_samples,) or (n_samples, n_targets)
        Finite targets.
    feature_map : FeatureMap
        Fitted or unfitted map.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the features (sums are float64 either way).
    classes : array-like of shape (n_classes,), optional
        The classes ``y`` encodes one vs rest, recorded in the sketch (see
        :class:`RegressionSketch`).
    sketch_size : int, optional
        Make the low-rank :class:`NystromRegressionSketch` with a test matrix
        of this many columns l (``1 <= l <= D``) instead of the D x D moment.
    test_seed : int, default=0
        Seed of the test matrix (with ``sketch_size`` only).

    Returns
    -------
    RegressionSketch or NystromRegressionSketch

    Raises
    ------
    InputError
        On non-2-D or non-finite X, targets of another length or shape, a
        width different from the fitted map's, classes that do not fit
        the targets' columns, or ``sketch_size`` outside ``1..D``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(1)
    >>> X, Y = rng.normal(size=(50, 2)), rng.normal(size=(50, 3))
    >>> s = srf.regression_sketch_array(X, Y, srf.RFF(n_features=16, bandwidth=1.0))
    >>> s.cross_moment.shape, s.n_targets, bool(np.allclose(s.with_target_shift(0.0).target_moment, Y.T @ Y))
    ((16, 3), 3, True)
    """
    if not isinstance(feature_map, FeatureMap):
        raise InputError(f"feature_map must be a streamrff FeatureMap such as RFF(). Got {type(feature_map).__name__}.")
    dtype = check_feature_dtype(dtype)
    X = check_rows(X, "X")
    targets = check_targets(y, X.shape[0])
    if classes is not None:
        classes = check_encoded_classes(classes, 1 if targets.ndim == 1 else targets.shape[1], targets.ndim)
    if feature_map.is_fitted():
        check_width(X, feature_map.n_features_in_, type(feature_map).__name__)
    else:
        feature_map = clone(feature_map).fit(X)
    if sketch_size is not None:
        sketch_size = check_sketch_size(sketch_size, feature_map.n_features_out_)
        test_seed = normalize_seed(test_seed, "test_seed")
    return regression_sketch_of_chunk(
        X, targets, feature_map, dtype=dtype, classes=classes, sketch_size=sketch_size, test_seed=test_seed
    )
