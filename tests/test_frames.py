"""Tables as sources: pandas and dask DataFrames and parquet datasets (local and on moto's S3),
against numpy rows whose category codes the test builds itself from the documented rule."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import streamrff as srf
from streamrff.errors import InputError, SourceError
from streamrff.sources.frames import MISSING_CODE, category_code

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def documented_code(key: str) -> float:
    """The code rule as docs/guide/tables.rst states it, written out independently."""
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"srf-category").digest()
    return float(int.from_bytes(digest, "little") >> 12)


def table(seed: int, rows: int = 40):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.normal(size=rows),
            "count": rng.integers(0, 4, rows),
            "colour": pd.Categorical(rng.choice(["red", "green", None], rows)),
            "shop": rng.choice(["north", "south"], rows).astype(object),
            "flag": rng.random(rows) > 0.5,
        }
    )


def expected_rows(frame) -> np.ndarray:
    """Float64 rows built by hand: numbers as they are, labels coded by the documented rule."""

    def label(value):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return documented_code("missing")
        if isinstance(value, (bool, np.bool_)):
            return documented_code(f"b:{bool(value)}")
        return documented_code(f"s:{value}")

    return np.column_stack(
        [
            frame["x"].to_numpy(float),
            frame["count"].to_numpy(float),
            [label(v) for v in frame["colour"].astype(object)],
            [label(v) for v in frame["shop"]],
            [label(v) for v in frame["flag"]],
        ]
    )


@pytest.fixture(scope="module")
def feature_map():
    return srf.RFF(n_features=32, bandwidth=1.0, seed=1).fit(np.zeros((1, 5)))


def write_dataset(folder, frames) -> str:
    folder.mkdir()
    for index, frame in enumerate(frames):
        frame.to_parquet(folder / f"part-{index}.parquet")
    return str(folder)


def test_codes_follow_the_documented_rule():
    assert category_code("red") == documented_code("s:red")
    assert category_code(True) == documented_code("b:True") and category_code(np.True_) == category_code(True)
    assert category_code(7) == category_code(7.0) == documented_code("i:7")
    assert category_code(None) == category_code(float("nan")) == category_code(pd.NA) == MISSING_CODE
    assert category_code("7") != category_code(7)  # the type is part of the label
    assert all(float(int(category_code(v))) == category_code(v) < 2**52 for v in ("a", 3, 2.5, b"x"))


def test_parquet_dataset_sketch_equals_numpy_rows_of_codes(tmp_path, feature_map):
    frames = [table(seed) for seed in range(3)]
    path = write_dataset(tmp_path / "shops.parquet", frames)
    source = srf.open_source(path)
    assert source.columns == ("x", "count", "colour", "shop", "flag")
    assert source.categorical_columns == (2, 3, 4) and source.row_chunks == (40, 40, 40)
    expected = expected_rows(pd.concat(frames, ignore_index=True))
    np.testing.assert_array_equal(source.array.compute(), expected)
    direct = srf.sketch_array(expected, feature_map)
    for given in (path, source):
        sketch = srf.sketch(given, feature_map)
        assert sketch.count == 120
        np.testing.assert_allclose(sketch.feature_sum, direct.feature_sum, rtol=1e-12, atol=1e-12)


def test_pandas_and_dask_frames_with_a_selection_and_a_numeric_category(feature_map):
    import dask.dataframe as dd

    frame = table(5)
    expected = expected_rows(frame)
    for given in (frame, dd.from_pandas(frame, npartitions=3)):
        source = srf.open_source(given, columns=["x", "count"], categorical=["count"])
        assert source.columns == ("x", "count") and source.categorical_columns == (1,)
        rows = np.asarray(source.array.compute())
        np.testing.assert_array_equal(rows[:, 0], expected[:, 0])
        np.testing.assert_array_equal(rows[:, 1], [documented_code(f"i:{n}") for n in frame["count"]])
        whole = srf.sketch(given, srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((1, 5))))
        np.testing.assert_allclose(
            whole.feature_sum,
            srf.sketch_array(expected, srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((1, 5)))).feature_sum,
            rtol=1e-12,
            atol=1e-12,
        )


def test_nan_in_a_numeric_column_is_an_invalid_row(feature_map):
    frame = table(6)
    frame.loc[3, "x"] = np.nan
    with pytest.raises(InputError, match="NaN|non-finite|inf"):
        srf.sketch(frame, feature_map)
    skipped = srf.sketch(frame, feature_map, on_invalid="skip")
    direct = srf.sketch_array(np.delete(expected_rows(frame), 3, axis=0), feature_map)
    assert skipped.count == 39
    np.testing.assert_allclose(skipped.feature_sum, direct.feature_sum, rtol=1e-12, atol=1e-12)


def test_bad_tables_fail_in_one_line(tmp_path):
    with pytest.raises(SourceError, match="No parquet file at"):
        srf.open_source(str(tmp_path / "absent.parquet"))
    with pytest.raises(InputError, match=r"columns names \['nope'\]"):
        srf.open_source(table(0), columns=["x", "nope"])
    with pytest.raises(InputError, match="holds times"):
        srf.open_source(pd.DataFrame({"t": pd.date_range("2026-01-01", periods=3)}))
    with pytest.raises(InputError, match="apply to tables"):
        srf.open_source(np.zeros((3, 2)), columns=["a"])
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(SourceError, match="parquet footer"):
        srf.open_source(str(tmp_path / "broken.parquet"))


def test_parquet_dataset_on_s3(s3_server, s3_bucket, feature_map):
    import s3fs

    frames = [table(seed) for seed in (7, 8)]
    options = s3_server.storage_options
    filesystem = s3fs.S3FileSystem(**options)
    for index, frame in enumerate(frames):
        with filesystem.open(f"{s3_bucket}/shops.parquet/part-{index}.parquet", "wb") as handle:
            frame.to_parquet(handle)
    url = f"s3://{s3_bucket}/shops.parquet"
    sketch = srf.sketch(url, feature_map, storage_options=options)
    direct = srf.sketch_array(expected_rows(pd.concat(frames, ignore_index=True)), feature_map)
    assert sketch.count == 80
    np.testing.assert_allclose(sketch.feature_sum, direct.feature_sum, rtol=1e-12, atol=1e-12)


def test_a_table_test_uses_the_mixed_kernel_and_finds_a_change_in_category_frequencies():
    rng = np.random.default_rng(11)
    A = pd.DataFrame({"x": rng.normal(size=1000), "shop": rng.choice(list("abcde"), 1000)})
    B = pd.DataFrame({"x": rng.normal(size=1000), "shop": rng.choice(list("abcde"), 1000, p=[0.3, 0.3, 0.2, 0.1, 0.1])})
    result = srf.two_sample_test(A, B, n_features=256, n_permutations=99)
    assert result.p_value <= 0.02
    assert result.map_spec["categorical"] == [1]  # the table's category column, compared by equality
    with pytest.raises(InputError, match=r"categorical columns \['shop'\], which a JL map would read as numbers"):
        srf.sketch(A, srf.JL(srf.RFF(n_features=32), n_components=8))


@pytest.mark.parametrize("known_labels", [2**20, 2])
def test_parquet_labels_read_through_dictionaries_get_the_documented_codes(tmp_path, monkeypatch, known_labels):
    # Row groups of 50 rows: each chunk has its own dictionary; text, a pandas category, floats and
    # integers named categorical (with and without nulls), booleans with a missing value. The labels
    # met are kept across dictionaries; with room for 2 labels per column, they start afresh each time
    # a dictionary brings new ones.
    from streamrff.sources import frames as frames_module

    monkeypatch.setattr(frames_module, "_KNOWN_LABELS", {})
    monkeypatch.setattr(frames_module, "_KNOWN_LABELS_LIMIT", known_labels)
    rng = np.random.default_rng(8)
    rows = 230
    frame = pd.DataFrame(
        {
            "word": rng.choice(["a", "b", "é", "", None], rows).astype(object),
            "kind": pd.Categorical(rng.choice(["u", "v", None], rows)),
            "level": rng.choice([0.0, -0.0, 2.5, np.nan, 3.0], rows),
            "n": rng.integers(-3, 3, rows),
            "m": pd.array(rng.choice([1, 2, None], rows), dtype="Int64"),
            "ok": pd.array(rng.choice([True, False, None], rows), dtype="boolean"),
        }
    )
    path = tmp_path / "labels.parquet"
    frame.to_parquet(path, index=False, row_group_size=50)

    def code(value):
        if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
            return documented_code("missing")
        if isinstance(value, (bool, np.bool_)):
            return documented_code(f"b:{bool(value)}")
        if isinstance(value, str):
            return documented_code(f"s:{value}")
        return documented_code(f"i:{int(value)}" if float(value).is_integer() else f"f:{float(value)!r}")

    expected = np.array([[code(value) for value in frame[name].astype(object)] for name in frame.columns]).T
    source = srf.open_source(str(path), categorical=["level", "n", "m"])
    assert source.categorical_columns == (0, 1, 2, 3, 4, 5)
    np.testing.assert_array_equal(source.array.compute(), expected)
