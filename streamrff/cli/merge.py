"""The ``streamrff merge`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .output import emit_sketch
from .sketchfiles import load_checked_sketches

#: ``streamrff merge --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
merge sketches made with the same map

Merge two or more sketches of the same kind and feature map into one (the sketch of all their rows).

example: streamrff merge site-a.sketch site-b.sketch -o all.sketch
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "merge", HELP, run)
    parser.add_argument("sketches", nargs="+", metavar="SKETCH", help="sketch files or URLs")
    options.add_output(parser, "where to write the merged sketch")
    options.add_overwrite(parser)
    options.add_sign_key(parser, "sign the merged sketch with the key in FILE")
    parser.add_argument(
        "--require-signed", action="store_true", help="refuse any input not signed with the --sign-key key (exit 1)"
    )
    parser.add_argument(
        "--sign-unverified", action="store_true",
        help="sign the merge even of inputs not signed with the key (by default, signing verifies every input)",
    )  # fmt: skip
    options.add_common(parser)


def run(args: argparse.Namespace) -> int:
    from ..errors import SketchSignatureError
    from ..formats.sketch import check_writable
    from ..sketches.base import merge  # here, not at the top: start-up time

    options.check_output_free(args.output, args.storage_options, args.overwrite)
    check_writable(args.output, args.storage_options, args.overwrite)
    key = options.signing_key(args)
    if args.require_signed and key is None:
        raise options.UsageError("--require-signed needs the key: pass --sign-key FILE or set STREAMRFF_SIGNING_KEY.")
    if args.sign_unverified and (key is None or args.require_signed):
        raise options.UsageError(
            "--sign-unverified signs a merge of inputs not verified with the key: it needs the key (--sign-key FILE "
            "or STREAMRFF_SIGNING_KEY) and contradicts --require-signed; drop one."
        )
    # A signature vouches for the whole merge, so signing verifies every input with the same key.
    verify_key = None if args.sign_unverified else key
    try:
        sketches = load_checked_sketches(
            args.sketches, args.storage_options, same_moments=True, verify_key=verify_key, described=True
        )
    except SketchSignatureError as error:
        if args.require_signed:
            raise
        raise SketchSignatureError(
            f"{error} (A signed merge vouches for its inputs, so each must verify with the key; pass "
            "--sign-unverified to sign anyway, or merge without a key.)"
        ) from None
    merged = merge(*sketches)
    merged.save(args.output, storage_options=args.storage_options, overwrite=args.overwrite, signing_key=key)
    title = f"merged {len(sketches)} sketches ({merged.count:,} rows) into {args.output}"
    emit_sketch(args, args.output, merged, title, inputs=list(args.sketches), input_counts=[s.count for s in sketches])
    return options.EXIT_OK
