"""Relative error of kernel distances between 2-D point sets: RelativeErrorRFF vs sincos RFF at equal D.

Phillips & Tai (2018) show that their hash family keeps ||F(P) - F(Q)|| within (1 +- eps) D_K(P, Q)
for all pairs with D_K^2(P, Q) >= alpha, whereas RFF's error is additive and becomes large relative
to D_K as D_K^2 shrinks toward alpha when P and Q differ at frequencies the Gaussian spectrum
rarely samples. Two families of pairs, exact D_K from numpy Gram blocks:

* shapes: circles, ellipses, squares, disks, crosses, triangles (200 points) under shifts,
  scalings and noise, and a few pairs of different shapes;
* stripes: the two halves of a Gaussian-warped grid split by the sign of cos(w x_1): equal
  envelopes, so the difference lies at the stripe frequency w and D_K^2 falls toward alpha as w grows.

For every map (several seeds) the script prints, per D_K^2 bin, the fraction of pairs within
10% relative error and the worst error, for both maps side by side.

A third family (``--shifted``, and after the others by default) tests the claim that plain
RFF's relative error grows as D_K^2 shrinks: disks, circles and squares against copies of
themselves shifted by s (s geometric, so that D_K^2 runs from ~1 down to 1e-4), with
RelativeErrorRFF's floor alpha = 1e-4. Per D_K^2 decade it prints the RMS and worst relative
error of both maps and the ratio of their RMS errors.

Run: python benchmarks/bench_relative_error.py [--features 4096 16384] [--seeds 4] [--shifted]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.spatial.distance import cdist
from scipy.stats import norm

import streamrff as srf

SIGMA, ALPHA = 1.0, 1e-3
KINDS = ("circle", "ellipse", "square", "disk", "cross", "triangle")


def kappa(P: np.ndarray, Q: np.ndarray, block: int = 2048) -> float:
    total = 0.0
    for start in range(0, len(P), block):
        total += np.exp(-cdist(P[start : start + block], Q, "sqeuclidean") / (2 * SIGMA**2)).sum()
    return total / (len(P) * len(Q))


def outline(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    t = rng.uniform(0, 2 * np.pi, n)
    if kind == "circle":
        return np.c_[np.cos(t), np.sin(t)]
    if kind == "ellipse":
        return np.c_[1.4 * np.cos(t), 0.6 * np.sin(t)]
    if kind == "disk":
        radius = np.sqrt(rng.uniform(size=n))
        return np.c_[radius * np.cos(t), radius * np.sin(t)]
    if kind == "cross":
        u, horizontal = rng.uniform(-1, 1, n), rng.uniform(size=n) < 0.5
        return np.where(horizontal[:, None], np.c_[u, np.zeros(n)], np.c_[np.zeros(n), u])
    corners = {
        "square": np.array([[-1, -1], [1, -1], [1, 1], [-1, 1.0]]),
        "triangle": np.array([[0, 1], [-0.87, -0.5], [0.87, -0.5]]),
    }[kind]
    position = rng.uniform(0, len(corners), n)
    side, along = position.astype(int), (position % 1)[:, None]
    return corners[side] * (1 - along) + corners[(side + 1) % len(corners)] * along


def shape_pairs(seed: int = 1, n_points: int = 200) -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    sets = {}
    for number, kind in enumerate(KINDS):
        center = np.random.default_rng(100 + number).uniform(-2, 2, 2)
        for shift in (0.0, 0.15, 0.5):
            for scale in (1.0, 1.15):
                for noise in (0.0, 0.08):
                    points = outline(kind, n_points, rng) * scale + center + [shift, 0.0]
                    sets[(kind, shift, scale, noise)] = points + noise * rng.normal(size=points.shape)
    keys = list(sets)
    pick = np.random.default_rng(3)
    return [
        ("shapes", sets[a], sets[b])
        for i, a in enumerate(keys)
        for b in keys[i + 1 :]
        if a[0] == b[0] or pick.uniform() < 0.05
    ]


def stripe_pairs(frequencies, width: float = 2.5, n: int = 56) -> list[tuple[str, np.ndarray, np.ndarray]]:
    axis = norm.ppf((np.arange(n) + 0.5) / n) * width
    grid = np.array(np.meshgrid(axis, axis)).reshape(2, -1).T
    pairs = []
    for frequency in frequencies:
        positive = np.cos(frequency * grid[:, 0]) > 0
        pairs.append((f"stripes w={frequency}", grid[positive], grid[~positive]))
    return pairs


#: RelativeErrorRFF's floor in the shifted-sets comparison: the smallest D_K^2 it covers.
SHIFT_ALPHA = 1e-4


def shifted_pairs(n_points: int = 200) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Disks, circles and squares against themselves shifted by s along a random direction."""
    rng = np.random.default_rng(11)
    pairs = []
    for kind in ("disk", "circle", "square"):
        points = outline(kind, n_points, rng)
        for shift in np.geomspace(0.01, 2.0, 12):
            angle = rng.uniform(0, 2 * np.pi)
            pairs.append((f"{kind} s={shift:.3g}", points, points + shift * np.array([np.cos(angle), np.sin(angle)])))
    return pairs


def shifted_comparison(features: list[int], seeds: int, eps: float) -> None:
    pairs = shifted_pairs()
    exact = np.array([kappa(P, P) + kappa(Q, Q) - 2 * kappa(P, Q) for _, P, Q in pairs])
    makers = {
        "RelativeErrorRFF": lambda D, seed: srf.RelativeErrorRFF(
            n_features=D, bandwidth=SIGMA, alpha=SHIFT_ALPHA, eps=eps, seed=seed
        ),
        "RFF sincos": lambda D, seed: srf.RFF(n_features=D, bandwidth=SIGMA, seed=seed),
    }
    print(f"\nShifted sets: {len(pairs)} pairs, D_K^2 from {exact.min():.1e} to {exact.max():.2f}; "
          f"RelativeErrorRFF alpha = {SHIFT_ALPHA:g}, eps = {eps}")  # fmt: skip
    edges = [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 3.0]
    for D in features:
        errors = {}
        for label, make in makers.items():
            per_seed = []
            for seed in range(seeds):
                feature_map = make(D, seed).fit(np.zeros((1, 2)))
                estimates = [
                    srf.kernel_distance(srf.sketch_array(P, feature_map), srf.sketch_array(Q, feature_map))
                    for _, P, Q in pairs
                ]
                per_seed.append(np.abs(np.array(estimates) / np.sqrt(exact) - 1))
            errors[label] = np.stack(per_seed)
        print(f"D = {D}, {seeds} maps each: RMS / worst relative error of D_K, and RMS ratio (relative / RFF)")
        print(f"{'D_K^2 range':<20}{'pairs':>6}" + "".join(f"{label:>22}" for label in makers) + f"{'ratio':>8}")
        for low, high in zip(edges[:-1], edges[1:]):
            inside = (exact >= low) & (exact < high)
            if not inside.any():
                continue
            rms = {label: float(np.sqrt(np.mean(errors[label][:, inside] ** 2))) for label in makers}
            cells = "".join(f"{rms[label]:>13.4f} / {errors[label][:, inside].max():.3f}" for label in makers)
            ratio = rms["RelativeErrorRFF"] / rms["RFF sincos"]
            print(f"[{low:.0e}, {high:.0e}){'':<4}{inside.sum():>6}{cells}{ratio:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, nargs="+", default=[4096, 16384], help="D values")
    parser.add_argument("--seeds", type=int, default=4, help="maps per D")
    parser.add_argument("--eps", type=float, default=0.1, help="RelativeErrorRFF eps")
    parser.add_argument("--shifted", action="store_true", help="only the shifted-sets comparison")
    args = parser.parse_args()

    if args.shifted:
        shifted_comparison(args.features, args.seeds, args.eps)
        return
    started = time.perf_counter()
    pairs = shape_pairs() + stripe_pairs([2.6, 2.8, 3.0, 3.2, 3.4, 3.6, 3.8, 4.0])
    exact = np.array([kappa(P, P) + kappa(Q, Q) - 2 * kappa(P, Q) for _, P, Q in pairs])
    kept = exact >= ALPHA
    pairs = [pair for pair, keep in zip(pairs, kept) if keep]
    exact = exact[kept]
    is_stripe = np.array([label.startswith("stripes") for label, _, _ in pairs])
    print(f"{len(pairs)} pairs with D_K^2 >= alpha = {ALPHA} ({is_stripe.sum()} stripe pairs); "
          f"sigma = {SIGMA}; exact distances in {time.perf_counter() - started:.0f} s")

    def relative(D: int, seed: int) -> srf.RelativeErrorRFF:
        return srf.RelativeErrorRFF(n_features=D, bandwidth=SIGMA, alpha=ALPHA, eps=args.eps, seed=seed)

    def sincos(D: int, seed: int) -> srf.RFF:
        return srf.RFF(n_features=D, bandwidth=SIGMA, seed=seed)

    makers = {"RelativeErrorRFF": relative, "RFF sincos": sincos}
    edges = [ALPHA, 2e-3, 5e-3, 1e-2, 3e-2, 1e-1, 3e-1, 3.0]
    for D in args.features:
        errors = {label: [] for label in makers}
        for label, make in makers.items():
            for seed in range(args.seeds):
                feature_map = make(D, seed).fit(np.zeros((1, 2)))
                sketches: dict[int, srf.MeanSketch] = {}  # each point set is sketched once per map

                def sketch_of(points: np.ndarray) -> srf.MeanSketch:
                    if id(points) not in sketches:
                        sketches[id(points)] = srf.sketch_array(points, feature_map)
                    return sketches[id(points)]

                estimates = [srf.kernel_distance(sketch_of(P), sketch_of(Q)) for _, P, Q in pairs]
                errors[label].append(np.abs(np.array(estimates) / np.sqrt(exact) - 1))
        errors = {label: np.stack(values) for label, values in errors.items()}  # (maps, pairs)

        def cell(label: str, where: np.ndarray) -> str:
            chosen = errors[label][:, where]
            return f"{np.mean(chosen <= 0.1):>19.3f} / {chosen.max():.3f}"

        print(f"\nD = {D}, {args.seeds} maps each: share of (pair, map) within 10% / worst relative error")
        print(f"{'D_K^2 range':<20}{'pairs':>6}" + "".join(f"{label:>28}" for label in makers))
        for low, high in zip(edges[:-1], edges[1:]):
            inside = (exact >= low) & (exact < high)
            if inside.any():
                cells = "".join(cell(label, inside) for label in makers)
                print(f"[{low:.0e}, {high:.0e}){'':<4}{inside.sum():>6}{cells}")
        print(f"{'stripe pairs only':<20}{is_stripe.sum():>6}" + "".join(cell(label, is_stripe) for label in makers))
        print(f"{'stripe RMS error':<26}" + "".join(
            f"{np.sqrt(np.mean(errors[label][:, is_stripe] ** 2)):>28.4f}" for label in makers
        ))
        for index in np.flatnonzero(is_stripe):
            print(f"  {pairs[index][0]:<14} D_K^2 = {exact[index]:.2e}" + "".join(
                f"{label:>20} max {errors[label][:, index].max():.3f}" for label in makers
            ))
    shifted_comparison(args.features, args.seeds, args.eps)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
