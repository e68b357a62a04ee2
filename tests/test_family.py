"""The kernel-family protocol: nothing outside autotune/families/ knows a family, families from outside the package
(a file, an installed package's entry point) are tuned and looked up like the built-in ones, and a database keeps
the entries of families it does not know."""
import ast
import os
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import autotune
import autotune.core.registry
from autotune.core.registry import BUILTIN, FamilyError, register_family
from autotune.runtime import db

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
SOFTMAX = ROOT / "examples" / "softmax"


def python_files(folder: Path):
    return sorted(p for p in folder.rglob("*.py") if "families" not in p.relative_to(folder).parts)


def test_no_code_outside_the_families_names_one():
    """Outside autotune/families/ no code compares with a family's name or guesses a family from parameter names;
    the list of built-in families (registry.BUILTIN), the command line's two tuning commands and the names of the
    NumPy-style functions (autotune.FUNCTIONS and a module's __all__, where `matmul` is a function) are the
    exceptions."""
    allowed_targets = {"BUILTIN", "TUNING", "FUNCTIONS", "__all__"}
    found = []
    for path in python_files(PACKAGE):
        tree = ast.parse(path.read_text())
        allowed = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in allowed_targets for t in node.targets):
                allowed |= {id(n) for n in ast.walk(node.value)}
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                    isinstance(body[0].value, ast.Constant):
                allowed.add(id(body[0].value))  # docstrings may give examples
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in (*BUILTIN, "BLOCK") and id(node) not in allowed:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, found


def module_imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The autotune modules a module imports when it is imported (TYPE_CHECKING blocks and function bodies excluded)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            continue
        for n in [node, *(ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else ())]:
            if isinstance(n, ast.ImportFrom):
                base = package.rsplit(".", n.level - 1)[0] if n.level > 1 else package
                target = (f"{base}.{n.module}" if n.module else base) if n.level else (n.module or "")
                for alias in n.names:
                    found |= {m for m in (f"{target}.{alias.name}", target) if m in modules}
            elif isinstance(n, ast.Import):
                found |= {a.name for a in n.names if a.name in modules}
    return found - {name}


def test_the_import_graph_has_no_cycles():
    paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in PACKAGE.rglob("*.py")}
    graph = {name: module_imports(path, name, set(paths)) for name, path in paths.items()}
    state, stack, cycles = {}, [], []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, cycles


def test_the_example_family_uses_only_the_public_api():
    """examples/softmax imports from autotune only what autotune.__all__ and autotune.toolkit.__all__ export, and
    every name of those exists."""
    import autotune.toolkit

    public = {"autotune": set(autotune.__all__), "autotune.toolkit": set(autotune.toolkit.__all__)}
    tree = ast.parse((SOFTMAX / "family.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autotune"):
            assert node.module in public, f"line {node.lineno}: imports from {node.module}"
            assert {a.name for a in node.names} <= public[node.module], f"line {node.lineno}"
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("autotune.") for a in node.names), f"line {node.lineno}"
    for module, names in public.items():
        for name in names:
            assert getattr(autotune if module == "autotune" else autotune.toolkit, name) is not None, name


def test_registering_families_and_clear_errors(tmp_path):
    fam = register_family(str(SOFTMAX))
    assert fam.name == "softmax" and register_family(str(SOFTMAX)) is fam
    assert register_family(str(SOFTMAX / "family.py")) is fam  # the same family, however it is named
    with pytest.raises(FamilyError, match="no such family file"):
        register_family(str(tmp_path / "missing.py"))
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(FamilyError, match="defines no kernel family"):
        register_family(str(tmp_path / "empty.py"))
    (tmp_path / "broken.py").write_text("import nonexistent_module_xyz\n")
    with pytest.raises(FamilyError, match="importing the family failed: ModuleNotFoundError"):
        register_family(str(tmp_path / "broken.py"))
    with pytest.raises(ValueError, match="unknown kernel family 'conv'"):
        autotune.build_kernel("conv", {})


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_a_family_cannot_take_a_built_in_name_even_before_the_built_in_is_used(tmp_path, name):
    """Registered in a fresh process before the built-in family of that name was first used, a family named like
    it used to take its place (autotune.matmul then broke); the name is refused at once, naming the file, and the
    built-in still works."""
    path = tmp_path / "impostor.py"
    path.write_text("from autotune.families.reduce.family import ReduceFamily\n\n\n"
                    f"class Family(ReduceFamily):\n    name = {name!r}\n")
    code = ("import numpy as np, autotune, warnings\n"
            "from autotune.core.registry import FamilyError, register_family\n"
            "warnings.simplefilter('ignore')\n"
            "try:\n"
            f"    register_family({str(path)!r})\n"
            "except FamilyError as exc:\n"
            "    print('refused:', exc)\n"
            "x = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)\n"
            "print(autotune.matmul(x, x.T).tolist())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = out.stdout.splitlines()
    assert first.startswith(f"refused: {path}: '{name}' is the name of a built-in kernel family"), first
    assert second == "[[14.0, 32.0], [32.0, 77.0]]"
    with pytest.raises(FamilyError, match="name of a built-in kernel family"):
        register_family(str(path))


TINY_FAMILY = '''
"""A third-party-style family: y = 2 x of a 1-D array."""
from pathlib import Path

import numpy as np

from autotune import Case, Kernel, KernelFamily, compare_exact, unwritten

HERE = Path(__file__).resolve().parent


class ScaleKernel(Kernel):
    def __init__(self, family, module, params, dtype, args, source):
        self.family, self.module, self.params, self.dtype, self.args, self.source = family, module, params, dtype, args, source
        self.entry = module.scale
        self.signature = f"void({dtype}[::1], {dtype}[::1], int64)"

    def __call__(self, x, out=None):
        from numba import cuda

        d = cuda.to_device(x) if isinstance(x, np.ndarray) else x
        y = cuda.device_array(d.shape, self.dtype) if out is None else out
        self.entry[-(-d.size // self.params["BLOCK"]), self.params["BLOCK"]](d, y, d.size)
        return y.copy_to_host() if isinstance(x, np.ndarray) and out is None else y


class Family(KernelFamily):
    name = "scale"
    space_file = HERE / "scale.yaml"
    template_dir = HERE

    def work(self, problem):
        return 8.0 * problem.shape[0]

    def out_shape(self, problem):
        return problem.shape

    def template_context(self, params, dtype, args, simulator):
        return {**params, "dtype": dtype, "SIM": simulator, "description": "scale"}

    def make_kernel(self, module, params, dtype, args, source, simulator):
        return ScaleKernel(self, module, params, dtype, args, source)

    def threads(self, params):
        return params["BLOCK"]

    def inputs(self, problem, rng, purpose):
        return [rng.integers(-8, 9, problem.shape).astype(problem.dtype)]

    def verification(self, problem, inputs, rng):
        return [Case(tuple(inputs), 2.0 * inputs[0].astype(np.float64))]

    def verify(self, problem, case, got, rng):
        return unwritten(got) or compare_exact(got, case.expected)
'''

TINY_TEMPLATE = '''{%- import "_common.j2" as c with context -%}
{{ c.header("tinyfam/scale.py.j2") }}

{{ c.jit(BLOCK) }}
def scale(X, Y, n):
    i = cuda.grid(1)
    if i < n:
        Y[i] = X[i] * 2
'''


def tiny_wheel(folder: Path) -> Path:
    """A wheel of the package tinyfam, which exposes its family through the autotune.families entry point."""
    wheel = folder / "tinyfam-0.1-py3-none-any.whl"
    files = {"tinyfam/__init__.py": TINY_FAMILY, "tinyfam/scale.py.j2": TINY_TEMPLATE,
             "tinyfam/scale.yaml": "kernel: scale\nparams:\n  BLOCK: {values: [32, 64]}\n",
             "tinyfam-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinyfam\nVersion: 0.1\n",
             "tinyfam-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            "Tag: py3-none-any\n",
             "tinyfam-0.1.dist-info/entry_points.txt": "[autotune.families]\nscale = tinyfam:Family\n"}
    files["tinyfam-0.1.dist-info/RECORD"] = "".join(f"{name},,\n" for name in files) + \
        "tinyfam-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def test_an_installed_package_exposes_its_family_through_the_entry_point(tmp_path):
    """A family installed as a package in a fresh virtual environment is found by name, built and run there."""
    import site
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]  # where autotune and its needs are
    Path(purelib, "outer.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", purelib,
                    str(tiny_wheel(tmp_path))], check=True)
    code = ("import numpy as np, autotune; from autotune.core.registry import family; f = family('scale'); "
            "k = autotune.build_kernel('scale', {'BLOCK': 32}); print(f.source, k(np.arange(5.0)).tolist())")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": ""}
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split(None, 1) == ["scale", "[0.0, 2.0, 4.0, 6.0, 8.0]\n"]


SIM = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
FOREIGN = {"kernel": "not_registered_here", "dtype": "float32", "shape": [64], "params": {"X": 1},
           "time": {"median_ms": 1.0, "p20_ms": 1.0, "p80_ms": 1.0}}


def test_entries_of_an_unregistered_family_are_kept_and_other_lookups_work(tmp_path):
    from autotune.core.problem import Problem
    from autotune.core.space import load_space
    from autotune.runtime.lookup import TunedKernelWarning, get_best_kernel

    def reduce_entry(n):
        problem = Problem("reduce", (n,), "float32", {"op": "sum"})
        params = load_space("reduce").validate({"BLOCK": 32, "WAVES": 1}, dtype="float32", args=problem.args)
        return db.parse_entry(db.entry_record(problem, params, time={"median_ms": 1.0, "p20_ms": 1.0, "p80_ms": 1.0}))

    path = tmp_path / "cuda-simulator.yaml"
    db.write_entries(path, SIM, [reduce_entry(1000)])
    text = path.read_text().replace("entries:\n", "entries:\n- " + repr(FOREIGN).replace("'", "") + "\n")
    path.write_text(text)
    loaded = db.load_file(path, strict=True)
    assert loaded.foreign_families == ["not_registered_here"] and len(loaded.entries) == 1
    db.write_entries(path, SIM, [reduce_entry(2000)])  # a write keeps the foreign entry as it was
    assert db.load_file(path).foreign == [FOREIGN]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = get_best_kernel("reduce", (1000,), db=tmp_path)
    notes = [str(w.message) for w in caught if issubclass(w.category, TunedKernelWarning)]
    assert any("'not_registered_here'" in n and "kept but not used" in n for n in notes)
    x = np.arange(1000, dtype=np.float32)
    assert kernel(x) == x.sum()


def run_cli(args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=900)


def test_the_example_family_is_tuned_stored_and_looked_up_end_to_end(tmp_path):
    """`autotune tune --family examples/softmax` in the simulator on odd shapes writes the database; a fresh process
    registers the family, looks the kernel up and computes NumPy's softmax into a NaN-poisoned output."""
    shapes = ["1x37", "3x1", "7x41"]  # one row, one column, primes
    args = ["tune", "--family", str(SOFTMAX), "--simulator", "--trials", "2", "--sampler", "random",
            "--compile-workers", "1", "--state-dir", str(tmp_path / "state"), "--db", str(tmp_path / "db"),
            "--write-db", *(f"--shape={s}" for s in shapes)]
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert db.load_file(tmp_path / "db" / "cuda-simulator.yaml").foreign_families == ["softmax"] or \
        "softmax" in autotune.core.registry.known()  # unregistered here, its entries are kept aside
    register_family(str(SOFTMAX))
    entries = db.load_file(tmp_path / "db" / "cuda-simulator.yaml", strict=True).entries
    assert sorted(e.problem.key for e in entries) == sorted(f"softmax/float32/-/{s}" for s in shapes)
    code = textwrap.dedent(f"""
        import numpy as np, warnings, autotune
        from numba import cuda
        autotune.register_family({str(SOFTMAX)!r})
        x = (4 * np.random.default_rng().standard_normal((7, 41))).astype(np.float32)
        x[3, 5] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("error", autotune.TunedKernelWarning)  # the exact entry, no fallback
            k = autotune.get_best_kernel("softmax", (7, 41), db={str(tmp_path / "db")!r})
        out = cuda.to_device(np.full((7, 41), np.nan, np.float32))
        k(cuda.to_device(x), out=out)
        y = out.copy_to_host().astype(np.float64)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
        assert np.isnan(y[3]).all() and not np.isnan(np.delete(y, 3, 0)).any()
        assert np.allclose(np.delete(y, 3, 0), np.delete(ref, 3, 0), rtol=1e-5, atol=0)
        print("ok", k.params)
    """)
    check = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                           env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}, timeout=600)
    assert check.returncode == 0 and check.stdout.startswith("ok"), check.stderr[-3000:]


def test_the_example_familys_oracle_fails_a_wrong_kernel(rng):
    """The softmax oracle is not vacuous: an online pass that adds 1 where NumPy's +inf - inf gives NaN, and a
    result off by a few ulp in every element, both fail."""
    from autotune.core.problem import Problem
    from autotune.tuning.instance import Instance

    register_family(str(SOFTMAX))
    problem = Problem("softmax", (9, 33), "float32")
    inst = Instance(problem, rng)

    class Wrong:
        def __init__(self, change):
            self.change = change

        def __call__(self, x, out):
            from numba import cuda

            host = x.copy_to_host().astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                finite = np.where(np.isinf(host), np.sign(host) * 1e30, host)  # as if inf - inf were 0
                e = np.exp(finite - finite.max(-1, keepdims=True))
                y = self.change(e / e.sum(-1, keepdims=True))
            out.copy_to_device(cuda.to_device(y.astype(np.float32)))

    assert "rows with NaN and infinities" in inst.check(Wrong(lambda y: y))
    assert "error bound" in inst.check(Wrong(lambda y: y * (1 + 2e-5)))


MINIMAL = ROOT / "tests" / "minimal_family"
CONTRACT_FAMILIES = ["matmul", "reduce", str(SOFTMAX), str(MINIMAL)]


@pytest.mark.parametrize("spec", CONTRACT_FAMILIES, ids=["matmul", "reduce", "softmax", "minimal"])
def test_every_family_keeps_the_contract(spec, rng):
    """One contract over every family (the built-in ones, the example, the tests' minimal one): what each method
    and hook returns, a space whose starts, seed and defaults validate, templates that parse, an oracle that
    passes the float64 reference and fails a wrong or unwritten output, and a cheap variant that passes it in the
    simulator, called the way the tuner, the selftest and the NumPy-style functions call kernels."""
    import inspect

    from autotune.commands.selftest import plan_for
    from autotune.core.family import Kernel, KernelFamily
    from autotune.core.problem import Problem, parse_shape
    from autotune.core.registry import resolve
    from autotune.core.space import load_space
    from autotune.runtime.build import build_kernel
    from autotune.runtime.render import check_templates
    from autotune.tuning.instance import Instance

    impl = resolve(spec)
    assert isinstance(impl, KernelFamily) and impl.name.isidentifier() and impl.summary and impl.shape_help
    assert impl.dtypes and impl.dry_run_shapes and impl.unit in ("GB/s", "TFLOP/s")
    check_templates(impl)
    space = load_space(impl.name)
    dtype, args = impl.dtypes[0], impl.family_args()
    # a start is valid for some dtype, under the default arguments or those of a problem the selftest covers (matmul's
    # gemv starts apply to skinny problems alone)
    covered = [{**args, **case_args} for _, case_args, _ in impl.selftest_cases(small=False)]
    assert all(any(space.checked_or_none(s, dtype=d, args=a) is not None
                   for d in impl.dtypes for a in [args, {**args, **_args_for(impl, d)}, *covered])
               for s in space.starts), "a start is valid for no dtype"
    for text in (*impl.suite, *impl.dry_run_shapes):
        problem = Problem(impl.name, parse_shape(text, impl), dtype, args)
        assert problem.work > 0 and all(isinstance(n, int) for n in problem.out_shape)
        space.validate(impl.default_params(problem), dtype=dtype, args=problem.args)
    if impl.baseline:
        space.restrict(dict(impl.baseline), dtype=dtype, args=args)
    for case_dtype, case_args, shapes in impl.selftest_cases(small=False):
        assert case_dtype in impl.dtypes and shapes
        for shape in shapes:
            Problem(impl.name, shape, case_dtype, case_args)
    assert all(isinstance(p, dict) for p in impl.selftest_extras())
    functions = impl.functions()
    assert all(name.isidentifier() and callable(fn) for name, fn in functions.items())
    for name in functions:
        assert getattr(autotune, name) is functions[name]

    (kind, dtype, case_args, shapes, variants), = plan_for([impl.name], [dtype], True, rng)[:1]
    problem = Problem(impl.name, shapes[0], dtype, case_args)
    inst = Instance(problem, rng)
    for host in inst.check_host + inst.time_host:
        assert np.count_nonzero(host) > 0  # never zeros
    case = inst.cases[0][0]
    assert [np.array_equal(a, b, equal_nan=True) for a, b in zip(case.inputs, inst.check_host)] == \
        [True] * len(case.inputs)
    if case.expected is not None:
        expected = np.asarray(case.expected, dtype=np.float64).astype(problem.out_dtype)
        assert impl.verify(problem, case, expected.copy(), rng) is None
        wrong = expected.astype(np.float64) + 1 + 0.01 * np.abs(expected)  # off by more than 1% (x * 1.01 + 1 is x at -100)
        assert impl.verify(problem, case, wrong.astype(problem.out_dtype), rng)
        if np.dtype(problem.out_dtype).kind == "f":
            assert "not written" in impl.verify(problem, case, np.full_like(expected, np.nan), rng)
    kernel = build_kernel(impl.name, variants[0], dtype, **case_args)
    assert isinstance(kernel, Kernel) and isinstance(kernel.signature, str) and kernel.entry is not None
    assert {"out", "stream"} <= set(inspect.signature(kernel.__call__).parameters)
    assert inst.check(kernel) is None, variants[0]
    inst.poison()
    plan = kernel.bind(*inst.check_args, out=inst.out, stream=None)
    assert plan() is not None and impl.verify(problem, case, arrays_host(inst.out), rng) is None


def _args_for(impl, dtype) -> dict:
    """Arguments under which a dtype is computed (matmul's float32 starts on the tensor cores need a precision)."""
    return {"precision": "tf32"} if any(a.name == "precision" for a in impl.args) and dtype == "float32" else {}


def arrays_host(d):
    from autotune.runtime.arrays import device_to_host

    return device_to_host(d)


def test_template_errors_name_the_file_and_line_and_stop_a_tuning_run_once(tmp_path):
    """A template that does not parse is refused with its file and line by render, and by tune before its first
    variant (one message, no trial); one that renders a name its context lacks names the line it is used on."""
    folder = tmp_path / "brokenfam"
    folder.mkdir()
    (folder / "__init__.py").write_text(TINY_FAMILY.replace('name = "scale"', 'name = "brokenscale"'))
    (folder / "scale.yaml").write_text("family: brokenscale\nparams:\n  BLOCK: {values: [32, 64]}\n")
    lines = TINY_TEMPLATE.splitlines()
    lines[3] = "{{ c.jit(BLOCK) }"  # line 4: an unclosed expression
    (folder / "brokenscale.py.j2").write_text("\n".join(lines) + "\n")
    for args in (["render", "--family", str(folder), "-p", "BLOCK=32"],
                 ["tune", "--family", str(folder), "--simulator", "--no-db", "--state-dir", str(tmp_path / "s")]):
        out = run_cli(args, tmp_path)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert f"{folder / 'brokenscale.py.j2'}:4: template syntax error" in out.stderr, out.stderr
        assert out.stderr.count("template syntax error") == 1 and "#0" not in out.stderr + out.stdout
    lines[3] = "{{ c.jit(BLOCKS) }}"
    (folder / "brokenscale.py.j2").write_text("\n".join(lines) + "\n")
    out = run_cli(["render", "--family", str(folder), "-p", "BLOCK=32"], tmp_path)
    assert out.returncode == 2 and f"{folder / 'brokenscale.py.j2'}:4" in out.stderr, out.stderr
    assert "rendering failed: UndefinedError: 'BLOCKS' is undefined" in out.stderr


def test_number_arguments_parse_within_their_bounds_and_key_their_problems():
    """A float argument (the minimal family's eps) takes numbers and their text, refuses what is out of bounds,
    not finite or no number, and each value is a problem of its own; kind needs choices or a number kind."""
    from autotune import FamilyArg
    from autotune.core.problem import Problem

    register_family(str(ROOT / "tests" / "minimal_family"))
    eps = FamilyArg("eps", (), 1e-5, kind=float, bounds=(0.0, 1.0))
    assert eps.parse("0.25") == 0.25 and eps.parse(1) == 1.0 and eps.parse(np.float32(0.5)) == 0.5
    for bad in ("-0.1", 2, "nan", "inf", "abc", None, True):
        with pytest.raises(ValueError, match="is not a finite float in"):
            eps.parse(bad)
    count = FamilyArg("n", (), 4, kind=int, bounds=(1, None))
    assert count.parse("8") == 8 and count.parse(3.0) == 3
    with pytest.raises(ValueError, match="is not an integer in"):
        count.parse(2.5)
    with pytest.raises(TypeError, match="choices, or kind=int or kind=float"):
        FamilyArg("x")
    a, b = Problem("layernorm", (4, 8), "float32", {"eps": 0.5}), Problem("layernorm", (4, 8), "float32", {})
    assert a.key == "layernorm/float32/0.5/4x8" and b.key == "layernorm/float32/1e-05/4x8"


def test_a_familys_functions_join_the_namespace_and_clashes_are_refused(tmp_path):
    """autotune.<name> is a registered family's function; a function named like autotune's own or like another
    family's is refused at registration, naming both."""
    register_family(str(SOFTMAX))
    assert autotune.softmax is register_family(str(SOFTMAX)).functions()["softmax"]
    assert "softmax" in dir(autotune)
    for name, other in (("sum", "autotune.sum"), ("toolkit", "autotune.toolkit"), ("softmax", "'softmax'")):
        (tmp_path / f"clash_{name}.py").write_text(TINY_FAMILY.replace('name = "scale"', f'name = "clash_{name}"') +
                                                   f"\n    def functions(self):\n        return {{{name!r}: print}}\n")
        with pytest.raises(FamilyError, match=f"declares a function {name!r}") as info:
            register_family(str(tmp_path / f"clash_{name}.py"))
        assert other in str(info.value)
    with pytest.raises(AttributeError, match="once it is registered"):
        autotune.no_such_function_anywhere


def test_autotune_softmax_follows_numpys_formula_with_out_streams_and_replayed_plans(rng):
    """autotune.softmax (the example family's function): any rank along the last axis against float64 NumPy on
    fresh data; on device arrays with out= (poisoned first), a second call on the same arrays replays the plan
    and reads their new contents; in place; the empty cases and what it refuses."""
    from numba import cuda

    register_family(str(SOFTMAX))

    def expected(x):
        x = x.astype(np.float64)
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.TunedKernelWarning)
        x = (4 * rng.standard_normal((2, 3, 37))).astype(np.float32)
        y = autotune.softmax(x)
        assert isinstance(y, np.ndarray) and y.dtype == np.float32 and np.allclose(y, expected(x), rtol=2e-6, atol=0)
        d = cuda.to_device(x)
        out = cuda.to_device(np.full(x.shape, np.nan, np.float32))
        assert autotune.softmax(d, out=out, stream=0) is out
        assert np.allclose(out.copy_to_host(), expected(x), rtol=2e-6, atol=0)
        x2 = (4 * rng.standard_normal(x.shape)).astype(np.float32)
        d.copy_to_device(x2)
        out.copy_to_device(np.full(x.shape, np.nan, np.float32))
        autotune.softmax(d, out=out)  # replayed: the same arrays, their new contents
        assert np.allclose(out.copy_to_host(), expected(x2), rtol=2e-6, atol=0)
        autotune.softmax(d, out=d)  # in place
        assert np.allclose(d.copy_to_host(), expected(x2), rtol=2e-6, atol=0)
        one = autotune.softmax(np.array([3.0, -np.inf, 1.0]))  # float64, one row; exp(-inf) is 0
        assert one.dtype == np.float64 and np.allclose(one, expected(np.array([3.0, -np.inf, 1.0])))
        assert autotune.softmax(np.zeros((0, 5), np.float32)).shape == (0, 5)
        for call, error in ((lambda: autotune.softmax(x, axis=0), "along the last axis"),
                            (lambda: autotune.softmax(x.astype(np.int32)), "takes float32, float64"),
                            (lambda: autotune.softmax(np.ones((2, 0), np.float32)), "rows of length 0"),
                            (lambda: autotune.softmax(np.asfortranarray(x[0])), "C-contiguous")):
            with pytest.raises((ValueError, TypeError), match=error):
                call()


def test_a_render_imports_exactly_the_names_its_code_uses():
    """The import mark becomes imports of the names the code uses bare (annotations too, which run when the
    module is imported): not those only after a dot (``np.float64``), only in a comment or a string, or bound by
    the module's own top level (not by a line of a string that looks like an assignment)."""
    import re

    from autotune.runtime.render import IMPORTS_MARK, fill_imports

    source = "\n".join([
        IMPORTS_MARK,
        "# int32 and uint16 in a comment",
        "def bf16_to_f32(x):  # a stand-in of an intrinsic, defined here",
        "    return x",
        "def helper(x: uint32):",
        '    """a line at the margin:',
        "cuda = no binding, only text",
        '    """',
        "    return x",
        "@cuda.jit",
        "def kernel(a, out):",
        "    note = 'int64 in a string'",
        "    t = math.sqrt(a[0]) + np.float64(1.0)",
        "    out[0] = float32(t) + bf16_to_f32(t) + mul_add(t, t, t)",
        "    cuda.syncthreads()",
        ""])
    filled = fill_imports(source)
    header = filled.split("# int32")[0]
    assert "import math" in header and "from numba import cuda, float32, uint32\n" in header
    assert "import numpy as np" in header  # np is used bare; its attribute float64 is not a use of float64
    assert "from autotune.kernels.intrinsics import mul_add\n" in header
    for absent in ("float64", "int32", "uint16", "int64", "bf16_to_f32"):
        assert not re.search(rf"\b{absent}\b", header), absent
    compile(filled, "<test>", "exec", dont_inherit=True)
