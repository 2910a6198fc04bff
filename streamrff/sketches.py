"""Mergeable sketches: commutative monoids over chunks of rows.

Every sketch kind is immutable and offers the same few verbs: build one from a
chunk of rows (a pure function that Dask can ship), :meth:`Sketch.merge`
(commutative and associative up to float64 rounding, with ``empty`` as the
neutral element), :meth:`Sketch.save` / :func:`streamrff.load`, ``count``,
``is_empty`` and ``==``. Estimates are small functions over sketches
(:func:`mmd2`), not methods on them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import reduce
from typing import Any, ClassVar

import numpy as np
from sklearn.base import clone

from ._blas import single_blas_thread
from ._moments import _CentredMoments, _moment_tile_rows
from ._registry import KindRegistry
from ._sketchfile import SketchParts, write_sketch
from ._validation import check_feature_dtype, check_positive_int, check_rows, check_width
from .columns import DEFAULT_COLUMN_FEATURES, ColumnMaps, ColumnSketch, check_columns, column_sketch_of_chunk
from .columns import PREFIX as COLUMN_PREFIX
from .errors import InputError, SketchMismatchError
from .maps import FeatureMap
from .nufft import nufft_applies, nufft_available, nufft_mean_sums, nufft_supports
from .sampling import bottom_k, row_keys
from .typing import ArrayLike2D, MapSpec, PathOrURL, StorageOptions

__all__ = [
    "Sketch",
    "MappedSketch",
    "MeanSketch",
    "LandmarkSketch",
    "merge",
    "mmd2",
    "sketch_array",
    "mean_sketch_of_chunk",
    "landmark_sketch_of_chunk",
    "spec_differences",
    "describe_map_differences",
]


class Sketch(KindRegistry, ABC):
    """Base class of mergeable sketches.

    Subclasses define ``kind``, ``_arrays()`` (the float/int arrays written to
    file), ``_attrs()`` (JSON-able scalars), ``_merge(other)`` and
    ``_from_parts``; the file format and the merge checks are shared.

    Examples
    --------
    Sketches of parts merge into the sketch of the whole (to float64 rounding)
    and survive a save/load round trip:

    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(100, 2))
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0, seed=0).fit(X)
    >>> parts = srf.sketch_array(X[:30], rff).merge(srf.sketch_array(X[30:], rff))
    >>> isinstance(parts, srf.Sketch), parts.count
    (True, 100)
    >>> reference = rff.transform(X).astype(np.float64).sum(axis=0)
    >>> bool(np.allclose(parts.feature_sum, reference, rtol=0, atol=1e-4))
    True
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     parts.save(os.path.join(folder, "s.zarr"))
    ...     srf.load(os.path.join(folder, "s.zarr")) == parts
    True
    """

    _registry: ClassVar[dict[str, type[Sketch]]] = {}

    count: int

    # identity of what was sketched: the feature map (or sampler) spec and its fingerprint
    @property
    @abstractmethod
    def spec(self) -> MapSpec:
        ...

    @property
    @abstractmethod
    def fingerprint(self) -> str:
        ...

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Arrays that describe the map beyond its spec (saved under ``map/``)."""
        return {}

    @abstractmethod
    def _arrays(self) -> dict[str, np.ndarray]:
        ...

    @abstractmethod
    def _attrs(self) -> dict[str, Any]:
        ...

    @abstractmethod
    def _merge(self, other: Sketch) -> Sketch:
        ...

    @classmethod
    @abstractmethod
    def _from_parts(
        cls, spec: MapSpec, map_arrays: dict[str, np.ndarray], attrs: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> Sketch:
        ...

    @property
    def is_empty(self) -> bool:
        """True when no row has been added."""
        return self.count == 0

    def check_compatible(self, other: Any) -> None:
        """Raise SketchMismatchError unless ``other`` is a sketch of the same kind and map."""
        if not isinstance(other, Sketch):
            raise SketchMismatchError(f"Can only merge sketches. Got {type(other).__name__}.")
        if other.kind != self.kind:
            raise SketchMismatchError(
                f"Cannot merge a {self.kind!r} sketch with a {other.kind!r} sketch; "
                "sketch both inputs with the same kind."
            )
        if getattr(other, "feature_map", None) is getattr(self, "feature_map", False):
            return  # one map object (the partials of one job): its fingerprint costs a JSON dump and a hash
        if other.fingerprint != self.fingerprint:
            advice = _input_width_advice(self.spec, other.spec) or (
                "Sketch every part with one fitted map: pass feature_map=first.feature_map, or "
                "streamrff.load_map(path) of a map file or of a sketch."
            )
            raise SketchMismatchError(
                "Cannot merge sketches of different feature maps: "
                f"{describe_map_differences(self.spec, other.spec)} (fingerprint {self.fingerprint[:16]} vs "
                f"{other.fingerprint[:16]}). {advice}"
            )

    def merge(self, other: Sketch) -> Sketch:
        """Return the sketch of the union of both inputs' rows (a new object).

        Raises
        ------
        SketchMismatchError
            If the kinds or the feature maps differ; the message names both.
        """
        self.check_compatible(other)
        return self._merge(other)

    def merge_many(self, others: Sequence[Sketch]) -> Sketch:
        """``self.merge(others[0]).merge(others[1])...``: the same left fold, in as little memory as the kind allows.

        Kinds whose state is a sum (:class:`SumSketch`) accumulate into one new
        array per field instead of allocating a new array per merge, so a merge
        of f partials holds f + 1 of them, not f + 2; the result equals the
        pairwise left fold bit for bit.
        """
        merged: Sketch = self
        for other in others:
            merged = merged.merge(other)
        return merged

    def save(
        self,
        path_or_url: PathOrURL,
        storage_options: StorageOptions = None,
        overwrite: bool = False,
        signing_key: bytes | None = None,
    ) -> None:
        """Write the sketch as a zarr group (directory, ``.zip`` file or fsspec URL), atomically.

        ``signing_key`` (bytes, at least 16) signs it: ``streamrff.load(path,
        verify_key=key)`` then proves it came from a holder of the key (see
        docs/security). See :func:`streamrff._sketchfile.write_sketch` (also
        :func:`streamrff.fileformat.save_sketch`).
        """
        write_sketch(
            self._file_parts(),
            path_or_url,
            storage_options=storage_options,
            overwrite=overwrite,
            signing_key=signing_key,
        )

    def _file_parts(self) -> SketchParts:
        """What the sketch file holds: kind, map identity, arrays (map state under ``map/``), attributes."""
        arrays = dict(self._arrays())
        arrays.update({f"map/{name}": value for name, value in self.state_arrays().items()})
        return SketchParts(self.kind, self.spec, self.fingerprint, arrays, self._attrs())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sketch) or other.kind != self.kind:
            return NotImplemented
        mine, theirs = self._arrays(), other._arrays()
        return (
            self.fingerprint == other.fingerprint
            and self._attrs() == other._attrs()
            and mine.keys() == theirs.keys()
            and all(mine[k].shape == theirs[k].shape and np.array_equal(mine[k], theirs[k]) for k in mine)
        )

    __hash__ = None  # type: ignore[assignment]


class MappedSketch(Sketch):
    """A sketch of features made by one fitted map: its identity (spec, fingerprint, state) is the map's."""

    feature_map: FeatureMap

    @property
    def spec(self) -> MapSpec:
        return self.feature_map.spec

    @property
    def fingerprint(self) -> str:
        return self.feature_map.fingerprint

    def state_arrays(self) -> dict[str, np.ndarray]:
        return self.feature_map.state_arrays()


class SumSketch(MappedSketch):
    """A mapped sketch whose state is sums over rows: merging adds the summed fields, keeps the fixed ones.

    A kind is a dataclass (``eq=False``: equality is :meth:`Sketch.__eq__`)
    whose constructor parameters fall in two groups: ``_summed_fields``
    (arrays, floats or ints that are sums over rows; an optional array may be
    None in every part) and ``_fixed_fields`` (the map and the design, equal in
    every part once :meth:`check_compatible` has passed). :meth:`merge` and
    :meth:`merge_many` are then the same for every kind, and so are the
    construction (fields annotated ``int`` or ``float`` are stored as Python
    numbers, arrays are made read-only) and the file's contents: the array
    fields are its arrays; ``count``, the scalar fields and what
    :meth:`_extra_attrs` adds are its attributes.

    Examples
    --------
    A merge of many partials equals the pairwise left fold bit for bit, and
    its sums are the sums over all rows:

    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(90, 2))
    >>> rff = srf.RFF(n_features=32, bandwidth=1.0).fit(X)
    >>> parts = [srf.sketch_array(rows, rff) for rows in np.array_split(X, 3)]
    >>> merged = parts[0].merge_many(parts[1:])
    >>> merged == parts[0].merge(parts[1]).merge(parts[2]), merged.count
    (True, 90)
    >>> bool(np.allclose(merged.feature_sum, rff.transform(X).astype(np.float64).sum(axis=0), atol=1e-5))
    True
    """

    _summed_fields: ClassVar[tuple[str, ...]] = ()
    _fixed_fields: ClassVar[tuple[str, ...]] = ("feature_map",)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
            elif field.type in _SCALAR_FIELD_TYPES:
                setattr(self, field.name, _SCALAR_FIELD_TYPES[field.type](value))

    def _arrays(self) -> dict[str, np.ndarray]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return {field.name: value for field in fields if isinstance(value := getattr(self, field.name), np.ndarray)}

    def _attrs(self) -> dict[str, Any]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        scalars = {field.name: getattr(self, field.name) for field in fields if field.type in _SCALAR_FIELD_TYPES}
        return {"count": self.count, **scalars, **self._extra_attrs()}

    def _extra_attrs(self) -> dict[str, Any]:
        """Attributes of the file beyond the scalar fields (flags and schemes a reader checks)."""
        return {}

    def _merge(self, other: Sketch) -> Sketch:
        return self._sum_of([self, other])

    def merge_many(self, others: Sequence[Sketch]) -> Sketch:
        if not others:
            return self
        for other in others:
            self.check_compatible(other)
        return self._sum_of([self, *others])

    def _sum_of(self, parts: Sequence[SumSketch]) -> SumSketch:
        """The sketch of all ``parts`` (checked compatible): each summed field as the pairwise left fold."""
        fields = {name: getattr(self, name) for name in self._fixed_fields}
        for name in self._summed_fields:
            fields[name] = _left_fold_total([getattr(part, name) for part in parts])
        return type(self)(**fields)


#: Annotations of the scalar fields of a sum sketch (strings under ``from __future__ import
#: annotations``, else the types), and the Python type each is stored as: numpy scalars never
#: reach the JSON attributes.
_SCALAR_FIELD_TYPES = {"int": int, "float": float, int: int, float: float}


def _left_fold_total(values: Sequence[Any]) -> Any:
    """``((a + b) + c) + ...`` of the values of one summed field: None when the (optional) field is absent,
    one new array for arrays (:func:`_left_fold_sum`), else Python's ``+`` from the left."""
    if values[0] is None:
        return None
    if isinstance(values[0], np.ndarray):
        return _left_fold_sum(values)
    return reduce(operator.add, values)


def spec_differences(spec_a: MapSpec, spec_b: MapSpec, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """The ``(parameter, value in a, value in b)`` triples where two map specs differ (nested specs dotted).

    Examples
    --------
    >>> spec_differences({"kind": "rff", "bandwidth": 3.841}, {"kind": "rff", "bandwidth": 3.887})
    [('bandwidth', 3.841, 3.887)]
    """
    differences = []
    for key in sorted(set(spec_a) | set(spec_b)):
        a, b = spec_a.get(key), spec_b.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differences.extend(spec_differences(a, b, f"{prefix}{key}."))
        elif a != b or type(a) is not type(b):
            differences.append((f"{prefix}{key}", a, b))
    return differences


def describe_map_differences(spec_a: MapSpec, spec_b: MapSpec) -> str:
    """``"bandwidth 3.841 vs 3.887, seed 0 vs 1"``; for equal specs, the fitted state (K-JL landmarks) differs."""
    differences = spec_differences(spec_a, spec_b)
    if not differences:
        return "same spec but different fitted state (K-JL landmarks drawn from other rows)"
    parts = []
    for key, a, b in differences:
        short_a, short_b = _short(a), _short(b)
        if short_a == short_b:  # close floats: show every digit
            short_a, short_b = repr(a), repr(b)
        parts.append(f"{key} {short_a} vs {short_b}")
    return ", ".join(parts)


def _input_width_advice(spec_a: MapSpec, spec_b: MapSpec) -> str | None:
    """The fix for maps fitted on inputs of different widths, or None when the widths agree.

    Rows of different widths are different data: no shared map makes their
    sketches comparable (a map fits one input width), so the fix is in the
    data, not in the map.
    """
    width_a, width_b = spec_a.get("n_features_in"), spec_b.get("n_features_in")
    if width_a == width_b:
        return None
    return (
        f"The sketched data have different widths ({width_a} vs {width_b} columns), so they are different data "
        "and no common map can make them comparable: sketch data with the same columns, in the same order, "
        "at every site."
    )


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)


def _describe(spec: MapSpec) -> str:
    keys = ("kind", "n_features", "n_components", "bandwidth", "variant", "seed", "k")
    return ", ".join(f"{k}={spec[k]}" for k in keys if k in spec)


@dataclasses.dataclass(eq=False, repr=False)
class MeanSketch(SumSketch):
    """Count, float64 sum of features and (optionally) the float64 second moment ``sum z z^T``.

    Built with :func:`sketch_array` (in memory) or :func:`streamrff.sketch`
    (Dask); merged with :meth:`merge`; read by :func:`mmd2`.

    Parameters
    ----------
    feature_map : FeatureMap
        The fitted map that produced the features.
    count : int
        Number of rows sketched.
    feature_sum : ndarray of shape (D,), float64
        Sum of the feature vectors.
    squared_norm_sum : float
        Sum of ``||z_i||^2`` (needed for the unbiased MMD when ``||z|| != 1``).
    moment : ndarray of shape (D, D), float64, optional
        Sum of ``z_i z_i^T``; present when sketched with ``moments=True``.
    n_invalid : int, default=0
        Rows skipped because they held NaN or inf (``on_invalid="skip"``).
    columns : ColumnSketch, optional
        Per input column, the sums and second moment of a 1-D map of that column
        (:mod:`streamrff.columns`); present when sketched with ``columns=True``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(100, 2))
    >>> rff = srf.RFF(n_features=256, bandwidth=1.0).fit(X)
    >>> a, b = srf.sketch_array(X[:60], rff), srf.sketch_array(X[60:], rff)
    >>> whole = srf.sketch_array(X, rff)
    >>> merged = a.merge(b)
    >>> merged.count, bool(np.allclose(merged.feature_sum, whole.feature_sum))
    (100, True)
    """

    kind = "mean"
    _summed_fields = ("count", "feature_sum", "squared_norm_sum", "moment", "n_invalid", "columns")

    feature_map: FeatureMap
    count: int
    feature_sum: np.ndarray
    squared_norm_sum: float
    moment: np.ndarray | None = None
    n_invalid: int = 0
    columns: ColumnSketch | None = None

    @classmethod
    def empty(cls, feature_map: FeatureMap, moments: bool = False) -> MeanSketch:
        """The neutral element: zero rows."""
        width = feature_map.n_features_out_
        return cls(
            feature_map,
            0,
            np.zeros(width),
            0.0,
            np.zeros((width, width)) if moments else None,
        )

    @property
    def has_moments(self) -> bool:
        """Whether the second moment was sketched."""
        return self.moment is not None

    @property
    def mean(self) -> np.ndarray:
        """Mean feature vector (the empirical kernel mean embedding), float64."""
        if self.count == 0:
            raise InputError("The mean of an empty sketch is undefined; sketch at least one row.")
        return self.feature_sum / self.count

    @property
    def has_columns(self) -> bool:
        """Whether the per-column part was sketched (``columns=True``)."""
        return self.columns is not None

    def check_compatible(self, other: Any) -> None:
        super().check_compatible(other)
        if self.has_moments != other.has_moments:
            raise SketchMismatchError(
                "Cannot merge a sketch with second moments and one without. Re-sketch the "
                "part without moments with moments=True (CLI: --moments)."
            )
        mine, theirs = self.columns, other.columns
        if (mine is None) != (theirs is None):
            raise SketchMismatchError(
                f"Cannot merge a sketch with column parts and one without (columns: {mine is not None} vs "
                f"{theirs is not None}). Re-sketch the part without them with columns=True (CLI: --columns)."
            )
        if mine is not None:
            mine.check_compatible(theirs)

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = super()._arrays()
        if self.columns is not None:
            arrays.update(self.columns.file_arrays())
        return arrays

    def _extra_attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"moments": self.has_moments}
        if self.columns is not None:  # absent, not null, without columns: the files of before
            attrs.update(self.columns.file_attrs())
        return attrs

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> MeanSketch:
        from .maps import map_from_spec

        feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        _expect_array(arrays, "feature_sum", (width,), np.float64)
        moment = None
        if attrs.get("moments"):
            moment = _expect_array(arrays, "moment", (width, width), np.float64)
        _expect_int(attrs, "count")
        _expect_int(attrs, "n_invalid")
        squared_norm_sum = _expect_squared_norm_sum(attrs)
        columns = None
        if "columns" in attrs:
            columns = ColumnSketch.from_file(feature_map, attrs, arrays, attrs["count"])
        elif any(name.startswith(COLUMN_PREFIX) for name in arrays):
            raise InputError(f"Arrays {sorted(arrays)} include a column part, but the attribute 'columns' is absent.")
        return cls(
            feature_map, attrs["count"], arrays["feature_sum"], squared_norm_sum, moment, attrs["n_invalid"], columns
        )

    def __repr__(self) -> str:
        columns = "" if self.columns is None else f", columns={self.columns.column_maps.n_columns}"
        return (
            f"MeanSketch(count={self.count}, n_features={self.feature_sum.shape[0]}, "
            f"moments={self.has_moments}{columns}, map={_describe(self.spec)})"
        )


def _expect_array(arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if name not in arrays:
        raise InputError(f"Missing array {name!r}. Got arrays {sorted(arrays)}.")
    array = arrays[name]
    if array.shape != shape or array.dtype != np.dtype(dtype):
        raise InputError(
            f"Array {name!r} must have shape {shape} and dtype {np.dtype(dtype)}. "
            f"Got shape {array.shape} and dtype {array.dtype}."
        )
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise InputError(f"Array {name!r} holds NaN or inf.")
    return array


def _expect_squared_norm_sum(attrs: dict[str, Any]) -> float:
    """The ``squared_norm_sum`` attribute of a sum sketch: a finite number >= 0."""
    value = attrs.get("squared_norm_sum")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (np.isfinite(value) and value >= 0):
        raise InputError(f"squared_norm_sum must be a finite number >= 0. Got {value!r}.")
    return value


def _left_fold_sum(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``((a + b) + c) + ...`` of two or more arrays into one new array: the pairwise merges'
    rounding, bit for bit, with one allocation (what ``merge_many`` of a sum sketch needs)."""
    total = arrays[0] + arrays[1]
    for array in arrays[2:]:
        total += array
    return total


def _expect_int(attrs: dict[str, Any], name: str) -> int:
    value = attrs.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"Attribute {name!r} must be an integer >= 0. Got {value!r}.")
    return value


class LandmarkSketch(Sketch):
    """Bottom-k sample of rows by a keyed hash of their global row index.

    Merging keeps the ``k`` smallest keys of the union, so the sample is the
    same however the rows were chunked or distributed. It is the seeded row
    sample behind ``bandwidth="median"``, K-JL landmarks and k-means++ init.

    Parameters
    ----------
    k : int
        Sample size.
    seed : int
        Key of the hash.
    n_features_in : int
        Width of the rows.
    keys : ndarray of shape (k',), uint64
        Hash keys of the kept rows, ascending (k' <= k).
    rows : ndarray of shape (k', n_features_in), float64
        The kept rows, in key order.
    count : int
        Rows seen.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.arange(20.0).reshape(10, 2)
    >>> whole = srf.LandmarkSketch.from_rows(X, k=3, seed=0)
    >>> parts = srf.LandmarkSketch.from_rows(X[:4], 3, 0).merge(
    ...     srf.LandmarkSketch.from_rows(X[4:], 3, 0, row_offset=4))
    >>> bool((whole.rows == parts.rows).all())
    True
    """

    kind = "landmark"

    def __init__(self, k: int, seed: int, n_features_in: int, keys: np.ndarray, rows: np.ndarray, count: int) -> None:
        self.k = int(k)
        self.seed = int(seed)
        self.n_features_in = int(n_features_in)
        self.keys = keys
        self.rows = rows
        self.count = int(count)

    @classmethod
    def from_rows(cls, rows: np.ndarray, k: int, seed: int, row_offset: int = 0) -> LandmarkSketch:
        """Sample of trusted, finite ``rows`` whose first row has global index ``row_offset``."""
        keys = row_keys(seed, row_offset, row_offset + rows.shape[0])
        chosen = bottom_k(keys, k)
        return cls(k, seed, rows.shape[1], keys[chosen], np.asarray(rows[chosen], dtype=np.float64), rows.shape[0])

    @property
    def spec(self) -> MapSpec:
        return {"kind": "landmark-sampler", "k": self.k, "seed": self.seed, "n_features_in": self.n_features_in}

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode()).hexdigest()

    def _merge(self, other: LandmarkSketch) -> LandmarkSketch:
        keys = np.concatenate([self.keys, other.keys])
        rows = np.concatenate([self.rows, other.rows])
        chosen = bottom_k(keys, self.k)
        return LandmarkSketch(
            self.k, self.seed, self.n_features_in, keys[chosen], rows[chosen], self.count + other.count
        )

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"keys": self.keys, "rows": self.rows}

    def _attrs(self) -> dict[str, Any]:
        return {"count": self.count}

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> LandmarkSketch:
        k = check_positive_int(spec.get("k"), "k")
        d = check_positive_int(spec.get("n_features_in"), "n_features_in")
        seed = spec.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InputError(f"seed must be an int. Got {seed!r}.")
        count = _expect_int(attrs, "count")
        kept = arrays.get("keys", np.empty(0)).shape[0]
        if kept > min(k, count):
            raise InputError(f"A landmark sketch keeps at most min(k, count) rows. Got {kept}.")
        keys = _expect_array(arrays, "keys", (kept,), np.uint64)
        rows = _expect_array(arrays, "rows", (kept, d), np.float64)
        return cls(k, seed, d, keys, rows, count)

    def __repr__(self) -> str:
        return f"LandmarkSketch(k={self.k}, kept={self.rows.shape[0]}, count={self.count}, seed={self.seed})"


def merge(*sketches: Sketch) -> Sketch:
    """Merge any number of compatible sketches (at least one).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(1).normal(size=(30, 2))
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
    >>> merged = srf.merge(*(srf.sketch_array(part, rff) for part in np.array_split(X, 3)))
    >>> merged.count, bool(np.allclose(merged.feature_sum, srf.sketch_array(X, rff).feature_sum))
    (30, True)
    """
    if len(sketches) == 1 and not isinstance(sketches[0], Sketch):
        sketches = tuple(sketches[0])  # a single iterable of sketches
    if not sketches:
        raise InputError("merge needs at least one sketch. Got none.")
    for sketch in sketches:
        if not isinstance(sketch, Sketch):
            raise InputError(f"merge takes sketches. Got {type(sketch).__name__}.")
    return sketches[0].merge_many(sketches[1:])


#: Ways to compute a mean sketch's sums: "direct" embeds every row; "nufft" evaluates the sums
#: as one type-3 NUFFT (d <= 3, RFF maps, no moments; optional extra streamrff[nufft]); "auto"
#: takes the NUFFT when it applies and its cost model predicts it at least twice as fast.
SUM_METHODS = ("auto", "direct", "nufft")


def check_sum_method(method: Any, moments: bool, dtype: np.dtype, feature_map: FeatureMap | None = None) -> str:
    """Validate a mean sketch's ``method`` against ``moments``, ``dtype`` and (once fitted) the map."""
    if method not in SUM_METHODS:
        raise InputError(f"method must be one of {SUM_METHODS}. Got {method!r}.")
    if method != "nufft":
        return method
    if moments or dtype != np.float32:
        raise InputError(
            f"method='nufft' computes float32-accurate sums without a second moment. Got moments={moments}, "
            f"dtype='{dtype}'. Use method='auto' or 'direct' for moments or float64 features."
        )
    if not nufft_available():
        raise InputError("method='nufft' needs the finufft package. Install it with: pip install 'streamrff[nufft]'.")
    if feature_map is not None and not nufft_supports(feature_map):
        raise InputError(
            f"method='nufft' serves RFF and RelativeErrorRFF maps on at most 3 input columns. Got "
            f"{_describe(feature_map.spec)}. Use method='auto' or 'direct'."
        )
    return method


@single_blas_thread
def mean_sketch_of_chunk(
    rows: np.ndarray,
    feature_map: FeatureMap,
    moments: bool = False,
    n_invalid: int = 0,
    dtype: Any = "float32",
    method: str = "auto",
    column_maps: ColumnMaps | None = None,
) -> MeanSketch:
    """Sketch trusted, finite rows: the pure per-chunk kernel that Dask maps over chunks.

    Features are embedded tile by tile into one reused, cache-sized buffer,
    so the chunk's features are never all in memory. Each tile is reduced in
    the features' dtype and the tiles are accumulated in float64: column sums
    by GEMVs over 256-row segments (:func:`streamrff.maps.tile_column_sums`;
    without moments, RFF maps use their fused kernel), and with ``moments``
    each tile's ``Z^T Z`` by a symmetric rank-k update (BLAS ``ssyrk``) of
    the tile centred on its own mean, the mean's terms added in float64
    (:class:`_CentredMoments`). Both agree with float64 arithmetic on the same
    features to float32 rounding, the centred moment to that of the
    within-tile variance.
    ``dtype="float64"`` embeds in float64 throughout (about 10x slower:
    numpy's float64 sin/cos are not vectorised).

    For rows in d <= 3 dimensions and an RFF map, ``method="auto"`` (float32,
    no moments) computes the sums by a type-3 NUFFT instead when finufft is
    installed and predicted faster (:mod:`streamrff.nufft`); the sums agree
    to float32 rounding (relative 1e-6).

    With ``column_maps`` (:func:`streamrff.columns.derive_column_maps`) the
    sketch also holds the per-column part (:func:`streamrff.columns.column_sketch_of_chunk`).
    """
    dtype = np.dtype(dtype)
    columns = None if column_maps is None else column_sketch_of_chunk(rows, column_maps, dtype)
    if method == "nufft" or (
        method == "auto" and not moments and dtype == np.float32 and nufft_applies(feature_map, rows)
    ):
        feature_sum, squared_norm_sum = nufft_mean_sums(rows, feature_map)
        return MeanSketch(feature_map, rows.shape[0], feature_sum, squared_norm_sum, None, n_invalid, columns)
    if not moments:
        feature_sum, squared_norm_sum = feature_map._feature_sums(rows, dtype)
        return MeanSketch(feature_map, rows.shape[0], feature_sum, squared_norm_sum, None, n_invalid, columns)
    sums = _CentredMoments(feature_map.n_features_out_, dtype)
    for _, features in feature_map.embed_tiles(rows, tile_rows=_moment_tile_rows(dtype), dtype=dtype):
        sums.add(features)
    feature_sum, squared_norm_sum, moment = sums.totals()
    return MeanSketch(feature_map, rows.shape[0], feature_sum, squared_norm_sum, moment, n_invalid, columns)


def landmark_sketch_of_chunk(
    rows: np.ndarray, k: int, seed: int, row_offset: int, valid: np.ndarray | None = None
) -> LandmarkSketch:
    """Pure per-chunk kernel of the bottom-k row sample.

    ``rows`` are the chunk's finite rows; ``valid`` (when some rows were
    dropped as non-finite) marks which of the chunk's rows they are, so that
    keys still come from the true global row indices.
    """
    if valid is None:
        return LandmarkSketch.from_rows(rows, k, seed, row_offset)
    keys = row_keys(seed, row_offset, row_offset + valid.shape[0])[valid]
    chosen = bottom_k(keys, k)
    return LandmarkSketch(k, seed, rows.shape[1], keys[chosen], np.asarray(rows[chosen], np.float64), valid.shape[0])


def sketch_array(
    X: ArrayLike2D,
    feature_map: FeatureMap,
    moments: bool = False,
    dtype: Any = "float32",
    method: str = "auto",
    columns: bool = False,
    column_features: int = DEFAULT_COLUMN_FEATURES,
    column_bandwidth: float | None = None,
) -> MeanSketch:
    """Sketch an in-memory array: count, float64 feature sum and optionally the second moment.

    An unfitted map is cloned and fitted on ``X`` first (the input map is not
    modified); the fitted map is ``result.feature_map``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features_in)
        Finite rows.
    feature_map : FeatureMap
        Fitted or unfitted map.
    moments : bool, default=False
        Also accumulate ``sum z z^T`` (D x D float64).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the features (sums are float64 either way); see
        :func:`streamrff.sketch`.
    method : {"auto", "direct", "nufft"}, default="auto"
        How the sums are computed; see :func:`streamrff.sketch`.
    columns : bool, default=False
        Also sketch each input column alone (:mod:`streamrff.columns`): for
        :func:`streamrff.explain`'s column table.
    column_features : int, default=64
        Features of each column's 1-D map (even).
    column_bandwidth : float, optional
        Every column kernel's width; by default the map's bandwidth over
        ``sqrt(n_features_in)`` (see :func:`streamrff.columns.derive_column_maps`).

    Returns
    -------
    MeanSketch

    Raises
    ------
    InputError
        On non-2-D input, NaN/inf rows, a width different from the fitted
        map's, or an unknown ``dtype``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(50, 4)).astype("float32")
    >>> s = srf.sketch_array(X, srf.RFF(n_features=128, bandwidth="median"), moments=True)
    >>> s.count, s.feature_sum.shape, s.moment.shape
    (50, (128,), (128, 128))
    >>> Z = s.feature_map.transform(X).astype(np.float64)
    >>> bool(np.allclose(s.feature_sum, Z.sum(axis=0), atol=1e-5)), bool(np.allclose(s.moment, Z.T @ Z, atol=1e-5))
    (True, True)
    """
    if not isinstance(feature_map, FeatureMap):
        raise InputError(f"feature_map must be a streamrff FeatureMap such as RFF(). Got {type(feature_map).__name__}.")
    dtype = check_feature_dtype(dtype)
    X = check_rows(X, "X")
    if feature_map.is_fitted():
        check_width(X, feature_map.n_features_in_, type(feature_map).__name__)
    else:
        feature_map = clone(feature_map).fit(X)
    method = check_sum_method(method, bool(moments), dtype, feature_map)
    column_maps = check_columns(columns, feature_map, column_features, column_bandwidth)
    return mean_sketch_of_chunk(
        X, feature_map, moments=bool(moments), dtype=dtype, method=method, column_maps=column_maps
    )


def mmd2(a: MeanSketch, b: MeanSketch, unbiased: bool = True) -> float:
    """Squared maximum mean discrepancy between the samples behind two mean sketches.

    With ``zbar`` the mean feature vectors, the biased estimate is
    ``||zbar(X) - zbar(Y)||^2``. The unbiased one removes the ``k(x_i, x_i)``
    terms (Sutherland & Schneider 2015, sec. 3.3)::

        MMD^2_u = (||S_x||^2 - Q_x) / (n (n-1)) + (||S_y||^2 - Q_y) / (m (m-1)) - 2 S_x.S_y / (n m)

    with ``S`` the feature sums and ``Q = sum ||z_i||^2``. For unit-norm
    features (sincos RFF), ``Q_x = n`` and the first term is the paper's
    ``n/(n-1) ||zbar||^2 - 1/(n-1)``; other maps use the tracked ``Q``.

    Parameters
    ----------
    a, b : MeanSketch
        Sketches made with the same feature map.
    unbiased : bool, default=True

    Returns
    -------
    float

    Raises
    ------
    SketchMismatchError
        If the sketches come from different maps.
    InputError
        If a sketch is empty, or has fewer than 2 rows for the unbiased estimate.

    References
    ----------
    Sutherland, D. J. & Schneider, J. (2015). On the error of random Fourier
    features. UAI, sec. 3.3. Gretton, A. et al. (2012). A kernel two-sample test. JMLR.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(500, 2)), rng.normal(1.0, size=(500, 2))
    >>> rff = srf.RFF(n_features=2048, bandwidth=1.0).fit(X)
    >>> bool(srf.mmd2(srf.sketch_array(X, rff), srf.sketch_array(Y, rff)) > 0.1)
    True
    """
    for name, sketch in (("a", a), ("b", b)):
        if not isinstance(sketch, MeanSketch):
            raise InputError(f"{name} must be a MeanSketch. Got {type(sketch).__name__}.")
    if a.fingerprint != b.fingerprint:
        a.check_compatible(b)  # raises with both fingerprints named
    minimum = 2 if unbiased else 1
    for name, sketch in (("a", a), ("b", b)):
        if sketch.count < minimum:
            raise InputError(
                f"Sketch {name} has {sketch.count} row(s); the {'unbiased' if unbiased else 'biased'} "
                f"MMD^2 needs at least {minimum}."
            )
    n, m = a.count, b.count
    sx, sy = a.feature_sum, b.feature_sum
    if not unbiased:
        diff = sx / n - sy / m
        return float(diff @ diff)
    within_x = (sx @ sx - a.squared_norm_sum) / (n * (n - 1.0))
    within_y = (sy @ sy - b.squared_norm_sum) / (m * (m - 1.0))
    return float(within_x + within_y - 2.0 * (sx @ sy) / (n * m))
