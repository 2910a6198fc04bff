"""Second moments and column parts of a sketch store (issue #45): moments per coarse block, never per fine bucket."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError, SketchFormatError, SketchSignatureError
from streamrff.formats.store import HEADER

ROWS = 50  # rows per bucket
D = 16


def _rows(n: int, seed: int = 0, shift: float = 0.0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(n, 3)) + shift).astype(np.float32)


def _map() -> srf.RFF:
    return srf.RFF(n_features=D, bandwidth=1.0, seed=3).fit(np.zeros((1, 3)))


def _numpy_moment(X: np.ndarray, feature_map: srf.RFF) -> tuple[np.ndarray, np.ndarray]:
    """Feature sums and Z^T Z in float64, straight from the map's features (an independent reference)."""
    Z = np.asarray(feature_map.transform(X), dtype=np.float64)
    return Z.sum(axis=0), Z.T @ Z


def _moment_record(store: srf.SketchStore, level: int, index: int) -> Path:
    tier = store._moments
    return Path(tier.path) / "records" / "c" / str(tier._root.slot(level, index)) / "0"


def test_store_moments_of_a_range_equal_direct_sketches_and_numpy(tmp_path, tmp_zarr):
    X = _rows(16 * ROWS + 10)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS, moments=2)  # blocks of 4 buckets
    result = store.append(tmp_zarr(X, ROWS))  # bucket edges on chunk edges
    assert result.appended == tuple(range(16)) and result.moment_blocks == (0, 1, 2, 3)
    for first, stop in [(0, 16), (4, 8), (4, 16), (0, 12)]:
        rows = X[first * ROWS : stop * ROWS]
        part = store.range(first * ROWS, stop * ROWS)
        assert part.has_moments and part.count == len(rows)
        direct = srf.sketch(rows, rff, chunk_rows=ROWS, moments=True)
        np.testing.assert_allclose(part.moment, direct.moment, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(part.feature_sum, direct.feature_sum, rtol=1e-9, atol=1e-9)
        sums, moment = _numpy_moment(rows, rff)
        # The moment kernel's float32 features: 1e-6 of the largest entry against numpy's float64 Z^T Z.
        np.testing.assert_allclose(part.moment, moment, rtol=0, atol=1e-6 * np.abs(moment).max())
        np.testing.assert_allclose(part.feature_sum, sums, rtol=0, atol=1e-6 * np.abs(sums).max())
        np.testing.assert_array_equal(part.moment, part.moment.T)
    # Sums only off the blocks' edges: a warning in one line saying why and how.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        off = store.range(ROWS, 8 * ROWS)
    assert not off.has_moments and off.count == 7 * ROWS
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert "per 4 bucket(s)" in str(caught[0].message) and "blocks of 4 bucket(s)" in str(caught[0].message)
    with pytest.raises(InputError, match="not on their edges"):
        store.range(ROWS, 8 * ROWS, moments=True)
    assert not store.range(0, 16 * ROWS, moments=False).has_moments
    # Two ranges with moments: the test's confidence interval.
    result = srf.mmd_test(store.range(0, 8 * ROWS), store.range(8 * ROWS, 16 * ROWS))
    low, high = result.confidence_interval()
    assert 0 <= low <= result.statistic <= high or low <= high


def test_store_moments_default_keeps_bucket_records_at_d_values_and_moment_records_per_block(tmp_path):
    rff = _map()
    plain = srf.SketchStore.create(tmp_path / "plain.store", rff, bucket=ROWS)
    store = srf.SketchStore.create(tmp_path / "m.store", rff, bucket=ROWS, moments=3)
    X = _rows(16 * ROWS)
    plain.append(X)
    store.append(X)
    # Bucket records are the same size with or without moments (no D^2 per fine bucket).
    assert plain.info()["bytes_per_record"] == store.info()["bytes_per_record"] == 8 * (HEADER + D) + 4
    assert "moments" not in plain.info() and plain.moment_level is None
    moments = store.info()["moments"]
    assert moments == {
        "level": 3, "buckets_per_record": 8, "blocks": 2, "records": 3,
        "bytes_per_record": 8 * (HEADER + D + D * (D + 1) // 2) + 4,
    }  # fmt: skip
    fine = [p.stat().st_size for p in (tmp_path / "m.store" / "records" / "c").rglob("0") if p.is_file()]
    assert set(fine) == {8 * (HEADER + D) + 4}
    with pytest.raises(InputError, match="keeps no second moments"):
        plain.range(0, 8 * ROWS, moments=True)
    with pytest.raises(InputError, match=r"moments must be a level in 0..24"):
        srf.SketchStore.create(tmp_path / "bad.store", rff, bucket=ROWS, moments=25)


def test_store_moments_of_a_block_appended_in_parts_come_from_appending_it_whole_again(tmp_path):
    X = _rows(8 * ROWS, seed=1)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS, moments=1)
    for bucket in range(8):  # one bucket at a time (as watch writes): no block is ever given whole
        assert store.append(X[bucket * ROWS : (bucket + 1) * ROWS], start=bucket * ROWS).moment_blocks == ()
    with pytest.raises(InputError, match="has no moment record"):
        store.range(0, 8 * ROWS, moments=True)
    before = {p: p.read_bytes() for p in (tmp_path / "s.store" / "records").rglob("*") if p.is_file()}
    again = store.append(X[2 * ROWS :], start=2 * ROWS)  # the stored buckets are checked, not rewritten
    assert again.appended == () and again.unchanged == tuple(range(2, 8)) and again.moment_blocks == (1, 2, 3)
    assert before == {p: p.read_bytes() for p in (tmp_path / "s.store" / "records").rglob("*") if p.is_file()}
    part = store.range(2 * ROWS, 8 * ROWS, moments=True)
    np.testing.assert_allclose(part.moment, _numpy_moment(X[2 * ROWS :], rff)[1], rtol=1e-6, atol=1e-4)
    assert store.append(X).moment_blocks == (0,)
    assert store.range(moments=True).count == 8 * ROWS


def test_store_moment_records_are_checked_like_every_record(tmp_path):
    key, other = b"k" * 32, b"o" * 32
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS, moments=1, signed=True)
    X = _rows(4 * ROWS, seed=2)
    store.append(X, signing_key=key)
    assert srf.SketchStore.open(tmp_path / "s.store", verify_key=key).range(moments=True).has_moments
    with pytest.raises(SketchSignatureError, match="not signed with the verify key"):
        srf.SketchStore.open(tmp_path / "s.store", verify_key=other).range(moments=True)
    # A flipped byte of the packed moment: its checksum.
    path = _moment_record(store, 0, 1)
    data = bytearray(path.read_bytes())
    data[8 * (HEADER + D) + 9] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(SketchFormatError, match="crc32c"):
        srf.SketchStore.open(tmp_path / "s.store").range(2 * ROWS, 4 * ROWS)
    # Declared sizes are checked before any record is read.
    meta_path = tmp_path / "s.store" / "moments" / "records" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"][1] = HEADER + D  # a moment group that declares bucket records
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(SketchFormatError, match="records array declares shape"):
        srf.SketchStore.open(tmp_path / "s.store").range(0, 2 * ROWS)


def test_store_moments_on_a_time_grid(tmp_path):
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "h.store", rff, bucket="1h", moments=1)
    X = _rows(300, seed=4)
    times = np.datetime64("2026-01-01T00:00") + np.arange(300) * np.timedelta64(1, "m")  # 5 hours
    assert store.append(X, times=times, final=True).moment_blocks == (245448, 245449)
    part = store.range("2026-01-01T00:00", "2026-01-01T04:00", moments=True)
    assert part.count == 240
    np.testing.assert_allclose(part.moment, _numpy_moment(X[:240], rff)[1], rtol=1e-6, atol=1e-4)


def test_store_cli_create_with_moments_and_range_output(tmp_path, tmp_zarr, cli_main):
    X = _rows(8 * ROWS, seed=5)
    srf.save_map(_map(), tmp_path / "map.json")
    path = str(tmp_path / "s.store")
    out = cli_main("store", "create", path, "--map", str(tmp_path / "map.json"), "--bucket", str(ROWS),
                   "--moments", "2")  # fmt: skip
    assert out.code == 0 and "moments: per 4 bucket(s)" in out.out
    assert cli_main("store", "append", path, tmp_zarr(X, ROWS)).code == 0
    info = json.loads(cli_main("store", "info", path, "--json").out)
    assert info["moments"]["blocks"] == 2
    out = cli_main("store", "range", path, "--start", "0", "--stop", str(4 * ROWS), "-o", str(tmp_path / "a.sketch"))
    assert out.code == 0 and "with second moments" in out.out and srf.load(tmp_path / "a.sketch").has_moments
    out = cli_main("store", "range", path, "--start", str(ROWS), "--stop", str(4 * ROWS), "-o",
                   str(tmp_path / "b.sketch"), "--json")  # fmt: skip
    assert out.code == 0 and "not on their edges" in json.loads(out.out)["moments_note"]
    assert "not on their edges" in out.err and not srf.load(tmp_path / "b.sketch").has_moments


def test_store_moments_of_a_complement_and_of_a_merge_of_two_sites(tmp_path):
    rff = _map()
    X, Y = _rows(8 * ROWS, seed=6), _rows(4 * ROWS, seed=7, shift=0.5)
    a = srf.SketchStore.create(tmp_path / "a.store", rff, bucket=ROWS, moments=1)
    b = srf.SketchStore.create(tmp_path / "b.store", rff, bucket=ROWS, moments=1)
    a.append(X)
    b.append(Y[:ROWS], start=2 * ROWS)  # site b holds buckets 2 (block 1, without its moment) ...
    b.append(Y[2 * ROWS :], start=4 * ROWS)  # ... and 4-5 (block 2, whole)
    rest = a.complement(2 * ROWS, 6 * ROWS)
    expected = _numpy_moment(np.vstack([X[: 2 * ROWS], X[6 * ROWS :]]), rff)[1]
    assert rest.count == 4 * ROWS and rest.has_moments
    np.testing.assert_allclose(rest.moment, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
    both = srf.SketchStore.create(tmp_path / "ab.store", rff, bucket=ROWS, moments=1)
    assert both.merge_from(a, b) == list(range(8))
    assert both.info()["moments"]["blocks"] == 3  # blocks 0, 2, 3; block 1 lacks site b's moment
    merged = both.range(4 * ROWS, 6 * ROWS, moments=True)
    expected = _numpy_moment(np.vstack([X[4 * ROWS : 6 * ROWS], Y[2 * ROWS :]]), rff)[1]
    assert merged.count == 4 * ROWS
    np.testing.assert_allclose(merged.moment, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
    with pytest.raises(InputError, match="has no moment record"):
        both.range(2 * ROWS, 4 * ROWS, moments=True)


def test_store_moments_on_object_storage(s3_bucket, s3_server):
    rff = _map()
    X = _rows(4 * ROWS, seed=8)
    url = f"s3://{s3_bucket}/moments.store"
    store = srf.SketchStore.create(url, rff, bucket=ROWS, moments=1, storage_options=s3_server.storage_options)
    assert store.append(X).moment_blocks == (0, 1)
    opened = srf.SketchStore.open(url, storage_options=s3_server.storage_options)
    part = opened.range(0, 4 * ROWS, moments=True)
    np.testing.assert_allclose(part.moment, _numpy_moment(X, rff)[1], rtol=1e-6, atol=1e-4)
    assert opened.info()["moments"]["records"] == 3


def _column_features(X: np.ndarray, maps, column: int) -> np.ndarray:
    """Column ``column``'s 1-D features in float64, from its frequencies (an independent reference)."""
    phases = np.outer(X[:, column].astype(np.float64), maps.frequencies()[column])
    return np.hstack([np.cos(phases), np.sin(phases)]) / np.sqrt(maps.n_features / 2)


def test_store_column_parts_equal_direct_sketches_and_give_the_column_table(tmp_path, tmp_zarr):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(24 * ROWS, 3)).astype(np.float32)
    X[12 * ROWS :, 2] += 1.0  # only column 2 changes
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "c.store", rff, bucket=ROWS, columns=True, column_features=8)
    store.append(tmp_zarr(X, ROWS))
    maps = store.column_maps
    assert maps.n_columns == 3 and maps.n_features == 8
    assert store.info()["bytes_per_record"] == 8 * (HEADER + D + 3 * 8) + 4
    records = store._records_covering(4, 20)  # the dyadic cover: sums of rollups and buckets
    stored = np.sum([record.columns for record in records], axis=0).reshape(3, 8)
    direct = srf.sketch(X[4 * ROWS : 20 * ROWS], rff, chunk_rows=ROWS, columns=True, column_features=8)
    np.testing.assert_allclose(stored, direct.columns.feature_sum, rtol=1e-9, atol=1e-9)
    for column in range(3):
        exact = _column_features(X[4 * ROWS : 20 * ROWS], maps, column).sum(axis=0)
        np.testing.assert_allclose(stored[column], exact, rtol=0, atol=1e-6 * len(X))
    table = store.test((0, 12 * ROWS), (12 * ROWS, 24 * ROWS), columns=True, n_permutations=199)
    assert table.rejected(0.05).tolist() == [2] and table.joint.method == "bucket-permutation"
    n = 12 * ROWS
    for column, statistic in zip(table.columns, table.statistics):  # unbiased MMD^2 of the column, from numpy
        Za, Zb = (_column_features(part, maps, column) for part in (X[:n], X[n:]))
        sa, sb = Za.sum(axis=0), Zb.sum(axis=0)
        expected = (sa @ sa - n) / (n * (n - 1)) + (sb @ sb - n) / (n * (n - 1)) - 2 * (sa @ sb) / (n * n)
        assert statistic == pytest.approx(expected, rel=1e-4, abs=1e-7)
    with pytest.raises(InputError, match="keeps no column part"):
        srf.SketchStore.create(tmp_path / "p.store", rff, bucket=ROWS).test((0, ROWS), (ROWS, 2 * ROWS), columns=True)
    plain = srf.SketchStore.create(tmp_path / "q.store", rff, bucket=ROWS)
    with pytest.raises(InputError, match="different column parts"):
        plain.merge_from(store)


def test_store_cli_columns_table(tmp_path, tmp_zarr, cli_main):
    rng = np.random.default_rng(10)
    X = rng.normal(size=(20 * ROWS, 3)).astype(np.float32)
    X[10 * ROWS :, 0] += 1.5
    srf.save_map(_map(), tmp_path / "map.json")
    path = str(tmp_path / "s.store")
    out = cli_main("store", "create", path, "--map", str(tmp_path / "map.json"), "--bucket", str(ROWS), "--columns",
                   "--column-features", "8")  # fmt: skip
    assert out.code == 0
    assert cli_main("store", "append", path, tmp_zarr(X, ROWS)).code == 0
    out = cli_main("store", "test", path, "--a", f"0:{10 * ROWS}", "--b", f"{10 * ROWS}:{20 * ROWS}", "--columns",
                   "--json")  # fmt: skip
    table = json.loads(out.out)
    assert out.code == 0 and table["columns"][0] == 0 and table["adjusted_p_values"][0] <= 0.05
    assert table["joint"]["method"] == "bucket-permutation"
    text = cli_main("store", "test", path, "--a", f"0:{10 * ROWS}", "--b", f"{10 * ROWS}:{20 * ROWS}", "--columns")
    assert text.code == 0 and "p Holm" in text.out


def test_store_cli_info_with_a_key_verifies_moment_records(tmp_path, tmp_zarr, cli_main):
    key_file = tmp_path / "key"
    key_file.write_bytes(b"k" * 32)
    key_file.chmod(0o600)
    rff = _map()
    store = srf.SketchStore.create(tmp_path / "s.store", rff, bucket=ROWS, moments=1, signed=True, columns=True)
    store.append(_rows(4 * ROWS, seed=11), signing_key=b"k" * 32)
    out = cli_main("store", "info", str(tmp_path / "s.store"), "--sign-key", str(key_file), "--json")
    info = json.loads(out.out)
    assert out.code == 0 and info["signature"] == "verified" and info["columns"]["n_columns"] == 3
    path = _moment_record(store, 1, 0)  # the rollup of the two blocks: edited, so its signature fails
    data = bytearray(path.read_bytes())
    data[8 * HEADER + 16 : 8 * HEADER + 24] = np.float64(1.0).tobytes()
    import google_crc32c

    path.write_bytes(bytes(data[:-4]) + np.uint32(google_crc32c.value(bytes(data[:-4]))).astype("<u4").tobytes())
    bad = cli_main("store", "info", str(tmp_path / "s.store"), "--sign-key", str(key_file))
    assert bad.code == 1 and "not signed with the verify key" in bad.err and "Traceback" not in bad.err
