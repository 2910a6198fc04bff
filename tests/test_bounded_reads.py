"""Every declared size bounded before a byte is read or allocated (issue 27, item 3).

Each test crafts on disk one of the small files the probe of issue 27 found costing gigabytes,
hanging or ending in a raw traceback, then runs ``streamrff info`` (or ``load``) on it in a child
process that reports its own peak resident memory. The contract: exit code 1, one
``streamrff info: error: ...`` line, no traceback, peak memory below 1 GiB, and no hang
(pytest-timeout caps the wall time; nothing is timed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import streamrff as srf
from streamrff.formats.sketch import _attributes_digest

pytestmark = pytest.mark.timeout(180)

ROWS = np.random.default_rng(27).normal(size=(51, 3))
REPOSITORY = Path(__file__).parents[1]
#: Peak resident memory a crafted file of at most a few MB may cost the reader.
PEAK_RSS_LIMIT_KIB = 2**20

#: Child process: caps its address space at its size after imports + STREAMRFF_TEST_HEADROOM bytes
#: (if set), runs the CLI on argv and writes its own peak RSS (KiB) to STREAMRFF_TEST_RSS.
_RUN_CLI_AND_REPORT_PEAK = """
import os, resource, sys
import psutil
import streamrff as srf
from streamrff.cli import main

srf.load  # the package imports lazily: load the whole API before capping the address space
headroom = int(os.environ.get("STREAMRFF_TEST_HEADROOM", "0"))
if headroom:
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + headroom, hard))
try:
    code = main(sys.argv[1:])
finally:
    with open(os.environ["STREAMRFF_TEST_RSS"], "w") as report:
        # VmHWM: the peak of this process's own address space, in kB (ru_maxrss can carry the parent's peak
        # across fork and exec, so it would count the test runner's memory).
        report.write(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
sys.exit(code)
"""


def run_cli_measured(tmp_path: Path, *arguments: str, headroom: int = 0) -> tuple[int, str, int]:
    """Run ``streamrff ARGUMENTS`` in a child; return its exit code, stderr and peak RSS in KiB."""
    report = tmp_path / "peak-rss.txt"
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "STREAMRFF_TEST_RSS": str(report)}
    if headroom:
        env["STREAMRFF_TEST_HEADROOM"] = str(headroom)
    completed = subprocess.run(
        [sys.executable, "-c", _RUN_CLI_AND_REPORT_PEAK, *arguments],
        capture_output=True, text=True, timeout=170, check=False, env=env,
    )  # fmt: skip
    peak_kib = int(report.read_text())
    print(f"streamrff {' '.join(arguments[:1])}: exit {completed.returncode}, peak RSS {peak_kib / 1024:.0f} MiB")
    return completed.returncode, completed.stderr, peak_kib


def assert_one_line_refusal(returncode: int, stderr: str, peak_kib: int, *fragments: str) -> None:
    assert returncode == 1, stderr
    assert stderr.startswith("streamrff ") and ": error: " in stderr, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in stderr, stderr
    assert peak_kib < PEAK_RSS_LIMIT_KIB, f"peak RSS {peak_kib / 1024:.0f} MiB"


def _moment_sketch(tmp_path: Path, name: str = "s.sketch") -> Path:
    path = tmp_path / name
    srf.sketch_array(ROWS, srf.RFF(n_features=8, bandwidth=1.0, seed=1), moments=True).save(path)
    return path


def _sha256_of_zeros(n_bytes: int) -> str:
    """The checksum streamrff stores for an all-zero float64 array of ``n_bytes`` bytes (computed in blocks)."""
    digest, block = hashlib.sha256(), bytes(2**24)
    for start in range(0, n_bytes, len(block)):
        digest.update(block[: min(len(block), n_bytes - start)])
    return digest.hexdigest()


def _write_json(path: Path, document: dict) -> None:
    path.write_text(json.dumps(document))


# -- a consistent but huge declared moment --------------------------------------------------------------


def _consistent_huge_moment(tmp_path: Path, width: int = 2**14) -> Path:
    """The probe's 24 KB sketch: spec, shapes, chunk grids, checksums, fingerprint and digest all declare a
    ``width``-feature moment, and every chunk is deleted (zarr would read zeros)."""
    directory = _moment_sketch(tmp_path, "huge.sketch")
    group = json.loads((directory / "zarr.json").read_text())
    attributes = group["attributes"]
    attributes["map"]["n_features"] = width
    rebuilt = srf.RFF(n_features=width, bandwidth=1.0, seed=1).fit(ROWS)
    attributes["fingerprint"] = rebuilt.fingerprint
    for name, shape, chunks in (("feature_sum", [width], [width]), ("moment", [width, width], [256, width])):
        metadata = json.loads((directory / name / "zarr.json").read_text())
        metadata["shape"] = shape
        metadata["chunk_grid"]["configuration"]["chunk_shape"] = chunks
        _write_json(directory / name / "zarr.json", metadata)
        shutil.rmtree(directory / name / "c")
        attributes["checksums"][name] = _sha256_of_zeros(8 * int(np.prod(shape)))
    attributes.update(count=0, squared_norm_sum=0.0)
    attributes["attributes_digest"] = _attributes_digest(attributes)
    _write_json(directory / "zarr.json", group)
    return directory


def test_info_refuses_a_consistent_huge_moment_naming_its_missing_chunk_before_allocating_it(tmp_path: Path) -> None:
    # Issue 38: refused after 21 s at 2.5 GiB (the memory check, then the checksum of 2 GiB of zeros);
    # each chunk's presence is now checked before the memory check and before any read.
    directory = _consistent_huge_moment(tmp_path)
    stored = sum(file.stat().st_size for file in directory.rglob("*") if file.is_file())
    assert stored < 32 * 1024  # a few kB declaring 2 GiB
    returncode, stderr, peak_kib = run_cli_measured(tmp_path, "info", str(directory), headroom=2**28)
    assert_one_line_refusal(returncode, stderr, peak_kib, "is missing", "restore the file")
    assert re.search(r"huge\.sketch: array '(moment' chunk c/0/0|feature_sum' chunk c/0) is missing", stderr), stderr
    with pytest.raises(srf.SketchFormatError, match=r"chunk c/0(/0)? is missing"):
        srf.load(directory)


# -- a zip entry that inflates far beyond its chunk ---------------------------------------------------------


def test_info_refuses_a_zip_whose_chunk_entry_inflates_to_a_gibibyte_without_inflating_it(tmp_path: Path) -> None:
    directory = _moment_sketch(tmp_path)
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as packed:
        for file in sorted(directory.rglob("*")):
            name = file.relative_to(directory).as_posix()
            if not file.is_file():
                continue
            if name != "moment/c/0/0":
                packed.write(file, name)
                continue
            with packed.open(name, "w", force_zip64=True) as entry:  # the real chunk, then 1 GiB of zeros
                entry.write(file.read_bytes())
                zeros = bytes(2**24)
                for _ in range(64):
                    entry.write(zeros)
    assert archive.stat().st_size < 2 * 2**20
    returncode, stderr, peak_kib = run_cli_measured(tmp_path, "info", str(archive))
    assert_one_line_refusal(returncode, stderr, peak_kib, "chunk c/0/0 stores 1,073,742,", "encodes to at most")


def test_load_refuses_a_zstd_chunk_that_hides_its_decoded_size(tmp_path: Path) -> None:
    # A zstd frame without a content size would be inflated by a growing buffer: refused unread.
    directory = _moment_sketch(tmp_path)
    chunk = directory / "moment" / "c" / "0" / "0"
    frame = chunk.read_bytes()
    descriptor = frame[4]
    assert descriptor & 0x20 and not descriptor & 0x03  # save_sketch's: single segment, size stated, no dictionary
    size_field = {0: 1, 1: 2, 2: 4, 3: 8}[descriptor >> 6]
    # RFC 8878 sec. 3.1.1.1: no size flag, not single segment, so a window descriptor (1 KiB) instead of the size
    chunk.write_bytes(frame[:4] + bytes([descriptor & 0x07, 0x00]) + frame[5 + size_field :])
    with pytest.raises(srf.SketchFormatError, match="chunk c/0/0 does not state its decoded size"):
        srf.load(directory)


# -- links and special files inside a sketch --------------------------------------------------------------


@pytest.mark.parametrize("special", ["symlink-to-dev-zero", "fifo", "symlinked-directory"])
def test_info_refuses_links_and_special_files_inside_a_sketch_at_once(tmp_path: Path, special: str) -> None:
    directory = _moment_sketch(tmp_path)
    chunk = directory / "moment" / "c" / "0" / "0"
    if special == "symlink-to-dev-zero":
        chunk.unlink()
        chunk.symlink_to("/dev/zero")
        fragments = ["moment/c/0/0: a symbolic link inside the sketch"]
    elif special == "fifo":
        chunk.unlink()
        os.mkfifo(chunk)
        fragments = ["moment/c/0/0 is a FIFO (named pipe), not a regular file"]
    else:  # the moment's directory moved elsewhere and linked back: no link inside is followed
        elsewhere = tmp_path / "elsewhere"
        shutil.move(directory / "moment", elsewhere)
        (directory / "moment").symlink_to(elsewhere, target_is_directory=True)
        fragments = ["a symbolic link inside the sketch"]
    returncode, stderr, peak_kib = run_cli_measured(tmp_path, "info", str(directory))
    assert_one_line_refusal(returncode, stderr, peak_kib, *fragments)


def test_load_refuses_a_group_document_above_the_metadata_cap(tmp_path: Path) -> None:
    from streamrff._files.bounded_read import MAX_JSON_BYTES

    directory = _moment_sketch(tmp_path)
    document = (directory / "zarr.json").read_text()
    (directory / "zarr.json").write_text(document[:-1] + " " * MAX_JSON_BYTES + "}")
    with pytest.raises(srf.SketchFormatError, match=f"holds {MAX_JSON_BYTES + len(document):,} bytes"):
        srf.load(directory)


def test_a_sketch_directory_that_is_itself_a_link_still_loads(tmp_path: Path) -> None:
    # The path the user names may be a link; only links inside the sketch are refused.
    directory = _moment_sketch(tmp_path)
    link = tmp_path / "link.sketch"
    link.symlink_to(directory, target_is_directory=True)
    expected = srf.sketch_array(ROWS, srf.RFF(n_features=8, bandwidth=1.0, seed=1), moments=True)
    loaded = srf.load(link)
    np.testing.assert_allclose(loaded.moment, expected.moment, rtol=0, atol=0)
    exact = srf.RFF(n_features=8, bandwidth=1.0, seed=1).fit(ROWS).transform(ROWS).astype(np.float64).sum(axis=0)
    # Float32 rounding of the features, relative to the vector: one column's sum nearly cancels.
    assert np.linalg.norm(loaded.feature_sum - exact) < 1e-6 * np.linalg.norm(exact)


# -- devices given as the file --------------------------------------------------------------------------


def test_info_and_map_on_dev_zero_are_one_line_errors(tmp_path: Path, tmp_zarr) -> None:
    returncode, stderr, peak_kib = run_cli_measured(tmp_path, "info", "/dev/zero")
    assert_one_line_refusal(returncode, stderr, peak_kib, "/dev/zero is a character device, not a regular file")
    source = tmp_zarr(ROWS.astype(np.float32), chunk_rows=17)
    output = tmp_path / "out.sketch"
    returncode, stderr, peak_kib = run_cli_measured(tmp_path, "sketch", source, "--map", "/dev/zero", "-o", str(output))
    assert_one_line_refusal(returncode, stderr, peak_kib, "/dev/zero is a character device, not a regular file")
    assert not output.exists()


def test_load_map_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "map.json"
    os.mkfifo(fifo)
    with pytest.raises(srf.MapFormatError, match="is a FIFO \\(named pipe\\), not a regular file"):
        srf.load_map(fifo)


# -- bounded parsing of map files ----------------------------------------------------------------------


def _kjl_map_document(tmp_path: Path) -> dict:
    path = tmp_path / "kjl.json"
    srf.save_map(srf.KJL(n_landmarks=6, n_components=3, bandwidth=1.0, seed=4).fit(ROWS), path)
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("shape", "data", "fragment"),
    [
        ([10**30, 2], "", "declares shape [1000000000000000000000000000000, 2]; a map array holds at most"),
        ([2**32, 2**32], "", "declares shape [4294967296, 4294967296]; a map array holds at most"),
        ([6, 3], "AAAA", "(144 bytes) but holds 3 bytes"),
        ([6, 3.0], "", "has shape [6, 3.0]; expected a list of at most 2 sizes"),
    ],
    ids=["1e30-rows", "2**32-squared-empty", "short-data", "float-size"],
)
def test_info_refuses_map_files_with_impossible_landmark_shapes(
    tmp_path: Path, shape: list, data: str, fragment: str
) -> None:
    document = _kjl_map_document(tmp_path)
    document["arrays"]["landmarks"].update(shape=shape, data=data)
    path = tmp_path / "crafted.json"
    _write_json(path, document)
    with pytest.raises(srf.MapFormatError) as raised:
        srf.load_map(path)
    assert fragment in str(raised.value)
    returncode, stderr, peak_kib = run_cli_measured(tmp_path, "info", str(path))
    assert_one_line_refusal(returncode, stderr, peak_kib, fragment)


@pytest.mark.parametrize(
    "text",
    ['{"format": 1' + "0" * 5000 + "}", "[" * 100_000 + "]" * 100_000, '{"format": "streamrff.map", "version": 1e999}'],
    ids=["5000-digit-integer", "deep-nesting", "infinite-version"],
)
def test_load_map_refuses_json_numbers_and_nesting_out_of_range(tmp_path: Path, text: str) -> None:
    path = tmp_path / "crafted.json"
    path.write_text(text)
    with pytest.raises(srf.MapFormatError, match=str(path)):
        srf.load_map(path)
