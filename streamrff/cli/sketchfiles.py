"""Sketch files named on the command line (``merge``, ``test``, ``explain``, ``ridge``): load them, check them together.

Every problem of the inputs is reported at once (a file that does not load, a
sketch of the wrong kind or without the second moments the command needs, too
few rows, a different map): one error, one line per problem, exit code 1 (the
data are wrong, not the command line).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def load_checked_sketches(
    paths: Sequence[str],
    storage_options: dict[str, Any] | None,
    *,
    mean_with_moments_for: str | None = None,
    same_moments: bool = False,
    min_rows: int = 0,
    verify_key: bytes | None = None,
    described: bool = False,
) -> list[Any]:
    """Every sketch file of ``paths``, checked together; raise one error that lists every problem.

    ``mean_with_moments_for`` names what needs mean sketches with second moments
    (e.g. ``"--null spectral"``); ``same_moments`` asks that all or none hold
    them (merge); ``min_rows`` is the fewest rows a sketch may hold. Sketches
    of different kinds or maps are always refused; the fix named fits the cause
    (different input widths are different data, not a different map). With
    ``verify_key``, each sketch must be signed with it (:func:`streamrff.load`).
    ``described`` reads them for merging and saving only
    (:func:`streamrff.sketches.mean.load_described`: no scikit-learn import).

    Raises
    ------
    SketchMismatchError
        Listing every problem, one per line, when there are several (or the one problem).
    SketchFormatError, FileNotFoundError
        When the only problem is a file that does not load (its own error).
    """
    from ..errors import SketchMismatchError, StreamRFFError
    from ..sketches.base import load
    from ..sketches.mean import load_described  # here, not at the top: start-up time

    read = load_described if described else load

    problems: list[str] = []
    loaded: list[tuple[str, Any]] = []
    load_errors: list[BaseException] = []
    for path in paths:
        try:
            loaded.append((path, read(path, storage_options=storage_options, verify_key=verify_key)))
        except (StreamRFFError, FileNotFoundError) as error:
            if _unreachable(error):  # the environment, not this file: one line, as for any unreachable store
                raise
            load_errors.append(error)
            problems.append(str(error))
    problems += _file_problems(loaded, mean_with_moments_for, min_rows)
    problems += _pair_problems(loaded, same_moments)
    if len(problems) == 1 and load_errors:
        raise load_errors[0]
    if len(problems) == 1:
        raise SketchMismatchError(problems[0])
    if problems:
        raise SketchMismatchError(
            f"{len(problems)} problems with the input sketches:\n" + "\n".join(f"  - {line}" for line in problems)
        )
    return [sketch for _, sketch in loaded]


def _unreachable(error: BaseException) -> bool:
    """Whether a load failed because its store could not be reached (a connection error in its causes)."""
    while error is not None:
        if isinstance(error, (ConnectionError, TimeoutError)) or "Connection" in type(error).__name__:
            return True
        error = error.__cause__ or error.__context__
    return False


def _file_problems(loaded: Sequence[tuple[str, Any]], mean_with_moments_for: str | None, min_rows: int) -> list[str]:
    """What is wrong with each sketch on its own."""
    from ..sketches.mean import MeanSketch  # here, not at the top: start-up time

    problems = []
    for path, sketch in loaded:
        if mean_with_moments_for and not isinstance(sketch, MeanSketch):
            problems.append(
                f"{path} is a {sketch.kind!r} sketch; {mean_with_moments_for} needs mean sketches made with "
                "`streamrff sketch ... --moments`."
            )
        elif mean_with_moments_for and not sketch.has_moments:
            first_path, first = loaded[0]
            same_width = first.spec.get("n_features_in") == sketch.spec.get("n_features_in")
            keep_map = f"--map {first_path}" if first_path != path and same_width else "--map of the shared map file"
            problems.append(
                f"{path} was sketched without second moments, which {mean_with_moments_for} needs. Re-run "
                f"`streamrff sketch SOURCE --moments ...` for it (with {keep_map} to keep the map)."
            )
        if min_rows and sketch.count < min_rows:
            problems.append(
                f"{path} holds {sketch.count} row(s); the unbiased MMD^2 needs at least {min_rows} rows per sample."
            )
    return problems


def _pair_problems(loaded: Sequence[tuple[str, Any]], same_moments: bool) -> list[str]:
    """What is wrong between the first sketch and each other one: kind, map, second moments."""
    from ..sketches.base import describe_map_differences, input_width_advice  # here, not at the top: start-up time

    if not loaded:
        return []
    problems = []
    first_path, first = loaded[0]
    for path, other in loaded[1:]:
        if getattr(other, "kind", None) != first.kind:
            problems.append(f"{first_path} is a {first.kind!r} sketch but {path} is a {other.kind!r} sketch.")
            continue
        if other.fingerprint != first.fingerprint:
            advice = input_width_advice(first.spec, other.spec) or (
                f"Sketch every site with one map: re-run the other sites with "
                f"`streamrff sketch SOURCE --map {first_path} ...`, or fit one map on all sites with "
                "`streamrff map SOURCE [SOURCE ...] -o map.json` and sketch each with --map map.json."
            )
            problems.append(
                f"{first_path} and {path} were sketched with different maps: "
                f"{describe_map_differences(first.spec, other.spec)} (fingerprint {first.fingerprint[:16]} vs "
                f"{other.fingerprint[:16]}). {advice}"
            )
        if same_moments and getattr(other, "has_moments", None) != getattr(first, "has_moments", None):
            problems.append(
                f"{first_path} and {path} differ in second moments: sketch every part with --moments, or none."
            )
    return problems
