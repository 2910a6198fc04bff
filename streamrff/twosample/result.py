"""The outcome of a kernel two-sample test."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..maps import FeatureMap
from ..typing import MapSpec

__all__ = ["TwoSampleResult"]


@dataclass(frozen=True, eq=False)
class TwoSampleResult:
    """Outcome of a kernel two-sample test.

    Attributes
    ----------
    statistic : float
        Unbiased MMD^2 estimate (Sutherland & Schneider 2015, sec. 3.3).
    p_value : float
        p-value for H0: X and Y come from the same distribution.
    method : str
        ``"permutation"``, ``"spectral"`` or ``"hotelling"``.
    n_x, n_y : int
        Sample sizes.
    bandwidth : float or None
        Gaussian kernel width sigma of the map (None if the map has none).
    n_features : int
        Width D of the feature map.
    null : ndarray
        ``"permutation"``: the B permuted MMD^2 statistics; ``"spectral"``:
        the Monte-Carlo draws of the approximate null of MMD^2; ``"hotelling"``:
        ``[T^2, dof]`` (chi-square statistic and its degrees of freedom).
    map_spec : dict
        Spec of the feature map used.
    """

    statistic: float
    p_value: float
    method: str
    n_x: int
    n_y: int
    bandwidth: float | None
    n_features: int
    null: np.ndarray = field(repr=False)
    map_spec: MapSpec = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        null = np.array(self.null, dtype=np.float64)
        null.setflags(write=False)
        object.__setattr__(self, "null", null)

    def __repr__(self) -> str:
        if self.method == "permutation":
            null = f"{self.null.shape[0]} permutations"
        elif self.method == "spectral":
            null = f"weighted chi-square, {self.null.shape[0]} Monte-Carlo draws"
        else:
            null = f"chi-square, T^2 = {self.null[0]:.4g} on {self.null[1]:.0f} dof"
        bandwidth = "n/a" if self.bandwidth is None else f"{self.bandwidth:.4g}"
        return (
            f"TwoSampleResult(method={self.method!r})\n"
            f"  statistic (unbiased MMD^2): {self.statistic:.6g}\n"
            f"  p-value:                    {self.p_value:.4g}\n"
            f"  null:                       {null}\n"
            f"  samples:                    n_x={self.n_x}, n_y={self.n_y}\n"
            f"  kernel:                     Gaussian, bandwidth={bandwidth}, n_features={self.n_features}"
        )

    def to_dict(self, include_null: bool = True) -> dict[str, Any]:
        """JSON-able dictionary (the CLI's ``--json`` output)."""
        out: dict[str, Any] = {
            "statistic": float(self.statistic),
            "p_value": float(self.p_value),
            "method": self.method,
            "n_x": int(self.n_x),
            "n_y": int(self.n_y),
            "bandwidth": None if self.bandwidth is None else float(self.bandwidth),
            "n_features": int(self.n_features),
            "map": self.map_spec,
        }
        if self.method == "hotelling":
            out.update(t_squared=float(self.null[0]), dof=int(self.null[1]))
        if include_null:
            out["null"] = [float(value) for value in self.null]
        return out


def _bandwidth_of(spec: MapSpec) -> float | None:
    while isinstance(spec, dict):
        if isinstance(spec.get("bandwidth"), (int, float)):
            return float(spec["bandwidth"])
        spec = spec.get("inner")
    return None


def _result(
    method: str, statistic: float, p_value: float, n_x: int, n_y: int, feature_map: FeatureMap, null: np.ndarray
) -> TwoSampleResult:
    spec = feature_map.spec
    return TwoSampleResult(
        statistic=float(statistic),
        p_value=float(p_value),
        method=method,
        n_x=int(n_x),
        n_y=int(n_y),
        bandwidth=_bandwidth_of(spec),
        n_features=int(feature_map.n_features_out_),
        null=null,
        map_spec=spec,
    )

