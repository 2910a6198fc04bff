"""Drift monitoring: run length under no change, detection delay, update time and memory, side by side.

Two detectors at equal window W and ERT, on the same streams:

- ours: ``streamrff.DriftMonitor`` (a reference sketch: D-vector sums; O(D) per row; thresholds
  calibrated from the reference by simulated streams, see ``streamrff.drift.calibrate_thresholds``);
- alibi-detect's ``MMDDriftOnline`` (Cobb, Van Looveren & Klaise 2022) with its PyTorch backend on
  the CPU: the reference rows in memory, O(N_ref) kernel values per row. alibi-detect 0.13 requires
  numpy < 2, so it cannot be installed beside today's numpy in the project's environment; it runs
  in a venv of its own (``--alibi-python``, e.g. a venv made with ``pip install torch==2.13.0
  'alibi-detect[torch]'``), in a child process that this script starts with ``--alibi-worker``
  (which imports neither streamrff nor dask). Without ``--alibi-python`` only ours runs.

Tables (the issue's Targets):

1. calibration: mean run length under no change (a new run after each alarm, at least
   ``--calibration-rows`` rows and 200 ERT, so about 200 runs: the mean of 20 geometric runs has a
   standard error of 22%) / ERT, with its standard error, for ERT in {1 000, 10 000}, W in {100, 500}, Gaussian and
   Student-t (3 d.o.f.) data in d = 8; the share of runs that end within the window's fill, next
   to the geometric law's ``1 - (1 - 1/ERT)^(W - 1)``;
2. delay: d = 8, W = 200, ERT = 1 000, a shift of one standard deviation in one coordinate after
   300 calm rows (a run with a false alarm among them is restarted): median delay, share missed
   within 1 000 rows; for ours and alibi-detect at reference sizes 1 000 and 10 000;
3. calibration cost of ours for ERT = 100 000 at W = 200, D = 512;
4. update throughput of ours at d = 8, D = 512 (one BLAS thread) for batches of 1, 100 and
   1 000 rows: rows/s and time per call, with the load average (alibi-detect's time per row is in
   table 1b); the monitor's state in bytes;
5. memory: in a fresh process, a monitor fitted on ``--big-reference`` rows (default 1e7) read
   from a zarr array: its state in bytes and the process's peak RSS against the reference's size
   (alibi-detect's peak RSS is in table 2).

Timings on a shared, loaded machine are not figures: the lead takes them on an idle machine.

Run: python benchmarks/bench_drift.py [--quick] [--alibi-python /tmp/venv/bin/python] [--only TABLE ...]
[--big-reference ROWS] [--reference-sizes 1000,10000] [--alibi-rows ROWS]

The alibi-detect worker reports its progress (configured, every 10 000 rows, the delay streams)
with its resident memory, so a run of an hour shows where it is.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

DIM = 8
#: Starts the alibi-detect worker's progress lines on its stderr (``progress``; ``run_alibi`` prints them).
PROGRESS_MARKER = "alibi-progress: "
TABLES = ("calibration", "alibi", "delay", "cost", "throughput", "memory")


#: Expected runs per cell of the calibration table (its rows are at least this many ERTs).
RUNS_PER_CELL = 200


def draw(rng: np.random.Generator, n: int, family: str) -> np.ndarray:
    rows = rng.normal(size=(n, DIM)) if family == "normal" else rng.standard_t(3, size=(n, DIM))
    return rows.astype(np.float32)


def peak_rss_mb() -> float:
    return _status_mb("VmHWM:")


def rss_mb() -> float:
    return _status_mb("VmRSS:")


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


# ---- alibi-detect, in its own venv ---------------------------------------------------------------


def alibi_worker(config: dict) -> dict:
    """Run alibi-detect's MMDDriftOnline on the streams of ``config`` (seeded like ours); print JSON."""
    import torch
    from alibi_detect.cd import MMDDriftOnline

    torch.set_num_threads(1)
    torch.manual_seed(config["seed"])  # its bootstrap permutations (torch.randperm) are then repeatable
    rng = np.random.default_rng(config["seed"])
    reference = draw(rng, config["n_reference"], config["family"])
    start = time.perf_counter()
    detector = MMDDriftOnline(
        reference, ert=config["ert"], window_size=config["window"], backend="pytorch",
        n_bootstraps=config["n_bootstraps"], verbose=False,
    )  # fmt: skip
    configure = time.perf_counter() - start
    progress(f"configured in {configure:.0f} s")
    result = {"configure_seconds": configure}  # one configuration serves both tables (it takes minutes)
    if config["rows"]:
        stream = draw(np.random.default_rng(config["calibration_stream_seed"]), config["rows"], config["family"])
        lengths, run, start = [], 0, time.perf_counter()
        for index, row in enumerate(stream, 1):
            run += 1
            if detector.predict(row, return_test_stat=False)["data"]["is_drift"]:
                lengths.append(run)
                run = 0
                detector.reset_state()
            if index % 10_000 == 0:
                seconds = time.perf_counter() - start
                progress(f"{index:,} rows without change, {len(lengths)} alarms, {seconds / index * 1e6:.0f} us/row")
        result["seconds_per_row"] = (time.perf_counter() - start) / len(stream)
        result["run_lengths"] = lengths
    if config["n_streams"]:
        detector.reset_state()
        result["delays"] = delays(
            lambda rows: first_alarm_alibi(detector, rows), detector.reset_state, config["n_streams"],
            config["delay_stream_seed"], config["family"],
        )  # fmt: skip
        progress(f"{config['n_streams']} delay streams")
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def first_alarm_alibi(detector, rows: np.ndarray) -> int | None:
    for index, row in enumerate(rows):
        if detector.predict(row, return_test_stat=False)["data"]["is_drift"]:
            return index
    return None


def alibi_results(args: argparse.Namespace, n_reference: int) -> dict:
    """alibi-detect's run lengths (table 1b) and delays (table 2) at ``n_reference``, from one configuration."""
    if n_reference not in args.alibi_cache:
        config = {
            "seed": 2, "family": "normal", "n_reference": n_reference, "ert": args.delay_ert,
            "window": args.delay_window, "n_bootstraps": args.alibi_bootstraps_per_ert * args.delay_ert,
            "rows": args.alibi_rows if "alibi" in args.tables else 0, "calibration_stream_seed": 4,
            "n_streams": args.streams if "delay" in args.tables else 0, "delay_stream_seed": 3,
        }  # fmt: skip
        args.alibi_cache[n_reference] = run_alibi(args.alibi_python, config)
    return args.alibi_cache[n_reference]


def run_alibi(python: str, config: dict) -> dict:
    """Run the worker in ``python``; its progress lines (stderr) are printed as they come."""
    worker = subprocess.Popen(
        [python, os.path.abspath(__file__), "--alibi-worker", json.dumps(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with ThreadPoolExecutor(1) as reader:
        stdout = reader.submit(worker.stdout.read)  # read both pipes at once: neither can fill up and block
        stderr_tail, label = deque(maxlen=40), f"    [alibi N_ref={config['n_reference']}] "
        for line in worker.stderr:
            stderr_tail.append(line)
            if line.startswith(PROGRESS_MARKER):
                print(label + line.removeprefix(PROGRESS_MARKER), end="", flush=True)
        status = worker.wait()
        output = stdout.result()
    if status:
        how = f"killed by signal {-status} ({signal.Signals(-status).name})" if status < 0 else f"exit status {status}"
        raise RuntimeError(f"alibi-detect worker failed: {how}\n{''.join(stderr_tail)}")
    return json.loads(output.strip().splitlines()[-1])


def progress(message: str) -> None:
    """A worker's progress line (on stderr, so that stdout carries only the result), with its RSS."""
    print(f"{PROGRESS_MARKER}{message}; RSS {rss_mb():,.0f} MB", file=sys.stderr, flush=True)


# ---- shared protocol --------------------------------------------------------------------------


def delays(first_alarm, reset, n_streams: int, seed: int, family: str, calm: int = 300, horizon: int = 1000) -> list:
    """Per stream: calm rows (restarted after a false alarm), then shifted rows; rows to the alarm or None."""
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(n_streams):
        reset()
        while first_alarm(draw(rng, calm, family)) is not None:
            reset()
        shifted = draw(rng, horizon, family)
        shifted[:, 0] += 1.0
        found.append(first_alarm(shifted))
    return found


def summarise_delays(found: list) -> str:
    """Median delay, with a 90% bootstrap interval of the median (misses count as the horizon)."""
    hit = [value for value in found if value is not None]
    median = float(np.median(hit)) if hit else float("nan")
    delays = np.array([1000 if value is None else value for value in found], float)
    medians = np.median(np.random.default_rng(0).choice(delays, (10_000, delays.size)), axis=1)
    low, high = np.percentile(medians, [5, 95])
    return (
        f"median delay {median:7.1f} rows (90% interval {low:.0f}-{high:.0f}), "
        f"missed within 1000 rows: {len(found) - len(hit)}/{len(found)}"
    )


def our_run_lengths(monitor, stream: np.ndarray, batch: int) -> np.ndarray:
    lengths, position = [], 0
    monitor.reset()
    while position < stream.shape[0]:
        seen = monitor.n_rows_seen_
        update = monitor.update(stream[position : position + batch])
        if not update.drift:
            position += batch
            continue
        consumed = update.drift_at + 1 - seen
        lengths.append(update.run_length - update.statistic.shape[0] + consumed)
        position += consumed
        monitor.n_rows_seen_ = update.drift_at + 1  # the rows after the alarm start the next run
        monitor.reset()
    return np.array(lengths)


def our_first_alarm(monitor, rows: np.ndarray) -> int | None:
    seen = monitor.n_rows_seen_
    update = monitor.update(rows)
    return None if not update.drift else max(update.drift_at - seen, 0)


# ---- tables -------------------------------------------------------------------------------------


def calibration_table(args: argparse.Namespace) -> None:
    import streamrff as srf

    print("\n1. Mean run length under no change / ERT (ours; a new run after each alarm)")
    for family in ("normal", "student_t3"):
        for ert in args.erts:
            for window in args.windows:
                rng = np.random.default_rng(1)
                start = time.perf_counter()
                monitor = srf.DriftMonitor(window, ert, n_features=args.features, seed=0).fit(draw(rng, 20_000, family))
                fit_seconds = time.perf_counter() - start
                rows = max(args.calibration_rows, RUNS_PER_CELL * ert)
                lengths = our_run_lengths(monitor, draw(rng, rows, family), batch=min(window, ert // 2))
                geometric = 1 - (1 - 1 / ert) ** (window - 1)
                error = lengths.std() / np.sqrt(len(lengths)) / ert
                print(
                    f"  {family:10s} ERT={ert:6d} W={window:4d}: {len(lengths):5d} runs over {rows} rows, "
                    f"mean/ERT {lengths.mean() / ert:5.2f} +- {error:4.2f}, "
                    f"within fill {np.mean(lengths <= window):.3f} "
                    f"(geometric {geometric:.3f}); fit+calibration {fit_seconds:.1f} s"
                )


def delay_table(args: argparse.Namespace) -> None:
    import streamrff as srf

    print(f"\n2. Delay: d={DIM}, W={args.delay_window}, ERT={args.delay_ert}, 1-sd shift in one coordinate")
    for n_reference in args.reference_sizes:
        reference = draw(np.random.default_rng(2), n_reference, "normal")
        monitor = srf.DriftMonitor(args.delay_window, args.delay_ert, n_features=args.features, seed=0).fit(reference)
        found = delays(lambda rows: our_first_alarm(monitor, rows), monitor.reset, args.streams, 3, "normal")
        print(f"  ours   N_ref={n_reference:6d}: {summarise_delays(found)}")
        if args.alibi_python:
            result = alibi_results(args, n_reference)
            print(
                f"  alibi  N_ref={n_reference:6d}: {summarise_delays(result['delays'])}; "
                f"configuration {result['configure_seconds']:.1f} s, peak RSS {result['peak_rss_mb']:.0f} MB"
            )


def alibi_calibration_table(args: argparse.Namespace) -> None:
    import streamrff as srf

    ert, window = args.delay_ert, args.delay_window
    print(f"\n1b. Side by side: run length under no change, d={DIM}, W={window}, ERT={ert}, normal data")
    for n_reference in args.reference_sizes:
        reference = draw(np.random.default_rng(2), n_reference, "normal")
        stream = draw(np.random.default_rng(4), args.alibi_rows, "normal")
        monitor = srf.DriftMonitor(window, ert, n_features=args.features, seed=0).fit(reference)
        monitor.update(stream[:2])  # compile the kernel outside the timing
        start = time.perf_counter()  # the whole stream, resets included, as alibi-detect's time is taken
        ours = our_run_lengths(monitor, stream, batch=1)
        per_row = (time.perf_counter() - start) / len(stream)
        theirs = alibi_results(args, n_reference)
        lengths = np.array(theirs["run_lengths"] or [np.nan])
        print(
            f"  N_ref={n_reference:6d}: ours mean/ERT {ours.mean() / ert:5.2f} ({len(ours)} runs), "
            f"{per_row * 1e6:8.1f} us/row (rows one at a time); alibi mean/ERT {np.nanmean(lengths) / ert:5.2f} "
            f"({len(theirs['run_lengths'])} runs), {theirs['seconds_per_row'] * 1e6:8.1f} us/row; "
            f"time ratio alibi/ours {theirs['seconds_per_row'] / per_row:6.1f}"
        )


def cost_table(args: argparse.Namespace) -> None:
    import streamrff as srf
    from streamrff.drift.calibration import calibrate_thresholds, default_stream_count

    print(f"\n3. Calibration cost: ERT={args.cost_ert}, W=200, D=512")
    reference = draw(np.random.default_rng(5), 20_000, "normal")
    feature_map = srf.RFF(n_features=512, bandwidth="median", seed=0).fit(reference[:2000])
    bank = feature_map.transform(reference[:4096])
    streams = default_stream_count(200, float(args.cost_ert), 512)
    calibrate_thresholds(bank[:64], 3, 10.0, 100, 0)  # compile the kernel outside the timing
    start = time.perf_counter()
    calibrate_thresholds(bank, 200, float(args.cost_ert), streams, 0)
    print(f"  {streams} simulated streams of 400 rows: {time.perf_counter() - start:.1f} s (target < 30 s)")


def throughput_table(args: argparse.Namespace) -> None:
    from threadpoolctl import threadpool_limits

    import streamrff as srf

    print(f"\n4. Update throughput (d={DIM}, D=512, W=200, one BLAS thread) and memory")
    reference = draw(np.random.default_rng(6), 100_000, "normal")
    monitor = srf.DriftMonitor(200, 1000, n_features=512, seed=0, n_streams=2000).fit(reference)
    stream = draw(np.random.default_rng(7), args.throughput_rows, "normal")
    with threadpool_limits(1):
        monitor.update(stream[:2])  # compile the kernel outside the timing
        for batch in (1, 100, 1000):
            rows = stream[: min(len(stream), 20_000 if batch == 1 else len(stream))]
            monitor.reset()
            load = os.getloadavg()[0]
            start = time.perf_counter()
            for position in range(0, len(rows), batch):
                monitor.update(rows[position : position + batch])
            seconds = time.perf_counter() - start
            print(
                f"  batches of {batch:5d} rows: {len(rows) / seconds:12,.0f} rows/s, "
                f"{seconds / len(rows) * batch * 1e6:9.1f} us per update call (target >= 100,000 rows/s; "
                f"1-min load average {load:.2f} on {os.cpu_count()} cores)"
            )

    print(f"  monitor state, reference of 1e5 rows in memory: {state_bytes(monitor):,} bytes")


def state_bytes(fitted) -> int:
    return sum(value.nbytes for value in vars(fitted).values() if isinstance(value, np.ndarray))


def memory_worker(path: str) -> dict:
    """In a fresh process: fit a monitor on the zarr reference at ``path``; its state and the peak RSS."""
    import streamrff as srf

    # A warm-up fit on 20 000 rows in memory: the imports, the compiled kernels and the calibration's buffers.
    srf.DriftMonitor(200, 1000, n_features=512, seed=0, n_streams=2000).fit(
        draw(np.random.default_rng(9), 20_000, "normal")
    )
    before = peak_rss_mb()
    start = time.perf_counter()
    monitor = srf.DriftMonitor(200, 1000, n_features=512, seed=0, n_streams=2000).fit(path)
    return {
        "fit_seconds": time.perf_counter() - start,
        "state_bytes": state_bytes(monitor),
        "rss_before_mb": before,
        "peak_rss_mb": peak_rss_mb(),
        "reference_count": monitor.reference_count_,
    }


def memory_table(args: argparse.Namespace) -> None:
    import zarr

    print(f"\n5. Memory: a monitor fitted on {args.big_reference:,} reference rows read from zarr (a fresh process)")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "reference.zarr")
        big = zarr.create_array(path, shape=(args.big_reference, DIM), chunks=(500_000, DIM), dtype="float32")
        rng = np.random.default_rng(8)
        for start_row in range(0, args.big_reference, 500_000):
            stop = min(args.big_reference, start_row + 500_000)
            big[start_row:stop] = draw(rng, stop - start_row, "normal")
        completed = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--memory-worker", path],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if completed.returncode:
            raise RuntimeError(f"memory worker failed:\n{completed.stderr[-3000:]}")
        result = json.loads(completed.stdout.strip().splitlines()[-1])
    reference_mb = args.big_reference * DIM * 4 / 2**20
    print(
        f"  reference {result['reference_count']:,} rows x {DIM} float32 = {reference_mb:,.0f} MB; monitor state "
        f"{result['state_bytes']:,} bytes; fit {result['fit_seconds']:.1f} s; peak RSS {result['peak_rss_mb']:.0f} MB "
        f"({result['rss_before_mb']:.0f} MB after a warm-up fit on 20 000 rows in memory, so the fit added "
        f"{result['peak_rss_mb'] - result['rss_before_mb']:.0f} MB: peak / reference size "
        f"{(result['peak_rss_mb'] - result['rss_before_mb']) / reference_mb:.2f})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a check that the script runs")
    parser.add_argument("--alibi-python", help="python of a venv with alibi-detect[torch] (runs it side by side)")
    parser.add_argument("--alibi-worker", help=argparse.SUPPRESS)
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--big-reference", type=int, help="reference rows of table 5 (default 1e7, 1e5 with --quick)")
    parser.add_argument("--only", action="append", choices=TABLES, help="run only this table (repeatable)")
    parser.add_argument("--alibi-rows", type=int, help="rows of alibi-detect's no-change stream (default 1e5)")
    parser.add_argument(
        "--reference-sizes", type=lambda text: [int(size) for size in text.split(",")],
        help="reference rows of tables 1b and 2, comma-separated (default 1000,10000; 1000 with --quick)",
    )  # fmt: skip
    parser.add_argument(
        "--alibi-bootstraps-per-ert", type=int,
        help=(
            "alibi-detect's n_bootstraps / ERT (default 2: 2 000 at ERT = 1 000, twice its own default; its "
            "configuration copies an (N_ref - 2W) x N_ref block of the kernel matrix per bootstrap, 23.5 min "
            "for 2 000 at 10 000 reference rows here; its time per update does not depend on it)"
        ),
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.alibi_worker:
        print(json.dumps(alibi_worker(json.loads(args.alibi_worker))))
        return
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker)))
        return
    quick = args.quick
    args.erts = [200] if quick else [1000, 10_000]
    args.windows = [50] if quick else [100, 500]
    args.calibration_rows = 20_000 if quick else 200_000
    args.reference_sizes = args.reference_sizes or ([1000] if quick else [1000, 10_000])
    args.delay_window, args.delay_ert = (50, 200) if quick else (200, 1000)
    args.streams = 5 if quick else 40
    args.alibi_rows = args.alibi_rows or (2000 if quick else 100_000)  # about 100 runs at ERT = 1 000
    args.alibi_bootstraps_per_ert = args.alibi_bootstraps_per_ert or (5 if quick else 2)
    args.cost_ert = 10_000 if quick else 100_000
    args.throughput_rows = 20_000 if quick else 200_000
    args.big_reference = args.big_reference or (100_000 if quick else 10_000_000)
    if quick:
        args.features = min(args.features, 128)
    print(f"bench_drift: {'quick' if quick else 'full'} run, {os.cpu_count()} cores, python {sys.version.split()[0]}")
    tables = {
        "calibration": calibration_table,
        "alibi": alibi_calibration_table if args.alibi_python else None,
        "delay": delay_table,
        "cost": cost_table,
        "throughput": throughput_table,
        "memory": memory_table,
    }
    args.tables = [name for name, table in tables.items() if table is not None and (not args.only or name in args.only)]
    args.alibi_cache = {}
    for name in args.tables:
        tables[name](args)


if __name__ == "__main__":
    main()
