"""The body the ``kmeans`` and ``kpca`` commands share: fit on the source, write one value per row, report."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from . import options
from .inputs import add_on_invalid, finite_rows, skipped_line
from .output import emit

#: The options that choose the feature space of ``kmeans`` and ``kpca``; ``--map`` refuses them.
FEATURE_SPACE_OPTIONS = ["features", "bandwidth", "landmarks", "map_kind", "structured"]


def add_feature_space_options(parser: argparse.ArgumentParser, features_help: str, landmarks_help: str) -> None:
    """``--map``, ``--map-kind``, ``--features``, ``--landmarks``, ``--bandwidth`` and ``--structured`` of an
    estimator command."""
    options.add_map_file(parser, "--map-kind, --features, --landmarks, --bandwidth and --structured")
    options.add_map_kind(parser)
    options.add_features(parser, features_help)
    options.add_landmarks(parser, landmarks_help)
    options.add_bandwidth(parser)
    options.add_structured(parser, "structured orthogonal features (SORF), O(D log d) per row (rff; for wide rows)")
    options.add_verify_key(parser)  # a key set means --map must verify (docs/security.rst)
    add_on_invalid(parser, aligned=True)


def resolve_feature_space(args: argparse.Namespace) -> Any:
    """Refuse the feature-space options next to ``--map``, default ``--seed``; the map of ``--map``, the
    unfitted structured RFF of ``--structured`` (fitted on the source by :func:`fit_write_report`), or None."""
    options.resolve_map_options(args, ["seed"], FEATURE_SPACE_OPTIONS, "the map file sets the feature space")
    if not args.structured:
        return options.load_map_option(args)
    if (args.map_kind or "rff") != "rff":
        options.refuse([f"--structured applies to --map-kind rff only; drop it for {args.map_kind}."])
    options.resolve_map_options(args, ["features", "bandwidth", "variant", "seed"], [], "")
    return options.rff_of_options(args)


def open_output(path: str, storage_options: dict[str, Any] | None) -> Any:
    """The zarr array a command wrote, as a dask array (to report on it)."""
    import dask.array as da  # here, not at the top: start-up time

    if "://" in path and not path.startswith("file://"):
        return da.from_zarr(path, storage_options=storage_options)
    return da.from_zarr(path)


def fit_write_report(
    args: argparse.Namespace,
    model: Any,
    per_row: Callable[..., Any],
    report: Callable[[Any], tuple[dict[str, Any], list[str]]],
    **fit_options: Any,
) -> int:
    """Fit ``model`` on ``args.source``, write ``per_row(model, source)`` to ``args.output`` as zarr, report.

    Refuse an existing output unless ``--overwrite``; fit (an unfitted ``model.feature_map`` first,
    on the source's seeded row sample), compute and write on
    ``--scheduler`` (an embedded local scheduler by default); then call
    ``report(model)`` (which may also draw a figure of the output) and print
    its payload, with the output and the map spec added, under ``--json``,
    else its lines.
    """
    from ..engine import write_zarr  # here, not at the top: start-up time

    storage_options = args.storage_options
    options.check_output_free(args.output, storage_options, args.overwrite)
    with options.one_connection() as client:
        skipped = finite_rows(args.source, "SOURCE", client) if args.on_invalid == "skip" else None
        source = args.source if skipped is None else skipped.clean  # --on-invalid skip: fitted on the finite rows
        if model.feature_map is not None and not model.feature_map.is_fitted():  # --structured
            model.set_params(feature_map=options.fit_on_sources(model.feature_map, [source]))
        model.fit(source, **fit_options)
        values = per_row(model, source, storage_options=storage_options)
        if skipped is not None:  # a missing marker in each skipped row's output row: the output stays row-aligned
            values = skipped.restore(values)
        write_zarr(values, args.output, storage_options=storage_options, client=client, overwrite=args.overwrite)
    payload, lines = report(model)
    if skipped is not None:
        payload["n_invalid"] = skipped.n_invalid
        lines.append(skipped_line(["SOURCE"], [skipped]))
    emit(args, {"output": args.output, **payload, "map": model.feature_map_.spec}, lines)
    return options.EXIT_OK
