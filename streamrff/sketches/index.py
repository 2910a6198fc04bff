"""Kernel distances between point sets, from their mean sketches, and a nearest-point-set index.

A point set ``P`` (a shape, a sample of a distribution) is summarised by the
:class:`~streamrff.MeanSketch` of its rows; the mean feature vector
``F(P) = (1/|P|) sum_{x in P} z(x)`` approximates the kernel mean embedding
``Phi(P)``, so ``||F(P) - F(Q)||`` approximates the kernel distance
``D_K(P, Q)``. With :class:`~streamrff.RelativeErrorRFF` the approximation has
relative error for all pairs with ``D_K^2(P, Q) >= alpha`` (Phillips & Tai
2018); with :class:`~streamrff.RFF` the error is additive.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._base.validation import check_positive_int
from ..errors import InputError, SketchFormatError, SketchMismatchError
from ..maps import FeatureMap, map_from_spec
from ..typing import MapSpec, PathOrURL, StorageOptions
from .base import Sketch, describe_spec, expect_array, expect_int, load
from .mean import MeanSketch, mmd2

__all__ = ["kernel_distance", "SketchIndex"]


def kernel_distance(a: MeanSketch, b: MeanSketch) -> float:
    """Kernel distance ``D_K(P, Q)`` between the point sets behind two mean sketches.

    ``D_K(P, Q) = sqrt(kappa(P, P) + kappa(Q, Q) - 2 kappa(P, Q))`` with
    ``kappa(P, Q) = (1/|P|)(1/|Q|) sum_{x in P} sum_{y in Q} k(x, y)``
    (Phillips & Tai 2018, sec. 1), i.e. every point weighs ``beta = 1/|P|``
    and the sums include the ``x = y`` terms. Estimated as
    ``||F(P) - F(Q)||`` with ``F`` the mean feature vectors: the square root of
    the *biased* MMD^2 (``mmd2(a, b, unbiased=False)``), which is what the
    paper's guarantees are about. It is 0 for identical point sets; for two
    samples of one distribution it is positive (about ``sqrt(2 / n)`` for n
    points each and a narrow kernel), unlike the unbiased MMD^2 of
    :func:`~streamrff.mmd2`.

    Parameters
    ----------
    a, b : MeanSketch
        Sketches of the two point sets, made with the same fitted map, with >= 1 row each.

    Returns
    -------
    float
        The estimated ``D_K(P, Q) >= 0``.

    Raises
    ------
    InputError
        If an argument is not a MeanSketch or is empty.
    SketchMismatchError
        If the sketches come from different maps (the message names both).

    References
    ----------
    Phillips, J. M. & Tai, W. M. (2018). Relative error RKHS embeddings for
    Gaussian kernels. Sec. 1 (kernel distance between point sets), Theorem 9.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> angles = np.linspace(0, 2 * np.pi, 200, endpoint=False)
    >>> circle = np.c_[np.cos(angles), np.sin(angles)]
    >>> rel = srf.RelativeErrorRFF(n_features=4096, bandwidth=0.5).fit(circle)
    >>> a = srf.sketch_array(circle, rel)
    >>> b = srf.sketch_array(1.1 * circle, rel)
    >>> srf.kernel_distance(a, a)
    0.0
    >>> K = lambda P, Q: srf.exact_kernel(P, Q, 0.5).mean()
    >>> exact = np.sqrt(K(circle, circle) + K(1.1 * circle, 1.1 * circle) - 2 * K(circle, 1.1 * circle))
    >>> bool(abs(srf.kernel_distance(a, b) / exact - 1) < 0.1)
    True
    """
    return float(np.sqrt(max(mmd2(a, b, unbiased=False), 0.0)))


class SketchIndex(Sketch):
    """Named point sets, by their mean sketches, searchable by kernel distance.

    Add :class:`~streamrff.MeanSketch` es of point sets (all made with one
    fitted map) under names; :meth:`query` returns the names of the k point
    sets nearest to a query sketch in :func:`kernel_distance`. The search is an
    exact scan of the matrix of mean feature vectors (``O(n D)`` per query):
    with :class:`~streamrff.RelativeErrorRFF` features, a nearest neighbour in
    the index is a ``(1 + eps)``-approximate nearest neighbour in ``D_K``
    (Phillips & Tai 2018, sec. 4).

    The index is also a sketch: :meth:`save` writes it as one zarr group (the
    map spec, ``feature_sums`` (n, D) float64, ``counts`` (n,) int64,
    ``squared_norm_sums`` (n,) float64, the names in the attributes; no
    pickle), :func:`streamrff.load` or :meth:`SketchIndex.load` read it back,
    and :meth:`merge` returns the union of two indexes with disjoint names.
    Unlike other sketches it grows in place through :meth:`add`. Second
    moments of added sketches are not kept.

    Parameters
    ----------
    feature_map : FeatureMap, optional
        The fitted map of every sketch to be added; by default the map of the
        first sketch added.

    Attributes
    ----------
    feature_map : FeatureMap or None
        The map shared by every entry.
    names : list of str
        Names of the point sets, sorted.
    count : int
        Rows sketched over all point sets (``len(index)`` is the number of sets).

    References
    ----------
    Phillips, J. M. & Tai, W. M. (2018). Relative error RKHS embeddings for
    Gaussian kernels. Sec. 4 (LSH and nearest neighbours for point sets).

    Examples
    --------
    Three Gaussian point sets, and the two nearest to a fourth one:

    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> sets = {f"mean {c}": rng.normal(c, 1.0, size=(300, 2)) for c in (0, 2, 4)}
    >>> rel = srf.RelativeErrorRFF(n_features=2048, bandwidth=1.0).fit(np.vstack(list(sets.values())))
    >>> index = srf.SketchIndex()
    >>> for name, points in sets.items():
    ...     index.add(name, srf.sketch_array(points, rel))
    >>> names, distances = index.query(srf.sketch_array(rng.normal(2.4, 1.0, size=(300, 2)), rel), k=2)
    >>> names, len(index)
    (['mean 2', 'mean 4'], 3)
    """

    kind = "index"

    def __init__(self, feature_map: FeatureMap | None = None) -> None:
        if feature_map is not None and not (isinstance(feature_map, FeatureMap) and feature_map.is_fitted()):
            raise InputError(
                f"feature_map must be a fitted streamrff FeatureMap (e.g. sketch.feature_map). Got {feature_map!r}."
            )
        self.feature_map = feature_map
        # name -> (row count, feature sum (D,) float64, sum of squared feature norms)
        self._entries: dict[str, tuple[int, np.ndarray, float]] = {}
        self._means: tuple[list[str], np.ndarray, np.ndarray] | None = None  # cache for query

    # -- container ---------------------------------------------------------------
    @property
    def count(self) -> int:  # type: ignore[override]
        """Rows sketched over all point sets, as ``count`` of other sketches (``len`` counts the sets)."""
        return sum(entry[0] for entry in self._entries.values())

    @property
    def names(self) -> list[str]:
        """Names of the point sets, sorted."""
        return sorted(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> MeanSketch:
        """The mean sketch stored under ``name`` (without second moments)."""
        if name not in self._entries:
            raise KeyError(f"No point set named {name!r} in the index. Known names: {self.names[:10]}.")
        count, feature_sum, squared_norm_sum = self._entries[name]
        return MeanSketch(self.feature_map, count, feature_sum, squared_norm_sum)

    def add(self, name: str, sketch: MeanSketch) -> None:
        """Add the point set ``name`` by its mean sketch (in place).

        Raises
        ------
        InputError
            If ``name`` is not a non-empty string or is already used, or ``sketch``
            is not a non-empty MeanSketch.
        SketchMismatchError
            If ``sketch`` was made with another map than the index's (the message
            names both fingerprints).
        """
        if not isinstance(name, str) or not name:
            raise InputError(f"name must be a non-empty string. Got {name!r}.")
        if name in self._entries:
            raise InputError(f"The index already holds a point set named {name!r}. Use another name.")
        self._check_query(sketch, "sketch")
        self._entries[name] = (sketch.count, np.array(sketch.feature_sum, dtype=np.float64), sketch.squared_norm_sum)
        self._means = None

    # -- search ------------------------------------------------------------------
    def query(self, sketch: MeanSketch, k: int = 1) -> tuple[list[str], np.ndarray]:
        """The ``k`` point sets nearest to the one behind ``sketch``, by kernel distance.

        Parameters
        ----------
        sketch : MeanSketch
            Sketch of the query point set, made with the index's map.
        k : int, default=1
            Number of neighbours, 1 <= k <= len(index).

        Returns
        -------
        names : list of str
            The k nearest names, nearest first (ties broken by name).
        distances : ndarray of shape (k,), float64
            Their :func:`kernel_distance` to the query.

        Raises
        ------
        InputError
            If the index is empty, k is out of range, or ``sketch`` is not a non-empty MeanSketch.
        SketchMismatchError
            If ``sketch`` was made with another map.
        """
        if not self._entries:
            raise InputError("The index is empty. Add point sets with index.add(name, sketch) first.")
        k = check_positive_int(k, "k")
        if k > len(self):
            raise InputError(f"k must be <= the number of point sets in the index ({len(self)}). Got {k}.")
        self._check_query(sketch, "sketch")
        names, means, squared_norms = self._mean_matrix()
        query = sketch.feature_sum / sketch.count
        # ||m - q||^2 = ||m||^2 + ||q||^2 - 2 m.q for the scan; the k winners are then
        # recomputed from differences so that their distances carry no cancellation error.
        squared = squared_norms + query @ query - 2.0 * (means @ query)
        candidates = np.argpartition(squared, k - 1)[:k] if k < len(names) else np.arange(len(names))
        exact = np.einsum("ij,ij->i", means[candidates] - query, means[candidates] - query)
        order = sorted(range(len(candidates)), key=lambda i: (exact[i], names[candidates[i]]))
        return [names[candidates[i]] for i in order], np.sqrt(exact[order])

    def _mean_matrix(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        if self._means is None:
            names = self.names
            means = np.array([self._entries[n][1] / self._entries[n][0] for n in names])
            self._means = (names, means, np.einsum("ij,ij->i", means, means))
        return self._means

    def _check_query(self, sketch: Any, argument: str) -> None:
        if not isinstance(sketch, MeanSketch):
            raise InputError(
                f"{argument} must be a MeanSketch (from streamrff.sketch_array or streamrff.sketch). "
                f"Got {type(sketch).__name__}."
            )
        if sketch.count < 1:
            raise InputError(
                f"{argument} is empty: the kernel mean of zero points is undefined. Sketch at least one row."
            )
        if self.feature_map is None:
            self.feature_map = sketch.feature_map
            return
        if sketch.fingerprint != self.fingerprint:
            raise SketchMismatchError(
                f"The {argument} was made with another feature map than the index: fingerprint "
                f"{sketch.fingerprint[:16]} ({describe_spec(sketch.spec)}) vs the index's {self.fingerprint[:16]} "
                f"({describe_spec(self.spec)}). Sketch every point set with the index's map (index.feature_map)."
            )

    # -- Sketch protocol (file format, merge, ==) --------------------------------
    def _require_map(self) -> FeatureMap:
        if self.feature_map is None:
            raise InputError("This empty index has no feature map yet. Add a sketch first, or pass feature_map=.")
        return self.feature_map

    @property
    def spec(self) -> MapSpec:
        return self._require_map().spec

    @property
    def fingerprint(self) -> str:
        return self._require_map().fingerprint

    def state_arrays(self) -> dict[str, np.ndarray]:
        return self._require_map().state_arrays()

    def _arrays(self) -> dict[str, np.ndarray]:
        names = self.names
        width = self._require_map().n_features_out_
        sums = np.array([self._entries[n][1] for n in names]).reshape(len(names), width)
        return {
            "feature_sums": sums,
            "counts": np.array([self._entries[n][0] for n in names], dtype=np.int64),
            "squared_norm_sums": np.array([self._entries[n][2] for n in names], dtype=np.float64),
        }

    def _attrs(self) -> dict[str, Any]:
        return {"count": self.count, "names": self.names}

    def merge(self, other: Sketch) -> SketchIndex:
        """The union of two indexes over the same map with disjoint names (a new index).

        Raises
        ------
        SketchMismatchError
            If ``other`` is not an index or uses another map.
        InputError
            If both hold a point set of the same name.
        """
        if isinstance(other, SketchIndex) and (self.feature_map is None or other.feature_map is None):
            return self._merge(other)  # an empty index has no map yet: nothing to compare
        return super().merge(other)

    def _merge(self, other: SketchIndex) -> SketchIndex:
        union = SketchIndex(self.feature_map or other.feature_map)
        shared = sorted(set(self._entries) & set(other._entries))
        if shared:
            raise InputError(f"Cannot merge indexes that both hold point sets named {shared[:5]}. Rename one side.")
        union._entries = {**self._entries, **other._entries}
        return union

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SketchIndex) and (self.feature_map is None or other.feature_map is None):
            return self.feature_map is other.feature_map and not self._entries and not other._entries
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> SketchIndex:
        feature_map = map_from_spec(spec, map_arrays)
        total = expect_int(attrs, "count")
        names = attrs.get("names")
        if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
            raise InputError(f"Attribute 'names' must be a list of non-empty strings. Got {names!r:.200}.")
        n = len(names)
        if len(set(names)) != n:
            raise InputError("Attribute 'names' holds duplicate names.")
        sums = expect_array(arrays, "feature_sums", (n, feature_map.n_features_out_), np.float64)
        counts = expect_array(arrays, "counts", (n,), np.int64)
        norms = expect_array(arrays, "squared_norm_sums", (n,), np.float64)
        if (counts < 1).any() or (norms < 0).any() or int(counts.sum()) != total:
            raise InputError(
                f"Every indexed point set needs a count >= 1 and a squared_norm_sum >= 0, and the counts must "
                f"add up to the attribute count ({total}). Got counts summing to {int(counts.sum())}."
            )
        index = cls(feature_map)
        index._entries = {
            name: (int(count), sums[row].copy(), float(norm))
            for row, (name, count, norm) in enumerate(zip(names, counts, norms))
        }
        return index

    @classmethod
    def load(cls, path_or_url: PathOrURL, storage_options: StorageOptions = None) -> SketchIndex:
        """Read an index written by :meth:`save` (see :func:`streamrff.load`).

        Raises
        ------
        SketchFormatError
            If the place holds no valid sketch file, or a sketch that is not an index.
        """
        loaded = load(path_or_url, storage_options=storage_options)
        if not isinstance(loaded, SketchIndex):
            raise SketchFormatError(
                f"{path_or_url} holds a {loaded.kind!r} sketch, not a sketch index. Load it with streamrff.load."
            )
        return loaded

    def __repr__(self) -> str:
        shown = ", ".join(self.names[:3]) + (", ..." if len(self) > 3 else "")
        described = "no map yet" if self.feature_map is None else describe_spec(self.spec)
        return f"SketchIndex({len(self)} point sets: [{shown}], map={described})"
