"""Compiled float32 dot products of feature rows with a few centres, in explicit 16-lane vectors.

A Lloyd step scores every feature row against the k centres: a GEMM with k
columns. OpenBLAS is built for large panels; with k = 10 columns it runs at
~50 GFLOP/s on one core whose large-GEMM peak is ~160. :func:`row_dots`
computes ``out[i, q] = z[i] . c[q]`` in register blocks of 5 rows x 5 centres:
25 accumulators of 16 float32 lanes that stay in registers along the whole row
(``D / 16`` fused multiply-adds each; per step 10 loads feed 25 FMAs), then
one fixed-order reduction of the 16 lanes. On one L2-resident tile at
D = 1024 that is 2.1x OpenBLAS at k = 10, 1.1-1.3x at k = 20-24 and alike at
k = 32-50 (``benchmarks/bench_rowdot.py``); beyond :data:`MAX_COLUMNS` centres
the caller uses BLAS.

The block is written as LLVM IR with ``<16 x float>`` vectors (a numba
``@intrinsic``), not left to the auto-vectoriser: numba compiles for the host
CPU, and LLVM's tuning for recent Intel cores prefers 256-bit vectors, so the
vectoriser's loops use half the width of an AVX-512 core. The IR is generic
(no x86 intrinsics), so it compiles on any CPU, where LLVM splits each vector
into the registers there are; but 25 accumulators fit the registers of
AVX-512 cores only, so :data:`MAX_COLUMNS` is 0 when numba compiles for
another CPU.

Accuracy. Each lane sums its products in order with one rounding per FMA, and
the lanes are added in a fixed tree, so a result does not depend on the thread
count or on the other rows of the call. The error is within Higham's bound for
any order of summation, ``|fl(z.c) - z.c| <= gamma_D sum_d |z_d c_d|`` (Higham
2002, eq. 3.5), which is what :class:`streamrff.sketches.cluster._NearestCentres`
assumes of the float32 scores it rescores.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .compiled import jit

__all__ = ["MAX_COLUMNS", "row_dots"]

#: Lanes of one vector accumulator (512 bits of float32).
LANES = 16
#: Rows and centres of one register block: 25 accumulators, 5 row vectors and 1 centre
#: vector take 31 of the 32 vector registers of an AVX-512 core (per step 10 loads feed 25
#: FMAs). Measured at D = 1024 against 4 x 4, 6 x 4, 4 x 6, 8 x 2 and 8 x 3 blocks: 5 x 5 was
#: fastest at 10, 20 and 50 centres (10-15% over 4 x 4).
BLOCK_ROWS = 5
BLOCK_CENTRES = 5


def _compiles_for_avx512() -> bool:
    """Whether numba's code runs on AVX-512: the host's features, or those named by
    ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` (e.g. ``generic`` for caches shipped in an
    image), counted only if they list ``+avx512f``."""
    if numba.config.CPU_NAME is not None or numba.config.CPU_FEATURES is not None:
        return "+avx512f" in (numba.config.CPU_FEATURES or "")
    try:
        return bool(llvm.get_host_cpu_features().get("avx512f", False))
    except RuntimeError:  # features unknown to LLVM on this platform
        return False


#: Up to this many centres :func:`row_dots` beats OpenBLAS (D = 1024: 4.3x at 5 centres, 2.1x
#: at 10, 1.1-1.3x at 20-24; at 32-50 the two alternate within noise). 0 when numba compiles
#: for a CPU without AVX-512, where a block's 25 accumulators do not fit the vector registers
#: (not measured): BLAS is used.
MAX_COLUMNS = 24 if _compiles_for_avx512() else 0

_float = ir.FloatType()
_vector = ir.VectorType(_float, LANES)


def _is_float32_matrix(array: types.Type) -> bool:
    """A C-contiguous float32 matrix (row slices ``a[i:j]`` of one stay C-contiguous)."""
    return isinstance(array, types.Array) and array.ndim == 2 and array.dtype == types.float32 and array.layout == "C"


@intrinsic
def _dot_block(typingctx, rows, centres, out, row, centre, n_rows, n_centres):
    """``out[row + r, centre + q] = rows[row + r] . centres[centre + q]`` for ``r < n_rows``,
    ``q < n_centres`` (integer literals), over the first ``16 * (D // 16)`` columns; the rest
    of the row is the caller's. Typed for C-contiguous float32 matrices only."""
    if not (isinstance(n_rows, types.IntegerLiteral) and isinstance(n_centres, types.IntegerLiteral)):
        return None
    if not all(_is_float32_matrix(array) for array in (rows, centres, out)):
        return None
    block_rows, block_centres = n_rows.literal_value, n_centres.literal_value
    signature = types.void(rows, centres, out, row, centre, n_rows, n_centres)

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)

        def constant(value):
            return ir.Constant(intp, value)

        def matrix(index):
            array = context.make_array(signature.args[index])(context, builder, args[index])
            shape = cgutils.unpack_tuple(builder, array.shape, 2)
            row_stride = builder.udiv(cgutils.unpack_tuple(builder, array.strides, 2)[0], constant(4))
            return array.data, shape[1], row_stride

        def row_pointer(data, stride, first, offset):
            return builder.gep(data, [builder.mul(builder.add(first, constant(offset)), stride)])

        def vector_at(pointer, column):
            return builder.bitcast(builder.gep(pointer, [column]), _vector.as_pointer())

        rows_data, width, rows_stride = matrix(0)
        centres_data, _, centres_stride = matrix(1)
        out_data, _, out_stride = matrix(2)
        row, centre = args[3], args[4]
        fma_type = ir.FunctionType(_vector, [_vector] * 3)
        fma = cgutils.get_or_insert_function(builder.module, fma_type, "llvm.fma.v16f32")
        row_pointers = [row_pointer(rows_data, rows_stride, row, r) for r in range(block_rows)]
        centre_pointers = [row_pointer(centres_data, centres_stride, centre, q) for q in range(block_centres)]
        sums = [
            [cgutils.alloca_once_value(builder, ir.Constant(_vector, None)) for _ in range(block_centres)]
            for _ in range(block_rows)
        ]
        full = builder.mul(builder.udiv(width, constant(LANES)), constant(LANES))
        with cgutils.for_range_slice(builder, constant(0), full, constant(LANES)) as (column, _):
            row_vectors = [builder.load(vector_at(pointer, column), align=4) for pointer in row_pointers]
            for q, pointer in enumerate(centre_pointers):
                centre_vector = builder.load(vector_at(pointer, column), align=4)
                for r, row_vector in enumerate(row_vectors):
                    total = builder.call(fma, [row_vector, centre_vector, builder.load(sums[r][q])])
                    builder.store(total, sums[r][q])
        for r in range(block_rows):
            out_row = row_pointer(out_data, out_stride, row, r)
            for q in range(block_centres):
                total = builder.load(sums[r][q])
                lanes = LANES
                while lanes > 1:  # a fixed tree: (0..7) + (8..15), then (0..3) + (4..7), ...
                    lanes //= 2
                    low, high = (
                        builder.shuffle_vector(total, total, ir.Constant(ir.VectorType(ir.IntType(32), lanes), picks))
                        for picks in (list(range(lanes)), list(range(lanes, 2 * lanes)))
                    )
                    total = builder.fadd(low, high)
                value = builder.extract_element(total, ir.Constant(ir.IntType(32), 0))
                builder.store(value, builder.gep(out_row, [builder.add(centre, constant(q))]))
        return context.get_dummy_value()

    return signature, codegen


_jit = jit(nogil=True, boundscheck=False, error_model="numpy")


@_jit
def _block_row(rows, centres, out, row, n_rows):  # pragma: no cover - compiled
    """All centres against ``n_rows`` (a literal) rows from ``row``: blocks of BLOCK_CENTRES,
    then the remaining (at most 7) centres in blocks of 4, 2 and 1."""
    k = centres.shape[0]
    centre = 0
    while centre + BLOCK_CENTRES <= k:
        _dot_block(rows, centres, out, row, centre, n_rows, BLOCK_CENTRES)
        centre += BLOCK_CENTRES
    if centre + 4 <= k:
        _dot_block(rows, centres, out, row, centre, n_rows, 4)
        centre += 4
    if centre + 2 <= k:
        _dot_block(rows, centres, out, row, centre, n_rows, 2)
        centre += 2
    if centre < k:
        _dot_block(rows, centres, out, row, centre, n_rows, 1)


@_jit
def row_dots(rows, centres, out):  # pragma: no cover - compiled
    """``out[i, q] = rows[i] . centres[q]`` in float32, i.e. ``out = rows @ centres.T``.

    ``rows``: float32 (n, D); ``centres``: float32 (k, D); ``out``: float32 (n, >= k), its
    columns from k on untouched; all C-contiguous (other layouts fail to compile). A result
    depends on its row and centre only, not on ``n`` or the other rows. For ``k`` above
    :data:`MAX_COLUMNS`, BLAS is faster.
    """
    n, width = rows.shape
    k = centres.shape[0]
    row = 0
    while row + BLOCK_ROWS <= n:
        _block_row(rows, centres, out, row, BLOCK_ROWS)
        row += BLOCK_ROWS
    while row < n:
        _block_row(rows, centres, out, row, 1)
        row += 1
    tail = width - width % LANES
    if tail < width:
        for i in range(n):
            for q in range(k):
                total = np.float32(0.0)
                for column in range(tail, width):
                    total += rows[i, column] * centres[q, column]
                out[i, q] += total
