"""The sketch store (issue #45): real zarr stores on disk and on moto's S3 server, real subprocesses and signals."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError, SketchFormatError, SketchSignatureError, SourceChangedError
from streamrff.formats.store import HEADER
from streamrff.store.records import _blocks

ROWS = 50  # rows per bucket


def _rows(n: int, seed: int = 0, shift: float = 0.0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(n, 3)) + shift).astype(np.float32)


def _map(d: int = 3, n_features: int = 64) -> srf.RFF:
    return srf.RFF(n_features=n_features, bandwidth=1.0, seed=3).fit(np.zeros((1, d)))


def _exact_sums(X: np.ndarray, feature_map: srf.RFF) -> np.ndarray:
    """The feature sum in float64 features, straight from the map (an independent reference)."""
    return feature_map.transform(X.astype(np.float64)).astype(np.float64).sum(axis=0)


def _tree_bytes(path: Path) -> dict[str, str]:
    return {
        str(item.relative_to(path)): hashlib.sha256(item.read_bytes()).hexdigest()
        for item in sorted(path.rglob("*"))
        if item.is_file()
    }


def _record_path(store: srf.SketchStore, level: int, index: int) -> Path:
    return Path(store.path) / "records" / "c" / str(store._root.slot(level, index)) / "0"


def test_store_range_and_complement_equal_direct_sketches_of_the_same_rows(tmp_path, tmp_zarr):
    X = _rows(37 * ROWS + 20)
    source = tmp_zarr(X, ROWS)  # bucket edges on chunk edges
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS)
    result = store.append(source)
    assert result.appended == tuple(range(37)) and result.rows_left == 20
    for start, stop in [(0, 37), (5, 6), (3, 29), (16, 32), (1, 36)]:
        part = store.range(start * ROWS, stop * ROWS)
        direct = srf.sketch(X[start * ROWS : stop * ROWS], rff, chunk_rows=ROWS)
        assert part.count == direct.count == (stop - start) * ROWS
        np.testing.assert_allclose(part.feature_sum, direct.feature_sum, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(part.feature_sum, _exact_sums(X[start * ROWS : stop * ROWS], rff), atol=2e-4)
        assert part.squared_norm_sum == pytest.approx(direct.squared_norm_sum, rel=1e-12)
        rest = store.complement(start * ROWS, stop * ROWS)
        other = np.vstack([X[: start * ROWS], X[stop * ROWS : 37 * ROWS]])
        if len(other):
            direct_rest = srf.sketch(other, rff, chunk_rows=ROWS)
            assert rest.count == len(other)
            np.testing.assert_allclose(rest.feature_sum, direct_rest.feature_sum, rtol=1e-9, atol=1e-9)
    assert (store.range(0, 10 * ROWS) - store.range(0, 4 * ROWS)).count == 6 * ROWS
    with pytest.raises(InputError, match="bucket edge"):
        store.range(10, 100)
    with pytest.raises(InputError, match=r"Bucket 37 \(rows 1850..1899\)"):
        store.range(0, 38 * ROWS)


def test_store_ranges_read_at_most_two_records_per_level():
    for first, stop in itertools.combinations(range(0, 70), 2):
        blocks = _blocks(first, stop)
        assert len(blocks) <= 2 * max(1, (stop - first).bit_length())
        covered = [bucket for level, index in blocks for bucket in range(index << level, (index + 1) << level)]
        assert covered == list(range(first, stop))
    assert max(len(_blocks(a, b)) for a, b in [(1, 8759), (4095, 8191), (1, 8760)]) <= 26


def test_store_range_reads_halves_where_a_rollup_is_missing_and_repair_rebuilds_it(tmp_path):
    X = _rows(16 * ROWS)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS)
    store.append(X)
    expected = store.range(0, 16 * ROWS)
    for level, index in [(4, 0), (2, 1)]:  # as if the appender completing them had been killed
        _record_path(store, level, index).unlink()
    again = store.range(0, 16 * ROWS)
    assert again.count == expected.count
    np.testing.assert_allclose(again.feature_sum, expected.feature_sum, rtol=1e-12)
    assert store.repair() == 2
    assert _record_path(store, 4, 0).exists() and _record_path(store, 2, 1).exists()


def test_store_append_of_the_same_rows_changes_no_byte_and_other_rows_are_refused_naming_the_bucket(tmp_path):
    X = _rows(6 * ROWS)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS)
    store.append(X[: 4 * ROWS])
    before = _tree_bytes(Path(store.path))
    result = store.append(X[2 * ROWS : 4 * ROWS], start=2 * ROWS)
    assert result.appended == () and result.unchanged == (2, 3)
    assert _tree_bytes(Path(store.path)) == before
    changed = X.copy()
    changed[3 * ROWS + 7, 1] += 1e-3
    with pytest.raises(SourceChangedError, match=r"Bucket 3 \(rows 150..199\)"):
        store.append(changed)
    assert _tree_bytes(Path(store.path)) == before
    assert store.append(X).appended == (4, 5)  # the stream continues


def test_store_records_are_an_ordinary_zarr_array_and_tampered_records_are_refused(tmp_path):
    import zarr

    X = _rows(4 * ROWS)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS)
    store.append(X)
    records = zarr.open_array(str(tmp_path / "s.store" / "records"), mode="r")
    row = records[store._root.slot(0, 2)]
    assert row[2] == ROWS
    np.testing.assert_allclose(row[HEADER:], _exact_sums(X[2 * ROWS : 3 * ROWS], rff), atol=1e-4)
    # A record copied into another bucket's slot: the index disagrees with the arrays.
    shutil.copy(_record_path(store, 0, 1), _record_path(store, 0, 3))
    with pytest.raises(SketchFormatError, match=r"buckets 3..3 \(level 0\) says it holds level 0, index 1"):
        store.range(3 * ROWS, 4 * ROWS)
    # A flipped byte: the checksum.
    path = _record_path(store, 0, 0)
    data = bytearray(path.read_bytes())
    data[HEADER * 8 + 5] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(SketchFormatError, match="crc32c"):
        store.range(0, ROWS)
    # Tampered declared sizes: refused before any record is read.
    meta = json.loads((tmp_path / "s.store" / "records" / "zarr.json").read_text())
    meta["shape"][1] = 10**9
    (tmp_path / "s.store" / "records" / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(SketchFormatError, match="records array declares shape"):
        srf.SketchStore.open(tmp_path / "s.store")


def test_store_signed_records_verify_only_with_their_key(tmp_path):
    key, other = b"k" * 32, b"o" * 32
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS, signed=True)
    with pytest.raises(InputError, match="signed store"):
        store.append(_rows(2 * ROWS))
    store.append(_rows(2 * ROWS), signing_key=key)
    assert srf.SketchStore.open(tmp_path / "s.store", verify_key=key).range(0, 2 * ROWS).count == 2 * ROWS
    with pytest.raises(SketchSignatureError, match="not signed with the verify key"):
        srf.SketchStore.open(tmp_path / "s.store", verify_key=other).range(0, 2 * ROWS)


def test_store_on_object_storage_appends_and_reads_ranges(s3_bucket, s3_server):
    X = _rows(8 * ROWS)
    rff = _map()
    url = f"s3://{s3_bucket}/stream.store"
    store = srf.SketchStore.create(url, rff, bucket=ROWS, storage_options=s3_server.storage_options)
    assert store.append(X).appended == tuple(range(8))
    with pytest.raises(FileExistsError):
        srf.SketchStore.create(url, rff, bucket=ROWS, storage_options=s3_server.storage_options)
    opened = srf.SketchStore.open(url, storage_options=s3_server.storage_options)
    part = opened.range(ROWS, 7 * ROWS)
    direct = srf.sketch_array(X[ROWS : 7 * ROWS], rff)
    assert part.count == 6 * ROWS
    np.testing.assert_allclose(part.feature_sum, direct.feature_sum, rtol=1e-6, atol=1e-4)
    assert opened.info()["records"] == 8 + 4 + 2 + 1
    assert opened.append(X[4 * ROWS :], start=4 * ROWS).unchanged == (4, 5, 6, 7)


def test_store_bucket_permutation_null_is_the_relabelling_distribution(tmp_path):
    X = _rows(6 * ROWS, seed=1)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS)
    store.append(X)
    result = store.test((0, 3 * ROWS), (3 * ROWS, 6 * ROWS), n_permutations=200)
    assert len(result.null) == 20  # at most B distinct labellings: every one of them
    assert result.method == "bucket-permutation" and (result.n_x, result.n_y) == (3 * ROWS, 3 * ROWS)
    assert result.statistic == pytest.approx(srf.mmd2(srf.sketch_array(X[:150], rff), srf.sketch_array(X[150:], rff)))
    # Reference: MMD^2 of every relabelling of the 6 buckets, three per side, from the rows.
    buckets = [X[b * ROWS : (b + 1) * ROWS] for b in range(6)]
    exact = []
    for chosen in itertools.combinations(range(6), 3):
        a = np.vstack([buckets[b] for b in chosen])
        b = np.vstack([buckets[b] for b in range(6) if b not in chosen])
        exact.append(srf.mmd2(srf.sketch_array(a, rff), srf.sketch_array(b, rff)))
    exact = np.array(exact)
    np.testing.assert_allclose(np.sort(result.null), np.sort(exact), rtol=1e-6, atol=1e-9)
    assert result.p_value == pytest.approx(
        np.count_nonzero(exact >= result.statistic - 1e-6 * np.abs(exact).max()) / 20
    )
    sampled = store.test((0, 3 * ROWS), (3 * ROWS, 6 * ROWS), n_permutations=10)
    assert all(np.isclose(exact, value, rtol=1e-6, atol=1e-9).any() for value in sampled.null)
    with pytest.raises(InputError, match="distinct relabellings"):
        store.test((0, ROWS), (ROWS, 3 * ROWS))
    with pytest.raises(InputError, match="overlap"):
        store.test((0, 3 * ROWS), (2 * ROWS, 6 * ROWS))


def test_store_series_flags_a_shifted_bucket(tmp_path):
    X = np.vstack([_rows(40 * ROWS, seed=2), _rows(ROWS, seed=3, shift=1.5), _rows(3 * ROWS, seed=4)])
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS)
    store.append(X)
    series = store.series(reference=(0, 39 * ROWS), every=1, n_permutations=199)
    assert list(series.first_row) == [39 * ROWS, 40 * ROWS, 41 * ROWS, 42 * ROWS, 43 * ROWS]
    assert series.alarm[1] and series.to_dict()["windows"][1]["alarm"] is True
    assert int(np.argmax(series.statistic)) == 1 and series.statistic[1] > series.band[1]
    # One bucket against 39: 40 labellings, all of them used; the shifted bucket is the most extreme.
    assert series.p_value[1] == pytest.approx(1 / 40)


def test_store_merge_of_two_sites_is_bucket_by_bucket(tmp_path):
    rff = _map()
    a = srf.SketchStore.create(tmp_path / "a", rff, bucket=ROWS)
    b = srf.SketchStore.create(tmp_path / "b", rff, bucket=ROWS)
    Xa, Xb = _rows(4 * ROWS, seed=5), _rows(2 * ROWS, seed=6)
    a.append(Xa)
    b.append(Xb)
    both = srf.SketchStore.create(tmp_path / "both", rff, bucket=ROWS)
    assert both.merge_from(a, b) == [0, 1, 2, 3]
    merged = both.range(0, 4 * ROWS)
    assert merged.count == 6 * ROWS
    np.testing.assert_allclose(merged.feature_sum, _exact_sums(np.vstack([Xa, Xb]), rff), atol=3e-4)


def test_store_cli_create_append_info_range_test_series_merge(tmp_path, tmp_zarr, cli_main):
    X = np.vstack([_rows(10 * ROWS, seed=7), _rows(10 * ROWS, seed=8, shift=1.0)])
    source = tmp_zarr(X, ROWS)
    rff = _map()
    srf.save_map(rff, tmp_path / "map.json")
    path = str(tmp_path / "s.store")
    assert cli_main("store", "create", path, "--map", str(tmp_path / "map.json"), "--bucket", str(ROWS)).code == 0
    out = cli_main("store", "append", path, source, "--json")
    assert out.code == 0 and json.loads(out.out)["appended"] == list(range(20))
    info = json.loads(cli_main("store", "info", path, "--json").out)
    assert info["buckets"] == 20 and info["runs"] == [[0, 20 * ROWS]]
    out = cli_main("store", "range", path, "--start", "0", "--stop", str(5 * ROWS), "-o", str(tmp_path / "r.sketch"))
    assert out.code == 0 and srf.load(tmp_path / "r.sketch").count == 5 * ROWS
    test = json.loads(cli_main("store", "test", path, "--a", f"0:{10 * ROWS}", "--b", f"{10 * ROWS}:{20 * ROWS}",
                               "--json").out)  # fmt: skip
    assert test["method"] == "bucket-permutation" and test["p_value"] < 0.01
    series = json.loads(
        cli_main("store", "series", path, "--reference", f"0:{10 * ROWS}", "--every", "5", "--json").out
    )
    assert [w["alarm"] for w in series["windows"]] == [True, True]
    assert cli_main("store", "merge", path, path, "-o", str(tmp_path / "m.store"), "--json").code == 0
    assert srf.SketchStore.open(tmp_path / "m.store").range().count == 40 * ROWS
    bad = cli_main("store", "range", path, "--start", "7", "-o", str(tmp_path / "q.sketch"))
    assert bad.code == 1 and bad.err.startswith("streamrff store: error: start must be a row on a bucket edge")
    assert "Traceback" not in bad.err


_APPENDER = """
import json, sys, numpy as np, streamrff as srf
store = srf.SketchStore.open(sys.argv[1], storage_options=json.loads(sys.argv[5]))
X = np.load(sys.argv[2])
first, stop = int(sys.argv[3]), int(sys.argv[4])
for bucket in range(first, stop):
    store.append(X[bucket * {rows}:(bucket + 1) * {rows}], start=bucket * {rows}, chunk_rows={rows})
"""


def _appender(store: str, data: str, first: int, stop: int, storage_options: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = _APPENDER.format(rows=ROWS)
    arguments = [store, data, str(first), str(stop), json.dumps(storage_options)]
    return subprocess.Popen([sys.executable, "-c", code, *arguments], env=env)


def _check_whole(store: srf.SketchStore, X: np.ndarray, rff: srf.RFF) -> None:
    """Every stored bucket complete and counted once: each bucket and the stored extent equal the rows' sums."""
    stored = store.info()
    for lo, hi in stored["runs"]:
        for bucket in range(lo // ROWS, hi // ROWS):
            part = store.range(bucket * ROWS, (bucket + 1) * ROWS)
            assert part.count == ROWS
            np.testing.assert_allclose(part.feature_sum, _exact_sums(X[bucket * ROWS : (bucket + 1) * ROWS], rff),
                                       atol=1e-4)  # fmt: skip
        whole = store.range(lo, hi)
        np.testing.assert_allclose(whole.feature_sum, _exact_sums(X[lo:hi], rff), atol=1e-3)


def test_store_append_killed_mid_way_leaves_whole_buckets_and_resumes(tmp_path):
    X = _rows(400 * ROWS, seed=9)
    np.save(tmp_path / "x.npy", X)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS)
    process = _appender(store.path, str(tmp_path / "x.npy"), 0, 400)
    deadline = time.monotonic() + 120
    while store.info()["buckets"] < 5 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    _check_whole(store, X, rff)
    store.append(X)
    assert store.info()["buckets"] == 400
    _check_whole(store, X, rff)


@pytest.mark.slow
@pytest.mark.parametrize("place", ["disk", "s3"])
def test_store_eight_appenders_one_killed_while_two_query(tmp_path, place, request):
    X = _rows(160 * ROWS, seed=10)
    np.save(tmp_path / "x.npy", X)
    rff = _map()
    if place == "disk":
        target, storage = str(tmp_path / "s.store"), None
    else:
        server = request.getfixturevalue("s3_server")
        target, storage = f"s3://{request.getfixturevalue('s3_bucket')}/s.store", server.storage_options
    store = srf.SketchStore.create(target, rff, bucket=ROWS, storage_options=storage)
    appenders = [_appender(target, str(tmp_path / "x.npy"), 20 * i, 20 * (i + 1), storage) for i in range(8)]
    victim = appenders[3]
    deadline = time.monotonic() + 300
    while store.info()["buckets"] < 65 and time.monotonic() < deadline:
        for lo, hi in store.info()["runs"]:  # readers query meanwhile
            assert store.range(lo, hi).count == hi - lo
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    for process in appenders:
        process.wait(timeout=300)
    _check_whole(store, X, rff)
    store.append(X)
    store.repair()
    assert store.info()["buckets"] == 160
    _check_whole(store, X, rff)
    before = store.info()["records"], [record.written_at for record in store._read_buckets(list(range(160)))]
    store.append(X)
    assert (store.info()["records"], [r.written_at for r in store._read_buckets(list(range(160)))]) == before


@pytest.mark.slow
def test_store_bucket_permutation_and_series_are_calibrated_under_no_change(tmp_path):
    """200 independent segments of 20 buckets under no change: the bucket-permutation test (6 buckets
    against 6) rejects 3-7% at 5%, and the series p-value (a window of 4 buckets against the 16 before)
    is uniform (KS p > 0.01). Segments hold disjoint rows, so the 200 p-values are independent."""
    from scipy import stats

    reps, per, rows = 200, 20, 10
    rff = _map(n_features=32)
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=rows)
    store.append(_rows(reps * per * rows, seed=11))
    test_p, series_p = [], []
    for rep in range(reps):
        lo = rep * per * rows
        test_p.append(
            store.test((lo, lo + 6 * rows), (lo + 6 * rows, lo + 12 * rows), n_permutations=199, seed=rep).p_value
        )
        series = store.series(
            reference=(lo, lo + 16 * rows), every=4, start=lo + 16 * rows, stop=lo + per * rows,
            n_permutations=199, seed=rep,
        )  # fmt: skip
        assert len(series.p_value) == 1
        series_p.append(float(series.p_value[0]))
    rejected = np.mean(np.array(test_p) <= 0.05)
    assert 0.03 <= rejected <= 0.07, rejected
    assert stats.kstest(series_p, "uniform").pvalue > 0.01
