"""Anytime-valid two-sample testing by betting: :class:`SequentialTest` and :func:`combine_evidence`.

A fixed-n test is calibrated for one look; a p-value recomputed each time new rows
arrive is no longer a p-value. :class:`SequentialTest` follows Shekhar & Ramdas,
"Nonparametric two-sample testing by betting" (IEEE Trans. Inf. Theory 2024,
arXiv 2112.09162): a gambler bets on each new pair ``(x_t, y_t)`` against the
witness estimated from the pairs before it, so under the null (both samples from
one distribution, pairs i.i.d.) its wealth is a nonnegative martingale and, by
Ville's inequality, ``P(sup_t wealth_t >= 1/alpha) <= alpha``: the test may be
looked at after every row, and stopped whenever, with its level intact.

The witness needs only the feature sums of the past pairs, so the state is one
float64 vector of width D and four scalars (plus the rows of one sample still
waiting for a partner); the per-pair step is the compiled
:func:`streamrff._kernels.betting.bet_pairs`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._base.validation import check_rows, check_width
from .._kernels.betting import AGRAPA, bet_pairs
from ..engine import current_job_options, read_chunks_in_order
from ..errors import InputError
from ..maps import RFF, FeatureMap

__all__ = ["CombinedEvidence", "SequentialTest", "combine_evidence"]

#: Rows embedded at once (bounds the features held by one update at 2 x this many rows x D float32).
_TILE_ROWS = 8192
#: ``state_dict()``'s format name and version.
STATE_FORMAT = "streamrff.sequential-test"
STATE_VERSION = 2  # 2: aGRAPA bets (version 1 held the online Newton step's fraction and curvature)
#: ``[sum of payoffs, 1 + sum of squared payoffs, log wealth, running max of the log wealth]`` before any pair.
_INITIAL_SCALARS = (0.0, 1.0, 0.0, 0.0)


def _check_unit_norm_map(feature_map: Any) -> FeatureMap:
    """Return ``feature_map`` if it is a fitted sincos RFF (unit-norm features, so payoffs lie in [-1, 1])."""
    if not isinstance(feature_map, RFF) or feature_map.variant != "sincos":
        raise InputError(
            f"feature_map must be a fitted srf.RFF with variant='sincos' (unit-norm features bound the bets). "
            f"Got {type(feature_map).__name__}"
            f"{'' if not isinstance(feature_map, RFF) else f' with variant={feature_map.variant!r}'}; "
            "use srf.RFF(variant='sincos').fit(rows)."
        )
    feature_map._check_fitted()
    return feature_map


def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must be a number in (0, 1). Got {alpha!r}; use e.g. alpha=0.05.")
    return float(alpha)


class SequentialTest:
    """Anytime-valid kernel two-sample test by betting on an RFF witness (Shekhar & Ramdas 2024).

    Rows of samples A and B arrive in any batches; rows are paired in arrival
    order (the i-th row of A with the i-th row of B). For pair ``t`` the payoff is
    ``f_t = <w_{t-1}, z(x_t) - z(y_t)> / (2 ||w_{t-1}||)`` in [-1, 1], with the
    predictable witness ``w_{t-1}`` the mean feature difference of the earlier
    pairs (payoff 0 while it is 0); the betting fraction is aGRAPA's
    ``lambda_t = clip(sum_{s<t} f_s / (1 + sum_{s<t} f_s^2), 0, 0.8)`` (the Kelly
    fraction of the past payoffs), and the wealth is multiplied by
    ``1 + lambda_t f_t``. The test rejects once the wealth reaches ``1/alpha``.

    Parameters
    ----------
    feature_map : RFF
        A fitted :class:`~streamrff.RFF` with ``variant="sincos"`` (dense,
        orthogonal, structured or with categorical columns): its features have
        unit norm, which bounds the payoff. Other maps are refused.
    alpha : float, default=0.05
        Level: under the null, the probability that the test *ever* rejects is
        at most ``alpha``.

    Attributes
    ----------
    n_pairs : int
        Pairs bet on so far.
    log_wealth : float
        Log of the current wealth: the log e-value at this moment (valid at any
        stopping time; combine independent ones with :func:`combine_evidence`).
    rejected : bool
        Whether the wealth has reached ``1/alpha`` at some pair (it stays True).
    rejected_at : int or None
        The pairs consumed when the wealth first reached ``1/alpha``, else None.
    p_value : float
        Anytime-valid p-value ``min(1, 1 / max_t wealth_t)``: ``P(p_value <= a) <= a``
        for every ``a`` at every time, however often it is read.
    n_waiting : int
        Rows of one sample queued for a partner (see Notes).

    Notes
    -----
    **Pairing.** Rows of A and B are paired in arrival order. When one update
    brings more rows of one sample than of the other, the surplus waits in a
    queue and is paired with the other sample's next rows; the queue holds at
    most the running difference of the two row counts (so at most one batch when
    both samples arrive at the same rate, and grows when one sample arrives
    faster for good). Rows that never get a partner are never bet on.

    **Guarantee.** Valid when the pairs are i.i.d. under the null (in
    particular: the order in which rows arrive does not depend on their values).
    Rows that are dependent within a sample break the martingale property, and
    badly: the witness holds the previous row, which the next one resembles, so
    two independent AR(1) series with coefficient 0.5 and the same law are
    "rejected" in 71 of 100 streams within 20 000 pairs (d = 2, D = 32).

    **Betting.** Shekhar & Ramdas bet with the online Newton step (ONS), whose
    fraction stays in [0, 1/2]; a kernel witness pays little per pair (payoffs of size
    0.05-0.2), so the growth-optimal fraction ``E f / E f^2`` is above 1/2 and
    that bound binds. aGRAPA (Waudby-Smith & Ramdas 2023, "Estimating means of
    bounded random variables by betting", JRSS-B) follows the Kelly fraction up to 0.8 and needs about 0.7x
    the pairs of ONS to reject (the same 60 streams; 0.5 sd shift, d = 4: median 154 against 205
    pairs; sd x 1.2, d = 10: 212 against 295). Any predictable fraction in
    [0, 1) keeps the wealth a nonnegative martingale, so the level is the same.

    **Out-of-core rows.** :meth:`update_from` feeds it rows of dask arrays,
    xarray DataArrays or zarr arrays (local or ``s3://``), chunk by chunk
    through the engine's reader, never holding a sample whole.

    **State.** The sum of feature differences (float64, width D) and four
    scalars; :meth:`state_dict` and :meth:`from_state` save and resume it
    exactly: a resumed test fed the same batches continues bit for bit.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> rff = srf.RFF(n_features=128, bandwidth=2.0, seed=0).fit(rng.normal(size=(100, 2)))
    >>> test = srf.SequentialTest(rff, alpha=0.05)
    >>> for _ in range(10):
    ...     _ = test.update(rng.normal(size=(50, 2)), rng.normal(1.0, 1.0, size=(50, 2)))
    >>> test.rejected, test.rejected_at is not None and test.rejected_at < 500
    (True, True)
    >>> test.p_value < 0.05
    True
    """

    def __init__(self, feature_map: RFF, alpha: float = 0.05) -> None:
        self.feature_map = _check_unit_norm_map(feature_map)
        self.alpha = _check_alpha(alpha)
        self._witness_sum = np.zeros(feature_map.n_features_out_, np.float64)
        self._scalars = np.array(_INITIAL_SCALARS, np.float64)
        self.n_pairs = 0
        self.rejected_at: int | None = None
        self._waiting = np.zeros((0, feature_map.n_features_in_), np.float64)
        self._waiting_sample = "a"

    # -- results ------------------------------------------------------------------------------------
    @property
    def log_wealth(self) -> float:
        """Log of the current wealth (the log e-value now)."""
        return float(self._scalars[2])

    @property
    def rejected(self) -> bool:
        """Whether the wealth has reached ``1/alpha``."""
        return self.rejected_at is not None

    @property
    def p_value(self) -> float:
        """``min(1, 1 / running max of the wealth)``: valid at every time at once."""
        return float(min(1.0, math.exp(-float(self._scalars[3]))))

    @property
    def n_waiting(self) -> int:
        """Rows of one sample waiting for a partner."""
        return int(self._waiting.shape[0])

    # -- updating -----------------------------------------------------------------------------------
    def _rows(self, rows: Any, name: str) -> np.ndarray:
        width = self.feature_map.n_features_in_
        if rows is None or (not isinstance(rows, str) and hasattr(rows, "__len__") and len(rows) == 0):
            return np.zeros((0, width), np.float64)
        array = check_rows(rows, name, allow_empty=True)
        check_width(array, width, "SequentialTest", name)
        return array

    def update(self, a_rows: Any = None, b_rows: Any = None) -> SequentialTest:
        """Bet on the new pairs formed by ``a_rows`` and ``b_rows`` (either may be empty or None).

        Parameters
        ----------
        a_rows, b_rows : array-like of shape (n, n_features_in), or None
            New rows of sample A and of sample B, in arrival order.

        Returns
        -------
        SequentialTest
            ``self``.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0).fit(np.zeros((4, 2)))
        >>> test = srf.SequentialTest(rff).update(np.ones((3, 2)), np.zeros((1, 2)))
        >>> test.n_pairs, test.n_waiting
        (1, 2)
        """
        a = self._rows(a_rows, "a_rows")
        b = self._rows(b_rows, "b_rows")
        if self.n_waiting:
            if self._waiting_sample == "a":
                a = np.concatenate([self._waiting, a.astype(np.float64, copy=False)])
            else:
                b = np.concatenate([self._waiting, b.astype(np.float64, copy=False)])
        n = min(a.shape[0], b.shape[0])
        surplus, self._waiting_sample = (a[n:], "a") if a.shape[0] > n else (b[n:], "b")
        self._waiting = np.array(surplus, np.float64)
        log_threshold = math.log(1.0 / self.alpha)
        for start in range(0, n, _TILE_ROWS):
            stop = min(n, start + _TILE_ROWS)
            features_a = self.feature_map.transform(a[start:stop])
            features_b = self.feature_map.transform(b[start:stop])
            first = bet_pairs(
                features_a, features_b, self._witness_sum, self._scalars, log_threshold, strategy=AGRAPA
            )
            if self.rejected_at is None and first >= 0:
                self.rejected_at = self.n_pairs + first + 1
            self.n_pairs += stop - start
        return self

    def update_from(self, source_a: Any = None, source_b: Any = None, **options: Any) -> SequentialTest:
        """Bet on the rows of two out-of-core sources, read chunk by chunk in row order (either may be None).

        Each source is read through the engine's reader (:func:`streamrff.engine.read_chunks_in_order`:
        the chunks a sketch's tasks read, one at a time, on the job's client or locally) and fed to
        :meth:`update`, alternating between the samples so that neither runs ahead of the other by
        more than one chunk: the test holds at most one chunk of each sample and the queue of rows
        waiting for a partner. The result is that of :meth:`update` on the same rows in the same
        order, to float32 rounding of the features (a chunk is embedded as a whole, an update's rows
        in tiles). Rows of a source already fed are not remembered: call it with new rows (another
        source, or a region of the same one). The rows of the longer source beyond the other's
        count wait in the queue for partners (:attr:`n_waiting`), in memory, as with :meth:`update`:
        feed sources of about the same length (or regions of them), not one short and one huge.

        Parameters
        ----------
        source_a, source_b : ndarray, dask Array, xarray DataArray, str/PathLike or RowSource, or None
            New rows of sample A and of sample B, in order: anything :func:`streamrff.sketch` reads
            (a zarr array path or URL, ``s3://...`` with ``storage_options``).
        **options
            The job options (:class:`~streamrff.engine.JobOptions`) the reader uses: ``client``,
            ``storage_options``, ``sample_dim``, ``chunk_rows``, ``allow_missing_chunks``,
            ``retries``; default: those in force (:func:`~streamrff.job_options`).

        Returns
        -------
        SequentialTest
            ``self``.

        Raises
        ------
        InputError
            On rows of another width or with NaN/inf (the chunk is named), or bad options.
        SourceError
            On a missing path or array, or a zarr chunk absent from its store.

        Examples
        --------
        >>> import os, tempfile, numpy as np, zarr, streamrff as srf
        >>> rng = np.random.default_rng(0)
        >>> path = os.path.join(tempfile.mkdtemp(), "b.zarr")
        >>> _ = zarr.create_array(path, data=rng.normal(1.0, 1.0, size=(600, 2)).astype("float32"), chunks=(250, 2))
        >>> rff = srf.RFF(n_features=64, bandwidth=2.0, seed=0).fit(np.zeros((4, 2)))
        >>> test = srf.SequentialTest(rff).update_from(rng.normal(size=(600, 2)), path, chunk_rows=200)
        >>> test.n_pairs, test.rejected
        (600, True)
        """
        job = current_job_options(**options)
        sides = [(0, source_a, "source_a"), (1, source_b, "source_b")]
        readers = {side: read_chunks_in_order(source, job, name) for side, source, name in sides if source is not None}
        consumed = [0, 0]
        while readers:
            side = min(readers, key=lambda key: (consumed[key], key))  # the sample behind reads next
            try:
                start, rows = next(readers[side])
            except StopIteration:
                del readers[side]
                continue
            try:
                self.update(*((rows, None) if side == 0 else (None, rows)))
            except InputError as error:
                name = sides[side][2]
                raise InputError(f"{name}, rows {start:,}-{start + rows.shape[0] - 1:,}: {error}") from None
            consumed[side] += rows.shape[0]
        return self

    # -- state --------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The whole state as plain values and NumPy arrays (copies), for :meth:`from_state`.

        Returns
        -------
        dict
            ``format``, ``version``, ``fingerprint`` (of the map), ``alpha``, ``n_pairs``,
            ``rejected_at`` (-1 for None), ``witness_sum`` (float64, D), ``scalars``
            (float64: sum of payoffs, 1 + sum of squared payoffs, log wealth, its running max),
            ``waiting`` (float64 rows) and ``waiting_sample`` (``"a"`` or ``"b"``).

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0).fit(np.zeros((4, 2)))
        >>> state = srf.SequentialTest(rff).update(np.ones((2, 2)), np.zeros((2, 2))).state_dict()
        >>> state["n_pairs"], state["witness_sum"].shape
        (2, (16,))
        """
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "fingerprint": self.feature_map.fingerprint,
            "alpha": self.alpha,
            "n_pairs": self.n_pairs,
            "rejected_at": -1 if self.rejected_at is None else self.rejected_at,
            "witness_sum": self._witness_sum.copy(),
            "scalars": self._scalars.copy(),
            "waiting": self._waiting.copy(),
            "waiting_sample": self._waiting_sample,
        }

    @classmethod
    def from_state(cls, feature_map: RFF, state: dict[str, Any]) -> SequentialTest:
        """Rebuild a test from :meth:`state_dict` and the same fitted map; it continues bit for bit.

        Parameters
        ----------
        feature_map : RFF
            The map the state was made with (checked by fingerprint).
        state : dict
            What :meth:`state_dict` returned.

        Returns
        -------
        SequentialTest

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0).fit(np.zeros((4, 2)))
        >>> test = srf.SequentialTest(rff).update(np.ones((2, 2)), np.zeros((3, 2)))
        >>> again = srf.SequentialTest.from_state(rff, test.state_dict())
        >>> again.n_pairs, again.n_waiting, again.log_wealth == test.log_wealth
        (2, 1, True)
        """
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise InputError(f"state must be a dict from SequentialTest.state_dict() (format {STATE_FORMAT!r}).")
        if state.get("version") != STATE_VERSION:
            raise InputError(
                f"state has version {state.get('version')!r}; this streamrff reads {STATE_VERSION} (version 1 bet "
                "with the online Newton step: its wealth cannot continue under aGRAPA). Start a new test."
            )
        test = cls(feature_map, alpha=state["alpha"])
        if state["fingerprint"] != feature_map.fingerprint:
            raise InputError(
                "feature_map is not the map this state was made with (fingerprints differ); pass that map."
            )
        witness_sum = np.asarray(state["witness_sum"], np.float64)
        scalars = np.asarray(state["scalars"], np.float64)
        waiting = np.asarray(state["waiting"], np.float64)
        if (
            witness_sum.shape != test._witness_sum.shape
            or scalars.shape != (4,)
            or waiting.ndim != 2
            or waiting.shape[1] != feature_map.n_features_in_
            or state["waiting_sample"] not in ("a", "b")
        ):
            raise InputError("state has arrays of the wrong shape for this map; pass an unmodified state_dict().")
        test._witness_sum = witness_sum.copy()
        test._scalars = scalars.copy()
        test._waiting = waiting.copy()
        test._waiting_sample = state["waiting_sample"]
        test.n_pairs = int(state["n_pairs"])
        test.rejected_at = None if int(state["rejected_at"]) < 0 else int(state["rejected_at"])
        return test

    def __repr__(self) -> str:
        return (
            f"SequentialTest(n_pairs={self.n_pairs}, log_wealth={self.log_wealth:.4g}, "
            f"p_value={self.p_value:.4g}, rejected_at={self.rejected_at})"
        )


class CombinedEvidence(NamedTuple):
    """The product of independent e-values: its log and the p-value bound ``min(1, 1 / product)``.

    Examples
    --------
    >>> import streamrff as srf
    >>> srf.combine_evidence([1.0, 2.0]).log_e_value
    3.0
    """

    log_e_value: float
    p_value: float


def combine_evidence(log_e_values: Sequence[float]) -> CombinedEvidence:
    """Multiply independent e-values (add their logs) and bound the p-value by Markov's inequality.

    The product of e-values is an e-value when they are **independent** (e.g.
    sites that test disjoint data, or successive periods whose tests start from
    fresh state), or more generally when each is an e-value conditionally on
    the ones before it (a test started after the previous one stopped, on new
    rows). It is **not** valid for dependent looks at the same data: the log
    wealth of one :class:`SequentialTest` read at several times, or two tests
    on overlapping rows, must not be multiplied. Pass the current
    ``log_wealth`` of each test (an e-value at any stopping time), not the
    running maximum behind ``p_value``.

    Parameters
    ----------
    log_e_values : sequence of float
        Natural logs of the e-values (``-inf`` for an e-value of 0).

    Returns
    -------
    CombinedEvidence
        ``log_e_value`` (their sum) and ``p_value`` = ``min(1, exp(-log_e_value))``.

    Examples
    --------
    >>> import streamrff as srf
    >>> combined = srf.combine_evidence([2.0, 1.5, -0.5])
    >>> round(combined.log_e_value, 6), round(combined.p_value, 6)
    (3.0, 0.049787)
    """
    try:
        values = None if isinstance(log_e_values, str) else np.asarray(log_e_values, dtype=np.float64)
    except (TypeError, ValueError):
        values = None
    if values is None or values.ndim != 1 or values.size == 0:
        raise InputError(f"log_e_values must be a non-empty sequence of numbers. Got {log_e_values!r}.")
    if np.isnan(values).any() or np.isposinf(values).any():
        raise InputError(
            f"log_e_values must not hold NaN or +inf. Got {values.tolist()!r}; pass each test's finite log_wealth."
        )
    total = float(math.fsum(values.tolist())) if np.isfinite(values).all() else -math.inf
    return CombinedEvidence(total, float(min(1.0, math.exp(-total))) if total > -math.inf else 1.0)
