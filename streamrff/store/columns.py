"""The column table of a sketch store: per input column, the bucket permutation test of two ranges.

A store made with ``columns=True`` keeps in every bucket record the sums of its column part: for
each input column c, the float64 sums of a 1-D sincos map of that column alone (the maps of
:func:`streamrff.sketches.columns.derive_column_maps`, as ``sketch(..., columns=True)`` makes
them), ``d x D_c`` values. The column's test between two ranges is the bucket permutation test
(:func:`streamrff.store.permutation.bucket_permutation_test`) on those sums: under no change the
buckets are exchangeable, so relabelling whole buckets is an exact null for every column, from
the sums alone (no column moments, no rows). The p-values are adjusted for the d tests by Holm's
method; the table is a :class:`~streamrff.twosample.marginal.MarginalTestResult` (the one
``explain`` and ``test --columns`` print), its ``joint`` the test of whole rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..formats.store import Record
from ..sketches.columns import ColumnMaps
from ..twosample.marginal import MarginalTestResult
from ..twosample.result import TwoSampleResult
from .permutation import bucket_permutation_test, disjoint_spans, exchangeable_units

__all__ = ["column_table"]


def column_table(
    sides: Sequence[Sequence[Record]], column_maps: ColumnMaps, joint: TwoSampleResult, n_permutations: int,
    seed: Any,
) -> MarginalTestResult:  # fmt: skip
    """The per-column bucket permutation tests of the two ranges' bucket records, largest effect first.

    Each column's features are sincos, of norm 1 a row, so its squared norms are the counts.
    Every column uses the same seed, hence the same relabellings (as the joint test).
    """
    d, width = column_maps.n_columns, column_maps.n_features
    statistics, p_values = np.zeros(d), np.zeros(d)
    for column in range(d):
        parts = [
            [
                dataclasses.replace(
                    record,
                    feature_sum=record.columns.reshape(d, width)[column],  # type: ignore[union-attr]
                    squared_norm_sum=float(record.count),
                    columns=None,
                )  # fmt: skip
                for record in side
            ]
            for side in sides
        ]
        result = bucket_permutation_test(parts, column_maps.maps[column], n_permutations, seed)
        statistics[column], p_values[column] = result.statistic, result.p_value
    return MarginalTestResult.ranked(
        statistics, p_values, [column_maps.bandwidth] * d, kind="columns", n_x=joint.n_x, n_y=joint.n_y,
        n_permutations=n_permutations, n_features=width, joint=joint,
        null=f"{n_permutations} relabellings of whole buckets, the same for every column",
    )  # fmt: skip


def store_column_test(store: Any, a: tuple[Any, Any], b: tuple[Any, Any], n_permutations: int, seed: Any) -> Any:
    """:meth:`SketchStore.test` with ``columns=True``: the column table of the two ranges' buckets.

    Fine buckets only: a compacted bucket keeps the whole rows' sums, not the column part.
    """
    if store.column_maps is None:
        raise InputError(
            f"{store.path} keeps no column part: make a store with SketchStore.create(..., columns=True) (CLI: "
            "store create --columns) and append the rows to it, or test without columns=True."
        )
    sides, feature_map = exchangeable_units(store, disjoint_spans(store, a, b))
    if feature_map is not store.feature_map:
        raise InputError(
            f"The ranges {a!r} and {b!r} hold compacted buckets, which keep no column part: test the column "
            "table on ranges of buckets newer than the compaction horizon, or test without columns=True."
        )
    joint = bucket_permutation_test(sides, feature_map, n_permutations, seed)
    return column_table(sides, store.column_maps, joint, n_permutations, seed)
