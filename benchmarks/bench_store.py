"""The sketch store (issue #45): range queries, object reads per range, and the cost of an append.

Tables (the issue's Targets):

1. range query time over a store of one year of hourly buckets (8 760 buckets, D = 1 024, sums
   only) on local disk: the mean, median and largest time of ``store.range(a, b)`` over random
   ranges, and the records each read (target: < 50 ms);
2. object reads per range on moto's S3 server (the same store copied there): the GET requests
   each ``store.range`` sends, counted on the S3 client (target: <= 32), and the requests of
   ``SketchStore.open`` (once per process);
3. appending one bucket of 100 000 rows (d = 16, D = 1 024) against sketching those rows alone
   with ``streamrff.sketch``, side by side in this process (target: <= 1.1x);
4. bytes per bucket at D = 1 024 and 4 096, measured on disk, without moments and with moments per
   block of 32 buckets or per bucket (``SketchStore.create(..., moments=k)``);
5. client memory for a store of 100 000 buckets (target: < 500 MB): the peak of Python's allocations
   (tracemalloc, numpy arrays included) and the process's peak RSS while opening the store,
   describing it, reading ranges, appending a bucket and testing two ranges of 1 000 buckets.

The store of tables 1-2 is filled with synthetic bucket sums (the records a year of appends
would leave; appending 876 million rows would take hours), written through the store's own
record writer and rollups. Timings on a shared, loaded machine are not figures: the lead takes
them on an idle machine.

Run: python benchmarks/bench_store.py [--buckets 8760] [--features 1024] [--queries 200] [--skip-s3]
     [--memory-buckets 100000] [--memory-features 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import streamrff as srf
from streamrff.formats.store import HEADER, Record
from streamrff.store.records import _blocks


def _fill(store: srf.SketchStore, n_buckets: int, rng: np.random.Generator) -> float:
    """Publish ``n_buckets`` synthetic bucket records and their rollups; seconds taken."""
    started = time.perf_counter()
    rows, width = store.bucket_rows, store.feature_map.n_features_out_
    known = list(range(n_buckets))
    cache: dict = {}
    for bucket in range(n_buckets):
        record = Record(
            level=0, index=bucket, count=rows, n_invalid=0, squared_norm_sum=float(rows), first_row=bucket * rows,
            stop_row=(bucket + 1) * rows, written_at=time.time(), source_digest=os.urandom(32).hex(), signed=False,
            feature_sum=rng.normal(size=width) * 100,
        )  # fmt: skip
        cache[(0, bucket)] = store._publish(record, None)
        store._roll_up(bucket, known, cache, None)
        cache = {key: value for key, value in cache.items() if key[0] > 0 or key[1] >= bucket - 1}
    return time.perf_counter() - started


def _fill_direct(store: srf.SketchStore, n_buckets: int, rng: np.random.Generator) -> float:
    """Write ``n_buckets`` synthetic bucket records and all their rollups straight into place (no reads, no
    staging: the records an append would leave, in a fraction of the time); seconds taken."""
    from streamrff.formats.store import encode_record

    started = time.perf_counter()
    rows, width = store.bucket_rows, store.feature_map.n_features_out_
    base = Path(store.path) / "records" / "c"
    level_records = []
    for bucket in range(n_buckets):
        level_records.append(Record(
            level=0, index=bucket, count=rows, n_invalid=0, squared_norm_sum=float(rows), first_row=bucket * rows,
            stop_row=(bucket + 1) * rows, written_at=time.time(), source_digest=os.urandom(32).hex(), signed=False,
            feature_sum=rng.normal(size=width) * 100,
        ))  # fmt: skip
    level = 0
    while level_records:
        for record in level_records:
            folder = base / str(store._root.slot(record.level, record.index))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "0").write_bytes(encode_record(record, store._root))
        level += 1
        pairs = [(level_records[i], level_records[i + 1]) for i in range(0, len(level_records) - 1, 2)]
        level_records = [store._sum_record(level, a.index // 2, [a, b]) for a, b in pairs]
    return time.perf_counter() - started


def _ranges(n_buckets: int, n: int, rows: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    pairs = []
    for _ in range(n):
        a, b = sorted(rng.choice(n_buckets + 1, size=2, replace=False))
        pairs.append((int(a) * rows, int(b) * rows))
    return pairs


def table_ranges(store: srf.SketchStore, ranges: list[tuple[int, int]]) -> None:
    times, reads = [], []
    for start, stop in ranges:
        began = time.perf_counter()
        store.range(start, stop)
        times.append(time.perf_counter() - began)
        reads.append(len(_blocks(start // store.bucket_rows, stop // store.bucket_rows)))
    print(f"\n1. range query on local disk ({len(ranges)} random ranges)")
    print(f"   time: mean {1e3 * statistics.mean(times):.2f} ms, median {1e3 * statistics.median(times):.2f} ms, "
          f"max {1e3 * max(times):.2f} ms   (target < 50 ms)")  # fmt: skip
    print(f"   records read: mean {statistics.mean(reads):.1f}, max {max(reads)}")


def table_s3(local: str, n_buckets: int, ranges: list[tuple[int, int]]) -> None:
    import s3fs

    from streamrff.testing import MotoS3Server

    with MotoS3Server() as server:
        server.make_bucket("bench")
        filesystem = s3fs.S3FileSystem(**server.storage_options)
        began = time.perf_counter()
        objects = {}
        for folder, _, names in os.walk(local):
            for name in names:
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    objects["bench/year.store/" + os.path.relpath(path, local)] = handle.read()
        filesystem.pipe(objects)  # concurrent PUTs
        copy = time.perf_counter() - began
        s3fs.S3FileSystem.clear_instance_cache()
        url = "s3://bench/year.store"
        counts = {"requests": 0, "GET": 0}

        def count(request, **_):
            counts["requests"] += 1
            counts["GET"] += request.method == "GET"

        store = srf.SketchStore.open(url, storage_options=server.storage_options)
        client = store._files.filesystem.s3
        client.meta.events.register("before-send.s3", count)
        counts.update(requests=0, GET=0)
        srf.SketchStore.open(url, storage_options=server.storage_options)  # the same cached filesystem
        opened = dict(counts)
        per_range, times = [], []
        for start, stop in ranges:
            counts.update(requests=0, GET=0)
            began = time.perf_counter()
            store.range(start, stop)
            times.append(time.perf_counter() - began)
            per_range.append(counts["requests"])
        print(f"\n2. object reads on moto's S3 ({n_buckets} buckets copied in {copy:.0f} s; {len(ranges)} ranges)")
        print(f"   SketchStore.open: {opened['requests']} requests ({opened['GET']} GET)")
        print(f"   per range: mean {statistics.mean(per_range):.1f}, max {max(per_range)} requests   (target <= 32)")
        print(f"   time per range on moto: median {1e3 * statistics.median(times):.1f} ms")


def table_append(features: int) -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(100_000, 16)).astype(np.float32)
    rff = srf.RFF(n_features=features, bandwidth=4.0, seed=0).fit(X[:1])
    with tempfile.TemporaryDirectory() as folder:
        srf.sketch(X[:10_000], rff)  # warm up compiled kernels and the local scheduler
        sketch_times, append_times = [], []
        for repeat in range(15):
            began = time.perf_counter()
            srf.sketch(X, rff)
            sketch_times.append(time.perf_counter() - began)
            store = srf.SketchStore.create(os.path.join(folder, f"s{repeat}"), rff, bucket=100_000)
            began = time.perf_counter()
            store.append(X)
            append_times.append(time.perf_counter() - began)
    ratio = min(append_times) / min(sketch_times)
    median = statistics.median(append_times) / statistics.median(sketch_times)
    print(f"\n3. one bucket of 100 000 rows, d = 16, D = {features} (15 runs each, interleaved)")
    print(f"   streamrff.sketch: {min(sketch_times):.3f} s   store.append: {min(append_times):.3f} s   "
          f"ratio {ratio:.2f}x (best), {median:.2f}x (medians)   (target <= 1.1x)")  # fmt: skip


def table_memory(n_buckets: int, features: int) -> None:
    """Fill a store here, then measure a fresh client process on it (its RSS is not the fill's)."""
    import subprocess
    import sys

    rng = np.random.default_rng(2)
    rff = srf.RFF(n_features=features, bandwidth=1.0, seed=0).fit(np.zeros((1, 16)))
    with tempfile.TemporaryDirectory() as folder:
        store = srf.SketchStore.create(os.path.join(folder, "big.store"), rff, bucket=1_000, levels=17)
        seconds = _fill_direct(store, n_buckets, rng)
        print(f"\n5. client memory, a store of {n_buckets:,} buckets (D = {features}; filled in {seconds:.0f} s)")
        print("   (a fresh client process: open, describe, read ranges, append a bucket, test two ranges)", flush=True)
        subprocess.run([sys.executable, __file__, "--memory-client", store.path, str(n_buckets)], check=True)
        per_bucket = 8 * (HEADER + 1024) + 4
        print(f"   a test or series holds the records of the buckets it compares: {per_bucket:,} bytes each at "
              f"D = 1 024 ({n_buckets * per_bucket / 2**20:.0f} MB for all {n_buckets:,})")  # fmt: skip


def _peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM (Linux; ru_maxrss would carry the parent's over fork and exec)."""
    import resource

    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def memory_client(path: str, n_buckets: int) -> None:
    import tracemalloc

    rng = np.random.default_rng(3)
    before = _peak_rss_mb()
    srf.sketch(rng.normal(size=(1_000, 16)), srf.RFF(n_features=64, bandwidth=1.0).fit(np.zeros((1, 16))))
    engine = _peak_rss_mb()
    store = srf.SketchStore.open(path)
    rows = store.bucket_rows
    X = rng.normal(size=(rows, 16)).astype(np.float32)
    steps = {
        "open": lambda: srf.SketchStore.open(path),
        "info (lists every record)": lambda: srf.SketchStore.open(path).info(),
        "range (all; lists)": lambda: srf.SketchStore.open(path).range(),
        "100 random ranges": lambda: [
            srf.SketchStore.open(path).range(a, b) for a, b in _ranges(n_buckets, 100, rows, rng)
        ],
        "append 1 bucket": lambda: srf.SketchStore.open(path).append(X, start=n_buckets * rows),
        "test 1 000 vs 1 000 buckets": lambda: srf.SketchStore.open(path).test(
            (0, 1_000 * rows), (1_000 * rows, 2_000 * rows), n_permutations=99
        ),
    }
    for name, step in steps.items():
        tracemalloc.start()
        began = time.perf_counter()
        step()
        took = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"   {name:28s} peak allocations {peak / 2**20:8.1f} MB   ({took:.2f} s)")
    rss = _peak_rss_mb()
    print(f"   client peak RSS: {rss:.0f} MB (after imports {before:.0f} MB, after a first engine job {engine:.0f} MB)"
          "   (target < 500 MB)")  # fmt: skip


def _disk_bytes(path: Path) -> int:
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file() and "records/c" in str(item))


def table_bytes() -> None:
    """Bytes per bucket on disk (every record chunk: buckets, rollups, moment records), measured."""
    print("\n4. bytes per bucket, measured on disk (records of buckets, rollups and moments; 64 rows a bucket)")
    print("   D      moments                 buckets  bucket record  moment record  disk bytes per bucket")
    rows = np.random.default_rng(1).normal(size=(64 * 64, 16)).astype(np.float32)
    for features in (1024, 4096):
        rff = srf.RFF(n_features=features, bandwidth=4.0, seed=0).fit(rows[:1])
        # moments=0 (every bucket) is measured on few buckets: 8 D^2 / 2 bytes each; "columns": d = 16 x 64 sums.
        for moments, n_buckets in ((None, 64), ("columns", 64), (5, 64), (0, 8 if features == 1024 else 2)):
            with tempfile.TemporaryDirectory() as folder:
                kept = {"columns": True} if moments == "columns" else {"moments": moments}
                store = srf.SketchStore.create(Path(folder) / "s.store", rff, bucket=64, **kept)
                store.append(rows[: 64 * n_buckets])
                info = store.info()
                per = _disk_bytes(Path(folder) / "s.store") / n_buckets
                moment = info["moments"]["bytes_per_record"] if "moments" in info else 0
                label = {None: "none", "columns": "none; columns 16 x 64"}.get(moments, f"{moments} (per 2**{moments})")
                print(f"   {features:<6} {label:<23} {n_buckets:>7}  {info['bytes_per_record']:>13,}  "
                      f"{moment:>13,}  {per:>21,.0f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--buckets", type=int, default=8760)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-append", action="store_true")
    parser.add_argument("--skip-ranges", action="store_true")
    parser.add_argument("--memory-buckets", type=int, default=100_000)
    parser.add_argument("--memory-features", type=int, default=256)
    parser.add_argument("--memory-client", nargs=2, metavar=("PATH", "BUCKETS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_client:
        memory_client(args.memory_client[0], int(args.memory_client[1]))
        return
    print(f"load average: {os.getloadavg()}")
    rng = np.random.default_rng(0)
    rff = srf.RFF(n_features=args.features, bandwidth=1.0, seed=0).fit(np.zeros((1, 16)))
    if not args.skip_ranges:
        with tempfile.TemporaryDirectory() as folder:
            store = srf.SketchStore.create(os.path.join(folder, "year.store"), rff, bucket=100_000, levels=14)
            seconds = _fill(store, args.buckets, rng)
            print(f"filled {args.buckets} buckets (+ rollups: {store.info()['records']} records) in {seconds:.0f} s")
            ranges = _ranges(args.buckets, args.queries, store.bucket_rows, rng)
            table_ranges(srf.SketchStore.open(store.path), ranges)
            if not args.skip_s3:
                table_s3(store.path, args.buckets, ranges[: min(len(ranges), 50)])
    if not args.skip_append:
        table_append(args.features)
    table_bytes()
    if args.memory_buckets:
        table_memory(args.memory_buckets, args.memory_features)


if __name__ == "__main__":
    main()
