"""The options the commands share: each is declared, documented and checked here, once.

A command module calls the ``add_*`` functions in the order its ``--help``
lists the options; where commands word an option differently (what ``--seed``
seeds, what ``--output`` holds) the command passes its own help text, while the
name, the type and the check stay here. Options that define a feature map are
parsed with default None, so that a command can tell "given" from "not given"
(and refuse it next to ``--map``); :func:`resolve_map_options` fills in
:data:`MAP_DEFAULTS`.

Only the standard library is imported at module level (``streamrff --help``
must stay fast); the checks that need streamrff import it when they run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import stat
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: Defaults of the options that define a map (see the module docstring).
MAP_DEFAULTS: dict[str, Any] = {
    "features": 1024,
    "bandwidth": "median",
    "variant": "sincos",
    "orthogonal": False,
    "structured": False,
    "seed": 0,
}

EXISTS = "{path} already exists. Pass --overwrite to replace it, or choose another output."

_STORAGE_HELP = (
    "fsspec options for s3:// and other URLs: a JSON object, or @FILE to read it from a file (keeps "
    "secrets out of the process list). Default: the standard environment (AWS_ACCESS_KEY_ID, "
    "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_PROFILE, ~/.aws, fsspec config such as FSSPEC_S3='{...}')"
)
_SHORT_BANDWIDTH_HELP = "Gaussian kernel width sigma, or 'median' (default: median)"


class UsageError(Exception):
    """A command-line argument is wrong (exit code 2)."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows '(default: X)' once, only for real defaults (not None/False, not when the help already says it);
    wraps descriptions and epilogs line by line, and never a command line: a line that starts with
    ``streamrff`` (after a label such as ``example:``) and the continuations of a line ending in a
    backslash are printed as written (each fits in 80 columns), so a command copied from the help runs."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines, continued = [], False
        for line in text.splitlines():
            if continued or re.match(r"\s*([a-z ]+: )?streamrff ", line):  # a command, maybe after a label
                lines.append(indent + line)
            else:  # prose, a table row under its own indent, or a "label: text" row; never broken at a hyphen
                lead = line[: len(line) - len(line.lstrip())]
                label = re.match(r"[a-z ]+: ", line)
                hanging = " " * label.end() if label else lead + "  " if lead else ""
                lines.append(textwrap.fill(" ".join(line.split()), width, initial_indent=indent + lead,
                                           subsequent_indent=indent + hanging, break_on_hyphens=False))  # fmt: skip
            continued = line.endswith("\\")
        return "\n".join(lines)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


# Value types: argparse turns their ArgumentTypeError into a usage error (exit 2) naming the option.
# Text that is not a number becomes a value the range check refuses, so both give one message.


def positive_number_or(word: str) -> Callable[[str], float | str]:
    """An argparse type: ``word`` as it is, or a positive finite number (anything else: one message)."""

    def parse(text: str) -> float | str:
        if text == word:
            return text
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number or {word!r}, got {text!r}")
        return value

    parse.__name__ = f"positive number or {word!r}"
    return parse


#: Bandwidths a map resolves: its float32 frequencies ``N(0, 1) / bandwidth`` neither overflow nor vanish beyond
#: these (``--bandwidth 1e308`` made every feature 1, silently: no sketch, test or alarm could see anything).
BANDWIDTH_RANGE = (1e-30, 1e30)


def _bandwidth_of(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    low, high = BANDWIDTH_RANGE
    return value if low <= value <= high else None  # NaN and inf fail the comparison too


def bandwidth(text: str) -> float | str:
    """``--bandwidth``: 'median' or a number from 1e-30 to 1e30 (:data:`BANDWIDTH_RANGE`)."""
    value = text if text == "median" else _bandwidth_of(text)
    if value is None:
        raise argparse.ArgumentTypeError(
            f"expected a positive number or 'median' (numbers from 1e-30 to 1e+30), got {text!r}"
        )
    return value


def column_bandwidth(text: str) -> float:
    """``--column-bandwidth``: a number from 1e-30 to 1e30 (:data:`BANDWIDTH_RANGE`)."""
    value = _bandwidth_of(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a positive number from 1e-30 to 1e+30, got {text!r}")
    return value


def bandwidth_list(text: str) -> str | list[float]:
    """``--bandwidths``: 'auto' or comma-separated positive numbers."""
    if text == "auto":
        return text
    values = []
    for part in text.split(","):
        value = _bandwidth_of(part)
        if value is None:
            raise argparse.ArgumentTypeError(
                f"expected 'auto' or comma-separated positive numbers like 0.1,0.3,1 (from 1e-30 to 1e+30), got "
                f"{text!r}"
            )
        values.append(value)
    return values


def number_parser(kind: Callable[[str], Any], accept: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse ``type=``: ``kind(text)`` when ``accept`` takes it, else "expected EXPECTED, got 'TEXT'"."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


#: The largest count an option takes (2^62): larger ones overflow int64 arithmetic in numpy and dask.
MAX_COUNT = 2**62
positive_int = number_parser(int, lambda value: 1 <= value <= MAX_COUNT, "a positive integer up to 2^62")
#: ``--seed``: what :func:`numpy.random.default_rng` and the keyed hashes take.
seed_int = number_parser(int, lambda value: 0 <= value < 2**63, "an integer from 0 to 2^63 - 1")
#: The largest number of seconds a time option takes (115 days): larger ones overflow the sleeps and clocks.
MAX_SECONDS = 1e7
non_negative_float = number_parser(
    float, lambda value: math.isfinite(value) and 0 <= value <= MAX_SECONDS, f"a number from 0 to {MAX_SECONDS:g}"
)


def class_list(text: str) -> list[str]:
    """``--classes``: at least 2 distinct comma-separated labels (typed by :func:`streamrff.cli.labels.classes_of`)."""
    labels = [label.strip() for label in text.split(",")]
    if len(labels) < 2 or "" in labels or len(set(labels)) != len(labels):
        raise argparse.ArgumentTypeError(
            f"expected at least 2 distinct comma-separated class labels like 0,1,2 or cat,dog, got {text!r}"
        )
    return labels


def column_list(text: str) -> list[str]:
    """``--select`` / ``--categorical``: distinct comma-separated column names."""
    names = [name.strip() for name in text.split(",")]
    if "" in names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected distinct comma-separated column names like age,city, got {text!r}")
    return names


# Declaring options.


def add_command(
    commands: Any, name: str, help_page: str, run: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """The sub-command ``streamrff name``, run by ``run``, with the help of ``help_page``.

    ``help_page`` holds three paragraphs: the line ``streamrff --help`` shows for
    the command, the description (one paragraph, re-wrapped to the terminal),
    and the example (its lines kept as they are).
    """
    summary, description, example = help_page.strip("\n").split("\n\n")
    parser = commands.add_parser(
        name,
        help=summary,
        description=" ".join(description.split()),
        epilog=example,
        formatter_class=HelpFormatter,
    )
    parser.set_defaults(handler=run)
    return parser


def add_source(parser: argparse.ArgumentParser, help: str = "zarr array path or URL", nargs: str | None = None) -> None:
    """The data: ``source`` (one array), or ``sources`` (``SOURCE ...``) when ``nargs`` is given."""
    if nargs is None:
        parser.add_argument("source", help=help)
    else:
        parser.add_argument("sources", nargs=nargs, metavar="SOURCE", help=help)


def add_output(parser: argparse.ArgumentParser, help: str) -> None:
    """``-o/--output``: required; refused when it exists unless ``--overwrite`` (:func:`check_output_free`)."""
    parser.add_argument("-o", "--output", required=True, help=help)


def add_overwrite(
    parser: argparse.ArgumentParser, help: str = "replace an existing output (otherwise refused, exit 2)"
) -> None:
    parser.add_argument("--overwrite", action="store_true", help=help)


def add_sign_key(parser: argparse.ArgumentParser, purpose: str) -> None:
    """``--sign-key FILE`` (docs/security.rst): a key file or the environment, never the key on the command line."""
    parser.add_argument("--sign-key", metavar="FILE", default=None, help=f"{purpose} (default: $STREAMRFF_SIGNING_KEY)")
    parser.add_argument(
        "--allow-readable-key", action="store_true",
        help="accept a key file that group or others can read (refused otherwise, as ssh does; chmod 600 it)",
    )  # fmt: skip


def add_verify_key(parser: argparse.ArgumentParser, signs: bool = False) -> None:
    """``--sign-key FILE`` to verify inputs and ``--allow-unsigned`` (docs/security.rst: a key means reads verify)."""
    if not signs:
        add_sign_key(parser, "verify the signature of every sketch, map, model, state or store read, with FILE")
    parser.add_argument(
        "--allow-unsigned", action="store_true",
        help="with a key set, accept inputs (sketches, map and model files, monitor states, store records) not "
        "signed with it (by default they are refused, exit 1)",
    )  # fmt: skip


def verify_key(args: argparse.Namespace) -> bytes | None:
    """The key every input must verify with: the signing key unless ``--allow-unsigned``."""
    key = signing_key(args)
    return None if getattr(args, "allow_unsigned", False) else key


def signing_key(args: argparse.Namespace) -> bytes | None:
    """The key of --sign-key FILE, else of $STREAMRFF_SIGNING_KEY, else None (errors name the file, not the key).

    Read once per command (kept on ``args``): a long ``watch`` signs every save with the key it started with.
    """
    from ..formats.sketch import read_signing_key  # here, not at the top: start-up time

    if "_signing_key" not in vars(args):
        args._signing_key = read_signing_key(args.sign_key, allow_readable=args.allow_readable_key)
    return args._signing_key


def add_plot(parser: argparse.ArgumentParser, help: str) -> None:
    """``--plot PNG``: a figure, refused when it exists unless ``--overwrite`` (:func:`check_plot_free`)."""
    parser.add_argument("--plot", metavar="PNG", help=help)


def add_target(parser: argparse.ArgumentParser, help: str) -> None:
    """``--target TARGET``: a zarr array of targets or labels, one row per row of the source."""
    parser.add_argument("--target", metavar="TARGET", default=None, help=help)


def add_classes(parser: argparse.ArgumentParser, help: str) -> None:
    """``--classes a,b,c``: the labels of a one-vs-rest encoding; every site and ``ridge`` pass the same list."""
    parser.add_argument("--classes", type=class_list, default=None, metavar="LABELS", help=help)


def add_scheduler(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scheduler", metavar="ADDRESS", default=None,
        help="Dask scheduler, e.g. tcp://127.0.0.1:8786 (default: an embedded local scheduler)",
    )  # fmt: skip


def add_map_file(parser: argparse.ArgumentParser, refused: str) -> None:
    """``--map FILE``: a fitted map; ``refused`` names the map options it contradicts (:func:`resolve_map_options`)."""
    parser.add_argument(
        "--map", metavar="FILE", default=None,
        help=f"use this map instead of fitting one: a map file from 'streamrff map', or any sketch or model file "
        f"(its map); refused with {refused}",
    )  # fmt: skip


MAP_KINDS = ["rff", "kjl"]


def add_map_kind(
    parser: argparse.ArgumentParser,
    help: str = "feature space: random Fourier features or the K-JL sketch (default: rff)",
) -> None:
    """``--map-kind rff|kjl`` (formerly ``--method``): random Fourier features or the K-JL sketch."""
    add_renamed_choice(parser, "--map-kind", MAP_KINDS, help)


def add_renamed_choice(
    parser: argparse.ArgumentParser, new: str, choices: Sequence[str], help: str, old: str = "--method"
) -> None:
    """``new``, one of ``choices`` (default None: the command picks), formerly spelled ``old``.

    ``old`` still works for one release, hidden from ``--help``: :func:`resolve_deprecated_alias`
    warns on stderr and moves its value to ``new``.
    """
    parser.add_argument(new, choices=choices, default=None, help=help)
    parser.add_argument(old, dest="deprecated_alias_value", choices=list(choices), default=None, help=argparse.SUPPRESS)
    parser.set_defaults(deprecated_alias=(old, new))


def resolve_deprecated_alias(args: argparse.Namespace) -> str | None:
    """Move the value of a deprecated alias to its new option; the one-line warning to print, or None.

    Both spellings with different values contradict each other (a usage error).
    """
    value = getattr(args, "deprecated_alias_value", None)
    if value is None:
        return None
    old, new = args.deprecated_alias
    dest = new[2:].replace("-", "_")
    if getattr(args, dest, None) not in (None, value):
        raise UsageError(f"{old} {value} contradicts {new} {getattr(args, dest)}; drop {old} (renamed to {new}).")
    setattr(args, dest, value)
    return f"{old} is deprecated and will be removed in the next release; use {new} {value}."


def add_features(
    parser: argparse.ArgumentParser,
    help: str = f"number of random features D (default: {MAP_DEFAULTS['features']})",
) -> None:
    parser.add_argument("--features", type=positive_int, default=None, help=help)


def add_landmarks(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--landmarks", type=positive_int, default=None, help=help)


def add_bandwidth(parser: argparse.ArgumentParser, help: str = _SHORT_BANDWIDTH_HELP) -> None:
    parser.add_argument("--bandwidth", type=bandwidth, default=None, help=help)


def add_variant(parser: argparse.ArgumentParser) -> None:
    help = f"RFF variant (default: {MAP_DEFAULTS['variant']})"
    parser.add_argument("--variant", choices=["sincos", "cosphase"], default=None, help=help)


def add_orthogonal(parser: argparse.ArgumentParser, help: str = "orthogonal random features") -> None:
    parser.add_argument("--orthogonal", action="store_true", default=None, help=help)


def add_structured(
    parser: argparse.ArgumentParser,
    help: str = "structured orthogonal features (SORF): O(D log d) per row, for rows of hundreds of columns",
) -> None:
    parser.add_argument("--structured", action="store_true", default=None, help=help)


def add_seed(parser: argparse.ArgumentParser, seeds: str) -> None:
    """``--seed``; ``seeds`` says what it seeds in this command."""
    parser.add_argument("--seed", type=seed_int, default=None, help=f"{seeds} (default: {MAP_DEFAULTS['seed']})")


def add_rff_options(parser: argparse.ArgumentParser, seeds: str) -> None:
    """``--features``, ``--bandwidth``, ``--variant`` and ``--seed`` of a random Fourier feature map."""
    add_features(parser)
    add_bandwidth(
        parser,
        "Gaussian kernel width sigma, or 'median': the median pairwise distance of a seeded sample of 1 000 rows "
        "(default: median)",
    )
    add_variant(parser)
    add_seed(parser, seeds)


def add_common(parser: argparse.ArgumentParser) -> None:
    """``--storage-options`` (parsed by :func:`parse_storage_options` before the command runs), ``--json``, ``-v``."""
    parser.add_argument("--storage-options", metavar="JSON|@FILE", help=_STORAGE_HELP)
    add_json(parser, "print a JSON object instead of text (for scripts)")


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The last options of a command that runs one job on Dask and writes its output.

    ``--scheduler``, :func:`add_source_options`' (the command reads sources), ``--overwrite``, then
    :func:`add_common`'s.
    """
    add_scheduler(parser)
    add_source_options(parser)
    add_overwrite(parser)
    add_common(parser)


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """``--allow-missing-chunks`` and ``--max-tasks``, of every command that reads zarr sources.

    :func:`streamrff.cli.main` runs the command under :func:`streamrff.job_options` with them
    (:func:`job_options_of`), so every source the command opens and every job it runs takes them.
    """
    parser.add_argument(
        "--allow-missing-chunks", action="store_true",
        help="read a zarr chunk absent from its store as the array's fill value, on purpose (default: refused, "
        "naming the chunk: a half-copied array would be read as rows of fill values)",
    )  # fmt: skip
    parser.add_argument(
        "--max-tasks", type=positive_int, default=None, metavar="N",
        help="most tasks of one job: beyond it, consecutive chunks are grouped into one task, read one after "
        "the other (default: 10000, about 100 MB of graph on the client and the scheduler)",
    )  # fmt: skip


def job_options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The job options the command line sets for every job of a command (:class:`streamrff.engine.JobOptions`).

    ``--scheduler`` (the client), ``--storage-options``, ``--allow-missing-chunks`` and
    ``--max-tasks``, of the commands that declare them; :func:`streamrff.cli.main` runs the command
    under :func:`streamrff.job_options` with them. A command's own job options (``sketch
    --chunk-rows``, ``--checkpoint``, ``--on-invalid``, progress bars) go to its call.
    """
    names = {"scheduler": "client", "storage_options": "storage_options", "max_tasks": "max_tasks"}
    found = {option: getattr(args, name) for name, option in names.items() if hasattr(args, name)}
    if hasattr(args, "allow_missing_chunks"):
        found["allow_missing_chunks"] = bool(args.allow_missing_chunks)
    if getattr(args, "on_invalid_job", False):  # cli.inputs.add_on_invalid(job=True)
        found["on_invalid"] = args.on_invalid
    return found


@contextlib.contextmanager
def one_connection() -> Iterator[Any]:
    """One connection to the command's ``--scheduler`` (None: the embedded local default) for all its jobs."""
    from ..engine import connect, current_job_options, job_options  # here, not at the top: start-up time

    with connect(current_job_options().client) as client, job_options(client=client):
        yield client


def add_json(parser: argparse.ArgumentParser, help: str) -> None:
    """``--json`` (it also turns progress bars off) and ``-v/--verbose``."""
    parser.add_argument("--json", action="store_true", help=help)
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")


# Checking options.


def refuse(problems: Sequence[str]) -> None:
    """Raise one UsageError (exit 2) naming every problem of the command line: one line each."""
    if len(problems) == 1:
        raise UsageError(problems[0])
    if problems:
        raise UsageError(f"{len(problems)} problems with the command line:\n" + "\n".join(f"  - {p}" for p in problems))


#: The largest option file read (``@FILE``): an options object is a few hundred bytes.
OPTION_FILE_MAX_BYTES = 1 << 20


def read_option_file(path: str, where: str) -> str:
    """The text of an ``@FILE`` option: a regular file of at most :data:`OPTION_FILE_MAX_BYTES`, else one line.

    The file is opened without blocking and checked on its open descriptor, so a
    FIFO, a device (``/dev/zero``) or a directory is refused at once, and at most
    one byte past the cap is ever read.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise UsageError(f"{where} cannot be read ({error.strerror}). Give an existing JSON file after '@'.") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UsageError(f"{where} is not a regular file. Give a JSON file after '@'.")
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(OPTION_FILE_MAX_BYTES + 1)
    if len(data) > OPTION_FILE_MAX_BYTES:
        raise UsageError(f"{where} is larger than {OPTION_FILE_MAX_BYTES} bytes. Give a JSON options file after '@'.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{where} is not UTF-8 text. Give a JSON file after '@'.") from None


def parse_storage_options(text: str | None) -> dict[str, Any] | None:
    """``--storage-options``: a JSON object, or ``@FILE`` holding one. Never echoes the content."""
    if text is None:
        return None
    where = "--storage-options"
    if text.startswith("@"):
        path = text[1:]
        where = f"--storage-options file {path}"
        text = read_option_file(path, where)
    try:
        options = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(
            f"{where} must be a JSON object, e.g. '{{\"anon\": true}}' or @options.json. "
            f"Got invalid JSON ({error.msg})."
        ) from None
    if not isinstance(options, dict):
        raise UsageError(f"{where} must be a JSON object. Got {type(options).__name__}.")
    return options


def given(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The options among ``names`` that were given on the command line (parsed default is None)."""
    return [name for name in names if getattr(args, name, None) is not None]


def flag(name: str) -> str:
    """The option of a namespace attribute: ``chunk_rows`` -> ``--chunk-rows``."""
    return "--" + name.replace("_", "-")


def resolve_map_options(args: argparse.Namespace, names: Sequence[str], map_sets: Sequence[str], why: str) -> None:
    """Refuse the options in ``map_sets`` next to ``--map``; fill the defaults of the others."""
    if getattr(args, "map", None) is not None:
        clash = given(args, map_sets)
        if clash:
            flags = ", ".join(flag(name) for name in clash)
            raise UsageError(
                f"--map {args.map} fixes the feature map, so {flags} would contradict it ({why}). "
                f"Drop {flags}, or drop --map to fit a new map."
            )
    for name in names:
        if getattr(args, name, None) is None and name in MAP_DEFAULTS:
            setattr(args, name, MAP_DEFAULTS[name])


def load_map_option(args: argparse.Namespace) -> Any:
    """The map of ``--map`` (a map file, or a sketch or model file), or None; verified when a key is set."""
    from ..formats.map import load_map  # here, not at the top: start-up time

    if args.map is None:
        return None
    return load_map(args.map, storage_options=args.storage_options, verify_key=verify_key(args))


def fit_on_sources(feature_map: Any, sources: Sequence[str]) -> Any:
    """``feature_map`` fitted on the seeded row sample pooled across ``sources`` (as ``streamrff map`` fits it)."""
    from ..engine import fit_map  # here, not at the top: start-up time

    return fit_map(feature_map, list(sources))


def rff_of_options(args: argparse.Namespace) -> Any:
    """The unfitted, checked RFF map of ``--features``, ``--bandwidth``, ``--variant``, ``--orthogonal``,
    ``--structured``, ``--seed``.

    Checked before any data is read; a value the map refuses is a usage error (exit 2).
    """
    from ..errors import InputError  # here, not at the top: start-up time
    from ..maps import RFF

    if args.variant == "sincos" and args.features % 2:
        raise UsageError(
            f"--features must be even for --variant sincos (a cosine and a sine per frequency). Got {args.features}; "
            f"use {args.features + 1}, or --variant cosphase."
        )
    feature_map = RFF(
        n_features=args.features,
        bandwidth=args.bandwidth,
        variant=args.variant,
        orthogonal=getattr(args, "orthogonal", MAP_DEFAULTS["orthogonal"]),  # test has no --orthogonal
        structured=getattr(args, "structured", False),  # nor --structured
        seed=args.seed,
    )
    try:
        feature_map._check_params()
    except InputError as error:
        raise UsageError(str(error)) from None
    return feature_map


def landmark_problems(args: argparse.Namespace, map_kind: str) -> list[str]:
    """``--landmarks`` against ``--map-kind``: only K-JL has landmarks, and it needs at least 2."""
    if args.landmarks is None:
        return []
    if map_kind != "kjl":
        return ["--landmarks applies to --map-kind kjl only; drop it, or pass --map-kind kjl."]
    if args.landmarks < 2:
        return [f"--landmarks must be at least 2 for --map-kind kjl (its kernel needs two rows). Got {args.landmarks}."]
    return []


def check_output_free(path: str, storage_options: dict[str, Any] | None, overwrite: bool) -> None:
    """Refuse an existing output unless --overwrite (exit 2, one message for every command).

    A local output's folder must also take a new file now, before the job runs
    (read-only, forbidden, no inode left: OutputError, exit 1).
    """
    if "://" not in path or path.startswith("file://"):
        from .._files.publish import check_output_location  # here, not at the top: start-up time

        check_output_location(path[len("file://") :] if path.startswith("file://") else path)
    if overwrite:
        return
    if "://" in path and not path.startswith("file://"):
        import fsspec  # here, not at the top: start-up time

        from ..errors import SourceError

        try:
            fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
            exists = fs.exists(root)
        except Exception as error:  # fsspec backends raise many types
            raise SourceError(f"Cannot reach {path}: {type(error).__name__}: {error}") from error
    else:
        exists = os.path.exists(path[len("file://") :] if path.startswith("file://") else path)
    if exists:
        raise UsageError(EXISTS.format(path=path))


#: The figure formats ``--plot`` writes (by the file's extension; matplotlib's own list, without its backends).
PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")


def plot_path_problem(path: str) -> str | None:
    """Why ``--plot PATH`` cannot be drawn, before any work: its extension, a missing folder.

    A folder that exists but cannot be written is found by :func:`check_output_free`'s probe.
    """
    suffix = os.path.splitext(path)[1][1:].lower()
    if suffix not in PLOT_FORMATS:
        formats = ", .".join(PLOT_FORMATS)
        return f"--plot {path}: unsupported figure format {suffix or '(none)'!r}. Use one of .{formats}."
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"--plot {path}: the folder {folder} does not exist. Create it or choose another path."
    return None


def check_plot_free(args: argparse.Namespace) -> None:
    """Refuse a ``--plot`` path that cannot be written, or an existing file unless ``--overwrite``."""
    if args.plot:
        problem = plot_path_problem(args.plot)
        if problem:
            raise UsageError(problem)
        check_output_free(args.plot, None, args.overwrite)


# Inputs and outputs: no output may destroy an input; --overwrite replaces only what the command writes.

#: The arguments that name what a command reads, in every command that has them.
INPUT_ARGUMENTS = ("source", "sources", "sketches", "reference", "map", "model", "target")
#: The arguments that name what a command writes (``--checkpoint`` is written as the job runs).
OUTPUT_ARGUMENTS = ("output", "plot", "save_monitor", "checkpoint")
#: What each command's ``-o/--output`` holds: ``--overwrite`` replaces only a file of that kind.
OUTPUT_KINDS = {
    "sketch": "sketch", "merge": "sketch", "map": "map", "ridge": "model",
    "predict": "array", "kmeans": "array", "kpca": "array",
}  # fmt: skip
#: The kind of the other outputs, whatever the command.
_OTHER_OUTPUT_KINDS = {"plot": "figure", "save_monitor": "monitor"}
#: An output that may be an input of the same kind: the state ``watch`` continues (--reference) and saves.
UPDATED_IN_PLACE = {("save_monitor", "reference")}
#: Bytes of an existing output read to tell its kind (zarr.json, the start of a JSON or figure file).
_KIND_PROBE_BYTES = 1 << 20


def resolve_location(path: str) -> str:
    """Where ``path`` really is: a local path's real path (links resolved), a URL normalised.

    Examples
    --------
    >>> from streamrff.cli.options import resolve_location
    >>> resolve_location("S3://bucket//data/./x.zarr/")
    's3://bucket/data/x.zarr'
    >>> resolve_location("file:///tmp/../tmp/x.zarr") == resolve_location("/tmp/x.zarr")
    True
    """
    import posixpath

    if "://" in path and not path.lower().startswith("file://"):
        scheme, rest = path.split("://", 1)
        rest = rest.split("?", 1)[0]
        return f"{scheme.lower()}://{posixpath.normpath('/' + rest).lstrip('/')}"
    local = path[len("file://") :] if path.lower().startswith("file://") else path
    return os.path.realpath(os.path.expanduser(local))


def _overlap(output: str, source: str) -> str | None:
    """How a resolved output meets a resolved input: "is", "contains", "lies inside", or None."""
    if output == source:
        return "is"
    if source.startswith(output.rstrip("/") + "/"):
        return "contains"
    if output.startswith(source.rstrip("/") + "/"):
        return "lies inside"
    return None


def _named_paths(args: argparse.Namespace, names: Sequence[str]) -> list[tuple[str, str, str]]:
    """(argument, how the command line names it, path) of every path ``args`` gives under ``names``."""
    labels = {"source": "SOURCE", "sources": "SOURCE", "sketches": "SKETCH", "model": "MODEL", "output": "-o"}
    found = []
    for name in names:
        value = getattr(args, name, None)
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, str) and path:
                found.append((name, f"{labels.get(name, flag(name))} {path}", path))
    return found


def check_inputs_kept(args: argparse.Namespace) -> None:
    """Refuse, before anything is read, an output that is, contains or lies inside an input (even with
    ``--overwrite``), and with ``--overwrite`` an existing output of another kind than the command writes.

    Every path is resolved first (:func:`resolve_location`: symbolic links, ``..``, ``file://``, a URL's
    spelling), so an alias of an input is that input. :func:`streamrff.cli.main` calls it for every command.
    ``watch --save-monitor`` may name its ``--reference`` when that is a saved monitor (the state it
    continues). One :class:`UsageError` line (exit 2) naming both paths and the fix.
    """
    outputs = _named_paths(args, OUTPUT_ARGUMENTS)
    inputs = _named_paths(args, INPUT_ARGUMENTS)
    storage_options = getattr(args, "storage_options", None)
    for out_name, out_text, out_path in outputs:
        output = resolve_location(out_path)
        for in_name, in_text, in_path in inputs:
            how = _overlap(output, resolve_location(in_path))
            if how is None:
                continue
            if how == "is" and (out_name, in_name) in UPDATED_IN_PLACE:
                if existing_kind(out_path, storage_options) == _OTHER_OUTPUT_KINDS[out_name]:
                    continue
            raise UsageError(
                f"{out_text} {how} the input {in_text}: writing it would destroy the input (refused even with "
                "--overwrite). Choose an output outside every input."
            )
        for other_name, other_text, other_path in outputs:
            if other_name != out_name and _overlap(output, resolve_location(other_path)):
                raise UsageError(f"{out_text} and {other_text} overlap: each output needs a place of its own.")
    if getattr(args, "overwrite", False):
        for out_name, out_text, out_path in outputs:
            wanted = _OTHER_OUTPUT_KINDS.get(out_name)
            if out_name == "output":
                wanted = OUTPUT_KINDS.get(args.command)
            if wanted is not None:
                check_replaceable(out_text, out_path, wanted, storage_options)


def check_replaceable(named: str, path: str, wanted: str, storage_options: dict[str, Any] | None) -> None:
    """Refuse ``--overwrite`` of an existing output that holds something else than a ``wanted`` (one line, exit 2)."""
    found = existing_kind(path, storage_options)
    if found not in (None, wanted):
        raise UsageError(
            f"{named} holds {_KIND_NAMES.get(found, found)}, not {_KIND_NAMES[wanted]}: --overwrite replaces only "
            f"{_KIND_NAMES[wanted]}. Choose another output, or move {path} away yourself."
        )


_KIND_NAMES = {
    "sketch": "a sketch", "map": "a map file", "model": "a model file", "array": "a zarr array",
    "monitor": "a monitor state", "figure": "a figure (PNG, PDF or SVG)", "checkpoint": "a checkpoint folder",
    "folder": "a folder that is no streamrff output", "file": "a file that is no streamrff output",
    "group": "a zarr group that is no streamrff output",
}  # fmt: skip


def existing_kind(path: str, storage_options: dict[str, Any] | None = None) -> str | None:
    """What an existing output holds (a key of ``_KIND_NAMES``), or None if nothing is there.

    Reads at most the node's ``zarr.json`` or the first MiB of a file, never follows more.

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> from streamrff.cli.options import existing_kind
    >>> folder = tempfile.mkdtemp()
    >>> srf.sketch_array(np.ones((3, 2)), srf.RFF(n_features=8, bandwidth=1.0)).save(os.path.join(folder, "a.sketch"))
    >>> existing_kind(os.path.join(folder, "a.sketch")), existing_kind(os.path.join(folder, "none"))
    ('sketch', None)
    """
    if "://" in path and not path.lower().startswith("file://"):
        return _remote_kind(path, storage_options)
    local = resolve_location(path)
    if not os.path.lexists(local):
        return None
    if os.path.isdir(local):
        meta = os.path.join(local, "zarr.json")
        return _zarr_kind(_head(meta) if os.path.isfile(meta) else None)
    if not os.path.isfile(local):
        return "file"
    head = _head(local)
    if head.startswith(b"PK") and local.endswith(".zip"):
        return "sketch"  # a zipped sketch (its content is checked when it is read)
    return _file_kind(head)


def _head(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(_KIND_PROBE_BYTES)


def _zarr_kind(meta: bytes | None) -> str:
    if meta is None:
        return "folder"
    try:
        document = json.loads(meta)
    except ValueError:
        return "group"
    if not isinstance(document, dict):
        return "group"
    if document.get("node_type") == "array":
        return "array"
    attributes = document.get("attributes")
    found = attributes.get("format") if isinstance(attributes, dict) else None
    kinds = {"streamrff.sketch": "sketch", "streamrff.drift-monitor": "monitor", "streamrff.checkpoint": "checkpoint"}
    return kinds.get(found, "group")


def _file_kind(head: bytes) -> str:
    import re

    if head.startswith((b"\x89PNG", b"%PDF")) or head.lstrip()[:5] in (b"<?xml", b"<svg ") or b"<svg" in head[:4096]:
        return "figure"
    match = re.search(rb'"format"\s*:\s*"([^"]{1,64})"', head[:65536])
    found = match.group(1).decode("utf-8", "replace") if match else None
    return {"streamrff.map": "map", "streamrff.model": "model"}.get(found or "", "file")


def _remote_kind(url: str, storage_options: dict[str, Any] | None) -> str | None:
    import fsspec  # here, not at the top: start-up time

    from ..errors import SourceError

    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        if not fs.exists(root):
            return None
        if fs.isdir(root):
            meta = root.rstrip("/") + "/zarr.json"
            return _zarr_kind(fs.cat_file(meta, start=0, end=_KIND_PROBE_BYTES) if fs.exists(meta) else None)
        return _file_kind(fs.cat_file(root, start=0, end=_KIND_PROBE_BYTES))
    except Exception as error:  # fsspec backends raise many types
        raise SourceError(f"Cannot reach {url}: {type(error).__name__}: {error}") from error


# Tables (parquet files and datasets): the column selection and the columns read as categories.


def add_table_options(parser: argparse.ArgumentParser) -> None:
    """``--select COLS`` and ``--categorical COLS``: which columns of a parquet SOURCE, and which are categories."""
    parser.add_argument(
        "--select", type=column_list, default=None, metavar="COL,COL,...",
        help="a parquet SOURCE (file, folder of parquet files, or s3:// dataset): the columns to read, in this "
        "order (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--categorical", type=column_list, default=None, metavar="COL,COL,...",
        help="a parquet SOURCE: numeric columns to read as categories too (category, string and boolean "
        "columns always are); the map compares them by equality",
    )  # fmt: skip


def open_tables(args: argparse.Namespace, paths: Sequence[str]) -> list[Any]:
    """``paths`` with every parquet source opened with ``--select`` / ``--categorical`` (others kept as given).

    Refuses the two options when no path is a parquet source, naming the paths.
    """
    from ..engine import current_job_options, open_job_source  # here, not at the top: start-up time
    from ..sources.frames import is_table

    job = current_job_options()
    tables = [is_table(path, job.storage_options) for path in paths]
    wanted = {"columns": args.select, "categorical": args.categorical}
    if not any(tables) and any(value is not None for value in wanted.values()):
        flags = " and ".join(flag for flag, name in (("--select", "select"), ("--categorical", "categorical"))
                             if getattr(args, name) is not None)  # fmt: skip
        raise UsageError(
            f"{flags} choose columns of a parquet source; {', '.join(paths)} is not one (a .parquet file or a "
            "folder of them). Drop them, or give a parquet source."
        )
    return [
        open_job_source(path, job, name="SOURCE", **wanted) if table else path for path, table in zip(paths, tables)
    ]
