"""E-detector (e-CUSUM by betting) against an independent numpy reimplementation; exact resume."""

from __future__ import annotations

import math

import numpy as np
import pytest

import streamrff as srf
from streamrff.drift import EDetector
from streamrff.errors import InputError


def _numpy_e_cusum(features: np.ndarray, mean: np.ndarray, alpha: float) -> tuple[list[float], int | None]:
    """Shin, Ramdas & Rinaldo's e-CUSUM with the ONS fraction, written from the paper in plain numpy."""
    step = 2.0 / (2.0 - math.log(3.0))
    witness = np.zeros(mean.shape[0])
    fraction, curvature, log_m = 0.0, 1.0, 0.0
    path, alarm = [], None
    for t, z in enumerate(features.astype(np.float64)):
        d = z - mean
        norm = np.linalg.norm(witness)
        payoff = 0.0 if norm == 0 else float(np.clip(witness @ d / (2 * norm), -1, 1))
        log_m = max(log_m, 0.0) + math.log(1 + fraction * payoff)
        path.append(log_m)
        if alarm is None and log_m >= math.log(1 / alpha):
            alarm = t + 1
        gradient = payoff / (1 + fraction * payoff)
        curvature += gradient**2
        fraction = min(0.5, max(0.0, fraction + step * gradient / curvature))
        witness += d
    return path, alarm


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(3)
    rff = srf.RFF(n_features=32, bandwidth=2.0, seed=1).fit(np.zeros((4, 8)))
    mean = rff.transform(rng.normal(size=(4000, 8))).astype(np.float64).mean(axis=0)
    rows = rng.normal(size=(900, 8))
    rows[300:, 0] += 1.0  # 1 sd shift in one of 8 columns after row 300
    return rff, mean, rows


def test_e_detector_matches_numpy_and_alarms_after_change(setup):
    rff, mean, rows = setup
    path, alarm = _numpy_e_cusum(rff.transform(rows), mean, 0.01)
    detector = EDetector(rff, mean, alpha=0.01).update(rows)
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
