"""#49 item 6: every fault ends in one line and a documented status, fast and bounded (real subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "streamrff.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


#: The log line ``watch`` writes to stderr once it starts (where it starts, the state, its pid): not a fault.
START_LINE = "streamrff watch: watching "


def errors_of(stderr: str) -> list[str]:
    """The lines of ``stderr`` past ``watch``'s start line."""
    return [line for line in stderr.strip().splitlines() if not line.startswith(START_LINE)]


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = errors_of(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("kind", ["device", "fifo", "folder", "oversized"])
def test_option_file_is_read_only_if_regular_and_small(tmp_path: Path, kind: str, cli_main) -> None:
    if kind == "device":
        path = "/dev/zero"
    elif kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)  # nobody writes: a blocking open would hang
    elif kind == "folder":
        path = str(tmp_path)
    else:
        path = str(tmp_path / "big.json")
        Path(path).write_text(" " * (2 << 20))
    started = time.monotonic()
    result = cli_main("info", str(tmp_path / "x.sketch"), "--storage-options", "@" + path)
    assert time.monotonic() - started < 10
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    line = lines[0]
    assert f"--storage-options file {path}" in line
    assert ("larger than" if kind == "oversized" else "not a regular file") in line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--ert", "1e308"], "argument --ert: expected a number of rows > 1 and <= 1e12"),
        (["--ert", "1000", "--poll", "1e308", "--follow"], "argument --poll: expected a number from 0 to 1e+07"),
        (["--ert", "1000", "--plot", "out.txt"], "unsupported figure format 'txt'"),
        (["--ert", "1000", "--plot", "nodir/out.png"], "does not exist"),
    ],
)
def test_watch_refuses_extreme_options_and_bad_plot_paths_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_main, extra: list[str], expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "never-read.zarr")  # refused before the source is opened
    result = cli_main("watch", missing, "--reference", missing, "--window", "50", *extra)
    assert result.code == 2
    last = result.err.strip().splitlines()[-1]
    assert "Traceback" not in result.err and expected in last, result.err
    assert not (tmp_path / "out.txt").exists()


def test_a_source_declaring_too_many_column_chunks_is_refused_fast(tmp_path: Path, cli_main) -> None:
    import zarr

    path = str(tmp_path / "wide.zarr")  # metadata only: 2^40 columns in chunks of 2^20, nothing written
    zarr.create_array(path, shape=(100, 2**40), chunks=(100, 2**20), dtype="float32")
    started = time.monotonic()
    result = cli_main("sketch", path, "--features", "8", "-o", str(tmp_path / "s.sketch"))
    assert time.monotonic() - started < 10
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    assert "1,048,576 chunks of 1,048,576 columns" in lines[0]
    assert not (tmp_path / "s.sketch").exists()


def test_watch_plot_keeps_a_bounded_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_zarr, cli_main
) -> None:
    import numpy as np

    from streamrff.cli import watch

    values = [np.arange(0, 5.0), np.arange(5, 12.0), np.arange(12, 15.0)]
    thresholds = [v + 100 for v in values]
    assert watch.keep_recent(values, thresholds, 6) == 9
    np.testing.assert_array_equal(np.concatenate(values), np.arange(9, 15.0))
    np.testing.assert_array_equal(np.concatenate(thresholds), np.arange(109, 115.0))
    monkeypatch.setattr(watch, "PLOT_HISTORY_ROWS", 120)
    data = tmp_zarr(np.random.default_rng(0).normal(size=(400, 3)).astype("float32"), 100)
    plot = tmp_path / "drift.png"
    result = cli_main("watch", data, "--reference", data, "--window", "20", "--ert", "1000", "--plot", str(plot))
    assert result.code in (0, 1) and "Traceback" not in result.err, result.err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- extreme numeric options: refused by the parser (status 2, one line) before anything is read ---------------


@pytest.mark.parametrize(
    ("command", "option", "value", "expected"),
    [
        ("watch", "--bandwidth", "1e308", "from 1e-30 to 1e+30"),
        ("watch", "--bandwidth", "1e-308", "from 1e-30 to 1e+30"),
        ("watch", "--seed", "-1", "an integer from 0 to 2^63 - 1"),
        ("watch", "--max-rows", "99999999999999999999", "a positive integer up to 2^62"),
        ("sketch", "--bandwidth", "inf", "from 1e-30 to 1e+30"),
        ("sketch", "--column-bandwidth", "1e308", "from 1e-30 to 1e+30"),
        ("sketch", "--chunk-rows", "99999999999999999999", "a positive integer up to 2^62"),
        ("sketch", "--seed", "99999999999999999999", "an integer from 0 to 2^63 - 1"),
        ("test", "--bandwidths", "1,1e308", "from 1e-30 to 1e+30"),
        ("test", "--bandwidth", "nan", "from 1e-30 to 1e+30"),
        ("test", "--permutations", "99999999999999999999", "a positive integer up to 2^62"),
    ],
)
def test_extreme_numeric_options_are_refused_in_one_line(
    tmp_path: Path, cli_main, command: str, option: str, value: str, expected: str
) -> None:
    missing = str(tmp_path / "never-read.zarr")
    head = {
        "watch": ["watch", missing, "--reference", missing, "--window", "20", "--ert", "100"],
        "sketch": ["sketch", missing, "-o", str(tmp_path / "s.sketch")],
        "test": ["test", missing, missing],
    }[command]
    result = cli_main(*head, option, value)
    assert result.code == 2
    assert "Traceback" not in result.err
    last = result.err.strip().splitlines()[-1]
    assert f"argument {option}: expected " in last and expected in last and repr(value) in last, result.err


def test_every_numeric_option_of_watch_sketch_and_test_refuses_non_finite_and_out_of_range_values() -> None:
    """The sweep of issue 49: inf, nan, 1e308, -1, 0 and 2^70 for every typed option of the three commands."""
    import argparse

    from streamrff.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    # What each option may take, by an independent reading of its meaning (None: refused).
    allowed_zero = {"--poll", "--settle", "--missing-chunk-timeout", "--save-interval", "--seed", "--from-row",
                    "--metrics-port"}  # port 0: a free port the system picks (its line names it)
    for name in ("watch", "sketch", "test"):
        for action in commands[name]._actions:
            if not action.option_strings or action.type is None or action.option_strings[-1] in (
                "--classes", "--select", "--categorical"  # lists of labels or column names, not numbers
            ):
                continue
            option = action.option_strings[-1]
            for text in ("inf", "-inf", "nan", "1e308", "-1", "0", str(2**70)):
                try:
                    value = action.type(text)
                except (argparse.ArgumentTypeError, ValueError):  # argparse makes a ValueError a usage error too
                    continue
                if option == "--from-row" and text == "-1":
                    continue  # refused after parsing, with the other usage problems (test above for watch)
                if option == "--from-row" and text == str(2**70):
                    continue  # past the end: refused with the source's row count
                if "bandwidth" in option and text == str(2**70):
                    continue  # 1.2e21: a kernel width within float32's reach (its frequencies are 1e-21)
                assert text == "0" and option in allowed_zero, f"{name} {option} {text} accepted as {value!r}"


# --- watch: state storage that fails, signals at any moment, store endpoints gone or silent ---------------------


def _write_array(path: Path | str, rows: int, seed: int) -> str:
    import numpy as np
    import zarr

    stored = zarr.create_array(str(path), shape=(rows, 3), chunks=(100, 3), dtype="float32", overwrite=True)
    stored[...] = np.random.default_rng(seed).normal(size=(rows, 3)).astype("float32")
    return str(path)


def _watch_command(source: str, reference: str, *extra: str) -> list[str]:
    new = ["--window", "20", "--ert", "100", "--streams", "10", "--features", "16"]
    return [sys.executable, "-m", "streamrff.cli", "watch", source, "--reference", reference, *new, *extra]


def _saved_next_row(state: Path) -> int:
    import json

    return json.loads((state / "zarr.json").read_text())["attributes"]["cursor"]["next_row"]


def test_watch_state_storage_full_ends_in_one_line_and_the_saved_state_resumes(tmp_path: Path, cli_main) -> None:
    import errno
    import resource
    import signal

    source, reference = _write_array(tmp_path / "live.zarr", 500, 0), _write_array(tmp_path / "ref.zarr", 400, 1)
    state = tmp_path / "monitor.zarr"
    first = cli_main(*_watch_command(source, reference, "--save-monitor", str(state), "--max-rows", "200")[3:])
    assert first.code == 0, first.err
    assert _saved_next_row(state) == 200
    kept = {path: path.read_bytes() for path in state.rglob("*") if path.is_file()}

    def full_disk() -> None:  # every file write past 1 KiB fails with EFBIG, as on a full disk (ENOSPC)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    resumed = [sys.executable, "-m", "streamrff.cli", "watch", source, "--reference", str(state)]
    resumed += ["--save-monitor", str(state), "--overwrite", "--save-interval", "0"]
    failed = subprocess.run(resumed, capture_output=True, text=True, timeout=120, check=False, preexec_fn=full_disk)
    assert failed.returncode == 1  # documented: 1 error, the state storage full or read-only
    line = one_line(failed)
    assert f"cannot save the monitor state to {state}" in line and errno.errorcode[errno.EFBIG] in line
    assert f"the state in {state} is as it was before this session" in line
    assert f"wrote {state}" not in failed.stdout
    assert {path: path.read_bytes() for path in state.rglob("*") if path.is_file()} == kept  # intact
    assert not list(tmp_path.glob(".monitor.zarr.partial-*"))  # no staging left behind

    again = cli_main(*resumed[3:])
    assert again.code == 0, again.err
    assert "rows 200-299" in again.out.splitlines()[0]  # resumed at the saved cursor
    assert _saved_next_row(state) == 500


def _prepare_state_folder(folder: Path, fault: str) -> bool:
    """A folder for the state that can be made full (a 2 MiB tmpfs) or read-only (``chattr +i``) later."""
    folder.mkdir()
    if fault == "full":
        command = ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)]
    else:
        command = ["chattr", "-i", str(folder)]  # a no-op that fails where chattr cannot work
    try:
        return subprocess.run(command, capture_output=True, check=False).returncode == 0
    except FileNotFoundError:
        return False


def _fail_state_folder(folder: Path, fault: str) -> None:
    if fault == "full":
        with open(folder / "filler", "wb") as filler:  # the rest of the file system
            with pytest.raises(OSError):
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
    else:  # read-only for root too: no file can be created, renamed or removed in it
        subprocess.run(["chattr", "+i", str(folder)], check=True)


def _restore_state_folder(folder: Path, fault: str) -> None:
    command = ["umount", "-l", str(folder)] if fault == "full" else ["chattr", "-i", str(folder)]
    subprocess.run(command, capture_output=True, check=False)


@pytest.mark.slow  # several CLI processes (10-30 s on a loaded machine)
@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_watch_state_storage_failing_while_running_ends_in_one_line(tmp_path: Path, fault: str) -> None:
    import zarr

    folder = tmp_path / "states"
    if not _prepare_state_folder(folder, fault):
        pytest.skip("cannot mount a tmpfs or set the immutable attribute here (needs root)")
    try:
        source, reference = _write_array(tmp_path / "live.zarr", 300, 0), _write_array(tmp_path / "ref.zarr", 400, 1)
        state = folder / "monitor.zarr"
        command = _watch_command(source, reference, "--save-monitor", str(state), "--save-interval", "0")
        command += ["--follow", "--poll", "0.2", "--settle", "0", "--from-row", "0"]
        watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            lines = [watcher.stdout.readline() for _ in range(3)]  # the three chunks, each saved after its line
            assert lines[-1].startswith("rows 200-299"), lines
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (state.exists() and _saved_next_row(state) == 300):
                time.sleep(0.05)
            _fail_state_folder(folder, fault)
            grown = zarr.open_array(source, mode="r+")
            grown.resize((400, 3))
            grown[300:400] = 1.0  # a new complete chunk: processed, then its save fails
            out, err = watcher.communicate(timeout=120)
        finally:
            watcher.kill()
            watcher.wait()
        assert watcher.returncode == 1, err
        line = one_line(subprocess.CompletedProcess([], 1, out, err))
        code = "ENOSPC" if fault == "full" else "EPERM"
        assert f"cannot save the monitor state to {state}" in line and f"({code})" in line, line
        assert "the last state saved is up to row 299 (next row 300)" in line, line
        assert _saved_next_row(state) == 300  # whole and resumable
    finally:
        _restore_state_folder(folder, fault)


class _SilentEndpoint:
    """A TCP server on 127.0.0.1 that forwards to ``target`` (host, port) until :meth:`go_silent`, then accepts
    connections and reads requests but never answers: an object store that hangs. Without a target it is silent
    from the start."""

    def __init__(self, target: tuple[str, int] | None = None) -> None:
        import socket
        import threading

        self.target = target
        self.silent = threading.Event()
        if target is None:
            self.silent.set()
        self.requests_while_silent = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def go_silent(self) -> None:
        self.silent.set()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self._connections.append(client)
            upstream = None if self.silent.is_set() else socket.create_connection(self.target)
            if upstream is not None:
                self._connections.append(upstream)
                threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()

    def _pipe(self, source, sink, from_client: bool) -> None:  # noqa: ANN001 - sockets
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.silent.is_set() or sink is None:
                self.requests_while_silent += from_client  # held: never forwarded, never answered
                continue
            try:
                sink.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._server.close()
        for connection in self._connections:
            connection.close()


def _s3_array(s3_server, rows: int) -> str:
    import numpy as np
    import zarr

    url = s3_server.make_bucket() + "/live.zarr"
    store = zarr.storage.FsspecStore.from_url(url, storage_options=s3_server.storage_options)
    stored = zarr.create_array(store, shape=(rows, 3), chunks=(100, 3), dtype="float32")
    stored[...] = np.random.default_rng(0).normal(size=(rows, 3)).astype("float32")
    return url


def _wait_for(condition, what: str, seconds: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow  # several CLI processes (10-30 s on a loaded machine)
def test_watch_s3_endpoint_gone_at_start_up_or_during_a_run_ends_in_one_line(tmp_path: Path) -> None:
    import json

    from streamrff.testing import MotoS3Server

    reference = _write_array(tmp_path / "ref.zarr", 400, 1)
    with MotoS3Server() as s3:  # its own server: this test stops it
        url = _s3_array(s3, 200)
        options = json.dumps(s3.storage_options)
        command = _watch_command(url, reference, "--storage-options", options)
        watcher = subprocess.Popen(
            command + ["--follow", "--poll", "0.2", "--from-row", "0"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert watcher.stdout.readline().startswith("rows 0-99")
            s3.stop()  # the endpoint goes away while the watcher polls
            out, err = watcher.communicate(timeout=120)
        finally:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 1
    line = one_line(subprocess.CompletedProcess([], 1, out, err))
    assert url in line and "Could not connect to the endpoint URL" in line and "Context" not in err, line
    started = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)  # endpoint gone
    assert started.returncode == 1
    line = one_line(started)
    assert f"Cannot open {url}" in line and "Could not connect to the endpoint URL" in line, line


def test_store_requests_have_deadlines_that_storage_options_override(monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec.config
    import s3fs

    from streamrff.cli.faults import STORE_DEADLINES, install_store_deadlines, with_store_deadlines

    monkeypatch.setitem(fsspec.config.conf, "s3", {})
    install_store_deadlines()
    options = {"key": "k", "secret": "s", "endpoint_url": "http://127.0.0.1:9"}
    filesystem = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    assert filesystem.config_kwargs == STORE_DEADLINES  # every S3 file system of the process has them
    given = with_store_deadlines({**options, "config_kwargs": {"read_timeout": 60, "region_name": "eu-west-1"}})
    filesystem = s3fs.S3FileSystem(**given, skip_instance_cache=True)
    assert filesystem.config_kwargs == {**STORE_DEADLINES, "read_timeout": 60, "region_name": "eu-west-1"}


def test_first_contact_with_a_silent_endpoint_is_one_request_under_one_deadline() -> None:
    from streamrff.cli.faults import first_contact
    from streamrff.errors import SourceError

    endpoint = _SilentEndpoint()
    try:
        options = {"key": "k", "secret": "s", "endpoint_url": endpoint.endpoint_url}
        with pytest.raises(SourceError) as refused:  # the user's read_timeout is the deadline (4 s by default)
            first_contact(["s3://bucket/live.zarr", "local.zarr"], {**options, "config_kwargs": {"read_timeout": 2.0}})
    finally:
        endpoint.close()
    assert endpoint.requests_while_silent == 1  # tried once: no retry of a silent first request (the client is made
    # before the deadline starts, so the request is always sent)
    assert str(refused.value).startswith(
        f"the S3 endpoint {endpoint.endpoint_url} did not answer within 2 s (the first request, for "
        "s3://bucket/live.zarr); nothing was read or written."
    )


def test_first_contact_lets_an_answering_endpoint_through(s3_server) -> None:
    from streamrff.cli.faults import first_contact

    first_contact(["s3://no-such-bucket/x.zarr"], s3_server.storage_options)  # an error status is an answer


@pytest.mark.slow  # several CLI processes (10-30 s on a loaded machine)
@pytest.mark.parametrize("command", ["watch", "sketch", "test"])
def test_an_endpoint_that_never_answers_fails_after_the_deadline_in_one_line(tmp_path: Path, command: str) -> None:
    import json

    endpoint = _SilentEndpoint()
    url = "s3://bucket/live.zarr"
    try:
        options = {"key": "k", "secret": "s", "endpoint_url": endpoint.endpoint_url}
        options = json.dumps({**options, "config_kwargs": {"read_timeout": 1}})  # the user's deadline wins over 4 s
        reference = _write_array(tmp_path / "ref.zarr", 400, 1)
        if command == "watch":
            line = _watch_command(url, reference, "--storage-options", options)
        elif command == "sketch":
            line = [sys.executable, "-m", "streamrff.cli", "sketch", url, "--features", "8"]
            line += ["-o", str(tmp_path / "s.sketch"), "--storage-options", options]
        else:
            line = [sys.executable, "-m", "streamrff.cli", "test", url, reference, "--features", "8"]
            line += ["--storage-options", options]
        result = subprocess.run(line, capture_output=True, text=True, timeout=120, check=False)
    finally:
        endpoint.close()
    assert endpoint.requests_while_silent == 1  # the first contact, tried once
    assert result.returncode == 1
    line = one_line(result)
    assert line == (
        f"streamrff {command}: error: the S3 endpoint {endpoint.endpoint_url} did not answer within 1 s (the first "
        f"request, for {url}); nothing was read or written. Check the endpoint and the network, or give it longer "
        """with --storage-options '{"config_kwargs": {"read_timeout": SECONDS}}'."""
    ), line
    assert not (tmp_path / "s.sketch").exists()


def test_sigterm_cuts_a_hung_store_request_during_start_up(tmp_path: Path) -> None:
    import json
    import signal

    endpoint = _SilentEndpoint()
    try:
        options = {"key": "k", "secret": "s", "endpoint_url": endpoint.endpoint_url}
        options["config_kwargs"] = {"read_timeout": 600}  # no deadline ends this wait: only the signal
        reference = _write_array(tmp_path / "ref.zarr", 400, 1)
        state = tmp_path / "monitor.zarr"
        command = _watch_command("s3://bucket/live.zarr", reference, "--storage-options", json.dumps(options))
        watcher = subprocess.Popen(command + ["--save-monitor", str(state)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            _wait_for(lambda: endpoint.requests_while_silent >= 1, "the watcher's first request")
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=60)
        finally:
            watcher.kill()
            watcher.wait()
    finally:
        endpoint.close()
    assert watcher.returncode == 0, err  # documented: 0 stopped by SIGTERM
    assert "Traceback" not in err and not errors_of(err), err
    assert out.strip() == (
        f"stopped by SIGTERM during start-up, before any row of s3://bucket/live.zarr; the state in {state} is "
        "unchanged"
    )
    assert not state.exists()


@pytest.mark.slow  # several CLI processes (10-30 s on a loaded machine)
def test_sigterm_cuts_a_hung_store_request_while_following(tmp_path: Path, s3_server) -> None:
    import json
    import signal
    from urllib.parse import urlsplit

    url = _s3_array(s3_server, 200)
    moto = urlsplit(s3_server.endpoint_url)
    endpoint = _SilentEndpoint((moto.hostname, moto.port))
    try:
        options = {**s3_server.storage_options, "endpoint_url": endpoint.endpoint_url}
        options["config_kwargs"] = {"read_timeout": 600}
        reference = _write_array(tmp_path / "ref.zarr", 400, 1)
        state = tmp_path / "monitor.zarr"
        command = _watch_command(url, reference, "--storage-options", json.dumps(options), "--save-monitor", str(state))
        command += ["--follow", "--poll", "0.2", "--from-row", "0"]
        watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert watcher.stdout.readline().startswith("rows 0-99")
            assert watcher.stdout.readline().startswith("rows 100-199")
            endpoint.go_silent()  # the store hangs: the next poll's requests are never answered
            _wait_for(lambda: endpoint.requests_while_silent >= 1, "a request to the silent store")
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=60)
        finally:
            watcher.kill()
            watcher.wait()
    finally:
        endpoint.close()
    assert watcher.returncode == 0, err
    assert "Traceback" not in err and not errors_of(err), err
    assert f"stopped by SIGTERM after 200 rows of {url} from row 0 (2 chunks)" in out
    assert f"wrote {state}" in out and _saved_next_row(state) == 200


@pytest.mark.slow  # several CLI processes (10-30 s on a loaded machine)
def test_sigterm_during_start_up_prints_the_summary(tmp_path: Path) -> None:
    import signal

    source, reference = _write_array(tmp_path / "live.zarr", 200, 0), _write_array(tmp_path / "ref.zarr", 400, 1)
    state = tmp_path / "monitor.zarr"
    command = [sys.executable, "-m", "streamrff.cli", "watch", source, "--reference", reference, "--window", "20"]
    command += ["--ert", "1000000", "--save-monitor", str(state)]  # a long calibration: start-up lasts
    watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (tmp_path / ".monitor.zarr.lock").exists(), "the state's lock (start-up under way)")
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
        watcher.wait()
    assert watcher.returncode == 0, err
    assert "Traceback" not in err and not errors_of(err), err
    assert out.startswith("stopped by SIGTERM"), out


@pytest.mark.slow  # several CLI processes (5-10 s on a loaded machine)
def test_a_signal_before_the_parser_is_built_gives_the_summary_and_status(tmp_path: Path) -> None:
    """From the moment the CLI module that holds the gate is imported (``-X importtime`` reports it on stderr as it
    happens), a stop signal at any delay ends ``watch`` with its start-up summary and status 0."""
    import signal

    source, reference = _write_array(tmp_path / "live.zarr", 200, 0), _write_array(tmp_path / "ref.zarr", 400, 1)
    cases = [(signal.SIGTERM, 0.0), (signal.SIGINT, 0.0), (signal.SIGTERM, 0.01), (signal.SIGINT, 0.05)]
    cases += [(signal.SIGTERM, 0.2)]
    for number, delay in cases:
        state = tmp_path / f"monitor-{number.name}-{delay}.zarr"
        command = [sys.executable, "-X", "importtime", "-m", "streamrff.cli", "watch", source, "--reference", reference]
        command += ["--window", "20", "--ert", "1000000", "--save-monitor", str(state)]
        watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for line in watcher.stderr:  # the import of streamrff.cli.faults has ended: the gate is in place
                if line.rsplit("|", 1)[-1].strip() == "streamrff.cli.faults":
                    break
            time.sleep(delay)
            watcher.send_signal(number)
            out, err = watcher.communicate(timeout=60)
        finally:
            watcher.kill()
            watcher.wait()
        err = "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))
        assert watcher.returncode == 0, (number, delay, err)
        assert "Traceback" not in err and not errors_of(err), (number, delay, err)
        assert out.strip() == (
            f"stopped by {number.name} during start-up, before any row of {source}; the state in {state} is unchanged"
        ), (number, delay, out)
        assert not state.exists()


def test_a_command_that_is_not_a_service_meets_a_signal_recorded_while_parsing_as_before() -> None:
    import signal

    from streamrff.cli.faults import SignalGate

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever ran before
    try:
        gate = SignalGate(raising=False).__enter__()
        signal.raise_signal(signal.SIGINT)  # recorded, not acted on, while the gate holds
        assert gate.number == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):  # handed back: Python's own SIGINT handler, as without the gate
            gate.hand_back()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_sketch_whose_scheduler_is_killed_mid_job_ends_in_one_line(tmp_path: Path) -> None:
    import signal

    from streamrff.testing import LocalProcessCluster

    source = _write_array(tmp_path / "x.zarr", 20000, 0)  # 200 chunks: the job outlives the kill
    output = tmp_path / "x.sketch"
    with LocalProcessCluster(n_workers=1, nanny=False) as cluster, cluster.client() as client:
        address = cluster.address
        command = [sys.executable, "-m", "streamrff.cli", "sketch", source, "--features", "256", "-o", str(output)]
        job = subprocess.Popen(
            command + ["--scheduler", address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            _wait_for(
                lambda: client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) > 0,
                "the job's tasks on the scheduler", 120,
            )  # fmt: skip
            os.kill(cluster.scheduler_pid, signal.SIGKILL)
            out, err = job.communicate(timeout=180)
        finally:
            job.kill()
            job.wait()
    assert job.returncode == 1  # documented: 1, an unreachable or lost scheduler
    line = one_line(subprocess.CompletedProcess([], 1, out, err))
    assert f"Lost the connection to the Dask scheduler at {address} during the job" in line, line
    assert not output.exists()
