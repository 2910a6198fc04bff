"""The outcome of a kernel two-sample test."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._base.formatting import format_mmd, format_p_value, p_value_fields
from ..errors import InputError
from ..maps import FeatureMap, spec_bandwidth
from ..typing import MapSpec
from .effect import (
    INTERVAL_LABELS,
    NO_MOMENTS_MESSAGE,
    EffectSize,
    check_interval,
    check_level,
    default_interval,
    inverted_interval,
)

__all__ = ["TwoSampleResult", "AggregatedTwoSampleResult"]


@dataclass(frozen=True, eq=False)
class TwoSampleResult:
    """Outcome of a kernel two-sample test.

    Attributes
    ----------
    statistic : float
        Unbiased MMD^2 estimate (Sutherland & Schneider 2015, sec. 3.3).
    p_value : float
        p-value for H0: X and Y come from the same distribution (float64: 0.0 once it
        falls below ~1e-308; ``log10_p_value`` then still holds it).
    method : str
        ``"permutation"``, ``"spectral"`` or ``"hotelling"``.
    n_x, n_y : int
        Sample sizes.
    bandwidth : float or None
        Gaussian kernel width sigma of the map (None if the map has none).
    n_features : int
        Width D of the feature map.
    null : ndarray
        ``"permutation"``: the B permuted MMD^2 statistics; ``"spectral"``:
        the Monte-Carlo draws of the approximate null of MMD^2; ``"hotelling"``:
        ``[T^2, dof]`` (chi-square statistic and its degrees of freedom).
    map_spec : dict
        Spec of the feature map used.
    log10_p_value : float
        Base-10 log of the p-value, computed in log space for ``"hotelling"``
        (``-inf`` only when T^2 is infinite); ``log10(p_value)`` otherwise. The
        permutation and spectral p-values are at least ``1 / (1 + len(null))``.
    p_value_text : str
        The p-value as printed: 4 significant digits, ``"< 1/(B+1) (value)"`` at the floor of a
        Monte Carlo p-value over B draws, ``"< 1e-300"`` below 1e-300 (``log10_p_value`` holds it).
    degrees_of_freedom : int or None
        ``"hotelling"``: the chi-square null's degrees of freedom (the number of
        principal directions kept); None for the other methods.

    Examples
    --------
    The spectral test of two moment sketches keeps its Monte-Carlo draws of the
    null in ``null``; the p-value is ``(1 + #{draws >= T}) / (1 + n_draws)``:

    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> rff = srf.RFF(n_features=128, bandwidth=1.0).fit(np.zeros((1, 2)))
    >>> sketch_x = srf.sketch_array(rng.normal(size=(300, 2)), rff, moments=True)
    >>> sketch_y = srf.sketch_array(rng.normal(0.2, 1.0, size=(300, 2)), rff, moments=True)
    >>> result = srf.mmd_test(sketch_x, sketch_y, method="spectral", n_draws=999)
    >>> result.method, result.n_x, result.null.shape
    ('spectral', 300, (999,))
    >>> count = int((result.null >= result.statistic).sum())
    >>> bool(np.isclose(result.p_value, (1 + count) / (1 + 999))), result.p_value
    (True, 0.02)
    >>> result.degrees_of_freedom is None, result.to_dict(include_null=False)["method"]  # dof: Hotelling's only
    (True, 'spectral')
    """

    statistic: float
    p_value: float
    method: str
    n_x: int
    n_y: int
    bandwidth: float | None
    n_features: int
    null: np.ndarray = field(repr=False)
    map_spec: MapSpec = field(default_factory=dict, repr=False)
    log10_p_value: float | None = field(default=None, repr=False)
    effect: EffectSize | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        null = np.array(self.null, dtype=np.float64)
        null.setflags(write=False)
        object.__setattr__(self, "null", null)
        if self.log10_p_value is None:
            with np.errstate(divide="ignore"):
                object.__setattr__(self, "log10_p_value", float(np.log10(self.p_value)))
        else:
            object.__setattr__(self, "log10_p_value", float(self.log10_p_value))

    @property
    def n_null(self) -> int | None:
        """B, the null draws of a Monte Carlo p-value (permutation, spectral), whose floor is ``1 / (B + 1)``;
        None for Hotelling's closed-form null."""
        return None if self.method == "hotelling" else int(self.null.shape[0])

    @property
    def p_value_text(self) -> str:
        """The p-value as printed (:func:`streamrff._base.formatting.format_p_value`): ``"0.01235"``,
        ``"< 1/1000 (0.001)"`` at the Monte Carlo floor, ``"< 1e-300"`` below 1e-300."""
        return format_p_value(self.p_value, self.n_null)

    @property
    def degrees_of_freedom(self) -> int | None:
        """The Hotelling test's chi-square degrees of freedom; None for the other methods."""
        return int(self.null[1]) if self.method == "hotelling" else None

    @property
    def mmd(self) -> float:
        """The effect size in the kernel's units: ``sqrt(max(statistic, 0))``, the RKHS distance of the means."""
        return float(np.sqrt(max(self.statistic, 0.0)))

    @property
    def has_interval(self) -> bool:
        """Whether :meth:`confidence_interval` is available (the test read the samples' second moments)."""
        return self.effect is not None and self.effect.variance is not None

    def confidence_interval(self, level: float = 0.95, interval: str = "kernel") -> tuple[float, float]:
        """A ``level`` confidence interval for the population MMD^2 of the Gaussian kernel (or of the drawn features).

        It inverts the test of each hypothesised value theta
        (:func:`streamrff.twosample.effect.inverted_interval`): the statistic's law at theta, its
        degenerate part (variance ``V_0``) and its witness part (variance ``a theta``) drawn from the
        same noise of the difference of the means (from the centred second moments), so it covers
        near MMD^2 = 0 as well as far from it, with its misses on both sides (coverage table in the
        guide "Where do they differ?"). With
        ``interval="kernel"`` it adds the variance over the random frequencies, estimated from the
        frequencies' own contributions, and covers the Gaussian kernel's MMD^2; ``"features"``
        covers the MMD^2 of the drawn features' kernel. Take square roots of both ends for an
        interval of :attr:`mmd`.

        Parameters
        ----------
        level : float, default=0.95
            Coverage, strictly between 0 and 1.
        interval : {"kernel", "features"}, default="kernel"
            What the interval covers: the Gaussian kernel's MMD^2 (a random Fourier map), or that of
            the drawn features' kernel (any map).

        Returns
        -------
        (low, high) : tuple of float

        Raises
        ------
        InputError
            If the test had no second moments (sketch with ``moments=True``, CLI ``--moments``),
            ``level`` is not in (0, 1), or ``interval="kernel"`` for a map that is not a random Fourier map.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(0)
        >>> rff = srf.RFF(n_features=256, bandwidth=1.0).fit(np.zeros((1, 2)))
        >>> sx = srf.sketch_array(rng.normal(size=(2000, 2)), rff, moments=True)
        >>> sy = srf.sketch_array(rng.normal(0.3, 1.0, size=(2000, 2)), rff, moments=True)
        >>> result = srf.mmd_test(sx, sy)
        >>> low, high = result.confidence_interval(0.95)
        >>> bool(0 < low < result.statistic < high), round(result.mmd, 2)
        (True, 0.2)
        """
        level = check_level(level)
        if not self.has_interval:
            raise InputError(NO_MOMENTS_MESSAGE)
        interval = check_interval(interval, self.effect)
        return inverted_interval(self.statistic, self.effect.variance, level, interval)

    def witness(self) -> Any:
        """The witness of X against Y (:class:`streamrff.twosample.Witness`): positive where X is over-represented.

        Raises
        ------
        InputError
            If the result was made without its samples' means (built by hand).

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(0)
        >>> X, Y = rng.normal(size=(300, 1)), rng.normal(1.5, 1.0, size=(300, 1))
        >>> result = srf.two_sample_test(X, Y, n_features=256, bandwidth=1.0, n_permutations=19)
        >>> f = result.witness()
        >>> bool(f(np.array([[-1.0]]))[0] > 0 > f(np.array([[2.5]]))[0])
        True
        """
        from .witness import Witness  # the witness reaches the engine; results stay light

        if self.effect is None:
            raise InputError(
                "This result carries no mean embeddings. Make it with streamrff.two_sample_test, "
                "permutation_test or mmd_test."
            )
        return Witness.of_effect(self.effect)

    def __repr__(self) -> str:
        if self.method == "permutation":
            null = f"{self.null.shape[0]} permutations"
        elif self.method == "spectral":
            null = f"weighted chi-square, {self.null.shape[0]} Monte-Carlo draws"
        else:
            null = f"chi-square, T^2 = {self.null[0]:.4g} on {self.null[1]:.0f} dof"
        bandwidth = "n/a" if self.bandwidth is None else f"{self.bandwidth:.4g}"
        return (
            f"TwoSampleResult(method={self.method!r})\n"
            f"  statistic (unbiased MMD^2): {self.statistic:.6g}\n"
            f"  effect size:                {self.effect_text()}\n"
            f"  p-value:                    {self.p_value_text}\n"
            f"  null:                       {null}\n"
            f"  samples:                    n_x={self.n_x}, n_y={self.n_y}\n"
            f"  kernel:                     Gaussian, bandwidth={bandwidth}, n_features={self.n_features}"
        )

    def to_dict(self, include_null: bool = True) -> dict[str, Any]:
        """JSON-able dictionary (the CLI's ``--json`` output)."""
        out: dict[str, Any] = {
            "statistic": float(self.statistic),
            **p_value_fields(self.p_value, self.n_null),
            # JSON has no -inf; null means the p-value is exactly 0 (an infinite T^2).
            "log10_p_value": float(self.log10_p_value) if np.isfinite(self.log10_p_value) else None,
            "method": self.method,
            "n_x": int(self.n_x),
            "n_y": int(self.n_y),
            "bandwidth": None if self.bandwidth is None else float(self.bandwidth),
            "n_features": int(self.n_features),
            "map": self.map_spec,
        }
        if self.method == "hotelling":
            out.update(t_squared=float(self.null[0]), dof=int(self.null[1]))
        out["mmd"] = self.mmd
        out["mmd_range"] = [0.0, float(np.sqrt(2.0))]
        out["confidence_interval"] = interval_fields(self.statistic, self.effect) if self.has_interval else None
        if not self.has_interval:
            out["confidence_interval_note"] = "needs moment sketches: sketch with --moments (moments=True)"
        if include_null:
            out["null"] = [float(value) for value in self.null]
        return out

    def effect_text(self, level: float = 0.95) -> str:
        """The effect size as printed: MMD (0 to sqrt 2) with a ``level`` interval for MMD and what it covers.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(0)
        >>> rff = srf.RFF(n_features=256, bandwidth=1.0).fit(np.zeros((1, 2)))
        >>> sx = srf.sketch_array(rng.normal(size=(2000, 2)), rff, moments=True)
        >>> sy = srf.sketch_array(rng.normal(0.3, 1.0, size=(2000, 2)), rff, moments=True)
        >>> srf.mmd_test(sx, sy).effect_text()
        'MMD = 0.1584 (range 0 to sqrt(2)), 95% interval [0.131, 0.1863] (Gaussian kernel)'
        """
        if not self.has_interval:
            return format_mmd(self.statistic) + " (interval: sketch with --moments)"
        target = default_interval(self.effect)
        interval = inverted_interval(self.statistic, self.effect.variance, level, target)
        return format_mmd(self.statistic, interval, level, INTERVAL_LABELS[target])


def interval_fields(statistic: float, effect: EffectSize, level: float = 0.95) -> dict[str, Any]:
    """The JSON of an effect's interval: level, what it covers, the MMD^2 and MMD ends (the other target too)."""
    target = default_interval(effect)
    low, high = inverted_interval(float(statistic), effect.variance, level, target)
    out: dict[str, Any] = {
        "level": level,
        "interval": target,
        "covers": INTERVAL_LABELS[target],
        "mmd2": [low, high],
        "mmd": [float(np.sqrt(low)), float(np.sqrt(high))],
    }
    if target == "kernel":
        out["features_mmd2"] = list(inverted_interval(float(statistic), effect.variance, level, "features"))
    return out


def _result(
    method: str,
    statistic: float,
    p_value: float,
    n_x: int,
    n_y: int,
    feature_map: FeatureMap,
    null: np.ndarray,
    log10_p_value: float | None = None,
    effect: EffectSize | None = None,
) -> TwoSampleResult:
    spec = feature_map.spec
    return TwoSampleResult(
        statistic=float(statistic),
        p_value=float(p_value),
        method=method,
        n_x=int(n_x),
        n_y=int(n_y),
        bandwidth=spec_bandwidth(spec),
        n_features=int(feature_map.n_features_out_),
        null=null,
        map_spec=spec,
        log10_p_value=log10_p_value,
        effect=effect,
    )


def _frozen(values: Any) -> np.ndarray:
    array = np.array(values, dtype=np.float64)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class AggregatedTwoSampleResult:
    """Outcome of the aggregated multi-bandwidth permutation test (``method="aggregated"``).

    Every bandwidth's MMD^2 is computed under the same B permutations; the
    aggregated p-value is that of the aggregated statistic and is the one to
    report. The per-bandwidth p-values are each bandwidth's own permutation
    test, NOT corrected for testing L bandwidths: they show at which scales
    the samples differ, not whether they differ.

    Attributes
    ----------
    statistic : float
        Observed aggregated statistic (see ``aggregation``; with ``questions``, minus the smallest
        question's p-value).
    p_value : float
        Aggregated permutation p-value ``(1 + #{b : A_b >= A}) / (1 + B)``.
    aggregation : str
        ``"max"``, ``"fuse"`` or ``"mmdagg"`` (:func:`streamrff.twosample.aggregate`).
    n_x, n_y : int
        Sample sizes.
    n_features : int
        Width D of each bandwidth's feature map.
    bandwidths : ndarray of shape (L,)
        Gaussian kernel widths sigma, increasing as given.
    statistics : ndarray of shape (L,)
        Unbiased MMD^2 per bandwidth.
    p_values_uncorrected : ndarray of shape (L,)
        Each bandwidth's own permutation p-value (not corrected for multiplicity).
    standardised : ndarray of shape (L, B + 1)
        MMD^2 minus its permutation mean over its permutation standard
        deviation; column 0 is the observed split, columns 1..B the permutations.
    null : ndarray of shape (B,)
        Aggregated statistics of the B permutations.
    null_statistics : ndarray of shape (L, B)
        Permuted MMD^2 per bandwidth.
    map_specs : tuple of dict
        Spec of each bandwidth's feature map.
    kernels : tuple of str
        Per map, its name in the table when the maps are not all of one kind (a table's mixed maps and
        per-column equality kernels: :func:`~streamrff.twosample.aggregated.kernel_label`); else empty.
    questions : tuple of (str, float)
        On a table with categorical columns, the questions the test asks and each one's own permutation
        p-value: the whole row (its maps aggregated by ``aggregation``) and each categorical column's delta
        kernel. ``p_value`` is calibrated on the smallest of them
        (:func:`~streamrff.twosample.questions_p_value`). Empty with one question.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(200, 2)), rng.normal(0.5, 1.0, size=(200, 2))
    >>> result = srf.two_sample_test(X, Y, n_features=128, n_permutations=99, method="aggregated",
    ...                              bandwidths=[0.25, 1.0, 4.0])
    >>> result.aggregation, result.bandwidths.tolist(), result.null_statistics.shape
    ('max', [0.25, 1.0, 4.0], (3, 99))
    >>> bool(np.isclose(result.p_value, (1 + (result.null >= result.statistic).sum()) / 100))
    True
    >>> result.p_value <= 0.05
    True
    """

    statistic: float
    p_value: float
    aggregation: str
    n_x: int
    n_y: int
    n_features: int
    bandwidths: np.ndarray
    statistics: np.ndarray
    p_values_uncorrected: np.ndarray
    standardised: np.ndarray = field(repr=False)
    null: np.ndarray = field(repr=False)
    null_statistics: np.ndarray = field(repr=False)
    map_specs: tuple[MapSpec, ...] = field(default=(), repr=False)
    kernels: tuple[str, ...] = field(default=(), repr=False)
    effects: tuple[EffectSize, ...] = field(default=(), repr=False)
    questions: tuple[tuple[str, float], ...] = field(default=(), repr=False)

    method = "aggregated"

    def __post_init__(self) -> None:
        for name in ("bandwidths", "statistics", "p_values_uncorrected", "standardised", "null", "null_statistics"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @property
    def n_permutations(self) -> int:
        """B, the permutations shared by every bandwidth."""
        return int(self.null.shape[0])

    @property
    def mmd(self) -> np.ndarray:
        """Per bandwidth, the effect size in that kernel's units: ``sqrt(max(MMD^2, 0))``."""
        return np.sqrt(np.maximum(self.statistics, 0.0))

    @property
    def has_interval(self) -> bool:
        """Whether :meth:`confidence_interval` is available (every bandwidth's second moments were read)."""
        return bool(self.effects) and all(effect.variance is not None for effect in self.effects)

    def confidence_interval(self, level: float = 0.95, interval: str = "kernel") -> np.ndarray:
        """Per bandwidth, a ``level`` confidence interval for that kernel's MMD^2 (as
        :meth:`TwoSampleResult.confidence_interval`; not corrected for the L bandwidths).

        Returns
        -------
        ndarray of shape (L, 2)
            ``[low, high]`` per bandwidth, in the order of ``bandwidths``.

        Raises
        ------
        InputError
            Without second moments (``two_sample_test(..., moments=True)``; CLI ``--moments``),
            or a ``level`` outside (0, 1).
        """
        level = check_level(level)
        if not self.has_interval:
            raise InputError(NO_MOMENTS_MESSAGE)
        targets = [check_interval(interval, effect) for effect in self.effects]
        pairs = zip(self.statistics, self.effects, targets)
        return np.array([inverted_interval(float(t), effect.variance, level, target) for t, effect, target in pairs])

    def witness(self, bandwidth: float | None = None) -> Any:
        """The witness of X against Y at one bandwidth (default: the largest standardised statistic).

        Raises
        ------
        InputError
            If ``bandwidth`` is not one of ``bandwidths``, or the result carries no means.
        """
        from .witness import Witness  # the witness reaches the engine; results stay light

        if not self.effects:
            raise InputError("This result carries no mean embeddings. Make it with streamrff.two_sample_test.")
        if bandwidth is None:
            index = int(np.argmax(self.standardised[:, 0]))
        else:
            matches = np.flatnonzero(np.isclose(self.bandwidths, float(bandwidth), rtol=1e-9))
            if not matches.size:
                raise InputError(
                    f"bandwidth must be one of the test's bandwidths {self.bandwidths.tolist()}. Got {bandwidth!r}."
                )
            index = int(matches[0])
        return Witness.of_effect(self.effects[index])

    def __repr__(self) -> str:
        lines = [
            f"AggregatedTwoSampleResult(aggregation={self.aggregation!r})",
            f"  p-value (aggregated):  {format_p_value(self.p_value, self.n_permutations)}",
            f"  statistic:             {self.statistic:.6g}"
            + (" (minus the smallest question's p-value)" if self.questions else ""),
            f"  null:                  {self.n_permutations} permutations shared by "
            f"{self.bandwidths.shape[0]} bandwidths",
            f"  samples:               n_x={self.n_x}, n_y={self.n_y}",
            f"  kernels:               Gaussian, n_features={self.n_features} per bandwidth",
            *self.question_lines(23),
            *self.table_lines(),
        ]
        return "\n".join(lines)

    def question_lines(self, width: int = 14) -> list[str]:
        """On a table, the questions with their own p-values (the aggregated p-value takes the smallest),
        after a label ``width`` characters wide."""
        if not self.questions:
            return []
        parts = [f"{label} p = {format_p_value(p, self.n_permutations)}" for label, p in self.questions]
        return [f"  {'questions:':<{width}}{'; '.join(parts)} (each its own permutation p-value)"]

    def table_lines(self, level: float = 0.95) -> list[str]:
        """The per-bandwidth table as printed: MMD (0 to sqrt 2) with its interval for the Gaussian kernel
        when the test read moments, the standardised statistic and the uncorrected p-value with its floor."""
        intervals = None
        if self.has_interval:
            targets = {default_interval(effect) for effect in self.effects}
            target = "kernel" if targets == {"kernel"} else "features"
            intervals = np.sqrt(np.maximum(self.confidence_interval(level, target), 0.0))
        heading = f"{level:.0%} interval for MMD" if intervals is not None else "interval (needs --moments)"
        unit = "map" if self.kernels else "bandwidth"
        kernel = f"{'kernel':<18} " if self.kernels else ""
        lines = [
            f"  per {unit} (p-values NOT corrected for testing several {unit}s; MMD runs from 0 to sqrt(2)"
            + (f"; intervals for the {INTERVAL_LABELS[target]}):" if intervals is not None else "):"),
            f"    {kernel}{'bandwidth':>10} {'MMD':>8} {heading:>26} {'standardised':>12} {'p uncorrected':>20}",
        ]
        for index, bandwidth in enumerate(self.bandwidths):
            ends = "" if intervals is None else f"[{intervals[index, 0]:.4g}, {intervals[index, 1]:.4g}]"
            p_text = format_p_value(self.p_values_uncorrected[index], self.n_permutations)
            name = f"{self.kernels[index]:<18} " if self.kernels else ""
            width = "-" if self.kernels and self.kernels[index].startswith("column ") else f"{bandwidth:.4g}"
            lines.append(
                f"    {name}{width:>10} {self.mmd[index]:>8.4g} {ends:>26} "
                f"{self.standardised[index, 0]:>12.3f} {p_text:>20}"
            )
        return lines

    def to_dict(self, include_null: bool = True) -> dict[str, Any]:
        """JSON-able dictionary (the CLI's ``--json`` output)."""
        rows = []
        for index, bandwidth in enumerate(self.bandwidths):
            p_fields = p_value_fields(self.p_values_uncorrected[index], self.n_permutations)
            row: dict[str, Any] = {
                "bandwidth": float(bandwidth),
                "statistic": float(self.statistics[index]),
                "standardised": float(self.standardised[index, 0]),
                "p_value_uncorrected": p_fields["p_value"],
                "at_floor": p_fields["at_floor"],
                "p_value_text": p_fields["p_value_text"],
                "mmd": float(self.mmd[index]),
            }
            if self.kernels:
                row["kernel"] = self.kernels[index]
            if self.has_interval:
                row["confidence_interval"] = interval_fields(self.statistics[index], self.effects[index])
            if include_null:
                row["null"] = [float(value) for value in self.null_statistics[index]]
            rows.append(row)
        out: dict[str, Any] = {
            "statistic": float(self.statistic),
            **p_value_fields(self.p_value, self.n_permutations),
            "method": self.method,
            "aggregation": self.aggregation,
            "n_x": int(self.n_x),
            "n_y": int(self.n_y),
            "n_features": int(self.n_features),
            "n_permutations": self.n_permutations,
            "bandwidths": rows,
            "maps": list(self.map_specs),
        }
        if self.questions:
            out["questions"] = [
                {"question": label, **p_value_fields(p, self.n_permutations)} for label, p in self.questions
            ]
        if include_null:
            out["null"] = [float(value) for value in self.null]
        return out
