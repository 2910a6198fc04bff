"""Per-column test of a categorical column against scipy's chi-square test of homogeneity."""

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from streamrff.errors import InputError
from streamrff.twosample.marginal import (
    HASHED_WIDTH,
    categorical_column_test,
    category_counts,
    merge_category_counts,
)


def test_chi_square_matches_scipy_and_effect_is_frequency_distance():
    rng = np.random.default_rng(0)
    x = rng.choice([1.0, 2.0, 3.0, 7.0], p=[0.4, 0.3, 0.2, 0.1], size=500)
    y = rng.choice([1.0, 2.0, 3.0, 9.0], p=[0.3, 0.3, 0.3, 0.1], size=400)
    codes = np.union1d(x, y)
    table = np.array([[np.sum(x == c) for c in codes], [np.sum(y == c) for c in codes]])
    reference = chi2_contingency(table, correction=False)
    statistic, p_value = categorical_column_test(x, y)
    assert p_value == pytest.approx(reference.pvalue, rel=1e-9)
    # the unbiased MMD^2 of the delta kernel, from its Gram matrices without their diagonals
    same_x, same_y, cross = (np.equal.outer(a, b) for a, b in ((x, x), (y, y), (x, y)))
    unbiased = (
        (same_x.sum() - 500) / (500 * 499) + (same_y.sum() - 400) / (400 * 399) - 2 * cross.sum() / (500 * 400)
    )
    assert statistic == pytest.approx(unbiased, rel=1e-9)


@pytest.mark.parametrize("shifted", [False, True])
def test_effect_is_unbiased_for_the_frequency_distance(shifted):
    """Monte Carlo mean of the effect against the closed form sum_k (p_k - q_k)^2 (the plug-in value is
    biased by sum_k p_k (1 - p_k) / n + q_k (1 - q_k) / m, about (K - 1) (1/n + 1/m) / K here)."""
    rng = np.random.default_rng(7)
    n_categories, n, m, repetitions = 40, 60, 80, 1500
    p = np.full(n_categories, 1 / n_categories)
    q = p.copy()
    if shifted:
        q[:4] += 0.02
        q[4:8] -= 0.02
    effects = np.array(
        [
            categorical_column_test(
                rng.choice(n_categories, size=n, p=p).astype(float), rng.choice(n_categories, size=m, p=q).astype(float)
            )[0]
            for _ in range(repetitions)
        ]
    )
    truth = np.sum((p - q) ** 2)
    plug_in_bias = np.sum(p * (1 - p)) / n + np.sum(q * (1 - q)) / m
    standard_error = effects.std(ddof=1) / np.sqrt(repetitions)
    assert abs(effects.mean() - truth) < 3 * standard_error
    assert plug_in_bias > 10 * standard_error  # the test would see the old bias


def test_counts_merge_like_one_pass_and_hash_past_the_cap():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 50, size=300).astype(float)
    assert merge_category_counts(category_counts(x[:100]), category_counts(x[100:])) == category_counts(x)
    # codes c and c + HASHED_WIDTH share a bucket once the column has more than `cap` categories
    x = x + HASHED_WIDTH * rng.integers(0, 2, size=300)
    y = rng.integers(0, 50, size=300) + HASHED_WIDTH * rng.integers(0, 2, size=300).astype(float)
    folded = np.array([[np.sum(np.mod(s, HASHED_WIDTH) == c) for c in range(50)] for s in (x, y)])
    reference = chi2_contingency(folded, correction=False)
    assert categorical_column_test(x, y, cap=10)[1] == pytest.approx(reference.pvalue, rel=1e-9)
    exact = chi2_contingency(np.array([[np.sum(s == c) for c in np.union1d(x, y)] for s in (x, y)]), correction=False)
    assert categorical_column_test(x, y)[1] == pytest.approx(exact.pvalue, rel=1e-9)
    with pytest.raises(InputError, match="empty"):
        categorical_column_test([], y)


def test_marginal_tests_give_a_table_column_its_chi_square_test():
    pd = pytest.importorskip("pandas")
    import streamrff as srf

    rng = np.random.default_rng(2)
    n = 600
    a = pd.DataFrame({"x": rng.normal(size=n), "colour": rng.choice(["r", "g", "b"], p=[0.5, 0.3, 0.2], size=n)})
    b = pd.DataFrame({"x": rng.normal(size=n), "colour": rng.choice(["r", "g", "b"], p=[0.3, 0.3, 0.4], size=n)})
    result = srf.marginal_tests(a, b, n_permutations=99)
    reference = chi2_contingency(pd.crosstab(np.repeat([0, 1], n), pd.concat([a.colour, b.colour])), correction=False)
    assert int(result.columns[0]) == 1
    assert result.p_values[0] == pytest.approx(reference.pvalue, rel=1e-9)
    assert result.adjusted_p_values[0] == pytest.approx(min(1.0, 2 * reference.pvalue), rel=1e-9)
