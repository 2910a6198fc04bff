"""How numbers that carry a statistical meaning are printed: p-values with their floors, MMD with its range.

Every repr, text report and CLI line that shows a p-value or an effect size goes through these
functions, so that a floor is said as a floor everywhere:

- a Monte Carlo p-value ``(1 + #{null >= T}) / (1 + B)`` at its smallest value says only that the
  statistic beat all B draws: it prints as ``< 1/(B+1) (value)`` and its JSON carries
  ``"at_floor": true``;
- a p-value below 1e-300 (float64 holds no meaningful digits there) prints as ``< 1e-300``;
- MMD and MMD^2 are printed in the same unit as their interval, with the kernel's range
  (0 to sqrt(2) for a Gaussian kernel, whose ``k(x, x) = 1`` and ``k >= 0``).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "SMALLEST_PRINTED_P",
    "MMD_RANGE_TEXT",
    "at_floor",
    "format_p_value",
    "p_equals",
    "p_value_fields",
    "format_mmd",
]

#: Below this a p-value is printed as ``< 1e-300``.
SMALLEST_PRINTED_P = 1e-300
#: The range of MMD for a Gaussian kernel, as printed.
MMD_RANGE_TEXT = "MMD runs from 0 (same distribution) to sqrt(2) = 1.414 (no overlap) for this kernel"


def at_floor(p_value: float, n_null: int | None) -> bool:
    """Whether a Monte Carlo p-value over ``n_null`` null draws sits at its floor ``1 / (n_null + 1)``.

    Examples
    --------
    >>> at_floor(1 / 1000, 999), at_floor(2 / 1000, 999), at_floor(1e-5, None)
    (True, False, False)
    """
    if not n_null:
        return False
    return float(p_value) <= (1.0 + 1e-9) / (n_null + 1.0)


def format_p_value(p_value: float, n_null: int | None = None) -> str:
    """A p-value as printed.

    Parameters
    ----------
    p_value : float
        The p-value.
    n_null : int, optional
        B, the number of null draws of a Monte Carlo (permutation, spectral) p-value; None for a
        p-value from a closed-form null (no floor).

    Returns
    -------
    str
        ``"< 1/(B+1) (value)"`` at the Monte Carlo floor, ``"< 1e-300"`` below 1e-300,
        otherwise 4 significant digits.

    Examples
    --------
    >>> format_p_value(0.012345), format_p_value(1 / 1000, 999), format_p_value(0.0), format_p_value(3e-302)
    ('0.01235', '< 1/1000 (0.001)', '< 1e-300', '< 1e-300')
    """
    if at_floor(p_value, n_null):
        return f"< 1/{int(n_null) + 1} ({1.0 / (int(n_null) + 1):.4g})"
    if not p_value >= SMALLEST_PRINTED_P:
        return f"< {SMALLEST_PRINTED_P:g}"
    return f"{p_value:.4g}"


def p_equals(p_value: float, n_null: int | None = None) -> str:
    """``"p = 0.01235"``, or ``"p < 1/1000 (0.001)"`` when the text is a bound.

    Examples
    --------
    >>> p_equals(0.5), p_equals(1 / 1000, 999)
    ('p = 0.5', 'p < 1/1000 (0.001)')
    """
    text = format_p_value(p_value, n_null)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def p_value_fields(p_value: float, n_null: int | None = None) -> dict[str, Any]:
    """A p-value for JSON: the value, whether it is at its Monte Carlo floor, and the text.

    Examples
    --------
    >>> p_value_fields(1 / 200, 199)
    {'p_value': 0.005, 'at_floor': True, 'p_value_text': '< 1/200 (0.005)'}
    """
    return {
        "p_value": float(p_value),
        "at_floor": at_floor(p_value, n_null),
        "p_value_text": format_p_value(p_value, n_null),
    }


def format_mmd(mmd2: float, interval: tuple[float, float] | None = None, level: float = 0.95, target: str = "") -> str:
    """MMD with its range and an MMD interval (square roots of the MMD^2 interval's ends), in one unit.

    Parameters
    ----------
    mmd2 : float
        The unbiased MMD^2 (may be slightly negative; MMD is ``sqrt(max(mmd2, 0))``).
    interval : (float, float), optional
        The ``level`` interval for MMD^2; None when there is none.
    level : float
        Its coverage.
    target : str
        What the interval covers (e.g. ``"Gaussian kernel"``), printed after it.

    Examples
    --------
    >>> format_mmd(0.0401, (0.0351, 0.046), 0.95, "Gaussian kernel")
    'MMD = 0.2002 (range 0 to sqrt(2)), 95% interval [0.1873, 0.2145] (Gaussian kernel)'
    >>> format_mmd(-0.0001)
    'MMD = 0 (range 0 to sqrt(2))'
    """
    text = f"MMD = {math.sqrt(max(mmd2, 0.0)):.4g} (range 0 to sqrt(2))"
    if interval is None:
        return text
    low, high = (math.sqrt(max(end, 0.0)) for end in interval)
    return text + f", {level:.0%} interval [{low:.4g}, {high:.4g}]" + (f" ({target})" if target else "")
