"""Coverage of the MMD^2 intervals (``TwoSampleResult.confidence_interval``) against exact truths (issue #48).

One-dimensional samples A = e and B = e' + h, e and e' standard normal or Student t3, Gaussian kernel of
bandwidth 1, sincos random features. Every repetition draws new samples *and* a new map of 512
frequencies; the maps of width D = 256, 512 and 1 024 are its first 128, 256 and 512 frequencies. Two
intervals are checked at every D, each against its own exact truth:

- ``interval="features"`` covers the drawn features' MMD^2 ``||mu_A - mu_B||^2``; the mean embeddings
  are the characteristic function phi of e at the map's frequencies
  (``E cos(w x) = cos(w mu) phi(w)``, ``phi(w) = exp(-w^2/2)`` normal, ``(1 + sqrt3 |w|) exp(-sqrt3 |w|)`` t3);
- ``interval="kernel"`` covers the Gaussian kernel's MMD^2
  ``int phi(w)^2 2 (1 - cos(w h)) N(w; 0, 1) dw``: ``2 (1 - exp(-h^2/6)) / sqrt(3)`` for normal e,
  scipy ``quad`` (relative tolerance 1e-11) for t3.

The shift h is set so that the truth is 0, 1, 2, 4 and 10 standard errors of the statistic (the exact
variance formula with the population covariance of the features of a fixed D = 256 map). The intervals
are those of the library (:func:`streamrff.twosample.effect.inverted_interval` on an
:class:`~streamrff.twosample.effect.MMD2Variance` made as ``mmd2_variance_parts`` makes it), computed
from moment sketches formed here without the D x D moments being recomputed for every cell:

- the moments of B at shift h are those at shift 0 rotated (``z(x + h) = R(h) z(x)`` for sincos
  features), so one draw of the data serves the five shifts (the cells of a row share draws);
- the moments of the narrower maps are blocks of the widest one's;
- beyond D = 256 the law's 64 leading eigenpairs come from a randomised range finder
  (two power iterations) instead of ``eigsh``; ``--verify`` checks the whole path against
  ``srf.sketch_array`` + ``effect_of_sketches`` + ``inverted_interval`` on fresh maps first.

Prints, per cell and every ``--report-every`` repetitions: coverage at 90% and 95%, the 95% misses
below and above the interval (truth below its lower end, above its upper end), and
``rms(T - truth) / sqrt(mean Var(truth))``, the observed spread against the interval's mean variance
at the truth (1 when the variance is right on average).
Targets (issue #48): 90% in 0.87-0.93 and 95% in 0.93-0.97 at 1 to 10 s.e., at least nominal at 0;
300 repetitions (a 0.95 share of 300 has a Monte Carlo standard error of 0.0126). The last line says how
often an exactly calibrated interval would land in both bands at the repetitions run
(:func:`exact_interval_in_bands`: 0.877 per cell at 300, about 84 of the 96 cells; 0.996 at 1 000).

    OMP_NUM_THREADS=1 python benchmarks/check_interval_coverage.py            # full grid, 300 repetitions
    python benchmarks/check_interval_coverage.py --sizes 500:20000 --distributions t3 --repetitions 60
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
from scipy import integrate

import streamrff as srf
from streamrff.sketches.mean import MeanSketch
from streamrff.twosample import effect as E

SQRT3 = np.sqrt(3.0)
WIDTHS = (256, 512, 1024)
LEVELS = (0.90, 0.95)
TARGETS = ("features", "kernel")
#: The fixed D = 256 map whose exact standard error sets the shifts.
FIXED_FREQUENCIES = np.random.default_rng(0).standard_normal(128)


def noise(rng: np.random.Generator, distribution: str, n: int) -> np.ndarray:
    return rng.normal(size=n) if distribution == "normal" else rng.standard_t(3, size=n)


def characteristic(distribution: str, w: np.ndarray) -> np.ndarray:
    if distribution == "normal":
        return np.exp(-(w**2) / 2.0)
    return (1.0 + SQRT3 * np.abs(w)) * np.exp(-SQRT3 * np.abs(w))


@functools.cache
def kernel_truth(distribution: str, shift: float) -> float:
    """The Gaussian kernel's (bandwidth 1) MMD^2 of e and e + shift, from the characteristic function."""
    if distribution == "normal":
        return 2.0 * (1.0 - np.exp(-(shift**2) / 6.0)) / SQRT3

    def integrand(w: float) -> float:
        return float(characteristic(distribution, np.array(w)) ** 2 * 2.0 * (1.0 - np.cos(w * shift)))

    value, _ = integrate.quad(
        lambda w: integrand(w) * np.exp(-(w**2) / 2.0), 0.0, np.inf, epsabs=0.0, epsrel=1e-11, limit=400
    )
    return 2.0 * value / np.sqrt(2.0 * np.pi)


def embedding(w: np.ndarray, distribution: str, shift: float) -> np.ndarray:
    """The population mean of the sincos features of e + shift at frequencies w."""
    phi = characteristic(distribution, w)
    return np.concatenate([np.cos(w * shift) * phi, np.sin(w * shift) * phi]) / np.sqrt(w.shape[0])


def features_truth(w: np.ndarray, distribution: str, shift: float) -> float:
    delta = embedding(w, distribution, 0.0) - embedding(w, distribution, shift)
    return float(delta @ delta)


def rotate(matrix: np.ndarray, w: np.ndarray, shift: float) -> np.ndarray:
    """``R M R'`` (``M`` of shape (2K, 2K)) or ``R v`` for the rotation of sincos features by a shift."""
    c, s = np.cos(w * shift), np.sin(w * shift)
    k = w.shape[0]

    def rows(m: np.ndarray) -> np.ndarray:
        top, bottom = m[:k], m[k:]
        cc, ss = (c, s) if m.ndim == 1 else (c[:, None], s[:, None])
        return np.concatenate([cc * top - ss * bottom, ss * top + cc * bottom])

    return rows(matrix) if matrix.ndim == 1 else rows(rows(matrix).T).T


def moments(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Feature sum and ``sum z z'`` of the sincos features of 1-D x at frequencies w (float64), exactly.

    Every entry is a value of the sample's characteristic sum ``psi(t) = sum_x exp(i t x)`` at
    ``t = w_i -/+ w_j`` (``cos a cos b = (cos(a - b) + cos(a + b)) / 2`` and so on), all of them
    from one type-3 NUFFT (finufft, tolerance 1e-13) instead of an n x D x D product.
    """
    import finufft

    k = w.shape[0]
    minus, plus = (w[:, None] - w[None, :]).ravel(), (w[:, None] + w[None, :]).ravel()
    points = np.concatenate([minus, plus, w])
    psi = finufft.nufft1d3(x.astype(np.float64), np.ones(x.shape[0], dtype=np.complex128), points, eps=1e-13, isign=1)
    c_minus, c_plus = psi.real[: k * k].reshape(k, k), psi.real[k * k : 2 * k * k].reshape(k, k)
    s_minus, s_plus = psi.imag[: k * k].reshape(k, k), psi.imag[k * k : 2 * k * k].reshape(k, k)
    cos_sin = (s_plus - s_minus) / 2.0  # sum cos(w_i x) sin(w_j x)
    moment = np.block([[(c_minus + c_plus) / 2.0, cos_sin], [cos_sin.T, (c_minus - c_plus) / 2.0]]) / k
    total = np.concatenate([psi.real[2 * k * k :], psi.imag[2 * k * k :]]) / np.sqrt(k)
    return total, (moment + moment.T) / 2.0


def narrow(total: np.ndarray, moment: np.ndarray, k_all: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The sum and moments of the map made of the first k of the k_all frequencies."""
    index = np.r_[0:k, k_all : k_all + k]
    scale = k_all / k
    return total[index] * np.sqrt(scale), moment[np.ix_(index, index)] * scale


def leading_eigenpairs(matrix: np.ndarray, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` leading eigenpairs of a symmetric PSD matrix: randomised range finder, 2 power iterations."""
    basis = matrix @ rng.standard_normal((matrix.shape[0], count + 16))
    for _ in range(2):
        basis, _ = np.linalg.qr(basis)
        basis = matrix @ basis
    basis, _ = np.linalg.qr(basis)
    values, vectors = np.linalg.eigh(basis.T @ matrix @ basis)
    return values[-count:], basis @ vectors[:, -count:]


def variance_parts(sx: MeanSketch, sy: MeanSketch) -> E.MMD2Variance:
    """``effect.mmd2_variance_parts``, the leading eigenpairs beyond D = 256 from :func:`leading_eigenpairs`."""
    width = sx.mean.shape[0]
    if width <= 4 * E.SHAPE_EIGENVALUES:
        return E.mmd2_variance_parts(sx, sy)
    rng = np.random.default_rng(width)
    return E.mmd2_variance_parts(sx, sy, lambda covariance: leading_eigenpairs(covariance, E.SHAPE_EIGENVALUES, rng))


@functools.cache
def label_map(width: int) -> srf.RFF:
    """A fitted 1-D map of the width (the sketches' label: only its spec is read by the variance)."""
    return srf.RFF(n_features=width, bandwidth=1.0, seed=0).fit(np.zeros((1, 1)))


def sketch(width: int, count: int, total: np.ndarray, moment: np.ndarray) -> MeanSketch:
    return MeanSketch(label_map(width), count, total.copy(), float(count), moment.copy())


# --- the shift at a multiple of the standard error (fixed D = 256 map, population covariance) ---


@functools.cache
def population_covariance(distribution: str, rows: int = 2_000_000) -> np.ndarray:
    w = FIXED_FREQUENCIES
    total, moment = moments(noise(np.random.default_rng(12345), distribution, rows), w)
    mean = embedding(w, distribution, 0.0)  # exact mean; second moments from the large sample
    return moment / rows - np.outer(mean, mean)


def exact_sd(w, distribution, cov_a, shift, n, m) -> float:
    cov_b = rotate(cov_a, w, shift)
    delta = embedding(w, distribution, 0.0) - embedding(w, distribution, shift)
    variance = (
        4 * delta @ cov_a @ delta / n
        + 4 * delta @ cov_b @ delta / m
        + 2 * np.sum(cov_a * cov_a) / (n * (n - 1))
        + 2 * np.sum(cov_b * cov_b) / (m * (m - 1))
        + 4 * np.sum(cov_a * cov_b) / (n * m)
    )
    return float(np.sqrt(variance))


def shift_at(multiple: float, w, distribution, cov_a, n, m) -> float:
    """The shift h at which the fixed map's MMD^2 is ``multiple`` standard errors (bisection)."""
    if multiple == 0:
        return 0.0
    low, high = 0.0, 12.0
    for _ in range(60):
        mid = (low + high) / 2
        ratio = features_truth(w, distribution, mid) / exact_sd(w, distribution, cov_a, mid, n, m)
        low, high = (mid, high) if ratio < multiple else (low, mid)
    return (low + high) / 2


# --- the grid ---


class Cell:
    """Counts of one (distribution, size, multiple, D, target) cell."""

    def __init__(self) -> None:
        self.covered = dict.fromkeys(LEVELS, 0)
        self.above = 0
        self.below = 0
        self.errors: list[float] = []
        self.variances: list[float] = []

    def add(self, statistic: float, truth: float, variance: E.MMD2Variance, target: str) -> None:
        self.errors.append(statistic - truth)
        self.variances.append(variance.at(truth, target))
        for level in LEVELS:
            low, high = E.inverted_interval(statistic, variance, level, target)
            self.covered[level] += low <= truth <= high
            self.above += level == 0.95 and truth > high
            self.below += level == 0.95 and truth < low

    def line(self) -> str:
        count = len(self.errors)
        ratio = np.sqrt(np.mean(np.square(self.errors)) / np.mean(self.variances))
        return (
            f"90% {self.covered[0.90] / count:.3f}  95% {self.covered[0.95] / count:.3f}  "
            f"(95% misses below {self.below:>2} above {self.above:>2}; "
            f"rms(T - truth) / sqrt(mean Var(truth)) {ratio:.3f})"
        )


def run_size(distribution: str, n: int, m: int, multiples, repetitions, report_every, seed, features_widths) -> None:
    fixed = FIXED_FREQUENCIES
    cov_a = population_covariance(distribution)
    shifts = [shift_at(multiple, fixed, distribution, cov_a, n, m) for multiple in multiples]
    pairs = [(width, "kernel") for width in WIDTHS] + [(width, "features") for width in features_widths]
    cells = {(q, width, target): Cell() for q in multiples for width, target in pairs}
    rng = np.random.default_rng([seed, n, m, 0 if distribution == "normal" else 1])
    k_all = WIDTHS[-1] // 2
    start = time.perf_counter()
    for repetition in range(1, repetitions + 1):
        w = rng.standard_normal(k_all)
        total_a, moment_a = moments(noise(rng, distribution, n), w)
        total_b0, moment_b0 = moments(noise(rng, distribution, m), w)
        for multiple, shift in zip(multiples, shifts):
            total_b, moment_b = rotate(total_b0, w, shift), rotate(moment_b0, w, shift)
            for width in WIDTHS:
                k = width // 2
                sx = sketch(width, n, *narrow(total_a, moment_a, k_all, k))
                sy = sketch(width, m, *narrow(total_b, moment_b, k_all, k))
                statistic = srf.mmd2(sx, sy)
                variance = variance_parts(sx, sy)
                truths = {"features": features_truth(w[:k], distribution, shift),
                          "kernel": kernel_truth(distribution, shift)}  # fmt: skip
                for target in TARGETS:
                    if (multiple, width, target) in cells:
                        cells[multiple, width, target].add(statistic, truths[target], variance, target)
        if repetition % report_every == 0 or repetition == repetitions:
            elapsed = time.perf_counter() - start
            for width, target in pairs:
                for multiple, shift in zip(multiples, shifts):
                    print(
                        f"{target:<8} {distribution:<6} D={width:<4} n={n}/{m:<5} {multiple:>3g} s.e. "
                        f"(h={shift:.4f}) reps={repetition:<3}: {cells[multiple, width, target].line()}"
                    )
            print(f"# {distribution} n={n}/{m}: {repetition} repetitions in {elapsed:.0f} s", flush=True)


def verify(distribution: str, n: int, m: int, shift: float, seeds: int = 3) -> None:
    """The fast path against ``sketch_array`` + ``effect_of_sketches`` + ``inverted_interval`` on fresh maps."""
    worst = 0.0
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)
        a, b = noise(rng, distribution, n), noise(rng, distribution, m) + shift
        for width in WIDTHS:
            rff = srf.RFF(n_features=width, bandwidth=1.0, seed=seed).fit(np.zeros((1, 1)))
            w = np.asarray(rff._frequencies(), dtype=np.float64)[:, 0]
            library = E.effect_of_sketches(
                srf.sketch_array(a[:, None], rff, moments=True), srf.sketch_array(b[:, None], rff, moments=True)
            )
            sx, sy = sketch(width, n, *moments(a, w)), sketch(width, m, *moments(b, w))
            statistic = srf.mmd2(sx, sy)
            mine = variance_parts(sx, sy)
            for target in TARGETS:
                for level in LEVELS:
                    expected = np.array(E.inverted_interval(statistic, library.variance, level, target))
                    got = np.array(E.inverted_interval(statistic, mine, level, target))
                    worst = max(worst, float(np.max(np.abs(got - expected) / np.maximum(np.abs(expected), 1e-12))))
    print(f"# verify {distribution} n={n}/{m} h={shift}: largest relative difference of an interval end {worst:.2e}")


def exact_interval_in_bands(repetitions: int) -> float:
    """The chance that an exactly calibrated interval's cell lands in both bands (90% in 0.87-0.93, 95% in
    0.93-0.97) over ``repetitions``: each repetition's truth falls inside the 90% interval (0.90), in the 95%
    but not the 90% one (0.05) or outside both (0.05); a multinomial sum."""
    from scipy.stats import multinomial

    total = 0.0
    for inner in range(repetitions + 1):
        for between in range(repetitions + 1 - inner):
            if 0.87 <= inner / repetitions <= 0.93 and 0.93 <= (inner + between) / repetitions <= 0.97:
                counts = [inner, between, repetitions - inner - between]
                total += multinomial.pmf(counts, repetitions, [0.90, 0.05, 0.05])
    return float(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=300)
    parser.add_argument("--report-every", type=int, default=100)
    parser.add_argument("--sizes", nargs="+", default=["50:50", "2000:2000", "500:20000"])
    parser.add_argument("--multiples", nargs="+", type=float, default=[0, 1, 2, 4, 10])
    parser.add_argument("--distributions", nargs="+", default=["normal", "t3"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features-widths", nargs="*", type=int, default=[256], help="D of the drawn-kernel cells")
    parser.add_argument("--verify", action="store_true", help="check the fast path against the library first")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.verify:
        verify("t3", 500, 2000, 0.1)
        verify("normal", 50, 50, 0.5)
    print(f"t3 Gaussian-kernel truth at h = 0.5: {kernel_truth('t3', 0.5):.12g}")
    for distribution in args.distributions:
        for size in args.sizes:
            n, m = (int(part) for part in size.split(":"))
            run_size(
                distribution, n, m, args.multiples, args.repetitions, args.report_every, args.seed, args.features_widths
            )
    print(f"total {time.perf_counter() - start:.0f} s", flush=True)
    chance = exact_interval_in_bands(args.repetitions)
    print(f"# an exactly calibrated interval lands in both bands in a cell with probability {chance:.3f} at "
          f"{args.repetitions} repetitions ({96 * chance:.1f} of the issue's 96 cells)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
