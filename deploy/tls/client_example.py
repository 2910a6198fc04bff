"""Sketch a zarr array on a Dask cluster that only accepts TLS connections with client certificates.

Start the cluster with the certificates from ``deploy/tls/make-certs.sh`` (see README.md here)::

    dask scheduler --protocol tls --port 8786 \\
        --tls-ca-file dask-tls/ca.pem --tls-cert dask-tls/scheduler.pem --tls-key dask-tls/scheduler-key.pem
    dask worker tls://scheduler.example.com:8786 \\
        --tls-ca-file dask-tls/ca.pem --tls-cert dask-tls/worker.pem --tls-key dask-tls/worker-key.pem

then run, in the same environment (same streamrff, dask and distributed versions)::

    python deploy/tls/client_example.py tls://scheduler.example.com:8786 data.zarr -o data.sketch \\
        --certs dask-tls

The client trusts only ``ca.pem`` and presents ``client.pem``; the scheduler refuses clients
without a certificate signed by the same CA. ``require_encryption=True`` makes the client refuse
plain ``tcp://`` addresses instead of silently sending data and storage options unencrypted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Sketch a zarr array on a TLS-secured Dask cluster.")
    parser.add_argument("scheduler", help="scheduler address, tls://HOST:PORT")
    parser.add_argument("source", help="zarr array path or URL (readable by the workers)")
    parser.add_argument("-o", "--output", required=True, help="where to write the sketch")
    parser.add_argument("--certs", default="dask-tls", help="directory with ca.pem, client.pem, client-key.pem")
    parser.add_argument("--features", type=int, default=1024, help="number of random features D")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if not args.scheduler.startswith("tls://"):
        print(f"error: expected a tls:// scheduler address. Got {args.scheduler!r}.", file=sys.stderr)
        return 2

    from distributed import Client, Security

    import streamrff as srf

    certs = Path(args.certs)
    security = Security(
        tls_ca_file=str(certs / "ca.pem"),
        tls_client_cert=str(certs / "client.pem"),
        tls_client_key=str(certs / "client-key.pem"),
        require_encryption=True,
    )
    with Client(args.scheduler, security=security, timeout="30s") as client:
        sketch = srf.sketch(args.source, srf.RFF(n_features=args.features, bandwidth="median"), client=client)
    sketch.save(args.output)
    print(f"wrote {args.output}: {sketch.count:,} rows, fingerprint {sketch.fingerprint[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
