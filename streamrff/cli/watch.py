"""The ``streamrff watch`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

from . import options

#: ``streamrff watch --help``: the line ``streamrff --help`` shows, the description, the example.
HELP = """\
watch a zarr array for drift against a reference, chunk by chunk, optionally as rows are appended

Slide a window of the last --window rows of SOURCE over its chunks, in order, and compare it with
the reference after every row (unbiased MMD^2 of random Fourier features); the alarm threshold is
calibrated from the reference alone so that, with no change, a false alarm comes once every --ert
rows on average. REF is a zarr array (a new monitor is fitted on it), a sketch file with second
moments, or a monitor saved with --save-monitor (it continues where it stopped). One line per
processed chunk; with --follow, new complete chunks are processed as they land, until --max-rows
or Ctrl-C.

example: streamrff watch live.zarr --reference train.zarr --window 200 --ert 10000
         streamrff watch live.zarr --reference train.sketch --window 200 --ert 10000 --follow --poll 5
         streamrff watch live.zarr --reference monitor.zarr --follow --json --save-monitor monitor.zarr --overwrite
"""

#: Options that define a new monitor, refused next to a saved one (it fixes them).
_MONITOR_OPTIONS = ["window", "ert", "features", "bandwidth", "seed", "streams"]


#: ``--window``: an integer >= 2 (the unbiased statistic needs two rows).
window_rows = options.number_parser(int, lambda value: value >= 2, "an integer >= 2 (rows in the window)")
#: ``--ert``: a finite number of rows > 1.
run_time = options.number_parser(
    float, lambda value: math.isfinite(value) and value > 1, "a number of rows > 1, e.g. 10000"
)


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "watch", HELP, run)
    options.add_source(parser, "zarr array path or URL to watch (plain path, file://, s3://...)")
    parser.add_argument(
        "--reference", metavar="REF", required=True,
        help="the reference: a zarr array, a sketch file with second moments ('streamrff sketch --moments'), "
        "or a monitor saved with --save-monitor",
    )  # fmt: skip
    parser.add_argument(
        "--window", type=window_rows, default=None,
        help="rows in the sliding window (required unless REF is a saved monitor)",
    )  # fmt: skip
    parser.add_argument(
        "--ert", type=run_time, default=None,
        help="expected rows between false alarms with no change (required unless REF is a saved monitor)",
    )  # fmt: skip
    options.add_features(parser, "random features D of a new monitor's map (default: 512)")
    options.add_bandwidth(parser)
    options.add_seed(parser, "seed of the map, the calibration sample and the simulated streams")
    parser.add_argument(
        "--from-row", type=int, default=None, metavar="R",
        help="first row of SOURCE to read (default: its current end with --follow, else 0)",
    )  # fmt: skip
    parser.add_argument("--follow", action="store_true", help="keep polling for appended rows after the end")
    parser.add_argument(
        "--poll", type=options.non_negative_float, default=None, metavar="SECONDS",
        help="with --follow: seconds between looks at SOURCE's shape (default: 5)",
    )  # fmt: skip
    parser.add_argument(
        "--max-rows", type=options.positive_int, default=None, metavar="N", help="stop after N rows of SOURCE"
    )
    parser.add_argument(
        "--streams", type=options.positive_int, default=None, metavar="N",
        help="simulated streams that calibrate a new monitor's thresholds (default: enough for --ert, capped)",
    )  # fmt: skip
    options.add_plot(parser, "draw the statistic against the threshold over the rows, with the alarm marked")
    parser.add_argument(
        "--save-monitor", metavar="PATH", default=None,
        help="save the monitor (a local directory) at the end, so 'watch --reference PATH' continues from there",
    )  # fmt: skip
    options.add_overwrite(parser, "replace an existing --plot or --save-monitor output")
    options.add_scheduler(parser)
    parser.add_argument("--storage-options", metavar="JSON|@FILE", help=options._STORAGE_HELP)
    options.add_json(parser, "print one JSON object per line instead of text (for scripts)")


def _usage_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.from_row is not None and args.from_row < 0:
        problems.append(f"--from-row must be a row index >= 0. Got {args.from_row}.")
    if args.streams is not None and args.streams < 10:
        problems.append(f"--streams must be at least 10 (the calibration's quantiles). Got {args.streams}.")
    if args.poll is not None and not args.follow:
        problems.append("--poll goes with --follow; add --follow, or drop --poll.")
    if args.plot and args.save_monitor and args.plot == args.save_monitor:
        problems.append("--plot and --save-monitor name the same path; give two paths.")
    return problems


def reference_kind(path: str, storage_options: dict[str, Any] | None) -> str:
    """What ``--reference`` holds: "monitor", "sketch" or "data" (from the zarr group's ``format`` attribute)."""
    import fsspec  # here, not at the top: start-up time

    from ..drift import MONITOR_FORMAT_NAME
    from ..errors import SourceError

    if path.rstrip("/").endswith(".zip"):
        return "sketch"  # a zipped sketch file; monitors are saved as directories
    try:
        filesystem, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        if not filesystem.exists(root):
            raise SourceError(f"No reference at {path}: the path does not exist. Check --reference.")
        try:
            metadata = json.loads(filesystem.cat_file(root.rstrip("/") + "/zarr.json"))
        except (FileNotFoundError, ValueError):
            return "data"  # not a zarr v3 node with readable metadata: let the data reader say what is wrong
    except SourceError:
        raise
    except Exception as error:  # fsspec backends raise many types
        raise SourceError(f"Cannot reach {path}: {type(error).__name__}: {error}") from error
    name = metadata.get("attributes", {}).get("format") if isinstance(metadata, dict) else None
    if name == MONITOR_FORMAT_NAME:
        return "monitor"
    if name == "streamrff.sketch":
        return "sketch"
    return "data"


def _monitor_of_reference(args: argparse.Namespace) -> tuple[Any, str]:
    """The monitor to run: loaded, or fitted on the reference sketch or data; and what REF was."""
    from ..drift import DriftMonitor, load_monitor  # here, not at the top: start-up time
    from ..errors import InputError

    kind = reference_kind(args.reference, args.storage_options)
    if kind == "monitor":
        clash = options.given(args, _MONITOR_OPTIONS)
        if clash:
            flags = ", ".join(map(options.flag, clash))
            raise options.UsageError(
                f"--reference {args.reference} is a saved monitor: it fixes its window, ERT and map, so {flags} "
                f"would contradict it. Drop {flags}, or give a data or sketch reference to fit a new monitor."
            )
        return load_monitor(args.reference), kind
    missing = [flag for flag, value in (("--window", args.window), ("--ert", args.ert)) if value is None]
    if missing:
        raise options.UsageError(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required to fit a new monitor on "
            f"--reference {args.reference}; e.g. --window 200 --ert 10000."
        )
    seed = 0 if args.seed is None else args.seed
    streams = "auto" if args.streams is None else args.streams
    if kind == "sketch":
        from ..fileformat import load
        from ..sketches import MeanSketch

        clash = options.given(args, ["features", "bandwidth"])
        if clash:
            flags = ", ".join(map(options.flag, clash))
            raise options.UsageError(f"--reference {args.reference} is a sketch: its map fixes {flags}; drop them.")
        reference = load(args.reference, storage_options=args.storage_options)
        if not isinstance(reference, MeanSketch) or not reference.has_moments:
            raise InputError(
                f"--reference {args.reference} is a {reference.kind} sketch without second moments; the monitor's "
                "calibration needs them. Sketch the reference with 'streamrff sketch --moments'."
            )
        return DriftMonitor(args.window, args.ert, seed=seed, n_streams=streams).fit(reference), kind
    monitor = DriftMonitor(
        args.window,
        args.ert,
        n_features=512 if args.features is None else args.features,
        bandwidth="median" if args.bandwidth is None else args.bandwidth,
        seed=seed,
        n_streams=streams,
    )
    return monitor.fit(args.reference, client=args.scheduler, storage_options=args.storage_options), kind


class _Watch:
    """The state of one ``watch`` session: where it is in SOURCE, what it printed, what the figure needs."""

    def __init__(self, args: argparse.Namespace, monitor: Any, start: int) -> None:
        self.args = args
        self.monitor = monitor
        self.start = start
        self.position = start
        self.first_seen = int(monitor.n_rows_seen_)  # the monitor's row counter at `start`
        self.chunks = 0
        self.settling = -1  # with --follow: the end of a chunk seen complete at the end of the array, read next poll
        self.alarm_printed = monitor.drift_at_ is not None and monitor.drift_at_ < self.first_seen
        self.statistics: list[Any] = []
        self.thresholds: list[Any] = []

    def source_row(self, monitor_row: int | None) -> int | None:
        """The row of SOURCE of one of the monitor's global rows (None before this session)."""
        if monitor_row is None or monitor_row < self.first_seen:
            return None
        return self.start + monitor_row - self.first_seen

    def rows_left(self) -> int | None:
        if self.args.max_rows is None:
            return None
        return self.args.max_rows - (self.position - self.start)

    def process(self, rows: Any) -> None:
        """Update the monitor with the next rows of SOURCE and print their line (and the alarm line)."""
        update = self.monitor.update(rows)
        first, self.position = self.position, self.position + rows.shape[0]
        self.chunks += 1
        if self.args.plot:
            self.statistics.append(update.statistic)
            self.thresholds.append(update.threshold)
        line = {
            "event": "chunk",
            "rows": [first, self.position],
            "rows_seen": update.n_rows_seen,
            "statistic": _number(update.statistic[-1]),
            "threshold": _number(update.threshold[-1]),
            "drift": bool(update.drift),
            "drift_at": update.drift_at,
            "drift_at_row": self.source_row(update.drift_at),
        }
        if self.args.json:
            _print(json.dumps(line))
        else:
            statistic = "n/a" if line["statistic"] is None else f"{line['statistic']:.4g}"
            threshold = "n/a" if line["threshold"] is None else f"{line['threshold']:.4g}"
            _print(
                f"rows {first:,}-{self.position - 1:,} ({update.n_rows_seen:,} seen): statistic {statistic}, "
                f"threshold {threshold}, drift {'yes' if update.drift else 'no'}"
            )
        if update.drift and not self.alarm_printed:
            self.alarm_printed = True
            row = self.source_row(update.drift_at)
            if self.args.json:
                _print(json.dumps({"event": "alarm", "drift_at": update.drift_at, "drift_at_row": row}))
            else:
                _print(f"ALARM: drift at row {row:,} of {self.args.source} (row {update.drift_at:,} of the monitor)")

    def summary(self, interrupted: bool) -> dict[str, Any]:
        monitor = self.monitor
        return {
            "event": "summary",
            "source": self.args.source,
            "reference": self.args.reference,
            "rows": [self.start, self.position],
            "chunks": self.chunks,
            "rows_seen": int(monitor.n_rows_seen_),
            "drift": monitor.drift_at_ is not None,
            "drift_at": monitor.drift_at_,
            "drift_at_row": self.source_row(monitor.drift_at_),
            "window": int(monitor.window_features_.shape[0]),
            "ert": float(monitor.ert),
            "n_features": int(monitor.reference_sum_.shape[0]),
            "interrupted": interrupted,
        }


def _number(value: Any) -> float | None:
    """A float for JSON: None for NaN (a window of one row) and inf (no threshold yet)."""
    value = float(value)
    return value if math.isfinite(value) else None


def _print(line: str) -> None:
    print(line, flush=True)  # flushed: a pipe reader sees each chunk as it is processed


def _process_available(watch: _Watch, source: Any, follow: bool) -> bool:
    """Process the chunks of ``source`` after ``watch.position`` that are complete; True when --max-rows is reached.

    Rows are read in the chunks of SOURCE (its shards if it is sharded), so each read is whole stored objects;
    without ``follow`` the last, partial chunk is processed too. With ``follow``, a chunk that ends the array is
    read one poll after it was first seen complete (an appending writer resizes the array before it writes).
    """
    import numpy as np  # here, not at the top: start-up time

    array = source.zarr_array
    unit = int((array.shards or array.chunks)[0])
    n_rows = source.shape[0]
    while watch.position < n_rows:
        end = (watch.position // unit + 1) * unit
        if end > n_rows:
            if follow:
                return False  # the last chunk is still growing
            end = n_rows
        if follow and end == n_rows and watch.settling != end:
            # A writer resizes the array before it writes the rows (unwritten rows read as fill values): the
            # last chunk is read once the array extends past it, or at the next poll.
            watch.settling = end
            return False
        left = watch.rows_left()
        if left is not None:
            end = min(end, watch.position + left)
        watch.process(np.asarray(array[watch.position : end]))
        if watch.rows_left() == 0:
            return True
    return False


def _open(args: argparse.Namespace) -> Any:
    from ..errors import SourceError
    from ..io import open_source  # here, not at the top: start-up time

    source = open_source(args.source, storage_options=args.storage_options, name="SOURCE")
    if source.zarr_array is None:  # pragma: no cover - a path always opens a zarr array
        raise SourceError(f"{args.source} is not a zarr array.")
    return source


def run(args: argparse.Namespace) -> int:
    options.refuse(_usage_problems(args))
    options.check_plot_free(args)
    if args.save_monitor:
        if "://" in args.save_monitor and not args.save_monitor.startswith("file://"):
            raise options.UsageError(
                f"--save-monitor must be a local directory (monitors are saved locally). Got {args.save_monitor}."
            )
        options.check_output_free(args.save_monitor, None, args.overwrite)
    from ..errors import InputError, SourceError  # here, not at the top: start-up time

    source = _open(args)  # before the reference is fitted: a wrong SOURCE fails fast
    monitor, _ = _monitor_of_reference(args)
    if source.shape[1] != monitor.n_features_in_:
        raise InputError(
            f"SOURCE {args.source} has {source.shape[1]} columns but the reference has {monitor.n_features_in_}. "
            "Watch a source of the reference's columns."
        )
    start = args.from_row if args.from_row is not None else (source.shape[0] if args.follow else 0)
    if start > source.shape[0] and not args.follow:
        raise SourceError(
            f"--from-row {start} is past the end of {args.source} ({source.shape[0]} rows). "
            "Give a smaller --from-row, or --follow to wait for the rows."
        )
    watch = _Watch(args, monitor, start)
    interrupted = False
    try:
        done = _process_available(watch, source, args.follow)
        while args.follow and not done:
            time.sleep(5.0 if args.poll is None else args.poll)
            source = _open(args)  # the array's metadata again: its new shape
            done = _process_available(watch, source, follow=True)
    except KeyboardInterrupt:
        interrupted = True
    _finish(args, watch, interrupted)
    return options.EXIT_OK


def _finish(args: argparse.Namespace, watch: _Watch, interrupted: bool) -> None:
    """Save the monitor and the figure, and print the summary."""
    summary = watch.summary(interrupted)
    written = []
    if args.save_monitor:
        watch.monitor.save(args.save_monitor, overwrite=args.overwrite)
        written.append(args.save_monitor)
    if args.plot:
        import numpy as np  # here, not at the top: start-up time

        from ..plot import save_drift_figure

        statistic = np.concatenate(watch.statistics) if watch.statistics else np.zeros(0)
        threshold = np.concatenate(watch.thresholds) if watch.thresholds else np.zeros(0)
        save_drift_figure(
            args.plot, statistic, threshold, first_row=watch.start, drift_at=summary["drift_at_row"],
            overwrite=args.overwrite,
        )  # fmt: skip
        written.append(args.plot)
    if args.json:
        _print(json.dumps(summary | {"wrote": written}))
        return
    verdict = "no drift" if not summary["drift"] else (
        f"drift at row {summary['drift_at_row']:,}" if summary["drift_at_row"] is not None
        else f"drift raised before this session (row {summary['drift_at']:,} of the monitor)"
    )  # fmt: skip
    stop = "interrupted" if interrupted else "stopped"
    lines = [
        f"{stop} after {watch.position - watch.start:,} rows of {args.source} from row {watch.start:,} "
        f"({summary['chunks']} chunks): {verdict}",
        f"  monitor: window {summary['window']}, ERT {summary['ert']:g}, D = {summary['n_features']}, "
        f"{summary['rows_seen']:,} rows seen",
    ] + [f"wrote {path}" for path in written]
    _print("\n".join(lines))
