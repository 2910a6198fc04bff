"""Merge sketches from several sites in a script: each site sketches its own rows with one shared map.

Shows: sharing a fitted map by its spec (JSON) instead of data, sketches written at each site, and
streamrff.merge over the loaded files equals the sketch of all rows together. Merging refuses
sketches made with another map.

Run: python examples/merge_sites.py [--rows 30000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np

import streamrff as srf


def main(rows: int) -> None:
    rng = np.random.default_rng(0)
    sites = {
        name: rng.normal(loc=shift, size=(rows, 6)).astype("float32")
        for name, shift in (("north", 0.0), ("south", 0.1), ("east", 0.0))
    }

    # The coordinating site fits the map once and publishes its JSON spec.
    spec = json.dumps(srf.RFF(n_features=1024, bandwidth="median").fit(sites["north"]).spec)

    out = tempfile.mkdtemp()
    for name, rows_at_site in sites.items():
        feature_map = srf.map_from_spec(json.loads(spec))  # the identical map, rebuilt at the site
        srf.sketch(rows_at_site, feature_map).save(os.path.join(out, f"{name}.sketch"))

    loaded = {name: srf.load(os.path.join(out, f"{name}.sketch")) for name in sites}
    pooled = srf.merge(*loaded.values())
    everything = srf.sketch_array(np.vstack(list(sites.values())), loaded["north"].feature_map)
    print(pooled)
    difference = np.linalg.norm(pooled.feature_sum - everything.feature_sum) / np.linalg.norm(everything.feature_sum)
    print("merge equals sketching all rows:", bool(difference < 1e-6))  # to float32 rounding of the features
    for a, b in (("north", "south"), ("north", "east")):
        print(f"MMD^2({a}, {b}) = {srf.mmd2(loaded[a], loaded[b]):.2e}")

    other = srf.sketch_array(sites["east"], srf.RFF(n_features=1024, bandwidth=1.0, seed=7))
    try:
        srf.merge(pooled, other)
    except srf.SketchMismatchError as error:
        print("refused as expected:", str(error)[:80], "...")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000)
    main(parser.parse_args().rows)
