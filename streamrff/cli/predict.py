"""The ``streamrff predict`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .inputs import add_on_invalid, finite_rows, skipped_line
from .output import emit

#: ``streamrff predict --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
predict with a model file from 'streamrff ridge'; predictions written to zarr

Read a model file (kernel ridge regression or classification) and write the prediction of every row of
SOURCE to a zarr array, chunk by chunk on Dask (no chunk's features are ever held twice): shape (n,) or
(n, t) float64 targets, or (n,) class labels (text labels as zarr strings).

example: streamrff predict model.json new.zarr -o predictions.zarr
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "predict", HELP, run)
    parser.add_argument("model", metavar="MODEL", help="model file from 'streamrff ridge' (path or URL)")
    options.add_source(parser, "zarr array of rows (path or URL), as wide as the model's training rows")
    options.add_output(parser, "zarr array for the predictions")
    options.add_sign_key(parser, "verify the model file's signature with the key in FILE (refused if unsigned)")
    options.add_verify_key(parser, signs=True)
    add_on_invalid(parser, aligned=True)
    options.add_job_options(parser)


def run(args: argparse.Namespace) -> int:
    import numpy as np  # here, not at the top: start-up time

    from ..engine import write_zarr
    from ..ridge.modelfile import load_model

    model = load_model(args.model, storage_options=args.storage_options, verify_key=options.verify_key(args))
    options.check_output_free(args.output, args.storage_options, args.overwrite)
    with options.one_connection() as client:
        skipped = finite_rows(args.source, "SOURCE", client) if args.on_invalid == "skip" else None
    if skipped is None:
        predictions = model.predict(args.source, storage_options=args.storage_options)
    else:  # the finite rows' predictions, and a missing marker (NaN, -1, "") in each skipped row's
        _check_marker(model)
        predictions = skipped.restore(model.predict(skipped.clean, storage_options=args.storage_options))
    if predictions.dtype.kind == "U":  # zarr's stable text type is the variable-width string
        predictions = predictions.astype(np.dtypes.StringDType())
    write_zarr(predictions, args.output, storage_options=args.storage_options, client=args.scheduler,
               overwrite=args.overwrite)  # fmt: skip
    kind = "class labels" if hasattr(model, "classes_") else "predictions"
    payload = {
        "output": args.output,
        "model": args.model,
        "source": args.source,
        "kind": type(model).__name__,
        "shape": list(predictions.shape),
        "dtype": str(predictions.dtype),
    }
    lines = [f"wrote {kind} of {predictions.shape[0]:,} rows to {args.output}"]
    if skipped is not None:
        payload["n_invalid"] = skipped.n_invalid
        lines.append(skipped_line(["SOURCE"], [skipped]))
    emit(args, payload, lines)
    return options.EXIT_OK


def _check_marker(model: Any) -> None:
    """Refuse --on-invalid skip when the missing marker of a skipped row would read as one of the classes."""
    from .inputs import missing_marker

    classes = getattr(model, "classes_", None)
    if classes is not None and missing_marker(classes.dtype)[0] in list(classes):
        raise options.UsageError(
            f"--on-invalid skip marks a skipped row's label {missing_marker(classes.dtype)[0]!r}, which is one of the "
            "model's classes: it would read as a prediction. Clean the rows, or use --on-invalid raise."
        )
