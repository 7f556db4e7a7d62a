"""The config.json fields this project reads, wherever a format keeps them.

Multimodal wrappers (Kimi-K2.5, Llama-4) keep the text model under ``text_config``;
speculators keeps the decoder layer's config under ``transformer_layer_config``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ckpttools.errors import ConfigError

__all__ = [
    "ConfigEssentials",
    "essentials",
    "lookup",
    "aux_layer_ids",
    "SUBCONFIG_KEYS",
    "config_problems",
    "require_valid_config",
    "INT_BOUNDS",
    "MLA_BOUNDS",
    "MAX_VOCAB_SIZE",
    "default_num_layers",
    "DEEPSEEK_V3_TYPES",
    "DEEPSEEK_V3_TYPES",
]

#: the largest vocabulary (and so the largest token id + 1) any reader accepts: real ones are
#: below 300k; a larger size or id is a damaged file, and using it would allocate without bound
MAX_VOCAB_SIZE = 1 << 24

#: integer fields and the largest plausible value of each: a config past these is damaged,
#: and using it would allocate without bound (a 1e8-layer loop, a 1e12-row mask)
INT_BOUNDS: dict[str, int] = {
    "hidden_size": 1 << 20,
    "target_hidden_size": 1 << 20,
    "intermediate_size": 1 << 22,
    "vocab_size": MAX_VOCAB_SIZE,
    "draft_vocab_size": MAX_VOCAB_SIZE,
    "num_hidden_layers": 4096,
    "num_attention_heads": 1 << 14,
    "num_key_value_heads": 1 << 14,
    "head_dim": 1 << 14,
    "max_position_embeddings": 1 << 34,
}
#: MLA attention sizes (DeepSeek-V2/V3, Kimi-K2): the largest plausible value of each; q_lora_rank
#: may be null (no q down-projection; which engines take that: the release tables' claims)
MLA_BOUNDS: dict[str, int] = {
    "kv_lora_rank": 1 << 16,
    "q_lora_rank": 1 << 16,
    "qk_rope_head_dim": 1 << 14,
    "qk_nope_head_dim": 1 << 14,
    "v_head_dim": 1 << 14,
}
#: the most aux hidden states any drafter concatenates (EAGLE-3 uses 3)
MAX_AUX_STATES = 64
#: EAGLE-3.1 switches: true, false or null (absent); a string "false" would read as on
_FLAG_FIELDS = ("fc_norm", "use_aux_norm", "norm_before_fc", "norm_output", "norm_before_residual")
#: fields that hold a sub-config: each must be a JSON object when present
_OBJECT_FIELDS = ("eagle_config", "transformer_layer_config", "speculators_config", "text_config")
_NUMBER_FIELDS = ("rope_theta",)
_STRING_FIELDS = ("model_type", "hidden_act")

SUBCONFIG_KEYS = ("text_config", "transformer_layer_config", "language_config", "llm_config")


def lookup(cfg: dict[str, Any] | None, key: str, default: Any = None) -> tuple[Any, str | None]:
    """Find ``key`` at the top level or in a known sub-config.

    Returns:
        (value, JSON path where it was found) or (default, None).
    """
    if not cfg:
        return default, None
    if key in cfg:
        return cfg[key], f"$.{key}"
    for sub in SUBCONFIG_KEYS:
        inner = cfg.get(sub)
        if isinstance(inner, dict) and key in inner:
            return inner[key], f"$.{sub}.{key}"
    return default, None


def _bad_int(v: Any, key: str) -> str | None:
    bound = INT_BOUNDS[key]
    if type(v) is not int:
        return f"is {v!r}; expected an integer"
    if not 0 < v <= bound:
        return f"is {v}; expected an integer from 1 to {bound:,}"
    return None


def _bad_mla(v: Any, key: str) -> str | None:
    if v is None and key == "q_lora_rank":
        return None
    bound = MLA_BOUNDS[key]
    if type(v) is not int or not 0 < v <= bound:
        null = " or null" if key == "q_lora_rank" else ""
        return f"is {v!r}; expected an integer from 1 to {bound:,}{null}"
    if key == "qk_rope_head_dim" and v % 2:
        return f"is {v}; expected an even number (rotary embeddings rotate pairs of dimensions)"
    return None


def _bad_number(v: Any) -> str | None:
    if type(v) not in (int, float) or not math.isfinite(v) or v <= 0:
        return f"is {v!r}; expected a positive number"
    return None


def _bad_ids(v: Any) -> str | None:
    if not isinstance(v, list) or not all(type(i) is int and 0 <= i <= INT_BOUNDS["num_hidden_layers"] for i in v):
        return f"is {v!r}; expected a list of layer indices (integers from 0)"
    return None


def bad_rope_scaling(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        return f"is {v!r}; expected an object or null"
    f = v.get("factor")
    if f is not None and _bad_number(f):
        return f"has factor {f!r}; expected a positive number"
    o = v.get("original_max_position_embeddings")
    if o is not None and _bad_int(o, "max_position_embeddings"):
        return f"has original_max_position_embeddings {o!r}; expected a positive integer"
    for k in ("rope_type", "type"):
        if k in v and not isinstance(v[k], str):
            return f"has {k} {v[k]!r}; expected a string"
    return None


def config_problems(cfg: dict[str, Any] | None) -> dict[str, str]:
    """Every field this project reads that has the wrong type or an implausible value.

    Returns:
        {JSON path: what is wrong}; empty when every field read is usable.
    """
    out: dict[str, str] = {}
    if not cfg:
        return out
    for key in INT_BOUNDS:
        v, where = lookup(cfg, key)
        if where and v is not None and (why := _bad_int(v, key)):
            out[where] = why
    for key in _NUMBER_FIELDS:
        v, where = lookup(cfg, key)
        if where and v is not None and (why := _bad_number(v)):
            out[where] = why
    for key in _STRING_FIELDS:
        v, where = lookup(cfg, key)
        if where and v is not None and not isinstance(v, str):
            out[where] = f"is {v!r}; expected a string"
    v, where = lookup(cfg, "architectures")
    if where and v is not None and not (isinstance(v, list) and all(isinstance(a, str) for a in v)):
        out[where] = f"is {v!r}; expected a list of class names"
    v, where = lookup(cfg, "rope_scaling")
    if where and (why := bad_rope_scaling(v)):
        out[where] = why
    ids, where = _raw_aux_ids(cfg)
    if where and ids is not None and (why := _bad_ids(ids)):
        out[where] = why
    return out | _eagle_field_problems(cfg)


def _eagle_field_problems(cfg: dict[str, Any]) -> dict[str, str]:
    """The sub-config holders, the MLA sizes, and the EAGLE-3.1 fields."""
    out: dict[str, str] = {}
    for key in _OBJECT_FIELDS:
        if key in cfg and not isinstance(cfg[key], dict):
            out[f"$.{key}"] = f"is {_short(cfg[key])}; expected an object"
    for key in MLA_BOUNDS:
        v, where = lookup(cfg, key)
        if where and (why := _bad_mla(v, key)):
            out[where] = why
    n = cfg.get("num_aux_hidden_states")
    if n is not None and (type(n) is not int or not 0 < n <= MAX_AUX_STATES):
        out["$.num_aux_hidden_states"] = f"is {_short(n)}; expected an integer from 1 to {MAX_AUX_STATES}"
    got = cfg.get("eagle_config")
    eagle: dict[str, Any] = got if isinstance(got, dict) else {}
    for holder, prefix in ((cfg, "$"), (eagle, "$.eagle_config")):
        for key in _FLAG_FIELDS:
            v = holder.get(key)
            if v is not None and type(v) is not bool:
                out[f"{prefix}.{key}"] = f"is {_short(v)}; expected true or false"
    return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def require_valid_config(cfg: dict[str, Any] | None, source: str, weights: dict[str, str] | None = None) -> None:
    """Raise ConfigError (exit 2) naming the first unusable field, for commands that write;
    with ``weights`` ({JSON path: why}, :func:`ckpttools.engines.config_rules.weight_problems`)
    also a field the weights contradict.

    Raises:
        ConfigError
    """
    probs = config_problems(cfg) or dict(weights or {})
    if probs:
        where, why = next(iter(probs.items()))
        more = f" (and {len(probs) - 1} more)" if len(probs) > 1 else ""
        raise ConfigError(
            f"{source}: config {where} {why}{more}",
            path=source,
            hint="fix config.json; `ckpt validate` lists every problem",
        )


def aux_layer_ids(cfg: dict[str, Any] | None) -> tuple[list[int] | None, str | None]:
    """The target layers an EAGLE-3 drafter captures, as its config states them
    (None when absent or not a list of layer indices)."""
    ids, where = _raw_aux_ids(cfg)
    if ids is not None and _bad_ids(ids):
        return None, None
    return ids, where


def _raw_aux_ids(cfg: dict[str, Any] | None) -> tuple[Any, str | None]:
    if not cfg:
        return None, None
    for holder, path in ((cfg.get("eagle_config"), "$.eagle_config"), (cfg, "$")):
        if isinstance(holder, dict) and "eagle_aux_hidden_state_layer_ids" in holder:
            return holder["eagle_aux_hidden_state_layer_ids"], f"{path}.eagle_aux_hidden_state_layer_ids"
    spec = cfg.get("speculators_config")
    if isinstance(spec, dict):
        for k in ("eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids"):
            if k in spec:
                return spec[k], f"$.speculators_config.{k}"
    return None, None


#: model types whose transformers config class is DeepseekV3Config (default max_position_embeddings
#: 4096, 61 layers: transformers 5.12.1, models/deepseek_v3/configuration_deepseek_v3.py:75 and 92);
#: which engine builds that class for which type is in engines/config_rules.py
DEEPSEEK_V3_TYPES = ("deepseek_v3", "kimi_k2", "deepseek_v32", "deepseek_v4")


def default_num_layers(cfg: dict[str, Any]) -> int:
    """num_hidden_layers when a config leaves it out: 61 for DeepSeek-V3's config class
    (configuration_deepseek_v3.py:75), 32 for Llama's and DeepSeek-V2's."""
    return 61 if cfg.get("model_type") in DEEPSEEK_V3_TYPES else 32


@dataclass
class ConfigEssentials:
    """The fields every command reads. ``None`` means absent."""

    architectures: list[str] | None = None
    model_type: str | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    draft_vocab_size_present: bool = False
    num_hidden_layers: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    aux_layer_ids: list[int] | None = None
    max_position_embeddings: int | None = None
    rope_theta: float | None = None
    rope_scaling: dict[str, Any] | None = None
    torch_dtype: str | None = None
    hidden_act: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    #: fields present with a wrong type or implausible value (left None above): {JSON path: why}
    invalid: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def essentials(cfg: dict[str, Any] | None) -> ConfigEssentials:
    """Pull the essentials out of a config dict (top level, text_config, ...)."""
    e = ConfigEssentials()
    if not cfg:
        return e
    e.invalid = config_problems(cfg)
    for key in (
        "architectures",
        "model_type",
        "hidden_size",
        "target_hidden_size",
        "vocab_size",
        "num_hidden_layers",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rope_theta",
        "rope_scaling",
        "hidden_act",
    ):
        v, where = lookup(cfg, key)
        if where and where not in e.invalid:
            setattr(e, key, v)
            e.sources[key] = where
    for key in ("torch_dtype", "dtype"):
        v, where = lookup(cfg, key)
        if where and isinstance(v, str):
            e.torch_dtype = v
            e.sources["torch_dtype"] = where
            break
    v, where = lookup(cfg, "draft_vocab_size")
    if where:
        e.draft_vocab_size, e.draft_vocab_size_present = (None if where in e.invalid else v), True
        e.sources["draft_vocab_size"] = where
    rope_params, where = lookup(cfg, "rope_parameters")  # transformers v5 layout
    if isinstance(rope_params, dict):
        if e.rope_theta is None and "rope_theta" in rope_params and not _bad_number(rope_params["rope_theta"]):
            e.rope_theta = rope_params["rope_theta"]
            e.sources["rope_theta"] = f"{where}.rope_theta"
        if e.rope_scaling is None and rope_params.get("rope_type", "default") != "default":
            e.rope_scaling = rope_params
            e.sources["rope_scaling"] = where or ""
    ids, where = aux_layer_ids(cfg)
    if where:
        e.aux_layer_ids = ids
        e.sources["aux_layer_ids"] = where
    return e
