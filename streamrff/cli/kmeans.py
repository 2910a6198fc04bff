"""The ``streamrff kmeans`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from . import options
from .fitting import add_feature_space_options, fit_write_report, open_output, resolve_feature_space

#: ``streamrff kmeans --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
kernel k-means of a zarr array; labels written to zarr

Kernel k-means in random-feature (rff) or K-JL (kjl) space: one pass over the data per Lloyd
iteration. The start is the best of two spectral-clustering and four k-means++ candidates on a
seeded sample of 2 000 rows (by the exact kernel k-means objective for rff). Prints each pass's
inertia, the percentage of rows that moved and the centre shift, why it stopped, and the cluster
sizes.

example: streamrff kmeans data.zarr --clusters 10 --map-kind kjl \\
         -o labels.zarr
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "kmeans", HELP, run)
    options.add_source(parser)
    parser.add_argument("--clusters", type=options.positive_int, required=True, help="number of clusters k")
    options.add_output(parser, "zarr array for the labels")
    add_feature_space_options(
        parser,
        features_help="feature space width (default: 1024 for rff, 10 x clusters for kjl)",
        landmarks_help="K-JL landmarks n (default: max(200, rows / 100), at most 2000)",
    )
    parser.add_argument("--max-iter", type=options.positive_int, default=100, help="maximum Lloyd passes")
    parser.add_argument(
        "--tol",
        type=options.non_negative_float,
        default=1e-4,
        help="stop when the centre shift falls to tol x the total feature variance",
    )
    options.add_seed(parser, "seed of the map, the row sample and the initialisation")
    options.add_job_options(parser)


def _progress_printer(args: argparse.Namespace) -> Callable[[Any], None] | None:
    """Each Lloyd pass as a row on stderr (not under ``--json``)."""
    if args.json:
        return None

    def report(step: Any) -> None:
        if step.iteration == 1:  # the header with the first row: a job that fails before any pass prints only its error
            print(f"{'pass':>4}  {'inertia':>12}  {'moved':>7}  {'centre shift':>12}", file=sys.stderr, flush=True)
        print(
            f"{step.iteration:>4d}  {step.inertia:>12.6g}  "
            f"{100 * step.moved_fraction:>6.2f}%  {step.center_shift:>12.3g}",
            file=sys.stderr,
            flush=True,
        )

    return report


def _stop_line(fitted: Any, tol: float, max_iter: int) -> str:
    shift = fitted.history_[-1].center_shift
    if fitted.stop_reason_ == "converged":
        return (
            f"  converged after {fitted.n_iter_} iteration{'s' if fitted.n_iter_ != 1 else ''}: "
            f"centre shift {shift:.3g} <= --tol {tol:g}"
        )
    return (
        f"  stopped at --max-iter {max_iter} before converging: centre shift {shift:.3g} > --tol {tol:g} "
        "(raise --max-iter, or --tol)"
    )


def run(args: argparse.Namespace) -> int:
    from ..kmeans import KernelKMeans  # here, not at the top: start-up time

    feature_map = resolve_feature_space(args)  # with --structured unfitted: fit_write_report fits it first
    if feature_map is not None:
        model = KernelKMeans(
            n_clusters=args.clusters, max_iter=args.max_iter, tol=args.tol, seed=args.seed, feature_map=feature_map
        )
    else:
        options.refuse(options.landmark_problems(args, args.map_kind or "rff"))
        model = KernelKMeans(
            n_clusters=args.clusters,
            method=args.map_kind or "rff",
            n_features=args.features,
            n_landmarks=args.landmarks,
            bandwidth=args.bandwidth or "median",
            max_iter=args.max_iter,
            tol=args.tol,
            seed=args.seed,
        )

    def report(fitted: KernelKMeans) -> tuple[dict[str, Any], list[str]]:
        import dask.array as da  # here, not at the top: start-up time

        labels = open_output(args.output, args.storage_options)  # -1: a row --on-invalid skip left out
        sizes = da.bincount(da.where(labels < 0, args.clusters, labels), minlength=args.clusters + 1)[:-1].compute()
        method = "kjl" if fitted.feature_map_.spec["kind"] == "kjl" else "rff"
        payload = {
            "n_clusters": int(args.clusters),
            "method": method,
            "inertia": float(fitted.inertia_),
            "n_iter": int(fitted.n_iter_),
            "stop_reason": fitted.stop_reason_,
            "tol": float(args.tol),
            "cluster_sizes": [int(v) for v in sizes],
        }
        total = max(int(sizes.sum()), 1)
        size_text = ", ".join(f"{c}: {int(n):,} ({100 * n / total:.1f}%)" for c, n in enumerate(sizes))
        lines = [
            f"wrote labels to {args.output}",
            _stop_line(fitted, args.tol, args.max_iter),
            f"  inertia {fitted.inertia_:.6g}",
            f"  cluster sizes: {size_text}",
        ]
        return payload, lines

    return fit_write_report(args, model, KernelKMeans.predict, report, callback=_progress_printer(args))
