"""A monitor state from a stranger is bounded before anything is built (issue 49 item 5).

The attacker edits zarr.json as one who knows the format would: change a field and recompute the
attributes digest (the sha256 of the canonical JSON of every other attribute, recomputed here with
hashlib). Each edit must end in one line and a non-zero status, never a traceback or a large allocation.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import streamrff as srf


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    reference = np.random.default_rng(5).normal(size=(300, 3)).astype(np.float32)
    monitor = srf.DriftMonitor(20, 1000, n_features=16, bandwidth=1.5, n_streams=200, seed=0).fit(reference)
    monitor.source_cursor_ = {"version": 2, "source": "live.zarr", "identity": "zarr:x", "n_columns": 3,
                              "dtype": "float32", "chunk_rows": 50, "next_row": 100, "last_chunk": None,
                              "drift_at_row": None}  # fmt: skip
    path = tmp_path_factory.mktemp("monitor") / "state"
    monitor.save(path)
    return path


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def edited_copy(saved: Path, folder: Path, edit) -> Path:
    import shutil

    target = folder / "edited"
    shutil.copytree(saved, target)
    document = json.loads((target / "zarr.json").read_text())
    edit(document["attributes"])
    covered = {name: value for name, value in document["attributes"].items() if name != "attributes_digest"}
    try:
        document["attributes"]["attributes_digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    except RecursionError:
        pass
    (target / "zarr.json").write_text(json.dumps(document))
    return target


def deep(levels: int):
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


EDITS = {
    "n_features 1e12": lambda a: a["map"].update(n_features=10**12),
    "n_features 2e8": lambda a: a["map"].update(n_features=2 * 10**8),
    "chunk_rows 0": lambda a: a["cursor"].update(chunk_rows=0),
    "a string row": lambda a: a["cursor"].update(next_row="100"),
    "deep JSON": lambda a: a.update(note=deep(100)),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_state_is_refused_in_one_line(saved, tmp_path, cli_main, case):
    target = edited_copy(saved, tmp_path, EDITS[case])
    with pytest.raises(srf.SketchFormatError):
        srf.load_monitor(target)
    code, out, err = cli_main("info", str(target))
    assert code != 0 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(target) in err


def test_a_state_whose_zarr_json_is_empty_is_reported_as_corrupt(saved, tmp_path, cli_main):
    import shutil

    target = tmp_path / "state"
    shutil.copytree(saved, target)
    (target / "zarr.json").write_text("{}")
    with pytest.raises(srf.SketchFormatError, match="corrupt monitor state"):
        srf.load_monitor(target)
    import zarr

    zarr.create_array(str(tmp_path / "live.zarr"), data=np.zeros((10, 3), "float32"))
    code, out, err = cli_main("watch", str(tmp_path / "live.zarr"), "--reference", str(target))
    assert code != 0 and err.count("\n") == 1 and "corrupt" in err, err


def test_the_untouched_state_loads(saved):
    assert srf.load_monitor(saved).source_cursor_["next_row"] == 100
