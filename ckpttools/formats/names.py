"""Tensor-name rules between drafter layouts, kept as data in one place.

Read off SGLang 0.5.17 ``models/llama_eagle3.py`` (``load_weights``): a name is looked
up bare or with ``model.``; ``midlayer`` and ``aux_norm_low/mid/high`` are legacy names
it maps to ``layers.0`` and ``fc_norm.0/1/2``; ``d2t`` becomes ``hot_token_id``; ``t2d``
is skipped; any other name it does not know is dropped without a word.
"""

from __future__ import annotations

import re

__all__ = [
    "CANONICAL_PREFIXES",
    "EXACT_RENAMES",
    "SGLANG_NAME_PATTERNS",
    "TRAINING_ONLY_PATTERNS",
    "canonical_name",
    "sglang_loads",
    "is_training_only",
    "layer_index",
    "FOREIGN_PREFIXES",
    "suggest_rename",
    "QK_NORM",
    "QWEN3_DRAFTER_ARCH",
]

#: ordered (old prefix, new prefix); the first that matches wins, then matching restarts
CANONICAL_PREFIXES: list[tuple[str, str]] = [
    ("model.", ""),
    ("midlayer.", "layers.0."),
    ("midlayers.", "layers."),
    ("aux_norm_low.", "fc_norm.0."),
    ("aux_norm_mid.", "fc_norm.1."),
    ("aux_norm_high.", "fc_norm.2."),
]

_PREFIXES = tuple(old for old, _ in CANONICAL_PREFIXES)

#: whole-name renames applied after the prefixes
#: other names of d2t in the wild (speculators, ModelOpt)
D2T_ALIASES = ("draft_id_to_target_id", "hot_token_id")

EXACT_RENAMES: dict[str, str] = {alias: "d2t" for alias in D2T_ALIASES}

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

#: names that training frameworks leave in checkpoints and no engine reads
TRAINING_ONLY_PATTERNS: list[re.Pattern[str]] = [
    re.compile(p)
    for p in (
        r".*rotary_emb\.inv_freq",
        r"(target_)?lm_head_target\..*",
        r"target_model\..*",
        r"optimizer\..*",
        r".*\._extra_state",
        r"ema\..*",
        r"(draft_)?loss.*",
    )
]


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


def canonical_name(name: str) -> tuple[str, list[str]]:
    """The canonical (SGLang-native, bare) name, and the rules applied to get there.

    Example:
        >>> canonical_name("model.midlayer.self_attn.q_proj.weight")
        ('layers.0.self_attn.q_proj.weight', ['model. -> ', 'midlayer. -> layers.0.'])
    """
    if not name.startswith(_PREFIXES) and name not in EXACT_RENAMES:
        return name, []
    applied: list[str] = []
    while name.startswith(_PREFIXES):
        for old, new in CANONICAL_PREFIXES:
            if name.startswith(old):
                name = new + name[len(old) :]
                applied.append(f"{old} -> {new}")
                break
    if name in EXACT_RENAMES:
        applied.append(f"{name} -> {EXACT_RENAMES[name]}")
        name = EXACT_RENAMES[name]
    return name, applied


def sglang_loads(name: str) -> bool:
    """Whether SGLang 0.5.17 would load this name (bare, ``model.``, or a legacy alias)."""
    canon, _ = canonical_name(name)
    return any(p.fullmatch(canon) for p in SGLANG_NAME_PATTERNS)


def is_training_only(name: str) -> bool:
    canon, _ = canonical_name(name)
    return any(p.fullmatch(canon) for p in TRAINING_ONLY_PATTERNS)


def layer_index(name: str) -> int | None:
    m = re.match(r"layers\.(\d+)\.", canonical_name(name)[0])
    return int(m.group(1)) if m else None
