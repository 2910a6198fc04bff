"""The compiled Walsh-Hadamard transforms against scipy's Hadamard matrices in float64."""

import numpy as np
import pytest
import scipy.linalg

from streamrff._kernels import hadamard as _hadamard

UNIT_ROUNDOFF = 2.0**-24


def padded_rows(rows, n):
    padded = np.zeros((rows.shape[0], n))
    padded[:, : rows.shape[1]] = rows
    return padded


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_walsh_hadamard_exact_on_integers(n):
    # Every input width d that pads to n; integers small enough that every partial sum is exact.
    for d in range(n // 2 + 1, n + 1):
        rows = np.random.default_rng(d).integers(-50, 50, size=(70, d)).astype(np.float32)
        out = np.empty((70, n), np.float32)
        _hadamard.walsh_hadamard(rows, out)
        np.testing.assert_array_equal(out, padded_rows(rows, n) @ scipy.linalg.hadamard(n))


def widths_up_to_4096():
    """Every d up to 300, and d = 2^k - 1, 2^k, 2^k + 1 and a middle width up to 2^12."""
    widths = set(range(1, 301))
    for k in range(9, 13):
        widths |= {2**k - 1, 2**k, 2**k + 1, 3 * 2 ** (k - 2)}
    return sorted(d for d in widths if d <= 4096)


def test_walsh_hadamard_within_float32_rounding_bound():
    widths = widths_up_to_4096()
    by_padded = {}
    for d in widths:
        by_padded.setdefault(_hadamard.padded_width(d), []).append(d)
    assert sorted(by_padded) == [2**k for k in range(13)]
    for n, ds in by_padded.items():
        hadamard = scipy.linalg.hadamard(n).astype(np.float64)
        for d in ds[:: max(1, len(ds) // 8)] if n > 512 else ds:
            rows = np.random.default_rng(d).standard_normal((3, d)).astype(np.float32)
            out = np.empty((3, n), np.float32)
            _hadamard.walsh_hadamard(rows, out)
            exact = padded_rows(rows.astype(np.float64), n) @ hadamard
            # log2(n) roundings per output: Higham (2002) eq. 3.5 for a summation tree of that depth.
            depth = max(1, n.bit_length() - 1)
            bound = depth * UNIT_ROUNDOFF / (1 - depth * UNIT_ROUNDOFF) * np.abs(rows).sum(axis=1, keepdims=True)
            assert np.all(np.abs(out - exact) <= bound), (d, n)


def test_padded_width():
    assert [_hadamard.padded_width(d) for d in (1, 2, 3, 4, 5, 768, 1024, 1025, 4096)] == [
        1,
        2,
        4,
        4,
        8,
        1024,
        1024,
        2048,
        4096,
    ]


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 128, 256, 512, 2048])
def test_walsh_hadamard_columns_result_of_a_column_independent_of_the_tile(n):
    # 64 columns take the 16-lane vector path on AVX-512, one column the loops: the same bits.
    block = np.random.default_rng(0).standard_normal((n, 64)).astype(np.float32)
    whole = block.copy()
    _hadamard.walsh_hadamard_columns(whole)
    for column in (0, 17, 63):
        alone = np.ascontiguousarray(block[:, column : column + 1])
        _hadamard.walsh_hadamard_columns(alone)
        np.testing.assert_array_equal(alone[:, 0], whole[:, column])


def signs_of(rng, *shape):
    return (2 * rng.integers(0, 2, size=shape) - 1).astype(np.float32)


@pytest.mark.parametrize("n", [1, 2, 8, 128])
def test_sorf_block_is_the_product_of_three_transforms_and_signs(n):
    rng = np.random.default_rng(n)
    signs = signs_of(rng, 3, n)
    block = rng.standard_normal((n, 5)).astype(np.float32)
    hadamard = scipy.linalg.hadamard(n).astype(np.float64)
    d3, d2, d1 = (np.diag(s.astype(np.float64)) for s in signs)
    expected = hadamard @ d1 @ hadamard @ d2 @ hadamard @ d3 @ block.astype(np.float64)
    _hadamard.sorf_block(block, signs)
    # Three transforms, each within gamma_k of its inputs' absolute sum, which grows by sqrt(n) per transform
    # in the orthonormal scale: a loose but safe float32 bound.
    tolerance = 8 * UNIT_ROUNDOFF * max(1, np.log2(n)) * n**1.5 * np.abs(expected).max() / np.sqrt(n)
    np.testing.assert_allclose(block, expected, rtol=0, atol=max(tolerance, 1e-6))


@pytest.mark.skipif(not _hadamard.WIDE_VECTORS, reason="sorf_columns is compiled for AVX-512 only")
@pytest.mark.parametrize(
    ("n", "d"),
    [(16, 5), (16, 16), (32, 20), (64, 33), (128, 128), (256, 200), (1024, 768), (2048, 1025), (4096, 4096)],
)
def test_sorf_columns_is_sorf_block_of_the_padded_rows_bit_for_bit(n, d):
    # The fused transform (copy, padding and signs in the transforms' passes; d below, at and above a
    # multiple of 16, where the first pass loads the rows from `columns`) against the three plain
    # transforms on the zero-padded block (one extra column: the loops, not the vectors), and both
    # against the float64 matrix product.
    rng = np.random.default_rng(n + d)
    signs = signs_of(rng, 3, n)
    columns = rng.standard_normal((d, 32)).astype(np.float32)
    padded = np.zeros((n, 33), np.float32)
    padded[:d, :32] = columns
    _hadamard.sorf_block(padded, signs)
    block = np.full((n, 32), np.nan, np.float32)  # every entry is written: no NaN survives
    _hadamard.sorf_columns(columns, signs, block)
    np.testing.assert_array_equal(block, padded[:, :32])
    hadamard = scipy.linalg.hadamard(n).astype(np.float64)
    d3, d2, d1 = (s.astype(np.float64)[:, None] for s in signs)
    expected = hadamard @ (d1 * (hadamard @ (d2 * (hadamard @ (d3 * padded_rows(columns.T, n).T)))))
    np.testing.assert_allclose(block, expected, rtol=0, atol=1e-4 * n**1.5)


def test_sorf_block_rows_orthogonal():
    n = 64
    signs = signs_of(np.random.default_rng(1), 3, n)
    block = np.eye(n, dtype=np.float32)  # columns e_j: the block becomes the matrix itself
    _hadamard.sorf_block(block, signs)
    np.testing.assert_allclose(block.astype(np.float64) @ block.T, n**3 * np.eye(n), rtol=0, atol=1e-3)


def test_fastfood_block_is_its_matrix_product():
    n = 32
    rng = np.random.default_rng(2)
    signs = signs_of(rng, n)
    permutation = rng.permutation(n).astype(np.int64)
    gaussian = rng.standard_normal(n).astype(np.float32)
    block = rng.standard_normal((n, 7)).astype(np.float32)
    hadamard = scipy.linalg.hadamard(n).astype(np.float64)
    permute = np.eye(n)[permutation]  # (Pi v)[j] = v[permutation[j]]
    expected = hadamard @ np.diag(gaussian.astype(np.float64)) @ permute @ hadamard @ np.diag(signs) @ block
    _hadamard.fastfood_block(block, signs, permutation, gaussian, np.empty_like(block))
    np.testing.assert_allclose(block, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
