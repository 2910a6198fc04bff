"""The mixed-row RFF map (Gaussian on numeric columns x exp(-lambda * mismatches) on categorical ones)
against the exact kernel and its closed-form variance, computed here in numpy."""

from __future__ import annotations

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError


def mixed_rows(n: int, seed: int = 0, levels: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack(
        [rng.normal(size=n), rng.integers(0, levels, n).astype(float), rng.normal(size=n), rng.integers(0, 3, n) * 1e9]
    )


CATEGORICAL = [1, 3]


def exact_mixed_kernel(A: np.ndarray, B: np.ndarray, bandwidth: float, mismatch: float) -> np.ndarray:
    numeric = [0, 2]
    squared = ((A[:, None, numeric] - B[None, :, numeric]) ** 2).sum(-1)
    differing = (A[:, None, CATEGORICAL] != B[None, :, CATEGORICAL]).sum(-1)
    return np.exp(-squared / (2 * bandwidth**2)) * np.exp(-mismatch * differing)


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_mixed_map_is_unbiased_with_the_closed_form_variance(variant):
    # Over many seeds, each pair's estimate z(x).z(y) has mean k(x, y) and, for sincos with m
    # frequencies, variance ((1 + k_g^4) / 2 - k^2) / m, k_g the Gaussian factor (E[F_j(a)^2] = 1);
    # for cosphase with D frequencies, ((1 + k_g^4) / 2 + 1 / 2 - k^2) / D.
    X = mixed_rows(6, seed=3, levels=2)
    X[1, CATEGORICAL] = X[0, CATEGORICAL]  # a pair that agrees on every category
    X[2, CATEGORICAL] = X[0, CATEGORICAL] + 1.0  # one that differs on both
    bandwidth, mismatch, n_features, seeds = 1.3, 0.7, 16, 3000
    estimates = np.empty((seeds, 6, 6))
    for seed in range(seeds):
        feature_map = srf.RFF(
            n_features=n_features, bandwidth=bandwidth, variant=variant, categorical=CATEGORICAL, mismatch=mismatch,
            seed=seed,
        ).fit(X)  # fmt: skip
        Z = feature_map.transform(X).astype(np.float64)
        estimates[seed] = Z @ Z.T
    kernel = exact_mixed_kernel(X, X, bandwidth, mismatch)
    gaussian = exact_mixed_kernel(X, X, bandwidth, 0.0)
    mean, spread = estimates.mean(axis=0), estimates.std(axis=0, ddof=1) / np.sqrt(seeds)
    off = ~np.eye(6, dtype=bool)
    assert np.all(np.abs(mean - kernel)[off] <= 4 * spread[off] + 1e-6)
    if variant == "sincos":
        m = n_features // 2
        closed = ((1 + gaussian**4) / 2 - kernel**2) / m
    else:  # z = sqrt(2/D) cos(w.x + b): 2 cos(u) cos(v) = cos(u - v) + cos(u + v + 2b), E over b of the second is 0
        closed = ((1 + gaussian**4) / 2 + 0.5 - kernel**2) / n_features
    variance = estimates.var(axis=0, ddof=1)
    np.testing.assert_allclose(variance[off], closed[off], rtol=0.1)


def test_mixed_map_sums_spec_file_and_unseen_categories(tmp_path):
    X = mixed_rows(300)
    feature_map = srf.RFF(n_features=64, categorical=CATEGORICAL, seed=2).fit(X)
    # defaults: the median heuristic on the numeric columns only; lambda = 1 / median differing columns,
    # which is 2 when every row has categories of its own
    assert feature_map.bandwidth_ == srf.RFF(n_features=64, seed=2).fit(X[:, [0, 2]]).bandwidth_
    distinct = X.copy()
    distinct[:, CATEGORICAL] = np.arange(300)[:, None] * [1.0, 1e9]
    assert srf.RFF(n_features=64, categorical=CATEGORICAL, seed=2).fit(distinct).mismatch_ == 0.5
    assert feature_map.spec["categorical"] == CATEGORICAL and feature_map.spec["mismatch"] == feature_map.mismatch_
    Z = feature_map.transform(X).astype(np.float64)
    sketch = srf.sketch_array(X, feature_map)
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=1e-6, atol=1e-6)
    path = str(tmp_path / "map.json")
    srf.save_map(feature_map, path)
    loaded = srf.load_map(path)
    np.testing.assert_array_equal(loaded.transform(X), feature_map.transform(X))
    unseen = X[:3].copy()
    unseen[:, 1] = [17.0, 18.0, 17.0]  # categories not in the fit sample
    features = feature_map.transform(unseen).astype(np.float64)
    np.testing.assert_allclose((features * features).sum(1), 1.0, rtol=1e-6)  # sincos rows keep unit norm
    # a Gaussian map is unchanged by the new parameters: same spec, same features
    plain = srf.RFF(n_features=64, seed=2).fit(X)
    assert "categorical" not in plain.spec and "mismatch" not in plain.spec


def test_mixed_map_in_the_analyses_finds_a_change_in_category_frequencies():
    rng = np.random.default_rng(5)
    A = mixed_rows(600, seed=6)
    B = mixed_rows(600, seed=7)
    B[:, 1] = rng.choice(5, 600, p=[0.4, 0.3, 0.1, 0.1, 0.1])  # only the category frequencies move
    feature_map = srf.RFF(n_features=256, categorical=CATEGORICAL, seed=0).fit(np.vstack([A, B]))
    result = srf.two_sample_test(A, B, feature_map=feature_map, n_permutations=99)
    assert result.p_value <= 0.02
    same = srf.two_sample_test(A, mixed_rows(600, seed=8), feature_map=feature_map, n_permutations=99)
    assert same.p_value > 0.02
    monitor = srf.DriftMonitor(window=50, ert=200, feature_map=feature_map, n_streams=50).fit(A)
    update = monitor.update(B[:100])
    assert np.isfinite(update.statistic[-1])
    # k-means with a large lambda: two groups that differ only by a category are the two clusters
    groups = rng.integers(0, 2, 400)
    rows = np.column_stack([rng.normal(size=400), groups * 7.0])
    categories = srf.RFF(n_features=256, categorical=[1], mismatch=3.0, seed=0).fit(rows)
    labels = srf.KernelKMeans(n_clusters=2, feature_map=categories, seed=0).fit(rows).labels_
    assert len(set(zip(labels.tolist(), groups.tolist()))) == 2  # one label per group


def test_mixed_map_arguments_fail_in_one_line():
    X = mixed_rows(20)
    with pytest.raises(InputError, match="categorical must be column indices"):
        srf.RFF(categorical=["colour"]).fit(X)
    with pytest.raises(InputError, match="the data has 4 columns"):
        srf.RFF(categorical=[7]).fit(X)
    with pytest.raises(InputError, match="mismatch must be"):
        srf.RFF(categorical=[1], mismatch=-1.0).fit(X)
    with pytest.raises(InputError, match="structured=False"):
        srf.RFF(categorical=[1], structured=True).fit(X)


def zipf_table(rng: np.random.Generator, levels: tuple[int, ...], rows: int) -> np.ndarray:
    """2 standard normal columns, then one categorical column per entry of ``levels`` (p_k ~ 1 / (k + 1))."""
    columns = [rng.normal(size=(rows, 2))]
    for level in levels:
        weights = 1.0 / np.arange(1, level + 1)
        columns.append(rng.choice(level, size=rows, p=weights / weights.sum()).astype(np.float64))
    return np.column_stack(columns)


@pytest.mark.slow
@pytest.mark.parametrize("levels", [(1, 1), (10, 10), (1000, 1000), (100_000, 100_000), (1, 100, 100_000)])
def test_mixed_map_tests_hold_their_level_from_1_to_1e5_levels(levels):
    """Type-I error of the permutation and spectral nulls at 0.05 over 200 null repetitions: 0.03-0.07 (issue 47;
    the same tables as benchmarks/check_tables_calibration.py, which prints the rates)."""
    repetitions, rows = 200, 500
    rejected = {"permutation": 0, "spectral": 0}
    categorical = list(range(2, 2 + len(levels)))
    for repetition in range(repetitions):
        rng = np.random.default_rng([0, repetition])
        X, Y = zipf_table(rng, levels, rows), zipf_table(rng, levels, rows)
        feature_map = srf.RFF(n_features=256, categorical=categorical, seed=repetition).fit(np.vstack([X, Y]))
        permutation = srf.two_sample_test(X, Y, n_permutations=199, seed=repetition, feature_map=feature_map)
        rejected["permutation"] += permutation.p_value <= 0.05
        moments = [srf.sketch_array(rows_, feature_map, moments=True) for rows_ in (X, Y)]
        rejected["spectral"] += srf.mmd_test(*moments, method="spectral", seed=repetition, n_draws=2000).p_value <= 0.05
    rates = {method: count / repetitions for method, count in rejected.items()}
    assert all(0.03 <= rate <= 0.07 for rate in rates.values()), rates


def numpy_signs(codes: np.ndarray, mask: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The documented hash written with NumPy: splitmix64's finaliser of (code bits ^ key) + golden, top bit."""
    bits = (np.asarray(codes, dtype=np.float64) + 0.0).view(np.uint64)
    flips = np.zeros((codes.shape[0], keys.shape[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in range(codes.shape[1]):
            z = (bits[:, column, None] ^ keys[None, :, column]) + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z ^= z >> np.uint64(31)
            flips ^= (z >> np.uint64(63)) * mask[None, :, column].astype(np.uint64)
    return (1.0 - 2.0 * flips).astype(np.float32)


def test_category_signs_compiled_equal_the_documented_hash():
    from streamrff.maps.categorical import category_signs, draw_category_params

    rng = np.random.default_rng(3)
    codes = np.column_stack([rng.integers(0, 2**52, 300).astype(float), rng.normal(size=300), np.full(300, -0.0)])
    params = draw_category_params(rng, 64, 3, mismatch=0.7)
    got = category_signs(codes, params["category_mask"], params["category_keys"])
    np.testing.assert_array_equal(got, numpy_signs(codes, params["category_mask"], params["category_keys"]))
    mask, keys = params["category_mask"], params["category_keys"]
    assert np.array_equal(category_signs(np.zeros((2, 3)), mask, keys), category_signs(-np.zeros((2, 3)), mask, keys))


def test_category_signs_cached_across_chunks_equal_the_documented_hash(monkeypatch):
    # Each code's signs are kept per map across calls, in tables of bounded size: a chunk of new codes
    # grows the table, one with more codes than the bound takes a table of its own, and a full table
    # starts afresh; the signs are the per-row hash's every time.
    from streamrff.maps import categorical

    # 2 columns, 2 words: 80 bytes a code, so a table holds at most 2 048 codes (it starts at 1 024)
    monkeypatch.setattr(categorical, "_CACHE_BYTES", 2048 * 80)
    monkeypatch.setattr(categorical, "_TABLES", {})
    rng = np.random.default_rng(8)
    params = categorical.draw_category_params(rng, 70, 2, mismatch=0.9)
    mask, keys = params["category_mask"], params["category_keys"]
    for codes in (
        rng.integers(0, 700, (4000, 2)).astype(float),  # ~1 400 codes: the table grows to 2 048
        rng.integers(0, 700, (4000, 2)).astype(float),  # all cached
        rng.integers(0, 3000, (8000, 2)).astype(float),  # ~6 000: more than the bound, a table of its own
        rng.integers(5000, 5400, (2000, 2)).astype(float),  # the full table starts afresh
    ):
        np.testing.assert_array_equal(categorical.category_signs(codes, mask, keys), numpy_signs(codes, mask, keys))


@pytest.mark.parametrize("variant, n_features", [("sincos", 130), ("cosphase", 70)])
def test_mixed_features_equal_numpy_with_the_per_row_hash(variant, n_features):
    # Codes hashed once per distinct value must give every row the per-row hash: many repeated
    # codes, codes never seen at fit, the missing label's code; 65 or 70 frequencies span two words.
    from streamrff.sources.frames import MISSING_CODE

    rng = np.random.default_rng(12)
    rows = 600
    numbers = rng.normal(size=(rows, 2))
    pool = rng.integers(0, 2**52, 6).astype(float)
    codes = np.column_stack([rng.choice(pool[:3], rows), rng.choice(np.append(pool, MISSING_CODE), rows)])
    X = np.column_stack([numbers[:, 0], codes[:, 0], numbers[:, 1], codes[:, 1]])
    fit_rows = X[codes[:, 1] != pool[5]]  # pool[5] is unseen at fit
    feature_map = srf.RFF(n_features=n_features, variant=variant, seed=4, categorical=[1, 3], mismatch=0.8)
    feature_map.fit(fit_rows)
    params = feature_map._params()
    signs = numpy_signs(codes, params["category_mask"], params["category_keys"]).astype(np.float64)
    phases = numbers @ params["frequencies"].T
    if variant == "sincos":
        m = phases.shape[1]
        expected = np.hstack([np.cos(phases) * signs, np.sin(phases) * signs]) / np.sqrt(m)
    else:
        expected = np.cos(phases + params["phases"]) * signs * np.sqrt(2.0 / n_features)
    # float32 phases (|phase| < 6 here): a phase error of a few ulps, ~1e-6 rad, moves a feature of size
    # m^-1/2 by ~2e-7; float32 sines and cosines add ~1.5 ulp
    assert feature_map.phase_precision_ == "float32"
    np.testing.assert_allclose(feature_map.transform(X), expected, rtol=1e-5, atol=5e-7)
    sketch = srf.sketch_array(X, feature_map)
    np.testing.assert_allclose(sketch.feature_sum, expected.sum(axis=0), rtol=1e-5, atol=1e-4)
    # column-major rows (as tables are read) are read in place, to the same sums
    np.testing.assert_array_equal(srf.sketch_array(np.asfortranarray(X), feature_map).feature_sum, sketch.feature_sum)
    chunked = srf.sketch(X, feature_map, chunk_rows=97)  # the compiled pass's tiles fall elsewhere
    np.testing.assert_allclose(chunked.feature_sum, sketch.feature_sum, rtol=1e-6, atol=1e-5)


def numpy_mixed_features(X: np.ndarray, spec: dict) -> np.ndarray:
    """Float64 features of a mixed map with ``CATEGORICAL`` columns, from its drawn parameters."""
    params = srf.map_from_spec(spec)._params()
    signs = numpy_signs(X[:, CATEGORICAL], params["category_mask"], params["category_keys"]).astype(np.float64)
    phases = X[:, [0, 2]] @ params["frequencies"].T
    if spec["variant"] == "cosphase":
        return np.cos(phases + params["phases"]) * signs * np.sqrt(2.0 / spec["n_features"])
    return np.hstack([np.cos(phases) * signs, np.sin(phases) * signs]) / np.sqrt(phases.shape[1])


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_mixed_map_specs_from_before_float32_phases_embed_as_before(variant):
    # Every mixed map saved before mixed maps had float32 phases records "phase_precision": "float64"
    # (then their only path): such a spec keeps float64 phases. Rows ~40 bandwidths from the origin have
    # phases of ~100 rad, where float32 phases would be off by ~1e-5 rad (features by ~1e-6).
    old = {
        "kind": "rff", "n_features_in": 4, "n_features": 130, "bandwidth": 1.0, "variant": variant,
        "orthogonal": False, "phase_precision": "float64", "categorical": CATEGORICAL, "mismatch": 0.8, "seed": 4,
    }  # fmt: skip
    X = mixed_rows(300, seed=9)
    X[:, [0, 2]] += 40.0
    loaded = srf.map_from_spec(old)
    assert loaded.phase_precision_ == "float64" and loaded.spec == old
    expected = numpy_mixed_features(X, old)
    np.testing.assert_allclose(loaded.transform(X), expected, rtol=0, atol=1e-7)  # float32 sin/cos rounding only
    np.testing.assert_allclose(srf.sketch_array(X, loaded).feature_sum, expected.sum(0), rtol=1e-6, atol=1e-5)
    # without the key (a map fitted now with float32 phases): float32 phases, documented error
    new = srf.map_from_spec({k: v for k, v in old.items() if k != "phase_precision"})
    assert new.phase_precision_ == "float32" and new.fingerprint != loaded.fingerprint
    assert np.abs(new.transform(X) - expected).max() > 1e-7
    np.testing.assert_allclose(new.transform(X), expected, rtol=0, atol=1e-5)
    # "auto" on the numeric columns: float64 for these far rows, float32 for standardised ones
    far = srf.RFF(n_features=130, bandwidth=1.0, variant=variant, categorical=CATEGORICAL, seed=4).fit(X)
    near = srf.RFF(n_features=130, bandwidth=1.0, variant=variant, categorical=CATEGORICAL, seed=4)
    near.fit(mixed_rows(300, seed=9))
    assert far.phase_precision_ == "float64" and far.spec["phase_precision"] == "float64"
    assert near.phase_precision_ == "float32" and "phase_precision" not in near.spec
