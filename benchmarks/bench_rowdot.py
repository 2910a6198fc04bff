"""Nanoseconds per row of the k-means score product: streamrff's row_dots against OpenBLAS.

The product ``scores = features @ centres.T`` of a Lloyd tile (float32, one core), computed side
by side by :func:`streamrff._kernels.rowdot.row_dots` (register blocks of explicit 16-lane vectors) and by
OpenBLAS's sgemm through numba's ``np.dot`` (what the Lloyd kernel called before, and still calls
above ``MAX_COLUMNS`` centres). As in the Lloyd kernel, one tile of features (2 MiB at most, in
the L2 cache) is scored again and again. Each configuration is timed alternately, minimum of
``--repeats`` runs of ``--calls`` calls; the table gives ns per row for both and the ratio
BLAS / row_dots (above 1: row_dots is faster). The results are checked against float64 first.

Usage::

    python benchmarks/bench_rowdot.py                       # D = 1024 and 4096, k = 2 ... 50
    python benchmarks/bench_rowdot.py --features 1024 --centres 10,20
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from streamrff._base.blas import one_blas_thread
from streamrff._kernels.rowdot import MAX_COLUMNS, row_dots
from streamrff.sketches.cluster import _lloyd_tile_rows


@numba.njit(nogil=True)
def _row_dots_tiles(features, centres, out, calls):
    for _ in range(calls):
        row_dots(features, centres, out)


@numba.njit(nogil=True)
def _blas_tiles(features, centres_t, out, calls):
    for _ in range(calls):
        np.dot(features, centres_t, out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", default="1024,4096", help="comma-separated D")
    parser.add_argument("--centres", default="2,5,10,16,20,24,32,50", help="comma-separated k")
    parser.add_argument("--calls", type=int, default=20, help="calls on the tile per timed run")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"row_dots is used up to MAX_COLUMNS = {MAX_COLUMNS} centres on this CPU (0: no AVX-512)")
    print(f"{'D':>6} {'k':>4} {'row_dots ns/row':>16} {'OpenBLAS ns/row':>16} {'BLAS / row_dots':>16}")
    for width in (int(value) for value in args.features.split(",")):
        tile = _lloyd_tile_rows(10**9, width)  # the Lloyd kernel's tile rows
        features = rng.normal(size=(tile, width)).astype(np.float32)
        for k in (int(value) for value in args.centres.split(",")):
            centres = rng.normal(size=(k, width)).astype(np.float32)
            centres_t = np.ascontiguousarray(centres.T)
            out, out_blas = np.empty((tile, k), np.float32), np.empty((tile, k), np.float32)
            with one_blas_thread():
                _row_dots_tiles(features, centres, out, 1)
                _blas_tiles(features, centres_t, out_blas, 1)
                exact = features.astype(np.float64) @ centres.astype(np.float64).T
                scale = np.abs(features).astype(np.float64) @ np.abs(centres).astype(np.float64).T
                assert np.all(np.abs(out - exact) <= width * 2.0**-23 * scale), "row_dots disagrees with float64"
                timings: dict[str, list[float]] = {"row_dots": [], "blas": []}
                for _ in range(args.repeats):
                    start = time.thread_time()
                    _row_dots_tiles(features, centres, out, args.calls)
                    timings["row_dots"].append(time.thread_time() - start)
                    start = time.thread_time()
                    _blas_tiles(features, centres_t, out_blas, args.calls)
                    timings["blas"].append(time.thread_time() - start)
            ours, theirs = (min(timings[name]) / (args.calls * tile) * 1e9 for name in ("row_dots", "blas"))
            print(f"{width:>6} {k:>4} {ours:>16.0f} {theirs:>16.0f} {theirs / ours:>16.2f}")


if __name__ == "__main__":
    main()
