"""What a command reads: sketch files named by position, and rows that hold NaN or inf (``--on-invalid``).

Sketch inputs are positional in every command (``merge A B``, ``test A B``, ``explain A B --source S``,
``ridge A B ...``). Where a command also takes data sources by position (``test``, ``ridge``), each path's
kind is read from the file (:func:`streamrff.cli.options.existing_kind`): all sketch files are sketches,
none are data, and a mix is refused in one line. ``--sketches A B`` is the spelling of the previous
release, kept hidden for one release with a one-line deprecation warning.

``--on-invalid raise`` (the default) refuses a NaN/inf row in one line naming it; ``skip`` leaves such
rows out. A command whose output has one row per input row (``kmeans`` labels, ``kpca`` scores,
``predict``) fits on the finite rows and writes a missing marker in the skipped rows' output rows
(:func:`missing_marker`: NaN for floats, -1 for integer labels, "" for text), so outputs stay row-aligned.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .options import UsageError, existing_kind

#: What ``--on-invalid`` may be, on every command that reads rows.
ON_INVALID = ("raise", "skip")


def add_sketches_alias(parser: argparse.ArgumentParser, nargs: Any) -> None:
    """The hidden ``--sketches`` of the previous release (:func:`resolve_sketch_inputs` moves it)."""
    parser.add_argument("--sketches", dest="sketches_alias", nargs=nargs, default=None, help=argparse.SUPPRESS)


def add_on_invalid(parser: argparse.ArgumentParser, aligned: bool = False, job: bool = False) -> None:
    """``--on-invalid raise|skip``; ``aligned``: the output has a row per input row (the marker is said);
    ``job``: every job of the command takes it (:func:`streamrff.cli.options.job_options_of`)."""
    marked = (
        "; each skipped row's output row holds a missing marker (NaN, or -1 for labels), so the output stays "
        "aligned with the rows"
        if aligned
        else ""
    )
    parser.add_argument(
        "--on-invalid", choices=ON_INVALID, default="raise",
        help=f"NaN/inf rows: raise refuses, naming the row; skip leaves them out{marked}",
    )  # fmt: skip
    if job:
        parser.set_defaults(on_invalid_job=True)


def _kind_text(path: str, kind: str | None) -> str:
    return f"{path} is {'a sketch file' if kind == 'sketch' else 'data'}"


def resolve_sketch_inputs(args: argparse.Namespace) -> str | None:
    """Sort a command's positional inputs into ``args.sketches`` and its data; the deprecation warning, or None.

    Runs before the command (:func:`streamrff.cli.main`), for the commands whose parser sets
    ``sketch_inputs`` (the name of the positional argument). One :class:`UsageError` line for a mix of
    sketch files and data, or for both spellings at once.
    """
    dest = getattr(args, "sketch_inputs", None)
    if dest is None:
        return None
    given = getattr(args, dest)
    positional = [] if given is None else list(given) if isinstance(given, list) else [given]
    alias = getattr(args, "sketches_alias", None)
    if alias is not None:
        if positional and dest != "sketches":
            raise UsageError(
                f"give the sketch files by position ({' '.join(alias)}), not next to data sources; --sketches is "
                "deprecated."
            )
        if positional:
            raise UsageError("give the sketch files once, by position; --sketches is deprecated.")
        args.sketches = list(alias)
        return f"--sketches is deprecated and will be removed in the next release; give the files by position: " \
               f"streamrff {args.command} {' '.join(alias)} ..."  # fmt: skip
    kinds = [existing_kind(path, getattr(args, "storage_options", None)) for path in positional]
    if dest == "sketches":  # only sketches are positional (explain): a data path says where it belongs
        data = [path for path, kind in zip(positional, kinds) if kind not in (None, "sketch")]
        if data:
            raise UsageError(f"{data[0]} is no sketch file: give the two sketch files A B by position and the data "
                             "as --source.")  # fmt: skip
        args.sketches = positional
        return None
    sketches = [kind == "sketch" for kind in kinds]
    if any(sketches) and all(kind in (None, "sketch") for kind in kinds):  # a missing one: its load names it
        args.sketches, args.__dict__[dest] = positional, [] if isinstance(given, list) else None
        return None
    args.sketches = None
    if any(sketches):
        first = sketches.index(True)
        other = next(index for index, kind in enumerate(kinds) if kind not in (None, "sketch"))
        raise UsageError(
            f"{_kind_text(positional[first], 'sketch')} but {_kind_text(positional[other], kinds[other])}: give "
            "sketch files only, or data sources only."
        )
    return None


# Rows that hold NaN or inf.


class FiniteRows:
    """A source's finite rows: ``clean`` (a dask array of them, in order), ``keep`` (a bool per row) and
    ``chunks`` (the source's rows per chunk). A plain class: ``dataclasses`` costs ``--help`` 20 ms."""

    def __init__(self, clean: Any, keep: Any, chunks: tuple[int, ...]) -> None:
        self.clean, self.keep, self.chunks = clean, keep, chunks

    @property
    def n_invalid(self) -> int:
        return int(self.keep.size - self.keep.sum())

    def restore(self, values: Any) -> Any:
        """``values`` (one row per finite row, a dask array) with the missing marker put back at every skipped
        row: one row per source row, in the source's chunks."""
        import dask
        import dask.array as da
        import numpy as np

        if self.n_invalid == 0:
            return values
        marker, dtype = missing_marker(values.dtype)
        if values.shape[0] != int(self.keep.sum()):  # pragma: no cover - defensive: a command's own output
            raise ValueError(f"Internal error: {values.shape[0]} output rows for {int(self.keep.sum())} finite rows.")

        def put(block: Any, keep: Any) -> Any:
            out = np.full((keep.shape[0], *block.shape[1:]), marker, dtype=dtype)
            out[keep] = block
            return out

        pieces, done, start = [], 0, 0
        for size in self.chunks:
            keep = self.keep[start : start + size]
            kept = int(keep.sum())
            valid = values[done : done + kept]
            if kept == size:
                pieces.append(valid.astype(dtype))
            else:
                shape = (size, *values.shape[1:])
                pieces.append(da.from_delayed(dask.delayed(put)(valid, keep), shape=shape, dtype=dtype))
            done, start = done + kept, start + size
        return da.concatenate(pieces, axis=0).rechunk({0: self.chunks})  # the source's chunks: regular for zarr


def missing_marker(dtype: Any) -> tuple[Any, Any]:
    """The marker of a skipped row's output and the dtype that holds it: NaN (floats), -1 (integers), "" (text).

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.cli.inputs import missing_marker
    >>> missing_marker(np.dtype("float32")), missing_marker(np.dtype("uint8"))
    ((nan, dtype('float32')), (-1, dtype('int64')))
    """
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return float("nan"), dtype
    if dtype.kind == "i":
        return -1, dtype
    if dtype.kind in "ub":
        return -1, np.dtype("int64")
    return "", dtype


def finite_rows(source: Any, name: str, client: Any = None, paired: Any = None) -> FiniteRows:
    """Open ``source`` with the command's job options and find its finite rows (one pass over it).

    ``paired`` (a dask array with one row per row of ``source``, e.g. ridge's targets) must be finite
    in a kept row too.
    """
    import dask.array as da
    import numpy as np

    from ..engine import current_job_options, open_job_source  # here, not at the top: start-up time
    from ..errors import InputError

    opened = open_job_source(source, current_job_options(), name=name)
    array = opened.array
    finite = da.isfinite(array).all(axis=1) if array.ndim == 2 else da.isfinite(array)
    if paired is not None:
        finite = finite & (da.isfinite(paired).all(axis=1) if paired.ndim == 2 else da.isfinite(paired))
    keep = np.asarray(finite.compute() if client is None else client.compute(finite).result(), dtype=bool)
    if not keep.any():
        raise InputError(f"every row of {name} {source} holds NaN or inf: nothing is left with --on-invalid skip.")
    clean = array if keep.all() else array[keep]
    return FiniteRows(clean=clean, keep=keep, chunks=tuple(int(size) for size in array.chunks[0]))


def skipped_line(names: Sequence[str], found: Sequence[FiniteRows]) -> str:
    """The report line of the rows ``--on-invalid skip`` left out, e.g. ``skipped 3 rows of X holding NaN or inf``."""
    parts = [f"{rows.n_invalid:,} of {name}" for name, rows in zip(names, found)]
    return f"  skipped (--on-invalid skip): rows holding NaN or inf: {', '.join(parts)}"


#: The library's advice on a NaN/inf row, as each path words it; the CLI names its own option instead.
_LIBRARY_HINTS = (
    "Clean the data first: every row is needed here.",
    "Clean the data, or pass on_invalid='skip' (CLI: --on-invalid skip) to skip such rows.",
    "Drop or impute those rows, or pass on_invalid='skip' to streamrff.sketch to skip them.",
)


def invalid_row_hint(message: str, args: argparse.Namespace) -> str:
    """``message`` with the library's advice on a NaN/inf row replaced by this command's ``--on-invalid skip``.

    Examples
    --------
    >>> import argparse
    >>> from streamrff.cli.inputs import invalid_row_hint
    >>> invalid_row_hint("NaN or inf in row 3. Clean the data first: every row is needed here.",
    ...                  argparse.Namespace(on_invalid="raise"))
    'NaN or inf in row 3. Clean the data, or pass --on-invalid skip to leave such rows out.'
    """
    if getattr(args, "on_invalid", None) != "raise" or "NaN or inf" not in message:
        return message
    for hint in _LIBRARY_HINTS:
        message = message.replace(hint, "Clean the data, or pass --on-invalid skip to leave such rows out.")
    return message
