"""Drafter kinds that are not EAGLE-3 (issue 14): inspect names each with its evidence and the
engine flag that serves it; validate checks only what applies; export and remap refuse (exit 2)
instead of mangling them. Each checkpoint is built here with the tensor names and config keys
that mark the kind in SGLang 0.5.17 and vLLM 0.32 (sources in engines/flavor.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_target, write_tensors
from ckpttools.engines.releases import SGLANG_0_5_23
from ckpttools.ops.inspect import inspect
from ckpttools.ops.validate import validate

H = 64


def _w(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


KINDS = {
    "mtp": (
        {"architectures": ["DeepseekV3ForCausalLMNextN"], "hidden_size": H, "vocab_size": 1024, "num_hidden_layers": 1},
        {
            "model.layers.61.eh_proj.weight": _w(H, 2 * H),
            "model.layers.61.enorm.weight": _w(H),
            "model.layers.61.hnorm.weight": _w(H),
            "model.layers.61.shared_head.norm.weight": _w(H),
        },
        "eh_proj",
    ),
    "dflash": (
        {
            "architectures": ["DFlashDraftModel"],
            "hidden_size": H,
            "vocab_size": 1024,
            "dflash_config": {"target_layer_ids": [1, 3]},
        },
        {"layers.0.self_attn.q_proj.weight": _w(H, H), "fc.weight": _w(H, 2 * H)},
        "dflash_config",
    ),
    "dspark": (
        {"architectures": ["DSparkDraftModel"], "hidden_size": H, "vocab_size": 1024},
        {"layers.0.self_attn.q_proj.weight": _w(H, H)},
        "DSparkDraftModel",
    ),
    "p-eagle": (
        {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": H, "vocab_size": 1024, "ptd_token_id": 1000},
        {"fc.weight": _w(H, 3 * H), "mask_hidden": _w(1, 3 * H), "lm_head.weight": _w(1024, H)},
        "mask_hidden",
    ),
    "eagle1": (
        {"architectures": ["LlamaForCausalLMEagle"], "hidden_size": H, "vocab_size": 1024},
        {"fc.weight": _w(H, 2 * H), "layers.0.self_attn.q_proj.weight": _w(H, H)},
        "LlamaForCausalLMEagle",
    ),
    "medusa": (
        {"architectures": ["MedusaModel"], "hidden_size": H, "vocab_size": 1024, "medusa_num_heads": 2},
        {"medusa_heads.0.0.linear.weight": _w(H, H), "medusa_heads.0.1.weight": _w(1024, H)},
        "medusa_heads",
    ),
    "mlp-speculator": (
        {"architectures": ["MLPSpeculatorPreTrainedModel"], "emb_dim": H, "vocab_size": 1024},
        {"emb.0.weight": _w(1024, H), "proj.0.weight": _w(H, H), "head.0.weight": _w(1024, H)},
        "MLPSpeculatorPreTrainedModel",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_is_named_checked_and_refused_where_it_does_not_apply(kind: str, tmp_path: Path) -> None:
    cfg, tensors, mark = KINDS[kind]
    p = write_tensors(tmp_path / kind, tensors, cfg)
    r = inspect(p)
    assert r.kind == kind, r.evidence
    assert any(mark in e for e in r.evidence) and any(e.startswith("served by ") for e in r.evidence)
    v = validate(p, build_target(tmp_path / "t", hidden_size=H, vocab_size=1024))
    assert v.ok and [f.id for f in v.findings][0] == "input.kind"
    for args in (
        ["export", str(p), "-o", str(tmp_path / "e")],
        ["remap", str(p), "--to", str(p), "-o", str(tmp_path / "r")],
    ):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, res.output
        first = res.stderr.splitlines()[0]
        assert first.startswith(f"ckpt: error: {p}: a ") and "handles EAGLE-3 drafters only" in first
        assert res.stderr.splitlines()[1].startswith("ckpt: hint: serve it as it is (")
        assert not (tmp_path / "e").exists() and not (tmp_path / "r").exists()


def test_a_full_model_that_carries_its_mtp_layers_is_a_target(tmp_path: Path) -> None:
    t = build_target(tmp_path / "t", num_layers=8)
    tensors = {"model.layers.8.eh_proj.weight": _w(64, 128), "model.layers.8.enorm.weight": _w(64)}
    from ckpttools.io.checkpoint import open_checkpoint

    with open_checkpoint(t) as ck:
        tensors |= {n: np.asarray(ck.read(n)).astype(np.float32) for n in ck.tensors}
    cfg = json.loads((t / "config.json").read_text())
    p = write_tensors(tmp_path / "with-mtp", tensors, cfg)
    assert inspect(p).kind == "target"


def test_a_qwen3_architecture_drafter_goes_to_vllm_only(tmp_path: Path) -> None:
    """q_norm/k_norm per head: vLLM 0.32's Eagle3Qwen3ForCausalLM serves it; SGLang 0.5.17 would drop them."""
    from ckpttools.demo.tiny import build_drafter
    from ckpttools.io.checkpoint import open_checkpoint
    from ckpttools.ops.export import export

    d = build_drafter(tmp_path / "d", "sglang")
    with open_checkpoint(d) as ck:
        tensors = {n: np.asarray(ck.read(n)) for n in ck.tensors}
    hd = 16
    tensors |= {"layers.0.self_attn.q_norm.weight": np.ones(hd, np.float32).astype(tensors["fc.weight"].dtype)}
    tensors |= {"layers.0.self_attn.k_norm.weight": np.ones(hd, np.float32).astype(tensors["fc.weight"].dtype)}
    q = write_tensors(tmp_path / "q3", tensors, json.loads((d / "config.json").read_text()))
    sg = next(f for f in validate(q).findings if f.id == "tensors.qk_norm")
    assert sg.severity == "error" and "has no EAGLE-3 class with these norms" in sg.message
    assert f"SGLang {SGLANG_0_5_23.version} has" in sg.message  # the release applied (the newest) is named
    assert "tensors.dropped" not in {f.id for f in validate(q).findings}
    r = CliRunner().invoke(cli, ["export", str(q), "-o", str(tmp_path / "sg")])
    assert r.exit_code == 2 and "a Qwen3-architecture drafter" in r.stderr and "--format vllm" in r.stderr
    out = Path(export(q, tmp_path / "v", format="vllm").output)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3Qwen3ForCausalLM"]
    with open_checkpoint(out) as ck:
        assert {"layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"} <= set(ck.tensors)
    assert "tensors.qk_norm" not in {f.id for f in validate(out, engine="vllm").findings}
