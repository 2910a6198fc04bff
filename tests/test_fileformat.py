"""The sketch file format: exact round trips, refusal of anything that is not a whole sketch,
crash safety, and golden files that must keep loading."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import zarr

import streamrff as srf
import streamrff._files.signed as sketchfile
from streamrff._files.signed import _write_group
from streamrff.errors import SketchFormatError, SourceError

DATA = Path(__file__).parent / "data"
ROWS = np.random.default_rng(11).normal(size=(40, 3))

SKETCHES = {
    "rff-sincos-moments": lambda: srf.sketch_array(ROWS, srf.RFF(n_features=16, bandwidth=1.5, seed=0), moments=True),
    "rff-cosphase": lambda: srf.sketch_array(ROWS, srf.RFF(n_features=15, bandwidth=1.0, variant="cosphase", seed=3)),
    "rff-orthogonal-median": lambda: srf.sketch_array(
        ROWS, srf.RFF(n_features=16, bandwidth="median", orthogonal=True, seed=4), moments=True
    ),
    "jl": lambda: srf.sketch_array(ROWS, srf.JL(srf.RFF(n_features=32, bandwidth=1.0, seed=1), n_components=8, seed=2)),
    "landmark": lambda: srf.LandmarkSketch.from_rows(ROWS, k=10, seed=5),
    "empty-mean": lambda: srf.MeanSketch.empty(srf.RFF(n_features=8, bandwidth=1.0).fit(ROWS), moments=True),
}

SUFFIXES = ["zarr", "zip"]


def sketch_file(tmp_path: Path, suffix: str, name: str = "sketch", sketch: srf.Sketch | None = None) -> Path:
    path = tmp_path / f"{name}.{suffix}"
    (sketch if sketch is not None else SKETCHES["rff-sincos-moments"]()).save(path)
    return path


def edit_attrs(path: Path, **changes) -> None:
    """Edit the group attributes in zarr.json by hand, as a careless tool or an attacker would."""
    metadata_file = path / "zarr.json"
    metadata = json.loads(metadata_file.read_text())
    for key, value in changes.items():
        if value is None:
            metadata["attributes"].pop(key, None)
        else:
            metadata["attributes"][key] = value
    metadata_file.write_text(json.dumps(metadata))


def attrs_of(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())["attributes"]


def sha256_little_endian(array: np.ndarray) -> str:
    """The format's checksum: sha256 of the array's little-endian C-order bytes."""
    return hashlib.sha256(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()).hexdigest()


def rewrite_array(path: Path, name: str, values: np.ndarray, fix_checksum: bool) -> None:
    root = zarr.open_group(str(path), mode="r+")
    root.create_array(name, shape=values.shape, dtype=values.dtype, overwrite=True)[...] = values
    if fix_checksum:
        checksums = attrs_of(path)["checksums"]
        edit_attrs(path, checksums={**checksums, name: sha256_little_endian(values)})


def assert_not_a_sketch(path: Path, *fragments: str) -> str:
    with pytest.raises(SketchFormatError) as raised:
        srf.load(path)
    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SKETCHES))
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_sketch_save_load_round_trips_exactly(tmp_path, name, suffix):
    sketch = SKETCHES[name]()
    path = tmp_path / f"s.{suffix}"
    sketch.save(path)
    loaded = srf.load(path)
    assert type(loaded) is type(sketch)
    assert loaded == sketch
    assert loaded.spec == sketch.spec and loaded.fingerprint == sketch.fingerprint
    for key, array in sketch._arrays().items():
        assert loaded._arrays()[key].dtype == array.dtype
        assert loaded._arrays()[key].tobytes() == array.tobytes()
    if isinstance(sketch, srf.MeanSketch):
        assert loaded.squared_norm_sum == sketch.squared_norm_sum
        assert loaded.feature_map.transform(ROWS).tobytes() == sketch.feature_map.transform(ROWS).tobytes()
        # A loaded sketch merges with a fresh one of the same map.
        assert loaded.merge(sketch).count == 2 * sketch.count
    if suffix == "zip":
        assert zipfile.is_zipfile(path)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_sketch_load_accepts_str_and_file_url(tmp_path, suffix):
    path = sketch_file(tmp_path, suffix)
    expected = SKETCHES["rff-sincos-moments"]()
    assert srf.load(str(path)) == expected
    assert srf.load(f"file://{path}") == expected


def test_sketch_file_declares_format_and_little_endian_arrays(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    attrs = attrs_of(path)
    assert attrs["format"] == "streamrff.sketch" and attrs["version"] == 1 and attrs["kind"] == "mean"
    assert attrs["map"]["kind"] == "rff" and attrs["count"] == len(ROWS)
    root = zarr.open_group(str(path), mode="r")
    for name in ("feature_sum", "moment"):
        metadata = json.loads((path / name / "zarr.json").read_text())
        assert metadata["data_type"] == "float64"
        assert {"name": "bytes", "configuration": {"endian": "little"}} in metadata["codecs"]
        assert attrs["checksums"][name] == sha256_little_endian(np.asarray(root[name][...]))
    assert not list(path.rglob("*.pkl")) and b"pickle" not in (path / "zarr.json").read_bytes()


# -- overwriting and failed saves -------------------------------------------------------------------


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_sketch_save_refuses_existing_path_and_keeps_old_file(tmp_path, suffix):
    path = sketch_file(tmp_path, suffix)
    original = srf.load(path)
    other = SKETCHES["rff-cosphase"]()
    with pytest.raises(FileExistsError) as raised:
        other.save(path)
    assert str(path) in str(raised.value) and "overwrite=True" in str(raised.value)
    assert srf.load(path) == original
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no staging left


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_sketch_save_overwrite_replaces_old_file(tmp_path, suffix):
    path = sketch_file(tmp_path, suffix)
    other = SKETCHES["rff-cosphase"]()
    other.save(path, overwrite=True)
    assert srf.load(path) == other
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_sketch_save_to_missing_parent_leaves_nothing(tmp_path, suffix):
    path = tmp_path / "no-such-dir" / f"s.{suffix}"
    with pytest.raises(SourceError) as raised:
        SKETCHES["rff-sincos-moments"]().save(path)
    assert "does not exist" in str(raised.value) and "Create it first" in str(raised.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_sketch_save_failing_midway_leaves_nothing(tmp_path, suffix, monkeypatch):
    sketch = SKETCHES["rff-sincos-moments"]()

    def fail() -> dict:
        raise RuntimeError("disk full")

    # The arrays are written, then building the attributes fails.
    monkeypatch.setattr(sketch, "_attrs", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        sketch.save(tmp_path / f"s.{suffix}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_sketch_save_failing_midway_keeps_old_file(tmp_path, suffix, monkeypatch):
    path = sketch_file(tmp_path, suffix)
    original = srf.load(path)
    replacement = SKETCHES["rff-cosphase"]()
    monkeypatch.setattr(replacement, "_attrs", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        replacement.save(path, overwrite=True)
    assert srf.load(path) == original
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


# -- loading things that are not sketches ---------------------------------------------------------------


def test_load_rejects_missing_path(tmp_path):
    assert_not_a_sketch(tmp_path / "absent.zarr", "absent.zarr", "does not exist")
    assert_not_a_sketch(tmp_path / "absent.zip", "does not exist")


def test_load_rejects_plain_zarr_array(tmp_path):
    path = tmp_path / "array.zarr"
    zarr.create_array(str(path), shape=(4,), dtype="float64")[...] = 1.0
    assert_not_a_sketch(path, "zarr array", "not a streamrff sketch")


def test_load_rejects_plain_zarr_group(tmp_path):
    path = tmp_path / "group.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.attrs["count"] = 3
    group.create_array("feature_sum", shape=(4,), dtype="float64")
    assert_not_a_sketch(path, "not a complete streamrff sketch", "format='streamrff.sketch'")


def test_load_rejects_empty_directory(tmp_path):
    assert_not_a_sketch(tmp_path, "no zarr group")


@pytest.mark.parametrize("content", [b"", b"hello, not a sketch\n", bytes(range(256)) * 4])
def test_load_rejects_random_file(tmp_path, content):
    path = tmp_path / "random.zip"
    path.write_bytes(content)
    assert_not_a_sketch(path, "not a zip archive")


def test_load_rejects_zip_without_a_sketch(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "no zarr here")
    assert_not_a_sketch(path)


def test_load_rejects_truncated_zip(tmp_path):
    path = sketch_file(tmp_path, "zip")
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    assert_not_a_sketch(path)


# -- truncated and tampered sketches -------------------------------------------------------------------


@pytest.mark.parametrize("array", ["feature_sum", "moment"])
def test_load_rejects_deleted_chunk(tmp_path, array):
    path = sketch_file(tmp_path, "zarr")
    chunks = [p for p in (path / array / "c").rglob("*") if p.is_file()]
    assert chunks
    chunks[0].unlink()  # zarr would read the fill value (zeros) instead
    assert_not_a_sketch(path, array, "checksum")


def test_load_rejects_deleted_array(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    (path / "moment" / "zarr.json").unlink()
    assert_not_a_sketch(path, "moment")


def test_load_rejects_array_missing_from_checksums(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    checksums = attrs_of(path)["checksums"]
    del checksums["moment"]
    edit_attrs(path, checksums=checksums)
    assert_not_a_sketch(path, "Missing array 'moment'")


def test_load_rejects_changed_sum_shape(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    longer = np.zeros(17)
    rewrite_array(path, "feature_sum", longer, fix_checksum=False)
    assert_not_a_sketch(path, "feature_sum", "checksum")
    # Even with a matching checksum the shape is checked against the map.
    rewrite_array(path, "feature_sum", longer, fix_checksum=True)
    assert_not_a_sketch(path, "feature_sum", "shape (16,)", "Got shape (17,)")


def test_load_rejects_changed_dtype(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    loaded = srf.load(path)
    rewrite_array(path, "feature_sum", loaded.feature_sum.astype(np.float32), fix_checksum=True)
    assert_not_a_sketch(path, "feature_sum", "dtype float64", "dtype float32")


def test_load_rejects_nonfinite_sum(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    values = np.array(srf.load(path).feature_sum)
    values[3] = np.nan
    rewrite_array(path, "feature_sum", values, fix_checksum=True)
    assert_not_a_sketch(path, "feature_sum", "NaN or inf")


def test_load_rejects_altered_values(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    values = np.array(srf.load(path).moment)
    values[2, 5] += 1e-9
    rewrite_array(path, "moment", values, fix_checksum=False)
    assert_not_a_sketch(path, "moment", "does not match its checksum")


def test_load_rejects_flipped_bytes_in_chunk(tmp_path):
    path = sketch_file(tmp_path, "zarr")
    chunk = next(p for p in (path / "moment" / "c").rglob("*") if p.is_file())
    content = bytearray(chunk.read_bytes())
    content[len(content) // 2] ^= 0xFF
    chunk.write_bytes(bytes(content))
    assert_not_a_sketch(path)  # the compressed chunk fails to decode, or decodes to the wrong checksum


@pytest.mark.parametrize(
    ("changes", "fragments"),
    [
        ({"count": -1}, ("count", ">= 0", "-1")),
        ({"count": 2.5}, ("count", "2.5")),
        ({"count": None}, ("count", "None")),
        ({"n_invalid": -3}, ("n_invalid", "-3")),
        ({"squared_norm_sum": -1.0}, ("squared_norm_sum", ">= 0")),
        ({"version": 2}, ("version 2", "reads up to version 1", "Upgrade streamrff")),
        ({"version": 0}, ("invalid format version 0",)),
        ({"version": "1"}, ("invalid format version '1'",)),
        ({"kind": "mystery"}, ("unknown sketch kind 'mystery'",)),
        ({"format": "something.else"}, ("not a complete streamrff sketch", "something.else")),
        ({"checksums": None}, ("checksums",)),
        ({"map": None}, ("missing map spec",)),
        ({"fingerprint": "0" * 64}, ("fingerprint does not match",)),
    ],
    ids=lambda value: json.dumps(value) if isinstance(value, dict) else None,
)
def test_load_rejects_tampered_attributes(tmp_path, changes, fragments):
    path = sketch_file(tmp_path, "zarr")
    edit_attrs(path, **changes)
    assert_not_a_sketch(path, *fragments)


@pytest.mark.parametrize(
    "spec_change",
    [
        {"bandwidth": 3.0},
        {"seed": 1},
        {"n_features": 18},
        {"variant": "cosphase"},
        {"bandwidth": "median"},
        {"kind": "nope"},
    ],
)
def test_load_rejects_tampered_map_spec(tmp_path, spec_change):
    path = sketch_file(tmp_path, "zarr")
    edit_attrs(path, map={**attrs_of(path)["map"], **spec_change})
    assert_not_a_sketch(path, str(path))


def test_load_rejects_newer_version_in_zip(tmp_path):
    directory = sketch_file(tmp_path, "zarr")
    edit_attrs(directory, version=2)
    archive = tmp_path / "v2.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for file in sorted(directory.rglob("*")):
            if file.is_file():
                packed.write(file, file.relative_to(directory).as_posix())
    assert_not_a_sketch(archive, "version 2", "Upgrade")


# -- crash safety -------------------------------------------------------------------------------------

#: Child process: builds a D = 4096 sketch with moments (128 MB) and saves it to argv[1].
#: With argv[2] == "block", it announces when every array is written and then blocks
#: before the attributes, so the kill lands at the worst moment deterministically.
_SAVE_SCRIPT = """
import sys
import numpy as np
import streamrff as srf
import streamrff._files.signed as sketchfile

target, mode = sys.argv[1], sys.argv[2]
feature_map = srf.RFF(n_features=4096, bandwidth=1.0, seed=0).fit(np.zeros((1, 3)))
rng = np.random.default_rng(0)
sketch = srf.MeanSketch(feature_map, 10, rng.random(4096), 10.0, rng.random((4096, 4096)))
if mode == "block":
    def announce_and_block(array):
        print("arrays-written", flush=True)
        sys.stdin.read()
    sketchfile._checksum = announce_and_block
print("saving", flush=True)
sketch.save(target)
print("saved", flush=True)
"""


def _start_save(target: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _SAVE_SCRIPT, str(target), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the save finished before it could be interrupted"


def _assert_interrupted_save_left_no_sketch(target: Path) -> None:
    assert not target.exists()
    assert_not_a_sketch(target, "does not exist")
    leftovers = [p for p in target.parent.iterdir() if p.name != target.name]
    assert all(p.name.startswith(f".{target.name}.partial-") for p in leftovers), leftovers
    for partial in leftovers:  # staging that a crash leaves behind never loads either
        with pytest.raises(SketchFormatError):
            srf.load(partial)


def test_sketch_save_killed_while_writing_leaves_no_loadable_target(tmp_path):
    target = tmp_path / "big.zarr"
    process = _start_save(target, "plain")
    try:
        deadline = time.monotonic() + 120
        # Poll for the staging directory, then kill the writer while it writes 128 MB (not for the
        # output location's probe, a file of the same prefix that lives a moment before it).
        while not [p for p in tmp_path.glob(".big.zarr.partial-*") if p.is_dir()]:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the save never started"
            time.sleep(0.002)
        _kill(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    _assert_interrupted_save_left_no_sketch(target)
    for partial in tmp_path.glob(".big.zarr.partial-*"):
        shutil.rmtree(partial)  # up to 128 MB


def test_sketch_save_killed_before_attributes_leaves_no_loadable_target(tmp_path):
    target = tmp_path / "big.zarr"
    process = _start_save(target, "block")
    try:
        for line in process.stdout:  # ends at EOF if the child dies
            if line.strip() == "arrays-written":
                break
        assert process.poll() is None, process.communicate()
        staging = list(tmp_path.glob(".big.zarr.partial-*"))
        assert len(staging) == 1 and (staging[0] / "moment" / "zarr.json").exists()
        _kill(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    _assert_interrupted_save_left_no_sketch(target)
    assert_not_a_sketch(staging[0], "incomplete")
    shutil.rmtree(staging[0])  # 128 MB


def test_write_group_stopped_before_attributes_loads_as_incomplete(tmp_path, monkeypatch):
    # Object-store style (no rename): the arrays land, the attributes never do (the
    # checksums are taken after the arrays are written, just before the attributes).
    sketch = SKETCHES["rff-sincos-moments"]()

    def interrupted(array: np.ndarray) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(sketchfile, "_checksum", interrupted)
    path = tmp_path / "object-store.zarr"
    with pytest.raises(KeyboardInterrupt):
        _write_group(zarr.storage.LocalStore(path), sketch._file_parts())
    assert (path / "feature_sum" / "zarr.json").exists()
    assert_not_a_sketch(path, "incomplete", "format='streamrff.sketch'")


def test_write_group_without_format_attributes_loads_as_incomplete(tmp_path):
    path = tmp_path / "object-store.zarr"
    _write_group(zarr.storage.LocalStore(path), SKETCHES["rff-sincos-moments"]()._file_parts())
    assert srf.load(path) == SKETCHES["rff-sincos-moments"]()
    edit_attrs(path, format=None, version=None)
    assert_not_a_sketch(path, "incomplete")


# -- golden files -------------------------------------------------------------------------------------


def golden_rows() -> np.ndarray:
    """The rows tests/data/make_golden_v1.py sketched: exact binary fractions."""
    return ((np.arange(36.0).reshape(12, 3) * 5) % 7 - 3) / 2


def golden_features() -> np.ndarray:
    """The features of the golden rows, by the RFF recipe: z = m^-1/2 [cos(X W^T / sigma), sin(X W^T / sigma)],
    W = default_rng(seed).standard_normal((m, d)), m = D / 2 (D = 16, sigma = 1.5, seed 0)."""
    X, m, sigma = golden_rows(), 8, 1.5
    W = np.random.default_rng(0).standard_normal((m, 3))
    phases = X @ W.T / sigma
    return np.hstack([np.cos(phases), np.sin(phases)]) / np.sqrt(m)


def golden_targets() -> np.ndarray:
    """The targets of tests/data/make_golden_v1_regression.py (exact binary fractions)."""
    X = golden_rows()
    return np.column_stack([X @ np.array([1.0, -0.5, 0.25]), X[:, 0] * X[:, 1]])


@pytest.mark.filterwarnings("ignore::streamrff.SketchFormatWarning")  # no attributes digest in v1 golden files
@pytest.mark.parametrize("name", ["golden_v1_mean.zarr", "golden_v1_mean.zip"])
def test_golden_v1_mean_sketch_loads_and_matches_numpy(name):
    sketch = srf.load(DATA / name)
    assert isinstance(sketch, srf.MeanSketch)
    assert sketch.spec == {
        "kind": "rff",
        "n_features_in": 3,
        "n_features": 16,
        "bandwidth": 1.5,
        "variant": "sincos",
        "orthogonal": False,
        "seed": 0,
    }
    assert sketch.count == 12 and sketch.n_invalid == 0 and sketch.has_moments
    # Independent recomputation (golden_features: the RFF recipe).
    X, Z = golden_rows(), golden_features()
    # The file holds float64 sums of float32 features.
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(sketch.moment, Z.T @ Z, rtol=0, atol=1e-6)
    assert sketch.squared_norm_sum == pytest.approx(12.0, abs=1e-5)
    # And the rebuilt map still embeds like the numpy recipe.
    np.testing.assert_allclose(sketch.feature_map.transform(X), Z, rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore::streamrff.SketchFormatWarning")  # no attributes digest in v1 golden files
def test_golden_v1_directory_and_zip_hold_the_same_sketch():
    assert srf.load(DATA / "golden_v1_mean.zarr") == srf.load(DATA / "golden_v1_mean.zip")


@pytest.mark.filterwarnings("ignore::streamrff.SketchFormatWarning")  # no attributes digest in v1 golden files
def test_golden_v1_mean_sketch_merges_with_a_fresh_sketch():
    golden = srf.load(DATA / "golden_v1_mean.zarr")
    fresh = srf.sketch_array(golden_rows(), srf.RFF(n_features=16, bandwidth=1.5, seed=0), moments=True)
    merged = golden.merge(fresh)
    assert merged.count == 24
    np.testing.assert_allclose(merged.feature_sum, 2 * golden.feature_sum, rtol=1e-6)


@pytest.mark.parametrize("name", ["golden_v1_nystrom.zarr", "golden_v1_nystrom.zip"])
def test_golden_v1_nystrom_sketch_loads_and_matches_numpy(name):
    sketch = srf.load(DATA / name)
    assert isinstance(sketch, srf.NystromSketch)
    assert sketch.spec == srf.load(DATA / "golden_v1_mean.zarr").spec
    assert sketch.count == 12 and sketch.n_invalid == 0
    assert (sketch.test_seed, sketch.sketch_size) == (3, 6)
    # Independent recomputation: the RFF recipe of the mean golden file, and the test matrix
    # Omega = PCG64(SeedSequence([seed, 0x4E595354, D, l])).standard_normal((D, l)) / sqrt(D).
    Z = golden_features()
    omega = np.random.default_rng(np.random.SeedSequence([3, 0x4E595354, 16, 6])).standard_normal((16, 6)) / 4.0
    np.testing.assert_array_equal(sketch.test_matrix, omega)
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(sketch.range_sketch, Z.T @ (Z @ omega), rtol=0, atol=1e-6)
    assert sketch.squared_norm_sum == pytest.approx(12.0, abs=1e-5)
    assert srf.load(DATA / "golden_v1_nystrom.zarr") == srf.load(DATA / "golden_v1_nystrom.zip")


def check_golden_target_sums(sketch: srf.Sketch) -> np.ndarray:
    """Assert what both golden regression kinds hold: the map of the mean golden file, 12 rows, the feature
    and target sums of golden_features() and golden_targets(); return the features for the kind's own checks."""
    assert sketch.spec == srf.load(DATA / "golden_v1_mean.zarr").spec
    assert (sketch.count, sketch.n_invalid, sketch.n_targets, sketch.target_ndim) == (12, 0, 2, 2)
    Y, Z = golden_targets(), golden_features()
    np.testing.assert_allclose(sketch.feature_sum, Z.sum(axis=0), rtol=0, atol=1e-6)
    assert sketch.squared_norm_sum == pytest.approx(12.0, abs=1e-5)
    np.testing.assert_allclose(sketch.cross_moment, Z.T @ Y, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(sketch.target_sum, Y.sum(axis=0))
    np.testing.assert_array_equal(sketch.target_moment, Y.T @ Y)
    return Z


@pytest.mark.filterwarnings("ignore::streamrff.SketchFormatWarning")  # the mean golden file has no digest
@pytest.mark.parametrize("name", ["golden_v1_regression.zarr", "golden_v1_regression.zip"])
def test_golden_v1_regression_sketch_loads_and_matches_numpy(name):
    sketch = srf.load(DATA / name)
    assert isinstance(sketch, srf.RegressionSketch)
    assert sketch.classes is None  # regression targets (and files from before classes were recorded)
    Z = check_golden_target_sums(sketch)
    np.testing.assert_allclose(sketch.moment, Z.T @ Z, rtol=0, atol=1e-6)
    assert srf.load(DATA / "golden_v1_regression.zarr") == srf.load(DATA / "golden_v1_regression.zip")


@pytest.mark.filterwarnings("ignore::streamrff.SketchFormatWarning")  # the Nystrom golden file has no digest
@pytest.mark.parametrize("name", ["golden_v1_nystrom_regression.zarr", "golden_v1_nystrom_regression.zip"])
def test_golden_v1_nystrom_regression_sketch_loads_and_matches_numpy(name):
    sketch = srf.load(DATA / name)
    assert isinstance(sketch, srf.NystromRegressionSketch)
    assert (sketch.test_seed, sketch.sketch_size, sketch.classes) == (3, 6, None)
    Z = check_golden_target_sums(sketch)
    # The test matrix recipe of the Nystrom golden file.
    omega = np.random.default_rng(np.random.SeedSequence([3, 0x4E595354, 16, 6])).standard_normal((16, 6)) / 4.0
    np.testing.assert_array_equal(sketch.test_matrix, omega)
    np.testing.assert_allclose(sketch.range_sketch, Z.T @ (Z @ omega), rtol=0, atol=1e-6)
    assert srf.load(DATA / "golden_v1_nystrom_regression.zarr") == srf.load(DATA / "golden_v1_nystrom_regression.zip")
