"""Shared real vLLM servers for the tests: one per (target, drafter family, settings), started on
first use and kept for the test session, as a user measures many drafters on one loaded target.

A test takes a server from the pool, swaps its own drafter in through ckpttools' own swap
(``ckpttools.engines.swap.swap_in``, the route vLLM 0.32's release table records) and checks the
swap's report (every rank reached, the cached map replaced, the bytes read back) before it
measures, so no test depends on what the test before it swapped in. Only tests about launching
(failures, ``--sweep``, TP 2, the demo's own command, N drafters in one ``verify --launch``)
start servers of their own.

Every server also carries tests/vllm_ext.py's ``draft_state`` (the running draft model's
parameters), for the load-plan comparison.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.demo.story import ENGINE_ARGS

REPO = Path(__file__).resolve().parents[1]
VLLM_PY = os.environ.get("CKPT_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
#: servers kept running at once (each holds about 1 GB with its KV cache); the least recently used goes first
MAX_ALIVE = 2
#: the demo's own arguments (the test models are the demo's size; why a 128 MiB KV cache: there), so that the
#: two cannot drift apart. The tests ask for a few thousand tokens at most. The settings below leave
#: VLLM_CPU_KVCACHE_SPACE out, since where set it wins over the KV cache size given here
ARGS = list(ENGINE_ARGS["vllm"])
STEPS = 3
#: the settings of every real vLLM server the tests start at tensor parallel 1 (the pool's, and through
#: ``server_env`` those `verify --launch` starts in the test modules), each for start-up time on 2 cores:
#: - the worker in the engine-core process: vLLM's CPU build turns the one-process executor ("uni", the
#:   default at TP 1) into the multiprocess one unless VLLM_ENABLE_V1_MULTIPROCESSING=0
#:   (vllm/platforms/cpu.py:333-341), which spawns a third process that imports torch and vLLM once more.
#:   The swap's /collective_rpc reaches the worker all the same (v1/executor/uniproc_executor.py:90-106). TP 2
#:   (tests/test_vllm_swap.py) keeps vLLM's multiprocess executor: that test removes the setting;
#: - one torch thread, as the multiprocess executor gives its worker on one core (utils/ompmultiprocessing.py:
#:   75-78): in the engine-core process vLLM's own cut to one thread is refused, after the worker has made
#:   torch.set_num_threads a no-op (v1/worker/cpu_worker.py:139-145, utils/torch_utils.py:268-300), and two
#:   threads spin against each other on 2 loaded cores;
#: - one vLLM cache for the session (conftest.py: CKPT_VLLM_CACHE_ROOT): vLLM inspects each model class in
#:   a subprocess that imports vLLM and torch, once per cache (its modelinfos,
#:   vllm/model_executor/models/registry.py:1044-1088), so only the session's first server of a class pays.
SERVER_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
#: the settings beyond ARGS and SERVER_ENV of a server whose log `ckpt logs` reads: a log window per second
ENV = {"VLLM_LOG_STATS_INTERVAL": "1", **SERVER_ENV}
#: the pool servers whose logs a test reads (test_vllm_engine.py's `ckpt logs` test, on llama); the others
#: keep vLLM's 10 s windows: an idle server with 1 s windows used 1.44 s of CPU in 20 s here, with 10 s
#: windows 0.43 s (2026-12-06), and the pool keeps two servers up while one of them waits
LOGGED = frozenset({"llama"})


_PACKS_PROBE = """
import torch
from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
m = torch.nn.Linear(256, 512, bias=False).to(torch.bfloat16)
dispatch_cpu_unquantized_gemm(m, True)
print("packed" if m.weight.numel() == 0 else "kept")
"""


@functools.cache
def vllm_packs_linears() -> bool:
    """Whether vLLM's CPU build, on this CPU, replaces a bf16 linear layer's weight with a kernel
    format (the pool's servers run ``--dtype=bfloat16``), asked of vLLM's own dispatch
    (vllm/model_executor/layers/utils.py:470-608 in 0.32.0): sgl-kernel's packed weight where the CPU
    has AMX tiles (:560, ``check_cpu_sgl_kernel`` :439-446), else oneDNN where it builds a bf16
    matmul (:581-600); where neither does (an AMD EPYC without AVX-512 here: oneDNN "could not create
    a primitive descriptor"), the weight stays a parameter, the torch fallback (:602-608)."""
    import subprocess

    got = subprocess.run([VLLM_PY, "-c", _PACKS_PROBE], capture_output=True, text=True, timeout=300, check=True)
    return got.stdout.strip().splitlines()[-1] == "packed"


def cache_root(fallback: Path) -> str:
    """The session's vLLM cache (tests/conftest.py makes it), or ``fallback`` outside a test session."""
    return os.environ.get("CKPT_VLLM_CACHE_ROOT") or str(fallback)


@contextlib.contextmanager
def server_env(fallback_cache: Path) -> Iterator[dict[str, str | None]]:
    """SERVER_ENV and the session's vLLM cache in os.environ (what `verify --launch` servers inherit)
    while the block runs; what was there before (None: nothing) is yielded, and put back after.
    OMP_NUM_THREADS=1 reaches the test process's own torch too, as under pytest-xdist (CI), whose
    workers tests/conftest.py runs with one thread already."""
    new = {**SERVER_ENV, "VLLM_CACHE_ROOT": cache_root(fallback_cache)}
    old = {k: os.environ.get(k) for k in new}
    os.environ.update(new)
    try:
        yield old
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@dataclass
class Served:
    """One running pool server: its URL, log, and what its swap route needs."""

    key: str
    url: str
    target: Path
    log: Path
    server: Any
    spec: dict[str, Any]
    swaps: list[str] = field(default_factory=list)

    def swap(self, drafter: str | Path) -> Any:
        """Put ``drafter`` in place through ckpttools' swap and return the checked SwapResult
        (an assertion error, with the server log's tail, if the swap did not hold)."""
        from ckpttools.engines.swap import swap_in, swappable
        from ckpttools.io.net import NetClient

        assert self.server.proc.poll() is None, f"pool server {self.key} died:\n{self.server.log_tail(40)}"
        why = swappable(self.first, drafter)
        assert why is None, f"{drafter} cannot take the place of {self.key}'s drafter: {why}"
        with NetClient(retries=0) as net:
            res = swap_in("vllm", net, self.url, drafter, self.spec)
        assert res.ok, f"swap of {drafter} into {self.key} failed: {res.why}\n{self.server.log_tail(40)}"
        assert res.ranks == 1 and res.checked.startswith("read back"), res
        if "d2t" in _names(drafter):
            assert res.maps_replaced == 1, res
        self.swaps.append(str(drafter))
        return res

    def load_target(self, target: Path) -> None:
        """Another target of this server's architecture and sizes in place of the running one (the
        constructed targets differ in their head only), through tests/vllm_ext.py's ``load_target``;
        every tensor in which the two targets' files differ must read back as the new file's bytes."""
        import hashlib

        import httpx

        from ckpttools.io.checkpoint import open_checkpoint

        r = httpx.post(self.url + "/collective_rpc", json={"method": "load_target", "args": [str(target)]}, timeout=600)
        assert r.status_code == 200, f"load_target on {self.key}: HTTP {r.status_code} {r.text[:500]}"
        got = r.json()["results"][0]["digests"]
        with open_checkpoint(target) as new, open_checkpoint(self.target) as old:
            assert set(new.tensors) == set(old.tensors), f"{target} is not of {self.key}'s architecture"
            changed = {n for n in new.tensors if bytes(new.read_bytes(n)) != bytes(old.read_bytes(n))}
            want = {n: hashlib.sha256(bytes(new.read_bytes(n))).hexdigest() for n in got}
        assert changed <= set(got), f"{sorted(changed - set(got))} could not be read back on {self.key}"
        assert got == want, f"load_target on {self.key}: read back other bytes than {target}'s"
        assert httpx.post(self.url + "/reset_prefix_cache", timeout=60).status_code == 200
        self.target = target

    @property
    def first(self) -> Path:
        return Path(self.server.spec.drafter)

    def log_mark(self) -> int:
        """Where the log ends now (``log_since`` reads from here)."""
        return self.log.stat().st_size

    def log_since(self, mark: int, out: Path) -> Path:
        """The server's start-up lines (release, class) and what it logged after ``mark``, as one
        log file: the log a server started for this run alone would have written around it."""
        data = self.log.read_bytes()
        ready = data.find(b"Application startup complete")
        head = data[: data.find(b"\n", ready) + 1] if ready >= 0 else b""
        out.write_bytes(head + data[max(mark, len(head)) :])
        return out


def _names(drafter: str | Path) -> set[str]:
    from ckpttools.io.checkpoint import open_checkpoint

    with open_checkpoint(drafter) as ck:
        return set(ck.tensors)


#: the drafter families the pool serves, one server each: build_known_pair's options
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "eagle31": {"aux_layer_ids": (1, 3), "fc_norm": True, "norm_output": True},  # EAGLE-3.1, two aux states
    "qwen3": {"qk_norm": True},
    "two-layer": {"drafter_layers": 2},
    "mla": {"target_arch": "deepseek", "drafter_flavor": "mla", "mla_latent": 512},  # what vLLM's CPU MLA takes
}


#: engine arguments of a family's server beyond ARGS. mla: the backend pinned to the reference CPU_MLA,
#: the path the load plan models (W_UV and W_UK_T split from kv_b_proj); on a CPU with AMX vLLM would pick
#: its AMX backend, which makes neither and empties kv_b_proj (vllm/model_executor/layers/attention/
#: mla_attention.py:1225-1231); without AMX the pin changes nothing (vllm/platforms/cpu.py:151-176). The
#: test models' sizes suit the AMX backend too (tests/test_amx_mla.py), for users who do not pin it.
#: The drafter's backend is pinned too, in the speculative config ckpttools merges into its own: vLLM
#: picks the drafter's anew (v1/spec_decode/llm_base_proposer.py:1283-1291), and on a CPU with AMX the
#: target on CPU_MLA with the drafter on AMX_MLA share no KV block size and the server exits (seen in the
#: clean-clone run of 24c987f: "No common block size for 128 (CPU_MLA: [16]; AMX_MLA: [MultipleOf(32)])").
FAMILY_ARGS: dict[str, tuple[str, ...]] = {
    "mla": ("--attention-backend=CPU_MLA", '--speculative-config={"attention_backend": "CPU_MLA"}')
}


class VllmPool:
    """The session's shared servers, by key; each started on first use. ``pair`` builds (once) the
    known pairs they serve, ``serve`` puts one in place and returns the server."""

    def __init__(self, python: str, root: Path) -> None:
        self.python = python
        self.root = root
        self.servers: dict[str, Served] = {}
        self.pairs: dict[tuple[Any, ...], tuple[Path, Path, Path]] = {}

    def pair(self, family: str, target: str = "repeat", drafter: str = "id", live: dict[str, Any] | None = None):
        """(target, drafter in SGLang's layout, the drafter exported for vLLM) of ``family``, built once.
        ``live``: tests.helpers.with_live_attention's options (attention that matters), or None."""
        key = (family, target, drafter, tuple(sorted((live or {}).items())) if live is not None else None)
        if key not in self.pairs:
            from ckpttools.demo.tiny import build_known_pair
            from ckpttools.ops.export import export

            from .helpers import with_live_attention

            name = f"{family}-{target}-{drafter}" + (
                "" if live is None else "-live" + "".join(f"-{k}{v}" for k, v in key[3])
            )
            d = self.root / "pairs" / name
            tp, dp = build_known_pair(d, target=target, drafter=drafter, **FAMILIES[family])
            if live is not None:
                with_live_attention(Path(dp), **live)
            vp = Path(export(dp, d / "drafter-vllm", format="vllm", target=tp).output)
            self.pairs[key] = (Path(tp), Path(dp), vp)
        return self.pairs[key]

    def serve(
        self, family: str, target: str = "repeat", drafter: str = "id", live: dict[str, Any] | None = None
    ) -> tuple[Served, Any, tuple[Path, Path, Path]]:
        """``family``'s server with this pair in place: (the server, the checked swap, the pair)."""
        pair = self.pair(family, target, drafter, live)
        first = self.pair(family)  # every family's server starts with its repeat/id pair
        s = self.get(family, first[0], first[2], extra_args=FAMILY_ARGS.get(family, ()))
        if s.target != pair[0]:
            s.load_target(pair[0])
        return s, s.swap(pair[2]), pair

    def get(self, key: str, target: Path, drafter: Path | None, *, extra_args: tuple[str, ...] = ()) -> Served:
        """The server ``key`` (a target architecture, a drafter family, settings), started with
        ``target`` and ``drafter`` if new. The caller then puts its own target (``Served.load_target``)
        and drafter (``Served.swap``) in place. A pool server is never handed out dead."""
        if key in self.servers:
            s = self.servers[key]
            assert s.server.proc.poll() is None, f"pool server {key} died:\n{s.server.log_tail(40)}"
            self.servers[key] = self.servers.pop(key)  # the most recently used last
            return s
        from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port
        from ckpttools.engines.releases import VLLM_0_32

        while len(self.servers) >= MAX_ALIVE:
            self.release(next(iter(self.servers)))
        from ckpttools.engines.swap import prepare_launch, server_spec

        log = self.root / f"{key.replace('/', '-')}.log"
        spec = LaunchSpec(
            "vllm",
            str(target),
            str(drafter) if drafter is not None else None,
            port=free_port(),
            steps=STEPS if drafter is not None else 0,
            engine_args=[*ARGS, *extra_args],
            python=self.python,
            log_path=str(log),
            ready_timeout=600,
            env={**(ENV if key in LOGGED else SERVER_ENV), "VLLM_CACHE_ROOT": cache_root(self.root / "vllm-cache")},
        )
        swap: dict[str, Any] = {}
        if drafter is not None:
            spec = prepare_launch(spec, VLLM_0_32)
            # the swap route's worker extension, with the test's draft_state beside it (vLLM takes one class)
            args = [a for a in spec.engine_args if a != "ckpt_swap.VllmDrafterSwap"]
            i = args.index("--worker-extension-cls")
            args.insert(i + 1, "tests.vllm_ext.SwapAndDraftState")
            env = {**spec.env, "PYTHONPATH": os.pathsep.join([spec.env["PYTHONPATH"], str(REPO)])}
            spec = dataclasses.replace(spec, engine_args=args, env=env)
            swap = server_spec(VLLM_0_32, drafter)
        srv = RunningServer(spec).start()
        try:
            t0 = time.monotonic()
            srv.wait_ready(None)
            print(f"\npool: vLLM server {key} ready in {time.monotonic() - t0:.0f} s")
        except BaseException:
            srv.stop()
            raise
        self.servers[key] = Served(key, spec.url, Path(target), log, srv, swap)
        return self.servers[key]

    def release(self, key: str) -> None:
        """Stop the server ``key`` (a later ``get`` starts it again)."""
        s = self.servers.pop(key, None)
        if s is not None:
            s.server.stop()

    def close(self) -> None:
        for s in self.servers.values():
            s.server.stop()
        self.servers.clear()
