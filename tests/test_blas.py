"""Results do not depend on the BLAS thread count (streamrff._base.blas).

OpenBLAS's Haswell/Zen kernels round float32 products differently for different thread counts; on
other processors the default kernels may agree anyway. The subprocess test therefore also runs with
``OPENBLAS_CORETYPE=Haswell`` where the processor has AVX2, so that it can fail on any x86-64 machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from streamrff._base.blas import one_blas_thread, single_blas_thread


def _blas_threads() -> list[int]:
    return [entry["num_threads"] for entry in threadpool_info() if entry["user_api"] == "blas"]


def test_single_blas_thread_limits_inside_and_restores_after():
    with threadpool_limits(limits=2, user_api="blas"):
        assert set(_blas_threads()) == {2}
        assert set(single_blas_thread(_blas_threads)()) == {1}
        assert set(_blas_threads()) == {2}


def test_single_blas_thread_holds_while_any_thread_is_inside():
    # The limit is process-wide: the first thread to leave must not lift it under the second.
    first_inside, second_inside, first_left = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, list[int]] = {}

    def first() -> None:
        with one_blas_thread():
            first_inside.set()
            second_inside.wait(timeout=30)
        first_left.set()

    def second() -> None:
        first_inside.wait(timeout=30)
        with one_blas_thread():
            second_inside.set()
            first_left.wait(timeout=30)
            seen["after the first left"] = _blas_threads()

    with threadpool_limits(limits=2, user_api="blas"):
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert first_left.is_set() and "after the first left" in seen
        assert set(seen["after the first left"]) == {1}
        assert set(_blas_threads()) == {2}


# Every path whose BLAS results enter a sketch, a fitted map or a label, in one process.
_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import streamrff as srf
    from streamrff.sketches.cluster import cluster_sketch_of_chunk
    from streamrff.twosample import bandwidth_maps
    from streamrff.sketches.twosample import two_sample_sketch_of_chunk, two_sample_sketches_of_chunk

    rng = np.random.default_rng(0)
    X = rng.normal(size=(6_000, 8)).astype(np.float32)
    results = {}
    for name, feature_map in [
        ("rff", srf.RFF(n_features=256, bandwidth=2.5, seed=1)),
        ("cosphase", srf.RFF(n_features=256, bandwidth=2.5, variant="cosphase", orthogonal=True, seed=2)),
        ("kjl", srf.KJL(n_landmarks=300, n_components=64, bandwidth=2.5, seed=3)),
    ]:
        fitted = feature_map.fit(X[:2_000])
        whole = srf.sketch_array(X, fitted, moments=True)
        results[f"{name} sum"] = whole.feature_sum
        results[f"{name} moment"] = whole.moment
        results[f"{name} transform"] = fitted.transform(X[:1_000])
        engine = srf.sketch(X, fitted, moments=True, chunk_rows=1_500, split_every=2)
        chunks = srf.merge(*[srf.sketch_array(X[i : i + 1_500], fitted, moments=True) for i in range(0, 6_000, 1_500)])
        results[f"{name} engine sum"], results[f"{name} engine moment"] = engine.feature_sum, engine.moment
        results[f"{name} chunks sum"], results[f"{name} chunks moment"] = chunks.feature_sum, chunks.moment
        centers = fitted.transform(X[:5]).astype(np.float64)
        clusters = cluster_sketch_of_chunk(X, fitted, centers)
        results[f"{name} cluster sums"] = clusters.sums
        results[f"{name} cluster counts"] = clusters.counts
        pair = two_sample_sketch_of_chunk(X, fitted, 0, 3_000, 3_000, 32, 7)
        for key, value in pair._arrays().items():
            results[f"{name} two-sample {key}"] = value
    # The aggregated test's kernel: one float32 GEMM per bandwidth and tile, from a shared projection.
    maps = bandwidth_maps([0.5, 2.5, 10.0], n_features_in=8, n_features=256, seed=1)
    for index, part in enumerate(two_sample_sketches_of_chunk(X, maps, 0, 3_000, 3_000, 32, 7)):
        for key, value in part._arrays().items():
            results[f"bandwidth {index} two-sample {key}"] = value
    kmeans = srf.KernelKMeans(n_clusters=3, n_features=128, bandwidth=2.5, seed=0).fit(X[:3_000])
    results["kmeans centers"] = kmeans.cluster_centers_
    np.savez(sys.argv[1], **results)
    """
)


def _has_avx2() -> bool:
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _environments(every: bool) -> list[tuple[str, dict[str, str]]]:
    """OpenBLAS environments to compare: with ``every``, both processor kinds and the default, 1 and
    2 threads; else only the sharpest processor kind (Haswell where the processor has AVX2) at 1 and 2
    threads, the pair whose float32 rounding differs where the results could depend on threads."""
    core_types = [None] + (["Haswell"] if _has_avx2() else [])
    if not every:
        core_types = core_types[-1:]
    variants = []
    for core_type in core_types:
        for threads in (None, "1", "2") if every else ("1", "2"):
            env = {
                key: value
                for key, value in os.environ.items()
                if key not in ("OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE")
            }
            if threads is not None:
                env["OPENBLAS_NUM_THREADS"] = threads
            if core_type is not None:
                env["OPENBLAS_CORETYPE"] = core_type
            variants.append((f"OPENBLAS_CORETYPE={core_type} OPENBLAS_NUM_THREADS={threads}", env))
    return variants


# Each environment is a fresh process (about 12 s): the default suite compares 1 and 2 threads on the
# sharpest processor kind; the slow suite every processor kind and thread count.
@pytest.mark.parametrize(
    "every",
    [
        pytest.param(False, id="one-kind-1-vs-2-threads"),
        pytest.param(True, id="every-kind-and-count", marks=pytest.mark.slow),
    ],
)
def test_sketches_maps_and_labels_do_not_depend_on_blas_threads(tmp_path, every):
    script = tmp_path / "paths.py"
    script.write_text(_SCRIPT)
    runs = {}
    for label, env in _environments(every):
        out = tmp_path / f"{len(runs)}.npz"
        done = subprocess.run(
            [sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, f"{label}: {done.stderr[-2000:]}"
        with np.load(out) as stored:
            runs[label] = dict(stored)

    for label, arrays in runs.items():
        # The engine over chunks equals merging in-memory sketches of the same chunks.
        for name in ("rff", "cosphase", "kjl"):
            for part in ("sum", "moment"):
                engine, chunks = arrays[f"{name} engine {part}"], arrays[f"{name} chunks {part}"]
                np.testing.assert_allclose(engine, chunks, rtol=1e-12, atol=1e-12 * np.abs(chunks).max(), err_msg=label)
    reference_label, reference = next(iter(runs.items()))
    for label, arrays in runs.items():
        # Per processor kind, every thread count gives the same results to float64 rounding.
        if label.split()[0] != reference_label.split()[0]:
            reference_label, reference = label, arrays
        for key, expected in reference.items():
            np.testing.assert_allclose(
                arrays[key],
                expected,
                rtol=1e-12,
                atol=1e-12 * max(np.abs(expected).max(), 1e-300),
                err_msg=f"{key}: {label} vs {reference_label}",
            )
