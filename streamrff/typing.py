"""Type aliases used in streamrff's signatures."""

from __future__ import annotations

from os import PathLike
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

#: A 2-D array of samples (rows) by input features (columns).
ArrayLike2D: TypeAlias = npt.ArrayLike
#: A seed: an int, or a Generator from which an int seed is drawn once.
Seed: TypeAlias = int | np.random.Generator | None
#: A local path or a URL understood by fsspec (``s3://bucket/key``, ``file:///...``).
PathOrURL: TypeAlias = str | PathLike
#: Keyword arguments for fsspec (credentials, ``endpoint_url``...).
StorageOptions: TypeAlias = dict[str, Any] | None
#: A JSON-able description of a feature map.
MapSpec: TypeAlias = dict[str, Any]
