"""Sketch files named on the command line (``merge``, ``test --sketches``): load them, refuse different maps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def load_sketches(
    paths: Sequence[str], storage_options: dict[str, Any] | None, verify_key: bytes | None = None
) -> list[Any]:
    """Every sketch file of ``paths``, of any kind (each signed with ``verify_key``, if given)."""
    from .. import load  # here, not at the top: start-up time; the package's load knows every sketch kind

    return [load(path, storage_options=storage_options, verify_key=verify_key) for path in paths]


def same_map_or_explain(paths: Sequence[str], sketches: Sequence[Any]) -> None:
    """Refuse sketches of different maps with the differing parameters and the commands that fix it."""
    from ..errors import SketchMismatchError  # here, not at the top: start-up time
    from ..sketches import describe_map_differences

    first_path, first = paths[0], sketches[0]
    for path, other in zip(paths[1:], sketches[1:]):
        if other.fingerprint != first.fingerprint:
            raise SketchMismatchError(
                f"{first_path} and {path} were sketched with different maps: "
                f"{describe_map_differences(first.spec, other.spec)} (fingerprint {first.fingerprint[:16]} vs "
                f"{other.fingerprint[:16]}). Sketch every site with one map: re-run the other sites with "
                f"`streamrff sketch SOURCE --map {first_path} ...`, or fit one map on all sites with "
                "`streamrff map SOURCE [SOURCE ...] -o map.json` and sketch each with --map map.json."
            )
        if getattr(other, "kind", None) != first.kind:
            raise SketchMismatchError(f"{first_path} is a {first.kind!r} sketch but {path} is a {other.kind!r} sketch.")
