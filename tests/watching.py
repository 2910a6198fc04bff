"""What the tests of ``streamrff watch`` as a process share: the environment of its processes, a watcher
started as a service starts it, its output read line by line to a deadline, and a saved monitor compared
with a reference monitor fed the same rows in memory."""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import IO, Any

import numpy as np

from streamrff.drift import load_monitor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The environment of every process a test starts: this checkout's streamrff first.
ENVIRONMENT = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

#: Bytes read from a stream but not yet returned as a line, per stream (kept across calls).
_pending: weakref.WeakKeyDictionary[IO[Any], bytes] = weakref.WeakKeyDictionary()


def watch_process(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """``streamrff watch ARGV`` in a process of its own, its stdout and stderr piped (text)."""
    return subprocess.Popen(
        [sys.executable, "-m", "streamrff.cli", "watch", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENVIRONMENT, **kwargs,
    )  # fmt: skip


def read_lines(process: subprocess.Popen, accept, seconds: float, stream: IO[Any] | None = None) -> tuple[list, bool]:
    """Lines of ``stream`` (default: stdout) up to the first that ``accept`` takes (True), or every line read
    before the deadline or the process's end (False).

    Read from the pipe's descriptor, not through the text wrapper: a line the process printed is never left
    waiting in a reader's buffer while the selector waits for more.
    """
    stream = process.stdout if stream is None else stream
    lines: list[str] = []
    pending = _pending.get(stream, b"")
    deadline = time.monotonic() + seconds
    selector = selectors.DefaultSelector()
    selector.register(stream.fileno(), selectors.EVENT_READ)
    try:
        while True:
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                lines.append(line.decode() + "\n")
                if accept(lines[-1]):
                    return lines, True
            if time.monotonic() >= deadline:
                return lines, False
            if not selector.select(timeout=0.2):
                if process.poll() is not None and not selector.select(timeout=0):
                    return lines, False
                continue
            data = os.read(stream.fileno(), 65536)
            if not data:
                return lines, False
            pending += data
    finally:
        _pending[stream] = pending
        selector.close()


def read_until(process: subprocess.Popen, accept, seconds: float = 180, stream: IO[Any] | None = None) -> list[str]:
    """:func:`read_lines` that fails the test, with the process's error, when no line is accepted."""
    lines, accepted = read_lines(process, accept, seconds, stream)
    if accepted:
        return lines
    ended = "" if process.poll() is None else f" (the process ended with status {process.returncode})"
    if ended and stream is not process.stderr:  # its error says why
        error, _ = read_lines(process, lambda line: False, 1.0, process.stderr)
        ended += f": {''.join(error).strip()}"
    raise AssertionError(f"no accepted line before the deadline or the end{ended}; got {lines[-3:]}")


def read_line(process: subprocess.Popen, seconds: float = 120) -> str:
    """The next stdout line of ``process``, or "" if it ends or the deadline passes first."""
    lines, _ = read_lines(process, lambda line: True, seconds)
    return lines[0] if lines else ""


def expected_state(fitted, rows: np.ndarray, folder: Path | None = None):
    """The reference: a copy of the fitted monitor (object or saved folder) fed every row at once, in memory."""
    copy = str(Path(folder or tempfile.mkdtemp()) / "expected-copy")
    shutil.rmtree(copy, ignore_errors=True)
    if isinstance(fitted, (str, os.PathLike)):
        shutil.copytree(fitted, copy)
    else:
        fitted.save(copy)
    monitor = load_monitor(copy)
    monitor.update(rows)
    return monitor


def assert_same_state(saved, expected, rtol: float = 1e-9, probe: np.ndarray | None = None) -> None:
    """The saved monitor is the reference: counts, alarm, window, thresholds, and the next statistic of ``probe``
    (default: 7 seeded rows of 3 columns) within ``rtol``."""
    assert saved.n_rows_seen_ == expected.n_rows_seen_
    assert saved.run_length_ == expected.run_length_ and saved.drift_at_ == expected.drift_at_
    if hasattr(expected, "thresholds_"):
        np.testing.assert_array_equal(saved.thresholds_, expected.thresholds_)
    np.testing.assert_allclose(saved.window_sum_, expected.window_sum_, rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(saved.window_squared_norm_sum_, expected.window_squared_norm_sum_, rtol=rtol)
    np.testing.assert_array_equal(saved.window_features_, expected.window_features_)
    if probe is None:
        probe = np.random.default_rng(99).normal(size=(7, 3)).astype(np.float32)
    np.testing.assert_allclose(saved.update(probe).statistic, expected.update(probe).statistic, rtol=rtol)


def communicate(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``process.communicate(timeout)`` with the bytes :func:`read_lines` had read but not returned put first."""
    out, err = process.communicate(timeout=timeout)
    return (
        _pending.pop(process.stdout, b"").decode() + (out or ""),
        _pending.pop(process.stderr, b"").decode() + (err or ""),
    )


def remaining_lines(process: subprocess.Popen) -> list[str]:
    """Every stdout line not yet returned, to the end of the stream (a process that ended, or was killed)."""
    text = _pending.pop(process.stdout, b"").decode() + process.stdout.read()
    return text.splitlines(keepends=True)
