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
    if hasattr(sketch, "feature_sum"):
        summary["n_features"] = int(sketch.feature_sum.shape[0])
    if hasattr(sketch, "sketch_size"):  # a Nystrom sketch: the second moment's range sketch
        summary["sketch_size"] = int(sketch.sketch_size)
        summary["test_seed"] = int(sketch.test_seed)
    if (getattr(sketch, "has_moments", False) or summary.get("sketch_size", 0) > 1) and sketch.count >= 2:
        from ..kpca import KernelPCA  # here, not at the top: start-up time

        components = min(10, sketch.feature_sum.shape[0], summary.get("sketch_size", 11) - 1)
        kpca = KernelPCA(n_components=components).fit_from_sketch(sketch)
        summary["explained_variance_ratio"] = [float(v) for v in kpca.explained_variance_ratio_]
    return summary


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
    if "n_targets" in summary:
        lines.append(f"  target columns: {summary['n_targets']} (Z^T y, sum y, y^T y)")
    if "classes" in summary:
        lines.append(f"  classes (one vs rest): {', '.join(map(str, summary['classes']))}")
    if summary.get("explained_variance_ratio"):
        ratios = ", ".join(f"{value:.3f}" for value in summary["explained_variance_ratio"])
        lines.append(f"  explained variance ratio of the top kernel PCs: {ratios}")
    if summary.get("n_invalid"):
        lines.append(f"  rows skipped as NaN/inf: {summary['n_invalid']:,}")
    lines.append(f"  fingerprint: {summary['fingerprint']}")
    return lines


def emit_sketch(args: argparse.Namespace, path: str, sketch: Any, title: str, **extra: Any) -> None:
    """Print what was written: :func:`sketch_summary` (plus ``extra``) as JSON, or ``title`` and its lines."""
    summary = {**sketch_summary(path, sketch), **extra}
    emit(args, summary, [title, *summary_lines(summary)[1:]])
