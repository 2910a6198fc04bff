"""Alarms that explain themselves: the alarm's DriftUpdate carries the witness of the window against the
reference, the window rows where it is largest and the per-column standardised mean difference of the
window's raw rows; ``streamrff watch`` prints them."""

from __future__ import annotations

import json

import numpy as np
import zarr

import streamrff as srf
from streamrff.cli import main


def _stream(seed: int, before: int = 400, after: int = 600, width: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    reference = rng.normal(size=(3000, width))
    stream = np.vstack([rng.normal(size=(before, width)), rng.normal(1.5, 1.0, size=(after, width))])
    return reference, stream


def test_alarm_update_carries_the_window_witness_and_its_top_rows_by_kernel_mean_ratio():
    reference, stream = _stream(0)
    monitor = srf.DriftMonitor(window=100, ert=5000, n_features=256, n_streams=2000).fit(reference)
    alarm = None
    for start in range(0, stream.shape[0], 7):  # batches that do not line up with the window
        update = monitor.update(stream[start : start + 7])
        if update.witness is not None:
            alarm = update
            break
        assert update.top_rows is None  # no alarm, no explanation
    assert alarm is not None and alarm.drift_at >= 400
    seen = alarm.n_rows_seen
    window_rows = np.arange(seen - 100, seen)
    assert set(alarm.top_rows.tolist()) <= set(window_rows.tolist()) and alarm.top_rows.size == 10
    assert np.all(np.diff(alarm.top_values) <= 0) and alarm.top_rows[0] >= 400
    # numpy, from the map's features of the window's rows and the reference's: the ratio of the window's kernel
    # mean at each row (the row itself left out) to the reference's, its denominator floored at 1e-3
    feature_map = monitor.feature_map_
    Zw = feature_map.transform(stream[window_rows]).astype(np.float64)
    Zr = feature_map.transform(reference).astype(np.float64)
    leave_one_out = (Zw @ Zw.T).sum(axis=1) - np.einsum("ij,ij->i", Zw, Zw)
    ratios = leave_one_out / 99 / np.maximum(Zw @ Zr.mean(0), 1e-3)
    order = np.argsort(-ratios, kind="stable")[:10]
    np.testing.assert_array_equal(alarm.top_rows, window_rows[order])
    np.testing.assert_allclose(alarm.top_values, ratios[order], rtol=1e-5)
    np.testing.assert_allclose(alarm.witness(stream[window_rows]), Zw @ (Zw.mean(0) - Zr.mean(0)), atol=1e-5)
    after = monitor.update(stream[start + 7 : start + 20])  # the alarm stands; later updates do not repeat it
    assert after.drift and after.witness is None


def test_watch_prints_the_alarm_rows_and_their_ratio(tmp_path, capsys):
    reference, stream = _stream(1, before=1000, after=500)
    zarr.create_array(str(tmp_path / "ref.zarr"), data=reference.astype(np.float32), chunks=(1000, 3))
    zarr.create_array(str(tmp_path / "stream.zarr"), data=stream.astype(np.float32), chunks=(250, 3))
    argv = ["watch", str(tmp_path / "stream.zarr"), "--reference", str(tmp_path / "ref.zarr"), "--window", "100",
            "--ert", "5000", "--features", "128", "--streams", "2000"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (alarm,) = [event for event in events if event["event"] == "alarm"]
    assert len(alarm["top_rows"]) == 10 and alarm["top_values"] == sorted(alarm["top_values"], reverse=True)
    assert alarm["top_rows_source"] == alarm["top_rows"]  # no row skipped: the monitor's rows are the source's
    assert min(alarm["top_rows_source"]) >= 1000 - 100 and alarm["top_rows_source"][0] >= 1000
    assert main(argv) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ALARM")]
    assert "window rows most over-represented against the reference (kernel-mean ratio): " in line


def _column_z(reference: np.ndarray, window: np.ndarray) -> np.ndarray:
    """numpy: (mean_window - mean_reference) / sqrt(var_reference / n_window), ddof=1."""
    return (window.mean(0) - reference.mean(0)) / np.sqrt(reference.var(0, ddof=1) / window.shape[0])


def _shifted_column_stream(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    reference = rng.normal(size=(2000, 8)) * np.arange(1, 9)  # columns of different scales
    stream = rng.normal(size=(700, 8)) * np.arange(1, 9)
    stream[300:, 3] += 4.0  # a 1-sd shift of column 3 (sd 4)
    return reference, stream


def _first_alarm(monitor: srf.DriftMonitor, stream: np.ndarray, start: int, batch: int):
    for first in range(start, stream.shape[0], batch):
        update = monitor.update(stream[first : first + batch])
        if update.witness is not None:
            return update
        assert update.column_statistics is None and update.columns is None  # no alarm, no explanation
    raise AssertionError("no alarm")


def test_alarm_names_the_shifted_column_by_its_standardised_mean_difference(tmp_path):
    reference, stream = _shifted_column_stream(2)
    monitor = srf.DriftMonitor(window=80, ert=2000, n_features=128, n_streams=1000).fit(reference)
    np.testing.assert_allclose(monitor.reference_column_mean_, reference.mean(0), rtol=1e-12)
    np.testing.assert_allclose(monitor.reference_column_variance_, reference.var(0, ddof=1), rtol=1e-12)
    monitor.update(stream[:150])
    monitor.save(tmp_path / "monitor")  # mid-stream, the window's raw rows full
    alarm = _first_alarm(monitor, stream, 150, 9)
    assert alarm.drift_at >= 300
    seen = alarm.n_rows_seen
    expected = _column_z(reference, stream[seen - 80 : seen])  # the window: the last 80 stream rows
    np.testing.assert_allclose(alarm.column_statistics, expected, rtol=1e-10, atol=1e-12)
    assert alarm.columns[0] == 3 and sorted(alarm.columns.tolist()) == list(range(8))
    assert np.all(np.diff(np.abs(alarm.column_statistics[alarm.columns])) <= 0)
    loaded = srf.load_monitor(tmp_path / "monitor")  # the reloaded monitor reaches the same alarm, exactly
    again = _first_alarm(loaded, stream, 150, 9)
    assert again.drift_at == alarm.drift_at
    np.testing.assert_array_equal(again.column_statistics, alarm.column_statistics)
    np.testing.assert_array_equal(again.columns, alarm.columns)


def test_column_statistics_follow_skips_and_resets():
    reference, stream = _shifted_column_stream(3)
    monitor = srf.DriftMonitor(window=60, ert=2000, n_features=128, n_streams=1000).fit(reference)
    rows = stream[:100].copy()
    rows[[10, 70], 2] = np.nan  # skipped: the raw ring buffer keeps the same rows as the features'
    monitor.update(rows, on_invalid="skip")
    kept = np.delete(stream[:100], [10, 70], axis=0)  # run rows 0..97; run row r in slot r % 60
    np.testing.assert_array_equal(monitor.window_rows_[np.arange(38, 98) % 60], kept[38:])
    monitor.reset()  # an empty window: the raw rows start again with the run
    assert not monitor.window_rows_.any()
    monitor.update(stream[100:290].astype(np.float32))  # float32 rows: kept as given
    alarm = _first_alarm(monitor, stream, 290, 1)  # one row at a time
    run = alarm.run_length
    window = stream[100 : 100 + run][-60:].copy()
    window[: max(0, 190 - (run - 60))] = window[: max(0, 190 - (run - 60))].astype(np.float32)
    np.testing.assert_allclose(alarm.column_statistics, _column_z(reference, window), rtol=1e-10, atol=1e-12)
    assert alarm.columns[0] == 3


def test_a_sketch_reference_has_no_column_statistics(tmp_path):
    reference, stream = _shifted_column_stream(4)
    summary = srf.sketch(reference, srf.RFF(128, bandwidth=4.0, seed=0).fit(reference), moments=True)
    summary.save(tmp_path / "ref.sketch")
    monitor = srf.DriftMonitor(window=80, ert=2000, n_streams=1000).fit(srf.load(tmp_path / "ref.sketch"))
    assert monitor.reference_column_mean_ is None and monitor.window_rows_ is None
    monitor.save(tmp_path / "monitor")
    assert not (tmp_path / "monitor" / "window_rows").exists()  # the optional arrays are absent
    for candidate in (monitor, srf.load_monitor(tmp_path / "monitor")):
        alarm = _first_alarm(candidate, stream, 0, 50)
        assert alarm.witness is not None and alarm.column_statistics is None and alarm.columns is None


def test_watch_alarm_line_names_the_shifted_column(tmp_path, capsys):
    reference, stream = _shifted_column_stream(5)
    zarr.create_array(str(tmp_path / "ref.zarr"), data=reference, chunks=(500, 8))
    zarr.create_array(str(tmp_path / "stream.zarr"), data=stream, chunks=(100, 8))
    argv = ["watch", str(tmp_path / "stream.zarr"), "--reference", str(tmp_path / "ref.zarr"), "--window", "80",
            "--ert", "2000", "--features", "128", "--streams", "1000"]  # fmt: skip
    from_zarr = srf.DriftMonitor(window=80, ert=2000, n_features=64, n_streams=100).fit(str(tmp_path / "ref.zarr"))
    np.testing.assert_allclose(from_zarr.reference_column_mean_, reference.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(from_zarr.reference_column_variance_, reference.var(0, ddof=1), rtol=1e-10)
    assert main([*argv, "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (alarm,) = [event for event in events if event["event"] == "alarm"]
    assert alarm["columns"][0] == 3 and sorted(alarm["columns"]) == list(range(8))
    assert len(alarm["column_statistics"]) == 8 and alarm["column_statistics"][3] > 3
    assert main(argv) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ALARM")]
    assert "; columns whose window mean moved most (standardised): 3 (z +" in line


def test_monitor_file_column_arrays_are_checked_before_any_read(tmp_path):
    import shutil

    import pytest

    from streamrff._files.signed import _attributes_digest
    from streamrff.errors import SketchFormatError

    rng = np.random.default_rng(6)
    monitor = srf.DriftMonitor(window=20, ert=100, n_features=32, n_streams=100).fit(rng.normal(size=(300, 4)))
    monitor.update(rng.normal(size=(30, 4)))

    def saved(name: str) -> object:
        path = tmp_path / name
        monitor.save(path)
        return path

    path = saved("bigger")  # window_rows declared as 4e6 x 4, its chunk absent: refused before reading zeros
    metadata = json.loads((path / "window_rows" / "zarr.json").read_text())
    metadata["shape"] = metadata["chunk_grid"]["configuration"]["chunk_shape"] = [4_000_000, 4]
    (path / "window_rows" / "zarr.json").write_text(json.dumps(metadata))
    shutil.rmtree(path / "window_rows" / "c")
    with pytest.raises(SketchFormatError, match="'window_rows' declares shape"):
        srf.load_monitor(path)
    path = saved("missing-chunk")
    shutil.rmtree(path / "reference_column_mean" / "c")
    with pytest.raises(SketchFormatError, match="'reference_column_mean' of shape .* has no stored chunk"):
        srf.load_monitor(path)
    path = saved("partial")  # one of the three dropped, the digest made consistent again
    group = json.loads((path / "zarr.json").read_text())
    attributes = group["attributes"]
    del attributes["checksums"]["reference_column_variance"], attributes["attributes_digest"]
    attributes["attributes_digest"] = _attributes_digest(attributes)
    (path / "zarr.json").write_text(json.dumps(group))
    with pytest.raises(SketchFormatError, match="come together"):
        srf.load_monitor(path)


def test_kernel_mean_ratio_against_numpy_and_refuses_bad_input():
    import pytest

    from streamrff.errors import InputError

    rng = np.random.default_rng(7)
    feature_map = srf.RFF(n_features=64, bandwidth=1.5, seed=0).fit(np.zeros((2, 2)))
    Zw = feature_map.transform(rng.normal(0.5, 1.0, size=(30, 2))).astype(np.float64)
    Zr = feature_map.transform(rng.normal(size=(500, 2))).astype(np.float64)
    Zo = feature_map.transform(rng.normal(size=(5, 2)) * 6).astype(np.float64)  # far rows: the floor matters
    K, Kr = Zw @ Zw.T, Zw @ Zr.T  # explicit kernel matrices of the features
    expected = (K.sum(1) - np.diag(K)) / 29 / np.maximum(Kr.mean(1), 1e-3)
    ratios = srf.drift.kernel_mean_ratio(Zw, Zw.mean(0), Zr.mean(0), window_count=30)
    np.testing.assert_allclose(ratios, expected, rtol=1e-10)
    outside = srf.drift.kernel_mean_ratio(Zo, Zw.mean(0), Zr.mean(0))
    np.testing.assert_allclose(outside, (Zo @ Zw.T).mean(1) / np.maximum((Zo @ Zr.T).mean(1), 1e-3), rtol=1e-10)
    with pytest.raises(InputError, match="window_count"):
        srf.drift.kernel_mean_ratio(Zw, Zw.mean(0), Zr.mean(0), window_count=1)
    with pytest.raises(InputError, match="reference_mean"):
        srf.drift.kernel_mean_ratio(Zw, Zw.mean(0), Zr.mean(0)[:3])
    with pytest.raises(InputError, match="features"):
        srf.drift.kernel_mean_ratio(Zw[0], Zw.mean(0), Zr.mean(0))
