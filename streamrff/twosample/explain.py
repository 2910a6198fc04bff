"""How much and where two sketched samples differ, read against the rows of a source (``streamrff explain``).

:func:`explain` takes the mean sketches of A and B (made with one map, at two sites if need be)
and the rows of one data source, and in one pass over that source gives the effect size with its
interval (from the sketches' moments), the rows where the witness is most extreme, the
witness's distribution over the source and its mean, beside the witness's means under A and B
(from the sketches alone). Only the source's own site reads its rows. When both sketches were
made with ``columns=True`` (``streamrff sketch --columns``), it adds the column table
(:func:`column_tests`): one test per input column from the sketches' column parts alone.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._base.formatting import format_mmd
from .._base.validation import check_positive_int
from ..engine import current_job_options, run_row_pass
from ..errors import InputError
from ..sketches.mean import MeanSketch, mmd2
from .effect import INTERVAL_LABELS, check_level, default_interval, effect_of_sketches, inverted_interval
from .marginal import MarginalTestResult
from .nulls import DEFAULT_SPECTRAL_DRAWS, _spectral_test
from .witness import WHICH, TopRows, Witness, _as_mean_sketch

__all__ = ["explain", "Explanation", "WitnessProfile", "column_tests"]

#: Bins of the witness histogram over the source.
DEFAULT_BINS = 60


class WitnessProfile:
    """The witness over one source's rows: top k at each end, a histogram, the sum; merges as a sum.

    Examples
    --------
    >>> import numpy as np
    >>> edges = np.linspace(-1.0, 1.0, 5)
    >>> a = WitnessProfile.of_values(np.array([0.5, -0.9]), 0, None, 1, edges)
    >>> b = WitnessProfile.of_values(np.array([0.2]), 2, None, 1, edges)
    >>> merged = a.merge_many([b])
    >>> merged.largest.rows.tolist(), merged.smallest.rows.tolist(), merged.counts.tolist(), merged.count
    ([0], [1], [1, 0, 1, 1], 3)
    """

    def __init__(self, largest: TopRows, smallest: TopRows, counts: np.ndarray, total: float, edges: np.ndarray):
        self.largest, self.smallest, self.counts, self.total, self.edges = largest, smallest, counts, total, edges

    @property
    def count(self) -> int:
        """Rows seen."""
        return self.largest.count

    @classmethod
    def of_values(
        cls, values: np.ndarray, row_offset: int, rows: np.ndarray | None, k: int, edges: np.ndarray
    ) -> WitnessProfile:
        """The profile of one chunk's witness ``values``."""
        bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.shape[0] - 2)
        counts = np.bincount(bins, minlength=edges.shape[0] - 1).astype(np.int64)
        return cls(
            TopRows.of_values(values, row_offset, k, "largest", rows),
            TopRows.of_values(values, row_offset, k, "smallest", rows),
            counts,
            float(np.sum(values)),
            edges,
        )

    def merge_many(self, others: Sequence[WitnessProfile]) -> WitnessProfile:
        """The profile of the union of the rows."""
        return WitnessProfile(
            self.largest.merge_many([other.largest for other in others]),
            self.smallest.merge_many([other.smallest for other in others]),
            self.counts + sum(other.counts for other in others),
            self.total + sum(other.total for other in others),
            self.edges,
        )


def _profile_kernel(
    rows: np.ndarray, row_offset: int, valid: np.ndarray | None, witness: Witness, k: int, edges: np.ndarray
) -> WitnessProfile:
    indices = None if valid is None else row_offset + np.flatnonzero(valid).astype(np.int64)
    return WitnessProfile.of_values(witness.values(rows), row_offset, indices, k, edges)


@dataclass(frozen=True, eq=False)
class Explanation:
    """What :func:`explain` found.

    Attributes
    ----------
    statistic : float
        Unbiased MMD^2 of A and B (the sketch's kernel).
    mmd : float
        ``sqrt(max(statistic, 0))``, in kernel units.
    interval : (float, float) or None
        ``level`` confidence interval for MMD^2 (of the Gaussian kernel, or of the drawn features'
        kernel: ``interval_target``); None when the sketches have no moments.
    level : float
    n_a, n_b : int
        Rows of A and B.
    which : {"largest", "smallest"}
        The end of the witness the rows come from: ``"largest"`` where A is over-represented.
    rows : ndarray of int64
        Global row indices in the source, most extreme first.
    values : ndarray of float64
        The witness at those rows (kernel units).
    source_rows : int
        Rows of the source read.
    source_mean : float
        Mean witness over the source.
    mean_a, mean_b : float
        Mean witness under A and under B (from the sketches: ``mu_A.direction``, ``mu_B.direction``).
    edges, counts : ndarray
        Histogram of the witness over the source.
    witness : Witness
    columns : MarginalTestResult or None
        The column table (:func:`column_tests`), when both sketches have column parts.
    columns_note : str
        Why there is no column table (empty when there is one).
    interval_target : str
        ``"kernel"`` (the Gaussian kernel's MMD^2) or ``"features"`` (the drawn features' kernel's).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> A, B = rng.normal(size=(500, 1)), rng.normal(1.0, 1.0, size=(500, 1))
    >>> rff = srf.RFF(n_features=256, bandwidth=1.0).fit(A)
    >>> found = srf.explain(srf.sketch_array(A, rff), srf.sketch_array(B, rff), A, k=2)
    >>> found.which, found.interval, int(found.counts.sum())
    ('largest', None, 500)
    >>> found.lines()[0]
    'effect size: MMD = 0.427 (range 0 to sqrt(2)), interval: sketch both samples with --moments; MMD^2 = 0.1823'
    """

    statistic: float
    mmd: float
    interval: tuple[float, float] | None
    level: float
    n_a: int
    n_b: int
    which: str
    rows: np.ndarray
    values: np.ndarray
    source_rows: int
    source_mean: float
    mean_a: float
    mean_b: float
    edges: np.ndarray = field(repr=False)
    counts: np.ndarray = field(repr=False)
    witness: Witness = field(repr=False)
    columns: MarginalTestResult | None = field(default=None, repr=False)
    columns_note: str = ""
    interval_target: str = "kernel"

    def lines(self) -> list[str]:
        """The text report: the effect size, then the rows, most extreme first."""
        effect = format_mmd(self.statistic, self.interval, self.level, INTERVAL_LABELS[self.interval_target])
        if self.interval is None:
            effect += ", interval: sketch both samples with --moments"
        over = (
            "A is most over-represented against B"
            if self.which == "largest"
            else "B is most over-represented against A"
        )
        lines = [
            f"effect size: {effect}; MMD^2 = {self.statistic:.4g}",
            f"  samples:   n_A = {self.n_a:,}, n_B = {self.n_b:,}",
            f"  witness:   mean {self.mean_a:.4g} under A, {self.mean_b:.4g} under B, "
            f"{self.source_mean:.4g} over the source ({self.source_rows:,} rows)",
            f"rows of the source where {over} (witness, kernel units):",
            f"    {'row':>12} {'witness':>10}",
        ]
        lines += [f"    {int(row):>12} {value:>10.4g}" for row, value in zip(self.rows, self.values)]
        if self.columns is None:
            return [*lines, f"columns: {self.columns_note}"]
        return [
            *lines,
            f"columns, largest MMD first ({self.columns.null}; Holm-adjusted, {len(self.columns.columns)} tests):",
            *self.columns.table_lines(),
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dictionary (the CLI's ``--json`` output)."""
        return {
            "statistic": float(self.statistic),
            "mmd": float(self.mmd),
            "mmd_range": [0.0, float(np.sqrt(2.0))],
            "confidence_interval": None
            if self.interval is None
            else {
                "level": self.level,
                "interval": self.interval_target,
                "covers": INTERVAL_LABELS[self.interval_target],
                "mmd2": [float(v) for v in self.interval],
                "mmd": [float(np.sqrt(v)) for v in self.interval],
            },
            "n_a": int(self.n_a),
            "n_b": int(self.n_b),
            "which": self.which,
            "rows": [int(row) for row in self.rows],
            "values": [float(value) for value in self.values],
            "source_rows": int(self.source_rows),
            "source_mean": float(self.source_mean),
            "mean_a": float(self.mean_a),
            "mean_b": float(self.mean_b),
            "histogram": {"edges": [float(v) for v in self.edges], "counts": [int(v) for v in self.counts]},
            "columns": None if self.columns is None else self.columns.to_dict(),
            **({"columns_note": self.columns_note} if self.columns is None else {}),
        }


#: The ``null`` text of the column table.
COLUMN_NULL = "spectral null from the column moments"


def column_tests(
    a: MeanSketch, b: MeanSketch, seed: int = 0, n_draws: int = DEFAULT_SPECTRAL_DRAWS
) -> MarginalTestResult:
    """One two-sample test per input column, from the column parts of two sketches (no rows read).

    For each column c, the column part holds the sums and second moments of a
    1-D sincos map of that column (:mod:`streamrff.sketches.columns`): the statistic is the
    unbiased MMD^2 of its kernel from the means (``||z||^2 = 1``, so the squared
    norm sums are the counts), its p-value that of the spectral (weighted
    chi-square) null of the pooled column moments (Gretton et al. 2009), and the
    p-values are adjusted for the d tests by Holm's method (:func:`holm`).

    Parameters
    ----------
    a, b : MeanSketch
        Sketches of one map, both made with ``columns=True`` and the same column maps, at least 2 rows each.
    seed : int, default=0
        Seed of the null's Monte-Carlo draws.
    n_draws : int, default=10000
        Draws of each column's null.

    Returns
    -------
    MarginalTestResult
        ``kind="columns"``, ``n_permutations=0``, ``null="spectral null from the column moments ..."``.

    Raises
    ------
    InputError
        If a sketch has no column part or fewer than 2 rows.
    SketchMismatchError
        If the column maps differ (named).

    References
    ----------
    Gretton, A., Fukumizu, K., Harchaoui, Z. & Sriperumbudur, B. (2009). A fast, consistent kernel
    two-sample test. NeurIPS. Holm, S. (1979). Scand. J. Statist. 6(2), 65-70.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.twosample.explain import column_tests
    >>> rng = np.random.default_rng(0)
    >>> A, B = rng.normal(size=(2000, 4)), rng.normal(size=(2000, 4))
    >>> B[:, 2] += 0.5
    >>> rff = srf.RFF(n_features=128, bandwidth=2.0).fit(A)
    >>> table = column_tests(srf.sketch_array(A, rff, columns=True), srf.sketch_array(B, rff, columns=True))
    >>> int(table.columns[0]), bool(table.adjusted_p_values[0] < 0.01), table.n_permutations
    (2, True, 0)
    """
    for name, sketch in (("a", a), ("b", b)):
        if not isinstance(sketch, MeanSketch) or sketch.columns is None:
            raise InputError(
                f"Sketch {name} has no column part. Expected sketches made with columns=True; sketch it again with "
                "columns=True (CLI: streamrff sketch --columns)."
            )
        if sketch.count < 2:
            raise InputError(f"Sketch {name} has {sketch.count} row(s); the column tests need at least 2.")
    n_draws = check_positive_int(n_draws, "n_draws")
    a.columns.check_compatible(b.columns, action="compare")
    maps = a.columns.column_maps
    rng = np.random.default_rng(seed)
    statistics, p_values = np.empty(maps.n_columns), np.empty(maps.n_columns)
    for column in range(maps.n_columns):
        pair = [_column_mean_sketch(sketch, column) for sketch in (a, b)]
        statistics[column] = mmd2(*pair)
        p_values[column], _ = _spectral_test(*pair, statistics[column], rng, n_draws)
    return MarginalTestResult.ranked(
        statistics,
        p_values,
        np.full(maps.n_columns, maps.bandwidth),
        kind="columns",
        n_x=a.count,
        n_y=b.count,
        n_permutations=0,
        n_features=maps.n_features,
        null=f"{COLUMN_NULL} ({n_draws:,} draws)",
        n_null=n_draws,
    )


def _column_mean_sketch(sketch: MeanSketch, column: int) -> MeanSketch:
    """Column ``column``'s part as a moment sketch of its 1-D map (sincos: ``||z||^2 = 1``, so Q = n)."""
    column_map, feature_sum, moment = sketch.columns.column(column)
    return MeanSketch(column_map, sketch.count, feature_sum, float(sketch.count), moment)


def _columns_or_note(a: MeanSketch, b: MeanSketch) -> tuple[MarginalTestResult | None, str]:
    """The column table when both sketches have column parts, else the line that says how to get one."""
    if a.columns is None or b.columns is None:
        missing = " and ".join(name for name, sketch in (("A", a), ("B", b)) if sketch.columns is None)
        return None, f"no column table: sketch {missing} with --columns (columns=True) for one test per column"
    if min(a.count, b.count) < 2:
        return None, "no column table: each sample needs at least 2 rows"
    return column_tests(a, b), ""


def explain(
    a: Any,
    b: Any,
    source: Any,
    k: int = 20,
    which: str = "auto",
    level: float = 0.95,
    bins: int = DEFAULT_BINS,
    **options: Any,
) -> Explanation:
    """How much A and B differ, and the rows of ``source`` where they differ most, in one pass over ``source``.

    Parameters
    ----------
    a, b : MeanSketch, str or PathLike
        Mean sketches of A and B with one map (with moments for the interval), or their paths/URLs.
    source : ndarray, dask Array, xarray DataArray, str/PathLike or RowSource
        Rows to rank, of the width the map takes (typically A's or B's own data).
    k : int, default=20
        Rows returned.
    which : {"auto", "largest", "smallest"}, default="auto"
        ``"largest"``: rows where A is over-represented against B; ``"smallest"``: where B is;
        ``"auto"``: the end of the sample the source resembles (its mean witness is nearer A's
        mean witness or B's), so A's data gives A's over-represented rows and B's data B's.
    level : float, default=0.95
        Coverage of the MMD^2 interval.
    bins : int, default=60
        Bins of the witness histogram.
    **options
        The job options of the pass over ``source`` (``client``,
        ``storage_options``, ``on_invalid``, ``progress``, ...), as for
        :func:`streamrff.sketch`; ``storage_options`` also reads sketch files.

    Returns
    -------
    Explanation
        With ``columns``, the column table (:func:`column_tests`), when both sketches were made with
        ``columns=True``; else ``columns_note`` says how to get one.

    Raises
    ------
    InputError
        On bad arguments, a source of another width, or empty sketches.
    SketchMismatchError
        If the sketches come from different maps, or their column parts from different column maps.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.twosample import explain
    >>> rng = np.random.default_rng(0)
    >>> A, B = rng.normal(size=(3000, 2)), rng.normal(size=(3000, 2))
    >>> B[:150] = 4.0 + 0.2 * rng.normal(size=(150, 2))   # B has a cluster A lacks
    >>> rff = srf.RFF(n_features=512, bandwidth=1.0).fit(A)
    >>> found = explain(srf.sketch_array(A, rff, moments=True), srf.sketch_array(B, rff, moments=True), B, k=5)
    >>> found.which, bool((found.rows < 150).all()), found.interval is not None
    ('smallest', True, True)
    """
    k = check_positive_int(k, "k")
    bins = check_positive_int(bins, "bins")
    level = check_level(level)
    if which not in ("auto", *WHICH):
        raise InputError(f"which must be one of {('auto', *WHICH)}. Got {which!r}.")
    job = current_job_options(**options)
    a = _as_mean_sketch(a, "a", job.storage_options)
    b = _as_mean_sketch(b, "b", job.storage_options)
    if a.fingerprint != b.fingerprint:
        a.check_compatible(b)
    effect = effect_of_sketches(a, b)
    witness = Witness.of_effect(effect)
    reach = float(np.linalg.norm(witness.direction) * np.sqrt(effect.kernel_diagonal))  # |f| <= ||z|| ||direction||
    edges = np.linspace(-reach, reach, bins + 1) if reach > 0 else np.linspace(-1.0, 1.0, bins + 1)
    kernel = functools.partial(_profile_kernel, witness=witness, k=k, edges=edges)
    profile = run_row_pass(source, kernel, witness.direction.shape[0], witness.n_features_in_, job, "the sketches' map")
    mean_a, mean_b = float(effect.mean_x @ witness.direction), float(effect.mean_y @ witness.direction)
    source_mean = profile.total / max(profile.count, 1)
    if which == "auto":
        which = "largest" if abs(source_mean - mean_a) <= abs(source_mean - mean_b) else "smallest"
    top = profile.largest if which == "largest" else profile.smallest
    statistic = mmd2(a, b) if min(a.count, b.count) >= 2 else float(np.sum((effect.mean_x - effect.mean_y) ** 2))
    target = default_interval(effect)
    interval = None if effect.variance is None else inverted_interval(statistic, effect.variance, level, target)
    columns, columns_note = _columns_or_note(a, b)
    return Explanation(
        statistic=float(statistic),
        mmd=float(np.sqrt(max(statistic, 0.0))),
        interval=interval,
        level=level,
        n_a=a.count,
        n_b=b.count,
        which=which,
        rows=top.rows,
        values=top.values,
        source_rows=profile.count,
        source_mean=float(source_mean),
        mean_a=mean_a,
        mean_b=mean_b,
        edges=edges,
        counts=profile.counts,
        witness=witness,
        columns=columns,
        columns_note=columns_note,
        interval_target=target,
    )
