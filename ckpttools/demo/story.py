"""``ckpt demo``: the project's story, replayed on the shipped trained pair.

A drafter trained for target A ("K2"); a pipeline that wants it in another vocabulary
mapping M2; and target B ("K2.5"), target A trained further. Each step prints its figure
and a one-line reading. No network, no GPU: the default engine is the PyTorch probe.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["run_demo", "story_dir"]


def story_dir() -> Path:
    """The shipped pair (built by examples/build_story_pair.py)."""
    return Path(str(resources.files("ckpttools").joinpath("data/story")))


def _naive_swap(drafter: Path, mapping: Path, out: Path) -> Path:
    """What one public exporter does: swap in another mapping's d2t/t2d, leave lm_head as is."""
    from ckpttools.io.checkpoint import open_checkpoint
    from ckpttools.io.plan import Copy, Data, PlannedTensor, TensorRef, WritePlan, execute
    from ckpttools.vocab.mapping import load_mapping

    m = load_mapping(mapping)
    with open_checkpoint(drafter) as ck:
        new = {"d2t": lambda t: m.d2t, "t2d": lambda t: m.t2d(t.shape[0])}
        tensors = [
            PlannedTensor(n, t.dtype, t.shape, Data(new[n](t)) if n in new else Copy(TensorRef.of(ck, n)))
            for n, t in ck.tensors.items()
        ]
        plan = WritePlan("demo", str(out), tensors, config=ck.config)
    return execute(plan, force=True).output


def _server_env(engine: str, work: Path) -> dict[str, str]:
    """vLLM's own cache under the demo's work directory, unless the user set one. (Its KV cache is
    sized by ENGINE_ARGS: VLLM_CPU_KVCACHE_SPACE, where the user set it, wins over that.)"""
    if engine != "vllm":
        return {}
    return {"VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT", str(work / "vllm-cache"))}


def _measurer(
    engine: str, work: Path, prompts: Path, engine_python: str | None
) -> Callable[[Path, list[Path]], list[Any]]:
    """``measure(target, drafters)``: each drafter's report against the target. A server engine
    loads the target once and swaps the drafters in (measuring/compare.py)."""
    from ckpttools.measuring.verify import VerifyReport

    def torch_engine(target: Path, drafters: list[Path]) -> list[VerifyReport]:
        import torch

        from ckpttools.measuring.probe import verify_torch

        kw: dict[str, Any] = {"steps": 3, "prompts": str(prompts), "num_prompts": 12, "max_new_tokens": 64}
        # the story's models are tiny: a second thread only waits on the first (on 2 cores `ckpt demo`
        # took 20.1 s and 34.3 s of CPU with torch's default 2 threads, 19.0 s and 18.4 s with one)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return [verify_torch(target, d, **kw) for d in drafters]
        finally:
            torch.set_num_threads(threads)

    def server_engine(target: Path, drafters: list[Path]) -> list[Any]:
        from ckpttools.engines.launch import LaunchSpec, free_port
        from ckpttools.measuring.compare import compare_drafters

        served = [_served(engine, work, target, d) for d in drafters]
        port = free_port()
        spec = LaunchSpec(
            engine,
            str(target),
            str(served[0]),
            port=port,
            steps=3,
            engine_args=ENGINE_ARGS[engine],
            python=engine_python or sys.executable,
            log_path=str(work / f"{engine}-{port}.log"),
            env=_server_env(engine, work),
        )
        kw: dict[str, Any] = {"prompts": str(prompts), "num_prompts": 12, "max_new_tokens": 64, "ignore_eos": True}
        rep = compare_drafters(spec, [str(d) for d in served], engine=engine, **kw)
        SERVER_STARTS.append(rep.server_starts)
        err = rep.error()  # a drafter that failed or measured nothing: the story cannot be told
        if err is not None:
            raise err
        return rep.reports

    SERVER_STARTS.clear()
    return torch_engine if engine == "torch" else server_engine


#: the servers the last demo run started, per measuring call
SERVER_STARTS: list[int] = []


#: the engine arguments the demo's servers start with (the real-vLLM tests start theirs with the same,
#: for models of the demo's size: tests/vllm_pool.py). vllm: a KV cache of 128 MiB (58,240 tokens of the
#: demo's models; 12 prompts of 64 tokens need far less): the engine fills the cache it is given as it
#: starts, and 1 GiB, the demo's size before 2026-12-06, cost each server's start 4-5 s more (VLLM_CLAIMS
#: "cpu.kv_cache"); a size the user set in VLLM_CPU_KVCACHE_SPACE wins. The engine's own default was
#: killed for memory on a 24 GiB machine
ENGINE_ARGS: dict[str, list[str]] = {
    "vllm": [
        "--max-model-len=1024",
        "--dtype=bfloat16",
        "--enforce-eager",
        "--skip-tokenizer-init",
        "--kv-cache-memory-bytes=128M",
    ],
    "sglang": [
        "--attention-backend=triton",
        "--sampling-backend=pytorch",
        "--grammar-backend=none",
        "--disable-cuda-graph",
        "--skip-tokenizer-init",
    ],
}


def _served(engine: str, work: Path, target: Path, drafter: Path) -> Path:
    """The drafter in the engine's layout (vLLM's: exported)."""
    if engine != "vllm":
        return drafter
    from ckpttools.ops.export import export

    return Path(str(export(drafter, work / f"vllm-{drafter.name}-{target.name}", format="vllm", target=target).output))


def run_demo(
    workdir: str | Path | None = None,
    echo: Callable[[str], None] = print,
    engine: str = "torch",
    engine_python: str | None = None,
) -> int:
    """Replay the story; returns 0 when every step behaved as the story says, else 1."""
    story = story_dir()
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="ckpt-demo-")
        workdir = tmp
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    prompts = story / "prompts.jsonl"
    st = _Story(story / "target-a", story / "target-b", story / "drafter", story / "mapping-m2.safetensors", work, echo)
    st.measure = _measurer(engine, work, prompts, engine_python)
    t0 = time.perf_counter()
    try:
        echo(
            f"The pair: {st.drafter.name} (EAGLE-3) trained for {st.target_a.name}; {st.target_b.name} is "
            f"{st.target_a.name} trained further. Engine: {engine}; 12 prompts, 64 tokens each, 3 draft steps, "
            "greedy.\n"
        )
        v = _step_inspect(st)
        naive = _naive_swap(st.drafter, st.m2, st.work / "drafter-naive-m2")
        rr = _remapped(st)
        a, n, m = st.measure(st.target_a, [st.drafter, naive, st.work / "drafter-m2"])  # one target-A load
        _step_matched(st, a)
        _step_naive_swap(st, n)
        _step_remap(st, a, m, rr)
        vb, b = _step_target_b(st)
        ok = (
            v.ok
            and vb.ok
            and a.accept_length > 2.0
            and n.accept_length < a.accept_length - 1
            and m.accept_length > n.accept_length + 1
            and b.accept_length < a.accept_length - 1
        )
        starts = sum(SERVER_STARTS)
        echo(
            f"summary: matched {a.accept_length:.2f} | naive swap {n.accept_length:.2f} | remapped "
            f"{m.accept_length:.2f} | on target B {b.accept_length:.2f}  ({time.perf_counter() - t0:.0f} s"
            + (f", {starts} server starts)" if engine != "torch" else ")")
        )
        if not ok:
            echo("the figures did not tell the expected story")
        return 0 if ok else 1
    except BaseException:
        if tmp is not None and engine != "torch":  # keep the server logs of a failed run
            echo(f"the demo's files, server logs included, are kept in {work}")
            tmp = None
        raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class _Story:
    target_a: Path
    target_b: Path
    drafter: Path
    m2: Path
    work: Path
    echo: Callable[[str], None]
    measure: Callable[[Path, list[Path]], list[Any]] = lambda target, drafters: []


def _step_inspect(st: _Story) -> Any:
    from ckpttools.ops.inspect import inspect
    from ckpttools.ops.validate import validate

    r = inspect(st.drafter, tensors=False)
    v = validate(st.drafter, st.target_a)
    vm = r.vocab_mapping or {}
    st.echo("[1] ckpt inspect drafter; ckpt validate drafter --target target-a")
    st.echo(
        f"    kind {r.kind}; Vd {vm.get('draft_vocab_size')} of V {vm.get('target_vocab_size')}, {vm.get('order')} "
        f"order; validate: {len(v.errors)} error(s), {v.counts()['warning']} warning(s)"
    )
    st.echo(f"    reading: {'a well-formed SGLang drafter that fits its target' if v.ok else 'NOT clean'}\n")
    return v


def _step_matched(st: _Story, a: Any) -> None:
    st.echo("[2] ckpt verify: the drafter on its own target")
    st.echo(
        f"    accept length {a.accept_length:.2f} tokens per verify step ({a.accepted_drafts_per_step:.2f} accepted "
        "drafts per step)"
    )
    st.echo("    reading: matched, well above 1: speculation pays here\n")


def _step_naive_swap(st: _Story, n: Any) -> None:
    from ckpttools.vocab.diff import diff_vocab

    d = diff_vocab(st.drafter, st.m2)
    st.echo(
        "[3] the pipeline wants mapping M2 (ckpt vocab build on another sample). The naive way: swap in M2's "
        "d2t/t2d, leave lm_head"
    )
    st.echo(
        f"    ckpt diff-vocab drafter M2: slots agree {d.slots_agree} of {d.slots_total}; tokens shared "
        f"{d.shared_tokens} (Jaccard {d.jaccard:.2f})"
    )
    st.echo(f"    ckpt verify (naive swap): accept length {n.accept_length:.2f}")
    st.echo(
        "    reading: most tokens are shared but the slots moved, so every lm_head row now scores another "
        "token: acceptance collapses\n"
    )


def _remapped(st: _Story) -> Any:
    from ckpttools.ops.remap import remap

    return remap(st.drafter, st.work / "drafter-m2", to=st.m2, force=True)


def _step_remap(st: _Story, matched: Any, m: Any, rr: Any) -> None:
    st.echo("[4] ckpt remap drafter --to M2: rows follow their tokens")
    st.echo(
        f"    remap: {rr.rows_carried} rows carried, {rr.rows_filled} filled with zeros (tokens new to the drafter)"
    )
    st.echo(f"    ckpt verify (remapped): accept length {m.accept_length:.2f}")
    st.echo(
        f"    reading: back near the matched {matched.accept_length:.2f}; what is lost is the {rr.rows_filled} "
        "tokens M2 added that the drafter never learned\n"
    )


def _step_target_b(st: _Story) -> tuple[Any, Any]:
    from ckpttools.ops.validate import validate

    vb = validate(st.drafter, st.target_b)
    (b,) = st.measure(st.target_b, [st.drafter])
    st.echo("[5] the same drafter on target B (same architecture, same sizes, trained further)")
    st.echo(
        f"    ckpt validate --target target-b: {len(vb.errors)} error(s); ckpt verify: accept length "
        f"{b.accept_length:.2f}"
    )
    st.echo(
        "    reading: every config check passes, yet acceptance drops: architecture equality is not "
        "hidden-state compatibility. Measure before you invest.\n"
    )
    return vb, b
