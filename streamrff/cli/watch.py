"""The ``streamrff watch`` command: its options, in the order ``--help`` lists them, and what it runs."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import options, service
from .faults import SignalGate, StopRequested, state_save_failure

#: ``streamrff watch --help``: the line ``streamrff --help`` shows, the description, the example and exit statuses.
HELP = """\
watch a zarr array or a parquet dataset for drift against a reference, chunk by chunk, as it grows

Slide a window of the last --window rows of SOURCE over its chunks, in order, and compare it with
the reference after every row (unbiased MMD^2 of random Fourier features); the alarm threshold is
calibrated from the reference alone so that, with no change, a false alarm comes once every --ert
rows on average. REF is a zarr array (a new monitor is fitted on it), a sketch file with second
moments, or a monitor saved with --save-monitor: it continues at the row of SOURCE after the last
one it consumed (its saved cursor), and refuses a SOURCE that is not the array it follows. One line
per processed chunk; with --follow, new complete chunks are processed once their stored objects exist
(the newest once its stored bytes stayed unchanged for --settle seconds), until --max-rows or a signal.
Chunks are known by a digest of their stored bytes, so a consumed chunk rewritten in place is refused.
With --save-monitor the state is saved atomically, with its cursor, every --save-interval seconds and
at every stop; one watcher at a time may hold it (a lock beside it).
SIGINT, SIGTERM and SIGHUP stop it cleanly: the state is saved and the summary printed.
As a service, one command line for every start: --state DIR fits, saves and calibrates a new monitor in DIR
the first time (starting at row 0) and resumes it at its saved row after; --metrics-port serves Prometheus
metrics, /healthz, /readyz and a status page. With --follow, a SOURCE that does not exist yet or has no rows is
waited for.
SOURCE may be a parquet dataset (a folder or s3:// prefix of parquet files, --select/--categorical as for
sketch) that gains files: its files in name order, each row group a chunk, a file read once its footer is written
and its listing stayed unchanged for --settle; the cursor records the file, its rows consumed and a digest of its
bytes.
With --method e-detector the alarm is an e-detector by betting instead (e-Shiryaev-Roberts): no calibration,
an alarm when the e-value reaches 1/--alpha, an average run length to a false alarm >= 1/--alpha by construction.

example: streamrff watch live.zarr --reference train.zarr --window 200 \\
         --ert 10000
         streamrff watch live.zarr --state /var/lib/drift \\
         --reference train.zarr --window 200 --ert 10000 --follow
         streamrff watch live.zarr --reference train.zarr --method e-detector \\
         --alpha 0.0001 --json
         streamrff watch live.zarr --reference train.sketch --window 200 \\
         --ert 10000 --follow --poll 5
         streamrff watch live.zarr --reference monitor.zarr --follow --json \\
         --save-monitor monitor.zarr --overwrite
exit status: 0 stopped (end of SOURCE, --max-rows, SIGINT, SIGTERM or SIGHUP, at any moment; state saved)
             1 error (unreadable data or store, a NaN/inf row with --on-invalid raise: state saved before it)
             1 state storage full or read-only (the line names the last state saved: whole, resumable)
             2 usage (a bad or contradictory option)
             3 source refused (another array, replaced, shrunk, re-laid-out, a chunk unwritten too long)
             4 state locked (another watcher holds --save-monitor)
             5 drift alarm (with --exit-on-drift; state saved after the alarm's chunk)
             6 no data (without --follow: SOURCE does not exist yet or has no rows)
"""

#: Exit statuses of ``watch`` besides options.EXIT_OK (0), EXIT_FAILED (1) and EXIT_USAGE (2).
EXIT_SOURCE_REFUSED, EXIT_LOCKED, EXIT_DRIFT = 3, 4, 5
#: Columns the ALARM line names (the JSON alarm event lists them all).
ALARM_COLUMNS = 3



#: ``--window``: an integer >= 2 (the unbiased statistic needs two rows).
window_rows = options.number_parser(
    int, lambda value: 2 <= value <= options.MAX_COUNT, "an integer from 2 to 2^62 (rows in the window)"
)
#: ``--ert``: a number of rows > 1 and <= 1e12 (a false-alarm rate 1/ERT that float64 calibration still resolves).
run_time = options.number_parser(
    float, lambda value: math.isfinite(value) and 1 < value <= 1e12, "a number of rows > 1 and <= 1e12, e.g. 10000"
)


#: ``--alpha``: a number in (0, 1).
level = options.number_parser(float, lambda value: 0 < value < 1, "a number in (0, 1), e.g. 0.0001")

#: The most recent rows' statistics ``--plot`` keeps (16 bytes a row): its memory is bounded whatever the run's length.
PLOT_HISTORY_ROWS = 1_000_000


def keep_recent(chunks: list[Any], companions: list[Any], limit: int) -> int:
    """Drop the oldest values of ``chunks`` (and alike ``companions``) beyond ``limit`` in all; returns how many."""
    excess = sum(len(chunk) for chunk in chunks) - limit
    dropped = 0
    while excess > 0 and chunks:
        cut = min(excess, len(chunks[0]))
        chunks[0], companions[0] = chunks[0][cut:], companions[0][cut:]
        if not len(chunks[0]):
            chunks.pop(0), companions.pop(0)
        excess -= cut
        dropped += cut
    return dropped


def add_parser(commands: Any) -> None:
    parser = options.add_command(commands, "watch", HELP, run)
    parser.set_defaults(stopped_during_start_up=stopped_during_start_up)  # main installs its signal gate first
    options.add_source(parser, "zarr array, or parquet dataset (a folder of parquet files), path or URL to watch")
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
    parser.add_argument(
        "--method", choices=("ert", "e-detector"), default=None,
        help="a new monitor's alarm: 'ert' (default) the window's MMD^2 against thresholds calibrated to --ert; "
        "'e-detector' an e-Shiryaev-Roberts e-detector by betting, alarm at e-value 1/--alpha, no calibration "
        "(--window: the rows of its witness, default 100)",
    )  # fmt: skip
    parser.add_argument(
        "--alpha", type=level, default=None,
        help="with --method e-detector: the alarm level in (0, 1); the average run length to a false alarm is >= "
        "1/alpha rows (or give --ert N for alpha = 1/N)",
    )  # fmt: skip
    options.add_features(parser, "random features D of a new monitor's map (default: 512)")
    options.add_table_options(parser)  # a parquet --reference (data)
    options.add_bandwidth(parser)
    options.add_seed(parser, "seed of the map, the calibration sample and the simulated streams")
    parser.add_argument(
        "--from-row", type=int, default=None, metavar="R",
        help="first row of SOURCE to read (default: a saved monitor's next row; for a new monitor, SOURCE's "
        "current end with --follow, else 0)",
    )  # fmt: skip
    parser.add_argument(
        "--restart", action="store_true",
        help="start anew on SOURCE on purpose: drop a saved monitor's cursor and empty its window (reference and "
        "thresholds stay); needed to watch another array than the one it follows",
    )  # fmt: skip
    parser.add_argument("--follow", action="store_true", help="keep polling for appended rows after the end")
    parser.add_argument(
        "--poll", type=options.non_negative_float, default=None, metavar="SECONDS",
        help="with --follow: seconds between looks at SOURCE's shape (default: 5)",
    )  # fmt: skip
    parser.add_argument(
        "--settle", type=options.non_negative_float, default=None, metavar="SECONDS",
        help="with --follow: the newest chunk is read only once its stored bytes stayed unchanged this long, so a "
        "chunk written in several writes is not read half-written; longer than a writer's pauses (default: two "
        "--poll)",
    )  # fmt: skip
    parser.add_argument(
        "--max-rows", type=options.positive_int, default=None, metavar="N", help="stop after N rows of SOURCE"
    )
    parser.add_argument(
        "--missing-chunk-timeout", type=options.non_negative_float, default=60.0, metavar="SECONDS",
        help="with --follow: how long a chunk inside the array may stay unwritten (its stored object absent) "
        "before watch stops with status 3; without --follow it stops at once",
    )  # fmt: skip
    parser.add_argument(
        "--on-invalid", choices=("raise", "skip"), default="raise",
        help="a row holding NaN or inf: raise (stop with status 1, the state saved up to the row before) or skip "
        "it (counted and reported)",
    )  # fmt: skip
    parser.add_argument(
        "--exit-on-drift", action="store_true",
        help=f"stop at the first alarm of this session with status {EXIT_DRIFT} (after saving), so a supervisor "
        "can act",
    )  # fmt: skip
    parser.add_argument(
        "--streams", type=options.positive_int, default=None, metavar="N",
        help="simulated streams that calibrate a new monitor's thresholds (default: enough for --ert, capped)",
    )  # fmt: skip
    options.add_plot(parser, "draw the statistic against the threshold over the rows, with the alarm marked")
    parser.add_argument(
        "--save-monitor", metavar="PATH", default=None,
        help="save the monitor and its cursor (a local directory) while running and at the end, so 'watch "
        "--reference PATH' continues from there; locked while this watcher runs",
    )  # fmt: skip
    parser.add_argument(
        "--save-interval", type=options.non_negative_float, default=None, metavar="SECONDS",
        help="with --save-monitor: save after processed chunks at most every SECONDS (0: after every chunk; "
        "default: 5)",
    )  # fmt: skip
    options.add_overwrite(parser, "replace an existing --plot or --save-monitor output")
    options.add_sign_key(parser, "sign the --save-monitor state and verify a sketch or monitor --reference with FILE")
    options.add_verify_key(parser, signs=True)
    add_store_option(parser)
    options.add_scheduler(parser)
    parser.add_argument("--storage-options", metavar="JSON|@FILE", help=options._STORAGE_HELP)
    options.add_json(parser, "print one JSON object per line instead of text (for scripts)")
    service.add_options(parser)


def _usage_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.from_row is not None and args.from_row < 0:
        problems.append(f"--from-row must be a row index >= 0. Got {args.from_row}.")
    if args.streams is not None and args.streams < 10:
        problems.append(f"--streams must be at least 10 (the calibration's quantiles). Got {args.streams}.")
    if args.poll is not None and not args.follow:
        problems.append("--poll goes with --follow; add --follow, or drop --poll.")
    if args.settle is not None and not args.follow:
        problems.append("--settle goes with --follow; add --follow, or drop --settle.")
    if args.plot and args.save_monitor and args.plot == args.save_monitor:
        problems.append("--plot and --save-monitor name the same path; give two paths.")
    if args.save_interval is not None and not (args.save_monitor or args.state):
        problems.append("--save-interval goes with --save-monitor; add --save-monitor PATH, or drop --save-interval.")
    return problems


class _Refusal(Exception):
    """A stop with a status of its own: the one-line message (``{saved}`` says where the state was saved)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Watch:
    """The state of one ``watch`` session: the monitor, its cursor in SOURCE, what it printed, what the figure needs."""

    def __init__(
        self, args: argparse.Namespace, monitor: Any, source: Any, cursor: dict[str, Any], gate: SignalGate
    ) -> None:
        self.args = args
        self.monitor = monitor
        self.source = source
        self.cursor = cursor
        self.start = int(cursor["next_row"])
        self.chunks = 0
        self.rows_skipped = 0
        self.settling: Any = None  # with --follow: the last chunk of the array, its stored objects, when first seen
        self.missing_since: tuple[int, float] | None = None  # the row whose chunk is absent, and since when
        self.alarm_before = monitor.drift_at_ is not None
        self.alarm_printed = self.alarm_before
        self.drift_exit = False
        self.gate = gate
        self.saved_once = False
        self.saved_row: int | None = None  # the next row of the last state saved in this session
        self.save_failure: str | None = None  # why the state could not be saved: no save is tried after it
        self.saved_at = time.monotonic()
        self.written: list[str] = []
        self.statistics: list[Any] = []
        self.thresholds: list[Any] = []
        self.plot_dropped = 0  # the oldest statistics dropped from --plot's bounded history
        self.feed = store_feed(args, source)  # --store: the buckets completed as rows arrive
        self.status: Any = None  # with --metrics-port: the served status (cli/status.py), told every event

    @property
    def stop_signal(self) -> int | None:
        return self.gate.number

    @property
    def position(self) -> int:
        return int(self.cursor["next_row"])

    def rows_left(self) -> int | None:
        if self.args.max_rows is None:
            return None
        return self.args.max_rows - (self.position - self.start)

    def process(self, rows: Any, objects: dict[str, Any] | None) -> None:
        """Update the monitor with the next rows of SOURCE, move the cursor and print their line (and the alarm's)."""
        import numpy as np  # here, not at the top: start-up time

        from ..drift.follow import advance
        from ..errors import InputError

        first, seen_before = self.position, int(self.monitor.n_rows_seen_)
        if self.args.on_invalid == "skip":
            update = self.monitor.update(rows, on_invalid="skip")
        else:
            try:
                update = self.monitor.update(rows)
            except InputError:
                finite = np.isfinite(rows).all(axis=1)
                bad = int(np.flatnonzero(~finite)[0]) if not finite.all() else None
                if bad is None:
                    raise
                if bad:
                    self.process(rows[:bad], None)  # the rows before it are consumed and saved
                raise _Refusal(
                    options.EXIT_FAILED,
                    f"row {first + bad:,} of {self.args.source} holds NaN or inf (row {bad} of its chunk from row "
                    f"{first:,}); {{saved}}. Clean the row and run again, or pass --on-invalid skip to skip such rows.",
                ) from None
        skipped = first + update.skipped
        self.rows_skipped += int(skipped.size)
        if update.drift_at is not None and update.drift_at >= seen_before and self.cursor.get("drift_at_row") is None:
            kept = np.delete(np.arange(rows.shape[0]), update.skipped)
            self.cursor["drift_at_row"] = first + int(kept[update.drift_at - seen_before])
        self.cursor = advance(self.cursor, first + rows.shape[0], objects)
        self.chunks += 1
        if self.feed is not None:
            stored = self.feed.add(first, rows)
            if stored:
                line = {"event": "store", "store": self.args.store, "buckets": list(stored)}
                _print(json.dumps(line) if self.args.json else f"stored bucket(s) {list(stored)} in {self.args.store}")
        if self.args.plot:
            self.statistics.append(update.statistic)
            self.thresholds.append(update.threshold)
            self.plot_dropped += keep_recent(self.statistics, self.thresholds, PLOT_HISTORY_ROWS)
        statistic = update.statistic[-1] if update.statistic.size else math.nan
        threshold = update.threshold[-1] if update.threshold.size else math.nan
        line = {
            "event": "chunk",
            "rows": [first, self.position],
            "rows_seen": update.n_rows_seen,
            "statistic": _number(statistic),
            "threshold": _number(threshold),
            "drift": bool(update.drift),
            "drift_at": update.drift_at,
            "drift_at_row": self.drift_at_row(update.drift_at),
            "skipped": [int(row) for row in skipped],
        }
        e_detector = getattr(self.monitor, "method", "ert") == "e-detector"
        if e_detector:  # the statistic is the log e-value: a script multiplies independent sites' e-values
            line["log_e_value"] = self.monitor.detector_.log_e_value
        if self.status is not None:
            self.status.event(line)
        if self.args.json:
            _print(json.dumps(line))
        else:
            statistic = "n/a" if line["statistic"] is None else f"{line['statistic']:.4g}"
            threshold = "n/a" if line["threshold"] is None else f"{line['threshold']:.4g}"
            skips = ""
            if skipped.size:
                shown = ", ".join(f"{row:,}" for row in skipped[:5]) + (" ..." if skipped.size > 5 else "")
                skips = f", skipped {skipped.size} rows with NaN or inf ({shown})"
            what = ("log e-value", "alarm at") if e_detector else ("statistic", "threshold")
            _print(
                f"rows {first:,}-{self.position - 1:,} ({update.n_rows_seen:,} seen): {what[0]} {statistic}, "
                f"{what[1]} {threshold}, drift {'yes' if update.drift else 'no'}{skips}"
            )
        if update.drift and not self.alarm_printed:
            self.alarm_printed = True
            self.drift_exit = bool(self.args.exit_on_drift)
            row = self.drift_at_row(update.drift_at)
            top = _alarm_rows(update, row)
            if self.status is not None:
                self.status.event({"event": "alarm", "drift_at": update.drift_at, "drift_at_row": row, **top})
            if self.args.json:
                _print(json.dumps({"event": "alarm", "drift_at": update.drift_at, "drift_at_row": row, **top}))
            else:
                _print(
                    f"ALARM: drift at row {row:,} of {self.args.source} (row {update.drift_at:,} of the monitor)"
                    + _alarm_rows_text(top)
                )
        self.save(periodic=True)

    def drift_at_row(self, monitor_row: int | None) -> int | None:
        """The row of SOURCE of the current alarm (None before it, or for an alarm of a monitor without cursor)."""
        return None if monitor_row is None else self.cursor.get("drift_at_row")

    def save(self, periodic: bool = False) -> None:
        """Publish the monitor with its cursor (atomically); ``periodic``: only if --save-interval has passed."""
        if not self.args.save_monitor or self.save_failure is not None:
            return
        interval = 5.0 if self.args.save_interval is None else self.args.save_interval
        if periodic and time.monotonic() - self.saved_at < interval:
            return
        self.monitor.source_cursor_ = dict(self.cursor)
        overwrite = self.args.overwrite or self.saved_once or bool(self.args.state)  # --state: DIR/monitor is ours
        try:
            key = options.signing_key(self.args)
            with self.gate.shielded():  # published whole or not at all, whatever signal arrives
                self.monitor.save(self.args.save_monitor, overwrite=overwrite, signing_key=key)
        except FileExistsError:
            raise
        except OSError as error:  # full or read-only storage: the last state published is whole, and kept
            self.save_failure = state_save_failure(self.args.save_monitor, error, self.saved_text(failed=True))
            raise _Refusal(options.EXIT_FAILED, self.save_failure) from None
        self.saved_once, self.saved_at, self.saved_row = True, time.monotonic(), self.position
        if self.status is not None:
            self.status.saved()

    def saved_text(self, failed: bool = False) -> str:
        """Where the state is: "the monitor is saved up to row ..." (``failed``: the last save that worked)."""
        if not self.args.save_monitor:
            return "nothing saved (no --save-monitor)"
        if self.saved_row is None:
            return f"the state in {self.args.save_monitor} is as it was before this session"
        last = f"row {self.saved_row - 1:,}" if self.saved_row else "no row"
        where = "the last state saved is" if failed or self.save_failure else "the monitor is saved"
        return f"{where} up to {last} (next row {self.saved_row:,}) in {self.args.save_monitor}"

    def summary(self) -> dict[str, Any]:
        monitor = self.monitor
        stopped_by = None if self.stop_signal is None else signal.Signals(self.stop_signal).name
        return {
            "event": "summary",
            "source": self.args.source,
            "reference": self.args.reference,
            "rows": [self.start, self.position],
            "next_row": self.position,
            "chunks": self.chunks,
            "rows_seen": int(monitor.n_rows_seen_),
            "rows_skipped": self.rows_skipped,
            "drift": monitor.drift_at_ is not None,
            "drift_at": monitor.drift_at_,
            "drift_at_row": self.drift_at_row(monitor.drift_at_),
            "window": int(monitor.window_features_.shape[0]),
            "ert": float(monitor.ert),
            "n_features": int(monitor.reference_sum_.shape[0]),
            "interrupted": stopped_by is not None,
            "stopped_by": stopped_by,
        } | _method_summary(monitor)


def _method_summary(monitor: Any) -> dict[str, Any]:
    """The summary's alarm method; an e-detector's alpha, ERT bound (1/alpha) and log e-value."""
    if getattr(monitor, "method", "ert") != "e-detector":
        return {"method": "ert"}
    alpha = monitor.detector_.alpha
    return {"method": "e-detector", "alpha": alpha, "ert": 1.0 / alpha, "log_e_value": monitor.detector_.log_e_value}


def _alarm_rows(update: Any, drift_at_row: int | None) -> dict[str, Any]:
    """The window rows that set off the alarm (largest kernel-mean ratio first), as monitor rows and rows of SOURCE.

    A monitor row ``r`` is row ``r + (drift_at_row - drift_at)`` of SOURCE when no row was skipped in between.
    """
    if update.top_rows is None:
        return {}
    rows = [int(row) for row in update.top_rows]
    out: dict[str, Any] = {"top_rows": rows, "top_values": [float(value) for value in update.top_values]}
    if drift_at_row is not None:
        out["top_rows_source"] = [row + drift_at_row - int(update.drift_at) for row in rows]
    if update.column_statistics is not None:  # a monitor fitted on data: the columns that moved, by |z|
        out["columns"] = [int(column) for column in update.columns]
        out["column_statistics"] = [_number(value) for value in update.column_statistics]
    return out


def _alarm_rows_text(top: dict[str, Any]) -> str:
    """``"; window rows most over-represented ...: 1,204 (3.1), ..."``, the first five of :func:`_alarm_rows`."""
    if not top:
        return ""
    rows = top.get("top_rows_source", top["top_rows"])
    shown = ", ".join(f"{row:,} ({value:.3g})" for row, value in zip(rows[:5], top["top_values"][:5]))
    text = f"; window rows most over-represented against the reference (kernel-mean ratio): {shown}"
    if "columns" in top:
        statistics = top["column_statistics"]
        moved = ", ".join(f"{column} (z {_z_text(statistics[column])})" for column in top["columns"][:ALARM_COLUMNS])
        text += f"; columns whose window mean moved most (standardised): {moved}"
    return text


def _z_text(value: float | None) -> str:
    return "inf" if value is None else f"{value:+.3g}"  # only +-inf is not finite (a constant reference column)


def _number(value: Any) -> float | None:
    """A float for JSON: None for NaN (a window of one row) and inf (no threshold yet)."""
    value = float(value)
    return value if math.isfinite(value) else None


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", metavar="PATH", default=None,
        help="also keep the stream in this sketch store (streamrff store create): each bucket is appended as soon "
        "as it is complete, so the monitor's history is queryable; a store of time buckets needs --times or "
        "--time-coordinate",
    )  # fmt: skip
    parser.add_argument("--times", metavar="PATH", default=None,
                        help="with a --store of time buckets: the rows' times, a zarr array or .npy file of datetime64")
    parser.add_argument("--time-coordinate", metavar="NAME", default=None,
                        help="with a --store of time buckets: the rows' times, array NAME of SOURCE's zarr group "
                        "(a time coordinate as xarray writes it)")  # fmt: skip


def store_feed(args: argparse.Namespace, source: Any) -> Any:
    """The --store feed of a watch session (None without --store)."""
    if getattr(args, "store", None) is None:
        if getattr(args, "times", None) is not None or getattr(args, "time_coordinate", None) is not None:
            raise options.UsageError("--times and --time-coordinate go with --store (a store of time buckets).")
        return None
    from ..store.feed import watch_feed  # here, not at the top: start-up time

    return watch_feed(
        args.store, source, args.source, args.storage_options, args.times, args.time_coordinate,
        on_invalid=args.on_invalid,
    )  # fmt: skip


def _print(line: str) -> None:
    print(line, flush=True)  # flushed: a pipe reader sees each chunk as it is processed


def _process_available(watch: _Watch, follow: bool) -> bool:
    """Process the chunks of SOURCE after the cursor whose stored objects exist; True when the session is done.

    Rows are read in the chunks of SOURCE (its shards if it is sharded), so each read is whole stored objects;
    without ``follow`` the last, partial chunk is processed too. A chunk is read only once its stored objects
    exist (zarr reads an absent one as fill values); with ``follow``, a chunk that ends the array is read once
    the digests of its stored bytes stayed the same for ``--settle`` seconds (a writer may fill a chunk in several
    writes), and its rows are kept only if the digests are still the same after the read.
    """
    import numpy as np  # here, not at the top: start-up time

    from ..drift.follow import chunk_rows, missing_objects

    if watch.source.zarr_array is None:
        return _process_files(watch, follow)
    source = watch.source
    unit = chunk_rows(source)
    n_rows = source.shape[0]
    while watch.position < n_rows and watch.stop_signal is None:
        position = watch.position
        end = (position // unit + 1) * unit
        if end > n_rows:
            if follow:
                return False  # the last chunk is still growing
            end = n_rows
        with watch.gate.interruptible():  # a store request: a signal cuts it (nothing is half-done)
            objects, missing = missing_objects(source, position, end)
        if missing:
            _wait_for_chunk(watch, follow, position, end, n_rows, missing[0])
            return False
        watch.missing_since = None
        newest = follow and end == n_rows
        if newest and not _settled(watch, end, objects):
            return False
        left = watch.rows_left()
        stop = end if left is None else min(end, position + left)
        with watch.gate.interruptible():
            rows = np.asarray(source.zarr_array[position:stop])
            rewritten = newest and missing_objects(source, position, end)[0] != objects
        if rewritten:  # rewritten while read: settle again
            watch.settling = None
            return False
        watch.process(rows, objects if stop == end else None)
        if watch.rows_left() == 0 or watch.drift_exit:
            return True
    return False


def _open_dataset(args: argparse.Namespace) -> Any:
    """SOURCE as a parquet dataset (sources/parquetfolder.py), with --select and --categorical."""
    from ..sources.parquetfolder import open_folder

    if getattr(args, "store", None) is not None:
        raise options.UsageError(f"--store keeps buckets of a zarr SOURCE; {args.source} is a parquet dataset. Drop "
                                 "--store.")  # fmt: skip
    return open_folder(args.source, args.storage_options, args.select, args.categorical)


def _process_files(watch: _Watch, follow: bool) -> bool:
    """Process the ready row groups of a parquet dataset after the cursor (sources/parquetfolder.py: files in name
    order, each once complete and settled); True when the session is done."""
    from ..errors import SourceChangedError
    from ..sources.parquetfolder import ready_chunks

    args = watch.args
    settle = args.settle if args.settle is not None else 2 * (5.0 if args.poll is None else args.poll)
    watch.settling = watch.settling if isinstance(watch.settling, dict) else {}
    chunks = ready_chunks(watch.source, watch.cursor, follow, settle, watch.settling)
    try:
        while watch.stop_signal is None:
            with watch.gate.interruptible():  # store requests: a signal cuts them
                item = next(chunks, None)
            if item is None:
                _log_incomplete(watch, follow)
                return False
            left = watch.rows_left()
            watch.cursor = {**watch.cursor, **item[0]}
            if not len(item[1]):
                continue
            watch.process(item[1] if left is None else item[1][:left], None)
            if watch.rows_left() == 0 or watch.drift_exit:
                return True
    except SourceChangedError as error:
        raise _Refusal(EXIT_SOURCE_REFUSED, str(error)) from None
    return False


def _log_incomplete(watch: _Watch, follow: bool) -> None:
    """A log line, at most every minute, for a dataset file without its footer: it and the files after it wait."""
    waiting = watch.source.files[len(watch.source.complete) :]
    last = watch.settling.get(("logged",), -math.inf)
    if waiting and time.monotonic() - last >= service.WAIT_LOG_SECONDS:
        watch.settling[("logged",)] = time.monotonic()
        how = "it and the files after it wait" if follow else "it and the files after it are not read (no --follow)"
        service.log(f"{waiting[0].name} of {watch.args.source} has no parquet footer yet (being written): {how}")


def _settled(watch: _Watch, end: int, objects: dict[str, Any]) -> bool:
    """Whether the chunk ending at row ``end`` has had these stored ``objects`` (their digests) for --settle s."""
    now, seen = time.monotonic(), (end, json.dumps(objects, sort_keys=True))
    if watch.settling is None or watch.settling[0] != seen:
        watch.settling = (seen, now)  # first seen, or changed since: its clock starts now
    args = watch.args
    settle = args.settle if args.settle is not None else 2 * (5.0 if args.poll is None else args.poll)
    return now - watch.settling[1] >= settle


def _wait_for_chunk(watch: _Watch, follow: bool, start: int, stop: int, n_rows: int, key: str) -> None:
    """Wait for an absent chunk inside the array, up to --missing-chunk-timeout; refuse it after (at once without
    --follow)."""
    now = time.monotonic()
    if watch.missing_since is None or watch.missing_since[0] != start:
        watch.missing_since = (start, now)
    waited = now - watch.missing_since[1]
    if follow and waited < watch.args.missing_chunk_timeout:
        return
    how_long = f"still absent after {waited:.0f} s (--missing-chunk-timeout)" if follow else "absent"
    raise _Refusal(
        EXIT_SOURCE_REFUSED,
        f"rows {start:,}-{stop - 1:,} of {watch.args.source} lie inside its {n_rows:,} rows, but their stored chunk "
        f"{key} is {how_long}: those rows were never written (zarr would read them as fill values); {{saved}}. "
        "Write the chunk (a writer that died between resizing and writing), or store chunks of fill values too "
        "(zarr config write_empty_chunks=True).",
    )


def _open(args: argparse.Namespace) -> Any:
    from ..engine import current_job_options, open_job_source  # here, not at the top: start-up time
    from ..errors import SourceError
    from ..sources.frames import is_table

    if is_table(args.source, args.storage_options):  # a parquet dataset: its files in name order
        return _open_dataset(args)
    source = open_job_source(args.source, current_job_options(), name="SOURCE")
    if source.zarr_array is None:  # pragma: no cover - a path always opens a zarr array
        raise SourceError(f"{args.source} is not a zarr array.")
    return source


def _starting_cursor(args: argparse.Namespace, monitor: Any, kind: str, source: Any) -> dict[str, Any]:
    """Where this session starts: a saved monitor's cursor (checked against SOURCE), or a new cursor."""
    from ..drift.follow import moved_to, new_cursor, refuse_change, source_change
    from ..errors import SourceError

    if args.restart and kind != "monitor":
        raise options.UsageError(
            f"--restart starts a saved monitor anew; --reference {args.reference} is a {kind} reference (a new "
            "monitor starts anew anyway). Drop --restart."
        )
    saved = getattr(monitor, "source_cursor_", None) if kind == "monitor" else None
    if args.restart:
        monitor.reset()  # no window mixing two arrays: the run starts anew, the reference and thresholds stay
        saved = None
    if saved is not None:
        what = source_change(saved, source)
        if what is not None:
            error = refuse_change(what, saved, source, "the state is unchanged")
            raise _Refusal(EXIT_SOURCE_REFUSED, str(error))
        cursor = {**saved} if args.from_row is None else moved_to(saved, source, args.from_row)
    else:
        end_now = args.follow and not args.state  # a --state service starts a new state at row 0
        start = args.from_row if args.from_row is not None else (source.shape[0] if end_now else 0)
        cursor = new_cursor(source, start)
    if cursor["next_row"] > source.shape[0] and not args.follow:
        raise SourceError(
            f"Row {cursor['next_row']} (the {'--from-row' if args.from_row is not None else 'saved next row'}) is past "
            f"the end of {args.source} ({source.shape[0]} rows). Give a smaller --from-row, or --follow to wait for "
            "the rows."
        )
    return cursor


@contextlib.contextmanager
def _state_lock(path: str | None) -> Iterator[None]:
    """Hold the lock of the --save-monitor state (a file beside it) for the session: one watcher per state."""
    if not path:
        yield
        return
    from .._files.lock import LockHeld, describe_holder, exclusive_lock
    from .._files.publish import remove_path
    from ..errors import StateLockedError

    target = Path(path[len("file://") :] if path.startswith("file://") else path).absolute()
    target = target.resolve()  # a symbolic link to the state is the same state: the same lock
    if not target.parent.is_dir():
        raise options.UsageError(
            f"--save-monitor {path}: directory {target.parent} does not exist. Create it first, or choose another path."
        )
    try:
        with exclusive_lock(target.parent / f".{target.name}.lock", record_holder=True):
            for staging in target.parent.glob(f".{target.name}.partial-*"):  # left by a killed watcher: ours now
                remove_path(staging)
            yield
    except LockHeld as error:
        raise StateLockedError(
            f"The monitor state {path} is in use by {describe_holder(error.holder)}: one watcher per state. Stop "
            "that watcher first, or save to another --save-monitor path."
        ) from None


def _pause(watch: _Watch, seconds: float) -> None:
    """Sleep ``seconds``, or less if a stop signal arrives (checked every 50 ms)."""
    deadline = time.monotonic() + seconds
    while watch.stop_signal is None and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))


def run(args: argparse.Namespace) -> int:
    gate = getattr(args, "signal_gate", None)  # installed by streamrff.cli.main before anything is imported
    try:
        with contextlib.nullcontext(gate) if gate else SignalGate() as gate:  # a signal during start-up: at once
            return _checked_run(args, gate)
    except StopRequested as stop:
        return stopped_during_start_up(args, stop)


def stopped_during_start_up(args: argparse.Namespace, stop: StopRequested) -> int:
    """The summary of a session stopped by a signal before its first save: nothing processed, the state unchanged."""
    if args.json:
        summary = {"event": "summary", "source": args.source, "reference": args.reference, "chunks": 0}
        _print(json.dumps(summary | {"interrupted": True, "stopped_by": stop.name, "during": "start-up"}))
    else:
        kept = f"; the state in {args.save_monitor} is unchanged" if args.save_monitor else ""
        _print(f"stopped by {stop.name} during start-up, before any row of {args.source}{kept}")
    return options.EXIT_OK


def _checked_run(args: argparse.Namespace, gate: SignalGate) -> int:
    from ..errors import SourceChangedError, StateLockedError  # here, not at the top: start-up time

    try:
        return _run(args, gate)
    except _Refusal as refusal:  # before the session started: nothing processed, nothing saved
        print(f"streamrff watch: error: {str(refusal).replace('{saved}', 'the state is unchanged')}", file=sys.stderr)
        return refusal.status
    except StateLockedError as error:
        print(f"streamrff watch: error: {error}", file=sys.stderr)
        return EXIT_LOCKED
    except SourceChangedError as error:
        print(f"streamrff watch: error: {error}", file=sys.stderr)
        return EXIT_SOURCE_REFUSED
    except service.NoData as error:
        print(f"streamrff watch: error: {error}", file=sys.stderr)
        return service.EXIT_NO_DATA


def _run(args: argparse.Namespace, gate: SignalGate) -> int:
    options.refuse(_usage_problems(args) + service.usage_problems(args))
    options.check_plot_free(args)
    if args.state:
        service.use_state(args)  # --save-monitor is DIR/monitor: the lock and the saves as below
    elif args.save_monitor:
        if "://" in args.save_monitor and not args.save_monitor.startswith("file://"):
            raise options.UsageError(
                f"--save-monitor must be a local directory (monitors are saved locally). Got {args.save_monitor}."
            )
        options.check_output_free(args.save_monitor, None, args.overwrite)
    with _state_lock(args.save_monitor), service.served_status(args) as status:  # the lock first: one watcher
        from ..errors import InputError, StreamRFFError  # here, not at the top: start-up time

        if args.state:  # the state first: fitted and published before SOURCE exists
            monitor, kind = service.monitor_of_state(args)
        # Before a new reference is fitted: a wrong SOURCE fails fast. A signal while waiting for it raises
        # StopRequested (the gate raises until the session starts): the start-up ends with its summary.
        source = service.source_when_ready(args, _open, status)
        if not args.state:
            monitor, kind = service.monitor_of_reference(args)
        cursor = _starting_cursor(args, monitor, kind, source)  # first: a saved source that changed says how
        if source.shape[1] != monitor.n_features_in_:
            raise InputError(
                f"SOURCE {args.source} has {source.shape[1]} columns but the reference has "
                f"{monitor.n_features_in_}. Watch a source of the reference's columns."
            )
        if source.zarr_array is None:  # a parquet dataset: its categories where the map's are
            from ..sources.parquetfolder import check_map_columns

            check_map_columns(source, monitor.feature_map_)
        watch = _Watch(args, monitor, source, cursor, gate)
        gate.raising = False  # from here a signal stops the session after the chunk in hand, or cuts a store wait
        if getattr(monitor, "method", "ert") == "e-detector" and not args.json:
            _print(service.e_detector_text(monitor))
        try:
            watch.save()  # the cursor from the start: a state killed before its first chunk still knows its row
            service.started(args, watch, kind, status)
            _follow(watch)
        except StopRequested:
            pass  # a signal cut a store wait: the cursor is at the last chunk processed, as after any stop
        except _Refusal as refusal:
            _finish_despite_save(args, watch)
            print(f"streamrff watch: error: {str(refusal).replace('{saved}', watch.saved_text())}", file=sys.stderr)
            return refusal.status
        except StreamRFFError:
            with contextlib.suppress(StreamRFFError, OSError, _Refusal):
                watch.save()  # the rows consumed so far are not read again
            raise
        failure = _finish_despite_save(args, watch)
    if failure is not None:
        print(f"streamrff watch: error: {failure}", file=sys.stderr)
        return failure.status
    return EXIT_DRIFT if watch.drift_exit else options.EXIT_OK


def _finish_despite_save(args: argparse.Namespace, watch: _Watch) -> _Refusal | None:
    """:func:`_finish`; if the state cannot be saved, the summary and figure all the same, and the failure."""
    try:
        _finish(args, watch)
    except _Refusal as failure:  # the state storage is full or read-only: no save is tried again
        _finish(args, watch)
        return failure
    return None




def _follow(watch: _Watch) -> None:
    """Process SOURCE's chunks, and with --follow keep polling, until the session is done or a signal stops it."""
    from ..drift.follow import source_change

    args = watch.args
    done = _process_available(watch, args.follow)
    while args.follow and not done and watch.stop_signal is None:
        _pause(watch, 5.0 if args.poll is None else args.poll)
        if watch.stop_signal is not None:
            break
        with watch.gate.interruptible():  # store requests: a signal cuts them
            source = _open(args)  # the array's metadata again: its new shape
            what = source_change(watch.cursor, source)
        if what is not None:
            from ..drift.follow import refuse_change

            raise _Refusal(EXIT_SOURCE_REFUSED, str(refuse_change(what, watch.cursor, source, "{saved}")))
        watch.source = source
        if watch.status is not None:
            watch.status.polled()
        done = _process_available(watch, follow=True)


def _finish(args: argparse.Namespace, watch: _Watch) -> None:
    """Save the monitor and the figure, and print the summary."""
    summary = watch.summary()
    written = []
    if args.save_monitor:
        watch.save()
        if watch.save_failure is None:
            written.append(args.save_monitor)
    if args.plot:
        import numpy as np  # here, not at the top: start-up time

        from ..plot import save_drift_figure

        statistic = np.concatenate(watch.statistics) if watch.statistics else np.zeros(0)
        threshold = np.concatenate(watch.thresholds) if watch.thresholds else np.zeros(0)
        drift_row = summary["drift_at_row"] if not watch.alarm_before else None
        save_drift_figure(
            args.plot, statistic, threshold, first_row=watch.start + watch.plot_dropped, drift_at=drift_row,
            overwrite=args.overwrite,
        )  # fmt: skip
        written.append(args.plot)
    if args.json:
        _print(json.dumps(summary | {"wrote": written}))
        return
    if not summary["drift"]:
        verdict = "no drift"
    elif watch.alarm_before:
        where = f"row {summary['drift_at_row']:,} of the source" if summary["drift_at_row"] is not None else (
            f"row {summary['drift_at']:,} of the monitor"
        )  # fmt: skip
        verdict = f"drift raised before this session ({where})"
    else:
        verdict = f"drift at row {summary['drift_at_row']:,}"
    stop = {None: "stopped", "SIGINT": "interrupted"}.get(summary["stopped_by"], f"stopped by {summary['stopped_by']}")
    skipped = f", {watch.rows_skipped:,} skipped (NaN or inf)" if watch.rows_skipped else ""
    lines = [
        f"{stop} after {watch.position - watch.start:,} rows of {args.source} from row {watch.start:,} "
        f"({summary['chunks']} chunks{skipped}): {verdict}",
        f"  monitor: window {summary['window']}, ERT {summary['ert']:g}, D = {summary['n_features']}, "
        f"{summary['rows_seen']:,} rows seen"
        + (f"; e-detector (ERT >= 1/alpha), log e-value {summary['log_e_value']:.6g}" if "alpha" in summary else ""),
    ] + [f"wrote {path}" for path in written]
    _print("\n".join(lines))
