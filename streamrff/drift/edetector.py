"""E-detector drift alarms: an e-CUSUM that bets each new row against the reference's kernel mean.

Shin, Ramdas & Rinaldo (arXiv 2203.03532): under no change the e-CUSUM
``M_t = max(M_{t-1}, 1) (1 + lambda_t f_t)`` with predictable bets has an
average run length to a false alarm of at least ``1/alpha`` when it alarms at
``M_t >= 1/alpha``, with no simulation. Row ``t`` pays
``f_t = <S_{t-1}, z(x_t) - mu> / (2 ||S_{t-1}||)`` in [-1, 1], where ``mu`` is
the reference's mean feature vector (from its sketch) and ``S_{t-1}`` the sum of
``z(x_s) - mu`` over the rows before it (the predictable plug-in witness); the
fraction follows the online Newton step. The step is the compiled
:func:`streamrff._kernels.betting.bet_pairs` with ``floor = 0``. The guarantee
treats ``mu`` as the true reference mean: a finite reference of n rows adds an
error of order ``1/sqrt(n)`` to every payoff.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._base.validation import check_rows, check_width
from .._kernels.betting import bet_pairs
from ..errors import InputError
from ..maps import RFF

__all__ = ["EDetector"]

#: Rows embedded at once.
_TILE_ROWS = 8192
#: ``[betting fraction, ONS curvature sum, log e-detector, running max]`` before any row.
_INITIAL_SCALARS = (0.0, 1.0, 0.0, 0.0)


class EDetector:
    """E-CUSUM change detector against a reference kernel mean (Shin, Ramdas & Rinaldo 2022).

    Parameters
    ----------
    feature_map : RFF
        A fitted sincos random Fourier feature map (unit-norm features).
    reference_mean : array-like of shape (n_features_out,)
        The reference's mean feature vector (feature sum over count of its sketch).
    alpha : float, default=0.05
        Alarm when the e-detector reaches ``1/alpha``; the average run length to a
        false alarm is then at least ``1/alpha`` rows.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.drift.edetector import EDetector
    >>> rng = np.random.default_rng(0)
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
    >>> mean = rff.transform(rng.normal(size=(2000, 2))).mean(axis=0)
    >>> detector = EDetector(rff, mean, alpha=0.01).update(rng.normal(3.0, 1.0, size=(200, 2)))
    >>> detector.alarm_at is not None
    True
    """

    def __init__(self, feature_map: RFF, reference_mean: Any, alpha: float = 0.05) -> None:
        from ..twosample.sequential import _check_alpha, _check_unit_norm_map

        self.feature_map = _check_unit_norm_map(feature_map)
        mean = np.asarray(reference_mean, np.float64)
        width = int(np.prod(self.feature_map.transform(np.zeros((1, self.feature_map.n_features_in_))).shape[1:]))
        if mean.shape != (width,) or not np.all(np.isfinite(mean)):
            raise InputError(
                f"reference_mean must be a finite vector of length {width}, got shape {mean.shape}; "
                "pass the reference sketch's feature sum divided by its count"
            )
        self.reference_mean = mean
        self.alpha = _check_alpha(alpha)
        self.n_rows = 0
        self.alarm_at: int | None = None
        self._witness_sum = np.zeros(width, np.float64)
        self._scalars = np.array(_INITIAL_SCALARS, np.float64)

    @property
    def log_e_value(self) -> float:
        """The log of the e-detector after the last row (0 before any row)."""
        return float(self._scalars[2])

    def update(self, rows: Any) -> EDetector:
        """Bet on each new row in order; set ``alarm_at`` (1-based row count) at the first alarm.

        Parameters
        ----------
        rows : array-like of shape (n, n_features_in)
            New rows of the stream.

        Returns
        -------
        EDetector
            ``self``.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> from streamrff.drift.edetector import EDetector
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
        >>> EDetector(rff, rff.transform(np.zeros((1, 2)))[0]).update(np.zeros((3, 2))).n_rows
        3
        """
        array = check_rows(rows, "rows", allow_empty=True)
        check_width(array, self.feature_map.n_features_in_, "EDetector", "rows")
        log_threshold = math.log(1.0 / self.alpha)
        for start in range(0, array.shape[0], _TILE_ROWS):
            stop = min(array.shape[0], start + _TILE_ROWS)
            features = self.feature_map.transform(array[start:stop])
            mean = np.broadcast_to(self.reference_mean, (stop - start, self.reference_mean.shape[0]))
            first = bet_pairs(
                features, np.ascontiguousarray(mean), self._witness_sum, self._scalars, log_threshold, 0.0
            )
            if self.alarm_at is None and first >= 0:
                self.alarm_at = self.n_rows + first + 1
            self.n_rows += stop - start
        return self

    def state_dict(self) -> dict[str, Any]:
        """The detector's state: plain numbers and float64 arrays (round-trips bit for bit with :meth:`from_state`).

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> from streamrff.drift.edetector import EDetector
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
        >>> sorted(EDetector(rff, np.zeros(16)).state_dict())
        ['alarm_at', 'alpha', 'n_rows', 'reference_mean', 'scalars', 'witness_sum']
        """
        return {
            "alpha": self.alpha,
            "n_rows": self.n_rows,
            "alarm_at": -1 if self.alarm_at is None else self.alarm_at,
            "reference_mean": self.reference_mean.copy(),
            "witness_sum": self._witness_sum.copy(),
            "scalars": self._scalars.copy(),
        }

    @classmethod
    def from_state(cls, feature_map: RFF, state: dict[str, Any]) -> EDetector:
        """Rebuild a detector from :meth:`state_dict` and its feature map.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> from streamrff.drift.edetector import EDetector
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
        >>> EDetector.from_state(rff, EDetector(rff, np.zeros(16)).state_dict()).n_rows
        0
        """
        detector = cls(feature_map, state["reference_mean"], state["alpha"])
        witness = np.asarray(state["witness_sum"], np.float64)
        scalars = np.asarray(state["scalars"], np.float64)
        if witness.shape != detector._witness_sum.shape or scalars.shape != (4,):
            raise InputError("state has witness_sum or scalars of the wrong shape; pass EDetector.state_dict()")
        detector._witness_sum = witness.copy()
        detector._scalars = scalars.copy()
        detector.n_rows = int(state["n_rows"])
        detector.alarm_at = None if int(state["alarm_at"]) < 0 else int(state["alarm_at"])
        return detector
