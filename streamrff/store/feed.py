"""Feeding a store from a stream read chunk by chunk (``watch --store``): each bucket appended once complete.

A reader of a growing array (``streamrff watch``) hands its rows over as it reads them; the feed
keeps the rows since the last bucket edge (at most one bucket and one chunk) and appends each
bucket through :meth:`SketchStore.append` the moment its last row arrives. A feed that starts, or
resumes, inside a bucket reads that bucket's earlier rows from the source first, so a restarted
watcher stores its buckets whole; a bucket already stored with the same rows changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["BucketFeed"]


class BucketFeed:
    """Append the complete row buckets of a stream to ``store`` as its rows arrive.

    Parameters
    ----------
    store : SketchStore
        A store of row buckets.
    read_rows : callable
        ``read_rows(start, stop)``: rows ``start..stop-1`` of the stream (to complete a bucket the
        feed starts inside).
    **options
        Job options of each append (``on_invalid``, ``client``, ...).

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> from streamrff.store.feed import BucketFeed
    >>> X = np.random.default_rng(0).normal(size=(250, 2))
    >>> rff = srf.RFF(n_features=16, bandwidth=1.0).fit(X)
    >>> store = srf.SketchStore.create(os.path.join(tempfile.mkdtemp(), "s"), rff, bucket=100)
    >>> feed = BucketFeed(store, lambda start, stop: X[start:stop])
    >>> feed.add(0, X[:70]), feed.add(70, X[70:130]), feed.add(130, X[130:250])
    ((), (0,), (1,))
    """

    def __init__(self, store: Any, read_rows: Callable[[int, int], Any], **options: Any) -> None:
        if store.bucket_seconds:
            raise InputError(
                f"{store.path} has time buckets; a feed of rows (watch --store) takes a store of row buckets "
                "(store create --bucket ROWS). Append time buckets with 'streamrff store append'."
            )
        self.store = store
        self._read_rows = read_rows
        self._options = options
        self._start: int | None = None
        self._parts: list[np.ndarray] = []
        self._held = 0

    def add(self, first: int, rows: Any) -> tuple[int, ...]:
        """Take rows ``first..`` of the stream; returns the buckets appended now."""
        size = self.store.bucket_rows
        if self._start is None or first != self._start + self._held:  # the first rows, or a jump: restart
            edge = first - first % size
            self._parts = [np.asarray(self._read_rows(edge, first))] if first > edge else []
            self._start, self._held = edge, first - edge
        rows = np.asarray(rows)
        self._parts.append(rows)
        self._held += rows.shape[0]
        complete = self._held - self._held % size
        if not complete:
            return ()
        block = np.concatenate(self._parts)
        result = self.store.append(block[:complete], start=self._start, **self._options)
        rest = block[complete:]
        self._parts, self._held = ([rest] if rest.shape[0] else []), rest.shape[0]
        self._start += complete
        return tuple(result.appended) + tuple(result.unchanged)
