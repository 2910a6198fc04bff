"""Compiled chunk kernels (numba): sine and cosine, dot products, Walsh-Hadamard transforms, Lloyd steps, bins.

Private API. Plain functions over NumPy arrays, cached in a per-user folder (:mod:`.compiled`), never
inside the installed package. They import only the foundations (:mod:`streamrff._base`,
:mod:`streamrff.errors`) and one another; the maps, sketches and analyses call them.
"""
