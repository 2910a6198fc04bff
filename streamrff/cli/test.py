"""The ``streamrff test`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from .._base.formatting import p_equals
from . import options
from .inputs import add_on_invalid, add_sketches_alias, finite_rows, skipped_line
from .output import emit
from .sketchfiles import load_checked_sketches

#: ``streamrff test --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
kernel two-sample (MMD) test between two data sets or two moment sketches

Test whether two samples come from the same distribution with the unbiased MMD^2 of random Fourier
features: the one-pass exact permutation test on the data, or the spectral / Hotelling tests from
moment sketches made separately with one map (--null chooses); --null aggregated tests several
bandwidths at once under the same permutations and reports one p-value.

example: streamrff test x.zarr y.zarr --permutations 500 --plot null.png
         streamrff test before/ after/ --select age,income,city \\
         --categorical zip --columns
         streamrff test x.zarr y.zarr --null aggregated --bandwidths auto \\
         --plot scales.png
         streamrff test x.sketch y.sketch --null spectral
         streamrff test x.zarr y.zarr --moments --columns
"""


#: ``--null`` (formerly ``--method``): the null distributions of the test.
NULLS = ["permutation", "spectral", "hotelling", "aggregated"]


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "test", HELP, run)
    options.add_source(
        parser,
        "two zarr arrays or parquet sources (file, folder of parquet files, s3:// dataset), or two moment sketch "
        "files of one map (told apart by their content)",
        nargs="*",
    )
    add_sketches_alias(parser, 2)
    parser.set_defaults(sketch_inputs="sources")
    options.add_renamed_choice(
        parser,
        "--null",
        NULLS,
        "the test's null distribution (default: permutation on data, spectral on sketches); aggregated: "
        "several bandwidths under the same permutations, one p-value",
    )
    parser.add_argument(
        "--permutations",
        type=options.positive_int,
        default=500,
        help="permutations B (--null permutation and aggregated)",
    )
    parser.add_argument(
        "--bandwidths",
        type=options.bandwidth_list,
        default=None,
        metavar="auto|B1,B2,...",
        help="--null aggregated: kernel widths, or auto (10 widths from the data; the default)",
    )
    parser.add_argument(
        "--aggregation",
        choices=["max", "fuse", "mmdagg"],
        default=None,
        help="--null aggregated: how the bandwidths' statistics are combined (default: max)",
    )
    parser.add_argument(
        "--moments",
        action="store_true",
        help="on data (--null permutation or aggregated): also sketch each sample's second moments in the same "
        "pass, for the confidence interval of MMD^2 (the spectral and Hotelling tests read them anyway)",
    )
    parser.add_argument(
        "--columns",
        action="store_true",
        help="on data: also one test per input column (same permutations, Holm-adjusted), printed as a table",
    )
    parser.add_argument(
        "--components",
        type=options.positive_int,
        default=None,
        metavar="K",
        help="on data: one test per top-K kernel principal component of the pooled row sample (wide rows)",
    )
    parser.add_argument(
        "--column-features",
        type=options.positive_int,
        default=64,
        help="--columns/--components: random features per column's 1-D kernel",
    )
    options.add_map_file(parser, "--features, --bandwidth, --variant and --structured")
    options.add_rff_options(parser, "seed of the map, its row sample, the permutations and the spectral draws")
    options.add_structured(parser)
    options.add_plot(
        parser,
        "draw the null distribution with the observed statistic "
        "(aggregated: each bandwidth's standardised statistic against its null)",
    )
    options.add_overwrite(parser, "replace an existing --plot file")
    options.add_table_options(parser)
    add_on_invalid(parser)
    options.add_scheduler(parser)
    options.add_source_options(parser)
    options.add_verify_key(parser)
    options.add_common(parser)


def _aggregated_test_lines(result: Any) -> list[str]:
    """The text report of the aggregated test: the p-value, then one row per bandwidth (MMD, interval, p)."""
    verdict = "differ" if result.p_value < 0.05 else "no evidence that they differ"
    n_maps, unit = result.bandwidths.shape[0], "map" if result.kernels else "bandwidth"
    kernels = "named per map below" if result.kernels else "Gaussian"
    return [
        f"aggregated two-sample test: {p_equals(result.p_value, result.n_permutations)} ({verdict} at level 0.05)",
        f"  aggregation:  {result.aggregation} over {n_maps} {unit}s, statistic {result.statistic:.6g}"
        + (" (minus the smallest of the questions' p-values below)" if result.questions else ""),
        f"  null:         {result.n_permutations} permutations shared by every {unit}",
        f"  samples:      n_x = {result.n_x:,}, n_y = {result.n_y:,}",
        f"  kernels:      {kernels}, D = {result.n_features} per {unit}",
        *result.question_lines(),
        *result.table_lines(),
    ]


_NULLS = {
    "permutation": lambda null: f"exact permutation test, {null.shape[0]} permutations",
    "spectral": lambda null: f"spectral (weighted chi-square) null, {null.shape[0]} Monte-Carlo draws",
    "hotelling": lambda null: f"Hotelling: T^2 = {null[0]:.4g} on {null[1]:.0f} degrees of freedom (chi-square)",
}


def _test_lines(result: Any) -> list[str]:
    """The text report of a two-sample test (what the result's repr says, without the Python syntax)."""
    if result.method == "aggregated":
        return _aggregated_test_lines(result)
    bandwidth = "n/a" if result.bandwidth is None else f"{result.bandwidth:.4g}"
    verdict = "differ" if result.p_value < 0.05 else "no evidence that they differ"
    return [
        f"two-sample test: {p_equals(result.p_value, result.n_null)} ({verdict} at level 0.05)",
        f"  statistic (unbiased MMD^2): {result.statistic:.6g}",
        f"  null:                       {_NULLS[result.method](result.null)}",
        f"  samples:                    n_x = {result.n_x:,}, n_y = {result.n_y:,}",
        f"  kernel:                     {_kernel_name(result.map_spec)}, bandwidth {bandwidth}, "
        f"D = {result.n_features}",
    ]


def _kernel_name(spec: Any) -> str:
    """The kernel line: Gaussian, or for a mixed map (table sources) the Gaussian times the mismatch factor."""
    categorical = spec.get("categorical") if isinstance(spec, dict) else None
    if not categorical:
        return "Gaussian"
    mismatch = spec.get("mismatch")
    shown = f"{mismatch:.3g}" if isinstance(mismatch, (int, float)) else str(mismatch)
    return f"Gaussian x e^-{shown} per differing category (categorical columns {list(categorical)})"


def _effect_lines(result: Any) -> list[str]:
    """The effect size lines added under the test's report (the per-bandwidth ones for the aggregated test)."""
    if result.method != "aggregated":
        return [f"  effect size:                {result.effect_text()}"]
    return []  # the per-bandwidth table carries MMD and its interval


def _column_lines(columns: Any) -> list[str]:
    """The per-column table: most to least different, Holm-adjusted p-values."""
    label = "column" if columns.kind == "columns" else "kernel principal component"
    rejected = columns.rejected(0.05)
    return [
        f"per-{label} tests ({len(columns.columns)}; null: {columns.null}; Holm-adjusted): "
        f"{rejected.size} differ at family-wise level 0.05",
        *columns.table_lines(),
    ]


def _column_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if (args.columns or args.components is not None) and args.sketches:
        problems.append(
            "--columns and --components test the data column by column: give two data sources, not sketch files."
        )
    if args.columns and args.components is not None:
        problems.append("give --columns (input columns) or --components K (kernel principal components), not both.")
    if (args.select is not None or args.categorical is not None) and args.sketches:
        problems.append("--select and --categorical read parquet data; sketch files carry their own map: drop them.")
    if args.moments and args.sketches:
        problems.append(
            "--moments sketches moments on data; sketch files must already hold them (streamrff sketch --moments)."
        )
    return problems


def _usage_problems(args: argparse.Namespace) -> list[str]:
    """Every way the command line contradicts itself (checked before any file is read)."""
    problems = _column_problems(args)
    aggregated = args.null == "aggregated"
    if not aggregated and (args.bandwidths is not None or args.aggregation is not None):
        problems.append("--bandwidths and --aggregation go with --null aggregated.")
    if aggregated and (args.bandwidth is not None or args.map is not None or args.structured):
        given = "--bandwidth" if args.bandwidth is not None else "--map" if args.map is not None else "--structured"
        problems.append(
            f"--null aggregated makes one map per bandwidth: use --bandwidths b1,b2,... or auto, not {given}."
        )
    count = len(args.sketches or args.sources)
    if count != 2:
        what = "sketch files" if args.sketches else "data sources"
        problems.append(f"expected two data sources X Y, or two sketch files A B. Got {count} {what}.")
    if args.sketches:
        if args.on_invalid != "raise":
            problems.append("--on-invalid applies to data; sketch files hold no rows: drop it.")
        if args.null in ("permutation", "aggregated"):
            problems.append(
                f"sketch files work with --null spectral or hotelling (moment sketches); the {args.null} "
                f"test needs the data: streamrff test X Y --null {args.null}."
            )
        # --seed seeds the spectral draws
        clash = options.given(args, ["features", "bandwidth", "variant", "structured", "map"])
        if clash:
            problems.append(
                f"sketch files carry their own map, so {', '.join(map(options.flag, clash))} do not apply; drop them."
            )
    return problems


def _test_sketches(args: argparse.Namespace) -> Any:
    from ..twosample import mmd_test  # here, not at the top: start-up time

    sketches = load_checked_sketches(
        args.sketches,
        args.storage_options,
        mean_with_moments_for=f"--null {args.null}",
        min_rows=2,
        verify_key=options.verify_key(args),
    )
    return mmd_test(sketches[0], sketches[1], method=args.null, seed=0 if args.seed is None else args.seed)


def _test_data(args: argparse.Namespace) -> Any:
    from ..twosample import two_sample_test

    # --seed also seeds the permutations, so it never contradicts --map.
    names = ["features", "bandwidth", "variant", "structured", "seed"]
    map_sets = ["features", "bandwidth", "variant", "structured"]
    options.resolve_map_options(args, names, map_sets, "they define the map")
    feature_map = options.load_map_option(args)
    if args.map is None:
        # --features and --variant checked against each other before the data are read
        unfitted = options.rff_of_options(args)
    aggregated = args.null == "aggregated"
    with options.one_connection() as client:
        args.sources = options.open_tables(args, args.sources)  # parquet sources opened with --select/--categorical
        if args.on_invalid == "skip":  # each sample's finite rows (one pass each); the test runs on them
            if any(not isinstance(source, str) for source in args.sources):
                raise options.UsageError("--on-invalid skip reads zarr arrays; a parquet source has no NaN rows "
                                         "to skip (its missing values are refused when read). Drop it.")  # fmt: skip
            args.skipped = [finite_rows(source, name, client) for source, name in zip(args.sources, "XY")]
            args.sources = [rows.clean for rows in args.skipped]
        if args.structured:  # fitted on the pooled rows as two_sample_test fits its own map
            feature_map = options.fit_on_sources(unfitted, args.sources)
        if _columns_ride_along(args):  # the joint test and the per-column tests in one pass
            return _test_columns(args, feature_map if feature_map is not None else unfitted)
        return two_sample_test(
            args.sources[0],
            args.sources[1],
            n_features=args.features,
            bandwidth=args.bandwidth,
            method=args.null,
            n_permutations=args.permutations,
            seed=args.seed,
            variant=args.variant,
            feature_map=feature_map,
            **({"bandwidths": args.bandwidths, "aggregation": args.aggregation} if aggregated else {}),
            **({"moments": True} if args.moments else {}),
        )


def _columns_ride_along(args: argparse.Namespace) -> bool:
    """Whether the per-column tests and the joint permutation test run in one pass (no moments needed)."""
    wanted = args.columns or args.components is not None
    return wanted and not args.sketches and args.null == "permutation" and not args.moments


def _test_columns(args: argparse.Namespace, joint_map: Any = None) -> Any:
    """The per-column (or per-component) tests of ``--columns`` / ``--components``; with ``joint_map``
    the joint permutation test rides along in the same pass (``result.joint``)."""
    from ..twosample import marginal_tests  # here, not at the top: start-up time

    return marginal_tests(
        args.sources[0], args.sources[1], n_features=args.column_features, n_permutations=args.permutations,
        seed=0 if args.seed is None else args.seed, components=args.components, feature_map=joint_map,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    args.null = args.null or ("spectral" if args.sketches else "permutation")
    options.refuse(_usage_problems(args))
    options.check_plot_free(args)
    result = _test_sketches(args) if args.sketches else _test_data(args)
    columns = None
    if _columns_ride_along(args):
        columns, result = result, result.joint
    elif args.columns or args.components is not None:
        columns = _test_columns(args)
    if args.plot:
        from ..plot import save_report_figure  # here, not at the top: start-up time

        save_report_figure(args.plot, result=result, overwrite=args.overwrite)
    payload = result.to_dict(include_null=False)
    lines = _test_lines(result) + _effect_lines(result)
    if columns is not None:
        payload["columns"] = {key: value for key, value in columns.to_dict().items() if key != "joint"}
        lines += _column_lines(columns)
        names = getattr(args.sources[0], "columns", None) if args.sources else None
        if names and columns.kind == "columns":  # a parquet source: say which column each index is
            payload["columns"]["names"] = list(names)
            lines.append("  columns: " + ", ".join(f"{index} {name}" for index, name in enumerate(names)))
    if getattr(args, "skipped", None):
        payload["n_invalid"] = [rows.n_invalid for rows in args.skipped]
        lines.append(skipped_line("XY", args.skipped))
    emit(args, payload, lines + ([f"wrote {args.plot}"] if args.plot else []))
    return options.EXIT_OK
