"""The per-column part of a mean sketch: a 1-D kernel mean and second moment for every input column.

A mean sketch made with ``columns=True`` (CLI: ``streamrff sketch --columns``) also holds, for
each input column c, the float64 sum and centred-tile second moment of a 1-D sincos RFF map of
that column alone (:class:`ColumnSketch`), made in the same pass. The two-sample tests per column
(:func:`streamrff.explain`'s column table) are then read from two sites' sketches, without the rows.

The column maps are derived from the sketch's map, so every site that sketches with one map file
gets the same column maps (:func:`derive_column_maps`):

- **bandwidth**: ``s_c = s / sqrt(d)`` for every column, ``s`` the map's bandwidth and ``d`` its
  input width, unless given explicitly (``column_bandwidth=``, stored). The product Gaussian
  kernel factorises, ``exp(-|x - y|^2 / (2 s^2)) = prod_c exp(-(x_c - y_c)^2 / (2 s^2))``, but a
  factor of width ``s`` is ``sqrt(d)`` times wider than one column's spread and sees little but
  the column's mean and variance. ``s`` is usually the median heuristic, so
  ``s^2 ~ median |x - y|^2 = sum_c E(x_c - y_c)^2`` for standardised columns; giving each column
  its equal share, ``s_c^2 = s^2 / d``, puts every column's kernel at that column's own median
  heuristic. Columns on other scales: standardise them, or pass ``column_bandwidth``.
- **seed** of column c: the first word of ``SeedSequence([map seed, c, 0x636f6c])`` (the map's
  seed from its spec, or from its fingerprint for maps without one).
- **features**: ``n_features`` (default 64) sincos features, float64 phases (the column's values
  are not assumed small), float32 features, float64 sums.

In a sketch file the part is three arrays and one attribute (see docs/file_format.rst)::

    columns/feature_sum   (d, D_c) float64     sum over rows of each column's features
    columns/moment        (d * D_c, D_c) float64  each column's sum z z^T, stacked by column
    columns/frequencies   (d, D_c / 2) float64  each column's frequencies (checked on load)
    attrs["columns"]      {"format": "streamrff.column-sketch", "version": 1, "n_columns": d,
                           "n_features": D_c, "bandwidth": s_c, "bandwidth_rule": "map" | "explicit",
                           "seeds": [...]}
"""

from __future__ import annotations

import hashlib
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._base.validation import check_format_version
from ..errors import InputError, SketchMismatchError
from .moments import CentredMoments, moment_tile_rows

if TYPE_CHECKING:  # pragma: no cover - the maps import scikit-learn, which reading a sketch file does not need
    from ..maps import RFF, FeatureMap

__all__ = [
    "COLUMN_FORMAT_NAME",
    "COLUMN_FORMAT_VERSION",
    "DEFAULT_COLUMN_FEATURES",
    "ColumnMaps",
    "ColumnSketch",
    "derive_column_maps",
    "column_sketch_of_chunk",
    "check_columns",
    "check_column_part_fits",
]

#: Format name and version of the column part of a sketch file.
COLUMN_FORMAT_NAME = "streamrff.column-sketch"
COLUMN_FORMAT_VERSION = 1
#: Features per column: a 1-D Gaussian kernel is well approximated by few frequencies.
DEFAULT_COLUMN_FEATURES = 64
#: The prefix of the column part's arrays in a sketch file.
PREFIX = "columns/"
#: Mixed into every column's seed, so that column maps never share draws with the map itself.
_SEED_TAG = 0x636F6C


@dataclass(frozen=True, eq=False)
class ColumnMaps:
    """The 1-D maps of the columns of one sketch map: one sincos RFF per column.

    Attributes
    ----------
    n_features : int
        Features per column (D_c, even).
    bandwidth : float
        Every column's kernel width.
    bandwidth_rule : {"map", "explicit"}
        ``"map"``: the map's bandwidth over ``sqrt(d)``; ``"explicit"``: given by the caller.
    seeds : tuple of int
        Column c's map seed.
    maps : tuple of RFF
        The fitted 1-D maps.
    """

    n_features: int
    bandwidth: float
    bandwidth_rule: str
    seeds: tuple[int, ...]
    maps: tuple[RFF, ...]

    @property
    def n_columns(self) -> int:
        """Input columns d."""
        return len(self.maps)

    def frequencies(self) -> np.ndarray:
        """Each column's frequencies, shape (d, D_c / 2), float64: column c's features are
        ``(D_c / 2)^-1/2 [cos(x_c w_c), sin(x_c w_c)]``."""
        return np.stack([column_map._frequencies()[:, 0] for column_map in self.maps])

    def descriptor(self) -> dict[str, Any]:
        """The file attribute that describes the part (JSON-able)."""
        return {
            "format": COLUMN_FORMAT_NAME,
            "version": COLUMN_FORMAT_VERSION,
            "n_columns": self.n_columns,
            "n_features": self.n_features,
            "bandwidth": self.bandwidth,
            "bandwidth_rule": self.bandwidth_rule,
            "seeds": list(self.seeds),
        }

    def differences(self, other: ColumnMaps) -> str:
        """``"bandwidth 0.5 vs 0.7, n_features 64 vs 32"``, or "" when both describe the same maps."""
        mine, theirs = self.descriptor(), other.descriptor()
        keys = ("n_columns", "n_features", "bandwidth", "bandwidth_rule", "seeds")
        return ", ".join(f"{key} {mine[key]!r} vs {theirs[key]!r}" for key in keys if mine[key] != theirs[key])


def _map_seed(feature_map: FeatureMap) -> int:
    seed = feature_map.spec.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
        return seed
    return int(feature_map.fingerprint[:8], 16)


def _column_seed(map_seed: int, column: int) -> int:
    return int(np.random.SeedSequence([map_seed, column, _SEED_TAG]).generate_state(1)[0])


def fitted_column_map(n_features: int, bandwidth: float, seed: int, phase_precision: str = "auto") -> RFF:
    """A fitted sincos RFF map of one column (no data needed: its bandwidth is given)."""
    from ..maps import RFF

    column_map = RFF(n_features=n_features, bandwidth=bandwidth, seed=seed, phase_precision=phase_precision)
    column_map._begin_fit(1)
    return column_map._finish_fit(np.empty((0, 1)))


def derive_column_maps(
    feature_map: FeatureMap, n_features: int = DEFAULT_COLUMN_FEATURES, bandwidth: float | None = None
) -> ColumnMaps:
    """The column maps of a fitted map: bandwidth ``s / sqrt(d)`` (or ``bandwidth``), seeds from the map's.

    Parameters
    ----------
    feature_map : FeatureMap
        The sketch's fitted map.
    n_features : int, default=64
        Features per column (even).
    bandwidth : float, optional
        Every column's kernel width; by default the map's bandwidth over ``sqrt(d)``.

    Returns
    -------
    ColumnMaps

    Raises
    ------
    InputError
        On an odd or non-positive ``n_features``, a bandwidth that is not a positive number, or a
        map without a bandwidth (K-JL, relative-error maps) and no explicit ``bandwidth``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rff = srf.RFF(n_features=128, bandwidth=4.0, seed=3).fit(np.zeros((1, 4)))
    >>> maps = derive_column_maps(rff)
    >>> maps.n_columns, maps.n_features, maps.bandwidth, maps.bandwidth_rule
    (4, 64, 2.0, 'map')
    >>> derive_column_maps(rff).seeds == maps.seeds   # the same at every site
    True
    """
    if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral) or n_features < 2 or n_features % 2:
        raise InputError(
            f"column_features must be an even integer >= 2 (sincos features come in pairs). Got {n_features!r}; "
            f"use e.g. {DEFAULT_COLUMN_FEATURES}."
        )
    n_columns = int(feature_map.n_features_in_)
    if bandwidth is None:
        from ..maps import spec_bandwidth

        map_bandwidth = spec_bandwidth(feature_map.spec)
        if map_bandwidth is None:
            raise InputError(
                f"The map ({feature_map.spec.get('kind')!r}) has no Gaussian bandwidth to derive the column "
                "kernels' from. Pass column_bandwidth=WIDTH (CLI: --column-bandwidth) for standardised columns."
            )
        width, rule = map_bandwidth / np.sqrt(n_columns), "map"
    else:
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real) or not (
            np.isfinite(bandwidth) and bandwidth > 0
        ):
            raise InputError(
                f"column_bandwidth must be a finite number > 0 (the column kernels' width). Got {bandwidth!r}; "
                "omit it to use the map's bandwidth / sqrt(columns)."
            )
        width, rule = float(bandwidth), "explicit"
    map_seed = _map_seed(feature_map)
    seeds = tuple(_column_seed(map_seed, column) for column in range(n_columns))
    # float64 phases: the column's raw values may be large; the 1-D projection costs little either way.
    maps = tuple(fitted_column_map(int(n_features), float(width), seed, "float64") for seed in seeds)
    return ColumnMaps(int(n_features), float(width), rule, seeds, maps)


@dataclass(frozen=True, eq=False)
class ColumnSketch:
    """Per input column: the count, the float64 sum and second moment of the column's 1-D features.

    Sums over rows, so two parts of one map add (``a + b``) into the part of the union.

    Attributes
    ----------
    column_maps : ColumnMaps
    count : int
        Rows sketched.
    feature_sum : ndarray of shape (d, D_c), float64
    moment : ndarray of shape (d, D_c, D_c), float64
        ``sum_i z_c(x_i) z_c(x_i)^T`` for each column c.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(300, 3))
    >>> s = srf.sketch_array(X, srf.RFF(n_features=64, bandwidth=2.0), columns=True)
    >>> part = s.columns
    >>> part.feature_sum.shape, part.moment.shape, bool(part.column_maps.bandwidth == 2.0 / np.sqrt(3))
    ((3, 64), (3, 64, 64), True)
    >>> w = part.column_maps.frequencies()[1]                    # column 1's frequencies
    >>> phases = np.outer(X[:, 1], w)
    >>> Z = np.hstack([np.cos(phases), np.sin(phases)]) / np.sqrt(32)
    >>> bool(np.allclose(part.feature_sum[1], Z.sum(axis=0), atol=1e-4))
    True
    """

    column_maps: ColumnMaps
    count: int
    feature_sum: np.ndarray
    moment: np.ndarray

    def __post_init__(self) -> None:
        self.feature_sum.setflags(write=False)
        self.moment.setflags(write=False)

    def check_compatible(self, other: ColumnSketch, action: str = "merge") -> None:
        """Raise SketchMismatchError, naming the difference, unless ``other`` has the same column maps."""
        differences = self.column_maps.differences(other.column_maps)
        if differences:
            raise SketchMismatchError(
                f"Cannot {action} sketches whose column parts use different column maps: {differences}. Sketch every "
                "part with the same --column-bandwidth and --column-features (or neither)."
            )

    def __add__(self, other: ColumnSketch) -> ColumnSketch:
        self.check_compatible(other)
        return ColumnSketch(
            self.column_maps, self.count + other.count, self.feature_sum + other.feature_sum, self.moment + other.moment
        )

    def column(self, index: int) -> tuple[FeatureMap, np.ndarray, np.ndarray]:
        """Column ``index``'s map, feature sum (D_c,) and second moment (D_c, D_c)."""
        return self.column_maps.maps[index], self.feature_sum[index], self.moment[index]

    def file_arrays(self) -> dict[str, np.ndarray]:
        """The arrays of the part in a sketch file (names under ``columns/``)."""
        d, width = self.feature_sum.shape
        return {
            PREFIX + "feature_sum": self.feature_sum,
            PREFIX + "moment": self.moment.reshape(d * width, width),
            PREFIX + "frequencies": self.column_maps.frequencies(),
        }

    def file_attrs(self) -> dict[str, Any]:
        """The attributes of the part: its descriptor, and the moment's row count (which sizes it)."""
        rows = int(self.moment.shape[0] * self.moment.shape[1])
        return {"columns": self.column_maps.descriptor(), "column_moment_rows": rows}

    @classmethod
    def from_file(
        cls, feature_map: FeatureMap, attrs: dict[str, Any], arrays: dict[str, np.ndarray], count: int
    ) -> ColumnSketch:
        """The part stored beside a sketch of ``feature_map``, checked: format, version, maps, shapes, values.

        Raises
        ------
        InputError
            On anything a writer of this part would not have written; the message names it.
        """
        descriptor = attrs.get("columns")
        if not isinstance(descriptor, dict) or descriptor.get("format") != COLUMN_FORMAT_NAME:
            raise InputError(
                f"The column part's attribute must be a dict with format {COLUMN_FORMAT_NAME!r}. Got {descriptor!r}."
            )
        check_format_version(
            descriptor.get("version"), COLUMN_FORMAT_VERSION, "the column part", "column part", InputError
        )
        n_columns = int(feature_map.n_features_in_)
        if descriptor.get("n_columns") != n_columns:
            raise InputError(
                f"The column part declares {descriptor.get('n_columns')!r} columns; the map takes {n_columns}."
            )
        rule = descriptor.get("bandwidth_rule")
        if rule not in ("map", "explicit"):
            raise InputError(f"The column part's bandwidth_rule must be 'map' or 'explicit'. Got {rule!r}.")
        explicit = descriptor.get("bandwidth") if rule == "explicit" else None
        expected = derive_column_maps(feature_map, descriptor.get("n_features"), explicit)  # type: ignore[arg-type]
        stored = ColumnMaps(
            descriptor.get("n_features"), descriptor.get("bandwidth"), rule,  # type: ignore[arg-type]
            tuple(descriptor.get("seeds") or ()), expected.maps,
        )  # fmt: skip
        differences = expected.differences(stored)
        if differences:
            raise InputError(
                f"The column part does not describe the column maps of this sketch's map: {differences} "
                "(stored vs derived)."
            )
        width = expected.n_features
        feature_sum = _expect(arrays, "feature_sum", (n_columns, width))
        moment = _expect(arrays, "moment", (n_columns * width, width)).reshape(n_columns, width, width)
        frequencies = _expect(arrays, "frequencies", (n_columns, width // 2))
        if not np.array_equal(frequencies, expected.frequencies()):
            raise InputError(
                "The column part's stored frequencies differ from those its seeds give (tampered, or written "
                "with an incompatible numpy random stream)."
            )
        return cls(expected, count, feature_sum, moment)


def _expect(arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    key = PREFIX + name
    if key not in arrays:
        raise InputError(f"Missing array {key!r} of the column part. Got arrays {sorted(arrays)}.")
    array = arrays[key]
    if array.shape != shape or array.dtype != np.float64:
        raise InputError(
            f"Array {key!r} must have shape {shape} and dtype float64. Got shape {array.shape} and dtype {array.dtype}."
        )
    if not np.isfinite(array).all():
        raise InputError(f"Array {key!r} holds NaN or inf.")
    return array


def column_sketch_of_chunk(rows: np.ndarray, column_maps: ColumnMaps, dtype: Any = np.float32) -> ColumnSketch:
    """The column part of trusted, finite ``rows``: each column embedded tile by tile by its 1-D map, its
    sums and second moment accumulated by the moment kernel of the mean sketch (:class:`CentredMoments`)."""
    dtype = np.dtype(dtype)
    d, width = column_maps.n_columns, column_maps.n_features
    feature_sum, moment = np.zeros((d, width)), np.zeros((d, width, width))
    tile_rows = moment_tile_rows(dtype)
    for column, column_map in enumerate(column_maps.maps):
        sums = CentredMoments(width, dtype)
        for _, features in column_map.embed_tiles(rows[:, column : column + 1], tile_rows=tile_rows, dtype=dtype):
            sums.add(features)
        feature_sum[column], _, moment[column] = sums.totals()
    return ColumnSketch(column_maps, int(rows.shape[0]), feature_sum, moment)


def check_columns(
    columns: Any, feature_map: FeatureMap, column_features: Any, column_bandwidth: Any
) -> ColumnMaps | None:
    """The column maps of a fitted map when ``columns`` is True, else None (checking the column options)."""
    if not isinstance(columns, (bool, np.bool_)):
        raise InputError(f"columns must be True or False. Got {columns!r}.")
    if not columns:
        if column_bandwidth is not None or column_features != DEFAULT_COLUMN_FEATURES:
            raise InputError(
                "column_features and column_bandwidth set the per-column part, which columns=False leaves out. "
                f"Got column_features={column_features!r}, column_bandwidth={column_bandwidth!r}; pass columns=True."
            )
        return None
    return derive_column_maps(feature_map, column_features, column_bandwidth)


def check_column_part_fits(column_maps: ColumnMaps, memory_per_thread: float, split_every: int) -> None:
    """Raise InputError when the column part's partials (d * D_c^2 float64 each, ``split_every + 2`` of them in
    the merge tree) cannot fit a task thread's memory, naming the fix.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(np.zeros((1, 1000)))
    >>> check_column_part_fits(derive_column_maps(rff), 2**30, 8)
    >>> check_column_part_fits(derive_column_maps(rff, 512), 2**30, 8)
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: The column part of 1,000 columns x 512 features needs about 19.6 GiB per task ...
    """
    d, width = column_maps.n_columns, column_maps.n_features
    need = (split_every + 2) * 8.0 * d * width * (width + 1)
    if need > memory_per_thread:
        raise InputError(
            f"The column part of {d:,} columns x {width:,} features needs about {need / 2**30:.1f} GiB per task "
            f"thread (a {width} x {width} float64 moment per column, {split_every + 2} partials in the merge tree); "
            f"a task thread has {memory_per_thread / 2**30:.1f} GiB. Use fewer column_features (CLI "
            "--column-features), or workers with more memory."
        )


def column_maps_key(column_maps: ColumnMaps) -> str:
    """A short digest of the column maps (names checkpoint partials of jobs with columns)."""
    return hashlib.sha256(repr(sorted(column_maps.descriptor().items())).encode()).hexdigest()[:12]
