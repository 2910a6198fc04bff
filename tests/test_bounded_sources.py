"""Sources at any declared size: metadata never costs memory, missing chunks are never data, and the
number of tasks of a job is bounded (consecutive chunks grouped into one task)."""

from __future__ import annotations

import json
import os
import re
import tracemalloc

import dask.array as da
import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff.errors import InputError, SourceError
from streamrff.sources.rows import MAX_CHUNKS, open_source

N_COLUMNS = 3
DECLARED = {"1e10": 10**10, "1e15": 10**15}


def numpy_feature_sum(rows: np.ndarray, fitted: srf.RFF) -> np.ndarray:
    """The exact float64 feature sum of the sincos RFF map: m^-1/2 [cos(X W^T), sin(X W^T)], summed over rows."""
    frequencies = fitted._frequencies()
    projection = rows.astype(np.float64) @ frequencies.T
    return np.concatenate([np.cos(projection).sum(0), np.sin(projection).sum(0)]) / np.sqrt(frequencies.shape[0])


@pytest.fixture(scope="module")
def metadata_only(tmp_path_factory):
    """zarr.json alone, declaring 1e10 and 1e15 rows in chunks of 1 000 rows (no chunk stored)."""
    folder = tmp_path_factory.mktemp("declared")
    paths = {}
    for name, n_rows in DECLARED.items():
        paths[name] = str(folder / f"rows-{name}.zarr")
        zarr.create_array(paths[name], shape=(n_rows, N_COLUMNS), chunks=(1_000, N_COLUMNS), dtype="float32")
    paths["large chunks"] = str(folder / "large-chunks.zarr")  # 1e15 rows in 1e6 chunks: listed, none stored
    zarr.create_array(paths["large chunks"], shape=(10**15, N_COLUMNS), chunks=(10**9, N_COLUMNS), dtype="float32")
    return paths


@pytest.mark.parametrize("declared", list(DECLARED))
def test_open_source_refuses_a_declared_size_from_the_metadata_alone(metadata_only, declared):
    tracemalloc.start()
    try:
        with pytest.raises(SourceError) as error:
            open_source(metadata_only[declared])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    message = str(error.value)
    assert "\n" not in message
    assert f"declares {DECLARED[declared]:,} rows in {DECLARED[declared] // 1000:,} chunks of 1,000 rows" in message
    assert f"at most {MAX_CHUNKS:,} chunks" in message and "Rewrite the array with chunks of at least" in message
    assert peak < 20 * 2**20  # nothing per chunk was built


def test_a_source_of_missing_chunks_is_refused_before_the_keys_of_its_rows_are_drawn(metadata_only):
    with pytest.raises(SourceError, match=r"Chunk 'c/0/0' of the zarr array at .* is missing from its store"):
        srf.sketch(metadata_only["large chunks"], srf.RFF(n_features=16, bandwidth="median"))


@pytest.mark.parametrize("declared", [*DECLARED, "large chunks"])
@pytest.mark.parametrize("command", ["sketch", "map", "kpca", "predict"])
def test_cli_declared_sizes_end_in_one_line(cli_main, metadata_only, tmp_path, declared, command):
    source = metadata_only[declared]
    argv = {
        "sketch": ["sketch", source, "-o", str(tmp_path / "out.sketch")],
        "map": ["map", source, "-o", str(tmp_path / "map.json")],
        "kpca": ["kpca", source, "--components", "2", "-o", str(tmp_path / "kpca.json")],
        "predict": ["predict", str(tmp_path / "model.json"), source, "-o", str(tmp_path / "out.zarr")],
    }[command]
    if command == "predict":
        X = np.random.default_rng(0).normal(size=(50, N_COLUMNS))
        srf.save_model(srf.KernelRidge(n_features=16, bandwidth=1.0).fit(X, X[:, 0]), str(tmp_path / "model.json"))

    code, _, err = cli_main(*argv)

    assert code == 1, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(r"declares [\d,]+ rows in [\d,]+ chunks|Chunk 'c/0/0' .* is missing", err), err


@pytest.mark.parametrize("declared", list(DECLARED))
def test_cli_watch_opens_a_declared_size_in_one_line(cli_main, metadata_only, tmp_path, declared):
    reference = np.random.default_rng(0).normal(size=(200, N_COLUMNS)).astype("float32")
    zarr.save_array(str(tmp_path / "ref.zarr"), reference)

    code, _, err = cli_main(
        "watch", metadata_only[declared], "--reference", str(tmp_path / "ref.zarr"),
        "--window", "50", "--ert", "1000", "--features", "16", "--bandwidth", "1",
    )  # fmt: skip

    assert code != 0
    assert len(err.strip().splitlines()) == 1 and "declares" in err and "Traceback" not in err


@pytest.fixture
def array_with_a_deleted_chunk(tmp_path):
    rows = np.random.default_rng(3).normal(size=(1_000, N_COLUMNS)).astype("float32")
    path = tmp_path / "rows.zarr"
    zarr.create_array(str(path), shape=rows.shape, chunks=(100, N_COLUMNS), dtype="float32")[:] = rows
    os.remove(path / "c" / "4" / "0")  # rows 400..499
    zeroed = rows.copy()
    zeroed[400:500] = 0.0
    return str(path), zeroed


def test_a_deleted_chunk_is_refused_naming_it_and_read_as_zeros_when_allowed(array_with_a_deleted_chunk):
    path, zeroed = array_with_a_deleted_chunk
    rff = srf.RFF(n_features=64, bandwidth=1.5, seed=2)

    with pytest.raises(SourceError, match=r"Chunk 'c/4/0' of the zarr array at .*rows.zarr is missing"):
        srf.sketch(path, rff)
    allowed = srf.sketch(path, rff, allow_missing_chunks=True)

    assert allowed.count == 1_000
    np.testing.assert_allclose(allowed.feature_sum, numpy_feature_sum(zeroed, allowed.feature_map), rtol=0, atol=1e-4)


def test_cli_allow_missing_chunks(cli_main, array_with_a_deleted_chunk, tmp_path):
    path, zeroed = array_with_a_deleted_chunk
    map_options = ["--features", "64", "--bandwidth", "1.5", "--seed", "2"]

    code, _, err = cli_main("sketch", path, "-o", str(tmp_path / "refused.sketch"), *map_options)
    assert code == 1 and "Chunk 'c/4/0'" in err and "--allow-missing-chunks" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "refused.sketch").exists()

    out = str(tmp_path / "allowed.sketch")
    code, _, err = cli_main("sketch", path, "-o", out, *map_options, "--allow-missing-chunks")
    assert code == 0, err
    result = srf.load(out)
    np.testing.assert_allclose(result.feature_sum, numpy_feature_sum(zeroed, result.feature_map), rtol=0, atol=1e-4)


def test_cli_explain_allow_missing_chunks(cli_main, array_with_a_deleted_chunk, tmp_path):
    path, zeroed = array_with_a_deleted_chunk
    rff = srf.RFF(n_features=64, bandwidth=1.5, seed=2).fit(zeroed[:1])
    sketches = [str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch")]
    srf.sketch_array(zeroed[:500], rff, moments=True).save(sketches[0])
    srf.sketch_array(zeroed[500:], rff, moments=True).save(sketches[1])
    explain = ["explain", *sketches, "--source", path, "--top", "5", "--json"]

    code, _, err = cli_main(*explain)
    assert code == 1 and "Chunk 'c/4/0'" in err and "--allow-missing-chunks" in err
    assert len(err.strip().splitlines()) == 1

    code, out, err = cli_main(*explain, "--allow-missing-chunks")
    assert code == 0, err
    features = rff.transform(zeroed).astype(np.float64)  # the witness of every row, zeros for the missing chunk
    witness = features @ (features[:500].mean(0) - features[500:].mean(0))
    payload = json.loads(out)
    np.testing.assert_allclose(payload["values"], witness[payload["rows"]], atol=1e-5)
    assert sorted(payload["values"]) == pytest.approx(sorted(witness)[:5] if payload["which"] == "smallest"
                                                      else sorted(witness)[-5:], abs=1e-5)  # fmt: skip


def test_predict_refuses_a_missing_chunk_before_any_work(array_with_a_deleted_chunk):
    path, zeroed = array_with_a_deleted_chunk
    model = srf.KernelRidge(n_features=16, bandwidth=1.0).fit(zeroed[:200], zeroed[:200, 0])

    with pytest.raises(SourceError, match="Chunk 'c/4/0'"):
        model.predict(path)


def _many_chunks(n_chunks: int, rows_per_chunk: int = 4) -> np.ndarray:
    return np.random.default_rng(5).normal(size=(n_chunks * rows_per_chunk, N_COLUMNS)).astype("float32")


def test_grouped_tasks_equal_one_task_per_chunk_and_numpy_for_a_dask_source():
    rows = _many_chunks(1_500)
    source = da.from_array(rows, chunks=(4, N_COLUMNS))
    rff = srf.RFF(n_features=32, bandwidth=1.0, seed=1)

    grouped = srf.sketch(source, rff, moments=True, max_tasks=7)  # groups of 215 chunks
    per_chunk = srf.sketch(source, rff, moments=True, max_tasks=10_000)

    assert grouped.count == per_chunk.count == rows.shape[0]
    np.testing.assert_allclose(grouped.feature_sum, per_chunk.feature_sum, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grouped.moment, per_chunk.moment, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grouped.feature_sum, numpy_feature_sum(rows, grouped.feature_map), rtol=0, atol=1e-3)


def test_grouped_tasks_read_stored_chunks_one_at_a_time_and_equal_numpy(tmp_path):
    rows = _many_chunks(1_000)
    path = str(tmp_path / "small-chunks.zarr")
    zarr.create_array(path, shape=rows.shape, chunks=(4, N_COLUMNS), dtype="float32")[:] = rows
    rff = srf.RFF(n_features=32, bandwidth=1.0, seed=1)

    grouped = srf.sketch(path, rff, max_tasks=9)
    per_chunk = srf.sketch(path, rff, max_tasks=10_000)

    np.testing.assert_allclose(grouped.feature_sum, per_chunk.feature_sum, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grouped.feature_sum, numpy_feature_sum(rows, grouped.feature_map), rtol=0, atol=1e-3)


def test_grouped_checkpoint_partials_are_keyed_by_their_chunks(tmp_path, caplog):
    rows = _many_chunks(40, rows_per_chunk=25)
    path = str(tmp_path / "rows.zarr")
    zarr.create_array(path, shape=rows.shape, chunks=(25, N_COLUMNS), dtype="float32")[:] = rows
    rff = srf.RFF(n_features=16, bandwidth=1.0, seed=1)
    checkpoint = str(tmp_path / "checkpoint")
    log = re.compile(r"sketching (\d+) chunk\(s\): (\d+) from checkpoint, (\d+) to compute.*in (\d+) task\(s\)")

    def run() -> tuple[srf.MeanSketch, tuple[int, ...]]:
        caplog.clear()
        with caplog.at_level("INFO", logger="streamrff.engine"):
            result = srf.sketch(path, rff, checkpoint=checkpoint, max_tasks=5)
        (match,) = [m for m in (log.search(r.getMessage()) for r in caplog.records) if m]
        return result, tuple(int(group) for group in match.groups())

    first, counts = run()
    assert counts == (40, 0, 40, 5)
    (job,) = os.listdir(checkpoint)
    assert len([name for name in os.listdir(f"{checkpoint}/{job}") if name.endswith(".zarr")]) == 5
    again, counts = run()
    assert counts == (40, 40, 0, 5)
    np.testing.assert_array_equal(again.feature_sum, first.feature_sum)

    zarr.open_array(path, mode="r+")[250:275] = 1.0  # chunk 10: the second group of 8 chunks
    rows[250:275] = 1.0
    changed, counts = run()
    assert counts == (40, 32, 8, 5)
    np.testing.assert_allclose(changed.feature_sum, numpy_feature_sum(rows, changed.feature_map), rtol=0, atol=1e-4)


def test_max_tasks_is_checked(tmp_path):
    with pytest.raises(InputError, match=r"max_tasks must be a positive integer \(CLI --max-tasks\). Got 0"):
        srf.sketch(np.zeros((10, 2)), srf.RFF(n_features=8, bandwidth=1.0), max_tasks=0)


def test_chunk_rows_that_would_plan_too_many_tasks_are_refused_before_dask_plans_them():
    huge = da.zeros((10**13, 2), chunks=(10**9, 2), dtype="float32")

    with pytest.raises(SourceError, match=r"in 10,000,000,000,000 tasks of 1 rows"):
        open_source(huge, chunk_rows=1)


def test_a_dask_source_of_very_many_chunks_runs_in_waves_with_the_same_result(monkeypatch):
    import streamrff.engine.tasks

    rows = _many_chunks(600)
    source = da.from_array(rows, chunks=(4, N_COLUMNS))
    rff = srf.RFF(n_features=32, bandwidth=1.0, seed=1)
    per_chunk = srf.sketch(source, rff)
    monkeypatch.setattr(streamrff.engine.tasks, "WAVE_CHUNKS", 50)  # groups of 12 chunks, 4 groups per wave: 13 waves

    in_waves = srf.sketch(source, rff, max_tasks=50)

    assert in_waves.count == rows.shape[0]
    np.testing.assert_allclose(in_waves.feature_sum, per_chunk.feature_sum, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(in_waves.feature_sum, numpy_feature_sum(rows, in_waves.feature_map), rtol=0, atol=1e-3)


def test_a_chunk_missing_from_object_storage_is_refused_from_the_listing(s3_server, s3_bucket):
    import s3fs

    rows = np.random.default_rng(4).normal(size=(400, N_COLUMNS)).astype("float32")
    url = f"s3://{s3_bucket}/half-copied.zarr"
    store = zarr.storage.FsspecStore.from_url(url, storage_options=s3_server.storage_options, read_only=False)
    zarr.create_array(store=store, shape=rows.shape, chunks=(100, N_COLUMNS), dtype="float32")[...] = rows
    rff = srf.RFF(n_features=16, bandwidth=1.0, seed=0)
    assert srf.sketch(url, rff, storage_options=s3_server.storage_options).count == 400  # listed: all present
    s3fs.S3FileSystem(**s3_server.storage_options).rm(f"{s3_bucket}/half-copied.zarr/c/2/0")

    with pytest.raises(SourceError, match=r"Chunk 'c/2/0' of the zarr array at .*half-copied.zarr is missing"):
        srf.sketch(url, rff, storage_options=s3_server.storage_options)
    allowed = srf.sketch(url, rff, storage_options=s3_server.storage_options, allow_missing_chunks=True)
    zeroed = rows.copy()
    zeroed[200:300] = 0.0
    np.testing.assert_allclose(allowed.feature_sum, numpy_feature_sum(zeroed, allowed.feature_map), rtol=0, atol=1e-4)
