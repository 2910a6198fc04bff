"""An S3 endpoint that accepts connections and never answers (issue 49): seconds to the one-line failure.

A socket server on 127.0.0.1 accepts every connection, reads what it is sent and never answers. ``watch``,
``sketch`` and ``test`` are pointed at it with the default deadlines (no ``config_kwargs`` of the user's);
the issue's target is one line and a non-zero status within 10 s. Each figure includes the command's
start-up (importing dask and the engine), measured as the time to a refusal of a missing local file.

Run: ``python benchmarks/bench_silent_endpoint.py``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import zarr

TARGET_SECONDS = 10.0


class SilentEndpoint:
    """Accepts connections on 127.0.0.1, reads the requests, never answers."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self._held.append(client)
            threading.Thread(target=self._drain, args=(client,), daemon=True).start()

    @staticmethod
    def _drain(client: socket.socket) -> None:
        while True:
            try:
                if not client.recv(65536):
                    return
            except OSError:
                return

    def close(self) -> None:
        self._server.close()
        for client in self._held:
            client.close()


def run(command: list[str]) -> tuple[float, int, list[str]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "streamrff.cli", *command], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("streamrff watch: watching ")]
    return time.perf_counter() - started, done.returncode, lines


def main() -> None:
    endpoint = SilentEndpoint()
    options = json.dumps({"key": "k", "secret": "s", "endpoint_url": endpoint.url})
    url = "s3://bucket/live.zarr"
    with tempfile.TemporaryDirectory() as folder:
        reference = str(Path(folder) / "ref.zarr")
        stored = zarr.create_array(reference, shape=(400, 3), chunks=(100, 3), dtype="float32")
        stored[...] = np.random.default_rng(0).normal(size=(400, 3)).astype("float32")
        missing = str(Path(folder) / "missing.zarr")
        watch = ["--reference", reference, "--window", "20", "--ert", "100", "--features", "16"]
        cases = {
            "watch": ["watch", url, *watch, "--storage-options", options],
            "sketch": ["sketch", url, "--features", "8", "-o", str(Path(folder) / "s.sketch"),
                       "--storage-options", options],
            "test": ["test", url, reference, "--features", "8", "--permutations", "10", "--storage-options", options],
        }  # fmt: skip
        baseline, _, _ = run(["sketch", missing, "--features", "8", "-o", str(Path(folder) / "m.sketch")])
        print(f"start-up (sketch of a missing local file): {baseline:.1f} s")
        for name, command in cases.items():
            seconds, status, lines = run(command)
            verdict = "ok" if status != 0 and len(lines) == 1 and seconds <= TARGET_SECONDS else "MISSED"
            print(f"{name:7s} {seconds:5.1f} s ({seconds / TARGET_SECONDS:.2f}x the 10 s target) status {status} "
                  f"lines {len(lines)} {verdict}: {lines[-1] if lines else ''}")  # fmt: skip
    endpoint.close()


if __name__ == "__main__":
    main()
