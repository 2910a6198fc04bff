"""How ``streamrff watch``, a service, meets faults: stop signals at any moment, and state storage that fails.

A watcher spends its life waiting: for the interpreter to start, for the store
to answer, for the next poll. :class:`SignalGate` makes SIGINT, SIGTERM and
SIGHUP act within one poll whatever it is waiting for. Outside a wait a signal
is only recorded and the session stops after the chunk in hand (the monitor and
its saved state move together); during start-up and inside a store wait
(:meth:`SignalGate.interruptible`), where nothing is half-done, the handler
raises :class:`StopRequested` at once, so a read from a store that accepted the
connection and never answers cannot hold the process.

A state whose storage becomes full or read-only while the watcher runs ends the
session with one line (:func:`state_save_failure`): what failed, the errno, and
the last state saved, which is whole (states are published atomically) and
resumable.

Every command's object-store requests have deadlines (:data:`STORE_DEADLINES`,
installed by :func:`streamrff.cli.main`), and a store that fails leaves one line,
not aiohttp's reports of the sessions it could not close
(:func:`quiet_unclosed_sessions`). The first contact with an S3 endpoint is one
request under one overall deadline (:func:`first_contact`): an endpoint that
accepts connections and never answers is refused in one line within
:data:`FIRST_CONTACT_SECONDS`, while later requests keep their retries, so a
job survives one transient error.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import os
import signal
from collections.abc import Iterator
from typing import Any

__all__ = [
    "StopRequested",
    "SignalGate",
    "entry_gate",
    "state_save_failure",
    "quiet_unclosed_sessions",
    "STORE_DEADLINES",
    "install_store_deadlines",
    "with_store_deadlines",
    "FIRST_CONTACT_SECONDS",
    "first_contact",
    "STOP_SIGNALS",
]

#: Signals that stop a watcher cleanly (save, summary, exit 0), however it was started.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class StopRequested(BaseException):  # noqa: N818 - not an error: a request, raised through `except Exception`
    """A stop signal arrived while the watcher was waiting with nothing half-done (start-up or a store wait)."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number

    @property
    def name(self) -> str:
        return signal.Signals(self.number).name


class SignalGate:
    """Stop signals for one session: recorded always, raised as :class:`StopRequested` where a wait may be cut.

    Installed with ``with gate:`` (the previous handlers are restored on exit);
    while ``raising`` is True (start-up, and inside :meth:`interruptible`) a
    signal raises at once, else it is only recorded in :attr:`number` for the
    loop to see after the chunk in hand; :meth:`shielded` holds signals back
    (recorded only) around work that must finish, such as publishing the state.

    Examples
    --------
    >>> import signal
    >>> gate = SignalGate(raising=False)
    >>> gate.number = signal.SIGTERM  # as its handler records a signal that arrived outside a wait
    >>> try:
    ...     with gate.interruptible():  # a signal already recorded stops the wait before it starts
    ...         pass
    ... except StopRequested as stop:
    ...     print(stop.name)
    SIGTERM
    """

    def __init__(self, raising: bool = True) -> None:
        self.number: int | None = None
        self.raising = raising
        self._previous: dict[int, Any] = {}

    def _handle(self, number: int, frame: Any) -> None:
        if self.number is None:
            self.number = number
        if self.raising:
            self.raising = False  # once: the unwinding and the summary after it are not cut again
            raise StopRequested(self.number)

    def __enter__(self) -> SignalGate:
        for name in STOP_SIGNALS:
            number = getattr(signal, name, None)
            if number is None:  # pragma: no cover - SIGHUP is POSIX only
                continue
            try:
                self._previous[number] = signal.signal(number, self._handle)
            except ValueError:  # not the main thread: signals stay as they are
                break
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def hand_back(self) -> None:
        """Restore the previous handlers, then deliver under them a signal recorded meanwhile.

        For a command that is not a service: :func:`streamrff.cli.main` installs a gate before it builds its
        parser, and a command that turns out not to stop cleanly meets the signal as it would have.
        """
        self.__exit__()
        if self.number is not None:
            signal.raise_signal(self.number)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """A wait (a store request) a signal may cut: raises :class:`StopRequested` at once inside it."""
        if self.number is not None:
            raise StopRequested(self.number)
        before, self.raising = self.raising, True
        try:
            yield
        finally:
            self.raising = before and self.number is None

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Work that must not be cut (publishing the state): a signal inside it is only recorded."""
        before, self.raising = self.raising, False
        try:
            yield
        finally:
            self.raising = before and self.number is None
        if before and self.number is not None:
            raise StopRequested(self.number)  # arrived while shielded, during start-up: acted on now


def _started_as_the_command() -> bool:
    """Whether this process is the ``streamrff`` command starting (``python -m streamrff.cli`` or the console
    script ``streamrff``), not a program that imports the CLI."""
    import sys

    argv = list(getattr(sys, "orig_argv", ()))
    if sys.argv[:1] == ["-m"]:  # `python -m X`: X's package is imported before sys.argv[0] names X
        return "-m" in argv and argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["streamrff.cli"]
    main = sys.modules.get("__main__")
    script = sys.argv[0] if sys.argv else ""
    return os.path.basename(script) in ("streamrff", "streamrff.exe") and getattr(main, "__file__", None) == script


#: The gate of a ``streamrff`` process, installed (recording only) as the CLI is imported, before anything else
#: of it: a stop signal while the parser is built is kept for :func:`streamrff.cli.main` (:func:`entry_gate`).
_ENTRY_GATE = SignalGate(raising=False).__enter__() if _started_as_the_command() else None


def entry_gate() -> SignalGate:
    """The gate installed when the command's process imported the CLI, once; else a new one, installed now.

    Recording only: :func:`streamrff.cli.main` makes it raise for a service, or hands the signals back
    (:meth:`SignalGate.hand_back`) for any other command.
    """
    global _ENTRY_GATE
    gate, _ENTRY_GATE = _ENTRY_GATE, None
    return gate if gate is not None else SignalGate(raising=False).__enter__()


def state_save_failure(path: str, error: OSError, kept: str) -> str:
    """One line for a state that could not be saved: the path, the OS error and its errno name, what was kept.

    Examples
    --------
    >>> import errno
    >>> print(state_save_failure("mon.zarr", OSError(errno.ENOSPC, "No space left on device"), "nothing saved"))
    cannot save the monitor state to mon.zarr: No space left on device (ENOSPC); nothing saved. Free space there or \
make it writable, then run the same command again to resume from the last saved state.
    """
    number = error.errno
    code = errno_codes.errorcode.get(number, f"errno {number}") if number is not None else type(error).__name__
    reason = error.strerror or (os.strerror(number) if number is not None else str(error))
    return (
        f"cannot save the monitor state to {path}: {reason} ({code}); {kept}. Free space there or make it writable, "
        "then run the same command again to resume from the last saved state."
    )


class _UnclosedSessionFilter:
    """Drops aiohttp's "Unclosed client session" and "Unclosed connector" reports (:func:`quiet_unclosed_sessions`)."""

    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith(("Unclosed client session", "Unclosed connector"))


def quiet_unclosed_sessions() -> None:
    """No two-line "Unclosed client session" report after a store failed: the command's one line says it all.

    s3fs closes its HTTP session from a finalizer at exit; when the event loop
    the session belongs to has stopped by then (zarr stops its loop first), aiohttp
    reports the session through the ``asyncio`` logger, two lines after the
    command's own. Nothing is lost: the process is ending and holds no data there.
    """
    import logging

    logger = logging.getLogger("asyncio")
    if not any(isinstance(existing, _UnclosedSessionFilter) for existing in logger.filters):
        logger.addFilter(_UnclosedSessionFilter())


#: botocore ``Config`` keys (s3fs's ``config_kwargs``) that bound every S3 request: seconds to connect, seconds
#: without a byte while reading, and one botocore attempt; s3fs itself then tries a timed-out request
#: :data:`STORE_ATTEMPTS` times, so an endpoint that accepts connections and never answers fails in about 10 s
#: instead of hanging.
STORE_ATTEMPTS = 2
STORE_DEADLINES: dict[str, Any] = {
    "connect_timeout": 5,
    "read_timeout": 5,
    "retries": {"total_max_attempts": 1, "mode": "standard"},
}


def with_store_deadlines(storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``storage_options`` whose ``config_kwargs``, if given, are completed with :data:`STORE_DEADLINES`.

    fsspec's defaults (:func:`install_store_deadlines`) give way to a whole
    ``config_kwargs`` a user passes, so the deadlines the user did not set are
    filled in here; the user's keys win.

    Examples
    --------
    >>> with_store_deadlines({"config_kwargs": {"read_timeout": 60}})["config_kwargs"]["read_timeout"]
    60
    >>> with_store_deadlines({"config_kwargs": {}})["config_kwargs"]["connect_timeout"]
    5
    >>> with_store_deadlines({"anon": True})
    {'anon': True}
    """
    if not storage_options or not isinstance(storage_options.get("config_kwargs"), dict):
        return storage_options
    return {**storage_options, "config_kwargs": {**STORE_DEADLINES, **storage_options["config_kwargs"]}}


def install_store_deadlines(object_storage: bool = True) -> None:
    """Make :data:`STORE_DEADLINES` the default ``config_kwargs`` of every S3 file system this process opens.

    Through fsspec's configuration (``fsspec.config.conf["s3"]``): keys already
    configured there (``~/.config/fsspec/s3.json``, ``FSSPEC_S3_*``) and a
    ``config_kwargs`` passed with the storage options win. Worker processes of a
    ``--scheduler`` read their own fsspec configuration, or the storage options'
    ``config_kwargs``. With ``object_storage`` (the command names an ``s3://`` URL), s3fs's own attempts
    of a request are :data:`STORE_ATTEMPTS` in this process.
    """
    import fsspec.config  # here, not at the top: `streamrff --help` does not need it

    if object_storage:  # a command that names an s3:// URL (importing s3fs costs a command that does not 0.15 s)
        import s3fs

        # s3fs's own retries of a failed request (5 by default, with backoff): a class attribute, not an option.
        s3fs.S3FileSystem.retries = STORE_ATTEMPTS
    defaults = fsspec.config.conf.setdefault("s3", {})
    defaults["config_kwargs"] = {**STORE_DEADLINES, **defaults.get("config_kwargs", {})}


#: The overall deadline, in seconds, of a command's first request to an S3 endpoint (:func:`first_contact`).
FIRST_CONTACT_SECONDS = 4.0


def _timed_out(error: BaseException | None) -> bool:
    """Whether ``error`` (or an exception it was raised from) is a timeout: asyncio's, fsspec's or botocore's."""
    while error is not None:
        if isinstance(error, TimeoutError) or "Timeout" in type(error).__name__:
            return True
        error = error.__cause__ or error.__context__
    return False


def first_contact(urls: list[str], storage_options: dict[str, Any] | None) -> None:
    """One request to the endpoint of each bucket the ``s3://`` URLs name, each under one overall deadline.

    The deadline is :data:`FIRST_CONTACT_SECONDS`, or the larger of the
    ``connect_timeout`` and ``read_timeout`` the user's ``config_kwargs`` set: both
    timeouts of the request, backed by an overall limit of twice the deadline; the
    request is tried once (s3fs and botocore retry nothing here). Making the
    client (which sends nothing) is not timed. Any answer, an
    error status included, shows the endpoint is there: what the answer means
    (a missing bucket, refused credentials) is for the command's own requests
    to report, with their retries. Only silence is refused, as one
    :class:`~streamrff.errors.SourceError` line naming the endpoint, the URL
    and the deadline, before the command reads or writes anything.

    Examples
    --------
    >>> first_contact(["data.zarr", "out.sketch"], None)  # no s3:// URL: nothing to contact
    """
    buckets: dict[str, str] = {}
    for url in urls:
        if url.startswith(("s3://", "s3a://")):
            bucket, _, key = url.split("://", 1)[1].partition("/")
            buckets.setdefault(bucket, key)
    if not buckets:
        return
    import fsspec.asyn
    import s3fs

    options = dict(storage_options or {})
    given = options.get("config_kwargs") if isinstance(options.get("config_kwargs"), dict) else {}
    timeouts = [given[name] for name in ("connect_timeout", "read_timeout") if isinstance(given.get(name), int | float)]
    deadline = float(max(timeouts)) if timeouts else FIRST_CONTACT_SECONDS
    once = {"connect_timeout": deadline, "read_timeout": deadline, "retries": {"total_max_attempts": 1}}
    options["config_kwargs"] = {**given, **once}
    try:
        filesystem = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    except Exception:  # options s3fs refuses: the command's own opening reports them, in its words
        return
    filesystem.retries = 1
    try:
        try:  # the client first, outside the deadline: no request (credentials have botocore's own timeouts)
            fsspec.asyn.sync(filesystem.loop, filesystem.set_session)
        except Exception:  # no credentials, a bad option: the command's own opening reports it, in its words
            return
        for bucket, key in buckets.items():
            _answers(filesystem, bucket, key, deadline)
    finally:  # its session: one request's, closed before the command opens its own (or ends)
        with contextlib.suppress(Exception):
            fsspec.asyn.sync(filesystem.loop, filesystem._s3.close, timeout=1)


def _answers(filesystem: Any, bucket: str, key: str, deadline: float) -> None:
    """One request to ``bucket`` (:func:`first_contact`); a :class:`~streamrff.errors.SourceError` if it times out."""
    import fsspec.asyn

    from ..errors import SourceError

    try:  # botocore's timeouts end a silent request at the deadline; the overall one only backs them up
        fsspec.asyn.sync(
            filesystem.loop, filesystem._call_s3, "list_objects_v2", Bucket=bucket, Prefix=key, MaxKeys=1,
            timeout=2 * deadline,
        )  # fmt: skip
    except Exception as error:  # an answer (any status) or another failure: the command's requests report it
        if not _timed_out(error):
            return
        endpoint = getattr(getattr(filesystem._s3, "meta", None), "endpoint_url", None)
        where = f"the S3 endpoint {endpoint}" if endpoint else f"the S3 endpoint of bucket {bucket}"
        raise SourceError(
            f"{where} did not answer within {deadline:g} s (the first request, for s3://{bucket}/{key}); "
            "nothing was read or written. Check the endpoint and the network, or give it longer with "
            '--storage-options \'{"config_kwargs": {"read_timeout": SECONDS}}\'.'
        ) from None
