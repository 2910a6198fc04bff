"""The ``streamrff`` command line: parses arguments and calls the public API, nothing else.

Exit codes: 0 success, 1 the job failed (bad data, unreadable file,
unreachable scheduler or bucket), 2 bad command-line usage (an existing output
without ``--overwrite`` included).

Only the standard library is imported at module level: ``streamrff --help``
must not pay for numpy, numba, dask and zarr. Each command imports what it
needs when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    """A command-line argument is wrong (exit code 2)."""


#: Defaults of the options that define a map. They are parsed with default None, so that a
#: command can tell "given" from "not given" (and refuse it next to --map), and resolved here.
MAP_DEFAULTS: dict[str, Any] = {
    "features": 1024,
    "bandwidth": "median",
    "variant": "sincos",
    "orthogonal": False,
    "seed": 0,
}

_STORAGE_HELP = (
    "fsspec options for s3:// and other URLs: a JSON object, or @FILE to read it from a file (keeps "
    "secrets out of the process list). Default: the standard environment (AWS_ACCESS_KEY_ID, "
    "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_PROFILE, ~/.aws, fsspec config such as FSSPEC_S3='{...}')"
)
_EXISTS = "{path} already exists. Pass --overwrite to replace it, or choose another output."


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows '(default: X)' once, only for real defaults (not None/False, not when the help already says it);
    wraps descriptions and epilogs line by line, so examples keep their own lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(super(_HelpFormatter, self)._fill_text(line, width, indent) for line in text.splitlines())

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


def _storage_options(text: str | None) -> dict[str, Any] | None:
    """``--storage-options``: a JSON object, or ``@FILE`` holding one. Never echoes the content."""
    if text is None:
        return None
    where = "--storage-options"
    if text.startswith("@"):
        path = text[1:]
        where = f"--storage-options file {path}"
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            raise _UsageError(
                f"{where} cannot be read ({error.strerror}). Give an existing JSON file after '@'."
            ) from None
    try:
        options = json.loads(text)
    except json.JSONDecodeError as error:
        raise _UsageError(
            f"{where} must be a JSON object, e.g. '{{\"anon\": true}}' or @options.json. "
            f"Got invalid JSON ({error.msg})."
        ) from None
    if not isinstance(options, dict):
        raise _UsageError(f"{where} must be a JSON object. Got {type(options).__name__}.")
    return options


def _bandwidth(text: str) -> float | str:
    if text == "median":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'median', got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
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
        if not math.isfinite(value) or value <= 0:
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


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and sys.stderr.isatty()


def _emit(args: argparse.Namespace, payload: dict[str, Any], lines: Sequence[str]) -> None:
    if args.json:
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))


def _given(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The options among ``names`` that were given on the command line (parsed default is None)."""
    return [name for name in names if getattr(args, name, None) is not None]


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _resolve_map_options(args: argparse.Namespace, names: Sequence[str], map_sets: Sequence[str], why: str) -> None:
    """Refuse the options in ``map_sets`` next to ``--map``; fill the defaults of the others."""
    if getattr(args, "map", None) is not None:
        clash = _given(args, map_sets)
        if clash:
            flags = ", ".join(_option(name) for name in clash)
            raise _UsageError(
                f"--map {args.map} fixes the feature map, so {flags} would contradict it ({why}). "
                f"Drop {flags}, or drop --map to fit a new map."
            )
    for name in names:
        if getattr(args, name, None) is None and name in MAP_DEFAULTS:
            setattr(args, name, MAP_DEFAULTS[name])


def _load_map_option(args: argparse.Namespace, options: dict[str, Any] | None) -> Any:
    from .mapfile import load_map

    return None if args.map is None else load_map(args.map, storage_options=options)


def _check_output_free(path: str, storage_options: dict[str, Any] | None, overwrite: bool) -> None:
    """Refuse an existing output unless --overwrite (exit 2, one message for every command)."""
    if overwrite:
        return
    if "://" in path and not path.startswith("file://"):
        import fsspec

        from .errors import SourceError

        try:
            fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
            exists = fs.exists(root)
        except Exception as error:  # fsspec backends raise many types
            raise SourceError(f"Cannot reach {path}: {type(error).__name__}: {error}") from error
    else:
        exists = os.path.exists(path[len("file://") :] if path.startswith("file://") else path)
    if exists:
        raise _UsageError(_EXISTS.format(path=path))


def sketch_summary(path: str, sketch: Any) -> dict[str, Any]:
    """JSON-able description of a sketch (no secrets: storage options are never part of a sketch).

    Examples
    --------
    >>> import json, numpy as np, streamrff as srf
    >>> from streamrff.cli import sketch_summary
    >>> X = np.random.default_rng(0).normal(size=(50, 3))
    >>> summary = sketch_summary("x.sketch", srf.sketch_array(X, srf.RFF(n_features=16), moments=True))
    >>> summary["kind"], summary["count"], summary["n_features"], summary["map"]["bandwidth"]
    ('mean', 50, 16, 1.0)
    >>> ratios = summary["explained_variance_ratio"]
    >>> len(ratios), ratios == sorted(ratios, reverse=True), 0 < sum(ratios) <= 1 + 1e-9
    (10, True, True)
    >>> json.loads(json.dumps(summary)) == summary
    True
    """
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
    if hasattr(sketch, "sketch_size"):  # a Nystrom sketch: the second moment's range sketch
        summary["sketch_size"] = int(sketch.sketch_size)
        summary["test_seed"] = int(sketch.test_seed)
    if (getattr(sketch, "has_moments", False) or summary.get("sketch_size", 0) > 1) and sketch.count >= 2:
        from .kpca import KernelPCA

        components = min(10, sketch.feature_sum.shape[0], summary.get("sketch_size", 11) - 1)
        kpca = KernelPCA(n_components=components).fit_from_sketch(sketch)
        summary["explained_variance_ratio"] = [float(v) for v in kpca.explained_variance_ratio_]
    return summary


def _map_line(spec: dict[str, Any]) -> str:
    return "  map: " + ", ".join(f"{k}={v}" for k, v in spec.items() if not isinstance(v, dict))


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [f"{summary['path']}: {summary['kind']} sketch of {summary['count']:,} rows", _map_line(summary["map"])]
    if "sketch_size" in summary:
        lines.append(
            f"  features: {summary['n_features']}, second moment: low-rank (Nystrom, sketch_size "
            f"{summary['sketch_size']}, test_seed {summary['test_seed']})"
        )
    elif "n_features" in summary:
        lines.append(
            f"  features: {summary['n_features']}, second moment: {'yes' if summary.get('has_moments') else 'no'}"
        )
    if summary.get("explained_variance_ratio"):
        ratios = ", ".join(f"{value:.3f}" for value in summary["explained_variance_ratio"])
        lines.append(f"  explained variance ratio of the top kernel PCs: {ratios}")
    if summary.get("n_invalid"):
        lines.append(f"  rows skipped as NaN/inf: {summary['n_invalid']:,}")
    lines.append(f"  fingerprint: {summary['fingerprint']}")
    return lines


def _cmd_map(args: argparse.Namespace) -> int:
    from .engine import connect, fit_map
    from .mapfile import save_map
    from .maps import KJL, RFF

    options = _storage_options(args.storage_options)
    if args.method == "kjl":
        clash = _given(args, ["variant", "orthogonal"])
        if clash:
            raise _UsageError(f"{' and '.join(map(_option, clash))} only apply to --method rff; drop them for kjl.")
        _resolve_map_options(args, ["bandwidth", "seed"], [], "")
        feature_map = KJL(
            n_landmarks=args.landmarks or 1000, n_components=args.features, bandwidth=args.bandwidth, seed=args.seed
        )
    else:
        if args.landmarks is not None:
            raise _UsageError("--landmarks applies to --method kjl only; drop it, or pass --method kjl.")
        _resolve_map_options(args, ["features", "bandwidth", "variant", "orthogonal", "seed"], [], "")
        feature_map = RFF(
            n_features=args.features,
            bandwidth=args.bandwidth,
            variant=args.variant,
            orthogonal=args.orthogonal,
            seed=args.seed,
        )
        feature_map._check_params()
    _check_output_free(args.output, options, args.overwrite)
    with connect(args.scheduler) as client:
        fitted = fit_map(
            feature_map, list(args.sources), client=client, progress=_show_progress(args), storage_options=options
        )
    save_map(fitted, args.output, storage_options=options, overwrite=args.overwrite)
    payload = {
        "path": args.output,
        "map": fitted.spec,
        "fingerprint": fitted.fingerprint,
        "sources": list(args.sources),
    }
    pooled = (
        f"one seeded sample pooled across {len(args.sources)} sources" if len(args.sources) > 1 else "a seeded sample"
    )
    lines = [f"wrote {args.output}", _map_line(fitted.spec)]
    if getattr(feature_map, "bandwidth", None) == "median":
        lines.append(f"  bandwidth {fitted.bandwidth_:.6g}: median pairwise distance of {pooled}")
    lines += [
        f"  fingerprint: {fitted.fingerprint}",
        f"  use it at every site: streamrff sketch SOURCE --map {args.output} -o SITE.sketch",
    ]
    _emit(args, payload, lines)
    return EXIT_OK


def _cmd_sketch(args: argparse.Namespace) -> int:
    from .engine import sketch
    from .fileformat import check_writable
    from .maps import RFF

    options = _storage_options(args.storage_options)
    map_options = ["features", "bandwidth", "variant", "orthogonal", "seed"]
    _resolve_map_options(args, map_options, map_options, "they define the map")
    _check_output_free(args.output, options, args.overwrite)
    check_writable(args.output, options, args.overwrite)
    feature_map = _load_map_option(args, options)
    if feature_map is None:
        feature_map = RFF(
            n_features=args.features,
            bandwidth=args.bandwidth,
            variant=args.variant,
            orthogonal=args.orthogonal,
            seed=args.seed,
        )
        feature_map._check_params()
    result = sketch(
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


def _same_map_or_explain(paths: Sequence[str], sketches: Sequence[Any]) -> None:
    """Refuse sketches of different maps with the differing parameters and the commands that fix it."""
    from .sketches import describe_map_differences

    first_path, first = paths[0], sketches[0]
    for path, other in zip(paths[1:], sketches[1:]):
        if other.fingerprint != first.fingerprint:
            from .errors import SketchMismatchError

            raise SketchMismatchError(
                f"{first_path} and {path} were sketched with different maps: "
                f"{describe_map_differences(first.spec, other.spec)} (fingerprint {first.fingerprint[:16]} vs "
                f"{other.fingerprint[:16]}). Sketch every site with one map: re-run the other sites with "
                f"`streamrff sketch SOURCE --map {first_path} ...`, or fit one map on all sites with "
                "`streamrff map SOURCE [SOURCE ...] -o map.json` and sketch each with --map map.json."
            )
        if getattr(other, "kind", None) != first.kind:
            from .errors import SketchMismatchError

            raise SketchMismatchError(f"{first_path} is a {first.kind!r} sketch but {path} is a {other.kind!r} sketch.")


def _cmd_merge(args: argparse.Namespace) -> int:
    from . import load, merge  # the package's load knows every sketch kind (k-means, two-sample, index)
    from .fileformat import check_writable

    options = _storage_options(args.storage_options)
    _check_output_free(args.output, options, args.overwrite)
    check_writable(args.output, options, args.overwrite)
    sketches = [load(path, storage_options=options) for path in args.sketches]
    _same_map_or_explain(args.sketches, sketches)
    for path, part in zip(args.sketches[1:], sketches[1:]):
        if getattr(part, "has_moments", None) != getattr(sketches[0], "has_moments", None):
            raise _UsageError(
                f"{args.sketches[0]} and {path} differ in second moments: sketch every part with --moments, or none."
            )
    merged = merge(*sketches)
    merged.save(args.output, storage_options=options, overwrite=args.overwrite)
    summary = sketch_summary(args.output, merged)
    summary["inputs"] = list(args.sketches)
    _emit(args, summary, [f"merged {len(sketches)} sketches into {args.output}", *_summary_lines(summary)[1:]])
    return EXIT_OK


def _cmd_info(args: argparse.Namespace) -> int:
    from . import load
    from .mapfile import _read_map_bytes, map_from_json

    options = _storage_options(args.storage_options)
    data = _read_map_bytes(args.sketch, options)
    if data is not None:  # a map file: describe the map
        feature_map = map_from_json(data, args.sketch)
        payload = {"path": args.sketch, "kind": "map", "map": feature_map.spec, "fingerprint": feature_map.fingerprint}
        lines = [f"{args.sketch}: map file", _map_line(feature_map.spec), f"  fingerprint: {feature_map.fingerprint}"]
        _emit(args, payload, lines)
        return EXIT_OK
    summary = sketch_summary(args.sketch, load(args.sketch, storage_options=options))
    _emit(args, summary, _summary_lines(summary))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if os.path.exists(args.out) and not args.overwrite:
        raise _UsageError(_EXISTS.format(path=args.out))
    quiet = args.json
    report = run_demo(
        out=args.out,
        n_rows=args.rows,
        n_features=args.features,
        scheduler=args.scheduler,
        progress=_show_progress(args),
        echo=(lambda *_: None) if quiet else print,
        overwrite=args.overwrite,
    )
    if quiet:
        print(json.dumps(report, indent=2, sort_keys=True))
    return EXIT_OK


def _aggregated_test_lines(result: Any) -> list[str]:
    """The text report of the aggregated test: the p-value, then one row per bandwidth."""
    verdict = "differ" if result.p_value < 0.05 else "no evidence that they differ"
    n_bandwidths = result.bandwidths.shape[0]
    lines = [
        f"aggregated two-sample test: p = {result.p_value:.4g} ({verdict} at level 0.05)",
        f"  aggregation:  {result.aggregation} over {n_bandwidths} bandwidths, statistic {result.statistic:.6g}",
        f"  null:         {result.n_permutations} permutations shared by every bandwidth",
        f"  samples:      n_x = {result.n_x:,}, n_y = {result.n_y:,}",
        f"  kernels:      Gaussian, D = {result.n_features} per bandwidth",
        f"  per bandwidth (p-values NOT corrected for testing {n_bandwidths} bandwidths):",
        f"    {'bandwidth':>10} {'MMD^2':>12} {'standardised':>12} {'p uncorrected':>13}",
    ]
    for bandwidth, statistic, score, p_value in zip(
        result.bandwidths, result.statistics, result.standardised[:, 0], result.p_values_uncorrected
    ):
        lines.append(f"    {bandwidth:>10.4g} {statistic:>12.4e} {score:>12.3f} {p_value:>13.4g}")
    return lines


def _test_lines(result: Any) -> list[str]:
    """The text report of a two-sample test (what the result's repr says, without the Python syntax)."""
    if result.method == "aggregated":
        return _aggregated_test_lines(result)
    if result.method == "permutation":
        null = f"exact permutation test, {result.null.shape[0]} permutations"
    elif result.method == "spectral":
        null = f"spectral (weighted chi-square) null, {result.null.shape[0]} Monte-Carlo draws"
    else:
        null = f"Hotelling: T^2 = {result.null[0]:.4g} on {result.null[1]:.0f} degrees of freedom (chi-square)"
    bandwidth = "n/a" if result.bandwidth is None else f"{result.bandwidth:.4g}"
    verdict = "differ" if result.p_value < 0.05 else "no evidence that they differ"
    return [
        f"two-sample test: p = {result.p_value_text} ({verdict} at level 0.05)",
        f"  statistic (unbiased MMD^2): {result.statistic:.6g}",
        f"  null:                       {null}",
        f"  samples:                    n_x = {result.n_x:,}, n_y = {result.n_y:,}",
        f"  kernel:                     Gaussian, bandwidth {bandwidth}, D = {result.n_features}",
    ]


def _test_sketches(args: argparse.Namespace, options: dict[str, Any] | None) -> Any:
    from . import load
    from .sketches import MeanSketch
    from .twosample import mmd_test

    if args.method in ("permutation", "aggregated"):
        raise _UsageError(
            f"--sketches works with --method spectral or hotelling (moment sketches); the {args.method} "
            f"test needs the data: streamrff test X Y --method {args.method}."
        )
    clash = _given(args, ["features", "bandwidth", "variant", "map"])  # --seed still seeds the spectral draws
    if clash:
        raise _UsageError(
            f"--sketches carry their own map, so {', '.join(map(_option, clash))} do not apply; drop them."
        )
    sketches = [load(path, storage_options=options) for path in args.sketches]
    for path, part in zip(args.sketches, sketches):
        if not isinstance(part, MeanSketch):
            raise _UsageError(
                f"{path} is a {part.kind!r} sketch; --sketches needs two mean sketches made with --moments."
            )
        if not part.has_moments:
            raise _UsageError(
                f"{path} was sketched without second moments, which --method {args.method} needs. "
                "Re-run `streamrff sketch SOURCE --moments ...` for it "
                f"(with --map {args.sketches[0]} to keep the map)."
            )
    _same_map_or_explain(args.sketches, sketches)
    for path, part in zip(args.sketches, sketches):
        if part.count < 2:
            raise _UsageError(f"{path} holds {part.count} row(s); the unbiased MMD^2 needs at least 2 rows per sample.")
    return mmd_test(sketches[0], sketches[1], method=args.method, seed=0 if args.seed is None else args.seed)


def _cmd_test(args: argparse.Namespace) -> int:
    from .twosample import two_sample_test

    options = _storage_options(args.storage_options)
    if args.plot:
        _check_output_free(args.plot, None, args.overwrite)
    args.method = args.method or ("spectral" if args.sketches else "permutation")
    aggregated = args.method == "aggregated"
    if not aggregated and (args.bandwidths is not None or args.aggregation is not None):
        raise _UsageError("--bandwidths and --aggregation go with --method aggregated.")
    if aggregated and (args.bandwidth is not None or args.map is not None):
        raise _UsageError(
            "--method aggregated makes one map per bandwidth: use --bandwidths b1,b2,... or auto, not "
            f"{'--bandwidth' if args.bandwidth is not None else '--map'}."
        )
    if args.sketches:
        if args.sources:
            raise _UsageError("give either two data sources or --sketches A B, not both.")
        result = _test_sketches(args, options)
    else:
        if len(args.sources) != 2:
            raise _UsageError(f"expected two data sources X Y (or --sketches A B). Got {len(args.sources)}.")
        # --seed also seeds the permutations, so it never contradicts --map.
        names = ["features", "bandwidth", "variant", "seed"]
        _resolve_map_options(args, names, ["features", "bandwidth", "variant"], "they define the map")
        result = two_sample_test(
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
            feature_map=_load_map_option(args, options),
            **({"bandwidths": args.bandwidths, "aggregation": args.aggregation} if aggregated else {}),
        )
    if args.plot:
        from .plot import save_report_figure

        save_report_figure(args.plot, result=result, overwrite=args.overwrite)
    payload = result.to_dict(include_null=False)
    _emit(args, payload, _test_lines(result) + ([f"wrote {args.plot}"] if args.plot else []))
    return EXIT_OK


def _progress_printer(args: argparse.Namespace) -> Callable[[Any], None] | None:
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


def _fit_write_report(
    args: argparse.Namespace,
    model: Any,
    per_row: Callable[..., Any],
    report: Callable[[Any, dict[str, Any] | None], tuple[dict[str, Any], list[str]]],
    options: dict[str, Any] | None,
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

    _check_output_free(args.output, options, args.overwrite)
    with connect(args.scheduler) as client:
        model.fit(args.source, client=client, storage_options=options, **fit_options)
        values = per_row(model, args.source, storage_options=options)
        write_zarr(values, args.output, storage_options=options, client=client, overwrite=args.overwrite)
    payload, lines = report(model, options)
    _emit(args, {"output": args.output, **payload, "map": model.feature_map_.spec}, lines)
    return EXIT_OK


def _open_output(path: str, options: dict[str, Any] | None) -> Any:
    import dask.array as da

    return (
        da.from_zarr(path, storage_options=options)
        if "://" in path and not path.startswith("file://")
        else da.from_zarr(path)
    )


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


def _cmd_kmeans(args: argparse.Namespace) -> int:
    from .kmeans import KernelKMeans

    options = _storage_options(args.storage_options)
    map_options = ["features", "bandwidth", "landmarks", "method"]
    _resolve_map_options(args, ["seed"], map_options, "the map file sets the feature space")
    feature_map = _load_map_option(args, options)
    if feature_map is not None:
        model = KernelKMeans(
            n_clusters=args.clusters, max_iter=args.max_iter, tol=args.tol, seed=args.seed, feature_map=feature_map
        )
    else:
        model = KernelKMeans(
            n_clusters=args.clusters,
            method=args.method or "rff",
            n_features=args.features,
            n_landmarks=args.landmarks,
            bandwidth=args.bandwidth or "median",
            max_iter=args.max_iter,
            tol=args.tol,
            seed=args.seed,
        )

    def report(fitted: KernelKMeans, options: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
        import dask.array as da

        sizes = da.bincount(_open_output(args.output, options), minlength=args.clusters).compute()
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

    return _fit_write_report(args, model, KernelKMeans.predict, report, options, callback=_progress_printer(args))


def _cmd_kpca(args: argparse.Namespace) -> int:
    from .kpca import KernelPCA

    options = _storage_options(args.storage_options)
    map_options = ["features", "bandwidth", "landmarks", "method"]
    _resolve_map_options(args, ["seed"], map_options, "the map file sets the feature space")
    feature_map = _load_map_option(args, options)
    model = KernelPCA(
        n_components=args.components,
        method=args.method or "rff",
        n_features=args.features or 1024,
        n_landmarks=args.landmarks or 1000,
        bandwidth=args.bandwidth or "median",
        moments=args.moments,
        seed=args.seed,
        feature_map=feature_map,
    )

    def report(fitted: KernelPCA, options: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
        if args.plot:
            import numpy as np

            from .plot import save_report_figure

            stored = _open_output(args.output, options)
            rows = min(stored.shape[0], 20_000)
            save_report_figure(args.plot, scores=np.asarray(stored[:rows].compute()), overwrite=args.overwrite)
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

    if args.plot:
        _check_output_free(args.plot, None, args.overwrite)
    return _fit_write_report(args, model, KernelPCA.transform, report, options, progress=_show_progress(args))


def _add_scheduler(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scheduler", metavar="ADDRESS", default=None,
        help="Dask scheduler, e.g. tcp://127.0.0.1:8786 (default: an embedded local scheduler)",
    )  # fmt: skip


def _add_map_file(parser: argparse.ArgumentParser, refused: str) -> None:
    parser.add_argument(
        "--map", metavar="FILE", default=None,
        help=f"use this map instead of fitting one: a map file from 'streamrff map', or any sketch file (its map); "
        f"refused with {refused}",
    )  # fmt: skip


def _add_rff_options(parser: argparse.ArgumentParser, seed_help: str) -> None:
    parser.add_argument(
        "--features", type=_positive_int, default=None, help="number of random features D (default: 1024)"
    )
    parser.add_argument(
        "--bandwidth", type=_bandwidth, default=None,
        help="Gaussian kernel width sigma, or 'median': the median pairwise distance of a seeded sample of 1 000 rows "
        "(default: median)",
    )  # fmt: skip
    parser.add_argument("--variant", choices=["sincos", "cosphase"], default=None, help="RFF variant (default: sincos)")
    parser.add_argument("--seed", type=int, default=None, help=f"{seed_help} (default: 0)")


def _add_common(parser: argparse.ArgumentParser, storage: bool = True) -> None:
    if storage:
        parser.add_argument("--storage-options", metavar="JSON|@FILE", help=_STORAGE_HELP)
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text (for scripts)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")


def _add_overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing output (otherwise refused, exit 2)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``streamrff`` command.

    Examples
    --------
    >>> from streamrff.cli import build_parser
    >>> args = build_parser().parse_args(["sketch", "data.zarr", "-o", "data.sketch", "--features", "512"])
    >>> args.command, args.features, args.bandwidth, args.output
    ('sketch', 512, None, 'data.sketch')
    >>> try:
    ...     build_parser().parse_args(["sketch", "data.zarr", "-o", "d.sketch", "--features", "-1"])
    ... except SystemExit as exit:  # argparse refuses it (usage error, exit 2)
    ...     print(exit.code)
    2
    """
    parser = argparse.ArgumentParser(
        prog="streamrff",
        description="Sketch out-of-core data in kernel space on Dask, merge sketches, inspect them.",
        epilog="Sites share one map: 'streamrff map A.zarr B.zarr -o map.json', then "
        "'streamrff sketch A.zarr --map map.json -o a.sketch' at each site, 'streamrff merge' / "
        "'streamrff test --sketches'.\nRun 'streamrff COMMAND --help' for each command's options and an example.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version="%(prog)s " + _version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    fit = commands.add_parser(
        "map",
        help="fit one feature map on one or more sources and save it as a map file",
        description="Fit a feature map once, so that every site sketches with it. With several sources, the "
        "median bandwidth (and K-JL landmarks) come from ONE seeded row sample pooled across all of them, so no "
        "site is favoured. Writes a JSON map file (spec, fingerprint, K-JL landmarks; no pickle).",
        epilog="example: streamrff map site_a.zarr site_b.zarr -o map.json --features 1024\n"
        "then at each site: streamrff sketch site_a.zarr --map map.json -o site_a.sketch",
        formatter_class=_HelpFormatter,
    )
    fit.add_argument("sources", nargs="+", metavar="SOURCE", help="zarr arrays (paths or URLs) of the same width")
    fit.add_argument("-o", "--output", required=True, help="where to write the map file (path or URL, e.g. map.json)")
    fit.add_argument(
        "--method", choices=["rff", "kjl"], default="rff", help="random Fourier features or the K-JL sketch"
    )
    fit.add_argument("--features", type=_positive_int, default=None,
                     help="output width: random features D for rff, components for kjl "
                     "(default: 1024 for rff, min(landmarks, 100) for kjl)")  # fmt: skip
    fit.add_argument(
        "--bandwidth", type=_bandwidth, default=None, help="Gaussian kernel width sigma, or 'median' (default: median)"
    )
    fit.add_argument("--variant", choices=["sincos", "cosphase"], default=None, help="RFF variant (default: sincos)")
    fit.add_argument("--orthogonal", action="store_true", default=None, help="orthogonal random features (rff)")
    fit.add_argument("--landmarks", type=_positive_int, default=None, help="K-JL landmarks n (kjl; default: 1000)")
    fit.add_argument("--seed", type=int, default=None, help="seed of the map and of the pooled row sample (default: 0)")
    _add_scheduler(fit)
    _add_overwrite(fit)
    _add_common(fit)
    fit.set_defaults(handler=_cmd_map)

    sketch = commands.add_parser(
        "sketch",
        help="sketch a zarr array (local or object storage) into a sketch file",
        description="Embed every row of a zarr array with random Fourier features on Dask and save "
        "the mergeable sketch (count, feature sum, optional second moment). Sketches merge and test "
        "against each other only if made with the same map: pass --map (a map file or another site's sketch).",
        epilog="example: streamrff sketch data.zarr -o data.sketch --map map.json --moments\n"
        "         streamrff sketch data.zarr -o data.sketch --features 1024 --bandwidth median",
        formatter_class=_HelpFormatter,
    )
    sketch.add_argument(
        "source", help="zarr array path or URL (plain path, file://, s3://...), or group path + '/array'"
    )
    sketch.add_argument("-o", "--output", required=True, help="where to write the sketch (directory, .zip, or URL)")
    _add_map_file(sketch, "--features, --bandwidth, --variant, --orthogonal and --seed")
    _add_rff_options(sketch, "seed of the map and of its row sample")
    sketch.add_argument("--orthogonal", action="store_true", default=None, help="orthogonal random features")
    sketch.add_argument(
        "--moments", action="store_true", help="also sketch the D x D second moment (for test --sketches, kpca)"
    )
    sketch.add_argument(
        "--chunk-rows", type=_positive_int, default=None, help="rows per task (default: the zarr chunks)"
    )
    sketch.add_argument(
        "--dtype", choices=["float32", "float64"], default="float32", help="feature precision (float64: ~10x slower)"
    )
    sketch.add_argument(
        "--method",
        choices=["auto", "direct", "nufft"],
        default="auto",
        help="how sums are computed: nufft (d <= 3, needs streamrff[nufft]) or direct; auto picks the faster",
    )
    _add_scheduler(sketch)
    sketch.add_argument(
        "--checkpoint", metavar="DIR", default=None, help="keep per-chunk partials here to resume or extend"
    )
    sketch.add_argument("--on-invalid", choices=["raise", "skip"], default="raise", help="what to do with NaN/inf rows")
    _add_overwrite(sketch)
    _add_common(sketch)
    sketch.set_defaults(handler=_cmd_sketch)

    merge = commands.add_parser(
        "merge",
        help="merge sketches made with the same map",
        description="Merge two or more sketches of the same kind and feature map into one (the sketch of all "
        "their rows).",
        epilog="example: streamrff merge site-a.sketch site-b.sketch -o all.sketch",
        formatter_class=_HelpFormatter,
    )
    merge.add_argument("sketches", nargs="+", metavar="SKETCH", help="sketch files or URLs")
    merge.add_argument("-o", "--output", required=True, help="where to write the merged sketch")
    _add_overwrite(merge)
    _add_common(merge)
    merge.set_defaults(handler=_cmd_merge)

    info = commands.add_parser(
        "info",
        help="describe a sketch file or a map file",
        description="Validate a sketch file and print its kind, row count, map and fingerprint (or, for a map "
        "file, its map and fingerprint).",
        epilog="example: streamrff info all.sketch --json",
        formatter_class=_HelpFormatter,
    )
    info.add_argument("sketch", metavar="FILE", help="sketch file, map file, or URL")
    _add_common(info)
    info.set_defaults(handler=_cmd_info)

    test = commands.add_parser(
        "test",
        help="kernel two-sample (MMD) test between two data sets or two moment sketches",
        description="Test whether two samples come from the same distribution with the unbiased MMD^2 "
        "of random Fourier features: the one-pass exact permutation test on the data, or the spectral / "
        "Hotelling tests from moment sketches made separately with one map; --method aggregated tests "
        "several bandwidths at once under the same permutations and reports one p-value.",
        epilog="example: streamrff test x.zarr y.zarr --permutations 500 --plot null.png\n"
        "         streamrff test x.zarr y.zarr --method aggregated --bandwidths auto --plot scales.png\n"
        "         streamrff test --sketches x.sketch y.sketch --method spectral",
        formatter_class=_HelpFormatter,
    )
    test.add_argument("sources", nargs="*", metavar="SOURCE", help="two zarr arrays (paths or URLs)")
    test.add_argument(
        "--sketches", nargs=2, metavar=("A", "B"), help="two moment sketch files (same map) instead of data"
    )
    test.add_argument(
        "--method",
        choices=["permutation", "spectral", "hotelling", "aggregated"],
        default=None,
        help="null distribution (default: permutation on data, spectral on sketches); aggregated: "
        "several bandwidths under the same permutations, one p-value",
    )
    test.add_argument(
        "--permutations", type=_positive_int, default=500, help="permutations B (permutation and aggregated methods)"
    )
    test.add_argument(
        "--bandwidths",
        type=_bandwidth_list,
        default=None,
        metavar="auto|B1,B2,...",
        help="--method aggregated: kernel widths, or auto (10 widths from the data; the default)",
    )
    test.add_argument(
        "--aggregation",
        choices=["max", "fuse", "mmdagg"],
        default=None,
        help="--method aggregated: how the bandwidths' statistics are combined (default: max)",
    )
    _add_map_file(test, "--features, --bandwidth and --variant")
    _add_rff_options(test, "seed of the map, its row sample, the permutations and the spectral draws")
    test.add_argument(
        "--plot",
        metavar="PNG",
        help="draw the null distribution with the observed statistic "
        "(aggregated: each bandwidth's standardised statistic against its null)",
    )
    test.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    _add_scheduler(test)
    _add_common(test)
    test.set_defaults(handler=_cmd_test)

    kmeans = commands.add_parser(
        "kmeans",
        help="kernel k-means of a zarr array; labels written to zarr",
        description="Kernel k-means in random-feature (rff) or K-JL (kjl) space: one pass over the data "
        "per Lloyd iteration. The start is the best of two spectral-clustering and four k-means++ "
        "candidates on a seeded sample of 2 000 rows (by the exact kernel k-means objective for rff). "
        "Prints each pass's inertia, the percentage of rows that moved and the centre shift, why it "
        "stopped, and the cluster sizes.",
        epilog="example: streamrff kmeans data.zarr --clusters 10 --method kjl -o labels.zarr",
        formatter_class=_HelpFormatter,
    )
    kmeans.add_argument("source", help="zarr array path or URL")
    kmeans.add_argument("--clusters", type=_positive_int, required=True, help="number of clusters k")
    kmeans.add_argument("-o", "--output", required=True, help="zarr array for the labels")
    _add_map_file(kmeans, "--method, --features, --landmarks and --bandwidth")
    kmeans.add_argument("--method", choices=["rff", "kjl"], default=None, help="feature space (default: rff)")
    kmeans.add_argument("--features", type=_positive_int, default=None,
                        help="feature space width (default: 1024 for rff, 10 x clusters for kjl)")  # fmt: skip
    kmeans.add_argument("--landmarks", type=_positive_int, default=None,
                        help="K-JL landmarks n (default: max(200, rows / 100), at most 2000)")  # fmt: skip
    kmeans.add_argument(
        "--bandwidth", type=_bandwidth, default=None, help="Gaussian kernel width sigma, or 'median' (default: median)"
    )
    kmeans.add_argument("--max-iter", type=_positive_int, default=100, help="maximum Lloyd passes")
    kmeans.add_argument("--tol", type=_non_negative_float, default=1e-4,
                        help="stop when the centre shift falls to tol x the total feature variance")  # fmt: skip
    kmeans.add_argument(
        "--seed", type=int, default=None, help="seed of the map, the row sample and the initialisation (default: 0)"
    )
    _add_scheduler(kmeans)
    _add_overwrite(kmeans)
    _add_common(kmeans)
    kmeans.set_defaults(handler=_cmd_kmeans)

    kpca = commands.add_parser(
        "kpca",
        help="kernel PCA of a zarr array; scores written to zarr",
        description="Kernel PCA from one moment sketch (one pass), then the scores of every row.",
        epilog="example: streamrff kpca data.zarr --components 10 -o scores.zarr --plot scatter.png",
        formatter_class=_HelpFormatter,
    )
    kpca.add_argument("source", help="zarr array path or URL")
    kpca.add_argument("--components", type=_positive_int, required=True, help="number of components k")
    kpca.add_argument(
        "--moments",
        choices=["auto", "full", "low-rank"],
        default="auto",
        help="covariance sketch: the D x D moment (full), its streaming Nystrom sketch (low-rank, for large D), "
        "or auto: low-rank when one D x D partial would exceed 256 MiB (D > 5792)",
    )
    kpca.add_argument("-o", "--output", required=True, help="zarr array for the scores")
    _add_map_file(kpca, "--method, --features, --landmarks and --bandwidth")
    kpca.add_argument("--method", choices=["rff", "kjl"], default=None, help="feature space (default: rff)")
    kpca.add_argument("--features", type=_positive_int, default=None, help="feature space width D (default: 1024)")
    kpca.add_argument("--landmarks", type=_positive_int, default=None, help="K-JL landmarks n (default: 1000)")
    kpca.add_argument(
        "--bandwidth", type=_bandwidth, default=None, help="Gaussian kernel width sigma, or 'median' (default: median)"
    )
    kpca.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the map, its row sample and the eigensolver's start (default: 0)",
    )
    kpca.add_argument("--plot", metavar="PNG", help="scatter of the first two scores")
    _add_scheduler(kpca)
    _add_overwrite(kpca)
    _add_common(kpca)
    kpca.set_defaults(handler=_cmd_kpca)

    demo = commands.add_parser(
        "demo",
        help="generate two samples, fit one map, sketch them as two sites, merge, test, cluster",
        description="Write two generated zarr arrays (one with a subtle shift), fit one map on a sample pooled "
        "across both (saved as map.json), sketch each on Dask with it, merge the sketches, run the kernel "
        "two-sample tests, kernel PCA and kernel k-means, and write report.json and report.png.",
        epilog="example: streamrff demo --rows 200000 --out /tmp/streamrff-demo",
        formatter_class=_HelpFormatter,
    )
    demo.add_argument("--rows", type=_positive_int, default=2_000_000, help="rows per site")
    demo.add_argument("--out", default="streamrff-demo", help="directory for the data, map, sketches and report")
    demo.add_argument("--features", type=_positive_int, default=256, help="number of random features D")
    _add_scheduler(demo)
    _add_overwrite(demo)
    demo.add_argument("--json", action="store_true", help="print the report as JSON")
    demo.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")
    demo.set_defaults(handler=_cmd_demo)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("streamrff")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


@contextlib.contextmanager
def _one_line_warnings(command: str) -> Iterator[None]:
    """Show streamrff's warnings (e.g. a sketch file without an attributes digest) as one line each."""
    import warnings

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        print(f"streamrff {command}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Examples
    --------
    Sketch an in-memory array, save it, and describe the file as the CLI does:

    >>> import contextlib, io, json, os, tempfile, numpy as np, streamrff as srf
    >>> from streamrff.cli import main
    >>> X = np.random.default_rng(0).normal(size=(40, 3)).astype("float32")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "x.sketch")
    ...     srf.sketch_array(X, srf.RFF(n_features=32)).save(path)
    ...     output = io.StringIO()
    ...     with contextlib.redirect_stdout(output):
    ...         status = main(["info", path, "--json"])
    >>> status, json.loads(output.getvalue())["count"]
    (0, 40)

    Errors return exit status 1 with a one-line message on stderr:

    >>> with contextlib.redirect_stderr(io.StringIO()) as errors:
    ...     status = main(["info", os.path.join(folder, "missing.sketch")])
    >>> status, errors.getvalue().startswith("streamrff info: error: No map file at")
    (1, True)
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    handler: Callable[[argparse.Namespace], int] = args.handler
    from .errors import StreamRFFError

    try:
        with _one_line_warnings(args.command):
            return handler(args)
    except _UsageError as error:
        parser.exit(EXIT_USAGE, f"streamrff {args.command}: error: {error}\n")
    except FileExistsError as error:  # an output that appeared after the first check
        path = error.filename or str(error).split(" already exists")[0]
        parser.exit(EXIT_USAGE, f"streamrff {args.command}: error: {_EXISTS.format(path=path)}\n")
    except (StreamRFFError, FileNotFoundError) as error:
        print(f"streamrff {args.command}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"streamrff {args.command}: interrupted", file=sys.stderr)
        return 130
    return EXIT_OK  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
