"""An FP8 drafter on the real vLLM 0.32 CPU build (marker vllm; the pool's servers, tests/vllm_pool.py).

vLLM's CPU build has no weights-only FP8 kernel (model_executor/kernels/linear/__init__.py:506-516), but
FP8 with dynamic per-token activations reaches its torch fallback (ChannelWiseTorchFP8ScaledMMLinearKernel,
scaled_mm/pytorch.py:37-39, 199-240: torch._scaled_mm, which the CPU torch 2.13 has). Seen on the CI CPU:
4.0 (113 s). Its first run measured 1.24, when ckpt quantize's ignore said "fc" and not vLLM's "model.fc". So the known pair's
drafter, exported for vLLM and quantized by ``ckpt quantize --activations dynamic``, is served on a pool
server of its own (a server's quantization is fixed at launch: it cannot be swapped into the bf16 one),
and its accept length is compared with the bf16 drafter's, which is 4.0 by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckpttools.demo.tiny import known_prompts
from ckpttools.ops.quantize import quantize
from ckpttools.ops.validate import validate
from ckpttools.measuring.verify import verify

pytestmark = pytest.mark.vllm


def test_an_fp8_dynamic_drafter_serves_on_vllm_cpu(vllm_pool, tmp_path: Path) -> None:
    tp, _, vp = vllm_pool.pair("llama")
    q = Path(quantize(vp, tmp_path / "fp8", engine="vllm==0.32", activations="dynamic").output)
    assert validate(q, tp, engine="vllm==0.32").ok
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(4)))
    srv = vllm_pool.get("llama-fp8-dynamic", tp, q)
    try:
        log = srv.log.read_text(errors="replace")
        kernels = sorted({ln.split("Selected ")[1].split()[0] for ln in log.splitlines() if "Selected " in ln})
        rep = verify(srv.url, prompts=str(prompts), num_prompts=4, max_new_tokens=24, ignore_eos=True)
    finally:
        vllm_pool.release("llama-fp8-dynamic")
    print(f"\nvLLM CPU, FP8 (dynamic activations) drafter: accept length {rep.accept_length}; kernels {kernels}")
    assert rep.accept_length == 4.0
