"""DriftMonitor against independent references: exact MMD^2 from features, row-by-row updates, files, run lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

import streamrff as srf
from streamrff.drift import DriftMonitor, load_monitor
from streamrff.errors import InputError, NotFittedMapError, SketchFormatError


def exact_unbiased_mmd2(reference_features: np.ndarray, window_features: np.ndarray) -> float:
    """Unbiased MMD^2 from Gram matrices of float64 features (plain numpy, Gretton et al. 2012 eq. 3)."""
    zr, zw = reference_features.astype(np.float64), window_features.astype(np.float64)
    n, m = zr.shape[0], zw.shape[0]
    krr, kww, krw = zr @ zr.T, zw @ zw.T, zr @ zw.T
    return float(
        (krr.sum() - np.trace(krr)) / (n * (n - 1))
        + (kww.sum() - np.trace(kww)) / (m * (m - 1))
        - 2.0 * krw.sum() / (n * m)
    )


@pytest.fixture(scope="module")
def reference():
    return np.random.default_rng(0).normal(size=(600, 3))


@pytest.fixture(scope="module")
def fitted(reference):
    return DriftMonitor(window=20, ert=100, n_features=64, seed=3, n_streams=400).fit(reference)


def fresh(monitor: DriftMonitor) -> DriftMonitor:
    """An independent copy at the start of a run (same reference and thresholds)."""
    copy = clone(monitor)
    for name, value in vars(monitor).items():
        if name.endswith("_"):
            setattr(copy, name, value.copy() if isinstance(value, np.ndarray) else value)
    return copy.reset()


@pytest.mark.parametrize("variant", ["sincos", "cosphase"])
def test_drift_monitor_statistic_equals_exact_mmd2_of_window_features(reference, variant):
    rff = srf.RFF(n_features=64, bandwidth=1.3, variant=variant, seed=1)
    monitor = DriftMonitor(window=15, ert=100, feature_map=rff, n_streams=300).fit(reference)
    rng = np.random.default_rng(1)
    stream = np.vstack([rng.normal(size=(25, 3)), rng.normal(size=(25, 3)) + [0.8, 0.0, 0.0]])
    update = monitor.update(stream)
    feature_map = monitor.feature_map_
    reference_features = feature_map.transform(reference)
    stream_features = feature_map.transform(stream)
    assert np.isnan(update.statistic[0]) and update.threshold[0] == np.inf
    for row in range(1, stream.shape[0]):
        window = stream_features[max(0, row + 1 - 15) : row + 1]
        exact = exact_unbiased_mmd2(reference_features, window)
        # features are float32 in both (the sketch's and transform's may differ by float32 rounding)
        assert update.statistic[row] == pytest.approx(exact, abs=1e-6), row
    assert np.array_equal(update.threshold[1:15], monitor.thresholds_[1:15])
    assert np.all(update.threshold[15:] == monitor.thresholds_[15])


def test_drift_monitor_batch_update_equals_row_by_row(fitted):
    rng = np.random.default_rng(2)
    stream = np.vstack([rng.normal(size=(70, 3)), rng.normal(size=(60, 3)) + [1.5, 0.0, 0.0]])
    whole = fresh(fitted).update(stream)
    one_by_one = fresh(fitted)
    singles = [one_by_one.update(stream[row : row + 1]) for row in range(stream.shape[0])]
    uneven = fresh(fitted)
    cuts = [0, 1, 3, 30, 31, 77, 130]  # a batch longer than the window, single rows, an empty batch
    pieces = [uneven.update(stream[a:b]) for a, b in zip(cuts[:-1], cuts[1:])] + [uneven.update(stream[:0])]
    row_statistics = np.concatenate([update.statistic for update in singles])
    piece_statistics = np.concatenate([update.statistic for update in pieces])
    # A batch's projection is one BLAS product, whose float32 rounding may depend on the rows beside
    # it (OpenBLAS on AMD EPYC): batches agree to float32 rounding of the features, as chunkings do.
    np.testing.assert_allclose(row_statistics, whole.statistic, rtol=0, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(piece_statistics, whole.statistic, rtol=0, atol=1e-6, equal_nan=True)
    assert whole.drift and 70 <= whole.drift_at < 130
    assert singles[-1].drift_at == pieces[-1].drift_at == whole.drift_at
    assert singles[whole.drift_at - 1].drift is False and singles[whole.drift_at].drift is True
    # the sums are accumulated in row order whatever the batches; the features agree to float32 rounding
    np.testing.assert_allclose(one_by_one.window_sum_, uneven.window_sum_, rtol=0, atol=1e-6)
    assert one_by_one.window_squared_norm_sum_ == pytest.approx(uneven.window_squared_norm_sum_, rel=1e-6)
    np.testing.assert_allclose(one_by_one.window_features_, uneven.window_features_, rtol=0, atol=1e-6)
    # the window sum is the float64 sum of the last 20 rows' features (independent recomputation)
    last = fitted.feature_map_.transform(stream[-20:]).astype(np.float64)
    np.testing.assert_allclose(uneven.window_sum_, last.sum(axis=0), rtol=0, atol=1e-6)


def test_drift_monitor_saved_and_loaded_continues_identically(fitted, tmp_path):
    rng = np.random.default_rng(3)
    monitor = fresh(fitted)
    monitor.update(rng.normal(size=(33, 3)))
    monitor.save(tmp_path / "monitor")
    loaded = DriftMonitor.load(tmp_path / "monitor")
    assert loaded.get_params() == {**monitor.get_params(), "seed": 3}
    following = rng.normal(size=(45, 3)) + [1.0, 0.0, 0.0]
    expected, got = monitor.update(following), loaded.update(following)
    assert np.array_equal(expected.statistic, got.statistic)
    assert np.array_equal(expected.threshold, got.threshold)
    assert (expected.drift, expected.drift_at, expected.n_rows_seen) == (got.drift, got.drift_at, got.n_rows_seen)
    with pytest.raises(FileExistsError):
        loaded.save(tmp_path / "monitor")
    loaded.save(tmp_path / "monitor", overwrite=True)
    assert srf.load_monitor(tmp_path / "monitor").n_rows_seen_ == 78


def test_drift_monitor_load_rejects_corrupt_and_foreign_files(fitted, tmp_path):
    fitted.save(tmp_path / "monitor")
    features = zarr.open_array(tmp_path / "monitor" / "window_features", mode="r+")
    features[0, 0] = 0.5
    with pytest.raises(SketchFormatError, match="checksum"):
        load_monitor(tmp_path / "monitor")
    root = zarr.open_group(tmp_path / "monitor", mode="r+")
    root.attrs["run_length"] = 7
    with pytest.raises(SketchFormatError, match="digest"):
        load_monitor(tmp_path / "monitor")
    sketch = srf.sketch_array(np.ones((3, 3)), fitted.feature_map_)
    sketch.save(tmp_path / "sketch")
    with pytest.raises(SketchFormatError, match="streamrff.drift-monitor"):
        load_monitor(tmp_path / "sketch")
    with pytest.raises(SketchFormatError, match="No drift monitor"):
        load_monitor(tmp_path / "absent")
    with pytest.raises(InputError, match="local path"):
        fitted.save("s3://bucket/monitor")


def test_drift_monitor_detects_one_sd_shift_in_one_coordinate():
    rng = np.random.default_rng(4)
    monitor = DriftMonitor(window=100, ert=1000, n_features=256, seed=0).fit(rng.normal(size=(5000, 8)))
    delays = []
    for _ in range(5):
        calm = rng.normal(size=(300, 8))
        while monitor.reset().update(calm).drift:  # a false alarm before the change (~26% at ERT 1000): rerun
            calm = rng.normal(size=(300, 8))
        shifted = rng.normal(size=(600, 8))
        shifted[:, 0] += 1.0
        update = monitor.update(shifted)
        assert update.drift and update.drift_at >= monitor.n_rows_seen_ - 600
        delays.append(update.drift_at - (monitor.n_rows_seen_ - 600))
    assert np.median(delays) < 200


def run_lengths_under_no_change(monitor: DriftMonitor, rows: np.ndarray, batch: int) -> np.ndarray:
    """Run lengths to each false alarm, restarting the run at the row after each alarm."""
    lengths, position = [], 0
    monitor.reset()
    while position < rows.shape[0]:
        start_seen = monitor.n_rows_seen_
        update = monitor.update(rows[position : position + batch])
        if not update.drift:
            position += batch
            continue
        lengths.append(update.drift_at - (start_seen - monitor.run_length_ + update.statistic.shape[0]) + 1)
        position += update.drift_at + 1 - start_seen
        monitor.n_rows_seen_ = update.drift_at + 1  # the rows after the alarm are fed again to the new run
        monitor.reset()
    return np.array(lengths)


@pytest.mark.parametrize("draw", ["normal", "student_t3"])
def test_drift_monitor_mean_run_length_under_no_change_matches_ert(draw):
    rng = np.random.default_rng(5)

    def sample(n):
        return rng.normal(size=(n, 4)) if draw == "normal" else rng.standard_t(3, size=(n, 4))

    monitor = DriftMonitor(window=50, ert=200, n_features=128, seed=1).fit(sample(5000))
    lengths = run_lengths_under_no_change(monitor, sample(80_000), batch=100)
    # ~400 runs: the mean of a geometric(1/200) has a standard error of ~5%
    assert len(lengths) > 250
    assert 0.75 * 200 < lengths.mean() < 1.33 * 200
    # memoryless: alarms in the window's fill (steps 2..50) as often as a geometric run length predicts
    assert abs(np.mean(lengths <= 50) - (1 - (1 - 1 / 200) ** 49)) < 0.06


def test_drift_monitor_from_sketch_with_moments_and_from_zarr_source(tmp_path, reference):
    path = str(tmp_path / "reference.zarr")
    zarr.create_array(path, shape=reference.shape, chunks=(150, 3), dtype="float64")[...] = reference
    from_zarr = DriftMonitor(window=20, ert=100, n_features=64, seed=3, n_streams=400).fit(path)
    from_memory = DriftMonitor(window=20, ert=100, n_features=64, seed=3, n_streams=400).fit(reference)
    assert from_zarr.feature_map_.fingerprint == from_memory.feature_map_.fingerprint
    np.testing.assert_allclose(from_zarr.reference_sum_, from_memory.reference_sum_, rtol=1e-6)  # float32 chunking
    np.testing.assert_allclose(from_zarr.thresholds_, from_memory.thresholds_, rtol=1e-6)
    summary = srf.sketch(reference, from_memory.feature_map_, moments=True)
    from_sketch = DriftMonitor(window=20, ert=100, n_streams=400).fit(summary)
    assert from_sketch.simulation_ == "gaussian" and from_sketch.feature_map_ is summary.feature_map
    np.testing.assert_array_equal(from_sketch.reference_sum_, summary.feature_sum)
    rows = np.random.default_rng(6).normal(size=(40, 3))
    np.testing.assert_allclose(
        from_sketch.update(rows).statistic, fresh(from_memory).update(rows).statistic, atol=1e-9, equal_nan=True
    )
    with pytest.raises(InputError, match="moments=True"):
        DriftMonitor(window=20, ert=100).fit(srf.sketch(reference, from_memory.feature_map_))
    with pytest.raises(InputError, match="reference rows"):
        DriftMonitor(window=20, ert=100, simulation="resample").fit(summary)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"window": 1}, "window must be an integer >= 2"),
        ({"ert": 1}, "ert must be a finite number"),
        ({"simulation": "bootstrap"}, "simulation must be"),
        ({"n_streams": 3}, "n_streams must be an integer >= 10"),
        ({"bandwidth": -1.0}, "bandwidth must be"),
        ({"feature_map": "rff"}, "feature_map must be"),
    ],
)
def test_drift_monitor_rejects_bad_parameters(reference, params, message):
    with pytest.raises(InputError, match=message):
        DriftMonitor(**params).fit(reference)


def test_drift_monitor_rejects_bad_rows_and_unfitted_use(fitted):
    monitor = fresh(fitted)
    with pytest.raises(InputError, match="expecting 3 features"):
        monitor.update(np.zeros((4, 2)))
    with pytest.raises(InputError, match="NaN or inf"):
        monitor.update(np.array([[0.0, np.nan, 1.0]]))
    assert monitor.run_length_ == 0 and monitor.n_rows_seen_ == 0
    with pytest.raises(NotFittedMapError, match="not fitted"):
        DriftMonitor().update(np.zeros((1, 3)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_drift_monitor_compiled_check_rejects_non_finite_rows_like_the_general_path(fitted, dtype, bad):
    # C-contiguous float rows go straight to the compiled call, which checks them; a list takes check_rows
    monitor = fresh(fitted)
    monitor.update(np.random.default_rng(12).normal(size=(5, 3)))
    before = (monitor.window_sum_.copy(), monitor.window_features_.copy(), monitor.window_squared_norm_sum_)
    rows = [[0.5, 0.5, 0.5], [0.0, bad, 1.0], [1.0, 1.0, 1.0]]
    messages = []
    for given in (np.array(rows, dtype=dtype), rows):
        with pytest.raises(InputError) as error:
            monitor.update(given)
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "NaN or inf in 1 row(s) (rows 1)" in messages[0]
    with pytest.raises(InputError, match="expecting 3 features"):
        monitor.update(np.zeros((1, 4), dtype=dtype))
    assert (monitor.run_length_, monitor.n_rows_seen_, monitor.window_squared_norm_sum_) == (5, 5, before[2])
    assert np.array_equal(monitor.window_sum_, before[0]) and np.array_equal(monitor.window_features_, before[1])


def test_drift_monitor_rows_of_any_layout_and_dtype_give_the_same_statistics(fitted):
    rows = np.round(np.random.default_rng(13).normal(size=(30, 3)) * 4)  # integers, exact in every dtype
    expected = fresh(fitted).update(rows.astype(np.float32)).statistic
    read_only = rows.copy()
    read_only.flags.writeable = False
    strided = np.repeat(rows, 2, axis=0)[::2]
    for given in (rows, np.asfortranarray(rows), read_only, strided, rows.astype(np.int64), rows.tolist()):
        np.testing.assert_array_equal(fresh(fitted).update(given).statistic, expected)


def test_drift_monitor_reset_starts_a_new_run_with_the_same_thresholds(fitted):
    monitor = fresh(fitted)
    update = monitor.update(np.random.default_rng(7).normal(size=(60, 3)) + 2.0)
    assert update.drift
    thresholds = monitor.thresholds_.copy()
    monitor.reset()
    assert monitor.drift_at_ is None and monitor.run_length_ == 0 and monitor.n_rows_seen_ == 60
    assert not monitor.window_sum_.any() and np.array_equal(monitor.thresholds_, thresholds)
    after = monitor.update(np.random.default_rng(8).normal(size=(5, 3)))
    assert np.isnan(after.statistic[0]) and after.run_length == 5 and after.n_rows_seen == 65


def test_drift_monitor_batch_longer_than_a_tile_equals_small_batches(fitted):
    stream = np.random.default_rng(9).normal(size=(2600, 3))  # three of update's 1024-row tiles
    whole = fresh(fitted).update(stream)
    pieces = fresh(fitted)
    statistics = np.concatenate([pieces.update(stream[a : a + 97]).statistic for a in range(0, 2600, 97)])
    np.testing.assert_allclose(statistics, whole.statistic, rtol=0, atol=1e-12, equal_nan=True)
    last = fitted.feature_map_.transform(stream[-20:]).astype(np.float64)
    np.testing.assert_allclose(pieces.window_sum_, last.sum(axis=0), rtol=0, atol=1e-11)


@parametrize_with_checks([DriftMonitor(window=5, ert=20, n_features=16, n_streams=200, n_reference_rows=64)])
def test_drift_monitor_passes_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_drift_monitor_golden_v1_file_loads_and_continues_like_numpy():
    # tests/data/make_golden_v1_drift_monitor.py: reference golden_rows(), then 7 rows arange(21) / 8
    data = Path(__file__).parent / "data"
    reference = ((np.arange(36.0).reshape(12, 3) * 5) % 7 - 3) / 2
    seen = np.arange(21.0).reshape(7, 3) / 8
    monitor = load_monitor(data / "golden_v1_drift_monitor.zarr")
    assert (monitor.window_features_.shape, monitor.run_length_, monitor.n_rows_seen_) == ((5, 16), 7, 7)
    feature_map = monitor.feature_map_
    assert feature_map.spec["bandwidth"] == 1.5 and monitor.reference_count_ == 12
    ring = feature_map.transform(seen[2:])[[3, 4, 0, 1, 2]]  # run row g sits at g % 5
    np.testing.assert_array_equal(monitor.window_features_, ring)
    following = np.array([[0.5, -1.0, 0.25], [1.5, 0.0, -0.5]])
    statistic = monitor.update(following).statistic
    stream = np.vstack([seen, following])
    for row in range(2):
        window = feature_map.transform(stream[row + 3 : row + 8])
        assert statistic[row] == pytest.approx(exact_unbiased_mmd2(feature_map.transform(reference), window), abs=1e-6)


def test_drift_monitor_float32_and_float64_rows_agree(fitted):
    rows = np.random.default_rng(10).normal(size=(40, 3))
    as_float64 = fresh(fitted).update(rows).statistic
    as_float32 = fresh(fitted).update(rows.astype(np.float32)).statistic
    np.testing.assert_allclose(as_float32, as_float64, rtol=0, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize(
    "feature_map",
    [
        srf.RFF(n_features=64, bandwidth=1.3, structured=True, seed=2),
        srf.JL(srf.RFF(n_features=128, bandwidth=1.3, seed=2), n_components=32, seed=2),
    ],
    ids=["structured-rff", "jl"],
)
@pytest.mark.filterwarnings("ignore::streamrff.errors.BiasWarning")  # structured blocks on 3 columns: irrelevant here
def test_drift_monitor_other_maps_statistic_exact_and_batches_agree(reference, feature_map):
    # maps other than a dense RFF are embedded tile by tile before the compiled window step
    monitor = DriftMonitor(window=12, ert=100, feature_map=feature_map, n_streams=300).fit(reference)
    stream = np.random.default_rng(11).normal(size=(40, 3))
    whole = fresh(monitor).update(stream)
    one_by_one = fresh(monitor)
    singles = np.concatenate([one_by_one.update(stream[row : row + 1]).statistic for row in range(40)])
    np.testing.assert_allclose(singles, whole.statistic, rtol=0, atol=1e-6, equal_nan=True)  # float32 BLAS rounding
    reference_features = monitor.feature_map_.transform(reference)
    stream_features = monitor.feature_map_.transform(stream)
    for row in (1, 11, 39):
        exact = exact_unbiased_mmd2(reference_features, stream_features[max(0, row + 1 - 12) : row + 1])
        assert whole.statistic[row] == pytest.approx(exact, abs=1e-6), row
    np.testing.assert_allclose(
        one_by_one.window_sum_, stream_features[-12:].astype(np.float64).sum(axis=0), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("as_list", [False, True], ids=["ndarray", "list"])
def test_drift_monitor_skip_invalid_rows_equals_the_finite_rows_alone(reference, fitted, as_list):
    rng = np.random.default_rng(14)
    rows = rng.normal(size=(30, 3))
    rows[[4, 17], [1, 0]] = [np.nan, np.inf]
    monitor = fresh(fitted)
    monitor.update(rng.normal(size=(3, 3)))
    update = monitor.update(rows.tolist() if as_list else rows, on_invalid="skip")
    assert update.skipped.tolist() == [4, 17] and monitor.n_rows_skipped_ == 2
    assert update.statistic.shape == (28,) and update.n_rows_seen == 31
    # against numpy: the last statistic is the exact MMD^2 of the last 20 finite rows' features
    finite = np.delete(rows, [4, 17], axis=0)
    feature_map = monitor.feature_map_
    exact = exact_unbiased_mmd2(feature_map.transform(reference), feature_map.transform(finite[-20:]))
    assert update.statistic[-1] == pytest.approx(exact, abs=1e-6)


def test_drift_monitor_invalid_row_message_names_the_stream_row_and_changes_nothing(fitted):
    monitor = fresh(fitted)
    monitor.update(np.random.default_rng(15).normal(size=(40, 3)))
    rows = np.random.default_rng(16).normal(size=(10, 3))
    rows[6, 2] = np.nan
    before = monitor.window_sum_.copy()
    with pytest.raises(InputError, match=r"Row 6 of this batch is row 46 of the monitor's stream since fit"):
        monitor.update(rows)
    with pytest.raises(InputError, match="on_invalid must be 'raise' or 'skip'"):
        monitor.update(rows, on_invalid="drop")
    assert monitor.n_rows_seen_ == 40 and np.array_equal(monitor.window_sum_, before)


def test_drift_monitor_saves_its_cursor_and_skipped_count_in_format_version_2(fitted, tmp_path):
    monitor = fresh(fitted)
    rows = np.random.default_rng(17).normal(size=(25, 3))
    rows[3, 0] = np.nan
    monitor.update(rows, on_invalid="skip")
    monitor.source_cursor_ = {"version": 1, "next_row": 25, "source": "live.zarr"}
    monitor.save(tmp_path / "monitor")
    attrs = zarr.open_group(str(tmp_path / "monitor"), mode="r").attrs
    assert attrs["version"] == 2 and attrs["n_rows_skipped"] == 1
    loaded = load_monitor(tmp_path / "monitor")
    assert loaded.source_cursor_ == monitor.source_cursor_ and loaded.n_rows_skipped_ == 1


def test_drift_monitor_declaring_a_huge_window_without_chunks_is_refused_before_any_read(fitted, tmp_path):
    import json
    import shutil

    from streamrff._files.signed import _attributes_digest

    path = tmp_path / "monitor"
    fresh(fitted).save(path)
    # a window of 4e6 rows x 64 features declared, its chunk absent: zarr would read 1 GB of zeros
    attrs_path = path / "zarr.json"
    group = json.loads(attrs_path.read_text())
    attributes = group["attributes"]
    attributes["params"]["window"] = 4_000_000
    del attributes["attributes_digest"]
    attributes["attributes_digest"] = _attributes_digest(attributes)
    attrs_path.write_text(json.dumps(group))
    for name, shape in (("window_features", [4_000_000, 64]), ("window_squared_norms", [4_000_000]),
                        ("thresholds", [4_000_001])):  # fmt: skip
        metadata_path = path / name / "zarr.json"
        metadata = json.loads(metadata_path.read_text())
        metadata["shape"] = shape
        metadata["chunk_grid"]["configuration"]["chunk_shape"] = shape
        metadata_path.write_text(json.dumps(metadata))
        shutil.rmtree(path / name / "c", ignore_errors=True)
    with pytest.raises(SketchFormatError, match="has no stored chunk"):
        load_monitor(path)


def test_monitor_memory_check_counts_the_window_of_raw_rows():
    from streamrff._base.memory import check_monitor_fits

    # window 1 000, D = 64, 100 streams, d = 1 000: features 1 000 x (64 x 4 + 8) B, raw rows 1 000 x 1 000 x 8 B,
    # streams 100 x 2 x 1 000 x 12 B; 5e6 B hold all but the raw rows, and 468 rows of everything (10 664 B a row)
    per_row = 64 * 4 + 8 + 1_000 * 8 + 100 * 2 * 12
    check_monitor_fits(1_000, 64, 100, available=5e6)  # without raw rows (a sketch reference) it fits
    with pytest.raises(InputError) as refused:
        check_monitor_fits(1_000, 64, 100, available=5e6, n_columns=1_000)
    message = str(refused.value)
    assert "\n" not in message and "window (CLI --window) = 1,000 rows" in message
    assert f"largest window that fits is {int(5e6 // per_row):,}:" in message and "1,000 float64 columns" in message


def test_monitor_fit_refuses_a_window_whose_raw_rows_cannot_fit_before_any_read():
    import dask.array as da

    window, columns = 2_000, 10**8  # raw rows: 2 000 x 1e8 float64 = 1.5 TB; features and streams: ~1 MB
    reference = da.zeros((10, columns), chunks=(10, 10**6))
    monitor = DriftMonitor(window=window, ert=100, n_features=64, n_streams=10)
    with pytest.raises(InputError) as refused:
        monitor.fit(reference)
    need = window * (64 * 4 + 8 + columns * 8) + 10 * 2 * window * 12
    message = str(refused.value)
    assert "\n" not in message and "window (CLI --window) = 2,000 rows" in message
    assert f"needs about {need / 2**30:.1f} GiB" in message
