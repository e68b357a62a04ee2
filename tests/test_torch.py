"""autotune.torch: the functions as PyTorch operators, in the CUDA simulator on CPU tensors (run where PyTorch is
installed): results against float64 NumPy, the fake implementations against the real ones, torch.compile with
fullgraph=True (no graph break), and matmul's gradient against PyTorch's own on the same data. The GPU check is
lab/interop_gpu.py --torch."""
import warnings

import numpy as np
import pytest
from checks import assert_matmul_close, small_integers

import autotune

torch = pytest.importorskip("torch", reason="autotune.torch needs PyTorch")
import autotune.torch as att  # noqa: E402  autotune's own module: an import error must fail, not skip


@pytest.fixture(autouse=True)
def empty_database(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.TunedKernelWarning)
        yield


def tensor(rng, shape, dtype=np.float64):
    return torch.from_numpy(rng.standard_normal(shape).astype(dtype))


def test_the_operators_compute_numpys_answers(rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    x[3, 1] = np.nan
    t = torch.from_numpy(x)
    np.testing.assert_allclose(att.sum(t, axis=1).numpy(), x.astype(np.float64).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(att.max(t, axis=0).numpy(), x.max(axis=0))  # NaN where a column holds one
    np.testing.assert_array_equal(att.nanmin(t, axis=-1, keepdims=True).numpy(), np.nanmin(x, -1, keepdims=True))
    total = att.sum(torch.from_numpy(small_integers(rng, (3, 4), np.int32)))
    assert total.dtype == torch.int64 and total.shape == ()
    A, B = rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    assert_matmul_close(att.matmul(torch.from_numpy(A), torch.from_numpy(B)).numpy(), A, B)
    v = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(att.dot(torch.from_numpy(v), torch.from_numpy(v)).item(), v.astype(np.float64) @ v,
                               rtol=1e-6)
    strided = torch.from_numpy(x)[:, ::2]  # neither C- nor F-contiguous: copied, as PyTorch's operators accept it
    np.testing.assert_array_equal(att.nanmax(strided, axis=0).numpy(), np.nanmax(x[:, ::2], axis=0))
    with pytest.raises(ValueError, match="op must be one of"):
        torch.ops.autotune.reduce(t, "prod", None, False)


@pytest.mark.parametrize("make", [
    lambda t: t,  # C-contiguous
    lambda t: t.t().contiguous().t(),  # F-contiguous: reduced in place, the result F-ordered
])
def test_the_fake_implementations_match_the_real_ones(rng, make):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = make(tensor(rng, (4, 6), np.float32))
    cases = [(torch.ops.autotune.reduce, (x, "sum", [1], False)), (torch.ops.autotune.reduce, (x, "max", None, True)),
             (torch.ops.autotune.reduce, (x, "min", [], False)),
             (torch.ops.autotune.matmul, (x, tensor(rng, (6,), np.float32), "ieee")),
             (torch.ops.autotune.matmul, (tensor(rng, (2, 1, 3, 4), np.float32), make(tensor(rng, (4, 5), np.float32)),
                                          "ieee")),
             (torch.ops.autotune.dot, (tensor(rng, (5,)), tensor(rng, (5,))))]
    for op, args in cases:
        real = op(*args)
        with FakeTensorMode() as mode:
            fake = op(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
        assert (fake.shape, fake.dtype, fake.stride()) == (real.shape, real.dtype, real.stride()), op


def test_opcheck_finds_the_registrations_consistent(rng):
    a, b = tensor(rng, (3, 4)), tensor(rng, (4, 2))
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.autotune.matmul.default, (a, b, "ieee"), test_utils=utils)
    torch.library.opcheck(torch.ops.autotune.reduce.default, (a, "sum", [0], True), test_utils=utils)


def test_torch_compile_traces_through_without_a_graph_break(rng):
    def f(a, b):
        c = att.matmul(a, b)
        return att.sum(c, axis=-1) + att.max(c, axis=-1)

    a, b = tensor(rng, (5, 3)), tensor(rng, (3, 4))
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")  # a graph break raises with fullgraph=True
    np.testing.assert_allclose(compiled(a, b).numpy(), f(a, b).numpy(), rtol=1e-12)
    c = a.numpy() @ b.numpy()
    np.testing.assert_allclose(compiled(a, b).numpy(), c.sum(-1) + c.max(-1), rtol=1e-12)


@pytest.mark.parametrize("a_shape, b_shape", [((4, 3), (3, 5)), ((3,), (3, 5)), ((4, 3), (3,)), ((3,), (3,)),
                                              ((2, 4, 3), (3, 5)), ((1, 3), (2, 3, 5))])
def test_matmuls_gradient_is_pytorchs(rng, a_shape, b_shape):
    """dA = dC B^T and dB = A^T dC through autotune's matmul, summed over broadcast dimensions: PyTorch's
    gradient of torch.matmul on the same float64 data, for 1-D operands and broadcast stacks."""
    a, b = tensor(rng, a_shape).requires_grad_(), tensor(rng, b_shape).requires_grad_()
    weight = tensor(rng, np.broadcast_shapes(np.matmul(np.ones(a_shape), np.ones(b_shape)).shape))
    (att.matmul(a, b) * weight).sum().backward()
    ours = a.grad.clone(), b.grad.clone()
    a.grad = b.grad = None
    (torch.matmul(a, b) * weight).sum().backward()
    for got, want in zip(ours, (a.grad, b.grad)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_only_the_operand_that_needs_a_gradient_gets_one(rng, monkeypatch):
    calls = []
    real = autotune.functions.matmul
    monkeypatch.setattr(autotune.functions, "matmul", lambda *a, **k: calls.append(k) or real(*a, **k))
    a, b = tensor(rng, (3, 4)).requires_grad_(), tensor(rng, (4, 2))
    att.matmul(a, b, precision="ieee").sum().backward()
    assert b.grad is None and a.grad.shape == a.shape
    assert len(calls) == 2 and all(k["precision"] == "ieee" for k in calls)  # forward, and dA only
