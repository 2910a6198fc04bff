"""Keyed hashing of global row indices, bottom-k row samples and the median heuristic.

A row's sampling key depends only on ``(seed, global row index)``, so every
worker computes the same keys for its own rows with no coordination, and the
bottom-k sample of a data set does not depend on how it is chunked.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist

from ..errors import InputError

__all__ = ["row_keys", "bottom_k", "median_heuristic", "MEDIAN_SAMPLE_ROWS"]

#: Rows in the seeded sample on which ``bandwidth="median"`` is computed.
MEDIAN_SAMPLE_ROWS = 1000

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser: a bijection of uint64 with good avalanche (Steele et al. 2014)."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


def stream_key(seed: int, stream: int = 0) -> np.uint64:
    """A 64-bit key derived from ``(seed, stream)``; distinct streams give unrelated keys."""
    pair = np.array([seed % 2**64, stream % 2**64], dtype=np.uint64)
    mixed = _splitmix64(pair)
    return _splitmix64(np.array([mixed[0] ^ (mixed[1] * _GOLDEN)], dtype=np.uint64))[0]


def row_keys(seed: int, start: int, stop: int, stream: int = 0) -> np.ndarray:
    """Keys of global rows ``start..stop-1``: a keyed bijection of the row index.

    Because the map from index to key is a bijection of uint64 for a fixed
    seed, distinct rows never tie.
    """
    index = np.arange(start, stop, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return _splitmix64((index * _GOLDEN) ^ stream_key(seed, stream))


def bottom_k(keys: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest keys, ordered by key."""
    if keys.shape[0] > k:
        positions = np.argpartition(keys, k - 1)[:k]
    else:
        positions = np.arange(keys.shape[0])
    return positions[np.argsort(keys[positions], kind="stable")]


def median_heuristic(rows: np.ndarray) -> float:
    """Median of the pairwise Euclidean distances between ``rows`` (zero distances excluded).

    Returns 1.0 when fewer than two distinct rows are given, so that a map can
    still be fitted on a single row (the bandwidth then does not matter).

    Raises
    ------
    InputError
        For no rows at all (e.g. every row of the data is NaN/inf and skipped):
        there is nothing to take a median of.
    """
    if rows.shape[0] == 0:
        raise InputError(
            "bandwidth='median' needs at least one finite row to sample. Got 0 finite rows (every row is "
            "NaN/inf, or the data is empty). Clean the data, or pass a numeric bandwidth (CLI: --bandwidth 1.5)."
        )
    if rows.shape[0] < 2:
        return 1.0
    distances = pdist(np.asarray(rows, dtype=np.float64))
    distances = distances[distances > 0]
    if distances.size == 0:
        return 1.0
    return float(np.median(distances))
