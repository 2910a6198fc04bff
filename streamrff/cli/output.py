"""What the commands print: text lines or, with ``--json``, one JSON object; progress on a terminal.

Only the standard library is imported at module level (``streamrff --help``
must stay fast).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

#: Target columns whose mean and std the text summary shows (JSON has all).
_TARGET_COLUMNS_SHOWN = 5


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars go to a terminal's stderr, never next to ``--json``."""
    return not getattr(args, "json", False) and sys.stderr.isatty()


def emit(args: argparse.Namespace, payload: dict[str, Any], lines: Sequence[str]) -> None:
    """Print ``payload`` as JSON under ``--json``, else ``lines``."""
    if args.json:
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))


def map_line(spec: dict[str, Any]) -> str:
    """One line of a map's parameters (nested values, such as K-JL landmarks' metadata, left out)."""
    return "  map: " + ", ".join(f"{k}={v}" for k, v in spec.items() if not isinstance(v, dict))


def sketch_summary(path: str, sketch: Any) -> dict[str, Any]:
    """JSON-able description of a sketch (no secrets: storage options are never part of a sketch).

    Examples
    --------
    >>> import json, numpy as np, streamrff as srf
    >>> from streamrff.cli import sketch_summary
    >>> X = np.random.default_rng(0).normal(size=(50, 3))
    >>> summary = sketch_summary("x.sketch", srf.sketch_array(X, srf.RFF(n_features=16, bandwidth=1.0), moments=True))
    >>> summary["kind"], summary["count"], summary["n_features"], summary["map"]["bandwidth"]
    ('mean', 50, 16, 1.0)
    >>> ratios = summary["explained_variance_ratio"]
    >>> len(ratios), ratios == sorted(ratios, reverse=True), 0 < sum(ratios) <= 1 + 1e-9
    (10, True, True)
    >>> json.loads(json.dumps(summary)) == summary
    True
    """
    summary: dict[str, Any] = {
        "path": path,
        "kind": sketch.kind,
        "count": sketch.count,
        "fingerprint": sketch.fingerprint,
        "map": sketch.spec,
    }
    for name in ("n_invalid", "has_moments"):
        if hasattr(sketch, name):
            summary[name] = getattr(sketch, name)
    if hasattr(sketch, "n_targets"):  # a regression sketch
        summary["n_targets"] = sketch.n_targets
        if sketch.classes is not None:
            summary["classes"] = list(sketch.classes)
        if sketch.count:
            summary["target"] = target_summary(sketch)
        summary["next"] = ridge_command(path, sketch.classes)
    if hasattr(sketch, "feature_sum"):
        summary["n_features"] = int(sketch.feature_sum.shape[0])
    if getattr(sketch, "columns", None) is not None:  # sketched with --columns
        descriptor = sketch.columns.column_maps.descriptor()
        keys = ("n_columns", "n_features", "bandwidth", "bandwidth_rule")
        summary["columns"] = {key: descriptor[key] for key in keys}
    if hasattr(sketch, "sketch_size"):  # a Nystrom sketch: the second moment's range sketch
        summary["sketch_size"] = int(sketch.sketch_size)
        summary["test_seed"] = int(sketch.test_seed)
    # Kernel PCA's spectrum describes a sketch made for kpca or test; a regression sketch is for ridge.
    spectrum = getattr(sketch, "has_moments", False) or summary.get("sketch_size", 0) > 1
    if spectrum and "n_targets" not in summary and sketch.count >= 2:  # kernel PCA's, without its estimator
        from ..sketches.moments import moment_eigenpairs  # here, not at the top: start-up time
        from ..sketches.nystrom import nystrom_eigenpairs

        components = min(10, sketch.feature_sum.shape[0], summary.get("sketch_size", 11) - 1)
        eigenpairs = nystrom_eigenpairs if "sketch_size" in summary else moment_eigenpairs
        variances, _, total = eigenpairs(sketch, components)
        summary["explained_variance_ratio"] = [float(v / total) if total > 0 else 0.0 for v in variances]
    return summary


def target_summary(sketch: Any) -> dict[str, list[float]]:
    """Mean and standard deviation of each target column of a regression sketch, from its sums.

    ``mean = c + sum (y - c) / n`` and ``std = sqrt(max((y - c)^T (y - c) / n - (mean - c)^2, 0))`` per
    column, with ``c`` the sketch's target shift (the population standard deviation; for one-vs-rest
    classes the mean is ``2 share - 1``).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.cli.output import target_summary
    >>> X, y = np.zeros((4, 2)), np.array([1.0, 2.0, 3.0, 6.0])
    >>> sketch = srf.regression_sketch_array(X, y, srf.RFF(n_features=8, bandwidth=1.0))
    >>> target_summary(sketch)
    {'mean': [3.0], 'std': [1.8708286933869707]}
    """
    import numpy as np  # here, not at the top: start-up time

    shifted_mean = sketch.target_sum / sketch.count  # the sums are about the sketch's target shift
    variance = np.maximum(np.diag(sketch.target_moment) / sketch.count - shifted_mean**2, 0.0)
    return {
        "mean": [float(value) for value in sketch.target_mean],
        "std": [float(value) for value in np.sqrt(variance)],
    }


def ridge_command(path: str, classes: Any) -> str:
    """The command that fits kernel ridge on a regression sketch written to ``path`` (and the other sites')."""
    classify = "" if classes is None else f" --classify --classes {','.join(map(str, classes))}"
    return f"streamrff ridge {path} [other sites' sketches]{classify} -o model.json"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The text of :func:`sketch_summary`: a title line, then the map, sizes, spectrum and fingerprint."""
    lines = [f"{summary['path']}: {summary['kind']} sketch of {summary['count']:,} rows", map_line(summary["map"])]
    if "sketch_size" in summary:
        lines.append(
            f"  features: {summary['n_features']}, second moment: low-rank (Nystrom, sketch_size "
            f"{summary['sketch_size']}, test_seed {summary['test_seed']})"
        )
    elif "n_features" in summary:
        lines.append(
            f"  features: {summary['n_features']}, second moment: {'yes' if summary.get('has_moments') else 'no'}"
        )
    if "columns" in summary:
        part = summary["columns"]
        rule = "the map's bandwidth / sqrt(columns)" if part["bandwidth_rule"] == "map" else "given"
        lines.append(
            f"  column part: {part['n_columns']} columns, {part['n_features']} features each, with second moments; "
            f"bandwidth {part['bandwidth']:.4g} ({rule})"
        )
    if "n_targets" in summary:
        lines.append(f"  target columns: {summary['n_targets']} (Z^T y, sum y, y^T y)")
    if "classes" in summary:
        lines.append(f"  classes (one vs rest): {', '.join(map(str, summary['classes']))}")
    if "target" in summary:
        shown = _TARGET_COLUMNS_SHOWN
        columns = zip(summary["target"]["mean"][:shown], summary["target"]["std"][:shown], strict=True)
        more = len(summary["target"]["mean"]) - shown
        lines.append(
            "  target mean (std): " + ", ".join(f"{mean:.4g} ({std:.4g})" for mean, std in columns)
            + (f", ... ({more} more columns; --json has all)" if more > 0 else "")
        )  # fmt: skip
    if summary.get("explained_variance_ratio"):
        ratios = ", ".join(f"{value:.3f}" for value in summary["explained_variance_ratio"])
        lines.append(f"  explained variance ratio of the top kernel PCs: {ratios}")
    if summary.get("n_invalid"):
        lines.append(f"  rows skipped as NaN/inf: {summary['n_invalid']:,}")
    lines.append(f"  fingerprint: {summary['fingerprint']}")
    if "next" in summary:
        lines.append(f"next: {summary['next']}")
    return lines


def emit_sketch(args: argparse.Namespace, path: str, sketch: Any, title: str, **extra: Any) -> None:
    """Print what was written: :func:`sketch_summary` (plus ``extra``) as JSON, or ``title`` and its lines."""
    summary = {**sketch_summary(path, sketch), **extra}
    emit(args, summary, [title, *summary_lines(summary)[1:]])
