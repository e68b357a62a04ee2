"""The code cache (autotune/runtime/code_cache.py): compiled kernels stored with their keys, found again only for
the same source, types, architecture and toolchain, never trusted when damaged; the code compiled ahead on the CPU
is what a launch expects; a later process builds its kernel objects from it without importing the generated module.
The launches themselves need a GPU: lab/code_cache_gpu.py checks them there."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.runtime import code_cache
from autotune.runtime.code_cache import CodeKey, CompiledCode

HERE = Path(__file__).parent


def sample(mode: str, *args: str, cache: Path) -> dict:
    """tests/code_cache_sample.py in its own process, with the real compiler and the cache folder ``cache``."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(PYTHONPATH=str(HERE.parent), AUTOTUNE_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, str(HERE / "code_cache_sample.py"), mode, *args], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def ahead(tmp_path_factory):
    """A reduction and its helper kernel compiled for sm_90 on the CPU, stored locally and in a shipped store."""
    root = tmp_path_factory.mktemp("code")
    out = sample("ahead", str(root / "shipped"), cache=root / "cache")
    out["root"] = root
    return out


def test_code_compiled_ahead_has_the_entry_and_types_a_launch_expects(ahead):
    """warm --cc 9.0's code: per launched kernel (the reduction and its finishing pass) a cubin for sm_90a in the
    local cache and one in the shipped store, keyed by the argument types a launch computes from the kernel's
    signature, whose one kernel entry is the name stored with it."""
    launched = ahead["launched"]
    assert set(launched) == {"reduce_all", "finish"}
    files = ahead["files"]
    assert sorted((f["where"], f["function"]) for f in files) == sorted(
        (where, name) for where in ("local", "shipped") for name in launched)
    for f in files:
        assert f["argtypes"] == launched[f["function"]]
        assert f["arch"] == "sm_90a" and f["sm"] == 90
        assert f["entries"] == [f["name"]] and f["function"] in f["name"]
        assert set(f["made_with"]) == {"nvvm", "nvjitlink"}
    local = ahead["local_toolchain"]
    assert {"numba", "numba-cuda", "nvvm", "nvjitlink", "autotune", "autotune-kernels", "numba-passes"} <= set(local)
    shipped = ahead["shipped_toolchain"]
    assert set(shipped) == {"numba", "numba-cuda", "autotune-kernels", "optimise"}  # no compiler: it is the product
    assert {f["where"]: f["toolchain"] for f in files if f["function"] == "finish"} == {"local": local,
                                                                                      "shipped": shipped}
    assert ahead["report"]["registers"] > 0 and ahead["report"]["spill_stores"] == 0


def test_a_later_process_builds_its_kernel_from_stored_code_without_importing_the_module(ahead, tmp_path):
    """A new process with only the shipped store (an empty cache of its own): the kernel object's entry and its
    helper are stand-ins that launch the stored code, and the generated module is never imported."""
    out = sample("second", str(ahead["root"] / "shipped"), cache=tmp_path / "fresh")
    assert out == {"module": "LazyModule", "entry": "CachedDispatcher", "helpers": ["CachedDispatcher"],
                   "imported": []}


@pytest.fixture(scope="module")
def packing_and_adapter(tmp_path_factory):
    return sample("packing", cache=tmp_path_factory.mktemp("cache"))


def test_arguments_are_packed_as_numba_cuda_packs_them(packing_and_adapter):
    """Every argument kind the kernels take (device arrays of 1 to 3 dimensions, integers of each width, floats,
    float16, booleans, Python and NumPy scalars) gives the bytes numba-cuda's own packing gives, with the data
    pointer where plans move it and the parameter sizes the loaded kernel is checked against; a host array,
    which numba-cuda would copy, is refused (the launch then goes through Numba)."""
    out = packing_and_adapter["packing"]
    for r in out["results"]:
        assert r["covered"] and r["same"], r
        assert r["declared"] == r["sizes"], r
        if r["pointer"] is not None:
            assert r["pointer_at"] == 4
    assert len(out["results"]) == 18
    assert out["host_array_refused"]


def test_the_numba_adapter_holds_for_this_numba_cuda(packing_and_adapter):
    """What autotune/runtime/numba_kernels.py reads of numba-cuda's private kernel objects is there; kernels with
    debug checks or linked files are not cached."""
    out = packing_and_adapter["adapter"]
    assert all(out["kernel"].values()) and all(out["library"].values()) and all(out["methods"].values()), out
    assert out["argument_types"] and out["pre_launch_callbacks"] and out["jit_options"]
    assert out["debug_refused"] and out["link_refused"]


def test_a_cubin_is_read_as_numba_cuda_hands_it_bytes_or_a_cuda_core_object_code(real):
    """numba-cuda's ``get_cubin`` gives bytes where it links with its own linker and a cuda.core ``ObjectCode``
    where it links through cuda.core (on a GPU); the adapter takes the same cubin from either, and refuses one
    held as a file path instead of guessing."""
    from cuda.core import ObjectCode

    from autotune.runtime.numba_kernels import cubin_bytes

    assert cubin_bytes(real.code) == real.code and cubin_bytes(memoryview(real.code)) == real.code
    assert cubin_bytes(ObjectCode.from_cubin(real.code)) == real.code
    with pytest.raises(AttributeError, match="not in memory"):
        cubin_bytes(ObjectCode.from_cubin("/nonexistent/kernel.cubin"))


# -- the store, in this process -------------------------------------------------------------------------------
@pytest.fixture
def real(ahead):
    """A real cubin (sm_90a) and a key of its own."""
    f = next(f for f in ahead["files"] if f["where"] == "local" and f["function"] == "reduce_all")
    root = Path(f["path"]).parent.parent
    key = code_cache.stored(root)[Path(f["path"])]
    compiled = code_cache.load(root, key)
    assert compiled is not None and compiled.name == f["name"]
    return compiled


def test_code_round_trips_and_another_key_finds_nothing(real, tmp_path):
    root = tmp_path / "code"
    path = code_cache.store(root, real)
    assert path == code_cache.path_of(root, real.key) and path.exists()
    assert code_cache.load(root, real.key) == real
    assert code_cache.functions_with_code(root, real.key.source) == {real.key.function}
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]
    for change in ({"arch": "sm_80"}, {"arch": "sm_100a"}, {"toolchain": real.key.toolchain[:-1]},
                   {"toolchain": (*real.key.toolchain[:-1], ("numba-passes", "none"))},
                   {"argtypes": real.key.argtypes[:-1] + ("int64",)}, {"function": "finish"},
                   {"source": "0" * 64}):
        other = CodeKey(**{**real.key.__dict__, **change})
        assert other.digest != real.key.digest
        assert code_cache.load(root, other) is None, change


def test_code_filed_under_another_key_is_refused(real, tmp_path):
    """A file renamed or copied to where another key's code lives (another architecture, another toolchain) is
    refused by the key in its own header, and removed from the local cache."""
    root = tmp_path / "code"
    path = code_cache.store(root, real)
    for change in ({"arch": "sm_80"}, {"toolchain": (("numba", "0.1"),)}):
        other = CodeKey(**{**real.key.__dict__, **change})
        target = code_cache.path_of(root, other)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
        assert code_cache.load(root, other) is None
        assert target.exists()
        assert code_cache.load(root, other, discard_damaged=True) is None
        assert not target.exists()
    assert code_cache.load(root, real.key) == real


def test_a_cubin_for_another_architecture_is_refused_whatever_its_key_says(real, tmp_path):
    root = tmp_path / "code"
    for arch in ("sm_80", "sm_100a"):
        lying = CompiledCode(CodeKey(**{**real.key.__dict__, "arch": arch}), "cubin", real.name, real.code)
        code_cache.store(root, lying)
        assert code_cache.load(root, lying.key) is None
    with pytest.raises(code_cache.DamagedCode, match="sm_90"):
        code_cache.decode(code_cache.encode(lying), lying.key)


@pytest.mark.parametrize("damage", ["truncated", "payload byte", "header byte", "empty", "no header", "garbage",
                                    "other entry", "not elf", "size", "format"])
def test_damaged_code_is_ignored_and_removed(real, tmp_path, damage):
    """A file that does not hold exactly what its header promises is never trusted: load finds nothing (the kernel
    is compiled again) and, in the local cache, the file is removed so the next store replaces it."""
    root = tmp_path / "code"
    path = code_cache.store(root, real)
    data = path.read_bytes()
    header, _, packed = data.partition(b"\n")
    meta = json.loads(header)
    if damage == "truncated":
        data = data[:len(data) - 100]
    elif damage == "payload byte":
        data = data[:-50] + bytes([data[-50] ^ 0x40]) + data[-49:]
    elif damage == "header byte":
        data = data.replace(b'"sha256": "', b'"sha256": "f', 1)
    elif damage == "empty":
        data = b""
    elif damage == "no header":
        data = packed
    elif damage == "garbage":
        data = os.urandom(len(data))
    elif damage == "other entry":
        data = code_cache.encode(CompiledCode(real.key, "cubin", real.name + "x", real.code))
    elif damage == "not elf":
        data = code_cache.encode(CompiledCode(real.key, "cubin", real.name, b"\x00" * 16 + real.code))
    elif damage == "size":
        meta["size"] += 1
        data = json.dumps(meta, sort_keys=True).encode() + b"\n" + packed
    elif damage == "format":
        meta["format"] = 2
        data = json.dumps(meta, sort_keys=True).encode() + b"\n" + packed
    path.write_bytes(data)
    assert code_cache.load(root, real.key) is None
    assert path.exists()
    assert code_cache.load(root, real.key, discard_damaged=True) is None
    assert not path.exists()
    code_cache.store(root, real)
    assert code_cache.load(root, real.key) == real


def test_a_file_too_large_is_not_read(real, tmp_path, monkeypatch):
    root = tmp_path / "code"
    code_cache.store(root, real)
    monkeypatch.setattr(code_cache, "MAX_CODE_BYTES", len(real.code) // 2)
    assert code_cache.load(root, real.key) is None


def test_a_store_that_fails_leaves_the_old_code_and_no_temporary_file(real, tmp_path, monkeypatch):
    """Writes go to a temporary file renamed into place: a failure halfway (here the rename) leaves the code
    stored before intact and no temporary file; a folder that cannot be written is announced once, not raised."""
    root = tmp_path / "code"
    path = code_cache.store(root, real)
    before = path.read_bytes()
    newer = CompiledCode(real.key, "cubin", real.name, real.code, (("nvvm", "0"),))

    def failing(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(code_cache.os, "replace", failing)
    code_cache._warned.clear()
    with pytest.warns(code_cache.CodeCacheWarning, match="cannot be stored"):
        assert code_cache.store(root, newer) is None
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_the_local_toolchain_names_the_compilers_and_the_numba_passes(monkeypatch):
    """The local key changes with what changes the code: NVVM's and nvJitLink's versions are in it, and so is the
    set of Numba pass replacements installed (AUTOTUNE_NUMBA_PATCH)."""
    code_cache.local_toolchain.cache_clear()
    try:
        every = dict(code_cache.local_toolchain())
        monkeypatch.setenv("AUTOTUNE_NUMBA_PATCH", "0")
        code_cache.local_toolchain.cache_clear()
        none = dict(code_cache.local_toolchain())
    finally:
        code_cache.local_toolchain.cache_clear()
    assert every["numba-passes"] != none["numba-passes"] == "none"
    assert every["nvvm"] and every["nvjitlink"] and every["numba-cuda"]


def test_the_setting_is_checked(monkeypatch):
    for value, expected in (("1", "1"), ("local", "local"), ("0", "0"), ("", "1")):
        monkeypatch.setenv("AUTOTUNE_CODE_CACHE", value)
        assert code_cache.setting() == expected
    monkeypatch.setenv("AUTOTUNE_CODE_CACHE", "local")
    assert code_cache.shipped_root() is None
    monkeypatch.setenv("AUTOTUNE_CODE_CACHE", "yes")
    with pytest.raises(ValueError, match="AUTOTUNE_CODE_CACHE"):
        code_cache.setting()
    monkeypatch.setenv("AUTOTUNE_CODE_CACHE", "1")
    from autotune.runtime import numba_kernels

    monkeypatch.setattr(numba_kernels, "jit_defaults", lambda: (False, True))  # NUMBA_CUDA_DEBUGINFO=1
    assert code_cache.setting() == "0"


# -- which modules and kernels may be cached ---------------------------------------------------------------
def test_only_modules_importing_what_the_key_covers_are_cached():
    from autotune.runtime.driver_kernels import cacheable_source

    assert cacheable_source("import math\nimport numpy as np\nfrom numba import cuda, float32\n"
                            "from numba.types import float16\nfrom autotune.kernels.intrinsics import vload4\n")
    for line in ("import os", "from mypackage.helpers import fast_exp", "from . import sibling",
                 "from autotune.core import dtypes", "    import scipy"):
        assert not cacheable_source(f"from numba import cuda\n{line}\n"), line


def test_a_lazy_module_imports_the_module_only_for_what_has_no_stored_code():
    from autotune.runtime.driver_kernels import CachedDispatcher, LazyModule

    imported = []

    class Real:
        matmul = object()
        CONSTANT = 7

    def importer(source):
        imported.append(source)
        return Real

    module = LazyModule("source", "ab" * 32, {"matmul"}, importer)
    entry = module.matmul
    assert isinstance(entry, CachedDispatcher) and entry.function == "matmul" and not imported
    assert module.CONSTANT == 7 and imported == ["source"]
    assert entry.real is Real.matmul  # the stand-in's real dispatcher, by name
    with pytest.raises(AttributeError):
        module.missing


# -- the remembered renderings ----------------------------------------------------------------------------
def test_a_remembered_rendering_is_the_rendering_and_follows_every_template_change(tmp_path, monkeypatch):
    """The source a configuration renders to is remembered under a key of everything rendering reads; a template
    edited in $AUTOTUNE_TEMPLATES gives a new key and the new source, and a memo whose source file was changed or
    removed is rendered again, never trusted."""
    from autotune.core.registry import family
    from autotune.runtime import sources
    from autotune.runtime.build import render_source
    from autotune.runtime.compiler import source_path

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    params = {"BLOCK": 128}
    calls = []

    def render_count(*a, **k):
        calls.append(1)
        return real_render(*a, **k)

    from autotune.runtime import render as render_module

    real_render = render_module.render
    monkeypatch.setattr(render_module, "render", render_count)
    first = render_source("reduce", params, simulator=False, op="max")[2]
    second = render_source("reduce", params, simulator=False, op="max")[2]
    assert first == second and len(calls) == 1
    impl = family("reduce")
    checked = render_source("reduce", params, simulator=False, op="max")[0]
    args = impl.family_args(op="max")
    key = sources.memo_key(impl, checked, "float32", args, False)
    assert sources.memo_key(impl, {**checked, "BLOCK": 256}, "float32", args, False) != key
    assert sources.memo_key(impl, checked, "float64", args, False) != key

    own = tmp_path / "templates"
    own.mkdir()
    template = impl.template(checked)
    text = (Path(impl.template_dir) / template).read_text()
    (own / template).write_text(text.replace("\n", "\n# edited\n", 1))
    monkeypatch.setenv("AUTOTUNE_TEMPLATES", str(own))
    assert sources.memo_key(impl, checked, "float32", args, False) != key
    edited = render_source("reduce", params, simulator=False, op="max")[2]
    assert edited != first and "# edited" in edited and len(calls) == 2
    (own / template).write_text(text.replace("\n", "\n# edited again, in place\n", 1))  # same folder, same process
    again = render_source("reduce", params, simulator=False, op="max")[2]
    assert "# edited again, in place" in again and len(calls) == 3
    monkeypatch.delenv("AUTOTUNE_TEMPLATES")

    source_path(first).write_text(first + "# changed\n")
    assert render_source("reduce", params, simulator=False, op="max")[2] == first and len(calls) == 4
    assert source_path(first).read_text() == first  # the file the compiler imports is written again too
    source_path(first).unlink()
    assert render_source("reduce", params, simulator=False, op="max")[2] == first and len(calls) == 5
    assert source_path(first).read_text() == first
    assert render_source("reduce", params, simulator=False, op="max")[2] == first and len(calls) == 5


# -- the shipped store, built and checked as CI does ------------------------------------------------------
SHIP = """
import sys
from pathlib import Path
from autotune.commands.warm import ship_code
if __name__ == "__main__":
    sys.exit(ship_code(Path(sys.argv[1]), (9, 0), 1, sys.stdout, check=sys.argv[2] == "check"))
"""


def test_shipped_code_is_built_only_where_missing_checked_and_pruned(tmp_path):
    """`autotune warm --cc 9.0 --ship` on a database folder: --check finds the code missing (exit 1), a build
    compiles it, a second build compiles nothing, --check passes; a stale file is reported by --check and removed
    by a build."""
    from autotune.core.problem import Problem
    from autotune.core.space import load_space
    from autotune.runtime import db

    folder = tmp_path / "db"
    problem = Problem("reduce", (1000,), "float32", {"op": "sum"})
    full = load_space("reduce").validate({"BLOCK": 64}, dtype="float32", args=problem.args)
    time = {"median_ms": 1.0, "p20_ms": 1.0, "p80_ms": 1.0, "reps": 10}
    db.write_entries(folder / "some-gpu.yaml", {"name": "Some GPU", "cc": "9.0"},
                     [db.parse_entry(db.entry_record(problem, full, time=time))])
    script = tmp_path / "ship.py"
    script.write_text(SHIP)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["AUTOTUNE_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = str(HERE.parent)

    def ship(mode):
        return subprocess.run([sys.executable, str(script), str(folder), mode], capture_output=True, text=True,
                              env=env, timeout=600)

    def states(out):
        return [line.split()[0] for line in out.stdout.splitlines() if line.endswith("reduce/float32/sum/all/1000")]

    out = ship("check")
    assert out.returncode == 1 and states(out) == ["missing"] and "autotune warm --cc 9.0 --ship" in out.stdout
    out = ship("build")
    assert out.returncode == 0 and states(out) == ["built"], out.stdout + out.stderr[-2000:]
    files = sorted((folder / "code").rglob("*.code"))
    assert len(files) == 1
    stale = files[0].parent / "reduce_all-0123456789abcdef0123456789abcdef.code"
    shutil.copy(files[0], stale)
    out = ship("check")
    assert out.returncode == 0 and states(out) == ["present"] and "\nstale" in out.stdout and stale.exists()
    out = ship("build")
    assert out.returncode == 0 and states(out) == ["present"]
    assert "\nremoved" in out.stdout and not stale.exists() and files[0].exists()


# -- launching: what a replay of a stored kernel is given ---------------------------------------------------
class DeviceArray:
    """What the packing reads of a device array (a Numba device array's attributes)."""

    def __init__(self, pointer: int, shape: tuple, dtype: str):
        import numpy as np

        self.shape, self.dtype = shape, np.dtype(dtype)
        self.size = int(np.prod(shape))
        self.strides = tuple(int(s) for s in np.empty(shape, dtype=dtype).strides)
        self.__cuda_array_interface__ = {"data": (pointer, False), "shape": shape}
        self.device_ctypes_pointer = type("P", (), {"value": pointer})()


def test_a_stored_kernel_is_bound_for_replay_with_its_packed_arguments(monkeypatch):
    """A launch of a kernel with stored code becomes a packed launch: the configuration normalised to three
    dimensions, the stream, the driver's kernel and the arguments packed as numba-cuda packs them, with each
    array's data pointer where a plan moves it to a new output."""
    import ctypes

    import numpy as np

    from autotune.runtime import driver_kernels, kernel_launch, launch

    prepared = []
    monkeypatch.setattr(kernel_launch, "prepared", lambda *parts: prepared.append(parts) or (lambda: None))
    x, out = DeviceArray(0x10000, (300,), "float32"), DeviceArray(0x20000, (1,), "float32")
    types = ("x", "n", "out", "flag")
    packers = (driver_kernels._pack_array, driver_kernels._scalar_packer(ctypes.c_int64),
               driver_kernels._pack_array, driver_kernels._scalar_packer(lambda v: v))

    class Stored(driver_kernels.CachedDispatcher):
        def loaded(self, args):
            assert len(args) == len(types)
            return driver_kernels.Loaded("the driver's kernel", packers, "local")

    stand_in = Stored("ab" * 32, "reduce_all")
    configured = stand_in[(5, 2), 128, "stream", 4096]
    step = launch.bind(configured, (x, np.int64(300), out, True))
    assert isinstance(step, launch.PackedLaunch)
    stream, config, kernel, packed = prepared[0]
    assert (stream, kernel) == ("stream", "the driver's kernel")
    assert (tuple(config.grid), tuple(config.block), config.shmem_size) == ((5, 2, 1), (128, 1, 1), 4096)
    assert [kernel_launch._bytes(v) for v in packed] == [kernel_launch._bytes(v) for v in
                                                         (0, 0, 300, 4, 0x10000, 300, 4, ctypes.c_int64(300),
                                                          0, 0, 1, 4, 0x20000, 1, 4, True)]
    assert step.pointers == (4, 12)
    moved = step.moved(0x20000, 0x20004, 0x1000)
    assert moved.packed[12] == 0x21000 and moved.packed[4] == 0x10000
    with pytest.raises(ValueError, match="grid"):
        stand_in[0, 128]


def test_a_clustered_launch_counts_its_grid_in_clusters_and_only_the_driver_takes_it(monkeypatch):
    """A launch in clusters of two (CLUSTER 2) is configured for cuda.core with the grid in clusters (its x halved)
    and the cluster's shape; a grid that is no whole number of clusters is refused, and so is the way through
    Numba, which would launch the blocks unclustered (their copies into a peer would land nowhere)."""
    from types import SimpleNamespace

    import cuda.core

    from autotune.runtime import driver_kernels, kernel_launch, launch

    # cuda.core checks a cluster against the GPU it finds: a stand-in records the configuration instead
    monkeypatch.setattr(cuda.core, "LaunchConfig", lambda **config: SimpleNamespace(**config))
    stand_in = driver_kernels.CachedDispatcher("ab" * 32, "matmul")
    pair = driver_kernels.CachedLaunch(stand_in, (12, 1, 3), 384, "stream", 99_000, 2)
    config = pair.config()
    assert (tuple(config.grid), tuple(config.cluster), tuple(config.block)) == ((6, 1, 3), (2, 1, 1), (384, 1, 1))
    assert tuple(driver_kernels.CachedLaunch(stand_in, 12, 384).config().grid) == (12, 1, 1)
    with pytest.raises(RuntimeError, match="clusters of 2"):
        pair.numba_configured()
    with pytest.raises(ValueError, match="no clusters of 2"):
        driver_kernels.CachedLaunch(stand_in, 13, 384, 0, 0, 2)
    launched = []  # a cluster launch goes through cuda.core's launch, on a cuda.core stream (0: the default one)
    monkeypatch.setattr(cuda.core, "launch", lambda *parts: launched.append(parts))
    kernel_launch.prepared(0, config, "the kernel", (7, 8))()
    assert isinstance(launched[0][0], cuda.core.Stream) and launched[0][1:] == (config, "the kernel", 7, 8)
    monkeypatch.setattr(driver_kernels, "enabled", lambda: False)
    with pytest.raises(RuntimeError, match="clusters of 2 goes through the driver"):
        launch.configure(object(), 12, 384, 0, False, 0, 2)
