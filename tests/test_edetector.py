"""E-detector (e-CUSUM by betting) against an independent numpy reimplementation; exact resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import streamrff as srf
from streamrff.drift import EDetector
from streamrff.errors import InputError


def _numpy_e_cusum(
    features: np.ndarray, mean: np.ndarray, alpha: float, procedure: str = "cusum", window: int | None = None
) -> tuple[list[float], int | None]:
    """Shin, Ramdas & Rinaldo's e-CUSUM (or e-Shiryaev-Roberts) with the ONS fraction, from the paper in numpy;
    the witness sums ``z - mean`` over the ``window`` rows before each (all of them for None)."""
    step = 2.0 / (2.0 - math.log(3.0))
    differences = features.astype(np.float64) - mean
    fraction, curvature, log_m = 0.0, 1.0, 0.0 if procedure == "cusum" else -math.inf
    path, alarm = [], None
    for t, d in enumerate(differences):
        witness = differences[0 if window is None else max(0, t - window) : t].sum(axis=0)
        norm = np.linalg.norm(witness)
        payoff = 0.0 if norm == 0 else float(np.clip(witness @ d / (2 * norm), -1, 1))
        if procedure == "cusum":  # M_t = max(M_{t-1}, 1) (1 + lambda f)
            log_m = max(log_m, 0.0) + math.log(1 + fraction * payoff)
        else:  # R_t = (R_{t-1} + 1) (1 + lambda f)
            log_m = math.log(math.exp(log_m) + 1.0) + math.log(1 + fraction * payoff)
        path.append(log_m)
        if alarm is None and log_m >= math.log(1 / alpha):
            alarm = t + 1
        gradient = payoff / (1 + fraction * payoff)
        curvature += gradient**2
        fraction = min(0.5, max(0.0, fraction + step * gradient / curvature))
    return path, alarm


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(3)
    rff = srf.RFF(n_features=32, bandwidth=2.0, seed=1).fit(np.zeros((4, 8)))
    mean = rff.transform(rng.normal(size=(4000, 8))).astype(np.float64).mean(axis=0)
    rows = rng.normal(size=(900, 8))
    rows[300:, 0] += 1.0  # 1 sd shift in one of 8 columns after row 300
    return rff, mean, rows


@pytest.mark.parametrize(  # SR's run length is about 1/alpha
    "procedure, alpha, window", [("cusum", 0.01, None), ("sr", 1e-4, None), ("sr", 1e-4, 50)]
)
def test_e_detector_matches_numpy_and_alarms_after_change(setup, procedure, alpha, window):
    rff, mean, rows = setup
    path, alarm = _numpy_e_cusum(rff.transform(rows), mean, alpha, procedure, window)
    detector = EDetector(rff, mean, alpha=alpha, procedure=procedure, window=window).update(rows)
    assert detector.alarm_at == alarm
    assert alarm is not None and alarm > 300
    assert math.isclose(detector.log_e_value, path[-1], rel_tol=1e-9, abs_tol=1e-9)


def test_e_detector_resume_is_bit_identical(setup):
    rff, mean, rows = setup
    whole = EDetector(rff, mean, alpha=0.01).update(rows[:417]).update(rows[417:650]).update(rows[650:])
    unsplit = EDetector(rff, mean, alpha=0.01).update(rows)
    assert math.isclose(unsplit.log_e_value, whole.log_e_value, rel_tol=1e-6)
    first = EDetector(rff, mean, alpha=0.01).update(rows[:417])
    state = {k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in first.state_dict().items()}
    resumed = EDetector.from_state(rff, state).update(rows[417:650]).update(rows[650:])
    assert resumed.alarm_at == whole.alarm_at
    assert resumed.log_e_value == whole.log_e_value
    np.testing.assert_array_equal(resumed.state_dict()["witness_sum"], whole.state_dict()["witness_sum"])


def test_e_detector_refuses_bad_mean(setup):
    rff, _, _ = setup
    with pytest.raises(InputError, match="reference_mean"):
        EDetector(rff, np.zeros(3))


# DriftMonitor(method="e-detector"): the same e-CUSUM behind the monitor's API, its saved state and the CLI.


@pytest.fixture(scope="module")
def e_monitor():
    rng = np.random.default_rng(7)
    reference = rng.normal(size=(2000, 8)).astype(np.float32)
    monitor = srf.DriftMonitor(20, n_features=64, bandwidth=2.0, method="e-detector", alpha=1e-4).fit(reference)
    rows = rng.normal(size=(900, 8)).astype(np.float32)
    rows[300:, 0] += 1.0  # 1 sd shift in one of 8 columns after row 300
    return monitor, reference, rows


def _copy(monitor):
    import copy

    return copy.deepcopy(monitor)


@pytest.mark.parametrize("cuts", [[], [1, 2, 3, 299, 300, 301, 517, 899], list(range(1, 120)) + [450]])
def test_monitor_e_detector_matches_numpy_over_batchings(e_monitor, cuts):
    monitor, reference, rows = e_monitor
    feature_map = monitor.feature_map_
    mean = monitor.reference_sum_ / monitor.reference_count_  # the engine's sketch of the reference: its kernel mean
    np.testing.assert_allclose(mean, feature_map.transform(reference).astype(np.float64).mean(axis=0), atol=1e-6)
    parts = np.split(rows, cuts)
    # the same features: a batch's are the map's of that batch (equal to float32 rounding across batchings)
    features = np.concatenate([feature_map.transform(part) for part in parts])
    path, alarm = _numpy_e_cusum(features, mean, 1e-4, "sr", window=20)  # the monitor's: SR, the window's witness
    monitor = _copy(monitor)
    updates = [monitor.update(part) for part in parts]
    statistic = np.concatenate([update.statistic for update in updates])
    assert alarm is not None and alarm > 300
    assert monitor.drift_at_ == alarm - 1 and updates[-1].drift_at == alarm - 1  # 0-based stream row
    np.testing.assert_allclose(statistic, path, rtol=1e-9, atol=1e-12)
    assert math.isclose(monitor.detector_.log_e_value, path[-1], rel_tol=1e-9)
    assert all(np.all(update.threshold == math.log(1e4)) for update in updates)
    alarm_update = next(update for update in updates if update.top_rows is not None)
    assert alarm_update.columns[0] == 0  # the shifted column moved most in the window the alarm names
    assert set(alarm_update.top_rows) <= set(range(alarm_update.n_rows_seen - 20, alarm_update.n_rows_seen))


@pytest.mark.parametrize("stop", [250, 700])  # before the change, and after the alarm
def test_monitor_e_detector_save_load_is_bit_identical(e_monitor, tmp_path, stop):
    monitor, _, rows = e_monitor
    monitor = _copy(monitor)
    monitor.update(rows[:stop])
    monitor.save(tmp_path / "state")
    loaded = srf.load_monitor(tmp_path / "state")
    assert (loaded.method, loaded.alpha, loaded.drift_at_) == ("e-detector", 1e-4, monitor.drift_at_)
    for name, value in monitor.detector_.state_dict().items():
        np.testing.assert_array_equal(loaded.detector_.state_dict()[name], value)
    after, resumed = monitor.update(rows[stop:]), loaded.update(rows[stop:])
    np.testing.assert_array_equal(resumed.statistic, after.statistic)
    assert resumed.drift_at == after.drift_at and loaded.detector_.log_e_value == monitor.detector_.log_e_value


def test_monitor_e_detector_refuses_a_state_it_cannot_reach(e_monitor, tmp_path):
    from streamrff.errors import SketchFormatError
    from streamrff.formats.monitor import write_monitor_group

    monitor = _copy(e_monitor[0])
    monitor.update(e_monitor[2][:100])
    attrs, arrays = monitor._state()
    for name, value, match in [
        ("detector_scalars", np.array([0.9, 1.0, 0.0, 0.0]), "betting fraction"),
        ("detector_scalars", np.array([0.1, 2.0, 12.0, 12.0]), "log\\(1/alpha\\) exactly when"),
        ("detector_witness_sum", np.full(64, 1e3), "witness sum"),
        ("detector_scalars", None, "params.method"),
    ]:
        changed = {**arrays, name: value} if value is not None else {k: v for k, v in arrays.items() if k != name}
        path = tmp_path / f"{name}-{match[:4]}"
        write_monitor_group(path, attrs, changed)
        with pytest.raises(SketchFormatError, match=match):
            srf.load_monitor(path)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"method": "cusum"}, "method must be 'ert' or 'e-detector'"),
        ({"method": "e-detector", "alpha": 1.5}, "alpha must be a number in \\(0, 1\\)"),
        ({"alpha": 0.01}, "alpha goes with method='e-detector'"),
        ({"procedure": "sr"}, "procedure goes with method='e-detector'"),
        ({"method": "e-detector", "procedure": "page"}, "procedure must be 'sr', 'cusum' or None"),
        ({"method": "e-detector", "n_streams": 100}, "needs no calibration"),
        ({"method": "e-detector", "feature_map": srf.RFF(n_features=16, variant="cosphase")}, "variant='sincos'"),
    ],
)
def test_monitor_e_detector_validates_in_one_line(params, match):
    with pytest.raises(InputError, match=match) as error:
        srf.DriftMonitor(10, **params).fit(np.zeros((20, 2)))
    assert "\n" not in str(error.value)


def test_monitor_e_detector_alpha_defaults_to_one_over_ert_and_reset_starts_a_run(e_monitor):
    monitor, reference, rows = e_monitor
    other = srf.DriftMonitor(20, ert=1e4, n_features=64, bandwidth=2.0, method="e-detector").fit(reference)
    assert other.detector_.alpha == 1e-4 and other.n_streams_ == 0 and other.detector_.procedure == "sr"
    assert other.update(rows).drift_at == _copy(monitor).update(rows).drift_at
    other.reset()
    assert other.detector_.log_e_value == -math.inf and other.drift_at_ is None and other.run_length_ == 0


def _shifted_e_monitor():
    reference = np.random.default_rng(5).normal(size=(1000, 3)).astype(np.float32)
    reference[:, 0] += 0.15
    return srf.DriftMonitor(50, n_features=64, bandwidth=1.5, method="e-detector", alpha=0.001).fit(reference)


def _assert_same_detector(saved, expected):
    assert saved.method == "e-detector" and saved.n_rows_seen_ == expected.n_rows_seen_
    assert saved.drift_at_ == expected.drift_at_
    assert saved.detector_.log_e_value == expected.detector_.log_e_value
    for name, value in expected.detector_.state_dict().items():
        np.testing.assert_array_equal(saved.detector_.state_dict()[name], value)


def test_watch_e_detector_stops_and_restarts_in_process_bit_identical(tmp_path, capsys):
    """The fast case of the kill test below: three sessions of the same command line (--max-rows) in this process."""
    import zarr

    from streamrff.cli import main

    fitted = _shifted_e_monitor()
    rows = np.random.default_rng(11).normal(size=(3000, 3)).astype(np.float32)
    zarr.create_array(str(tmp_path / "live.zarr"), data=rows, chunks=(250, 3))
    fitted.save(tmp_path / "state")
    argv = ["watch", str(tmp_path / "live.zarr"), "--reference", str(tmp_path / "state"), "--save-monitor",
            str(tmp_path / "state"), "--overwrite", "--max-rows", "1000", "--json"]  # fmt: skip
    for _ in range(3):
        assert main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = _copy(fitted)
    for start in range(0, rows.shape[0], 250):  # uninterrupted: the same chunks
        expected.update(rows[start : start + 250])
    assert expected.drift_at_ is not None
    _assert_same_detector(srf.load_monitor(tmp_path / "state"), expected)
    summary = lines[-1]
    assert summary["method"] == "e-detector" and summary["log_e_value"] == expected.detector_.log_e_value
    assert summary["alpha"] == 0.001 and summary["drift_at_row"] == expected.drift_at_


@pytest.mark.slow
def test_watch_e_detector_kill_9_then_restart_is_bit_identical(tmp_path):
    """``watch --method e-detector`` killed -9 at a random moment and restarted with the same command line ends
    in the state (log e-value, betting state, alarm) of an uninterrupted run over the same chunks (the procedure
    of tests/test_watch_service.py, real processes). The reference is shifted so that the stream alarms."""
    from test_watch_service import CHUNK, kill_and_restart

    fitted = _shifted_e_monitor()
    saved, rows, lines = kill_and_restart(fitted, tmp_path, n_kills=1, n_chunks=12, pause=0.05)
    expected = _copy(fitted)
    for start in range(0, rows.shape[0], CHUNK):  # uninterrupted: the same chunks, in one process
        expected.update(rows[start : start + CHUNK])
    assert expected.drift_at_ is not None  # the decision is part of what must survive the kill
    _assert_same_detector(saved, expected)
    chunk_lines = [json.loads(line) for line in lines if line.startswith('{"event": "chunk"')]
    assert all("log_e_value" in line and line["log_e_value"] == line["statistic"] for line in chunk_lines)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--alpha", "0.01", "--window", "10", "--ert", "100"], "--alpha goes with --method e-detector"),
        (["--method", "e-detector"], "--method e-detector needs --alpha"),
        (["--method", "e-detector", "--alpha", "0.01", "--streams", "100"], "needs no calibration: --streams"),
        (["--method", "e-detector", "--alpha", "0.01", "--ert", "100"], "not both"),
    ],
)
def test_watch_e_detector_usage_errors_are_one_line(tmp_path, capsys, extra, message):
    import zarr

    from streamrff.cli import main

    path = str(tmp_path / "a.zarr")
    zarr.create_array(path, data=np.zeros((10, 2), np.float32), chunks=(5, 2))
    with pytest.raises(SystemExit) as stop:
        main(["watch", path, "--reference", path, *extra])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_watch_state_dir_fits_an_e_detector_once_and_resumes_it(tmp_path, capsys):
    """``watch --state DIR --method e-detector``: the first start fits and publishes (nothing to calibrate), the
    next starts resume; the state equals a monitor fitted the same way and fed the same chunks in one process."""
    import zarr

    from streamrff.cli import main

    reference = np.random.default_rng(3).normal(size=(2000, 3)).astype(np.float32)
    rows = np.random.default_rng(11).normal(size=(3000, 3)).astype(np.float32)
    rows[1500:, 0] += 1.0
    zarr.create_array(str(tmp_path / "ref.zarr"), data=reference, chunks=(500, 3))
    zarr.create_array(str(tmp_path / "live.zarr"), data=rows, chunks=(250, 3))
    argv = ["watch", str(tmp_path / "live.zarr"), "--state", str(tmp_path / "state"), "--reference",
            str(tmp_path / "ref.zarr"), "--method", "e-detector", "--alpha", "0.001", "--features", "32",
            "--bandwidth", "1.5", "--max-rows", "1000", "--json"]  # fmt: skip
    for _ in range(3):
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("fitting a new monitor") == 1
    expected = srf.DriftMonitor(100, 1000.0, n_features=32, bandwidth=1.5, method="e-detector", alpha=0.001)
    expected.fit(str(tmp_path / "ref.zarr"))
    for start in range(0, rows.shape[0], 250):
        expected.update(rows[start : start + 250])
    assert expected.drift_at_ is not None
    _assert_same_detector(srf.load_monitor(tmp_path / "state" / "monitor"), expected)
