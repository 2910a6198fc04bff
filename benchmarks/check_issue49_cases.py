"""Issue 49's example cases, rerun: each must end in one line, a documented non-zero status, <= 10 s, <= 500 MB.

Each case runs a fresh ``streamrff`` process (as an operator would) on small local files; the peak
resident memory is the child's ``ru_maxrss``. A case that holds prints ``ok``; one that does not,
``MISSED`` and what it printed. Run: ``python benchmarks/check_issue49_cases.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import zarr

TARGET_SECONDS, TARGET_MB = 10.0, 500.0
START_LINE = "streamrff watch: watching "


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, list[str]]:
    measure = (
        "import resource, subprocess, sys, time\n"
        "started = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)\n"
        "print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,"
        " done.returncode)\n"
        "sys.stderr.write(done.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, sys.executable, "-m", "streamrff.cli", *argv],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip
    seconds, peak, status = done.stdout.split()
    lines = [line for line in done.stderr.strip().splitlines() if line and not line.startswith(START_LINE)]
    if lines and lines[0].startswith("usage: "):  # argparse's usage before its error line: documented (status 2)
        lines = [line for line in lines if line.startswith("streamrff ")]
    return float(seconds), float(peak), int(status), lines


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    data = str(folder / "x.zarr")
    zarr.create_array(data, shape=(400, 3), chunks=(100, 3), dtype="float32")[...] = rng.normal(size=(400, 3))
    wide = str(folder / "wide.zarr")
    zarr.create_array(wide, shape=(100, 2**40), chunks=(100, 2**20), dtype="float32")
    key = folder / "key"
    key.write_bytes(b"a test key of enough bytes: 0123456789")
    key.chmod(0o600)
    env = {"STREAMRFF_SIGNING_KEY": "a test key of enough bytes: 0123456789"}
    a, b = str(folder / "a.sketch"), str(folder / "b.sketch")
    for path in (a, b):
        subprocess.run([sys.executable, "-m", "streamrff.cli", "sketch", data, "-o", path, "--features", "16",
                        "--bandwidth", "1", "--seed", "0", "--moments"], env={**os.environ, **env}, check=True,
                       capture_output=True)  # fmt: skip
    # A signed sketch whose sums were edited (digest and checksum recomputed by the sender): the key refuses it.
    tampered = str(folder / "t.sketch")
    subprocess.run(["cp", "-r", b, tampered], check=True)
    sums = zarr.open_array(f"{tampered}/feature_sum", mode="r+")
    sums[...] = np.asarray(sums[...]) * 1.5
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    state = folder / "state"
    state.mkdir()
    (state / "zarr.json").write_text("{}")
    model = str(folder / "m.model")
    subprocess.run([sys.executable, "-m", "streamrff.cli", "ridge", data, "--target", data, "-o", model,
                    "--features", "16", "--bandwidth", "1"], check=False, capture_output=True)  # fmt: skip
    watch = ["watch", data, "--reference", data, "--window", "20"]
    cases: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "sketch -o its input --overwrite": (["sketch", data, "-o", data, "--overwrite", "--features", "8"], None),
        "predict -o its input --overwrite": (["predict", model, data, "-o", data, "--overwrite"], None),
        "watch --save-monitor its reference": (watch + ["--ert", "100", "--save-monitor", data, "--overwrite"], None),
        "test A B, B tampered, key set": (["test", a, tampered], env),
        "explain A B, B tampered, key set": (["explain", a, tampered, "--source", data], env),
        "ridge A, A tampered, key set": (["ridge", tampered, "-o", str(folder / "r.model")], env),
        "watch --ert 1e308": (watch + ["--ert", "1e308"], None),
        "watch --plot out.txt": (watch + ["--ert", "100", "--plot", str(folder / "out.txt")], None),
        "--storage-options @/dev/zero": (["info", a, "--storage-options", "@/dev/zero"], None),
        "--storage-options @FIFO": (["info", a, "--storage-options", f"@{fifo}"], None),
        "2^40 columns in chunks of 2^20": (["sketch", wide, "--features", "8", "-o", str(folder / "w.sketch")], None),
        "state zarr.json is {}": (["watch", data, "--reference", str(state)], None),
        "baseline: an honest sketch": (["sketch", data, "-o", str(folder / "h.sketch"), "--features", "8"], None),
    }
    print(f"machine load: {os.getloadavg()[0]:.2f} (1 min)")
    for name, (argv, extra) in cases.items():
        seconds, peak, status, lines = run(argv, extra)
        baseline = name.startswith("baseline")  # the start-up every case pays: importing dask, numba, zarr
        held = (status != 0) != baseline and len(lines) == (0 if baseline else 1)
        held = held and "Traceback" not in "\n".join(lines) and seconds <= TARGET_SECONDS and peak <= TARGET_MB
        print(f"{'ok    ' if held else 'MISSED'} {name:38s} status {status} {seconds:5.1f} s {peak:6.0f} MB  "
              f"{lines[-1][:150] if lines else ''}")  # fmt: skip
    print(json.dumps({"folder": str(folder)}))


if __name__ == "__main__":
    main()
