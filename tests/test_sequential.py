"""The anytime-valid two-sample test by betting (issue #46) against a plain NumPy reimplementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError

ALPHA = 0.05


def _map(d=2, n_features=64, seed=0, **kwargs):
    return srf.RFF(n_features=n_features, bandwidth=float(np.sqrt(d)), seed=seed, **kwargs).fit(np.zeros((4, d)))


def reference_log_wealth(features_x, features_y):
    """Shekhar & Ramdas (2024) Algorithm 1 on explicit means, with the aGRAPA betting fraction (Waudby-Smith &
    Ramdas 2023): lambda_t = clip(mean / second moment of the past payoffs, one pseudo-payoff of square 1,
    to [0, 0.8]). Returns (log wealth, running max, first pair count at which wealth >= 1/alpha or None)."""
    x = features_x.astype(np.float64)
    y = features_y.astype(np.float64)
    payoffs, log_w, best, first = [], 0.0, 0.0, None
    for t in range(x.shape[0]):
        if t == 0:
            f = 0.0
        else:
            w = x[:t].mean(axis=0) - y[:t].mean(axis=0)
            norm = np.linalg.norm(w)
            f = 0.0 if norm == 0 else float(np.clip(w @ (x[t] - y[t]) / (2 * norm), -1, 1))
        past = np.array(payoffs)
        lam = min(0.8, max(0.0, past.sum() / (1.0 + (past**2).sum())))  # (mean) / (second moment), 1 + t pseudo-n
        log_w += math.log(1 + lam * f)
        best = max(best, log_w)
        if first is None and log_w >= math.log(1 / ALPHA):
            first = t + 1
        payoffs.append(f)
    return log_w, best, first


def _feed(test, a, b, cuts_a, cuts_b):
    for (sa, ea), (sb, eb) in zip(zip(cuts_a[:-1], cuts_a[1:]), zip(cuts_b[:-1], cuts_b[1:]), strict=True):
        test.update(a[sa:ea], b[sb:eb])
    return test


def test_unit_norm_features_for_accepted_maps():
    rows = np.random.default_rng(1).normal(size=(300, 3)) * 3
    for kwargs in ({}, {"orthogonal": True}, {"categorical": [2]}):
        features = _map(d=3, **kwargs).transform(rows).astype(np.float64)
        np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    "cuts",
    [
        ([0, 300], [0, 300]),
        ([0, 1, 2, 50, 300], [0, 120, 121, 121, 300]),
        ([0, 300, 300], [0, 0, 300]),  # all of A first, then all of B: A waits in the queue
    ],
)
def test_log_wealth_matches_numpy_reference(cuts):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(300, 2))
    b = rng.normal(0.4, 1.0, size=(300, 2))
    feature_map = _map()
    test = _feed(srf.SequentialTest(feature_map, alpha=ALPHA), a, b, *cuts)
    log_w, best, first = reference_log_wealth(feature_map.transform(a), feature_map.transform(b))
    assert test.n_pairs == 300 and test.n_waiting == 0
    assert test.log_wealth == pytest.approx(log_w, rel=1e-9, abs=1e-12)
    assert test.p_value == pytest.approx(min(1.0, math.exp(-best)), rel=1e-9)
    assert test.rejected_at == first
    assert test.rejected == (first is not None)


def test_batching_changes_nothing_beyond_float32_rounding():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2000, 4)), rng.normal(size=(1500, 4))
    feature_map = _map(d=4, n_features=128)
    whole = srf.SequentialTest(feature_map).update(a, b)
    pieces = srf.SequentialTest(feature_map)
    for step, start in enumerate(range(0, 2000, 37)):
        pieces.update(a[start : start + 37], b[23 * step : 23 * step + 23])
    pieces.update(None, b[23 * (step + 1) :])
    assert whole.n_pairs == pieces.n_pairs == 1500
    assert whole.n_waiting == pieces.n_waiting == 500
    assert pieces.log_wealth == pytest.approx(whole.log_wealth, rel=1e-6, abs=1e-6)


def test_type_one_error_under_no_change_fast():
    feature_map = _map(d=2, n_features=32)
    streams, rejections = 40, 0
    for seed in range(streams):
        rng = np.random.default_rng(100 + seed)
        test = srf.SequentialTest(feature_map, alpha=ALPHA)
        for _ in range(4):
            test.update(rng.normal(size=(250, 2)), rng.normal(size=(250, 2)))
        rejections += test.rejected
    standard_error = math.sqrt(ALPHA * (1 - ALPHA) / streams)
    assert rejections / streams <= ALPHA + 3 * standard_error


def test_one_sd_shift_is_rejected_within_a_few_hundred_pairs():
    rng = np.random.default_rng(5)
    test = srf.SequentialTest(_map(d=2))
    for _ in range(20):
        test.update(rng.normal(size=(25, 2)), rng.normal(size=(25, 2)) + np.array([1.0, 0.0]))
    assert test.rejected and test.rejected_at <= 400
    assert test.p_value <= ALPHA


def test_resume_from_state_continues_bit_for_bit():
    rng = np.random.default_rng(6)
    batches = [(rng.normal(size=(n, 3)), rng.normal(0.2, 1.0, size=(m, 3))) for n, m in [(40, 10), (5, 60), (30, 30)]]
    feature_map = _map(d=3)
    straight = srf.SequentialTest(feature_map)
    for a, b in batches:
        straight.update(a, b)
    first = srf.SequentialTest(feature_map).update(*batches[0])
    resumed = srf.SequentialTest.from_state(srf.map_from_spec(feature_map.spec), first.state_dict())
    for a, b in batches[1:]:
        resumed.update(a, b)
    assert resumed.state_dict()["scalars"].tobytes() == straight.state_dict()["scalars"].tobytes()
    assert resumed.state_dict()["witness_sum"].tobytes() == straight.state_dict()["witness_sum"].tobytes()
    assert (resumed.n_pairs, resumed.rejected_at, resumed.p_value) == (
        straight.n_pairs,
        straight.rejected_at,
        straight.p_value,
    )


def test_refuses_other_maps_and_bad_input():
    with pytest.raises(InputError, match="variant='sincos'"):
        srf.SequentialTest(srf.RFF(n_features=8, variant="cosphase", bandwidth=1.0).fit(np.zeros((2, 2))))
    with pytest.raises(InputError, match="variant='sincos'"):
        srf.SequentialTest(srf.JL(n_components=8).fit(np.zeros((2, 2))))
    with pytest.raises(InputError, match="alpha"):
        srf.SequentialTest(_map(), alpha=1.5)
    test = srf.SequentialTest(_map())
    assert test.update([], None).update(None, np.zeros((2, 2))).n_waiting == 2
    with pytest.raises(InputError):
        test.update(np.zeros((2, 3)), np.zeros((2, 2)))
    with pytest.raises(InputError):
        test.update(np.full((1, 2), np.nan), None)
    with pytest.raises(InputError, match="fingerprints"):
        srf.SequentialTest.from_state(_map(seed=1), test.state_dict())


def test_combine_evidence_sums_logs():
    combined = srf.combine_evidence([math.log(4.0), math.log(5.0)])
    assert combined.log_e_value == pytest.approx(math.log(20.0))
    assert combined.p_value == pytest.approx(1 / 20)
    assert srf.combine_evidence([-1.0]).p_value == 1.0
    assert srf.combine_evidence([-math.inf, 3.0]).p_value == 1.0
    for bad in ([], [float("nan")], "1", [[1.0]], ["x"]):
        with pytest.raises(InputError, match="log_e_values"):
            srf.combine_evidence(bad)


@pytest.mark.slow
@pytest.mark.parametrize("distribution", ["normal", "student-t3"])
def test_type_one_error_over_1000_streams(distribution):
    """Rejection at any time within 50 000 pairs (1e5 rows) of 1 000 null streams: <= alpha + 2 s.e."""
    feature_map = _map(d=2, n_features=32)
    streams, rejections = 1000, 0
    for seed in range(streams):
        rng = np.random.default_rng(10_000 + seed)
        draw = rng.normal if distribution == "normal" else lambda size: rng.standard_t(3, size=size)
        test = srf.SequentialTest(feature_map, alpha=ALPHA)
        test.update(draw(size=(50_000, 2)), draw(size=(50_000, 2)))
        rejections += test.rejected
    standard_error = math.sqrt(ALPHA * (1 - ALPHA) / streams)
    assert rejections / streams <= ALPHA + 2 * standard_error, f"{distribution}: {rejections}/{streams} rejected"


def test_update_from_zarr_dask_and_xarray_sources_equals_feeding_the_rows_in_memory(tmp_zarr):
    """Rows fed chunk by chunk through the engine's reader: the wealth of the same rows fed in memory."""
    import dask.array as da
    import xarray as xr

    rng = np.random.default_rng(8)
    a = rng.normal(size=(1300, 3)).astype(np.float32)
    b = (rng.normal(size=(1100, 3)) + [0.4, 0.0, 0.0]).astype(np.float32)
    feature_map = _map(d=3, n_features=64)
    log_w, best, first = reference_log_wealth(feature_map.transform(a[:1100]), feature_map.transform(b))
    in_chunks = srf.SequentialTest(feature_map)  # the same chunks fed in memory, in the reader's order
    for start in range(0, 1300, 250):
        in_chunks.update(a[start : start + 250], b[start : start + 250] if start < 1100 else None)
    path_a, path_b = tmp_zarr(a, 250, "a.zarr"), tmp_zarr(b, 250, "b.zarr")
    sources = {
        "zarr": (path_a, path_b, {}),
        "dask and xarray": (
            da.from_array(a, chunks=(250, 3)),
            xr.DataArray(b.T, dims=("feature", "sample")).chunk({"sample": 250}),
            {"sample_dim": "sample"},
        ),
    }
    for name, (source_a, source_b, options) in sources.items():
        test = srf.SequentialTest(feature_map).update_from(source_a, source_b, **options)
        assert (test.n_pairs, test.n_waiting) == (1100, 200), name
        assert test.log_wealth == pytest.approx(in_chunks.log_wealth, rel=1e-9, abs=1e-12), name
        assert test.rejected_at == in_chunks.rejected_at, name
        assert test.log_wealth == pytest.approx(log_w, rel=1e-6, abs=1e-9), name  # numpy, features of all rows
        assert test.p_value == pytest.approx(min(1.0, math.exp(-best)), rel=1e-6), name
        assert test.rejected_at == first, name


def test_update_from_s3_with_storage_options(s3_server, s3_bucket):
    import zarr

    rng = np.random.default_rng(9)
    a, b = rng.normal(size=(900, 2)).astype(np.float32), rng.normal(0.5, 1.0, size=(900, 2)).astype(np.float32)
    for name, rows in (("a", a), ("b", b)):
        store = zarr.storage.FsspecStore.from_url(
            f"s3://{s3_bucket}/{name}.zarr", storage_options=s3_server.storage_options, read_only=False
        )
        zarr.create_array(store=store, data=rows, chunks=(250, 2), zarr_format=3)
    feature_map = _map()
    test = srf.SequentialTest(feature_map).update_from(
        f"s3://{s3_bucket}/a.zarr", f"s3://{s3_bucket}/b.zarr", storage_options=s3_server.storage_options
    )
    log_w, _, first = reference_log_wealth(feature_map.transform(a), feature_map.transform(b))
    assert test.n_pairs == 900 and test.log_wealth == pytest.approx(log_w, rel=1e-6, abs=1e-9)
    assert test.rejected_at == first
    with pytest.raises(InputError, match="source_b, rows 0-1: "):
        srf.SequentialTest(feature_map).update_from(None, np.full((2, 2), np.nan))
