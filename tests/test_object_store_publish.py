"""Object storage has no rename: a reader that meets a sketch being overwritten reads a whole
version or says "being written", never "tampered" (issue 27 item 5). Real moto S3 server."""

from __future__ import annotations

import json
import threading

import fsspec
import numpy as np
import pytest

import streamrff as srf
from streamrff._files.signed import write_state_path

ROWS = np.random.default_rng(8).normal(size=(40, 3))
#: Overwrites at most, while the loads run (the writer stops when they are done).
MAX_WRITES = 200


def two_versions() -> list[srf.MeanSketch]:
    feature_map = srf.RFF(n_features=64, seed=0).fit(ROWS)
    return [srf.sketch_array(ROWS[:20], feature_map, moments=True), srf.sketch_array(ROWS, feature_map, moments=True)]


# A load that meets overwrites retries for up to about 4 s before it says "being written": the
# default suite makes 2 loads while another thread overwrites the sketch, the slow suite 6.
@pytest.mark.parametrize("n_loads", [2, pytest.param(6, marks=pytest.mark.slow)])
def test_load_during_overwrites_reads_a_whole_version_or_says_being_written(s3_server, s3_bucket, n_loads):
    url, options = f"s3://{s3_bucket}/shared.sketch", s3_server.storage_options
    versions = two_versions()
    versions[0].save(url, storage_options=options)
    outcomes: dict[str, int] = {"old": 0, "new": 0, "being written": 0}
    others: list[str] = []
    reader_done = threading.Event()
    writes = []

    def overwrite_loop() -> None:
        while not reader_done.is_set() and len(writes) < MAX_WRITES:
            versions[(len(writes) + 1) % 2].save(url, storage_options=options, overwrite=True)
            writes.append(True)

    writer = threading.Thread(target=overwrite_loop)
    writer.start()
    try:
        for _ in range(n_loads):
            try:
                loaded = srf.load(url, storage_options=options)
            except srf.SketchBeingWrittenError:
                outcomes["being written"] += 1
                continue
            except srf.SketchFormatError as error:  # "tampered", "Attribute 'count' ... Got None": the bug
                others.append(str(error))
                continue
            if loaded == versions[0]:
                outcomes["old"] += 1
            elif loaded == versions[1]:
                outcomes["new"] += 1
            else:
                others.append(f"a sketch of {loaded.count} rows that is neither version")
    finally:
        reader_done.set()
        writer.join()
    assert others == [], outcomes
    assert sum(outcomes.values()) == n_loads and len(writes) >= n_loads, (outcomes, len(writes))
    assert srf.load(url, storage_options=options) == versions[len(writes) % 2]


def test_save_leaves_a_complete_write_state_beside_the_group(s3_server, s3_bucket):
    url, options = f"s3://{s3_bucket}/dir/s.sketch", s3_server.storage_options
    two_versions()[0].save(url, storage_options=options)
    fs, root = fsspec.core.url_to_fs(url, **options)
    assert write_state_path(root) == f"{s3_bucket}/dir/.s.sketch.streamrff-write"
    state = json.loads(fs.cat_file(write_state_path(root)))
    assert state["state"] == "complete" and len(state["write"]) == 32
    assert not fs.exists(f"{root}/.s.sketch.streamrff-write")  # outside the group


def test_an_interrupted_save_reads_as_being_written_and_an_old_file_as_before(s3_server, s3_bucket, monkeypatch):
    # An interrupted save never finishes: 3 reads (not load's 20, about 4 s of waiting) say so.
    monkeypatch.setattr("streamrff.formats.sketch._CONCURRENT_SAVE_ATTEMPTS", 3)
    options = s3_server.storage_options
    versions = two_versions()
    fs, _ = fsspec.core.url_to_fs(f"s3://{s3_bucket}", **options)
    # A save that died after announcing itself and writing part of the group.
    interrupted = f"{s3_bucket}/interrupted.sketch"
    versions[0].save(f"s3://{interrupted}", storage_options=options)
    fs.pipe_file(write_state_path(interrupted), json.dumps({"write": "0" * 32, "state": "writing"}).encode())
    fs.rm(f"{interrupted}/feature_sum", recursive=True)
    with pytest.raises(srf.SketchBeingWrittenError, match="is being written by another process"):
        srf.load(f"s3://{interrupted}", storage_options=options)
    # Written before write states (no state object): a broken file is reported as broken.
    old = f"{s3_bucket}/old.sketch"
    versions[0].save(f"s3://{old}", storage_options=options)
    fs.rm(write_state_path(old))
    assert srf.load(f"s3://{old}", storage_options=options) == versions[0]
    fs.rm(f"{old}/feature_sum", recursive=True)
    with pytest.raises(srf.SketchFormatError) as caught:
        srf.load(f"s3://{old}", storage_options=options)
    assert not isinstance(caught.value, srf.SketchBeingWrittenError)


def test_load_refuses_an_oversized_metadata_object_on_object_storage_unread(s3_server, s3_bucket):
    from streamrff._files.bounded_read import MAX_JSON_BYTES

    url = f"s3://{s3_bucket}/big.sketch"
    sketch = srf.sketch_array(ROWS, srf.RFF(n_features=8, bandwidth=1.0, seed=1))
    sketch.save(url, storage_options=s3_server.storage_options)
    fs = fsspec.filesystem("s3", **s3_server.storage_options)
    fs.pipe(f"{s3_bucket}/big.sketch/zarr.json", b" " * (MAX_JSON_BYTES + 1))

    refused = r"metadata object zarr.json holds 16,777,217 bytes.*Refused unread"
    with pytest.raises(srf.SketchFormatError, match=refused):
        srf.load(url, storage_options=s3_server.storage_options)
