"""The compiled float32 sin/cos kernels against numpy's float64 sin/cos of the same float32 phases."""

import os
import subprocess
import sys

import numpy as np
import pytest

import streamrff as srf
from streamrff._kernels import sincos as _sincos

FLOAT32_ULP_AT_ONE = float(np.spacing(np.float32(1.0)))  # 1.19e-7


def relative_error(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def phases_up_to(largest, rows=256, columns=320, seed=0):
    """Float32 phases spread over [-largest, largest], with both ends present."""
    phases = np.random.default_rng(seed).uniform(-largest, largest, size=(rows, columns)).astype(np.float32)
    phases[0, :2] = [largest, -largest]
    return phases


@pytest.mark.parametrize("largest", [1e-3, 0.8, 3.0, 50.0, 1000.0, _sincos.MAX_FAST_PHASE])
def test_sincos_features_within_one_ulp_of_float64(largest):
    phases = phases_up_to(largest)
    out = np.empty((phases.shape[0], 2 * phases.shape[1]), np.float32)
    _sincos.sincos_features(phases, 1.0, out)
    wide = phases.astype(np.float64)
    error = out - np.hstack([np.cos(wide), np.sin(wide)])
    assert np.abs(error).max() < FLOAT32_ULP_AT_ONE
    # Unbiased: a systematic error would not average out in kernel-mean sums.
    assert abs(error.mean()) < 1e-9


def test_sincos_features_scale():
    phases = phases_up_to(10.0)
    out = np.empty((phases.shape[0], 2 * phases.shape[1]), np.float32)
    _sincos.sincos_features(phases, 0.125, out)
    wide = phases.astype(np.float64)
    np.testing.assert_allclose(
        out, 0.125 * np.hstack([np.cos(wide), np.sin(wide)]), rtol=0, atol=0.125 * FLOAT32_ULP_AT_ONE
    )


def test_cos_features_with_offsets():
    phases = phases_up_to(20.0, columns=100)
    offsets = np.random.default_rng(1).uniform(0, 2 * np.pi, 100).astype(np.float32)
    out = np.empty_like(phases)
    _sincos.cos_features(phases, offsets, 2.0, out)
    expected = 2.0 * np.cos((phases + offsets).astype(np.float64))  # the float32 sum, as numpy's path
    assert np.abs(out - expected).max() < 2.0 * FLOAT32_ULP_AT_ONE


def exact_projection(n_rows, d=3, m=40, largest=10.0, seed=0):
    """Float32 rows and frequencies whose product float32 computes exactly (small integers times
    multiples of 1/64), so that the kernels' phases equal the float64 reference's."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(-20, 21, size=(n_rows, d)).astype(np.float32)
    frequencies = (rng.integers(-64, 65, size=(d, m)) / 64).astype(np.float32)
    frequencies *= np.float32(2.0 ** np.floor(np.log2(largest / (20 * d))))  # |phase| <= largest
    return rows, frequencies, rows.astype(np.float64) @ frequencies.astype(np.float64)


@pytest.mark.parametrize("n_rows", [1, 64, 300, 1000])
@pytest.mark.parametrize("largest", [3.0, 500.0, 4.0e6])  # the last beyond MAX_FAST_PHASE
def test_sincos_feature_sums_equal_float64_sums(n_rows, largest):
    rows, frequencies, phase = exact_projection(n_rows, largest=largest)
    out = np.ones((2, frequencies.shape[1]))
    _sincos.sincos_feature_sums(rows, frequencies, 256, out)  # tiles of 256 rows and a remainder
    expected = np.stack([np.cos(phase).sum(axis=0), np.sin(phase).sum(axis=0)])
    assert relative_error(out - 1.0, expected) < 5e-7


@pytest.mark.parametrize("n_rows", [1, 300])
@pytest.mark.parametrize("largest", [3.0, 4.0e6])
def test_cos_feature_sums_and_squares_equal_float64(n_rows, largest):
    rows, frequencies, phase = exact_projection(n_rows, largest=largest)
    offsets = np.linspace(0, 6, frequencies.shape[1], dtype=np.float32)
    out = np.zeros(frequencies.shape[1])
    squares = _sincos.cos_feature_sums(rows, frequencies, offsets, 256, out)
    cosines = np.cos((phase + offsets).astype(np.float32).astype(np.float64))  # the float32 sum, as numpy's path
    assert relative_error(out, cosines.sum(axis=0)) < 5e-7
    assert squares == pytest.approx((cosines**2).sum(), rel=1e-6)


def test_largest_phase():
    phases = phases_up_to(2.0)
    phases[7, 3] = -3 * _sincos.MAX_FAST_PHASE
    offsets = np.zeros(phases.shape[1], np.float32)
    assert _sincos.largest_phase(phases, offsets) == 3 * _sincos.MAX_FAST_PHASE
    offsets[3] = 1.0
    assert _sincos.largest_phase(phases, offsets) == 3 * _sincos.MAX_FAST_PHASE - 1


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_feature_tiles_with_large_phases_take_float64_cos_and_sin(variant):
    # A tiny bandwidth puts the second tile's phases beyond the kernels' exact range: that tile
    # must be float32 of float64 cos/sin of the same float32 phases, bit for bit (as the sums
    # kernels' exact path); the first tile, in range, is within float32 rounding of numpy's.
    X = np.random.default_rng(3).normal(size=(512, 3))
    X[:256] *= 1e-4
    feature_map = srf.RFF(n_features=64, bandwidth=1e-4, variant=variant, seed=4, phase_precision="float32").fit(X)
    frequencies = np.ascontiguousarray(feature_map._params()["frequencies"].T, dtype=np.float32)
    tiles = [X[:256].astype(np.float32) @ frequencies, X[256:].astype(np.float32) @ frequencies]
    assert np.abs(tiles[0]).max() < _sincos.MAX_FAST_PHASE < np.abs(tiles[1]).max()
    if variant == "sincos":
        scale = np.float32(1 / np.sqrt(32))
        phases = [p.astype(np.float64) for p in tiles]
        expected = [np.hstack([np.cos(p), np.sin(p)]).astype(np.float32) * scale for p in phases]
    else:
        offsets = feature_map._params()["phases"].astype(np.float32)
        expected = [
            np.cos((p + offsets).astype(np.float64)).astype(np.float32) * np.float32(np.sqrt(2.0 / 64)) for p in tiles
        ]
    features = [tile.copy() for _, tile in feature_map.embed_tiles(X, tile_rows=256)]
    assert np.abs(features[0] - expected[0]).max() < 1e-7
    np.testing.assert_array_equal(features[1], expected[1])


def duplicated_columns(largest, rows=70, wide_columns=2 * _sincos.LANES, seed=3):
    """Phases whose last 7 columns (left to the scalar loop) repeat the first 7 (in a 16-lane vector)."""
    phases = phases_up_to(largest, rows=rows, columns=wide_columns, seed=seed)
    return np.ascontiguousarray(np.hstack([phases, phases[:, :7]]))


@pytest.mark.parametrize("largest", [3.0, 1000.0])
def test_vector_lanes_equal_the_scalar_loop_bit_for_bit(largest):
    # Whether the kernels run 16-lane vectors (AVX-512) or the auto-vectorised loops, every
    # value is the same float32 operations in the same order: the same bits.
    phases = duplicated_columns(largest)
    m = phases.shape[1]
    tail = slice(m - 7, m)
    features = np.empty((phases.shape[0], 2 * m), np.float32)
    _sincos.sincos_features(phases, 0.3, features)
    np.testing.assert_array_equal(features[:, :7], features[:, tail])
    np.testing.assert_array_equal(features[:, m : m + 7], features[:, m + tail.start :])
    offsets = np.random.default_rng(4).uniform(0, 2 * np.pi, m - 7).astype(np.float32)
    offsets = np.concatenate([offsets, offsets[:7]])
    cosines = np.empty_like(phases)
    _sincos.cos_features(phases, offsets, 0.3, cosines)
    np.testing.assert_array_equal(cosines[:, :7], cosines[:, tail])
    for column_offsets in (np.zeros(0, np.float32), offsets):
        scratch, sums = np.empty((3, m), np.float32), np.empty((2, m))
        assert _sincos._fast_sums(phases, column_offsets, scratch, sums)
        np.testing.assert_array_equal(sums[:, :7], sums[:, tail])


def test_features_do_not_depend_on_the_vector_width_numba_compiles_for():
    # A portable target ("generic": no 16-lane vectors) gives the same features bit for bit.
    phases = duplicated_columns(50.0, rows=8)
    out = np.empty((8, 2 * phases.shape[1]), np.float32)
    _sincos.sincos_features(phases, 0.5, out)
    code = (
        "import sys, numpy as np; from streamrff._kernels import sincos as _sincos\n"
        "phases = np.frombuffer(bytes.fromhex(sys.argv[1]), np.float32).reshape(8, -1).copy()\n"
        "out = np.empty((8, 2 * phases.shape[1]), np.float32)\n"
        "_sincos.sincos_features(phases, 0.5, out)\n"
        "print(_sincos.WIDE_VECTORS, out.tobytes().hex())"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("NUMBA_CPU")}
    env["NUMBA_CPU_NAME"] = "generic"
    result = subprocess.run(
        [sys.executable, "-c", code, phases.tobytes().hex()], env=env, capture_output=True, text=True, check=True
    )
    wide, features = result.stdout.split()
    assert wide == "False"
    np.testing.assert_array_equal(np.frombuffer(bytes.fromhex(features), np.float32).reshape(out.shape), out)
