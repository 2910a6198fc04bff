"""The ``streamrff explain`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .inputs import add_on_invalid, add_sketches_alias
from .output import emit

#: ``streamrff explain --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
how much and where two sketched samples differ: effect size, interval, the rows that differ most

From two mean sketches made with one map (with --moments for the interval), print the effect size
MMD with a confidence interval for MMD^2, and the rows of --source where the witness f(x) = mean k(x, A)
- mean k(x, B) is most extreme: where A is over-represented against B when the source resembles A,
where B is when it resembles B (--which chooses). One pass over the source; only its site reads it.
When both sketches were made with 'streamrff sketch --columns', it adds the column table: one test
per input column from the sketches alone (spectral null of the column moments, Holm-adjusted).

example: streamrff explain a.sketch b.sketch --source a.zarr --top 20
         streamrff explain a.sketch b.sketch --source b.zarr --plot where.png \\
         --json
"""


def _column_pair(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        pair = tuple(int(part) for part in parts)
    except ValueError:
        pair = ()
    if len(pair) != 2 or min(pair) < 0 or pair[0] == pair[1]:
        raise argparse.ArgumentTypeError(f"expected two different column indices such as 0,3. Got {text!r}.")
    return pair  # type: ignore[return-value]


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "explain", HELP, run)
    parser.add_argument("sketches", nargs="*", metavar="SKETCH", help="the mean sketch files A and B (one map)")
    add_sketches_alias(parser, 2)
    parser.set_defaults(sketch_inputs="sketches")
    parser.add_argument("--source", required=True, help="zarr array (path or URL) whose rows are ranked")
    parser.add_argument("--top", type=options.positive_int, default=20, help="rows to print (default: 20)")
    parser.add_argument(
        "--which",
        choices=["auto", "largest", "smallest"],
        default="auto",
        help="largest: rows where A is over-represented; smallest: where B is; auto: the end of the sample "
        "the source resembles (default)",
    )
    parser.add_argument(
        "--level", type=options.number_parser(float, lambda v: 0 < v < 1, "a number in (0, 1)"), default=0.95,
        help="coverage of the MMD^2 interval (default: 0.95)",
    )  # fmt: skip
    options.add_plot(
        parser, "draw the witness's distribution over the source and its map over two columns or kernel PCs"
    )
    parser.add_argument(
        "--plot-columns",
        type=_column_pair,
        default=None,
        metavar="I,J",
        help="--plot: map the witness over these two input columns (default: the top two kernel PCs)",
    )
    options.add_overwrite(parser, "replace an existing --plot file")
    add_on_invalid(parser, job=True)
    options.add_scheduler(parser)
    options.add_source_options(parser)
    options.add_verify_key(parser)
    options.add_common(parser)


#: Rows of the source sampled for --plot's 2-D map.
_MAP_ROWS = 2000


def _save_plot(args: argparse.Namespace, sketches: list[Any], found: Any) -> None:
    """The --plot figure: the witness histogram beside its map over two columns or kernel PCs."""
    import numpy as np

    from ..engine import current_job_options, landmark_sample, open_job_source
    from ..kpca import KernelPCA
    from ..plot import save_explain_figure
    from ..sketches.base import merge

    source = open_job_source(args.source, current_job_options(), name="source")
    sample = landmark_sample([source], _MAP_ROWS, 0).rows
    top = np.asarray(source.array[np.sort(found.rows)].compute(), dtype=np.float64)
    if args.plot_columns is not None:
        if max(args.plot_columns) >= source.shape[1]:
            raise options.UsageError(
                f"--plot-columns {args.plot_columns[0]},{args.plot_columns[1]}: the source has {source.shape[1]} "
                "columns (indices from 0)."
            )
        columns = list(args.plot_columns)
        points, highlight, names = sample[:, columns], top[:, columns], [f"column {c}" for c in columns]
    else:
        if all(sketch.has_moments for sketch in sketches):
            kpca = KernelPCA(n_components=2).fit_from_sketch(merge(*sketches))
        else:
            kpca = KernelPCA(n_components=2, feature_map=sketches[0].feature_map).fit(sample)
        points, highlight, names = kpca.transform(sample), kpca.transform(top), ["kernel PC 1", "kernel PC 2"]
    save_explain_figure(
        args.plot, found, points, found.witness(sample), axis_names=names, highlight=highlight, overwrite=args.overwrite
    )


def run(args: argparse.Namespace) -> int:
    from ..twosample import explain  # here, not at the top: start-up time
    from .sketchfiles import load_checked_sketches

    if len(args.sketches) != 2:
        raise options.UsageError(f"expected two sketch files A B. Got {len(args.sketches)}.")
    options.check_plot_free(args)
    sketches = load_checked_sketches(
        args.sketches, args.storage_options, min_rows=1, verify_key=options.verify_key(args)
    )
    with options.one_connection():
        found = explain(sketches[0], sketches[1], args.source, k=args.top, which=args.which, level=args.level)
        if args.plot:
            _save_plot(args, sketches, found)
    emit(args, found.to_dict(), found.lines() + ([f"wrote {args.plot}"] if args.plot else []))
    return options.EXIT_OK
