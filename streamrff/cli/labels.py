"""Class labels on the command line (``sketch --classes``, ``ridge --classify``): ``--classes`` as numbers or
text, label arrays read from zarr, and their one-vs-rest targets.

A multi-site classification encodes labels at each site (``sketch --target LABELS
--classes a,b,c``) and decodes scores at the coordinator (``ridge SKETCH ...
--classify --classes a,b,c``): both ends must sort the classes the same way
without seeing each other's data. So :func:`classes_of` reads ``--classes``
by one rule that does not depend on the labels: integers if every label is one,
else numbers if every label is one, else text; and a site's labels must be of
that kind (numbers or text).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .options import UsageError


def classes_of(texts: Sequence[str]) -> Any:
    """The sorted classes of ``--classes``: int64 if every label is an integer, else float64 if every one is a
    number, else text.

    Examples
    --------
    >>> from streamrff.cli.labels import classes_of
    >>> classes_of(["10", "2", "1"]).tolist(), classes_of(["0.5", "2"]).tolist(), classes_of(["dog", "cat"]).tolist()
    ([1, 2, 10], [0.5, 2.0], ['cat', 'dog'])
    """
    import numpy as np  # here, not at the top: start-up time

    classes = None
    for convert, dtype in ((int, np.int64), (float, np.float64)):
        try:
            values = [convert(text) for text in texts]
        except (ValueError, OverflowError):
            continue
        if not all(math.isfinite(value) for value in values):
            raise UsageError(f"--classes must be finite numbers or text. Got {','.join(texts)}.")
        classes = np.array(values, dtype=dtype)
        break
    if classes is None:
        classes = np.array(list(texts), dtype=str)
    unique = np.unique(classes)
    if unique.size != classes.size:
        raise UsageError(f"--classes {','.join(texts)} names one class twice (as the number {classes.dtype} reads).")
    return unique


def open_labels(path: str, storage_options: dict[str, Any] | None) -> Any:
    """The labels of a zarr array of shape (n,) or (n, 1) as a 1-D dask array (numbers or text)."""
    import dask.array as da  # here, not at the top: start-up time

    from ..errors import InputError
    from ..sources.rows import open_zarr_array

    labels = da.from_zarr(open_zarr_array(path, storage_options))
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise InputError(f"Expected class labels of shape (n_samples,) in {path}. Got shape {labels.shape}.")
    return labels


def one_vs_rest_targets(path: str, texts: Sequence[str], storage_options: dict[str, Any] | None) -> tuple[Any, Any]:
    """The +-1 targets (lazy) of the labels at ``path`` for the classes of ``--classes``, and those classes
    (typed like the labels), which the sketch records."""
    from ..errors import InputError  # here, not at the top: start-up time
    from ..ridge.estimators import KernelRidgeClassifier

    classes = classes_of(texts)
    labels = open_labels(path, storage_options)
    kind = labels.dtype.kind
    if kind not in "iufUTO":
        raise InputError(
            f"Expected class labels that are numbers or text in {path}. Got dtype {labels.dtype}; "
            "store them as integers or strings."
        )
    labels_numeric, classes_numeric = kind in "iuf", classes.dtype.kind in "if"
    if labels_numeric != classes_numeric:
        found, given = ("numbers", "text") if labels_numeric else ("text", "numbers")
        raise InputError(
            f"{path} holds labels that are {found} (dtype {labels.dtype}), but --classes {','.join(texts)} reads as "
            f"{given}. Every site and `streamrff ridge --classes` must read the classes alike: "
            + (
                "name the classes by their numbers."
                if labels_numeric
                else "store text labels that are not all numbers (e.g. 'class-1'), or store the labels as numbers."
            )
        )
    if kind in "TO":  # numpy compares text of one kind only
        classes = classes.astype(labels.dtype)
    return KernelRidgeClassifier.encode_targets(labels, classes), classes
