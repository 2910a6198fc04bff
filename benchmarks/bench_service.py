"""``streamrff watch --state`` as a service: time to the first saved state, restarts, and the cost of metrics.

Issue 50's targets, printed as ratios:

1. first start: the time from the command's start to its first saved state (DIR/fit: the fit, before the
   calibration) and to its published monitor (DIR/monitor), against the time to fit the map and sketch the
   reference (``DriftMonitor._fit_uncalibrated`` in a fresh process, imports excluded). Target: first saved
   state <= 2x.
2. a restart: resumed without recalibrating (its log says so), and a --refit served by the cached calibration.
3. serving metrics: rows/s of a watch with --metrics-port and a scraper hitting /metrics and / every 0.1 s
   (150x Prometheus's default 15 s), against the same watch without it. Target: <= 2 % slower.

Run: ``nice -n 10 python benchmarks/bench_service.py [--rows 200000] [--features 256] [--ert 100000]``.
Timings on a shared machine are noisy: the script prints the load average with them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
import zarr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVIRONMENT = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

FIT_ONLY = """
import sys, time
import streamrff as srf
import streamrff.drift.monitor, streamrff.engine  # the imports the command makes before its fit: not timed
path, window, ert, features = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
started = time.perf_counter()
srf.DriftMonitor(window, ert, n_features=features)._fit_uncalibrated(path)
print(time.perf_counter() - started)
"""


def cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "streamrff.cli", "watch", *argv]


def first_start(source: str, reference: str, state: str, fit: list[str]) -> tuple[float, float, float, str]:
    """Seconds from the start of the command to DIR/fit, to DIR/monitor, to its end; and its log."""
    started = time.perf_counter()
    argv = cli(source, "--state", state, "--reference", reference, *fit, "--max-rows", "1")
    process = subprocess.Popen(argv, env=ENVIRONMENT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    to_fit = to_monitor = None
    while process.poll() is None:
        now = time.perf_counter() - started
        if to_fit is None and os.path.isdir(os.path.join(state, "fit")):
            to_fit = now
        if to_monitor is None and os.path.isdir(os.path.join(state, "monitor")):
            to_monitor = now
        time.sleep(0.005)
    total = time.perf_counter() - started
    log = process.stderr.read()
    if process.returncode != 0:
        raise SystemExit(f"watch failed: {log}")
    return to_fit or total, to_monitor or total, total, log


def timed_watch(source: str, state: str, scrape: bool, port: int, rows: int, every: float = 0.1) -> tuple[float, float]:
    """Wall seconds a resumed watch takes over ``rows`` rows of SOURCE after its start line (from row 0; --follow
    only to log the start line), and the CPU seconds (user + system) of the whole process, scraped or not."""
    argv = cli(source, "--state", state, "--reference", "unused", "--from-row", "0", "--save-interval", "5",
               "--follow", "--poll", "0.1", "--max-rows", str(rows))
    if scrape:
        argv += ["--metrics-port", str(port)]
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            for path in ("/metrics", "/"):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read()
                except OSError:
                    pass
            stop.wait(every)

    thread = threading.Thread(target=scraper, daemon=True)
    if scrape:
        thread.start()
    process = subprocess.Popen(argv, env=ENVIRONMENT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:  # the clock starts at the start line: the rows' processing only
        if "watching" in line:
            break
    started = time.perf_counter()
    process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    stop.set()
    if status != 0:
        raise SystemExit("watch failed")
    return elapsed, usage.ru_utime + usage.ru_stime


def scrape_cpu(state: str, source: str) -> float:
    """CPU seconds of one scrape of /metrics plus one of / by the status server's app, on a resumed session."""
    import argparse as _argparse
    import types

    from streamrff.cli.status import Status, StatusServer
    from streamrff.drift import load_monitor
    from streamrff.sources.rows import open_source

    monitor = load_monitor(os.path.join(state, "monitor"))
    args = _argparse.Namespace(source=source, state=state, save_monitor=None, poll=5.0)
    status = Status(args)
    cursor = dict(monitor.source_cursor_ or {})
    watch = types.SimpleNamespace(monitor=monitor, source=open_source(source), cursor=cursor, position=1000,
                                  chunks=200, rows_skipped=0, saved_once=True, status=None)  # fmt: skip
    status.attach(watch)
    rng = np.random.default_rng(0)
    for end in range(0, 200 * 5000, 5000):  # a full plot history
        status.event({"event": "chunk", "rows": [end, end + 5000], "statistic": float(rng.normal()), "threshold": 1.0})
    server = StatusServer(status, "127.0.0.1", 0)
    try:
        times = []
        for _ in range(200):
            started = time.process_time()
            for path in ("/metrics", "/"):
                environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": "", "wsgi.url_scheme": "http",
                           "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "0", "HTTP_ACCEPT": "text/plain"}  # fmt: skip
                b"".join(server.app(environ, lambda *_: None))
            times.append(time.process_time() - started)
    finally:
        server.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the watched array")
    parser.add_argument("--reference-rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--ert", type=float, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scrape-every", type=float, default=0.1, help="seconds between scrapes (Prometheus: 15)")
    parser.add_argument("--skip-first-start", action="store_true", help="only the restart and the metrics' cost")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-service-")
    try:
        rng = np.random.default_rng(0)
        reference, source = os.path.join(folder, "ref.zarr"), os.path.join(folder, "live.zarr")
        zarr.create_array(reference, data=rng.normal(size=(args.reference_rows, 8)).astype("float32"),
                          chunks=(10_000, 8))  # fmt: skip
        zarr.create_array(source, data=rng.normal(size=(args.rows, 8)).astype("float32"), chunks=(5_000, 8))
        fit = ["--window", str(args.window), "--ert", f"{args.ert:g}", "--features", str(args.features)]
        print(f"load average before: {os.getloadavg()}; D = {args.features}, window {args.window}, ERT {args.ert:g}, "
              f"reference {args.reference_rows:,} x 8 rows")  # fmt: skip

        if args.skip_first_start:
            first_start(source, reference, os.path.join(folder, "state-0"), fit)
        else:
            fits, fit_walls = [], []
            for _ in range(args.repeats):
                argv = [sys.executable, "-c", FIT_ONLY, reference, str(args.window), f"{args.ert:g}",
                        str(args.features)]
                started = time.perf_counter()
                out = subprocess.run(argv, env=ENVIRONMENT, capture_output=True, text=True, check=True)
                fit_walls.append(time.perf_counter() - started)
                fits.append(float(out.stdout.strip()))
            firsts = []
            for repeat in range(args.repeats):
                state = os.path.join(folder, f"state-{repeat}")
                firsts.append(first_start(source, reference, state, fit))
            baseline, baseline_wall = statistics.median(fits), statistics.median(fit_walls)
            to_fit = statistics.median(first[0] for first in firsts)
            to_monitor = statistics.median(first[1] for first in firsts)
            logged = [re.search(r"saved the fit in ([\d.]+) s", first[3]) for first in firsts]
            inside = statistics.median(float(match.group(1)) for match in logged if match)
            print(f"1. map fit + reference sketch in a fresh process: {baseline:.2f} s (imports excluded; median of "
                  f"{args.repeats}: {', '.join(f'{t:.2f}' for t in fits)}), {baseline_wall:.2f} s with the "
                  "interpreter's start and imports")  # fmt: skip
            print(f"   first start, fit started -> first saved state (DIR/fit; the command's log): {inside:.2f} s = "
                  f"{inside / baseline:.2f}x the fit + sketch (target <= 2x)")  # fmt: skip
            print(f"   first start, command start -> first saved state (DIR/fit): {to_fit:.2f} s = "
                  f"{to_fit / baseline_wall:.2f}x the fresh process's fit + sketch with imports")  # fmt: skip
            print(f"   first start, command start -> published monitor (DIR/monitor, calibrated): {to_monitor:.2f} s = "
                  f"{to_monitor / baseline_wall:.2f}x")  # fmt: skip

        state = os.path.join(folder, "state-0")
        started = time.perf_counter()
        log = subprocess.run(cli(source, "--state", state, "--reference", reference, *fit, "--max-rows", "1"),
                             env=ENVIRONMENT, capture_output=True, text=True, check=True).stderr  # fmt: skip
        restart = time.perf_counter() - started
        recalibrated = "calibrated the thresholds" in log or "fitting" in log
        print(f"2. restart (resume): {restart:.2f} s to its end, recalibrated: {recalibrated}")
        started = time.perf_counter()
        argv = cli(source, "--state", state, "--reference", reference, *fit, "--max-rows", "1", "--refit")
        log = subprocess.run(argv, env=ENVIRONMENT, capture_output=True, text=True, check=True).stderr
        refit = time.perf_counter() - started
        print(f"   --refit: {refit:.2f} s, calibration from the cache: {'from the cached calibration' in log}")

        plain, scraped, startup = [], [], []
        for repeat in range(args.repeats):  # interleaved: the machine's load drifts alike for both
            startup.append(timed_watch(source, state, False, 0, 1)[1])
            plain.append(timed_watch(source, state, False, 0, args.rows))
            scraped.append(timed_watch(source, state, True, 18_900 + repeat, args.rows, args.scrape_every))
        base_cpu = statistics.median(startup)  # the start (imports, loading the state): not the rows' cost
        wall_plain = args.rows / statistics.median(wall for wall, _ in plain)
        wall_scraped = args.rows / statistics.median(wall for wall, _ in scraped)
        cpu_plain = args.rows / (statistics.median(cpu for _, cpu in plain) - base_cpu)
        cpu_scraped = args.rows / (statistics.median(cpu for _, cpu in scraped) - base_cpu)
        print(f"3. watch of {args.rows:,} rows from a resumed state, without metrics / with --metrics-port scraped "
              f"(/metrics and /) every {args.scrape_every:g} s:")  # fmt: skip
        print(f"   rows per CPU second of the process (its start, {base_cpu:.2f} s CPU, subtracted): "
              f"{cpu_plain:,.0f} / {cpu_scraped:,.0f}: cost {100 * (1 - cpu_scraped / cpu_plain):+.1f} % "
              "(target <= 2 %)")  # fmt: skip
        print(f"   rows per wall second after the start line: {wall_plain:,.0f} / {wall_scraped:,.0f}: cost "
              f"{100 * (1 - wall_scraped / wall_plain):+.1f} %; runs (wall s, CPU s) plain "
              f"{', '.join(f'({w:.2f}, {c:.2f})' for w, c in plain)}, scraped "
              f"{', '.join(f'({w:.2f}, {c:.2f})' for w, c in scraped)}")  # fmt: skip
        per_scrape = scrape_cpu(state, source)
        print(f"4. CPU per scrape of /metrics and / (the WSGI app, in process, median of 200): "
              f"{1e3 * per_scrape:.2f} ms; scraping every 15 s costs "
              f"{100 * per_scrape / 15:.4f} % of a core (every 0.1 s: {100 * per_scrape / 0.1:.2f} %)")  # fmt: skip
        print(f"load average after: {os.getloadavg()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
