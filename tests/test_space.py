"""Search spaces: loading, validation before anything is rendered, and coverage sampling."""
import textwrap

import optuna
import pytest

from autotune.core.space import SpaceError, load_space
from autotune.runtime.build import build_kernel, render_source
from autotune.tuning.policy import suggest


@pytest.fixture(scope="module")
def matmul_space():
    return load_space("matmul")


def test_defaults_validate(matmul_space):
    params = matmul_space.validate({}, dtype="float32", args={"layout": "nn"})
    assert params["strategy"] == "tiled" and params["BM"] == 128


@pytest.mark.parametrize("params, message", [
    ({"BM": 96}, "parameter BM=96 is not allowed; allowed values: 16, 32, 64, 128, 256"),
    ({"BM": "64); import os"}, "parameter BM='64); import os' is not allowed"),
    ({"BM": True}, "parameter BM=True is not allowed"),
    ({"BM": 64.0}, "parameter BM=64.0 is not allowed"),
    ({"A_SMEM": "kmajor\nimport os"}, "parameter A_SMEM="),
    ({"bogus": 1}, "unknown parameter 'bogus'"),
    ({"strategy": "naive", "BM": 64}, "parameter BM does not apply"),
    ({"TM": 8, "BM": 16, "BN": 16, "TN": 8}, "threads per block = 4"),
    ({"UNROLL_K": 16, "BK": 8}, "UNROLL_K=16 must divide BK=8"),
    ({"BM": 256, "BN": 256, "TM": 2, "TN": 2}, "threads per block = 16384"),
    ({"BM": 256, "BN": 256, "BK": 32, "TM": 8, "TN": 8, "ASYNC_STAGES": 4},
     "shared memory 262144 bytes per block exceeds 232448"),
])
def test_bad_parameters_are_rejected_with_their_name(matmul_space, params, message):
    with pytest.raises(ValueError, match=None) as err:
        matmul_space.validate(params, dtype="float32", args={"layout": "nn"})
    assert message in str(err.value)


def test_vector_width_depends_on_dtype(matmul_space):
    matmul_space.validate({"VEC": 4}, dtype="float32", args={"layout": "nn"})
    with pytest.raises(ValueError, match="exceeds a 16-byte vector access"):
        matmul_space.validate({"VEC": 4}, dtype="float64", args={"layout": "nn"})


@pytest.mark.parametrize("dtype, widths", [("float64", (1, 2)), ("float32", (1, 2, 4)),
                                           ("float16", (1, 2, 4, 8)), ("bfloat16", (1, 2, 4, 8))])
def test_a_tuner_is_offered_only_the_vector_widths_its_dtype_can_take(dtype, widths):
    family = {"op": "sum", "axis": 0}
    space = load_space("reduce")
    narrowed = space.for_dtype(dtype, family)
    assert narrowed.params["VEC"].values == widths
    assert all(narrowed.params[n] == p for n, p in space.params.items() if n != "VEC")
    for vec in space.params["VEC"].values:  # what was dropped is exactly what no configuration may take
        valid = any(space.violation({**c, "VEC": vec}, dtype=dtype, args=family) is None
                    for c in space.configurations(family))
        assert valid == (vec in widths)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    offered = {suggest(study.ask(), narrowed, family)["VEC"] for _ in range(60)}
    assert offered == set(widths)


def test_reduce_parameters_depend_on_axis():
    space = load_space("reduce")
    assert "ROW_MODE" in space.validate({}, dtype="float32", args={"op": "sum", "axis": 1})
    assert "COMBINE" not in space.validate({}, dtype="float32", args={"op": "sum", "axis": 0})
    with pytest.raises(ValueError, match="COMBINE does not apply"):
        space.validate({"COMBINE": "atomic"}, dtype="float32", args={"op": "sum", "axis": 1})


def test_injection_never_reaches_the_source():
    with pytest.raises(ValueError):
        render_source("matmul", {"BM": "64); import os; os.system('true'"})
    with pytest.raises(ValueError):
        build_kernel("reduce", {"BLOCK_REDUCE": "tree\n__import__('os')"})


def test_unknown_kind_and_dtype():
    with pytest.raises(ValueError, match="unknown kernel family 'conv'"):
        build_kernel("conv", {})
    with pytest.raises(ValueError, match="dtype 'int32' is not supported"):
        build_kernel("matmul", {}, dtype="int32")
    with pytest.raises(ValueError, match="layout 'xx'"):
        build_kernel("matmul", {}, layout="xx")
    with pytest.raises(ValueError, match="op 'mean'"):
        build_kernel("reduce", {}, op="mean")


@pytest.mark.parametrize("family", [{"layout": "nn"}])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_covering_sample_uses_every_value(matmul_space, family, dtype):
    sample, uncovered = matmul_space.covering_sample(dtype=dtype, args=family)
    # 16-byte vectors hold two doubles, four floats (eight halves: VEC 8 is float16's); the mma.sync used (MMA > 0)
    # is float64's; vector red.add is float32's; wgmma (and BK 64, its depth, TMA, its copies, ASYNC_STAGES 6 and 8,
    # their deeper pipelines, SCHEDULE, the TMA kernel's walk over tiles, and CLUSTER, its pairs) is float16's.
    wgmma = {("BK", 64), ("WGMMA", 1), ("TMA", 0), ("TMA", 1), ("ASYNC_STAGES", 6), ("ASYNC_STAGES", 8)} | {
        ("SCHEDULE", s) for s in ("tile", "persistent", "stream_k")} | {("CLUSTER", 1), ("CLUSTER", 2)}
    assert uncovered == ({("VEC", 4), ("VEC", 8), ("SPLIT_ADD", "vector")} | wgmma if dtype == "float64"
                         else {("VEC", 8), ("MMA", 4), ("MMA", 8), ("MMA", 16), ("WGMMA", 0)} | wgmma)
    skinny_only = {"GEMV", "BLOCK", "KT", "KW", "TL", "TS"}  # the gemv kernel's: M or N at most 16 (tests/test_gemv.py)
    for name, param in matmul_space.params.items():
        used = {c[name] for c in sample if name in c}
        found = set() if name in skinny_only else set(param.values) - {v for n, v in uncovered if n == name}
        assert used == found, name
    for config in sample:
        matmul_space.validate(config, dtype=dtype, args=family, fill_defaults=False)


def write(tmp_path, text):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_user_space_narrows_values(tmp_path):
    path = write(tmp_path, """
        family: matmul
        params:
          strategy: {values: [tiled]}
          BM: {values: [64], when: {strategy: [tiled]}}
    """)
    space = load_space("matmul", path)
    assert space.params["BM"].values == (64,)
    assert space.constraints  # the built-in constraints stay


def test_a_space_file_of_earlier_releases_names_its_family_kernel(tmp_path):
    """``kernel:`` is read as ``family:`` (the same narrowing); both given is refused, naming both."""
    old = load_space("matmul", write(tmp_path, """
        kernel: matmul
        params:
          BM: {values: [64, 128]}
    """))
    assert old.family == "matmul" and old.params["BM"].values == (64, 128)
    with pytest.raises(SpaceError, match="both 'kernel' and 'family' are given"):
        load_space("matmul", write(tmp_path, "kernel: matmul\nfamily: matmul\nparams: {}\n"))


def test_a_narrowed_parameter_keeps_the_built_in_default_where_it_still_may(tmp_path):
    """The built-in starts leave parameters at the built-in defaults out; a narrowed space must read them so
    (TM narrowed to [4, 8] still defaults to 8), or a start would silently become another configuration."""
    path = write(tmp_path, """
        family: matmul
        params:
          TM: {values: [4, 8]}
          TN: {values: [2, 4]}
          BM: {values: [32, 64], default: 64}
    """)
    space = load_space("matmul", path)
    assert [space.params[p].default for p in ("TM", "TN", "BM", "BN")] == [8, 2, 64, 128]


def test_a_narrowed_parameter_keeps_where_it_applies(tmp_path):
    # PREFETCH applies only to register-staged copies (ASYNC_STAGES = 0); narrowing its values must not make it
    # apply to the cp.async pipeline too.
    path = write(tmp_path, """
        family: matmul
        params:
          ASYNC_STAGES: {values: [0, 3]}
          PREFETCH: {values: [1]}
    """)
    space = load_space("matmul", path)
    assert "PREFETCH" not in space.validate({"ASYNC_STAGES": 3}, dtype="float32", args={"layout": "nn"})
    assert space.validate({}, dtype="float32", args={"layout": "nn"})["PREFETCH"] == 1


def test_accumulator_registers_depend_on_dtype(matmul_space):
    params = {"BM": 256, "BN": 128, "TM": 16, "TN": 8, "VEC": 2}
    matmul_space.validate(params, dtype="float32", args={"layout": "nn"})
    with pytest.raises(ValueError, match="1024 bytes per thread, over 512"):
        matmul_space.validate(params, dtype="float64", args={"layout": "nn"})


@pytest.mark.parametrize("body, message", [
    ("family: matmul\nparams: {BM: {values: ['64); import os']}}", "is not a plain name"),
    ("family: matmul\nparams: {XX: {values: [1]}}", "not a parameter of the matmul templates"),
    ("family: matmul\nparams: {BM: {values: [1.5]}}", "values must be all integers or all names"),
    ("family: matmul\nparams: {BM: {values: []}}", "non-empty 'values' list"),
    ("family: matmul\nparams: {A_SMEM: {values: [diagonal]}}", "are unknown"),
    ("family: matmul\nparams: {BM: {values: [64]}}\nconstraints: [{name: eval, args: [BM]}]", "must be a mapping whose 'name'"),
    ("family: matmul\nparams: {BM: {values: [64]}}\nconstraints: [{name: shared_bytes_at_most, max: 'x'}]", "must be an integer"),
    ("family: reduce\nparams: {}", "expected a mapping with 'family: matmul'"),
    ("family: matmul\nparams: {BM: !!python/object/apply:os.system ['true']}", "cannot read search space"),
    ("{{{", "cannot read search space"),
    ("family: matmul\nparams: {BM: {values: [64]}}\nstarts: [{BM: 64, XX: 1}]", "start #1: unknown parameter 'XX'"),
    ("family: matmul\nparams: {BM: {values: [64]}}\nstarts: [{BM: 64}, {BM: '64); import os'}]",
     "start #2: parameter BM='64); import os' is not allowed"),
    ("family: matmul\nparams: {BM: {values: [64]}}\nstarts: [[BM, 64]]", "start #1: must map parameter names"),
    ("family: matmul\nparams: {BM: {values: [64]}}\nstarts: true", "'starts' must be a list, got bool"),
    ("family: matmul\nparams: {BM: {values: [64]}}\nconstraints: 3", "'constraints' must be a list, got int"),
])
def test_malformed_user_space_files(tmp_path, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(SpaceError) as err:
        load_space("matmul", path)
    assert message in str(err.value) and str(path) in str(err.value)


WINNER_FP64 = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "VEC": 2, "MMA": 4, "UNROLL_K": 16}


def test_tensor_core_variants_are_float64_or_a_tf32_precision(matmul_space):
    assert matmul_space.validate(WINNER_FP64, dtype="float64", args={"layout": "nn"})["MMA"] == 4
    with pytest.raises(ValueError, match="MMA=4 on float32 needs precision tf32 or 3xtf32"):
        matmul_space.validate(WINNER_FP64, dtype="float32", args={"layout": "nn", "precision": "ieee"})
    tf32 = matmul_space.validate(WINNER_FP64, dtype="float32", args={"layout": "nn", "precision": "3xtf32"})
    assert tf32["MMA"] == 4 and tf32["ASYNC_STAGES"] == 0


@pytest.mark.parametrize("change, message", [
    ({"MMA": 8, "UNROLL_K": 4, "BK": 8}, "MMA=8 must divide UNROLL_K=4"),
    ({"BM": 64, "BN": 64, "BK": 32, "TM": 4, "TN": 1}, "TN=1 must be even"),
    ({"BM": 64, "TM": 16}, "8 x 4 lanes must tile the BM/TM x BN/TN = 4 x 16 thread grid"),
    ({"MIN_BLOCKS": 2}, "256 threads x 2 blocks per SM leave 128 registers per thread"),
    ({"THREAD_LAYOUT": "strided"}, "parameter THREAD_LAYOUT does not apply"),
])
def test_tensor_core_variants_are_checked(matmul_space, change, message):
    with pytest.raises(ValueError) as err:
        matmul_space.validate({**WINNER_FP64, **change}, dtype="float64", args={"layout": "nn"})
    assert message in str(err.value)


def test_neighbours_move_one_parameter_one_step_and_are_valid(matmul_space):
    family = {"layout": "nn"}
    config = matmul_space.validate({"BM": 64, "BN": 128, "BK": 16, "TM": 8, "TN": 4}, dtype="float32",
                                   args=family)
    found = matmul_space.neighbours(config, dtype="float32", args=family)
    assert found and len({tuple(sorted(c.items())) for c in found}) == len(found)
    for c in found:
        assert matmul_space.validate(c, dtype="float32", args=family, fill_defaults=False) == c
        moved = [k for k in config if k in c and c[k] != config[k]]
        assert len(moved) == 1, (moved, c)
        values = matmul_space.params[moved[0]].values
        if isinstance(values[0], int):
            assert abs(values.index(c[moved[0]]) - values.index(config[moved[0]])) == 1
    # SPLIT_K 1 -> 2 brings SPLIT_ADD into play: each of its values is a neighbour; BM 64 -> 32 and 128 both are
    assert {c["SPLIT_ADD"] for c in found if c.get("SPLIT_K") == 2} == {"atomic", "vector", "last_block"}
    assert not any(c.get("SPLIT_K") == 4 for c in found)
    assert {c.get("BM", 64) for c in found} == {32, 64, 128}
    back = matmul_space.neighbours({**config, "SPLIT_K": 2, "SPLIT_ADD": "vector"}, dtype="float32", args=family)
    assert config in back  # and SPLIT_ADD is dropped again on the way back


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_random_valid_draws_reach_tiled_and_tensor_core_configurations(matmul_space, dtype):
    """A whole configuration drawn uniformly is nearly always one of the two strategies without parameters (valid
    as drawn); random_valid draws the strategy first, so tiled configurations, and for bfloat16 tensor-core tiles
    (the only tiled ones valid there), come up in about a third of the draws, every one valid."""
    import random

    family = {"layout": "nn"}
    rng = random.Random(7)
    drawn = [matmul_space.random_valid(rng, dtype=dtype, args=family) for _ in range(30)]
    tiled = [c for c in drawn if c["strategy"] == "tiled"]
    assert len(tiled) >= 5
    if dtype == "bfloat16":
        assert all(c["MMA"] == 16 for c in tiled)
    for config in drawn:
        matmul_space.validate(config, dtype=dtype, args=family, fill_defaults=False)


def test_random_valid_records_a_strategy_with_no_valid_configuration_and_skips_it(tmp_path):
    """In a space narrowed so that no tiled float64 configuration is valid (VEC 8 is 64 bytes), the first call
    that tries tiled gives up on it after its share of the tries and records it; later calls skip it."""
    import random

    space = load_space("matmul", write(tmp_path, """
        family: matmul
        params:
          strategy: {values: [tiled, naive]}
          VEC: {values: [8]}
    """))
    barren: set = set()
    rng = random.Random(0)
    drawn = [space.random_valid(rng, dtype="float64", args={"layout": "nn"}, tries=3000, barren=barren)
             for _ in range(6)]
    assert [c["strategy"] for c in drawn] == ["naive"] * 6 and barren == {"tiled"}
    skipped = [load_space("matmul").random_valid(rng, dtype="float32", args={"layout": "nn"}, barren={"tiled"})
               for _ in range(20)]  # tiled is valid here, but recorded as barren: not drawn
    assert {c["strategy"] for c in skipped} == {"naive", "shared16"}
