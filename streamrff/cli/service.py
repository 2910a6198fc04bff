"""``streamrff watch --state DIR``: one command line for a service (fit once, resume after), a start before the data.

The hooks :mod:`streamrff.cli.watch` calls: :func:`add_options` (the flags), :func:`usage_problems`,
:func:`use_state` (before the lock), :func:`monitor_of_state` (the monitor: resumed, or fitted, saved and
calibrated through :mod:`streamrff.drift.service`), :func:`monitor_of_reference` (the monitor of a session
without a state: loaded, or fitted on ``--reference`` by ``--method``) and :func:`source_when_ready` (an array
that does not exist yet, or has no rows, is waited for with --follow).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import options

#: ``watch`` without --follow on a SOURCE that does not exist yet or has no rows: nothing to watch.
EXIT_NO_DATA = 6
#: Seconds between two log lines while waiting for SOURCE.
WAIT_LOG_SECONDS = 60.0
#: The options that fit a new monitor; a saved state fixes them (a restart logs those that differ).
FIT_OPTIONS = (("window", "window"), ("ert", "ert"), ("features", "n_features"), ("bandwidth", "bandwidth"),
               ("seed", "seed"), ("streams", "n_streams"))  # fmt: skip


#: Options that define a new monitor, refused next to a saved one (it fixes them).
_MONITOR_OPTIONS = ["window", "ert", "features", "bandwidth", "seed", "streams", "method", "alpha"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--state``, ``--refit``, ``--metrics-port`` and ``--metrics-host``."""
    parser.add_argument(
        "--state", metavar="DIR", default=None,
        help="the service's state directory (local; created if absent): holding no state, a monitor is fitted on "
        "--reference, saved and calibrated (the calibration cached in DIR), and watching starts at row 0 (or "
        "--from-row); holding one, it is resumed at its saved row and the fitting options are ignored. One "
        "command line for every start",
    )  # fmt: skip
    parser.add_argument(
        "--refit", action="store_true",
        help="with --state: fit a new monitor on --reference even though DIR holds one (its window and cursor are "
        "dropped; a cached calibration with the same inputs is reused)",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-port", type=_port, default=None, metavar="PORT",
        help="serve Prometheus metrics (/metrics), /healthz, /readyz and a status page (/) on this port (0: any)",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-host", default=None, metavar="HOST",
        help="with --metrics-port: the address to listen on (default: 127.0.0.1; 0.0.0.0 in a container)",
    )  # fmt: skip


#: ``--metrics-port``: a TCP port, 0 for one the system picks.
_port = options.number_parser(int, lambda value: 0 <= value <= 65535, "a TCP port 0-65535")


def usage_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.state and args.save_monitor:
        problems.append("--state keeps the monitor in DIR/monitor; drop --save-monitor (or --state).")
    if args.state and "://" in args.state and not args.state.startswith("file://"):
        problems.append(f"--state must be a local directory. Got {args.state}.")
    if args.refit and not args.state:
        problems.append("--refit goes with --state; add --state DIR, or drop --refit.")
    if args.metrics_host is not None and args.metrics_port is None:
        problems.append("--metrics-host goes with --metrics-port; add --metrics-port PORT, or drop --metrics-host.")
    return problems


@contextlib.contextmanager
def served_status(args: argparse.Namespace) -> Iterator[Any]:
    """With --metrics-port: the session's :class:`~streamrff.cli.status.Status`, served while in the context;
    else None."""
    if args.metrics_port is None:
        yield None
        return
    from .status import serve

    status = serve(args, "127.0.0.1" if args.metrics_host is None else args.metrics_host, args.metrics_port)
    try:
        yield status
    finally:
        status.close()


def started(args: argparse.Namespace, watch: Any, kind: str, status: Any) -> None:
    """The session is ready: its start line (a service), and the status served from it."""
    if logs(args):
        start_line(args, watch, kind)
    if status is not None:
        status.attach(watch)


def log(text: str) -> None:
    """A service log line (stderr, flushed): stdout keeps the chunk lines."""
    print(f"streamrff watch: {text}", file=sys.stderr, flush=True)


def logs(args: argparse.Namespace) -> bool:
    """Whether this session logs its start and waits (a service: --state or --follow)."""
    return bool(args.state or args.follow)


def use_state(args: argparse.Namespace) -> None:
    """Create the state directory and point --save-monitor at its monitor (so the lock and saves are the usual)."""
    root = args.state[len("file://") :] if args.state.startswith("file://") else args.state
    if os.path.exists(os.path.join(root, "zarr.json")):
        raise options.UsageError(
            f"--state {args.state} is itself a saved monitor or zarr node; --state takes the directory that holds the "
            f"state. Move it to {os.path.join(root, 'monitor')}, or run it with --reference/--save-monitor."
        )
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as error:
        raise options.UsageError(f"--state {args.state}: cannot create the directory ({error.strerror}).") from None
    args.state = root
    args.save_monitor = os.path.join(root, "monitor")


def monitor_of_state(args: argparse.Namespace) -> tuple[Any, str]:
    """The state's monitor, resumed; or fitted on --reference, its fit saved first, calibrated (cached), saved.

    Returns the monitor and what it is: "monitor" (resumed: its saved cursor holds) or "fitted" (new).
    """
    from .._files.publish import remove_path
    from ..drift import load_monitor
    from ..drift.service import (
        StatePaths,
        cached_thresholds,
        calibration_key,
        load_fit,
        read_service_record,
        save_fit,
        write_service_record,
    )
    from ..errors import SketchFormatError

    paths = StatePaths(args.state)
    paths.remove_leftovers()
    if os.path.isdir(paths.monitor) and not args.refit:
        monitor = load_monitor(paths.monitor, verify_key=options.verify_key(args))
        remove_path(paths.fit)  # left by a kill between the monitor's publication and the fit's removal
        _note_ignored(args, monitor, read_service_record(paths).get("reference"))
        return monitor, "monitor"
    monitor = None
    if os.path.isdir(paths.fit) and not args.refit:
        try:
            monitor = load_fit(paths.fit, verify_key=options.verify_key(args))
            _note_ignored(args, monitor, read_service_record(paths).get("reference"))
            log(f"resuming the fit saved in {paths.fit} (stopped before its calibration)")
        except SketchFormatError as error:
            log(f"{error} Fitting anew.")
    if monitor is None:
        started = time.monotonic()
        log(f"fitting a new monitor on {args.reference} into {args.state}" + (" (--refit)" if args.refit else ""))
        monitor, kind = monitor_of_reference(args, calibrate=False)
        write_service_record(paths, {"reference": args.reference})
        if kind == "monitor" or not hasattr(monitor, "calibration_inputs_"):
            # REF is a saved monitor (it becomes the state as it is), or an e-detector (nothing to calibrate)
            monitor.save(paths.monitor, overwrite=True, signing_key=options.signing_key(args))
            return monitor, "monitor" if kind == "monitor" else "fitted"
        save_fit(paths.fit, monitor, signing_key=options.signing_key(args))
        log(f"saved the fit in {time.monotonic() - started:.1f} s")
    window = int(monitor.calibration_inputs_[1])
    key = calibration_key(monitor)
    thresholds = cached_thresholds(paths, key, window, verify_key=options.verify_key(args))
    started = time.monotonic()
    if thresholds is None:
        monitor._calibrate()
        from ..drift.service import store_thresholds

        store_thresholds(paths, key, monitor.thresholds_, signing_key=options.signing_key(args))
        log(f"calibrated the thresholds in {time.monotonic() - started:.1f} s (cached as {key[:12]})")
    else:
        monitor._calibrate(thresholds)
        log(f"thresholds from the cached calibration {key[:12]}")
    monitor.save(paths.monitor, overwrite=True, signing_key=options.signing_key(args))
    remove_path(paths.fit)
    return monitor, "fitted"


def _note_ignored(args: argparse.Namespace, monitor: Any, reference: str | None) -> None:
    """One log line naming the fitting options (and reference) given that the saved state contradicts."""
    params = monitor.get_params(deep=False)
    differ = []
    for name, param in FIT_OPTIONS:
        value = getattr(args, name, None)
        fixed = params.get(param)
        if value is None or value == fixed:
            continue
        if name == "ert" and fixed is not None and float(value) == float(fixed):
            continue
        differ.append(f"{options.flag(name)} {value} (the state's: {fixed})")
    if reference is not None and args.reference != reference:
        differ.append(f"--reference {args.reference} (the state's: {reference})")
    if differ:
        log(f"the state in {args.state} fixes its fit; ignoring {', '.join(differ)}. Pass --refit to refit it.")


class NoData(Exception):
    """SOURCE does not exist yet or has no rows, and there is no --follow to wait for it."""


def _probe(args: argparse.Namespace) -> str | None:
    """Why SOURCE cannot be watched yet: "does not exist yet", "has no rows yet", or None (it can)."""
    from ..errors import SourceError
    from ..sources.frames import is_table
    from ..sources.rows import open_zarr_array

    if is_table(args.source, args.storage_options):  # a parquet dataset: once a file is complete
        from ..sources.parquetfolder import open_folder

        folder = open_folder(args.source, args.storage_options, args.select, args.categorical)
        return None if folder.complete else "has no complete parquet file yet"
    try:
        array = open_zarr_array(args.source, args.storage_options)
    except SourceError:
        if not _exists(args.source, args.storage_options, "zarr.json"):
            return "does not exist yet"
        array = open_zarr_array(args.source, args.storage_options)  # written between the two looks: open it now
    return "has no rows yet" if array.ndim >= 1 and array.shape[0] == 0 else None


def _exists(url: str, storage_options: dict[str, Any] | None, name: str) -> bool:
    """Whether ``url/name`` exists (a zarr array's metadata: a directory created, not yet written, is absent)."""
    import fsspec

    from ..errors import SourceError

    try:
        filesystem, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        filesystem.invalidate_cache(root)  # a listing cached at an earlier poll would hide what was written since
        return bool(filesystem.exists(root.rstrip("/") + "/" + name))
    except Exception as error:  # fsspec backends raise many types
        raise SourceError(f"Cannot open {url}: {type(error).__name__}: {error}") from error


def source_when_ready(args: argparse.Namespace, open_source: Callable[[argparse.Namespace], Any],
                      status: Any = None) -> Any:  # fmt: skip
    """SOURCE opened, once it exists and has rows: waited for with --follow (a log line at most every minute);
    without --follow, :class:`NoData`. A stop signal meanwhile raises in the sleep (watch's signal gate)."""
    logged = None
    while True:
        why = _probe(args)
        if why is None:
            return open_source(args)
        if not args.follow:
            raise NoData(
                f"SOURCE {args.source} {why}: nothing to watch (exit status {EXIT_NO_DATA}). Add --follow to wait "
                "for its rows."
            )
        if status is not None:
            status.waiting(why)
        now = time.monotonic()
        if logged is None or now - logged >= WAIT_LOG_SECONDS:
            log(f"SOURCE {args.source} {why}; waiting for it (polling every {_poll(args):g} s)")
            logged = now
        time.sleep(_poll(args))


def _poll(args: argparse.Namespace) -> float:
    return 5.0 if args.poll is None else args.poll


def start_line(args: argparse.Namespace, watch: Any, kind: str) -> None:
    """The line that says the service is up: where it starts, the cursor, the state."""
    how = {"monitor": "resumed", "fitted": "new"}.get(kind, "new")
    state = f", state {args.state} ({how})" if args.state else (
        f", saving to {args.save_monitor}" if args.save_monitor else ""
    )  # fmt: skip
    seen = int(watch.monitor.n_rows_seen_)
    log(
        f"watching {args.source} from row {watch.position:,} of {watch.source.shape[0]:,} "
        f"({seen:,} rows seen before{state}; pid {os.getpid()})"
    )


def reference_kind(path: str, storage_options: dict[str, Any] | None) -> str:
    """What ``--reference`` holds: "monitor", "sketch" or "data" (from the zarr group's ``format`` attribute)."""
    import fsspec  # here, not at the top: start-up time

    from .._files.bounded_read import MAX_JSON_BYTES
    from ..drift import MONITOR_FORMAT_NAME
    from ..errors import SketchFormatError, SourceError

    if path.rstrip("/").endswith(".zip"):
        return "sketch"  # a zipped sketch file; monitors are saved as directories
    try:
        filesystem, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        if not filesystem.exists(root):
            raise SourceError(f"No reference at {path}: the path does not exist. Check --reference.")
        try:
            text = filesystem.cat_file(root.rstrip("/") + "/zarr.json", start=0, end=MAX_JSON_BYTES)
        except (FileNotFoundError, IsADirectoryError):
            return "data"  # not a zarr v3 node: let the data reader say what is wrong
    except SourceError:
        raise
    except Exception as error:  # fsspec backends raise many types
        raise SourceError(f"Cannot reach {path}: {type(error).__name__}: {error}") from error
    try:
        metadata = json.loads(text)
    except ValueError:
        what = "drift monitor" if MONITOR_FORMAT_NAME.encode() in text else (
            "sketch" if b"streamrff.sketch" in text else "zarr node"
        )  # fmt: skip
        raise SketchFormatError(
            f"--reference {path} is a corrupt {what}: its zarr.json is truncated or not JSON. Restore it from a "
            "copy, or give another reference."
        ) from None
    if not isinstance(metadata, dict) or "node_type" not in metadata:  # e.g. `{}` (issue 49)
        raise SketchFormatError(
            f"--reference {path} is corrupt: its zarr.json is not zarr metadata (no node_type). Restore the state "
            "from a copy, or give another reference."
        )
    attributes = metadata.get("attributes")
    name = attributes.get("format") if isinstance(attributes, dict) else None
    if name == MONITOR_FORMAT_NAME:
        return "monitor"
    if name == "streamrff.sketch":
        return "sketch"
    return "data"


def monitor_of_reference(args: argparse.Namespace, calibrate: bool = True) -> tuple[Any, str]:
    """The monitor to run: loaded, or fitted on the reference sketch or data; and what REF was.

    ``calibrate=False`` (a --state service): a new monitor is fitted up to its calibration (``_calibrate``)."""
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
        return load_monitor(args.reference, verify_key=options.verify_key(args)), kind
    method = method_arguments(args)
    missing = [flag for flag, value in (("--window", args.window), ("--ert", args.ert)) if value is None]
    if method:
        missing = []
    if missing:
        raise options.UsageError(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required to fit a new monitor on "
            f"--reference {args.reference}; e.g. --window 200 --ert 10000."
        )
    seed = 0 if args.seed is None else args.seed
    streams = "auto" if args.streams is None else args.streams
    if kind == "sketch":
        from ..sketches.base import load
        from ..sketches.mean import MeanSketch

        clash = options.given(args, ["features", "bandwidth"])
        if clash:
            flags = ", ".join(map(options.flag, clash))
            raise options.UsageError(f"--reference {args.reference} is a sketch: its map fixes {flags}; drop them.")
        reference = load(args.reference, storage_options=args.storage_options, verify_key=options.verify_key(args))
        if not isinstance(reference, MeanSketch) or not (reference.has_moments or method):
            raise InputError(
                f"--reference {args.reference} is a {reference.kind} sketch without second moments; the monitor's "
                "calibration needs them. Sketch the reference with 'streamrff sketch --moments'."
            )
        window, ert = method.pop("window", args.window), method.pop("ert", args.ert)
        monitor = DriftMonitor(window, ert, seed=seed, n_streams=streams, **method)
        return (monitor.fit(reference) if calibrate else monitor._fit_uncalibrated(reference)), kind
    window, ert = method.pop("window", args.window), method.pop("ert", args.ert)
    monitor = DriftMonitor(
        window,
        ert,
        n_features=512 if args.features is None else args.features,
        bandwidth="median" if args.bandwidth is None else args.bandwidth,
        seed=seed,
        n_streams=streams,
        **method,
    )
    reference = options.open_tables(args, [args.reference])[0]  # parquet: --select/--categorical
    return (monitor.fit(reference) if calibrate else monitor._fit_uncalibrated(reference)), kind


def method_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """DriftMonitor's arguments for --method e-detector (its window and ERT too); {} for the ERT monitor."""
    if args.method != "e-detector":
        if args.alpha is not None:
            raise options.UsageError("--alpha goes with --method e-detector; add it, or drop --alpha (the ERT "
                                     "monitor is calibrated by --ert).")  # fmt: skip
        return {}
    given = options.given(args, ["streams"]) + (["alpha", "ert"] if args.alpha is not None and args.ert else [])
    if given:
        flags = " and ".join(map(options.flag, given))
        raise options.UsageError(f"--method e-detector needs no calibration: {flags} would contradict it. Give "
                                 "--alpha (or --ert N for alpha = 1/N), not both, and no --streams.")  # fmt: skip
    if args.alpha is None and args.ert is None:
        raise options.UsageError("--method e-detector needs --alpha (the alarm level, e.g. --alpha 0.0001) or "
                                 "--ert N (alpha = 1/N).")  # fmt: skip
    window = 100 if args.window is None else args.window
    return {"method": "e-detector", "alpha": args.alpha, "window": window, "ert": args.ert or 1000.0}


def e_detector_text(monitor: Any) -> str:
    """The start line of an e-detector session (no calibration) and its alarm level."""
    alpha, now = monitor.detector_.alpha, monitor.detector_.log_e_value
    return (f"e-detector: no calibration step; alarm when the e-value reaches 1/alpha = {1 / alpha:,.6g} (log "
            f"{math.log(1 / alpha):.4g}): the average run length to a false alarm is >= {1 / alpha:,.6g} rows by "
            f"construction{f'; log e-value now {now:.4g}' if math.isfinite(now) else ''}")  # fmt: skip
