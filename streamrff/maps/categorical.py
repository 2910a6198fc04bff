"""The categorical factor of a mixed-row RFF map: seeded +/-1 hashes of category codes, no vocabulary.

For a row with numeric part ``x`` and categorical part ``a`` (one category code per categorical
column, :func:`streamrff.sources.frames.category_code`), the mixed kernel is

    k((x, a), (y, b)) = exp(-||x - y||^2 / (2 sigma^2)) * prod_c (e^-lambda + (1 - e^-lambda) [a_c == b_c])
                      = Gaussian(x, y) * exp(-lambda * #{c : a_c != b_c}).

Frequency ``j`` of the map carries, per categorical column ``c``, a Bernoulli mask ``M_jc`` (true with
probability ``1 - e^-lambda``) and a 64-bit key ``K_jc``, both drawn from the map's seed. Its factor
for a row is ``F_j(a) = prod_{c : M_jc} s(K_jc, a_c)``, with ``s`` a +/-1 hash of the code's float64
bit pattern mixed with the key (splitmix64's finaliser). Over the draws, ``E[s(K, a) s(K, b)] = [a == b]``
and ``E[F_j(a) F_j(b)] = prod_c (e^-lambda + (1 - e^-lambda) [a_c == b_c])``, independent of the
frequency, so the map's features times ``F_j`` estimate the mixed kernel without bias. A category
never seen at fit is just another code.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "category_flip_words",
    "category_flips",
    "category_signs",
    "draw_category_params",
    "flip_category_signs",
    "gather_flips",
    "median_mismatch_rate",
    "reduced_phase_features",
    "signed_sums",
]


def draw_category_params(rng: np.random.Generator, n_frequencies: int, n_categorical: int, mismatch: float) -> dict:
    """The mask (which frequency hashes which column) and the hash keys, drawn after the frequencies."""
    keep = -np.expm1(-float(mismatch))  # 1 - e^-lambda, exact for small lambda
    return {
        "category_mask": rng.random((n_frequencies, n_categorical)) < keep,
        "category_keys": rng.integers(0, 2**64, size=(n_frequencies, n_categorical), dtype=np.uint64),
    }


def category_signs(codes: np.ndarray, mask: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``F`` of shape (rows, frequencies), float32 +/-1: the product over columns of each masked hash.

    Compiled (:mod:`streamrff._kernels.categorical`): splitmix64's finaliser of the code's bits
    xor the key, plus the golden ratio constant; the sign is its top bit. Each distinct code of a
    column is hashed once (:func:`category_flip_words`).

    Parameters
    ----------
    codes : ndarray of shape (rows, n_categorical), float64
        Category codes (any float: equal values are one category; -0.0 is 0.0).
    mask : ndarray of shape (n_frequencies, n_categorical), bool
    keys : ndarray of shape (n_frequencies, n_categorical), uint64

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.maps.categorical import category_signs, draw_category_params
    >>> params = draw_category_params(np.random.default_rng(0), 4, 2, mismatch=50.0)  # every column hashed
    >>> signs = category_signs(np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 3.0]]), params["category_mask"],
    ...                        params["category_keys"])
    >>> bool((signs[0] == signs[1]).all()), set(np.unique(signs).tolist()) <= {-1.0, 1.0}
    (True, True)
    """
    signs = np.ones((np.shape(codes)[0], keys.shape[0]), dtype=np.float32)
    flip_category_signs(category_flip_words(codes, mask, keys), signs, keys.shape[0])
    return signs


def category_flip_words(codes: np.ndarray, mask: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The signs of :func:`category_signs` packed as bits: (rows, ceil(frequencies / 64)) uint64, bit set = -1.

    The XOR, per row, of its columns' entries (:func:`category_flips`).

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.maps.categorical import category_flip_words, draw_category_params
    >>> params = draw_category_params(np.random.default_rng(0), 100, 1, mismatch=50.0)
    >>> words = category_flip_words(np.array([[7.0], [7.0]]), params["category_mask"], params["category_keys"])
    >>> words.shape, words.dtype, bool((words[0] == words[1]).all())
    ((2, 2), dtype('uint64'), True)
    """
    return gather_flips(category_flips(codes, mask, keys))


def _row_layout(rows: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(array, by_column)`` for the compiled kernels, which read ``array[i, c]``, or ``array[c, i]`` when
    ``by_column``: ``rows`` when C-contiguous, its transpose when that is (a column-major chunk, as
    tables are read), else a C-contiguous copy."""
    if rows.flags.c_contiguous or not rows.T.flags.c_contiguous:
        return np.ascontiguousarray(rows), False
    return rows.T, True


def category_flips(
    codes: np.ndarray, mask: np.ndarray, keys: np.ndarray, columns: Sequence[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(entries, values)``: per row and categorical column the row of ``values`` ((k, ceil(frequencies /
    64)) uint64) that packs the flips of its code (-1: a column no frequency hashes).

    One hash per distinct code of each column and hashing frequency, kept across calls per map (its
    ``mask`` and ``keys``; see ``_CACHE_BYTES``): a chunk's codes repeat, and so do a table's across
    chunks. With ``columns``, the codes are those columns of ``codes`` (a map's chunk of rows, read in
    place when it is float64, row-major or column-major).
    ``values`` is read-only to the caller (rows are only ever added to it).
    """
    from .._kernels.categorical import category_entries  # here, not at the top: numba's import

    codes = np.asarray(codes, dtype=np.float64)
    n_rows = codes.shape[0]
    columns = np.arange(codes.shape[1]) if columns is None else np.asarray(columns, dtype=np.int64)
    bits, by_column = _row_layout(codes)
    bits = bits.view(np.uint64)  # read in place
    mask, keys = np.asarray(mask), np.asarray(keys, dtype=np.uint64)
    hashing, frequencies = np.nonzero(mask.T)  # row-major: grouped by column
    starts = np.searchsorted(hashing, np.arange(mask.shape[1] + 1)).astype(np.int64)
    entries = np.empty((n_rows, columns.shape[0]), dtype=np.int32)
    arguments = (bits, by_column, columns, starts, frequencies.astype(np.int64), keys[frequencies, hashing])
    table = _flip_table(mask, keys, -(-mask.shape[0] // 64))
    with table.lock:  # -0.0 is read as 0.0: one category
        cached = bool(table.filled[-1])
        while not category_entries(*arguments, table.slots, table.values, table.filled, entries):
            if table.values.shape[0] < table.largest or cached:  # grow to the bound, or start afresh there
                table.allocate(min(2 * table.values.shape[0], table.largest))
                cached = False
            else:  # more distinct codes in this chunk than the bound: a table of its own
                own = _FlipTable(columns.shape[0], table.n_words, entries.size, n_rows)
                category_entries(*arguments, own.slots, own.values, own.filled, entries)
                return entries, own.values
        return entries, table.values


#: The packed flips of the codes met so far, kept per map (its mask and keys) across the chunks a
#: process embeds, so that a column of many levels is not hashed again every chunk: at most
#: ``_CACHED_MAPS`` maps (the least recently used dropped), each table at most ``_CACHE_BYTES``
#: (its codes then start afresh; a chunk with more distinct codes than that takes a table of its own).
_CACHE_BYTES = 32 * 2**20
_CACHED_MAPS = 4
_TABLES: dict[bytes, _FlipTable] = {}
_TABLES_LOCK = threading.Lock()


class _FlipTable:
    """The tables of :func:`streamrff._kernels.categorical.category_entries`, with a lock (a map's chunks
    run in threads) and ``largest``, the most codes it may hold under ``_CACHE_BYTES``."""

    def __init__(self, n_columns: int, n_words: int, capacity: int, per_column: int | None = None) -> None:
        self.lock, self.n_columns, self.n_words = threading.Lock(), n_columns, n_words
        per_code = 2 * 16 * n_columns + 8 * n_words  # at most half full: two slots of code and id per column
        self.largest = max(capacity, 1 << max(10, (_CACHE_BYTES // per_code).bit_length() - 1))
        self.allocate(capacity, per_column)

    def allocate(self, capacity: int, per_column: int | None = None) -> None:
        """Empty tables for ``capacity`` codes, ``per_column`` (default: all of them) in any one column."""
        size = 1 << (2 * max(capacity if per_column is None else per_column, 1) - 1).bit_length()  # >= twice
        self.slots = np.zeros((self.n_columns, size, 2), dtype=np.uint64)
        self.values = np.empty((capacity, self.n_words), dtype=np.uint64)
        self.filled = np.zeros(self.n_columns + 1, dtype=np.int64)


def _flip_table(mask: np.ndarray, keys: np.ndarray, n_words: int) -> _FlipTable:
    digest = hashlib.blake2b(mask.tobytes() + keys.tobytes(), digest_size=16).digest()
    with _TABLES_LOCK:
        table = _TABLES.pop(digest, None) or _FlipTable(mask.shape[1], n_words, 1024)
        _TABLES[digest] = table  # the most recently used last
        while len(_TABLES) > _CACHED_MAPS:
            del _TABLES[next(iter(_TABLES))]
    return table


def gather_flips(flips: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The packed signs (:func:`category_flip_words`) of :func:`category_flips`' ``(entries, values)``."""
    from .._kernels.categorical import gather_words

    words = np.empty((flips[0].shape[0], flips[1].shape[1]), dtype=np.uint64)
    gather_words(*flips, words)
    return words


def flip_category_signs(words: np.ndarray, out: np.ndarray, m: int) -> None:
    """Negate, in place, the float32 or float64 features ``out[:, j]`` (and ``out[:, m + j]`` when ``out``
    has 2m columns, sines beside cosines) whose bit ``j`` is set in ``words`` (:func:`category_flip_words`)."""
    from .._kernels.categorical import flip_signs

    unsigned = np.uint32 if out.dtype == np.float32 else np.uint64
    row = np.empty(m, dtype=out.dtype)
    one_bits = np.uint64(np.ones(1, out.dtype).view(unsigned)[0])
    flip_signs(words, out, m, row.view(unsigned), row, one_bits, np.uint64(8 * out.itemsize - 1))


def signed_sums(
    numeric: np.ndarray,
    frequencies: np.ndarray,
    phases: np.ndarray,
    flips: tuple[np.ndarray, np.ndarray],
    step: int,
    columns: Any = None,
) -> np.ndarray:
    """Float64 (2, m) unscaled column sums of a mixed map's float32 features (cosines, then sines or the
    cosines' squares). Float32 ``frequencies`` and ``phases`` (float32 phases): one compiled call
    (:func:`streamrff._kernels.categorical.signed_float32_sums`) on the ``columns`` of ``numeric``, the
    rows as given. Float64 (float64 phases; ``numeric`` the numeric columns only, float64): per tile
    of ``step`` rows the float64 projection ``numeric @ frequencies``, then one compiled pass
    (:func:`streamrff._kernels.categorical.signed_feature_sums`)."""
    from .._kernels.categorical import signed_feature_sums, signed_float32_sums

    sums = np.zeros((2, frequencies.shape[1]))
    if frequencies.dtype == np.float32:
        rows, by_column = _row_layout(numeric)
        columns = np.asarray(columns, dtype=np.int64)
        signed_float32_sums(rows, by_column, columns, frequencies, phases, *flips, step, sums)
        return sums
    words = gather_flips(flips)
    projection = np.empty((min(step, numeric.shape[0]), frequencies.shape[1]))
    for start in range(0, numeric.shape[0], step):
        tile = projection[: min(step, numeric.shape[0] - start)]
        np.matmul(numeric[start : start + tile.shape[0]], frequencies, out=tile)
        signed_feature_sums(tile, phases, words[start : start + tile.shape[0]], sums)
    return sums


def reduced_phase_features(
    rows: np.ndarray, frequencies: np.ndarray, phases: np.ndarray, scale: np.float32, out: np.ndarray
) -> None:
    """Float32 features (unsigned) of float64 ``rows`` from float64 phases: the float64 projection, reduced
    by one compiled pass (:func:`streamrff._kernels.categorical.reduce_phases`) as
    ``RFF._embed_float64_phases`` reduces it with numpy (bit for bit), then the compiled sin/cos;
    ``out`` has 2m columns (sincos) or m (cosphase, ``phases`` added before the reduction)."""
    from .._kernels import sincos as kernels
    from .._kernels.categorical import reduce_phases

    m = frequencies.shape[1]
    projection, reduced = np.empty((rows.shape[0], m)), np.empty((rows.shape[0], m), dtype=np.float32)
    np.matmul(rows, frequencies, out=projection)
    reduce_phases(projection, phases, reduced)
    if out.shape[1] == 2 * m:
        kernels.sincos_features(reduced, scale, out)
    else:
        kernels.cos_features(reduced, np.zeros(m, dtype=np.float32), scale, out)


def median_mismatch_rate(codes: np.ndarray) -> float:
    """``mismatch="auto"``: ``1 / max(1, median number of mismatching columns between sample pairs)``.

    The pairs are consecutive rows of the (seeded, shuffled) fit sample, so the kernel's categorical
    factor at a typical pair is about ``e^-1``; with fewer than two rows, 1.0.
    """
    if codes.shape[0] < 2:
        return 1.0
    half = codes.shape[0] // 2
    mismatches = np.count_nonzero(codes[:half] != codes[half : 2 * half], axis=1)
    return 1.0 / max(1.0, float(np.median(mismatches)))
