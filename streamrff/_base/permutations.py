"""Keyed pseudo-random permutations of ``[0, N)`` for the one-pass permutation test.

``pi_b`` is an alternating Feistel network keyed by ``(seed, b, round)`` and
restricted to ``[0, N)`` by cycle-walking (:func:`permutation_indices`). It
depends only on ``(seed, b, N)``, so every chunk evaluates it on its own global
row indices with no coordination; :mod:`streamrff.sketches.twosample` turns it
into the permutation sums of a :class:`~streamrff.TwoSampleSketch`.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..typing import ArrayLike2D
from .sampling import _splitmix64, stream_key
from .validation import check_positive_int, normalize_seed

__all__ = ["permutation_indices", "FEISTEL_ROUNDS", "PERMUTATION_SCHEME"]

#: Rounds of the Feistel network. Four rounds make a pseudo-random permutation
#: asymptotically (Luby & Rackoff 1988), but on the small halves used here (1..32 bits)
#: they are measurably non-uniform: the number of X rows that pi_b keeps in X had 1.1-1.35
#: times its hypergeometric variance for N = 50..1000 (6 rounds: up to 1.10 at N = 64).
#: Eight rounds matched it within sampling error (see tests/test_twosample.py). Re-measured
#: on the alternating network of scheme v2 (B = 4000, N = 10..1000, 3 blocks each): 4 rounds
#: up to 1.30, 6 rounds 0.935-1.048, 8 rounds 0.977-1.053 (sd of a ratio: 0.022).
FEISTEL_ROUNDS = 8

# Domain tag of the permutation keys: keeps them unrelated to the row-sampling
# keys that streamrff._base.sampling derives from the same seed (stream 0).
_PERMUTATION_STREAM = 0x7065726D75746521  # "permute!"
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: Names the permutation family; stored with every TwoSampleSketch and checked on load, so sums
#: made with another construction are never merged or tested as if they were the same pi_b.
#: v1 was a balanced network on [0, 4**h) with a splitmix64 round function.
PERMUTATION_SCHEME = f"feistel{FEISTEL_ROUNDS}-alternating-fmix32-splitmix64-cyclewalk-v2"
# Round functions by word size, as (shift, multiplier, shift, multiplier, shift) of an
# xorshift-multiply finaliser: murmur3's fmix32 (Appleby 2011) for domains of up to 2**32,
# the splitmix64 finaliser (Steele et al. 2014) above. Both are bijections with full avalanche.
_MIXERS = {
    np.dtype(np.uint32): (16, 0x85EBCA6B, 13, 0xC2B2AE35, 16),
    np.dtype(np.uint64): (30, 0xBF58476D1CE4E5B9, 27, 0x94D049BB133111EB, 31),
}
# Elements per block of the network (2 MiB of uint32 work buffers): the ~95 elementwise passes
# of the 8 rounds run on cache-resident data, and each NumPy call still covers enough elements
# to hide its overhead (2**13: 3x slower, 2**20: no faster; 400k-row domain, B = 200).
_FEISTEL_BLOCK = 2**17


def _round_keys(seed: int, permutations: np.ndarray) -> np.ndarray:
    """Keys of shape (len(permutations), FEISTEL_ROUNDS), uint64, one per (seed, b, round)."""
    with np.errstate(over="ignore"):  # stream_key multiplies numpy scalars modulo 2**64
        base = stream_key(seed, _PERMUTATION_STREAM)
    rounds = np.arange(FEISTEL_ROUNDS, dtype=np.uint64)
    stream = permutations.astype(np.uint64)[:, None] * np.uint64(FEISTEL_ROUNDS) + rounds
    with np.errstate(over="ignore"):
        return _splitmix64(_splitmix64(stream * _GOLDEN) ^ base)


def _domain_bits(n_total: int) -> int:
    """Bits k of the network's domain ``[0, 2**k)``: the smallest k >= 2 with ``2**k >= n_total``."""
    return max(2, (int(n_total) - 1).bit_length())


class _FeistelNetwork:
    """The alternating Feistel network on ``[0, 2**bits)`` with preallocated work buffers.

    The halves have ``ceil(bits/2)`` and ``floor(bits/2)`` bits and swap widths each round
    (the alternating, or unbalanced, Feistel network of FF1, Bellare et al. 2010): round r
    maps ``(L, R) -> (R, L xor F_r(R))`` with ``F_r(R)`` the low ``width(L)`` bits of
    ``mix(R xor key_r)``, a bijection for any round function. Working on ``2**bits < 2 N``
    instead of the smallest ``4**h`` keeps cycle walking under 2 passes on average.
    Words are uint32 with fmix32 when ``bits <= 32``, else uint64 with splitmix64.
    """

    def __init__(self, bits: int, keys: np.ndarray, block: int) -> None:
        self.dtype = np.dtype(np.uint32 if bits <= 32 else np.uint64)
        # keys_by_round[r, b]: contiguous rows, so per-element keys are one gather each.
        self.keys_by_round = np.ascontiguousarray(keys.T).astype(self.dtype)
        self.right_bits = (bits + 1) // 2
        self.left_bits = bits - self.right_bits
        shift1, mult1, shift2, mult2, shift3 = _MIXERS[self.dtype]
        self.mixer = (
            self.dtype.type(shift1), self.dtype.type(mult1), self.dtype.type(shift2),
            self.dtype.type(mult2), self.dtype.type(shift3),
        )  # fmt: skip
        self.buffers = [np.empty(block, dtype=self.dtype) for _ in range(4)]

    def __call__(self, values: np.ndarray, round_key) -> None:
        """Encrypt ``values`` in place; ``round_key(r)`` broadcasts against ``values``."""
        shape, size = values.shape, values.size
        left, right, mixed, shifted = (buffer[:size].reshape(shape) for buffer in self.buffers)
        shift1, mult1, shift2, mult2, shift3 = self.mixer
        left_bits, right_bits = self.left_bits, self.right_bits
        np.right_shift(values, self.dtype.type(right_bits), out=left)
        np.bitwise_and(values, self.dtype.type((1 << right_bits) - 1), out=right)
        for r in range(FEISTEL_ROUNDS):
            np.bitwise_xor(right, round_key(r), out=mixed)
            np.right_shift(mixed, shift1, out=shifted)
            mixed ^= shifted
            mixed *= mult1
            np.right_shift(mixed, shift2, out=shifted)
            mixed ^= shifted
            mixed *= mult2
            np.right_shift(mixed, shift3, out=shifted)
            mixed ^= shifted
            mixed &= self.dtype.type((1 << left_bits) - 1)
            left ^= mixed
            left, right = right, left
            left_bits, right_bits = right_bits, left_bits
        # An even number of rounds brings the widths back to where they started.
        np.left_shift(left, self.dtype.type(right_bits), out=values)
        values |= right


def _permute(keys: np.ndarray, n_total: int, index: np.ndarray) -> np.ndarray:
    """``pi_b(index)`` for every b: shape (len(keys), len(index)), uint32 if ``n_total <= 2**32`` else uint64.

    Cycle-walking (Black & Rogaway 2002): values that land in ``[N, 2**k)`` are
    pushed through the network again until they fall in ``[0, N)``. Since the
    network permutes ``[0, 2**k)``, this restricts it to a bijection of
    ``[0, N)``; as ``2**k < 2 N`` the expected number of passes is below 2.
    The (B, len(index)) output is filled in blocks of whole index columns that
    fit the network's cache-sized buffers.
    """
    network = _FeistelNetwork(_domain_bits(n_total), keys, _FEISTEL_BLOCK)
    limit = network.dtype.type(n_total)
    n_permutations, width = keys.shape[0], index.shape[0]
    out = np.empty((n_permutations, width), dtype=network.dtype)
    if out.size == 0:
        return out
    index = index.astype(network.dtype)
    columns = max(1, _FEISTEL_BLOCK // n_permutations)
    rows = max(1, _FEISTEL_BLOCK // columns)
    scratch = np.empty(_FEISTEL_BLOCK, dtype=network.dtype)
    for row in range(0, n_permutations, rows):
        block_keys = network.keys_by_round[:, row : row + rows, None]
        for column in range(0, width, columns):
            block = out[row : row + rows, column : column + columns]
            values = scratch[: block.size].reshape(block.shape)
            values[...] = index[column : column + columns]
            network(values, lambda r: block_keys[r])
            outside = np.flatnonzero(values >= limit)
            while outside.size:
                walked = values.reshape(-1)[outside]
                owners = row + outside // values.shape[1]
                network(walked, lambda r: network.keys_by_round[r, owners])
                values.reshape(-1)[outside] = walked
                outside = outside[walked >= limit]
            block[...] = values
    return out


def permutation_indices(seed: int, b: int | ArrayLike2D, n_total: int, index: ArrayLike2D) -> np.ndarray:
    """Evaluate the keyed pseudo-random bijection ``pi_b`` of ``[0, n_total)`` at global row indices.

    ``pi_b`` is an alternating Feistel network with :data:`FEISTEL_ROUNDS`
    rounds on the smallest power of two ``2**k >= n_total`` (k >= 2; halves of
    ``ceil(k/2)`` and ``floor(k/2)`` bits), round function murmur3's fmix32
    (splitmix64 when ``k > 32``) keyed by ``(seed, b, round)``, restricted to
    ``[0, n_total)`` by cycle-walking. It depends only on ``(seed, b, n_total)``, so every chunk
    evaluates it on its own rows with no coordination.

    Parameters
    ----------
    seed : int
        Key, in ``[0, 2**63)``.
    b : int or 1-D array-like of int
        Permutation number(s), >= 0.
    n_total : int
        Size N of the permuted range, >= 1.
    index : array-like of int
        Global row indices in ``[0, n_total)``, any shape.

    Returns
    -------
    ndarray of int64
        ``pi_b(index)``: the shape of ``index`` for a scalar ``b``, else
        ``(len(b),) + index.shape``.

    Raises
    ------
    InputError
        On a bad seed, negative ``b``, ``n_total < 1`` or an index outside
        ``[0, n_total)``.

    References
    ----------
    Luby, M. & Rackoff, C. (1988). How to construct pseudorandom permutations
    from pseudorandom functions. SIAM J. Comput. 17(2).
    Black, J. & Rogaway, P. (2002). Ciphers with arbitrary finite domains. CT-RSA.
    Bellare, M., Rogaway, P. & Spies, T. (2010). The FFX mode of operation for
    format-preserving encryption (the alternating Feistel network of FF1).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> pi = srf.permutation_indices(seed=0, b=3, n_total=10, index=np.arange(10))
    >>> sorted(pi.tolist()) == list(range(10))
    True
    """
    seed = normalize_seed(seed)
    n_total = check_positive_int(n_total, "n_total")
    scalar_b = np.ndim(b) == 0
    permutations = np.atleast_1d(np.asarray(b))
    if permutations.ndim != 1 or not np.issubdtype(permutations.dtype, np.integer) or (permutations < 0).any():
        raise InputError(f"b must be an integer >= 0 or a 1-D array of them. Got {b!r}.")
    index = np.asarray(index)
    if index.size and not np.issubdtype(index.dtype, np.integer):
        raise InputError(f"index must hold integers. Got dtype {index.dtype}.")
    if index.size and (index.min() < 0 or index.max() >= n_total):
        raise InputError(
            f"index must lie in [0, n_total) = [0, {n_total}). Got values from {index.min()} to {index.max()}."
        )
    flat = index.reshape(-1).astype(np.uint64)
    out = _permute(_round_keys(seed, permutations), n_total, flat).astype(np.int64)
    out = out.reshape((permutations.shape[0],) + index.shape)
    return out[0] if scalar_b else out
