"""Three "sites" on object storage: one map pooled across them, each site sketches with it, a script merges.

Shows: streamrff.fit_map over several s3:// arrays (one seeded row sample pooled across all sites, so the
median bandwidth favours none), the map file kept on the bucket (save_map / load_map), each site
sketching its own array with that map and saving the sketch next to it, and streamrff.merge of the three
sketches read back from the bucket, equal to the sketch of all rows. Without --endpoint it starts moto's
S3 server on 127.0.0.1 itself (pip install "streamrff[test]"); with --endpoint it uses that S3 service
and the credentials of the standard environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).

Run: python examples/three_sites.py [--rows 20000] [--endpoint http://127.0.0.1:9000 --bucket NAME]
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np
import zarr

import streamrff as srf


def s3_service(endpoint: str | None, bucket: str):
    """Storage options and bucket URL of the given endpoint, or of a moto server started here."""
    if endpoint is not None:
        import s3fs

        options = {"endpoint_url": endpoint}
        fs = s3fs.S3FileSystem(**options)
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        return contextlib.nullcontext((options, f"s3://{bucket}"))

    @contextlib.contextmanager
    def moto():
        from streamrff.testing import MotoS3Server

        with MotoS3Server() as server:
            yield server.storage_options, server.make_bucket(bucket)

    return moto()


def main(rows: int, endpoint: str | None, bucket: str) -> None:
    rng = np.random.default_rng(0)
    shifts = {"north": 0.0, "south": 0.2, "east": 0.0}
    data = {name: (rng.normal(size=(rows, 6)) + shift).astype("float32") for name, shift in shifts.items()}
    with s3_service(endpoint, bucket) as (options, root):
        for name, values in data.items():  # each site's data, already on the bucket
            store = zarr.storage.FsspecStore.from_url(f"{root}/{name}.zarr", storage_options=options, read_only=False)
            zarr.create_array(store=store, data=values, chunks=(max(1, rows // 4), 6), overwrite=True)
        sources = [f"{root}/{name}.zarr" for name in data]

        # Once: fit the map on a sample pooled across all sites (`streamrff map ... -o map.json`).
        pooled = srf.fit_map(srf.RFF(n_features=512, bandwidth="median"), sources, storage_options=options)
        srf.save_map(pooled, f"{root}/map.json", storage_options=options, overwrite=True)
        print(f"map: bandwidth {pooled.bandwidth_:.4f} from one sample pooled across {len(sources)} sites")

        # At each site: load the shared map, sketch the site's own rows, save the sketch on the bucket.
        for source in sources:
            feature_map = srf.load_map(f"{root}/map.json", storage_options=options)
            sketch = srf.sketch(source, feature_map, moments=True, storage_options=options)
            sketch.save(source.replace(".zarr", ".sketch"), storage_options=options, overwrite=True)

        # In a script anywhere: read the sketches back, merge them, compare the sites.
        sketches = {name: srf.load(f"{root}/{name}.sketch", storage_options=options) for name in data}
    merged = srf.merge(*sketches.values())
    print("fingerprints equal the map's:", all(s.fingerprint == pooled.fingerprint for s in sketches.values()))
    everything = srf.sketch_array(np.vstack(list(data.values())), pooled)
    gap = np.linalg.norm(merged.feature_sum - everything.feature_sum) / np.linalg.norm(everything.feature_sum)
    print(f"merged {merged.count:,} rows; merge equals sketching all rows: {bool(gap < 1e-6)}")
    for a, b in (("north", "south"), ("north", "east")):
        result = srf.mmd_test(sketches[a], sketches[b], method="spectral")
        print(f"{a} vs {b}: MMD^2 = {result.statistic:.2e}, p = {result.p_value:.3g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows per site")
    parser.add_argument("--endpoint", default=None, help="S3 endpoint URL (default: start moto on 127.0.0.1)")
    parser.add_argument("--bucket", default="streamrff-three-sites")
    args = parser.parse_args()
    main(args.rows, args.endpoint, args.bucket)
