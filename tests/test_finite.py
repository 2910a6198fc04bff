"""The compiled finiteness check against numpy's ``np.isfinite(...).all()``."""

import numpy as np
import pytest

from streamrff._kernels.finite import all_finite

SPECIAL = [np.nan, np.inf, -np.inf, -np.nan]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (64, 1), (100, 7), (1000, 33)])
def test_all_finite_equals_numpy_wherever_a_nan_or_inf_is(dtype, shape):
    rows = np.random.default_rng(shape[0]).normal(size=shape).astype(dtype)
    assert all_finite(rows) is True
    # The largest finite value, subnormals and zeros of both signs are finite.
    info = np.finfo(dtype)
    extremes = rows.copy()
    extremes.flat[:: max(1, rows.size // 4)] = info.max
    extremes.flat[-1] = -info.max
    extremes.flat[0] = info.smallest_subnormal
    if rows.size > 2:
        extremes.flat[1] = -0.0
    assert all_finite(extremes) is bool(np.isfinite(extremes).all()) is True
    for position in {0, rows.size // 2, rows.size - 1, (rows.size // 64) * 64 - 1}:
        for value in SPECIAL:
            bad = rows.copy()
            bad.flat[position % rows.size] = value
            assert all_finite(bad) is bool(np.isfinite(bad).all()) is False, (position, value)


def test_all_finite_other_layouts_and_dtypes_take_numpy():
    rows = np.random.default_rng(0).normal(size=(50, 8))
    rows[7, 3] = np.nan
    for array in (rows[:, ::2], rows.T, rows.astype(">f8"), rows.astype(np.float16)):
        assert all_finite(array) is bool(np.isfinite(array).all())
    assert all_finite(rows[:, ::2]) is True and all_finite(rows.T) is False
    assert all_finite(np.empty((0, 4), np.float32)) is True
