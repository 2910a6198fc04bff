"""One owner at a time: an exclusive, non-blocking lock on a local file, released when its holder dies.

A checkpoint folder (its ``source.json``) and a drift monitor's state (a lock file
beside it) are locked this way while a job or a watcher runs. The lock is
``fcntl.flock``: the kernel releases it when the holding process ends, however it
ends (kill -9 included), so a lock left by a dead process never blocks the next
one, which takes it over at once. A lock file may record its holder (host, process
id, start time) so that the process refused can name it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["LockHeld", "exclusive_lock", "holder_record", "describe_holder"]


class LockHeld(Exception):
    """The lock is held by another running process; ``holder`` is what it recorded (or None)."""

    def __init__(self, path: Path, holder: dict[str, Any] | None) -> None:
        super().__init__(f"{path} is locked by {describe_holder(holder)}")
        self.path = path
        self.holder = holder


def holder_record() -> dict[str, Any]:
    """Who this process is, as a lock file records it: host, process id and start time (UTC)."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": since}


def describe_holder(holder: dict[str, Any] | None) -> str:
    """``"process 1234 on host-a (since 2026-...)"``, or ``"another process"`` when nothing was recorded."""
    if not isinstance(holder, dict) or "pid" not in holder:
        return "another process"
    since = f" (since {holder['since']})" if holder.get("since") else ""
    return f"process {holder['pid']} on {holder.get('host', 'an unknown host')}{since}"


def _read_holder(handle: IO[str]) -> dict[str, Any] | None:
    handle.seek(0)
    try:
        holder = json.loads(handle.read(1 << 12))
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str], record_holder: bool = False) -> Iterator[IO[str]]:
    """Hold an exclusive lock on the file ``path`` for the ``with`` block; refuse at once if it is held.

    Parameters
    ----------
    path : str or PathLike
        The file to lock. With ``record_holder`` it is a lock file of its own
        (created if missing, its content replaced by this process's
        :func:`holder_record`); without, an existing file whose content is left
        as it is (the handle, open for reading, is yielded).
    record_holder : bool, default=False

    Raises
    ------
    LockHeld
        If another process holds the lock (with what that process recorded).

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), ".state.lock")
    >>> with exclusive_lock(path, record_holder=True):
    ...     try:
    ...         with exclusive_lock(path, record_holder=True):
    ...             pass
    ...     except LockHeld as error:
    ...         print(error.holder["pid"] == os.getpid())
    True
    >>> with exclusive_lock(path, record_holder=True):  # released: taken again
    ...     pass
    """
    import fcntl

    path = Path(path)
    handle = open(path, "a+" if record_holder else "r")  # noqa: SIM115 - closed below, after the unlock
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockHeld(path, _read_holder(handle) if record_holder else None) from None
        try:
            if record_holder:  # ours now: whatever a dead holder left is replaced
                handle.seek(0)
                handle.truncate()
                handle.write(json.dumps(holder_record()))
                handle.flush()
            handle.seek(0)
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()
