"""The ``streamrff kpca`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .fitting import add_feature_space_options, fit_write_report, open_output, resolve_feature_space
from .output import show_progress

#: ``streamrff kpca --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
kernel PCA of a zarr array; scores written to zarr

Kernel PCA from one moment sketch (one pass), then the scores of every row.

example: streamrff kpca data.zarr --components 10 -o scores.zarr \\
         --plot scatter.png
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "kpca", HELP, run)
    options.add_source(parser)
    parser.add_argument("--components", type=options.positive_int, required=True, help="number of components k")
    parser.add_argument(
        "--moments",
        choices=["auto", "full", "low-rank"],
        default="auto",
        help="covariance sketch: the D x D moment (full), its streaming Nystrom sketch (low-rank, for large D), "
        "or auto: low-rank when one D x D partial would exceed 256 MiB (D > 5792)",
    )
    options.add_output(parser, "zarr array for the scores")
    add_feature_space_options(
        parser,
        features_help="feature space width D (default: 1024)",
        landmarks_help="K-JL landmarks n (default: 1000)",
    )
    options.add_seed(parser, "seed of the map, its row sample and the eigensolver's start")
    options.add_plot(parser, "scatter of the first two scores")
    options.add_job_options(parser)


def _problems(args: argparse.Namespace, feature_map: Any) -> list[str]:
    """The options against each other and against the map of ``--map``, before any data is read."""
    if args.map is not None:
        problems: list[str] = []
        width, where, fix = feature_map.n_features_out_, f"the map of --map {args.map}", "use a map with more features"
    else:
        problems = options.landmark_problems(args, args.map_kind or "rff")
        width = args.features or 1024
        where = f"--features {args.features}" if args.features else "the default --features 1024"
        fix = f"raise --features to at least {args.components}"
    if args.components > width:
        problems.append(
            f"--components {args.components} exceeds the width of the feature space, D = {width} ({where}): "
            f"kernel PCA finds at most D components. Lower --components to at most {width}, or {fix}."
        )
    return problems


def _save_scatter(args: argparse.Namespace) -> None:
    """``--plot``: the first two scores of (at most) the first 20 000 rows written."""
    import numpy as np  # here, not at the top: start-up time

    from ..plot import save_report_figure

    stored = open_output(args.output, args.storage_options)
    rows = min(stored.shape[0], 20_000)
    save_report_figure(args.plot, scores=np.asarray(stored[:rows].compute()), overwrite=args.overwrite)


def run(args: argparse.Namespace) -> int:
    feature_map = resolve_feature_space(args)
    options.refuse(_problems(args, feature_map))  # before the estimator's imports and any data
    from ..kpca import KernelPCA  # here, not at the top: start-up time

    model = KernelPCA(
        n_components=args.components,
        method=args.map_kind or "rff",
        n_features=args.features or 1024,
        n_landmarks=args.landmarks or 1000,
        bandwidth=args.bandwidth or "median",
        moments=args.moments,
        seed=args.seed,
        feature_map=feature_map,
    )

    def report(fitted: KernelPCA) -> tuple[dict[str, Any], list[str]]:
        if args.plot:
            _save_scatter(args)
        total = fitted.n_samples_ * fitted.total_variance_
        payload = {
            "n_components": int(args.components),
            "explained_variance": [float(v) for v in fitted.explained_variance_],
            "explained_variance_ratio": [float(v) for v in fitted.explained_variance_ratio_],
            "residual": float(fitted.residual_),
            "residual_fraction": float(fitted.residual_ / total) if total > 0 else 0.0,
            "moments": fitted.moments_,
        }
        ratios = ", ".join(f"{v:.3f}" for v in fitted.explained_variance_ratio_)
        lines = [
            f"wrote scores to {args.output}",
            f"  explained variance ratio: {ratios}",
            f"  residual R_k: {fitted.residual_:.6g} ({100 * payload['residual_fraction']:.1f}% of the total feature "
            "variance left outside the components; sum over rows of squared feature-space distances)",
        ]
        return payload, lines + ([f"wrote {args.plot}"] if args.plot else [])

    options.check_plot_free(args)
    return fit_write_report(args, model, KernelPCA.transform, report, progress=show_progress(args))
