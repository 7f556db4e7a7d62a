"""`ckpt logs` on a synthetic SGLang log of about 1 GB: the rate (MB/s) and peak RSS.

The log mixes what a busy SGLang 0.5.17 server writes: Decode batch lines (every window
with a different accept length), Prefill batch lines, HTTP access lines, and now and then
an event (weight update). Whole process, timed from start to exit: the median of ``--runs``
runs, after one that warms the page cache; beside it, ``grep -c 'accept len'`` on the same file,
timed the same way, as a yardstick for the machine.

    python benchmarks/bench_logs.py [--size-mb 1024] [--workdir DIR] [--runs 3]

``--starts N``: instead, a log of N server starts (about 1 KB each: the start line, the
classes built, warmup, ready, decode lines, and every tenth run dying in a traceback), so
10^6 starts make about 1 GB: ``ckpt logs`` must stay flat in memory and print a bounded
report (issue 31: 2.1 GB of memory and a 320 MB report before). Prints peak RSS and the sizes
of the text and the --json reports.

    python benchmarks/bench_logs.py --starts 1000000 [--workdir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CKPT, run_peak_rss  # noqa: E402


def _block(i: int) -> bytes:
    t = f"2026-11-30 1{i % 10}:{i % 60:02d}:{(i * 7) % 60:02d}"
    lines = []
    for j in range(40):
        al = 1.0 + ((i * 40 + j) % 300) / 100
        lines.append(
            f"[{t} DP0 TP0] Decode batch, #running-req: {1 + j % 32}, #token: {1000 + j}, token usage: 0.01, "
            f"accept len: {al:.2f}, accept rate: {(al - 1) / 3:.2f}, cuda graph: True, gen throughput (token/s): "
            f"{100 + j:.2f}, #queue-req: 0"
        )
        lines.append(
            f"[{t} DP0 TP0] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.00, "
            "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 3.11"
        )
        lines.append(f'[{t}] INFO:     127.0.0.1:{40000 + j} - "POST /generate HTTP/1.1" 200 OK')
    lines.append(f"[{t}] Start update_weights. Load format=auto")
    return ("\n".join(lines) + "\n").encode()


def _start(i: int) -> bytes:
    t = f"2026-11-{1 + i // 86400 % 28:02d} {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
    args = ", ".join(f"arg_{k}={k * i % 97}" for k in range(12))
    lines = [
        f"[{t}] server_args=ServerArgs(model_path='/models/target-{i % 7}', speculative_num_steps=3, {args})",
        f"[{t}] Load weight end. elapsed=0.19 s, type=LlamaForCausalLM, avail mem=70.1 GB, mem usage=14.2 GB.",
        f"[{t}] Load weight end. elapsed=0.02 s, type=LlamaForCausalLMEagle3, avail mem=69.0 GB, mem usage=1.1 GB.",
        f"[{t}] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.00, #running-req: 0, "
        "#queue-req: 0",
        f"[{t}] The server is fired up and ready to roll!",
    ]
    for j in range(2):
        al = 1.0 + ((i + j) % 300) / 100
        lines.append(
            f"[{t}] Decode batch, #running-req: {1 + j}, #token: {100 + j}, token usage: 0.01, accept len: "
            f"{al:.2f}, accept rate: {(al - 1) / 3:.2f}, cuda graph: True, gen throughput (token/s): 80.50, #queue-req: 0"
        )
    lines.append(f'[{t}] INFO:     127.0.0.1:{40000 + i % 20000} - "POST /generate HTTP/1.1" 200 OK')
    if i % 10 == 9:
        lines += [
            f"[{t} TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sglang/srt/managers/scheduler.py", line 4951, in run_scheduler_process',
            "AssertionError: captured 1 of 3 aux hidden states",
            f"[{t}] Received sigquit from a child process. It usually means the child failed.",
        ]
    return ("\n".join(lines) + "\n").encode()


def build_starts(path: Path, starts: int) -> None:
    with open(path, "wb") as f:
        for i in range(0, starts, 1000):
            f.write(b"".join(_start(k) for k in range(i, min(i + 1000, starts))))


def build(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        written, i = 0, 0
        while written < size:
            b = b"".join(_block(i + k) for k in range(50))
            f.write(b)
            written += len(b)
            i += 50


def _median_run(cmd: str, runs: int, out: str = "/dev/null") -> tuple[float, int]:
    """Median wall seconds and largest peak RSS of ``runs`` whole-process runs of ``cmd``."""
    got = [run_peak_rss(["sh", "-c", f"{cmd} > {out}"]) for _ in range(runs)]
    return statistics.median(w for w, _ in got), max(r for _, r in got)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--workdir")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each command (the median is printed)")
    ap.add_argument("--starts", type=int, help="a log of this many server starts instead (memory and report size)")
    a = ap.parse_args()
    if a.starts:
        return _starts(a.starts, a.workdir)
    with tempfile.TemporaryDirectory(dir=a.workdir) as d:
        log = Path(d) / "sglang.log"
        build(log, a.size_mb << 20)
        size = log.stat().st_size
        import shlex

        cmd = shlex.join([*CKPT, "logs", str(log), "--json", "--show", "0"])
        base = shlex.join(["grep", "-c", "accept len", str(log)])
        _median_run(cmd, 1)  # warm the page cache
        wall, rss = _median_run(cmd, a.runs)
        bwall, _ = _median_run(base, a.runs, str(Path(d) / "count"))  # (grep stops early writing to /dev/null)
        mb = size / 1e6
        print(f"ckpt logs: {mb:.0f} MB in {wall:.2f} s = {mb / wall:.0f} MB/s, peak RSS {rss / 2**20:.0f} MiB")
        print(
            f"baseline (grep -c 'accept len', same file): {bwall:.2f} s = {mb / bwall:.0f} MB/s; "
            f"ckpt logs takes {wall / bwall:.1f}x its time (median of {a.runs} runs each, whole process)"
        )


def _starts(starts: int, workdir: str | None) -> None:
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        log = Path(d) / "starts.log"
        build_starts(log, starts)
        size = log.stat().st_size
        base = [*CKPT, "logs", str(log)]
        for what, extra in (("text", []), ("--json", ["--json"])):
            out = Path(d) / f"report-{what}"
            cmd = ["sh", "-c", '"$@" > "$0"; test $? -le 1', str(out), *base, *extra]
            wall, rss = run_peak_rss(cmd)
            print(
                f"ckpt logs {what}: {starts:,} starts, {size / 1e6:.0f} MB in {wall:.1f} s; peak RSS "
                f"{rss / 2**20:.1f} MiB; report {out.stat().st_size / 1e3:.1f} kB"
            )


if __name__ == "__main__":
    main()
