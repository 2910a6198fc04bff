"""Alarms that explain themselves: the alarm's DriftUpdate carries the witness of the window against the
reference and the window rows where it is largest; ``streamrff watch`` prints them."""

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


def test_alarm_update_carries_the_window_witness_and_its_top_rows():
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
    # numpy: the witness mean_w z(x) - mean_r z(x) on the window's rows, from the map's features
    feature_map = monitor.feature_map_
    Zw = feature_map.transform(stream[window_rows]).astype(np.float64)
    Zr = feature_map.transform(reference).astype(np.float64)
    values = Zw @ (Zw.mean(0) - Zr.mean(0))
    order = np.argsort(-values, kind="stable")[:10]
    np.testing.assert_array_equal(alarm.top_rows, window_rows[order])
    np.testing.assert_allclose(alarm.top_values, values[order], atol=1e-5)
    np.testing.assert_allclose(alarm.witness(stream[window_rows]), values, atol=1e-5)
    after = monitor.update(stream[start + 7 : start + 20])  # the alarm stands; later updates do not repeat it
    assert after.drift and after.witness is None


def test_watch_prints_the_alarm_rows_and_their_witness(tmp_path, capsys):
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
    assert "window rows most over-represented against the reference (witness): " in line
