"""One BLAS thread inside every per-chunk kernel, so that a sketch does not depend on the machine.

A multi-threaded BLAS may split a product differently for different thread
counts, and OpenBLAS's Haswell and Zen kernels then round float32 GEMM, GEMV
and SYRK results differently (a second moment moved by 1.4e-5 relative
between 1 and 2 threads). The same rows in the same chunks must give the same
sketch on a 2-core laptop and on a 64-core worker, from the engine or in
memory, so every kernel whose result enters a sketch, a fitted map or a label
runs under :func:`single_blas_thread`. Tasks already run one per core, so a
threaded BLAS inside them would only oversubscribe the cores.

How. OpenBLAS built with pthreads (the one in numpy's and scipy's wheels) has
one thread count per process; even ``openblas_set_num_threads_local`` sets it
for every thread. So the limit is reference counted: the first kernel to
enter sets every OpenBLAS of the process to one thread and the last to leave
restores the count it found; a thread that enters while another is inside
costs a lock and a counter. The counts are set through the libraries' own
functions, not threadpoolctl's ``threadpool_limits``: in threadpoolctl 3.8
only the first thread to set an OpenBLAS limit may change it and "other
threads silently do nothing", which in a Dask worker thread would make the
limit a no-op. MKL's count is per thread (``MKL_Set_Num_Threads_Local``), set
on every entry. The libraries are numpy's and scipy's (numba's ``np.dot``
calls scipy's BLAS through ``scipy.linalg.cython_blas``), both loaded before
they are looked up. Other BLAS libraries (BLIS, Accelerate, OpenMP builds of
OpenBLAS) are left as they are.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import numpy as np

__all__ = ["one_blas_thread", "single_blas_thread", "tile_column_sums"]

_Function = TypeVar("_Function", bound=Callable[..., Any])

_lock = threading.Lock()
_depth = 0
_restore: list[tuple[Callable[[int], Any], int]] = []


class _Libraries:
    """ctypes entry points of the process's BLAS libraries, found once."""

    def __init__(self) -> None:
        import numpy  # noqa: F401  (load numpy's BLAS)
        import scipy.linalg.cython_blas  # noqa: F401  (load the BLAS that numba's np.dot calls)
        from threadpoolctl import threadpool_info

        #: (get, set) pairs of process-wide counts: OpenBLAS with pthreads.
        self.process_wide: list[tuple[Callable[[], int], Callable[[int], Any]]] = []
        #: setters of per-thread counts that return the previous one: MKL.
        self.per_thread: list[Callable[[int], int]] = []
        for entry in threadpool_info():
            library = ctypes.CDLL(entry["filepath"])
            if entry["internal_api"] == "openblas" and entry.get("threading_layer") == "pthreads":
                get, set_ = (
                    _symbol(library, name) for name in ("openblas_get_num_threads", "openblas_set_num_threads")
                )
                if get is not None and set_ is not None:
                    set_.argtypes = [ctypes.c_int]
                    self.process_wide.append((get, set_))
            elif entry["internal_api"] == "mkl":
                set_local = getattr(library, "MKL_Set_Num_Threads_Local", None)
                if set_local is not None:
                    set_local.argtypes = [ctypes.c_int]
                    self.per_thread.append(set_local)


def _symbol(library: ctypes.CDLL, name: str) -> Any:
    # scipy-openblas wheels prefix their symbols with scipy_; ILP64 builds add a 64_ suffix.
    for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
        function = getattr(library, f"{prefix}{name}{suffix}", None)
        if function is not None:
            return function
    return None


@functools.cache
def _libraries() -> _Libraries:
    return _Libraries()


class _OneBlasThread:
    """The context of :func:`one_blas_thread`: a class rather than a generator, so that entering and leaving
    costs about a microsecond (a monitor's one-row update holds it once per row)."""

    __slots__ = ("_previous",)

    def __enter__(self) -> None:
        global _depth
        libraries = _libraries()
        with _lock:
            if _depth == 0:
                # a library already on one thread (OPENBLAS_NUM_THREADS=1, an outer limit) is left alone
                _restore[:] = [(set_, count) for get, set_ in libraries.process_wide if (count := get()) != 1]
                for set_, _ in _restore:
                    set_(1)
            _depth += 1
        self._previous = [(set_local, set_local(1)) for set_local in libraries.per_thread] or ()

    def __exit__(self, *exception: object) -> None:
        global _depth
        for set_local, count in self._previous:
            set_local(count)
        with _lock:
            _depth -= 1
            if _depth == 0:
                for set_, count in _restore:
                    set_(count)


def one_blas_thread() -> AbstractContextManager[None]:
    """Context manager form of :func:`single_blas_thread`, for a block of code.

    The engine holds it around a local compute, so that the kernels inside
    only count in and out.
    """
    return _OneBlasThread()


def single_blas_thread(function: _Function) -> _Function:
    """Run ``function`` with every BLAS library of the process on one thread.

    Re-entrant and safe to call from many threads at once (see the module
    docstring). Use it on every function whose BLAS results must not depend
    on the thread count.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff._base.blas import single_blas_thread
    >>> gram = single_blas_thread(lambda a: a.T @ a)(np.eye(3, dtype=np.float32))
    >>> gram.shape
    (3, 3)
    """

    @functools.wraps(function)
    def limited(*args: Any, **kwargs: Any) -> Any:
        with one_blas_thread():
            return function(*args, **kwargs)

    return limited  # type: ignore[return-value]


#: Rows that one float32 GEMV sums before the float64 accumulation (see tile_column_sums).
_SUM_SEGMENT_ROWS = 256


def tile_column_sums(features: np.ndarray) -> np.ndarray:
    """Column sums of a feature tile of shape (..., rows, columns), in float64.

    Like the second moment's rank-k update, the rows are reduced in the
    features' precision, by GEMVs over segments of at most 256 rows, and the
    segments are accumulated in float64. For float32 features the GEMV's
    rounding (measured 3e-9 to 1.4e-8 norm-wise per 256 rows, d = 32,
    D = 1024) stays below that of the float32 features themselves (up to 7e-8
    against float64 math), at an eighth of the cost of an exact float64 sum:
    numpy's float32 to float64 cast runs at ~0.4 ns per element.
    """
    rows, columns = features.shape[-2:]
    lead = features.shape[:-2]
    whole = rows - rows % _SUM_SEGMENT_ROWS
    ones = _segment_ones(features.dtype.char)
    if whole == rows == _SUM_SEGMENT_ROWS:  # the common case: one segment, one batched GEMV
        return np.matmul(ones, features).astype(np.float64)
    total = np.zeros((*lead, columns))
    if whole:
        segments = features[..., :whole, :].reshape(*lead, whole // _SUM_SEGMENT_ROWS, _SUM_SEGMENT_ROWS, columns)
        total += np.matmul(ones, segments).sum(axis=-2, dtype=np.float64)
    if whole < rows:
        total += np.matmul(ones[: rows - whole], features[..., whole:, :])
    return total


@functools.lru_cache(maxsize=4)
def _segment_ones(dtype_char: str) -> np.ndarray:
    ones = np.ones(_SUM_SEGMENT_ROWS, dtype=dtype_char)
    ones.setflags(write=False)
    return ones
