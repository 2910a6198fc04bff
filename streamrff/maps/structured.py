"""The structured frequencies of ``RFF(structured=True)``: SORF blocks, drawn, checked and materialised.

:class:`~streamrff.RFF` with ``structured=True`` replaces its dense Gaussian
frequency matrix ``W`` (m x d) by ``ceil(m / n)`` SORF blocks (Yu et al. 2016,
sec. 4), ``n`` = d padded to a power of two: a block is
``(1 / sigma) S H D1 H D2 H D3`` with ``H`` the Walsh-Hadamard matrix, D1..D3
random sign diagonals and S independent chi(n) row norms. Its rows are exactly
orthogonal within a block; a row costs O(m log n) to project instead of
O(m d). The compiled kernels (:mod:`streamrff._kernels.sorf`, whose docstring
compares SORF with Fastfood and with dense features) apply the blocks without
forming ``W``; the float64 paths and the NUFFT need ``W`` itself, which
:func:`structured_frequency_matrix` builds exactly.

Bias at small widths. SORF's blocks are not Haar-distributed, and the kernel
estimate has a bias of order ``1 / sqrt(n)`` (Yu et al. 2016, Thm. 4) that
the chi(n) norms shrink but do not remove at small ``n``. Measured, the mean
over 2 500-4 000 seeds of one block's estimate of ``k(x, x + r e_1)`` (a
difference along a coordinate axis, the worst direction found) minus the exact
value ``exp(-r^2 / 2)``, in units of sigma:

=======  ===============  =========  ===========================
n        d                r = 1      r = 2 (exact value 0.135)
=======  ===============  =========  ===========================
4        3, 4             -0.017     -0.144
8        5 to 8           -0.007     -0.039
16       9 to 16          -0.002     -0.011
32       17 to 32         -0.001     -0.003 (1.8 standard errors)
64       33 to 64         -0.0006    -0.001 (0.9 standard errors)
=======  ===============  =========  ===========================

So ``RFF(structured=True)`` fitted on 16 or fewer columns warns
(:class:`~streamrff.errors.BiasWarning`); dense features cost next to nothing at
such widths anyway. It warns rather than refuses, so that a pipeline that is
sometimes fed narrow data keeps running.

References
----------
Yu, F. X., Suresh, A. T., Choromanski, K., Holtmann-Rice, D. & Kumar, S.
(2016). Orthogonal random features. NeurIPS. Sec. 4 (SORF), Thm. 4.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import BiasWarning

__all__ = ["MIN_UNBIASED_PADDED_WIDTH", "draw_structured_params", "structured_frequency_matrix", "warn_if_biased"]

#: The smallest padded width (power of two) at which SORF's kernel bias is within the Monte-Carlo
#: error of a few thousand seeds (see the module docstring); below it RFF(structured=True) warns.
MIN_UNBIASED_PADDED_WIDTH = 32


def draw_structured_params(
    rng: np.random.Generator, n_features_in: int, n_frequencies: int, bandwidth: float
) -> dict[str, np.ndarray]:
    """The SORF diagonals and row scales of ``n_frequencies`` frequencies, drawn from ``rng``.

    See :func:`streamrff._kernels.sorf.structured_params` (method ``"sorf"``) for the arrays.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.maps.structured import draw_structured_params
    >>> params = draw_structured_params(np.random.default_rng(0), 20, 40, bandwidth=1.0)
    >>> params["signs"].shape, params["row_scales"].shape  # two blocks of 32 rows, 3 sign diagonals each
    ((2, 3, 32), (40,))
    """
    from .._kernels.sorf import structured_params  # here, not at the top: numba takes ~0.2 s to import

    return structured_params(rng, n_features_in, n_frequencies, bandwidth, method="sorf")


def _walsh_hadamard_rows(block: np.ndarray) -> None:
    """``block[b] = H block[b]`` in place for a float64 (blocks, n, columns) array (Sylvester's H)."""
    n = block.shape[1]
    half = 1
    while half < n:
        pairs = block.reshape(block.shape[0], n // (2 * half), 2, half, block.shape[2])
        top = pairs[:, :, 0] + pairs[:, :, 1]
        pairs[:, :, 1] = pairs[:, :, 0] - pairs[:, :, 1]
        pairs[:, :, 0] = top
        half *= 2


def structured_frequency_matrix(params: dict[str, np.ndarray], n_features_in: int) -> np.ndarray:
    """The frequency matrix ``W`` (m x d, float64) of SORF parameters, formed exactly.

    Block b is ``diag(row_scales_b) H D1 H D2 H D3`` restricted to the first d
    columns (the padding's columns multiply zeros). ``H D1 H D2 H D3`` has
    integer entries of magnitude at most ``n^2``, formed exactly in float64 by
    three fast transforms, and a row scale (a float32) times an integer below
    ``2^29`` is exact in float64: for n up to 16 384, ``W`` is the map's
    frequencies without rounding, and the compiled float32 projection is its
    float32 evaluation.

    Parameters
    ----------
    params : dict of numpy.ndarray
        From :func:`draw_structured_params` (``signs`` and ``row_scales`` are read).
    n_features_in : int
        Input width d.

    Returns
    -------
    numpy.ndarray
        float64 (m, d).

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.maps.structured import draw_structured_params, structured_frequency_matrix
    >>> params = draw_structured_params(np.random.default_rng(0), 32, 64, bandwidth=2.0)
    >>> W = structured_frequency_matrix(params, 32)
    >>> gram = W[:32] @ W[:32].T  # the first block (d = n = 32, no padding): orthogonal rows
    >>> W.shape, bool(np.allclose(gram, np.diag(np.diag(gram)), rtol=0, atol=1e-12))
    ((64, 32), True)
    """
    signs = params["signs"].astype(np.float64)  # (blocks, 3, n): D3, D2, D1 of each block
    row_scales = params["row_scales"].astype(np.float64)
    blocks, _, n = signs.shape
    block = np.zeros((blocks, n, n_features_in))
    columns = np.arange(n_features_in)
    block[:, columns, columns] = signs[:, 0, :n_features_in]
    _walsh_hadamard_rows(block)
    for k in (1, 2):
        block *= signs[:, k, :, None]
        _walsh_hadamard_rows(block)
    return block.reshape(blocks * n, n_features_in)[: row_scales.shape[0]] * row_scales[:, None]


def warn_if_biased(n_features_in: int, stacklevel: int) -> None:
    """Warn (:class:`~streamrff.errors.BiasWarning`) if SORF's kernel estimate is biased at this width.

    Examples
    --------
    >>> import warnings
    >>> from streamrff.maps.structured import warn_if_biased
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_biased(8, stacklevel=2)
    ...     warn_if_biased(300, stacklevel=2)
    >>> [warning.category.__name__ for warning in caught]
    ['BiasWarning']
    """
    from .._kernels.hadamard import padded_width  # here, not at the top: numba takes ~0.2 s to import

    n = padded_width(n_features_in)
    if n < MIN_UNBIASED_PADDED_WIDTH:
        warnings.warn(
            f"RFF(structured=True) on {n_features_in}-dimensional input: its structured blocks of width {n} "
            "give a biased kernel estimate (measured along a coordinate axis at distance 2 bandwidths, where "
            "the kernel is 0.135: -0.14 for 3-4 columns, -0.04 for 5-8, -0.01 for 9-16). Structured "
            "features pay off for hundreds of columns; use "
            "structured=False (dense features cost next to nothing at this width), or orthogonal=True.",
            BiasWarning,
            stacklevel=stacklevel + 1,
        )
