"""Foundations: input checks, the kind registry, memory limits, BLAS threads, keyed row hashes and permutations.

Private API. The layer every other one stands on: its modules import only :mod:`streamrff.errors`,
:mod:`streamrff.typing` and one another (plus numpy, scipy, scikit-learn and threadpoolctl).
"""
