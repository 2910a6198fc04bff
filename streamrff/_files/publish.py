"""Publish a completely written local file or directory under its final name in one step.

Every output the library and the CLI write (sketch directories and zips, label and
score arrays, figures) is written under a temporary name beside its target and then
published here, so a reader never sees a half-written output and two writers never
silently replace each other's result:

- without ``overwrite`` the final step fails with :class:`FileExistsError` if the
  target appeared since the job started (another writer won the race). On Linux this
  is ``renameat2(RENAME_NOREPLACE)``; elsewhere a file is hard-linked into place
  (``link`` never replaces) and a directory renamed (``rename`` never replaces a
  non-empty directory, and outputs are never empty);
- with ``overwrite`` the last writer wins whole: a file is ``os.replace``-d; a
  directory is swapped with the old one by ``renameat2(RENAME_EXCHANGE)`` (the target
  name never goes missing), or else the old one is renamed aside first.

Object stores have no rename: see :func:`streamrff._files.signed.write_sketch` for the
guarantee given there.

A full, read-only or forbidden output place is found before a job starts
(:func:`check_output_location`: a probe file, and the free space ``statvfs``
reports against the output's declared size) and, if it still happens during a
write, reported as one :class:`~streamrff.errors.OutputError` line
(:func:`output_errors`) after the staging copy is removed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError

__all__ = [
    "publish", "publish_text", "staging_path", "remove_path", "check_output_location", "output_errors",
    "OUTPUT_ERRNOS",
]  # fmt: skip

#: What each OS error that means "this place cannot take the output" tells the user to do.
OUTPUT_ERRNOS = {
    errno.ENOSPC: "the file system is full. Free space there or choose an output on another file system.",
    errno.EDQUOT: "the disk quota is exhausted. Free space there or choose an output on another file system.",
    errno.EROFS: "the file system is read-only. Choose an output on a writable file system.",
    errno.EACCES: "permission denied. Choose an output in a folder you may write to.",
    errno.EPERM: "operation not permitted. Choose an output in a folder you may write to.",
}

_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def staging_path(target: str | os.PathLike[str], suffix: str = "") -> Path:
    """A unique hidden name beside ``target`` to write to before :func:`publish`."""
    path = Path(target)
    return path.parent / f".{path.name}.partial-{uuid.uuid4().hex}{suffix}"


def remove_path(path: str | os.PathLike[str]) -> None:
    """Remove a file or a directory tree if it exists (cleanup; errors ignored)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def as_output_error(error: OSError, target: str | os.PathLike[str]) -> OutputError | None:
    """The one-line :class:`OutputError` for a full, read-only or forbidden place; None for other errors."""
    if isinstance(error, OutputError):
        return error
    advice = OUTPUT_ERRNOS.get(error.errno)  # type: ignore[arg-type]
    return None if advice is None else OutputError(f"Cannot write {os.fspath(target)}: {advice}", error.errno)


@contextmanager
def output_errors(target: str | os.PathLike[str]) -> Iterator[None]:
    """Turn ENOSPC, EDQUOT, EROFS, EACCES and EPERM raised inside the block into one :class:`OutputError`.

    Examples
    --------
    >>> try:
    ...     with output_errors("/sys/out.txt"):
    ...         open("/sys/out.txt", "w")
    ... except OutputError as error:
    ...     print(error)
    Cannot write /sys/out.txt: permission denied. Choose an output in a folder you may write to.
    """
    try:
        yield
    except OSError as error:
        mapped = as_output_error(error, target)
        if mapped is None or mapped is error:
            raise
        raise mapped from error


def check_output_location(target: str | os.PathLike[str], required_bytes: int = 0) -> None:
    """Before a job starts: the folder of ``target`` takes a new file and, where it says, has room.

    A probe file is created beside ``target`` and removed (so a read-only file
    system, a folder without write permission or a file system with no inode left
    fails now, not after the job). If the file system reports its size
    (``statvfs``), fewer free bytes than ``required_bytes`` fail too. A missing
    folder is left to the writer, which reports it.

    Raises
    ------
    OutputError
        With ``errno`` ENOSPC, EDQUOT, EROFS, EACCES or EPERM.

    Examples
    --------
    >>> import os, tempfile
    >>> check_output_location(os.path.join(tempfile.mkdtemp(), "out.sketch"), required_bytes=1024)
    >>> try:
    ...     check_output_location("/sys/out.sketch")
    ... except OutputError as error:
    ...     print(errno.errorcode[error.errno])
    EACCES
    >>> try:
    ...     check_output_location(os.path.join(tempfile.mkdtemp(), "huge.sketch"), required_bytes=2**60)
    ... except OutputError as error:
    ...     print(errno.errorcode[error.errno], str(error).split(": ")[1].split(" but")[0])
    ENOSPC it needs about 1 EiB
    """
    path = Path(os.path.abspath(target))
    folder = path.parent
    if not folder.is_dir():
        return
    probe = staging_path(path, suffix=".probe")
    with output_errors(path):
        descriptor = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(descriptor)
        os.unlink(probe)
    if required_bytes <= 0:
        return
    try:
        status = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs (Windows) or the file system will not say
        return
    if status.f_blocks == 0:  # pseudo file systems report no size: nothing to compare with
        return
    free = status.f_bavail * status.f_frsize
    if free < required_bytes:
        raise OutputError(
            f"Cannot write {path}: it needs about {_size(required_bytes)} but {folder} has {_size(free)} free. "
            "Free space there or choose an output on another file system.",
            errno.ENOSPC,
        )


def _size(n_bytes: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n_bytes < 1024:
            return f"{n_bytes:.3g} {unit}"
        n_bytes /= 1024
    return f"{n_bytes:.3g} EiB"


def _renameat2(source: Path, target: Path, flags: int) -> bool:
    """``renameat2(source, target, flags)``; False when the system or file system lacks it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl without it
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if call(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # not supported here (e.g. some network file systems): use the fallback
    raise OSError(code, os.strerror(code), os.fspath(target))


def _exists_error(target: Path) -> FileExistsError:
    return FileExistsError(
        f"{target} already exists: another process wrote it while this job ran. Choose another "
        "output or pass overwrite=True (CLI: --overwrite)."
    )


def publish(staging: str | os.PathLike[str], target: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Move the complete file or directory ``staging`` to ``target`` in one atomic step.

    Parameters
    ----------
    staging : str or PathLike
        A finished file or directory in the same directory as ``target`` (see
        :func:`staging_path`). It is gone after a successful call; after a failed
        one it is left for the caller to remove.
    target : str or PathLike
        The final name.
    overwrite : bool, default=False
        Replace an existing ``target`` (the last writer wins whole). Without it
        nothing is ever replaced, even if ``target`` appeared a moment ago.

    Raises
    ------
    FileExistsError
        If ``target`` exists and ``overwrite`` is False.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> staging = staging_path(os.path.join(folder, "out.txt"))
    >>> _ = staging.write_text("first")
    >>> publish(staging, os.path.join(folder, "out.txt"))
    >>> staging = staging_path(os.path.join(folder, "out.txt"))
    >>> _ = staging.write_text("second")
    >>> try:
    ...     publish(staging, os.path.join(folder, "out.txt"))
    ... except FileExistsError:
    ...     print("refused")
    refused
    """
    staging, target = Path(staging), Path(target)
    if overwrite:
        _replace(staging, target)
        return
    try:
        if _renameat2(staging, target, _RENAME_NOREPLACE):
            return
        if staging.is_dir():
            os.rename(staging, target)  # never replaces a non-empty directory; outputs are never empty
        else:
            os.link(staging, target)  # never replaces anything
            os.unlink(staging)
    except FileExistsError:
        raise _exists_error(target) from None
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise _exists_error(target) from None
        raise


def _replace(staging: Path, target: Path) -> None:
    if not staging.is_dir():
        os.replace(staging, target)
        return
    for _ in range(100):  # each round loses only to a writer that published meanwhile
        try:
            if target.exists() and _renameat2(staging, target, _RENAME_EXCHANGE):
                remove_path(staging)  # now the old output
                return
            os.rename(staging, target)
            return
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise
        retired = staging_path(target, suffix=".old")
        try:
            os.rename(target, retired)
        except FileNotFoundError:
            continue
        remove_path(retired)
    raise OSError(f"Could not replace {target}: other writers kept replacing it. Retry.")


def publish_text(target: str | os.PathLike[str], text: str, overwrite: bool = False) -> None:
    """Write ``text`` to ``target`` through a staging file and :func:`publish` (reports, JSON).

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "report.json")
    >>> publish_text(path, "{}")
    >>> open(path).read()
    '{}'
    """
    staging = staging_path(target)
    try:
        with output_errors(target):
            staging.write_text(text)
            publish(staging, target, overwrite)
    finally:
        remove_path(staging)
