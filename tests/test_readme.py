"""The README's "Two sites" commands run as written (parsed out of README.md, so they cannot drift).

References: the sketches' fingerprints against the map file's, the merged count against
the rows written, and the merged sums against an in-memory sketch of all rows.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import zarr

import streamrff as srf

README = Path(__file__).resolve().parent.parent / "README.md"


def two_sites_commands() -> list[list[str]]:
    text = README.read_text()
    block = re.search(r"<!-- two-sites:[^>]*-->\s*```bash\n(.*?)```", text, re.S)
    assert block, "README.md lost its marked 'Two sites' command block"
    return [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]


def test_readme_two_sites_commands_run_as_written(tmp_path, cli_main, monkeypatch):
    rng = np.random.default_rng(4)
    rows = {"site_a": rng.normal(size=(4_000, 5)).astype(np.float32),
            "site_b": (rng.normal(size=(3_000, 5)) + 0.3).astype(np.float32)}  # fmt: skip
    for name, values in rows.items():
        zarr.create_array(str(tmp_path / f"{name}.zarr"), data=values, chunks=(1_000, 5), zarr_format=3)
    script = os.path.join(os.path.dirname(sys.executable), "streamrff")
    commands = two_sites_commands()
    assert [command[:2] for command in commands] == [
        ["streamrff", "map"], ["streamrff", "sketch"], ["streamrff", "sketch"], ["streamrff", "merge"],
        ["streamrff", "test"]
    ]  # fmt: skip

    # In-process (the same `main` the console script calls, without an interpreter start per
    # command); the console script itself runs the old spelling below, in the same folder.
    monkeypatch.chdir(tmp_path)
    outputs = []
    for command in commands:
        code, out, err = cli_main(*command[1:])
        assert code == 0, (command, err)
        outputs.append(out)

    feature_map = srf.load_map(tmp_path / "map.json")
    sketches = {name: srf.load(tmp_path / f"{name}.sketch") for name in rows}
    assert all(sketch.fingerprint == feature_map.fingerprint for sketch in sketches.values())
    both = srf.load(tmp_path / "both.sketch")
    expected = srf.sketch_array(np.vstack(list(rows.values())), feature_map, moments=True)
    assert both.count == 7_000
    np.testing.assert_allclose(
        both.feature_sum, expected.feature_sum, rtol=0, atol=1e-6 * np.abs(expected.feature_sum).max()
    )
    assert outputs[-1].startswith("two-sample test: p ")  # "p = value" or "p < 1/(B+1) (value)" at the floor

    # The spelling of the previous release, `--method spectral`, still works for one release, with a warning.
    old_spelling = [word.replace("--null", "--method") for word in commands[-1]]
    assert old_spelling != commands[-1]
    result = subprocess.run([script, *old_spelling[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert result.stdout == outputs[-1]
    assert result.stderr.splitlines() == [
        "streamrff test: warning: --method is deprecated and will be removed in the next release; use --null spectral."
    ]
