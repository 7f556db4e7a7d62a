"""validate's config checks: a drafter's config.json on its own (:func:`check_config`): the schema,
field types, the class an engine builds, MLA's and AMX's size limits, the fields engines read, the
dtype. The schema and type helpers here serve the target checks too."""

from __future__ import annotations

from typing import Any

from ckpttools.engines.claims import claim
from ckpttools.engines.engine import engine_for
from ckpttools.engines.claims import arch as engine_arch
from ckpttools.engines.claims import archs as served_archs
from ckpttools.engines.config_facts import ConfigFacts, config_facts
from ckpttools.engines.flavor import SPECULATORS_ARCHS, fixable_kind
from ckpttools.formats.config import config_problems, default_num_layers
from ckpttools.engines.aux_rules import LATER_LAYER_NORM
from ckpttools.ops.validate_report import Finding, schema

__all__ = ["bom_findings", "check_config", "type_findings", "schema_findings", "sglang_said"]


def _arch_message(arch: str) -> str:
    """Why SGLang will not build its drafter from this ``architectures[0]`` (engines/claims.py)."""
    kind = fixable_kind(arch) or ("speculators" if arch in SPECULATORS_ARCHS else None)
    key = {"plain_llama": "arch.plain_llama", "vllm_name": "arch.vllm_name", "speculators": "arch.speculators"}
    if kind in key:
        return claim("sglang:" + key[kind])
    return f"{arch!r} is not an EAGLE-3 class SGLang knows: it will not load as a drafter"


def type_findings(cfg: dict[str, Any], fid: str, prefix: str, seen: set[str]) -> list[Finding]:
    """A finding for each field of the wrong type or an implausible value (not already reported)."""
    return [
        Finding(
            fid,
            "error",
            where,
            f"{prefix}{where.removeprefix('$.')} {why}",
            "fix the value in config.json; it is not used until then",
        )
        for where, why in config_problems(cfg).items()
        if where not in seen
    ]


def check_config(cfg: dict[str, Any], engine: str = "sglang") -> list[Finding]:
    """The drafter's config.json on its own: schema, types, the class, and the fields engines read."""
    return config_findings(config_facts(cfg), engine)


def config_findings(f: ConfigFacts, engine: str) -> list[Finding]:
    """:func:`check_config` of a config read once by the caller (:func:`~ckpttools.engines.config_facts.config_facts`)."""
    cfg = f.config
    out = schema_findings(cfg, "eagle3-drafter-config.schema.json", "config.schema", "", _CONFIG_SCHEMA_FIX)
    out += type_findings(cfg, "config.type", "", {x.location for x in out})
    out += _draft_vocab_finding(f.e)
    out += _architecture_findings(f, engine)
    out += _field_findings(f, engine)
    out += _dtype_findings(f.e, engine)
    return out


def bom_findings(source: Any, engine: str, whose: str = "") -> list[Finding]:
    """``source``'s config.json (the drafter's, or the target's: ``whose="target"``) on disk starting with
    a UTF-8 byte-order mark: ckpttools reads past it, the engine's reader refuses it (engines/claims.py:
    ``config.bom``). An error: the server does not start. ``validate --fix`` and ``export`` write it anew."""
    from ckpttools.io.checkpoint import local_config_path, starts_with_bom

    path = local_config_path(source)
    if path is None or not starts_with_bom(path):
        return []
    msg = f"starts with a UTF-8 byte-order mark: {claim(engine + ':config.bom')}"
    fix = "save config.json as UTF-8 without the mark"
    fix += " (ckpt validate --fix does)" if not whose else ""
    return [
        Finding(
            f"{whose or 'config'}.bom", "error", str(path), f"the target's config.json {msg}" if whose else msg, fix
        )
    ]


def sglang_said(engine: str) -> str:
    """What a finding about SGLang's behaviour adds when validate checks another engine's reading."""
    return engine_for(engine).sglang_said()


_CONFIG_SCHEMA_FIX = "fix config.json to match schemas/eagle3-drafter-config.schema.json"


def schema_findings(cfg: dict[str, Any], schema_name: str, fid: str, prefix: str, fix: str) -> list[Finding]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema(schema_name))
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    return [Finding(fid, "error", e.json_path, prefix + e.message, fix) for e in _explained(errors, cfg)]


def _explained(errors: list[Any], cfg: dict[str, Any]) -> list[Any]:
    """A top-level anyOf (the flat layout, or the speculators one with the layer fields nested under
    transformer_layer_config) as the errors of the layout this config follows, not one opaque line."""
    out = []
    for e in errors:
        if e.validator != "anyOf" or list(e.absolute_path) or not e.context:
            out.append(e)
            continue
        nested = 1 if "transformer_layer_config" in cfg and "speculators_config" in cfg else 0
        if isinstance(cfg.get("text_config"), dict):  # a multimodal wrapper: the target schema's layout
            nested = max(c.schema_path[0] for c in e.context)
        out += [c for c in e.context if c.schema_path[0] == nested] or [e]
    return out


def _draft_vocab_finding(ess: Any) -> list[Finding]:
    if (
        isinstance(ess.draft_vocab_size, int)
        and isinstance(ess.vocab_size, int)
        and ess.draft_vocab_size > ess.vocab_size
    ):
        return [
            Finding(
                "config.draft_vocab_size",
                "error",
                ess.sources["draft_vocab_size"],
                f"draft_vocab_size {ess.draft_vocab_size} is larger than vocab_size {ess.vocab_size}: "
                "a draft vocabulary is a subset of the target's",
                "set draft_vocab_size to lm_head's rows (at most vocab_size)",
            )
        ]
    return []


def _architecture_findings(f: ConfigFacts, engine: str) -> list[Finding]:
    arch = f.arch
    if arch is None:
        return []
    where = "$.architectures[0]"
    if engine_for(engine).wants_own_arch_names:
        if arch in served_archs(engine):
            return []
        msg = claim(f"{engine}:arch.wants", arch=arch)
        return [Finding("config.architectures", "error", where, msg, "ckpt export --format vllm writes it")]
    if arch in served_archs("sglang"):
        return []
    msg = _arch_message(arch)
    fix = "ckpt validate --fix" if fixable_kind(arch) else "ckpt export"
    want = llama = engine_arch("sglang", "sglang_llama")
    n = f.num_hidden_layers[0]
    if fixable_kind(arch) == "vllm_name" and type(n) is int and n > 1:
        msg += claim("sglang:norms.vllm_later", source=LATER_LAYER_NORM["sglang"][1])
        fix = "ckpt export"
    if f.mla:  # a training-side name for an MLA drafter (e.g. TorchSpec's)
        msg += claim("sglang:arch.mla_fields")
        want = engine_arch("sglang", "sglang_mla")
        fix = "the tensor names must then be SGLang's; ckpt inspect lists them"
    return [
        Finding(
            "config.architectures",
            "error",
            where,
            msg,
            f'set architectures to ["{want}"] ({fix} does it)'
            if want == llama
            else f'set architectures to ["{want}"] ({fix})',
        )
    ]


def _mla_findings(f: ConfigFacts, engine: str) -> list[Finding]:
    """What SGLang's MLA drafter class refuses at load (engines/claims.py: ``mla.*``)."""
    archs = f.config.get("architectures")
    if not engine_for(engine).checks_mla_fields or not (
        isinstance(archs, list) and archs[:1] == [engine_arch("sglang", "sglang_mla")]
    ):
        return []
    out: list[Finding] = []
    q, where = f.q_lora_rank
    if where is not None and q is None:
        out.append(
            Finding(
                "config.q_lora_rank",
                "error",
                where,
                claim("sglang:mla.q_lora_null"),
                "set q_lora_rank to the q down-projection's width (q_a_proj's rows)",
            )
        )
    elif where is None:
        out.append(
            Finding(
                "config.q_lora_rank",
                "warning",
                "$.q_lora_rank",
                "q_lora_rank is missing: SGLang reads the config class's default, 1536 (transformers 5.12.1 "
                "configuration_deepseek_v3.py:82), which must be q_a_proj's rows",
                "write q_lora_rank explicitly",
            )
        )
    n, where = f.num_hidden_layers
    if type(n) is int and n != 1:
        out.append(
            Finding(
                "config.mla_num_hidden_layers",
                "error",
                where or "$.num_hidden_layers",
                claim("sglang:mla.layers", n=n),
                "an MLA drafter has one decoder layer: set num_hidden_layers to 1",
            )
        )
    return out


def _amx_mla_findings(f: ConfigFacts, engine: str) -> list[Finding]:
    """An MLA drafter whose sizes vLLM's CPU build refuses on a CPU with AMX (engines/claims.py:
    ``cpu_mla.amx``): a warning, since the same drafter loads on any other CPU."""
    got = f.amx_refusal if engine_for(engine).refuses_amx_mla_sizes else None
    if got is None:
        return []
    msg = claim("vllm:cpu_mla.amx", field=got["field"], value=got["value"], error=got["error"], when=got["when"])
    return [Finding("config.mla_amx_sizes", "warning", got["where"], msg, claim("vllm:cpu_mla.amx_hint"))]


def cpu_attention_findings(f: ConfigFacts, engine: str, whose: str = "") -> list[Finding]:
    """A (non-MLA) drafter, or target (``whose="target"``), whose head size the engine's CPU build does
    not serve (engines/claims.py: ``cpu_attn.head_size``): a warning, since its GPU builds take it."""
    sizes = engine_for(engine).cpu_attention_head_sizes
    got = f.head_size if sizes is not None and not f.mla else None
    if got is None or sizes is None or got[0] in sizes:
        return []
    n, where, how = got
    listed = ", ".join(map(str, sizes))
    msg = claim(f"{engine}:cpu_attn.head_size", sizes=listed, n=n, how=how)
    return [
        Finding(
            f"{whose or 'config'}.cpu_attention_head_size",
            "warning",
            where,
            f"the target: {msg}" if whose else msg,
            claim(f"{engine}:cpu_attn.head_size_hint", sizes=listed),
        )
    ]


def _field_findings(f: ConfigFacts, engine: str = "sglang") -> list[Finding]:
    """draft_vocab_size, num_hidden_layers and hidden_act: what engines read, and what their defaults do."""
    cfg = f.config
    out: list[Finding] = []
    if cfg.get("speculators_config") is None:  # the speculators format nests these; export flattens it
        if "draft_vocab_size" not in cfg and f.mla:
            out.append(
                Finding(
                    "config.draft_vocab_size",
                    "info",
                    "$.draft_vocab_size",
                    claim("sglang:mla.draft_vocab_missing"),
                )
            )
        elif "draft_vocab_size" not in cfg:
            out.append(
                Finding(
                    "config.draft_vocab_size",
                    "error",
                    "$.draft_vocab_size",
                    "draft_vocab_size is missing: SGLang reads it to size lm_head and fails without it",
                    "set it to lm_head's rows, or null for a full-vocabulary head",
                )
            )
        elif cfg["draft_vocab_size"] is None:
            out.append(
                Finding(
                    "config.draft_vocab_size",
                    "info",
                    "$.draft_vocab_size",
                    "draft_vocab_size is null: SGLang serves a full-vocabulary head taken from the target"
                    + sglang_said(engine),
                )
            )
    if f.num_hidden_layers[1] is None:
        n = default_num_layers(cfg)
        out.append(
            Finding(
                "config.num_hidden_layers",
                "error",
                "$.num_hidden_layers",
                f"num_hidden_layers is missing: transformers' default ({n}, for model_type "
                f"{cfg.get('model_type')!r}) makes SGLang build {n} layers, {n - 1} of them untrained"
                + (" (its MLA drafter refuses any count but 1: kimi_k25_eagle3.py:242-243)" if f.mla else ""),
                "set it to the number of decoder layers in the weights (usually 1)",
            )
        )
    out += _mla_findings(f, engine) + _amx_mla_findings(f, engine) + cpu_attention_findings(f, engine)
    act, where = f.hidden_act
    if where and act != "silu" and isinstance(act, str):
        out.append(
            Finding(
                "config.hidden_act",
                "error",
                where,
                f"hidden_act is {act!r}; EAGLE-3 drafters use silu",
                "set hidden_act to silu unless the drafter was really trained otherwise",
            )
        )
    return out


def _dtype_findings(ess: Any, engine: str = "sglang") -> list[Finding]:
    if ess.torch_dtype is None:
        return [
            Finding(
                "config.torch_dtype",
                "warning",
                "$.torch_dtype",
                "torch_dtype is missing: SGLang serves the drafter as float16 under --dtype auto" + sglang_said(engine),
                "set torch_dtype to the dtype the weights are in (bfloat16 or float16)",
            )
        ]
    if ess.torch_dtype == "float32":
        return [
            Finding(
                "config.torch_dtype",
                "warning",
                ess.sources.get("torch_dtype", "$.torch_dtype"),
                "torch_dtype is float32: SGLang serves it as float16 under --dtype auto" + sglang_said(engine),
                "export to bf16 (ckpt export --dtype bf16) and say so in torch_dtype",
            )
        ]
    return []
