"""``streamrff demo``: generated data on two "sites", sketched, merged and compared.

Writes two zarr arrays of the same three clusters, whose shares differ a
little between the sites (a subtle distribution shift), fits one map
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

from ._files.publish import publish_text
from .typing import PathOrURL

__all__ = ["write_demo_data", "demo_cluster_centres", "run_demo"]


#: The demo's clusters: their share of a site's rows, without and with the shift (cluster 1 gives 5% of the
#: rows to cluster 2), and the seed of their centres (the same at both sites).
DEMO_SHARES = {False: (0.45, 0.35, 0.20), True: (0.45, 0.30, 0.25)}
_CENTRES_SEED = 29
#: Distance of each cluster centre from the origin, in units of the clusters' standard deviation (1).
_CENTRE_NORM = 4.0


def demo_cluster_centres(n_columns: int) -> np.ndarray:
    """The three cluster centres of the demo data, shape (3, n_columns): seeded, the same at every site."""
    directions = np.random.default_rng(_CENTRES_SEED).standard_normal((len(DEMO_SHARES[False]), n_columns))
    return _CENTRE_NORM * directions / np.linalg.norm(directions, axis=1, keepdims=True)


def write_demo_data(
    path: PathOrURL, n_rows: int, n_columns: int, shifted: bool, seed: int, chunk_rows: int = 250_000
) -> str:
    """Write a float32 zarr array of rows from three Gaussian clusters; ``shifted`` moves 5% of rows between two.

    Each row is ``c_j + N(0, I)`` for one of the centres ``c_j`` of
    :func:`demo_cluster_centres` (4 standard deviations from the origin, so
    kernel k-means finds them), drawn with the shares ``DEMO_SHARES[shifted]``:
    the shifted site has 30% of its rows in cluster 1 and 25% in cluster 2
    instead of 35% and 20%. The mean moves by about 0.05 of a standard
    deviation per column; the kernel two-sample tests detect the shift, and the
    k-means panel of the demo shows which cluster's share differs.
    """
    import zarr

    centres = demo_cluster_centres(n_columns).astype(np.float32)
    shares = np.asarray(DEMO_SHARES[shifted])

    target = os.fspath(path)
    array = zarr.create_array(
        target, shape=(n_rows, n_columns), chunks=(min(chunk_rows, n_rows), n_columns), dtype="float32", overwrite=True
    )
    for index, start in enumerate(range(0, n_rows, chunk_rows)):
        stop = min(n_rows, start + chunk_rows)
        rng = np.random.default_rng([seed, index])
        block = rng.standard_normal((stop - start, n_columns), dtype=np.float32)
        block += centres[rng.choice(len(shares), size=stop - start, p=shares)]
        array[start:stop] = block
    return target


def _refer_to_shared_map(test: dict[str, Any], shared_map: dict[str, Any]) -> dict[str, Any]:
    """A test's JSON with the report's one map replaced by its fingerprint (any other map is kept)."""
    if test.get("map") != shared_map["spec"]:
        return test
    return {**{key: value for key, value in test.items() if key != "map"}, "map_fingerprint": shared_map["fingerprint"]}


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


#: The demo's drift monitor: a window long enough for its subtle shift, a false alarm once in 1e5 rows on average,
#: and a fixed number of calibration streams (about 2e9 feature values, a few seconds).
DRIFT_WINDOW, DRIFT_ERT, DRIFT_STREAMS, DRIFT_CALM_ROWS = 2000, 100_000, 2000, 5000


def _watch_for_drift(reference: Any, site_a: Any, site_b: Any, echo: Any) -> dict[str, Any]:
    """A DriftMonitor fitted on site A's sketch alone (calibrated from its second moments) watches some of site A's
    rows, then site B's: where it raises the alarm."""
    from .drift import DriftMonitor

    monitor = DriftMonitor(DRIFT_WINDOW, DRIFT_ERT, n_streams=DRIFT_STREAMS).fit(reference)
    calm_rows = min(DRIFT_CALM_ROWS, site_a.shape[0])
    changed_rows = min(20_000, site_b.shape[0])
    echo(
        f"drift monitor on site A's sketch (window {DRIFT_WINDOW}, ERT {DRIFT_ERT:,}): {calm_rows:,} rows of site A, "
        f"then {changed_rows:,} of site B ..."
    )
    calm = monitor.update(site_a.array[-calm_rows:].compute())
    monitor.update(site_b.array[:changed_rows].compute())
    alarm = monitor.drift_at_
    echo(
        "  no alarm"
        if alarm is None
        else f"  alarm at row {alarm:,} of the stream ({alarm - calm_rows:,} rows after site B's rows began)"
    )
    return {
        "window": DRIFT_WINDOW,
        "ert": DRIFT_ERT,
        "calm_rows": calm_rows,
        "changed_rows": changed_rows,
        "alarm_during_calm_rows": bool(calm.drift),
        "alarm_row": alarm,
        "steady_threshold": float(monitor.thresholds_[-1]),
    }


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
    and draw the KPCA scatter coloured by cluster; watch rows of site A, then of
    site B, with a drift monitor fitted on site A's sketch.

    Raises
    ------
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    """
    from . import (
        RFF,
        KernelPCA,
        fit_map,
        load_map,
        merge,
        mmd2,
        mmd_test,
        save_map,
        sketch,
        two_sample_test,
        witness,
    )  # fmt: skip
    from .kmeans import KernelKMeans
    from .sources.rows import open_source

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
        per_site = sample_rows // 2
        sample = np.vstack([site.array[:per_site].compute() for site in (site_a, site_b)])
        clusters = KernelKMeans(n_clusters=3, feature_map=feature_map).fit(sample)
        timings["kmeans_s"] = time.perf_counter() - step

    step = time.perf_counter()
    drift = _watch_for_drift(sketches["site_a"], site_a, site_b, echo)
    timings["drift_s"] = time.perf_counter() - step
    pooled = merge(sketches["site_a"], sketches["site_b"])
    pooled.save(out_dir / "pooled.sketch", overwrite=True)
    spectral = mmd_test(sketches["site_a"], sketches["site_b"], method="spectral")
    hotelling = mmd_test(sketches["site_a"], sketches["site_b"], method="hotelling")
    kpca = KernelPCA(n_components=5).fit_from_sketch(pooled)
    scores = kpca.transform(sample)
    # Where the sites differ: the witness of site A against site B over the sample rows (from the sketches).
    witness_values = witness(sketches["site_a"], sketches["site_b"])(sample)
    cluster_sizes = [int(v) for v in np.bincount(clusters.labels_, minlength=3)]
    # Each cluster's share of each site's sample rows: where the sites differ.
    site_shares = {
        name: [float(v) for v in np.bincount(labels, minlength=3) / max(labels.size, 1)]
        for name, labels in (("site_a", clusters.labels_[:per_site]), ("site_b", clusters.labels_[per_site:]))
    }
    total_variance = pooled.count * kpca.total_variance_

    # The map is written once, at the top; each test names it by its fingerprint.
    shared_map = {"spec": feature_map.spec, "fingerprint": feature_map.fingerprint}
    report = {
        "rows_per_site": n_rows,
        "columns": n_columns,
        "map": shared_map["spec"],
        "map_fingerprint": shared_map["fingerprint"],
        "pooled_count": pooled.count,
        "mmd2_unbiased": mmd2(sketches["site_a"], sketches["site_b"]),
        "mmd2_biased": mmd2(sketches["site_a"], sketches["site_b"], unbiased=False),
        "tests": {
            "spectral": _refer_to_shared_map(spectral.to_dict(include_null=False), shared_map),
            "hotelling": _refer_to_shared_map(hotelling.to_dict(include_null=False), shared_map),
            "permutation_first_rows": _refer_to_shared_map(permutation.to_dict(include_null=False), shared_map),
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
        "drift": drift,
        "witness": {
            "confidence_interval_mmd2": list(spectral.confidence_interval(0.95)),
            "mmd": spectral.mmd,
            "sample_rows_most_site_b": [int(v) for v in np.argsort(witness_values)[:10]],
            "meaning": "witness f(x) = mean k(x, site A) - mean k(x, site B) from the sketches; negative where "
            "site B is over-represented; rows index the k-means sample (first half site A, second half site B)",
        },
        "kmeans_on_sample": {
            "rows": int(sample.shape[0]),
            "inertia": float(clusters.inertia_),
            "n_iter": int(clusters.n_iter_),
            "stop_reason": clusters.stop_reason_,
            "cluster_sizes": cluster_sizes,
            "cluster_shares_by_site": site_shares,
        },
    }
    figure = out_dir / "report.png"
    try:
        from .plot import save_report_figure

        names = [
            f"{j}: {100 * site_shares['site_a'][j]:.0f}% of site A, {100 * site_shares['site_b'][j]:.0f}% of site B"
            for j in range(3)
        ]
        save_report_figure(
            str(figure), result=permutation, scores=scores, labels=clusters.labels_, label_names=names,
            witness_map=(scores[:, :2], witness_values),
        )  # fmt: skip
        report["figure"] = str(figure)
    except ImportError:
        echo("matplotlib is not installed: no report.png (pip install 'streamrff[plot]')")
    report["timings"] = {**timings, "total_s": time.perf_counter() - started}
    publish_text(out_dir / "report.json", json.dumps(report, indent=2), overwrite=True)  # whole or not at all
    echo(f"MMD^2 (unbiased) between the sites: {report['mmd2_unbiased']:.3e}; {spectral.effect_text()}")
    for name, result in (("spectral", spectral), ("hotelling", hotelling), ("permutation", permutation)):
        echo(f"  {name:12s} p = {result.p_value_text}")
    echo(f"kernel PCA explained variance ratio (pooled sketch): {np.round(kpca.explained_variance_ratio_, 3).tolist()}")
    echo(
        f"kernel k-means (k = 3) on {sample.shape[0]:,} sample rows: {clusters.n_iter_} iterations "
        f"({clusters.stop_reason_}), inertia {clusters.inertia_:.4g}, cluster sizes {cluster_sizes}"
    )
    shares = ", ".join(
        f"{j}: {100 * site_shares['site_a'][j]:.1f}% vs {100 * site_shares['site_b'][j]:.1f}%" for j in range(3)
    )
    echo(f"  cluster shares, site A vs site B: {shares}")
    echo(f"wrote {out_dir / 'report.json'}{' and ' + str(figure) if 'figure' in report else ''} "
         f"in {report['timings']['total_s']:.1f} s")  # fmt: skip
    return report
