"""The mergeable sketch of the one-pass permutation test and its pure chunk kernel.

:func:`two_sample_sketch_of_chunk` adds a chunk's rows to the feature sums of X
and Y and to the B permutation sums ``P_b = sum_i [pi_b(i) < n_x] z_i``
(:func:`~streamrff.permutation_indices`); the Dask engine maps it over chunks
and reduces the partial :class:`TwoSampleSketch` objects with ``merge``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._base.blas import single_blas_thread
from .._base.permutations import PERMUTATION_SCHEME, _permute, _round_keys
from .._base.validation import check_positive_int, normalize_seed
from ..errors import InputError, SketchMismatchError
from ..maps import RFF, FeatureMap, map_from_spec
from ..maps.fourier import _projection_params
from ..maps.params import spec_key
from .base import SumSketch, describe_spec, expect_array, expect_int

__all__ = [
    "TwoSampleSketch",
    "AggregatedTwoSampleSketch",
    "two_sample_sketch_of_chunk",
    "two_sample_sketches_of_chunk",
    "check_accumulator_size",
    "DEFAULT_MAX_ACCUMULATOR_BYTES",
]

#: Default ceiling on the B x D float64 permutation accumulators (1 GiB).
DEFAULT_MAX_ACCUMULATOR_BYTES = 2**30
# Rows of the longest float32 sum in the chunk kernel's GEMM (its k): the rounding of a tile's
# permutation sums grows with it, the float64 additions of the tiles' sums shrink with it
# (at D = 1024, B = 200: 512 rows halve those additions' cost against 256, and bring the sums
# 1e-7 of the statistics' scale from float64 ones; see two_sample_sketches_of_chunk).
_MAX_SUM_ROWS = 512


def check_accumulator_size(
    n_permutations: int, n_features: int, max_accumulator_bytes: int = DEFAULT_MAX_ACCUMULATOR_BYTES
) -> None:
    """Raise InputError if the B x D float64 permutation accumulators exceed ``max_accumulator_bytes``.

    Every partial sketch (one per chunk, held by Dask until reduced) carries
    these accumulators, so they are checked before any work starts.

    Examples
    --------
    >>> from streamrff.twosample import check_accumulator_size
    >>> check_accumulator_size(500, 1024)  # 500 x 1024 x 8 bytes = 3.9 MiB: fine
    >>> check_accumulator_size(500, 1024, max_accumulator_bytes=2**20)
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: The permutation accumulators take ... = 500 x 1024 x 8 = 3.9 MiB per partial ...
    """
    size = 8 * int(n_permutations) * int(n_features)
    if size > max_accumulator_bytes:
        raise InputError(
            f"The permutation accumulators take n_permutations x n_features x 8 bytes = "
            f"{n_permutations} x {n_features} x 8 = {size / 2**20:.1f} MiB per partial sketch, over "
            f"max_accumulator_bytes={max_accumulator_bytes} ({max_accumulator_bytes / 2**20:.1f} MiB). "
            "Lower n_permutations or n_features, use method='spectral' or 'hotelling', or raise "
            "max_accumulator_bytes if the workers have the memory."
        )


@dataclasses.dataclass(eq=False, repr=False)
class TwoSampleSketch(SumSketch):
    """Sums for the one-pass permutation MMD test of X (global rows ``0..n_x-1``) against Y (``n_x..N-1``).

    Built per chunk by :func:`two_sample_sketch_of_chunk`, merged with
    :meth:`merge` (a sum: commutative and associative up to float64 rounding),
    read by :func:`permutation_test`. Partial sketches have ``count_x <= n_x``
    and ``count_y <= n_y``; the test needs a complete one.

    Parameters
    ----------
    feature_map : FeatureMap
        The fitted map.
    n_x, n_y : int
        Sizes of the two samples (the design: fixed before any chunk is read).
    n_permutations : int
        B, number of permutations.
    seed : int
        Key of the permutations (:func:`permutation_indices`).
    count_x, count_y : int
        Rows of X and of Y added so far.
    feature_sum_x, feature_sum_y : ndarray of shape (D,), float64
        Sums of the features of the X rows and of the Y rows.
    squared_norm_sum_x, squared_norm_sum_y : float
        Sums of ``||z_i||^2`` over the X rows and the Y rows.
    permutation_sums : ndarray of shape (B, D), float64
        ``P_b = sum_i [pi_b(i) < n_x] z_i``.
    permutation_squared_norms : ndarray of shape (B,), float64
        ``q_b = sum_i [pi_b(i) < n_x] ||z_i||^2``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.twosample import two_sample_sketch_of_chunk
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(40, 2)), rng.normal(size=(30, 2))
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
    >>> parts = [two_sample_sketch_of_chunk(X, rff, 0, 40, 30, 19, seed=0),
    ...          two_sample_sketch_of_chunk(Y, rff, 40, 40, 30, 19, seed=0)]
    >>> sketch = srf.merge(parts)
    >>> sketch.count, sketch.permutation_sums.shape
    (70, (19, 64))
    >>> bool(np.allclose(sketch.feature_sum_y, rff.transform(Y).astype(np.float64).sum(axis=0), atol=1e-5))
    True

    Every permutation keeps 40 rows in X, so the squared norms of its X rows sum to 40
    (``||z||^2 = 1`` for sincos features):

    >>> bool(np.allclose(sketch.permutation_squared_norms, 40, atol=1e-4))
    True
    """

    kind = "twosample"
    _summed_fields = (
        "count_x", "count_y", "feature_sum_x", "feature_sum_y", "squared_norm_sum_x", "squared_norm_sum_y",
        "permutation_sums", "permutation_squared_norms",
    )  # fmt: skip
    _fixed_fields = ("feature_map", "n_x", "n_y", "n_permutations", "seed")

    feature_map: FeatureMap
    n_x: int
    n_y: int
    n_permutations: int
    seed: int
    count_x: int
    count_y: int
    feature_sum_x: np.ndarray
    feature_sum_y: np.ndarray
    squared_norm_sum_x: float
    squared_norm_sum_y: float
    permutation_sums: np.ndarray
    permutation_squared_norms: np.ndarray

    @classmethod
    def empty(cls, feature_map: FeatureMap, n_x: int, n_y: int, n_permutations: int, seed: int) -> TwoSampleSketch:
        """The neutral element of the design ``(n_x, n_y, n_permutations, seed)``: zero rows."""
        width = feature_map.n_features_out_
        return cls(
            feature_map, n_x, n_y, n_permutations, seed, 0, 0,
            np.zeros(width), np.zeros(width), 0.0, 0.0,
            np.zeros((n_permutations, width)), np.zeros(n_permutations),
        )  # fmt: skip

    @property
    def count(self) -> int:  # type: ignore[override]
        """Rows added so far (X and Y)."""
        return self.count_x + self.count_y

    @property
    def is_complete(self) -> bool:
        """Whether every row of the design has been added."""
        return self.count_x == self.n_x and self.count_y == self.n_y

    def check_compatible(self, other: Any) -> None:
        super().check_compatible(other)
        for name in ("n_x", "n_y", "n_permutations", "seed"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                raise SketchMismatchError(
                    f"Cannot merge two-sample sketches of different designs: {name}={mine} vs "
                    f"{name}={theirs} (n_x={self.n_x}, n_y={self.n_y}, n_permutations="
                    f"{self.n_permutations}, seed={self.seed} vs n_x={other.n_x}, n_y={other.n_y}, "
                    f"n_permutations={other.n_permutations}, seed={other.seed}). Sketch every chunk "
                    "with the same n_x, n_y, n_permutations and seed."
                )

    def _extra_attrs(self) -> dict[str, Any]:
        return {"permutation_scheme": PERMUTATION_SCHEME}

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> TwoSampleSketch:

        if attrs.get("permutation_scheme") != PERMUTATION_SCHEME:
            raise InputError(
                f"Expected permutation_scheme={PERMUTATION_SCHEME!r}. Got {attrs.get('permutation_scheme')!r}: "
                "the sketch was made with another permutation construction. Re-sketch the data with "
                "this version of streamrff."
            )
        feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        n_x, n_y = expect_int(attrs, "n_x"), expect_int(attrs, "n_y")
        count_x, count_y = expect_int(attrs, "count_x"), expect_int(attrs, "count_y")
        n_permutations = check_positive_int(attrs.get("n_permutations"), "n_permutations")
        seed = normalize_seed(attrs.get("seed"))
        if n_x + n_y < 1:
            raise InputError(f"A two-sample design needs n_x + n_y >= 1. Got n_x={n_x}, n_y={n_y}.")
        if count_x > n_x or count_y > n_y:
            raise InputError(
                f"count_x <= n_x and count_y <= n_y are required. Got count_x={count_x}, n_x={n_x}, "
                f"count_y={count_y}, n_y={n_y}."
            )
        if expect_int(attrs, "count") != count_x + count_y:
            raise InputError(f"count must equal count_x + count_y = {count_x + count_y}. Got {attrs['count']}.")
        norms = []
        for name in ("squared_norm_sum_x", "squared_norm_sum_y"):
            value = attrs.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise InputError(f"{name} must be a finite number >= 0. Got {value!r}.")
            norms.append(float(value))
        return cls(
            feature_map,
            n_x,
            n_y,
            n_permutations,
            seed,
            count_x,
            count_y,
            expect_array(arrays, "feature_sum_x", (width,), np.float64),
            expect_array(arrays, "feature_sum_y", (width,), np.float64),
            norms[0],
            norms[1],
            expect_array(arrays, "permutation_sums", (n_permutations, width), np.float64),
            expect_array(arrays, "permutation_squared_norms", (n_permutations,), np.float64),
        )

    def __repr__(self) -> str:
        return (
            f"TwoSampleSketch(count_x={self.count_x}/{self.n_x}, count_y={self.count_y}/{self.n_y}, "
            f"n_permutations={self.n_permutations}, seed={self.seed}, "
            f"n_features={self.feature_sum_x.shape[0]}, map={describe_spec(self.spec)})"
        )


def two_sample_sketch_of_chunk(
    rows: np.ndarray,
    feature_map: FeatureMap,
    row_offset: int,
    n_x: int,
    n_y: int,
    n_permutations: int,
    seed: int,
) -> TwoSampleSketch:
    """Sketch trusted, finite pooled rows ``row_offset`` to ``row_offset + len(rows) - 1``: the pure chunk kernel.

    Rows with global index ``< n_x`` belong to X, the others to Y; a chunk may
    straddle the boundary. Features are embedded tile by tile
    (:meth:`FeatureMap.embed_tiles`); the permutation sums of a tile are one
    float32 GEMM, ``mask (B x t) @ features (t x D)`` with
    ``mask[b, i] = [pi_b(i) < n_x]``, added to float64 sums (see
    :func:`two_sample_sketches_of_chunk`).

    Parameters
    ----------
    rows : ndarray of shape (t, d)
        Finite pooled rows, validated by the caller: X's while the global
        index is below ``n_x``, then Y's.
    feature_map : FeatureMap
        Fitted map whose features are summed.
    row_offset : int
        Global pooled index of ``rows[0]``.
    n_x, n_y : int
        Sizes of the two samples.
    n_permutations : int
        B.
    seed : int
        Key of the permutations.

    Returns
    -------
    TwoSampleSketch
        A partial sketch (``count = len(rows)``).

    Examples
    --------
    A chunk straddling the X/Y boundary splits its rows by global index, and its
    permutation sums are those of the keyed permutations:

    >>> import numpy as np, streamrff as srf
    >>> from streamrff.twosample import permutation_indices, two_sample_sketch_of_chunk
    >>> rows = np.random.default_rng(0).normal(size=(10, 2))
    >>> rff = srf.RFF(n_features=16, bandwidth=1.0).fit(rows)
    >>> part = two_sample_sketch_of_chunk(rows, rff, 5, 8, 12, 3, seed=0)  # global rows 5..14; X is 0..7
    >>> part.count_x, part.count_y
    (3, 7)
    >>> Z = rff.transform(rows).astype(np.float64)
    >>> bool(np.allclose(part.feature_sum_x, Z[:3].sum(axis=0), atol=1e-6))
    True
    >>> in_x = permutation_indices(seed=0, b=np.arange(3), n_total=20, index=np.arange(5, 15)) < 8
    >>> bool(np.allclose(part.permutation_sums, in_x @ Z, atol=1e-6))
    True
    """
    return two_sample_sketches_of_chunk(rows, (feature_map,), row_offset, n_x, n_y, n_permutations, seed)[0]


@single_blas_thread  # one GEMM per map and tile: its rounding must not depend on the thread count
def two_sample_sketches_of_chunk(
    rows: np.ndarray,
    feature_maps: Sequence[FeatureMap],
    row_offset: int,
    n_x: int,
    n_y: int,
    n_permutations: int,
    seed: int,
    columns: Sequence[int | slice | None] | None = None,
) -> list[TwoSampleSketch]:
    """One partial :class:`TwoSampleSketch` per map, sharing the permutations: the pure chunk kernel.

    For each row tile the membership ``mask[b, i] = [pi_b(i) < n_x]`` of the
    B permutations (the Feistel network, :func:`permutation_indices`) is
    computed once, stacked with the X and Y indicators, and applied to every
    map's features (one GEMM per map gives its permutation, X and Y sums) and
    to their squared norms (float64), so L maps cost L embeddings and GEMMs
    but one evaluation of the permutations. RFF maps that differ only in bandwidth (the maps of
    :func:`~streamrff.twosample.bandwidth_maps`) also share one projection
    ``X G`` of each tile. :func:`two_sample_sketch_of_chunk` is this kernel
    with one map.

    The GEMM is float32 (the features are), on tiles of at most 512 rows,
    and each tile's product is added to float64 sums: the 0/1 mask makes
    every product exact, so only the tile's sums round, and float32 halves
    the time of the GEMM that dominates the aggregated test. The features are
    first centred on ``c``, the float32 mean of the chunk's first tile
    (``P_b = mask_b (Z - c) + (mask_b 1) c``, the counts and ``c`` added once
    per chunk in float64), so that a feature's mean does not grow the
    rounding with the tile's sums. Against float64 sums of the same float32
    features the statistics move by ~1e-7 of their scale (at most 1e-6), a
    change of chunking moves them alike; thread count, workers and merge
    order still change only float64 rounding (the BLAS runs on one thread,
    :func:`~streamrff._base.blas.single_blas_thread`).

    Parameters
    ----------
    feature_maps : sequence of FeatureMap
        Fitted maps, at least one.
    rows, row_offset, n_x, n_y, n_permutations, seed
        As for :func:`two_sample_sketch_of_chunk`.
    columns : sequence of int, slice or None, optional
        Per map, the one column of ``rows`` it embeds (a map of one input column), the
        columns of a slice, or None for the whole row: the per-column tests of
        :func:`~streamrff.twosample.marginal_tests` share the joint test's permutations.

    Returns
    -------
    list of TwoSampleSketch
        One partial sketch per map, in the order of ``feature_maps``.

    Examples
    --------
    Each map's partial equals that map's own single-map kernel:

    >>> import numpy as np, streamrff as srf
    >>> from streamrff.twosample import two_sample_sketch_of_chunk, two_sample_sketches_of_chunk
    >>> rows = np.random.default_rng(0).normal(size=(30, 2))
    >>> maps = [srf.RFF(n_features=32, bandwidth=b, seed=i).fit(rows) for i, b in enumerate([0.5, 2.0])]
    >>> parts = two_sample_sketches_of_chunk(rows, maps, 0, 20, 10, 9, seed=0)
    >>> [part.feature_map.bandwidth_ for part in parts]
    [0.5, 2.0]
    >>> parts[1] == two_sample_sketch_of_chunk(rows, maps[1], 0, 20, 10, 9, seed=0)
    True
    """
    from .._kernels.norms import squared_norms as row_squared_norms  # here: numba loads only when used

    n_total = n_x + n_y
    if row_offset < 0 or row_offset + rows.shape[0] > n_total:
        raise InputError(
            f"Rows {row_offset}..{row_offset + rows.shape[0] - 1} lie outside the pooled design "
            f"[0, n_x + n_y) = [0, {n_total}). Check row_offset, n_x and n_y."
        )
    widths = [feature_map.n_features_out_ for feature_map in feature_maps]
    # Twice the maps' cache tile (the float32 tile takes the bytes of their float64 one), at most
    # _MAX_SUM_ROWS: the GEMM's float32 sums run over one tile.
    map_tile_rows = min(feature_map._tile_rows(width) for feature_map, width in zip(feature_maps, widths))
    step = min(_MAX_SUM_ROWS, 2 * map_tile_rows)
    tile_rows = min(step, rows.shape[0])
    if columns is None:
        embed = _shared_draw_embedder(feature_maps, tile_rows) or _separate_embedder(feature_maps, tile_rows)
    else:
        embed = _separate_embedder(feature_maps, tile_rows, columns)
    keys = _round_keys(seed, np.arange(n_permutations))
    # Rows 0..B-1: the permutations' membership of X; rows B and B + 1: the X and Y indicators, so
    # that one GEMM per map gives its permutation sums and its X and Y sums. Float64 for the squared
    # norms, float32 for the features' GEMM.
    indicators = np.empty((n_permutations + 2, tile_rows))
    indicators32 = np.empty((n_permutations + 2, tile_rows), dtype=np.float32)
    counts = np.zeros(n_permutations + 2)  # rows of the chunk under each indicator row
    centres = [np.zeros(width, dtype=np.float32) for width in widths]
    norms = np.empty(tile_rows)
    # One float32 product, reused map after map: it stays in cache.
    product = np.empty((n_permutations + 2, max(widths)), dtype=np.float32)
    sums = [np.zeros((n_permutations + 2, width)) for width in widths]
    squared_norms = np.zeros((n_permutations + 2, len(feature_maps)))
    for start in range(0, rows.shape[0], step):
        tile = rows[start : start + step]
        first, size = row_offset + start, tile.shape[0]
        index = np.arange(first, first + size, dtype=np.uint64)
        split = int(np.clip(n_x - first, 0, size))  # tile rows [0, split) are in X
        mask, mask32 = indicators[:, :size], indicators32[:, :size]
        np.less(_permute(keys, n_total, index), n_x, out=mask[:n_permutations])
        mask[n_permutations:] = 0.0
        mask[n_permutations, :split] = 1.0
        mask[n_permutations + 1, split:] = 1.0
        np.copyto(mask32, mask)
        counts += mask.sum(axis=1)
        for m, features in enumerate(embed(tile)):
            # Map by map, as for one map alone: a map's sums never depend on the others (bit for bit).
            row_squared_norms(features, norms[:size])
            squared_norms[:, m] += mask @ norms[:size]
            if start == 0:
                centres[m][...] = features.mean(axis=0, dtype=np.float64)
            features -= centres[m]  # the embedders' buffers are ours until the next tile
            result = product[:, : widths[m]]
            np.matmul(mask32, features, out=result)
            sums[m] += result
    for m, centre in enumerate(centres):
        sums[m] += np.outer(counts, centre)
    in_x = int(np.clip(n_x - row_offset, 0, rows.shape[0]))
    return [
        TwoSampleSketch(
            feature_map,
            n_x,
            n_y,
            n_permutations,
            seed,
            in_x,
            rows.shape[0] - in_x,
            sums[m][n_permutations].copy(),
            sums[m][n_permutations + 1].copy(),
            float(squared_norms[n_permutations, m]),
            float(squared_norms[n_permutations + 1, m]),
            sums[m][:n_permutations].copy(),
            squared_norms[:n_permutations, m].copy(),
        )  # fmt: skip
        for m, feature_map in enumerate(feature_maps)
    ]


def _separate_embedder(
    feature_maps: Sequence[FeatureMap], tile_rows: int, columns: Sequence[int | slice | None] | None = None
):
    """``tile -> float32 features of each map in turn`` (a generator: each map's features are summed
    while they are in cache, and may be overwritten), each map embedding the tile (or its
    ``columns[m]``-th column) on its own."""
    # One C-contiguous float32 tile per width, reused map after map.
    buffers = {width: np.empty((tile_rows, width), np.float32) for width in {m.n_features_out_ for m in feature_maps}}
    columns = [None] * len(feature_maps) if columns is None else list(columns)

    def embed(tile: np.ndarray) -> Iterator[np.ndarray]:
        for feature_map, column in zip(feature_maps, columns):
            features = buffers[feature_map.n_features_out_][: tile.shape[0]]
            if column is None:
                rows = tile
            else:
                rows = np.ascontiguousarray(tile[:, column if isinstance(column, slice) else slice(column, column + 1)])
            feature_map._embed_tile(rows, features)
            yield features

    return embed


def _shared_draw_embedder(feature_maps: Sequence[FeatureMap], tile_rows: int):
    """For RFF maps that differ only in bandwidth, ``tile -> float32 features of each map`` from ONE projection.

    Such maps share the seeded draw G (``W_l = G / sigma_l``, see
    :func:`~streamrff.twosample.bandwidth_maps`), so the phases of map l are the tile's
    projection ``X G`` divided by ``sigma_l``: one GEMM serves every bandwidth. Maps of
    several kernel families (the aggregated test's ``kernels``) form one group per family,
    with one projection per group. The features equal each map's own embedding up to
    float32 rounding of the phase (``|phase| * 6e-8``); they may be overwritten before the
    next map's. Returns None for any other list of maps (or one map).
    """
    if len(feature_maps) < 2 or any(
        type(feature_map) is not RFF or not feature_map._float32_phases() for feature_map in feature_maps
    ):
        return None
    specs = [dict(feature_map.spec) for feature_map in feature_maps]
    bandwidths = [spec.pop("bandwidth") for spec in specs]
    groups: dict[str, int] = {}  # the spec without its bandwidth -> the group's index
    for spec in specs:
        groups.setdefault(spec_key(spec), len(groups))
    if len(groups) == len(feature_maps):
        return None  # no two maps share a draw
    from .._kernels.sincos import MAX_FAST_PHASE, cos_features, largest_phase, sincos_features  # numba: when used

    group_of = [groups[spec_key(spec)] for spec in specs]
    bases = [_projection_params("rff", spec_key({**json.loads(key), "bandwidth": 1.0}), "f")[0] for key in groups]
    offsets_scales = [feature_maps[group_of.index(group)]._float32_kernel_args()[1:] for group in range(len(groups))]
    inverse_bandwidths = [np.float32(1.0 / bandwidth) for bandwidth in bandwidths]
    projections = [np.empty((tile_rows, base.shape[1]), dtype=np.float32) for base in bases]
    phases = np.empty_like(projections[0])
    buffer = np.empty((tile_rows, feature_maps[0].n_features_out_), dtype=np.float32)

    def embed(tile: np.ndarray) -> Iterator[np.ndarray]:
        size = tile.shape[0]
        rows32 = np.ascontiguousarray(tile, dtype=np.float32)
        for base, projection in zip(bases, projections):
            np.matmul(rows32, base, out=projection[:size])
        for feature_map, inverse, group in zip(feature_maps, inverse_bandwidths, group_of):
            offsets, scale = offsets_scales[group]
            features, scaled = buffer[:size], phases[:size]
            np.multiply(projections[group][:size], inverse, out=scaled)
            if largest_phase(scaled, offsets) > MAX_FAST_PHASE:
                feature_map._embed_tile(tile, features)  # a tiny bandwidth: the map's own careful path
            elif offsets.shape[0]:
                cos_features(scaled, offsets, scale, features)
            else:
                sincos_features(scaled, scale, features)
            yield features

    return embed


class AggregatedTwoSampleSketch:
    """L :class:`TwoSampleSketch` of one design, one per bandwidth's map, sharing the B permutations.

    The partial sketch of the aggregated test: built per chunk by
    :func:`two_sample_sketches_of_chunk`, merged component by component
    (a sum, like each component), read by
    :func:`~streamrff.twosample.aggregated_permutation_test`. It lives in
    memory only; each component is an ordinary :class:`TwoSampleSketch` that
    can be saved on its own.

    Parameters
    ----------
    sketches : sequence of TwoSampleSketch
        One per bandwidth, all with the same ``n_x``, ``n_y``,
        ``n_permutations`` and ``seed``.
    columns : sequence of (tuple of int or None), optional
        Per component, the input columns its map reads (None: the whole row),
        as :func:`~streamrff.twosample.table_maps` gives them; kept so the
        result can name each map. Default: every map reads the whole row.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.twosample import AggregatedTwoSampleSketch, two_sample_sketches_of_chunk
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(40, 2)), rng.normal(size=(30, 2))
    >>> maps = [srf.RFF(n_features=64, bandwidth=b, seed=i).fit(X) for i, b in enumerate([0.5, 2.0])]
    >>> parts = [AggregatedTwoSampleSketch(two_sample_sketches_of_chunk(X, maps, 0, 40, 30, 19, seed=0)),
    ...          AggregatedTwoSampleSketch(two_sample_sketches_of_chunk(Y, maps, 40, 40, 30, 19, seed=0))]
    >>> sketch = parts[0].merge(parts[1])
    >>> sketch.count, len(sketch.sketches), sketch.is_complete
    (70, 2, True)
    """

    def __init__(self, sketches: Sequence[TwoSampleSketch], columns: Sequence[Any] | None = None) -> None:
        sketches = tuple(sketches)
        self.columns = (None,) * len(sketches) if columns is None else tuple(columns)
        if not sketches or not all(isinstance(sketch, TwoSampleSketch) for sketch in sketches):
            raise InputError(
                f"AggregatedTwoSampleSketch needs at least one TwoSampleSketch. Got "
                f"{[type(sketch).__name__ for sketch in sketches]}."
            )
        first = sketches[0]
        for sketch in sketches[1:]:
            if (sketch.n_x, sketch.n_y, sketch.n_permutations, sketch.seed, sketch.count_x, sketch.count_y) != (
                first.n_x,
                first.n_y,
                first.n_permutations,
                first.seed,
                first.count_x,
                first.count_y,
            ):
                raise InputError(
                    "The components of an AggregatedTwoSampleSketch must share one design and the same rows: "
                    f"n_x={first.n_x}, n_y={first.n_y}, n_permutations={first.n_permutations}, seed={first.seed}, "
                    f"count_x={first.count_x}, count_y={first.count_y} vs n_x={sketch.n_x}, n_y={sketch.n_y}, "
                    f"n_permutations={sketch.n_permutations}, seed={sketch.seed}, count_x={sketch.count_x}, "
                    f"count_y={sketch.count_y}. Sketch every map on the same chunks with the same design."
                )
        self.sketches = sketches

    @property
    def count(self) -> int:
        """Rows added so far (X and Y)."""
        return self.sketches[0].count

    @property
    def is_empty(self) -> bool:
        """True when no row has been added."""
        return self.count == 0

    @property
    def is_complete(self) -> bool:
        """Whether every row of the design has been added."""
        return self.sketches[0].is_complete

    def merge(self, other: AggregatedTwoSampleSketch) -> AggregatedTwoSampleSketch:
        """The sketch of both inputs' rows; refuses another number of bandwidths, maps or design.

        Raises
        ------
        SketchMismatchError
            If ``other`` holds another number of maps, or a component's map or design differs.
        """
        if not isinstance(other, AggregatedTwoSampleSketch) or len(other.sketches) != len(self.sketches):
            theirs = len(other.sketches) if isinstance(other, AggregatedTwoSampleSketch) else type(other).__name__
            raise SketchMismatchError(
                f"Cannot merge an aggregated two-sample sketch of {len(self.sketches)} bandwidths with {theirs}. "
                "Sketch every chunk with the same list of maps."
            )
        if other.columns != self.columns:
            raise SketchMismatchError(
                f"Cannot merge aggregated two-sample sketches whose maps read other columns: {self.columns} vs "
                f"{other.columns}. Sketch every chunk with the same list of maps."
            )
        merged = [mine.merge(theirs) for mine, theirs in zip(self.sketches, other.sketches)]
        return AggregatedTwoSampleSketch(merged, self.columns)

    def merge_many(self, others: Sequence[AggregatedTwoSampleSketch]) -> AggregatedTwoSampleSketch:
        """``self.merge(others[0]).merge(others[1])...``: the left fold the engine's merge tree asks for."""
        merged = self
        for other in others:
            merged = merged.merge(other)
        return merged

    def __repr__(self) -> str:
        first = self.sketches[0]
        return (
            f"AggregatedTwoSampleSketch(n_bandwidths={len(self.sketches)}, count_x={first.count_x}/{first.n_x}, "
            f"count_y={first.count_y}/{first.n_y}, n_permutations={first.n_permutations}, seed={first.seed})"
        )
