"""Chen & Phillips (2016) Fig. 1 on scikit-learn's digits: R_k of exact kernel PCA vs R_hat_k from RFF.

For k = 40 and bandwidths sigma in {4, 8, 16}, prints the exact residual R_k (sum of the tail
eigenvalues of the centred Gram matrix H K H) and the mean over trials of R_hat_k from
``streamrff.KernelPCA`` with t feature pairs (D = 2t sincos features) for t in {50, ..., 800},
the relative error |R_hat_k / R_k - 1| in %, and the paper's USPS numbers beside them.

Conventions: both the paper and streamrff use k(x, y) = exp(-||x - y||^2 / (2 sigma^2)). The paper
ran USPS (n = 2 000 rows of 16x16 = 256 pixels); digits has n = 1 797 rows of 8x8 = 64 pixels with
values 0..16, so the same sigma is a different kernel width relative to the data: the script
prints the median inter-point distance, and --pixel-scale rescales the pixels (e.g. 0.125 maps
0..16 to 0..2). Fig. 1's caption says "relative error in %", but its entries are R_hat_k values
(they approach the baseline row as t grows); the paper's relative errors are derived here.

Run: python benchmarks/repro_fig1.py [--trials 10] [--bandwidths 4 8 16] [--pixel-scale 1.0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.spatial.distance import pdist, squareform
from sklearn.datasets import load_digits

import streamrff as srf

#: Chen & Phillips 2016, Fig. 1 (USPS, n = 2000, k = 40): baseline R_k and R_hat_k per t, per sigma.
PAPER_SIGMAS = (4, 8, 16)
PAPER_BASELINE = {4: 1667.1, 8: 882.5, 16: 206.1}
PAPER_ESTIMATES = {
    50: {4: 897.6, 8: 489.2, 16: 96.9},
    100: {4: 1257.6, 8: 666.5, 16: 152.2},
    200: {4: 1453.6, 8: 776.4, 16: 178.7},
    400: {4: 1554.7, 8: 831.5, 16: 189.2},
    800: {4: 1606.8, 8: 857.3, 16: 197.6},
}


def exact_residual(squared_distances: np.ndarray, sigma: float, k: int) -> float:
    gram = np.exp(-squared_distances / (2.0 * sigma * sigma))
    centred = gram - gram.mean(axis=0) - gram.mean(axis=1)[:, None] + gram.mean()
    eigenvalues = np.linalg.eigvalsh(centred)[::-1]
    return float(eigenvalues[k:].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="random maps per (t, sigma); the paper used 10")
    parser.add_argument("--k", type=int, default=40)
    parser.add_argument("--bandwidths", type=float, nargs="+", default=[4.0, 8.0, 16.0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[50, 100, 200, 400, 800], help="t: feature pairs")
    parser.add_argument("--pixel-scale", type=float, default=1.0, help="multiply the 0..16 pixel values by this")
    parser.add_argument("--rows", type=int, default=None, help="use the first ROWS digits (default: all 1797)")
    args = parser.parse_args()

    X = load_digits().data.astype(np.float64)[: args.rows] * args.pixel_scale
    distances = pdist(X)
    squared = squareform(distances**2)
    print(f"digits: n = {len(X)}, d = {X.shape[1]}, pixel scale {args.pixel_scale}, "
          f"median inter-point distance {np.median(distances):.2f}, k = {args.k}, {args.trials} trials")

    started = time.perf_counter()
    baseline = {sigma: exact_residual(squared, sigma, args.k) for sigma in args.bandwidths}
    estimates: dict[int, dict[float, float]] = {}
    spreads: dict[int, dict[float, float]] = {}
    for t in args.pairs:
        estimates[t], spreads[t] = {}, {}
        for sigma in args.bandwidths:
            values = [
                srf.KernelPCA(n_components=args.k, n_features=2 * t, bandwidth=sigma, seed=trial).fit(X).residual_
                for trial in range(args.trials)
            ]
            estimates[t][sigma], spreads[t][sigma] = float(np.mean(values)), float(np.std(values))
    elapsed = time.perf_counter() - started

    sigmas = args.bandwidths
    paper_columns = [s for s in PAPER_SIGMAS if s in sigmas]
    header = "".join(f"{'sigma=' + format(s, 'g'):>22}" for s in sigmas)
    paper_header = "".join(f"{'USPS sigma=' + str(s):>17}" for s in paper_columns)
    print("\nR_k (exact) and mean R_hat_k (+- sd over trials); paper's USPS values alongside")
    print(f"{'':>10}{header}   |{paper_header}")
    print(f"{'baseline':>10}" + "".join(f"{baseline[s]:>22.1f}" for s in sigmas)
          + "   |" + "".join(f"{PAPER_BASELINE[s]:>17.1f}" for s in paper_columns))
    for t in args.pairs:
        ours = "".join(f"{estimates[t][s]:>13.1f} +- {spreads[t][s]:>5.1f}" for s in sigmas)
        paper = "".join(f"{PAPER_ESTIMATES[t][s]:>17.1f}" for s in paper_columns) if t in PAPER_ESTIMATES else ""
        print(f"{'t=' + str(t):>10}{ours}   |{paper}")

    print("\nrelative error |R_hat_k / R_k - 1| in %; paper's derived from its table")
    print(f"{'':>10}" + "".join(f"{'sigma=' + format(s, 'g'):>14}" for s in sigmas) + "   |" + paper_header)
    for t in args.pairs:
        ours = "".join(f"{100 * abs(estimates[t][s] / baseline[s] - 1):>14.2f}" for s in sigmas)
        paper = (
            "".join(f"{100 * abs(PAPER_ESTIMATES[t][s] / PAPER_BASELINE[s] - 1):>17.2f}" for s in paper_columns)
            if t in PAPER_ESTIMATES
            else ""
        )
        print(f"{'t=' + str(t):>10}{ours}   |{paper}")
    print(f"\n{len(args.pairs) * len(sigmas) * args.trials} KernelPCA fits and {len(sigmas)} exact "
          f"eigendecompositions in {elapsed:.0f} s")


if __name__ == "__main__":
    main()
