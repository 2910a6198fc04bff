"""Sketch a chunked zarr array on disk with the Dask engine, save the sketch, inspect and reload it.

Shows: streamrff.sketch on a zarr path (one task per chunk on the embedded local default), second
moments, checkpoints (a rerun computes nothing), and the versioned sketch file.

Run: python examples/zarr_on_disk.py [--rows 200000] [--out /tmp/streamrff-example]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile

import numpy as np
import zarr

import streamrff as srf


def main(rows: int, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "features.zarr")
    data = zarr.create_array(path, shape=(rows, 16), chunks=(max(1, rows // 8), 16), dtype="float32", overwrite=True)
    data[:] = np.random.default_rng(0).normal(size=(rows, 16)).astype("float32")

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    rff = srf.RFF(n_features=512, bandwidth="median", seed=0)
    checkpoint = os.path.join(out, "checkpoint")
    sketch = srf.sketch(path, rff, moments=True, checkpoint=checkpoint)
    again = srf.sketch(path, sketch.feature_map, moments=True, checkpoint=checkpoint)  # all chunks reused
    assert again == sketch

    target = os.path.join(out, "features.sketch")
    sketch.save(target, overwrite=True)
    loaded = srf.load(target)
    print(loaded)
    print("round trip exact:", loaded == sketch)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "streamrff-example"))
    args = parser.parse_args()
    main(args.rows, args.out)
