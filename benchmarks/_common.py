"""Helpers shared by the benchmark scripts: whole-process timing and peak RSS."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time


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


def drop_caches_hint() -> str:
    return "page cache warm (files were just written); cp and ckpt see the same cache state"


_ = resource  # imported for ru_maxrss units documentation (KiB on Linux)
