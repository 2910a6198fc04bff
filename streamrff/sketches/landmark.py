"""The landmark sketch: the bottom-k row sample by a keyed hash of the global row index, and its chunk kernel.

Merging keeps the k smallest keys of the union, so the sample is the same however the rows are
chunked: the seeded sample behind the median heuristic, K-JL landmarks and k-means++ starts.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import numpy as np

from .._base.sampling import bottom_k, row_keys
from .._base.validation import check_positive_int
from ..errors import InputError
from ..typing import MapSpec
from .base import ChunkJob, Sketch, expect_array, expect_int


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
        count = expect_int(attrs, "count")
        kept = arrays.get("keys", np.empty(0)).shape[0]
        if kept > min(k, count):
            raise InputError(f"A landmark sketch keeps at most min(k, count) rows. Got {kept}.")
        keys = expect_array(arrays, "keys", (kept,), np.uint64)
        rows = expect_array(arrays, "rows", (kept, d), np.float64)
        return cls(k, seed, d, keys, rows, count)

    def __repr__(self) -> str:
        return f"LandmarkSketch(k={self.k}, kept={self.rows.shape[0]}, count={self.count}, seed={self.seed})"

    @classmethod
    def chunk_job(cls, k: int, seed: int) -> ChunkJob:
        """The engine's pass for the bottom-``k`` sample keyed by ``seed`` (no features: width 0)."""
        return ChunkJob(functools.partial(_landmark_kernel, k=k, seed=seed), cls, f"landmark-{k}-{seed}", 0)


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


def _landmark_kernel(rows: np.ndarray, row_offset: int, valid: np.ndarray | None, k: int, seed: int) -> LandmarkSketch:
    return landmark_sketch_of_chunk(rows, k, seed, row_offset, valid)
