"""The ``streamrff`` command line: parses arguments and calls the library.

Exit codes (the table in docs/cli.rst): 0 success; 1 the data or the
environment is wrong (unreadable files, mismatched sketches, unreachable
scheduler or bucket); 2 the command line is wrong (bad option values,
contradicting options, an existing output without ``--overwrite``, a checkpoint
folder of another source). Every problem of the command line, or of the input
files, is reported at once.

One module per command (``map``, ``sketch``, ``merge``, ``info``, ``test``, ``explain``,
``kmeans``, ``kpca``, ``ridge``, ``predict``, ``watch``, ``store``, ``demo``: its options, its help
and what it runs); the options several commands share are declared and checked once, in
:mod:`streamrff.cli.options`, which also builds the job options every job of a command takes
(``--scheduler``, ``--storage-options``, ``--allow-missing-chunks``, ``--max-tasks``:
:func:`~streamrff.cli.options.job_options_of`); what commands print is in
:mod:`streamrff.cli.output`; how faults end in one line (store deadlines, stop signals, a state that
cannot be saved) is in :mod:`streamrff.cli.faults`. Commands call the public API; ``watch``, a service, also holds its
state's lock and publishes its state files with the safe-file helpers (:mod:`streamrff._files`).

Only the standard library is imported at module level, here and in every
module of the package: ``streamrff --help`` must not pay for numpy, numba,
dask and zarr. Each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from .faults import (
    StopRequested,
    entry_gate,
    first_contact,
    install_store_deadlines,
    quiet_unclosed_sessions,
    with_store_deadlines,
)
from .options import (
    EXISTS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    HelpFormatter,
    UsageError,
    check_inputs_kept,
    job_options_of,
    parse_storage_options,
    resolve_deprecated_alias,
)
from .output import sketch_summary as sketch_summary  # streamrff.cli.sketch_summary, as before the split

__all__ = ["main", "build_parser"]

#: The commands in the order ``streamrff --help`` lists them; each is the module of that name.
COMMANDS = (
    "map", "sketch", "merge", "info", "test", "explain", "kmeans", "kpca", "ridge", "predict", "watch", "store", "demo",
)  # fmt: skip


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("streamrff")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every long option and command name of a parser and of its subcommands' parsers (not the hidden aliases)."""
    found = [
        option
        for option, action in parser._option_string_actions.items()
        if option.startswith("--") and action.help != argparse.SUPPRESS
    ]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.extend(action.choices)
            for subparser in action.choices.values():
                found.extend(_option_strings(subparser))
    return found


def _command_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``argv`` names (``store append`` -> its parser), else ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for position, word in enumerate(argv):
                if word in action.choices:
                    return _command_parser(action.choices[word], argv[position + 1 :])
    return parser


def did_you_mean(message: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> str:
    """A "did you mean" line for the mistyped option or command an argparse error message names, or "".

    With the command line ``argv``, an option is matched against those of the (sub)command it names only.

    Examples
    --------
    >>> from streamrff.cli import build_parser, did_you_mean
    >>> did_you_mean("unrecognized arguments: --feature 64", build_parser())
    'did you mean --features?'
    >>> did_you_mean("argument COMMAND: invalid choice: 'skecth' (choose from ...)", build_parser())
    'did you mean sketch?'
    >>> did_you_mean("unrecognized arguments: --on-invalidd", build_parser(), ["store", "append", "--on-invalidd"])
    'did you mean --on-invalid?'
    >>> did_you_mean("unrecognized arguments: --on-invalidd", build_parser(), ["info", "--on-invalidd"])
    ''
    """
    import difflib
    import re

    options = re.findall(r"(?<![\w-])(--[\w-]+)", message.split(":", 1)[-1])  # not "-separated", "1e-30"
    words = re.findall(r"invalid choice: '([^']+)'", message) or options
    known = sorted(set(_option_strings(parser if argv is None else _command_parser(parser, argv))))
    for word in words:
        match = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.6)
        if match:
            return f"did you mean {match[0]}?"
    return ""


class Parser(argparse.ArgumentParser):
    """The CLI's argument parser: no abbreviated options, and a "did you mean" line on a typo.

    Every subcommand's parser is one too (argparse makes subparsers of the parser's own class).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # noqa: D102 - argparse's
        self._argv = list(sys.argv[1:] if args is None else args)  # for error(): the command it names
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:  # noqa: D102 - argparse's
        hint = did_you_mean(message, self, getattr(self, "_argv", None))
        if hint:
            message = f"{message}\n{self.prog}: {hint}"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``streamrff`` command.

    Examples
    --------
    >>> from streamrff.cli import build_parser
    >>> args = build_parser().parse_args(["sketch", "data.zarr", "-o", "data.sketch", "--features", "512"])
    >>> args.command, args.features, args.bandwidth, args.output
    ('sketch', 512, None, 'data.sketch')
    >>> try:
    ...     build_parser().parse_args(["sketch", "data.zarr", "-o", "d.sketch", "--features", "-1"])
    ... except SystemExit as exit:  # argparse refuses it (usage error, exit 2)
    ...     print(exit.code)
    2
    """
    parser = Parser(
        prog="streamrff",
        description="Sketch out-of-core data in kernel space on Dask, merge sketches, inspect them.",
        epilog="Sites share one map: 'streamrff map A.zarr B.zarr -o map.json', then "
        "'streamrff sketch A.zarr --map map.json -o a.sketch' at each site, 'streamrff merge' / "
        "'streamrff test a.sketch b.sketch'.\n"
        "Run 'streamrff COMMAND --help' for each command's options and an example.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version="%(prog)s " + _version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(commands)
    return parser


@contextlib.contextmanager
def _one_line_warnings(command: str) -> Iterator[None]:
    """Show streamrff's warnings (e.g. a sketch file without an attributes digest) as one line each."""
    import warnings

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        print(f"streamrff {command}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _object_urls(args: argparse.Namespace) -> list[str]:
    """The arguments of the command line that are ``s3://`` URLs (alone or in a list)."""
    values = [item for value in vars(args).values() for item in (value if isinstance(value, list) else [value])]
    return [value for value in values if isinstance(value, str) and value.startswith(("s3://", "s3a://"))]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Examples
    --------
    Sketch an in-memory array, save it, and describe the file as the CLI does:

    >>> import contextlib, io, json, os, tempfile, numpy as np, streamrff as srf
    >>> from streamrff.cli import main
    >>> X = np.random.default_rng(0).normal(size=(40, 3)).astype("float32")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "x.sketch")
    ...     srf.sketch_array(X, srf.RFF(n_features=32, bandwidth=1.0)).save(path)
    ...     output = io.StringIO()
    ...     with contextlib.redirect_stdout(output):
    ...         status = main(["info", path, "--json"])
    >>> status, json.loads(output.getvalue())["count"]
    (0, 40)

    Errors return exit status 1 with a one-line message on stderr:

    >>> with contextlib.redirect_stderr(io.StringIO()) as errors:
    ...     status = main(["info", os.path.join(folder, "missing.sketch")])
    >>> status, errors.getvalue().startswith("streamrff info: error: No map file at")
    (1, True)
    """
    gate = entry_gate()  # first of all (or as the command's process imported the CLI): a signal is recorded
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except BaseException:  # --help, --version, a usage error: the handlers as they were
        gate.__exit__()
        raise
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    handler: Callable[[argparse.Namespace], int] = args.handler
    stops = getattr(args, "stopped_during_start_up", None)  # a service (watch): a signal stops it cleanly from here
    from ..errors import CheckpointMismatchError, StreamRFFError  # here, not at the top: start-up time (sklearn)

    try:
        with contextlib.ExitStack() as held, _one_line_warnings(args.command):
            if stops:
                args.signal_gate = gate
                held.callback(gate.__exit__)
                gate.raising = True  # start-up: a signal raises StopRequested at once, one already recorded here
                if gate.number is not None:
                    raise StopRequested(gate.number)
            else:
                gate.hand_back()  # not a service: a signal meets the handlers it would have met
            deprecation = resolve_deprecated_alias(args)
            if deprecation:
                print(f"streamrff {args.command}: warning: {deprecation}", file=sys.stderr)
            if hasattr(args, "storage_options"):  # the JSON text (or @FILE) becomes a dict before the command runs
                urls = _object_urls(args)
                install_store_deadlines(bool(urls))  # every store request has a deadline
                quiet_unclosed_sessions()
                given = parse_storage_options(args.storage_options)
                first_contact(urls, given)  # a silent endpoint: one line within one deadline, before any work
                args.storage_options = with_store_deadlines(given)
            from .inputs import resolve_sketch_inputs

            deprecation = resolve_sketch_inputs(args)  # sketch files and data sources told apart by their kind
            if deprecation:
                print(f"streamrff {args.command}: warning: {deprecation}", file=sys.stderr)
            check_inputs_kept(args)  # before anything is read: no output destroys an input
            job = job_options_of(args)
            if job:  # a command that runs jobs: every job and source of it takes the command line's options
                from ..engine.options import job_options  # here, not at the top: start-up time

                with job_options(**job):
                    return handler(args)
            return handler(args)
    except UsageError as error:
        parser.exit(EXIT_USAGE, f"streamrff {args.command}: error: {error}\n")
    except FileExistsError as error:  # an output that appeared after the first check
        path = error.filename or str(error).split(" already exists")[0]
        parser.exit(EXIT_USAGE, f"streamrff {args.command}: error: {EXISTS.format(path=path)}\n")
    except CheckpointMismatchError as error:  # a --checkpoint folder of another source: the command line is wrong
        parser.exit(EXIT_USAGE, f"streamrff {args.command}: error: {error}\n")
    except (StreamRFFError, FileNotFoundError) as error:
        from .inputs import invalid_row_hint

        print(f"streamrff {args.command}: error: {invalid_row_hint(str(error), args)}", file=sys.stderr)
        return EXIT_FAILED
    except StopRequested as stop:  # before the service's state was touched: its summary, and the status it documents
        return stops(args, stop)
    except KeyboardInterrupt:
        print(f"streamrff {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `streamrff info X | head`: the reader left; quiet, as a Unix tool (128 + SIGPIPE)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141
    return EXIT_OK  # pragma: no cover
