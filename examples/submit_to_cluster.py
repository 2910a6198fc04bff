"""Submit a sketch job to a running Dask cluster: Client("tcp://...") or the address string.

Shows: the same streamrff.sketch call on a real cluster; the fitted map is shipped once, each worker
embeds its chunks, partial sketches are tree-merged, and the result equals the local one.

Start a cluster first, e.g. `bash deploy/local-cluster.sh --workers 2` (prints the address), then
`python examples/submit_to_cluster.py tcp://127.0.0.1:PORT`.
"""

from __future__ import annotations

import argparse

import numpy as np
from distributed import Client

import streamrff as srf


def main(address: str, rows: int) -> None:
    X = np.random.default_rng(0).normal(size=(rows, 8)).astype("float32")
    rff = srf.RFF(n_features=512, bandwidth="median").fit(X)
    with Client(address) as client:
        print("workers:", len(client.scheduler_info()["workers"]))
        on_cluster = srf.sketch(X, rff, client=client, chunk_rows=max(1, rows // 8))
    local = srf.sketch(X, rff, chunk_rows=max(1, rows // 8))
    print(on_cluster)
    print("same as the embedded local default:", np.allclose(on_cluster.feature_sum, local.feature_sum, rtol=1e-12))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="scheduler address, e.g. tcp://127.0.0.1:8786")
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    main(args.address, args.rows)
