"""The ``streamrff info`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
from typing import Any

from . import options
from .output import emit, map_line, sketch_summary, summary_lines

#: ``streamrff info --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
describe a sketch file or a map file

Validate a sketch file and print its kind, row count, map and fingerprint (or, for a map file, its
map and fingerprint).

example: streamrff info all.sketch --json
"""


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "info", HELP, run)
    parser.add_argument("sketch", metavar="FILE", help="sketch file, map file, or URL")
    options.add_sign_key(parser, "verify the sketch's or map file's signature with the key in FILE")
    options.add_verify_key(parser, signs=True)
    options.add_common(parser)


def run(args: argparse.Namespace) -> int:
    from ..formats.map import _read_map_bytes, map_from_json
    from ..formats.sketch import is_signed
    from ..sketches.mean import load_described  # here, not at the top: start-up time

    key = options.verify_key(args)
    data = _read_map_bytes(args.sketch, args.storage_options)
    if data is not None:  # a map file: describe the map
        feature_map = map_from_json(data, args.sketch, key)
        payload = {"path": args.sketch, "kind": "map", "map": feature_map.spec, "fingerprint": feature_map.fingerprint}
        lines = [f"{args.sketch}: map file", map_line(feature_map.spec), f"  fingerprint: {feature_map.fingerprint}"]
        if key is not None:
            payload["signature"] = "verified"
            lines.append("  signature: verified")
        emit(args, payload, lines)
        return options.EXIT_OK
    sketch = load_described(args.sketch, storage_options=args.storage_options, verify_key=key)
    summary = sketch_summary(args.sketch, sketch)
    lines = summary_lines(summary)
    if key is not None or is_signed(args.sketch, args.storage_options):  # unsigned sketches: reported as before
        summary["signature"] = "verified" if key is not None else "not verified"
        lines.append(f"  signature: {summary['signature']}" + ("" if key else " (pass --sign-key FILE)"))
    emit(args, summary, lines)
    return options.EXIT_OK
