"""The compiled per-pair step of :class:`streamrff.twosample.SequentialTest`: testing by betting.

For pair ``t`` the difference of features ``d_t = z(x_t) - z(y_t)`` is bet on
against the predictable witness direction ``S_{t-1} = sum_{s<t} d_s`` (the
difference of the running means up to the factor ``1/(t-1)``, which the
normalisation cancels): the payoff ``f_t = <S_{t-1}, d_t> / (2 ||S_{t-1}||)``
lies in [-1, 1] for unit-norm features (0 while ``S = 0``), and the log wealth
grows by ``log(1 + lambda_t f_t)``. The betting fraction ``lambda_t`` is
predictable (a function of the payoffs before ``t``), chosen by one of two strategies:

- ``strategy = ONS``: the online Newton step of Shekhar & Ramdas (2024,
  Algorithm 1 after Cutkosky & Orabona 2018), ``lambda`` in [0, 1/2];
  ``scalars[:2]`` = ``[lambda, 1 + sum of squared gradients]``.
- ``strategy = AGRAPA``: approximate growth-rate adaptive betting (aGRAPA,
  Waudby-Smith & Ramdas 2023, JRSS-B): ``lambda_t = clip(sum_{s<t} f_s / (1 + sum_{s<t} f_s^2), 0, AGRAPA_CAP)``,
  the Kelly fraction ``mean / second moment`` of the past payoffs with one
  pseudo-payoff of second moment 1; ``scalars[:2]`` = ``[sum f, 1 + sum f^2]``.
  The payoffs of a kernel witness are small (of size 0.05-0.2), so the Kelly
  fraction exceeds 1/2 and ONS's bound binds: aGRAPA reaches the same wealth
  in about 0.7x the pairs (``benchmarks/bench_sequential.py``).

Any predictable fraction in [0, 1) keeps ``1 + lambda f > 0``, so the wealth is a
nonnegative (super)martingale under the null with either strategy. With ``floor = 0`` the log wealth is first raised to
0 before each step, which is the e-CUSUM recursion ``M_t = max(M_{t-1}, 1)
(1 + lambda_t f_t)`` of Shin, Ramdas & Rinaldo (arXiv 2203.03532), which
:class:`streamrff.drift.EDetector` computes with :func:`e_detector_rows` (one fixed mean vector, each
row's log e-value kept); ``floor = -inf`` is the plain wealth.
Pairs are taken in order, so any split of a stream into batches gives the same wealth bit for bit for the same features.
"""

from __future__ import annotations

import math

import numpy as np

from .compiled import jit

__all__ = ["AGRAPA", "AGRAPA_CAP", "ONS", "ONS_STEP", "bet_pairs", "e_detector_rows"]

#: The online Newton step's gain 2 / (2 - log 3) (exp-concavity constant of log(1 + lambda f) on [-1/2, 1/2]).
ONS_STEP = 2.0 / (2.0 - math.log(3.0))
#: ``bet_pairs(strategy=...)``: the online Newton step, or aGRAPA.
ONS, AGRAPA = 0, 1
#: aGRAPA's largest fraction: a payoff of -1 then keeps 1/5 of the wealth.
AGRAPA_CAP = 0.8


@jit(nogil=True, boundscheck=False)
def bet_pairs(
    features_a, features_b, witness_sum, scalars, log_threshold, floor=-math.inf, strategy=ONS
):  # pragma: no cover - compiled
    """Bet on every pair ``(features_a[k], features_b[k])`` in order; update ``witness_sum`` (float64, D) and
    ``scalars`` = ``[strategy state (2), log_wealth, max_log_wealth]`` in place (both strategies start from
    ``[0, 1, 0, 0]``); return the index of the first pair whose log wealth reaches ``log_threshold`` (-1 if
    none). ``floor`` (0 for the e-CUSUM) bounds the log wealth from below before each step."""
    fraction, curvature, log_wealth, max_log_wealth = scalars[0], scalars[1], scalars[2], scalars[3]
    first = -1
    width = witness_sum.shape[0]
    for k in range(features_a.shape[0]):
        dot = 0.0
        squared_norm = 0.0
        for j in range(width):
            difference = np.float64(features_a[k, j]) - np.float64(features_b[k, j])
            total = witness_sum[j]
            dot += total * difference
            squared_norm += total * total
            witness_sum[j] = total + difference
        payoff = 0.0
        if squared_norm > 0.0:
            payoff = min(1.0, max(-1.0, dot / (2.0 * math.sqrt(squared_norm))))
        if strategy == AGRAPA:  # fraction holds the payoffs' sum, curvature 1 + their squares' sum
            bet = min(AGRAPA_CAP, max(0.0, fraction / curvature))
            log_wealth = max(log_wealth, floor) + math.log1p(bet * payoff)
            fraction += payoff
            curvature += payoff * payoff
        else:
            log_wealth = max(log_wealth, floor) + math.log1p(fraction * payoff)
            gradient = payoff / (1.0 + fraction * payoff)
            curvature += gradient * gradient
            fraction = min(0.5, max(0.0, fraction + ONS_STEP * gradient / curvature))
        if log_wealth > max_log_wealth:
            max_log_wealth = log_wealth
        if first < 0 and log_wealth >= log_threshold:
            first = k
    scalars[0], scalars[1], scalars[2], scalars[3] = fraction, curvature, log_wealth, max_log_wealth
    return first


@jit(nogil=True, boundscheck=False)
def e_detector_rows(
    features, mean, witness_sum, scalars, log_threshold, path, shiryaev_roberts, ring, start
):  # pragma: no cover - compiled
    """The e-detector of :class:`streamrff.drift.EDetector` against one fixed vector ``mean`` (float64, D) for
    every row, with each row's log e-value written to ``path`` (float64, n). The e-CUSUM
    (``shiryaev_roberts`` False) is :func:`bet_pairs` with ``floor = 0``, bit for bit; the e-Shiryaev-Roberts
    procedure sums the e-processes started at every row instead of taking their max:
    ``R_t = (R_{t-1} + 1)(1 + lambda_t f_t)`` (``log R = -inf`` before any row). With a ``ring`` of W > 0
    rows (float32, (W, D); run row ``r`` in slot ``r % W``, ``start`` the run rows before this batch) the
    witness is the sum over the last W rows only: the row that leaves, ``ring[slot] - mean``, is subtracted
    as the new one is added, and the new row's features take its slot; a ring of 0 rows keeps every row.
    Returns the index of the first row whose log e-value reaches ``log_threshold`` (-1 if none)."""
    fraction, curvature, log_wealth, max_log_wealth = scalars[0], scalars[1], scalars[2], scalars[3]
    first = -1
    width = witness_sum.shape[0]
    window = ring.shape[0]
    for k in range(features.shape[0]):
        dot = 0.0
        squared_norm = 0.0
        slot = (start + k) % window if window > 0 else 0
        leaves = window > 0 and start + k >= window
        for j in range(width):
            difference = np.float64(features[k, j]) - mean[j]
            total = witness_sum[j]
            dot += total * difference
            squared_norm += total * total
            if leaves:
                witness_sum[j] = (total + difference) - (np.float64(ring[slot, j]) - mean[j])
            else:
                witness_sum[j] = total + difference
            if window > 0:
                ring[slot, j] = features[k, j]
        payoff = 0.0
        if squared_norm > 0.0:
            payoff = min(1.0, max(-1.0, dot / (2.0 * math.sqrt(squared_norm))))
        if shiryaev_roberts:  # log(exp(log R) + 1), exact at -inf
            raised = (
                log_wealth + math.log1p(math.exp(-log_wealth)) if log_wealth > 0.0 else math.log1p(math.exp(log_wealth))
            )
        else:
            raised = max(log_wealth, 0.0)
        log_wealth = raised + math.log1p(fraction * payoff)
        path[k] = log_wealth
        if log_wealth > max_log_wealth:
            max_log_wealth = log_wealth
        if first < 0 and log_wealth >= log_threshold:
            first = k
        gradient = payoff / (1.0 + fraction * payoff)
        curvature += gradient * gradient
        fraction = min(0.5, max(0.0, fraction + ONS_STEP * gradient / curvature))
    scalars[0], scalars[1], scalars[2], scalars[3] = fraction, curvature, log_wealth, max_log_wealth
    return first
