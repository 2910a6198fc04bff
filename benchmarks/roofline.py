"""Roofline of a sketch job on this machine, next to the measured time of ``streamrff.sketch``.

Measures, in one run: (a) float32 and float64 GEMM GFLOP/s, (b) numpy float32 cos+sin evaluations
per second per core, (c) zarr chunk read+decompress GB/s. From those it predicts the time of a
sketch job of N rows, d inputs, D features (projection GEMM + D transcendentals per row + read,
+ the D x D symmetric rank-k moment update, N D^2 float32 flops, when moments are on) and prints it next
to the measured time of
``streamrff.sketch`` on the embedded local default as "fraction of roofline" (predicted / measured;
1.0 means the job runs at the speed of its parts). Everything is a ratio measured side by side, so
the figure holds on any machine. The transcendental rate is numpy's, as the issue defines it;
streamrff's compiled kernel (``streamrff/_sincos.py``) shares one range reduction between the sine
and the cosine of a phase, so a job can run faster than this roofline (a fraction above 1).

Then, with --threads, the scaling of the same job: the embedded scheduler with 1 thread against
all cores, and a distributed LocalCluster of 1 against ``cores`` single-threaded worker processes
(the issue's target: 2 workers/threads >= 1.7x one).

First, the parts of the pass at ``--parts-dim`` x ``--parts-features`` (d = 32, D = 1024 by default),
each per row on one core in CPU time with one BLAS thread: decode (whole stored chunks read and decompressed
as the engine reads them, ``streamrff.sources.chunkread``; zarr's own read of the array, on zarr's threads, beside it),
the projection GEMM in the kernel's tiles, the compiled sin/cos (``sincos_features``) on those tiles,
numpy's float32 ``cos`` + ``sin`` on them, the fused sum kernel (``sincos_feature_sums``: GEMM + sin/cos +
column sums, as a ratio to GEMM + sin/cos), the SYRK of a features tile in cache and the moments kernel
(``mean_sketch_of_chunk(moments=True)``, and the rate of its SYRK share against the in-cache one). Then
the pass on zarr for the sums and the moments paths, next to the limit the parts set on every core
(``rows x (decode + GEMM + sin/cos [+ SYRK]) / cores``), with the share of the pass that the task threads
were busy (dask's profiler: decoding a chunk on one thread while another computes keeps both busy).
CPU time leaves out the waits for a core on a shared machine; the passes are wall time.

Run: python benchmarks/roofline.py [--rows 200000] [--dims 8,32,128] [--features 256,1024,4096] [--threads]
     [--parts-only] [--parts-dim 32] [--parts-features 1024]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import zarr

import streamrff as srf
from streamrff._base.blas import one_blas_thread
from streamrff._kernels import sincos as _sincos
from streamrff.maps.fourier import _MIN_PROJECTION_ROWS
from streamrff.sketches.mean import mean_sketch_of_chunk
from streamrff.sketches.moments import moment_tile_rows
from streamrff.sources.chunkread import ChunkRows


def best_of(function, repeats: int = 3, clock=time.perf_counter) -> float:
    """Least time of ``repeats`` calls by ``clock`` (wall time; :func:`time.process_time` for CPU time)."""
    times = []
    for _ in range(repeats):
        start = clock()
        function()
        times.append(clock() - start)
    return min(times)


def gemm_gflops(dtype: str, cores: int) -> float:
    import threadpoolctl

    a = np.random.default_rng(0).standard_normal((4096, 256)).astype(dtype)
    b = np.random.default_rng(1).standard_normal((256, 2048)).astype(dtype)
    out = np.empty((4096, 2048), dtype=dtype)
    with threadpoolctl.threadpool_limits(cores):
        seconds = best_of(lambda: np.matmul(a, b, out=out), repeats=7)
    return 2 * 4096 * 256 * 2048 / seconds / 1e9


def transcendentals_per_core() -> float:
    # On 1 MiB arrays, the size of the sketch kernel's tiles: in cache, numpy's float32 cos/sin
    # ran ~8% faster than on 16 MiB arrays, so this is the tighter (peak) rate.
    x = np.random.default_rng(0).uniform(-50, 50, size=(256, 1024)).astype(np.float32)
    out = np.empty_like(x)

    def sixteen_tiles() -> None:
        for _ in range(16):
            np.cos(x, out=out)
            np.sin(x, out=out)

    return 2 * 16 * x.size / best_of(sixteen_tiles, repeats=5)


def zarr_read_gbps(path: str) -> float:
    array = zarr.open_array(path, mode="r")
    seconds = best_of(lambda: array[...], repeats=3)
    return array.nbytes / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dims", default="8,32,128")
    parser.add_argument("--features", default="256,1024,4096")
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--threads", action="store_true", help="also measure 1 thread vs all cores (d=32, D=1024)")
    parser.add_argument("--parts-only", action="store_true", help="only the parts table and its two passes")
    parser.add_argument("--parts-dim", type=int, default=32)
    parser.add_argument("--parts-features", type=int, default=1024)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        parts_table(tmp, args.rows, args.parts_dim, args.parts_features, args.chunk_rows, cores)
    if args.parts_only:
        return
    dims = [int(v) for v in args.dims.split(",")]
    features = [int(v) for v in args.features.split(",")]

    # Peak rates: a shared machine's dips are noise, so each is the best seen so far, measured
    # again before every row (a dip then never inflates a row's fraction).
    gemm32, trans = gemm_gflops("float32", cores), transcendentals_per_core()
    print(
        f"machine: {cores} cores; GEMM float32 {gemm32:.1f} GFLOP/s, float64 {gemm_gflops('float64', cores):.1f} "
        f"GFLOP/s; cos/sin {trans / 1e6:.0f} M evals/s/core (at start; the rows use the best seen so far)"
    )
    header = (
        f"{'d':>4} {'D':>5} {'moments':>7} {'GEMM GF/s':>9} {'cos/sin M/s':>11} {'read GB/s':>9} "
        f"{'roofline s':>10} {'measured s':>10} {'fraction':>8} {'rows/s':>10}"
    )
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for d in dims:
            path = os.path.join(tmp, f"x{d}.zarr")
            data = zarr.create_array(path, shape=(args.rows, d), chunks=(args.chunk_rows, d), dtype="float32")
            data[...] = np.random.default_rng(d).standard_normal((args.rows, d), dtype=np.float32)
            read = zarr_read_gbps(path)
            for D in features:
                rff = srf.RFF(n_features=D, bandwidth=float(np.sqrt(d))).fit(np.zeros((1, d)))
                for moments in (False, True):
                    if moments and D > 1024 and args.rows * D * D > 2e12:
                        continue  # the D x D update alone would take minutes here
                    gemm32 = max(gemm32, gemm_gflops("float32", cores))
                    trans = max(trans, transcendentals_per_core())
                    predicted = (
                        2 * args.rows * d * (D // 2) / (gemm32 * 1e9)  # projection (float32 GEMM)
                        + args.rows * D / (trans * cores)  # cos and sin
                        + args.rows * d * 4 / (read * 1e9)  # read + decompress
                        + (args.rows * D * D / (gemm32 * 1e9) if moments else 0.0)  # ssyrk: N D^2 flops
                    )
                    srf.sketch(path, rff, moments=moments)  # warm up
                    # Best of 5 like the rates (2 with moments, whose runs take seconds).
                    measured = best_of(lambda: srf.sketch(path, rff, moments=moments), repeats=2 if moments else 5)
                    print(
                        f"{d:>4} {D:>5} {str(moments):>7} {gemm32:>9.1f} {trans / 1e6:>11.0f} {read:>9.2f} "
                        f"{predicted:>10.3f} {measured:>10.3f} "
                        f"{predicted / measured:>8.2f} {args.rows / measured:>10.0f}"
                    )
        if args.threads:
            thread_scaling(tmp, args.rows, args.chunk_rows, cores)


def cpu_seconds(function, repeats: int = 5) -> float:
    """Least CPU time of the process (all its threads: zarr decodes on its own) over ``repeats`` calls, after one."""
    function()
    return best_of(function, repeats, clock=time.process_time)


def parts_table(tmp: str, rows: int, d: int, D: int, chunk_rows: int, cores: int) -> None:
    """The parts of the pass per row on one core, then the sums and moments passes against their limits."""
    path = os.path.join(tmp, "parts.zarr")
    values = np.random.default_rng(0).standard_normal((rows, d), dtype=np.float32)
    data = zarr.create_array(path, shape=values.shape, chunks=(min(chunk_rows, rows), d), dtype="float32")
    data[...] = values  # zarr 3's default codecs: zstd
    rff = srf.RFF(n_features=D, bandwidth=float(np.sqrt(d))).fit(np.zeros((1, d)))
    frequencies, _, scale = rff._float32_kernel_args()
    m = frequencies.shape[1]
    tile = max(_MIN_PROJECTION_ROWS, rff._tile_rows(m))  # the sum kernel's tile (maps/fourier.py)
    chunk = values[: min(chunk_rows, rows) - min(chunk_rows, rows) % tile]
    phases = np.empty((tile, m), np.float32)
    features = np.empty((tile, 2 * m), np.float32)
    sums = np.zeros((2, m))
    moment_rows = moment_tile_rows(np.float32)  # the moments kernel's tile (sketches/moments.py)
    moment_tile = rff.transform(values[:moment_rows])
    moment = np.empty((D, D), np.float32)

    def gemm() -> None:
        for start in range(0, chunk.shape[0], tile):
            np.dot(chunk[start : start + tile], frequencies, phases)

    def direct_decode() -> None:  # whole stored chunks, as the engine reads them
        reader = ChunkRows(zarr.open_array(path, mode="r"))
        for start in range(0, rows, reader.chunks[0]):
            reader[start : min(rows, start + reader.chunks[0]), 0:d]

    def numpy_sincos() -> None:
        np.cos(phases, out=features[:, :m])
        np.sin(phases, out=features[:, m:])

    def per_row(seconds: float, n: int) -> float:
        return seconds / n * 1e9

    with one_blas_thread():
        gemm()
        part = {
            "zarr read": per_row(cpu_seconds(lambda: zarr.open_array(path, mode="r")[...]), rows),
            "decode": per_row(cpu_seconds(direct_decode), rows),
            "GEMM": per_row(cpu_seconds(gemm), chunk.shape[0]),
            "sin/cos": per_row(cpu_seconds(lambda: _sincos.sincos_features(phases, scale, features), 50), tile),
            "numpy": per_row(cpu_seconds(numpy_sincos, 50), tile),
            "fused": per_row(
                cpu_seconds(lambda: _sincos.sincos_feature_sums(chunk, frequencies, tile, sums)), chunk.shape[0]
            ),
            "SYRK": per_row(cpu_seconds(lambda: np.matmul(moment_tile.T, moment_tile, out=moment), 7), moment_rows),
            "moments": per_row(cpu_seconds(lambda: mean_sketch_of_chunk(chunk, rff, moments=True), 3), chunk.shape[0]),
            "embed": per_row(
                cpu_seconds(lambda: [None for _ in rff.embed_tiles(chunk, tile_rows=moment_rows)], 3),
                chunk.shape[0],
            ),
        }
    sincos = part["GEMM"] + part["sin/cos"]
    syrk_share = part["moments"] - part["embed"]
    print(f"parts per row on one core (d = {d}, D = {D}; CPU time, one BLAS thread; {tile}-row tiles)")
    print(f"  {'decode (whole chunks, as the engine reads)':40} {part['decode']:9.0f} ns")
    print(f"  {'zarr read of the array (read + zstd)':40} {part['zarr read']:9.0f} ns")
    print(f"  {'projection GEMM':40} {part['GEMM']:9.0f} ns")
    print(f"  {'sin/cos (compiled)':40} {part['sin/cos']:9.0f} ns   {part['numpy'] / part['sin/cos']:.2f}x numpy's")
    print(f"  {'numpy float32 cos + sin':40} {part['numpy']:9.0f} ns")
    fused = f"{part['fused'] / sincos:.2f}x GEMM + sin/cos"
    print(f"  {'fused sum kernel (GEMM + sin/cos + sums)':40} {part['fused']:9.0f} ns   {fused}")
    print(f"  {f'SYRK in cache ({moment_rows}-row tile)':40} {part['SYRK']:9.0f} ns")
    print(
        f"  {'moments kernel (embed + SYRK + sums)':40} {part['moments']:9.0f} ns   "
        f"SYRK share {syrk_share:.0f} ns: {part['SYRK'] / syrk_share:.2f} of the in-cache rate"
    )
    print("limit: decode + GEMM + sin/cos [+ SYRK] on every core, with the engine's decode (and with zarr's read)")
    print(
        f"{'path':>8} {'limit s':>8} {'measured s':>10} {'fraction':>8} {'zarr-read limit s':>17} {'fraction':>8} "
        f"{'rows/s':>10} {'threads busy':>12}"
    )
    for moments in (False, True):
        compute = sincos + (part["SYRK"] if moments else 0.0)
        limit, zarr_limit = (rows * (decode + compute) * 1e-9 / cores for decode in (part["decode"], part["zarr read"]))
        srf.sketch(path, rff, moments=moments)  # warm up
        measured, busy = timed_pass(lambda: srf.sketch(path, rff, moments=moments), cores, 2 if moments else 5)
        print(
            f"{'moments' if moments else 'sums':>8} {limit:>8.3f} {measured:>10.3f} {limit / measured:>8.2f} "
            f"{zarr_limit:>17.3f} {zarr_limit / measured:>8.2f} {rows / measured:>10.0f} {busy:>12.2f}"
        )


def timed_pass(job, cores: int, repeats: int) -> tuple[float, float]:
    """Least wall time of ``job`` and, for that run, the share of ``cores`` x wall time its dask tasks ran."""
    from dask.diagnostics import Profiler

    best = (float("inf"), 0.0)
    for _ in range(repeats):
        with Profiler() as profiler:
            start = time.perf_counter()
            job()
            seconds = time.perf_counter() - start
        busy = sum(task.end_time - task.start_time for task in profiler.results) / (cores * seconds)
        best = min(best, (seconds, busy))
    return best


def thread_scaling(tmp: str, rows: int, chunk_rows: int, cores: int) -> None:
    """Speed-up of the same sketch job from 1 to ``cores`` threads of the local threaded scheduler,
    next to the machine's own: numpy cos in 1 vs ``cores`` threads, which holds no lock (on a
    shared VM the cores' availability varies; the control shows what the machine gave).

    Twice: with ``chunk_rows``-row zarr chunks and with chunks 4x smaller. Reading a zarr chunk
    costs ~1.2 ms of Python in zarr's event loop whatever its size (measured with zarr 3.1), which
    holds the GIL: the smaller the chunks, the larger that serial share."""
    from concurrent.futures import ThreadPoolExecutor

    import dask

    rows = max(rows, 8 * chunk_rows)  # at least 4 chunks per thread
    rff = srf.RFF(n_features=1024, bandwidth=float(np.sqrt(32))).fit(np.zeros((1, 32)))
    values = np.random.default_rng(0).standard_normal((rows, 32), dtype=np.float32)
    x = np.random.default_rng(0).uniform(-5, 5, size=(2048, 1024)).astype(np.float32)

    def cosines(_: int) -> None:
        out = np.empty_like(x)
        for _ in range(25):
            np.cos(x, out=out)

    def control(threads: int) -> float:
        with ThreadPoolExecutor(threads) as pool:
            return best_of(lambda: list(pool.map(cosines, range(2 * cores))), repeats=3)

    for rows_per_chunk in (chunk_rows, chunk_rows // 4):
        path = os.path.join(tmp, f"threads{rows_per_chunk}.zarr")
        zarr.create_array(path, shape=values.shape, chunks=(rows_per_chunk, 32), dtype="float32")[...] = values

        def job(threads: int) -> float:
            with dask.config.set(num_workers=threads):
                srf.sketch(path, rff)
                return best_of(lambda: srf.sketch(path, rff), repeats=3)

        print_speedup(
            f"threads ({rows} rows, d=32, D=1024, {rows_per_chunk}-row chunks)", "thread", job, control, cores
        )
    path = os.path.join(tmp, "workers.zarr")
    zarr.create_array(path, shape=(4 * rows, 32), chunks=(chunk_rows, 32), dtype="float32")[...] = np.tile(
        values, (4, 1)
    )
    worker_scaling(path, rff, cores, control)


def worker_scaling(path: str, rff: srf.RFF, cores: int, control) -> None:
    """The job on 4x the rows on a distributed cluster of 1 and of ``cores`` single-threaded worker
    processes (their nannies set one BLAS thread each). A job there has a fixed cost of ~0.1 s
    (graph submission, scheduling, gathering), so the rows are 4x those of the threaded runs."""
    from distributed import Client, LocalCluster

    def job(workers: int) -> float:
        with (
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            srf.sketch(path, rff, client=client)  # warm up: imports and map parameters per worker
            return best_of(lambda: srf.sketch(path, rff, client=client), repeats=3)

    print_speedup("worker processes", "worker", job, control, cores)


def print_speedup(label: str, unit: str, job, control, cores: int, attempts: int = 2) -> None:
    """Time ``job(1)`` and ``job(cores)`` next to the numpy-cos control, interleaved so both see
    the same machine, and print the speed-ups."""
    for _ in range(attempts):
        one, many = job(1), job(cores)
        control_one, control_many = control(1), control(cores)
        print(
            f"{label}: sketch 1 {unit} {one:.3f} s, {cores} {unit}s {many:.3f} s, speed-up {one / many:.2f}x; "
            f"numpy cos control {control_one / control_many:.2f}x"
        )


if __name__ == "__main__":
    main()
