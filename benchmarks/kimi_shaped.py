"""A synthetic drafter shaped like the Kimi-K2 EAGLE-3 one (hidden 7168, draft vocab 32,000,
target vocab 163,840, embed_tokens included, bf16, about 3.5 GB), written fast: tensor data
is a repeated random block, which is all a byte-moving benchmark needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ckpttools.io.writer import CheckpointWriter, TensorSpec
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

H, V, VD, HEADS, KV, HD, INTER = 7168, 163_840, 32_000, 56, 8, 128, 4096


def specs(dtype: str = "BF16") -> list[TensorSpec]:
    return [
        TensorSpec("embed_tokens.weight", dtype, (V, H)),
        TensorSpec("fc.weight", dtype, (H, 3 * H)),
        TensorSpec("layers.0.self_attn.q_proj.weight", dtype, (HEADS * HD, 2 * H)),
        TensorSpec("layers.0.self_attn.k_proj.weight", dtype, (KV * HD, 2 * H)),
        TensorSpec("layers.0.self_attn.v_proj.weight", dtype, (KV * HD, 2 * H)),
        TensorSpec("layers.0.self_attn.o_proj.weight", dtype, (H, HEADS * HD)),
        TensorSpec("layers.0.mlp.gate_proj.weight", dtype, (INTER, H)),
        TensorSpec("layers.0.mlp.up_proj.weight", dtype, (INTER, H)),
        TensorSpec("layers.0.mlp.down_proj.weight", dtype, (H, INTER)),
        TensorSpec("layers.0.input_layernorm.weight", dtype, (H,)),
        TensorSpec("layers.0.hidden_norm.weight", dtype, (H,)),
        TensorSpec("layers.0.post_attention_layernorm.weight", dtype, (H,)),
        TensorSpec("norm.weight", dtype, (H,)),
        TensorSpec("lm_head.weight", dtype, (VD, H)),
        TensorSpec("d2t", "I64", (VD,)),
        TensorSpec("t2d", "BOOL", (V,)),
    ]


def mappings(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A and B as in the seed case: B drops 298 of A's tokens and adds 298 early ids."""
    rng = np.random.default_rng(seed)
    a = np.sort(rng.choice(np.arange(2000, V), size=VD, replace=False))
    kept = np.sort(rng.choice(a, size=VD - 298, replace=False))
    b = np.sort(np.concatenate([kept, rng.choice(2000, size=298, replace=False)]))
    return a, b


def build(out: Path, dtype: str = "BF16", prefix: str = "") -> Path:
    """Write the drafter; ``prefix`` (e.g. "model.") goes before every name but lm_head/d2t/t2d,
    as training frameworks write them, so that an export has names to change."""
    ids_a, _ = mappings()
    # random bits, but never a NaN/Inf pattern for bf16/fp32 (top exponent bits kept off)
    block = np.random.default_rng(1).integers(0, 255, size=64 << 20, dtype=np.uint8) & np.uint8(0x3F)
    sp = [
        TensorSpec(prefix + s.name if s.name not in ("lm_head.weight", "d2t", "t2d") else s.name, s.dtype, s.shape)
        for s in specs(dtype)
    ]
    with CheckpointWriter(out, sp, force=True) as w:
        for s in sp:
            if s.name == "d2t":
                w.write(s.name, ids_a - np.arange(VD))
            elif s.name == "t2d":
                w.write(s.name, VocabMapping.from_ids(ids_a, V).t2d(V))
            else:
                n = s.nbytes
                w.write_chunks(s.name, (block[: min(len(block), n - i)] for i in range(0, n, len(block))))
        w.add_json(
            "config.json",
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "model_type": "llama",
                "hidden_size": H,
                "intermediate_size": INTER,
                "num_attention_heads": HEADS,
                "num_key_value_heads": KV,
                "head_dim": HD,
                "num_hidden_layers": 1,
                "hidden_act": "silu",
                "rms_norm_eps": 1e-5,
                "max_position_embeddings": 131072,
                "vocab_size": V,
                "draft_vocab_size": VD,
                "torch_dtype": "bfloat16" if dtype == "BF16" else "float32",
                "tie_word_embeddings": False,
                "rope_theta": 50000.0,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
            },
        )
    return out


def write_mapping_b(path: Path) -> Path:
    _, ids_b = mappings()
    return save_mapping(VocabMapping.from_ids(ids_b, V), path, force=True)
