"""Figures: the null histogram keeps the null readable when the observed statistic is far; the scatter has a legend.

References: the null statistics and labels given to the plotting functions (axis limits, legend texts).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import matplotlib.pyplot as plt  # noqa: E402

from streamrff.errors import InputError  # noqa: E402
from streamrff.plot import plot_null, plot_scores  # noqa: E402
from streamrff.twosample import TwoSampleResult  # noqa: E402

NULL = np.random.default_rng(0).normal(0.0, 1e-3, size=500)


def result(statistic: float) -> TwoSampleResult:
    return TwoSampleResult(statistic, 0.002, "permutation", 400, 300, 1.0, 256, NULL)


def test_plot_null_far_statistic_zooms_on_the_null_and_shows_both_in_an_inset():
    figure, ax = plt.subplots()
    plot_null(result(0.2), ax)

    low, high = ax.get_xlim()
    assert low <= NULL.min() and NULL.max() <= high < 0.2  # the null fills the main axes
    (inset,) = ax.child_axes
    inset_low, inset_high = inset.get_xlim()
    assert inset_low <= NULL.min() and inset_high >= 0.2  # null and statistic together
    assert "observed MMD$^2$ = 0.2" in " ".join(text.get_text() for text in ax.get_legend().get_texts())
    assert "\n" in ax.get_title()  # two short lines, not one clipped line
    plt.close(figure)


def test_plot_null_near_statistic_has_no_inset():
    figure, ax = plt.subplots()
    plot_null(result(float(NULL.max())), ax)

    assert ax.child_axes == []
    assert ax.get_xlim()[1] >= NULL.max()
    plt.close(figure)


def test_plot_scores_legend_names_every_cluster():
    figure, ax = plt.subplots()
    labels = np.repeat([0, 1, 2], 50)
    plot_scores(np.random.default_rng(1).normal(size=(150, 2)), labels, ax)

    legend = ax.get_legend()
    assert legend.get_title().get_text() == "cluster"
    assert [text.get_text() for text in legend.get_texts()] == ["0", "1", "2"]
    plt.close(figure)


def test_plot_null_far_statistic_is_named_plainly_and_its_arrow_clears_the_inset():
    figure, ax = plt.subplots(figsize=(5.5, 4))
    plot_null(result(0.2), ax)
    figure.canvas.draw()

    legend = " ".join(text.get_text() for text in ax.get_legend().get_texts())
    assert "(far right, off this axis: see the inset)" in legend and "null ranges" not in legend
    (arrow,) = [child for child in ax.texts if child.get_text()]
    assert arrow.get_text() == "observed: far to the right"
    (inset,) = ax.child_axes
    assert inset.xaxis.get_offset_text().get_text() == ""  # no "1e-2" beside the inset's axis
    renderer = figure.canvas.get_renderer()
    arrow_box = arrow.get_window_extent(renderer)
    inset_box = inset.get_tightbbox(renderer)  # the inset with its title and tick labels
    assert not arrow_box.overlaps(inset_box)
    assert arrow_box.y1 < inset_box.y0
    plt.close(figure)


def test_plot_scores_label_names_name_each_cluster():
    figure, ax = plt.subplots()
    labels = np.repeat([0, 1, 2], 50)
    names = ["0: 45% of site A", "1: 35% of site A", "2: 20% of site A"]
    plot_scores(np.random.default_rng(1).normal(size=(150, 2)), labels, ax, label_names=names)

    assert [text.get_text() for text in ax.get_legend().get_texts()] == names
    with pytest.raises(InputError, match="label_names must name each of the 3 labels"):
        plot_scores(np.zeros((150, 2)), labels, label_names=names[:2])
    plt.close("all")
