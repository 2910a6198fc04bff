"""The options every job shares, in one place: cluster, storage, chunking, checkpoint, invalid rows, progress, fan-in,
retries, missing chunks and the task cap.

A job's own signature names only what is its own (the map, ``moments``, ``n_permutations``, ...) and
takes these as keyword arguments (``**options``). Like :func:`sklearn.config_context` and
:func:`dask.config.set`, :func:`job_options` sets them for a block of code; a keyword given to the job
itself wins over the block's value. The command line builds one :class:`JobOptions` from its flags.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from ..errors import InputError
from ..typing import StorageOptions

__all__ = ["JobOptions", "job_options", "current_job_options", "JOB_OPTIONS", "worker_storage_options"]

#: What ``on_invalid`` may be: fail on NaN/inf rows naming the chunk, or skip and count them.
#: (``"require"`` fails like "raise" without suggesting to skip: for analyses that need every row.)
ON_INVALID = ("raise", "skip", "require")


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """The options every job shares, checked once when they are made.

    Parameters
    ----------
    client : None, distributed.Client or str, default=None
        None runs on the embedded local default (threads, one per core); a
        Client or a scheduler address (``tcp://host:8786``) runs on that cluster.
    storage_options : dict, optional
        fsspec options for URL sources and checkpoints. Never logged.
    sample_dim : str, optional
        For a DataArray, the sample dimension (default: its first).
    chunk_rows : int, optional
        Rows per task. By default in-memory arrays are split by
        :func:`~streamrff.engine.auto_chunk_rows` (about ``2**27 / D`` rows:
        enough to amortise scheduling, small enough for the worker's memory),
        and chunked sources keep their own chunks unless one is too large for a worker.
    checkpoint : str or PathLike, optional
        Directory or URL for per-chunk partial sketches: a rerun computes only
        the chunks without a valid partial (after an interruption, rows
        appended to a zarr array, or chunks rewritten upstream). The folder
        belongs to one source (another is refused with
        :class:`~streamrff.CheckpointMismatchError`); a partial is reused only
        for the same unchanged rows (see :mod:`streamrff.engine.checkpoint`).
    on_invalid : {"raise", "skip"}, default="raise"
        What to do with NaN/inf rows: fail naming the chunk and rows, or skip
        them and count them in ``result.n_invalid``.
    progress : bool, default=False
        Show a progress bar (dask's for local runs, distributed's on a cluster).
    split_every : int, default=8
        Fan-in of the merge tree.
    retries : int, default=3
        Retries of a failed task on a cluster (a lost worker's tasks are rerun).
    allow_missing_chunks : bool, optional
        Read zarr chunks absent from their store as the fill value, on
        purpose. By default (None: the dask config key
        ``streamrff.allow-missing-chunks``, else False) a missing chunk is a
        :class:`~streamrff.SourceError` naming it, before any work where the
        store lists its keys, else when a task reaches it.
    max_tasks : int, optional
        Most tasks of the job (default: the dask config key
        ``streamrff.max-tasks``, else 10 000). A store of more chunks has
        consecutive chunks grouped into one task, which reads them one at a
        time; the result differs only by float64 rounding.

    Examples
    --------
    >>> from streamrff.engine import JobOptions
    >>> JobOptions(split_every=4).replace(progress=True)
    JobOptions(client=None, storage_options=None, sample_dim=None, chunk_rows=None, checkpoint=None, \
on_invalid='raise', progress=True, split_every=4, retries=3, allow_missing_chunks=None, max_tasks=None)
    """

    client: Any = None
    storage_options: StorageOptions = None
    sample_dim: str | None = None
    chunk_rows: int | None = None
    checkpoint: str | os.PathLike | None = None
    on_invalid: str = "raise"
    progress: bool = False
    split_every: int = 8
    retries: int = 3
    allow_missing_chunks: bool | None = None
    max_tasks: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.split_every, bool) or not isinstance(self.split_every, int) or self.split_every < 2:
            raise InputError(f"split_every must be an integer >= 2. Got {self.split_every!r}.")
        if self.on_invalid not in ON_INVALID:
            raise InputError(f"on_invalid must be 'raise' or 'skip'. Got {self.on_invalid!r}.")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise InputError(f"retries must be an integer >= 0. Got {self.retries!r}.")
        if not isinstance(self.progress, bool):
            raise InputError(f"progress must be True or False. Got {self.progress!r}.")
        if self.storage_options is not None and not isinstance(self.storage_options, dict):
            raise InputError(
                f"storage_options must be a dict of fsspec options (e.g. {{'anon': True}}). "
                f"Got {type(self.storage_options).__name__}."
            )
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, os.PathLike)):
            raise InputError(f"checkpoint must be a directory path or URL. Got {type(self.checkpoint).__name__}.")
        if self.max_tasks is not None and (
            isinstance(self.max_tasks, bool) or not isinstance(self.max_tasks, int) or self.max_tasks < 1
        ):
            raise InputError(f"max_tasks must be a positive integer (CLI --max-tasks). Got {self.max_tasks!r}.")

    def replace(self, **given: Any) -> JobOptions:
        """These options with ``given`` ones replaced (checked); an unknown name is a :class:`TypeError`."""
        unknown = sorted(set(given) - set(JOB_OPTIONS))
        if unknown:
            raise TypeError(
                f"Unknown job option {unknown[0]!r}. Expected one of: {', '.join(JOB_OPTIONS)} "
                "(see streamrff.engine.JobOptions)."
            )
        return dataclasses.replace(self, **given) if given else self

    def as_dict(self) -> dict[str, Any]:
        """The options as keyword arguments of a job (values as they are: a client is not copied)."""
        return {name: getattr(self, name) for name in JOB_OPTIONS}

    @property
    def checkpoint_path(self) -> str | None:
        return None if self.checkpoint is None else os.fspath(self.checkpoint)


#: The names of the shared job options, in the order :class:`JobOptions` documents them.
JOB_OPTIONS = tuple(field.name for field in dataclasses.fields(JobOptions))

#: The options in force (:func:`job_options`); frozen, so one default instance is safe to share.
_CURRENT: contextvars.ContextVar[JobOptions] = contextvars.ContextVar(
    "streamrff_job_options", default=JobOptions()  # noqa: B039 - JobOptions is frozen
)


def current_job_options(**given: Any) -> JobOptions:
    """The job options in force (:func:`job_options`), with the keywords a job was given on top.

    Examples
    --------
    >>> from streamrff.engine import current_job_options, job_options
    >>> with job_options(split_every=4):
    ...     current_job_options(progress=False).split_every
    4
    """
    return _CURRENT.get().replace(**given)


@contextlib.contextmanager
def job_options(**options: Any) -> Iterator[JobOptions]:
    """Set job options for every job run in the block (nested blocks add to the outer one).

    Parameters
    ----------
    **options
        Any of :class:`JobOptions`' fields.

    Yields
    ------
    JobOptions
        The options in force inside the block.

    Raises
    ------
    TypeError
        On an unknown option name.
    InputError
        On a bad value (named, with what is expected).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(1_000, 3)).astype("float32")
    >>> with srf.job_options(chunk_rows=250, split_every=2):
    ...     s = srf.sketch(X, srf.RFF(n_features=32, bandwidth=1.0))
    >>> s.count
    1000
    """
    token = _CURRENT.set(current_job_options(**options))
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)


#: Storage options that already say how to authenticate: the workers use them as given.
_CREDENTIAL_OPTIONS = ("key", "secret", "token", "anon", "username", "password")


def _with_client_deadlines(options: StorageOptions) -> StorageOptions:
    """``options`` whose ``config_kwargs`` are completed with the client process's S3 defaults (its deadlines).

    fsspec's configuration of this process (``fsspec.config.conf["s3"]``: what ``streamrff`` installs, a
    ``~/.config/fsspec/s3.json``, ``FSSPEC_S3_*``) gives every S3 request of the client its timeouts and
    attempts; a worker reads its own configuration, so they travel in the options. The user's keys win.
    """
    import fsspec.config

    defaults = fsspec.config.conf.get("s3", {}).get("config_kwargs")
    given = (options or {}).get("config_kwargs")
    if not isinstance(defaults, dict) or not defaults or (given is not None and not isinstance(given, dict)):
        return options
    return {**(options or {}), "config_kwargs": {**defaults, **(given or {})}}


def worker_storage_options(url: Any, storage_options: StorageOptions, client: Any) -> StorageOptions:
    """``storage_options`` for ``url`` as cluster workers need them: the client's S3 deadlines and credentials.

    Workers are other processes, often on other machines, and do not share
    the client's environment, profile or fsspec configuration. When
    ``client`` is a cluster and ``url`` is an ``s3://`` URL, the
    ``config_kwargs`` the client's own requests use by default (the
    deadlines ``streamrff`` installs: connect and read timeouts, attempts)
    are written into the options the tasks carry, under the user's own
    ``config_kwargs``, so a worker's request to a store that never answers
    ends as the client's does. When the options name no credentials, the
    credentials the client resolves (environment, profile or config file,
    as botocore finds them), its region and an endpoint set in the
    environment are written there too. They are never logged: the sources
    and checkpoints that hold them keep them out of their ``repr``. Anything
    else is returned unchanged; so are the credentials when the client
    finds none (its own first read then fails in one line saying how to
    pass them).

    Examples
    --------
    >>> from streamrff.engine import worker_storage_options
    >>> options = {"anon": True, "config_kwargs": {"read_timeout": 60}}
    >>> worker_storage_options("s3://bucket/x.zarr", options, "tcp://127.0.0.1:8786")["config_kwargs"]["read_timeout"]
    60
    >>> worker_storage_options("data.zarr", None, "tcp://127.0.0.1:8786") is None
    True
    """
    if client is None or not isinstance(url, (str, os.PathLike)) or not os.fspath(url).startswith(("s3://", "s3a://")):
        return storage_options
    shipped = _with_client_deadlines(storage_options)
    options = dict(shipped or {})
    if any(options.get(name) for name in _CREDENTIAL_OPTIONS):
        return shipped
    import botocore.session  # s3fs's own dependency (through aiobotocore)

    session = botocore.session.Session(profile=options.pop("profile", None))
    credentials = session.get_credentials()
    if credentials is None:
        return shipped
    frozen = credentials.get_frozen_credentials()
    options.update(key=frozen.access_key, secret=frozen.secret_key)
    if frozen.token:
        options["token"] = frozen.token
    client_kwargs = dict(options.get("client_kwargs") or {})
    region = session.get_config_variable("region")
    if region and "region_name" not in client_kwargs:
        client_kwargs["region_name"] = region
        options["client_kwargs"] = client_kwargs
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in options and "endpoint_url" not in client_kwargs:
        options["endpoint_url"] = endpoint
    return options
