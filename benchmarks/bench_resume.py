"""A checkpoint resume with nothing changed: chunks known by a digest of their bytes against size and mtime.

Issue #49 item 3: a checkpoint partial is now keyed by a digest of the stored bytes of its chunk (a CRC-32C of
each stored object, read and never decoded; S3's ETag where the store gives it), where it was keyed by each
object's size and modification time from one listing of the store. Target: a resume with nothing changed
costs at most 1.2x the old one.

Side by side, in one process, on one zarr array on local disk (zstd, as zarr writes it):

1. the identity step alone: the old listing of sizes and modification times (``mtime_identities`` below, the
   code this issue replaced) against :meth:`streamrff.sources.rows.RowSource.chunk_identities` (listing, then
   read and CRC-32C of every chunk);
2. the whole resume, ``srf.sketch(path, map, checkpoint=...)`` with every partial already saved: open the
   source, identify the chunks, load and merge the partials; once with the new identity and once with the old
   one put back in its place (each in its own checkpoint folder, filled by a first run of the same kind).

The median of ``--repeat`` runs of each, alternated. The files are in the page cache after the first run (as
on a resume soon after the job that saved the partials); a cold cache adds the chunks' reading time to the
new identity only.

Run: python benchmarks/bench_resume.py [--rows 400000] [--columns 32] [--chunk-rows 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time

import numpy as np
import zarr

import streamrff as srf
from streamrff.sources.chunkread import stored_chunk_keys
from streamrff.sources.rows import RowSource, open_source


def mtime_identities(self: RowSource) -> tuple[str, ...] | None:
    """The identity this issue replaced: per row chunk, a digest of its objects' sizes and modification times."""
    import fsspec

    if self.zarr_array is None:
        return None
    filesystem, root = fsspec.core.url_to_fs(self.location)
    found = filesystem.find(root, detail=True)
    root = root.rstrip("/") + "/"
    stats = {path[len(root) :]: [info.get("size"), info.get("mtime")] for path, info in found.items()}
    identities = []
    for start, size in zip(self.row_offsets, self.row_chunks):
        keys = stored_chunk_keys(self.zarr_array, start, start + size)
        listing = json.dumps([[key, stats.get(key)] for key in keys], default=str)
        identities.append(hashlib.sha256(f"{self.identity}\n{listing}".encode()).hexdigest())
    return tuple(identities)


DIGEST_IDENTITIES = RowSource.chunk_identities


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--columns", type=int, default=32)
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="bench_resume-")
    path = os.path.join(folder, "rows.zarr")
    rows = np.random.default_rng(0).normal(size=(args.rows, args.columns)).astype(np.float32)
    zarr.create_array(path, data=rows, chunks=(args.chunk_rows, args.columns))
    stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    feature_map = srf.RFF(n_features=args.features, bandwidth=1.0, seed=0).fit(rows[:1])
    print(
        f"{args.rows:,} x {args.columns} float32 rows in {args.rows // args.chunk_rows} chunks of {args.chunk_rows:,} "
        f"({stored / 2**20:.1f} MiB stored, zstd), D = {args.features}; load average {os.getloadavg()[0]:.2f}"
    )

    kinds = {"size+mtime": mtime_identities, "digest": DIGEST_IDENTITIES}
    checkpoints = {kind: os.path.join(folder, f"ck-{kind}") for kind in kinds}
    sketches, fill = {}, {}
    for kind, identities in kinds.items():  # fill each checkpoint folder with partials under its identity
        RowSource.chunk_identities = identities
        fill[kind] = timed(lambda: sketches.update({kind: srf.sketch(path, feature_map, checkpoint=checkpoints[kind])}))
    assert sketches["digest"] == sketches["size+mtime"]

    step: dict[str, list[float]] = {kind: [] for kind in kinds}
    resume: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.repeat):
        for kind, identities in kinds.items():
            RowSource.chunk_identities = identities
            step[kind].append(timed(lambda: open_source(path).chunk_identities()))
            resume[kind].append(timed(lambda: srf.sketch(path, feature_map, checkpoint=checkpoints[kind])))
    RowSource.chunk_identities = DIGEST_IDENTITIES

    print(f"median of {args.repeat} runs, seconds (load average now {os.getloadavg()[0]:.2f}):")
    print(f"{'':32s}{'size+mtime':>12s}{'digest':>12s}{'ratio':>8s}")
    for name, times in (("identity step alone", step), ("whole resume (nothing changed)", resume)):
        old, new = statistics.median(times["size+mtime"]), statistics.median(times["digest"])
        print(f"{name:32s}{old:12.4f}{new:12.4f}{new / old:8.2f}")
    print(f"bytes hashed per resume: {stored / 2**20:.1f} MiB (target: whole resume ratio <= 1.2)")
    print(f"for scale, the first run, computing every chunk (digest identity): {fill['digest']:.3f} s")


if __name__ == "__main__":
    main()
