"""Which canonical tensor names an engine loads, kept as data in one place.

Read off SGLang 0.5.17 ``models/llama_eagle3.py`` (``load_weights``): a name is looked
up bare or with ``model.``; ``midlayer`` and ``aux_norm_low/mid/high`` are legacy names
it maps to ``layers.0`` and ``fc_norm.0/1/2`` (:func:`ckpttools.formats.names.canonical_name`
folds them the same way); ``d2t`` becomes ``hot_token_id``; ``t2d`` is skipped; any other
name it does not know is dropped without a word. The release tables
(:mod:`ckpttools.engines.releases`) reference these patterns.
"""

from __future__ import annotations

import re

from ckpttools.formats.names import canonical_name

__all__ = [
    "SGLANG_NAME_PATTERNS",
    "sglang_loads",
    "FOREIGN_PREFIXES",
    "suggest_rename",
    "QK_NORM",
    "QWEN3_DRAFTER_ARCH",
]

_LAYER = r"layers\.\d+\."
#: canonical names SGLang's LlamaForCausalLMEagle3 has parameters (or a use) for
SGLANG_NAME_PATTERNS: list[re.Pattern[str]] = [
    re.compile(p)
    for p in (
        r"embed_tokens\.weight",
        r"fc\.(weight|bias)",
        r"fc_norm\.\d+\.weight",
        r"input_norm\.weight",
        _LAYER + r"self_attn\.(q|k|v|o)_proj\.weight",
        # MLA drafters (Eagle3DeepseekV2ForCausalLM)
        _LAYER + r"self_attn\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)\.weight",
        _LAYER + r"self_attn\.(q_a_layernorm|kv_a_layernorm)\.weight",
        _LAYER + r"mlp\.(gate|up|down)_proj\.weight",
        _LAYER + r"(input_layernorm|hidden_norm|post_attention_layernorm)\.weight",
        r"norm\.weight",
        r"lm_head\.weight",
        r"d2t",
        r"t2d",
    )
]

#: a Qwen3-architecture drafter's per-head q/k norms. vLLM 0.32 serves such a drafter as
#: Eagle3Qwen3ForCausalLM (model_executor/models/registry.py:665, qwen3_eagle3.py); SGLang
#: 0.5.17 has no EAGLE-3 class with them (models/ has no qwen3 eagle3 drafter) and drops them
QK_NORM = re.compile(r"^(model\.)?(layers\.\d+|midlayer)\.self_attn\.(q_norm|k_norm)\.weight$")
QWEN3_DRAFTER_ARCH = "Eagle3Qwen3ForCausalLM"


#: wrappers that training code adds around a drafter's names; SGLang knows none of them
FOREIGN_PREFIXES: tuple[str, ...] = (
    "module.",
    "draft_model.",
    "drafter.",
    "eagle.",
    "eagle_module.",
    "model.model.",
    "base_model.model.",
)


def suggest_rename(name: str) -> str | None:
    """A name SGLang would load for a tensor it would drop, or None if none is known.

    Example:
        >>> suggest_rename("module.midlayer.mlp.up_proj.weight")
        'layers.0.mlp.up_proj.weight'
    """
    if sglang_loads(name):
        return None
    stripped = name
    changed = True
    while changed:
        changed = False
        for p in FOREIGN_PREFIXES:
            if stripped.startswith(p):
                stripped = stripped[len(p) :]
                changed = True
    canon, _ = canonical_name(stripped)
    return canon if canon != name and sglang_loads(canon) else None


def sglang_loads(name: str) -> bool:
    """Whether SGLang 0.5.17 would load this name (bare, ``model.``, or a legacy alias)."""
    canon, _ = canonical_name(name)
    return any(p.fullmatch(canon) for p in SGLANG_NAME_PATTERNS)
