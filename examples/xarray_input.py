"""Sketch an xarray DataArray (for example from xarray.open_zarr) with named sample/feature dims.

Shows: sample_dim picks the dimension along which samples run, whatever the axis order; a
dask-backed DataArray is sketched chunk by chunk without loading it.

Run: python examples/xarray_input.py [--rows 50000]
"""

from __future__ import annotations

import argparse

import numpy as np
import xarray as xr

import streamrff as srf


def main(rows: int) -> None:
    values = np.random.default_rng(0).normal(size=(8, rows)).astype("float32")  # (channel, time)
    data = xr.DataArray(values, dims=("channel", "time"), name="signal").chunk({"time": max(1, rows // 5)})

    sketch = srf.sketch(data, srf.RFF(n_features=256, bandwidth="median"), sample_dim="time")
    reference = srf.sketch_array(values.T, sketch.feature_map)
    print(sketch)
    difference = np.linalg.norm(sketch.feature_sum - reference.feature_sum) / np.linalg.norm(reference.feature_sum)
    print("equals the in-memory sketch:", bool(difference < 1e-6))  # to float32 rounding of the features


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    main(parser.parse_args().rows)
