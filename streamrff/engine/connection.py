"""Talking to a Dask scheduler: :func:`connect`, address parsing, a probe with a deadline, a no-worker watchdog.

Two dask config keys (also settable as environment variables, as every dask key is):

``streamrff.connect-timeout`` (``DASK_STREAMRFF__CONNECT_TIMEOUT``), default ``"20s"``
    One deadline for connecting to a scheduler: the TCP (and TLS) connection,
    Dask's handshake and the scheduler's first answer. A server that accepts the
    connection but never answers, or stops after a byte (a hung process), fails
    after this time instead of hanging: ``distributed.Client`` alone waits forever
    for such a server's handshake whatever its ``timeout``. A server that answers
    in another protocol (HTTP) or declares absurd message sizes fails at once,
    before any buffer is allocated for them.
``streamrff.no-workers-timeout`` (``DASK_STREAMRFF__NO_WORKERS_TIMEOUT``), default ``"120s"``
    How long a job may wait while the scheduler has no worker at all (the last
    one died) before it fails, naming the scheduler.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import ssl
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import dask
from dask.utils import parse_timedelta

from ..errors import ClusterError, InputError

__all__ = [
    "connect",
    "parse_scheduler_address",
    "connect_timeout",
    "no_workers_timeout",
    "probe_scheduler",
    "wait_for_result",
]

_DEFAULTS = {"connect-timeout": "20s", "no-workers-timeout": "120s"}
#: Transports other than TCP/TLS are passed to distributed unchecked.
_OTHER_SCHEMES = ("inproc", "ucx", "ws", "wss")


def _seconds(key: str) -> float:
    value = dask.config.get(f"streamrff.{key}", _DEFAULTS[key])
    try:
        seconds = parse_timedelta(value, default="seconds")
    except (TypeError, ValueError, KeyError):
        seconds = None
    if seconds is None or not seconds > 0:
        raise InputError(
            f"dask config streamrff.{key} must be a positive duration like '20s' or 20. Got {value!r}. "
            f"Fix it in your dask config or DASK_STREAMRFF__{key.upper().replace('-', '_')}."
        )
    return float(seconds)


def connect_timeout() -> float:
    """Seconds a connection attempt may take (dask config ``streamrff.connect-timeout``, default 20)."""
    return _seconds("connect-timeout")


def no_workers_timeout() -> float:
    """Seconds a job may wait without any worker (``streamrff.no-workers-timeout``, default 120)."""
    return _seconds("no-workers-timeout")


def parse_scheduler_address(address: str) -> str:
    """Check a scheduler address before any connection attempt; return it with its scheme.

    ``host:port`` means ``tcp://host:port``. A ``tcp://`` address while dask's
    config requires encryption is refused (it could never connect).

    Raises
    ------
    ClusterError
        For an address without a host or port, with an unknown scheme, or
        plain TCP when encryption is required.

    Examples
    --------
    >>> parse_scheduler_address("127.0.0.1:8786")
    'tcp://127.0.0.1:8786'
    >>> parse_scheduler_address("notanaddress")
    Traceback (most recent call last):
    ...
    streamrff.errors.ClusterError: Expected a scheduler address like tcp://HOST:PORT ... Got 'notanaddress': no port.
    """
    text = address.strip()
    with_scheme = text if "://" in text else f"tcp://{text}"
    scheme = with_scheme.split("://", 1)[0].lower()
    if scheme in _OTHER_SCHEMES:
        return with_scheme
    problem = None
    try:
        parts = urlsplit(with_scheme)
        port = parts.port
    except ValueError:
        parts, port, problem = None, None, "the port is not a number from 0 to 65535"
    if problem is None:
        if scheme not in ("tcp", "tls"):
            problem = f"unknown scheme {scheme!r} (use tcp:// or tls://)"
        elif not text or any(character.isspace() for character in text):
            problem = "empty or with spaces"
        elif not parts.hostname:
            problem = "no host"
        elif port is None:
            problem = "no port"
        elif parts.path not in ("", "/") or parts.query or parts.fragment:
            problem = "extra text after the port"
    if problem is not None:
        raise ClusterError(
            "Expected a scheduler address like tcp://HOST:PORT (e.g. tcp://127.0.0.1:8786). "
            f"Got {address!r}: {problem}."
        )
    if scheme == "tcp" and dask.config.get("distributed.comm.require-encryption", False):
        raise ClusterError(
            f"{address} is a plain tcp:// address, but dask's config requires encryption "
            "(distributed.comm.require-encryption). Use the scheduler's tls:// address with a client "
            "certificate (see deploy/tls/README.md), or unset that option."
        )
    return with_scheme


def _tls_context() -> ssl.SSLContext | None:
    from distributed import Security

    return Security().get_connection_args("client").get("ssl_context")


#: Largest first message read from a server while probing it. A scheduler's handshake is
#: about 60 bytes and its identity (asked without its worker list) a few hundred; anything
#: declaring more is not a Dask scheduler, and is refused before a buffer is allocated.
_MAX_PROBE_MESSAGE_BYTES = 2**20
#: Frames in one probe message: a handshake or identity is a single msgpack frame.
_MAX_PROBE_FRAMES = 64


class _NotDask(Exception):
    """The server's bytes do not follow Dask's TCP message framing."""


def _frame_message(message: dict[str, Any]) -> bytes:
    """``message`` framed as Dask's TCP comm writes it: one msgpack frame, uncompressed.

    Layout (distributed.comm.tcp): u64 length of what follows; u64 number of frames;
    a u64 length per frame; the frames.
    """
    import msgpack

    payload = msgpack.dumps(message, use_bin_type=True)
    header = struct.pack("<QQ", 1, len(payload))
    return struct.pack("<Q", len(header) + len(payload)) + header + payload


def _receive_exactly(connection: socket.socket, n_bytes: int, deadline: float) -> bytes:
    """``n_bytes`` from ``connection`` before ``deadline``; the buffer grows only with bytes received."""
    received = bytearray()
    while len(received) < n_bytes:
        connection.settimeout(max(deadline - time.monotonic(), 0.001))
        piece = connection.recv(min(n_bytes - len(received), 65536))
        if not piece:
            raise ConnectionResetError("the server closed the connection")
        received += piece
    return bytes(received)


def _receive_message(connection: socket.socket, deadline: float) -> Any:
    """Read and decode one Dask TCP message, refusing declared sizes above the probe's bounds."""
    import msgpack

    (total,) = struct.unpack("<Q", _receive_exactly(connection, 8, deadline))
    if not 16 <= total <= _MAX_PROBE_MESSAGE_BYTES:
        raise _NotDask(f"its first 8 bytes declare a message of {total:,} bytes")
    body = _receive_exactly(connection, total, deadline)
    (n_frames,) = struct.unpack_from("<Q", body)
    if not 1 <= n_frames <= _MAX_PROBE_FRAMES or 8 * (1 + n_frames) > total:
        raise _NotDask(f"its message declares {n_frames:,} frames")
    lengths = struct.unpack_from(f"<{n_frames}Q", body, 8)
    start = 8 * (1 + n_frames)
    if start + sum(lengths) != total:
        raise _NotDask("its frame lengths do not add up to the message length")
    try:
        # Only the first frame, plain msgpack: nothing a server sends is unpickled here.
        # use_list=False: a scheduler's identity has map keys that are arrays (msgpack lists are unhashable).
        return msgpack.loads(body[start : start + lengths[0]], raw=False, strict_map_key=False, use_list=False)
    except (ValueError, msgpack.UnpackException) as error:
        raise _NotDask(f"its message is not msgpack ({type(error).__name__})") from error


def _handshake(connection: socket.socket, deadline: float) -> Any:
    """Exchange Dask's handshake over ``connection`` and return the server's identity."""
    # The client's half first, as distributed.comm.core.connect does; a server that is not Dask
    # (an HTTP server) then answers with its own protocol and is told apart at once.
    # "pickle-protocol" is a field of Dask's handshake (the protocol the client could read; 5 is the
    # highest since Python 3.8). The probe never unpickles: it decodes plain msgpack only.
    ours = {"compression": None, "python": tuple(sys.version_info)[:3], "pickle-protocol": 5}
    connection.settimeout(max(deadline - time.monotonic(), 0.001))
    connection.sendall(_frame_message(ours))
    theirs = _receive_message(connection, deadline)
    if not isinstance(theirs, dict) or "pickle-protocol" not in theirs:
        raise _NotDask("its first message is not a Dask handshake")
    connection.settimeout(max(deadline - time.monotonic(), 0.001))
    connection.sendall(_frame_message({"op": "identity", "reply": True}))
    return _receive_message(connection, deadline)


def probe_scheduler(address: str, timeout: float) -> float:
    """Check that a Dask scheduler answers at a tcp:// or tls:// ``address``, all within ``timeout`` seconds.

    Within one deadline: connect (and the TLS handshake on tls://), exchange
    Dask's handshake, ask the server for its identity and read the answer.
    Every length the server declares is checked against small bounds before
    anything is allocated, and only plain msgpack is decoded, so a port that
    speaks another protocol (HTTP), sends garbage or a huge length, or goes
    silent after a byte fails at once or at the deadline with one line.

    Returns
    -------
    float
        Seconds left of ``timeout`` for opening the client.

    Raises
    ------
    ClusterError
        Naming ``address``: refused, silent, not Dask, or a Dask server that is
        not a scheduler (a worker's port).
    """
    parts = urlsplit(address)
    if parts.scheme not in ("tcp", "tls"):
        return timeout  # other transports are left to distributed
    deadline = time.monotonic() + timeout
    hint = "Check the address and that `dask scheduler` is running there"
    try:
        raw = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    except ConnectionRefusedError as error:
        raise ClusterError(f"Cannot reach the Dask scheduler at {address}: connection refused. {hint}.") from error
    except TimeoutError as error:
        raise ClusterError(f"Cannot reach the Dask scheduler at {address} within {timeout:g} s. {hint}.") from error
    except OSError as error:  # name resolution, no route
        raise ClusterError(
            f"Cannot reach the Dask scheduler at {address}: {error.strerror or error}. {hint}."
        ) from error
    connection: socket.socket = raw
    try:
        if parts.scheme == "tls":
            context = _tls_context()
            if context is None:
                return max(deadline - time.monotonic(), 0.0)  # connect() refuses tls:// without a certificate
            raw.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                connection = context.wrap_socket(
                    raw, server_hostname=parts.hostname if context.check_hostname else None
                )
            except ssl.SSLError:
                return max(deadline - time.monotonic(), 0.0)  # a certificate problem: distributed's Client reports it
        identity = _handshake(connection, deadline)
    except _NotDask as error:
        raise ClusterError(
            f"The server at {address} does not speak Dask's protocol ({error}), so it is not a Dask "
            f"scheduler. {hint}, and use the scheduler's port (8786 by default), not its dashboard's."
        ) from None
    except TimeoutError:
        raise ClusterError(
            f"The server at {address} accepted the connection but did not answer like a Dask scheduler within "
            f"{timeout:g} s (dask config streamrff.connect-timeout). {hint}."
        ) from None
    except (ConnectionError, ssl.SSLError, OSError) as error:
        raise ClusterError(
            f"The server at {address} closed the connection without answering like a Dask scheduler "
            f"({error.strerror or error}). {hint}."
        ) from None
    finally:
        connection.close()
    kind = identity.get("type") if isinstance(identity, dict) else None
    if kind != "Scheduler":
        found = f"a Dask {kind}" if isinstance(kind, str) and kind.isidentifier() else "a Dask server"
        raise ClusterError(
            f"The server at {address} is {found}, not a scheduler. Pass the scheduler's address "
            "(`dask scheduler` prints it), not a worker's or nanny's."
        )
    return max(deadline - time.monotonic(), 0.0)


def wait_for_result(future: Any, client: Any, poll: float = 1.0) -> Any:
    """``future.result()``, failing once the scheduler has had no worker for ``no_workers_timeout()`` s.

    Raises
    ------
    ClusterError
        Naming the scheduler, when no worker was connected for that long, or when the
        connection to the scheduler was lost during the job (it was stopped or killed).
    """
    limit = no_workers_timeout()
    without_workers_since: float | None = None
    while True:
        try:
            return future.result(timeout=poll)
        except TimeoutError:
            if future.done():  # finished just now, or the job's own TimeoutError
                return future.result()
        except (asyncio.CancelledError, concurrent.futures.CancelledError) as error:
            if getattr(error, "reason", None) != "scheduler-connection-lost" and client.status == "running":
                raise  # cancelled by someone else, on purpose
            raise ClusterError(
                f"Lost the connection to the Dask scheduler at {client.scheduler.address} during the job (it "
                "stopped, was killed or became unreachable); the job's output was not written. Restart the "
                "scheduler and its workers and run the command again (with --checkpoint, finished chunks are kept)."
            ) from None
        if client.scheduler_info().get("workers"):  # refreshed by the client every 2 s
            without_workers_since = None
            continue
        now = time.monotonic()
        without_workers_since = without_workers_since or now
        if now - without_workers_since >= limit:
            future.cancel()
            raise ClusterError(
                f"The Dask scheduler at {client.scheduler.address} has had no workers for {limit:g} s, so the job "
                "cannot finish. Start workers (`dask worker ADDRESS`) and run it again; raise dask config "
                "streamrff.no-workers-timeout to wait longer."
            )


#: Loggers of distributed that report a lost scheduler as tracebacks (its reconnection attempts, cancelled).
_LOST_SCHEDULER_LOGGERS = ("distributed.client",)


class _LostSchedulerReports(logging.Filter):
    """Drops distributed's reports of its cancelled reconnections: :func:`wait_for_result` says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        cancelled = (asyncio.CancelledError, concurrent.futures.CancelledError)
        if record.exc_info and isinstance(record.exc_info[1], cancelled):
            return False
        return not str(record.msg).startswith("Failed to reconnect to scheduler")


@contextlib.contextmanager
def connect(client: Any) -> Iterator[Any]:
    """Yield a ``distributed.Client`` for ``client`` (a Client, an address string or None).

    ``None`` yields None: the embedded local default (dask's threaded
    scheduler, one thread per core). An address string is checked first
    (``host:port`` or ``tcp://``/``tls://host:port``; a malformed one fails at
    once), then probed: connecting, Dask's handshake and the scheduler's first
    answer must all fit in one deadline, the dask config
    ``streamrff.connect-timeout`` (default 20 s; environment variable
    ``DASK_STREAMRFF__CONNECT_TIMEOUT``), and the Client gets what is left of it;
    else :class:`ClusterError` names the address (a server that does not speak
    Dask's protocol fails at once). The Client opened is closed on exit. While
    it is open, distributed's tracebacks of its attempts to reconnect to a lost
    scheduler are not logged: :func:`wait_for_result` reports the loss in one line.
    """
    if client is None:
        yield None
        return
    if isinstance(client, str):
        from distributed import Client  # here, not at the top: `streamrff --help` stays fast

        address = parse_scheduler_address(client)
        if address.startswith("tls://"):
            from distributed import Security

            if Security().get_connection_args("client").get("ssl_context") is None:
                raise ClusterError(
                    f"{client} is a TLS scheduler, but no client certificate is configured. Pass a "
                    "distributed.Client(address, security=Security(...)) as client, or set "
                    "DASK_DISTRIBUTED__COMM__TLS__CA_FILE / __CLIENT__CERT / __CLIENT__KEY "
                    "(see deploy/tls/README.md)."
                )
        timeout = connect_timeout()
        left = probe_scheduler(address, timeout)  # one deadline: the client gets what the probe left
        try:
            if left <= 0:
                raise TimeoutError("the probe used the whole deadline")
            opened = Client(address, timeout=f"{left}s", set_as_default=False)
        except (OSError, TimeoutError) as error:
            raise ClusterError(
                f"Cannot reach the Dask scheduler at {client} within {timeout:g} s "
                f"({type(error).__name__}). Check the address and that `dask scheduler` is running there."
            ) from error
        quiet = _LostSchedulerReports()
        for name in _LOST_SCHEDULER_LOGGERS:
            logging.getLogger(name).addFilter(quiet)
        try:
            yield opened
        finally:
            lost = opened.status != "running"  # its reconnection is cancelled later, up to the process's exit
            try:
                opened.close()
            finally:
                for name in _LOST_SCHEDULER_LOGGERS if not lost else ():
                    logging.getLogger(name).removeFilter(quiet)
        return
    if hasattr(client, "compute") and hasattr(client, "scheduler"):
        yield client
        return
    raise InputError(
        f"client must be None, a distributed.Client or a scheduler address like 'tcp://host:8786'. "
        f"Got {type(client).__name__}."
    )
