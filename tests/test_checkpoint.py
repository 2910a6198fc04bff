"""Checkpoints are tied to their source: another source is refused, a rewritten chunk is recomputed."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff._files.publish import staging_path
from streamrff.engine.checkpoint import open_checkpoint
from streamrff.sources.rows import open_source

ROWS = np.random.default_rng(0).normal(size=(8_000, 4)).astype(np.float32)
OTHER = np.random.default_rng(1).normal(loc=1.0, size=(8_000, 4)).astype(np.float32)
FEATURE_MAP = srf.RFF(n_features=32, bandwidth=1.5, seed=2).fit(ROWS[:1])
CHUNKS_LOG = re.compile(r"sketching (\d+) chunk\(s\): (\d+) from checkpoint, (\d+) to compute")


def reused_and_computed(caplog) -> tuple[int, int]:
    total, reused, computed = (int(v) for v in CHUNKS_LOG.findall(caplog.text)[-1])
    return reused, computed


def assert_sketch_of(sketch, rows: np.ndarray) -> None:
    reference = srf.sketch_array(rows.astype(np.float64), FEATURE_MAP, dtype="float64")  # in memory, float64
    assert sketch.count == len(rows)
    np.testing.assert_allclose(sketch.feature_sum, reference.feature_sum, rtol=0, atol=1e-6 * len(rows))


def test_checkpoint_of_another_zarr_source_is_refused_naming_both(tmp_zarr, tmp_path):
    site_a, site_b = tmp_zarr(ROWS, 1_000, name="A.zarr"), tmp_zarr(OTHER, 1_000, name="B.zarr")
    checkpoint = tmp_path / "ck"
    assert_sketch_of(srf.sketch(site_a, FEATURE_MAP, checkpoint=checkpoint), ROWS)

    with pytest.raises(srf.CheckpointMismatchError) as refused:
        srf.sketch(site_b, FEATURE_MAP, checkpoint=checkpoint)

    message = str(refused.value)
    assert site_a in message and site_b in message and "another --checkpoint folder" in message
    assert_sketch_of(srf.sketch(site_b, FEATURE_MAP, checkpoint=tmp_path / "ck-b"), OTHER)  # the fix works


def test_rewritten_zarr_chunk_is_recomputed_and_its_old_partial_removed(tmp_zarr, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamrff.engine")
    path = tmp_zarr(ROWS, 1_000)
    checkpoint = tmp_path / "ck"
    srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)
    rewritten = ROWS.copy()
    rewritten[3_000:4_000] = OTHER[3_000:4_000]
    zarr.open_array(path, mode="r+")[3_000:4_000] = OTHER[3_000:4_000]

    second = srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)

    assert reused_and_computed(caplog) == (7, 1)
    assert_sketch_of(second, rewritten)
    partials = sorted(p.name for p in checkpoint.glob("*/rows-*.zarr"))
    assert len(partials) == 8 and sum(name.startswith("rows-000000003000-") for name in partials) == 1


def test_numpy_chunks_are_reused_only_when_their_content_is_unchanged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamrff.engine")
    checkpoint = tmp_path / "ck"
    srf.sketch(ROWS, FEATURE_MAP, chunk_rows=2_000, checkpoint=checkpoint)
    changed = ROWS.copy()
    changed[100] += 1.0

    again = srf.sketch(ROWS, FEATURE_MAP, chunk_rows=2_000, checkpoint=checkpoint)
    assert reused_and_computed(caplog) == (4, 0)
    other = srf.sketch(changed, FEATURE_MAP, chunk_rows=2_000, checkpoint=checkpoint)

    assert reused_and_computed(caplog) == (3, 1)
    assert_sketch_of(again, ROWS)
    assert_sketch_of(other, changed)


def test_dask_chunks_are_identified_by_the_task_that_reads_them(tmp_path):
    checkpoint = tmp_path / "ck"
    first = srf.sketch(da.from_array(ROWS, chunks=(2_000, 4)), FEATURE_MAP, checkpoint=checkpoint)
    saved = {p.name: p.stat().st_mtime_ns for p in checkpoint.glob("*/rows-*.zarr")}
    changed = ROWS.copy()
    changed[5_000] -= 2.0

    again = srf.sketch(da.from_array(ROWS, chunks=(2_000, 4)), FEATURE_MAP, checkpoint=checkpoint)
    after_again = {p.name: p.stat().st_mtime_ns for p in checkpoint.glob("*/rows-*.zarr")}
    other = srf.sketch(da.from_array(changed, chunks=(2_000, 4)), FEATURE_MAP, checkpoint=checkpoint)
    after_other = {p.name for p in checkpoint.glob("*/rows-*.zarr")}

    assert after_again == saved  # all four loaded, none rewritten
    assert again == first
    assert_sketch_of(other, changed)
    assert len(after_other) == 4 and len(after_other - set(saved)) == 1  # chunk 2 replaced


def test_stale_staging_partials_are_removed_and_a_running_job_locks_the_folder(tmp_zarr, tmp_path):
    path = tmp_zarr(ROWS, 1_000)
    checkpoint = tmp_path / "ck"
    srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)
    (job,) = checkpoint.iterdir()
    stale = staging_path(job / "rows-000000000000-000000001000-0123456789abcdef.zarr")
    stale.mkdir()  # what a worker killed mid-write leaves

    with open_checkpoint(checkpoint, job.name, open_source(path)):
        assert not stale.exists()
        with pytest.raises(srf.CheckpointMismatchError, match="in use by another running job"):
            srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)
    assert_sketch_of(srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint), ROWS)


def test_cli_checkpoint_of_another_source_exits_2_with_one_line(tmp_zarr, tmp_path):
    site_a, site_b = tmp_zarr(ROWS, 1_000, name="A.zarr"), tmp_zarr(OTHER, 1_000, name="B.zarr")
    srf.save_map(FEATURE_MAP, tmp_path / "map.json")
    command = [sys.executable, "-m", "streamrff.cli", "sketch", "--map", str(tmp_path / "map.json")]
    command += ["--checkpoint", str(tmp_path / "ck")]
    first = subprocess.run([*command, site_a, "-o", str(tmp_path / "a.sketch")], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr

    second = subprocess.run([*command, site_b, "-o", str(tmp_path / "b.sketch")], capture_output=True, text=True)

    assert second.returncode == 2
    assert len(second.stderr.strip().splitlines()) == 1 and "A.zarr" in second.stderr and "B.zarr" in second.stderr
    assert not Path(tmp_path / "b.sketch").exists()


def test_s3_checkpoint_of_another_source_is_refused(s3_server, s3_bucket, tmp_zarr):
    options = s3_server.storage_options
    checkpoint = f"s3://{s3_bucket}/ck"
    site_a, site_b = tmp_zarr(ROWS, 2_000, name="A.zarr"), tmp_zarr(OTHER, 2_000, name="B.zarr")
    srf.sketch(site_a, FEATURE_MAP, checkpoint=checkpoint, storage_options=options)

    with pytest.raises(srf.CheckpointMismatchError, match="B.zarr"):
        srf.sketch(site_b, FEATURE_MAP, checkpoint=checkpoint, storage_options=options)
    assert_sketch_of(srf.sketch(site_a, FEATURE_MAP, checkpoint=checkpoint, storage_options=options), ROWS)


def test_a_partial_that_is_a_link_is_never_read(tmp_zarr, tmp_path):
    path = tmp_zarr(ROWS, 2_000)
    checkpoint = tmp_path / "ck"
    srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint)
    (partial,) = [p for p in checkpoint.glob("*/rows-000000002000-*.zarr")]
    elsewhere = tmp_path / "elsewhere.zarr"
    partial.rename(elsewhere)
    srf.sketch_array(OTHER[:2_000], FEATURE_MAP).save(elsewhere, overwrite=True)  # a partial of other rows
    partial.symlink_to(elsewhere)

    assert_sketch_of(srf.sketch(path, FEATURE_MAP, checkpoint=checkpoint), ROWS)
    assert not partial.is_symlink()  # recomputed in its place
