"""The CLI on parquet sources (``--select`` / ``--categorical``): real parquet files written with pyarrow,
each command's result against the library's on the same pandas frame."""

from __future__ import annotations

import json

import numpy as np
import pytest

import streamrff as srf

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def frame(seed: int, rows: int = 300, city_p=(0.5, 0.3, 0.2)):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.normal(size=rows),
            "y": rng.normal(size=rows),
            "city": rng.choice(["north", "south", "east"], rows, p=list(city_p)),
            "zip": rng.integers(0, 5, rows),
            "unused": rng.normal(size=rows),
        }
    )


def write_folder(folder, frames) -> str:
    """A dataset as analysts keep one: a plain folder (no .parquet suffix) of part files."""
    folder.mkdir()
    for index, part in enumerate(frames):
        part.to_parquet(folder / f"part-{index:03d}.parquet")
    return str(folder)


SELECT = ["x", "city", "zip"]


def test_map_and_sketch_of_a_parquet_folder_equal_the_library_on_the_frame(tmp_path, cli_main):
    parts = [frame(seed) for seed in range(3)]
    path = write_folder(tmp_path / "events", parts)
    whole = pd.concat(parts, ignore_index=True)
    map_path, sketch_path = str(tmp_path / "map.json"), str(tmp_path / "events.sketch")
    ran = cli_main("map", path, "-o", map_path, "--select", ",".join(SELECT), "--categorical", "zip",
                   "--features", "64", "--seed", "3")  # fmt: skip
    assert ran.code == 0, ran.err
    expected_map = srf.fit_map(srf.RFF(n_features=64, seed=3), [srf.open_source(whole, columns=SELECT,
                                                                                 categorical=["zip"])])  # fmt: skip
    fitted = srf.load_map(map_path)
    assert fitted.categorical == [1, 2] and fitted.fingerprint == expected_map.fingerprint
    ran = cli_main("sketch", path, "-o", sketch_path, "--map", map_path, "--select", ",".join(SELECT),
                   "--categorical", "zip")  # fmt: skip
    assert ran.code == 0, ran.err
    expected = srf.sketch(srf.open_source(whole, columns=SELECT, categorical=["zip"]), expected_map)
    got = srf.load(sketch_path)
    assert got.count == 900
    np.testing.assert_allclose(got.feature_sum, expected.feature_sum, rtol=1e-6, atol=1e-5)


def test_test_on_two_parquet_sources_equals_two_sample_test_on_the_frames(tmp_path, cli_main):
    before, after = frame(10), frame(11, city_p=(0.3, 0.3, 0.4))
    a = write_folder(tmp_path / "before", [before.iloc[:150], before.iloc[150:]])
    b = str(tmp_path / "after.parquet")
    after.to_parquet(b)
    ran = cli_main("test", a, b, "--select", ",".join(SELECT), "--categorical", "zip", "--permutations", "99",
                   "--features", "128", "--seed", "1", "--json")  # fmt: skip
    assert ran.code == 0, ran.err
    got = json.loads(ran.out)
    expected = srf.two_sample_test(
        srf.open_source(before, columns=SELECT, categorical=["zip"]),
        srf.open_source(after, columns=SELECT, categorical=["zip"]),
        n_features=128, n_permutations=99, seed=1,
    )  # fmt: skip
    assert got["p_value"] == pytest.approx(expected.p_value)
    assert got["statistic"] == pytest.approx(expected.statistic, rel=1e-6, abs=1e-7)
    assert expected.p_value <= 0.05  # the city frequencies moved


def test_the_aggregated_test_of_two_parquet_sources_reports_its_questions(tmp_path, cli_main):
    a, b = str(tmp_path / "before.parquet"), str(tmp_path / "after.parquet")
    frame(10).to_parquet(a)
    frame(11, city_p=(0.2, 0.3, 0.5)).to_parquet(b)
    options = ["--select", ",".join(SELECT), "--categorical", "zip", "--null", "aggregated", "--permutations", "99",
               "--features", "64", "--seed", "1"]  # fmt: skip
    ran = cli_main("test", a, b, *options)
    assert ran.code == 0, ran.err
    line = next(text for text in ran.out.splitlines() if text.strip().startswith("questions:"))
    assert [part.split(" p = ")[0] for part in line.split(":", 1)[1].split(" (each")[0].strip().split("; ")] == [
        "whole row (10 maps)", "column 1 ==", "column 2 ==",
    ]  # fmt: skip
    got = json.loads(cli_main("test", a, b, *options, "--json").out)
    questions = {row["question"]: row["p_value"] for row in got["questions"]}
    # the city column (1) moved: its question's p-value is the smallest (the whole row sees it too), zip's is not
    assert questions["column 1 =="] == min(questions.values()) < questions["column 2 =="]
    assert got["p_value"] <= 0.05 and got["statistic"] == pytest.approx(-questions["column 1 =="])


def test_test_columns_names_the_parquet_columns(tmp_path, cli_main):
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    frame(20).to_parquet(a)
    frame(21, city_p=(0.2, 0.2, 0.6)).to_parquet(b)
    ran = cli_main("test", a, b, "--select", ",".join(SELECT), "--columns", "--permutations", "49", "--json")
    assert ran.code == 0, ran.err
    table = json.loads(ran.out)["columns"]
    assert table["names"] == SELECT
    assert table["columns"][0] == 1  # city, the column that changed, ranks first


def test_select_on_a_zarr_array_is_one_usage_line(tmp_path, tmp_zarr, cli_main):
    path = tmp_zarr(np.zeros((10, 2), dtype="float32"), 5)
    ran = cli_main("sketch", path, "-o", str(tmp_path / "s.sketch"), "--select", "a")
    assert ran.code == 2 and "parquet source" in ran.err and "Traceback" not in ran.err
    assert len(ran.err.strip().splitlines()) == 1
    ran = cli_main("test", path, path, "--categorical", "a,a")
    assert ran.code == 2 and "distinct" in ran.err


def test_sketch_of_an_s3_dataset_prefix_equals_the_library_on_the_frame(s3_server, s3_bucket, tmp_path, cli_main):
    """A dataset under a plain prefix (no .parquet suffix) on moto's S3 server, read through --storage-options."""
    import s3fs

    parts = [frame(30), frame(31)]
    filesystem = s3fs.S3FileSystem(**s3_server.storage_options)
    for index, part in enumerate(parts):
        with filesystem.open(f"{s3_bucket}/events/part-{index}.parquet", "wb") as handle:
            part.to_parquet(handle)
    feature_map = srf.RFF(n_features=32, bandwidth=1.0, categorical=[1], mismatch=0.5, seed=0).fit(np.zeros((1, 2)))
    map_path, sketch_path = str(tmp_path / "map.json"), str(tmp_path / "s3.sketch")
    srf.save_map(feature_map, map_path)
    ran = cli_main("sketch", f"s3://{s3_bucket}/events", "-o", sketch_path, "--map", map_path, "--select", "y,city",
                   "--storage-options", json.dumps(s3_server.storage_options))  # fmt: skip
    assert ran.code == 0, ran.err
    whole = pd.concat(parts, ignore_index=True)
    expected = srf.sketch(srf.open_source(whole, columns=["y", "city"]), feature_map)
    got = srf.load(sketch_path)
    assert got.count == 600
    np.testing.assert_allclose(got.feature_sum, expected.feature_sum, rtol=1e-6, atol=1e-5)


def test_watch_fits_its_monitor_on_a_parquet_reference_like_the_library(tmp_path, cli_main):
    """watch --reference PARQUET --select: the monitor the library fits on the same frame alarms at the same row."""
    import zarr

    reference = frame(40, rows=600)
    path = write_folder(tmp_path / "reference", [reference.iloc[:300], reference.iloc[300:]])
    live = frame(41, rows=500, city_p=(0.1, 0.1, 0.8))
    rows = np.asarray(srf.open_source(live, columns=["x", "city"]).array, dtype=np.float64)
    live_path = str(tmp_path / "live.zarr")
    zarr.create_array(live_path, shape=rows.shape, chunks=(250, 2), dtype="float64")[:] = rows
    ran = cli_main("watch", live_path, "--reference", path, "--select", "x,city", "--window", "50", "--ert", "500",
                   "--features", "64", "--json")  # fmt: skip
    assert ran.code == 0, ran.err
    summary = json.loads(ran.out.strip().splitlines()[-1])
    monitor = srf.DriftMonitor(50, 500, n_features=64, bandwidth="median", seed=0, n_streams="auto")
    monitor.fit(srf.open_source(reference, columns=["x", "city"]))
    for start in range(0, 500, 250):
        monitor.update(rows[start : start + 250])
    assert summary["drift"] and summary["drift_at_row"] == monitor.drift_at_
