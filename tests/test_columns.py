"""The per-column part of a mean sketch (``columns=True``, ``streamrff sketch --columns``) and the column
table ``explain`` reads from it.

References are numpy: each column's 1-D sincos features computed from the frequencies stored in the
file, their exact sums and second moments, and the unbiased MMD^2 from them.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff.cli import main
from streamrff.errors import InputError, SketchFormatError, SketchMismatchError
from streamrff.sketches.columns import derive_column_maps
from streamrff.twosample.explain import column_tests


def _features(values: np.ndarray, frequencies: np.ndarray) -> np.ndarray:
    """One column's sincos features in float64: ``m^-1/2 [cos(x w), sin(x w)]``."""
    phases = np.outer(values, frequencies)
    return np.hstack([np.cos(phases), np.sin(phases)]) / np.sqrt(frequencies.shape[0])


def _stored_frequencies(path: str) -> np.ndarray:
    return zarr.open_group(path, mode="r")["columns/frequencies"][...]


def _unbiased_mmd2(Za: np.ndarray, Zb: np.ndarray) -> float:
    Ka, Kb, Kab = Za @ Za.T, Zb @ Zb.T, Za @ Zb.T
    n, m = Za.shape[0], Zb.shape[0]
    return float(
        (Ka.sum() - np.trace(Ka)) / (n * (n - 1)) + (Kb.sum() - np.trace(Kb)) / (m * (m - 1)) - 2 * Kab.mean()
    )


@pytest.fixture
def rows() -> np.ndarray:
    rng = np.random.default_rng(3)
    return (rng.normal(size=(2500, 3)) * [1.0, 3.0, 0.5] + [0.0, 10.0, -2.0]).astype(np.float32)


def test_column_sketch_sums_and_moments_equal_numpy_from_the_stored_frequencies(rows, tmp_path):
    rff = srf.RFF(n_features=128, bandwidth=3.0, seed=7).fit(rows)
    sketch = srf.sketch_array(rows, rff, columns=True)
    path = str(tmp_path / "s.zarr")
    sketch.save(path)
    frequencies = _stored_frequencies(path)
    assert frequencies.shape == (3, 32)
    # the documented rule: every column's frequencies ~ N(0, s_c^-2), s_c = s / sqrt(d)
    assert sketch.columns.column_maps.bandwidth == pytest.approx(3.0 / np.sqrt(3))
    pooled = frequencies.ravel() * sketch.columns.column_maps.bandwidth
    assert abs(pooled.std() - 1.0) < 0.25
    for column in range(3):
        Z = _features(rows[:, column].astype(np.float64), frequencies[column])
        np.testing.assert_allclose(sketch.columns.feature_sum[column], Z.sum(0), rtol=0, atol=2e-3)
        np.testing.assert_allclose(sketch.columns.moment[column], Z.T @ Z, rtol=0, atol=2e-3)
    # another site with the same map (rebuilt from its spec) derives the same column maps
    rebuilt = srf.load(path).feature_map
    np.testing.assert_array_equal(derive_column_maps(rebuilt).frequencies(), frequencies)


def test_column_sketch_merge_order_and_chunking(rows):
    rff = srf.RFF(n_features=64, bandwidth=2.0, seed=1).fit(rows)
    parts = [srf.sketch_array(part, rff, columns=True) for part in np.array_split(rows, 5)]
    left = srf.merge(*parts)
    shuffled = srf.merge(parts[3], parts[0].merge(parts[4]), parts[2], parts[1])
    for name in ("feature_sum", "moment"):
        a, b = getattr(left.columns, name), getattr(shuffled.columns, name)
        assert np.abs(a - b).max() <= 1e-12 * np.abs(a).max()
    # the engine's sketch of the concatenation, split where the parts were, is their merge
    bounds = np.cumsum([0] + [len(part) for part in np.array_split(rows, 5)])
    assert len(set(np.diff(bounds))) == 1
    engine = srf.sketch(rows, rff, columns=True, chunk_rows=int(bounds[1]))
    for name in ("feature_sum", "moment"):
        a, b = getattr(engine.columns, name), getattr(left.columns, name)
        assert np.abs(a - b).max() <= 1e-12 * np.abs(a).max()
    assert engine.columns.count == left.count == rows.shape[0]
    # other chunkings agree to float32 rounding
    whole = srf.sketch_array(rows, rff, columns=True)
    other = srf.sketch(rows, rff, columns=True, chunk_rows=333)
    for name in ("feature_sum", "moment"):
        a, b = getattr(whole.columns, name), getattr(other.columns, name)
        assert np.abs(a - b).max() <= 1e-6 * np.abs(a).max()


def test_column_sketch_merge_refuses_a_missing_part_or_other_column_maps(rows):
    rff = srf.RFF(n_features=64, bandwidth=2.0).fit(rows)
    with_columns = srf.sketch_array(rows, rff, columns=True)
    with pytest.raises(SketchMismatchError, match="column parts and one without"):
        with_columns.merge(srf.sketch_array(rows, rff))
    with pytest.raises(SketchMismatchError, match=r"bandwidth .* vs 0\.5"):
        with_columns.merge(srf.sketch_array(rows, rff, columns=True, column_bandwidth=0.5))
    with pytest.raises(SketchMismatchError, match="n_features 64 vs 32"):
        with_columns.merge(srf.sketch_array(rows, rff, columns=True, column_features=32))
    with pytest.raises(InputError, match="column_features must be an even integer"):
        srf.sketch_array(rows, rff, columns=True, column_features=33)
    with pytest.raises(InputError, match="pass columns=True"):
        srf.sketch_array(rows, rff, column_bandwidth=1.0)


def _saved(rows: np.ndarray, tmp_path) -> str:
    rff = srf.RFF(n_features=64, bandwidth=2.0).fit(rows)
    path = str(tmp_path / "s.zarr")
    srf.sketch_array(rows, rff, moments=True, columns=True, column_bandwidth=0.7).save(path)
    return path


def test_column_part_round_trips_and_refuses_missing_or_corrupt_arrays(rows, tmp_path):
    path = _saved(rows, tmp_path)
    loaded = srf.load(path)
    assert loaded == srf.load(path) and loaded.columns.column_maps.bandwidth == 0.7
    assert loaded.columns.column_maps.bandwidth_rule == "explicit"
    np.testing.assert_array_equal(loaded.columns.moment.reshape(-1, 64), zarr.open_group(path)["columns/moment"][...])
    cases = {
        "a missing chunk": lambda p: os.remove(os.path.join(p, "columns", "moment", "c", "0", "0")),
        "a missing array": lambda p: shutil.rmtree(os.path.join(p, "columns", "frequencies")),
        "a changed value": lambda p: zarr.open_array(os.path.join(p, "columns", "feature_sum"), mode="r+").__setitem__(
            (0, 0), 123.0
        ),
    }
    for name, damage in cases.items():
        copy = str(tmp_path / name.replace(" ", "_"))
        shutil.copytree(path, copy)
        damage(copy)
        with pytest.raises(SketchFormatError) as error:
            srf.load(copy)
        assert "\n" not in str(error.value) and "columns/" in str(error.value), name
        if name == "a missing chunk":
            assert "chunk c/0/0 is missing" in str(error.value)


def test_column_part_with_a_tampered_descriptor_is_refused_naming_it(rows, tmp_path):
    path = _saved(rows, tmp_path)
    group = zarr.open_group(path, mode="r+")
    descriptor = dict(group.attrs["columns"])
    group.attrs["columns"] = {**descriptor, "version": 2}
    with pytest.raises(SketchFormatError, match="column part"):
        srf.load(path)
    group.attrs["columns"] = {**descriptor, "seeds": [1, 2, 3]}
    with pytest.raises(SketchFormatError, match="seeds"):
        srf.load(path)


def test_column_tests_statistics_are_numpy_unbiased_mmd2_and_rank_the_shifted_column():
    rng = np.random.default_rng(5)
    A, B = rng.normal(size=(600, 4)), rng.normal(size=(600, 4))
    B[:, 1] += 0.5
    rff = srf.RFF(n_features=64, bandwidth=2.0).fit(A)
    a, b = (srf.sketch_array(X, rff, columns=True, dtype="float64") for X in (A, B))
    table = column_tests(a, b, n_draws=2000)
    assert int(table.columns[0]) == 1 and table.adjusted_p_values[0] < 0.01 and table.n_permutations == 0
    frequencies = a.columns.column_maps.frequencies()
    for column, statistic in zip(table.columns, table.statistics):
        Za, Zb = (_features(X[:, column], frequencies[column]) for X in (A, B))
        assert statistic == pytest.approx(_unbiased_mmd2(Za, Zb), rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(table.adjusted_p_values, np.maximum.accumulate(table.adjusted_p_values))
    with pytest.raises(InputError, match="columns=True"):
        column_tests(a, srf.sketch_array(B, rff))


def test_column_tests_p_values_are_not_absurd_under_no_change():
    p_values = []
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        A, B = rng.normal(size=(800, 4)), rng.normal(size=(800, 4))
        rff = srf.RFF(n_features=32, bandwidth=2.0, seed=seed).fit(A)
        table = column_tests(*(srf.sketch_array(X, rff, columns=True) for X in (A, B)), seed=seed, n_draws=2000)
        p_values += list(table.p_values)
    p_values = np.array(p_values)  # 32 p-values, uniform under H0
    assert 0.3 < p_values.mean() < 0.7 and np.mean(p_values < 0.05) <= 0.2 and p_values.min() > 1e-3


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_sketch_columns_then_explain_ranks_the_shifted_column_first(capsys, tmp_zarr, tmp_path):
    rng = np.random.default_rng(21)
    A = rng.normal(size=(3000, 5)).astype(np.float32)
    B = rng.normal(size=(3000, 5)).astype(np.float32)
    B[:, 3] += 0.4
    a_path, b_path = tmp_zarr(A, 1000, "a.zarr"), tmp_zarr(B, 1000, "b.zarr")
    a_sketch, b_sketch, plain = (str(tmp_path / name) for name in ("a.sketch", "b.sketch", "plain.sketch"))
    assert _run(capsys, "sketch", a_path, "-o", a_sketch, "--features", "128", "--columns")[0] == 0
    assert _run(capsys, "sketch", b_path, "-o", b_sketch, "--map", a_sketch, "--columns")[0] == 0
    code, out, _ = _run(capsys, "info", a_sketch, "--json")
    assert code == 0 and json.loads(out)["columns"]["n_columns"] == 5
    code, out, _ = _run(capsys, "explain", a_sketch, b_sketch, "--source", a_path, "--top", "3", "--json")
    assert code == 0
    columns = json.loads(out)["columns"]
    assert columns["columns"][0] == 3 and columns["adjusted_p_values"][0] < 0.01 and columns["n_permutations"] == 0
    assert columns["null"].startswith("spectral null from the column moments")
    code, out, _ = _run(capsys, "explain", a_sketch, b_sketch, "--source", a_path, "--top", "3")
    lines = out.splitlines()
    title = next(index for index, line in enumerate(lines) if line.startswith("columns, largest MMD first"))
    assert lines[title + 2].split()[0] == "3"  # below the table's header: the shifted column
    # without column parts: one line saying how to get them
    assert _run(capsys, "sketch", b_path, "-o", plain, "--map", a_sketch)[0] == 0
    code, out, _ = _run(capsys, "explain", a_sketch, plain, "--source", a_path, "--top", "3")
    assert code == 0 and out.splitlines()[-1] == (
        "columns: no column table: sketch B with --columns (columns=True) for one test per column"
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["sketch", b_path, "-o", str(tmp_path / "x.sketch"), "--column-bandwidth", "1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "add --columns" in err and len(err.strip().splitlines()) == 1


def test_golden_v1_column_sketch_loads_and_matches_the_documented_derivation():
    from pathlib import Path

    golden = srf.load(Path(__file__).parent / "data" / "golden_v1_columns.zarr")
    X = ((np.arange(36.0).reshape(12, 3) * 5) % 7 - 3) / 2  # tests/data/make_golden_v1_columns.py
    part = golden.columns
    assert golden.count == 12 and part.column_maps.bandwidth == 1.5 / np.sqrt(3)
    for column in range(3):
        # docs/file_format.rst: seed_c = SeedSequence([map seed, c, 0x636f6c]) word 0; w ~ N(0, 1) / s_c
        seed = int(np.random.SeedSequence([0, column, 0x636F6C]).generate_state(1)[0])
        frequencies = np.random.default_rng(seed).standard_normal((4, 1))[:, 0] / (1.5 / np.sqrt(3))
        Z = _features(X[:, column], frequencies)
        np.testing.assert_allclose(part.feature_sum[column], Z.sum(0), rtol=0, atol=1e-5)
        np.testing.assert_allclose(part.moment[column], Z.T @ Z, rtol=0, atol=1e-5)


def test_column_sketch_on_a_cluster_and_from_a_checkpoint_equals_the_local_sketch(dask_client, tmp_zarr, tmp_path):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(4000, 3)).astype(np.float32)
    path = tmp_zarr(X, 1000, "x.zarr")
    rff = srf.RFF(n_features=64, bandwidth=2.0, seed=2).fit(X)
    local = srf.sketch_array(X, rff, columns=True)
    checkpoint = tmp_path / "checkpoint"
    on_cluster = srf.sketch(path, rff, columns=True, client=dask_client, checkpoint=checkpoint)
    partials = sorted(checkpoint.glob("mean-*-columns-*/rows-*.zarr"))
    assert len(partials) == 4 and all(srf.load(partial).columns.count == 1000 for partial in partials)
    resumed = srf.sketch(path, rff, columns=True, checkpoint=checkpoint)  # the partials read back from disk
    for sketch in (on_cluster, resumed):
        for name in ("feature_sum", "moment"):
            a, b = getattr(sketch.columns, name), getattr(local.columns, name)
            assert np.abs(a - b).max() <= 1e-6 * np.abs(b).max()
    # a job with other column maps does not take those partials
    other = srf.sketch(path, rff, columns=True, column_bandwidth=0.5, checkpoint=checkpoint)
    assert other.columns.column_maps.bandwidth == 0.5
