"""Quantized drafters on SGLang 0.5.17, one H200 (marker gpu; skipped unless CKPT_GPU_TESTS=1).

On the known pair (repeat target, id drafter: 4.0 at steps 3 by construction) it measures, each
printed with its accept length:

- A: the bf16 drafter;
- B: its ``ckpt quantize`` FP8 copy (compressed-tensors, per channel, lm_head and fc bf16);
- C: B remapped by ckpttools to another mapping (the 128 slots permuted);
- D: an FP8 copy with lm_head quantized too (per channel, rows of different sizes so the scales
  differ), remapped with lm_head's scales deliberately left in the old slot order. validate refuses
  it on SGLang 0.5.17 (compressed-tensors gives ParallelLMHead no method: the scale is dropped and
  the FP8 rows load unscaled), so it is started directly and measured through ``--host``; its figure
  against C says whether the stale scales reach the model there;
- F, G: the bf16 drafter behind the target launched with ``--quantization fp8``, without and with
  ``--speculative-draft-model-quantization unquant``; the server log's
  ``speculative_draft_model_quantization=`` and the drafter's ``Load weight end ... quant=`` are printed.

Six server starts. The swap (``ckpt verify --launch T D1 D2``) cannot be used across these: a
server's quantization (the target's and the drafter's) is fixed at launch, and SGLang repacks FP8
layers after loading (compressed_tensors_w8a16_fp8.py:45-60: transposed for Marlin), so a weight
update into them is not a like-for-like reload. Budget: about 6 minutes (the first start compiles
triton's kernels, about 70 s; later starts about 45 s; each measurement 4 prompts x 24 tokens).
Figures go to $CKPT_GPU_LOGS/quant.json.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ckpttools.demo.tiny import KNOWN_VD_HI, KNOWN_VD_LO, build_known_pair, known_prompts
from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port
from ckpttools.ops.quantize import quantize
from ckpttools.ops.remap import remap
from ckpttools.ops.validate import validate
from ckpttools.measuring.verify import verify
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

from . import quant_drafters as qd
from .test_gpu_sglang import SGL_ARGS

pytestmark = pytest.mark.gpu
from .test_gpu_sglang import LOGS  # noqa: E402

KW = {"num_prompts": 4, "max_new_tokens": 24, "ignore_eos": True}
FP8 = ["--quantization=fp8"]
UNQUANT = ["--quantization=fp8", "--speculative-draft-model-quantization=unquant"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quant-gpu")
    tp, did = build_known_pair(root / "id", target="repeat", drafter="id")
    ids = np.arange(KNOWN_VD_LO, KNOWN_VD_HI)
    save_mapping(VocabMapping.from_ids(ids[np.random.default_rng(0).permutation(len(ids))], 256), root / "perm.st")
    b = Path(
        quantize(did, root / "fp8", activations="dynamic").output
    )  # per channel: SGLang 0.5.17 takes it only with input activations
    remap(b, root / "fp8-perm", to=root / "perm.st")
    # lm_head rows scaled by 0.8..1.0 (argmax kept: a row's own logit is >= 0.8 H, any other <= 0.75 H), so
    # its per-channel scales differ row by row; quantized with lm_head through vLLM's reading
    t, cfg = qd.arrays(did)
    c = np.linspace(0.8, 1.0, t["lm_head.weight"].shape[0], dtype=np.float32)[:, None]
    t["lm_head.weight"] = (t["lm_head.weight"].astype(np.float32) * c).astype(ml_dtypes.bfloat16)
    varied = qd.write_tensors(root / "varied", t, cfg)
    q = Path(quantize(varied, root / "fp8-head", engine="vllm", include=("lm_head",), activations="dynamic").output)
    remap(q, root / "fp8-head-perm", to=root / "perm.st")
    moved, _ = qd.arrays(root / "fp8-head-perm")
    stale = qd.arrays(q)[0]["lm_head.weight_scale"]
    assert stale.tobytes() != moved["lm_head.weight_scale"].tobytes()
    qd.mutate(root / "fp8-head-perm", root / "fp8-head-perm-stale", tensors={"lm_head.weight_scale": stale})
    prompts = root / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(4)))
    return {
        "target": tp,
        "A": did,
        "B": b,
        "C": root / "fp8-perm",
        "D": root / "fp8-head-perm-stale",
        "prompts": prompts,
    }


def _measure(pair: dict[str, Path], drafter: str, log: str, extra: list[str], unchecked: bool = False) -> dict:
    LOGS.mkdir(parents=True, exist_ok=True)
    spec = LaunchSpec(
        "sglang",
        str(pair["target"]),
        str(pair[drafter]),
        port=free_port(),
        steps=3,
        engine_args=[*SGL_ARGS, *extra],
        python=sys.executable,
        log_path=str(LOGS / log),
        ready_timeout=400,
    )
    if unchecked:  # validate refuses it: start it ourselves and measure through --host
        with RunningServer(spec) as srv:
            srv.wait_ready(None)
            rep = verify(spec.url, engine="sglang==0.5.17", prompts=str(pair["prompts"]), **KW)
    else:
        rep = verify(None, engine="sglang", launch=spec, prompts=str(pair["prompts"]), **KW)
    text = (LOGS / log).read_text(errors="replace")
    said = re.findall(r"speculative_draft_model_quantization='?(\w+)'?", text)
    loads = re.findall(r"Load weight end[^\n]*", text)
    out = {"accept_length": rep.accept_length, "draft_quantization": said[:1], "load_lines": loads[-2:]}
    print(f"\n{drafter} {' '.join(extra) or '(no quantization flag)'}: accept length {rep.accept_length}")
    print("   server args:", said[:1], "| loads:", loads[-2:])
    return out


#: which steps run (CKPT_GPU_QUANT, letters; all by default): to spend the device's minutes on the
#: steps still to show
STEPS = os.environ.get("CKPT_GPU_QUANT", "ABCDFG")
RUNS = {
    "A bf16": ("A", "A", []),
    "B fp8 (ckpt quantize)": ("B", "B", []),
    "C fp8 remapped by ckpttools": ("C", "C", []),
    "D fp8 lm_head, scales left unmoved": ("D", "D", []),
    "F bf16 behind --quantization fp8": ("F", "A", FP8),
    "G bf16, fp8 target, draft unquant": ("G", "A", UNQUANT),
}


def test_quantized_drafters_and_the_inherit_trap(pair) -> None:
    got = {
        name: _measure(pair, drafter, f"quant-{step}.log", extra, unchecked=step == "D")
        for name, (step, drafter, extra) in RUNS.items()
        if step in STEPS
    }
    trap = validate(str(pair["A"]), engine="sglang==0.5.17", engine_args=tuple(FP8))
    said = [f.message for f in trap.findings if f.id == "quant.inherited"]
    stale = validate(str(pair["D"]), engine="sglang==0.5.17")
    got["validate"] = {
        "F inherit finding": said,
        "D errors": [(f.id, f.location) for f in stale.errors],
    }
    (LOGS / "quant.json").write_text(json.dumps(got, indent=1))
    print(json.dumps(got, indent=1))
    for name in ("A bf16", "B fp8 (ckpt quantize)", "C fp8 remapped by ckpttools"):
        assert name not in got or got[name]["accept_length"] == 4.0, (name, got[name])
    if "F" in STEPS:
        assert got["F bf16 behind --quantization fp8"]["draft_quantization"] == ["fp8"]
    if "G" in STEPS:
        assert got["G bf16, fp8 target, draft unquant"]["draft_quantization"] in (["None"], ["unquant"], [])
    assert said and ("quant.scale_dropped", "lm_head.weight_scale") in got["validate"]["D errors"]
