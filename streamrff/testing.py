"""Real services for tests and operators: a local Dask cluster of OS processes and an S3 server.

:class:`LocalProcessCluster` starts ``dask scheduler`` and ``dask worker`` as separate
processes on 127.0.0.1, the way a real deployment does, so tests catch what an in-process
cluster hides: unpicklable tasks, state that lives only in the client process, and workers
that die and are restarted by their nanny. :class:`MotoS3Server` runs moto's S3 server on a
free loopback port, for tests of ``s3://`` sources and sketch files.

From a shell (also used by ``deploy/local-cluster.sh``)::

    python -m streamrff.testing cluster --workers 2 --threads 1

prints the scheduler address (``tcp://127.0.0.1:PORT``) on one line and runs until it
receives SIGINT or SIGTERM, then stops every process it started.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from distributed import Client

__all__ = ["LocalProcessCluster", "MotoS3Server", "main"]

#: Seconds a process gets to exit after SIGTERM before it is killed.
_TERMINATE_GRACE = 15.0
#: Interval between two checks while polling for a condition with a deadline.
_POLL_INTERVAL = 0.05
#: Fields of a ``distributed.Security`` that a TLS cluster needs.
_TLS_FIELDS = (
    "tls_ca_file",
    "tls_scheduler_cert",
    "tls_scheduler_key",
    "tls_worker_cert",
    "tls_worker_key",
    "tls_client_cert",
    "tls_client_key",
)
_NOT_RUNNING = "The cluster is not running; call start() or use it in a `with` block."
#: Lines of each log file quoted in a :class:`ClusterError`.
_LOG_TAIL_LINES = 25


def _python_path_for_children() -> str:
    """Return a ``PYTHONPATH`` that lets child processes import what the caller imports.

    The children run the caller's interpreter (``sys.executable``), so they already see its
    standard library and site-packages. What they would miss are the entries a test runner
    or a source checkout put on ``sys.path`` (the project root, ``tests/``), which workers
    need to unpickle functions defined there - ``LocalCluster`` passes ``sys.path`` to its
    workers for the same reason.
    """
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    entries: list[str] = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(path):
            continue
        if any(path == prefix or path.startswith(prefix + os.sep) for prefix in prefixes):
            continue
        if path not in entries:
            entries.append(path)
    inherited = os.environ.get("PYTHONPATH", "")
    if inherited:
        entries.extend(p for p in inherited.split(os.pathsep) if p and p not in entries)
    return os.pathsep.join(entries)


def _tail(path: Path, n_lines: int = _LOG_TAIL_LINES) -> str:
    """Return the last ``n_lines`` lines of a log file, or a note that it is missing."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"--- {path.name}: (no log written) ---"
    body = "\n".join(lines[-n_lines:]) if lines else "(empty)"
    return f"--- {path.name} (last {min(len(lines), n_lines)} lines) ---\n{body}"


def _group_alive(pgid: int) -> bool:
    """Return whether any process is left in the process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - the group id was reused by another user
        return False
    return True


def _terminate(processes: Sequence[subprocess.Popen], grace: float = _TERMINATE_GRACE) -> None:
    """Stop processes and everything they spawned: SIGTERM, then SIGKILL after ``grace`` s.

    Each process leads its own session (``start_new_session=True``), so its process group
    also holds the children it forked or spawned (a nanny's worker process, multiprocessing's
    helpers); those are killed too if they outlive their parent.
    """
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(deadline - time.monotonic(), 0.0))
    for process in processes:
        # The group id is the leader's pid; the group can outlive the reaped leader.
        if process.poll() is None or _group_alive(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    deadline = time.monotonic() + grace
    while any(_group_alive(p.pid) for p in processes) and time.monotonic() < deadline:
        time.sleep(_POLL_INTERVAL)


class LocalProcessCluster:
    """A Dask scheduler and workers running as separate OS processes on 127.0.0.1.

    Unlike ``distributed.LocalCluster``, every process is started from the command line
    (``dask scheduler`` and ``dask worker``, run with the caller's Python interpreter), so
    the cluster behaves like a deployed one: tasks and their arguments are pickled, and a
    worker process can be killed from outside and restarted by its nanny.

    Parameters
    ----------
    n_workers : int, default=2
        Number of ``dask worker`` processes.
    threads_per_worker : int, default=1
        Threads of each worker (``--nthreads``).
    memory_limit : str, default="2GiB"
        Memory limit of each worker (``--memory-limit``), e.g. ``"2GiB"`` or ``"auto"``.
    nanny : bool, default=True
        Run each worker under a nanny process that restarts it if it dies.
    startup_timeout : float, default=60.0
        Seconds to wait for the scheduler and all workers to come up.
    security : distributed.Security, optional
        Run the cluster over mutual TLS: the scheduler listens on ``tls://`` and gets
        ``--tls-ca-file``, ``--tls-cert`` and ``--tls-key`` from the scheduler certificate, the
        workers from the worker certificate, and :meth:`client` connects with it. It needs
        ``tls_ca_file`` and the scheduler, worker and client certificates and keys, as file
        paths or PEM text (``Security.temporary()`` works; PEM text is written to the log
        directory for the command lines).
    environment : dict, optional
        Changes to the caller's environment for every process: a name mapped to
        a string sets it, to None removes it (e.g. ``{"AWS_ACCESS_KEY_ID":
        None}`` for workers that, like a deployed cluster's, do not share the
        client's credentials).

    Attributes
    ----------
    log_dir : pathlib.Path or None
        Directory of the scheduler's and workers' log files while the cluster runs.

    Raises
    ------
    ClusterError
        From :meth:`start` if a process exits early or the cluster is not up within
        ``startup_timeout``; the message quotes the end of every log file.

    Notes
    -----
    Use it as a context manager, or call :meth:`start` and :meth:`stop`. :meth:`stop` is
    idempotent, and :meth:`start` after :meth:`stop` brings up a fresh cluster. A cluster
    still running when the interpreter exits normally is stopped then.

    Examples
    --------
    Starting processes takes seconds, so only the checks before start-up run here:

    >>> from streamrff.testing import LocalProcessCluster
    >>> cluster = LocalProcessCluster(n_workers=1)
    >>> cluster.alive()
    False
    >>> cluster.address
    Traceback (most recent call last):
    ...
    streamrff.errors.ClusterError: The cluster is not running; call start() or use it in a `with` block.

    A one-worker cluster and a computation on it:

    >>> import dask.array as da
    >>> with LocalProcessCluster(n_workers=1) as cluster:  # doctest: +SKIP
    ...     with cluster.client() as client:
    ...         total = da.ones(10, chunks=5).sum().compute()
    >>> total  # doctest: +SKIP
    np.float64(10.0)
    """

    def __init__(
        self,
        n_workers: int = 2,
        threads_per_worker: int = 1,
        memory_limit: str = "2GiB",
        nanny: bool = True,
        startup_timeout: float = 60.0,
        security: Any = None,
        environment: dict[str, str | None] | None = None,
    ) -> None:
        if n_workers < 1:
            raise ValueError(f"n_workers must be at least 1 (got {n_workers}).")
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be at least 1 (got {threads_per_worker}).")
        self.n_workers = n_workers
        self.threads_per_worker = threads_per_worker
        self.memory_limit = memory_limit
        self.nanny = nanny
        self.startup_timeout = startup_timeout
        if security is not None:
            missing = [name for name in _TLS_FIELDS if not getattr(security, name, None)]
            if missing:
                raise ValueError(
                    f"security must hold a CA file and the scheduler, worker and client certificates "
                    f"and keys for a TLS cluster. Missing: {', '.join(missing)}."
                )
        self.security = security
        self.environment = dict(environment or {})
        self.log_dir: Path | None = None
        self._address: str | None = None
        self._scheduler: subprocess.Popen | None = None
        self._workers: list[subprocess.Popen] = []
        self._logs: list[IO[bytes]] = []
        self._names: dict[int, str] = {}
        self._client: Client | None = None
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> LocalProcessCluster:
        """Start the scheduler and workers and wait until all workers are connected.

        Returns
        -------
        LocalProcessCluster
            ``self``; calling :meth:`start` on a running cluster does nothing.

        Raises
        ------
        ClusterError
            If a process exits early or the cluster is not up within ``startup_timeout``.
        """
        with self._lock:
            if self._scheduler is not None:
                return self
            self.log_dir = Path(tempfile.mkdtemp(prefix="streamrff-cluster-"))
            atexit.register(self.stop)
            try:
                self._start_processes()
            except BaseException:
                self.stop()
                raise
            return self

    def _tls_arguments(self, role: str) -> list[str]:
        """``--protocol tls`` and the ``--tls-*`` flags of ``role`` ("scheduler" or "worker")."""
        if self.security is None:
            return []
        assert self.log_dir is not None
        files = {}
        for flag, field in (
            ("--tls-ca-file", "tls_ca_file"),
            ("--tls-cert", f"tls_{role}_cert"),
            ("--tls-key", f"tls_{role}_key"),
        ):
            value = str(getattr(self.security, field))
            if value.lstrip().startswith("-----BEGIN"):  # PEM text, e.g. from Security.temporary()
                path = self.log_dir / f"{field}.pem"
                path.write_text(value)
                path.chmod(0o600)
                value = str(path)
            files[flag] = value
        return ["--protocol", "tls", *(item for pair in files.items() for item in pair)]

    def _popen(self, args: list[str], log_name: str) -> subprocess.Popen:
        assert self.log_dir is not None
        log = open(self.log_dir / log_name, "wb")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        name = log_name.removesuffix(".log")
        env = dict(os.environ)
        for variable, value in self.environment.items():
            if value is None:
                env.pop(variable, None)
            else:
                env[variable] = value
        env["PYTHONPATH"] = _python_path_for_children()
        env["PYTHONUNBUFFERED"] = "1"
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.log_dir,
            env=env,
            # Own process group: a terminal's Ctrl-C reaches only the caller, which stops
            # the cluster in order, and stop() can kill a nanny together with its worker.
            start_new_session=True,
        )
        self._names[process.pid] = f"`dask {name.split('-')[0]}` ({name})"
        return process

    def _start_processes(self) -> None:
        from distributed import Client

        assert self.log_dir is not None
        deadline = time.monotonic() + self.startup_timeout
        scheduler_file = self.log_dir / "scheduler.json"
        self._scheduler = self._popen(
            [
                sys.executable, "-m", "distributed.cli.dask_scheduler",
                "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                "--scheduler-file", str(scheduler_file),
                *self._tls_arguments("scheduler"),
            ],
            "scheduler.log",
        )
        self._address = self._wait_for_scheduler_file(scheduler_file, deadline)
        for index in range(self.n_workers):
            local_directory = self.log_dir / f"worker-{index}"
            local_directory.mkdir()
            self._workers.append(
                self._popen(
                    [
                        sys.executable, "-m", "distributed.cli.dask_worker", self._address,
                        "--name", f"worker-{index}",
                        "--nthreads", str(self.threads_per_worker),
                        "--memory-limit", str(self.memory_limit),
                        "--nanny" if self.nanny else "--no-nanny",
                        "--host", "127.0.0.1", "--no-dashboard",
                        "--local-directory", str(local_directory),
                        *self._tls_arguments("worker"),
                    ],
                    f"worker-{index}.log",
                )
            )
        try:
            self._client = Client(
                self._address,
                set_as_default=False,
                timeout=max(deadline - time.monotonic(), 1.0),
                security=self.security,
            )
        except OSError as error:
            reason = f"Expected to connect to {self._address}. Got {error!r}."
            raise ClusterError(self._failure_message(reason)) from error
        self.wait_for_workers(timeout=max(deadline - time.monotonic(), 0.0))

    def _wait_for_scheduler_file(self, scheduler_file: Path, deadline: float) -> str:
        """Poll until the scheduler has written its address, and return it."""

        def written_address() -> str | None:
            if not scheduler_file.exists():
                return None
            try:
                address = json.loads(scheduler_file.read_text())["address"]
            except (json.JSONDecodeError, KeyError):
                return None  # still being written
            return str(address) if address else None

        return self._poll(
            written_address,
            deadline,
            lambda: f"Expected the scheduler to write {scheduler_file.name} within {self.startup_timeout:g} s. "
            "Got no file.",
        )

    def _poll(self, found: Callable[[], Any], deadline: float, timeout_reason: Callable[[], str]) -> Any:
        """Call ``found()`` until it returns a true value, and return that; ClusterError if a cluster
        process exits first or the monotonic clock passes ``deadline`` (``timeout_reason()`` says why)."""
        while True:
            self._check_processes_alive()
            result = found()
            if result:
                return result
            if time.monotonic() > deadline:
                raise ClusterError(self._failure_message(timeout_reason()))
            time.sleep(_POLL_INTERVAL)

    def _check_processes_alive(self) -> None:
        for process in [self._scheduler, *self._workers]:
            if process is not None and process.poll() is not None:
                raise ClusterError(
                    self._failure_message(
                        f"Expected the cluster processes to keep running. Got exit code "
                        f"{process.returncode} from {self._names[process.pid]} (see its log)."
                    )
                )

    def _failure_message(self, reason: str) -> str:
        logs = sorted(self.log_dir.glob("*.log")) if self.log_dir else []
        tails = "\n".join(_tail(path) for path in logs)
        return f"Local Dask cluster failed to start. {reason}\n{tails}"

    def wait_for_workers(self, n_workers: int | None = None, timeout: float = 60.0) -> None:
        """Wait until ``n_workers`` workers are connected and answer.

        After a worker process is killed its nanny starts a new one; this waits for it.

        Parameters
        ----------
        n_workers : int, optional
            Number of workers to wait for; defaults to the number the cluster started.
        timeout : float, default=60.0
            Seconds to wait.

        Raises
        ------
        ClusterError
            If a scheduler or worker launcher process exited, or the workers do not come up
            in time.
        """
        expected = self.n_workers if n_workers is None else n_workers
        self._poll(
            lambda: len(self.worker_pids()) == expected,
            time.monotonic() + timeout,
            lambda: f"Expected {expected} workers within {timeout:g} s. Got {len(self.worker_pids())}.",
        )

    def stop(self) -> None:
        """Stop the workers, then the scheduler, and remove the temporary files.

        Each process gets SIGTERM and is killed with SIGKILL if it has not exited after a
        grace period; processes they started (a nanny's worker) are killed with them. Calling
        :meth:`stop` again does nothing.
        """
        with self._lock:
            if self._client is not None:
                self._client.close(timeout=_TERMINATE_GRACE)
                self._client = None
            _terminate(self._workers)
            self._workers = []
            if self._scheduler is not None:
                _terminate([self._scheduler])
                self._scheduler = None
            for log in self._logs:
                log.close()
            self._logs = []
            self._names = {}
            if self.log_dir is not None:
                shutil.rmtree(self.log_dir, ignore_errors=True)
                self.log_dir = None
            self._address = None
            atexit.unregister(self.stop)

    def __enter__(self) -> LocalProcessCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self._address or "stopped"
        return (
            f"LocalProcessCluster({state}, n_workers={self.n_workers}, "
            f"threads_per_worker={self.threads_per_worker}, nanny={self.nanny})"
        )

    # -- inspection --------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The scheduler's address, ``tcp://127.0.0.1:PORT`` (``tls://`` with ``security``).

        Raises
        ------
        ClusterError
            If the cluster is not running.
        """
        if self._address is None:
            raise ClusterError(_NOT_RUNNING)
        return self._address

    @property
    def scheduler_pid(self) -> int:
        """Process id of the ``dask scheduler`` process."""
        if self._scheduler is None:
            raise ClusterError(_NOT_RUNNING)
        return self._scheduler.pid

    def launcher_pids(self) -> list[int]:
        """Process ids of the ``dask worker`` commands started (the nannies if ``nanny=True``).

        Returns
        -------
        list of int
        """
        return [process.pid for process in self._workers]

    def worker_pids(self) -> dict[str, int]:
        """Process ids of the worker processes that run tasks, by worker address.

        With ``nanny=True`` these are the nannies' child processes, which change when a
        nanny restarts its worker. A worker that cannot be reached (one just killed, not yet
        noticed by the scheduler) is left out.

        Returns
        -------
        dict of str to int
            ``{"tcp://127.0.0.1:PORT": pid, ...}``.
        """
        if self._client is None:
            raise ClusterError(_NOT_RUNNING)
        answers = self._client.run(os.getpid, on_error="return")
        return {address: pid for address, pid in answers.items() if isinstance(pid, int)}

    def alive(self) -> bool:
        """Return whether the scheduler and every ``dask worker`` process are running.

        Returns
        -------
        bool
        """
        processes = [self._scheduler, *self._workers]
        return self._scheduler is not None and all(p.poll() is None for p in processes if p)

    def client(self, **kwargs: Any) -> Client:
        """Return a new ``distributed.Client`` connected to this cluster.

        Parameters
        ----------
        **kwargs
            Passed to ``distributed.Client``.

        Returns
        -------
        distributed.Client
            The caller closes it (it is a context manager).
        """
        from distributed import Client

        if self.security is not None:
            kwargs.setdefault("security", self.security)
        return Client(self.address, **kwargs)


class MotoS3Server:
    """moto's S3 server on a free port of 127.0.0.1, for tests of ``s3://`` URLs.

    While it runs, dummy AWS credentials are set in the environment (the previous values
    are restored when it stops) so no real account can be reached by accident, and s3fs's
    cache of filesystem instances is cleared on start and stop.

    Attributes
    ----------
    endpoint_url : str
        ``http://127.0.0.1:PORT``.
    storage_options : dict
        Keyword arguments for ``s3fs.S3FileSystem`` (and fsspec, zarr, dask, xarray
        ``storage_options=``) that talk to this server.

    Raises
    ------
    ImportError
        If moto or s3fs is not installed (``pip install "streamrff[test]"``).

    Examples
    --------
    The server takes about two seconds to start, so only the parts that need no
    server run here:

    >>> from streamrff.testing import MotoS3Server
    >>> s3 = MotoS3Server()
    >>> s3.endpoint_url
    Traceback (most recent call last):
    ...
    RuntimeError: The S3 server is not running; call start() or use it in a `with` block.

    A bucket on a running server:

    >>> import s3fs
    >>> with MotoS3Server() as s3:  # doctest: +SKIP
    ...     url = s3.make_bucket("data")
    ...     fs = s3fs.S3FileSystem(**s3.storage_options)
    ...     fs.pipe(url + "/hello", b"hi")
    ...     fs.cat(url + "/hello")
    b'hi'
    """

    #: Dummy credentials and region; moto accepts any.
    ENVIRONMENT = {
        "AWS_ACCESS_KEY_ID": "streamrff-testing",
        "AWS_SECRET_ACCESS_KEY": "streamrff-testing",
        "AWS_SESSION_TOKEN": "streamrff-testing",
        "AWS_SECURITY_TOKEN": "streamrff-testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }

    def __init__(self) -> None:
        self._server: Any = None
        self._endpoint_url: str | None = None
        self._saved_environment: dict[str, str | None] = {}
        self._saved_log_level = logging.NOTSET

    def start(self) -> MotoS3Server:
        """Start the server; returns ``self`` (a running server is left as it is)."""
        if self._server is not None:
            return self
        try:
            import s3fs
            from moto.server import ThreadedMotoServer
        except ImportError as error:
            raise ImportError(
                f"MotoS3Server needs moto[server] and s3fs ({error}); "
                'install them with pip install "streamrff[test]".'
            ) from error
        self._saved_environment = {name: os.environ.get(name) for name in self.ENVIRONMENT}
        os.environ.update(self.ENVIRONMENT)
        # werkzeug logs every request (404s included, which tests provoke) to stderr.
        request_logger = logging.getLogger("werkzeug")
        self._saved_log_level = request_logger.level
        request_logger.setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        self._server = server
        host, port = server.get_host_and_port()
        self._endpoint_url = f"http://{host}:{port}"
        s3fs.S3FileSystem.clear_instance_cache()
        return self

    def stop(self) -> None:
        """Stop the server and restore the environment; calling it again does nothing."""
        if self._server is None:
            return
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        self._server.stop()
        self._server = None
        self._endpoint_url = None
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment = {}
        logging.getLogger("werkzeug").setLevel(self._saved_log_level)

    def __enter__(self) -> MotoS3Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        """The server's URL, ``http://127.0.0.1:PORT``."""
        if self._endpoint_url is None:
            raise RuntimeError(
                "The S3 server is not running; call start() or use it in a `with` block."
            )
        return self._endpoint_url

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for s3fs that reach this server with the dummy credentials."""
        return {
            "key": self.ENVIRONMENT["AWS_ACCESS_KEY_ID"],
            "secret": self.ENVIRONMENT["AWS_SECRET_ACCESS_KEY"],
            "endpoint_url": self.endpoint_url,
            "client_kwargs": {"region_name": self.ENVIRONMENT["AWS_DEFAULT_REGION"]},
        }

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket and return its URL.

        Parameters
        ----------
        name : str, optional
            Bucket name; by default a fresh unique one.

        Returns
        -------
        str
            ``"s3://NAME"``.
        """
        import s3fs

        bucket = name or f"streamrff-{uuid.uuid4().hex[:16]}"
        options = {k: v for k, v in self.storage_options.items() if k != "client_kwargs"}
        # Without a region: s3fs would send region_name as the bucket's LocationConstraint,
        # which S3 (and moto) reject for us-east-1, the default region.
        filesystem = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        filesystem.mkdir(bucket)
        return f"s3://{bucket}"


# -- command line ----------------------------------------------------------------------


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m streamrff.testing",
        description="Local services for testing streamrff.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    cluster = commands.add_parser(
        "cluster",
        help="run a local Dask scheduler and workers until SIGINT/SIGTERM",
        description=(
            "Start a Dask scheduler and workers as local processes on 127.0.0.1, print the "
            "scheduler address on stdout and run until SIGINT or SIGTERM."
        ),
    )
    cluster.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    cluster.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    cluster.add_argument(
        "--memory-limit", default="2GiB", help="memory limit per worker (default 2GiB)"
    )
    cluster.add_argument(
        "--no-nanny", action="store_true", help="run workers without a nanny process"
    )
    cluster.add_argument(
        "--timeout", type=float, default=60.0, help="startup timeout in seconds (default 60)"
    )
    arguments = parser.parse_args(argv)
    for name in ("workers", "threads"):
        if getattr(arguments, name) < 1:
            parser.error(f"--{name} must be at least 1 (got {getattr(arguments, name)}).")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m streamrff.testing cluster [--workers N] [--threads T]``.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        Exit status: 0 after a clean stop on SIGINT/SIGTERM, 1 if the cluster failed.

    Examples
    --------
    Bad arguments exit with status 2 before any process starts:

    >>> from streamrff.testing import main
    >>> try:
    ...     main(["cluster", "--workers", "0"])
    ... except SystemExit as exit:
    ...     print(exit.code)
    2
    """
    arguments = _parse_args(argv)
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, request_stop)

    cluster = LocalProcessCluster(
        n_workers=arguments.workers,
        threads_per_worker=arguments.threads,
        memory_limit=arguments.memory_limit,
        nanny=not arguments.no_nanny,
        startup_timeout=arguments.timeout,
    )
    try:
        cluster.start()
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        if stop_requested.is_set():
            return 0
        print(cluster.address, flush=True)
        print(
            f"Running {arguments.workers} worker(s) at {cluster.address}; "
            "stop with Ctrl-C or SIGTERM.",
            file=sys.stderr,
            flush=True,
        )
        while not stop_requested.wait(timeout=1.0):
            if not cluster.alive():
                print("error: a cluster process exited; stopping.", file=sys.stderr)
                return 1
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
