"""The ``streamrff`` command line: parses arguments and calls the public API, nothing else.

Exit codes: 0 success, 1 the job failed (bad data, unreadable file,
unreachable scheduler or bucket), 2 bad command-line usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import StreamRFFError

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    """A command-line argument is wrong (exit code 2)."""


def _storage_options(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        options = json.loads(text)
    except json.JSONDecodeError as error:
        raise _UsageError(f"--storage-options must be a JSON object, e.g. '{{\"anon\": true}}'. Got invalid JSON ({error.msg}).") from error
    if not isinstance(options, dict):
        raise _UsageError(f"--storage-options must be a JSON object. Got {type(options).__name__}.")
    return options


def _bandwidth(text: str) -> float | str:
    if text == "median":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'median', got {text!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'median', got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and sys.stderr.isatty()


def _emit(args: argparse.Namespace, payload: dict[str, Any], lines: Sequence[str]) -> None:
    if args.json:
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))


def sketch_summary(path: str, sketch: Any) -> dict[str, Any]:
    """JSON-able description of a sketch (no secrets: storage options are never part of a sketch)."""
    summary: dict[str, Any] = {
        "path": path,
        "kind": sketch.kind,
        "count": sketch.count,
        "fingerprint": sketch.fingerprint,
        "map": sketch.spec,
    }
    for name in ("n_invalid", "has_moments"):
        if hasattr(sketch, name):
            summary[name] = getattr(sketch, name)
    if hasattr(sketch, "feature_sum"):
        summary["n_features"] = int(sketch.feature_sum.shape[0])
    return summary


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [f"{summary['path']}: {summary['kind']} sketch of {summary['count']:,} rows"]
    spec = summary["map"]
    lines.append("  map: " + ", ".join(f"{k}={v}" for k, v in spec.items() if not isinstance(v, dict)))
    if "n_features" in summary:
        lines.append(f"  features: {summary['n_features']}, second moment: {'yes' if summary.get('has_moments') else 'no'}")
    if summary.get("n_invalid"):
        lines.append(f"  rows skipped as NaN/inf: {summary['n_invalid']:,}")
    lines.append(f"  fingerprint: {summary['fingerprint']}")
    return lines


def _cmd_sketch(args: argparse.Namespace) -> int:
    import streamrff as srf
    from .fileformat import check_writable

    options = _storage_options(args.storage_options)
    check_writable(args.output, options, args.overwrite)
    feature_map = srf.RFF(
        n_features=args.features,
        bandwidth=args.bandwidth,
        variant=args.variant,
        orthogonal=args.orthogonal,
        seed=args.seed,
    )
    feature_map._check_params()
    result = srf.sketch(
        args.source,
        feature_map,
        moments=args.moments,
        client=args.scheduler,
        storage_options=options,
        chunk_rows=args.chunk_rows,
        checkpoint=args.checkpoint,
        on_invalid=args.on_invalid,
        progress=_show_progress(args),
    )
    result.save(args.output, storage_options=options, overwrite=args.overwrite)
    summary = sketch_summary(args.output, result)
    _emit(args, summary, [f"wrote {args.output}", *_summary_lines(summary)[1:]])
    return EXIT_OK


def _cmd_merge(args: argparse.Namespace) -> int:
    import streamrff as srf
    from .fileformat import check_writable

    options = _storage_options(args.storage_options)
    check_writable(args.output, options, args.overwrite)
    sketches = [srf.load(path, storage_options=options) for path in args.sketches]
    merged = srf.merge(*sketches)
    merged.save(args.output, storage_options=options, overwrite=args.overwrite)
    summary = sketch_summary(args.output, merged)
    summary["inputs"] = list(args.sketches)
    _emit(args, summary, [f"merged {len(sketches)} sketches into {args.output}", *_summary_lines(summary)[1:]])
    return EXIT_OK


def _cmd_info(args: argparse.Namespace) -> int:
    import streamrff as srf

    options = _storage_options(args.storage_options)
    summary = sketch_summary(args.sketch, srf.load(args.sketch, storage_options=options))
    _emit(args, summary, _summary_lines(summary))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    quiet = args.json
    report = run_demo(
        out=args.out,
        n_rows=args.rows,
        n_features=args.features,
        scheduler=args.scheduler,
        progress=_show_progress(args),
        echo=(lambda *_: None) if quiet else print,
    )
    if quiet:
        print(json.dumps(report, indent=2, sort_keys=True))
    return EXIT_OK


def _add_common(parser: argparse.ArgumentParser, storage: bool = True) -> None:
    if storage:
        parser.add_argument(
            "--storage-options",
            metavar="JSON",
            help='fsspec options for s3:// and other URLs, e.g. \'{"endpoint_url": "http://127.0.0.1:9000"}\'',
        )
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text (for scripts)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``streamrff`` command."""
    parser = argparse.ArgumentParser(
        prog="streamrff",
        description="Sketch out-of-core data in kernel space on Dask, merge sketches, inspect them.",
        epilog="Run 'streamrff COMMAND --help' for each command's options and an example.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"streamrff {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    sketch = commands.add_parser(
        "sketch",
        help="sketch a zarr array (local or object storage) into a sketch file",
        description="Embed every row of a zarr array with random Fourier features on Dask and save "
        "the mergeable sketch (count, feature sum, optional second moment).",
        epilog="example: streamrff sketch data.zarr -o data.sketch --features 1024 --bandwidth median --moments",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sketch.add_argument("source", help="zarr array path or URL (plain path, file://, s3://...), or group path + '/array'")
    sketch.add_argument("-o", "--output", required=True, help="where to write the sketch (directory, .zip, or URL)")
    sketch.add_argument("--features", type=_positive_int, default=1024, help="number of random features D")
    sketch.add_argument("--bandwidth", type=_bandwidth, default="median", help="Gaussian kernel width sigma, or 'median'")
    sketch.add_argument("--variant", choices=["sincos", "cosphase"], default="sincos", help="RFF variant")
    sketch.add_argument("--orthogonal", action="store_true", help="orthogonal random features")
    sketch.add_argument("--seed", type=int, default=0, help="seed of the map and of the row sample")
    sketch.add_argument("--moments", action="store_true", help="also sketch the D x D second moment")
    sketch.add_argument("--chunk-rows", type=_positive_int, default=None, help="rows per task (default: zarr chunks)")
    sketch.add_argument("--scheduler", metavar="ADDRESS", default=None, help="Dask scheduler, e.g. tcp://127.0.0.1:8786 (default: embedded local)")
    sketch.add_argument("--checkpoint", metavar="DIR", default=None, help="keep per-chunk partials here to resume or extend")
    sketch.add_argument("--on-invalid", choices=["raise", "skip"], default="raise", help="what to do with NaN/inf rows")
    sketch.add_argument("--overwrite", action="store_true", help="replace an existing output")
    _add_common(sketch)
    sketch.set_defaults(handler=_cmd_sketch)

    merge = commands.add_parser(
        "merge",
        help="merge sketches made with the same map",
        description="Merge two or more sketches of the same kind and feature map into one.",
        epilog="example: streamrff merge site-a.sketch site-b.sketch -o all.sketch",
    )
    merge.add_argument("sketches", nargs="+", metavar="SKETCH", help="sketch files or URLs")
    merge.add_argument("-o", "--output", required=True, help="where to write the merged sketch")
    merge.add_argument("--overwrite", action="store_true", help="replace an existing output")
    _add_common(merge)
    merge.set_defaults(handler=_cmd_merge)

    info = commands.add_parser(
        "info",
        help="describe a sketch file",
        description="Validate a sketch file and print its kind, row count, map and fingerprint.",
        epilog="example: streamrff info all.sketch --json",
    )
    info.add_argument("sketch", help="sketch file or URL")
    _add_common(info)
    info.set_defaults(handler=_cmd_info)

    demo = commands.add_parser(
        "demo",
        help="generate two samples, sketch them as two sites, merge and compare",
        description="Write two generated zarr arrays (one with a subtle shift), sketch each on Dask "
        "with one shared map, merge the sketches and report the kernel two-sample statistics.",
        epilog="example: streamrff demo --rows 200000 --out /tmp/streamrff-demo",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument("--rows", type=_positive_int, default=2_000_000, help="rows per site")
    demo.add_argument("--out", default="streamrff-demo", help="directory for the data, sketches and report")
    demo.add_argument("--features", type=_positive_int, default=256, help="number of random features D")
    demo.add_argument("--scheduler", metavar="ADDRESS", default=None, help="Dask scheduler (default: embedded local)")
    demo.add_argument("--json", action="store_true", help="print the report as JSON")
    demo.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")
    demo.set_defaults(handler=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except _UsageError as error:
        parser.exit(EXIT_USAGE, f"streamrff {args.command}: error: {error}\n")
    except (StreamRFFError, FileExistsError, FileNotFoundError) as error:
        print(f"streamrff {args.command}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"streamrff {args.command}: interrupted", file=sys.stderr)
        return 130
    return EXIT_OK  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
