"""Kernel ridge regression and classification from one mergeable regression sketch, and its model file.

:mod:`.estimators` holds :class:`KernelRidge` and :class:`KernelRidgeClassifier`, :mod:`.gcv` the
centred system's spectrum and generalized cross-validation over it, :mod:`.modelfile` the model file
(the map file plus the coefficients, no pickle).
"""

from __future__ import annotations

from .estimators import KernelRidge, KernelRidgeClassifier, ridge_gcv
from .modelfile import load_model, save_model

__all__ = ["KernelRidge", "KernelRidgeClassifier", "load_model", "ridge_gcv", "save_model"]
