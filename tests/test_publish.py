"""Outputs on a full, read-only or forbidden file system: one OutputError line, early, no staging left.

Real file systems: a 64 KiB tmpfs (ENOSPC), a read-only tmpfs (EROFS), both mounted by the
test as root (skipped, with the reason, where mounting is refused), and Linux's ``/sys``,
which refuses new files even to root (EACCES).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff._files.publish import as_output_error, check_output_location, output_errors
from streamrff.cli import main

ROWS = np.random.default_rng(3).normal(size=(64, 3)).astype(np.float32)
FORBIDDEN = Path("/sys")  # sysfs: no new files, even for root


@pytest.fixture
def mount_tmpfs(tmp_path):
    """``mount_tmpfs(name, size, read_only)`` -> a fresh tmpfs folder, unmounted after the test."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "64k", read_only: bool = False) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no mount command here: the ENOSPC/EROFS cases need a tmpfs")
        options = f"size={size}" + (",ro" if read_only else "")
        completed = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True
        )
        if completed.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({completed.stderr.strip()}): the ENOSPC/EROFS cases need one")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture(scope="module")
def forbidden_folder() -> Path:
    try:
        os.close(os.open(FORBIDDEN / "streamrff-probe", os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM):
            return FORBIDDEN
        pytest.skip(f"{FORBIDDEN} fails with {errno.errorcode.get(error.errno)} here, not EACCES")
    os.unlink(FORBIDDEN / "streamrff-probe")
    pytest.skip(f"{FORBIDDEN} accepts new files here")


def fill(folder: Path, leave_bytes: int) -> None:
    """Fill ``folder``'s file system until about ``leave_bytes`` are free (a real file of zeros)."""
    status = os.statvfs(folder)
    free = status.f_bavail * status.f_frsize
    (folder / "filler").write_bytes(b"\0" * (free - leave_bytes))


def test_output_errors_maps_a_real_enospc_and_passes_other_errors(mount_tmpfs):
    folder = mount_tmpfs("full")
    with pytest.raises(srf.OutputError) as caught:
        with output_errors(folder / "big"):
            (folder / "big").write_bytes(b"\0" * 128 * 1024)  # a real write that runs out of room
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)
    assert str(caught.value) == f"Cannot write {folder / 'big'}: " + (
        "the file system is full. Free space there or choose an output on another file system."
    )
    with pytest.raises(FileNotFoundError):  # not about room or rights: unchanged
        with output_errors(folder / "missing" / "x"):
            (folder / "missing" / "x").write_bytes(b"")
    assert as_output_error(OSError(errno.EIO, "I/O error"), "x") is None


def test_check_output_location_refuses_read_only_forbidden_and_too_small(mount_tmpfs, forbidden_folder):
    read_only = mount_tmpfs("ro", read_only=True)
    small = mount_tmpfs("small")
    codes = {}
    for name, target, required in [
        ("read-only", read_only / "out.sketch", 0),
        ("forbidden", forbidden_folder / "out.sketch", 0),
        ("too small", small / "out.sketch", 65 * 1024),
    ]:
        with pytest.raises(srf.OutputError) as caught:
            check_output_location(target, required)
        codes[name] = caught.value.errno
        assert "\n" not in str(caught.value) and str(target) in str(caught.value)
    assert codes == {"read-only": errno.EROFS, "forbidden": errno.EACCES, "too small": errno.ENOSPC}
    check_output_location(small / "out.sketch", 32 * 1024)  # fits: no error, no file left
    assert list(small.iterdir()) == []


def test_sketch_save_full_during_the_write_removes_its_staging(mount_tmpfs):
    # The declared size (16 KiB of sums) fits the free space, so the early check passes;
    # the metadata files then fill the file system during the write.
    folder = mount_tmpfs("tight")
    sketch = srf.sketch_array(ROWS, srf.RFF(n_features=2048, seed=0))
    fill(folder, leave_bytes=5 * 4096)
    with pytest.raises(srf.OutputError) as caught:
        sketch.save(folder / "s.sketch")
    assert caught.value.errno == errno.ENOSPC
    assert sorted(path.name for path in folder.iterdir()) == ["filler"]  # no staging, no output
    (folder / "filler").unlink()
    sketch.save(folder / "s.sketch")  # with room it writes, and the file is whole
    assert srf.load(folder / "s.sketch") == sketch


@pytest.mark.parametrize("suffix", ["", ".zip"])
def test_sketch_and_map_save_on_a_read_only_file_system(mount_tmpfs, suffix):
    folder = mount_tmpfs("ro", read_only=True)
    sketch = srf.sketch_array(ROWS, srf.RFF(n_features=16, seed=0))
    with pytest.raises(srf.OutputError) as caught:
        sketch.save(folder / f"s.sketch{suffix}")
    assert caught.value.errno == errno.EROFS
    with pytest.raises(srf.OutputError) as caught:
        srf.save_map(sketch.feature_map, folder / "map.json")
    assert caught.value.errno == errno.EROFS


def test_sketch_save_refuses_a_file_system_without_room_before_writing(mount_tmpfs):
    folder = mount_tmpfs("small")
    sketch = srf.sketch_array(ROWS, srf.RFF(n_features=256, seed=0), moments=True)  # 514 KiB: 8 * (256 + 256**2) bytes
    with pytest.raises(srf.OutputError) as caught:
        sketch.save(folder / "s.sketch")
    assert caught.value.errno == errno.ENOSPC
    assert f"needs about {8 * (256 + 256**2) / 1024:.3g} KiB" in str(caught.value)
    assert list(folder.iterdir()) == []


# -- the command line: exit 1, one line, before the job -----------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "streamrff.cli", *args], capture_output=True, text=True, timeout=300, env=environment
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("inputs")
    source = folder / "x.zarr"
    stored = zarr.create_array(store=str(source), shape=ROWS.shape, chunks=(16, 3), dtype=ROWS.dtype, zarr_format=3)
    stored[...] = ROWS
    sketches = []
    for half, rows in enumerate((ROWS[:32], ROWS[32:])):
        path = folder / f"half{half}.sketch"
        srf.sketch_array(rows, srf.RFF(n_features=16, seed=0)).save(path)
        sketches.append(str(path))
    return {"source": str(source), "a": sketches[0], "b": sketches[1]}


COMMANDS = {
    "sketch": lambda i, out: ["sketch", i["source"], "--features", "16", "-o", f"{out}/s.sketch"],
    "merge": lambda i, out: ["merge", i["a"], i["b"], "-o", f"{out}/m.sketch"],
    "map": lambda i, out: ["map", i["source"], "--features", "16", "-o", f"{out}/map.json"],
    "kpca": lambda i, out: ["kpca", i["source"], "--components", "2", "--features", "16", "-o", f"{out}/s.zarr"],
    "kmeans": lambda i, out: ["kmeans", i["source"], "--clusters", "2", "--features", "16", "-o", f"{out}/l.zarr"],
    "test --plot": lambda i, out: ["test", i["a"], i["b"], "--plot", f"{out}/null.png"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_output_on_a_read_only_file_system_is_one_line(mount_tmpfs, inputs, command, cli_main):
    folder = mount_tmpfs("ro", read_only=True)
    if command == "sketch":  # the console script, in a process of its own (nothing printed at its exit either)
        completed = run_cli(*COMMANDS[command](inputs, folder))
        code, err = completed.returncode, completed.stderr
    else:  # in-process (about 3 s less each): the same `main`
        code, _, err = cli_main(*COMMANDS[command](inputs, folder))
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    name = command.split()[0]
    assert lines[0].startswith(f"streamrff {name}: error: Cannot write {folder}/")
    assert lines[0].endswith("the file system is read-only. Choose an output on a writable file system.")
    assert list(folder.iterdir()) == []


def test_cli_sketch_into_a_forbidden_folder_is_one_line(inputs, forbidden_folder):
    completed = run_cli("sketch", inputs["source"], "--features", "16", "-o", f"{forbidden_folder}/s.sketch")
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines() == [
        f"streamrff sketch: error: Cannot write {forbidden_folder}/s.sketch: permission denied. "
        "Choose an output in a folder you may write to."
    ]


class ChunkReads:
    """Counts the chunk reads of one local zarr source (a spy on the real store, which still reads)."""

    def __init__(self, monkeypatch, source: str) -> None:
        self.keys: list[str] = []
        real_get = zarr.storage.LocalStore.get
        root = Path(source).resolve()

        async def get(store, key, *args, **kwargs):
            if Path(store.root).resolve() == root and key.startswith("c/"):  # chunk keys of a zarr v3 array
                self.keys.append(key)
            return await real_get(store, key, *args, **kwargs)

        monkeypatch.setattr(zarr.storage.LocalStore, "get", get)


def test_cli_sketch_refuses_a_full_output_before_reading_a_chunk(mount_tmpfs, inputs, monkeypatch, capsys):
    folder = mount_tmpfs("small")
    reads = ChunkReads(monkeypatch, inputs["source"])
    # 4096 features with moments declare 128 MiB; the file system has 64 KiB.
    code = main(["sketch", inputs["source"], "--features", "4096", "--moments", "-o", str(folder / "s.sketch")])
    error = capsys.readouterr().err
    assert code == 1 and reads.keys == []
    assert error.startswith(f"streamrff sketch: error: Cannot write {folder}/s.sketch: it needs about 128 MiB but")
    assert error.count("\n") == 1 and list(folder.iterdir()) == []
    # The spy does count: the same job into a roomy folder reads every chunk.
    assert main(["sketch", inputs["source"], "--features", "16", "-o", str(folder / "s.sketch")]) == 0
    assert set(reads.keys) == {"c/0/0", "c/1/0", "c/2/0", "c/3/0"}
