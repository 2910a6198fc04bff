"""The ``streamrff map`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .output import emit, map_line, show_progress

#: ``streamrff map --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
fit one feature map on one or more sources and save it as a map file

Fit a feature map once, so that every site sketches with it. With several sources, the median
bandwidth (and K-JL landmarks) come from ONE seeded row sample pooled across all of them, so no site
is favoured. Writes a JSON map file (spec, fingerprint, K-JL landmarks; no pickle).

example: streamrff map site_a.zarr site_b.zarr -o map.json --features 1024
         streamrff sketch site_a.zarr --map map.json -o site_a.sketch
         streamrff map events/ -o map.json --select age,income,city,zip \\
         --categorical zip
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "map", HELP, run)
    options.add_source(
        parser,
        "zarr arrays or parquet sources (file, folder of parquet files, s3:// dataset) of the same width",
        nargs="+",
    )
    options.add_output(parser, "where to write the map file (path or URL, e.g. map.json)")
    options.add_map_kind(parser)
    options.add_features(
        parser,
        "output width: random features D for rff, components for kjl "
        "(default: 1024 for rff, min(landmarks, 100) for kjl)",
    )
    options.add_bandwidth(parser)
    options.add_variant(parser)
    options.add_orthogonal(parser, "orthogonal random features (rff)")
    options.add_structured(parser, "structured orthogonal features, O(D log d) per row (rff; for wide rows)")
    options.add_landmarks(parser, "K-JL landmarks n (kjl; default: 1000)")
    options.add_seed(parser, "seed of the map and of the pooled row sample")
    options.add_sign_key(parser, "sign the map file with the key in FILE (HMAC-SHA256)")
    options.add_table_options(parser)
    options.add_job_options(parser)


def _unfitted_map(args: argparse.Namespace) -> Any:
    """The map of ``--map-kind`` and its options, refusing the options of the other kind."""
    from ..maps import KJL  # here, not at the top: start-up time

    map_kind = args.map_kind or "rff"
    problems = options.landmark_problems(args, map_kind)
    clash = options.given(args, ["variant", "orthogonal", "structured"]) if map_kind == "kjl" else []
    if clash:
        flags = " and ".join(options.flag(name) for name in clash)
        verb, pronoun = ("apply", "them") if len(clash) > 1 else ("applies", "it")
        problems.append(f"{flags} only {verb} to --map-kind rff; drop {pronoun} for kjl.")
    options.refuse(problems)
    if map_kind == "kjl":
        options.resolve_map_options(args, ["bandwidth", "seed"], [], "")
        return KJL(
            n_landmarks=args.landmarks or 1000, n_components=args.features, bandwidth=args.bandwidth, seed=args.seed
        )
    options.resolve_map_options(args, ["features", "bandwidth", "variant", "orthogonal", "structured", "seed"], [], "")
    return options.rff_of_options(args)


def run(args: argparse.Namespace) -> int:
    from ..engine import fit_map  # here, not at the top: start-up time
    from ..formats.map import save_map

    feature_map = _unfitted_map(args)
    options.check_output_free(args.output, args.storage_options, args.overwrite)
    key = options.signing_key(args)  # before the fit: a bad key costs no pass over the data
    sources = options.open_tables(args, list(args.sources))
    fitted = fit_map(feature_map, sources, progress=show_progress(args))
    save_map(fitted, args.output, storage_options=args.storage_options, overwrite=args.overwrite, signing_key=key)
    payload = {
        "path": args.output,
        "map": fitted.spec,
        "fingerprint": fitted.fingerprint,
        "sources": list(args.sources),
    }
    pooled = (
        f"one seeded sample pooled across {len(args.sources)} sources" if len(args.sources) > 1 else "a seeded sample"
    )
    lines = [f"wrote {args.output}", map_line(fitted.spec)]
    if getattr(feature_map, "bandwidth", None) == "median":
        lines.append(f"  bandwidth {fitted.bandwidth_:.6g}: median pairwise distance of {pooled}")
    lines += [
        f"  fingerprint: {fitted.fingerprint}",
        f"  use it at every site: streamrff sketch SOURCE --map {args.output} -o SITE.sketch",
    ]
    emit(args, payload, lines)
    return options.EXIT_OK
