"""Helpers shared by the benchmark scripts: whole-process timing and peak RSS."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: ``ckpt`` as a user runs it: the console script of the environment that runs the benchmark,
#: which imports the installed package. ``python -m ckpttools`` puts the working directory first
#: on sys.path, so run from the repository's root it imports the source tree instead, and where
#: PYTHONDONTWRITEBYTECODE is set (as on the project's CI machines) compiles it from source in
#: every process: the 64-shard inspect then measured 1.17x the naive loop from the root against
#: 0.94x from another directory, the same package, the same hour (2026-12-04).
_SCRIPT = Path(sys.executable).with_name("ckpt")
CKPT: list[str] = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "ckpttools"]


def run_timed(cmd: list[str], repeat: int = 5, env: dict | None = None) -> tuple[float, float]:
    """Median and min wall seconds of a whole process, run ``repeat`` times."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr.decode()}")
    return statistics.median(times), min(times)


def run_peak_rss(cmd: list[str], env: dict | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child
        if env:
            os.environ.update(env)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}")
    return wall, ru.ru_maxrss * 1024


def interleaved(
    cmds: dict[str, list[str]], repeat: int, out: "Path", max_runs: dict[str, int] | None = None
) -> dict[str, list[tuple[float, int]]]:
    """Run each command ``repeat`` times, interleaved (so writeback from one run hits every
    variant alike), removing ``out`` and syncing before each run. Wall seconds and peak RSS."""
    import shutil

    runs: dict[str, list[tuple[float, int]]] = {}

    def clean() -> None:
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["sync"], check=True)

    for _ in range(repeat):
        for name, cmd in cmds.items():
            if len(runs.get(name, [])) >= (max_runs or {}).get(name, repeat):
                continue
            clean()
            runs.setdefault(name, []).append(run_peak_rss(cmd))
    clean()
    return runs


def report(runs: dict[str, list[tuple[float, int]]], width: int = 34) -> dict[str, float]:
    """Print each variant's median, runs and peak RSS; return the medians."""
    med = {}
    for k, v in runs.items():
        med[k] = statistics.median(t for t, _ in v)
        print(
            f"{k:{width}s} median {med[k]:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t, _ in v)})  "
            f"peak RSS {max(r for _, r in v) / 2**20:7.1f} MiB"
        )
    return med
