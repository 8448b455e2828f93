"""Shared test helpers: run each test on every backend attncore supports on this machine."""

from __future__ import annotations

import os

import matplotlib
import numpy as np
import pytest
import torch
from hypothesis import settings

# Figures drawn by tests never need a screen. (Not set through MPLBACKEND in scripts/test: that
# would also reach the notebook kernels, replace their inline backend, and change their outputs.)
matplotlib.use("Agg")

# Property tests run without deadlines (a 2-core CI machine is slow and shared) and, in CI,
# with a fixed seed so that a red run can be reproduced exactly.
settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True,
                          print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

BACKENDS = ["numpy", "torch-cpu"] + (["torch-cuda"] if torch.cuda.is_available() else [])
DTYPES = [np.float32, np.float64]
# Agreement promised between implementations (attncore's backends, PyTorch's own).
TOL = {np.float32: 1e-5, np.float64: 1e-10}


def to_backend(x, backend):
    """NumPy array -> the same data on ``backend`` (bool and float dtypes kept)."""
    if x is None or backend == "numpy":
        return x
    device = "cuda" if backend == "torch-cuda" else "cpu"
    return torch.as_tensor(np.array(x, order="C"), device=device)  # keeps 0-d arrays 0-d


def to_numpy(x):
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(params=[b for b in BACKENDS if b.startswith("torch")])
def torch_backend(request):
    """The torch backends only, for comparisons with torch-only references (no NumPy case
    to skip)."""
    return request.param


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    return request.param
