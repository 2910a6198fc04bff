"""The ``streamrff store`` commands: a stream kept as buckets (create, append, info, range, test, series, compact,
merge)."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from . import options
from .inputs import add_on_invalid
from .output import emit, emit_sketch

#: ``streamrff store --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
keep a stream as buckets of sketches; query, compare and merge any range

A sketch store holds one mean sketch per bucket of rows or of time (a zarr group, local or on
object storage): 'append' sketches the complete buckets not yet stored, 'range' merges any span
from O(log n) records, 'test' and 'series' compare ranges with the bucket permutation null,
'compact' rolls old buckets into coarse ones, 'merge' joins two sites' stores bucket by bucket.

example: streamrff store create stream.store --map map.json --bucket 100000
         streamrff store create hourly.store --map map.json --bucket 1h
         streamrff store append stream.store data.zarr
         streamrff store test stream.store --a 0:700000 --b 700000:800000 \\
         --json
"""

_CREATE = """\
make a new, empty store

A store of buckets of --bucket rows, or of a duration (1h, 15min, 1d, PT1H: a grid from
1970-01-01 UTC; appends then take the rows' times), sketched with the map of --map (a map file or
any sketch file). --moments K also keeps second moments (D x D) per block of 2**K buckets (0: every
bucket), so that ranges on block edges get confidence intervals; bucket records stay D values.
--columns also keeps, per bucket, each input column's 1-D kernel sums (columns x N values), for the
column table of 'store test --columns'.

example: streamrff store create stream.store --map map.json --bucket 100000
         streamrff store create hourly.store --map map.json --bucket 1h \\
         --moments 5
"""

_APPEND = """\
sketch the complete buckets of a source that the store does not hold yet

SOURCE holds the stream's rows from row --start on. Each complete bucket is sketched on Dask and
published on its own; a bucket already stored with the same rows is left as it is, with other rows
it is refused (exit 1), naming the bucket. A store of time buckets takes the rows' times (sorted):
--time-coordinate NAME reads the coordinate NAME of SOURCE's zarr group (as xarray wrote it),
--times PATH a .npy file or zarr array of datetime64; a bucket is complete once a row of a later
one is given, or with --final.

example: streamrff store append stream.store data.zarr --json
         streamrff store append hourly.store data.zarr/x \\
         --time-coordinate time
"""

_INFO = """\
describe a store

Its map, bucket size, stored buckets (as row runs) and records.

example: streamrff store info stream.store --json
"""

_RANGE = """\
write the sketch of a range of rows

The mean sketch of rows [--start, --stop) (on bucket edges; default: every stored row), merged from
O(log n) records; with --leave-out, the sketch of the stored rows outside that range. A store of
time buckets takes ISO 8601 times (UTC unless an offset is given). A store made with --moments
writes the range's second moments when it is on blocks that have them, and says why not otherwise.

example: streamrff store range stream.store --start 0 --stop 700000 \\
         -o reference.sketch
         streamrff store range hourly.store --start 2026-01-01T00:00 \\
         --stop 2026-01-08T00:00 -o week.sketch
"""

_TEST = """\
test two ranges against each other

The unbiased MMD^2 of the two ranges' sketches, with the bucket permutation null (whole buckets
relabelled between the ranges: exact under no change, needs no rows). --columns: the column
table of a store made with --columns, each input column tested alone the same way (Holm-adjusted).

example: streamrff store test stream.store --a 0:700000 --b 700000:800000 \\
         --json
"""

_SERIES = """\
the MMD^2 of each window of buckets against a reference range

Per window of --every buckets outside the reference: its MMD^2 against the reference, the
bucket-permutation p-value, the null's 1-alpha quantile and whether it alarms.

example: streamrff store series stream.store --reference 0:700000 --every 1 \\
         --json
"""

_COMPACT = """\
roll old buckets into coarse ones, optionally with fewer features

Every complete coarse bucket of --to (a multiple of the store's bucket) that ends before
--older-than (a row, an ISO time, or a duration before now such as 30d) is published in one step
and its fine records deleted; readers meanwhile see each bucket fine or coarse, never both.
--features K keeps the first K features (a seeded sincos map: the map of K features).

example: streamrff store compact hourly.store --older-than 30d --to 1d \\
         --features 256 --json
"""

_MERGE = """\
merge stores of one map and bucket size (two sites) into a new store

Bucket by bucket: a bucket both stores hold is the sum of the two.

example: streamrff store merge site-a.store site-b.store -o both.store
"""


_non_negative_int = options.number_parser(int, lambda value: value >= 0, "an integer >= 0")


def _edge(text: str) -> int | str:
    """A bucket edge: a row (digits) or a time (ISO 8601, checked by the store)."""
    plain = text.strip().replace("_", "")
    if plain.isdigit():
        return int(plain)
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a row or an ISO 8601 time, got ''")
    return text.strip()


def _bucket(text: str) -> int | str:
    """Rows per bucket (digits) or a duration (checked by the store)."""
    plain = text.strip().replace("_", "")
    return int(plain) if plain.isdigit() else text.strip()


def _rows(text: str) -> tuple[Any, Any]:
    """``START:STOP`` (rows) or ``START/STOP`` (ISO 8601 times, an interval) -> (start, stop)."""
    if "/" in text:
        parts = text.split("/")
        if len(parts) != 2 or not all(part.strip() for part in parts):
            raise argparse.ArgumentTypeError(f"expected START/STOP (times, e.g. 2026-01-01/2026-01-08). Got {text!r}.")
        return parts[0].strip(), parts[1].strip()
    try:
        start, stop = (int(part.replace("_", "")) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected START:STOP (rows, e.g. 0:700000) or START/STOP (ISO times). Got {text!r}."
        ) from None
    if start < 0 or stop <= start:
        raise argparse.ArgumentTypeError(f"expected 0 <= START < STOP. Got {text!r}.")
    return start, stop


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help="the store (directory or URL)")


def _add_verify(parser: argparse.ArgumentParser) -> None:
    """``--sign-key FILE`` and ``--allow-unsigned``: with a key set, every record read must verify with it."""
    options.add_sign_key(parser, "accept only records signed with the key in FILE")
    options.add_verify_key(parser, signs=True)


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "store", HELP, _no_subcommand)
    subcommands = parser.add_subparsers(dest="store_command", metavar="SUBCOMMAND", required=True)

    create = options.add_command(subcommands, "create", _CREATE, run_create)
    _add_store(create)
    create.add_argument("--map", metavar="FILE", required=True, help="the map: a map file or any sketch file")
    create.add_argument("--bucket", type=_bucket, required=True, metavar="ROWS|DURATION",
                        help="rows per bucket, or a duration (1h, 15min, 1d, PT1H)")  # fmt: skip
    create.add_argument("--moments", type=_non_negative_int, default=None, metavar="K",
                        help="also keep second moments per block of 2**K buckets (0: every bucket)")  # fmt: skip
    create.add_argument(
        "--columns", action="store_true",
        help="also keep every input column's 1-D kernel sums per bucket, for 'store test --columns'",
    )  # fmt: skip
    create.add_argument(
        "--column-features", default=64, metavar="N", help="--columns: features of each column's map (default: 64)",
        type=options.number_parser(int, lambda v: 2 <= v <= 65536 and v % 2 == 0, "an even integer from 2 to 65536"),
    )  # fmt: skip
    create.add_argument(
        "--column-bandwidth", type=options.column_bandwidth, default=None, metavar="WIDTH",
        help="--columns: every column kernel's width (default: the map's bandwidth / sqrt(columns))",
    )  # fmt: skip
    create.add_argument(
        "--signed", action="store_true",
        help="require every record to be signed (append needs --sign-key then; implied when a key is set)",
    )  # fmt: skip
    options.add_sign_key(create, "make a signed store, and verify --map with the key in FILE")
    options.add_verify_key(create, signs=True)
    options.add_common(create)

    append = options.add_command(subcommands, "append", _APPEND, run_append)
    _add_store(append)
    options.add_source(append, "zarr array path or URL holding the stream's rows from --start on")
    append.add_argument("--start", type=_edge, default=None, metavar="ROW|TIME",
                        help="global row index of SOURCE's first row (default: 0); for time buckets, the bucket edge "
                             "from which SOURCE holds every row")  # fmt: skip
    append.add_argument(
        "--time-coordinate",
        default=None,
        metavar="NAME",
        help="time buckets: the rows' times, coordinate NAME of SOURCE's zarr group (xarray's layout)",
    )
    append.add_argument(
        "--times",
        default=None,
        metavar="PATH",
        help="time buckets: the rows' times, a .npy file or zarr array of datetime64",
    )
    append.add_argument(
        "--final",
        action="store_true",
        help="time buckets: no more rows will come for the last row's bucket: append it too",
    )
    append.add_argument("--chunk-rows", type=options.positive_int, default=None, help="rows per task")
    add_on_invalid(append, job=True)
    options.add_sign_key(append, "sign every record with the key in FILE; the records read (rollups) must verify")
    options.add_verify_key(append, signs=True)
    options.add_scheduler(append)
    options.add_source_options(append)
    options.add_common(append)

    info = options.add_command(subcommands, "info", _INFO, run_info)
    _add_store(info)
    _add_verify(info)
    options.add_common(info)

    ranged = options.add_command(subcommands, "range", _RANGE, run_range)
    _add_store(ranged)
    ranged.add_argument("--start", type=_edge, default=None, metavar="ROW|TIME", help="first row, or time")
    ranged.add_argument("--stop", type=_edge, default=None, metavar="ROW|TIME", help="row (or time) after the last")
    ranged.add_argument("--leave-out", action="store_true", help="the stored rows outside [--start, --stop) instead")
    options.add_output(ranged, "where to write the sketch (directory, .zip, or URL)")
    options.add_overwrite(ranged)
    _add_verify(ranged)
    options.add_common(ranged)

    test = options.add_command(subcommands, "test", _TEST, run_test)
    _add_store(test)
    test.add_argument("--a", type=_rows, required=True, metavar="START:STOP", help="the first range of rows")
    test.add_argument("--b", type=_rows, required=True, metavar="START:STOP", help="the second range of rows")
    _add_permutations(test)
    test.add_argument(
        "--columns",
        action="store_true",
        help="the column table: each input column tested alone (store create --columns)",
    )
    _add_verify(test)
    options.add_common(test)

    series = options.add_command(subcommands, "series", _SERIES, run_series)
    _add_store(series)
    series.add_argument("--reference", dest="reference_rows", type=_rows, required=True, metavar="START:STOP",
                        help="the reference range of rows")  # fmt: skip
    series.add_argument("--every", type=options.positive_int, default=1, metavar="K", help="buckets per window")
    series.add_argument("--alpha", type=float, default=0.05, help="the alarm level (default: 0.05)")
    _add_permutations(series)
    options.add_plot(series, "also draw the statistic, its null band and the alarms into this PNG")
    options.add_overwrite(series)
    _add_verify(series)
    options.add_common(series)

    compact = options.add_command(subcommands, "compact", _COMPACT, run_compact)
    _add_store(compact)
    compact.add_argument("--older-than", type=_edge, required=True, metavar="ROW|TIME|DURATION",
                         help="the horizon: a row, an ISO time, or a duration before now (30d)")  # fmt: skip
    compact.add_argument("--to", type=_bucket, required=True, metavar="ROWS|DURATION", help="the coarse bucket")
    compact.add_argument("--features", type=options.positive_int, default=None, metavar="K",
                         help="keep the first K features in the coarse buckets (even, < D)")  # fmt: skip
    options.add_sign_key(compact, "sign the coarse records with the key in FILE")
    options.add_common(compact)

    merge = options.add_command(subcommands, "merge", _MERGE, run_merge)
    merge.add_argument("stores", nargs="+", metavar="STORE", help="stores with the same map and bucket size")
    options.add_output(merge, "the new store (must not exist)")
    options.add_sign_key(merge, "sign the merged records with the key in FILE; the inputs' records must verify")
    options.add_verify_key(merge, signs=True)
    options.add_common(merge)


def _add_permutations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--permutations", type=options.positive_int, default=999, metavar="B",
                        help="bucket relabellings of the null (default: 999)")  # fmt: skip
    parser.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the relabellings")


def _no_subcommand(args: argparse.Namespace) -> int:  # pragma: no cover - argparse requires a subcommand
    raise options.UsageError("store needs a subcommand: create, append, info, range, test, series, compact or merge.")


def _open(args: argparse.Namespace, path: str | None = None) -> Any:
    """The store of ``path`` (default: STORE); with a key set, every record it reads must verify."""
    from ..store import SketchStore  # here, not at the top: start-up time

    target = args.store if path is None else path
    return SketchStore.open(target, storage_options=args.storage_options, verify_key=options.verify_key(args))


def run_create(args: argparse.Namespace) -> int:
    from ..formats.map import load_map
    from ..store import SketchStore

    options.check_output_free(args.store, args.storage_options, overwrite=False)
    feature_map = load_map(args.map, storage_options=args.storage_options, verify_key=options.verify_key(args))
    signed = args.signed or options.signing_key(args) is not None
    store = SketchStore.create(
        args.store, feature_map, bucket=args.bucket, signed=signed, storage_options=args.storage_options,
        moments=args.moments, columns=args.columns, column_features=args.column_features,
        column_bandwidth=args.column_bandwidth,
        signing_key=options.signing_key(args),  # the root signed: an empty store's map and grid verify at open
    )  # fmt: skip
    info = store.info()
    size = info.get("bucket") or f"{args.bucket:,} rows"
    lines = [f"created {args.store}: buckets of {size}", f"  map: {info['fingerprint'][:16]}"]
    if "moments" in info:
        moments = info["moments"]
        lines.append(
            f"  moments: per {moments['buckets_per_record']:,} bucket(s), {moments['bytes_per_record']:,} bytes a block"
        )
    emit(args, info, lines)
    return options.EXIT_OK


def run_append(args: argparse.Namespace) -> int:
    store = _open(args)
    job = {} if args.chunk_rows is None else {"chunk_rows": args.chunk_rows}
    if store.bucket_seconds:
        job.update(times=_cli_times(args), final=args.final)
    elif args.times or args.time_coordinate or args.final:
        raise options.UsageError(f"{args.store} has buckets of rows: --times, --time-coordinate and --final apply to "
                                 "time buckets (store create --bucket 1h).")  # fmt: skip
    result = store.append(args.source, start=args.start, signing_key=options.signing_key(args), **job)
    payload = {"store": args.store, "source": args.source, **result.to_dict()}
    lines = [
        f"appended {len(result.appended)} bucket(s) to {args.store}"
        + (f" ({len(result.unchanged)} already stored with the same rows)" if result.unchanged else ""),
        f"  rows left for a later append: {result.rows_left:,}",
    ]
    emit(args, payload, lines)
    return options.EXIT_OK


def _cli_times(args: argparse.Namespace) -> Any:
    """The rows' times of a time-bucket append: --times (a .npy file or zarr array) or --time-coordinate."""
    import numpy as np

    if (args.times is None) == (args.time_coordinate is None):
        raise options.UsageError("A store of time buckets needs the rows' times: pass --times PATH or "
                                 "--time-coordinate NAME (one of them).")  # fmt: skip
    if args.times is not None:
        if str(args.times).endswith(".npy"):
            try:
                return np.load(args.times, allow_pickle=False)
            except (OSError, ValueError) as error:
                raise options.UsageError(f"Cannot read --times {args.times}: {error}") from None
        from ..sources.rows import open_zarr_array

        return np.asarray(open_zarr_array(args.times, args.storage_options)[...])
    import xarray

    group = str(args.source).rstrip("/").rsplit("/", 1)[0]
    try:
        dataset = xarray.open_zarr(group, storage_options=args.storage_options, consolidated=None)
        return dataset[args.time_coordinate].values
    except (OSError, KeyError, ValueError) as error:
        raise options.UsageError(
            f"Cannot read the time coordinate {args.time_coordinate!r} of the zarr group {group}: "
            f"{type(error).__name__}: {error}. Pass --times PATH instead."
        ) from None


def run_compact(args: argparse.Namespace) -> int:
    store = _open(args)
    done = store.compact(args.older_than, args.to, features=args.features, signing_key=options.signing_key(args))
    payload = {"store": args.store, **done}
    lines = [
        f"compacted {len(done['compacted'])} coarse bucket(s) of {args.store} into buckets of {args.to}"
        + (f" with {args.features} features" if args.features else ""),
        f"  fine records deleted: {done['deleted_records']:,}"
        + (f"; left fine (a bucket missing): {len(done['incomplete'])}" if done["incomplete"] else ""),
    ]
    emit(args, payload, lines)
    return options.EXIT_OK


def run_info(args: argparse.Namespace) -> int:
    store = _open(args)
    info = store.info()
    if options.verify_key(args) is not None:  # the records of every stored run (O(log n) each) must verify
        from ..store.moments import check_moment_records

        for lo, hi in info["runs"]:
            store.range(lo, hi, moments=False)
        check_moment_records(store)  # and every moment record, one at a time
        info["signature"] = "verified"
    if info.get("bucket_seconds"):
        runs = ", ".join(f"{lo}..{hi}" for lo, hi in info["runs"]) or "none"
        size, held = info["bucket"], f"{info['buckets']:,} ({runs})"
    else:
        runs = ", ".join(f"{lo:,}..{hi - 1:,}" for lo, hi in info["runs"]) or "none"
        size, held = f"{info['bucket_rows']:,} rows", f"{info['buckets']:,} ({info['rows']:,} rows: {runs})"
    lines = [
        f"{args.store}: sketch store of buckets of {size}",
        f"  buckets: {held}",
        f"  records: {info['records']:,} of {info['bytes_per_record']:,} bytes",
        f"  map: {info['map'].get('kind')} D={info['n_features']} fingerprint {info['fingerprint'][:16]}",
    ] + (["  signature: every stored run's records verified"] if "signature" in info else [])
    if "columns" in info:
        columns = info["columns"]
        lines.append(f"  columns: {columns['n_columns']} x {columns['n_features']} sums a record (test --columns)")
    if "moments" in info:
        moments = info["moments"]
        lines.append(
            f"  moments: per {moments['buckets_per_record']:,} bucket(s); {moments['blocks']:,} block(s), "
            f"{moments['records']:,} records of {moments['bytes_per_record']:,} bytes"
        )
    emit(args, info, lines)
    return options.EXIT_OK


def run_range(args: argparse.Namespace) -> int:
    from ..formats.sketch import check_writable

    options.check_output_free(args.output, args.storage_options, args.overwrite)
    check_writable(args.output, args.storage_options, args.overwrite)
    store = _open(args)
    notes: list[str] = []
    if args.leave_out:
        if args.start is None or args.stop is None:
            raise options.UsageError("--leave-out needs --start and --stop (the rows to leave out).")
        sketch = store.complement(args.start, args.stop)
    else:
        with warnings.catch_warnings(record=True) as caught:  # why the range has no moments: one line below
            warnings.simplefilter("always", UserWarning)
            sketch = store.range(args.start, args.stop)
        notes = [str(warning.message) for warning in caught if issubclass(warning.category, UserWarning)]
    sketch.save(args.output, storage_options=args.storage_options, overwrite=args.overwrite,
                signing_key=options.signing_key(args))  # fmt: skip
    what = "outside" if args.leave_out else "of"
    title = f"wrote the sketch of the rows {what} [{args.start}, {args.stop}) of {args.store} ({sketch.count:,} rows)"
    extra: dict[str, Any] = {"store": args.store}
    if not args.leave_out and store.moment_level is not None:
        title += ", with second moments" if sketch.has_moments else ", sums only"
        if notes:
            extra["moments_note"] = notes[0]
            print(f"streamrff store: note: {notes[0]}", file=sys.stderr)
    emit_sketch(args, args.output, sketch, title, **extra)
    return options.EXIT_OK


def run_test(args: argparse.Namespace) -> int:
    result = _open(args).test(args.a, args.b, n_permutations=args.permutations, seed=args.seed, columns=args.columns)
    if args.columns:  # the column table, largest effect first; the joint test of whole rows with it
        table, result = result, result.joint
        payload = {"store": args.store, "a": list(args.a), "b": list(args.b), **table.to_dict()}
        lines = [
            f"{args.store}: rows {args.a[0]:,}..{args.a[1] - 1:,} vs {args.b[0]:,}..{args.b[1] - 1:,}",
            f"  MMD^2 = {result.statistic:.6g}, p = {result.p_value_text} (bucket permutation, "
            f"B = {args.permutations})",
            f"  columns ({table.null}; p Holm-adjusted):",
            *table.table_lines(),
        ]
        emit(args, payload, lines)
        return options.EXIT_OK
    payload = {"store": args.store, "a": list(args.a), "b": list(args.b), **result.to_dict(include_null=False)}
    lines = [
        f"{args.store}: rows {args.a[0]:,}..{args.a[1] - 1:,} vs {args.b[0]:,}..{args.b[1] - 1:,}",
        f"  MMD^2 = {result.statistic:.6g}, p = {result.p_value_text} (bucket permutation, B = {args.permutations}, "
        f"{result.n_features} features)",
    ]
    emit(args, payload, lines)
    return options.EXIT_OK


def run_series(args: argparse.Namespace) -> int:
    if args.plot:
        options.check_plot_free(args)
    series = _open(args).series(
        args.reference_rows, every=args.every, n_permutations=args.permutations, seed=args.seed, alpha=args.alpha
    )
    payload = {"store": args.store, **series.to_dict()}
    lines = [f"{args.store}: {len(series.statistic)} window(s) against rows {args.reference_rows[0]:,}.."
             f"{args.reference_rows[1] - 1:,}"]  # fmt: skip
    for window in payload["windows"]:
        lines.append(
            f"  rows {window['first_row']:,}..{window['stop_row'] - 1:,}: MMD^2 = {window['statistic']:.4g}, "
            f"p = {window['p_value']:.4g}" + ("  ALARM" if window["alarm"] else "")
        )
    if args.plot:
        from ..plot import _publish_figure  # here, not at the top: start-up time

        figure = series.plot().figure
        figure.tight_layout()
        _publish_figure(figure, args.plot, args.overwrite)
        payload["plot"] = args.plot
    emit(args, payload, lines)
    return options.EXIT_OK


def _remove_store(path: str, storage_options: dict[str, Any] | None) -> None:
    """Remove a store this command created (local directory or URL)."""
    if "://" in path and not path.startswith("file://"):
        import fsspec

        filesystem, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        filesystem.rm(root, recursive=True)
        return
    import shutil

    shutil.rmtree(path[len("file://") :] if path.startswith("file://") else path, ignore_errors=True)


def run_merge(args: argparse.Namespace) -> int:
    from ..store import SketchStore

    options.check_output_free(args.output, args.storage_options, overwrite=False)
    inputs = [_open(args, path) for path in args.stores]
    first = inputs[0]
    merged = SketchStore.create(
        args.output, first.feature_map, bucket=first.bucket_seconds and first._root.bucket_label or first.bucket_rows,
        signed=options.signing_key(args) is not None, storage_options=args.storage_options,
        signing_key=options.signing_key(args),
    )  # fmt: skip
    try:
        buckets = merged.merge_from(*inputs, signing_key=options.signing_key(args))
    except BaseException:  # an input refused (unsigned, tampered) or a stop: no half-merged store is left
        _remove_store(args.output, args.storage_options)
        raise
    payload = {"output": args.output, "stores": list(args.stores), "buckets": len(buckets), **merged.info()}
    emit(args, payload, [f"merged {len(inputs)} stores into {args.output}: {len(buckets):,} bucket(s)"])
    return options.EXIT_OK
