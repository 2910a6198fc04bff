"""``streamrff watch --metrics-port``: Prometheus metrics, health and readiness, and a status page, on one port.

One HTTP server (``wsgiref`` with a thread per request, on a daemon thread) serves:

``/metrics``
    prometheus_client's WSGI app over a registry of one collector that reads the session at scrape time
    (nothing is computed per row, so serving costs the watcher nothing between scrapes).
``/healthz``
    200 while the loop turns: starting, or the last poll or chunk within :data:`HEALTHY_POLLS` polls
    (at least :data:`HEALTHY_SECONDS`); else 503. A liveness probe.
``/readyz``
    200 once the state is loaded (or fitted) and SOURCE opened; else 503. A readiness probe.
``/``
    a plain HTML page (no script, no external resource): the cursor, the source, the statistic and the threshold
    over the last :data:`HISTORY_CHUNKS` chunks as an inline SVG plot, and the last alarm (rows and columns).
"""

from __future__ import annotations

import argparse
import collections
import html
import math
import socketserver
import sys
import threading
import time
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

#: Chunks whose statistic and threshold the page plots.
HISTORY_CHUNKS = 200
#: /healthz fails once the loop has not turned for this many polls (and at least HEALTHY_SECONDS).
HEALTHY_POLLS = 3
HEALTHY_SECONDS = 30.0
#: Prefix of every metric.
PREFIX = "streamrff_watch"


class Status:
    """What the server reports: told by the watcher (its events), read by the server's threads."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.phase = "starting"
        self.watch: Any = None
        self.started = time.time()
        self.turned = time.monotonic()  # the last time the loop turned (a poll, a chunk, a wait)
        self.polled_at: float | None = None  # unix time of the last poll of SOURCE
        self.saved_at: float | None = None  # unix time of the last save
        self.last: dict[str, Any] | None = None  # the last chunk event
        self.alarm: dict[str, Any] | None = None  # the last alarm event of this session
        self.alarm_at: float | None = None  # its unix time
        self.history: collections.deque[tuple[int, float, float]] = collections.deque(maxlen=HISTORY_CHUNKS)

    def waiting(self, why: str) -> None:
        self.phase, self.turned, self.polled_at = f"waiting: SOURCE {why}", time.monotonic(), time.time()

    def attach(self, watch: Any) -> None:
        """The session is ready: its monitor loaded and SOURCE opened."""
        with self.lock:
            self.watch, self.phase = watch, "watching"
            self.turned, self.polled_at = time.monotonic(), time.time()
            if watch.saved_once:
                self.saved_at = time.time()
        watch.status = self

    def polled(self) -> None:
        self.turned, self.polled_at = time.monotonic(), time.time()

    def saved(self) -> None:
        self.saved_at = time.time()

    def event(self, event: dict[str, Any]) -> None:
        now = time.time()
        with self.lock:
            self.turned = time.monotonic()
            if event["event"] == "alarm":
                self.alarm, self.alarm_at = event, now
                return
            self.last = event
            statistic, threshold = event.get("statistic"), event.get("threshold")
            self.history.append((
                int(event["rows"][1]),
                math.nan if statistic is None else float(statistic),
                math.nan if threshold is None else float(threshold),
            ))  # fmt: skip

    def healthy(self) -> bool:
        if self.watch is None and not self.phase.startswith("waiting"):
            return True  # fitting or loading the state: progress, not a hang
        poll = 5.0 if self.args.poll is None else self.args.poll
        return time.monotonic() - self.turned <= max(HEALTHY_POLLS * poll, HEALTHY_SECONDS)

    def snapshot(self) -> dict[str, Any]:
        """The reported values, read together (None where unknown)."""
        with self.lock:
            watch = self.watch
            out: dict[str, Any] = {"phase": self.phase, "ready": watch is not None, "source": self.args.source,
                                   "state": self.args.state or self.args.save_monitor, "polled_at": self.polled_at,
                                   "saved_at": self.saved_at, "alarm": self.alarm, "alarm_at": self.alarm_at,
                                   "history": list(self.history), "last": self.last}  # fmt: skip
            if watch is None:
                return out
            monitor = watch.monitor
            source_rows = int(watch.source.shape[0])
            out.update({
                "rows_seen": int(monitor.n_rows_seen_),
                "next_row": watch.position,
                "source_rows": source_rows,
                "rows_behind": max(source_rows - watch.position, 0),
                "chunks": watch.chunks,
                "rows_skipped": watch.rows_skipped,
                "drift": monitor.drift_at_ is not None,
                "drift_at_row": watch.cursor.get("drift_at_row"),
                "identity": watch.cursor.get("identity"),
                "window": int(monitor.window_features_.shape[0]),
                "ert": float(monitor.ert),
            })  # fmt: skip
        return out


class _Collector:
    """The metrics, read from a :class:`Status` at every scrape."""

    def __init__(self, status: Status) -> None:
        self.status = status

    def describe(self) -> list[Any]:
        return []  # read at scrape time only

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.status.snapshot()
        now = time.time()

        def gauge(name: str, text: str, value: Any) -> Any:
            family = GaugeMetricFamily(f"{PREFIX}_{name}", text)
            family.add_metric([], math.nan if value is None else float(value))
            return family

        yield gauge("ready", "1 once the state is loaded and SOURCE opened", snap["ready"])
        yield gauge("healthy", "1 while the loop turns (see /healthz)", self.status.healthy())
        info = GaugeMetricFamily(f"{PREFIX}_info", "the watched SOURCE and the state", labels=["source", "state"])
        info.add_metric([str(snap["source"]), str(snap["state"] or "")], 1.0)
        yield info
        yield gauge("last_poll_timestamp_seconds", "unix time of the last look at SOURCE", snap["polled_at"])
        yield gauge("last_save_timestamp_seconds", "unix time of the last save of the state", snap["saved_at"])
        saved = snap["saved_at"]
        since = None if saved is None else now - saved
        yield gauge("seconds_since_save", "seconds since the last save of the state", since)
        if not snap["ready"]:
            return
        yield gauge("rows_seen", "rows the monitor has consumed (the saved state's count)", snap["rows_seen"])
        yield gauge("next_row", "the next row of SOURCE to read (the cursor)", snap["next_row"])
        yield gauge("source_rows", "rows in SOURCE at the last poll", snap["source_rows"])
        yield gauge("rows_behind", "rows of SOURCE after the cursor (lag)", snap["rows_behind"])
        counters = (("chunks", "chunks processed by this process", snap["chunks"]),
                    ("invalid_rows", "rows with NaN or inf skipped by this process", snap["rows_skipped"]))
        for name, text, value in counters:
            counter = CounterMetricFamily(f"{PREFIX}_{name}", text)
            counter.add_metric([], float(value))
            yield counter
        last = snap["last"] or {}
        yield gauge("statistic", "the drift statistic after the last chunk (unbiased MMD^2)", last.get("statistic"))
        yield gauge("threshold", "the alarm threshold after the last chunk", last.get("threshold"))
        if "log_e_value" in last:
            yield gauge("log_e_value", "the log e-value after the last chunk", last.get("log_e_value"))
        yield gauge("drift", "1 once the monitor has raised an alarm", snap["drift"])
        yield gauge("drift_at_row", "the row of SOURCE of the alarm", snap["drift_at_row"])
        yield gauge("last_alarm_timestamp_seconds", "unix time of this process's alarm", snap["alarm_at"])


def _number(value: Any) -> str:
    """A number as the page shows it: Python's repr (exact), or n/a."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return repr(value) if isinstance(value, float) else str(value)


def _plot(history: list[tuple[int, float, float]], width: int = 640, height: int = 200) -> str:
    """An inline SVG of the statistic (blue) and the threshold (red, dashed) against the row, per chunk."""
    points = [(row, s, t) for row, s, t in history if math.isfinite(s)]
    if len(points) < 2:
        return '<p id="plot">Not enough chunks to plot yet.</p>'
    values = [s for _, s, _ in points] + [t for _, _, t in points if math.isfinite(t)]
    low, high = min(values), max(values)
    high = high if high > low else low + 1.0
    first, last = points[0][0], points[-1][0]
    span = max(last - first, 1)

    def xy(row: int, value: float) -> str:
        x = 40 + (width - 50) * (row - first) / span
        return f"{x:.1f},{10 + (height - 30) * (high - value) / (high - low):.1f}"

    statistic = " ".join(xy(row, s) for row, s, _ in points)
    threshold = " ".join(xy(row, t) for row, _, t in points if math.isfinite(t))
    return (
        f'<svg id="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="statistic and threshold over the last {len(points)} chunks">'
        f'<rect x="40" y="10" width="{width - 50}" height="{height - 30}" fill="none" stroke="#999"/>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{statistic}"/>'
        f'<polyline fill="none" stroke="#d62728" stroke-dasharray="4 3" points="{threshold}"/>'
        f'<text x="2" y="18" font-size="10">{high:.3g}</text>'
        f'<text x="2" y="{height - 20}" font-size="10">{low:.3g}</text>'
        f'<text x="40" y="{height - 5}" font-size="10">row {first:,}</text>'
        f'<text x="{width - 90}" y="{height - 5}" font-size="10">row {last:,}</text></svg>'
    )


def page(status: Status) -> str:
    """The status page (plain HTML, an inline SVG, no script): every number in an element with an id."""
    snap = status.snapshot()
    last = snap["last"] or {}
    rows = [
        ("phase", snap["phase"]), ("source", snap["source"]), ("identity", snap.get("identity")),
        ("state", snap["state"]), ("next_row", snap.get("next_row")), ("rows_seen", snap.get("rows_seen")),
        ("source_rows", snap.get("source_rows")), ("rows_behind", snap.get("rows_behind")),
        ("chunks", snap.get("chunks")), ("statistic", last.get("statistic")), ("threshold", last.get("threshold")),
        ("drift", snap.get("drift")), ("drift_at_row", snap.get("drift_at_row")),
    ]  # fmt: skip
    table = "".join(
        f'<tr><th>{name.replace("_", " ")}</th><td id="{name}">{html.escape(_number(value))}</td></tr>'
        for name, value in rows
    )
    alarm = snap["alarm"]
    if alarm is None:
        alarm_html = '<p id="alarm">No alarm in this session.</p>'
    else:
        top = alarm.get("top_rows_source", alarm.get("top_rows", []))
        cells = "".join(
            f"<tr><td>{row}</td><td>{_number(value)}</td></tr>" for row, value in zip(top, alarm.get("top_values", []))
        )
        columns = alarm.get("columns")
        moved = "" if columns is None else "<p>Columns whose window mean moved most (z): " + ", ".join(
            f'<span class="column">{column} ({_number(alarm["column_statistics"][column])})</span>'
            for column in columns[:10]
        ) + "</p>"  # fmt: skip
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snap["alarm_at"]))
        alarm_html = (
            f'<div id="alarm"><p>Drift at row <span id="alarm_row">{_number(alarm.get("drift_at_row"))}</span> '
            f"({when}).</p>{moved}<table><tr><th>row</th><th>witness</th></tr>{cells}</table></div>"
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">'
        f"<title>streamrff watch: {html.escape(str(snap['source']))}</title>"
        "<style>body{font-family:sans-serif;margin:1em}th{text-align:left;padding-right:1em}</style></head><body>"
        f"<h1>streamrff watch</h1><table>{table}</table><h2>Statistic and threshold</h2>{_plot(snap['history'])}"
        f"<h2>Last alarm</h2>{alarm_html}</body></html>"
    )


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # scrapes every few seconds would flood the service's log


class StatusServer:
    """The HTTP server of a :class:`Status`, on a daemon thread; :meth:`close` stops it."""

    def __init__(self, status: Status, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(status))
        self.status = status
        self.metrics = make_wsgi_app(registry)
        self.server = make_server(host, port, self.app, _Server, handler_class=_QuietHandler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="streamrff-status", daemon=True)
        self.thread.start()

    def app(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return self.metrics(environ, start_response)
        if path in ("/healthz", "/readyz"):
            good = self.status.healthy() if path == "/healthz" else self.status.watch is not None
            text = ("ok\n" if good else f"not {'healthy' if path == '/healthz' else 'ready'}: {self.status.phase}\n")
            start_response("200 OK" if good else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [text.encode()]
        if path in ("/", "/index.html"):
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [page(self.status).encode()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /, /metrics, /healthz or /readyz\n"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(args: argparse.Namespace, host: str, port: int) -> Status:
    """Start serving the status of this session; returns it (its ``close`` stops the server)."""
    from ..errors import InputError
    from . import options

    try:
        import prometheus_client  # noqa: F401 - an extra
    except ImportError:
        raise options.UsageError(
            "--metrics-port needs prometheus-client. Install the extra: pip install 'streamrff[service]'."
        ) from None
    status = Status(args)
    try:
        server = StatusServer(status, host, port)
    except OSError as error:
        raise InputError(
            f"--metrics-port {port}: cannot listen on {host}:{port} ({error.strerror}). Choose another port."
        ) from None
    status.close = server.close  # type: ignore[attr-defined]
    print(f"streamrff watch: serving metrics on http://{host}:{server.port}/metrics (status page /, /healthz, /readyz)",
          file=sys.stderr, flush=True)  # fmt: skip
    return status
