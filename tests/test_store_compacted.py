"""The store's tests and series over ranges holding compacted (coarse) buckets kept at a prefix of the features
(issue #45): real zarr stores; references are numpy unbiased MMD^2 of the rows' features (float64) of the map
of the common prefix, over every relabelling of the units."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError

ROWS, RATIO, REPS = 10, 2, 20  # fine buckets of 10 rows, compacted by 2; 20 independent calibration segments
FINE = REPS * 8  # fine buckets [0, FINE) are compacted (80 coarse buckets), [FINE, 2 FINE) stay fine


def _rff(n_features: int) -> srf.RFF:
    return srf.RFF(n_features=n_features, bandwidth=1.0, seed=1).fit(np.zeros((1, 3)))


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    X = np.random.default_rng(21).normal(size=(2 * FINE * ROWS, 3)).astype(np.float32)
    store = srf.SketchStore.create(tmp_path_factory.mktemp("c") / "s.store", _rff(32), bucket=ROWS)
    store.append(X)
    done = store.compact(older_than=FINE * ROWS, to=RATIO * ROWS, features=16)
    assert len(done["compacted"]) == FINE // RATIO
    return store, X


def _features(X: np.ndarray, n_features: int) -> np.ndarray:
    return np.asarray(_rff(n_features).transform(X.astype(np.float64)), dtype=np.float64)


def _mmd2_u(P: np.ndarray, Q: np.ndarray) -> float:
    """Unbiased MMD^2 from explicit features: mean off-diagonal kernel within each sample, minus twice across."""
    n, m = len(P), len(Q)
    kxx, kyy = P @ P.T, Q @ Q.T
    return float(
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
        - 2 * (P @ Q.T).mean()
    )  # fmt: skip


def _every_relabelling(units: list[np.ndarray], k: int) -> np.ndarray:
    """MMD^2_u of every labelling with ``k`` units in X (the off-diagonal kernel sum as ||sum||^2 - sum of norms)."""
    sums = np.array([unit.sum(axis=0) for unit in units])
    norms = np.array([np.einsum("nd,nd->", unit, unit) for unit in units])
    counts = np.array([len(unit) for unit in units], dtype=np.float64)
    found = []
    for chosen in itertools.combinations(range(len(units)), k):
        x = np.isin(np.arange(len(units)), chosen)
        s_x, s_y, n_x, n_y = sums[x].sum(0), sums[~x].sum(0), counts[x].sum(), counts[~x].sum()
        found.append(
            (s_x @ s_x - norms[x].sum()) / (n_x * (n_x - 1)) + (s_y @ s_y - norms[~x].sum()) / (n_y * (n_y - 1))
            - 2 * (s_x @ s_y) / (n_x * n_y)
        )  # fmt: skip
    return np.array(found)


def test_mixed_ranges_are_permuted_in_units_of_the_compacted_span_at_the_common_prefix(compacted):
    store, X = compacted
    span = RATIO * ROWS
    a, b = (0, 4 * span), (FINE * ROWS, FINE * ROWS + 4 * span)  # 4 compacted buckets against 8 fine ones
    result = store.test(a, b, n_permutations=199)
    assert (result.n_x, result.n_y, result.n_features) == (80, 80, 16)
    F = _features(X, 16)
    assert result.statistic == pytest.approx(_mmd2_u(F[slice(*a)], F[slice(*b)]), rel=1e-5, abs=1e-7)
    units = [F[lo : lo + span] for lo in (*range(*a, span), *range(*b, span))]  # 8 units of one span
    exact = _every_relabelling(units, 4)
    assert len(result.null) == len(exact) == 70  # all labellings of the 8 units, not of 12 buckets
    np.testing.assert_allclose(np.sort(result.null), np.sort(exact), rtol=1e-5, atol=1e-7)
    assert result.p_value == pytest.approx(np.mean(exact >= result.statistic - 1e-6 * np.abs(exact).max()))


def test_compacted_only_and_fine_only_ranges_keep_their_own_buckets_and_map(compacted):
    store, X = compacted
    coarse = store.test((0, 80), (80, 160), n_permutations=199)  # 4 compacted buckets a side: 16 features
    F = _features(X, 16)
    assert coarse.n_features == 16 and len(coarse.null) == 70
    assert coarse.statistic == pytest.approx(_mmd2_u(F[:80], F[80:160]), rel=1e-5, abs=1e-7)
    lo = FINE * ROWS
    fine = store.test((lo, lo + 40), (lo + 40, lo + 80), n_permutations=199)  # 4 fine buckets a side: 32 features
    G = _features(X, 32)
    assert fine.n_features == 32 and len(fine.null) == 70
    assert fine.statistic == pytest.approx(_mmd2_u(G[lo : lo + 40], G[lo + 40 : lo + 80]), rel=1e-5, abs=1e-7)
    exact = _every_relabelling([G[r : r + ROWS] for r in range(lo, lo + 80, ROWS)], 4)
    np.testing.assert_allclose(np.sort(fine.null), np.sort(exact), rtol=1e-5, atol=1e-7)


def test_ranges_that_cut_a_compacted_span_are_refused_naming_the_fix(compacted):
    store, _ = compacted
    lo = FINE * ROWS
    with pytest.raises(InputError, match=r"mixes compacted buckets .* do not fill one .*compacted buckets' edges"):
        store.test((0, 80), (lo, lo + 90))  # 9 fine buckets: the last compacted span is half filled
    with pytest.raises(InputError, match=r"cuts compacted bucket 0 .*edges"):
        store.test((10, 90), (lo, lo + 80))


def test_series_over_a_compacted_reference_tests_each_window_in_compacted_units(compacted):
    store, X = compacted
    lo = FINE * ROWS
    series = store.series(reference=(0, lo), every=RATIO, start=lo, stop=lo + 100, n_permutations=999)
    assert list(series.first_row) == list(range(lo, lo + 100, RATIO * ROWS))
    F = _features(X, 16)
    span = RATIO * ROWS
    reference_units = [F[r : r + span] for r in range(0, lo, span)]
    for window, statistic, p_value in zip(series.first_row, series.statistic, series.p_value):
        assert statistic == pytest.approx(_mmd2_u(F[window : window + span], F[:lo]), rel=1e-5, abs=1e-7)
        exact = _every_relabelling([F[window : window + span], *reference_units], 1)  # 81 labellings
        assert p_value == pytest.approx(np.mean(exact >= statistic - 1e-6 * np.abs(exact).max()))
    with pytest.raises(InputError, match="do not fill one"):
        store.series(reference=(0, lo), every=1, start=lo, stop=lo + 100)


def test_mixed_permutation_test_rejects_near_five_percent_under_no_change(compacted):
    """A fast check of calibration: 20 disjoint segments (4 compacted buckets against 8 fine ones); the
    200-repetition figure is benchmarks/bench_store_compacted_calibration.py's."""
    store, _ = compacted
    p_values = []
    for rep in range(REPS):
        a = (rep * 8 * ROWS, (rep + 1) * 8 * ROWS)
        b = (FINE * ROWS + a[0], FINE * ROWS + a[1])
        p_values.append(store.test(a, b, n_permutations=199, seed=rep).p_value)
    p_values = np.array(p_values)
    assert np.mean(p_values <= 0.05) <= 3 / REPS  # P(more than 3 of 20 at 5%) < 2%
    assert 0.25 < np.mean(p_values) < 0.75  # uniform p-values: mean 1/2


def test_store_cli_test_over_a_mixed_range_reports_the_common_prefix(compacted, cli_main):
    store, X = compacted
    lo = FINE * ROWS
    result = cli_main("store", "test", store.path, "--a", "0:80", "--b", f"{lo}:{lo + 80}", "--json")
    assert result.code == 0, result.err
    found = json.loads(result.out)
    assert found["n_features"] == 16 and (found["n_x"], found["n_y"]) == (80, 80)
    F = _features(X, 16)
    assert found["statistic"] == pytest.approx(_mmd2_u(F[:80], F[lo : lo + 80]), rel=1e-5, abs=1e-7)
    text = cli_main("store", "test", store.path, "--a", "0:80", "--b", f"{lo}:{lo + 90}")
    assert text.code == 1 and "do not fill one" in text.err and "Traceback" not in text.err
