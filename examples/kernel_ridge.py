"""Kernel ridge classification and regression from one mergeable regression sketch.

Shows: KernelRidgeClassifier on scikit-learn's bundled digits (alpha chosen by generalized
cross-validation, the table it compared), two sites' regression sketches merged into one fit
(which predicts like the fit on all rows: the merge contract is on the sums and the predictions),
and KernelRidge on Friedman #1.

Run: python examples/kernel_ridge.py [--features 4096]
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits, make_friedman1

import streamrff as srf


def main(n_features: int) -> None:
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(X))
    train, test = order[:1200], order[1200:]
    model = srf.KernelRidgeClassifier(alpha="auto", n_features=n_features, seed=0).fit(X[train], y[train])
    best = np.argmin(model.gcv_["scores"])
    print(
        f"digits: alpha = {model.alpha_:.3g} (GCV minimum of {len(model.gcv_['alphas'])} alphas, "
        f"{model.gcv_['df'][best]:.0f} effective parameters)"
    )
    print(f"digits test accuracy: {model.score(X[test], y[test]):.3f}")

    # Two sites sketch their own rows with one map and the same one-vs-rest targets, then merge.
    targets = srf.KernelRidgeClassifier.encode_targets(y[train], model.classes_)
    site_a = srf.sketch(X[train[:600]], model.feature_map_, target=targets[:600])
    site_b = srf.sketch(X[train[600:]], model.feature_map_, target=targets[600:])
    merged = srf.KernelRidgeClassifier().fit_from_sketch(srf.merge(site_a, site_b), classes=model.classes_)
    gap = np.abs(merged.decision_function(X[test]) - model.decision_function(X[test])).max()
    same = bool((merged.predict(X[test]) == model.predict(X[test])).all())
    print(f"merged fit predicts like the whole fit: {same} (largest score gap {gap:.1e}, float32 sums)")

    inputs, values = make_friedman1(n_samples=6000, noise=1.0, random_state=0)
    regressor = srf.KernelRidge(alpha="auto", n_features=min(n_features, 1024)).fit(inputs[:5000], values[:5000])
    print(f"friedman #1 test R^2: {regressor.score(inputs[5000:], values[5000:]):.3f} (noise ceiling 0.96)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=4096)
    main(parser.parse_args().features)
