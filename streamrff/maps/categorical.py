"""The categorical factor of the mixed kernel: seeded +/-1 hashes of category codes, kept at rate 1 - e^-lambda.

A mixed row holds numeric columns and categorical columns; a categorical column
holds a *category code*, a finite float whose value is only an identity (equal
codes, same category). :class:`~streamrff.maps.fourier.RFF` with
``categorical=[...]`` estimates the kernel

    k(x, y) = exp(-||x_num - y_num||^2 / (2 sigma^2)) * exp(-lambda * #{c : x_c != y_c})

(the product over categorical columns c of ``e^-lambda + (1 - e^-lambda) [x_c == y_c]``).
Each random feature j multiplies its Fourier feature by

    s_j(x) = prod_c  (h_jc(x_c) if keep_jc else 1),

with ``keep_jc`` a seeded Bernoulli(1 - e^-lambda) drawn once per (feature, column)
and ``h_jc(code)`` = +/-1, the top bit of splitmix64 of the code's float64 bit
pattern (-0.0 read as 0.0, every NaN as one NaN) xor a seeded 64-bit salt of (j, c).
Since ``E[h(a) h(b)] = [a == b]`` over the salts and ``E`` over ``keep`` gives
``e^-lambda + (1 - e^-lambda) [a == b]`` per column, independently of the
frequencies, ``E[z(x).z(y)]`` is the mixed kernel exactly. No vocabulary is stored:
a code never seen at fit time hashes like any other.

Everything here is vectorised numpy on uint64 (wrapping arithmetic).
"""

from __future__ import annotations

import numpy as np

__all__ = ["auto_mismatch", "category_signs", "draw_sign_params"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
#: The second entry of the seed of the keep/salt generator: separate from the frequencies' stream.
_STREAM = 0x43415447  # "CATG"


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of ``values + golden`` (uint64, wrapping): a bijection that mixes every bit."""
    with np.errstate(over="ignore"):
        z = values + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def code_bits(codes: np.ndarray) -> np.ndarray:
    """The uint64 bit patterns of float64 category codes, with -0.0 as 0.0 and one pattern for every NaN."""
    codes = np.asarray(codes, dtype=np.float64) + 0.0  # -0.0 + 0.0 == +0.0
    codes = np.where(np.isnan(codes), np.nan, codes)
    return np.ascontiguousarray(codes).view(np.uint64)


def draw_sign_params(seed: int, n_signs: int, n_columns: int, mismatch: float) -> dict[str, np.ndarray]:
    """The seeded ``keep`` mask (n_signs, n_columns) of rate 1 - e^-mismatch and the uint64 ``salts``."""
    rng = np.random.default_rng([int(seed), _STREAM])
    keep = rng.random((n_signs, n_columns)) < -np.expm1(-float(mismatch))
    salts = rng.integers(0, np.iinfo(np.uint64).max, size=(n_signs, n_columns), dtype=np.uint64, endpoint=True)
    return {"keep": keep, "salts": salts}


def category_signs(codes: np.ndarray, keep: np.ndarray, salts: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``s_j(x)`` (rows, n_signs) in ``dtype`` for the categorical columns ``codes`` (rows, n_columns)."""
    signs = np.ones((codes.shape[0], keep.shape[0]), dtype=dtype)
    for column in range(codes.shape[1]):
        kept = np.flatnonzero(keep[:, column])
        if kept.size == 0:
            continue
        bits = code_bits(codes[:, column])
        hashed = _splitmix64(bits[:, None] ^ salts[kept, column][None, :])
        signs[:, kept] *= (1 - 2 * (hashed >> np.uint64(63)).astype(np.int8)).astype(dtype)
    return signs


def auto_mismatch(codes: np.ndarray) -> float:
    """``mismatch="auto"``: ``lambda = 1 / max(1, median number of mismatching columns over the sample's pairs)``.

    The categorical factor is then ``e^-1`` at the median number of mismatches, as the
    median heuristic puts the Gaussian factor at ``e^-1/2`` at the median distance
    (lambda = 1 when at least half the pairs agree on every categorical column).
    """
    n = codes.shape[0]
    if n < 2 or codes.shape[1] == 0:
        return 1.0
    bits = np.stack([code_bits(codes[:, column]) for column in range(codes.shape[1])], axis=1)
    upper = np.triu_indices(n, k=1)
    mismatches = np.zeros(upper[0].shape[0], dtype=np.int64)
    for column in range(bits.shape[1]):
        mismatches += bits[upper[0], column] != bits[upper[1], column]
    return 1.0 / max(1.0, float(np.median(mismatches)))
