"""The regression sketch: the moment sketch plus the target sums that the normal equations need.

Kernel ridge regression in random-feature space solves
``(Z_c^T Z_c + alpha I) beta = Z_c^T y_c`` on centred features and targets.
Every term is a sum over rows: the count, ``sum z``, ``sum z z^T`` (the
:class:`~streamrff.MeanSketch` with moments), ``Z^T y``, ``sum y`` and
``y^T y``. So a :class:`RegressionSketch` is built chunk by chunk and merges
like every other sketch, across chunks, workers and sites that never share rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from sklearn.base import clone

from ._blas import single_blas_thread
from ._moments import _MOMENT_TILE_ROWS, _rank_k_update
from ._validation import check_feature_dtype, check_rows, check_width
from .errors import InputError, SketchMismatchError
from .maps import FeatureMap
from .sketches import MeanSketch, _describe, _expect_array, _expect_int, _expect_squared_norm_sum
from .typing import ArrayLike2D

__all__ = ["RegressionSketch", "regression_sketch_of_chunk", "regression_sketch_array", "check_targets"]


# init=False: the target fields stand between ``moment`` and ``n_invalid`` in the constructor,
# an order that dataclass inheritance cannot give.
@dataclasses.dataclass(eq=False, repr=False, init=False)
class RegressionSketch(MeanSketch):
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
        ``Z^T Y = sum z_i y_i^T``.
    target_sum : ndarray of shape (t,), float64
        ``sum y_i``.
    target_moment : ndarray of shape (t, t), float64
        ``Y^T Y = sum y_i y_i^T``.
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

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
    >>> s = srf.regression_sketch_array(X, y, rff)
    >>> Z = rff.transform(X).astype(np.float64)
    >>> bool(np.allclose(s.cross_moment[:, 0], Z.T @ y)), bool(np.isclose(s.target_moment[0, 0], y @ y))
    (True, True)
    >>> first, rest = srf.regression_sketch_array(X[:80], y[:80], rff), srf.regression_sketch_array(X[80:], y[80:], rff)
    >>> halves = first.merge(rest)
    >>> halves.count, bool(np.allclose(halves.cross_moment, s.cross_moment))
    (200, True)

    A sketch of +-1 targets records the classes they encode:

    >>> labels = np.where(y > 0, "up", "down")
    >>> targets = srf.KernelRidgeClassifier.encode_targets(labels, ["down", "up"])
    >>> labelled = srf.regression_sketch_array(X, targets, rff, classes=["down", "up"])
    >>> labelled.classes, bool(np.allclose(labelled.target_sum, [np.sum(np.where(y > 0, 1.0, -1.0))]))
    (('down', 'up'), True)
    """

    kind = "regression"
    _summed_fields = (
        "count", "feature_sum", "squared_norm_sum", "moment", "cross_moment", "target_sum", "target_moment",
        "n_invalid",
    )  # fmt: skip
    _fixed_fields = ("feature_map", "target_ndim", "classes")

    cross_moment: np.ndarray
    target_sum: np.ndarray
    target_moment: np.ndarray
    target_ndim: int
    classes: tuple[Any, ...] | None

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
    ) -> None:
        # The target fields first: MeanSketch's constructor then checks every field (SumSketch.__post_init__).
        self.cross_moment = cross_moment
        self.target_sum = target_sum
        self.target_moment = target_moment
        self.target_ndim = target_ndim
        self.classes = None if classes is None else check_encoded_classes(classes, target_sum.shape[0], target_ndim)
        super().__init__(feature_map, count, feature_sum, squared_norm_sum, moment, n_invalid)

    @classmethod
    def empty(cls, feature_map: FeatureMap, n_targets: int = 1, target_ndim: int = 1) -> RegressionSketch:  # type: ignore[override]
        """The neutral element: zero rows, ``n_targets`` target columns."""
        width = feature_map.n_features_out_
        return cls(
            feature_map, 0, np.zeros(width), 0.0, np.zeros((width, width)),
            np.zeros((width, n_targets)), np.zeros(n_targets), np.zeros((n_targets, n_targets)), target_ndim,
        )  # fmt: skip

    @property
    def n_targets(self) -> int:
        """Number of target columns t."""
        return int(self.target_sum.shape[0])

    def with_classes(self, classes: Any) -> RegressionSketch:
        """This sketch (a new object sharing its arrays) recording that its targets encode ``classes`` one vs rest.

        Raises
        ------
        InputError
            Unless ``classes`` are at least 2 sorted distinct labels that fit
            the target columns (see :class:`RegressionSketch`).
        """
        return dataclasses.replace(self, classes=classes)

    def check_compatible(self, other: Any) -> None:
        super().check_compatible(other)
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

    def _extra_attrs(self) -> dict[str, Any]:
        attrs = {**super()._extra_attrs(), "n_targets": self.n_targets}
        if self.classes is not None:  # absent, not null, for regression targets: the files of before
            attrs["classes"] = list(self.classes)
        return attrs

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> RegressionSketch:
        from .maps import map_from_spec

        feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        if attrs.get("moments") is not True:
            raise InputError(
                f"A regression sketch always holds the second moment. Got moments={attrs.get('moments')!r}."
            )
        n_targets = _expect_int(attrs, "n_targets")
        if n_targets < 1:
            raise InputError(f"Attribute 'n_targets' must be >= 1. Got {n_targets}.")
        target_ndim = attrs.get("target_ndim")
        if target_ndim not in (1, 2) or isinstance(target_ndim, bool) or (target_ndim == 1 and n_targets != 1):
            raise InputError(f"Attribute 'target_ndim' must be 1 (one target) or 2. Got {target_ndim!r}.")
        return cls(
            feature_map,
            _expect_int(attrs, "count"),
            _expect_array(arrays, "feature_sum", (width,), np.float64),
            _expect_squared_norm_sum(attrs),
            _expect_array(arrays, "moment", (width, width), np.float64),
            _expect_array(arrays, "cross_moment", (width, n_targets), np.float64),
            _expect_array(arrays, "target_sum", (n_targets,), np.float64),
            _expect_array(arrays, "target_moment", (n_targets, n_targets), np.float64),
            target_ndim,
            _expect_int(attrs, "n_invalid"),
            _expect_classes(attrs),
        )

    def __repr__(self) -> str:
        classes = "" if self.classes is None else f", classes={list(self.classes)!r}"
        return (
            f"RegressionSketch(count={self.count}, n_features={self.feature_sum.shape[0]}, "
            f"n_targets={self.n_targets}{classes}, map={_describe(self.spec)})"
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


@single_blas_thread
def regression_sketch_of_chunk(
    rows: np.ndarray,
    targets: np.ndarray,
    feature_map: FeatureMap,
    n_invalid: int = 0,
    dtype: Any = "float32",
    target_ndim: int | None = None,
    classes: Any = None,
) -> RegressionSketch:
    """Sketch trusted, finite rows and their targets: the pure per-chunk kernel of the regression sketch.

    Features are embedded tile by tile (as :func:`streamrff.sketches.mean_sketch_of_chunk`
    with moments), but each tile's ``Z^T Z`` is a float64 symmetric rank-k
    update of the features widened to float64 (twice the flops of the mean
    sketch's float32 update): the ridge solve at small alpha amplifies the
    rounding of float32 products, which depends on where tiles start, into
    the coefficients (even products of centred tiles moved merged halves'
    coefficients by 1e-4 to 2e-3; see docs/guide/ridge.rst).
    The feature sums and ``Z^T y`` come from the same float64 tile (so the
    centred moment ``Z^T Z - n mu mu^T`` stays positive semi-definite to
    float64 rounding), with float64 targets; ``sum y`` and ``y^T y`` are float64.

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

    Returns
    -------
    RegressionSketch
    """
    dtype = np.dtype(dtype)
    target_ndim = targets.ndim if target_ndim is None else int(target_ndim)
    targets = np.asarray(targets, dtype=np.float64).reshape(rows.shape[0], -1)
    width, n_targets = feature_map.n_features_out_, targets.shape[1]
    feature_sum = np.zeros(width)
    moment = np.zeros((width, width))
    cross_moment = np.zeros((width, n_targets))
    tile_moment = np.empty((width, width))
    wide = np.empty((min(_MOMENT_TILE_ROWS, rows.shape[0]), width))
    squared_norm_sum = 0.0
    for start, features in feature_map.embed_tiles(rows, tile_rows=_MOMENT_TILE_ROWS, dtype=dtype):
        # float64 products of the float32 features (exact) summed in float64: ridge solves with
        # alpha far below the moment's scale, where the ~1e-6 relative error of float32 tile
        # products made coefficients depend on chunking (see streamrff.ridge.default_alphas).
        tile = wide[: features.shape[0]]
        tile[...] = features
        feature_sum += tile.sum(axis=0)
        squared_norm_sum += float(np.einsum("ij,ij->", tile, tile))
        moment += _rank_k_update(tile, tile_moment)
        cross_moment += tile.T @ targets[start : start + features.shape[0]]
    return RegressionSketch(
        feature_map,
        rows.shape[0],
        feature_sum,
        squared_norm_sum,
        moment,
        cross_moment,
        targets.sum(axis=0),
        targets.T @ targets,
        target_ndim,
        n_invalid,
        classes,
    )


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
    X: ArrayLike2D, y: Any, feature_map: FeatureMap, dtype: Any = "float32", classes: Any = None
) -> RegressionSketch:
    """Sketch in-memory rows and targets: counts, feature sums and moments, ``Z^T y``, ``sum y``, ``y^T y``.

    The in-memory counterpart of ``streamrff.sketch(X, feature_map, target=y)``;
    an unfitted map is cloned and fitted on ``X`` first.

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

    Returns
    -------
    RegressionSketch

    Raises
    ------
    InputError
        On non-2-D or non-finite X, targets of another length or shape, a
        width different from the fitted map's, or classes that do not fit
        the targets' columns.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(1)
    >>> X, Y = rng.normal(size=(50, 2)), rng.normal(size=(50, 3))
    >>> s = srf.regression_sketch_array(X, Y, srf.RFF(n_features=16, bandwidth=1.0))
    >>> s.cross_moment.shape, s.n_targets, bool(np.allclose(s.target_moment, Y.T @ Y))
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
    return regression_sketch_of_chunk(X, targets, feature_map, dtype=dtype, classes=classes)
