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


def _bandwidth_list(text: str) -> str | list[float]:
    """``--bandwidths``: 'auto' or comma-separated positive numbers."""
    if text == "auto":
        return text
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected 'auto' or comma-separated positive numbers like 0.1,0.3,1, got {text!r}"
            ) from None
        if not np.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(
                f"expected 'auto' or comma-separated positive numbers like 0.1,0.3,1, got {text!r}"
            )
        values.append(value)
    return values


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
    if getattr(sketch, "has_moments", False) and sketch.count >= 2:
        from .kpca import KernelPCA

        kpca = KernelPCA(n_components=min(10, sketch.feature_sum.shape[0])).fit_from_sketch(sketch)
        summary["explained_variance_ratio"] = [float(v) for v in kpca.explained_variance_ratio_]
    return summary


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [f"{summary['path']}: {summary['kind']} sketch of {summary['count']:,} rows"]
    spec = summary["map"]
    lines.append("  map: " + ", ".join(f"{k}={v}" for k, v in spec.items() if not isinstance(v, dict)))
    if "n_features" in summary:
        lines.append(f"  features: {summary['n_features']}, second moment: {'yes' if summary.get('has_moments') else 'no'}")
    if summary.get("explained_variance_ratio"):
        ratios = ", ".join(f"{value:.3f}" for value in summary["explained_variance_ratio"])
        lines.append(f"  explained variance ratio of the top kernel PCs: {ratios}")
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
        dtype=args.dtype,
        method=args.method,
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


def _cmd_test(args: argparse.Namespace) -> int:
    import streamrff as srf

    options = _storage_options(args.storage_options)
    args.method = args.method or ("spectral" if args.sketches else "permutation")
    aggregated = args.method == "aggregated"
    if not aggregated and (args.bandwidths is not None or args.aggregation is not None):
        raise _UsageError("--bandwidths and --aggregation go with --method aggregated.")
    if aggregated and args.bandwidth != "median":
        raise _UsageError("--method aggregated tests several bandwidths: use --bandwidths b1,b2,... or auto, not --bandwidth.")
    if args.sketches:
        if args.sources:
            raise _UsageError("give either two data sources or --sketches A B, not both.")
        if args.method in ("permutation", "aggregated"):
            raise _UsageError(
                f"--sketches works with --method spectral or hotelling (moment sketches); the {args.method} "
                f"test needs the data: streamrff test X Y --method {args.method}."
            )
        sketch_x, sketch_y = (srf.load(path, storage_options=options) for path in args.sketches)
        result = srf.mmd_test(sketch_x, sketch_y, method=args.method, seed=args.seed)
    else:
        if len(args.sources) != 2:
            raise _UsageError(f"expected two data sources X Y (or --sketches A B). Got {len(args.sources)}.")
        result = srf.two_sample_test(
            args.sources[0],
            args.sources[1],
            n_features=args.features,
            bandwidth=args.bandwidth,
            method=args.method,
            n_permutations=args.permutations,
            seed=args.seed,
            client=args.scheduler,
            storage_options=options,
            variant=args.variant,
            **({"bandwidths": args.bandwidths, "aggregation": args.aggregation} if aggregated else {}),
        )
    if args.plot:
        from .plot import save_report_figure

        save_report_figure(args.plot, result=result)
    payload = result.to_dict(include_null=False)
    lines = [repr(result)] + ([f"wrote {args.plot}"] if args.plot else [])
    _emit(args, payload, lines)
    return EXIT_OK


def _progress_printer(args: argparse.Namespace) -> Callable[[Any], None] | None:
    if args.json:
        return None

    def report(step: Any) -> None:
        print(
            f"iteration {step.iteration:3d}  inertia {step.inertia:.6g}  moved {100 * step.moved_fraction:5.2f}%",
            file=sys.stderr,
            flush=True,
        )

    return report


def _fit_write_report(
    args: argparse.Namespace,
    model: Any,
    per_row: Callable[..., Any],
    report: Callable[[Any, dict[str, Any] | None], tuple[dict[str, Any], list[str]]],
    **fit_options: Any,
) -> int:
    """Fit ``model`` on ``args.source``, write ``per_row(model, source)`` to ``args.output`` as zarr, report.

    The body the ``kmeans`` and ``kpca`` commands share: refuse an existing
    output unless ``--overwrite``; fit, compute and write on ``--scheduler``
    (an embedded local scheduler by default); then call
    ``report(model, storage_options)`` (which may also draw a figure of the
    output) and print its payload, with the output and the map spec added,
    under ``--json``, else its lines.
    """
    from .engine import connect
    from .io import write_zarr

    options = _storage_options(args.storage_options)
    _check_output_free(args.output, options, args.overwrite)
    with connect(args.scheduler) as client:
        model.fit(args.source, client=client, storage_options=options, **fit_options)
        values = per_row(model, args.source, storage_options=options)
        write_zarr(values, args.output, storage_options=options, client=client, overwrite=args.overwrite)
    payload, lines = report(model, options)
    _emit(args, {"output": args.output, **payload, "map": model.feature_map_.spec}, lines)
    return EXIT_OK


def _cmd_kmeans(args: argparse.Namespace) -> int:
    from .kmeans import KernelKMeans

    model = KernelKMeans(
        n_clusters=args.clusters,
        method=args.method,
        n_features=args.features,
        n_landmarks=args.landmarks,
        bandwidth=args.bandwidth,
        max_iter=args.max_iter,
        seed=args.seed,
    )

    def report(fitted: KernelKMeans, options: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
        payload = {
            "n_clusters": int(args.clusters),
            "method": args.method,
            "inertia": float(fitted.inertia_),
            "n_iter": int(fitted.n_iter_),
        }
        return payload, [f"wrote labels to {args.output}", f"  {fitted.n_iter_} iterations, inertia {fitted.inertia_:.6g}"]

    return _fit_write_report(args, model, KernelKMeans.predict, report, callback=_progress_printer(args))


def _cmd_kpca(args: argparse.Namespace) -> int:
    import streamrff as srf

    model = srf.KernelPCA(
        n_components=args.components,
        method=args.method,
        n_features=args.features,
        n_landmarks=args.landmarks,
        bandwidth=args.bandwidth,
        seed=args.seed,
    )

    def report(fitted: srf.KernelPCA, options: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
        if args.plot:
            from .plot import save_report_figure

            import zarr

            stored = zarr.open_array(args.output, mode="r", storage_options=options) if "://" in args.output else zarr.open_array(args.output, mode="r")
            rows = min(stored.shape[0], 20_000)
            save_report_figure(args.plot, scores=np.asarray(stored[:rows]))
        payload = {
            "n_components": int(args.components),
            "explained_variance": [float(v) for v in fitted.explained_variance_],
            "explained_variance_ratio": [float(v) for v in fitted.explained_variance_ratio_],
            "residual": float(fitted.residual_),
        }
        ratios = ", ".join(f"{v:.3f}" for v in fitted.explained_variance_ratio_)
        lines = [f"wrote scores to {args.output}", f"  explained variance ratio: {ratios}"]
        return payload, lines + ([f"wrote {args.plot}"] if args.plot else [])

    return _fit_write_report(args, model, srf.KernelPCA.transform, report, progress=_show_progress(args))


def _check_output_free(path: str, storage_options: dict[str, Any] | None, overwrite: bool) -> None:
    import os

    if "://" in path and not path.startswith("file://"):
        import fsspec

        fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        exists = fs.exists(root)
    else:
        exists = os.path.exists(path[len("file://") :] if path.startswith("file://") else path)
    if exists and not overwrite:
        raise FileExistsError(f"{path} already exists. Choose another output or pass --overwrite.")


def _add_map_options(parser: argparse.ArgumentParser, default_features: int | None = 1024) -> None:
    parser.add_argument("--features", type=_positive_int, default=default_features, help="number of random features D")
    parser.add_argument("--bandwidth", type=_bandwidth, default="median", help="Gaussian kernel width sigma, or 'median'")
    parser.add_argument("--seed", type=int, default=0, help="seed of the map, the row sample and the permutations")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None, help="Dask scheduler, e.g. tcp://127.0.0.1:8786 (default: embedded local)")


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
    sketch.add_argument(
        "--dtype", choices=["float32", "float64"], default="float32", help="feature precision (float64: ~10x slower)"
    )
    sketch.add_argument(
        "--method",
        choices=["auto", "direct", "nufft"],
        default="auto",
        help="how sums are computed: nufft (d <= 3, needs streamrff[nufft]) or direct; auto picks the faster",
    )
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

    test = commands.add_parser(
        "test",
        help="kernel two-sample (MMD) test between two data sets or two moment sketches",
        description="Test whether two samples come from the same distribution with the unbiased MMD^2 "
        "of random Fourier features: the one-pass exact permutation test on the data, or the spectral / "
        "Hotelling tests from moment sketches made separately.",
        epilog="examples: streamrff test x.zarr y.zarr --permutations 500 --plot null.png\n"
        "          streamrff test x.zarr y.zarr --method aggregated --bandwidths auto --plot scales.png\n"
        "          streamrff test --sketches x.sketch y.sketch --method spectral",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    test.add_argument("sources", nargs="*", metavar="SOURCE", help="two zarr arrays (paths or URLs)")
    test.add_argument("--sketches", nargs=2, metavar=("A", "B"), help="two moment sketch files instead of data")
    test.add_argument("--method", choices=["permutation", "spectral", "hotelling", "aggregated"], default=None,
                      help="null distribution (default: permutation on data, spectral on sketches); aggregated: "
                      "several bandwidths under the same permutations, one p-value")
    test.add_argument("--bandwidths", type=_bandwidth_list, default=None, metavar="auto|B1,B2,...",
                      help="--method aggregated: kernel widths, or auto (10 widths from the data; the default)")
    test.add_argument("--aggregation", choices=["max", "fuse", "mmdagg"], default=None,
                      help="--method aggregated: how the bandwidths' statistics are combined (default: max)")
    test.add_argument("--permutations", type=_positive_int, default=500, help="permutations B")
    test.add_argument("--variant", choices=["sincos", "cosphase"], default="sincos", help="RFF variant")
    test.add_argument("--plot", metavar="PNG", help="draw the null histogram with the observed statistic "
                      "(aggregated: each bandwidth's standardised statistic against its null)")
    _add_map_options(test)
    _add_common(test)
    test.set_defaults(handler=_cmd_test)

    kmeans = commands.add_parser(
        "kmeans",
        help="kernel k-means of a zarr array; labels written to zarr",
        description="Kernel k-means in random-feature (rff) or K-JL (kjl) space: one pass over the data "
        "per Lloyd iteration, k-means++ on a seeded row sample. Prints iteration, inertia and the "
        "fraction of rows that moved.",
        epilog="example: streamrff kmeans data.zarr --clusters 10 --method kjl -o labels.zarr",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    kmeans.add_argument("source", help="zarr array path or URL")
    kmeans.add_argument("--clusters", type=_positive_int, required=True, help="number of clusters k")
    kmeans.add_argument("--method", choices=["rff", "kjl"], default="rff", help="feature space")
    kmeans.add_argument("--landmarks", type=_positive_int, default=None, help="K-JL landmarks n")
    kmeans.add_argument("--max-iter", type=_positive_int, default=100, help="maximum Lloyd iterations")
    kmeans.add_argument("-o", "--output", required=True, help="zarr array for the labels")
    kmeans.add_argument("--overwrite", action="store_true", help="replace an existing output")
    _add_map_options(kmeans, default_features=None)
    _add_common(kmeans)
    kmeans.set_defaults(handler=_cmd_kmeans)

    kpca = commands.add_parser(
        "kpca",
        help="kernel PCA of a zarr array; scores written to zarr",
        description="Kernel PCA from one moment sketch (one pass), then the scores of every row.",
        epilog="example: streamrff kpca data.zarr --components 10 -o scores.zarr --plot scatter.png",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    kpca.add_argument("source", help="zarr array path or URL")
    kpca.add_argument("--components", type=_positive_int, required=True, help="number of components k")
    kpca.add_argument("--method", choices=["rff", "kjl"], default="rff", help="feature space")
    kpca.add_argument("--landmarks", type=_positive_int, default=1000, help="K-JL landmarks n")
    kpca.add_argument("-o", "--output", required=True, help="zarr array for the scores")
    kpca.add_argument("--overwrite", action="store_true", help="replace an existing output")
    kpca.add_argument("--plot", metavar="PNG", help="scatter of the first two scores")
    _add_map_options(kpca)
    _add_common(kpca)
    kpca.set_defaults(handler=_cmd_kpca)

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
