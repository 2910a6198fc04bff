"""Which columns differ: one kernel two-sample test per input column (or kernel principal component), one pass.

Each column c gets its own Gaussian kernel on that column alone (a 1-D RFF map, bandwidth
the median heuristic of the column in the pooled row sample) and is tested from its quantile
bins: the pooled row sample gives each column ``n_bins`` quantile bins, and one pass over both
sources counts, per column and bin, A's rows, B's rows and the pooled sum of the values
(:mod:`streamrff._kernels.binning`, a compiled kernel; the partial merges by addition). The
column's statistic is the unbiased MMD^2 of its map on the bins' pooled means weighted by the
counts, and its null is exact: given the bins' totals, A's counts under a uniform relabelling of
the rows are multivariate hypergeometric, so B draws of them (per column, seeded from ``seed``)
give the permutation distribution of the binned statistic without touching a row again. The
p-values are adjusted for the C tests by Holm's step-down method (:func:`holm`), which controls
the family-wise error rate under any dependence between the columns. With ``feature_map=`` the
joint test of whole rows rides along in the same pass, with its keyed permutations per row.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._base.blas import one_blas_thread
from .._base.formatting import at_floor, format_p_value
from .._base.sampling import MEDIAN_SAMPLE_ROWS
from .._base.validation import check_positive_int, normalize_seed
from .._kernels.binning import BinEdges, ColumnBins, bin_chunk, column_median_heuristics, quantile_bins
from ..engine import current_job_options, fit_map_and_sample, landmark_sample, run_chunks
from ..engine.connection import connect
from ..errors import InputError
from ..maps import RFF, FeatureMap
from ..sketches.columns import DEFAULT_COLUMN_FEATURES, fitted_column_map
from ..sketches.twosample import AggregatedTwoSampleSketch, two_sample_sketches_of_chunk
from ..typing import Seed
from .api import open_samples, permutation_test
from .nulls import _monte_carlo_p_value, _unbiased_mmd2
from .result import TwoSampleResult

__all__ = ["marginal_tests", "MarginalTestResult", "holm"]

#: Quantile bins per column: a bin of a normal column's centre is ~0.02 sd wide, negligible against
#: the median-heuristic bandwidth (~1 sd: the kernel changes by ~(0.02)^2 / 24 across a bin). The
#: null's draws cost B x bins per column, the finish's only cost that grows with the bins.
DEFAULT_BINS = 128


def holm(p_values: Any) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given.

    With ``p_(1) <= ... <= p_(m)`` the sorted p-values, the adjusted ``p_(i)`` is
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting the hypotheses whose adjusted
    p-value is at most alpha controls the family-wise error rate at alpha.

    References
    ----------
    Holm, S. (1979). A simple sequentially rejective multiple test procedure.
    Scand. J. Statist. 6(2), 65-70.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03, 0.5]).tolist()
    [0.04, 0.09, 0.09, 0.5]
    """
    values = np.asarray(p_values, dtype=np.float64)
    if values.ndim != 1 or not np.all((values >= 0) & (values <= 1)):
        raise InputError(f"p_values must be a 1-D sequence of numbers in [0, 1]. Got {values!r}.")
    count = values.shape[0]
    order = np.argsort(values, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((count - np.arange(count)) * values[order]))
    out = np.empty(count)
    out[order] = adjusted
    return out


@dataclass(frozen=True, eq=False)
class MarginalTestResult:
    """Per-column kernel two-sample tests, largest effect first.

    All arrays are in the order of ``columns``: largest MMD first (ties by the smaller
    p-value, then the lower index). The effect orders the columns, not the p-value, which
    saturates at its floor ``1/(B+1)`` for every column that clearly differs.

    Attributes
    ----------
    columns : ndarray of int
        Column indices of the input (or kernel principal components, see ``kind``).
    statistics : ndarray of float
        Unbiased MMD^2 of each column's 1-D Gaussian kernel.
    p_values : ndarray of float
        Each column's exact permutation p-value ``(1 + #{b : T_b >= T}) / (1 + B)``.
    adjusted_p_values : ndarray of float
        Holm-adjusted p-values (family-wise error over the columns).
    mmd : ndarray of float
        Effect sizes: ``sqrt(max(MMD^2, 0))`` in each column kernel's units (0 to sqrt 2).
    bandwidths : ndarray of float
        Each column's kernel width (NaN for a categorical column of a table source, whose kernel is
        ``[a == b]``: its statistic is ``sum_k (p_k - q_k)^2`` over the category frequencies, on the
        same 0 to 2 scale, and its p-value Pearson's chi-square test; see
        ``streamrff.twosample.marginal.categorical_column_test``).
    kind : str
        ``"columns"`` or ``"components"`` (top kernel principal components of the pooled sample).
    n_x, n_y, n_permutations, n_features : int
    joint : TwoSampleResult or None
        The joint test of whole rows, when run in the same pass (``feature_map=``).
    null : str
        How the p-values were calibrated, as printed on the ``null:`` line (e.g.
        ``"500 relabellings of 128 quantile bins per column (multivariate hypergeometric,
        drawn per column)"``).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> A, B = rng.normal(size=(400, 4)), rng.normal(size=(400, 4))
    >>> B[:, 2] += 1.0
    >>> result = srf.marginal_tests(A, B, n_permutations=99)
    >>> int(result.columns[0]), bool(result.adjusted_p_values[0] <= 0.05)
    (2, True)
    >>> result.rejected(0.05).tolist()
    [2]
    """

    columns: np.ndarray
    statistics: np.ndarray
    p_values: np.ndarray
    adjusted_p_values: np.ndarray
    mmd: np.ndarray
    bandwidths: np.ndarray
    kind: str
    n_x: int
    n_y: int
    n_permutations: int
    n_features: int
    joint: TwoSampleResult | None = field(default=None, repr=False)
    null: str = ""
    n_null: int | None = None

    @property
    def floor_draws(self) -> int | None:
        """B of the Monte Carlo p-values (``n_null``, else ``n_permutations``): their floor is ``1 / (B + 1)``."""
        return self.n_null or self.n_permutations or None

    @classmethod
    def ranked(cls, statistics: np.ndarray, p_values: np.ndarray, bandwidths: Any, **fields: Any) -> MarginalTestResult:
        """The result of tests given in column order: largest effect first, Holm-adjusted.

        Ordered by MMD^2 (largest first), ties by the smaller p-value, then the lower index;
        ``mmd`` is ``sqrt(max(MMD^2, 0))``. ``fields``: the other attributes (``kind``, ``n_x``, ...).
        """
        order = np.lexsort((np.arange(len(p_values)), p_values, -statistics))
        return cls(
            columns=order.astype(np.int64),
            statistics=statistics[order],
            p_values=p_values[order],
            adjusted_p_values=holm(p_values)[order],
            mmd=np.sqrt(np.maximum(statistics[order], 0.0)),
            bandwidths=np.asarray(bandwidths, dtype=np.float64)[order],
            **fields,
        )

    def rejected(self, level: float = 0.05) -> np.ndarray:
        """The columns whose Holm-adjusted p-value is at most ``level`` (largest MMD first)."""
        if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
            raise InputError(f"level must be a number strictly between 0 and 1, such as 0.05. Got {level!r}.")
        return self.columns[self.adjusted_p_values <= level]

    def table_lines(self, limit: int | None = None) -> list[str]:
        """The table as printed: one line per column, largest MMD first (``limit`` lines at most); p-values at
        their floor print as ``< 1/(B+1) (value)``, MMD runs from 0 to sqrt(2)."""
        label = "column" if self.kind == "columns" else "component"
        lines = [f"    {label:>9} {'MMD':>8} {'MMD^2':>11} {'p':>18} {'p Holm':>18}"]
        shown = len(self.columns) if limit is None else min(limit, len(self.columns))
        for index in range(shown):
            exact = np.isnan(self.bandwidths[index])  # a categorical column: chi-square, no Monte Carlo floor
            p_text = format_p_value(self.p_values[index], None if exact else self.floor_draws)
            holm_text = format_p_value(self.adjusted_p_values[index])
            lines.append(
                f"    {int(self.columns[index]):>9} {self.mmd[index]:>8.4f} {self.statistics[index]:>11.4e} "
                f"{p_text:>18} {holm_text:>18}"
            )
        if shown < len(self.columns):
            lines.append(f"    ... {len(self.columns) - shown} more")
        return lines

    def __repr__(self) -> str:
        return "\n".join(
            [
                f"MarginalTestResult(kind={self.kind!r}, {len(self.columns)} tests, Holm-adjusted)",
                f"  null:    {self.null or f'{self.n_permutations} permutations shared by every {self.kind[:-1]}'}",
                f"  samples: n_x={self.n_x}, n_y={self.n_y}; D = {self.n_features} per {self.kind[:-1]}",
                *self.table_lines(),
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dictionary (the CLI's ``--json`` output), largest MMD first."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "n_x": int(self.n_x),
            "n_y": int(self.n_y),
            "n_permutations": int(self.n_permutations),
            "n_features": int(self.n_features),
            "null": self.null or f"{self.n_permutations} permutations shared by every {self.kind[:-1]}",
            "columns": [int(value) for value in self.columns],
            "statistics": [float(value) for value in self.statistics],
            "p_values": [float(value) for value in self.p_values],
            "at_floor": [at_floor(value, self.floor_draws) for value in self.p_values],
            "adjusted_p_values": [float(value) for value in self.adjusted_p_values],
            "mmd": [float(value) for value in self.mmd],
            "bandwidths": [None if np.isnan(value) else float(value) for value in self.bandwidths],
        }
        if self.joint is not None:
            out["joint"] = self.joint.to_dict(include_null=False)
        return out


def _column_maps(bandwidths: list[float], n_features: int, seed: int) -> list[RFF]:
    """One fitted 1-D RFF map per column; map c is seeded by ``(seed, c)`` so columns' draws differ."""
    return [
        fitted_column_map(n_features, bandwidth, int(np.random.SeedSequence([seed, column]).generate_state(1)[0]))
        for column, bandwidth in enumerate(bandwidths)
    ]


def _marginal_kernel(
    rows: np.ndarray,
    row_offset: int,
    valid: np.ndarray | None,
    bins: BinEdges,
    projector: Any,
    joint_map: FeatureMap | None,
    joint_columns: slice | None,
    n_x: int,
    n_y: int,
    n_permutations: int,
    seed: int,
    categorical: tuple[int, ...] = (),
) -> _MarginalPartial:
    # on_invalid="require": every row of the chunk is here (the joint test's keyed permutations
    # need the true global indices). A chunk holds rows of one source, but a split is harmless.
    width = rows.shape[1]
    tested = rows if projector is None else np.hstack([rows, projector._scores(rows).astype(rows.dtype)])
    a_rows = min(max(n_x - row_offset, 0), rows.shape[0])
    partial_bins = bin_chunk(tested, width if projector is not None else 0, a_rows, bins)
    joint = None
    if joint_map is not None:
        joint = AggregatedTwoSampleSketch(
            two_sample_sketches_of_chunk(
                tested, (joint_map,), row_offset, n_x, n_y, n_permutations, seed, (joint_columns,)
            )
        )
    a_part, b_part = rows[:a_rows], rows[a_rows:]
    counts = tuple((category_counts(a_part[:, c]), category_counts(b_part[:, c])) for c in categorical)
    return _MarginalPartial(partial_bins, joint, counts)


@dataclass(frozen=True, eq=False)
class _MarginalPartial:
    """A chunk's (or merged chunks') bin counts, and the joint test's sketch when it rides along."""

    bins: ColumnBins
    joint: AggregatedTwoSampleSketch | None
    counts: tuple[tuple[dict[float, int], dict[float, int]], ...] = ()

    def merge_many(self, others: Any) -> _MarginalPartial:
        others = list(others)
        joint = None if self.joint is None else self.joint.merge_many([other.joint for other in others])
        counts = tuple(
            tuple(merge_category_counts(*(part.counts[c][s] for part in [self, *others])) for s in (0, 1))
            for c in range(len(self.counts))
        )
        return _MarginalPartial(self.bins.merge_many([other.bins for other in others]), joint, counts)  # type: ignore[arg-type]


def marginal_tests(
    a_source: Any,
    b_source: Any,
    n_features: int = DEFAULT_COLUMN_FEATURES,
    n_permutations: int = 500,
    seed: Seed = 0,
    components: int | None = None,
    n_bins: int = DEFAULT_BINS,
    feature_map: FeatureMap | None = None,
    **options: Any,
) -> MarginalTestResult:
    """One kernel two-sample test per column of A against B, in a single pass, Holm-adjusted.

    Column c is tested with the unbiased MMD^2 of a Gaussian kernel on that column alone
    (``n_features`` random features; bandwidth the median heuristic of the column in the
    seeded pooled row sample), evaluated on the column's ``n_bins`` quantile bins of the
    pooled sample (each bin's rows at the pooled mean of their values; a column of fewer
    distinct values than bins is binned exactly). The pass over both sources only counts rows
    per bin; the permutation p-value then comes from B relabellings of the bins' counts
    (multivariate hypergeometric, drawn per column), exactly the permutation distribution of
    the binned statistic. For wide rows, ``components=K`` tests the top K kernel principal
    components of the pooled row sample instead (scores of :class:`~streamrff.KernelPCA`
    fitted on it), binned the same way.

    Parameters
    ----------
    a_source, b_source : ndarray, dask Array, xarray DataArray, str/PathLike or RowSource
        The two samples, same width.
    n_features : int, default=64
        Random features per column (a 1-D kernel needs few).
    n_permutations : int, default=500
        B. With C columns, Holm can reject only if ``1 / (B + 1) <= 0.05 / C``: keep
        ``B >= 20 C``.
    seed : int, numpy.random.Generator or None, default=0
        Seed of the row sample, the maps and the relabellings (and the joint test's permutations).
    components : int, optional
        Test the top ``components`` kernel principal components instead of the columns.
    n_bins : int, default=128
        Quantile bins per column (of the 1 000-row pooled sample; the end bins also take the
        rows beyond its range). A normal column's central bins are ~2.5 / n_bins sd wide.
    feature_map : FeatureMap, optional
        A map (fitted, or unfitted as ``RFF(bandwidth="median")``, fitted on the pooled rows)
        for the joint test of whole rows, run in the same pass: ``result.joint``. It evaluates
        the joint test's B keyed permutations per row, as :func:`two_sample_test` does: that
        costs many sketch passes, where the per-column tests alone cost about one.
    **options
        The job options (``client``, ``storage_options``, ``progress``, ...), as for
        :func:`streamrff.sketch`; every row counts (NaN/inf rows are refused).

    Returns
    -------
    MarginalTestResult
        Columns ordered most to least different.

    Raises
    ------
    InputError
        On samples of different widths or with fewer than 2 rows, NaN/inf rows, bad
        ``n_features``, ``n_permutations``, ``n_bins`` or ``components``.

    References
    ----------
    Gretton, A. et al. (2012). A kernel two-sample test. JMLR 13.
    Holm, S. (1979). A simple sequentially rejective multiple test procedure. Scand. J. Statist. 6(2).

    Examples
    --------
    A shift in column 1 of 3; the joint test of whole rows rides along in the same pass:

    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(3)
    >>> A, B = rng.normal(size=(500, 3)), rng.normal(size=(500, 3))
    >>> B[:, 1] += 0.5
    >>> result = srf.marginal_tests(A, B, n_permutations=199, feature_map=srf.RFF(n_features=128))
    >>> result.columns.tolist()[0], float(result.p_values[0]), result.joint.p_value
    (1, 0.005, 0.005)
    """
    n_features = check_positive_int(n_features, "n_features")
    n_permutations = check_positive_int(n_permutations, "n_permutations")
    if n_features % 2:
        raise InputError(
            f"n_features must be even (sincos features come in pairs). Got {n_features}; use {n_features + 1}."
        )
    if components is not None:
        components = check_positive_int(components, "components")
    n_bins = check_positive_int(n_bins, "n_bins")
    seed = normalize_seed(seed)
    job = current_job_options(**options)
    sources = open_samples(a_source, b_source, job, names=("A", "B"))
    width = sources[0].shape[1]
    n_x, n_y = sources[0].shape[0], sources[1].shape[0]
    for name, size in (("A", n_x), ("B", n_y)):
        if size < 2:
            raise InputError(f"{name} has {size} row(s); each test needs at least 2 rows per sample.")
    if components is not None and components > MEDIAN_SAMPLE_ROWS:
        raise InputError(f"components must be at most {MEDIAN_SAMPLE_ROWS}. Got {components}.")
    with connect(job.client) as active:
        job = job.replace(client=active, on_invalid="require", checkpoint=None)
        sample = landmark_sample(sources, MEDIAN_SAMPLE_ROWS, seed, job).rows
        projector = None
        if components is not None:
            from ..kpca import KernelPCA  # an analysis beside this one, needed only for components

            projector = KernelPCA(n_components=min(components, 2 * sample.shape[0]), seed=seed).fit(sample)
            tested = np.asarray(projector.transform(sample), dtype=np.float64)
        else:
            tested = sample
        bandwidths = column_median_heuristics(tested).tolist()
        maps = _column_maps(bandwidths, n_features, seed)
        joint_map = None
        if feature_map is not None:
            if not isinstance(feature_map, FeatureMap):
                raise InputError(f"feature_map must be a streamrff FeatureMap. Got {type(feature_map).__name__}.")
            joint_map = fit_map_and_sample(feature_map, sources, 0, 0, job)[0]
        bins = quantile_bins(tested, n_bins)
        categorical = tuple(getattr(sources[0], "categorical_columns", ())) if projector is None else ()
        kernel = functools.partial(
            _marginal_kernel, bins=bins, projector=projector, joint_map=joint_map,
            joint_columns=slice(0, width) if projector is not None else None,
            n_x=n_x, n_y=n_y, n_permutations=n_permutations, seed=seed, categorical=categorical,
        )  # fmt: skip
        partial = run_chunks(sources, kernel, job, shows_non_finite=lambda merged: merged.bins.shows_non_finite())
    kind = "components" if projector is not None else "columns"
    with one_blas_thread():  # small products (B x bins x 64): threads cost more than they give
        tests = {c: _counts_test(*counts) for c, counts in zip(categorical, partial.counts, strict=True)}
        result = _marginal_result(partial.bins, maps, n_x, n_y, n_permutations, n_bins, seed, kind, tests)
    if partial.joint is not None:
        result = dataclasses.replace(result, joint=permutation_test(partial.joint.sketches[0]))
    return result


def _relabelled_counts(totals: np.ndarray, n_x: int, n_relabellings: int, rng: np.random.Generator) -> np.ndarray:
    """A's count per bin under ``n_relabellings`` uniform relabellings of the rows, (B, K) int64.

    Given the bins' totals, A's counts of a uniformly random choice of ``n_x`` of the rows are
    multivariate hypergeometric: exactly the permutation distribution of any statistic of the
    counts. numpy draws it exactly below 1e9 pooled rows; beyond, bin by bin from the normal
    approximation of each conditional hypergeometric (its variance with the finite-population
    factor), rounded and clipped to the counts possible.
    """
    total = int(totals.sum())
    if total < 10**9:
        return rng.multivariate_hypergeometric(totals, n_x, size=n_relabellings, method="marginals")
    draws = np.zeros((n_relabellings, totals.shape[0]), dtype=np.int64)
    left_rows, left_sample = total, np.full(n_relabellings, n_x, dtype=np.float64)
    for k, good in enumerate(totals[:-1].astype(np.float64)):
        share = good / left_rows
        variance = left_sample * share * (1 - share) * (left_rows - left_sample) / max(left_rows - 1, 1)
        draw = np.rint(left_sample * share + np.sqrt(variance) * rng.standard_normal(n_relabellings))
        draw = np.clip(draw, np.maximum(0, left_sample - (left_rows - good)), np.minimum(good, left_sample))
        draws[:, k] = draw
        left_rows -= good
        left_sample -= draw
    draws[:, -1] = left_sample
    return draws


def _binned_statistics(
    features: np.ndarray, a_counts: np.ndarray, totals: np.ndarray, n_x: int, n_y: int
) -> np.ndarray:
    """Unbiased MMD^2 of rows binned to ``features`` (K, D), for A counts ``a_counts`` (..., K).

    Every row of bin k has features ``z_k``; with ``S_A = sum_k a_k z_k``, ``S_B`` the rest and
    ``Q_A = sum_k a_k ||z_k||^2`` (``= n_x`` for sincos features, whose norm is 1), it is
    ``(|S_A|^2 - Q_A) / (n_x (n_x - 1)) + (|S_B|^2 - Q_B) / (n_y (n_y - 1)) - 2 S_A.S_B / (n_x n_y)``.
    """
    norms = np.einsum("kd,kd->k", features, features)
    a_counts, totals = a_counts.astype(np.float64), totals.astype(np.float64)  # BLAS, not numpy's integer loop
    sum_a = a_counts @ features
    sum_b = totals @ features - sum_a
    return _unbiased_mmd2(sum_a, sum_b, a_counts @ norms, (totals - a_counts) @ norms, n_x, n_y)


def _marginal_result(
    merged: ColumnBins,
    maps: list[RFF],
    n_x: int,
    n_y: int,
    n_permutations: int,
    n_bins: int,
    seed: int,
    kind: str,
    categorical_tests: dict[int, tuple[float, float]] | None = None,
) -> MarginalTestResult:
    """Each column's statistic and its null from its bin counts, then Holm over the columns.

    A categorical column's statistic and p-value come from ``categorical_tests`` (its delta
    kernel's MMD^2 and chi-square p-value, :func:`categorical_column_test`) instead."""
    categorical_tests = categorical_tests or {}
    n_tests = len(maps)
    values = np.empty((n_tests, n_permutations + 1))
    p_values = np.empty(n_tests)
    for column, column_map in enumerate(maps):
        if column in categorical_tests:
            values[column] = np.nan
            values[column, 0], p_values[column] = categorical_tests[column]
            continue
        a_counts, b_counts = merged.counts[0, column], merged.counts[1, column]
        totals = a_counts + b_counts
        occupied = totals > 0
        totals, a_counts = totals[occupied], a_counts[occupied]
        # The bin's representative: the pooled mean of its values, the same under any relabelling.
        representatives = merged.sums[column, occupied] / totals
        features = np.asarray(column_map.transform(representatives[:, None]), dtype=np.float64)
        # Per-column relabellings, each column's own stream: every p-value is an exact
        # permutation p-value of its column, and Holm holds under any dependence between them.
        rng = np.random.default_rng(np.random.SeedSequence([seed, column], spawn_key=(1,)))
        relabelled = _relabelled_counts(totals, n_x, n_permutations, rng)
        values[column, 0] = _binned_statistics(features, a_counts, totals, n_x, n_y)
        values[column, 1:] = _binned_statistics(features, relabelled, totals, n_x, n_y)
        # Ties within 1e-12 of the kernel's diagonal (1) count as >=, as for the joint test.
        p_values[column] = _monte_carlo_p_value(values[column, 1:], values[column, 0], 1e-12)
    unit = kind[:-1]
    return MarginalTestResult.ranked(
        values[:, 0],
        p_values,
        [np.nan if c in categorical_tests else m.bandwidth for c, m in enumerate(maps)],
        kind=kind,
        n_x=n_x,
        n_y=n_y,
        n_permutations=n_permutations,
        n_features=int(maps[0].n_features_out_),
        null=(
            f"{n_permutations} relabellings of {n_bins} quantile bins per {unit} "
            f"(multivariate hypergeometric, drawn per {unit})"
            + ("; categorical columns: chi-square on counts per category" if categorical_tests else "")
        ),
    )


#: Distinct categories a column counts exactly; above it, its counts fold into a hashed table of
#: :data:`HASHED_WIDTH` buckets (a category's code, itself a 52-bit digest, modulo the width).
CATEGORY_CAP = 65_536
#: Buckets of the hashed count table of a column past :data:`CATEGORY_CAP` distinct categories.
HASHED_WIDTH = 4_096


def category_counts(codes: Any) -> dict[float, int]:
    """Exact counts per category code of one categorical column (mergeable: :func:`merge_category_counts`).

    Examples
    --------
    >>> from streamrff.twosample.marginal import category_counts
    >>> category_counts([3.0, 5.0, 3.0])
    {3.0: 2, 5.0: 1}
    """
    values, counts = np.unique(np.asarray(codes, dtype=np.float64), return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def merge_category_counts(*tables: dict[float, int]) -> dict[float, int]:
    """Sum of count tables (order-free: integer addition).

    Examples
    --------
    >>> from streamrff.twosample.marginal import merge_category_counts
    >>> merge_category_counts({1.0: 2}, {1.0: 1, 4.0: 3})
    {1.0: 3, 4.0: 3}
    """
    out: dict[float, int] = {}
    for table in tables:
        for code, count in table.items():
            out[code] = out.get(code, 0) + int(count)
    return out


def _count_matrix(counts_x: dict[float, int], counts_y: dict[float, int], cap: int) -> np.ndarray:
    """The 2 x K contingency table of two count tables, hashed to HASHED_WIDTH buckets past ``cap`` categories."""
    codes = sorted(set(counts_x) | set(counts_y))
    table = np.array([[counts_x.get(c, 0) for c in codes], [counts_y.get(c, 0) for c in codes]], dtype=np.float64)
    if len(codes) > cap:
        buckets = np.mod(np.asarray(codes, dtype=np.float64), HASHED_WIDTH).astype(np.int64)
        table = np.stack([np.bincount(buckets, weights=row, minlength=HASHED_WIDTH) for row in table])
    return table[:, table.sum(axis=0) > 0]


def categorical_column_test(x_codes: Any, y_codes: Any, cap: int = CATEGORY_CAP) -> tuple[float, float]:
    """One categorical column's test: the MMD^2 of its delta kernel and the chi-square p-value.

    The effect is the unbiased MMD^2 (U-statistic) of the kernel ``[a == b]``: an unbiased estimate of
    ``sum_k (p_k - q_k)^2`` between the two samples' category frequencies, on the scale of a Gaussian
    column's unbiased MMD^2 (at most 2; near 0, and possibly below it, with no change), so the column
    table ranks categorical and numeric columns on one scale. With counts ``c_k`` of ``n`` rows and
    ``d_k`` of ``m`` rows it is

        sum_k c_k (c_k - 1) / (n (n - 1)) + d_k (d_k - 1) / (m (m - 1)) - 2 c_k d_k / (n m),

    since ``E[c_k (c_k - 1)] = n (n - 1) p_k^2``: the plug-in ``sum_k (c_k/n - d_k/m)^2`` would add
    ``sum_k p_k (1 - p_k) / n + q_k (1 - q_k) / m``, about ``(K - 1) (1/n + 1/m) / K`` for ``K``
    equally frequent categories (Gretton et al., JMLR 2012, eq. 3). A sample of one row gives the
    plug-in value (no pair to average over). The p-value is Pearson's
    chi-square test of homogeneity on the 2 x K table of counts (K - 1 degrees of freedom); past
    ``cap`` distinct categories the counts are hashed into :data:`HASHED_WIDTH` buckets first (a
    coarser but still valid test: a function of the data's categories).

    Returns
    -------
    (statistic, p_value) : tuple of float

    Examples
    --------
    >>> from streamrff.twosample.marginal import categorical_column_test
    >>> stat, p = categorical_column_test([1.0] * 60 + [2.0] * 40, [1.0] * 40 + [2.0] * 60)
    >>> round(stat, 4), bool(p < 0.01)  # plug-in 0.08, less its bias 0.0097
    (0.0703, True)
    """

    check_positive_int(cap, "cap")
    return _counts_test(category_counts(x_codes), category_counts(y_codes), cap)


def _counts_test(
    counts_x: dict[float, int], counts_y: dict[float, int], cap: int = CATEGORY_CAP
) -> tuple[float, float]:
    """(delta-kernel MMD^2, chi-square p-value) of two count tables: :func:`categorical_column_test`."""
    from scipy.stats import chi2

    table = _count_matrix(counts_x, counts_y, cap)
    totals = table.sum(axis=1, keepdims=True)
    if np.any(totals == 0):
        raise InputError("x_codes and y_codes must each hold at least one row. Got an empty sample.")
    n_x, n_y = float(totals[0, 0]), float(totals[1, 0])
    if n_x >= 2 and n_y >= 2:  # the U-statistic: pairs of distinct rows only
        within = (table[0] * (table[0] - 1)).sum() / (n_x * (n_x - 1)) + (table[1] * (table[1] - 1)).sum() / (
            n_y * (n_y - 1)
        )
        statistic = float(within - 2.0 * (table[0] * table[1]).sum() / (n_x * n_y))
    else:
        frequencies = table / totals
        statistic = float(np.sum((frequencies[0] - frequencies[1]) ** 2))
    if table.shape[1] < 2:
        return statistic, 1.0
    expected = totals * table.sum(axis=0, keepdims=True) / table.sum()
    chi_square = float(np.sum((table - expected) ** 2 / expected))
    return statistic, float(chi2.sf(chi_square, table.shape[1] - 1))
