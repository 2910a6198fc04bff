"""Feature maps against independent references.

References are the exact Gaussian Gram matrix (plain numpy), the parameter
recipe written out in numpy, and closed forms from Sutherland & Schneider
(2015, "On the error of random Fourier features", UAI): eq. (5) for the
variance of sincos features and eq. (6) for cosphase features.

Convention: k(x, y) = exp(-||x - y||^2 / (2 sigma^2)), sigma = bandwidth.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.spatial.distance import pdist

import streamrff as srf
from streamrff._base.sampling import row_keys
from streamrff.errors import InputError, NotFittedMapError

SIGMA = 1.5

#: Constructors of every oblivious map under test, by id.
MAPS = {
    "rff-sincos": lambda: srf.RFF(n_features=256, bandwidth=SIGMA, seed=0),
    "rff-cosphase": lambda: srf.RFF(n_features=256, bandwidth=SIGMA, variant="cosphase", seed=0),
    "rff-orthogonal": lambda: srf.RFF(n_features=256, bandwidth=SIGMA, orthogonal=True, seed=0),
    "jl": lambda: srf.JL(srf.RFF(n_features=256, bandwidth=SIGMA, seed=0), n_components=64, seed=0),
}

#: (variant, orthogonal) of the RFF flavours the statistical tests cover.
RFF_FLAVOURS = {
    "sincos": ("sincos", False),
    "cosphase": ("cosphase", False),
    "orthogonal": ("sincos", True),
}

#: Spawn key of the JL projection stream, as documented in maps.py (ASCII "JL-P").
JL_STREAM = 0x4A4C2D50


def numpy_gaussian_kernel(X: np.ndarray, Y: np.ndarray, sigma: float) -> np.ndarray:
    """The Gaussian Gram matrix from its definition, without scipy or streamrff."""
    squared = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(axis=-1)
    return np.exp(-squared / (2.0 * sigma**2))


def rff_reference(X: np.ndarray, n_features: int, sigma: float, variant: str, seed: int) -> np.ndarray:
    """RFF features written out from the papers, in float64.

    sincos (Sutherland & Schneider eq. 1): m = D/2, W ~ N(0, I) drawn as
    ``default_rng(seed).standard_normal((m, d))``, z = m^-1/2 [cos(XW^T/sigma), sin(XW^T/sigma)].
    cosphase (eq. 2): W drawn for all D rows, then b ~ U[0, 2 pi) from the same
    generator, z = sqrt(2/D) cos(XW^T/sigma + b).
    """
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    if variant == "sincos":
        m = n_features // 2
        projection = X @ rng.standard_normal((m, d)).T / sigma
        return np.hstack([np.cos(projection), np.sin(projection)]) / np.sqrt(m)
    projection = X @ rng.standard_normal((n_features, d)).T / sigma
    phases = rng.uniform(0.0, 2.0 * np.pi, size=n_features)
    return np.sqrt(2.0 / n_features) * np.cos(projection + phases)


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return np.random.default_rng(42).normal(size=(120, 5))


# -- exact kernel -----------------------------------------------------------------


def test_exact_kernel_matches_definition(rows):
    X, Y = rows[:30], rows[30:70]
    np.testing.assert_allclose(srf.exact_kernel(X, Y, SIGMA), numpy_gaussian_kernel(X, Y, SIGMA), rtol=1e-12)
    np.testing.assert_allclose(srf.exact_kernel(X, bandwidth=SIGMA), numpy_gaussian_kernel(X, X, SIGMA), rtol=1e-12)


# -- features against the recipe ----------------------------------------------------


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
@pytest.mark.parametrize("seed", [0, 7])
def test_rff_features_match_numpy_formula(rows, variant, seed):
    rff = srf.RFF(n_features=128, bandwidth=SIGMA, variant=variant, seed=seed).fit(rows)
    expected = rff_reference(rows, 128, SIGMA, variant, seed)
    # float32 output: the phase is rounded to float32 before cos, |phase| < ~20 here.
    np.testing.assert_allclose(rff.transform(rows), expected, rtol=0, atol=5e-6)


def test_rff_orthogonal_frequencies_are_orthogonal_with_chi_norms(rows):
    # Recover the frequencies from the features: with x = t e_j, the sincos phase is t W[:, j] / sigma.
    d = rows.shape[1]
    rff = srf.RFF(n_features=2 * d, bandwidth=SIGMA, orthogonal=True, seed=3).fit(rows)
    t = 1e-3
    Z = rff.transform(t * np.eye(d)).astype(np.float64) * np.sqrt(d)  # m = d frequencies
    W = np.arctan2(Z[:, d:], Z[:, :d]).T * SIGMA / t  # (m, d): row i is frequency i
    gram = W @ W.T
    off_diagonal = gram - np.diag(np.diag(gram))
    assert np.abs(off_diagonal).max() < 1e-2 * np.diag(gram).max()
    assert not np.allclose(np.diag(gram), np.diag(gram)[0])  # chi(d) norms, not all equal


def test_rff_sincos_features_have_unit_norm(rows):
    Z = srf.RFF(n_features=64, bandwidth=SIGMA).fit(rows).transform(rows).astype(np.float64)
    np.testing.assert_allclose((Z**2).sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 5])
def test_jl_features_are_inner_features_times_gaussian_projection(rows, seed):
    jl = srf.JL(srf.RFF(n_features=128, bandwidth=SIGMA, seed=seed), n_components=32, seed=seed).fit(rows)
    inner = rff_reference(rows, 128, SIGMA, "sincos", seed)
    # Its own stream, so that the projection never reuses the inner map's normals.
    stream = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(JL_STREAM,)))
    projection = stream.standard_normal((128, 32)) / np.sqrt(32)
    np.testing.assert_allclose(jl.transform(rows), inner @ projection, rtol=0, atol=2e-5)


def test_jl_projection_does_not_reuse_inner_frequencies(rows):
    # Inner RFF and projection with the same seed (both default to 0): the projection
    # must not be drawn from default_rng(seed), the stream the RFF frequencies come from.
    jl = srf.JL(srf.RFF(n_features=16, bandwidth=SIGMA, seed=0), n_components=8, seed=0).fit(rows)
    inner = jl.inner_map_.transform(rows).astype(np.float64)
    projection, *_ = np.linalg.lstsq(inner, jl.transform(rows).astype(np.float64), rcond=None)
    reused = np.random.default_rng(0).standard_normal((16, 8)) / np.sqrt(8)
    assert np.abs(projection - reused).max() > 0.1


# -- statistics: error decay and variance --------------------------------------------


@pytest.mark.parametrize("flavour", list(RFF_FLAVOURS))
def test_rff_mean_error_decays_like_inverse_sqrt_n_features(flavour):
    """Mean |z(x).z(y) - k(x, y)| over all pairs of 80 points ~ D^-1/2.

    Fit of log(error) on log(D) over D = 64 ... 4096 with the error averaged over
    10 seeds. Measured slopes with seeds 0-9: -0.515 sincos, -0.500 cosphase, -0.471
    orthogonal; over 12 disjoint seed sets their standard deviation is about 0.02, so
    the tolerance +-0.1 is 5 standard deviations. A wrong bandwidth leaves a bias that
    does not decay, which flattens the slope towards 0.
    """
    variant, orthogonal = RFF_FLAVOURS[flavour]
    X = np.random.default_rng(1).normal(size=(80, 5))
    sigma = 2.0
    exact = numpy_gaussian_kernel(X, X, sigma)
    upper = np.triu_indices(len(X), 1)
    n_features = [64, 128, 256, 512, 1024, 2048, 4096]
    errors = []
    for D in n_features:
        per_seed = []
        for seed in range(10):
            rff = srf.RFF(n_features=D, bandwidth=sigma, variant=variant, orthogonal=orthogonal, seed=seed)
            Z = rff.fit(X).transform(X).astype(np.float64)
            per_seed.append(np.abs(Z @ Z.T - exact)[upper].mean())
        errors.append(np.mean(per_seed))
    slope = np.polyfit(np.log(n_features), np.log(errors), 1)[0]
    assert -0.6 <= slope <= -0.4, f"{flavour}: slope {slope:.3f}, errors {errors}"


#: Kernel values of the pairs (x0, x_j) used for the variance tests.
PAIR_KERNELS = np.array([0.9, 0.7, 0.5, 0.3, 0.1])
N_SEEDS = 2000
D_VARIANCE = 64


@pytest.fixture(scope="module")
def kernel_estimates() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """z(x0).z(x_j) for N_SEEDS independent maps per flavour, and the exact k(x0, x_j)."""
    d = 4
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(len(PAIR_KERNELS), d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    radii = SIGMA * np.sqrt(-2.0 * np.log(PAIR_KERNELS))  # so that k(x0, x_j) = PAIR_KERNELS[j]
    X = np.vstack([np.zeros(d), directions * radii[:, None]]) + 0.3
    exact = numpy_gaussian_kernel(X[:1], X[1:], SIGMA)[0]
    np.testing.assert_allclose(exact, PAIR_KERNELS, rtol=1e-12)
    estimates = {}
    for flavour, (variant, orthogonal) in RFF_FLAVOURS.items():
        values = np.empty((N_SEEDS, len(PAIR_KERNELS)))
        for seed in range(N_SEEDS):
            rff = srf.RFF(n_features=D_VARIANCE, bandwidth=SIGMA, variant=variant, orthogonal=orthogonal, seed=seed)
            Z = rff.fit(X).transform(X).astype(np.float64)
            values[seed] = Z[1:] @ Z[0]
        estimates[flavour] = values
    return estimates


def sutherland_schneider_variance(k: np.ndarray, D: int, variant: str) -> np.ndarray:
    """Var of z(x).z(y): eq. (5) for sincos and eq. (6) for cosphase; k(2 Delta) = k(Delta)^4."""
    if variant == "sincos":
        return (1.0 + k**4 - 2.0 * k**2) / D
    return (1.0 + k**4 / 2.0 - k**2) / D


@pytest.mark.parametrize("flavour", ["sincos", "cosphase"])
def test_rff_variance_matches_sutherland_schneider(kernel_estimates, flavour):
    """Empirical variance over 2000 seeds within 15% of eq. (5) / eq. (6), and unbiased.

    Relative standard error of a variance from 2000 draws is ~3-4%, so 15% is about
    4 standard errors per pair. Measured ratios empirical/theory (seeds 0-1999):
    sincos 0.95-1.06, cosphase 0.96-1.02; over 5 other seed blocks the largest
    deviation was 9%. A factor-2 bandwidth error moves k(Delta) to k^(1/4) or k^4 and
    the ratios by far more than 15%.
    """
    values = kernel_estimates[flavour]
    theory = sutherland_schneider_variance(PAIR_KERNELS, D_VARIANCE, flavour)
    ratio = values.var(axis=0, ddof=1) / theory
    assert np.all(np.abs(ratio - 1.0) < 0.15), f"{flavour}: empirical/theory variance {np.round(ratio, 3)}"
    # Unbiased: the mean over seeds is within 5 standard errors of k.
    standard_error = np.sqrt(theory / N_SEEDS)
    assert np.all(np.abs(values.mean(axis=0) - PAIR_KERNELS) < 5 * standard_error)


def test_rff_sincos_variance_not_above_cosphase(kernel_estimates):
    """Sutherland & Schneider eq. (7): sincos has the lower variance for the Gaussian kernel."""
    sincos = kernel_estimates["sincos"].var(axis=0, ddof=1)
    cosphase = kernel_estimates["cosphase"].var(axis=0, ddof=1)
    assert sincos.sum() < cosphase.sum()
    # Per pair up to noise (at k = 0.1 the two theories differ by only 1%).
    assert np.all(sincos <= 1.15 * cosphase), np.round(sincos / cosphase, 3)


def test_rff_orthogonal_variance_not_above_iid(kernel_estimates):
    """Orthogonal random features (Yu et al. 2016) do not have a higher variance than iid sincos.

    Measured ratio orthogonal/iid: about 0.4-0.7 per pair at d = 4, D = 64; allowed
    up to 1.15 (noise).
    """
    orthogonal = kernel_estimates["orthogonal"]
    iid = kernel_estimates["sincos"]
    ratio = orthogonal.var(axis=0, ddof=1) / iid.var(axis=0, ddof=1)
    assert np.all(ratio <= 1.15), np.round(ratio, 3)
    assert orthogonal.var(axis=0, ddof=1).sum() <= iid.var(axis=0, ddof=1).sum()
    theory = sutherland_schneider_variance(PAIR_KERNELS, D_VARIANCE, "sincos")
    assert np.all(np.abs(orthogonal.mean(axis=0) - PAIR_KERNELS) < 5 * np.sqrt(theory / N_SEEDS))


# -- reproducibility ------------------------------------------------------------------

_REBUILD_SCRIPT = """
import json, sys
import numpy as np
import streamrff as srf

workdir = sys.argv[1]
specs = json.load(open(workdir + "/specs.json"))
X = np.load(workdir + "/X.npy")
fingerprints = {}
for name, spec in specs.items():
    feature_map = srf.map_from_spec(spec)
    np.save(workdir + "/" + name + ".child.npy", feature_map.transform(X))
    fingerprints[name] = feature_map.fingerprint
json.dump(fingerprints, open(workdir + "/fingerprints.json", "w"))
"""


def test_map_from_spec_reproduces_features_bit_for_bit_in_fresh_process(rows, tmp_path):
    fitted = {name: make().fit(rows) for name, make in MAPS.items()}
    fitted["rff-median"] = srf.RFF(n_features=64, bandwidth="median", variant="cosphase", seed=11).fit(rows)
    (tmp_path / "specs.json").write_text(json.dumps({name: m.spec for name, m in fitted.items()}))
    X = rows.astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    subprocess.run([sys.executable, "-c", _REBUILD_SCRIPT, str(tmp_path)], check=True, timeout=120, capture_output=True)
    fingerprints = json.loads((tmp_path / "fingerprints.json").read_text())
    for name, feature_map in fitted.items():
        np.save(tmp_path / f"{name}.parent.npy", feature_map.transform(X))
        parent = (tmp_path / f"{name}.parent.npy").read_bytes()
        child = (tmp_path / f"{name}.child.npy").read_bytes()
        assert parent == child, f"{name}: features differ between processes"
        assert fingerprints[name] == feature_map.fingerprint


@pytest.mark.parametrize("name", list(MAPS))
def test_map_spec_is_json_and_rebuilds_same_fingerprint(rows, name):
    feature_map = MAPS[name]().fit(rows)
    spec = json.loads(json.dumps(feature_map.spec))
    twin = srf.map_from_spec(spec)
    assert twin.fingerprint == feature_map.fingerprint
    assert twin.transform(rows).tobytes() == feature_map.transform(rows).tobytes()


def test_map_from_spec_rejects_unfitted_median_bandwidth(rows):
    spec = dict(srf.RFF(n_features=8, bandwidth=1.0).fit(rows).spec, bandwidth="median")
    with pytest.raises(InputError, match="median"):
        srf.map_from_spec(spec)


def test_map_from_spec_rejects_unknown_kind():
    with pytest.raises(InputError, match="Unknown feature map kind 'nope'"):
        srf.map_from_spec({"kind": "nope"})


# -- dtypes -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_map_output_is_float32(rows, name, dtype):
    X = (rows * 3).astype(dtype)
    Z = MAPS[name]().fit(X).transform(X)
    assert Z.dtype == np.float32
    assert Z.shape == (len(X), 64 if name == "jl" else 256)


@pytest.mark.parametrize("name", list(MAPS))
def test_map_float32_and_float64_inputs_agree(rows, name):
    X32 = rows.astype(np.float32)
    feature_map = MAPS[name]().fit(rows)
    Z32 = feature_map.transform(X32)
    scale = np.abs(Z32).max()
    # The same numbers in two dtypes, and float64 data against its float32 rounding: the
    # features differ by float32 rounding of the phases only (|phase| < ~20 here).
    np.testing.assert_allclose(Z32, feature_map.transform(X32.astype(np.float64)), rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(Z32, feature_map.transform(rows), rtol=0, atol=1e-5 * scale)


# -- seeds and bandwidth -------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MAPS))
def test_map_same_seed_same_map(rows, name):
    first, second = MAPS[name]().fit(rows), MAPS[name]().fit(rows[:10])
    assert first.fingerprint == second.fingerprint
    assert first.transform(rows).tobytes() == second.transform(rows).tobytes()


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
@pytest.mark.parametrize("orthogonal", [False, True])
def test_rff_different_seeds_different_fingerprints(rows, variant, orthogonal):
    fingerprints = {
        srf.RFF(n_features=32, bandwidth=1.0, variant=variant, orthogonal=orthogonal, seed=seed).fit(rows).fingerprint
        for seed in range(10)
    }
    assert len(fingerprints) == 10


def test_jl_different_seeds_different_fingerprints(rows):
    fingerprints = {
        srf.JL(srf.RFF(n_features=32, bandwidth=1.0, seed=0), n_components=8, seed=seed).fit(rows).fingerprint
        for seed in range(5)
    } | {
        srf.JL(srf.RFF(n_features=32, bandwidth=1.0, seed=seed), n_components=8, seed=0).fit(rows).fingerprint
        for seed in range(1, 5)
    }
    assert len(fingerprints) == 9


@pytest.mark.filterwarnings("ignore::streamrff.BiasWarning")  # structured blocks on 5 columns: irrelevant here
@pytest.mark.parametrize("structured", [False, True])
def test_fingerprint_is_sha256_of_spec_and_parameters_on_every_call(rows, structured):
    feature_map = srf.RFF(n_features=64, bandwidth=1.0, structured=structured, seed=3).fit(rows)
    reference = hashlib.sha256(json.dumps(feature_map.spec, sort_keys=True, separators=(",", ":")).encode())
    for name, array in sorted(feature_map._params().items()):
        reference.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
        reference.update(np.ascontiguousarray(array).tobytes())
    assert [feature_map.fingerprint for _ in range(3)] == [reference.hexdigest()] * 3


def test_kjl_fingerprint_tells_landmarks_apart_under_one_spec(rows):
    first = srf.KJL(n_landmarks=20, n_components=4, bandwidth=1.0, seed=0).fit(rows[:40])
    second = srf.KJL(n_landmarks=20, n_components=4, bandwidth=1.0, seed=0).fit(rows[40:80])
    assert first.spec == second.spec
    assert not np.array_equal(first.landmarks_, second.landmarks_)
    assert first.fingerprint != second.fingerprint


def test_rff_parameters_change_fingerprint(rows):
    base = dict(n_features=32, bandwidth=1.0, variant="sincos", orthogonal=False, seed=0)
    changes = [{}, {"n_features": 34}, {"bandwidth": 2.0}, {"variant": "cosphase"}, {"orthogonal": True}, {"seed": 1}]
    fingerprints = {srf.RFF(**{**base, **change}).fit(rows).fingerprint for change in changes}
    assert len(fingerprints) == len(changes)


def test_rff_accepts_generator_seed(rows):
    rff = srf.RFF(n_features=32, bandwidth=1.0, seed=np.random.default_rng(123)).fit(rows)
    assert isinstance(rff.spec["seed"], int) and rff.spec["seed"] >= 0
    expected = rff_reference(rows, 32, 1.0, "sincos", rff.spec["seed"])
    np.testing.assert_allclose(rff.transform(rows), expected, rtol=0, atol=5e-6)
    twin = srf.RFF(n_features=32, bandwidth=1.0, seed=np.random.default_rng(123)).fit(rows)
    assert twin.fingerprint == rff.fingerprint  # the same generator state gives the same map
    assert srf.map_from_spec(rff.spec).fingerprint == rff.fingerprint


def test_jl_accepts_generator_seed(rows):
    jl = srf.JL(srf.RFF(n_features=32, bandwidth=1.0), n_components=8, seed=np.random.default_rng(9)).fit(rows)
    assert isinstance(jl.spec["seed"], int)
    assert srf.map_from_spec(jl.spec).transform(rows).tobytes() == jl.transform(rows).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_rows", [2, 300, 1000])
def test_rff_median_bandwidth_is_median_pairwise_distance(dtype, n_rows):
    X = np.random.default_rng(n_rows).normal(size=(n_rows, 3)).astype(dtype)
    rff = srf.RFF(n_features=16, bandwidth="median", seed=4).fit(X)
    # Up to 1 000 rows the sample is every row.
    expected = np.median(pdist(X.astype(np.float64)))
    assert rff.bandwidth_ == pytest.approx(expected, rel=1e-12)
    assert rff.spec["bandwidth"] == rff.bandwidth_


@pytest.mark.parametrize("make", [srf.RFF, srf.RelativeErrorRFF, srf.KJL], ids=["rff", "relative", "kjl"])
def test_map_default_bandwidth_is_the_median_heuristic(make):
    # One default everywhere (issue 29): the maps, like KernelPCA, two_sample_test and the CLI.
    X = np.random.default_rng(7).normal(size=(200, 2)) * 3.0
    kwargs = {"n_landmarks": 200, "n_components": 8} if make is srf.KJL else {"n_features": 16}
    fitted = make(**kwargs).fit(X)
    assert fitted.spec["bandwidth"] == pytest.approx(np.median(pdist(X)), rel=1e-12)  # every row is sampled


def test_rff_default_bandwidth_unfitted_transform_says_why_fit_is_needed(rows):
    with pytest.raises(NotFittedMapError, match=r"bandwidth='median' is chosen from a sample of the data.*fit\(X\)"):
        srf.RFF().transform(rows)
    with pytest.raises(NotFittedMapError, match=r"bandwidth='median'"):
        srf.JL().transform(rows)


def test_rff_median_bandwidth_uses_keyed_bottom_k_sample():
    X = np.random.default_rng(0).lognormal(size=(2500, 2))  # skewed: a different sample, a different median
    seed = 4
    rff = srf.RFF(n_features=16, bandwidth="median", seed=seed).fit(X)
    # The 1 000 rows with the smallest keys of (seed, global row index).
    sample = np.argsort(row_keys(seed, 0, len(X)), kind="stable")[:1000]
    assert rff.bandwidth_ == pytest.approx(np.median(pdist(X[sample])), rel=1e-12)
    assert rff.bandwidth_ != pytest.approx(np.median(pdist(X[:1000])), rel=1e-6)
    other = srf.RFF(n_features=16, bandwidth="median", seed=seed + 1).fit(X)
    other_sample = np.argsort(row_keys(seed + 1, 0, len(X)), kind="stable")[:1000]
    assert other.bandwidth_ == pytest.approx(np.median(pdist(X[other_sample])), rel=1e-12)


def test_rff_median_bandwidth_sets_kernel_scale():
    # The fitted map approximates the kernel at the median bandwidth, not at 1.0.
    X = np.random.default_rng(2).normal(scale=4.0, size=(200, 3))
    rff = srf.RFF(n_features=4096, bandwidth="median", seed=0).fit(X)
    Z = rff.transform(X[:40]).astype(np.float64)
    exact = numpy_gaussian_kernel(X[:40], X[:40], np.median(pdist(X)))
    assert np.abs(Z @ Z.T - exact).max() < 0.1


# -- bad input ---------------------------------------------------------------------------


def _with_bad_value(X: np.ndarray, value: float) -> np.ndarray:
    bad = X.copy()
    bad[7, 2] = value
    return bad


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("method", ["fit", "transform"])
def test_map_rejects_nonfinite_rows(rows, name, value, method):
    feature_map = MAPS[name]()
    if method == "transform":
        feature_map.fit(rows)
    with pytest.raises(InputError) as raised:
        getattr(feature_map, method)(_with_bad_value(rows, value))
    message = str(raised.value)
    assert "X must contain only finite values" in message
    assert "rows 7" in message
    assert "Drop or impute" in message


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("method", ["fit", "transform"])
@pytest.mark.parametrize(
    ("shape", "fix"),
    [((5,), "reshape(-1, 1)"), ((2, 3, 5), "reshape(len(X), -1)"), ((1, 2, 3, 5), "reshape(len(X), -1)")],
)
def test_map_rejects_non_2d_input(rows, name, method, shape, fix):
    feature_map = MAPS[name]()
    if method == "transform":
        feature_map.fit(rows)
    with pytest.raises(InputError) as raised:
        getattr(feature_map, method)(np.ones(shape))
    message = str(raised.value)
    assert "2-D array for X" in message
    assert f"{len(shape)}-D array of shape {shape}" in message
    assert fix in message


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("width", [4, 6])
def test_map_rejects_wrong_width(rows, name, width):
    feature_map = MAPS[name]().fit(rows)
    with pytest.raises(InputError) as raised:
        feature_map.transform(np.ones((3, width)))
    message = str(raised.value)
    assert f"X has {width} features" in message
    assert "expecting 5 features" in message
    assert "Pass data with 5 columns" in message


@pytest.mark.parametrize("n_features", [1, 3, 1023])
def test_rff_rejects_odd_n_features_for_sincos(rows, n_features):
    with pytest.raises(InputError) as raised:
        srf.RFF(n_features=n_features, bandwidth=1.0).fit(rows)
    message = str(raised.value)
    assert "n_features must be even" in message
    assert f"(got {n_features})" in message
    assert f"use {n_features + 1} or variant='cosphase'" in message


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
@pytest.mark.parametrize("n_features", [0, -2, 2.5, "64"])
def test_rff_rejects_non_positive_or_non_integer_n_features(rows, variant, n_features):
    with pytest.raises(InputError, match="n_features must be"):
        srf.RFF(n_features=n_features, bandwidth=1.0, variant=variant).fit(rows)


def test_rff_cosphase_accepts_odd_n_features(rows):
    assert srf.RFF(n_features=3, bandwidth=1.0, variant="cosphase").fit(rows).transform(rows).shape == (len(rows), 3)


@pytest.mark.parametrize("bandwidth", [0, 0.0, -1.0, np.nan, np.inf, "mean", None, True])
def test_rff_rejects_bad_bandwidth(rows, bandwidth):
    with pytest.raises(InputError) as raised:
        srf.RFF(bandwidth=bandwidth).fit(rows)
    message = str(raised.value)
    assert "bandwidth must be a positive" in message
    assert f"Got {bandwidth!r}" in message
    assert "'median'" in message


def test_rff_rejects_unknown_variant(rows):
    with pytest.raises(InputError, match="variant must be 'sincos' or 'cosphase'. Got 'cos'"):
        srf.RFF(bandwidth=1.0, variant="cos").fit(rows)


@pytest.mark.parametrize("bandwidth", [0.0, -1.0])
def test_exact_kernel_rejects_bad_bandwidth(rows, bandwidth):
    with pytest.raises(InputError, match="bandwidth must be a positive"):
        srf.exact_kernel(rows, rows, bandwidth)


def test_jl_rejects_non_map_inner(rows):
    with pytest.raises(InputError, match="inner_map must be a streamrff FeatureMap"):
        srf.JL(inner_map="rff").fit(rows)


def test_map_failed_fit_leaves_map_unfitted(rows):
    rff = srf.RFF(n_features=3, bandwidth=1.0)
    with pytest.raises(InputError):
        rff.fit(rows)
    assert not rff.is_fitted()
    with pytest.raises(NotFittedMapError):
        rff.transform(rows)
    fresh = srf.RFF(n_features=8, bandwidth=1.0)
    with pytest.raises(InputError):
        fresh.fit(_with_bad_value(rows, np.nan))
    assert not fresh.is_fitted()


@pytest.mark.parametrize("name", list(MAPS))
def test_map_transform_before_fit_raises_not_fitted(rows, name):
    with pytest.raises(NotFittedMapError, match="not fitted yet"):
        MAPS[name]().transform(rows)


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, "0"])
def test_rff_rejects_bad_seed(rows, seed):
    with pytest.raises(InputError, match="seed must be an int"):
        srf.RFF(bandwidth=1.0, seed=seed).fit(rows)
