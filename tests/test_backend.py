"""The dispatch rules every public function shares."""

import numpy as np
import pytest
import torch

from attncore._backend import backend_of, check_same_dtype


def test_backend_is_chosen_by_the_inputs():
    assert backend_of(x=np.zeros(2)) == "numpy"
    assert backend_of(x=torch.zeros(2), mask=None) == "torch"


def test_mixing_is_a_type_error_naming_both():
    with pytest.raises(TypeError, match=r"a is a numpy.ndarray, b is a torch.Tensor"):
        backend_of(a=np.zeros(2), b=torch.zeros(2))


def test_tensors_on_different_devices_are_rejected():
    a, b = torch.zeros(2), torch.zeros(2, device="meta")
    with pytest.raises(ValueError, match=r"all tensors must be on one device, got a on cpu, b on meta"):
        backend_of(a=a, b=b)


def test_mixed_dtypes_are_rejected():
    with pytest.raises(TypeError, match=r"q is float32, k is float64"):
        check_same_dtype(q=np.zeros(1, np.float32), k=np.zeros(1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
def test_torch_backend_stays_on_the_gpu():
    import attncore as ac

    q = torch.randn(2, 4, 8, device="cuda")
    out = ac.scaled_dot_product_attention(q, q, q, causal=True)
    assert out.device == q.device


# --- numbers: a NumPy scalar is a number wherever a Python number is (issue 37) -------------

def test_numpy_scalars_are_numbers_everywhere():
    import attncore as ac
    from attncore._backend import check_real

    assert check_real("eps", np.float32(0.5)) == 0.5
    assert check_real("t", np.int64(3), minimum=0) == 3.0
    with pytest.raises(TypeError, match=r"eps: expected a finite number > 0, got True"):
        check_real("eps", True, above=0)
    with pytest.raises(ValueError, match=r"eps: expected a finite number > 0, got 0.0"):
        check_real("eps", np.float32(0), above=0)
    m = ac.init_language_model(40, 16, 4, 32, 1, 10, seed=2)
    a = ac.generate(m, [1, 2], 3, temperature=np.float32(0.7),
                    generator=np.random.default_rng(0))
    b = ac.generate(m, [1, 2], 3, temperature=float(np.float32(0.7)),
                    generator=np.random.default_rng(0))
    assert (a == b).all()
    p = ac.init_transformer_block(8, 2, 16)
    block = ac.TransformerBlockParams(**{**p.__dict__, "eps": np.float32(1e-5)})
    x = np.random.default_rng(0).standard_normal((3, 8))
    assert ac.transformer_block(block, x).shape == (3, 8)
    assert ac.linear_attention(x, x, x, eps=np.float32(1e-5)).shape == (3, 8)


def test_the_argument_is_named_with_its_own_name():
    import attncore as ac

    with pytest.raises(ValueError, match="rope_base: expected a finite number greater "
                                         "than 1, got 1.0"):
        ac.init_mla(32, 4, d_latent_kv=10, d_rope=4, rope_base=1.0)
    p = ac.init_multihead(16, 4)
    with pytest.raises(ValueError, match="rope_base: expected a finite number greater "
                                         "than 1"):
        ac.decode(p, np.zeros((3, 16)), rope_base=1.0)
    with pytest.raises(ValueError, match="base: expected a finite number greater than 1"):
        ac.rope(np.zeros((3, 4)), base=1.0)
    with pytest.raises(ValueError, match="seed: expected a non-negative integer, got -1"):
        ac.RandomFeatures(4, 8, seed=-1)
