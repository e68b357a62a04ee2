"""float32 operands rounded to TF32 into K-major copies: the first step of a tf32 matmul whose wgmma reads both
operands from shared memory (templates/matmul_wgmma.py.j2 with TF32; see families/matmul/kernel.py).

TF32 wgmma takes operands from shared memory K-major only and reads the top 19 bits of each float32 as it stands
(truncation), where cuBLAS's TF32 GEMM rounds its operands to nearest (``cvt.rna``; ``lab/tf32_rounding.py``),
which the family's tf32 oracle holds our kernels to. So each operand is rounded once, here, into a row-major copy
whose rows run along K: A as M x K, B as N x K (a row-major B transposed). Rows are ``ld`` floats apart, ``ld``
the next multiple of 4 at or above K, so every row starts 16-byte aligned for the kernel's cp.async copies; the
multiply never reads the pad. Blocks of 32 x 8 threads: the row copy moves 32 rows of 128 columns, each thread a
16-byte piece of four rows; the transposing one 32 x 32 tiles through a shared tile (33 columns: a column read is
conflict-free), each thread four elements, so global reads and writes both run along rows. Each thread issues all
its loads before its stores. They are fixed kernels, compiled once per process (and cached on disk), not
generated.
"""
from __future__ import annotations

from numba import cuda, float32

from ...core import backend

TILE, ROWS = 32, 8  # a block of TILE x ROWS threads moves TILE rows (of 4 TILE columns in the row copy)
PER = TILE // ROWS  # rows of a tile each thread moves
PADDED = TILE + 1  # the shared tile's row: a column of it falls on distinct banks
MAX_GRID_Y = 65535


def rounded_ld(k: int) -> int:
    """The row stride of a copy with k columns: k rounded up to whole 16-byte pieces of float32."""
    return -(-k // 4) * 4


if backend.simulator():
    import numpy as np

    def _rounded(x):
        """cvt.rna.tf32.f32 (see reference.tf32_round) on a simulated thread's scalar."""
        from .reference import tf32_round

        return float32(tf32_round(np.float32(x))[()])

    def vload4(arr, i):
        return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]

    def vstore4(arr, i, v0, v1, v2, v3):
        arr[i], arr[i + 1], arr[i + 2], arr[i + 3] = v0, v1, v2, v3
else:
    from ...kernels.intrinsics import vload4, vstore4
    from ...kernels.wgmma import tf32_round as _rounded


@cuda.jit(cache=True)
def rounded_rows(X, Y, rows, cols, ldx, ldy, vec):
    """Y[r * ldy + c] = TF32(X[r * ldx + c]) for r < rows, c < cols. Each thread moves a 16-byte piece of PER rows,
    all loads before the stores; vec: X's rows start 16-byte aligned (Y's always do), so each piece is one load."""
    c = (cuda.blockIdx.x * TILE + cuda.threadIdx.x) * 4
    got = cuda.local.array((PER, 4), float32)
    for r0 in range(cuda.blockIdx.y * TILE + cuda.threadIdx.y, rows, cuda.gridDim.y * TILE):
        for j in range(PER):
            r = r0 + j * ROWS
            if r < rows:
                if vec and c + 4 <= cols:
                    got[j, 0], got[j, 1], got[j, 2], got[j, 3] = vload4(X, r * ldx + c)
                else:
                    for e in range(4):
                        got[j, e] = X[r * ldx + c + e] if c + e < cols else float32(0)
        for j in range(PER):
            r = r0 + j * ROWS
            if r < rows and c < cols:
                vstore4(Y, r * ldy + c, _rounded(got[j, 0]), _rounded(got[j, 1]), _rounded(got[j, 2]),
                        _rounded(got[j, 3]))


@cuda.jit(cache=True)
def rounded_transpose(X, Y, rows, cols, ldx, ldy):
    """Y[r * ldy + c] = TF32(X[c * ldx + r]) for r < rows, c < cols; all of a thread's loads before its stores."""
    tile = cuda.shared.array((TILE, PADDED), float32)
    got = cuda.local.array(PER, float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    r0 = cuda.blockIdx.x * TILE
    for c0 in range(cuda.blockIdx.y * TILE, cols, cuda.gridDim.y * TILE):
        for j in range(PER):
            c = c0 + ty + j * ROWS
            got[j] = X[c * ldx + r0 + tx] if c < cols and r0 + tx < rows else float32(0)
        for j in range(PER):
            tile[ty + j * ROWS, tx] = got[j]
        cuda.syncthreads()
        for j in range(PER):
            got[j] = tile[tx, ty + j * ROWS]
        for j in range(PER):
            r = r0 + ty + j * ROWS
            if r < rows and c0 + tx < cols:
                Y[r * ldy + c0 + tx] = _rounded(got[j])
        cuda.syncthreads()


SIGNATURES = {"rounded_rows": "void(float32[::1], float32[::1], int64, int64, int64, int64, boolean)",
              "rounded_transpose": "void(float32[::1], float32[::1], int64, int64, int64, int64)"}  # as launched


def grid(rows: int, cols: int, transposed: bool) -> tuple[int, int]:
    """The grid of a copy of rows x cols: one block per tile along the copy's rows (transposed: x then runs over
    the copy's rows) or per 4 TILE of its columns, the other dimension strided where it would pass the grid's
    limit."""
    if transposed:
        return -(-rows // TILE), min(-(-cols // TILE), MAX_GRID_Y)
    return -(-cols // (4 * TILE)), min(-(-rows // TILE), MAX_GRID_Y)
