"""The ``streamrff demo`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from . import options
from .output import show_progress

#: ``streamrff demo --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
generate two samples, fit one map, sketch them as two sites, merge, test, cluster

Write two generated zarr arrays of three clusters (the second site with a subtle shift: two clusters
trade 5% of the rows), fit one map on a sample pooled across
both (saved as map.json), sketch each on Dask with it, merge the sketches, run the kernel two-sample
tests, kernel PCA and kernel k-means, and write report.json and report.png.

example: streamrff demo --rows 200000 -o /tmp/streamrff-demo
"""


#: The smallest --rows and --features the demo's steps work with.
MIN_ROWS, MIN_FEATURES = 100, 6


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "demo", HELP, run)
    parser.add_argument("--rows", type=options.positive_int, default=2_000_000, help="rows per site")
    parser.add_argument(
        "-o", "--output", dest="out", default="streamrff-demo", help="directory for the data, map, sketches and report"
    )
    # The old spelling, hidden: one spelling per concept (-o/--output everywhere), kept for one release.
    parser.add_argument("--out", dest="deprecated_out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--features", type=options.positive_int, default=256, help="number of random features D")
    options.add_scheduler(parser)
    options.add_overwrite(parser)
    options.add_json(parser, "print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo  # here, not at the top: start-up time

    problems = []
    if args.rows < MIN_ROWS:
        problems.append(f"--rows must be at least {MIN_ROWS} (k-means and the tests run on a sample of both sites). "
                        f"Got {args.rows}.")  # fmt: skip
    if args.features % 2 or args.features < MIN_FEATURES:
        problems.append(
            f"--features must be even (a cosine and a sine per frequency) and at least {MIN_FEATURES} (kernel PCA "
            f"keeps 5 components). Got {args.features}."
        )
    if args.deprecated_out is not None:
        if args.out not in ("streamrff-demo", args.deprecated_out):
            problems.append(
                f"--out {args.deprecated_out} contradicts --output {args.out}; drop --out (renamed to --output)."
            )
        else:
            print(
                "streamrff demo: warning: --out is deprecated and will be removed in the next release; "
                "use -o/--output.",
                file=sys.stderr,
            )
            args.out = args.deprecated_out
    options.refuse(problems)  # before any data is written
    if os.path.exists(args.out) and not args.overwrite:
        raise options.UsageError(options.EXISTS.format(path=args.out))
    quiet = args.json
    report = run_demo(
        out=args.out,
        n_rows=args.rows,
        n_features=args.features,
        scheduler=args.scheduler,
        progress=show_progress(args),
        echo=(lambda *_: None) if quiet else print,
        overwrite=args.overwrite,
    )
    if quiet:
        print(json.dumps(report, indent=2, sort_keys=True))
    return options.EXIT_OK
