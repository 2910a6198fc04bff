"""``streamrff demo``: generated data on two "sites", sketched, merged and compared.

Writes two zarr arrays (one with a subtle distribution shift), fits one map
on a row sample pooled across both and saves it as ``map.json``, sketches each
array as if on a separate site with that map (what ``streamrff map`` and
``streamrff sketch --map`` do), merges the sketches, and reports the kernel
two-sample statistics, kernel PCA and kernel k-means in ``report.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._publish import publish_text
from .typing import PathOrURL

__all__ = ["write_demo_data", "run_demo"]


def write_demo_data(
    path: PathOrURL, n_rows: int, n_columns: int, shifted: bool, seed: int, chunk_rows: int = 250_000
) -> str:
    """Write a float32 zarr array of standard normal rows; ``shifted`` mixes in 5% of narrower rows.

    The shift is the alternative of Sutherland & Schneider (2015, sec. 4.2):
    ``0.95 N(0, I) + 0.05 N(0, I/4)``, subtle enough that the mean and the
    per-column variances barely move.
    """
    import zarr

    target = os.fspath(path)
    array = zarr.create_array(
        target, shape=(n_rows, n_columns), chunks=(min(chunk_rows, n_rows), n_columns), dtype="float32", overwrite=True
    )
    for index, start in enumerate(range(0, n_rows, chunk_rows)):
        stop = min(n_rows, start + chunk_rows)
        rng = np.random.default_rng([seed, index])
        block = rng.standard_normal((stop - start, n_columns), dtype=np.float32)
        if shifted:
            narrow = rng.random(stop - start) < 0.05
            block[narrow] *= np.float32(0.5)
        array[start:stop] = block
    return target


def _demo_client(scheduler: str | None, echo: Any) -> contextlib.AbstractContextManager:
    """The scheduler to use: the given address, or an embedded LocalCluster (its dashboard link printed)."""
    from .engine import connect

    if scheduler is not None:
        return connect(scheduler)

    @contextlib.contextmanager
    def local() -> Any:
        from distributed import Client, LocalCluster

        workers = max(1, min(2, os.cpu_count() or 1))
        # silence_logs: workers racing the scheduler's shutdown log heartbeat errors that mean nothing here.
        with (
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.CRITICAL,
            ) as cluster,
            Client(cluster) as client,
        ):
            link = client.dashboard_link if _has_bokeh() else "(install bokeh for the Dask dashboard)"
            echo(f"embedded local cluster: {workers} worker process(es); dashboard: {link}")
            yield client

    return local()


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def run_demo(
    out: PathOrURL = "streamrff-demo",
    n_rows: int = 2_000_000,
    n_columns: int = 16,
    n_features: int = 256,
    scheduler: str | None = None,
    progress: bool = False,
    echo: Any = print,
    n_permutations: int = 200,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Run the demo end to end; return the report (also ``out/report.json``, and ``out/report.png``).

    Steps: write the two sites' arrays; fit one RFF map on a seeded row sample
    pooled across both sites and save it as ``map.json``; load it back as each
    site would and sketch each site with second moments (one pass each) and merge
    the sketches; from the sketches alone run the spectral and Hotelling
    two-sample tests and kernel PCA; run the one-pass exact permutation test
    on the first rows of both sites; run kernel k-means on a sample of rows
    and draw the KPCA scatter coloured by cluster.

    Raises
    ------
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    """
    from . import RFF, KernelPCA, fit_map, load_map, merge, mmd2, mmd_test, save_map, sketch, two_sample_test
    from .io import open_source
    from .kmeans import KernelKMeans

    out_dir = Path(out)
    if out_dir.exists() and not overwrite:
        raise FileExistsError(
            f"{out_dir} already exists. Choose another output or pass overwrite=True (CLI: --overwrite)."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    echo(f"writing two generated zarr arrays of {n_rows:,} x {n_columns} to {out_dir}/ ...")
    # Each site's array is opened once and the opened source is passed to every step.
    site_a = open_source(write_demo_data(out_dir / "site_a.zarr", n_rows, n_columns, shifted=False, seed=1))
    site_b = open_source(write_demo_data(out_dir / "site_b.zarr", n_rows, n_columns, shifted=True, seed=2))
    timings["write_data_s"] = time.perf_counter() - started

    with _demo_client(scheduler, echo) as client:
        step = time.perf_counter()
        # `streamrff map site_a.zarr site_b.zarr -o map.json`: one map, one sample pooled across both sites.
        pooled_map = fit_map(RFF(n_features=n_features, bandwidth="median"), [site_a, site_b], client=client)
        save_map(pooled_map, out_dir / "map.json", overwrite=True)
        echo(
            f"map: RFF sincos, D={n_features}, bandwidth={pooled_map.bandwidth_:.4g} (median heuristic on one "
            f"sample pooled across both sites), saved as {out_dir / 'map.json'}"
        )
        sketches = {}
        for name, site in (("site_a", site_a), ("site_b", site_b)):
            # `streamrff sketch site_X.zarr --map map.json --moments -o site_X.sketch` at each site.
            feature_map = load_map(out_dir / "map.json")
            echo(f"sketching {name} with the shared map and second moments ...")
            sketches[name] = sketch(site, feature_map, moments=True, client=client, progress=progress)
            sketches[name].save(out_dir / f"{name}.sketch", overwrite=True)
        timings["sketch_s"] = time.perf_counter() - step

        step = time.perf_counter()
        head = min(n_rows, 50_000)
        echo(f"exact permutation test (B={n_permutations}) on the first {head:,} rows of each site, one pass ...")
        permutation = two_sample_test(
            site_a.array[:head], site_b.array[:head], feature_map=feature_map,
            n_permutations=n_permutations, client=client,
        )  # fmt: skip
        timings["permutation_test_s"] = time.perf_counter() - step

        step = time.perf_counter()
        sample_rows = min(n_rows, 20_000)
        sample = np.vstack([site.array[: sample_rows // 2].compute() for site in (site_a, site_b)])
        clusters = KernelKMeans(n_clusters=3, feature_map=feature_map).fit(sample)
        timings["kmeans_s"] = time.perf_counter() - step

    pooled = merge(sketches["site_a"], sketches["site_b"])
    pooled.save(out_dir / "pooled.sketch", overwrite=True)
    spectral = mmd_test(sketches["site_a"], sketches["site_b"], method="spectral")
    hotelling = mmd_test(sketches["site_a"], sketches["site_b"], method="hotelling")
    kpca = KernelPCA(n_components=5).fit_from_sketch(pooled)
    scores = kpca.transform(sample)
    cluster_sizes = [int(v) for v in np.bincount(clusters.labels_, minlength=3)]
    total_variance = pooled.count * kpca.total_variance_

    report = {
        "rows_per_site": n_rows,
        "columns": n_columns,
        "map": feature_map.spec,
        "pooled_count": pooled.count,
        "mmd2_unbiased": mmd2(sketches["site_a"], sketches["site_b"]),
        "mmd2_biased": mmd2(sketches["site_a"], sketches["site_b"], unbiased=False),
        "tests": {
            "spectral": spectral.to_dict(include_null=False),
            "hotelling": hotelling.to_dict(include_null=False),
            "permutation_first_rows": permutation.to_dict(include_null=False),
        },
        "kpca": {
            "explained_variance_ratio": [float(v) for v in kpca.explained_variance_ratio_],
            "residual": float(kpca.residual_),
            "residual_fraction": float(kpca.residual_ / total_variance) if total_variance > 0 else 0.0,
            "residual_meaning": (
                "R_k of Chen & Phillips (2016, sec. 7.1): the sum over all pooled rows of the squared "
                "feature-space distance to the span of the top 5 components, in kernel units (k(x, x) = 1), "
                "so at most the number of rows; residual_fraction = R_k / (rows x total feature variance)"
            ),
        },
        "kmeans_on_sample": {
            "rows": int(sample.shape[0]),
            "inertia": float(clusters.inertia_),
            "n_iter": int(clusters.n_iter_),
            "stop_reason": clusters.stop_reason_,
            "cluster_sizes": cluster_sizes,
        },
    }
    figure = out_dir / "report.png"
    try:
        from .plot import save_report_figure

        save_report_figure(str(figure), result=permutation, scores=scores, labels=clusters.labels_)
        report["figure"] = str(figure)
    except ImportError:
        echo("matplotlib is not installed: no report.png (pip install 'streamrff[plot]')")
    report["timings"] = {**timings, "total_s": time.perf_counter() - started}
    publish_text(out_dir / "report.json", json.dumps(report, indent=2), overwrite=True)  # whole or not at all
    echo(f"MMD^2 (unbiased) between the sites: {report['mmd2_unbiased']:.3e}")
    for name, result in (("spectral", spectral), ("hotelling", hotelling), ("permutation", permutation)):
        echo(f"  {name:12s} p = {result.p_value_text}")
    echo(f"kernel PCA explained variance ratio (pooled sketch): {np.round(kpca.explained_variance_ratio_, 3).tolist()}")
    echo(
        f"kernel k-means (k = 3) on {sample.shape[0]:,} sample rows: {clusters.n_iter_} iterations "
        f"({clusters.stop_reason_}), inertia {clusters.inertia_:.4g}, cluster sizes {cluster_sizes}"
    )
    echo(f"wrote {out_dir / 'report.json'}{' and ' + str(figure) if 'figure' in report else ''} "
         f"in {report['timings']['total_s']:.1f} s")  # fmt: skip
    return report
