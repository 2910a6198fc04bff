"""The sketch store's time buckets, retention (compact) and one-pass row digest (issue #45): real zarr stores,
real processes; references are direct sketches of the same rows, float64 features, and numpy re-implementations."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError, SourceChangedError
from streamrff.store import rows_digest
from streamrff.store.timegrid import parse_bucket

HOUR = np.timedelta64(3600, "s")
T0 = np.datetime64("2026-03-01T00:00:00")


def _map(n_features: int = 64, seed: int = 3) -> srf.RFF:
    return srf.RFF(n_features=n_features, bandwidth=1.0, seed=seed).fit(np.zeros((1, 3)))


def _rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)


def _exact_sums(X: np.ndarray, feature_map: srf.FeatureMap) -> np.ndarray:
    return np.asarray(feature_map.transform(X.astype(np.float64)), dtype=np.float64).sum(axis=0)


def _reference_lanes(rows: np.ndarray, first_row: int) -> np.ndarray:
    """The digest lanes as the store documents them, re-implemented in numpy (finite rows only)."""

    def mix(v):
        v = (v ^ (v >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        v = (v ^ (v >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return v ^ (v >> np.uint64(31))

    with np.errstate(over="ignore"):
        width = rows.shape[1]
        columns = np.arange(width, dtype=np.uint64)[:, None] * np.uint64(2) + np.arange(2, dtype=np.uint64)
        keys = mix(columns + np.uint64(0x632BE59BD9B4E019)) | np.uint64(1)
        bits = (np.asarray(rows, dtype=np.float64) + 0.0).view(np.uint64)
        lane_keys = np.array([0x9E3779B97F4A7C15, 0xD1B54A32D192ED03], dtype=np.uint64)
        position = np.arange(first_row, first_row + rows.shape[0], dtype=np.uint64)[:, None] ^ lane_keys
        return mix((bits @ keys) ^ mix(position)).sum(axis=0, dtype=np.uint64)


def test_row_digest_of_an_append_is_computed_in_its_chunk_tasks_as_documented(tmp_path, tmp_zarr):
    from streamrff.store.digest import _checked_lanes, _finish_digest

    X = _rows(300)
    X[7, 1] = -0.0
    np.testing.assert_array_equal(_checked_lanes(X, 40), _reference_lanes(X, 40))
    source = tmp_zarr(X, 35)  # chunks that do not fall on the bucket edges
    store = srf.SketchStore.create(tmp_path / "s", _map(), bucket=100)
    store.append(source)
    for bucket in range(3):
        (record,) = store._read_buckets([bucket])
        rows = X[bucket * 100 : (bucket + 1) * 100]
        assert record.source_digest == _finish_digest(_reference_lanes(rows, bucket * 100), 100, 3)
    # rows with NaN, skipped: the digest in the tasks equals the digest of the rows as given
    Y = _rows(200, seed=1)
    Y[[5, 150], 0] = np.nan
    skipping = srf.SketchStore.create(tmp_path / "nan", _map(), bucket=100)
    skipping.append(Y, on_invalid="skip", chunk_rows=30)
    (record,) = skipping._read_buckets([1])
    assert record.count == 99 and record.n_invalid == 1
    assert record.source_digest == rows_digest(Y[100:], first_row=100)
    assert skipping.append(Y, on_invalid="skip").unchanged == (0, 1)


def test_parse_bucket_durations_and_refusals():
    assert parse_bucket("1h")[1:] == (3600, "1h")
    assert parse_bucket("15min")[1] == parse_bucket("PT15M")[1] == 900
    assert parse_bucket("2d")[1] == parse_bucket("P2D")[1] == 172_800
    assert parse_bucket("PT1H30M")[1] == 5400 and parse_bucket("30s")[1] == 30
    assert parse_bucket(np.timedelta64(2, "h"))[1] == 7200
    for bad in ("1y", "0h", "h1", "", "PT", -5, 0, 1.5):
        with pytest.raises(InputError, match="bucket"):
            parse_bucket(bad)


def _irregular_times(n: int, hours: float, seed: int = 0) -> np.ndarray:
    """n sorted times in [T0, T0 + hours) (nanoseconds), random gaps."""
    offsets = np.sort(np.random.default_rng(seed).uniform(0, hours * 3600e9, size=n)).astype(np.int64)
    return T0.astype("datetime64[ns]") + offsets.astype("timedelta64[ns]")


def test_time_buckets_equal_direct_sketches_of_the_rows_of_each_span(tmp_path):
    X = _rows(900)
    times = _irregular_times(900, 9.5)  # 9 complete hours and half of the tenth
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "h.store", rff, bucket="1h")
    result = store.append(X, times=times, chunk_rows=64)  # bucket edges off the chunk edges
    first = int(T0.astype("datetime64[h]").astype(np.int64))
    assert result.appended == tuple(range(first, first + 9)) and result.rows_left == int((times >= T0 + 9 * HOUR).sum())
    for a, b in [(0, 9), (2, 5), (4, 5), (1, 8)]:
        start, stop = T0 + a * HOUR, T0 + b * HOUR
        inside = (times >= start) & (times < stop)
        part = store.range(str(start), stop)  # an ISO string and a datetime64
        direct = srf.sketch(X[inside], rff)
        assert part.count == direct.count == int(inside.sum())
        np.testing.assert_allclose(part.feature_sum, direct.feature_sum, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(part.feature_sum, _exact_sums(X[inside], rff), atol=5e-4)
    with pytest.raises(InputError, match="bucket edge of 1h"):
        store.range(T0 + np.timedelta64(90, "m"), T0 + 3 * HOUR)
    with pytest.raises(InputError, match="is not stored"):
        store.range(T0, T0 + 10 * HOUR)  # the last hour is incomplete: not appended
    # the same rows again change nothing; a later row completes the tenth hour; final=True the eleventh
    assert store.append(X, times=times).unchanged == result.appended
    more = np.vstack([X, _rows(3, seed=9)])
    later = np.concatenate([times, T0 + np.array([10 * 3600 + 5, 10 * 3600 + 7, 10 * 3600 + 9], "timedelta64[s]")])
    assert store.append(more, times=later).appended == (first + 9,)
    assert store.append(more, times=later, final=True).appended == (first + 10,)
    assert store.range(T0, T0 + 11 * HOUR).count == 903
    changed = X.copy()
    changed[10] += 1.0
    with pytest.raises(SourceChangedError, match=f"Bucket {first} .*2026-03-01T00:00:00Z"):
        store.append(changed, times=times)


def test_time_buckets_on_chunk_edges_gaps_and_xarray_time_coordinates(tmp_path):
    import xarray

    X = _rows(6 * 40)
    hours = np.repeat(np.arange(8)[[0, 1, 2, 5, 6, 7]], 40)  # hours 3 and 4 have no rows
    times = T0 + hours * HOUR + np.tile(np.arange(40), 6) * np.timedelta64(60, "s")
    rff = _map()
    data = xarray.DataArray(X, dims=("time", "feature"), coords={"time": times})
    store = srf.SketchStore.create(tmp_path / "x.store", rff, bucket="PT1H")
    result = store.append(data, chunk_rows=40, final=True)
    assert len(result.appended) == 8  # empty hours are stored empty
    whole = store.range(T0, T0 + 8 * HOUR)
    direct = srf.sketch(X, rff, chunk_rows=40)
    assert whole.count == 240
    np.testing.assert_allclose(whole.feature_sum, direct.feature_sum, rtol=1e-9, atol=1e-12)
    assert store.range(T0 + 3 * HOUR, T0 + 5 * HOUR).count == 0
    late = store.range(T0 + 2 * HOUR, T0 + 6 * HOUR)
    np.testing.assert_allclose(
        late.feature_sum, srf.sketch(X[80:160], rff, chunk_rows=40).feature_sum, rtol=1e-9, atol=1e-12
    )
    shuffled = times.copy()
    shuffled[[10, 11]] = shuffled[[11, 10]]
    with pytest.raises(InputError, match="time-sorted within an append: row 11"):
        store.append(X, times=shuffled)
    with pytest.raises(InputError, match="times="):
        store.append(X)
    with pytest.raises(InputError, match="times=, time_coordinate="):
        srf.SketchStore.create(tmp_path / "rows", rff, bucket=10).append(X, times=times)


@pytest.mark.filterwarnings("ignore::streamrff.errors.BiasWarning")
def test_compact_rolls_old_buckets_into_coarse_ones_with_a_prefix_of_the_features(tmp_path):
    X = _rows(1200)
    rff = _map(n_features=64)
    small = _map(n_features=16)
    store = srf.SketchStore.create(tmp_path / "c.store", rff, bucket=50)
    store.append(X)
    fine_records = store.info()["records"]
    done = store.compact(older_than=700, to=200, features=16)
    assert done["compacted"] == [0, 1, 2] and done["deleted_records"] > 0
    assert store.info()["records"] < fine_records and store.info()["compacted"]["buckets"] == 3
    old = store.range(0, 600)
    assert old.feature_map.fingerprint == small.fingerprint and old.count == 600
    np.testing.assert_allclose(old.feature_sum, srf.sketch(X[:600], small).feature_sum, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(old.feature_sum, _exact_sums(X[:600], small), atol=2e-4)
    mixed = store.range(200, 1000)  # compacted and fine: truncated to 16 features
    np.testing.assert_allclose(mixed.feature_sum, _exact_sums(X[200:1000], small), atol=3e-4)
    fine = store.range(600, 1200)  # fine only: all 64 features
    np.testing.assert_allclose(fine.feature_sum, srf.sketch(X[600:1200], rff).feature_sum, rtol=1e-6, atol=1e-5)
    rest = store.complement(600, 800)
    np.testing.assert_allclose(rest.feature_sum, _exact_sums(np.vstack([X[:600], X[800:]]), small), atol=4e-4)
    with pytest.raises(InputError, match="cuts compacted bucket 1"):
        store.range(250, 800)
    assert store.append(X).compacted == tuple(range(12))  # compacted buckets are not appended again
    with pytest.raises(InputError, match="same to= and features="):
        store.compact(older_than=1200, to=400, features=16)
    assert store.compact(older_than=1200, to=200, features=16)["compacted"] == [3, 4, 5]
    assert store.range().count == 1200
    structured = srf.RFF(n_features=64, bandwidth=1.0, seed=3, structured=True).fit(np.zeros((1, 16)))
    other = srf.SketchStore.create(tmp_path / "st", structured, bucket=10)
    with pytest.raises(InputError, match="not a prefix"):
        other.compact(older_than=100, to=20, features=16)


def test_compact_leftovers_are_never_counted_twice_and_the_next_compact_deletes_them(tmp_path):
    X = _rows(400)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "k.store", rff, bucket="1h")
    times = T0 + np.arange(400) * np.timedelta64(60, "s")  # 6 h 40 min
    store.append(X, times=times)
    saved = {p: p.read_bytes() for p in (Path(store.path) / "records").rglob("0")}
    store.compact(older_than=T0 + 4 * HOUR, to="2h")
    for path, data in saved.items():  # a compactor killed before deleting: the fine records are back
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    reopened = srf.SketchStore.open(store.path)
    whole = reopened.range(T0, T0 + 6 * HOUR)
    assert whole.count == 360
    np.testing.assert_allclose(whole.feature_sum, srf.sketch(X[:360], rff).feature_sum, rtol=1e-6, atol=1e-5)
    assert reopened.compact(older_than=T0 + 4 * HOUR, to="2h")["deleted_records"] > 0
    assert reopened.range(T0, T0 + 6 * HOUR).count == 360


def test_store_cli_time_buckets_and_compact(tmp_path, tmp_zarr, cli_main):
    X = _rows(300)
    times = T0 + np.arange(300) * np.timedelta64(60, "s")  # 5 hours
    source = tmp_zarr(X, 60)
    np.save(tmp_path / "times.npy", times)
    rff = _map()
    srf.save_map(rff, tmp_path / "map.json")
    store = str(tmp_path / "t.store")
    assert cli_main("store", "create", store, "--map", str(tmp_path / "map.json"), "--bucket", "1h").code == 0
    out = cli_main("store", "append", store, source, "--times", str(tmp_path / "times.npy"), "--json")
    assert out.code == 0 and len(json.loads(out.out)["appended"]) == 4
    assert cli_main("store", "append", store, source, "--times", str(tmp_path / "times.npy"), "--final").code == 0
    out = str(tmp_path / "r.sketch")
    ranged = cli_main("store", "range", store, "--start", "2026-03-01T01:00", "--stop", "2026-03-01T04:00", "-o", out)
    assert ranged.code == 0
    np.testing.assert_allclose(srf.load(out).feature_sum, _exact_sums(X[60:240], rff), atol=2e-4)
    done = cli_main("store", "compact", store, "--older-than", "2026-03-01T04:00", "--to", "2h", "--json")
    first = int(T0.astype("datetime64[h]").astype(np.int64)) // 2
    assert done.code == 0 and json.loads(done.out)["compacted"] == [first, first + 1]
    info = json.loads(cli_main("store", "info", store, "--json").out)
    assert info["bucket"] == "1h" and info["compacted"]["buckets"] == 2
    assert cli_main("store", "info", store).code == 0
    bad = cli_main("store", "create", str(tmp_path / "bad"), "--map", str(tmp_path / "map.json"), "--bucket", "1y")
    assert bad.code == 1 and "bucket='1y'" in bad.err and "Traceback" not in bad.err
    bad = cli_main("store", "range", store, "--start", "2026-03-01T00:30", "-o", str(tmp_path / "q.sketch"))
    assert bad.code == 1 and "bucket edge of 1h" in bad.err and "Traceback" not in bad.err


_COMPACTOR = """
import sys, streamrff as srf
store = srf.SketchStore.open(sys.argv[1])
for stop in range(4, 201, 4):  # one coarse bucket at a time
    store.compact(older_than=stop * 5, to=20)
"""


@pytest.mark.slow
def test_compact_killed_at_random_while_a_reader_queries_loses_nothing(tmp_path):
    X = _rows(200 * 5)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "r.store", rff, bucket=5)
    store.append(X)
    expected = srf.sketch(X, rff).feature_sum
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    rng = np.random.default_rng(0)
    for _attempt in range(3):
        process = subprocess.Popen([sys.executable, "-c", _COMPACTOR, store.path], env=env)
        deadline = time.monotonic() + rng.uniform(1.0, 4.0)
        reader = srf.SketchStore.open(store.path)
        while time.monotonic() < deadline and process.poll() is None:
            whole = reader.range(0, 1000)  # either fine or coarse for every bucket, never both or neither
            assert whole.count == 1000
            np.testing.assert_allclose(whole.feature_sum, expected, rtol=1e-6, atol=1e-5)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()
    store.compact(older_than=1000, to=20)
    assert store.info()["compacted"]["buckets"] == 50 and store.info()["buckets"] == 0
    np.testing.assert_allclose(store.range(0, 1000).feature_sum, expected, rtol=1e-6, atol=1e-5)


def test_time_buckets_and_compact_on_object_storage(s3_bucket, s3_server):
    X = _rows(240)
    times = T0 + np.arange(240) * np.timedelta64(60, "s")  # 4 hours
    rff = _map()
    small = _map(n_features=16)
    url = f"s3://{s3_bucket}/hourly.store"
    store = srf.SketchStore.create(url, rff, bucket="1h", storage_options=s3_server.storage_options)
    assert len(store.append(X, times=times, final=True).appended) == 4
    done = store.compact(older_than=T0 + 2 * HOUR, to="2h", features=16)
    assert len(done["compacted"]) == 1 and done["deleted_records"] == 3  # two hours and their rollup
    opened = srf.SketchStore.open(url, storage_options=s3_server.storage_options)
    whole = opened.range(T0, T0 + 4 * HOUR)
    assert whole.count == 240 and whole.feature_map.fingerprint == small.fingerprint
    np.testing.assert_allclose(whole.feature_sum, _exact_sums(X, small), atol=2e-4)


def test_watch_store_appends_each_bucket_as_its_rows_are_read_and_resumes_inside_a_bucket(tmp_path, cli_main):
    import zarr

    rng = np.random.default_rng(5)
    zarr.create_array(str(tmp_path / "ref.zarr"), data=rng.normal(size=(500, 3)).astype(np.float32), chunks=(250, 3))
    stream = rng.normal(size=(1000, 3)).astype(np.float32)
    zarr.create_array(str(tmp_path / "stream.zarr"), data=stream, chunks=(150, 3))
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "w.store", rff, bucket=200)
    watch = ["watch", str(tmp_path / "stream.zarr"), "--reference", str(tmp_path / "ref.zarr"), "--window", "50",
             "--ert", "1000", "--features", "32", "--streams", "500", "--store", store.path, "--json"]  # fmt: skip
    first = cli_main(*watch, "--max-rows", "700")
    assert first.code == 0, first.err
    events = [json.loads(line) for line in first.out.splitlines()]
    assert [b for e in events if e["event"] == "store" for b in e["buckets"]] == [0, 1, 2]
    second = cli_main(*watch, "--from-row", "700")  # inside bucket 3: its first rows are read again
    assert second.code == 0, second.err
    assert store.info()["buckets"] == 5
    whole = store.range(0, 1000)
    np.testing.assert_allclose(whole.feature_sum, srf.sketch(stream, rff).feature_sum, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(store.range(600, 800).feature_sum, _exact_sums(stream[600:800], rff), atol=2e-4)
