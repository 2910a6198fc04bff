"""The aggregated multi-bandwidth permutation test: the bandwidth grid and the aggregated statistics.

Pure NumPy. L Gaussian kernels (one random Fourier feature map per bandwidth)
are tested with the *same* B keyed permutations, so for every permutation
``pi_b`` there is a vector of L permuted MMD^2 values, and any statistic that
is a fixed function of that vector is again an exact permutation test
(Schrab et al. 2023, sec. 3; Biggs et al. 2023, sec. 3). This module holds

- :func:`auto_bandwidths`: the default grid of bandwidths, from the seeded
  pooled landmark sample (the rows of the median heuristic);
- :func:`shared_map_seed`: the seed of the bandwidths' maps, derived from the
  test's seed: one Gaussian draw G, scaled per bandwidth (``W_l = G / sigma_l``),
  so that one projection of each row tile serves every bandwidth;
- :func:`standardise` and :func:`aggregate`: the aggregated statistics
  (``"max"``, ``"fuse"``, ``"mmdagg"``) of the observed split and of each
  permutation, and :func:`aggregated_p_value`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from scipy.spatial.distance import pdist, squareform
from scipy.special import logsumexp

from .._base.validation import is_positive_real
from ..errors import InputError

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_AGGREGATION",
    "AUTO_BANDWIDTHS",
    "auto_bandwidths",
    "kernel_label",
    "shared_map_seed",
    "check_bandwidths",
    "check_kernels",
    "kernel_grid",
    "kernel_grid_size",
    "check_mismatches",
    "check_categorical",
    "table_maps",
    "check_aggregated_accumulator_size",
    "standardise",
    "aggregate",
    "aggregated_p_value",
    "question_groups",
    "questions_p_value",
]

#: Aggregations of the per-bandwidth statistics (see :func:`aggregate`).
AGGREGATIONS = ("max", "fuse", "mmdagg")
#: The default aggregation: chosen on benchmarks/bench_two_sample.py (see two_sample_test's Notes).
DEFAULT_AGGREGATION = "max"
#: Bandwidths in the ``bandwidths="auto"`` grid.
AUTO_BANDWIDTHS = 10
#: Rows of the landmark sample the Laplace grid's l1 distances are taken from (cost ~ rows^2).
LAPLACE_GRID_ROWS = 400
#: The large end of the ``mismatches="auto"`` grid: the categorical factor of a pair that differs in one
#: column is e^-10 = 4.5e-5, so the kernel is close to the Gaussian times the equality of whole category tuples.
LARGE_MISMATCH = 10.0
#: lambda of the per-column maps (a categorical column alone): every frequency hashes the column
#: (keep probability 1 - e^-30), so the map estimates the delta kernel [a == b] of that column.
COLUMN_MISMATCH = 30.0
# Domain tag of the per-bandwidth map seeds ("bandwdth"): unrelated to the test's other streams.
_MAP_SEED_STREAM = 0x62616E6477647468


def auto_bandwidths(sample: np.ndarray, n_bandwidths: int = AUTO_BANDWIDTHS, metric: str = "euclidean") -> np.ndarray:
    """The default bandwidth grid: geometric from half the nearest-neighbour scale to twice the median distance.

    With ``r`` the median over the sample's rows of the distance to the nearest
    other distinct row and ``m`` the median pairwise distance (the median
    heuristic), the grid is ``n_bandwidths`` values spaced evenly in log scale
    from ``lo = min(r, m) / 2`` to ``hi = 2 m``.

    The rule follows the collections of MMDAgg and MMD-FUSE - a geometric (MMDAgg)
    or linear (MMD-FUSE) grid of about 10 bandwidths from half a small
    inter-point distance to twice a large one - with two changes for a
    one-pass, out-of-core test: the distances are those of the seeded pooled
    landmark sample (at most 1 000 rows, the rows ``bandwidth="median"`` uses),
    and the small end is the nearest-neighbour distance rather than a 5%
    quantile of all distances, since in low dimension the 5% quantile lies far
    above the finest scale that n rows resolve (d = 1, 1 000 uniform rows:
    quantile 0.025, nearest neighbour 0.0007), where differences of densities
    with fine structure live. The large end stops at twice the median: wider
    Gaussian kernels approach the mean-difference (linear-kernel) test, which
    the top of this grid already approximates.

    Parameters
    ----------
    sample : ndarray of shape (k, d)
        Pooled sample rows (the engine's landmark sample).
    n_bandwidths : int, default=10
    metric : {"euclidean", "cityblock"}, default="euclidean"
        The distance the grid is scaled on: l2 for the Gaussian and Matern
        kernels, l1 (``"cityblock"``) for the Laplace kernel ``exp(-||x - y||_1 / sigma)``.

    Returns
    -------
    ndarray of shape (n_bandwidths,), float64, increasing
        Gaussian kernel widths sigma. With fewer than two distinct rows the
        scale is 1.0 (as for the median heuristic).

    References
    ----------
    Schrab, A., Kim, I., Albert, M., Laurent, B., Guedj, B. & Gretton, A. (2023).
    MMD aggregated two-sample test. JMLR 24(194), sec. 5.
    Biggs, F., Schrab, A. & Gretton, A. (2023). MMD-FUSE: learning and combining
    kernels for two-sample testing without data splitting. NeurIPS, sec. 6.

    Examples
    --------
    >>> import numpy as np
    >>> grid = auto_bandwidths(np.random.default_rng(0).normal(size=(500, 2)))
    >>> grid.shape, bool(np.all(np.diff(grid) > 0))
    ((10,), True)
    >>> round(float(grid[1] / grid[0]), 6) == round(float(grid[-1] / grid[-2]), 6)
    True
    """
    n_bandwidths = int(n_bandwidths)
    distances = pdist(np.asarray(sample, dtype=np.float64), metric) if sample.shape[0] >= 2 else np.zeros(0)
    positive = distances[distances > 0]
    if positive.size == 0:
        median, nearest = 1.0, 1.0
    else:
        median = float(np.median(positive))
        matrix = squareform(distances)
        matrix[matrix <= 0] = np.inf  # the diagonal and duplicate rows
        nearest_each = matrix.min(axis=1)
        nearest = float(np.median(nearest_each[np.isfinite(nearest_each)]))
    low, high = min(nearest, median) / 2.0, 2.0 * median
    if n_bandwidths == 1:
        return np.array([median])
    return np.geomspace(low, high, n_bandwidths)


def shared_map_seed(seed: int) -> int:
    """Seed of every bandwidth's feature map, in ``[0, 2**63)``, derived from the test's seed.

    All the maps of the aggregated test draw the same standard Gaussian
    frequencies G (and, for ``"cosphase"``, the same phases) and divide them by
    their bandwidth, ``W_l = G / sigma_l``: each map is still an unbiased random
    Fourier feature map of its Gaussian kernel, rebuilt from its own spec, and
    the chunk kernel projects each row tile once, ``X G``, for all of them. The
    seed is a NumPy ``SeedSequence`` keyed by ``(seed, stream)``, so it is
    unrelated to the test's permutation and sampling streams.

    Examples
    --------
    >>> shared_map_seed(0) == shared_map_seed(0) != shared_map_seed(1)
    True
    """
    state = np.random.SeedSequence([int(seed), _MAP_SEED_STREAM]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


def check_bandwidths(bandwidths: Any) -> str | tuple[float, ...]:
    """Return ``"auto"`` or a tuple of distinct positive finite floats; raise InputError otherwise."""
    if isinstance(bandwidths, str):
        if bandwidths == "auto":
            return bandwidths
        raise InputError(
            f"bandwidths must be 'auto' or a list of positive numbers. Got {bandwidths!r}; "
            "use bandwidths='auto' or e.g. bandwidths=[0.1, 0.3, 1.0]."
        )
    try:
        values = list(bandwidths)
    except TypeError:
        raise InputError(
            f"bandwidths must be 'auto' or a list of positive numbers. Got {bandwidths!r}; "
            "use bandwidths='auto' or e.g. bandwidths=[0.1, 0.3, 1.0]."
        ) from None
    if not values:
        raise InputError("bandwidths must hold at least one bandwidth. Got an empty list; use bandwidths='auto'.")
    for value in values:
        if not is_positive_real(value):
            raise InputError(
                f"bandwidths must be positive finite numbers. Got {value!r} in {values!r}; "
                "drop it or use bandwidths='auto'."
            )
    if len(set(float(v) for v in values)) != len(values):
        raise InputError(f"bandwidths must be distinct. Got {values!r}; drop the repeated values.")
    return tuple(float(v) for v in values)


def check_kernels(kernels: Any) -> tuple[str, ...]:
    """The aggregated test's kernel families (distinct names of RFF's ``kernel``), or InputError."""
    from ..maps.fourier import KERNELS

    names = (kernels,) if isinstance(kernels, str) else kernels
    try:
        values = tuple(names)
    except TypeError:
        values = ()
    if not values or any(not isinstance(name, str) or name not in KERNELS for name in values):
        raise InputError(
            f"kernels must be a non-empty list of kernel families from {list(KERNELS)}. Got {kernels!r}; "
            "use e.g. kernels=('gaussian', 'laplace')."
        )
    if len(set(values)) != len(values):
        raise InputError(f"kernels must be distinct. Got {list(values)!r}; drop the repeated names.")
    return values


def kernel_grid(
    kernels: tuple[str, ...], bandwidths: str | tuple[float, ...], sample: np.ndarray | None
) -> list[tuple[str, float]]:
    """The (kernel, bandwidth) pairs the aggregated test tests, kernel by kernel.

    ``bandwidths="auto"``: ``ceil(10 / len(kernels))`` bandwidths per kernel family, so that
    aggregating several families costs about what the Gaussian grid alone does: the grid of
    :func:`auto_bandwidths` of ``sample``, on l1 distances for the Laplace kernel and on l2 distances
    for the others. A list of bandwidths is used as given for every family.

    Examples
    --------
    >>> import numpy as np
    >>> pairs = kernel_grid(("gaussian", "laplace"), "auto", np.random.default_rng(0).normal(size=(200, 3)))
    >>> len(pairs), sorted({kernel for kernel, _ in pairs})
    (10, ['gaussian', 'laplace'])
    >>> kernel_grid(("gaussian",), (0.5, 2.0), None)
    [('gaussian', 0.5), ('gaussian', 2.0)]
    """
    if bandwidths != "auto":
        return [(kernel, float(bandwidth)) for kernel in kernels for bandwidth in bandwidths]
    return _auto_kernel_grid(kernels, kernel_grid_size(kernels, "auto") // len(kernels), sample)


def _auto_kernel_grid(kernels: tuple[str, ...], per_kernel: int, sample: np.ndarray) -> list[tuple[str, float]]:
    pairs = []
    for kernel in kernels:
        if kernel == "laplace":  # l1 distances, of the sample's first LAPLACE_GRID_ROWS rows (a seeded sample)
            grid = auto_bandwidths(sample[:LAPLACE_GRID_ROWS], per_kernel, "cityblock")
        else:
            grid = auto_bandwidths(sample, per_kernel)
        pairs.extend((kernel, float(bandwidth)) for bandwidth in grid)
    return pairs


def kernel_grid_size(
    kernels: tuple[str, ...], bandwidths: str | tuple[float, ...], n_mismatches: int = 1, n_categorical: int = 0
) -> int:
    """How many maps :func:`kernel_grid` (and :func:`table_maps`) give, before any sample is read.

    With categorical columns the ``"auto"`` bandwidths are shared out over the mismatch values too
    (``ceil(10 / (kernels x mismatches))`` per pair), and each categorical column adds one map.
    """
    shares = len(kernels) * max(1, n_mismatches)
    per_kernel = -(-AUTO_BANDWIDTHS // shares) if bandwidths == "auto" else len(bandwidths)
    return per_kernel * shares + n_categorical


def check_categorical(categorical: Any) -> tuple[int, ...]:
    """The aggregated test's categorical column indices (distinct non-negative ints), sorted, or InputError."""
    try:
        values = list(categorical)
    except TypeError:
        values = None
    if (
        isinstance(categorical, str)
        or values is None
        or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) or v < 0 for v in values)
    ):
        raise InputError(
            f"categorical must be a list of column indices (non-negative integers). Got {categorical!r}; "
            "use e.g. categorical=[2, 3], or a table source, whose categorical columns are used by default."
        )
    if len(set(int(v) for v in values)) != len(values):
        raise InputError(f"categorical names a column twice. Got {values!r}; drop the repeated index.")
    return tuple(sorted(int(v) for v in values))


def check_mismatches(mismatches: Any) -> str | tuple[float, ...]:
    """``"auto"`` or a tuple of distinct positive finite lambdas for the aggregated test on tables, or InputError."""
    if isinstance(mismatches, str) and mismatches == "auto":
        return mismatches
    try:
        values = list(mismatches)
    except TypeError:
        values = None
    if isinstance(mismatches, str) or not values or not all(is_positive_real(value) for value in values):
        raise InputError(
            f"mismatches must be 'auto' or a non-empty list of positive numbers. Got {mismatches!r}; "
            "use mismatches='auto' or e.g. mismatches=[1.0, 10.0]."
        )
    if len(set(float(v) for v in values)) != len(values):
        raise InputError(f"mismatches must be distinct. Got {values!r}; drop the repeated values.")
    return tuple(float(v) for v in values)


def kernel_label(spec: Any, columns: tuple[int, ...] | None) -> str:
    """How a map of the aggregated test is named in its table: a column's equality kernel, a mixed map's lambda,
    or the kernel family.

    Examples
    --------
    >>> kernel_label({"kind": "rff", "kernel": "laplace"}, None)
    'laplace'
    >>> kernel_label({"kind": "rff", "categorical": [2], "mismatch": 0.5}, None)
    'mixed, lambda 0.5'
    >>> kernel_label({"categorical": [0], "mismatch": 30.0}, (3,))
    'column 3 =='
    """
    if columns is not None:
        return f"column {', '.join(str(column) for column in columns)} =="
    if spec.get("categorical"):
        return f"mixed, lambda {spec['mismatch']:.3g}"
    return str(spec.get("kernel", "gaussian"))


def table_maps(
    kernels: tuple[str, ...],
    bandwidths: str | tuple[float, ...],
    mismatches: str | tuple[float, ...],
    categorical: tuple[int, ...],
    sample: np.ndarray | None,
    n_features_in: int,
    n_features: int,
    seed: int,
    variant: str = "sincos",
) -> tuple[list[Any], list[tuple[int, ...] | None]]:
    """The aggregated test's maps on a table with categorical columns, and the columns each one reads.

    Two kinds of kernel, tested under the same permutations:

    - joint: for every (kernel family, bandwidth) and every lambda of ``mismatches``, the mixed map
      ``RFF(categorical=categorical, mismatch=lambda)`` of the whole row (columns None).
      ``mismatches="auto"`` is ``(lambda_auto, 10)``: the median rule of ``RFF(mismatch="auto")`` on
      ``sample``'s categorical columns, and :data:`LARGE_MISMATCH`, where the categorical factor is
      close to the equality of whole category tuples (one value if ``lambda_auto >= 10``). With
      ``bandwidths="auto"`` each (family, lambda) gets ``ceil(10 / (families x lambdas))`` widths of
      :func:`auto_bandwidths` of the numeric columns, so the joint maps number about 10;
    - per column: for every categorical column c, the map of column c alone with lambda
      :data:`COLUMN_MISMATCH`, whose kernel is c's delta kernel ``[a_c == b_c]``: its MMD^2 is
      ``sum_k (p_k - q_k)^2`` over c's category frequencies, so a shift in one column's frequencies
      is not diluted by the other columns (docs/guide/tables.rst, "Why one column's shift is hard").
      Measured, the mixed kernel restricted to c (the numeric Gaussian times c's delta kernel)
      had less power on such a shift (0.21 against 0.29), so the numeric columns are left out.

    Returns ``(maps, columns)``: the fitted maps, and per map None (the whole row) or the input
    columns it reads.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> rows = np.column_stack([rng.normal(size=300), rng.integers(0, 3, 300), rng.integers(0, 5, 300)])
    >>> maps, columns = table_maps(("gaussian",), "auto", "auto", (1, 2), rows, 3, 64, seed=0)
    >>> len(maps), columns[-2:], sorted({m.mismatch_ for m in maps[:-2]}) == [0.5, 10.0]
    (12, [(1,), (2,)], True)
    """
    from ..maps import RFF
    from ..maps.categorical import median_mismatch_rate

    numeric = tuple(int(column) for column in np.setdiff1d(np.arange(n_features_in), categorical))
    if mismatches == "auto":
        automatic = median_mismatch_rate(sample[:, list(categorical)])
        mismatches = (automatic, LARGE_MISMATCH) if automatic < LARGE_MISMATCH else (automatic,)
    if bandwidths == "auto":
        per_kernel = kernel_grid_size(kernels, "auto", len(mismatches)) // (len(kernels) * len(mismatches))
        numeric_rows = sample[:, list(numeric)]
        pairs = _auto_kernel_grid(kernels, per_kernel, numeric_rows) if numeric else [(k, 1.0) for k in kernels]
    else:
        pairs = kernel_grid(kernels, bandwidths, None)
    map_seed = shared_map_seed(seed)
    specs = [
        (dict(kernel=kernel, bandwidth=bandwidth, categorical=list(categorical), mismatch=mismatch, seed=map_seed),
         None)
        for kernel, bandwidth in pairs for mismatch in mismatches
    ]  # fmt: skip
    for column in categorical:  # a map of one input column: no numeric part, every frequency hashes the column
        specs.append(
            (dict(bandwidth=1.0, categorical=[0], mismatch=COLUMN_MISMATCH, seed=(map_seed + 1 + column) % 2**63),
             (column,))
        )  # fmt: skip
    maps = []
    for params, columns in specs:
        width = n_features_in if columns is None else len(columns)
        feature_map = RFF(n_features=n_features, variant=variant, **params)
        feature_map._begin_fit(width)
        maps.append(feature_map._finish_fit(np.empty((0, width))))
    return maps, [columns for _, columns in specs]


def check_aggregated_accumulator_size(
    n_bandwidths: int, n_permutations: int, n_features: int, max_accumulator_bytes: int
) -> None:
    """Raise InputError if the L x (B + 2) x D float64 sums exceed ``max_accumulator_bytes``.

    Every partial sketch (one per chunk until reduced) holds, per bandwidth,
    the B permutation sums and the X and Y feature sums.
    """
    size = 8 * int(n_bandwidths) * (int(n_permutations) + 2) * int(n_features)
    if size > max_accumulator_bytes:
        raise InputError(
            f"The aggregated test's sums take n_bandwidths x (n_permutations + 2) x n_features x 8 bytes = "
            f"{n_bandwidths} x ({n_permutations} + 2) x {n_features} x 8 = {size / 2**20:.1f} MiB per partial "
            f"sketch, over max_accumulator_bytes={max_accumulator_bytes} ({max_accumulator_bytes / 2**20:.1f} "
            "MiB). Use fewer bandwidths, permutations or features, or raise max_accumulator_bytes if the "
            "workers have the memory."
        )


def standardise(values: np.ndarray) -> np.ndarray:
    """Each row of ``values`` (L, B + 1) minus its mean, over its standard deviation.

    Row l holds bandwidth l's statistic for the observed split (column 0) and
    for the B permutations. Mean and standard deviation are taken over all
    B + 1 columns, a function of the set of statistics that does not depend on
    which column is the observed one, so the standardised statistics stay
    exchangeable under H0 and the aggregated test exact. A constant row
    (a kernel that cannot tell the rows apart) standardises to 0.
    """
    centred = values - values.mean(axis=1, keepdims=True)
    scale = np.sqrt(np.mean(centred**2, axis=1, keepdims=True))
    return np.divide(centred, scale, out=np.zeros_like(centred), where=scale > 0)


def _upper_tail_fractions(values: np.ndarray, tolerances: np.ndarray) -> np.ndarray:
    """``#{k : v[l, k] >= v[l, j] - tol_l} / (B + 1)`` for every (l, j): each statistic's permutation p-value."""
    out = np.empty_like(values)
    for row, (line, tolerance) in enumerate(zip(values, tolerances)):
        ordered = np.sort(line)
        out[row] = (line.shape[0] - np.searchsorted(ordered, line - tolerance, side="left")) / line.shape[0]
    return out


def aggregate(values: np.ndarray, aggregation: str, tolerances: np.ndarray | None = None) -> np.ndarray:
    """The aggregated statistic of each column of ``values`` (L, B + 1); larger means stronger evidence.

    ``"max"``
        ``max_l z_l`` with ``z`` the :func:`standardise`-d statistics: the
        largest standardised MMD^2 over the bandwidths.
    ``"fuse"``
        MMD-FUSE's soft maximum ``log((1/L) sum_l exp(z_l))`` (Biggs et al.
        2023, eq. 5, with their ``lambda = 1`` on statistics of unit null
        variance; here each MMD^2 is normalised by its permutation standard
        deviation, not by the kernel matrix's Frobenius norm).
    ``"mmdagg"``
        MMDAgg with uniform weights (Schrab et al. 2023, Algorithm 1):
        reject when some bandwidth's permutation p-value is below a threshold
        calibrated on the permutations, i.e. the statistic ``-min_l p_l``. Here
        the threshold's permutations are the same B as the quantiles' (MMDAgg
        draws a second set); ``p_l`` of a column is its rank among the B + 1
        statistics of bandwidth l, a function of the set, so the test stays exact.
        Ties of this statistic are broken by ``"max"`` in :func:`aggregated_p_value`.

    ``tolerances`` (L,) are the per-bandwidth tie tolerances on ``values``
    (used by ``"mmdagg"``'s ranks).

    Examples
    --------
    Two bandwidths (rows), the observed split and three permutations (columns):

    >>> import numpy as np
    >>> from streamrff.twosample import aggregate
    >>> values = np.array([[4.0, 1.0, 2.0, 1.0], [1.0, 2.0, 1.0, 0.0]])
    >>> standardised = (values - values.mean(axis=1, keepdims=True)) / values.std(axis=1, keepdims=True)
    >>> bool(np.allclose(aggregate(values, "max"), standardised.max(axis=0)))
    True
    >>> fuse = np.log(np.exp(standardised).mean(axis=0))
    >>> bool(np.allclose(aggregate(values, "fuse"), fuse))
    True

    ``"mmdagg"``: minus the smallest fraction of a row's 4 values at or above the
    column's (column 0: 1/4 of row 0's values are >= 4, 3/4 of row 1's are >= 1):

    >>> aggregate(values, "mmdagg").tolist()
    [-0.25, -0.25, -0.5, -1.0]
    """
    if aggregation == "mmdagg":
        tolerances = np.zeros(values.shape[0]) if tolerances is None else tolerances
        return -_upper_tail_fractions(values, tolerances).min(axis=0)
    scores = standardise(values)
    if aggregation == "max":
        return scores.max(axis=0)
    if aggregation == "fuse":
        return logsumexp(scores, axis=0) - np.log(scores.shape[0])
    raise InputError(f"aggregation must be one of {AGGREGATIONS}. Got {aggregation!r}.")


def aggregated_p_value(values: np.ndarray, aggregation: str, tolerances: np.ndarray) -> tuple[float, np.ndarray, float]:
    """The aggregated permutation test: ``(p, aggregated statistics (B + 1,), tie tolerance)``.

    ``p = (1 + #{b >= 1 : A_b >= A_0}) / (1 + B)`` with ``A_0`` the observed
    aggregated statistic (column 0 of ``values``) and ``A_b`` the b-th
    permutation's; aggregated statistics within the tolerance of ``A_0`` count
    as ties (``max`` and ``fuse`` move by at most ``max_l tol_l / sd_l`` when
    every MMD^2 moves by ``tol_l``). ``"mmdagg"``'s minimum p-value takes
    only B + 1 values and ties often (with B = 99 and 10 bandwidths its level
    under H0 was 0.005 instead of 0.05); its ties are broken by the ``"max"``
    statistic, a second fixed function of the same column, so the order stays
    a function of the statistics and the test stays exact.
    """
    statistics = aggregate(values, aggregation, tolerances)
    scale = values.std(axis=1)
    ratios = np.divide(tolerances, scale, out=np.zeros_like(scale), where=scale > 0)
    tolerance = float(ratios.max(initial=0.0))
    if aggregation == "mmdagg":
        # Ranks are multiples of 1 / (B + 1): equal ranks are equal floats; break ties by "max".
        ties = aggregate(values, "max")
        above = statistics[1:] > statistics[0] + 0.5 / values.shape[1]
        level = np.abs(statistics[1:] - statistics[0]) <= 0.5 / values.shape[1]
        count = np.count_nonzero(above | (level & (ties[1:] >= ties[0] - tolerance)))
    else:
        count = np.count_nonzero(statistics[1:] >= statistics[0] - tolerance)
    p_value = float((1 + count) / values.shape[1])
    return p_value, statistics, tolerance


def question_groups(columns: tuple[tuple[int, ...] | None, ...]) -> list[np.ndarray]:
    """The questions of an aggregated test: the maps of the whole row together, each column's map alone.

    ``columns`` holds, per map, None (a map of the whole row) or the input columns it reads
    (:func:`table_maps`). On numeric rows every map reads the whole row: one question.

    Examples
    --------
    >>> [group.tolist() for group in question_groups((None, None, (2,), (3,)))]
    [[0, 1], [2], [3]]
    """
    whole = [index for index, own in enumerate(columns) if own is None]
    groups = [np.array(whole)] if whole else []
    return groups + [np.array([index]) for index, own in enumerate(columns) if own is not None]


def questions_p_value(
    values: np.ndarray, groups: list[np.ndarray], aggregation: str, tolerances: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """The aggregated test over several questions: ``(p, statistics (B + 1,), p per question)``.

    A question is a group of maps (:func:`question_groups`): the whole row's maps, aggregated by
    ``aggregation`` over their bandwidths and lambdas, and each categorical column's delta kernel.
    Each question's statistic has its own permutation p-value over the shared permutations, and the
    test takes the smallest of them (Westfall & Young's minP, calibrated on the same permutations as
    :func:`aggregate`'s ``"mmdagg"`` is): every question gets about an equal share of the level,
    whatever the tail of its null law, and the test stays exact. With one question this is
    :func:`aggregated_p_value`.

    Why: under the maximum of standardised statistics each map's share of the level follows the
    skew of its null law, and a two-level column's delta kernel (a chi-square of 1 degree of
    freedom) took 0.020 of the 0.05 in the tables benchmark, the ten joint maps 0.023, and the
    10-level column whose frequencies changed 0.008, less than the 0.0125 a Bonferroni correction
    over four columns gives it (docs/guide/tables.rst, "Calibration and power, measured").

    References
    ----------
    Westfall, P. H. & Young, S. S. (1993). Resampling-based multiple testing, sec. 2.6.

    Examples
    --------
    Three maps (rows), the observed split and four permutations (columns); maps 0 and 1 are one
    question, map 2 another. The first question's own p-value is 1/5 (its observed maximum is the
    largest of the five), the second's 1 (its observed statistic is the smallest). Of the four
    permutations, one also reaches 1/5 on a question (column 1, on the second), and the ``"max"``
    tie-break counts it: p = (1 + 1) / 5.

    >>> import numpy as np
    >>> values = np.array([[4.0, 1.0, 2.0, 1.0, 0.0], [1.0, 2.0, 1.0, 0.0, 1.0], [0.0, 3.0, 1.0, 2.0, 1.0]])
    >>> p, statistics, own = questions_p_value(values, [np.array([0, 1]), np.array([2])], "max", np.zeros(3))
    >>> p, own.tolist(), statistics.tolist()
    (0.4, [0.2, 1.0], [-0.2, -0.2, -0.6, -0.4, -0.8])
    """
    if len(groups) == 1:
        p_value, statistics, _ = aggregated_p_value(values, aggregation, tolerances)
        return p_value, statistics, np.array([p_value])
    own, questions, question_tolerances = zip(
        *(aggregated_p_value(values[group], aggregation, tolerances[group]) for group in groups)
    )
    p_value, statistics, _ = aggregated_p_value(np.array(questions), "mmdagg", np.array(question_tolerances))
    return p_value, statistics, np.array(own)
