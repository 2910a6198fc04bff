"""The ``streamrff sketch`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .output import emit_sketch, show_progress

_MAP_OPTIONS = ["features", "bandwidth", "variant", "orthogonal", "structured", "seed"]
#: ``--sum-method`` (formerly ``--method``): how :func:`streamrff.sketch` computes the feature sums.
SUM_METHODS = ["auto", "direct", "nufft"]


#: ``streamrff sketch --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
sketch a zarr array (local or object storage) into a sketch file

Embed every row of a zarr array with random Fourier features on Dask and save the mergeable sketch
(count, feature sum, optional second moment). Sketches merge and test against each other only if
made with the same map: pass --map (a map file or another site's sketch). With --target, a
regression sketch (the second moment plus Z^T y, sum y, y^T y) for 'streamrff ridge SKETCH ...';
with --classes, the target holds class labels, encoded one vs rest as +-1 columns. With --columns,
also a 1-D kernel mean and second moment of every input column, for the column table of
'streamrff explain A B'.

example: streamrff sketch data.zarr -o data.sketch --map map.json --moments
         streamrff sketch events/ -o events.sketch --map map.json \\
         --select age,income,city --categorical zip
         streamrff sketch site.zarr -o site.sketch --map map.json --moments \\
         --columns
         streamrff sketch data.zarr -o data.sketch --features 1024 \\
         --bandwidth median
         streamrff sketch site.zarr/X --target site.zarr/y --map map.json \\
         -o site.sketch
         streamrff sketch site.zarr/X --target site.zarr/labels \\
         --classes 0,1,2 --map map.json -o site.sketch
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "sketch", HELP, run)
    options.add_source(
        parser,
        "zarr array path or URL (plain path, file://, s3://...), or group path + '/array', or a parquet source "
        "(file, folder of parquet files, s3:// dataset)",
    )
    options.add_output(parser, "where to write the sketch (directory, .zip, or URL)")
    options.add_map_file(parser, "--features, --bandwidth, --variant, --orthogonal, --structured and --seed")
    options.add_rff_options(parser, "seed of the map and of its row sample")
    options.add_orthogonal(parser)
    options.add_structured(parser)
    parser.add_argument(
        "--moments", action="store_true", help="also sketch the D x D second moment (for test A.sketch B.sketch, kpca)"
    )
    parser.add_argument(
        "--columns",
        action="store_true",
        help="also sketch every input column alone (a 1-D kernel mean and second moment per column), for the "
        "column table of 'streamrff explain A B'",
    )
    parser.add_argument(
        "--column-features",
        type=options.number_parser(
            int, lambda v: 2 <= v <= options.MAX_COUNT and v % 2 == 0, "an even integer from 2 to 2^62"
        ),
        default=None,
        metavar="N",
        help="--columns: features of each column's 1-D map (default: 64)",
    )
    parser.add_argument(
        "--column-bandwidth",
        type=options.column_bandwidth,
        default=None,
        metavar="WIDTH",
        help="--columns: every column kernel's width, stored in the sketch (default: the map's bandwidth / "
        "sqrt(columns); give every site the same value)",
    )
    options.add_target(
        parser,
        "zarr array of regression targets, shape (n,) or (n, t), one row per row of SOURCE: makes a regression "
        "sketch (implies --moments) for 'streamrff ridge SKETCH ...'",
    )
    options.add_classes(
        parser,
        "with --target: the target holds class labels; encode them one vs rest (+1 for the row's class, -1 "
        "elsewhere) over these comma-separated classes. Give every site and 'ridge --classify' the same list; "
        "numbers if every class is a number, else text",
    )
    parser.add_argument(
        "--chunk-rows", type=options.positive_int, default=None, help="rows per task (default: the zarr chunks)"
    )
    parser.add_argument(
        "--dtype", choices=["float32", "float64"], default="float32", help="feature precision (float64: ~10x slower)"
    )
    options.add_renamed_choice(
        parser,
        "--sum-method",
        SUM_METHODS,
        "how the feature sums are computed: nufft (d <= 3, needs streamrff[nufft]) or direct; auto picks the "
        "faster (default: auto)",
    )
    options.add_table_options(parser)
    options.add_scheduler(parser)
    options.add_source_options(parser)
    parser.add_argument(
        "--checkpoint", metavar="DIR", default=None, help="keep per-chunk partials here to resume or extend"
    )
    parser.add_argument("--on-invalid", choices=["raise", "skip"], default="raise", help="what to do with NaN/inf rows")
    options.add_overwrite(parser)
    options.add_sign_key(parser, "sign the sketch with the key in FILE (HMAC-SHA256); a --map must verify with it")
    options.add_verify_key(parser, signs=True)
    options.add_common(parser)


def run(args: argparse.Namespace) -> int:
    from ..formats.sketch import check_writable

    options.resolve_map_options(args, _MAP_OPTIONS, _MAP_OPTIONS, "they define the map")
    if args.classes is not None and args.target is None:
        raise options.UsageError("--classes encodes the labels of --target; pass --target LABELS, or drop --classes.")
    if not args.columns and (args.column_features is not None or args.column_bandwidth is not None):
        raise options.UsageError("--column-features and --column-bandwidth set the column part: add --columns.")
    if args.columns and args.target is not None:
        raise options.UsageError("--columns sketches the columns of a mean sketch; drop it with --target.")
    options.check_output_free(args.output, args.storage_options, args.overwrite)
    feature_map = options.load_map_option(args)
    if feature_map is None:
        feature_map = options.rff_of_options(args)
    # The sketch's declared size (float64 sums of D features, D x D moments), checked against free space now.
    width = next((w for w in (getattr(feature_map, name, None) for name in ("n_components", "n_features")) if w), 0)
    declared_bytes = 8 * width * (1 + (width if args.moments or args.target is not None else 0))
    check_writable(args.output, args.storage_options, args.overwrite, required_bytes=declared_bytes)
    key = options.signing_key(args)
    target, classes = args.target, None
    if args.classes is not None:
        from .labels import one_vs_rest_targets

        target, classes = one_vs_rest_targets(args.target, args.classes, args.storage_options)
    result = _sketch(args, feature_map, target)
    if classes is not None:  # recorded, so that sketches of other class lists refuse to merge
        result = result.with_classes(classes)
    result.save(args.output, storage_options=args.storage_options, overwrite=args.overwrite, signing_key=key)
    emit_sketch(args, args.output, result, f"wrote {args.output}: {result.count:,} rows sketched")
    return options.EXIT_OK


def _sketch(args: argparse.Namespace, feature_map: Any, target: Any) -> Any:
    """:func:`streamrff.sketch` of SOURCE (a parquet source opened with --select / --categorical)."""
    from ..engine import sketch  # here, not at the top: start-up time

    return sketch(
        options.open_tables(args, [args.source])[0],
        feature_map,
        moments=args.moments,
        chunk_rows=args.chunk_rows,
        checkpoint=args.checkpoint,
        on_invalid=args.on_invalid,
        progress=show_progress(args),
        dtype=args.dtype,
        method=args.sum_method or "auto",
        target=target,
        **_column_options(args),
    )


def _column_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`streamrff.sketch` that --columns and its options set."""
    if not args.columns:
        return {}
    features = {} if args.column_features is None else {"column_features": args.column_features}
    return {"columns": True, "column_bandwidth": args.column_bandwidth, **features}
