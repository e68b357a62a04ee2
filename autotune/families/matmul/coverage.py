"""Matmul's shape sets (``MatmulFamily.shape_set``): the coverage set that ``autotune coverage`` measures and rules are
fitted on, and the held-out set that only the bench sees.

Sizes are M x N x K (C is M x N, A is M x K). **The distribution** every drawn shape comes from, one of six kinds
chosen with equal odds (sizes log-uniform in the ranges given, rounded to a multiple of 1, 8 or 64 chosen with
equal odds: see ``core/shapesets.log_size``):

- general: M, N, K each in 64..16384;
- skinny M: M in 16..256, N and K in 512..16384 (and skinny N the same with M and N swapped);
- K-heavy: M and N in 64..2048, K in 4096..16384;
- K-light: K in 64..512, M and N in 1024..16384;
- a model layer: (N, K) one of ``MODEL_LAYERS`` (linear layers of BERT, GPT-2, Llama 2 and 3), M (tokens) in
  32..8192.

A draw is refused where M*N*K exceeds the dtype's work bound (``WORK_BOUND``: timing every candidate on a shape
must take milliseconds, not seconds) or an operand exceeds 2**28 elements.

**The coverage set**: the family's eight suite shapes (whatever their size: their entries are re-measured against
every candidate), the cubes of ``core/shapesets.half_octaves(6, 14)`` (64, 91, 128, 181, ..., 16384) within the
bound, the model layers each at two token counts of ``TOKENS`` (the i-th layer at the (i mod 4)-th and
((i + 2) mod 4)-th) within the bound, and 40 draws with seed 0. **The held-out set**: 32 draws with seed 1, none in the coverage set
(the eight suite shapes are benched beside them). Both are then put in ``spread_order``.
"""
from __future__ import annotations

from typing import Any, Mapping

from ...core.shapesets import COVERAGE_SEED, HELD_OUT_SEED, draw_shapes, half_octaves, log_size, spread_order, unique

MODEL_LAYERS = (  # (N, K): output and input features of a linear layer
    (2304, 768), (768, 768), (3072, 768), (768, 3072),  # BERT-base
    (3072, 1024), (4096, 1024), (1024, 4096),  # GPT-2 medium, BERT-large
    (12288, 4096), (4096, 4096), (11008, 4096), (4096, 11008),  # Llama 2 7B
    (6144, 4096), (14336, 4096), (4096, 14336),  # Llama 3 8B
    (15360, 5120), (5120, 5120), (13824, 5120), (5120, 13824),  # Llama 2 13B
    (10240, 8192), (8192, 8192), (28672, 8192), (8192, 28672),  # Llama 2/3 70B
)
TOKENS = (128, 512, 2048, 8192)
#: the largest M*N*K of a shape in the sets, per dtype (and TF32 precision): a few milliseconds per run
WORK_BOUND = {"float32": 2 ** 37, "float64": 2 ** 37, "3xtf32": 2 ** 38, "tf32": 2 ** 39, "float16": 2 ** 40,
              "bfloat16": 2 ** 40}
MAX_OPERAND = 2 ** 28
DRAWS = 40
HELD_OUT = 32
SIMULATOR = ((37, 29, 11), (16, 40, 24), (5, 3, 70))


def work_bound(dtype: str, args: Mapping[str, Any]) -> int:
    precision = args.get("precision", "ieee")
    return WORK_BOUND[precision if dtype == "float32" and precision != "ieee" else dtype]


def fits(shape: tuple[int, int, int], bound: int) -> bool:
    M, N, K = shape
    return M * N * K <= bound and max(M * K, K * N, M * N) <= MAX_OPERAND


def draw(rng) -> tuple[int, int, int]:
    """One shape of the distribution in the module docstring (not yet checked against the bounds)."""
    kind = int(rng.integers(6))
    if kind == 0:
        return log_size(rng, 6, 14), log_size(rng, 6, 14), log_size(rng, 6, 14)
    if kind in (1, 2):
        skinny, wide, k = log_size(rng, 4, 8), log_size(rng, 9, 14), log_size(rng, 9, 14)
        return (skinny, wide, k) if kind == 1 else (wide, skinny, k)
    if kind == 3:
        return log_size(rng, 6, 11), log_size(rng, 6, 11), log_size(rng, 12, 14)
    if kind == 4:
        return log_size(rng, 10, 14), log_size(rng, 10, 14), log_size(rng, 6, 9)
    n, k = MODEL_LAYERS[int(rng.integers(len(MODEL_LAYERS)))]
    return log_size(rng, 5, 13), n, k


def designed(bound: int, suite: tuple[tuple[int, ...], ...]) -> list[tuple[int, ...]]:
    cubes = [(s, s, s) for s in half_octaves(6, 14)]
    layers = [(TOKENS[(i + j) % len(TOKENS)], n, k) for i, (n, k) in enumerate(MODEL_LAYERS) for j in (0, 2)]
    return unique(list(suite) + [s for s in unique(cubes + layers) if fits(s, bound)])


def shape_set(name: str, dtype: str, args: Mapping[str, Any],
              suite: tuple[tuple[int, ...], ...] = ()) -> list[tuple[int, ...]]:
    """The named set (module docstring); ``suite``: the family's suite shapes, part of the coverage set."""
    if name == "simulator":
        return list(SIMULATOR)
    bound = work_bound(dtype, args)
    accept = lambda rng: (lambda s: s if fits(s, bound) else None)(draw(rng))  # noqa: E731
    fixed = designed(bound, suite)
    coverage = unique(fixed + draw_shapes(accept, DRAWS, COVERAGE_SEED, exclude=fixed))
    if name == "coverage":
        return spread_order(coverage)
    if name == "held-out":
        return spread_order(draw_shapes(accept, HELD_OUT, HELD_OUT_SEED, exclude=coverage))
    raise ValueError(f"matmul has the shape sets coverage, held-out and simulator, not {name!r}")


def rule_text() -> str:
    return __doc__.split("\n\n", 1)[1].strip()

