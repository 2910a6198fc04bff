"""Kernel two-sample tests from mergeable sketches: the NumPy core.

The statistic is the unbiased MMD^2 of Gretton et al. (2012) computed from
feature sums (Sutherland & Schneider 2015, sec. 3.3; :func:`streamrff.mmd2`).
Its null distribution comes from one of three sources:

``"permutation"`` (default)
    The one-pass exact permutation test. X and Y are pooled with global row
    indices ``0..n_x-1`` (X) and ``n_x..N-1`` (Y). For ``b = 1..B`` a keyed
    pseudo-random bijection ``pi_b`` of ``[0, N)`` (a Feistel network with
    cycle-walking, :func:`permutation_indices`) sends row ``i`` to the permuted
    X sample when ``pi_b(i) < n_x``. Each chunk adds
    ``P_b = sum_i [pi_b(i) < n_x] z_i`` for its own rows, so the B permuted
    statistics need no second pass and the :class:`TwoSampleSketch` merges like
    any sum.
``"spectral"``
    Weighted chi-square null from the pooled feature covariance (Gretton et al.
    2009), from two :class:`~streamrff.MeanSketch` with moments.
``"hotelling"``
    Hotelling's T^2 on the mean feature difference with the chi-square null
    of Chwialkowski et al. (2015), from the same moment sketches.
``"aggregated"``
    L bandwidths at once: one map per bandwidth, all under the same B keyed
    permutations, so a statistic built from all L MMD^2 values (the maximum
    of standardised statistics, MMD-FUSE's soft maximum, MMDAgg's minimum
    p-value) is again an exact permutation test in one pass
    (:class:`AggregatedTwoSampleSketch`, :func:`aggregated_permutation_test`).

The per-chunk kernel :func:`two_sample_sketch_of_chunk` is pure: the Dask
engine maps it over chunks and reduces the partials with ``merge``.

Modules: :mod:`~streamrff._base.permutations` (the keyed permutations),
:mod:`~streamrff.twosample.aggregated` (the bandwidth grid and the aggregated statistics),
:mod:`~streamrff.sketches.twosample` (the sketch and its chunk kernel),
:mod:`~streamrff.twosample.nulls` (the statistic, null distributions and
p-values), :mod:`~streamrff.twosample.result` (:class:`TwoSampleResult`),
:mod:`~streamrff.twosample.api` (the tests), :mod:`~streamrff.twosample.effect`
(the interval of MMD^2), :mod:`~streamrff.twosample.witness` (the witness and
its top rows) and :mod:`~streamrff.twosample.marginal` (one test per column) and
:mod:`~streamrff.twosample.sequential` (the anytime-valid test by betting). Everything is importable from
``streamrff.twosample``. An analysis: it imports the engine, the sketches (its own kind is
:mod:`streamrff.sketches.twosample`), the maps, the layers below and :mod:`streamrff.kpca` beside
it; never a surface.
"""

from __future__ import annotations

from .._base.permutations import FEISTEL_ROUNDS, PERMUTATION_SCHEME, permutation_indices
from ..sketches import twosample as _sketch
from ..sketches.twosample import *  # noqa: F403 - the sketches, their chunk kernels and size limit: the sketch module's __all__, listed once
from .aggregated import (
    AGGREGATIONS,
    AUTO_BANDWIDTHS,
    DEFAULT_AGGREGATION,
    aggregate,
    auto_bandwidths,
    kernel_grid,
    questions_p_value,
    shared_map_seed,
    table_maps,
)
from .api import aggregated_permutation_test, bandwidth_maps, mmd_test, permutation_test, two_sample_test
from .effect import EffectSize, mmd2_variance
from .explain import Explanation, WitnessProfile, explain
from .marginal import MarginalTestResult, holm, marginal_tests
from .nulls import DEFAULT_SPECTRAL_DRAWS as DEFAULT_SPECTRAL_DRAWS
from .nulls import HOTELLING_EXPLAINED_VARIANCE as HOTELLING_EXPLAINED_VARIANCE
from .result import AggregatedTwoSampleResult, TwoSampleResult
from .sequential import CombinedEvidence, SequentialTest, combine_evidence
from .witness import TopRows, Witness, witness

__all__ = [
    *_sketch.__all__,
    "TwoSampleResult",
    "AggregatedTwoSampleResult",
    "SequentialTest",
    "CombinedEvidence",
    "combine_evidence",
    "EffectSize",
    "mmd2_variance",
    "Witness",
    "TopRows",
    "witness",
    "marginal_tests",
    "MarginalTestResult",
    "holm",
    "explain",
    "Explanation",
    "WitnessProfile",
    "aggregated_permutation_test",
    "auto_bandwidths",
    "kernel_grid",
    "table_maps",
    "bandwidth_maps",
    "shared_map_seed",
    "aggregate",
    "questions_p_value",
    "AGGREGATIONS",
    "AUTO_BANDWIDTHS",
    "DEFAULT_AGGREGATION",
    "permutation_indices",
    "permutation_test",
    "mmd_test",
    "two_sample_test",
    "FEISTEL_ROUNDS",
    "PERMUTATION_SCHEME",
    "DEFAULT_SPECTRAL_DRAWS",
    "HOTELLING_EXPLAINED_VARIANCE",
]
