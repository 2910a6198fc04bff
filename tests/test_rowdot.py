"""The compiled row-block dot products (streamrff._kernels.rowdot) against float64 numpy.

Every result must be within Higham's bound for a float32 dot product in any order of summation,
``gamma_D sum_d |z_d c_d|``, the bound the exact-label rescoring of k-means assumes; and a result
must not depend on how many rows are in the call or which, since the Lloyd kernel's tiling must
not change its scores.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from streamrff._kernels.rowdot import BLOCK_CENTRES, BLOCK_ROWS, LANES, row_dots

UNIT = 2.0**-24


def float64_bound(rows: np.ndarray, centres: np.ndarray) -> np.ndarray:
    width = rows.shape[1]
    gamma = width * UNIT / (1.0 - width * UNIT)
    return gamma * (np.abs(rows.astype(np.float64)) @ np.abs(centres.astype(np.float64)).T)


@pytest.mark.parametrize("n_rows", [1, BLOCK_ROWS - 1, BLOCK_ROWS, BLOCK_ROWS + 1, 3 * BLOCK_ROWS + 2, 256])
@pytest.mark.parametrize("k", [1, 2, BLOCK_CENTRES - 1, BLOCK_CENTRES, BLOCK_CENTRES + 1, 10, 24])
@pytest.mark.parametrize("width", [1, LANES - 1, LANES, LANES + 1, 100, 1024])
def test_row_dots_within_the_float32_dot_product_bound_of_float64(n_rows, k, width):
    rng = np.random.default_rng(n_rows * 1000 + k * 10 + width)
    rows = rng.normal(size=(n_rows, width)).astype(np.float32)
    centres = rng.normal(size=(k, width)).astype(np.float32)
    out = np.full((n_rows, k), np.nan, dtype=np.float32)
    row_dots(rows, centres, out)
    exact = rows.astype(np.float64) @ centres.astype(np.float64).T
    error = np.abs(out.astype(np.float64) - exact)
    assert np.all(error <= float64_bound(rows, centres)), float(error.max())


def test_row_dots_of_a_row_do_not_depend_on_the_other_rows_of_the_call():
    rng = np.random.default_rng(1)
    rows = (rng.normal(size=(23, 1000)) * np.logspace(-3, 3, 1000)).astype(np.float32)  # rounding matters
    centres = rng.normal(size=(7, 1000)).astype(np.float32)
    whole = np.empty((23, 7), dtype=np.float32)
    row_dots(rows, centres, whole)
    for first, last in [(0, 1), (3, 4), (6, 17), (22, 23), (1, 23)]:
        part = np.empty((last - first, 7), dtype=np.float32)
        row_dots(rows[first:last], centres, part)
        np.testing.assert_array_equal(part, whole[first:last])
    one_centre = np.empty((23, 1), dtype=np.float32)
    row_dots(rows, centres[5:6], one_centre)
    np.testing.assert_array_equal(one_centre[:, 0], whole[:, 5])


def test_row_dots_writes_only_the_first_k_columns_of_a_wider_output():
    rng = np.random.default_rng(2)
    rows = rng.normal(size=(9, 40)).astype(np.float32)
    centres = rng.normal(size=(3, 40)).astype(np.float32)
    out = np.full((9, 5), -7.0, dtype=np.float32)
    row_dots(rows, centres, out)
    np.testing.assert_allclose(out[:, :3], rows.astype(np.float64) @ centres.astype(np.float64).T, rtol=1e-5, atol=1e-5)
    assert np.all(out[:, 3:] == -7.0)


def test_row_dots_refuses_arrays_that_are_not_c_contiguous_float32():
    from numba.core.errors import TypingError

    rows = np.ones((4, 32), dtype=np.float32)
    out = np.empty((4, 2), dtype=np.float32)
    with pytest.raises(TypingError):
        row_dots(rows, np.asfortranarray(np.ones((2, 32), dtype=np.float32)), out)
    with pytest.raises(TypingError):
        row_dots(rows.astype(np.float64), np.ones((2, 32), dtype=np.float32), out)


@pytest.mark.parametrize(
    ("environment", "expected"),
    [({"NUMBA_CPU_NAME": "generic"}, 0), ({"NUMBA_CPU_NAME": "generic", "NUMBA_CPU_FEATURES": "+avx512f,+avx2"}, 24)],
)
def test_row_dots_are_not_used_when_numba_compiles_for_a_cpu_without_avx512(environment, expected):
    # A portable numba target (caches built for "generic" x86-64) has no room for the 25 vector
    # accumulators: the Lloyd kernel must then score with BLAS whatever the host offers.
    code = "import streamrff._kernels.rowdot as r; print(r.MAX_COLUMNS)"
    env = {key: value for key, value in os.environ.items() if not key.startswith("NUMBA_CPU")} | environment
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(result.stdout) == expected
