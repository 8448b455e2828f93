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
