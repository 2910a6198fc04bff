"""``streamrff explain`` and the effect-size, column and component additions of ``streamrff test``.

References are numpy computations on the features of the map the command reports.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import streamrff as srf
from streamrff.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def planted(tmp_zarr, tmp_path):
    """A and B of 4 columns; B has a small cluster (its first 60 rows) that A lacks, and column 1 shifted."""
    rng = np.random.default_rng(11)
    A = rng.normal(size=(1500, 4)).astype(np.float32)
    B = rng.normal(size=(1500, 4)).astype(np.float32)
    B[:60] = 3.5 + 0.2 * rng.normal(size=(60, 4))
    B[:, 1] += 0.3
    paths = tmp_zarr(A, 400, "a.zarr"), tmp_zarr(B, 400, "b.zarr")
    sketches = str(tmp_path / "a.sketch"), str(tmp_path / "b.sketch")
    assert main(["sketch", paths[0], "-o", sketches[0], "--moments", "--features", "256", "--json"]) == 0
    assert main(["sketch", paths[1], "-o", sketches[1], "--moments", "--map", sketches[0], "--json"]) == 0
    return A, B, paths, sketches


def test_cli_explain_ranks_the_planted_rows_and_reports_the_interval(capsys, planted, tmp_path):
    A, B, (a_path, b_path), (a_sketch, b_sketch) = planted
    capsys.readouterr()
    plot = tmp_path / "where.png"
    code, out, _ = run(capsys, "explain", a_sketch, b_sketch, "--source", b_path, "--top", "10",
                       "--json", "--plot", str(plot))  # fmt: skip
    assert code == 0
    payload = json.loads(out)
    assert payload["which"] == "smallest" and np.isin(payload["rows"], np.arange(60)).mean() >= 0.8
    # the witness of every row of B, from numpy on the map's features: the 10 smallest
    feature_map = srf.load(a_sketch).feature_map
    Za, Zb = (feature_map.transform(X).astype(np.float64) for X in (A, B))
    values = Zb @ (Za.mean(0) - Zb.mean(0))
    np.testing.assert_array_equal(payload["rows"], np.argsort(values, kind="stable")[:10])
    np.testing.assert_allclose(payload["values"], values[payload["rows"]], atol=1e-5)
    low, high = payload["confidence_interval"]["mmd2"]
    assert low < payload["statistic"] < high and payload["mmd"] == pytest.approx(np.sqrt(payload["statistic"]))
    assert sum(payload["histogram"]["counts"]) == 1500
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, _ = run(capsys, "explain", a_sketch, b_sketch, "--source", a_path, "--top", "3")
    assert code == 0 and "A is most over-represented against B" in out
    assert "(range 0 to sqrt(2)), 95% interval [" in out and "(Gaussian kernel)" in out


def test_cli_explain_refuses_bad_column_pairs_and_sketches(capsys, planted):
    _, _, (a_path, _), (a_sketch, b_sketch) = planted
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", a_sketch, b_sketch, "--source", a_path, "--plot-columns", "1,1"])
    assert exit_info.value.code == 2
    code, _, err = run(capsys, "explain", a_sketch, "missing.sketch", "--source", a_path)
    assert code != 0 and "missing.sketch" in err and "Traceback" not in err


def test_cli_test_moments_and_columns_print_the_interval_and_the_table(capsys, planted):
    _, _, (a_path, b_path), _ = planted
    capsys.readouterr()
    code, out, _ = run(capsys, "test", a_path, b_path, "--moments", "--columns", "--features", "128",
                       "--permutations", "99", "--json")  # fmt: skip
    assert code == 0
    payload = json.loads(out)
    low, high = payload["confidence_interval"]["mmd2"]
    assert low <= payload["statistic"] <= high
    columns = payload["columns"]
    assert columns["columns"][0] == 1 and len(columns["columns"]) == 4
    assert columns["adjusted_p_values"] == sorted(columns["adjusted_p_values"])
    code, out, _ = run(capsys, "test", a_path, b_path, "--features", "64", "--permutations", "19", "--columns",
                       "--json")  # fmt: skip
    one_pass = json.loads(out)  # the joint test rode along with the column tests: the same as alone
    code, out, _ = run(capsys, "test", a_path, b_path, "--features", "64", "--permutations", "19", "--json")
    alone = json.loads(out)
    assert one_pass["statistic"] == pytest.approx(alone["statistic"], rel=1e-6)
    assert one_pass["p_value"] == alone["p_value"] and one_pass["columns"]["columns"][0] == 1
    assert one_pass["confidence_interval"] is None and "--moments" in one_pass["confidence_interval_note"]
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--sketches", a_path, b_path, "--columns"])
    assert exit_info.value.code == 2 and "--columns" in capsys.readouterr().err
