"""Shared test helpers: run each test on every backend attncore supports on this machine."""

from __future__ import annotations

import importlib.util
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

# Triton (attncore.triton, chapter 14) chooses between compiling and interpreting its kernels
# when it is imported: without a GPU, its interpreter, whichever test imports it first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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


@pytest.fixture
def torch_threads():
    """torch set to 3 threads for the test, and back afterwards. scripts/test gives each worker
    one thread; a test that checks that code restores the count needs a count that one-thread
    code would change."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        yield 3
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def site():
    """The website, built by scripts/build-book once for the whole run (every worker reads
    the same build; see built_site.py)."""
    from built_site import build_once

    return build_once()


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    return request.param


# Scheduling, not testing: scripts/test runs files whole on each worker (--dist loadfile) in
# the order below (--no-loadscope-reorder), so the longest start first and the workers finish
# together, instead of one of them building and browsing the site alone at the end. The site
# is built once (built_site.py): the first worker builds it in test_site.py while the second
# builds the site with a repository, and the files that only read the built site start later,
# so that no worker waits on the build's lock. A wrong order costs time, nothing else.
LONGEST_FIRST = (
    "tests/test_site.py",                 # builds the site (built_site.py) for the three below
    "tests/test_site_repository.py",      # its own build, beside the first
    "chapters/10_inference.ipynb",
    "chapters/12_inside_a_pretrained_model.ipynb",
    "tests/test_running_anywhere.py",
    "tests/test_jupyterlab.py",
    "chapters/02_why_sqrt_dk.ipynb",
    "chapters/05_multi_head_attention.ipynb",
    "tests/test_pretrained.py",
    "tests/test_smollm2.py",
    "chapters/06_positions.ipynb",
    "chapters/07_rotary_positions.ipynb",
    # these two read the site that test_site.py's worker builds: late enough to find it built
    "tests/test_site_browser.py",
    "tests/test_site_pdf.py",
    "chapters/03_matmul_views.ipynb",
    "chapters/04_scaled_dot_product_attention.ipynb",
    "chapters/02_why_sqrt_dk_going_further.ipynb",
    "chapters/05_multi_head_attention_going_further.ipynb",
    "chapters/04_scaled_dot_product_attention_going_further.ipynb",
    "chapters/09_backward_pass.ipynb",
    "tests/test_backward.py",
    "tests/test_flex_masks.py",
    "tests/test_view_figures.py",
    "tests/test_tiled.py",
    "chapters/08_tiled_attention.ipynb",
    "tests/test_diagrams.py",
    "tests/test_properties.py",
)


def pytest_collection_finish(session):
    """Where this worker will run notebooks under nbval, their kernels are forked from one
    process that has imported the libraries once (forked_kernels.py), not started afresh."""
    import forked_kernels

    config = session.config
    if (forked_kernels.available() and getattr(config.option, "nbval", False)
            and not config.option.nbval_kernel_name and not config.option.nbval_current_env
            and any(item.nodeid.split("::")[0].endswith(".ipynb") for item in session.items)):
        config._attncore_zygote = forked_kernels.install()
        config.option.nbval_kernel_name = forked_kernels.KERNEL_NAME


def pytest_unconfigure(config):
    zygote = getattr(config, "_attncore_zygote", None)
    if zygote is not None:
        zygote.close()


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable
    # Triton exists for Linux only: elsewhere the cells of a chapter that runs its kernels
    # cannot run (the chapter shows its stored outputs); its tests run where Triton does.
    if importlib.util.find_spec("triton") is None:
        skip = pytest.mark.skip(reason="needs triton, which exists for Linux only")
        for item in items:
            path = config.rootpath / item.nodeid.split("::")[0]
            if path.suffix == ".ipynb" and '"notebooks,triton' in path.read_text():
                item.add_marker(skip)
