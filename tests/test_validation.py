"""check_rows: the fast path for float matrices gives the general path's results and errors."""

from __future__ import annotations

import numpy as np
import pytest

from streamrff._base.validation import check_rows
from streamrff.errors import InputError


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_rows_float_matrix_rejects_non_finite_like_a_list(dtype, bad):
    values = [[0.0, 1.0], [bad, 2.0], [3.0, 4.0], [5.0, bad]]
    expected = (
        "rows must contain only finite values. Got NaN or inf in 2 row(s) (rows 1, 3). Drop or impute those rows, "
        "or pass on_invalid='skip' to streamrff.sketch to skip them."
    )
    for given in (np.array(values, dtype=dtype), values):  # the fast path, then the general one
        with pytest.raises(InputError) as error:
            check_rows(given, "rows")
        assert str(error.value) == expected


def test_check_rows_float_matrix_is_returned_as_is_and_empty_only_when_allowed():
    rows = np.array([[1e308, 1e308], [-1e308, 1.0]])  # finite, though their sum overflows
    assert check_rows(rows) is rows
    small = np.array([[3e38, 3e38]], dtype=np.float32)
    assert check_rows(small) is small
    assert check_rows(np.zeros((0, 3)), allow_empty=True).shape == (0, 3)
    with pytest.raises(InputError, match=r"at least 1 sample and 1 feature. Got shape \(0, 3\)"):
        check_rows(np.zeros((0, 3)))
    with pytest.raises(InputError, match="Expected a 2-D array for X"):
        check_rows(np.zeros(3))
