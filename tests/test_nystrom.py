"""The streaming Nystrom sketch (``NystromSketch``) against numpy and the Tropp et al. (2017) bound.

References: ``Y`` against ``Z^T Z Omega`` from numpy (the test matrix rebuilt from its documented
recipe); the reconstruction against ``numpy.linalg.eigvalsh`` of the exact centred covariance, on
data built with a prescribed spectrum, within Theorem 4.1's bound
``E ||C - C_hat_k||_1 <= (1 + k / (l - k - 1)) ||C - [[C]]_k||_1``.
"""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.datasets import load_digits

import streamrff as srf
from streamrff.cli import main
from streamrff.sketches.nystrom import nystrom_eigenpairs

ROWS = np.random.default_rng(3).normal(size=(700, 3))


def reference_test_matrix(seed: int, width: int, size: int) -> np.ndarray:
    """The documented recipe: N(0, 1/D) entries from PCG64 keyed by (seed, stream, D, l)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4E595354, width, size]))
    return rng.standard_normal((width, size)) / np.sqrt(width)


@pytest.fixture(scope="module")
def rff() -> srf.RFF:
    return srf.RFF(n_features=64, bandwidth=1.0, seed=2).fit(ROWS)


def test_nystrom_sketch_of_rows_matches_numpy_moment_times_test_matrix(rff):
    sketch = srf.NystromSketch.from_rows(ROWS, rff, sketch_size=10, test_seed=7)
    Z = rff.transform(ROWS).astype(np.float64)
    omega = reference_test_matrix(7, 64, 10)
    np.testing.assert_array_equal(sketch.test_matrix, omega)
    # float32 features and tile products, float64 accumulation: ~1e-6 of the entries' scale
    scale = np.abs(Z.T @ Z).max() * np.abs(omega).max()
    np.testing.assert_allclose(sketch.range_sketch, Z.T @ (Z @ omega), rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-5)
    assert sketch.squared_norm_sum == pytest.approx((Z**2).sum(), rel=1e-6)
    assert sketch.count == 700 and sketch.sketch_size == 10


def test_nystrom_merge_is_commutative_associative_and_chunking_free(rff):
    a, b, c = (srf.NystromSketch.from_rows(part, rff, 12, 1) for part in np.split(ROWS, [123, 450]))
    left, right, swapped = a.merge(b).merge(c), a.merge(b.merge(c)), c.merge(a).merge(b)
    for other in (right, swapped):
        assert other.count == left.count == 700
        np.testing.assert_allclose(
            other.range_sketch, left.range_sketch, rtol=1e-12, atol=1e-12 * np.abs(left.range_sketch).max()
        )
        np.testing.assert_allclose(other.feature_sum, left.feature_sum, rtol=1e-12, atol=1e-12)
    whole = srf.NystromSketch.from_rows(ROWS, rff, 12, 1)
    np.testing.assert_allclose(
        left.range_sketch, whole.range_sketch, rtol=0, atol=1e-6 * np.abs(whole.range_sketch).max()
    )
    empty = srf.NystromSketch.empty(rff, 12, 1)
    assert empty.merge(a) == a and a.merge(empty) == a


def test_nystrom_merge_refuses_other_test_matrices_and_maps(rff):
    base = srf.NystromSketch.from_rows(ROWS[:50], rff, 12, 1)
    with pytest.raises(srf.SketchMismatchError, match=r"test_seed=1, sketch_size=12 vs test_seed=2, sketch_size=12"):
        base.merge(srf.NystromSketch.from_rows(ROWS[50:99], rff, 12, 2))
    with pytest.raises(srf.SketchMismatchError, match=r"test_seed=1, sketch_size=12 vs test_seed=1, sketch_size=16"):
        base.merge(srf.NystromSketch.from_rows(ROWS[50:99], rff, 16, 1))
    other_map = srf.RFF(n_features=64, bandwidth=2.0, seed=2).fit(ROWS)
    with pytest.raises(srf.SketchMismatchError, match=r"different feature maps.*bandwidth=1.0.*bandwidth=2.0"):
        base.merge(srf.NystromSketch.from_rows(ROWS[50:99], other_map, 12, 1))
    with pytest.raises(srf.SketchMismatchError, match="'nystrom' sketch with a 'mean' sketch"):
        base.merge(srf.sketch_array(ROWS[50:99], rff, moments=True))
    with pytest.raises(srf.InputError, match="sketch_size must be <= the map's output width D = 64. Got 65"):
        srf.NystromSketch.from_rows(ROWS, rff, 65, 1)


@pytest.mark.parametrize("suffix", ["", ".zip"])
def test_nystrom_sketch_save_load_round_trip(rff, tmp_path, suffix):
    sketch = srf.NystromSketch.from_rows(ROWS, rff, 9, 5)
    path = tmp_path / f"n.sketch{suffix}"
    sketch.save(path)
    loaded = srf.load(path)
    assert isinstance(loaded, srf.NystromSketch) and loaded == sketch
    assert loaded.test_seed == 5 and loaded.sketch_size == 9
    np.testing.assert_array_equal(loaded.test_matrix, reference_test_matrix(5, 64, 9))


def test_nystrom_file_with_edited_test_seed_is_refused(rff, tmp_path):
    path = tmp_path / "n.sketch"
    srf.NystromSketch.from_rows(ROWS, rff, 9, 5).save(path)
    document = json.loads((path / "zarr.json").read_text())
    document["attributes"]["test_matrix"]["seed"] = 6
    (path / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(srf.SketchFormatError, match="fingerprint"):
        srf.load(path)


# -- the reconstruction against exact eigenpairs, within Theorem 4.1 ---------------------------


def data_with_spectrum(spectrum: np.ndarray, n: int, seed: int) -> np.ndarray:
    """n rows whose population covariance is exactly V diag(spectrum) V^T, around a nonzero mean."""
    rng = np.random.default_rng(seed)
    width = spectrum.shape[0]
    centred = rng.normal(size=(n, width))
    centred -= centred.mean(axis=0)
    q, _ = np.linalg.qr(centred)  # orthonormal columns with zero mean
    rotation, _ = np.linalg.qr(rng.normal(size=(width, width)))
    return np.sqrt(n) * (q * np.sqrt(spectrum)) @ rotation.T + 0.3 * rng.normal(size=width)


D, N, K, L = 150, 300, 10, 24
SPECTRA = {
    # flat and slowly decaying spectra: the bound is loose but must still hold
    "flat": np.ones(D),
    "spikes-on-a-flat-tail": np.r_[np.full(K, 5.0), np.ones(D - K)],
    "power-0.5": np.arange(1, D + 1) ** -0.5,
    "power-1": 1.0 / np.arange(1, D + 1),
}


@pytest.mark.parametrize("name", sorted(SPECTRA))
def test_nystrom_eigenpairs_within_tropp_bound_on_adversarial_spectra(name):
    Z = data_with_spectrum(SPECTRA[name], N, seed=1)
    covariance = np.cov(Z.T, bias=True)
    exact = np.linalg.eigvalsh(covariance)[::-1]
    optimal = exact[K:].sum()  # ||C - [[C]]_k||_1
    feature_map = srf.RFF(n_features=D, bandwidth=1.0).fit(np.zeros((1, 2)))  # only its width matters here
    errors, left_out = [], []
    for seed in range(8):
        omega = reference_test_matrix(seed, D, L)
        sketch = srf.NystromSketch(feature_map, N, Z.sum(axis=0), float((Z**2).sum()), Z.T @ (Z @ omega), seed)
        values, vectors, trace = nystrom_eigenpairs(sketch, K)
        assert trace == pytest.approx(np.trace(covariance), rel=1e-12)
        # Nystrom never overestimates (C_hat <= C), so neither do its eigenvalues
        assert (values <= exact[:K] * (1 + 1e-9)).all(), (values, exact[:K])
        np.testing.assert_allclose(vectors.T @ vectors, np.eye(K), atol=1e-10)
        approximation = (vectors * values) @ vectors.T
        errors.append(np.abs(np.linalg.eigvalsh(covariance - approximation)).sum())
        left_out.append(trace - np.trace(vectors.T @ covariance @ vectors))
    bound = 1 + K / (L - K - 1)  # 1.77
    print(f"\n{name}: E||C - C_hat_k||_1 / optimal = {np.mean(errors) / optimal:.3f}, "
          f"left-out variance / optimal = {np.mean(left_out) / optimal:.3f}, bound {bound:.3f}")  # fmt: skip
    assert optimal * (1 - 1e-9) <= min(errors)  # nothing beats the exact truncation
    assert np.mean(errors) <= bound * optimal
    assert np.mean(left_out) <= bound * optimal


def test_kpca_low_rank_residual_within_bound_of_full_moment_on_digits():
    # E[R_hat_k(low-rank)] <= (1 + k / (l - k - 1)) R_hat_k(full); k = 10, l = 24: factor 1.77.
    X = load_digits().data[:600].astype(np.float64)
    k, sketch_size = 10, 24  # l in the bound above
    full = srf.KernelPCA(n_components=k, n_features=512, bandwidth=40.0, moments="full").fit(X)
    residuals = []
    for seed in range(3):
        low = srf.KernelPCA(
            n_components=k, moments="low-rank", sketch_size=sketch_size, seed=seed, feature_map=full.feature_map_
        ).fit(X)
        assert low.moments_ == "low-rank" and full.moments_ == "full"
        assert (low.eigenvalues_ <= full.eigenvalues_ * (1 + 1e-6)).all()
        assert low.total_variance_ == pytest.approx(full.total_variance_, rel=1e-6)  # float32 features
        residuals.append(low.residual_)
    print(f"\nR_hat_{k}: full {full.residual_:.2f}, low-rank {np.round(residuals, 2)}")
    assert full.residual_ <= min(residuals) and np.mean(residuals) <= (1 + k / (sketch_size - k - 1)) * full.residual_


def test_kpca_moments_auto_switches_above_256_mib_or_a_quarter_of_thread_memory():
    model = srf.KernelPCA()
    assert model._moments_kind(5792, memory_per_thread=64e9) == "full"  # 8 D^2 = 255.9 MiB
    assert model._moments_kind(5793, memory_per_thread=64e9) == "low-rank"
    assert model._moments_kind(2048, memory_per_thread=100e6) == "low-rank"  # 32 MiB > 25 MB
    assert srf.KernelPCA(moments="full")._moments_kind(10**5, 1e6) == "full"
    with pytest.raises(srf.InputError, match="moments must be 'auto', 'full' or 'low-rank'. Got 'lowrank'"):
        srf.KernelPCA(moments="lowrank").fit(ROWS)
    with pytest.raises(srf.InputError, match="sketch_size must exceed n_components"):
        srf.KernelPCA(n_components=5, sketch_size=5).fit(ROWS)


def test_nystrom_sketch_on_dask_matches_in_memory_sketch(rff):
    X = ROWS.astype(np.float32)
    lazy = srf.nystrom_sketch(da.from_array(X, chunks=(150, 3)), rff, sketch_size=12, seed=4)
    local = srf.NystromSketch.from_rows(X, rff, 12, 4)
    assert lazy.count == 700 and lazy.test_seed == 4
    np.testing.assert_allclose(
        lazy.range_sketch, local.range_sketch, rtol=0, atol=1e-6 * np.abs(local.range_sketch).max()
    )


def test_nystrom_sketch_on_process_cluster_matches_numpy(dask_client, rff):
    # Workers regenerate Omega from the spec: the result must equal numpy's Z^T Z Omega.
    X = ROWS.astype(np.float32)
    sketch = srf.nystrom_sketch(da.from_array(X, chunks=(200, 3)), rff, sketch_size=8, seed=9, client=dask_client)
    Z = rff.transform(X).astype(np.float64)
    expected = Z.T @ (Z @ reference_test_matrix(9, 64, 8))
    np.testing.assert_allclose(sketch.range_sketch, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_cli_kpca_low_rank_scores_bounded_by_exact_eigenvalues(capsys, tmp_zarr, tmp_path):
    X = np.random.default_rng(2).normal(size=(1500, 4)).astype(np.float32)
    source = tmp_zarr(X, 500, "x.zarr")
    out_path = tmp_path / "scores.zarr"
    code = main(["kpca", source, "--components", "3", "--features", "128", "--moments", "low-rank", "-o",
                 str(out_path), "--json"])  # fmt: skip
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["moments"] == "low-rank"
    scores = zarr.open_array(str(out_path), mode="r")[...].astype(np.float64)
    rff = srf.map_from_spec(payload["map"])
    exact = np.linalg.eigvalsh(np.cov(rff.transform(X).astype(np.float64).T, bias=True))[::-1]
    variances = scores.var(axis=0)
    # v^T C v >= v^T C_hat v = lambda_hat (C_hat <= C); Ky Fan: sum of k variances <= sum of top k eigenvalues
    assert (variances >= np.array(payload["explained_variance"]) * (1 - 1e-4)).all()
    assert variances.sum() <= exact[:3].sum() * (1 + 1e-4)


def test_merge_many_equals_the_pairwise_fold_bit_for_bit(rff):
    parts = np.array_split(ROWS, 5)
    for build in (
        lambda rows: srf.sketch_array(rows, rff, moments=True),
        lambda rows: srf.NystromSketch.from_rows(rows, rff, 8, 1),
    ):
        sketches = [build(part) for part in parts]
        fold = sketches[0]
        for other in sketches[1:]:
            fold = fold.merge(other)
        assert sketches[0].merge_many(sketches[1:]) == fold  # exact equality of every array and scalar


def test_kpca_transform_in_tiles_matches_numpy_projection():
    # 3 000 rows at D = 1024 span 12 tiles of 256 rows; the reference embeds all rows at once.
    X = np.random.default_rng(4).normal(size=(3000, 3))
    model = srf.KernelPCA(n_components=4, n_features=1024, bandwidth=1.0, moments="low-rank", sketch_size=32).fit(X)
    features = model.feature_map_.transform(X).astype(np.float64)
    expected = (features - model.mean_) @ model.components_.T
    np.testing.assert_allclose(model.transform(X), expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    lazy = model.transform(da.from_array(X, chunks=(1000, 3))).compute()
    np.testing.assert_allclose(lazy, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
