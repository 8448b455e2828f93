"""attncore.triton's flash_attention: the Triton kernels against attncore's reference and
PyTorch's kernel, forward (output, row log-sum-exp) and backward (the three gradients).

On a machine without a GPU the kernels run in Triton's interpreter, on CPU tensors; the
sizes are small because the interpreter runs every program one after another in Python.
The large float16 and bfloat16 cases need the compiled kernels and skip without CUDA; a
small one of each runs in the interpreter (bfloat16 there is computed in float32). The whole
file skips where Triton is not installed (it is the optional extra ``attncore[triton]``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
at = pytest.importorskip("attncore.triton", reason="needs the optional package triton")
F = torch.nn.functional

import attncore as ac  # noqa: E402

CPU_OK = at.interpreting()
HAS_CUDA = torch.cuda.is_available()
DEVICES = (["cpu"] if CPU_OK else []) + (["cuda"] if HAS_CUDA else [])
pytestmark = pytest.mark.skipif(not DEVICES, reason="no CUDA device, and Triton was "
                                "imported without its interpreter")


def _inputs(shape_q, n_k=None, d_v=None, *, dtype=torch.float32, device="cpu", seed=0):
    b, h, n_q, d = shape_q
    n_k = n_q if n_k is None else n_k
    d_v = d if d_v is None else d_v
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n_q, d, generator=gen)
    k = torch.randn(b, h, n_k, d, generator=gen)
    v = torch.randn(b, h, n_k, d_v, generator=gen)
    g = torch.randn(b, h, n_q, d_v, generator=gen)
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, g)]


def _run(fn, q, k, v, g, **kw):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = fn(*leaves, **kw)
    out.backward(g)
    return [out.detach()] + [x.grad for x in leaves]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [16, 32, 64, 128])
def test_matches_pytorch_and_reference_in_float32(device, causal, d):
    # n = 40 is not a multiple of the tiles (32 by default, 16 below): a partial last tile
    q, k, v, g = _inputs((2, 2, 40, d), device=device)
    mine = _run(at.flash_attention, q, k, v, g, causal=causal)
    torch_ = _run(F.scaled_dot_product_attention, q, k, v, g, is_causal=causal)
    for a, b in zip(mine, torch_):
        assert (a - b).abs().max() < 2e-5
    # attncore's NumPy reference, forward and backward, in float64
    q64, k64, v64, g64 = (x.cpu().double().numpy() for x in (q, k, v, g))
    out = ac.scaled_dot_product_attention(q64, k64, v64, causal=causal)
    grads = ac.attention_backward(q64, k64, v64, g64, causal=causal)
    for a, b in zip(mine, (out, *grads)):
        assert np.abs(a.cpu().double().numpy() - b).max() < 2e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_log_sum_exp_matches_torch(device, causal):
    q, k, v, _ = _inputs((1, 2, 37, 32), device=device, seed=1)
    _, lse = at.flash_attention(q, k, v, causal=causal, return_lse=True)
    s = q @ k.transpose(-1, -2) / 32 ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(37, 37, dtype=torch.bool, device=device).tril(),
                          float("-inf"))
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 37)
    assert (lse - torch.logsumexp(s, -1)).abs().max() < 1e-5
    # tiled_attention's row log-sum-exp is the same quantity
    _, ref = ac.tiled_attention(q.cpu(), k.cpu(), v.cpu(), causal=causal, return_lse=True)
    assert (lse.cpu() - ref).abs().max() < 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blocks", [(16, 16), (16, 32), (32, 16)])
def test_other_shapes_and_tiles(device, causal, blocks):
    # n_q != n_k, d_v != d_k (not powers of two), tiles that do not divide anything
    q, k, v, g = _inputs((1, 1, 21, 24), n_k=35, d_v=20, device=device, seed=2)
    kw = dict(block_m=blocks[0], block_n=blocks[1], scale=0.3)
    mine = _run(at.flash_attention, q, k, v, g, causal=causal, **kw)
    torch_ = _run(F.scaled_dot_product_attention, q, k, v, g, is_causal=causal, scale=0.3)
    for a, b in zip(mine, torch_):
        assert (a - b).abs().max() < 2e-5


@pytest.mark.skipif(not HAS_CUDA, reason="float16 and bfloat16 kernels need a CUDA GPU")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_half_precision_on_gpu(dtype, causal, d):
    dtype = getattr(torch, dtype)
    q, k, v, g = _inputs((2, 4, 300, d), dtype=dtype, device="cuda", seed=3)
    mine = _run(at.flash_attention, q, k, v, g, causal=causal)
    ref = _run(F.scaled_dot_product_attention, *(x.float() for x in (q, k, v, g)),
               is_causal=causal)
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    for a, b in zip(mine, ref):
        assert a.dtype == dtype
        assert (a.float() - b).abs().max() < tol * max(1.0, float(b.abs().max()))


def test_bad_arguments_get_attncore_errors():
    q, k, v, _ = _inputs((1, 1, 8, 16), device=DEVICES[0])
    with pytest.raises(TypeError, match="torch tensors"):
        at.flash_attention(q.cpu().numpy(), k, v)
    with pytest.raises(ValueError, match=r"q: expected shape \(batch, heads, n_q, d_k\)"):
        at.flash_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="same d_k"):
        at.flash_attention(q, k[..., :8], v)
    with pytest.raises(TypeError, match="float64"):
        at.flash_attention(q.double(), k.double(), v.double())
    with pytest.raises(TypeError, match="same dtype|dtype"):
        at.flash_attention(q, k.double(), v)
    with pytest.raises(TypeError, match="causal"):
        at.flash_attention(q, k, v, causal="yes")
    with pytest.raises(ValueError, match="block_m: expected a power of two"):
        at.flash_attention(q, k, v, block_m=24)
    with pytest.raises(ValueError, match="n_k >= 1"):
        at.flash_attention(q, k[..., :0, :], v[..., :0, :])
    bad = q.clone()
    bad[0, 0, 3, 2] = float("nan")
    with pytest.raises(ValueError, match="q"):
        at.flash_attention(bad, k, v)


def test_attncore_imports_without_triton_and_says_how_to_get_it():
    # a Python in which `import triton` fails: attncore imports, attncore.triton explains
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, *a):\n"
            "        if name == 'triton' or name.startswith('triton.'):\n"
            "            raise ImportError('No module named ' + repr(name))\n"
            "sys.meta_path.insert(0, Block())\n"
            "import attncore\n"
            "try:\n"
            "    import attncore.triton\n"
            "except ImportError as err:\n"
            "    print(err)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "attncore[triton]" in done.stdout and "'triton'" in done.stdout


def test_triton_is_an_optional_extra():
    assert importlib.util.find_spec("attncore") is not None
    import tomllib
    from pathlib import Path
    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert any(r.startswith("triton") for r in
               meta["project"]["optional-dependencies"]["triton"])


# --- issue 37 ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_is_right_on_the_interpreter_too(dtype):
    # Triton's interpreter multiplies bfloat16 tiles as the integers of their bit patterns
    # (outputs near 1e9); flash_attention computes them in float32 there instead.
    if not CPU_OK:
        pytest.skip("Triton was imported without its interpreter")
    dtype = getattr(torch, dtype)
    q, k, v, g = _inputs((1, 2, 40, 32), dtype=dtype, seed=4)
    mine = _run(at.flash_attention, q, k, v, g, causal=True)
    ref = _run(F.scaled_dot_product_attention, *(x.float() for x in (q, k, v, g)),
               is_causal=True)
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    for a, b in zip(mine, ref):
        assert a.dtype == dtype
        assert (a.float() - b).abs().max() < tol * max(1.0, float(b.abs().max()))
    _, lse = at.flash_attention(q, k, v, causal=True, return_lse=True)
    s = (q.float() @ k.float().transpose(-1, -2) / 32 ** 0.5).masked_fill(
        ~torch.ones(40, 40, dtype=torch.bool).tril(), float("-inf"))
    assert (lse - torch.logsumexp(s, -1)).abs().max() < 1e-2


def test_second_derivatives_are_refused():
    q, k, v, g = _inputs((1, 1, 16, 16), device=DEVICES[0])
    q = q.requires_grad_()
    out = at.flash_attention(q, k, v)
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad((out * g).sum(), q, create_graph=True)
    # a first derivative is still fine
    (dq,) = torch.autograd.grad((at.flash_attention(q, k, v) * g).sum(), q)
    assert dq.shape == q.shape


def test_block_sizes_may_be_numpy_integers():
    q, k, v, _ = _inputs((1, 1, 20, 16), device=DEVICES[0])
    a = at.flash_attention(q, k, v, block_m=np.int64(16), block_n=np.int32(32))
    b = at.flash_attention(q, k, v, block_m=16, block_n=32)
    assert torch.equal(a, b)
    with pytest.raises(TypeError, match="block_m: expected a positive integer"):
        at.flash_attention(q, k, v, block_m=16.0)
