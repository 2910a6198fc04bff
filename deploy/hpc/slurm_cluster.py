"""Sketch a zarr array on a SLURM cluster with dask-jobqueue.

Run it on a login node, in the Python environment that has streamrff installed, on a file
system the compute nodes share (the workers are started by SLURM jobs with this same
interpreter, so client and workers run the same versions)::

    pip install streamrff dask-jobqueue
    python deploy/hpc/slurm_cluster.py /scratch/$USER/data.zarr -o /scratch/$USER/data.sketch \\
        --jobs 4 --cores 16 --memory 64GiB --walltime 01:00:00 --queue compute --account myproject

Each SLURM job runs one worker process with ``--cores`` threads. The scheduler runs in this
process; it stops, and the SLURM jobs are cancelled, when the script exits.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _slurm_cluster_class() -> type:
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as error:
        raise SystemExit(
            f"This example needs dask-jobqueue ({error}). Install it in the same environment as "
            "streamrff: pip install dask-jobqueue  (or conda install -c conda-forge dask-jobqueue)."
        ) from None
    return SLURMCluster


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Sketch a zarr array with streamrff on SLURM (dask-jobqueue).")
    parser.add_argument("source", help="zarr array path (on a shared file system) or URL")
    parser.add_argument("-o", "--output", required=True, help="where to write the sketch")
    parser.add_argument("--features", type=int, default=1024, help="number of random features D")
    parser.add_argument("--moments", action="store_true", help="also sketch the D x D second moment")
    parser.add_argument("--jobs", type=int, default=2, help="SLURM jobs (one worker each)")
    parser.add_argument("--cores", type=int, default=8, help="cores per job (worker threads)")
    parser.add_argument("--memory", default="32GiB", help="memory per job")
    parser.add_argument("--walltime", default="01:00:00", help="walltime per job")
    parser.add_argument("--queue", default=None, help="SLURM partition (#SBATCH -p)")
    parser.add_argument("--account", default=None, help="SLURM account (#SBATCH -A)")
    parser.add_argument("--interface", default=None, help="network interface of the workers, e.g. ib0")
    parser.add_argument("--local-directory", default=None, help="node-local scratch for worker spill, e.g. $TMPDIR")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    SLURMCluster = _slurm_cluster_class()

    from distributed import Client

    import streamrff as srf

    cluster = SLURMCluster(
        cores=args.cores,
        processes=1,
        memory=args.memory,
        walltime=args.walltime,
        queue=args.queue,
        account=args.account,
        interface=args.interface,
        local_directory=args.local_directory,
        job_name="streamrff",
        # Start the workers with the interpreter running this script: same environment,
        # same versions as the client.
        python=sys.executable,
        job_extra_directives=["--output=streamrff-worker-%j.out"],
    )
    try:
        cluster.scale(jobs=args.jobs)
        with Client(cluster) as client:
            print(f"scheduler {cluster.scheduler_address}; dashboard {cluster.dashboard_link}", flush=True)
            print(cluster.job_script(), flush=True)
            feature_map = srf.RFF(n_features=args.features, bandwidth="median")
            sketch = srf.sketch(args.source, feature_map, moments=args.moments, client=client, progress=True)
        sketch.save(args.output)
        print(f"wrote {args.output}: {sketch.count:,} rows, fingerprint {sketch.fingerprint[:16]}", flush=True)
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
