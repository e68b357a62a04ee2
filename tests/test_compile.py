"""Every parameter value compiles for sm_90 through the real compiler (nvJitLink, no GPU), and the compiler's
register count shows each variant can launch."""
import atexit
import collections
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core.constraints import SM_REGISTERS
from autotune.core.registry import family

HERE = Path(__file__).parent


def compiler_env() -> dict[str, str]:
    """This process's environment without the simulator, with this checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(HERE.parent)
    return env


def run_compiler_script(*args: str, timeout: int = 900, **kwargs) -> subprocess.CompletedProcess:
    """Run a script of tests/ in its own process with the real compiler, not the simulator."""
    return subprocess.run([sys.executable, *(str(HERE / a) if a.endswith(".py") else a for a in args)],
                          capture_output=True, text=True, env=compiler_env(), timeout=timeout, **kwargs)


# The variants of tests/compile_sample.py (its covering samples, kept in tests/data/covering-sample.json, and its
# extras: 115 variants, about 2.5 CPU-minutes of compiling) are compiled in shards, each its own test, so that the
# test workers share them: every variant is in exactly one shard, every shard must compile all of its variants, and
# test_covering_samples_use_every_value_of_every_parameter checks that the kept samples are still valid
# configurations that together take every value of every parameter.
COVERING_SHARDS = 4


@functools.lru_cache(maxsize=None)
def covering_items() -> tuple:
    import compile_sample

    return tuple(compile_sample.items())


def test_covering_samples_use_every_value_of_every_parameter():
    """The kept samples are what the search spaces make of them now (valid, defaults filled), and together with
    the extras they take every value of every parameter; where a space changed, `python tests/compile_sample.py
    --draw` draws them again."""
    import compile_sample

    from autotune.core.space import load_space

    redraw = "the search space changed: run `python tests/compile_sample.py --draw`"
    for kind, dtype, args, params in compile_sample.kept_samples():
        try:
            checked = load_space(kind).validate(params, dtype=dtype, args=family(kind).family_args(**args))
        except ValueError as exc:
            raise AssertionError(f"{kind} {dtype} {params}: {exc}; {redraw}") from None
        assert checked == params, (kind, dtype, params, redraw)
    items = covering_items()
    assert len(items) >= 25
    dynamic = [params for _, _, _, params in items if params.get("ASYNC_STAGES") == 4 and params.get("BK") == 32
               and params.get("BM") == 64 and params.get("BN") == 64]
    assert dynamic  # 64 KB of tiles: the shard that compiles it checks they are not static
    values = {}
    for kind, _, _, params in items:
        for name, value in params.items():
            values.setdefault((kind, name), set()).add(value)
    for kind in ("matmul", "reduce"):
        for name, param in load_space(kind).params.items():
            assert values[(kind, name)] == set(param.values), (kind, name, redraw)  # every value is in a shard


@pytest.mark.parametrize("shard", range(COVERING_SHARDS))
def test_covering_samples_compile_for_sm90(shard):
    items = covering_items()[shard::COVERING_SHARDS]
    proc = run_compiler_script("compile_sample.py", "-", input=json.dumps(items))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    failed = [r for r in results if "error" in r]
    assert not failed, failed[:3]
    assert [(r["kind"], r["dtype"], r["params"]) for r in results] == [(k, d, p) for k, d, _, p in items]
    print(f"\n{'family':42} {'registers':>9} {'spill bytes':>11}  parameters")
    for r in results:
        report = r["report"]
        print(f"{r['kind'] + ' ' + r['dtype'] + ' ' + str(r['family']):42} {report['registers']:>9} "
              f"{report['spill_stores'] + report['spill_loads']:>11}  {r['params']}")
        assert report["registers"] * family(r["kind"]).threads(r["params"]) <= SM_REGISTERS, r  # launch_bounds keeps every block launchable
    dynamic = [r for r in results if r["params"].get("ASYNC_STAGES") == 4 and r["params"].get("BK") == 32
               and r["params"].get("BM") == 64 and r["params"].get("BN") == 64]
    assert all(r["report"]["shared_bytes"] < 48 * 1024 for r in dynamic)  # 64 KB of tiles, not static


def test_split_k_adds_compile_to_the_chosen_instructions():
    """SPLIT_ADD vector adds a thread's vectors of C with red.global.add.v4.f32 (scalar red at the N edge), and no
    atom; the default keeps Numba's atomic add per element, which database entries written before were timed with;
    last_block adds nothing atomically to C: it stores partial tiles (4-wide), fences, and counts blocks."""
    ptx = ptx_sample("vector", "atomic", "last_block")
    vector, atomic, last = ptx["vector"], ptx["atomic"], ptx["last_block"]
    assert "red.relaxed.gpu.global.add.v4.f32" in vector and "red.relaxed.gpu.global.add.f32" in vector
    assert issues("red", vector) and not issues("atom", vector)
    assert "atom.global.add.f32" in atomic and not issues("red", atomic)
    assert "st.global.v4.f32" in last and "membar.gl" in last and "atom.global.add.u32" in last
    assert "atom.global.add.f32" not in last and not issues("red", last)


def test_mul_add_compiles_to_the_ptx_of_the_statement():
    """The tiled kernel's multiply-adds are mul_add calls for the front end's sake; the PTX must be what the plain
    statements acc += a * b make, byte for byte but the names a process numbers (mangled names hold a hash of the
    source and a count of kernels compiled; shared arrays a count of those made), so the GPU runs the same kernel:
    one fma.rn.f32 per multiply-add of the tile."""
    ptx = ptx_sample("tiled", "tiled_statements")
    unnamed = {name: unnumbered(text) for name, text in ptx.items()}
    assert unnamed["tiled"] == unnamed["tiled_statements"]
    assert len(re.findall(r"\bfma\.rn\.f32\b", ptx["tiled"])) >= 4 * 8 * 2


def test_reductions_of_narrow_dtypes_accumulate_wide():
    """int32 sums load int32 and add in int64 (atomics too); an int32 dot adds its int64 partials truncated to int32
    atomically (the same result modulo 2**32); int64 max shuffles and compares 64 bits; float16 loads four halves at
    once, widens them to float32 and combines row slices atomically in a float32 workspace, never in float16."""
    ptx = ptx_sample("int32_sum", "int32_dot", "int64_max", "float16_sum")
    int32_sum, int32_dot, int64_max, half = ptx["int32_sum"], ptx["int32_dot"], ptx["int64_max"], ptx["float16_sum"]
    assert "ld.global.v4.u32" in int32_sum and "cvt.s64.s32" in int32_sum and "atom.global.add.u64" in int32_sum
    assert "atom.global.add.u32" in int32_dot and "mul.lo.s64" in int32_dot and not issues("atom", int32_dot.replace(
        "atom.global.add.u32", ""))
    assert "max.s64" in int64_max and "shfl.sync.down.b32" in int64_max and "ld.global.v2.u64" in int64_max
    assert "ld.global.v4.u16" in half and "cvt.f32.f16" in half and "atom.global.add.f32" in half
    assert half_precision_types(half) == ["cvt.f32.f16"]  # nothing else in half precision


def test_bfloat16_reductions_read_bits_and_round_once():
    """bfloat16 is loaded as 16-bit patterns (four at once with VEC 4), widened by a shift into a float32 (no
    conversion instruction), summed in float32 (row slices atomically in a float32 workspace) and rounded to
    bfloat16 once, by cvt.rn.bf16.f32, where the result is stored; ptxas takes the conversion for sm_90."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("bfloat16_sum", "bfloat16_max")
    for name, text in ptx.items():
        assert "ld.global.v4.u16" in text and "cvt.u32.u16" in text and "shl.b32" in text, name
        assert set(half_precision_types(text)) <= {"cvt.rn.bf16.f32"}, name
    assert "atom.global.add.f32" in ptx["bfloat16_sum"] and "cvt.rn.bf16.f32" not in ptx["bfloat16_sum"]
    assert "cvt.rn.bf16.f32" in ptx["bfloat16_max"] and "st.global.u16" in ptx["bfloat16_max"]
    _, log = link(ptx["bfloat16_max"], (9, 0))
    assert " 0 bytes spill stores" in log, log


def test_each_precision_issues_its_mma():
    """tf32 rounds each fragment value once (cvt.rna.tf32.f32) and issues m16n8k8 (k4 at MMA=4) with TF32 operands
    and fp32 accumulators; 3xtf32 splits each value into its TF32 rounding and the rest (the same conversions and
    a subtraction each) and issues three mma for each of tf32's; ieee float32 issues no mma and rounds nothing to TF32; float64
    keeps fp64's mma."""
    ptx = ptx_sample("tf32", "3xtf32", "tf32_k4", "ieee", "fp64")
    tf32_mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    counts = {name: (ptx[name].count("mma.sync"), ptx[name].count("cvt.rna.tf32.f32")) for name in ptx}
    assert counts["tf32"][0] > 0 and ptx["tf32"].count(tf32_mma) == counts["tf32"][0]
    assert counts["3xtf32"] == (3 * counts["tf32"][0], counts["tf32"][1]), counts
    assert ptx["3xtf32"].count(tf32_mma) == counts["3xtf32"][0]
    assert "sub.f32" in ptx["3xtf32"] and "sub.f32" not in ptx["tf32"]
    assert ptx["tf32_k4"].count("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32") == counts["tf32_k4"][0] > 0
    assert counts["ieee"] == (0, 0), counts
    assert ptx["fp64"].count("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64") == counts["fp64"][0] > 0
    assert counts["fp64"][1] == 0
    # Fragments come in gathers: 2 x 2 (A) and 2 x 2 (B) values at constant offsets from one address each (LLVM
    # may fold two gathers onto one address).
    loads = re.findall(r"ld\.shared\.f32\s+%f\d+, \[(%r[d]?\d+)(?:\+(\d+))?\]", ptx["tf32"])
    bases = collections.Counter(base for base, _ in loads)
    assert loads and min(bases.values()) >= 4, bases


def test_float16_issues_its_mma_on_ldmatrix_fragments():
    """float16 issues m16n8k16 with f16 operands and fp32 accumulators, nothing rounded to TF32; its fragments come
    from ldmatrix, one x4 per 16 x 16 piece of A (.trans from a k-major tile) and per two n8 pieces of B (.trans),
    with no other shared loads; split-K partials are float32 (the workspace is read as v4.f32) and C is stored as
    float16, converted once (cvt.rn.f16.f32). Each mma takes an ldmatrix's four A registers and two of B's as they
    were loaded, in order: any other order costs register moves before every mma (H100: 250 moves per 64 mma,
    1.3x the time at 8192^3)."""
    ptx = ptx_sample("fp16", "fp16_kmajor")
    f16_mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    x4, x4_trans = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    for name, text in ptx.items():
        assert text.count("mma.sync") == text.count(f16_mma) == 2, name  # TM 2 x TN 4: one 16 x 16 piece, two n8
        assert not re.search(r"ld\.shared\.", text), name
        loaded = re.findall(r"ldmatrix[^{]*\{([^}]*)\}", text)
        operands = re.findall(r"mma\.sync[^{]*\{[^}]*\}, \{([^}]*)\}, \{([^}]*)\}", text)
        quads = [[r.strip() for r in regs.split(",")] for regs in loaded]
        assert len(quads) == 2 and len(operands) == 2, (loaded, operands)
        a_quad, b_quad = quads  # A's ldmatrix comes first in both renders
        assert [regs for regs, _ in operands] == [", ".join(a_quad)] * 2, (a_quad, operands)
        assert [regs for _, regs in operands] == [", ".join(b_quad[:2]), ", ".join(b_quad[2:])], (b_quad, operands)
        assert "tf32" not in text and "cvt.rn.f16.f32" in text and "st.global.u16" in text, name
    mmajor, kmajor = ptx["fp16"], ptx["fp16_kmajor"]
    assert mmajor.count(x4) == 1 and mmajor.count(x4_trans) == 1
    assert kmajor.count(x4) == 0 and kmajor.count(x4_trans) == 2
    assert "ld.global.v4.f32" in kmajor and "ld.global.v4.f32" not in mmajor
    to_f32 = ptx_sample("fp16_to_f32")["fp16_to_f32"]  # out_dtype float32: C stored as it is summed
    assert to_f32.count(f16_mma) == 2 and "cvt.rn.f16.f32" not in to_f32 and "st.global.f32" in to_f32


def test_bfloat16_matmul_issues_bf16_products_and_rounds_c_once():
    """bfloat16 runs float16's kernels with bf16 products: mma.sync m16n8k16 .bf16 on ldmatrix fragments, and
    wgmma m64nNk16 .bf16 on swizzled tiles (nothing of float16's: no f16 instruction at all); float32 accumulators
    rounded once to bfloat16 where C is stored (cvt.rn.bf16.f32); ptxas keeps the wgmma asynchronous, no spills."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("bf16", "wgmma_bf16")
    mma, wgmma = ptx["bf16"], ptx["wgmma_bf16"]
    assert mma.count("mma.sync") == mma.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 2
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in mma and "ldmatrix.sync.aligned.m8n8.x4.trans" in mma
    assert re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.bf16\.bf16", wgmma) == ["128"] * 4
    for name, text in ptx.items():
        assert "cvt.rn.bf16.f32" in text and "f16" not in text.replace("bf16", ""), name
        _, log = link(text, (9, 0))
        assert "serialized" not in log and " 0 bytes spill stores" in log, (name, log)


def test_float16_moves_sixteen_bytes_at_a_time_with_vec_8():
    """VEC 8 (float16 only) copies a tile row's eight halves with one 16-byte cp.async (.cg, the L2-only form that
    exists for 16 bytes alone). Register staging loads and stores them as one 16-byte vector too, four 32-bit
    words (vload8 and vstore8: NVVM splits a vector of eight halves into two 8-byte accesses, v4.u16): the
    interior path has no 2-byte loads or stores to shared memory."""
    ptx = ptx_sample("fp16_vec8", "fp16_vec8_staged")
    copies = re.findall(r"cp\.async\.(\w+)\.shared\.global \[[^]]*\], \[[^]]*\], (\d+)", ptx["fp16_vec8"])
    assert copies and set(copies) == {("cg", "16")}, set(copies)
    staged = collections.Counter(re.findall(r"(?:ld|st)\.(?:global|shared)\.[\w.]+", ptx["fp16_vec8_staged"]))
    assert "cp.async" not in ptx["fp16_vec8_staged"] and not staged["st.shared.u16"], staged
    assert staged["ld.global.v4.u32"] and staged["st.shared.v4.u32"], staged
    assert not staged["ld.global.v4.u16"] and not staged["st.shared.v4.u16"], staged


def test_float16_on_wgmma_keeps_its_multiplies_running():
    """A wgmma variant issues one wgmma m64n<BN>k16 per 16 of a K step, with A K-major and B N-major for "nn" (the
    transpose flags) and the reverse for "tt", on descriptors of 128-byte-swizzled tiles (layout type 1 at bit 62)
    that 16-byte cp.async copies fill; C leaves through shared memory in 16-byte pieces; it waits for its multiplies with one group left running in the loop and
    none after it, and uses no mma.sync or ldmatrix. ptxas keeps the multiplies asynchronous: when an instruction
    other than a wgmma touches the accumulators between a multiply and its wait (C7514, C7515: a branch per
    result stored straight to C did) it serializes every wgmma, which cost the H100 probe 2.6x."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("wgmma", "wgmma_tt_f32")
    for name, flags in (("wgmma", "0, 1;"), ("wgmma_tt_f32", "1, 0;")):
        text = ptx[name]
        issued = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.f16\.f16 \{[^}]*\}, [^;]*;", text)
        assert issued == ["128"] * 4, issued
        assert all(line.rstrip().endswith(flags) for line in text.splitlines() if "wgmma.mma_async" in line), name
        assert "wgmma.wait_group.sync.aligned 1;" in text and "wgmma.wait_group.sync.aligned 0;" in text
        assert "fence.proxy.async.shared::cta" in text and "mma.sync" not in text and "ldmatrix" not in text
        assert set(re.findall(r"cp\.async\.(\w+)\.shared\.global \[[^]]*\], \[[^]]*\], (\d+)", text)) == {("cg", "16")}
        for lbo in (16, 8192):  # K-major (lbo unused) and N- or M-major (64-column panels 8 KB apart); sbo 1024
            assert str(1 << 62 | (1024 >> 4) << 32 | (lbo >> 4) << 16) in text, (name, lbo)
        _, log = link(text, (9, 0))
        assert "serialized" not in log and " 0 bytes spill stores" in log, log
    assert "st.global.v4.f32" in ptx["wgmma_tt_f32"] and "cvt.rn.f16.f32" not in ptx["wgmma_tt_f32"]
    assert "cvt.rn.f16.f32" in ptx["wgmma"] and "st.global.v4.u32" in ptx["wgmma"]  # C in 16-byte row pieces


def test_tma_variants_copy_with_one_thread_and_hand_stages_over_mbarriers():
    """A TMA variant (a producer warpgroup, then BM / 64 that multiply): no cp.async; per stage one 2-d TMA copy
    per box (nn: A in one box of BM rows, B in BN / 64 panels; tt: A in panels, B in one box; tf32: the K-major
    copies, one box each), announced to the stage's mbarrier with the stage's bytes; the consumers wait on the
    mbarriers with try_wait and free a stage with one arrival per warp. ptxas keeps the wgmma asynchronous, with no
    spills, and the consumers fit the registers 384 threads leave (170)."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("wgmma_tma", "wgmma_tma_tt", "wgmma_tma_tf32")
    for name, boxes, stage_bytes, acc in (("wgmma_tma", (1, 4), (128 + 256) * 64 * 2, 128),
                                          ("wgmma_tma_tt", (2, 1), (128 + 128) * 64 * 2, 64),
                                          ("wgmma_tma_tf32", (1, 1), (128 + 256) * 32 * 4, 128)):
        text = ptx[name]
        assert "cp.async.cg" not in text and "cp.async.wait" not in text, name
        copies = text.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes")
        assert copies == sum(boxes), (name, copies)  # the panels' loop unrolled
        assert "mbarrier.arrive.expect_tx.shared::cta.b64" in text and re.search(rf"mov\.u32\s+%r\d+, {stage_bytes};",
                                                                                  text), name
        assert "mbarrier.try_wait.parity.shared::cta.b64" in text and "mbarrier.arrive.shared::cta.b64" in text
        assert re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(?:16|8)", text) == [str(2 * acc)] * 4, name
        _, log = link(text, (9, 0))
        registers = int(re.search(r"Used (\d+) registers", log).group(1))
        assert "serialized" not in log and " 0 bytes spill stores" in log and registers <= 170, (name, log)


def test_the_tmas_deeper_pipeline_keeps_a_full_and_an_empty_mbarrier_per_stage():
    """A TMA variant of 8 stages (64 x 128 float16, 24 KB a stage) sets up a full and an empty mbarrier for each
    stage (16 inits, 128 static bytes), keeps one copy per box and four asynchronous wgmma per K step, and ptxas
    spills nothing within the 255 registers 256 threads leave."""
    from autotune.runtime.compiler import link

    text = ptx_sample("wgmma_tma_deep")["wgmma_tma_deep"]
    assert text.count("mbarrier.init.shared") == 16, text.count("mbarrier.init.shared")
    assert re.search(r"\.shared \.align 8 \.b8 \S+\[128\];", text)
    assert text.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 3
    assert re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", text) == ["128"] * 4
    _, log = link(text, (9, 0))
    assert "serialized" not in log and " 0 bytes spill stores" in log, log


def test_a_block_per_sm_keeps_the_tma_pipeline_and_stores_c_at_a_named_barrier_of_the_consumers():
    """A persistent or Stream-K TMA variant keeps the TMA variant's pipeline (2-d copies announced to mbarriers, four
    asynchronous wgmma per K step) inside its walk; its consumers synchronize for C's tile at barrier 1 with their
    own thread count (256: two warpgroups, without the producer's 128), twice per stored part of the tile (128 x 256
    float16 with 4 stages: 4 parts of 64 columns, the most that fit beside the stages), and the block barrier 0
    comes once, after the mbarriers' set-up. Stream-K's consumers also store a partial tile (one
    st.global.f32 per accumulator), count their block with one atom.global.add and meet at barrier 1 twice more
    for it; its arithmetic stays 32-bit (a 64-bit division is a call, and serializes the wgmma). ptxas keeps the
    multiplies asynchronous within the 168 registers 384 threads leave, spilling nothing, or (Stream-K at
    128 x 256, whose 128 accumulators leave 40 registers for the walk) a few words."""
    from autotune.runtime.compiler import link

    names = ("wgmma_tma_persistent", "wgmma_tma_tf32_persistent", "wgmma_tma_stream_k", "wgmma_tma_stream_k_tn")
    ptx = ptx_sample(*names)
    for name, boxes, acc, spill, parts in ((names[0], (1, 4), 128, 0, 4), (names[1], (1, 1), 64, 0, 1),
                                           (names[2], (1, 4), 128, 16, 1), (names[3], (2, 2), 64, 0, 1)):
        text = ptx[name]
        stream_k = "stream_k" in name
        copies = text.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes")
        assert copies == sum(boxes) and "cp.async.cg" not in text, (name, copies)
        assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned", text)) == 4, name
        named = re.findall(r"bar\.sync (%r\d+), (%r\d+);", text)
        assert len(named) == 2 * parts + 2 * stream_k, (name, named)
        for pair in set(named):
            assert [re.findall(rf"mov\.u32\s+{re.escape(r)}, (\d+);", text) for r in pair] == [["1"], ["256"]], name
        assert len(re.findall(r"bar\.sync\s+0;", text)) == 1 and "bar.red" not in text, name
        assert text.count("atom.global.add") == stream_k and not re.search(r"(?:div|rem)\.[su]64", text), name
        if "tf32" not in name:  # float32's C is stored by st.global.f32 too
            assert len(re.findall(r"st\.global\.f32\s", text)) == (acc if stream_k else 0), name
        _, log = link(text, (9, 0))
        registers = int(re.search(r"Used (\d+) registers", log).group(1))
        spilled = int(re.search(r"(\d+) bytes spill stores", log).group(1))
        assert "serialized" not in log and spilled <= spill and registers <= 168, (name, log)


def test_split_wgmma_variants_store_partial_tiles_and_count_blocks():
    """A wgmma variant with K split (SPLIT_ADD last_block) keeps its pipeline (the TMA's 2-d copies, or cp.async, and
    four asynchronous wgmma per K step), stores its float32 partials (one st.global.f32 per accumulator), fences and
    counts its tile's blocks with one atom.global.add.u32, broadcasts the answer with bar.red.or, and adds nothing
    atomically to C; ptxas spills nothing and keeps the multiplies asynchronous, the TMA's consumers within the 170
    registers 384 threads leave."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("wgmma_tma_split", "wgmma_split_tt")
    for name, acc, copy in (("wgmma_tma_split", 128, "cp.async.bulk.tensor.2d"), ("wgmma_split_tt", 64, "cp.async.cg")):
        text = ptx[name]
        assert copy in text, name
        assert re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", text) == [str(2 * acc)] * 4, name
        assert len(re.findall(r"st\.global\.f32\s", text)) == acc, name
        assert text.count("atom.global.add.u32") == 1 and "membar.gl" in text and "bar.red.or.pred" in text, name
        assert not issues("red", text) and "atom.global.add.f32" not in text, name
        _, log = link(text, (9, 0))
        registers = int(re.search(r"Used (\d+) registers", log).group(1))
        assert "serialized" not in log and " 0 bytes spill stores" in log, (name, log)
        assert name != "wgmma_tma_split" or registers <= 170, log


def test_a_batched_tma_variant_copies_each_box_from_its_matrix_of_the_stack():
    """A stack's TMA variant copies the same boxes as the one-matrix tt variant, each by a 4-d copy whose last two
    coordinates pick the matrix (the map's batch levels), and none by a 2-d one; it stays asynchronous and fits."""
    from autotune.runtime.compiler import link

    text = ptx_sample("batched_wgmma_tma")["batched_wgmma_tma"]
    four = r"cp\.async\.bulk\.tensor\.4d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes \[%r\d+\], " \
           r"\[%rd\d+, \{%r\d+, %r\d+, %r\d+, %r\d+\}\], \[%r\d+\];"
    assert len(re.findall(four, text)) == 3 and "cp.async.bulk.tensor.2d" not in text  # tt: A in 2 panels, B 1 box
    _, log = link(text, (9, 0))
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    assert "serialized" not in log and " 0 bytes spill stores" in log and registers <= 170, log


def test_a_persistent_stack_walks_the_tiles_of_every_matrix_in_one_grid():
    """A persistent stack's variant has no grid row per matrix (no %ctaid.z): each tile's matrix comes from a 32-bit
    division of its place in the walk (no 64-bit one: a call, which would serialize a wgmma), its boxes by 4-d
    copies at that matrix's coordinates; it keeps the wgmma asynchronous and spills nothing."""
    from autotune.runtime.compiler import link

    text = ptx_sample("batched_wgmma_persistent")["batched_wgmma_persistent"]
    four = r"cp\.async\.bulk\.tensor\.4d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes"
    assert len(re.findall(four, text)) == 3 and "cp.async.bulk.tensor.2d" not in text  # nn: A 1 box, B 2 panels
    assert "%ctaid.z" not in text and "div.u32" in text and not re.search(r"\b(?:div|rem)\.[us]64\b", text)
    assert "wgmma.wait_group.sync.aligned 1;" in text
    _, log = link(text, (9, 0))
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    assert "serialized" not in log and " 0 bytes spill stores" in log and registers <= 170, log


def test_a_pair_of_blocks_copies_half_of_a_for_both_and_frees_stages_in_both():
    """CLUSTER 2: each step copies one box of A (half of the tile's rows) into both blocks of the cluster
    (multicast, mask 3) and B's boxes into its own block alone; a consumer frees a stage in its block and, through
    mapa, in the peer's (the default release at CTA scope, as CUTLASS's); both blocks meet at a cluster barrier after setting up their
    mbarriers and before leaving. A stack's pair copies 4-d boxes likewise. ptxas keeps the wgmma asynchronous and
    spills nothing."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("wgmma_tma_pair", "batched_wgmma_pair")
    for name, dims, b_boxes in (("wgmma_tma_pair", 2, 2), ("batched_wgmma_pair", 4, 1)):  # nn: B in 2 panels; nt: 1
        text = ptx[name]
        copies = re.findall(rf"cp\.async\.bulk\.tensor\.{dims}d\.shared::cluster\.global\.tile\.mbarrier::"
                            rf"complete_tx::bytes(\.multicast::cluster)? \[[^]]+\], \[[^]]+\], \[[^]]+\](, \w+)?;", text)
        assert sorted(copies) == [("", "")] * b_boxes + [(".multicast::cluster", ", pair")], (name, copies)
        assert "mov.b16 pair, 3;" in text and text.count("mapa.shared::cluster.u32") == 1, name
        assert text.count("mbarrier.arrive.shared::cluster.b64 _, [peer];") == 1, name  # CTA-scope release
        assert text.count("barrier.cluster.arrive.release;") == 2 and text.count("barrier.cluster.wait.acquire;") == 2
        assert "wgmma.wait_group.sync.aligned 1;" in text
        _, log = link(text, (9, 0))
        registers = int(re.search(r"Used (\d+) registers", log).group(1))
        assert "serialized" not in log and " 0 bytes spill stores" in log and registers <= 170, (name, log)


def test_tf32_wgmma_variants_issue_async_tf32_multiplies():
    """A TF32 wgmma variant issues wgmma m64n<BN>k8 .tf32 with A from registers (four 32-bit values) and B through a
    K-major descriptor of a 128-byte-swizzled tile (layout type 1; sbo 1024): four per K step at tf32, twelve at
    3xtf32, whose first starts its step's own sum (scale-d 0); operands rounded by cvt.rna; tf32 waits with one
    step left running, 3xtf32 for all (its step sums are added with fp32 adds). No mma.sync, ldmatrix or cp.async;
    ptxas keeps the multiplies asynchronous and spills nothing."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("wgmma_3xtf32", "wgmma_tf32_tt")
    pattern = r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8\.f32\.tf32\.tf32 \{[^}]*\}, \{[^}]*\}, [^,]+, (\d), 1, 1;"
    expected = {"wgmma_3xtf32": [("128", "0")] + [("128", "1")] * 11, "wgmma_tf32_tt": [("128", "1")] * 4}
    for name, text in ptx.items():
        assert re.findall(pattern, text) == expected[name], name
        assert "cvt.rna.tf32.f32" in text and str(1 << 62 | (1024 >> 4) << 32 | 1 << 16) in text, name
        assert not any(issues(op, text) for op in ("mma", "ldmatrix", "cp")), name
        assert ("wgmma.wait_group.sync.aligned 1;" in text) == (name == "wgmma_tf32_tt")
        assert "wgmma.wait_group.sync.aligned 0;" in text
        _, log = link(text, (9, 0))
        assert "serialized" not in log and " 0 bytes spill stores" in log, log


def test_tf32_on_rounded_copies_reads_both_operands_from_shared_memory():
    """A tf32 variant on rounded copies (ASYNC_STAGES > 0) issues wgmma m64n<BN>k8 .tf32 with both operands through
    K-major descriptors of 128-byte-swizzled tiles (layout type 1, sbo 1024): four per K step of 32, filled by
    16-byte cp.async copies; it rounds nothing itself, and ptxas keeps the multiplies asynchronous without
    spilling. The copies' kernels (autotune/families/matmul/tf32_copies.py) round each element with cvt.rna: the row
    copy four 16-byte pieces per thread, loaded whole where aligned, the transposing one four elements."""
    from autotune.runtime.compiler import link

    ptx = ptx_sample("wgmma_tf32_copies", "tf32_rows", "tf32_transpose")
    text = ptx["wgmma_tf32_copies"]
    issued = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8\.f32\.tf32\.tf32 \{[^}]*\}, %rd\d+, %rd\d+, "
                        r"1, 1, 1;", text)
    assert issued == ["128"] * 4, issued
    assert str(1 << 62 | (1024 >> 4) << 32 | 1 << 16) in text
    assert set(re.findall(r"cp\.async\.(\w+)\.shared\.global \[[^]]*\], \[[^]]*\], (\d+)", text)) == {("cg", "16")}
    assert "cvt.rna" not in text and not issues("mma", text) and not issues("ldmatrix", text)
    assert "wgmma.wait_group.sync.aligned 1;" in text and "wgmma.wait_group.sync.aligned 0;" in text
    _, log = link(text, (9, 0))
    assert "serialized" not in log and " 0 bytes spill stores" in log, log
    rows, transpose = ptx["tf32_rows"], ptx["tf32_transpose"]
    assert rows.count("cvt.rna.tf32.f32") == 16 and rows.count("st.global.v4.f32") == 4, rows
    assert rows.count("ld.global.v4.f32") == 4
    assert transpose.count("cvt.rna.tf32.f32") == 4 and transpose.count("st.global.u32") == 4


def test_batched_kernels_offset_their_operands_per_grid_row_and_keep_their_code():
    """A batched variant reads its matrix from grid row z (%ctaid.z) with a 32-bit division into the two batch
    levels (no 64-bit division: a call, which would serialize a wgmma), and is otherwise the unbatched kernel: the
    same multiply-adds and tensor-core instructions; ptxas keeps the wgmma asynchronous, with no spills."""
    from autotune.runtime.compiler import link

    names = ("tiled", "batched_tiled", "batched_last_block", "fp16", "batched_fp16", "wgmma_bf16", "batched_wgmma",
             "wgmma_3xtf32", "batched_wgmma_tf32")
    ptx = ptx_sample(*names)
    wide = r"\b(?:div|rem)\.[us]64\b"
    for unbatched, batched in (("tiled", "batched_tiled"), ("fp16", "batched_fp16"), ("wgmma_bf16", "batched_wgmma"),
                               ("wgmma_3xtf32", "batched_wgmma_tf32")):
        for op in (r"\bfma\.rn\.f32\b", r"mma\.sync\.aligned\.\S+", r"wgmma\.mma_async\.sync\.aligned\.\S+", wide):
            assert len(re.findall(op, ptx[unbatched])) == len(re.findall(op, ptx[batched])), (batched, op)
    for name in ("batched_tiled", "batched_last_block", "batched_fp16", "batched_wgmma", "batched_wgmma_tf32"):
        text = ptx[name]
        assert "%ctaid.z" in text and ("div.u32" in text or "rem.u32" in text), name
        assert "wgmma" not in name or not re.search(wide, text), name
        _, log = link(text, (9, 0))
        assert "serialized" not in log and " 0 bytes spill stores" in log, (name, log)


def test_the_gemv_kernel_reads_sixteen_bytes_at_a_time():
    """The gemv kernel loads the matrix in 16-byte vectors (rows form: along K; cols form: along C's long side),
    adds its lanes' sums with warp shuffles, and splits K with atomic adds into C (float64: atom.add.f64) or, for
    a float16 C, into the float32 workspace that the finish kernel rounds into C once (cvt.rn.f16.f32); with KW
    groups of warps, the groups' sums meet in shared memory behind barriers and C is stored rounded, nothing
    atomic; bfloat16 is widened from its bits by a shift; none spills."""
    from autotune.runtime.compiler import link

    names = ("gemv_rows", "gemv_rows_bf16_batched", "gemv_cols_f16", "gemv_cols_f64", "gemv_finish",
             "gemv_cols_f16_groups")
    ptx = ptx_sample(*names)
    rows, bf16, f16, f64, finish, groups = (ptx[n] for n in names)
    assert "ld.global.v4.f32" in rows and "shfl.sync.down.b32" in rows and not issues("atom", rows)
    assert "bar.sync" not in rows and not issues("st.shared", rows)  # KW 1: no shared memory, no barrier
    assert "ld.global.v4.u32" in groups and "st.shared.v4.f32" in groups and "ld.shared.v4.f32" in groups
    assert "bar.sync" in groups and "cvt.rn.f16.f32" in groups and not issues("atom", groups)
    assert "ld.global.v4.u32" in bf16 and "shl.b32" in bf16 and "%ctaid.z" in bf16 and "cvt.rn.bf16.f32" in bf16
    assert "ld.global.v4.u32" in f16 and "cvt.f32.f16" in f16 and "atom.global.add.f32" in f16
    assert "cvt.rn.f16.f32" not in f16 and "cvt.rn.f16.f32" in finish
    assert "ld.global.v2.f64" in f64 and "atom.global.add.f64" in f64 and "shfl.sync.down.b32" in f64
    for name, text in ptx.items():
        _, log = link(text, (9, 0))
        assert " 0 bytes spill stores" in log, (name, log)


def half_precision_types(ptx: str) -> list[str]:
    """The distinct instructions of a PTX text with a 16-bit float type (.f16, .bf16, their pairs), in order of
    first use; registers (%f16, %f160, ...) are names, not types."""
    found = re.findall(r"\b[a-z][a-z0-9_.]*\.b?f16(?:x2)?\b[a-z0-9_.]*", ptx)
    return list(dict.fromkeys(found))


def ptx_sample(*names: str) -> dict[str, str]:
    """The PTX of the named variants of tests/ptx_sample.py, compiled by this test worker's compiler process
    (``_ptx_server_compile``): those another test of this run compiled already (tiled, fp16, wgmma_bf16, ... are
    each read by two tests) are taken from the file it left in the kernel cache, under a digest of the sources that
    make the PTX."""
    folder = Path(os.environ["AUTOTUNE_CACHE_DIR"]) / "test-ptx" / _ptx_sources_digest()
    found = {name: (folder / f"{name}.ptx").read_text() for name in names if (folder / f"{name}.ptx").is_file()}
    missing = [name for name in names if name not in found]
    if missing:
        compiled = _ptx_server_compile(missing)
        assert sorted(compiled) == sorted(missing), (sorted(compiled), missing)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in compiled.items():
            tmp = folder / f"{name}.{os.getpid()}.tmp"
            tmp.write_text(text)
            os.replace(tmp, folder / f"{name}.ptx")
        found.update(compiled)
    return {name: found[name] for name in names}


_PTX_SERVER: dict[str, subprocess.Popen] = {}


def _ptx_server_compile(names: list[str], timeout: float = 300.0) -> dict[str, str]:
    """The PTX of ``names`` from this test process's ``ptx_sample.py --serve`` (started at its first use; it ends
    when this process does and its stdin closes); a compile error fails the test with the traceback."""
    import select

    server = _PTX_SERVER.get("process")
    if server is None or server.poll() is not None:
        _stop_ptx_server()
        with open(Path(os.environ["AUTOTUNE_CACHE_DIR"]) / f"ptx-server-{os.getpid()}.log", "w") as log:
            server = _PTX_SERVER["process"] = subprocess.Popen(
                [sys.executable, str(HERE / "ptx_sample.py"), "--serve"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, env=compiler_env())
        atexit.register(_stop_ptx_server)
    server.stdin.write(json.dumps(names) + "\n")
    server.stdin.flush()
    if not select.select([server.stdout], [], [], timeout)[0]:
        server.kill()
        raise AssertionError(f"no PTX of {names} after {timeout:.0f} s")
    line = server.stdout.readline()
    assert line, f"the PTX process ended (exit code {server.wait()}) without answering for {names}"
    reply = json.loads(line)
    assert "error" not in reply, reply.get("error")
    return reply["ptx"]


def _stop_ptx_server() -> None:
    """End this process's PTX compiler process, if any: its stdin closed, it ends its loop (killed after 30 s)."""
    server = _PTX_SERVER.pop("process", None)
    if server is None:
        return
    server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    server.stdout.close()


@functools.lru_cache(maxsize=None)
def _ptx_sources_digest() -> str:
    """A digest of what the sample's PTX is made from: the package's sources and templates, the sample script and
    the installed numba-cuda (a cache folder kept between runs never hands out PTX of other code)."""
    import hashlib
    from importlib.metadata import version

    digest = hashlib.sha256(version("numba-cuda").encode())
    for path in sorted([*(HERE.parent / "autotune").rglob("*"), HERE / "ptx_sample.py"]):
        if path.is_file() and path.suffix in (".py", ".j2", ".yaml"):
            digest.update(str(path.relative_to(HERE.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]


def unnumbered(ptx: str) -> str:
    """PTX with its mangled names made one, and its shared arrays numbered in order of first use."""
    order: dict[str, str] = {}
    ptx = re.sub(r"_cudapy_smem_\d+", lambda m: order.setdefault(m.group(), f"smem{len(order)}"), ptx)
    return re.sub(r"_ZN\w+", "NAME", ptx)


def issues(opcode: str, ptx: str) -> bool:
    """Whether the PTX has an instruction (predicated or not, inline assembly's too) of this opcode; bar.red is a
    barrier, not a red."""
    return re.search(rf"(^|[;{{])\s*(@!?%p\d+\s+)?{opcode}\.", ptx, re.M) is not None


def test_the_example_softmax_compiles_for_sm90_in_both_row_forms():
    """The softmax example's GPU rendering (warp shuffles, vector loads and stores) compiles for sm_90: a warp per
    row holding 256 floats in registers, and a 1024-thread block per row holding 32768 (launch bounds cap it at
    64 registers: it must not spill), float64 streamed in two passes; every block launchable."""
    configs = [["float32", {"ROW_MODE": "warp", "BLOCK": 128, "VEC": 4, "ITEMS": 2, "CACHE": "registers"}],
               ["float32", {"ROW_MODE": "block", "BLOCK": 1024, "VEC": 4, "ITEMS": 8, "CACHE": "registers"}],
               ["float64", {"ROW_MODE": "block", "BLOCK": 256, "VEC": 2, "ITEMS": 1, "CACHE": "none",
                            "PASSES": "two_pass"}]]
    proc = run_compiler_script("family_compile_sample.py", str(HERE.parent / "examples" / "softmax"),
                               json.dumps(configs))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(configs) and not [r for r in results if "error" in r], results
    for r in results:
        report = r["report"]
        assert report["registers"] * r["params"]["BLOCK"] <= 65536, r
        assert report["spill_stores"] + report["spill_loads"] == 0, r
