"""Compiled float32 sine and cosine, fused with what the RFF hot paths do next.

numpy evaluates ``cos`` and ``sin`` in separate passes, each with its own
range reduction, and cannot fuse them with the scaling and the column sums
that follow, so a float32 RFF tile is read and written four or five times.
These kernels (compiled by numba, without the GIL) evaluate both functions
from one reduction by pi/2 and either write the scaled features
(:func:`sincos_features`, :func:`cos_features`: 2.9x numpy's passes on a
256 x 512 tile) or accumulate their column sums (:func:`sincos_feature_sums`,
:func:`cos_feature_sums`: a whole chunk in one call; 1.5x numpy's tile loop
with the projection that both share, ``benchmarks/bench_sincos.py``, one run
on a loaded machine). One call per chunk also keeps other threads' Python
(zarr's reads) from stalling the kernel: it takes the GIL once, not a few
times per tile.

Vector width. numba compiles for the host CPU, and LLVM's tuning for recent
Intel cores prefers 256-bit vectors, so its auto-vectorised loops use half of
an AVX-512 core (2.0x numpy's features, measured). When numba compiles for
AVX-512 (:data:`WIDE_VECTORS`, the test of :mod:`streamrff._kernels.rowdot`), the
loops run the sin/cos in explicit ``<16 x float>`` LLVM vectors
(:func:`_wide_sincos`) and leave the last ``m mod 16`` columns to the
scalar loop. The vector code is the scalar one's float32 operations in the
same order (no fused multiply-add, no reassociation), so results are the same
bit for bit on every target.

Accuracy. The phase ``x`` is reduced as ``r = x - k pi/2`` with pi/2 split
in three float32 parts (Cody-Waite, as in Cephes' ``sinf``), and ``sin r``,
``cos r`` on ``|r| <= pi/4`` are Cephes' float32 minimax polynomials: at most
1.5 ulp from the float64 value (numpy's: 1 ulp), without bias. The split is
exact while ``|x| <= MAX_FAST_PHASE``. Beyond it (a tiny bandwidth, or
outliers), the sum kernels evaluate that tile as float32 of libm's float64
sin and cos, and callers of the feature kernels check :func:`largest_phase`
first and use numpy for that tile. Column sums are accumulated in float32
over 64 rows, then in float64: their norm-wise error (~1e-7) is that of
numpy's float32 features summed by a float32 GEMV.

Every kernel takes C-contiguous float32 arrays; outputs never overlap inputs.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .compiled import jit
from .rowdot import _compiles_for_avx512

__all__ = [
    "MAX_FAST_PHASE",
    "cos_feature_sums",
    "cos_features",
    "largest_phase",
    "rff_features",
    "sincos_feature_sums",
    "sincos_features",
]

#: Largest |phase| for which ``k * _PIO2_2`` stays exact (k < 2**13, the bound of Cephes'
#: reduction) with margin. A float32 phase this large already carries a rounding error of
#: |x| * 6e-8 radians.
MAX_FAST_PHASE = 8192.0

#: Rows summed in float32 before the float64 accumulation.
_SEGMENT_ROWS = 64

_TWO_OVER_PI = np.float32(2.0 / np.pi)
# pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3; the first two have short mantissas, so k * part is exact.
_PIO2_1 = np.float32(1.5703125)
_PIO2_2 = np.float32(4.837512969970703125e-4)
_PIO2_3 = np.float32(7.54978995489188216e-8)
# Cephes sinf / cosf minimax coefficients on [-pi/4, pi/4].
_S1, _S2, _S3 = np.float32(-1.6666654611e-1), np.float32(8.3321608736e-3), np.float32(-1.9515295891e-4)
_C1, _C2, _C3 = np.float32(4.166664568298827e-2), np.float32(-1.388731625493765e-3), np.float32(2.443315711809948e-5)

_jit = jit(nogil=True, boundscheck=False, error_model="numpy")

#: Float32 lanes of one explicit vector (512 bits).
LANES = 16
#: Whether the kernels evaluate sin/cos in explicit 16-lane vectors (:func:`_wide_sincos`):
#: when numba compiles for AVX-512. Elsewhere the auto-vectorised loops run, with the same
#: results bit for bit (the same float32 operations in the same order, lane by lane).
WIDE_VECTORS = _compiles_for_avx512()

_float = ir.FloatType()
_vector = ir.VectorType(_float, LANES)
_int_vector = ir.VectorType(ir.IntType(32), LANES)


def _is_float32_vector(array: types.Type) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.dtype == types.float32


def _emit_sincos(builder: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """LLVM IR for :func:`_sincos` on 16 lanes: the same float32 operations in the same order."""

    def splat(value: np.float32) -> ir.Constant:
        return ir.Constant(_vector, [float(value)] * LANES)

    def call(name: str, *arguments: ir.Value) -> ir.Value:
        function_type = ir.FunctionType(_vector, [_vector] * len(arguments))
        return builder.call(cgutils.get_or_insert_function(builder.module, function_type, name), arguments)

    mul, add, sub = builder.fmul, builder.fadd, builder.fsub
    k = call("llvm.rint.v16f32", mul(x, splat(_TWO_OVER_PI)))
    r = sub(sub(sub(x, mul(k, splat(_PIO2_1))), mul(k, splat(_PIO2_2))), mul(k, splat(_PIO2_3)))
    r2 = mul(r, r)
    sine = add(r, mul(mul(r, r2), add(splat(_S1), mul(r2, add(splat(_S2), mul(r2, splat(_S3)))))))
    cosine_tail = mul(mul(r2, r2), add(splat(_C1), mul(r2, add(splat(_C2), mul(r2, splat(_C3))))))
    cosine = add(sub(splat(np.float32(1.0)), mul(splat(np.float32(0.5)), r2)), cosine_tail)
    q = builder.fptosi(k, _int_vector)
    zero = ir.Constant(_int_vector, [0] * LANES)

    def bit_set(value: ir.Value, bit: int) -> ir.Value:
        return builder.icmp_signed("!=", builder.and_(value, ir.Constant(_int_vector, [bit] * LANES)), zero)

    odd = bit_set(q, 1)
    sin_x = builder.select(odd, cosine, sine)
    cos_x = builder.select(odd, sine, cosine)
    sin_x = builder.select(bit_set(q, 2), builder.fsub(splat(np.float32(-0.0)), sin_x), sin_x)
    next_quadrant = builder.add(q, ir.Constant(_int_vector, [1] * LANES))
    cos_x = builder.select(bit_set(next_quadrant, 2), builder.fsub(splat(np.float32(-0.0)), cos_x), cos_x)
    return sin_x, cos_x


def _is_uint16_vector(array: types.Type) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.dtype == types.uint16


def _sign_masks(context, builder, array_type, array_value, first):
    """``<16 x i32>``: the float32 sign bit in each lane ``l`` whose bit ``l`` is set in the uint16
    ``array[first // 16]``, else 0."""
    data = context.make_array(array_type)(context, builder, array_value).data
    index = builder.lshr(first, ir.Constant(first.type, 4))
    packed = builder.zext(builder.load(builder.gep(data, [index]), align=2), ir.IntType(32))
    splat = builder.shuffle_vector(
        builder.insert_element(ir.Constant(_int_vector, None), packed, ir.Constant(ir.IntType(32), 0)),
        ir.Constant(_int_vector, None),
        ir.Constant(_int_vector, [0] * LANES),
    )
    lane_bits = ir.Constant(_int_vector, [1 << lane for lane in range(LANES)])
    flipped = builder.icmp_unsigned("!=", builder.and_(splat, lane_bits), ir.Constant(_int_vector, [0] * LANES))
    sign_bit = ir.Constant(_int_vector, [-(1 << 31)] * LANES)
    return builder.select(flipped, sign_bit, ir.Constant(_int_vector, [0] * LANES))


def _flip_signs(builder, values, masks):
    """``values`` (``<16 x float>``) with the sign bits of ``masks`` flipped: the product by -1 exactly."""
    return builder.bitcast(builder.xor(builder.bitcast(values, _int_vector), masks), _vector)


def _vector_pointer(context, builder, array_type, array_value, index):
    data = context.make_array(array_type)(context, builder, array_value).data
    return builder.bitcast(builder.gep(data, [index]), _vector.as_pointer())


@intrinsic
def _wide_sincos(typingctx, phases, offsets, first, factor, out_a, out_b, largest, mode):
    """16 lanes from ``first`` of ``phases`` (plus ``offsets``, for modes 2 and 3), through
    :func:`_sincos`, in one explicit ``<16 x float>`` vector. ``mode`` (an integer literal):

    0: ``out_a = factor * cos``, ``out_b = factor * sin`` (sin/cos features);
    1: ``out_a += cos``, ``out_b += sin``, ``largest = max(largest, |x|)`` (their sums);
    2: ``out_a = factor * cos(x + offsets)`` (cos+phase features; ``out_b`` unused);
    3: ``out_a += cos(x + offsets)``, ``out_b += its square``, ``largest`` as in 1;
    4: ``out_a += s * cos``, ``out_b += s * sin``, with ``s`` = -1 where the lane's bit is set in
    ``largest``, a uint16 vector of packed signs (bit ``l`` of ``largest[first // 16]`` for lane
    ``l``; the sign bit is flipped, which is the product by -1 exactly), else 1;
    5: ``c = s * cos(x + offsets)``, ``out_a += c``, ``out_b += c * c`` (signs as in 4).

    The other arrays are 1-D float32 (``largest`` too, but in modes 4 and 5) with unit stride (the
    caller checks; ``first`` a multiple of 16 in modes 4 and 5); the same lanes of each are used,
    so every lane equals the scalar loop's result bit for bit.
    """
    if not isinstance(mode, types.IntegerLiteral):
        return None
    kind = mode.literal_value
    signs_packed = kind in (4, 5)
    if not all(_is_float32_vector(array) for array in (phases, offsets, out_a, out_b)):
        return None
    if not (_is_uint16_vector(largest) if signs_packed else _is_float32_vector(largest)):
        return None
    signature = types.void(phases, offsets, first, factor, out_a, out_b, largest, mode)

    def codegen(context, builder, signature, args):
        array_types = signature.args
        first_index = args[2]

        def pointer(position):
            return _vector_pointer(context, builder, array_types[position], args[position], first_index)

        x = builder.load(pointer(0), align=4)
        if kind in (2, 3, 5):
            x = builder.fadd(x, builder.load(pointer(1), align=4))
        sin_x, cos_x = _emit_sincos(builder, x)
        if kind in (0, 2):
            factor_value = context.cast(builder, args[3], array_types[3], types.float32)
            one_lane = builder.insert_element(ir.Constant(_vector, None), factor_value, ir.Constant(ir.IntType(32), 0))
            scale = builder.shuffle_vector(one_lane, one_lane, ir.Constant(_int_vector, [0] * LANES))
            builder.store(builder.fmul(scale, cos_x), pointer(4), align=4)
            if kind == 0:
                builder.store(builder.fmul(scale, sin_x), pointer(5), align=4)
        elif signs_packed:  # signed sums (the mixed map's): the lanes' sign bits in the ``largest`` slot
            first_sum, second_sum = pointer(4), pointer(5)
            flips = _sign_masks(context, builder, array_types[6], args[6], first_index)
            first = _flip_signs(builder, cos_x, flips)
            second = _flip_signs(builder, sin_x, flips) if kind == 4 else builder.fmul(first, first)
            builder.store(builder.fadd(builder.load(first_sum, align=4), first), first_sum, align=4)
            builder.store(builder.fadd(builder.load(second_sum, align=4), second), second_sum, align=4)
        else:
            first_sum, second_sum = pointer(4), pointer(5)
            second = sin_x if kind == 1 else builder.fmul(cos_x, cos_x)
            builder.store(builder.fadd(builder.load(first_sum, align=4), cos_x), first_sum, align=4)
            builder.store(builder.fadd(builder.load(second_sum, align=4), second), second_sum, align=4)
            largest_pointer = pointer(6)
            magnitude = builder.call(
                cgutils.get_or_insert_function(builder.module, ir.FunctionType(_vector, [_vector]), "llvm.fabs.v16f32"),
                [x],
            )
            current = builder.load(largest_pointer, align=4)
            builder.store(
                builder.select(builder.fcmp_ordered(">", magnitude, current), magnitude, current),
                largest_pointer,
                align=4,
            )
        return context.get_dummy_value()

    return signature, codegen


@jit(nogil=True, boundscheck=False, error_model="numpy", inline="always")
def _sincos(x):  # pragma: no cover - compiled
    """(sin x, cos x) in float32, exact reduction for |x| <= MAX_FAST_PHASE."""
    k = np.rint(x * _TWO_OVER_PI)
    r = ((x - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3
    r2 = r * r
    s = r + r * r2 * (_S1 + r2 * (_S2 + r2 * _S3))
    c = np.float32(1.0) - np.float32(0.5) * r2 + r2 * r2 * (_C1 + r2 * (_C2 + r2 * _C3))
    q = np.int32(k)
    sin_x = c if q & 1 else s
    cos_x = s if q & 1 else c
    return (-sin_x if q & 2 else sin_x), (-cos_x if (q + 1) & 2 else cos_x)


@jit(nogil=True, boundscheck=False, error_model="numpy", inline="always")
def _wide_lanes(phases, offsets, factor, out_a, out_b, largest, mode):  # pragma: no cover - compiled
    """:func:`_wide_sincos` over the whole 16-lane blocks of one row of ``phases`` (arguments as there; the
    caller checks the unit strides); returns the first column left to the caller's scalar loop.

    Inlined before typing, so ``mode`` stays the integer literal that :func:`_wide_sincos` requires and the
    callers compile to the loops they had with it written out. The stride checks stay with the callers:
    moved in here, they made :func:`streamrff._kernels.featuredot.rff_feature_dots` about 8% slower.
    """
    first = 0
    while first + LANES <= phases.shape[0]:
        _wide_sincos(phases, offsets, first, factor, out_a, out_b, largest, mode)
        first += LANES
    return first


def _tree_shuffles(count: int, width: int) -> tuple[list[int], list[int]]:
    """The lanes of two 16-lane vectors (0-15 the first, 16-31 the second) that :func:`_wide_row_sums`
    adds, ``first + second``, to halve ``count`` partial sums of ``width`` lanes each: the low and
    the high half of every width-lane segment, the first vector's segment then the second's."""
    low, high = [], []
    for segment in range(count):
        for source in (0, LANES):
            base = source + segment * width
            low.extend(range(base, base + width // 2))
            high.extend(range(base + width // 2, base + width))
    return low, high


@intrinsic
def _wide_row_sums(typingctx, block, j, row_scales, first, offsets, largest, totals, mode, count):
    """Rows ``j .. j + count - 1`` (``count``: the literal 1 or 16) of a C-contiguous float32
    (n, 32) block of transposed projections: phases ``x = block[j + i] * row_scales[first + j + i]``
    (``mode`` 1; ``offsets`` unused) or that plus ``offsets[first + j + i]`` (mode 3), their
    sin/cos as :func:`_sincos`, ``largest[:32] = max(largest, |x|)``, and ``totals[0, j + i]``,
    ``totals[1, j + i]`` = the sums over the 32 lanes of cos and sin (mode 1) or of cos and
    cos^2 (mode 3), each added as ``v[r] + v[r + 16]`` then by halves (lanes ``r`` and ``r + 8``,
    ``r + 4``, ...): the order of :func:`streamrff._kernels.sorf._block_sums`' loops, so the
    same bits. With 16 rows the halving runs on two rows' partial sums per vector (each
    vector add does the adds of both; :func:`_tree_shuffles`), 16 totals stored at once.
    ``totals``: C-contiguous float32 (2, >= n); ``row_scales``, ``offsets``: float32 vectors.
    """
    if not isinstance(count, types.IntegerLiteral) or count.literal_value not in (1, LANES):
        return None
    if not isinstance(mode, types.IntegerLiteral) or mode.literal_value not in (1, 3):
        return None
    for array, ndim in ((block, 2), (row_scales, 1), (offsets, 1), (largest, 1), (totals, 2)):
        if not (isinstance(array, types.Array) and array.ndim == ndim and array.dtype == types.float32):
            return None
    if block.layout != "C" or totals.layout != "C":
        return None
    n_rows, shifted = count.literal_value, mode.literal_value == 3
    signature = types.void(block, j, row_scales, first, offsets, largest, totals, mode, count)

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        i32 = ir.IntType(32)

        def splat(value):
            one_lane = builder.insert_element(ir.Constant(_vector, None), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(one_lane, one_lane, ir.Constant(_int_vector, [0] * LANES))

        def vector_pointer(data, index):
            return builder.bitcast(builder.gep(data, [index]), _vector.as_pointer())

        def shuffle(a, b, lanes):
            return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, len(lanes)), lanes))

        block_array = context.make_array(signature.args[0])(context, builder, args[0])
        columns = cgutils.unpack_tuple(builder, block_array.shape, 2)[1]
        row = context.cast(builder, args[1], signature.args[1], types.intp)
        scales = context.make_array(signature.args[2])(context, builder, args[2])
        frequency = builder.add(context.cast(builder, args[3], signature.args[3], types.intp), row)
        offset_data = context.make_array(signature.args[4])(context, builder, args[4]).data
        largest_data = context.make_array(signature.args[5])(context, builder, args[5]).data
        fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_vector, [_vector]), "llvm.fabs.v16f32")
        largest_pointers = [vector_pointer(largest_data, ir.Constant(intp, part * LANES)) for part in range(2)]
        largest_values = [builder.load(pointer, align=4) for pointer in largest_pointers]
        sums = []  # per row: the (cos, second) sums of its lanes r and r + 16
        stack = []  # (width of the partial sums, their vectors); rows merged as a binary counter
        for i in range(n_rows):
            index = builder.add(frequency, ir.Constant(intp, i))
            scale = splat(builder.load(builder.gep(scales.data, [index])))
            shift = splat(builder.load(builder.gep(offset_data, [index]))) if shifted else None
            firsts, seconds = [], []
            for part in range(2):
                position = builder.add(
                    builder.mul(builder.add(row, ir.Constant(intp, i)), columns), ir.Constant(intp, part * LANES)
                )
                x = builder.fmul(builder.load(vector_pointer(block_array.data, position), align=4), scale)
                if shifted:
                    x = builder.fadd(x, shift)
                magnitude = builder.call(fabs, [x])
                current = largest_values[part]
                largest_values[part] = builder.select(builder.fcmp_ordered(">", magnitude, current), magnitude, current)
                sin_x, cos_x = _emit_sincos(builder, x)
                firsts.append(cos_x)
                seconds.append(builder.fmul(cos_x, cos_x) if shifted else sin_x)
            pair = (builder.fadd(firsts[0], firsts[1]), builder.fadd(seconds[0], seconds[1]))
            if n_rows == 1:
                sums.append(pair)
                continue
            stack.append((LANES, pair))
            while len(stack) > 1 and stack[-1][0] == stack[-2][0]:
                (width, high_pair), (_, low_pair) = stack.pop(), stack.pop()
                low, high = _tree_shuffles(LANES // width, width)
                merged = tuple(
                    builder.fadd(shuffle(a, b, low), shuffle(a, b, high))
                    for a, b in zip(low_pair, high_pair, strict=True)
                )
                stack.append((width // 2, merged))
        for pointer, value in zip(largest_pointers, largest_values, strict=True):
            builder.store(value, pointer, align=4)
        totals_array = context.make_array(signature.args[6])(context, builder, args[6])
        totals_columns = cgutils.unpack_tuple(builder, totals_array.shape, 2)[1]
        for which in range(2):
            target = builder.add(builder.mul(ir.Constant(intp, which), totals_columns), row)
            if n_rows == 1:
                total = sums[0][which]
                lanes = LANES
                while lanes > 1:  # (0..7) + (8..15), then (0..3) + (4..7), ...
                    lanes //= 2
                    total = builder.fadd(
                        shuffle(total, total, list(range(lanes))), shuffle(total, total, list(range(lanes, 2 * lanes)))
                    )
                builder.store(
                    builder.extract_element(total, ir.Constant(i32, 0)), builder.gep(totals_array.data, [target])
                )
            else:
                order = _merged_rows(n_rows)
                total = shuffle(stack[0][1][which], stack[0][1][which], [order.index(r) for r in range(n_rows)])
                builder.store(total, vector_pointer(totals_array.data, target), align=4)
        return context.get_dummy_value()

    return signature, codegen


def _merged_rows(count: int) -> list[int]:
    """The row whose total each lane of :func:`_wide_row_sums`' last vector holds, after the merges
    of :func:`_tree_shuffles` in binary-counter order."""
    stack = []
    for row in range(count):
        stack.append((LANES, [row]))
        while len(stack) > 1 and stack[-1][0] == stack[-2][0]:
            (width, high_rows), (_, low_rows) = stack.pop(), stack.pop()
            segments = LANES // width
            merged = []
            for segment in range(segments):
                merged += [low_rows[segment], high_rows[segment]]
            stack.append((width // 2, merged))
    return stack[0][1]


@_jit
def largest_phase(phases, offsets):  # pragma: no cover - compiled
    """``max |phases + offsets|`` (``offsets`` may have length 0), to check a tile before
    :func:`sincos_features` or :func:`cos_features`.

    (Inside those kernels the check would stop their loops from vectorising.)
    """
    rows, m = phases.shape
    largest = np.zeros(m, np.float32)  # per column, so that the loop vectorises
    if offsets.shape[0]:
        for i in range(rows):
            for j in range(m):
                largest[j] = max(largest[j], abs(phases[i, j] + offsets[j]))
    else:  # no offsets (the sincos variant)
        for i in range(rows):
            for j in range(m):
                largest[j] = max(largest[j], abs(phases[i, j]))
    return largest.max()


@_jit
def sincos_feature_sums(rows, frequencies, tile_rows, out):  # pragma: no cover - compiled
    """Add the column sums of ``cos(rows @ frequencies)`` to ``out[0]`` and of the sines to ``out[1]``.

    ``rows``: float32 (n, d); ``frequencies``: float32 (d, m); ``out``: float64 (2, m). The
    projection runs tile by tile (BLAS sgemm), all in one call without the GIL.
    """
    out += _column_sums(rows, frequencies, np.zeros(0, np.float32), tile_rows)


@_jit
def cos_feature_sums(rows, frequencies, offsets, tile_rows, out):  # pragma: no cover - compiled
    """Add the column sums of ``cos(rows @ frequencies + offsets)`` to ``out``; return the sum of their squares.

    ``rows``: float32 (n, d); ``frequencies``: float32 (d, m); ``offsets``: float32 (m,);
    ``out``: float64 (m,).
    """
    totals = _column_sums(rows, frequencies, offsets, tile_rows)
    out += totals[0]
    return totals[1].sum()


@_jit
def _column_sums(rows, frequencies, offsets, tile_rows):  # pragma: no cover - compiled
    """Float64 (2, m) totals over all rows of what :func:`_fast_sums` sums per tile."""
    n, m = rows.shape[0], frequencies.shape[1]
    # Scratch for the whole call: allocating per tile fragments the heap between the large
    # buffers of zarr reads, whose pages then fault afresh (~2 ms per 6 MB).
    projection = np.empty((min(tile_rows, n), m), np.float32)
    scratch = np.empty((3, m), np.float32)
    tile = np.empty((2, m))
    totals = np.zeros((2, m))
    for start in range(0, n, tile_rows):
        phases = projection[: min(n, start + tile_rows) - start]
        np.dot(rows[start : start + phases.shape[0]], frequencies, phases)
        if not _fast_sums(phases, offsets, scratch, tile):
            _exact_sums(phases, offsets, tile)
        totals += tile
    return totals


@_jit
def _fast_sums(phases, offsets, scratch, tile):  # pragma: no cover - compiled
    """Column sums of a tile's features, in float64, into ``tile``; False if a phase exceeds
    MAX_FAST_PHASE (then ``tile`` is garbage).

    Without ``offsets`` (length 0): ``tile[0]`` = sums of ``cos(phases)``, ``tile[1]`` = sums of
    ``sin(phases)``. With them: ``tile[0]`` = sums of ``cos(phases + offsets)``, ``tile[1]`` =
    sums of their squares. ``scratch``: float32 (3, m), overwritten.
    """
    rows, m = phases.shape
    largest, first_sums, second_sums = scratch[0], scratch[1], scratch[2]
    largest[:] = 0.0  # per column, so that the loops vectorise
    tile[:] = 0.0
    one = np.float32(1.0)
    for start in range(0, rows, _SEGMENT_ROWS):
        first_sums[:] = 0.0
        second_sums[:] = 0.0
        for i in range(start, min(rows, start + _SEGMENT_ROWS)):
            row = phases[i]
            wide = WIDE_VECTORS and row.strides[0] == 4 and largest.strides[0] == 4
            first = 0
            if offsets.shape[0]:
                if wide and offsets.strides[0] == 4:
                    first = _wide_lanes(row, offsets, one, first_sums, second_sums, largest, 3)
                for j in range(first, m):
                    x = row[j] + offsets[j]
                    largest[j] = max(largest[j], abs(x))
                    c = _sincos(x)[1]
                    first_sums[j] += c
                    second_sums[j] += c * c
            else:
                if wide:
                    first = _wide_lanes(row, row, one, first_sums, second_sums, largest, 1)
                for j in range(first, m):
                    x = row[j]
                    largest[j] = max(largest[j], abs(x))
                    s, c = _sincos(x)
                    first_sums[j] += c
                    second_sums[j] += s
        tile[0] += first_sums
        tile[1] += second_sums
    return largest.max() <= MAX_FAST_PHASE


@_jit
def _exact_sums(phases, offsets, tile):  # pragma: no cover - compiled
    """:func:`_fast_sums` for any phase: float32 of libm's float64 cos and sin."""
    rows, m = phases.shape
    tile[:] = 0.0
    for i in range(rows):
        for j in range(m):
            if offsets.shape[0]:
                c = np.float64(np.float32(np.cos(np.float64(phases[i, j] + offsets[j]))))
                tile[0, j] += c
                tile[1, j] += c * c
            else:
                x = np.float64(phases[i, j])
                tile[0, j] += np.float64(np.float32(np.cos(x)))
                tile[1, j] += np.float64(np.float32(np.sin(x)))


@_jit
def sincos_features(phases, scale, out):  # pragma: no cover - compiled
    """``out[:, :m] = scale * cos(phases)``, ``out[:, m:] = scale * sin(phases)``.

    ``phases``: float32 (rows, m) with ``largest_phase(phases) <= MAX_FAST_PHASE``;
    ``out``: float32 (rows, 2 m).
    """
    rows, m = phases.shape
    factor = np.float32(scale)
    for i in range(rows):
        row, cosines, sines = phases[i], out[i, :m], out[i, m:]  # 1-D views: the loop vectorises
        start = 0
        if WIDE_VECTORS and row.strides[0] == 4 and cosines.strides[0] == 4:
            start = _wide_lanes(row, row, factor, cosines, sines, row, 0)
        for j in range(start, m):
            s, c = _sincos(row[j])
            cosines[j] = factor * c
            sines[j] = factor * s


@_jit
def cos_features(phases, offsets, scale, out):  # pragma: no cover - compiled
    """``out = scale * cos(phases + offsets)``.

    ``phases``, ``out``: float32 (rows, m) with ``largest_phase(phases, offsets) <=
    MAX_FAST_PHASE``; ``offsets``: float32 (m,).
    """
    rows, m = phases.shape
    factor = np.float32(scale)
    for i in range(rows):
        row, cosines = phases[i], out[i]
        start = 0
        if WIDE_VECTORS and row.strides[0] == 4 and cosines.strides[0] == 4 and offsets.strides[0] == 4:
            start = _wide_lanes(row, offsets, factor, cosines, cosines, row, 2)
        for j in range(start, m):
            cosines[j] = factor * _sincos(row[j] + offsets[j])[1]


@_jit
def rff_features(rows, frequencies, offsets, scale, projection, out):  # pragma: no cover - compiled
    """Float32 RFF features of a tile: ``projection = rows @ frequencies``, then the scaled
    cos/sin (``offsets`` of length 0) or cos of phase plus offset into ``out``.

    The one float32 RFF embedding that :meth:`RFF.transform` and the compiled
    Lloyd kernel share, so both see the same features bit for bit. Tiles with a
    phase beyond MAX_FAST_PHASE take float32 of libm's float64 cos and sin.
    ``rows``: float32 (t, d); ``frequencies``: float32 (d, m); ``projection``:
    float32 (t, m) scratch; ``out``: float32 (t, 2 m) or (t, m).
    """
    np.dot(rows, frequencies, projection)
    sincos = offsets.shape[0] == 0
    if largest_phase(projection, offsets) <= MAX_FAST_PHASE:
        if sincos:
            sincos_features(projection, scale, out)
        else:
            cos_features(projection, offsets, scale, out)
        return
    factor = np.float32(scale)
    rows_, m = projection.shape
    for i in range(rows_):
        for j in range(m):
            if sincos:
                x = np.float64(projection[i, j])
                out[i, j] = factor * np.float32(np.cos(x))
                out[i, m + j] = factor * np.float32(np.sin(x))
            else:
                out[i, j] = factor * np.float32(np.cos(np.float64(projection[i, j] + offsets[j])))
