"""streamrff's compiled float32 sin/cos kernels next to numpy's passes, per tile, in one run.

On one core (BLAS limited to one thread), for a tile of phases of ``--rows`` x ``--frequencies``
(the sketch kernel's tile at D = 1024 is 256 x 512), prints the median time of:

* features - numpy ``cos`` and ``sin`` into the two halves of a (rows, 2 m) tile, then the scale
             (``RFF.transform``'s numpy path), against ``streamrff._kernels.sincos.sincos_features``;
* sums     - for a chunk of ``--chunk-rows`` rows of ``--dims`` columns, tile by tile: numpy's
             projection, ``cos`` and ``sin`` into two contiguous blocks and a float32 GEMV for
             their column sums (the numpy sum path), against one ``sincos_feature_sums`` call
             (projection included), per tile;

in this thread's CPU time (everything runs on one thread; on a shared machine this leaves out
the time the thread waits for a core), and the largest error of each path's features against
float64 ``cos``/``sin`` of the same float32 phases, in units of float32's spacing at 1.

Run: python benchmarks/bench_sincos.py [--rows 256] [--frequencies 512] [--dims 32] [--chunk-rows 50176]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from streamrff._base.blas import one_blas_thread
from streamrff._kernels import sincos as _sincos


def median_seconds(function, repeats: int) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        function()
        times.append(time.thread_time() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--frequencies", type=int, default=512)
    parser.add_argument("--dims", type=int, default=32)
    parser.add_argument("--chunk-rows", type=int, default=50_176)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows, m = args.rows, args.frequencies
    frequencies = (rng.standard_normal((args.dims, m)) / np.sqrt(args.dims)).astype(np.float32)
    chunk = rng.standard_normal((args.chunk_rows - args.chunk_rows % rows, args.dims)).astype(np.float32)
    phases = chunk[:rows] @ frequencies
    scale = np.float32(1 / np.sqrt(m))
    out = np.empty((rows, 2 * m), np.float32)
    ones = np.ones(rows, np.float32)
    sums = np.zeros((2, m))
    tiles = chunk.shape[0] // rows

    def numpy_features() -> None:
        np.cos(phases, out=out[:, :m])
        np.sin(phases, out=out[:, m:])
        np.multiply(out, scale, out=out)

    blocks = np.empty((2, rows, m), np.float32)

    def numpy_sums() -> None:
        for start in range(0, chunk.shape[0], rows):
            np.matmul(chunk[start : start + rows], frequencies, out=blocks[1])
            np.cos(blocks[1], out=blocks[0])
            np.sin(blocks[1], out=blocks[1])
            sums[:] += np.matmul(ones, blocks)

    # streamrff's own guard: it also limits scipy's BLAS, which the compiled kernel's projection
    # calls (threadpoolctl's limit may miss it, and a 2-thread GEMM per tile then slows it 5x).
    with one_blas_thread():
        results = {
            "features": (
                median_seconds(numpy_features, 300),
                median_seconds(lambda: _sincos.sincos_features(phases, scale, out), 300),
            ),
            "sums": (
                median_seconds(numpy_sums, 7) / tiles,
                median_seconds(lambda: _sincos.sincos_feature_sums(chunk, frequencies, rows, sums), 7) / tiles,
            ),
        }
    print(f"tile {rows} x {m} float32 phases (d = {args.dims}), one core")
    for name, (numpy_time, compiled_time) in results.items():
        print(
            f"  {name:8}  numpy {numpy_time * 1e6:7.1f} us   compiled {compiled_time * 1e6:7.1f} us   "
            f"ratio {numpy_time / compiled_time:.2f}x"
        )
    wide = phases.astype(np.float64)
    reference = np.hstack([np.cos(wide), np.sin(wide)])
    spacing = float(np.spacing(np.float32(1)))
    _sincos.sincos_features(phases, 1.0, out)
    compiled_error = np.abs(out - reference).max() / spacing
    numpy_error = np.abs(np.hstack([np.cos(phases), np.sin(phases)]) - reference).max() / spacing
    print(
        f"  largest feature error against float64: numpy {numpy_error:.2f}, compiled {compiled_error:.2f} "
        "(float32 spacings at 1)"
    )


if __name__ == "__main__":
    main()
