"""The ``streamrff ridge`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
import math
from typing import Any

from . import options
from .inputs import add_on_invalid, add_sketches_alias, finite_rows, skipped_line
from .output import emit, map_line, show_progress
from .sketchfiles import load_checked_sketches

_MAP_OPTIONS = ["features", "bandwidth", "seed"]

#: ``streamrff ridge --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
fit kernel ridge regression or classification; save the model file

Kernel ridge regression in random-feature space, from one pass over SOURCE and TARGET (zarr arrays of
the same rows), or from regression sketches of several sites (SKETCH ..., merged: the fit on all their
rows; sketch files are told from data by their content). alpha is chosen by generalized
cross-validation unless given. Prints alpha and the training R^2
(computed from the sketch's sums); with --classify, the training accuracy (a second, cheaper pass over
SOURCE). From sketches, classification prints the R^2 of the +-1 scores instead: the sketches hold
sums, not rows, so the accuracy needs the labels ('streamrff predict' at a site). The model file is the
map file plus the coefficients (JSON, no pickle): 'streamrff predict MODEL SOURCE -o out.zarr'.
For wide maps, --rank K solves on the top K eigen-directions of the feature covariance from a low-rank
sketch (D x 2K numbers instead of D x D; 'streamrff.KernelRidge(rank=K)'); sketch inputs may then also
be low-rank regression sketches.

example: streamrff ridge X.zarr --target y.zarr -o model.json --features 2048
         streamrff ridge X.zarr --target labels.zarr --classify -o model.json
         streamrff ridge site-a.sketch site-b.sketch -o model.json
         streamrff ridge a.sketch b.sketch --classify --classes 0,1,2 \\
         -o model.json
         streamrff ridge X.zarr --target y.zarr -o model.json \\
         --features 16384 --rank 512
"""


#: ``--alpha``: 'auto' or a positive number.
alpha_value = options.positive_number_or("auto")


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "ridge", HELP, run)
    parser.add_argument(
        "sources", nargs="*", metavar="SOURCE|SKETCH",
        help="a zarr array of rows (path or URL), with --target; or regression sketch files ('streamrff sketch "
        "--target') of one map, merged (told apart by their content)",
    )  # fmt: skip
    add_sketches_alias(parser, "+")
    parser.set_defaults(sketch_inputs="sources", source=None)
    options.add_target(
        parser, "with SOURCE: zarr array of targets, shape (n,) or (n, t), or of class labels with --classify"
    )
    options.add_output(parser, "where to write the model file (path or URL, e.g. model.json)")
    parser.add_argument(
        "--classify", action="store_true",
        help="classification: one vs rest on +-1 targets (like scikit-learn's RidgeClassifier)",
    )  # fmt: skip
    options.add_classes(
        parser,
        "with sketch inputs and --classify: the comma-separated classes the sites encoded their labels with "
        "('streamrff sketch --classes'), the same list",
    )
    parser.add_argument(
        "--alpha", type=alpha_value, default="auto",
        help="ridge penalty, or 'auto': chosen by generalized cross-validation from the sketch (default: auto)",
    )  # fmt: skip
    parser.add_argument(
        "--rank", type=options.positive_int, default=None,
        help="solve on the top K eigen-directions of a low-rank sketch (for wide maps; default: the full D x D "
        "system, or from low-rank sketch inputs half their sketch size)",
    )  # fmt: skip
    options.add_map_file(parser, "--features, --bandwidth and --seed, and with sketch inputs (they fix the map)")
    options.add_features(parser)
    options.add_bandwidth(parser)
    options.add_seed(parser, "seed of the map and of its row sample")
    options.add_sign_key(parser, "sign the model (HMAC-SHA256) with the key in FILE; inputs must verify with it")
    options.add_verify_key(parser, signs=True)
    add_on_invalid(parser)
    options.add_job_options(parser)


def _check_inputs(args: argparse.Namespace) -> None:
    """SOURCE with --target, or sketch files without map options: refuse every other combination (exit 2)."""
    if args.sketches is None and len(args.sources) != 1:
        raise options.UsageError(
            "Expected SOURCE --target TARGET, or SKETCH [SKETCH ...]. Got "
            + (f"{len(args.sources)} data sources." if args.sources else "neither.")
        )
    if args.sketches is None:
        args.source = args.sources[0]
    if args.sketches is not None:
        clash = options.given(args, ["target", "map", *_MAP_OPTIONS, "scheduler"])
        if args.on_invalid != "raise":
            clash.append("on_invalid")
        if clash:
            flags = ", ".join(options.flag(name) for name in clash)
            raise options.UsageError(
                f"sketch files fix the data and the map (the sketches hold both), so {flags} would be ignored. "
                f"Drop {flags}."
            )
        if args.classify and args.classes is None:
            raise options.UsageError(
                "--classify from sketch files needs --classes: the classes every site encoded its labels with "
                "('streamrff sketch --target LABELS --classes ...'), in the same list."
            )
    else:
        if args.target is None:
            raise options.UsageError("SOURCE needs --target TARGET: the targets (or labels) of its rows.")
        if args.classes is not None:
            raise options.UsageError(
                "--classes is for sketch inputs: with SOURCE the classes are read from the labels. Drop --classes."
            )
        options.resolve_map_options(args, _MAP_OPTIONS, _MAP_OPTIONS, "they define the map")
    if args.classes is not None and not args.classify:
        raise options.UsageError("--classes applies to --classify; add --classify, or drop --classes.")


def training_r2(sketch: Any, coef: Any) -> Any:
    """Per-target training R^2 of coefficients ``coef`` (D, t) from a regression sketch's sums alone.

    With centred moment ``C``, cross moment ``c`` and ``||y_c||^2`` (module
    notes of :mod:`streamrff.ridge.estimators`), the residual sum of squares of
    ``beta`` with its intercept is ``||y_c||^2 - 2 beta^T c + beta^T C beta``;
    R^2 is ``1 - RSS / ||y_c||^2`` (NaN for a constant target).
    """
    import numpy as np  # here, not at the top: start-up time

    n = sketch.count
    mean, target_mean = sketch.feature_sum / n, sketch.target_sum / n
    centred = sketch.moment - n * np.outer(mean, mean)
    cross = sketch.cross_moment - n * np.outer(mean, target_mean)
    total = np.diag(sketch.target_moment) - n * target_mean**2
    residual = total - 2.0 * np.sum(coef * cross, axis=0) + np.sum(coef * (centred @ coef), axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, 1.0 - residual / total, np.nan)


def _training_r2(sketch: Any, model: Any) -> Any:
    """Training R^2 per target from a full regression sketch's sums (:func:`training_r2`); for a low-rank
    sketch, pooled over targets from the residual sum of squares of :func:`streamrff.ridge_gcv` at the
    model's alpha and rank (that of the rank-k approximation of the moment, which is all the sketch holds)."""
    import numpy as np  # here, not at the top: start-up time

    from ..ridge.estimators import ridge_gcv

    if sketch.kind == "regression":
        return training_r2(sketch, np.atleast_2d(model.coef_).T)
    target_mean = sketch.target_sum / sketch.count
    total = float(np.sum(np.diag(sketch.target_moment) - sketch.count * target_mean**2))
    rss = float(ridge_gcv(sketch, [model.alpha_], rank=model.rank)["rss"][0])
    return np.array([1.0 - rss / total if total > 0 else np.nan])


def _finite_or_none(values: Any) -> list[float | None]:
    return [float(value) if math.isfinite(value) else None for value in values]


def _fit(args: argparse.Namespace) -> tuple[Any, dict[str, Any], list[str]]:
    """The fitted model, and what to report of its training data."""
    import numpy as np  # here, not at the top: start-up time

    from ..maps import RFF
    from ..ridge import KernelRidge, KernelRidgeClassifier
    from ..sketches import merge

    estimator = KernelRidgeClassifier if args.classify else KernelRidge
    if args.sketches is not None:
        sketches = load_checked_sketches(  # one kind and one map, or refused; verified when a key is set
            args.sketches, args.storage_options, verify_key=options.verify_key(args)
        )
        for path, part in zip(args.sketches, sketches):
            if part.kind not in ("regression", "nystrom-regression"):
                from ..errors import InputError

                raise InputError(
                    f"{path} is a {part.kind!r} sketch; ridge needs regression sketches. Sketch each site with "
                    "`streamrff sketch SOURCE --target TARGET --map MAP -o SITE.sketch`."
                )
        merged = merge(*sketches)
        if args.classify:
            from ..errors import InputError
            from .labels import classes_of

            raw = merged.with_target_shift(0.0)  # the sums of y itself, not of y less the sketch's shift
            if not np.array_equal(np.diag(raw.target_moment), np.full(merged.n_targets, float(merged.count))):
                raise InputError(
                    "The sketches' targets are not +-1 class encodings (every y^2 would be 1). Sketch each site "
                    "with `streamrff sketch SOURCE --target LABELS --classes ...`."
                )
            model = estimator(alpha=args.alpha, rank=args.rank).fit_from_sketch(
                merged, classes=classes_of(args.classes)
            )
        else:
            model = estimator(alpha=args.alpha, rank=args.rank).fit_from_sketch(merged)
        r2 = _training_r2(merged, model)
        data = {"sketches": list(args.sketches), "training_r2": _finite_or_none(r2)}
        what = (" of the +-1 scores" if args.classify else "") + _rank_text(model)
        lines = [f"  training R^2{what} (from the sketches' sums): {_r2_text(r2)}"]
        if args.classify:
            lines.append(
                "  training accuracy: not computable from sketches (they hold sums, not rows); run "
                f"`streamrff predict {args.output} SOURCE -o labels.zarr` at a site and compare with its labels"
            )
        return model, data, lines

    feature_map = options.load_map_option(args)
    if feature_map is None:
        map_options = {"n_features": args.features, "bandwidth": args.bandwidth, "seed": args.seed}
    else:
        map_options = {"feature_map": feature_map}
    with options.one_connection() as client:
        job = {"progress": show_progress(args)}
        source, target, skipped = _finite_data(args, client)
        if args.classify:
            from .labels import open_labels

            model = estimator(alpha=args.alpha, rank=args.rank, **map_options)
            model.fit(source, target, **job)
            predicted = model.predict(source, storage_options=args.storage_options)
            labels = open_labels(args.target, args.storage_options)
            labels = (labels if skipped is None else labels[skipped.keep]).rechunk((predicted.chunks[0],))
            correct = (predicted == labels).sum()
            accuracy = int(correct.compute() if client is None else client.compute(correct).result()) / model.n_samples_
            data = {"source": args.source, "target": args.target, "training_accuracy": accuracy}
            lines = [f"  training accuracy: {accuracy:.4f} (a second pass over {args.source})"]
            return model, {**data, **_skipped_data(skipped)}, lines + _skipped_lines(skipped)
        # The sketch is kept for the training R^2: KernelRidge.fit's own pass (map, target, rank, engine).
        if feature_map is None:
            feature_map = RFF(**map_options)  # KernelRidge's default map
        sketcher = estimator(rank=args.rank, feature_map=feature_map, seed=feature_map.get_params().get("seed", 0))
        regression = sketcher._sketch(source, target, job)
    model = estimator(alpha=args.alpha, rank=args.rank).fit_from_sketch(regression)
    r2 = _training_r2(regression, model)
    data = {"source": args.source, "target": args.target, "training_r2": _finite_or_none(r2), **_skipped_data(skipped)}
    lines = [f"  training R^2{_rank_text(model)} (from the sketch's sums): {_r2_text(r2)}"]
    return model, data, lines + _skipped_lines(skipped)


def _finite_data(args: argparse.Namespace, client: Any) -> tuple[Any, Any, Any]:
    """SOURCE and TARGET as given, or with --on-invalid skip their rows where both are finite (and those rows)."""
    if args.on_invalid != "skip":
        return args.source, args.target, None
    import dask.array as da  # here, not at the top: start-up time

    from ..engine import current_job_options, open_job_source
    from ..errors import InputError
    from ..sources.rows import open_zarr_array

    target = da.from_zarr(open_zarr_array(args.target, args.storage_options))
    rows = open_job_source(args.source, current_job_options(), name="SOURCE").array.shape[0]
    if target.shape[0] != rows:
        raise InputError(
            f"--target {args.target} has {target.shape[0]:,} rows but SOURCE {args.source} has {rows:,}: "
            "give one target row per row of SOURCE."
        )
    kept = finite_rows(args.source, "SOURCE or --target", client, paired=target)  # a NaN target: the row goes too
    return kept.clean, target if kept.n_invalid == 0 else target[kept.keep], kept


def _skipped_data(skipped: Any) -> dict[str, Any]:
    return {} if skipped is None else {"n_invalid": skipped.n_invalid}


def _skipped_lines(skipped: Any) -> list[str]:
    return [] if skipped is None else [skipped_line(["SOURCE or --target"], [skipped])]


def _rank_text(model: Any) -> str:
    return "" if model.rank is None else f" (rank {model.rank}, pooled over targets)"


def _r2_text(r2: Any) -> str:
    import numpy as np  # here, not at the top: start-up time

    mean = float(np.nanmean(r2)) if np.isfinite(r2).any() else math.nan
    if len(r2) == 1:
        return f"{mean:.4f}"
    return f"{mean:.4f} (mean over {len(r2)} targets: " + ", ".join(f"{value:.4f}" for value in r2) + ")"


def run(args: argparse.Namespace) -> int:
    import numpy as np  # here, not at the top: start-up time

    from ..ridge.modelfile import save_model

    _check_inputs(args)
    options.check_output_free(args.output, args.storage_options, args.overwrite)
    key = options.signing_key(args)  # before the fit: a bad key costs no pass over the data
    model, data, lines = _fit(args)
    save_model(model, args.output, storage_options=args.storage_options, overwrite=args.overwrite, signing_key=key)
    gcv = model.gcv_
    chosen = "given" if args.alpha != "auto" else f"chosen by generalized cross-validation over {len(gcv['alphas'])}"
    kind = "classifier" if args.classify else "regression"
    n_targets = int(np.atleast_2d(model.coef_).shape[0])
    payload = {
        "output": args.output,
        "kind": "kernel_ridge_classifier" if args.classify else "kernel_ridge",
        "alpha": model.alpha_,
        "n_samples": model.n_samples_,
        "n_targets": n_targets,
        **({"classes": model.classes_.tolist()} if args.classify else {}),
        **data,
        "gcv": {"alphas": gcv["alphas"].tolist(), "scores": _finite_or_none(gcv["scores"]), "df": gcv["df"].tolist()},
        "map": model.feature_map_.spec,
        "fingerprint": model.feature_map_.fingerprint,
    }
    header = [
        f"wrote {args.output} (kernel ridge {kind}, {model.n_samples_:,} rows, {n_targets} target column(s))",
        f"  alpha: {model.alpha_:.6g} ({chosen}{' alphas' if args.alpha == 'auto' else ''})",
    ]
    footer = [
        map_line(model.feature_map_.spec),
        f"  predict: streamrff predict {args.output} SOURCE -o predictions.zarr",
    ]
    emit(args, payload, header + lines + footer)
    return options.EXIT_OK
