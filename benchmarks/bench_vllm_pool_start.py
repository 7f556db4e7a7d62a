"""One start of the tests' llama pool server (tests/vllm_pool.py), timed: start to ready, then a
short measurement on it (the pool's own swap of the repeat/id pair and `ckpt verify --host`, six
prompts of 32 tokens), then the stop. Prints one line of figures.

    PYTHONPATH=$PWD python benchmarks/bench_vllm_pool_start.py WORKDIR [KEY=VALUE ...] [--cache DIR]

KEY=VALUE replaces one of the pool's server settings (tests/vllm_pool.py ENV; KEY= removes it), e.g.
``VLLM_ENABLE_V1_MULTIPROCESSING=`` for vLLM's own multiprocess executor. ``--cache DIR``: the vLLM
cache kept in DIR between runs (the test session's one cache); without it each run has a fresh
one. WORKDIR holds each run's pair and keeps its server log (last-*.log). Time runs
in A B A B pairs to compare settings on a loaded machine (only the paired ratio means anything there).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from click.testing import CliRunner


def _session_cpu(sid: int) -> float:
    """CPU seconds (user + system, with the children each has waited for) of the live processes of
    session ``sid``: the server's, which RunningServer starts in a session of its own."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(f[3]) == sid:  # field 6, session (f starts at field 3)
            total += sum(int(x) for x in f[11:15])  # fields 14-17: utime stime cutime cstime
    return total / tick


def main() -> None:
    root = Path(sys.argv[1])
    args = sys.argv[2:]
    cache = None
    if "--cache" in args:
        i = args.index("--cache")
        cache = args[i + 1]
        del args[i : i + 2]
    extra = dict(a.split("=", 1) for a in args)
    os.environ.setdefault(
        "CKPT_VLLM_PYTHON", str(Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python")
    )
    if cache is not None:
        os.environ["CKPT_VLLM_CACHE_ROOT"] = cache
    import tests.vllm_pool as vp
    from ckpttools.cli.commands import cli
    from ckpttools.demo.tiny import known_prompts

    for k, v in extra.items():
        vp.ENV.pop(k, None) if v == "" else vp.ENV.__setitem__(k, v)
    run = root / f"run-{os.getpid()}"
    run.mkdir(parents=True)
    pool = vp.VllmPool(vp.VLLM_PY, run)
    t0 = time.monotonic()
    pair = pool.pair("llama")
    t_pair = time.monotonic() - t0
    prompts = run / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(6)))
    try:
        t1 = time.monotonic()
        srv = pool.get("llama", pair[0], pair[2])
        t_ready = time.monotonic() - t1
        t2 = time.monotonic()
        srv.swap(pair[2])
        t_swap = time.monotonic() - t2
        t3 = time.monotonic()
        argv = ["verify", "--host", srv.url, "--engine", "vllm", "--prompts", str(prompts), "--num-prompts", "6",
                "--max-new-tokens", "32", "--ignore-eos", "--json", "--quiet"]  # fmt: skip
        r = CliRunner().invoke(cli, argv)
        t_verify = time.monotonic() - t3
        assert r.exit_code == 0, r.output + srv.server.log_tail(40)
        acc = json.loads(r.stdout)["accept_length"]
        assert acc == 4.0, acc
        t5 = time.monotonic()
        argv[argv.index("32")] = "256"  # a longer run: six requests of 256 tokens (the logs test's)
        r = CliRunner().invoke(cli, argv)
        t_long = time.monotonic() - t5
        assert r.exit_code == 0, r.output + srv.server.log_tail(40)
        cpu = _session_cpu(srv.server.proc.pid)
        log = srv.log.read_text(errors="replace")
        procs = sorted(set(re.findall(r"\((\w+) pid=\d+\)", log)))
        t4 = time.monotonic()
    finally:
        pool.close()
    t_stop = time.monotonic() - t4
    print(
        f"pair {t_pair:.1f} s | ready {t_ready:.1f} s | swap {t_swap:.1f} s | verify {t_verify:.1f} s | "
        f"verify x256 {t_long:.1f} s | server cpu {cpu:.1f} s | stop {t_stop:.1f} s | accept {acc} | processes {procs} | cache {'kept' if cache else 'fresh'} | "
        f"env {vp.ENV}",
        flush=True,
    )
    tag = "-".join(f"{k}={v}" for k, v in extra.items()) or "default"
    shutil.copy(run / "llama.log", root / f"last-{tag}{'-cache' if cache else ''}.log")
    shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    main()
