"""``RFF(structured=True)``: the SORF map against a numpy recipe (scipy's Hadamard matrix), the exact
Gaussian kernel, and the sketch contracts (bit for bit, chunking, merge order, engine, files, CLI).

The reference recipe is written here from the documented draw order, not taken from the code:
``rng = default_rng(seed)``; signs ``2 rng.integers(0, 2, (blocks, 3, n)) - 1`` ([D3, D2, D1] of each
block); chi norms ``sqrt(rng.chisquare(n, blocks n))``; row scales ``float32(chi / (n^1.5 sigma))``
for the first m rows; cos+phase phases ``rng.uniform(0, 2 pi, D)`` after them; block b of W is
``diag(row_scales_b) H D1 H D2 H D3`` on the first d columns.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import scipy.linalg

import streamrff as srf
from streamrff.cli import main
from streamrff.errors import BiasWarning, InputError
from streamrff.maps.structured import MIN_UNBIASED_PADDED_WIDTH

DATA = Path(__file__).parent / "data"
RNG = np.random.default_rng(30)
X = RNG.normal(size=(700, 48)).astype(np.float32)  # 48 columns pad to 64
SIGMA = 7.0


def reference_params(seed: int, d: int, n_features: int, sigma: float, variant: str = "sincos"):
    """(W (m x d) float64, phases or None) of RFF(structured=True) by the recipe in the module docstring."""
    m = n_features // 2 if variant == "sincos" else n_features
    n = 1 << (d - 1).bit_length()
    blocks = -(-m // n)
    rng = np.random.default_rng(seed)
    signs = 2.0 * rng.integers(0, 2, size=(blocks, 3, n)) - 1.0
    chi = np.sqrt(rng.chisquare(n, size=blocks * n))
    row_scales = (chi / (n**1.5 * sigma))[:m].astype(np.float32).astype(np.float64)
    hadamard = scipy.linalg.hadamard(n).astype(np.float64)
    stacked = np.concatenate(
        [hadamard @ np.diag(s[2]) @ hadamard @ np.diag(s[1]) @ hadamard @ np.diag(s[0]) for s in signs]
    )
    W = stacked[:m, :d] * row_scales[:, None]
    phases = rng.uniform(0.0, 2.0 * np.pi, size=n_features) if variant == "cosphase" else None
    return W, phases


def reference_features(X: np.ndarray, W: np.ndarray, phases) -> np.ndarray:
    projection = X.astype(np.float64) @ W.T
    if phases is None:
        return np.hstack([np.cos(projection), np.sin(projection)]) / np.sqrt(W.shape[0])
    return np.sqrt(2.0 / W.shape[0]) * np.cos(projection + phases)


# -- the map against numpy and the exact kernel --------------------------------------------------------


@pytest.mark.parametrize("variant, n_features", [("sincos", 200), ("cosphase", 150)])
def test_structured_rff_features_equal_the_numpy_recipe(variant, n_features):
    rff = srf.RFF(n_features=n_features, bandwidth=SIGMA, variant=variant, structured=True, seed=3).fit(X)
    W, phases = reference_params(3, X.shape[1], n_features, SIGMA, variant)
    np.testing.assert_array_equal(rff._frequencies(), W)  # formed exactly (integers times float32 scales)
    expected = reference_features(X, W, phases)
    np.testing.assert_allclose(rff.transform(X), expected, rtol=0, atol=2e-6)
    # The float64 path evaluates the same W in float64.
    np.testing.assert_allclose(rff._embed(X.astype(np.float64), np.float64), expected, rtol=0, atol=1e-12)


def test_structured_rff_rows_orthogonal_within_a_block():
    d, m = 128, 300  # no padding: blocks of 128, 128 and 44 rows, each orthogonal in R^128
    rows = np.random.default_rng(1).normal(size=(5, d))
    rff = srf.RFF(n_features=2 * m, bandwidth=2.0, structured=True, seed=4).fit(rows)
    W = rff._frequencies()
    np.testing.assert_array_equal(W, reference_params(4, d, 2 * m, 2.0)[0])
    for block in (W[:128], W[128:256], W[256:]):
        gram = block @ block.T
        np.testing.assert_allclose(gram, np.diag(np.diag(gram)), rtol=0, atol=1e-12 * np.diag(gram).max())
    # Independent blocks: rows of different blocks are not orthogonal.
    assert np.abs(W[:128] @ W[128:256].T).max() > 0.1 * np.diag(W[:128] @ W[:128].T).mean()
    # chi(n) norms over sigma: E ||w||^2 sigma^2 = n, variance 2 n per row.
    squared = np.einsum("ij,ij->i", W, W) * 2.0**2
    assert abs(squared.mean() - d) < 4 * np.sqrt(2 * d / m)
    # The compiled float32 projection is the formed W rounded to float32.
    from streamrff._kernels.sorf import structured_projection

    W32 = structured_projection(np.eye(d, dtype=np.float32), rff._params(), np.empty((d, m), np.float32)).T
    np.testing.assert_array_equal(W32, W.astype(np.float32))


def test_structured_rff_kernel_estimate_unbiased():
    d, n_features, n_seeds = 40, 128, 300  # n = 64, one block per map
    x = np.random.default_rng(7).normal(size=d)
    directions = [x / np.linalg.norm(x), np.eye(d)[0]]  # a generic direction and a coordinate axis
    points = [np.zeros(d)] + [direction * r * SIGMA for direction in directions for r in (0.5, 1.0, 2.0)]
    rows = np.array(points, dtype=np.float32)
    exact = srf.exact_kernel(rows[:1], rows[1:], SIGMA)[0]
    estimates = []
    for seed in range(n_seeds):
        Z = srf.RFF(n_features=n_features, bandwidth=SIGMA, structured=True, seed=seed).fit(rows).transform(rows)
        Z = Z.astype(np.float64)
        estimates.append(Z[1:] @ Z[0])
    estimates = np.array(estimates)
    standard_error = estimates.std(axis=0, ddof=1) / np.sqrt(n_seeds)
    assert np.all(standard_error > 0)
    # CLT: the mean over independent seeds is within 4 standard errors of the exact kernel.
    assert np.all(np.abs(estimates.mean(axis=0) - exact) < 4 * standard_error)


def test_structured_rff_kernel_error_near_dense_orthogonal():
    rows = np.random.default_rng(5).normal(size=(150, 200)).astype(np.float32)
    sigma = float(np.sqrt(200))
    K = srf.exact_kernel(rows, rows, sigma)
    errors = {}
    for name, options in {"iid": {}, "orthogonal": {"orthogonal": True}, "structured": {"structured": True}}.items():
        mse = []
        for seed in range(3):
            Z = srf.RFF(n_features=1024, bandwidth=sigma, seed=seed, **options).fit(rows).transform(rows)
            mse.append(np.mean((Z.astype(np.float64) @ Z.T.astype(np.float64) - K) ** 2))
        errors[name] = np.mean(mse)
    assert errors["structured"] < errors["iid"]
    assert errors["structured"] <= 1.5 * errors["orthogonal"]


# -- the sums the sketch adds ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_structured_transform_equals_what_the_sum_kernel_adds_bit_for_bit(variant):
    rff = srf.RFF(n_features=96, bandwidth=SIGMA, variant=variant, structured=True, seed=2).fit(X)
    for i in (0, 31, 32, 699):
        # One row per sketch: the float64 sum holds exactly float32(scale) times the float32 value
        # the kernel added, and transform's float32 feature is that product rounded.
        row = X[i : i + 1]
        feature_sum = srf.sketch_array(row, rff).feature_sum
        np.testing.assert_array_equal(feature_sum.astype(np.float32), rff.transform(row)[0])
    # Many rows: the sums of transform's features, up to float32 partial sums of 32-row tiles.
    sketch = srf.sketch_array(X, rff)
    Z = rff.transform(X).astype(np.float64)
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-6 * len(X) * np.abs(Z).max())
    assert sketch.squared_norm_sum == pytest.approx((Z**2).sum(), rel=1e-6)
    # And against the numpy recipe in float64.
    W, phases = reference_params(2, X.shape[1], 96, SIGMA, variant)
    expected = reference_features(X, W, phases)
    np.testing.assert_allclose(sketch.feature_sum, expected.sum(axis=0), rtol=0, atol=2e-6 * len(X))


def test_structured_sketch_chunking_merge_order_and_engine():
    rff = srf.RFF(n_features=128, bandwidth=SIGMA, structured=True, seed=1).fit(X)
    whole = srf.sketch_array(X, rff, moments=True)
    scale = np.abs(whole.feature_sum).max()
    bounds = [0, 1, 33, 250, 251, 700]
    parts = [srf.sketch_array(X[a:b], rff, moments=True) for a, b in zip(bounds[:-1], bounds[1:])]
    in_order = srf.merge(*parts)
    reversed_order = srf.merge(*parts[::-1])
    pairwise = parts[4].merge(parts[0]).merge(parts[2].merge(parts[3])).merge(parts[1])
    # Chunking: float32 rounding of the features; merge order: float64 rounding.
    np.testing.assert_allclose(in_order.feature_sum, whole.feature_sum, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(in_order.moment, whole.moment, rtol=0, atol=1e-6 * np.abs(whole.moment).max())
    for other in (reversed_order, pairwise):
        np.testing.assert_allclose(other.feature_sum, in_order.feature_sum, rtol=1e-12, atol=1e-12 * scale)
        np.testing.assert_allclose(other.moment, in_order.moment, rtol=1e-12, atol=1e-12 * np.abs(whole.moment).max())
    # The engine on a dask array, in chunks of another size: the in-memory sums to float32 rounding.
    engine = srf.sketch(da.from_array(X, chunks=(96, 48)), rff, moments=True)
    assert engine.fingerprint == whole.fingerprint and engine.count == len(X)
    np.testing.assert_allclose(engine.feature_sum, whole.feature_sum, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(engine.moment, whole.moment, rtol=0, atol=1e-6 * np.abs(whole.moment).max())


def test_structured_sketch_float64_agrees_with_float32():
    rff = srf.RFF(n_features=64, bandwidth=SIGMA, variant="cosphase", structured=True, seed=6).fit(X)
    single = srf.sketch_array(X, rff)
    double = srf.sketch_array(X, rff, dtype="float64")
    W, phases = reference_params(6, X.shape[1], 64, SIGMA, "cosphase")
    expected = reference_features(X, W, phases).sum(axis=0)
    np.testing.assert_allclose(double.feature_sum, expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(single.feature_sum, expected, rtol=0, atol=2e-6 * len(X))


# -- composition and analyses --------------------------------------------------------------------------


def test_jl_after_a_structured_rff_is_the_projection_of_its_features():
    jl = srf.JL(srf.RFF(n_features=256, bandwidth=SIGMA, structured=True, seed=2), n_components=32, seed=5).fit(X)
    inner = srf.RFF(n_features=256, bandwidth=SIGMA, structured=True, seed=2).fit(X)
    assert jl.spec["inner"] == inner.spec and jl.spec["inner"]["structured"] is True
    projection = jl._params()["projection"]
    expected = inner.transform(X[:50]).astype(np.float64) @ projection
    np.testing.assert_allclose(jl.transform(X[:50]), expected, rtol=0, atol=1e-5)
    rebuilt = srf.map_from_spec(jl.spec)
    assert rebuilt.fingerprint == jl.fingerprint
    np.testing.assert_array_equal(rebuilt.transform(X[:50]), jl.transform(X[:50]))


def test_cluster_sketch_of_a_structured_map_equals_numpy_assignment():
    from scipy.spatial.distance import cdist

    from streamrff.kmeans import cluster_sketch_of_chunk

    rff = srf.RFF(n_features=128, bandwidth=SIGMA, structured=True, seed=0).fit(X)
    Z = rff.transform(X).astype(np.float64)
    centers = Z[[0, 100, 200, 300]].copy()
    sketch = cluster_sketch_of_chunk(X, rff, centers)  # the compiled Lloyd kernel, structured tiles
    distances = cdist(Z, centers, "sqeuclidean")
    labels = distances.argmin(axis=1)
    # Labels exactly those of float64 arithmetic on transform's float32 features: same features bit for bit.
    np.testing.assert_array_equal(sketch.counts, np.bincount(labels, minlength=4))
    expected_sums = np.stack([Z[labels == c].sum(axis=0) for c in range(4)])
    assert np.linalg.norm(sketch.sums - expected_sums) < 1e-6 * np.linalg.norm(expected_sums)
    assert sketch.inertia == pytest.approx(distances.min(axis=1).sum(), rel=1e-6)


def test_two_sample_test_with_a_structured_map_is_the_unbiased_mmd2_of_its_features():
    rng = np.random.default_rng(8)
    Xs, Ys = rng.normal(size=(120, 24)), rng.normal(0.2, 1.1, size=(90, 24))
    rff = srf.RFF(n_features=256, bandwidth=5.0, structured=True, seed=1).fit(np.vstack([Xs, Ys]))
    result = srf.two_sample_test(Xs, Ys, feature_map=rff, n_permutations=50, seed=3)
    Zx, Zy = (rff.transform(rows).astype(np.float64) for rows in (Xs, Ys))
    n, m = len(Zx), len(Zy)
    kxx, kyy, kxy = Zx @ Zx.T, Zy @ Zy.T, Zx @ Zy.T
    expected = (kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
    expected -= 2 * kxy.mean()
    assert result.statistic == pytest.approx(expected, rel=1e-5, abs=1e-7)
    # And near the exact-kernel statistic (D = 256 random features).
    K = srf.exact_kernel(np.vstack([Xs, Ys]), None, 5.0)
    exact = (K[:n, :n].sum() - n) / (n * (n - 1)) + (K[n:, n:].sum() - m) / (m * (m - 1)) - 2 * K[:n, n:].mean()
    assert abs(result.statistic - exact) < 0.02
    assert result.p_value < 0.05  # a mean shift of 0.2 in 24 dimensions and a wider Y


# -- parameters, specs, files and the CLI ----------------------------------------------------------------


def test_structured_rff_parameter_checks():
    with pytest.raises(InputError, match="orthogonal=True and structured=True cannot be combined"):
        srf.RFF(orthogonal=True, structured=True).fit(X)
    with pytest.raises(InputError, match="structured must be True or False. Got 'yes'"):
        srf.RFF(structured="yes").fit(X)
    with pytest.raises(InputError, match="n_features must be even"):
        srf.RFF(n_features=33, structured=True).fit(X)


def test_structured_rff_warns_on_narrow_input_only_when_fitted():
    assert MIN_UNBIASED_PADDED_WIDTH == 32
    with pytest.warns(BiasWarning, match="16-dimensional input"):
        rff = srf.RFF(n_features=32, structured=True).fit(X[:, :16])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        srf.RFF(n_features=32, structured=True).fit(X[:, :17])
        srf.map_from_spec(rff.spec)  # loading a map does not warn again
        srf.RFF(n_features=32).fit(X[:, :3])  # dense maps never warn


def test_structured_spec_records_the_option_only_when_set():
    dense = srf.RFF(n_features=32, bandwidth=1.0, seed=0).fit(X)
    assert "structured" not in dense.spec
    assert srf.RFF(n_features=32, bandwidth=1.0, structured=False, seed=0).fit(X).fingerprint == dense.fingerprint
    structured = srf.RFF(n_features=32, bandwidth=1.0, structured=True, seed=0).fit(X)
    assert list(structured.spec) == [
        "kind", "n_features_in", "n_features", "bandwidth", "variant", "orthogonal", "structured", "seed",
    ]  # fmt: skip
    assert structured.spec["structured"] is True and structured.fingerprint != dense.fingerprint
    rebuilt = srf.map_from_spec(json.loads(json.dumps(structured.spec)))
    assert rebuilt.structured is True and rebuilt.fingerprint == structured.fingerprint
    np.testing.assert_array_equal(rebuilt.transform(X), structured.transform(X))


def test_structured_map_file_and_sketch_file_round_trip(tmp_path):
    rff = srf.RFF(n_features=64, bandwidth="median", structured=True, seed=9).fit(X)
    srf.save_map(rff, tmp_path / "map.json")
    document = json.loads((tmp_path / "map.json").read_text())
    assert document["spec"]["structured"] is True
    loaded = srf.load_map(tmp_path / "map.json")
    assert loaded.fingerprint == rff.fingerprint == document["fingerprint"]
    np.testing.assert_array_equal(loaded.transform(X), rff.transform(X))
    sketch = srf.sketch_array(X, rff, moments=True)
    sketch.save(tmp_path / "s.zip")
    assert srf.load(tmp_path / "s.zip") == sketch
    assert srf.load_map(tmp_path / "s.zip").fingerprint == rff.fingerprint


def golden_structured_rows() -> np.ndarray:
    """The rows tests/data/make_golden_v1_structured.py sketched: exact binary fractions."""
    return ((np.arange(480.0).reshape(12, 40) * 5) % 7 - 3) / 2


@pytest.mark.parametrize("name", ["golden_v1_structured.zarr", "golden_v1_structured.zip"])
def test_golden_v1_structured_sketch_loads_and_matches_numpy(name):
    sketch = srf.load(DATA / name)
    assert isinstance(sketch, srf.MeanSketch)
    spec = {
        "kind": "rff", "n_features_in": 40, "n_features": 160, "bandwidth": 4.0, "variant": "sincos",
        "orthogonal": False, "structured": True, "seed": 0,
    }  # fmt: skip
    assert sketch.spec == spec
    stored = json.loads((DATA / "golden_v1_structured.zarr" / "zarr.json").read_text())["attributes"]
    assert sketch.fingerprint == stored["fingerprint"] == srf.map_from_spec(spec).fingerprint
    assert sketch.count == 12 and not sketch.has_moments
    X_golden = golden_structured_rows()
    W, _ = reference_params(0, 40, 160, 4.0)
    Z = reference_features(X_golden, W, None)
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(sketch.feature_map.transform(X_golden), Z, rtol=0, atol=1e-6)
    assert sketch.squared_norm_sum == pytest.approx(12.0, abs=1e-5)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_map_and_sketch_structured(capsys, tmp_zarr, tmp_path):
    source = tmp_zarr(X, 250, name="x.zarr")
    code, _, err = run_cli(capsys, "map", source, "-o", str(tmp_path / "m.json"), "--structured",
                           "--features", "128", "--bandwidth", "7")  # fmt: skip
    assert code == 0, err
    written = srf.load_map(tmp_path / "m.json")
    expected = srf.RFF(n_features=128, bandwidth=7.0, structured=True, seed=0).fit(X)
    assert written.spec == expected.spec and written.fingerprint == expected.fingerprint

    code, _, err = run_cli(capsys, "sketch", source, "-o", str(tmp_path / "s.zarr"), "--structured",
                           "--features", "128", "--bandwidth", "7")  # fmt: skip
    assert code == 0, err
    sketch = srf.load(tmp_path / "s.zarr")
    assert sketch.fingerprint == expected.fingerprint
    reference = srf.sketch_array(X, expected).feature_sum
    np.testing.assert_allclose(sketch.feature_sum, reference, rtol=0, atol=1e-6 * np.abs(reference).max())

    code, out, err = run_cli(capsys, "sketch", source, "-o", str(tmp_path / "t.zarr"), "--structured", "--orthogonal")
    assert code == 2 and "orthogonal=True and structured=True cannot be combined" in err  # the command line is wrong
    assert not (tmp_path / "t.zarr").exists()
    code, out, err = run_cli(capsys, "sketch", source, "-o", str(tmp_path / "t.zarr"),
                             "--map", str(tmp_path / "m.json"), "--structured")  # fmt: skip
    assert code == 2 and "--structured would contradict it" in err


def test_kernel_pca_and_ridge_with_a_structured_map_equal_numpy_on_its_features():
    rff = srf.RFF(n_features=128, bandwidth=SIGMA, structured=True, seed=5).fit(X)
    Z = rff.transform(X).astype(np.float64)
    centred = Z - Z.mean(axis=0)
    eigenvalues, eigenvectors = np.linalg.eigh(centred.T @ centred / len(Z))
    kpca = srf.KernelPCA(n_components=3, feature_map=rff).fit(X)
    np.testing.assert_allclose(kpca.explained_variance_, eigenvalues[::-1][:3], rtol=1e-5)
    for component, expected in zip(kpca.components_, eigenvectors[:, ::-1][:, :3].T):
        assert abs(abs(component @ expected) - 1.0) < 1e-5  # the same axis, up to sign

    target = np.sin(X[:, 0]) + 0.1 * X[:, 1]
    ridge = srf.KernelRidge(alpha=0.5, feature_map=rff).fit(X, target)
    # Ridge with an unpenalised intercept: centre the features and the target (numpy's solve).
    coef = np.linalg.solve(centred.T @ centred + 0.5 * np.eye(Z.shape[1]), centred.T @ (target - target.mean()))
    np.testing.assert_allclose(ridge.coef_, coef, rtol=0, atol=1e-6 * np.abs(coef).max())
    prediction = Z @ coef + target.mean() - Z.mean(axis=0) @ coef
    np.testing.assert_allclose(ridge.predict(X), prediction, rtol=0, atol=1e-5)
