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

    path = Path(os.path.realpath(path))  # a symbolic link to the folder or the file is the same lock
    handle = _locked_handle(path, record_holder, fcntl)
    owner_link = None
    try:
        try:
            if record_holder:  # ours now: whatever a dead holder left is replaced
                owner_link = _claim_owner_link(path, handle, fcntl)
                handle.seek(0)
                handle.truncate()
                handle.write(json.dumps(holder_record()))
                handle.flush()
            handle.seek(0)
            yield handle
        finally:
            if owner_link is not None:
                with contextlib.suppress(OSError):
                    owner_link.unlink()
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def _locked_handle(path: Path, record_holder: bool, fcntl: Any) -> IO[str]:
    """Open ``path`` and take its lock; retried while the file was replaced or removed meanwhile."""
    while True:
        handle = open(path, "a+" if record_holder else "r")  # noqa: SIM115 - the caller closes it
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(handle) if record_holder else None
            handle.close()
            raise LockHeld(path, holder) from None
        if not record_holder or _same_file(handle, path):
            return handle
        handle.close()  # the name now points to another file (removed or replaced): lock that one


def _same_file(handle: IO[str], path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _claim_owner_link(path: Path, handle: IO[str], fcntl: Any) -> Path | None:
    """Refuse if an earlier owner still holds its lock under its own link name; then leave ours.

    Each owner hard-links its lock file as ``NAME.owner-PID``: the same file, so the same lock.
    Deleting ``NAME`` while the owner runs leaves the link, and a second process that locks a
    new ``NAME`` finds the held link here and gives its lock back (issue 49 item 4).
    """
    import glob

    for other in path.parent.glob(f"{glob.escape(path.name)}.owner-*"):
        try:
            other_handle = open(other)  # noqa: SIM115 - closed below
        except OSError:
            continue
        with other_handle:
            if _same_file(other_handle, path):
                continue  # a link to our own file
            try:
                fcntl.flock(other_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LockHeld(path, _read_holder(other_handle)) from None
            with contextlib.suppress(OSError):  # left by a dead owner
                other.unlink()
            fcntl.flock(other_handle, fcntl.LOCK_UN)
    link = path.with_name(f"{path.name}.owner-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    try:
        os.link(path, link)
    except OSError:  # a file system without hard links: the lock file alone
        return None
    return link
