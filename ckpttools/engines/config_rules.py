"""How an engine reads a drafter's config: the context length it derives, and the config
fields its loader sizes from the weights (so the weights can contradict them).

Read from SGLang 0.5.17 (paths under ``sglang/srt/``); the release tables cite the same
lines for their context rule.
"""

from __future__ import annotations

from typing import Any

from ckpttools.engines.flavor import MLA_ARCHS, detect_flavor
from ckpttools.formats.config import (
    DEEPSEEK_V3_TYPES,
    INT_BOUNDS,
    SUBCONFIG_KEYS,
    ConfigEssentials,
    bad_rope_scaling,
    essentials,
    lookup,
)
from ckpttools.formats.names import canonical_name, layer_index

__all__ = [
    "CONTEXT_LENGTH_KEYS",
    "context_length",
    "default_context",
    "weight_problems",
    "weight_contradictions",
    "canonical_shapes",
    "amx_mla_refusal",
    "attention_head_size",
    "is_mla",
    "kv_bytes_per_layer",
]


def is_mla(cfg: dict[str, Any]) -> bool:
    """An MLA model: an MLA drafter class by name, or a config with MLA attention fields."""
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs[:1] and archs[0] in MLA_ARCHS:
        return True
    return "kv_lora_rank" in cfg and "qk_rope_head_dim" in cfg


#: --kv-cache-dtype auto: the model's bf16/fp16
KV_BYTES = 2


def kv_bytes_per_layer(cfg: dict[str, Any], e: ConfigEssentials) -> tuple[int, str] | None:
    """Bytes of KV cache per token per layer as SGLang allocates them, and how."""
    kv, rope = lookup(cfg, "kv_lora_rank")[0], lookup(cfg, "qk_rope_head_dim")[0]
    if type(kv) is int and type(rope) is int:
        return (kv + rope) * KV_BYTES, f"MLA: kv_lora_rank {kv} + qk_rope_head_dim {rope}, x {KV_BYTES} bytes"
    heads, H = e.num_attention_heads, e.hidden_size
    kvh = e.num_key_value_heads or heads
    hd = e.head_dim or (H // heads if isinstance(heads, int) and isinstance(H, int) and heads else None)
    if not (isinstance(kvh, int) and isinstance(hd, int)):
        return None
    return kvh * 2 * hd * KV_BYTES, f"{kvh} KV heads x head_dim {hd} x 2 (K and V) x {KV_BYTES} bytes"


#: the keys SGLang 0.5.17 reads, in order (utils/hf_transformers/common.py CONTEXT_LENGTH_KEYS)
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


def context_length(cfg: dict[str, Any] | None) -> tuple[int | None, str]:
    """The context length SGLang derives from a config, and how it got there.

    Mirrors SGLang 0.5.17 ``get_context_length``: the first of
    :data:`CONTEXT_LENGTH_KEYS` that is set, times rope_scaling's factor unless the
    scaling names ``original_max_position_embeddings`` or is of type llama3; 2048 when
    no key is set. Fields under text_config are used for multimodal wrappers.

    Returns:
        (length, derivation); (None, "no config") without a config.
    """
    if not cfg:
        return None, "no config"
    text = cfg
    for sub in SUBCONFIG_KEYS:
        if isinstance(cfg.get(sub), dict) and not any(k in cfg for k in CONTEXT_LENGTH_KEYS):
            text = cfg[sub]
            break
    rs = text.get("rope_scaling")
    if bad_rope_scaling(rs):
        rs = None
    factor = 1.0
    if isinstance(rs, dict) and rs:
        factor = rs.get("factor", 1) or 1
        if "original_max_position_embeddings" in rs or rs.get("rope_type", rs.get("type")) == "llama3":
            factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        val = text.get(key)
        if val is not None and (type(val) is not int or not 0 < val <= INT_BOUNDS["max_position_embeddings"]):
            return None, f"{key} is {val!r}, not a usable length"
        if val is not None:
            how = key if factor == 1 else f"{key} x rope_scaling.factor {factor}"
            return int(factor * val), how
    return default_context(text)


#: SGLang 0.5.17 registers kimi_k2 (the MLA drafters' type), deepseek_v32 and deepseek_v4 as
#: transformers' DeepseekV3Config (sglang/srt/utils/hf_transformers/common.py:139-155): the
#: types of formats.config.DEEPSEEK_V3_TYPES


def default_context(cfg: dict[str, Any]) -> tuple[int, str]:
    """The context SGLang 0.5.17 derives when a config sets no context key: the default of the
    config class transformers builds for its model_type (Llama and DeepSeek-V2: 2048; DeepSeek-V3,
    hence kimi_k2: 4096), else get_context_length's own 2048 (utils/hf_transformers/common.py:463-481)."""
    if cfg.get("model_type") in DEEPSEEK_V3_TYPES:
        return 4096, f"the default of DeepSeek-V3's config class, which SGLang uses for {cfg['model_type']}"
    return 2048, "SGLang's default (no context key set)"


def weight_problems(cfg: dict[str, Any] | None, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Config fields that the weights contradict: num_hidden_layers against the layers present,
    num_aux_hidden_states against fc's input width, and fc_norm.N present exactly when the flag
    (``fc_norm``, or SGLang's legacy ``use_aux_norm``) says.

    Args:
        shapes: {canonical tensor name: shape} (names as :func:`canonical_name` gives them).

    Returns:
        {JSON path: what is wrong}; empty when the weights agree (or a field is absent or unusable).
    """
    if not cfg or not shapes:
        return {}
    e = essentials(cfg)  # its invalid: config_problems(cfg)
    if e.invalid:
        return {}
    from ckpttools.engines.aux_rules import fc_options  # the aux rules: not for inspect's context length

    num_aux = fc_options(cfg, "sglang").num_aux
    return weight_contradictions(cfg, e, lookup(cfg, "num_hidden_layers"), num_aux, shapes)


def weight_contradictions(
    cfg: dict[str, Any],
    e: ConfigEssentials,
    num_hidden_layers: tuple[Any, str | None],
    num_aux: int,
    shapes: dict[str, tuple[int, ...]],
) -> dict[str, str]:
    """:func:`weight_problems` of a usable config (no :func:`config_problems`) whose fields are read
    already: its essentials ``e``, ``num_hidden_layers`` as written (value, JSON path), and the aux
    states SGLang sizes fc for (``num_aux``, :func:`ckpttools.engines.aux_rules.fc_options`)."""
    out: dict[str, str] = {}
    layers = sorted({i for i in map(layer_index, shapes) if i is not None})
    n_layers, where = num_hidden_layers
    if where and layers and n_layers != layers[-1] + 1:
        out[where] = f"is {n_layers} but the weights hold decoder layers {_span(layers)} ({layers[-1] + 1})"
    n, fc = cfg.get("num_aux_hidden_states"), shapes.get("fc.weight")
    ht = e.target_hidden_size or e.hidden_size
    if type(n) is int and fc is not None and len(fc) == 2 and type(ht) is int and fc[1] != n * ht:
        out["$.num_aux_hidden_states"] = (
            f"is {n} but fc.weight takes {fc[1]} inputs, not {n} x {ht} (target hidden size): {fc[1] / ht:g} aux states"
        )
    flag = "fc_norm" if cfg.get("fc_norm") or not cfg.get("use_aux_norm") else "use_aux_norm"
    want = {f"fc_norm.{j}.weight" for j in range(num_aux)} if cfg.get(flag) else set()
    have = {k for k in shapes if k.startswith("fc_norm.")}
    if want != have:
        extra, missing = sorted(have - want), sorted(want - have)
        what = f"the weights lack {', '.join(missing)}" if missing else f"the weights have {', '.join(extra)}"
        out[f"$.{flag}"] = f"is {bool(cfg.get(flag))} for {num_aux} aux states but {what}"
    return out


def _span(ids: list[int]) -> str:
    """``0..5`` for consecutive ids (sorted, distinct), else the list (at most 8 shown): never a range
    as long as the largest id, which a name such as ``layers.10000000000000000000.`` makes huge."""
    if len(ids) > 1 and ids[-1] - ids[0] + 1 == len(ids):
        return f"{ids[0]}..{ids[-1]}"
    return str(ids) if len(ids) <= 8 else f"{ids[:4]} ... {ids[-2:]} ({len(ids)} ids)"


def canonical_shapes(cfg: dict[str, Any] | None, tensors: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """{canonical name: shape} of an EAGLE-3 drafter's tensors (``Checkpoint.tensors``), for
    :func:`weight_problems`; empty for any other kind (an MTP head's layer is the target's last + 1)."""
    if not detect_flavor(cfg, list(tensors)).is_plain_eagle3:
        return {}
    return {canonical_name(n)[0]: tuple(t.shape) for n, t in tensors.items()}


def amx_mla_refusal(cfg: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first of the checks vLLM's AMX MLA backend makes of an MLA model's sizes
    (:data:`ckpttools.engines.claim_texts.VLLM_AMX_MLA_CHECKS`, in its order) that ``cfg`` fails.

    Returns:
        {"field", "value", "where" (its JSON path), "error" (the RuntimeError's text), "when"};
        None when every size passes, or one is missing or not a positive integer (nothing to say).
    """
    from ckpttools.engines.claim_texts import VLLM_AMX_MLA_CHECKS  # (validate's: not for inspect's start-up)

    sizes: dict[str, tuple[int, str]] = {}
    for key in dict.fromkeys(k for k, *_ in VLLM_AMX_MLA_CHECKS):
        value, where = lookup(cfg, key)
        if type(value) is not int or value <= 0 or where is None:
            return None
        sizes[key] = (value, where)
    for key, multiple, error, when in VLLM_AMX_MLA_CHECKS:
        value, where = sizes[key]
        if value % multiple:
            return {"field": key, "value": value, "where": where, "error": error.format(n=value), "when": when}
    return None


def attention_head_size(cfg: dict[str, Any] | None) -> tuple[int, str, str] | None:
    """An attention layer's head size as an engine sizes its kernels: ``head_dim`` where the config
    gives one, else hidden_size / num_attention_heads (transformers' Llama default).

    Returns:
        (size, its JSON path, how it was read); None where neither gives a positive integer.
    """
    n, where = lookup(cfg, "head_dim")
    if type(n) is int and n > 0 and where is not None:
        return n, where, "head_dim"
    if n is not None:
        return None  # a head_dim that is not a size: the type checks say so
    hidden, hw = lookup(cfg, "hidden_size")
    heads, _ = lookup(cfg, "num_attention_heads")
    if type(hidden) is int and type(heads) is int and hidden > 0 and heads > 0 and hidden % heads == 0 and hw:
        return hidden // heads, hw, f"hidden_size {hidden} / num_attention_heads {heads}"
    return None
