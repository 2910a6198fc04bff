"""The ``streamrff sketch`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .output import emit_sketch, show_progress

_MAP_OPTIONS = ["features", "bandwidth", "variant", "orthogonal", "seed"]
#: ``--sum-method`` (formerly ``--method``): how :func:`streamrff.sketch` computes the feature sums.
SUM_METHODS = ["auto", "direct", "nufft"]


#: ``streamrff sketch --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
sketch a zarr array (local or object storage) into a sketch file

Embed every row of a zarr array with random Fourier features on Dask and save the mergeable sketch
(count, feature sum, optional second moment). Sketches merge and test against each other only if
made with the same map: pass --map (a map file or another site's sketch).

example: streamrff sketch data.zarr -o data.sketch --map map.json --moments
         streamrff sketch data.zarr -o data.sketch --features 1024 --bandwidth median
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "sketch", HELP, run)
    options.add_source(parser, "zarr array path or URL (plain path, file://, s3://...), or group path + '/array'")
    options.add_output(parser, "where to write the sketch (directory, .zip, or URL)")
    options.add_map_file(parser, "--features, --bandwidth, --variant, --orthogonal and --seed")
    options.add_rff_options(parser, "seed of the map and of its row sample")
    options.add_orthogonal(parser)
    parser.add_argument(
        "--moments", action="store_true", help="also sketch the D x D second moment (for test --sketches, kpca)"
    )
    parser.add_argument(
        "--chunk-rows", type=options.positive_int, default=None, help="rows per task (default: the zarr chunks)"
    )
    parser.add_argument(
        "--dtype", choices=["float32", "float64"], default="float32", help="feature precision (float64: ~10x slower)"
    )
    parser.add_argument(
        "--sum-method",
        choices=SUM_METHODS,
        default=None,
        help="how the feature sums are computed: nufft (d <= 3, needs streamrff[nufft]) or direct; auto picks the "
        "faster (default: auto)",
    )
    options.add_deprecated_alias(parser, "--method", "--sum-method", SUM_METHODS)
    options.add_scheduler(parser)
    parser.add_argument(
        "--checkpoint", metavar="DIR", default=None, help="keep per-chunk partials here to resume or extend"
    )
    parser.add_argument("--on-invalid", choices=["raise", "skip"], default="raise", help="what to do with NaN/inf rows")
    options.add_overwrite(parser)
    options.add_common(parser)


def run(args: argparse.Namespace) -> int:
    from ..engine import sketch  # here, not at the top: start-up time
    from ..fileformat import check_writable

    options.resolve_map_options(args, _MAP_OPTIONS, _MAP_OPTIONS, "they define the map")
    options.check_output_free(args.output, args.storage_options, args.overwrite)
    check_writable(args.output, args.storage_options, args.overwrite)
    feature_map = options.load_map_option(args)
    result = sketch(
        args.source,
        options.rff_of_options(args) if feature_map is None else feature_map,
        moments=args.moments,
        **options.dask_options(args),
        chunk_rows=args.chunk_rows,
        checkpoint=args.checkpoint,
        on_invalid=args.on_invalid,
        progress=show_progress(args),
        dtype=args.dtype,
        method=args.sum_method or "auto",
    )
    result.save(args.output, storage_options=args.storage_options, overwrite=args.overwrite)
    emit_sketch(args, args.output, result, f"wrote {args.output}: {result.count:,} rows sketched")
    return options.EXIT_OK
