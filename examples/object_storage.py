"""Sketch a zarr array in object storage (s3://) and save the sketch back to the bucket.

Shows: s3:// sources and outputs with fsspec storage_options. The endpoint and credentials come from
the environment: STREAMRFF_S3_ENDPOINT (e.g. http://127.0.0.1:9000 for a local MinIO or
`moto_server -H 127.0.0.1 -p 9000`), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, STREAMRFF_S3_BUCKET.
Storage options travel to the workers inside the task graph and are never logged.

To try it locally: `pip install "moto[server]"; moto_server -H 127.0.0.1 -p 9000 &` then
`STREAMRFF_S3_ENDPOINT=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x
python examples/object_storage.py --create-bucket`.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import s3fs
import zarr

import streamrff as srf

REQUIRED = ("STREAMRFF_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def main(rows: int, create_bucket: bool) -> None:
    missing = [name for name in REQUIRED if not os.environ.get(name)]
    if missing:
        raise SystemExit(
            f"object_storage.py needs the environment variables {', '.join(missing)} (an S3 endpoint and its "
            "credentials; see the header of this file). To try it without a service, run "
            "examples/three_sites.py, which starts its own moto server."
        )
    bucket = os.environ.get("STREAMRFF_S3_BUCKET", "streamrff-example")
    storage_options = {
        "key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
        "endpoint_url": os.environ["STREAMRFF_S3_ENDPOINT"],
    }
    if create_bucket:
        fs = s3fs.S3FileSystem(**storage_options)
        if not fs.exists(bucket):
            fs.mkdir(bucket)

    url = f"s3://{bucket}/features.zarr"
    array = zarr.create_array(
        url, shape=(rows, 8), chunks=(max(1, rows // 4), 8), dtype="float32",
        storage_options=storage_options, overwrite=True,
    )
    array[:] = np.random.default_rng(0).normal(size=(rows, 8)).astype("float32")

    sketch = srf.sketch(url, srf.RFF(n_features=256, bandwidth=2.0), storage_options=storage_options)
    sketch.save(f"s3://{bucket}/features.sketch", storage_options=storage_options, overwrite=True)
    print(srf.load(f"s3://{bucket}/features.sketch", storage_options=storage_options))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--create-bucket", action="store_true")
    args = parser.parse_args()
    main(args.rows, args.create_bucket)
