"""Figures of two-sample tests, kernel PCA and drift (matplotlib, an extra: ``pip install streamrff[plot]``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InputError

__all__ = [
    "plot_null",
    "plot_bandwidths",
    "plot_scores",
    "plot_witness",
    "plot_witness_map",
    "save_report_figure",
    "save_explain_figure",
]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "streamrff.plot needs matplotlib. Install the extra: pip install 'streamrff[plot]'."
        ) from error
    return plt


def _axes(ax: Any, figsize: tuple[float, float]) -> Any:
    """``ax``, or the axes of a new figure of ``figsize`` inches."""
    return ax if ax is not None else _pyplot().subplots(figsize=figsize)[1]


def plot_null(result: Any, ax: Any = None) -> Any:
    """Histogram of the null statistics with the observed statistic and the p-value.

    Parameters
    ----------
    result : TwoSampleResult
        From :func:`streamrff.two_sample_test` or :func:`streamrff.mmd_test`
        (Hotelling's null is a chi-square law, drawn as its density in T^2).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    ax = _axes(ax, (5, 3.5))
    if result.method == "hotelling":
        from scipy import stats

        t_squared, dof = (float(v) for v in result.null[:2])
        grid = np.linspace(0, max(3.0 * dof, 1.2 * t_squared), 400)
        ax.plot(grid, stats.chi2.pdf(grid, dof), color="0.4", label=f"chi2({dof:.0f}) null")
        ax.axvline(t_squared, color="C3", label=f"observed T$^2$ = {t_squared:.3g}")
        ax.set_xlabel("Hotelling T$^2$")
    else:
        null = np.asarray(result.null, dtype=float)
        if null.size == 0:
            raise InputError("The result has no null statistics to draw.")
        _null_histogram(ax, null, result)
    # Two short lines: one long line is clipped in a 5-inch panel.
    ax.set_title(
        f"{result.method} two-sample test: p = {result.p_value_text}\nn_x = {result.n_x:,}, n_y = {result.n_y:,}",
        fontsize="medium",
    )
    ax.set_ylabel("density" if result.method == "hotelling" else "count")
    ax.legend(fontsize="small")
    return ax


#: The observed statistic counts as far from the null when it lies this many times the null's range beyond it.
_FAR = 3.0


def _null_histogram(ax: Any, null: np.ndarray, result: Any) -> None:
    """Histogram of the null with the observed statistic; an inset shows both when they are far apart.

    On one linear axis a statistic far beyond the null squeezes the histogram into a sliver, so the
    main axes then zoom on the null (the observed value is named in the legend and marked by an arrow
    at the edge) and an inset draws the whole range, null and observed value together.
    """
    bins = min(50, max(10, null.size // 10))
    low, high = float(null.min()), float(null.max())
    spread = max(high - low, 1e-300)
    far = result.statistic > high + _FAR * spread or result.statistic < low - _FAR * spread
    ax.hist(null, bins=bins, color="0.7", label=f"null ({result.method}, {null.size})")
    ax.set_xlabel("unbiased MMD$^2$")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    label = f"observed MMD$^2$ = {result.statistic:.3g}"
    if not far:
        ax.axvline(result.statistic, color="C3", label=label)
        return
    right = result.statistic > high
    side = "right" if right else "left"
    ax.plot([], [], color="C3", label=f"{label}\n(far {side}, off this axis: see the inset)")
    edge = 0.98 if right else 0.02
    # The arrow, named in words, points to where the statistic lies; it sits below the inset, whose tick
    # labels carry no offset text ("1e-2") that could run into it.
    ax.annotate(
        f"observed: far to the {side}", xy=(edge, 0.06), xytext=(0.5 + (edge - 0.5) * 0.35, 0.06),
        xycoords="axes fraction", textcoords="axes fraction", ha="right" if right else "left", va="center",
        fontsize="small", color="C3", arrowprops={"arrowstyle": "->", "color": "C3"},
        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
    )  # fmt: skip
    inset = ax.inset_axes([0.52, 0.3, 0.45, 0.3] if right else [0.03, 0.3, 0.45, 0.3])
    inset.hist(null, bins=bins, color="0.5")
    inset.axvline(result.statistic, color="C3")
    left, right_end = min(low, result.statistic), max(high, result.statistic)
    inset.set_xlim(left - 0.05 * (right_end - left), right_end + 0.05 * (right_end - left))
    inset.set_yticks([])
    inset.tick_params(labelsize="x-small")
    inset.xaxis.set_major_locator(_max_ticks(3))
    inset.xaxis.set_major_formatter(_plain_ticks())
    inset.set_title("null (grey) and observed (red), whole range", fontsize="x-small")


def _max_ticks(n_ticks: int) -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(n_ticks)


def _plain_ticks() -> Any:
    """Tick labels like 0, 0.01, 3e-05: each label whole, no offset text beside the axis."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:.2g}")


def plot_bandwidths(result: Any, ax: Any = None) -> Any:
    """Each bandwidth's standardised MMD^2 against its permutation null (aggregated test).

    For every bandwidth (x, log scale) the B standardised permuted statistics
    are drawn as grey points and the observed one as a red dot; the title
    gives the aggregated p-value. Per-bandwidth evidence is not corrected for
    testing several bandwidths: read the aggregated p-value.

    Parameters
    ----------
    result : AggregatedTwoSampleResult
        From :func:`streamrff.two_sample_test` with ``method="aggregated"``.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    ax = _axes(ax, (5.5, 3.5))
    bandwidths = np.asarray(result.bandwidths, dtype=float)
    scores = np.asarray(result.standardised, dtype=float)
    if scores.ndim != 2 or scores.shape[0] != bandwidths.shape[0] or scores.shape[1] < 2:
        raise InputError("The result has no per-bandwidth null statistics to draw.")
    spread = np.exp(np.random.default_rng(0).uniform(-0.06, 0.06, scores.shape[1] - 1))  # jitter, log scale
    for bandwidth, row in zip(bandwidths, scores):
        ax.scatter(bandwidth * spread, row[1:], s=4, color="0.65", alpha=0.5, linewidths=0)
    ax.plot(bandwidths, scores[:, 0], "o-", color="C3", label="observed")
    ax.scatter([], [], s=8, color="0.65", label=f"null ({scores.shape[1] - 1} permutations)")
    ax.set_xscale("log")
    ax.set_xlabel("bandwidth $\\sigma$")
    ax.set_ylabel("standardised MMD$^2$")
    ax.set_title(
        f"aggregated ({result.aggregation}) test: p = {result.p_value:.3g}  "
        f"(n_x = {result.n_x:,}, n_y = {result.n_y:,})",
        fontsize="medium",
    )
    ax.legend(fontsize="small")
    return ax


def plot_scores(
    scores: Any,
    labels: Any = None,
    ax: Any = None,
    max_points: int = 20_000,
    seed: int = 0,
    label_names: Sequence[str] | None = None,
) -> Any:
    """Scatter of the first two kernel PCA scores, coloured by cluster label.

    At most ``max_points`` rows (a seeded subsample) are drawn. ``label_names``
    gives the legend entry of each label 0, 1, ... (e.g. each cluster's share
    of each site's rows); by default the labels themselves.
    """
    scores = np.asarray(scores)
    if scores.ndim != 2 or scores.shape[1] < 2:
        raise InputError(f"scores must have shape (n, >= 2). Got {scores.shape}.")
    chosen = np.arange(scores.shape[0])
    if scores.shape[0] > max_points:
        chosen = np.sort(np.random.default_rng(seed).choice(scores.shape[0], max_points, replace=False))
    ax = _axes(ax, (5, 4))
    if labels is None:
        ax.scatter(scores[chosen, 0], scores[chosen, 1], s=3, alpha=0.6)
    else:
        labels = np.asarray(labels)
        n_labels = int(labels.max()) + 1 if labels.size else 0
        if label_names is not None and len(label_names) != n_labels:
            raise InputError(
                f"label_names must name each of the {n_labels} labels 0..{n_labels - 1}. Got {len(label_names)} names."
            )
        points = ax.scatter(
            scores[chosen, 0], scores[chosen, 1], c=labels[chosen], s=3, cmap="tab10", alpha=0.6,
            vmin=0, vmax=max(n_labels - 1, 1),
        )  # fmt: skip
        handles, names = points.legend_elements()
        names = [name.replace("$\\mathdefault{", "").replace("}$", "") for name in names]
        if label_names is not None:
            names = [label_names[int(name)] for name in names]
        ax.legend(handles, names, title="cluster", fontsize="small", markerscale=1.5)
    ax.set_xlabel("kernel PC 1")
    ax.set_ylabel("kernel PC 2")
    ax.set_title(
        "kernel PCA scores" + ("" if labels is None else "\ncoloured by kernel k-means cluster"), fontsize="medium"
    )
    return ax


def plot_drift(statistic: Any, threshold: Any, first_row: int = 0, drift_at: int | None = None, ax: Any = None) -> Any:
    """The drift statistic of every row against the threshold in force, with the alarm marked.

    Parameters
    ----------
    statistic, threshold : array-like of shape (n_rows,)
        Per row, :attr:`DriftUpdate.statistic` and :attr:`DriftUpdate.threshold`
        (NaN and inf, a window too short for them, are left out of the lines).
    first_row : int, default=0
        The row index of the first value (the x axis counts rows of the stream).
    drift_at : int, optional
        The row of the alarm (a vertical line).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.plot import plot_drift
    >>> statistic = np.r_[np.nan, np.linspace(0.0, 0.2, 99)]
    >>> threshold = np.r_[np.inf, np.full(99, 0.1)]
    >>> ax = plot_drift(statistic, threshold, first_row=1000, drift_at=1050)
    >>> [line.get_label() for line in ax.get_lines()]
    ['statistic (MMD^2 of the window)', 'threshold', 'alarm at row 1,050']
    >>> float(ax.get_lines()[0].get_xdata()[0])
    1001.0
    """
    statistic = np.asarray(statistic, dtype=np.float64)
    threshold = np.asarray(threshold, dtype=np.float64)
    if statistic.ndim != 1 or statistic.shape != threshold.shape:
        raise InputError(
            f"statistic and threshold must be 1-D arrays of one length. Got shapes {statistic.shape} and "
            f"{threshold.shape}; pass DriftUpdate.statistic and .threshold of the same rows."
        )
    ax = _axes(ax, (7, 3.5))
    rows = first_row + np.arange(statistic.shape[0])
    shown = np.isfinite(statistic)
    ax.plot(rows[shown], statistic[shown], lw=0.8, label="statistic (MMD^2 of the window)")
    limited = np.isfinite(threshold)
    ax.plot(rows[limited], threshold[limited], lw=1.2, color="black", ls="--", label="threshold")
    if drift_at is not None:
        ax.axvline(drift_at, color="tab:red", lw=1.2, label=f"alarm at row {drift_at:,}")
    ax.set_xlabel("row of the stream")
    ax.set_ylabel("unbiased MMD^2")
    ax.set_title("drift statistic against the calibrated threshold", fontsize="medium")
    ax.legend(fontsize="small")
    return ax


def save_drift_figure(
    path: str,
    statistic: Any,
    threshold: Any,
    first_row: int = 0,
    drift_at: int | None = None,
    overwrite: bool = True,
) -> None:
    """Write :func:`plot_drift`'s figure to ``path`` (PNG), published in one step like :func:`save_report_figure`."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(7, 3.5))
    plot_drift(statistic, threshold, first_row=first_row, drift_at=drift_at, ax=ax)
    figure.tight_layout()
    _publish_figure(figure, path, overwrite)


def plot_witness(explanation: Any, ax: Any = None, other: Any = None, other_label: str = "other source") -> Any:
    """The witness's distribution over the source (and ``other`` values), with its means under A and B.

    Parameters
    ----------
    explanation : Explanation
        From :func:`streamrff.explain`.
    ax : matplotlib Axes, optional
    other : array-like of float, optional
        Witness values of another sample's rows, drawn as a second histogram.
    other_label : str

    Returns
    -------
    matplotlib Axes
    """
    ax = _axes(ax, (5, 3.5))
    edges, counts = np.asarray(explanation.edges), np.asarray(explanation.counts, dtype=float)
    total = max(counts.sum(), 1.0)
    ax.stairs(counts / total, edges, fill=True, alpha=0.5, color="C0", label=f"source ({int(total):,} rows)")
    if other is not None:
        values = np.clip(np.asarray(other, dtype=float), edges[0], edges[-1])
        other_counts = np.histogram(values, bins=edges)[0].astype(float)
        ax.stairs(other_counts / max(other_counts.sum(), 1.0), edges, color="C1", label=other_label)
    ax.axvline(explanation.mean_a, color="C2", linestyle="--", label=f"mean under A ({explanation.mean_a:.3g})")
    ax.axvline(explanation.mean_b, color="C3", linestyle="--", label=f"mean under B ({explanation.mean_b:.3g})")
    ax.set_xlabel("witness f(x) = mean k(x, A) - mean k(x, B)")
    ax.set_ylabel("fraction of rows")
    ax.set_title(f"witness (MMD = {explanation.mmd:.3g})")
    ax.legend(fontsize=7)
    return ax


def plot_witness_map(
    points: Any,
    values: Any,
    ax: Any = None,
    axis_names: Sequence[str] = ("kernel PC 1", "kernel PC 2"),
    highlight: Any = None,
) -> Any:
    """A 2-D map of the witness: ``points`` (n, 2) coloured by ``values``; ``highlight`` rows ringed.

    Red where A is over-represented, blue where B is (a diverging map centred on 0).

    Returns
    -------
    matplotlib Axes
    """
    from matplotlib.colors import TwoSlopeNorm

    ax = _axes(ax, (5, 4))
    points, values = np.asarray(points, dtype=float), np.asarray(values, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2 or points.shape[0] != values.shape[0]:
        raise InputError(f"points must be (n, 2) with one value each. Got {points.shape} and {values.shape}.")
    reach = float(np.abs(values).max()) if values.size else 1.0
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-reach or -1.0, vmax=reach or 1.0)
    drawn = ax.scatter(points[:, 0], points[:, 1], c=values, cmap="coolwarm", norm=norm, s=8, alpha=0.8)
    if highlight is not None and len(highlight):
        highlight = np.asarray(highlight, dtype=float)
        ax.scatter(highlight[:, 0], highlight[:, 1], facecolors="none", edgecolors="k", s=40, label="top rows")
        ax.legend(fontsize=7)
    ax.figure.colorbar(drawn, ax=ax, label="witness")
    ax.set_xlabel(axis_names[0])
    ax.set_ylabel(axis_names[1])
    ax.set_title("where the samples differ")
    return ax


def save_explain_figure(
    path: str,
    explanation: Any,
    points: Any,
    values: Any,
    axis_names: Sequence[str] = ("kernel PC 1", "kernel PC 2"),
    highlight: Any = None,
    other: Any = None,
    overwrite: bool = True,
) -> None:
    """Write ``streamrff explain --plot``'s figure: the witness's distribution beside its 2-D map (PNG).

    Published in one step, as :func:`save_report_figure`.
    """
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    plot_witness(explanation, axes[0], other=other)
    plot_witness_map(points, values, axes[1], axis_names=axis_names, highlight=highlight)
    figure.tight_layout()
    _publish_figure(figure, path, overwrite)


def save_report_figure(
    path: str,
    result: Any = None,
    scores: Any = None,
    labels: Any = None,
    overwrite: bool = True,
    label_names: Sequence[str] | None = None,
    witness_map: tuple[Any, Any] | None = None,
) -> None:
    """Write a figure with the null histogram and/or the KPCA scatter side by side to ``path`` (PNG).

    ``label_names`` name the cluster labels in the scatter's legend (see :func:`plot_scores`).
    ``witness_map``, ``(points, values)``, adds the witness over two kernel PCs (:func:`plot_witness_map`).
    The figure is drawn to a temporary file and published in one step; with
    ``overwrite=False`` an existing ``path`` (even one that appeared while
    drawing) raises FileExistsError and is left as it was.
    """
    plt = _pyplot()
    panels = [p for p in (result, scores, witness_map) if p is not None]
    if not panels:
        raise InputError("save_report_figure needs a test result, scores, or both.")
    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    column = 0
    if result is not None:
        (plot_bandwidths if getattr(result, "method", None) == "aggregated" else plot_null)(result, axes[0, column])
        column += 1
    if scores is not None:
        plot_scores(scores, labels, axes[0, column], label_names=label_names)
        column += 1
    if witness_map is not None:
        plot_witness_map(witness_map[0], witness_map[1], axes[0, column])
    figure.tight_layout()
    _publish_figure(figure, path, overwrite)


def _publish_figure(figure: Any, path: str, overwrite: bool) -> None:
    """Draw ``figure`` to a temporary file, publish it at ``path`` in one step, and close it."""
    plt = _pyplot()
    from pathlib import Path

    from ._files.publish import output_errors, publish, remove_path, staging_path

    staging = staging_path(path)
    try:
        with output_errors(path):
            figure.savefig(staging, dpi=110, format=Path(path).suffix[1:].lower() or "png")
            publish(staging, path, overwrite)
    finally:
        plt.close(figure)
        remove_path(staging)
