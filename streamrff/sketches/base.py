"""The sketch contract: commutative monoids over chunks of rows, and the verbs every kind shares.

Every sketch kind is immutable and offers the same few verbs: build one from a
chunk of rows (a pure function that Dask can ship; a kind's ``chunk_job``
hands it to the engine as a :class:`ChunkJob`), :meth:`Sketch.merge`
(commutative and associative up to float64 rounding, with ``empty`` as the
neutral element), :meth:`Sketch.save` / :func:`load`, ``count``,
``is_empty`` and ``==``. Estimates are small functions over sketches
(:func:`mmd2`), not methods on them. :func:`load` reads a file through the
file formats' reader (:func:`streamrff.formats.sketch.read_sketch_file`) and
builds the sketch of the file's kind from what it read.
"""

from __future__ import annotations

import dataclasses
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .._base.registry import KindRegistry
from .._files.signed import SketchParts, write_sketch
from ..errors import InputError, SketchMismatchError
from ..formats.sketch import StoredSketch, read_sketch_file
from ..typing import MapSpec, PathOrURL, StorageOptions

if TYPE_CHECKING:  # pragma: no cover - the maps import scikit-learn: a file that is only described never loads it
    from ..maps import FeatureMap

__all__ = [
    "ChunkJob", "Sketch", "MappedSketch", "SumSketch", "invalid_count", "load", "merge", "spec_differences",
    "describe_map_differences", "describe_spec", "expect_array", "expect_int", "expect_squared_norm_sum",
    "input_width_advice",
]

#: A per-chunk kernel: (finite rows of one chunk, global index of the chunk's first row, boolean
#: mask of the chunk's finite rows or None when all are) -> partial sketch.
ChunkKernel = Callable[[np.ndarray, int, "np.ndarray | None"], "Sketch"]


@dataclasses.dataclass(frozen=True)
class ChunkJob:
    """What a sketch kind hands the engine for one pass: its pure chunk kernel, and how to plan and name the pass.

    A kind builds it with its ``chunk_job`` class method (``MeanSketch.chunk_job(feature_map,
    moments=True)``); :func:`streamrff.engine.run_sketch` runs the kernel over a source's planned
    chunks and merges the partials with the kind's own merge, knowing no kind by name.

    Parameters
    ----------
    kernel : callable
        ``kernel(rows, row_offset, valid) -> partial`` (:data:`ChunkKernel`): pure, so Dask can ship
        and retry it; the map and every parameter travel inside it (a :func:`functools.partial` of a
        module-level function).
    kind : type of Sketch
        The class of the partials.
    key : str
        Names the pass's checkpoint partials: everything a partial depends on besides its rows
        (the map's fingerprint and the kind's parameters).
    width : int
        Features per row, for the rows per task of sources without chunks of their own.
    moments : bool, default=False
        Whether a task holds a D x D partial (more rows per task amortise merging it).
    shows_non_finite : callable, optional
        For a kernel whose result is non-finite whenever a row is: ``shows_non_finite(partial)``
        replaces the finiteness pass over every chunk by a look at the result.
    """

    kernel: ChunkKernel
    kind: type[Sketch]
    key: str
    width: int
    moments: bool = False
    shows_non_finite: Callable[[Sketch], bool] | None = None


def invalid_count(valid: np.ndarray | None) -> int:
    """Rows of a chunk skipped as non-finite, from the kernel's ``valid`` mask (None: none skipped)."""
    return 0 if valid is None else int(valid.shape[0] - valid.sum())


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
            advice = input_width_advice(self.spec, other.spec) or (
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
        docs/security). See :func:`streamrff._files.signed.write_sketch`.
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


def input_width_advice(spec_a: MapSpec, spec_b: MapSpec) -> str | None:
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


def describe_spec(spec: MapSpec) -> str:
    keys = ("kind", "n_features", "n_components", "bandwidth", "variant", "seed", "k")
    return ", ".join(f"{k}={spec[k]}" for k in keys if k in spec)


def expect_array(arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
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


def expect_squared_norm_sum(attrs: dict[str, Any]) -> float:
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


def expect_int(attrs: dict[str, Any], name: str) -> int:
    value = attrs.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"Attribute {name!r} must be an integer >= 0. Got {value!r}.")
    return value


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


def load(
    path_or_url: PathOrURL,
    storage_options: StorageOptions = None,
    require_digest: bool = False,
    verify_key: bytes | None = None,
) -> Sketch:
    """Read a sketch written by :meth:`Sketch.save`, validating everything.

    Checks the format name and version, the kind, the map spec (rebuilt and
    re-fingerprinted), every array's shape, dtype, finiteness and checksum, and
    the scalar attributes, and the attributes digest. Array sizes, codecs and
    chunking, declared shapes against the map spec and attributes (no array
    larger than the square of their largest size), the decoded size each stored
    zstd chunk declares, and the size of the map to rebuild, are checked before
    any data is read or any parameter drawn, so a tampered file fails fast
    instead of allocating gigabytes; large arrays are read only after the
    attributes digest matched. Arrays are read one chunk at a time, so a failing
    chunk leaves no background reads behind.

    A local directory replaced by a concurrent save while it is read is read
    again (the save publishes a complete directory in one step), so a load never
    mixes two versions.

    Parameters
    ----------
    path_or_url : str or PathLike
        Directory, ``.zip`` file, ``file://`` or fsspec URL.
    storage_options : dict, optional
        fsspec options for URLs. Never logged.
    require_digest : bool, default=False
        Refuse a file without an attributes digest (written by an older streamrff)
        instead of loading it with a :class:`SketchFormatWarning`.
    verify_key : bytes, optional
        Accept only a sketch signed with this key (``save(..., signing_key=key)``):
        an unsigned sketch, or one signed with another key or edited after
        signing, raises :class:`SketchSignatureError`. See docs/security.

    Returns
    -------
    Sketch

    Raises
    ------
    SketchFormatError
        If the place is missing, unreadable, not a sketch, incomplete, tampered
        with, or written by a newer format version.
    SketchSignatureError
        If ``verify_key`` is given and the sketch is not signed with it.
    SketchBeingWrittenError
        If another process kept writing the sketch while it was read (retry later).

    Examples
    --------
    >>> import numpy as np, tempfile, os, streamrff as srf
    >>> s = srf.sketch_array(np.ones((3, 2)), srf.RFF(n_features=8, bandwidth=1.0))
    >>> path = os.path.join(tempfile.mkdtemp(), "s.zarr")
    >>> s.save(path)
    >>> srf.load(path) == s
    True
    """
    from . import register_kinds

    register_kinds()
    return read_sketch_file(
        path_or_url,
        rebuild_sketch,
        Sketch._registry,
        storage_options=storage_options,
        require_digest=require_digest,
        verify_key=verify_key,
    )


def rebuild_sketch(stored: StoredSketch) -> Sketch:
    """The sketch of a file's kind, built from its checked contents, which it must write back exactly."""
    sketch = Sketch._registry[stored.kind]._from_parts(stored.spec, stored.map_arrays, stored.attrs, stored.arrays)
    stored.check_written(sketch._file_parts())
    return sketch
