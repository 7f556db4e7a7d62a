"""What an engine release builds from a drafter: its class, where each tensor of the files lands,
where each parameter of the class comes from, casts, and options whose switch and weights disagree.

A pure function of the drafter's headers and config (no I/O): :func:`load_plan`. Each loader
model below reproduces one engine's ``load_weights`` for its EAGLE-3 classes, with the renames
the release table (:mod:`ckpttools.engines.releases`) records; the parameter lists follow the
classes' ``__init__``. Parameter names are the engine's own (``model.layers.0.self_attn.qkv_proj.weight``).

Tensor fates: ``loaded`` (into a parameter of the same name, the engine's prefix and q/k/v or
gate/up fusion aside), ``renamed`` (a rename rule of the engine's applied first: ``midlayer``,
``aux_norm_*``, d2t), ``dropped`` (no effect on the model: skipped, no parameter, or loaded into a
parameter the forward never reads) and ``refused`` (the engine's loader raises on it; vLLM only).
Parameter sources: ``file``, ``shared`` (the target's tensor, nothing in the file), ``init``
(nothing loads it: ``init`` says what it holds), ``overwritten`` (set after loading: the
file's tensor replaced by the target's, or, with ``derived_from``, made from another loaded
parameter: vLLM's MLA attention splits kv_b_proj into W_UV and W_UK_T).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckpttools.formats.config import config_problems
from ckpttools.engines.releases import DrafterClass, EngineRelease, LoaderRules
from ckpttools.engines import aux_rules, names, quant_load
from ckpttools.formats import names as canon_names

__all__ = [
    "TensorPlan",
    "ParamPlan",
    "LoadPlan",
    "load_plan",
    "holds_d2t",
    "plan_findings",
    "dtype_entries",
    "dtype_message",
    "UNCHECKED_DTYPES",
    "FATES",
    "SOURCES",
]

FATES = ("loaded", "renamed", "dropped", "refused")
SOURCES = ("file", "shared", "init", "overwritten")

Headers = Mapping[str, tuple[Sequence[int], str]]


@dataclass(frozen=True)
class TensorPlan:
    name: str
    fate: str
    param: str | None = None
    shard: str | None = None
    rule: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "fate": self.fate}
        for k in ("param", "shard", "rule", "reason"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d


@dataclass(frozen=True)
class ParamPlan:
    name: str
    source: str
    kind: str
    init: str | None = None
    used: bool = True
    reason: str | None = None
    derived_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "source": self.source, "kind": self.kind}
        if self.init is not None:
            d["init"] = self.init
        if not self.used:
            d["used"] = False
        if self.reason is not None:
            d["reason"] = self.reason
        if self.derived_from is not None:
            d["derived_from"] = self.derived_from
        return d


#: what a plan tracks like a parameter though the engine holds it as a plain tensor attribute
_ATTRIBUTES = frozenset({"hot_token_id"})


@dataclass
class LoadPlan:
    engine: str
    release: str
    cls: str | None
    cls_source: str
    tensors: list[TensorPlan] = field(default_factory=list)
    params: list[ParamPlan] = field(default_factory=list)
    casts: list[dict[str, str]] = field(default_factory=list)
    #: tensors whose dtype their parameter does not take (:func:`dtype_entries`)
    dtypes: list[dict[str, Any]] = field(default_factory=list)
    switches: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verified: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": {"name": self.engine, "release": self.release},
            "class": self.cls,
            "class_source": self.cls_source,
            "verified": self.verified,
            "tensors": [t.to_dict() for t in self.tensors],
            "params": [p.to_dict() for p in self.params if p.name not in _ATTRIBUTES],
            # held by the model but not among its named parameters (seen on SGLang 0.5.17, H200: the
            # draft model's named_parameters() has no hot_token_id; load_weights sets it as a tensor
            # attribute, llama_eagle3.py:314-367)
            "attributes": [p.to_dict() for p in self.params if p.name in _ATTRIBUTES],
            "casts": list(self.casts),
            "dtypes": list(self.dtypes),
            "switches": list(self.switches),
            "refused": list(self.refused),
            "notes": list(self.notes),
        }

    def tensor(self, name: str) -> TensorPlan:
        return next(t for t in self.tensors if t.name == name)

    def param(self, name: str) -> ParamPlan:
        return next(p for p in self.params if p.name == name)


@dataclass
class _Param:
    kind: str
    used: bool = True
    unused_why: str | None = None
    shards: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Mapped:
    param: str | None
    shard: str | None
    rules: tuple[str, ...]
    why: str | None = None  # when param is None: why it is dropped


# --------------------------------------------------------------------------------------------
# the drafter's config as each engine reads it


def _flat_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A speculators config (layer settings nested in transformer_layer_config) flattened the way
    vLLM reads it (transformers_utils/configs/speculators/algos.py:16-50); other configs as they are."""
    inner = config.get("transformer_layer_config")
    if not isinstance(inner, dict):
        return dict(config)
    out = dict(inner)
    for k in (
        "draft_vocab_size",
        "target_hidden_size",
        "norm_before_fc",
        "fc_norm",
        "norm_output",
        "eagle_aux_hidden_state_layer_ids",
    ):
        if config.get(k) is not None:
            out[k] = config[k]
    out["norm_before_residual"] = config.get("norm_before_residual", True)
    out["architectures"] = config.get("architectures", inner.get("architectures"))
    return out


def _arch(cfg: Mapping[str, Any]) -> str | None:
    archs = cfg.get("architectures")
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def _resolve_class(release: EngineRelease, cfg: Mapping[str, Any]) -> DrafterClass | None:
    arch = _arch(cfg)
    if release.name == "vllm" and arch == "Eagle3Speculator":
        arch = "Eagle3Qwen3ForCausalLM" if cfg.get("model_type") == "qwen3" else "Eagle3LlamaForCausalLM"
    if release.name == "trtllm" and arch is not None and "draft_vocab_size" in cfg:
        # TensorRT-LLM strips "Eagle3" and puts "EAGLE3" in front (the table's class_resolution)
        arch = "EAGLE3" + arch.replace("Eagle3", "")
    return release.drafter_class(arch)


def _eagle(cfg: Mapping[str, Any]) -> dict[str, Any]:
    got = cfg.get("eagle_config")
    return got if isinstance(got, dict) else {}


def _num_layers(cfg: Mapping[str, Any]) -> int:
    n = cfg.get("num_hidden_layers")
    return n if type(n) is int and n > 0 else 32  # transformers' LlamaConfig default


def _vocab(cfg: Mapping[str, Any]) -> tuple[int | None, int | None]:
    v = cfg.get("vocab_size")
    vd = cfg.get("draft_vocab_size")
    return (v if type(v) is int else None), (vd if type(vd) is int else None)


def _hidden_differs(cfg: Mapping[str, Any]) -> bool:
    t = cfg.get("target_hidden_size")
    return t is not None and t != cfg.get("hidden_size")


# --------------------------------------------------------------------------------------------
# the parameters each class constructs


def _layer_params(prefix: str, first: bool, later_norm_used: str, qk_norm: bool) -> dict[str, _Param]:
    """One Llama-style drafter layer. ``later_norm_used``: the norm a later layer applies to its
    input (SGLang: hidden_norm, vLLM: input_layernorm); the other one exists but is never read."""
    p = {
        f"{prefix}self_attn.qkv_proj.weight": _Param("linear", shards=("q", "k", "v")),
        f"{prefix}self_attn.o_proj.weight": _Param("linear"),
        f"{prefix}mlp.gate_up_proj.weight": _Param("linear", shards=("0", "1")),
        f"{prefix}mlp.down_proj.weight": _Param("linear"),
        f"{prefix}input_layernorm.weight": _Param("rmsnorm"),
        f"{prefix}hidden_norm.weight": _Param("rmsnorm"),
        f"{prefix}post_attention_layernorm.weight": _Param("rmsnorm"),
    }
    if qk_norm:
        p[f"{prefix}self_attn.q_norm.weight"] = _Param("rmsnorm")
        p[f"{prefix}self_attn.k_norm.weight"] = _Param("rmsnorm")
    if not first:
        unused = "hidden_norm" if later_norm_used == "input_layernorm" else "input_layernorm"
        p[f"{prefix}{unused}.weight"] = _Param(
            "rmsnorm", used=False, unused_why=f"a later layer's forward reads {later_norm_used}, never {unused}"
        )
    return p


def _head_params(cfg: Mapping[str, Any], opts: aux_rules.FcOptions, fc: bool, input_norm: bool) -> dict[str, _Param]:
    p: dict[str, _Param] = {"model.embed_tokens.weight": _Param("embedding")}
    if fc:
        p["model.fc.weight"] = _Param("fc")
    if input_norm:
        p["model.input_norm.weight"] = _Param("rmsnorm")
    if opts.fc_norm:
        p |= {f"model.fc_norm.{j}.weight": _Param("rmsnorm") for j in range(opts.num_aux)}
    p["model.norm.weight"] = _Param("rmsnorm")
    if not cfg.get("tie_word_embeddings"):
        p["lm_head.weight"] = _Param("lm_head")
    return p


def _params_sglang_llama(cfg: Mapping[str, Any]) -> dict[str, _Param]:
    opts = aux_rules.fc_options(dict(cfg), "sglang")
    p = _head_params(cfg, opts, True, opts.norm_before_fc)
    if cfg.get("bias"):
        p["model.fc.bias"] = _Param("fc")
    for i in range(_num_layers(cfg)):
        p |= _layer_params(f"model.layers.{i}.", i == 0, "hidden_norm", False)
    p["hot_token_id"] = _Param("d2t")
    return p


def _params_sglang_mla(cfg: Mapping[str, Any]) -> dict[str, _Param]:
    opts = aux_rules.fc_options(dict(cfg), "sglang")
    p = _head_params(cfg, opts, True, False)
    if cfg.get("bias"):
        p["model.fc.bias"] = _Param("fc")
    m = "model.midlayer."
    p |= {
        f"{m}self_attn.fused_qkv_a_proj_with_mqa.weight": _Param("linear", shards=("q", "kv")),
        f"{m}self_attn.q_a_layernorm.weight": _Param("rmsnorm"),
        f"{m}self_attn.q_b_proj.weight": _Param("linear"),
        f"{m}self_attn.kv_a_layernorm.weight": _Param("rmsnorm"),
        f"{m}self_attn.kv_b_proj.weight": _Param("linear"),
        f"{m}self_attn.o_proj.weight": _Param("linear"),
        f"{m}mlp.gate_up_proj.weight": _Param("linear", shards=("0", "1")),
        f"{m}mlp.down_proj.weight": _Param("linear"),
        f"{m}input_layernorm.weight": _Param("rmsnorm"),
        f"{m}hidden_norm.weight": _Param("rmsnorm"),
        f"{m}post_attention_layernorm.weight": _Param("rmsnorm"),
        "hot_token_id": _Param("d2t"),
    }
    return p


def _params_vllm(cfg: Mapping[str, Any], qwen3: bool) -> dict[str, _Param]:
    opts = aux_rules.fc_options(dict(cfg), "vllm")
    use_aux = _eagle(cfg).get("use_aux_hidden_state", True)
    p = _head_params(
        cfg,
        opts if use_aux else aux_rules.FcOptions(0, "", False, False, False),
        bool(use_aux),
        bool(use_aux) and opts.norm_before_fc,
    )
    p.pop("lm_head.weight", None)
    p["lm_head.weight"] = _Param("lm_head")  # ParallelLMHead always (llama_eagle3.py:329-334)
    for i in range(_num_layers(cfg)):
        p |= _layer_params(f"model.layers.{i}.", i == 0, "input_layernorm", qwen3)
    v, vd = _vocab(cfg)
    if vd is not None and vd != v:
        p["draft_id_to_target_id"] = _Param("d2t")
    return p


#: what transformers' DeepseekV2Config / DeepseekV3Config hold for a key the drafter's config leaves
#: out (transformers 5.19, vLLM 0.32's: models/deepseek_v2/configuration_deepseek_v2.py:79 and 107,
#: models/deepseek_v3/configuration_deepseek_v3.py:86 and 94); vLLM builds the MLA drafter from them
_MLA_LAYERS_DEFAULT = {"deepseek_v2": 32, "deepseek_v3": 61}
_MLA_Q_LORA_DEFAULT = 1536


def _mla_num_layers(cfg: Mapping[str, Any]) -> int:
    n = cfg.get("num_hidden_layers")
    return n if type(n) is int and n > 0 else _MLA_LAYERS_DEFAULT.get(str(cfg.get("model_type")), 32)


def _mla_layer_params(prefix: str, first: bool, q_lora: bool) -> dict[str, _Param]:
    """One vLLM MLA drafter layer (deepseek_eagle3.py:38-148 on deepseek_v2.py's MLA attention
    and MLP): fused q_a/kv_a when q_lora_rank is set, else kv_a_proj_with_mqa and q_proj."""
    a = f"{prefix}self_attn."
    if q_lora:
        p = {
            f"{a}fused_qkv_a_proj.weight": _Param("linear", shards=("0", "1")),
            f"{a}q_a_layernorm.weight": _Param("rmsnorm"),
            f"{a}q_b_proj.weight": _Param("linear"),
        }
    else:
        p = {f"{a}kv_a_proj_with_mqa.weight": _Param("linear"), f"{a}q_proj.weight": _Param("linear")}
    p |= {
        f"{a}kv_a_layernorm.weight": _Param("rmsnorm"),
        f"{a}kv_b_proj.weight": _Param("linear"),
        f"{a}o_proj.weight": _Param("linear"),
        f"{prefix}mlp.gate_up_proj.weight": _Param("linear", shards=("0", "1")),
        f"{prefix}mlp.down_proj.weight": _Param("linear"),
        f"{prefix}input_layernorm.weight": _Param("rmsnorm"),
        f"{prefix}post_attention_layernorm.weight": _Param("rmsnorm"),
        f"{prefix}hidden_norm.weight": _Param("rmsnorm"),
    }
    if not first:
        p[f"{prefix}hidden_norm.weight"] = _Param(
            "rmsnorm", used=False, unused_why="a later layer's forward reads input_layernorm, never hidden_norm"
        )
    return p


def _params_vllm_mla(cfg: Mapping[str, Any]) -> dict[str, _Param]:
    opts = aux_rules.fc_options(dict(cfg), "vllm")  # fc_norm and its count as deepseek_eagle3.py:189-220 reads them
    q_lora = cfg.get("q_lora_rank", _MLA_Q_LORA_DEFAULT) is not None
    p: dict[str, _Param] = {"model.embed_tokens.weight": _Param("embedding")}
    for i in range(_mla_num_layers(cfg)):
        p |= _mla_layer_params(f"model.layers.{i}.", i == 0, q_lora)
    p["model.fc.weight"] = _Param("fc")
    if opts.fc_norm:
        p |= {f"model.fc_norm.{j}.weight": _Param("rmsnorm") for j in range(opts.num_aux)}
    p["model.norm.weight"] = _Param("rmsnorm")
    p["lm_head.weight"] = _Param("lm_head")  # ParallelLMHead always (deepseek_eagle3.py:299-303)
    v, vd = _vocab(cfg)
    if vd is not None and vd != v:
        p["draft_id_to_target_id"] = _Param("d2t")
    return p


def _params_trtllm(cfg: Mapping[str, Any]) -> dict[str, _Param]:
    opts = aux_rules.fc_options(dict(cfg), "vllm")
    eagle = _eagle(cfg)
    p = _head_params(cfg, opts, True, bool(eagle.get("norm_before_fc", False)))
    p["lm_head.weight"] = _Param("lm_head")
    n = _num_layers(cfg)
    regular = bool(eagle.get("next_layer_regular", True))
    for i in range(n):
        prefix = "model.midlayer." if n == 1 else f"model.midlayer.{i}."
        layer = _layer_params(prefix, True, "hidden_norm", False)
        if i > 0 and regular:
            layer.pop(f"{prefix}input_layernorm.weight")
        p |= layer
    v, vd = _vocab(cfg)
    if vd is not None and vd != v:
        p["model.d2t"] = _Param("d2t")
    return p


# --------------------------------------------------------------------------------------------
# each loader's name handling, after the engines' load_weights


def _stack(name: str, rules: LoaderRules) -> tuple[str, str | None]:
    for param_part, file_part, shard in rules.stacked:
        if file_part in name:
            return name.replace(file_part, param_part), shard
    return name, None


def _map_sglang_llama(name: str, params: Mapping[str, _Param], rules: LoaderRules) -> _Mapped:
    applied: list[str] = []
    for old, new in rules.substr_renames:
        if old in name:
            name = name.replace(old, new)
            applied.append(f"{old} -> {new}")
    if "d2t" in name:
        return _Mapped("hot_token_id", None, (*applied, "d2t -> hot_token_id = d2t + arange(Vd)"))
    if any(s in name for s in rules.skip):
        return _Mapped(None, None, tuple(applied), "skipped by name (t2d)")
    stacked, shard = _stack(name, rules)
    key = stacked if stacked in params else f"model.{stacked}"
    if key in params:
        return _Mapped(key, shard, tuple(applied))
    return _Mapped(None, None, tuple(applied), f"no parameter {key!r} in the class: skipped without a word")


def _map_sglang_mla(name: str, params: Mapping[str, _Param], rules: LoaderRules) -> _Mapped:
    if name == "d2t" or name.endswith(".d2t"):
        return _Mapped("hot_token_id", None, ("d2t -> hot_token_id = d2t + arange(Vd)",))
    if name == "t2d" or name.endswith(".t2d"):
        return _Mapped(None, None, (), "skipped by name (t2d)")
    applied: list[str] = []
    mapped = re.sub(r"^layers\.0\.", "midlayer.", name)
    if mapped != name:
        applied.append("layers.0. -> midlayer.")
    if not mapped.startswith("lm_head."):
        mapped = "model." + mapped
    stacked, shard = _stack(mapped, rules)
    if stacked in params:
        return _Mapped(stacked, shard, tuple(applied))
    return _Mapped(None, None, tuple(applied), f"no parameter {mapped!r}: skipped with a log warning")


def _map_vllm(name: str, params: Mapping[str, _Param], rules: LoaderRules, cfg: Mapping[str, Any]) -> _Mapped:
    if "t2d" in name:
        return _Mapped(None, None, (), "skipped by name (t2d)")
    applied: list[str] = []
    if "d2t" in name:
        name = name.replace("d2t", "draft_id_to_target_id")
        applied.append("d2t -> draft_id_to_target_id")
    elif "mask_hidden" in name:
        return _Mapped(None, None, (), "mask_hidden without parallel drafting: skipped with a log warning")
    elif "lm_head" not in name:
        name = "model." + name
    opts = aux_rules.fc_options(dict(cfg), "vllm")
    if "input_norm." in name and not opts.norm_before_fc:
        return _Mapped(None, None, tuple(applied), "input_norm. mapped to nothing: norm_before_fc is off")
    if "fc." in name and not _eagle(cfg).get("use_aux_hidden_state", True):
        return _Mapped(None, None, tuple(applied), "fc. mapped to nothing: use_aux_hidden_state is off")
    return _vllm_lookup(name, applied, params, rules)


def _vllm_lookup(name: str, applied: list[str], params: Mapping[str, _Param], rules: LoaderRules) -> _Mapped:
    """AutoWeightsLoader's part of a vLLM load: rotary tensors dropped, the mapper's renames and
    stacking, then the parameter, an ignored suffix, or a ValueError."""
    if any(s in name for s in rules.skip):
        return _Mapped(None, None, tuple(applied), "rotary tensor: dropped by AutoWeightsLoader")
    for old, new in rules.substr_renames:
        if old in name:
            name = name.replace(old, new)
            applied.append(f"{old} -> {new}")
    stacked, shard = _stack(name, rules)
    if stacked in params:
        return _Mapped(stacked, shard, tuple(applied))
    if rules.ignored_suffixes and stacked.endswith(rules.ignored_suffixes):
        return _Mapped(None, None, tuple(applied), f"no parameter {stacked!r}; an unexpected suffix is ignored")
    return _Mapped(None, None, tuple(applied), "refused")


def _map_vllm_mla(name: str, params: Mapping[str, _Param], rules: LoaderRules) -> _Mapped:
    """Eagle3DeepseekV2ForCausalLM.load_weights: t2d skipped, d2t renamed, model. in front of all
    but lm_head; no input_norm, fc or mask_hidden cases (a name with no parameter raises)."""
    if "t2d" in name:
        return _Mapped(None, None, (), "skipped by name (t2d)")
    applied: list[str] = []
    if "d2t" in name:
        name = name.replace("d2t", rules.d2t_to)
        applied.append(f"d2t -> {rules.d2t_to}")
    elif "lm_head" not in name:
        name = rules.prefix + name
    return _vllm_lookup(name, applied, params, rules)


def _map_trtllm(name: str, params: Mapping[str, _Param], rules: LoaderRules, cfg: Mapping[str, Any]) -> _Mapped:
    applied: list[str] = []
    if _num_layers(cfg) == 1:
        new = re.sub(r"^layers\.0\.", "midlayer.", name)
    else:
        new = re.sub(r"^layers\.(\d+)\.", r"midlayer.\1.", name)
    if new != name:
        applied.append("layers.N. -> midlayer[.N].")
    name = new if "lm_head" in new else "model." + new
    stacked, shard = _stack(name, rules)
    if stacked in params:
        return _Mapped(stacked, shard, tuple(applied))
    return _Mapped(None, None, tuple(applied), f"no parameter {stacked!r} (assumed skipped: not read)")


def _rules(dc: DrafterClass, release: EngineRelease) -> LoaderRules:
    return release.loaders.value[dc.loader if dc.loader in release.loaders.value else next(iter(release.loaders.value))]


def _mapper(dc: DrafterClass, release: EngineRelease, cfg: Mapping[str, Any]) -> Any:
    rules = _rules(dc, release)
    if dc.loader == "sglang_llama":
        return lambda n, p: _map_sglang_llama(n, p, rules)
    if dc.loader == "sglang_mla":
        return lambda n, p: _map_sglang_mla(n, p, rules)
    if dc.loader in ("vllm_llama", "vllm_qwen3"):
        return lambda n, p: _map_vllm(n, p, rules, cfg)
    if dc.loader == "vllm_mla":
        return lambda n, p: _map_vllm_mla(n, p, rules)
    return lambda n, p: _map_trtllm(n, p, rules, cfg)


def _params_for(dc: DrafterClass, cfg: Mapping[str, Any]) -> dict[str, _Param]:
    if dc.loader == "sglang_llama":
        return _params_sglang_llama(cfg)
    if dc.loader == "sglang_mla":
        return _params_sglang_mla(cfg)
    if dc.loader in ("vllm_llama", "vllm_qwen3"):
        return _params_vllm(cfg, dc.loader == "vllm_qwen3")
    if dc.loader == "vllm_mla":
        return _params_vllm_mla(cfg)
    return _params_trtllm(cfg)


# --------------------------------------------------------------------------------------------
# the plan


def _fate_of(t: str, m: _Mapped, params: Mapping[str, _Param]) -> TensorPlan:
    rule = "; ".join(m.rules) or None
    if m.param is None:
        fate = "refused" if m.why == "refused" else "dropped"
        why = "the loader raises: no module or parameter of that name" if fate == "refused" else m.why
        return TensorPlan(t, fate, None, None, rule, why)
    p = params[m.param]
    if not p.used:
        why = f"loaded into {m.param}, which the forward never reads ({p.unused_why}): its value has no effect"
        return TensorPlan(t, "dropped", m.param, m.shard, rule, why)
    return TensorPlan(t, "renamed" if m.rules else "loaded", m.param, m.shard, rule)


def _mla_pairs(tensors: list[TensorPlan]) -> list[TensorPlan]:
    """SGLang's MLA loader fuses q_a_proj with kv_a_proj_with_mqa only when both are present
    (kimi_k25_eagle3.py:464-489); a lone one is cached and never loaded."""
    got: dict[str, set[str]] = {}
    for t in tensors:
        if t.param and t.param.endswith("fused_qkv_a_proj_with_mqa.weight") and t.shard:
            got.setdefault(t.param, set()).add(t.shard)
    out = []
    for t in tensors:
        if t.param in got and got[t.param] != {"q", "kv"}:
            t = TensorPlan(t.name, "dropped", t.param, t.shard, t.rule, "its q_a/kv_a partner is missing: never loaded")
        out.append(t)
    return out


def _shared(release: EngineRelease, cfg: Mapping[str, Any], in_file: set[str], pname: str) -> str | None:
    """'shared' or 'overwritten' when the worker replaces this parameter with the target's, else None."""
    rule = release.sharing.value.get("embed_tokens" if "embed_tokens" in pname else "lm_head")
    _, vd = _vocab(cfg)
    from_target_head = vd is None and not cfg.get("tie_word_embeddings")
    present = pname in in_file
    if rule == "target_unless_hidden_differs":
        hit = from_target_head or not _hidden_differs(cfg)
    elif rule == "target_unless_hidden_differs_param":
        hit = not _hidden_differs(cfg)
    elif rule == "target_when_no_draft_vocab":
        hit = from_target_head
    elif rule in ("target_when_absent_or_identical", "target_when_absent"):
        hit = not present and not ("embed_tokens" in pname and _hidden_differs(cfg))
    else:
        hit = not present
    if not hit:
        return None
    return "overwritten" if present else "shared"


def _param_plans(
    release: EngineRelease, cfg: Mapping[str, Any], params: Mapping[str, _Param], tensors: list[TensorPlan]
) -> list[ParamPlan]:
    shards: dict[str, set[str]] = {}
    for t in tensors:
        if (
            t.param
            and t.fate in ("loaded", "renamed")
            or (t.param and t.fate == "dropped" and not params[t.param].used)
        ):
            shards.setdefault(t.param or "", set()).add(t.shard or "")
    init = release.init.value
    out = []
    for name, p in params.items():
        got = shards.get(name)
        source, reason = ("file", None) if got else ("init", None)
        if got and p.shards and not set(p.shards) <= got:
            missing = sorted(set(p.shards) - got)
            reason = f"shards {', '.join(missing)} are not in the file and stay at init ({init.get(p.kind)})"
        if p.kind in ("embedding", "lm_head"):
            source = _shared(release, cfg, set(shards), name) or source
            if source == "overwritten":
                reason = "loaded from the file, then replaced by the target's at start-up"
        why = reason or (p.unused_why if not p.used else None)
        out.append(ParamPlan(name, source, p.kind, init.get(p.kind) if source == "init" else None, p.used, why))
    return out


def _derived(rules: LoaderRules, params: list[ParamPlan]) -> list[ParamPlan]:
    """The parameters the engine makes after loading from a parameter of the class (the table's
    ``derived`` rules), each naming the one it is made from."""
    out = []
    for p in params:
        for new, old, how in rules.derived:
            if p.name.endswith(old):
                out.append(ParamPlan(p.name[: -len(old)] + new, "overwritten", p.kind, reason=how, derived_from=p.name))
    return out


def _unbuildable(
    release: EngineRelease, dc: DrafterClass | None, config: Mapping[str, Any] | None, cfg: Mapping[str, Any]
) -> tuple[str, str] | None:
    """Why no class is built at all (the refusal, and each tensor's reason), or None: no drafter class,
    or a config the one guard (formats.config.config_problems) refuses. The guard runs before any size
    is read: a class is built from num_hidden_layers, num_aux_hidden_states and the rest, and an
    unbounded one would allocate without end. ``cfg`` is ``config`` flattened (a speculators config)."""
    if dc is None:
        arch = _arch(cfg)
        msg = (
            f"{release.spec} has no EAGLE-3 drafter class for architectures {[arch] if arch else []} "
            f"(how it picks the class: {release.class_resolution.value})"
        )
        return msg, "no drafter class"
    probs = config_problems(dict(config or {})) or config_problems(dict(cfg))
    if not probs:
        return None
    where, why = next(iter(probs.items()))
    more = f" (and {len(probs) - 1} more)" if len(probs) > 1 else ""
    return f"config {where} {why}{more}: not a usable config, no class is built", f"unusable config {where}"


def load_plan(tensor_names_and_shapes: Headers, config: Mapping[str, Any], release: EngineRelease) -> LoadPlan:
    """What ``release`` builds from a drafter with these tensors ({name: (shape, safetensors dtype)})
    and this config.json: class, tensor fates, parameter sources, casts and switches."""
    cfg = _flat_config(config or {})
    dc = _resolve_class(release, cfg)
    plan = LoadPlan(
        release.name,
        release.version,
        dc.cls if dc else None,
        dc.source if dc else release.class_resolution.source,
        verified=release.loaders.verified,
    )
    why = _unbuildable(release, dc, config, cfg)
    if why is not None:
        plan.refused.append(why[0])
        plan.tensors = [TensorPlan(n, "refused", reason=why[1]) for n in tensor_names_and_shapes]
        return plan
    assert dc is not None  # _unbuildable says why when no class is built
    if dc.loader == "unmodelled":
        plan.verified = False
        plan.notes.append(f"{dc.cls}'s load_weights ({dc.module}) is not modelled: no tensor fates or parameters")
        return plan
    if dc.loader == "sglang_mla" and _num_layers(cfg) != 1:
        plan.refused.append("Eagle3DeepseekV2ForCausalLM raises ValueError: EAGLE3 currently only supports 1 layer")
    params = _params_for(dc, cfg)
    mapper = _mapper(dc, release, cfg)
    tensors = [_fate_of(n, mapper(n, params), params) for n in tensor_names_and_shapes]
    if dc.loader == "sglang_mla":
        tensors = _mla_pairs(tensors)
    plan.tensors = tensors
    plan.params = _param_plans(release, cfg, params, tensors)
    plan.params += _derived(_rules(dc, release), plan.params)
    plan.refused += [
        f"{t.name}: {release.spec}'s loader raises ValueError (no such parameter)"
        for t in tensors
        if t.fate == "refused"
    ]
    plan.casts = _casts(release, cfg, tensor_names_and_shapes, tensors)
    plan.dtypes = dtype_entries(
        release,
        [
            (t.name, t.param, params[t.param].kind, tensor_names_and_shapes[t.name][1])
            for t in tensors
            if t.fate in ("loaded", "renamed") and t.param is not None
        ],
    )
    plan.switches = _switches(release, dc, cfg, tensor_names_and_shapes)
    quant_load.apply(plan, release, config or {}, tensor_names_and_shapes)  # each scale's fate, FP8 weights' dtypes
    if "num_hidden_layers" not in cfg:
        n = _mla_num_layers(cfg) if dc.loader == "vllm_mla" else 32
        plan.notes.append(f"num_hidden_layers is missing: the class builds transformers' default, {n} layers")
    return plan


def holds_d2t(config: Mapping[str, Any], release: EngineRelease) -> bool | None:
    """Whether the class ``release`` builds for this config.json holds a vocabulary map that d2t
    loads into (SGLang's ``hot_token_id`` always; vLLM's and TensorRT-LLM's only for a reduced draft
    vocab). None: no class, or one whose loading is not modelled. Without one, draft slot i is
    target token i, and an export that leaves d2t out must put lm_head's rows in target order."""
    cfg = _flat_config(config or {})
    dc = _resolve_class(release, cfg)
    if dc is None or dc.loader == "unmodelled":
        return None
    return any(p.kind == "d2t" for p in _params_for(dc, cfg).values())


_FLOAT = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
_CFG_DTYPE = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "half": "float16"}


def _serving_dtype(release: EngineRelease, cfg: Mapping[str, Any]) -> str:
    """The dtype the drafter's weights are cast to under ``--dtype auto``. SGLang: the config's
    torch_dtype, float32 or missing served as float16 (seen on 0.5.17, eagle3-facts.md); vLLM and
    TensorRT-LLM: the target's dtype, which the drafter's files do not say."""
    got = cfg.get("torch_dtype") or cfg.get("dtype")
    if release.name == "sglang":
        d = _CFG_DTYPE.get(str(got), "float16")
        return "float16" if d == "float32" else d
    return "the target's dtype"


def _casts(
    release: EngineRelease, cfg: Mapping[str, Any], headers: Headers, tensors: list[TensorPlan]
) -> list[dict[str, str]]:
    serving = _serving_dtype(release, cfg)
    d2t_to = {"sglang": "int64", "vllm": "int64", "trtllm": "int32"}.get(release.name, "int64")
    out = []
    for t in tensors:
        if t.fate not in ("loaded", "renamed") or t.param is None:
            continue
        dtype = headers[t.name][1]
        if "d2t" in t.name:
            if dtype != {"int64": "I64", "int32": "I32"}[d2t_to]:
                out.append({"tensor": t.name, "param": t.param, "from": dtype, "to": d2t_to})
        elif dtype in _FLOAT and _FLOAT[dtype] != serving and (release.name == "sglang" or dtype == "F32"):
            out.append({"tensor": t.name, "param": t.param, "from": _FLOAT[dtype], "to": serving})
    return out


#: 8-bit float weights: the quantized-drafters issue decides what each engine makes of them (their scales,
#: the quantization config); until then a plan names them instead of passing them as floats
UNCHECKED_DTYPES = ("F8_E4M3", "F8_E5M2")


def dtype_entries(release: EngineRelease, loads: Sequence[tuple[str, str | None, str, str]]) -> list[dict[str, Any]]:
    """The loads whose tensor dtype the parameter does not take, in ``release``'s table
    (``param_dtypes``): each (tensor, parameter, parameter kind, safetensors dtype) outside what that
    kind takes becomes {tensor, param, dtype, takes, how, verdict}; ``verdict`` is ``wrong``, or
    ``unchecked`` for an 8-bit float (:data:`UNCHECKED_DTYPES`). A kind the table does not list is
    not checked (TensorRT-LLM's table has none: not read)."""
    table = release.param_dtypes.value
    out = []
    for tensor, param, kind, dtype in loads:
        if kind not in table or dtype in table[kind][0]:
            continue
        takes, how = table[kind]
        verdict = "unchecked" if dtype in UNCHECKED_DTYPES else "wrong"
        out.append(
            {"tensor": tensor, "param": param, "dtype": dtype, "takes": list(takes), "how": how, "verdict": verdict}
        )
    return out


def dtype_message(entry: Mapping[str, Any], where: str) -> tuple[str, str, str]:
    """(severity, message, consequence) of one :func:`dtype_entries` entry, ``where`` naming the release."""
    into = f" into {entry['param']}" if entry.get("param") else ""
    if entry["verdict"] == "unchecked":
        return (
            "warning",
            f"{entry['tensor']} is {entry['dtype']}, an 8-bit float: ckpttools does not check quantized drafters "
            f"yet, and {where} loads it{into} as {entry['how']}",
            "right only if the weights need no scale; a quantized drafter's scales are not applied by this load",
        )
    return (
        "error",
        f"{entry['tensor']} is {entry['dtype']}, but {where} loads it{into}, which takes {', '.join(entry['takes'])}",
        str(entry["how"]),
    )


def _switch(option: str, on: bool, present: list[str], consequence: str) -> dict[str, Any]:
    return {
        "option": option,
        "on": on,
        "weights_present": bool(present),
        "tensors": present,
        "consequence": consequence,
    }


def _option_tensors(headers: Headers) -> dict[str, list[str]]:
    """The files' tensors of each option: fc_norm.N (or aux_norm_*), input_norm, fc.bias, q/k norms."""
    canon = {n: canon_names.canonical_name(n)[0] for n in headers}
    return {
        "fc_norm": [n for n, c in canon.items() if re.fullmatch(r"fc_norm\.\d+\.weight", c)],
        "norm_before_fc": [n for n, c in canon.items() if c == "input_norm.weight"],
        "bias": [n for n, c in canon.items() if c == "fc.bias"],
        "qk_norm": [n for n in headers if names.QK_NORM.match(n)],
    }


def _option_switches(release: EngineRelease, dc: DrafterClass, cfg: Mapping[str, Any]) -> dict[str, bool]:
    """Each option's switch as this class reads it (see the table's eagle31_options)."""
    opts = aux_rules.fc_options(dict(cfg), "sglang" if release.name == "sglang" else "vllm")
    before = opts.norm_before_fc if release.name != "trtllm" else bool(_eagle(cfg).get("norm_before_fc", False))
    return {
        "fc_norm": opts.fc_norm,
        "norm_before_fc": before and dc.loader not in ("sglang_mla", "vllm_mla"),
        "bias": bool(cfg.get("bias")) and release.name != "vllm",  # vLLM's fc is built without a bias
        "qk_norm": dc.loader == "vllm_qwen3",
    }


_SWITCH_TEXT = {
    "fc_norm": (
        "per-aux-state fc norms are in the files but the class builds none: dropped, fc sees un-normed states",
        "per-aux-state fc norms are switched on but not in the files: they start at ones",
    ),
    "norm_before_fc": (
        "the norm over the concatenated aux states is in the files but the class builds none: dropped",
        "the norm over the concatenated aux states is switched on but not in the files: ones",
    ),
    "bias": (
        "fc.bias is in the files but the class's fc has no bias: dropped",
        "fc has a bias but the files have no fc.bias: it stays at init",
    ),
    "qk_norm": (
        "per-head q/k norms are in the files but the class has none",
        "the class has per-head q/k norms but the files have none: they start at ones",
    ),
}


def _switches(
    release: EngineRelease, dc: DrafterClass, cfg: Mapping[str, Any], headers: Headers
) -> list[dict[str, Any]]:
    """Options whose weights are present while the switch is off, or the other way round."""
    present = _option_tensors(headers)
    on = _option_switches(release, dc, cfg)
    out = []
    for option, got in present.items():
        if bool(got) != on[option]:
            out.append(_switch(option, on[option], got, _SWITCH_TEXT[option][0 if got else 1]))
    return out


# --------------------------------------------------------------------------------------------
# findings

_INIT_CONSEQUENCE = {
    "rmsnorm": "the norm keeps its initial ones instead of the trained scale: the drafter computes something it "
    "was not trained to, with no error",
    "lm_head": "the draft head is uninitialized memory: draft tokens are garbage and accept length falls to about 1.00",
    "linear": "the projection is uninitialized memory: drafts are garbage, accept length about 1.00",
    "fc": "fc is random: drafts are garbage, accept length about 1.00",
    "embedding": "the drafter's embedding is uninitialized and not shared: drafts are garbage",
    "d2t": "no vocabulary map: ",
}


def _d2t_consequence(plan: LoadPlan) -> str:
    if plan.engine == "sglang":
        return "no d2t: draft ids are used as target ids, right only when the draft vocab is the full vocab"
    if plan.engine == "vllm":
        return "no d2t: draft_id_to_target_id stays zeros, so draft slot i means target token i (the first Vd ids)"
    return "no d2t: the int32 map is uninitialized memory"


def _finding(severity: str, code: str, message: str, consequence: str, **where: Any) -> dict[str, Any]:
    return {"severity": severity, "code": code, **where, "message": message, "consequence": consequence}


def _tensor_findings(plan: LoadPlan, where: str) -> list[dict[str, Any]]:
    by_param = {p.name: p for p in plan.params}
    out = []
    for t in plan.tensors:
        if t.fate != "dropped" or t.name.endswith("t2d"):  # t2d: no engine reads it, by design
            continue
        if canon_names.is_training_only(t.name):
            out.append(
                _finding(
                    "info",
                    "tensor_dropped",
                    f"{where} drops {t.name}, a training-only tensor",
                    "none",
                    tensor=t.name,
                    param=None,
                )
            )
            continue
        severity, text = _dropped_consequence(t, by_param)
        out.append(
            _finding(
                severity, "tensor_dropped", f"{where} drops {t.name}: {t.reason}", text, tensor=t.name, param=t.param
            )
        )
    return out


def _param_findings(plan: LoadPlan, where: str) -> list[dict[str, Any]]:
    out = []
    for p in plan.params:
        if p.source == "init" and p.used:
            text = _d2t_consequence(plan) if p.kind == "d2t" else _INIT_CONSEQUENCE.get(p.kind, "left at init")
            msg = f"{where} leaves {p.name} at its initial value ({p.init}): no tensor loads it"
            out.append(
                _finding(
                    "warning" if p.kind == "d2t" else "error", "param_at_init", msg, text, param=p.name, init=p.init
                )
            )
        elif p.source == "overwritten" and p.derived_from is None:  # derived: made from loaded weights, no loss
            msg = f"{where} loads {p.name} from the file, then replaces it with the target's"
            text = "the drafter's own tensor is discarded; right only if it equals the target's"
            out.append(_finding("warning", "param_overwritten", msg, text, param=p.name))
        elif p.reason and p.source == "file" and p.used and "shards" in p.reason:
            text = "part of the fused projection is uninitialized: drafts are garbage"
            out.append(_finding("error", "param_partly_init", p.reason, text, param=p.name))
    return out


def plan_findings(plan: LoadPlan) -> list[dict[str, Any]]:
    """Every silent outcome of the plan, with its consequence: each dropped tensor, each parameter
    left at its initial value, each one overwritten after load; plus refusals and switch mismatches.

    Each finding: ``severity`` (error, warning, info), ``code`` (load_refused, tensor_dropped,
    param_at_init, param_overwritten, param_partly_init, tensor_dtype, tensor_dtype_unchecked,
    switch_mismatch), the tensor, param or
    option concerned, ``message`` and ``consequence``."""
    where = f"{plan.engine}=={plan.release}"
    out = [_finding("error", "load_refused", m, "the server does not start with this drafter") for m in plan.refused]
    out += _tensor_findings(plan, where)
    out += _param_findings(plan, where)
    for d in plan.dtypes:
        severity, message, consequence = dtype_message(d, where)
        code = "tensor_dtype" if d["verdict"] == "wrong" else "tensor_dtype_unchecked"
        out.append(_finding(severity, code, message, consequence, tensor=d["tensor"], param=d["param"]))
    for s in plan.switches:
        state = f"{'on' if s['on'] else 'off'} but its weights are {'present' if s['weights_present'] else 'absent'}"
        out.append(
            _finding("warning", "switch_mismatch", f"{s['option']} is {state}", s["consequence"], option=s["option"])
        )
    return out


def _dropped_consequence(t: TensorPlan, by_param: Mapping[str, ParamPlan]) -> tuple[str, str]:
    """Severity and consequence of a dropped tensor. For a later layer's norm loaded into the norm
    the forward never reads: an error naming the norm left at init in its place, or, when the
    file also has the norm that is read, a warning (vLLM's and speculators' layers carry both)."""
    lost = "its trained values never reach the model; "
    m = re.match(r"^(.*layers\.\d+\.)(input_layernorm|hidden_norm)\.weight$", t.param or "")
    if m:
        other = f"{m.group(1)}{'hidden_norm' if m.group(2) == 'input_layernorm' else 'input_layernorm'}.weight"
        p = by_param.get(other)
        if p is not None and p.source == "init":
            return "error", lost + (
                f"{other}, the norm this layer applies to its input, stays at {p.init}: the layer runs with an "
                "untrained norm and drafts garbage, without a warning (seen on SGLang 0.5.17: 2 of 135 drafts "
                "accepted)"
            )
        if p is not None and p.source == "file":
            return "warning", (
                f"none if it was unused in training too: the layer reads {other}, which the file has; if the "
                "drafter was trained reading this norm, the layer runs with the wrong one"
            )
    return "error", lost + "acceptance drops without an error"
