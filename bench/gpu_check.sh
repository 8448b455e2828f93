#!/usr/bin/env bash
# The course's GPU check, as one command on a CUDA machine whose python3 already has torch,
# triton, transformers, pytest, pytest-xdist and hypothesis (a cloud GPU image has them):
#
#   bash bench/gpu_check.sh [OUTDIR]
#
# 1. attncore's unit tests on the "torch-cuda" backend (every test parametrized by backend
#    gains that case when CUDA is there) and the Triton kernel's tests, compiled for the GPU
#    rather than interpreted;
# 2. the GPU figures of bench/ (python -m bench.run --gpu --no-cpu), written to
#    bench/results/gpu.md.
# Logs go to OUTDIR (default: bench/results/raw/gpu-check). gguf, if missing, is installed
# from a wheel in .whl/ when one is there (such machines are often offline).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-bench/results/raw/gpu-check}"
mkdir -p "$out"
if ! python3 -c "import gguf" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/device.txt"
python3 -c "import sys, torch, triton, numpy; print('python', sys.version.split()[0], \
'torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, \
torch.cuda.get_device_name())" | tee -a "$out/device.txt"

# The unit tests: CUDA cases and the Triton kernel (compiled). Notebook, site, browser and
# install tests are CPU matters and stay in CI.
python3 -m pytest -p no:cacheprovider -q -n 8 -m "not browser" --continue-on-collection-errors \
  --ignore=tests/test_site.py --ignore=tests/test_jupyterlab.py \
  --ignore=tests/test_book_structure.py --ignore=tests/test_running_anywhere.py \
  -k "cuda or triton" tests 2>&1 | tee "$out/tests.log" | tail -40
tests=${PIPESTATUS[0]}

# The bench's GPU figures (attncore torch and Triton against F.sdpa).
timeout "${BENCH_TIMEOUT:-240}" python3 -m bench.run --gpu --no-cpu 2>&1 | tee "$out/bench.log" | tail -30
bench=${PIPESTATUS[0]}
cp bench/results/gpu.md "$out/" 2>/dev/null
echo "tests exit $tests, bench exit $bench"
exit $(( tests != 0 || bench != 0 ))
