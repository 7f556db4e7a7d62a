"""``ckpt validate``: catch before serve time what SGLang and vLLM would get wrong.

Every check yields :class:`Finding` objects (id, severity, location, message, hint).
Config-level checks run on a config.json alone; tensor checks when weights are there;
target checks with ``target=``; ``deep=True`` streams every tensor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ckpttools.errors import ConfigError, MappingError, NoWeightsError
from ckpttools.engines.claims import applied, applying, claim, label
from ckpttools.engines.claims import arch as engine_arch
from ckpttools.engines.claims import archs as served_archs
from ckpttools.engines.config_rules import amx_mla_refusal, context_length, weight_problems
from ckpttools.engines.flavor import LLAMA_TARGET, MLA_ARCHS, SPECULATORS_ARCHS, fixable_kind
from ckpttools.formats.config import (
    aux_layer_ids,
    config_problems,
    default_num_layers,
    essentials,
    lookup,
)
from ckpttools.engines.aux_rules import (
    FC_OPTION_SOURCES,
    LATER_LAYER_NORM,
    capture_rule,
    default_boundaries,
    fc_options,
    sglang_default_aux_ids,
)
from ckpttools.formats.conventions import load_target_config
from ckpttools.engines.names import QK_NORM, QWEN3_DRAFTER_ARCH, sglang_loads, suggest_rename
from ckpttools.formats.names import canonical_name, is_training_only
from ckpttools.io.checkpoint import Checkpoint, load_config, open_checkpoint
from ckpttools.ops import quant_check
from ckpttools.schemas import load_schema

__all__ = ["Finding", "ValidationReport", "validate", "load_target_config", "sglang_default_aux_ids", "SEVERITIES"]

SEVERITIES = ("error", "warning", "info")
ENGINES = ("sglang", "vllm")
#: the errors ``validate --fix`` repairs (architectures only for engines.flavor.FIXABLE_ARCHS; the fields only when missing)
FIX_REPAIRS = {
    "config.architectures",
    "target.context_length",
    "config.num_hidden_layers",
    "config.draft_vocab_size",
    "config.torch_dtype",
    "tensors.dropped",
}
#: hint text naming --fix, and what it says when --fix would leave other errors (export repairs more)
_FIX_TEXTS = {
    "(ckpt validate --fix does it)": "(ckpt export does it)",
    "(ckpt validate --fix does)": "(ckpt export does)",
    " (ckpt export --target TARGET does; so does ckpt validate --fix --target TARGET)": (
        " (ckpt export --target TARGET does)"
    ),
}


def _arch_message(arch: str) -> str:
    """Why SGLang will not build its drafter from this ``architectures[0]`` (engines/claims.py)."""
    kind = fixable_kind(arch) or ("speculators" if arch in SPECULATORS_ARCHS else None)
    key = {"plain_llama": "arch.plain_llama", "vllm_name": "arch.vllm_name", "speculators": "arch.speculators"}
    if kind in key:
        return claim("sglang:" + key[kind])
    return f"{arch!r} is not an EAGLE-3 class SGLang knows: it will not load as a drafter"


@dataclass
class Finding:
    """One result of one check."""

    id: str
    severity: str
    location: str
    message: str
    hint: str | None = None


@dataclass
class ValidationReport:
    """The findings of :func:`validate`, plus what was checked."""

    drafter: str
    target: str | None
    checked: list[str]
    findings: list[Finding] = field(default_factory=list)
    #: for a Hub drafter: the repo, revision, commit and bytes transferred (``describe()``)
    hub: dict[str, Any] | None = None
    #: the engine release whose reading was checked (``name==version``), and how it was chosen
    engine_release: str | None = None
    engine_release_from: str | None = None
    #: what that release builds from the drafter (engines.load_plan), when asked for
    load_plan: dict[str, Any] | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def counts(self) -> dict[str, int]:
        return {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter,
            "target": self.target,
            "checked": self.checked,
            "ok": self.ok,
            "counts": self.counts(),
            "findings": [asdict(f) for f in self.findings],
            **({"hub": self.hub} if self.hub is not None else {}),
            "engine_release": self.engine_release,
            "engine_release_from": self.engine_release_from,
            **({"load_plan": self.load_plan} if self.load_plan is not None else {}),
        }


#: how much ``validate --deep`` may download from the Hub unless told otherwise
DEFAULT_MAX_DOWNLOAD = "20GB"


@lru_cache(maxsize=None)
def schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped in ckpttools.schemas."""
    return load_schema(name)


def fix_repairs(f: Finding) -> bool:
    """Whether ``validate --fix`` repairs this error (ops/fix.py)."""
    if f.id not in FIX_REPAIRS:
        return False
    if f.id == "config.architectures":
        fixable = any(f.message.startswith(_claim_prefix(k)) for k in ("arch.plain_llama", "arch.vllm_name"))
        return fixable and _claim_prefix("norms.vllm_later") not in f.message
    if f.id in ("config.num_hidden_layers", "config.draft_vocab_size", "config.torch_dtype"):
        return "is missing" in f.message
    return True


def _claim_prefix(key: str) -> str:
    """An SGLang claim's text up to its first field: what every message made from it starts with."""
    return applied("sglang").claims.value[key][0].split("{")[0]


def route_fix_hints(findings: list[Finding]) -> list[Finding]:
    """Hints name ``validate --fix`` only when its output would validate, that is when it repairs every
    error; otherwise they name ``ckpt export``, which rewrites the whole drafter."""
    if all(fix_repairs(f) for f in findings if f.severity == "error"):
        return findings
    out = []
    for f in findings:
        hint = f.hint
        for old, new in _FIX_TEXTS.items():
            hint = hint.replace(old, new) if hint else hint
        out.append(Finding(f.id, f.severity, f.location, f.message, hint))
    return out


def _open_drafter(drafter: str | Path | Checkpoint) -> tuple[dict[str, Any] | None, Checkpoint | None, str]:
    if isinstance(drafter, Checkpoint):
        return drafter.config, drafter, str(drafter.source)
    p = Path(drafter)
    if p.is_file() and p.suffix == ".json":
        return load_config(p), None, str(p)
    try:
        ck = open_checkpoint(drafter)
    except NoWeightsError:
        if p.is_dir() and (p / "config.json").is_file():
            return load_config(p / "config.json"), None, str(p)
        raise
    return ck.config, ck, str(drafter)


# ------------------------------------------------------------------------ config checks
def _type_findings(cfg: dict[str, Any], fid: str, prefix: str, seen: set[str]) -> list[Finding]:
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
    out = _schema_findings(cfg, "eagle3-drafter-config.schema.json", "config.schema", "", _CONFIG_SCHEMA_FIX)
    out += _type_findings(cfg, "config.type", "", {f.location for f in out})
    out += _draft_vocab_finding(essentials(cfg))
    out += _architecture_findings(cfg, engine)
    out += _field_findings(cfg, engine)
    out += _dtype_findings(essentials(cfg), engine)
    return out


def _sglang_said(engine: str) -> str:
    """What a finding about SGLang's behaviour adds when validate checks another engine's reading."""
    return "" if engine == "sglang" else f" (SGLang's behaviour; {label(engine)}'s is not in its table)"


_CONFIG_SCHEMA_FIX = "fix config.json to match schemas/eagle3-drafter-config.schema.json"


def _schema_findings(cfg: dict[str, Any], schema_name: str, fid: str, prefix: str, fix: str) -> list[Finding]:
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


def _architecture_findings(cfg: dict[str, Any], engine: str) -> list[Finding]:
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if arch is None:
        return []
    where = "$.architectures[0]"
    if engine == "vllm":
        if arch in served_archs("vllm"):
            return []
        msg = claim("vllm:arch.wants", arch=arch)
        return [Finding("config.architectures", "error", where, msg, "ckpt export --format vllm writes it")]
    if arch in served_archs("sglang"):
        return []
    msg = _arch_message(arch)
    fix = "ckpt validate --fix" if fixable_kind(arch) else "ckpt export"
    want = llama = engine_arch("sglang", "sglang_llama")
    n = lookup(cfg, "num_hidden_layers")[0]
    if fixable_kind(arch) == "vllm_name" and type(n) is int and n > 1:
        msg += claim("sglang:norms.vllm_later", source=LATER_LAYER_NORM["sglang"][1])
        fix = "ckpt export"
    if _is_mla(cfg):  # a training-side name for an MLA drafter (e.g. TorchSpec's)
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


def _is_mla(cfg: dict[str, Any]) -> bool:
    """An MLA drafter: an MLA drafter class by name, or a config with MLA attention fields."""
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs[:1] and archs[0] in MLA_ARCHS:
        return True
    return "kv_lora_rank" in cfg and "qk_rope_head_dim" in cfg


def _mla_findings(cfg: dict[str, Any], engine: str) -> list[Finding]:
    """What SGLang's MLA drafter class refuses at load (engines/claims.py: ``mla.*``)."""
    archs = cfg.get("architectures")
    if engine != "sglang" or not (isinstance(archs, list) and archs[:1] == [engine_arch("sglang", "sglang_mla")]):
        return []
    out: list[Finding] = []
    q, where = lookup(cfg, "q_lora_rank")
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
    n, where = lookup(cfg, "num_hidden_layers")
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


def _amx_mla_findings(cfg: dict[str, Any], engine: str) -> list[Finding]:
    """An MLA drafter whose sizes vLLM's CPU build refuses on a CPU with AMX (engines/claims.py:
    ``cpu_mla.amx``): a warning, since the same drafter loads on any other CPU."""
    got = amx_mla_refusal(cfg) if engine == "vllm" and _is_mla(cfg) else None
    if got is None:
        return []
    msg = claim("vllm:cpu_mla.amx", field=got["field"], value=got["value"], error=got["error"], when=got["when"])
    return [Finding("config.mla_amx_sizes", "warning", got["where"], msg, claim("vllm:cpu_mla.amx_hint"))]


def _field_findings(cfg: dict[str, Any], engine: str = "sglang") -> list[Finding]:
    """draft_vocab_size, num_hidden_layers and hidden_act: what engines read, and what their defaults do."""
    out: list[Finding] = []
    if cfg.get("speculators_config") is None:  # the speculators format nests these; export flattens it
        if "draft_vocab_size" not in cfg and _is_mla(cfg):
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
                    + _sglang_said(engine),
                )
            )
    if lookup(cfg, "num_hidden_layers")[1] is None:
        n = default_num_layers(cfg)
        out.append(
            Finding(
                "config.num_hidden_layers",
                "error",
                "$.num_hidden_layers",
                f"num_hidden_layers is missing: transformers' default ({n}, for model_type "
                f"{cfg.get('model_type')!r}) makes SGLang build {n} layers, {n - 1} of them untrained"
                + (" (its MLA drafter refuses any count but 1: kimi_k25_eagle3.py:242-243)" if _is_mla(cfg) else ""),
                "set it to the number of decoder layers in the weights (usually 1)",
            )
        )
    out += _mla_findings(cfg, engine) + _amx_mla_findings(cfg, engine)
    act, where = lookup(cfg, "hidden_act")
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
                "torch_dtype is missing: SGLang serves the drafter as float16 under --dtype auto"
                + _sglang_said(engine),
                "set torch_dtype to the dtype the weights are in (bfloat16 or float16)",
            )
        ]
    if ess.torch_dtype == "float32":
        return [
            Finding(
                "config.torch_dtype",
                "warning",
                ess.sources.get("torch_dtype", "$.torch_dtype"),
                "torch_dtype is float32: SGLang serves it as float16 under --dtype auto" + _sglang_said(engine),
                "export to bf16 (ckpt export --dtype bf16) and say so in torch_dtype",
            )
        ]
    return []


# ------------------------------------------------------------------------ tensor checks
def _expected_shapes(cfg: dict[str, Any], canon: dict[str, Any], engine: str) -> dict[str, tuple[int, ...]]:
    if config_problems(cfg):  # the one config guard: a size is read only from a usable config (validate says why)
        return {}
    ess = essentials(cfg)
    H, V = ess.hidden_size, ess.vocab_size
    if not isinstance(H, int):
        return {}
    Ht = ess.target_hidden_size or H
    opts = fc_options(cfg, engine)
    n = opts.num_aux
    heads, kv = ess.num_attention_heads, ess.num_key_value_heads or ess.num_attention_heads
    hd = ess.head_dim or (H // heads if isinstance(heads, int) and heads else None)
    inter = ess.intermediate_size
    exp: dict[str, tuple[int, ...]] = {"fc.weight": (H, n * Ht), "norm.weight": (H,)}
    if opts.norm_before_fc:
        exp["input_norm.weight"] = (n * Ht,)
    if opts.fc_norm:
        exp |= {f"fc_norm.{j}.weight": (Ht,) for j in range(n)}
    vd = ess.draft_vocab_size if ess.draft_vocab_size_present else None
    rows = vd if vd is not None else V
    if isinstance(rows, int) and (vd is not None or "lm_head.weight" in canon):
        exp["lm_head.weight"] = (rows, H)
    if "embed_tokens.weight" in canon and isinstance(V, int):
        exp["embed_tokens.weight"] = (V, H)
    if (ess.architectures or [""])[0] in MLA_ARCHS:
        return exp | _mla_shapes(cfg, H, heads, inter)
    # layer 0 attends over [norm(embedding); norm(hidden)] (2H) with input_layernorm and
    # hidden_norm; later layers take H and fuse the residual into one norm, which differs by
    # engine (LATER_LAYER_NORM)
    L = ess.num_hidden_layers if isinstance(ess.num_hidden_layers, int) else 1
    for i in range(L):
        p = f"layers.{i}."
        qin = 2 * H if i == 0 else H
        if isinstance(heads, int) and isinstance(hd, int) and isinstance(kv, int):
            exp[p + "self_attn.q_proj.weight"] = (heads * hd, qin)
            exp[p + "self_attn.k_proj.weight"] = (kv * hd, qin)
            exp[p + "self_attn.v_proj.weight"] = (kv * hd, qin)
            exp[p + "self_attn.o_proj.weight"] = (H, heads * hd)
        if isinstance(inter, int):
            exp[p + "mlp.gate_proj.weight"] = (inter, H)
            exp[p + "mlp.up_proj.weight"] = (inter, H)
            exp[p + "mlp.down_proj.weight"] = (H, inter)
        later = LATER_LAYER_NORM.get(engine, LATER_LAYER_NORM["sglang"])[0]  # differs by engine
        for norm in (("input_layernorm", "hidden_norm") if i == 0 else (later,)) + ("post_attention_layernorm",):
            exp[p + norm + ".weight"] = (H,)
    return exp


def _mla_shapes(cfg: dict[str, Any], H: int, heads: Any, inter: Any) -> dict[str, tuple[int, ...]]:
    """An MLA drafter layer's tensors as SGLang builds them (engines/claims.py ``mla_probe``: the
    MLA attention with its fused q/kv down-projection widened to take [embed; hidden], 2H)."""
    keys = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    dims = [cfg.get(k) for k in keys]
    if not all(type(x) is int and x > 0 for x in dims) or not isinstance(heads, int):
        return {}
    q, kv, rope, nope, v = (int(x) for x in dims)  # type: ignore[arg-type]
    p = "layers.0."
    exp = {
        p + "self_attn.q_a_proj.weight": (q, 2 * H),
        p + "self_attn.q_a_layernorm.weight": (q,),
        p + "self_attn.q_b_proj.weight": (heads * (nope + rope), q),
        p + "self_attn.kv_a_proj_with_mqa.weight": (kv + rope, 2 * H),
        p + "self_attn.kv_a_layernorm.weight": (kv,),
        p + "self_attn.kv_b_proj.weight": (heads * (nope + v), kv),
        p + "self_attn.o_proj.weight": (H, heads * v),
        p + "input_layernorm.weight": (H,),
        p + "hidden_norm.weight": (H,),
        p + "post_attention_layernorm.weight": (H,),
    }
    if isinstance(inter, int):
        exp |= {p + "mlp.gate_proj.weight": (inter, H), p + "mlp.up_proj.weight": (inter, H)}
        exp[p + "mlp.down_proj.weight"] = (H, inter)
    return exp


def check_tensors(cfg: dict[str, Any] | None, ck: Checkpoint, engine: str = "sglang") -> list[Finding]:
    """Names SGLang loads, the dtype each parameter takes, shapes the config implies, and the vocabulary mapping."""
    plan = _plan(ck, cfg, engine)
    out, canon = _name_findings(ck, engine, cfg, plan)
    out += _tensor_dtype_findings(ck, engine, plan)
    if cfg is None:
        return out
    shapes = _shape_findings(cfg, canon, engine)
    options = _option_findings(cfg, canon, engine)
    fields = _weight_field_findings(cfg, canon, {f.id for f in options})
    return out + shapes + options + fields + _mapping_findings(cfg, canon, ck)


def _plan(ck: Checkpoint, cfg: dict[str, Any] | None, engine: str) -> Any:
    """The applied release's load plan of the drafter (engines/load_plan.py); None when the config has a
    field the plan would size from that is unusable (validate says which) or it builds no class."""
    from ckpttools.engines.load_plan import load_plan

    if config_problems(cfg):
        return None
    heads = {n: (list(e.shape), e.dtype) for n, e in ck.tensors.items()}
    plan = load_plan(heads, cfg or {}, applied(engine))
    return plan if plan.cls is not None and plan.tensors else None


def _tensor_dtype_findings(ck: Checkpoint, engine: str, plan: Any) -> list[Finding]:
    """Each tensor whose dtype its parameter does not take in the applied release (its table's
    ``param_dtypes``): the load plan's parameters; without a plan, by name (d2t the map, t2d never
    loaded, any other a weight)."""
    from ckpttools.engines.load_plan import dtype_entries, dtype_message

    release = applied(engine)
    if plan is not None:
        entries = plan.dtypes
    else:
        kinds = {n: canonical_name(n)[0] for n in ck.tensors}
        loads = [
            (n, None, "d2t" if c == "d2t" else "linear", ck.tensors[n].dtype) for n, c in kinds.items() if c != "t2d"
        ]
        entries = dtype_entries(release, loads)
    out = []
    for e in entries:
        severity, message, consequence = dtype_message(e, release.spec)
        fid = "tensors.dtype" if e["verdict"] == "wrong" else "tensors.dtype_unchecked"
        hint = (
            "give the trained tensor in a dtype the parameter takes (for a weight: bf16, fp16 or fp32; for d2t: int64)"
            if severity == "error"
            else "dequantize to bf16 first, or check by hand that the engine serves it as it should"
        )
        out.append(Finding(fid, severity, e["tensor"], f"{message}; {consequence}", hint))
    return out


def _name_findings(
    ck: Checkpoint, engine: str = "sglang", cfg: dict[str, Any] | None = None, plan: Any = None
) -> tuple[list[Finding], dict[str, Any]]:
    """Tensors the engine would drop (or refuse), as the applied release's load plan says; and the
    tensors by canonical name. Where the plan cannot say (no drafter class, or a loader not
    modelled), SGLang's name patterns decide (engines/names.py)."""
    out: list[Finding] = []
    canon: dict[str, Any] = {c: t for c, t in ((canonical_name(n)[0], t) for n, t in ck.tensors.items())}
    qk = [n for n in ck.tensors if QK_NORM.match(n)]
    out += _qk_norm_findings(qk, engine, cfg)
    fates = _plan_fates(plan)
    for name in ck.tensors:
        fate = fates.get(name) if fates is not None else (None if sglang_loads(name) else ("dropped", None, "error:"))
        if fate is None or name in qk or canonical_name(name)[0] == "t2d":
            continue
        out.append(_dropped_finding(name, engine, *fate))
    return out, canon


def _plan_fates(plan: Any) -> dict[str, tuple[str, str | None, str]] | None:
    """{tensor: (fate, reason, consequence)} for the tensors the applied release drops or refuses;
    None when there is no load plan (:func:`_plan`). The consequence is the plan's
    (engines/load_plan.py), prefixed with its severity."""
    from ckpttools.engines.load_plan import plan_findings

    if plan is None:
        return None
    said = {
        f["tensor"]: f"{f['severity']}:{f['consequence']}" for f in plan_findings(plan) if f["code"] == "tensor_dropped"
    }
    return {
        t.name: (t.fate, t.reason, said.get(t.name, "error:")) for t in plan.tensors if t.fate in ("dropped", "refused")
    }


def _dropped_finding(name: str, engine: str, fate: str, reason: str | None, said: str = "error:") -> Finding:
    """One tensor the engine drops or refuses, as its load plan says (``said``: the plan's
    ``severity:consequence``)."""
    who = "SGLang" if engine == "sglang" else label(engine)
    if is_training_only(name):
        how = "drops it, as it should" if fate == "dropped" else "refuses the load over it"
        sev = "info" if fate == "dropped" else "error"
        return Finding("tensors.training_only", sev, name, f"a training-only tensor: {who} {how}", _EXPORT_DROPS)
    if fate == "dropped" and (reason or "").startswith("loaded into"):
        severity, _, consequence = said.partition(":")
        msg = f"{who} loads this tensor to no effect, without a word: {reason}" + (
            f"; {consequence}" if consequence else ""
        )
        hint = "rename it to the name the forward reads" if severity == "error" else "drop it if it is unused"
        # not an error when the norm the forward reads is in the file too (vLLM's layout carries both)
        return Finding("tensors.dropped", "error" if severity == "error" else "info", name, msg, hint)
    new = suggest_rename(name) if engine == "sglang" else None
    if engine == "sglang":
        msg = "SGLang does not know this name and drops the tensor without a word"
        hint = (
            f"rename it to {new!r} (ckpt validate --fix does)"
            if new
            else "remove it, or rename it to a name SGLang loads"
        )
    else:
        why = reason or "no such parameter"
        msg = (
            f"{who}'s loader has no parameter for this name and refuses the load ({why})"
            if fate == "refused"
            else f"{who} drops this tensor without a word ({why})"
        )
        hint = "ckpt export --format vllm writes the names vLLM loads"
    return Finding("tensors.dropped", "error" if new or fate == "refused" else "warning", name, msg, hint)


_EXPORT_DROPS = "ckpt export drops it from the output"


def _qk_norm_findings(qk: list[str], engine: str, cfg: dict[str, Any] | None) -> list[Finding]:
    """A Qwen3-architecture drafter (per-head q_norm/k_norm): served by vLLM's Qwen3 drafter class only."""
    if not qk:
        return []
    archs = (cfg or {}).get("architectures") or []
    if engine == "vllm" and archs[:1] == [QWEN3_DRAFTER_ARCH]:
        return []
    msg = f"q_norm/k_norm ({len(qk)} tensors, e.g. {qk[0]}): a Qwen3-architecture drafter. " + (
        claim("sglang:qk_norm") if engine == "sglang" else claim("vllm:qk_norm")
    )
    fix = (
        f"serve it with vLLM (ckpt export --format vllm writes {QWEN3_DRAFTER_ARCH})"
        if engine == "sglang"
        else f"set architectures to [{QWEN3_DRAFTER_ARCH!r}] (ckpt export --format vllm does)"
    )
    return [Finding("tensors.qk_norm", "error", qk[0], msg, fix)]


def _shape_findings(cfg: dict[str, Any], canon: dict[str, Any], engine: str) -> list[Finding]:
    out: list[Finding] = []
    ess = essentials(cfg)
    for name, shape in _expected_shapes(cfg, canon, engine).items():
        got = canon.get(name)
        if got is None and name.startswith(("input_norm.", "fc_norm.")):
            continue  # _option_findings says what a missing option weight means
        if got is None:
            if name == "lm_head.weight":
                out.append(
                    Finding(
                        "tensors.lm_head_missing",
                        "error",
                        "lm_head.weight",
                        f"draft_vocab_size is {ess.draft_vocab_size} but there is no lm_head: SGLang keeps "
                        "a random head and accept length falls to 1.00 with no error",
                        "add the trained lm_head, or set draft_vocab_size to null to use the target's",
                    )
                )
            elif name != "embed_tokens.weight":
                out.append(
                    Finding(
                        "tensors.missing",
                        "error",
                        name,
                        _sglang_missing(name) if engine == "sglang" else claim("vllm:missing"),
                        "add the tensor, or check num_hidden_layers and the names",
                    )
                )
        elif tuple(got.shape) != shape:
            out.append(
                Finding(
                    "tensors.shape",
                    "error",
                    got.name,
                    f"shape {list(got.shape)} but the config implies {list(shape)}",
                    "check hidden_size, target_hidden_size, the aux layer count and draft_vocab_size",
                )
            )
    return out


def _sglang_missing(name: str) -> str:
    """What SGLang serves in place of a tensor it does not find (load_weights skips it)."""
    if name.endswith("norm.weight"):
        return claim("sglang:missing.norm")
    if name == "fc.weight":
        return claim("sglang:missing.fc")
    return claim("sglang:missing.other")


def _weight_field_findings(cfg: dict[str, Any], canon: dict[str, Any], seen: set[str]) -> list[Finding]:
    """Config fields the weights contradict (engines/config_rules.py weight_problems); not those already said."""
    shapes = {n: tuple(t.shape) for n, t in canon.items()}
    out = []
    for where, why in weight_problems(cfg, shapes).items():
        field_ = where.rsplit(".", 1)[-1]
        fid = {"fc_norm": "config.fc_norm", "use_aux_norm": "config.fc_norm"}.get(field_, f"config.{field_}")
        fid = "config.layers_present" if field_ == "num_hidden_layers" else fid
        if fid in seen:
            continue
        out.append(
            Finding(
                fid,
                "error",
                where,
                f"{field_} {why}",
                "make config.json say what the weights hold (export and remap refuse it until then)",
            )
        )
    return out


def _option_findings(cfg: dict[str, Any], canon: dict[str, Any], engine: str) -> list[Finding]:
    """EAGLE-3.1 options against the weights, both ways, and the aux count against the captures."""
    o = fc_options(cfg, engine)
    src = f"read from {FC_OPTION_SOURCES[engine]}"
    out: list[Finding] = []
    ids, where = aux_layer_ids(cfg)
    if ids and len(set(ids)) != o.num_aux:
        out.append(
            Finding(
                "config.num_aux_hidden_states",
                "error",
                where or "$",
                f"{engine} captures {len(set(ids))} aux states (ids {ids}) but sizes fc for {o.num_aux} (from "
                f"{o.num_aux_from}): the drafter cannot load, or reads its input wrongly",
                f"set num_aux_hidden_states to {len(set(ids))} ({src})",
            )
        )
    out += _norm_flag_findings(cfg, canon, o, engine, src)
    if o.norm_output:
        out.append(
            Finding(
                "config.norm_output",
                "info",
                "$.norm_output",
                "norm_output: each draft step after the first gets the previous step's normed output (EAGLE-3.1)",
            )
        )
    return out


def _norm_flag_findings(cfg: dict[str, Any], canon: dict[str, Any], o: Any, engine: str, src: str) -> list[Finding]:
    """norm_before_fc and fc_norm against their weights, both ways."""
    out: list[Finding] = []
    norms = sorted(n for n in canon if n.startswith("fc_norm."))
    for flag, on, names, what in (
        (
            "norm_before_fc",
            o.norm_before_fc,
            ["input_norm.weight"] if "input_norm.weight" in canon else [],
            "input_norm",
        ),
        ("fc_norm", o.fc_norm, norms, "fc_norm.N"),
    ):
        if on and not names:
            out.append(
                Finding(
                    f"config.{flag}",
                    "error",
                    f"$.{flag}",
                    f"{flag} is set but the weights have no {what}: {engine} keeps that norm at its initial "
                    "weights of 1, not the trained ones",
                    f"add the trained {what} weights, or unset {flag} if the drafter was trained without it ({src})",
                )
            )
        elif names and not on:
            hint = f"set {flag}: true in config.json" + (
                claim("vllm:fc_norm_hint") if flag == "fc_norm" and cfg.get("use_aux_norm") else ""
            )
            out.append(
                Finding(
                    f"config.{flag}",
                    "error",
                    names[0],
                    f"the weights have {what} but {flag} is not set: {engine} ignores them and feeds fc "
                    "un-normalised states the drafter was not trained on",
                    f"{hint} ({src})",
                )
            )
    return out


def _mapping_findings(cfg: dict[str, Any], canon: dict[str, Any], ck: Checkpoint) -> list[Finding]:
    """d2t/t2d read and checked; or missing where the head is reduced."""
    out: list[Finding] = []
    ess = essentials(cfg)
    vd, v = ess.draft_vocab_size, ess.vocab_size
    from ckpttools.vocab.mapping import VocabMapping, missing_mapping_message

    if "d2t" in canon or "t2d" in canon:
        try:
            m = VocabMapping.from_checkpoint(ck)
        except MappingError as e:
            out.append(Finding("mapping.unreadable", "error", "d2t", str(e), e.hint))
        else:
            assert m is not None
            for p in m.problems():
                out.append(
                    Finding(
                        f"mapping.{p.code}",
                        p.severity,
                        p.location,
                        p.message,
                        "rebuild the mapping (ckpt vocab build) or remap (ckpt remap)"
                        if p.severity == "error"
                        else None,
                    )
                )
    elif isinstance(vd, int) and isinstance(v, int) and vd < v:
        out.append(
            Finding(
                "mapping.missing",
                "error",
                "d2t",
                missing_mapping_message(vd, v),
                "add the d2t/t2d the drafter was trained with (ckpt remap --to MAPPING)",
            )
        )
    return out


# ------------------------------------------------------------------------ target checks
def check_target(
    cfg: dict[str, Any], tcfg: dict[str, Any], ck: Checkpoint | None = None, engine: str = "sglang"
) -> list[Finding]:
    """The drafter against its target's config: vocabulary, hidden size, aux layers, dtype, context, rope."""
    out = _schema_findings(tcfg, "target-config.schema.json", "target.schema", "target config: ", _TARGET_FIX)
    out += _type_findings(tcfg, "target.type", "target config: ", {f.location for f in out})
    if out:
        return out
    d, t = essentials(cfg), essentials(tcfg)
    out += _target_vocab_findings(d, t, ck)
    out += _target_hidden_findings(d, t)
    out += _aux_id_findings(cfg, t, engine)
    out += _target_dtype_findings(d, t, engine)
    out += _target_context_findings(cfg, tcfg, d, t, engine)
    out += _draft_kv_findings(cfg, tcfg, d, t, engine)
    return out


_TARGET_FIX = "give the target's own config.json"


def _target_vocab_findings(d: Any, t: Any, ck: Checkpoint | None) -> list[Finding]:
    out: list[Finding] = []
    if isinstance(d.vocab_size, int) and d.vocab_size != t.vocab_size:
        top = None
        if ck is not None:
            from ckpttools.vocab.mapping import VocabMapping

            try:
                m = VocabMapping.from_checkpoint(ck, allow_missing=True)
                top = int(m.ids.max()) if m is not None and m.draft_vocab_size else None
            except MappingError:
                top = None
        if top is not None and isinstance(t.vocab_size, int) and top < t.vocab_size:
            out.append(
                Finding(
                    "target.vocab_size",
                    "warning",
                    "$.vocab_size",
                    f"vocab_size {d.vocab_size} but the target's is {t.vocab_size}: padded vocabularies of "
                    f"one tokenizer? every draft token (max id {top}) is inside the target's vocabulary",
                    f"set vocab_size to {t.vocab_size} (t2d's length follows it)",
                )
            )
        else:
            out.append(
                Finding(
                    "target.vocab_size",
                    "error",
                    "$.vocab_size",
                    f"vocab_size {d.vocab_size} but the target's is {t.vocab_size}",
                    "this drafter was made for another tokenizer: remap it (ckpt remap)",
                )
            )
    return out


def _target_hidden_findings(d: Any, t: Any) -> list[Finding]:
    out: list[Finding] = []
    ht = d.target_hidden_size or d.hidden_size
    if isinstance(ht, int) and ht != t.hidden_size:
        field_ = "target_hidden_size" if d.target_hidden_size else "hidden_size"
        out.append(
            Finding(
                "target.hidden_size",
                "error",
                f"$.{field_}",
                f"the drafter expects target hidden states of size {ht} but the target's hidden_size is "
                f"{t.hidden_size}: fc cannot take them",
                "this drafter was trained for another target",
            )
        )
    return out


def _aux_id_findings(cfg: dict[str, Any], t: Any, engine: str) -> list[Finding]:
    """Aux layer ids against the target, read the way the engine reads them for the target's class
    (engines/aux_rules.py holds each rule with the source lines it was read from)."""
    L = t.num_hidden_layers
    if not isinstance(L, int):  # the target schema requires it; a bad value was reported before
        return []
    arch = (t.architectures or [None])[0]
    rule, exact = capture_rule(engine, arch)
    out: list[Finding] = []
    if not exact:
        out.append(
            Finding(
                "target.aux_rule",
                "info",
                "$.architectures[0]",
                f"{arch}: ckpttools has no capture rule read for this class; {engine}'s Llama rule is assumed "
                f"({rule.describe()})",
            )
        )
    ids, where = aux_layer_ids(cfg)
    if ids is None:
        default = default_boundaries(L)
        sg = capture_rule("sglang", arch)[0].ids_for(default, L)
        return out + [
            Finding(
                "target.aux_layer_ids",
                "info",
                "$.eagle_config.eagle_aux_hidden_state_layer_ids",
                f"no aux layer ids: both engines capture their default for a {L}-layer target, the inputs of "
                f"layers {default} (SGLang would read them as ids {sg}, vLLM as ids {default})",
                "write them explicitly (ckpt export --target does) so every engine agrees",
            )
        ]
    bad = rule.uncaptured(ids, L)
    if bad:
        out.append(
            Finding(
                "target.aux_layer_ids",
                "error",
                where or "$",
                _out_of_reach(bad, ids, L, arch, rule, engine),
                f"use the ids the drafter was trained with, in {engine}'s reading for this target "
                f"(read from {rule.source})",
            )
        )
    elif rule.kind in ("first_id_one", "boundary"):
        out += _rule_differs(ids, where, arch, rule, engine, L)
    if len(set(ids)) != len(ids):
        out.append(
            Finding(
                "target.aux_layer_ids",
                "warning",
                where or "$",
                f"aux layer ids {ids} repeat a layer",
                "check the training config",
            )
        )
    return out


def _out_of_reach(bad: list[int], ids: list[int], L: int, arch: Any, rule: Any, engine: str) -> str:
    msg = (
        f"aux layer id(s) {bad} are out of reach for a {L}-layer {arch or 'target'}: {engine} "
        f"{rule.describe()}, and captures only boundaries 0..{rule.top(L)}, "
    )
    if engine == "sglang":
        return msg + claim("sglang:aux.crash", got=len(ids) - len(bad), want=len(ids))
    return msg + "so the drafter's fc never gets the states it was trained on"


def _rule_differs(ids: list[int], where: str | None, arch: Any, rule: Any, engine: str, L: int) -> list[Finding]:
    """A class whose rule reads these ids otherwise than Llama's: say which layers are captured."""
    out: list[Finding] = []
    llama = capture_rule(engine, LLAMA_TARGET)[0].boundaries(ids, L)
    got = rule.boundaries(ids, L)
    if got != llama:
        out.append(
            Finding(
                "target.aux_rule",
                "warning",
                where or "$",
                f"for {arch} targets SGLang {rule.describe()}: ids {ids} capture the inputs of layers {got}, "
                f"not {llama} as for a Llama target; right only if the drafter was trained on those",
                _rule_fix(rule, llama, L),
            )
        )
    return out


def _rule_fix(rule: Any, llama: list[int], L: int) -> str:
    ids = rule.ids_for(llama, L)
    if ids is None:
        return (
            f"no ids make SGLang capture the inputs of layers {llama} on this target: only a drafter trained on "
            f"what SGLang captures here serves well (read from {rule.source})"
        )
    return f"ids written for a Llama-rule engine become {ids} here (read from {rule.source})"


def _served(dt: str | None) -> str | None:
    return "float16" if dt == "float32" else dt


def _target_dtype_findings(d: Any, t: Any, engine: str) -> list[Finding]:
    out: list[Finding] = []
    # SGLang (--dtype auto) runs the drafter in its own torch_dtype (float32 is served as
    # float16) and feeds it the target's hidden states (engines/claims.py ``dtype.crash``)
    if d.torch_dtype and t.torch_dtype and _served(d.torch_dtype) != _served(t.torch_dtype):
        out.append(
            Finding(
                "target.dtype",
                "error" if engine == "sglang" else "warning",
                "$.torch_dtype",
                f"the drafter is {d.torch_dtype} (served as {_served(d.torch_dtype)}) but the target is "
                f"{t.torch_dtype}: " + claim("sglang:dtype.crash") + _sglang_said(engine),
                f"ckpt export --target TARGET casts to {t.torch_dtype}; or launch with --dtype {t.torch_dtype}",
            )
        )
    return out


def _context_finding(dctx: int, dhow: str, tctx: int, thow: str, engine: str, rope: str = "default") -> Finding:
    covers = f"the drafter covers {dctx:,} positions ({dhow}) but the target's context is {tctx:,} ({thow}): "
    if engine == "vllm":
        cache_only = applied("vllm").claims.value.get("context.cache_only_rope")
        limited = cache_only is not None and rope not in cache_only[0].split()
        return Finding(
            "target.context_length",
            "warning",
            "$.max_position_embeddings",
            covers
            + (
                claim("vllm:context.limit", rope=rope, dctx=dctx) if limited else claim("vllm:context.raise", dctx=dctx)
            ),
            f"raise max_position_embeddings to {tctx} (ckpt export --target TARGET does)",
        )
    return Finding(
        "target.context_length",
        "error",
        "$.max_position_embeddings",
        covers + claim("sglang:context.refuse", tctx=tctx, dctx=dctx),
        f"raise max_position_embeddings to {tctx} (ckpt export --target TARGET does; so does ckpt validate "
        "--fix --target TARGET); " + claim("sglang:context.override"),
    )


def _target_context_findings(
    cfg: dict[str, Any], tcfg: dict[str, Any], d: Any, t: Any, engine: str = "sglang"
) -> list[Finding]:
    """Context length and rope against the target's."""
    out: list[Finding] = []
    dctx, dhow = context_length(cfg)
    tctx, thow = context_length(tcfg)
    if dctx is not None and tctx is not None and dctx < tctx:
        rope = d.rope_scaling.get("rope_type", d.rope_scaling.get("type")) if isinstance(d.rope_scaling, dict) else None
        out.append(_context_finding(dctx, dhow, tctx, thow, engine, rope if isinstance(rope, str) else "default"))
    if d.rope_theta is not None and t.rope_theta is not None and float(d.rope_theta) != float(t.rope_theta):
        out.append(
            Finding(
                "target.rope",
                "info",
                "$.rope_theta",
                f"rope_theta {d.rope_theta} differs from the target's {t.rope_theta}: fine if the drafter "
                "was trained so, as it usually is",
            )
        )
    dtype_ = (d.rope_scaling or {}).get("rope_type") if isinstance(d.rope_scaling, dict) else None
    ttype = (t.rope_scaling or {}).get("rope_type") if isinstance(t.rope_scaling, dict) else None
    if dtype_ != ttype:
        out.append(
            Finding(
                "target.rope",
                "info",
                "$.rope_scaling",
                f"rope scaling type {dtype_ or 'none'} differs from the target's {ttype or 'none'}",
            )
        )
    return out


# ------------------------------------------------------------------------ deep checks
def check_deep(ck: Checkpoint, chunk_bytes: int = 32 << 20) -> list[Finding]:
    """Stream every float tensor in bounded chunks: NaN/Inf anywhere, zero/constant heads."""
    import numpy as np

    out: list[Finding] = []
    for name, t in ck.tensors.items():
        if not t.dtype.startswith(("F", "BF")):
            continue
        nonfinite = 0
        lo, hi = np.inf, -np.inf
        for chunk in ck.iter_chunks(name, chunk_bytes):
            f = chunk.astype(np.float32)
            fin = np.isfinite(f)
            nonfinite += int(f.size - np.count_nonzero(fin))
            if fin.any():
                lo, hi = min(lo, float(f[fin].min())), max(hi, float(f[fin].max()))
        if nonfinite:
            out.append(
                Finding(
                    "deep.nonfinite",
                    "error",
                    name,
                    f"{nonfinite:,} NaN/Inf value(s)",
                    "the checkpoint is damaged or training diverged",
                )
            )
        c, _ = canonical_name(name)
        if c in ("lm_head.weight", "fc.weight") and t.numel:
            if lo == 0 and hi == 0:
                out.append(
                    Finding(
                        "deep.zero",
                        "error",
                        name,
                        "all zeros: the drafter predicts nothing useful",
                        "this tensor was never trained or saved",
                    )
                )
            elif lo == hi:
                out.append(
                    Finding(
                        "deep.constant",
                        "error",
                        name,
                        f"every value is {lo}: untrained",
                        "this tensor was never trained or saved",
                    )
                )
    return out


# ------------------------------------------------------------------------ entry point
def validate(
    drafter: str | Path | Checkpoint,
    target: str | Path | Checkpoint | None = None,
    *,
    deep: bool = False,
    engine: str = "sglang",
    max_download: int | str = DEFAULT_MAX_DOWNLOAD,
    load_plan: bool = False,
    engine_args: tuple[str, ...] = (),
) -> ValidationReport:
    """Check a drafter (checkpoint, directory, or bare config.json), optionally against a target.

    Args:
        drafter: a drafter checkpoint, a directory with config.json, or a config.json.
        target: the target's checkpoint, directory, repo id, or config.json.
        deep: also stream every tensor looking for NaN/Inf and zero/constant heads.
        engine: ``sglang`` (default) or ``vllm``, optionally with a release (``NAME==VERSION``,
            :mod:`ckpttools.engines.releases`; without one, the newest known release): whose class
            names and aux-layer-id convention to check against.
        max_download: with ``deep`` on a Hub repo, the most it may download (bytes, or
            e.g. ``"50GB"``); a larger repo is refused before anything is fetched.
        load_plan: also say what that release builds from the drafter, tensor by tensor and
            parameter by parameter (``report.load_plan``), with a finding for each silent outcome.
        engine_args: the server arguments the drafter will be launched with (``--quantization=fp8``):
            the quantization the release then gives it (:mod:`ckpttools.ops.quant_check`).

    Returns:
        a :class:`ValidationReport`; ``report.ok`` is False when any finding is an error.

    Raises:
        CkptError subclasses (exit 2) when an input cannot be read at all.

    Example:
        >>> r = validate("./drafter", target="./target/config.json")  # doctest: +SKIP
        >>> [f.id for f in r.errors]
    """
    from ckpttools.engines.releases import resolve

    release = resolve(engine)
    if release.name not in ENGINES:
        raise ConfigError(f"{release.spec}: validate checks SGLang's or vLLM's reading", hint="give sglang or vllm")
    with applying(release):
        rep = _validate(drafter, target, deep=deep, engine=release.name, max_download=max_download)
        quant_check.add_findings(rep, drafter, target, release, engine_args)
        rep.findings.sort(key=lambda f: SEVERITIES.index(f.severity))
    rep.engine_release = release.spec
    rep.engine_release_from = "given" if ("==" in engine or "@" in engine) else "the newest known release"
    if load_plan:
        _add_load_plan(rep, drafter, release)
    return rep


def _add_load_plan(rep: ValidationReport, drafter: Any, release: Any) -> None:
    """The release's load plan of the drafter, and its silent outcomes as findings."""
    from ckpttools.engines.load_plan import load_plan, plan_findings

    cfg, ck, name = _open_drafter(drafter)
    if ck is None:
        return
    heads = {n: (list(e.shape), e.dtype) for n, e in ck.tensors.items()}
    plan = load_plan(heads, cfg or {}, release)
    rep.load_plan = plan.to_dict()
    # validate's own dropped-tensor and dtype findings come from this plan already: one verdict, one severity
    said = {f.location for f in rep.findings if f.id in ("tensors.dropped", "tensors.training_only")}
    typed = {f.location for f in rep.findings if f.id in ("tensors.dtype", "tensors.dtype_unchecked")}
    for f in plan_findings(plan):
        if f["code"] == "tensor_dropped" and f.get("tensor") in said:
            continue
        if f["code"] in ("tensor_dtype", "tensor_dtype_unchecked") and f.get("tensor") in typed:
            continue
        sev = f["severity"] if f["severity"] in SEVERITIES else "warning"
        where = f.get("name") or f.get("param") or f.get("tensor") or "load plan"
        rep.findings.append(Finding(f"load_plan.{f['code']}", sev, str(where), f["message"], f.get("consequence")))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    rep.findings.sort(key=lambda f: order[f.severity])


def _validate(
    drafter: str | Path | Checkpoint,
    target: str | Path | Checkpoint | None,
    *,
    deep: bool,
    engine: str,
    max_download: int | str,
) -> ValidationReport:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}")
    cfg, ck, name = _open_drafter(drafter)
    other = _other_kind_report(cfg, ck, name, target)
    if other is not None:
        return other
    checked = []
    findings: list[Finding] = []
    if cfg is None:
        findings.append(
            Finding(
                "config.missing",
                "error",
                "config.json",
                "no config.json: SGLang cannot load the drafter",
                "add the drafter's config.json",
            )
        )
    else:
        checked.append("config")
        findings += check_config(cfg, engine)
    if ck is not None:
        checked.append("tensors")
        findings += check_tensors(cfg, ck, engine)
    else:
        findings.append(Finding("input.no_weights", "info", name, "no weights given: config checks only"))
    tname = None
    if target is not None and cfg is not None:
        tcfg, tname = load_target_config(target)
        checked.append("target")
        findings += check_target(cfg, tcfg, ck, engine)
    if deep and ck is not None:
        checked.append("deep")
        ck = _local_for_deep(ck, max_download)
        findings += check_deep(ck)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings = route_fix_hints(findings)
    findings.sort(key=lambda f: order[f.severity])
    rep = ValidationReport(name, tname, checked, findings)
    rep.hub = _hub_of(ck)
    return rep


def _other_kind_report(
    cfg: dict[str, Any] | None, ck: Checkpoint | None, name: str, target: Any
) -> ValidationReport | None:
    """A drafter kind that is not EAGLE-3 (MTP, DFlash, ...): the EAGLE-3 checks do not apply;
    what does is that it fits the target (vocabulary and hidden size)."""
    from ckpttools.engines.flavor import detect_flavor

    f = detect_flavor(cfg, list(ck.tensors) if ck is not None else [])
    if f.is_plain_eagle3 or not f.is_drafter:
        return None
    served = "; ".join(f"{e}: {flag}" for e, flag in f.flags.items())
    findings = [
        Finding("input.kind", "info", name, f"a {f.description} ({', '.join(f.evidence[:-1])}); served by {served}")
    ]
    checked, tname = ["kind"], None
    if target is not None and cfg is not None:
        tcfg, tname = load_target_config(target)
        checked.append("target")
        findings += _target_vocab_findings(essentials(cfg), essentials(tcfg), None)
        findings += _target_hidden_findings(essentials(cfg), essentials(tcfg))
    rep = ValidationReport(name, tname, checked, findings)
    rep.hub = _hub_of(ck)
    return rep


def _local_for_deep(ck: Checkpoint, max_download: int | str) -> Checkpoint:
    """A Hub checkpoint's weights fetched (after saying how much), or refused above the bound."""
    if ck.hub is None or ck.files():
        return ck
    from ckpttools.errors import HubError, opt
    from ckpttools.io.fsutil import note
    from ckpttools.io.units import human_bytes
    from ckpttools.io.writer import parse_size

    size = sum(h.file_size for h in ck.headers.values())
    bound = parse_size(max_download) or 0
    if size > bound:
        raise HubError(
            f"{ck.source}: a deep check reads every tensor, and its weights are {human_bytes(size)} "
            f"(more than the {human_bytes(bound)} allowed)",
            url=str(ck.source),
            hint=f"raise the bound ({opt('max_download')} {int(size / 1e9) + 1}GB), or check without the deep scan",
        )
    note(f"{ck.source}: the deep check downloads {human_bytes(size)} of weights into the Hugging Face cache")
    return open_checkpoint(ck.source, ck.hub.revision, download=True)


def _hub_of(ck: Checkpoint | None) -> dict[str, Any] | None:
    return ck.hub.describe() if ck is not None and ck.hub is not None else None


def kv_pool_sources() -> str:
    """Where the applied SGLang release sizes the KV pools (engines/claims.py ``kv_pool``)."""
    return applied("sglang").claims.value["kv_pool"][1]


_KV_BYTES = 2  # --kv-cache-dtype auto: the model's bf16/fp16


def _kv_per_layer(cfg: dict[str, Any], e: Any) -> tuple[int, str] | None:
    """Bytes of KV cache per token per layer as SGLang allocates them, and how."""
    kv, rope = lookup(cfg, "kv_lora_rank")[0], lookup(cfg, "qk_rope_head_dim")[0]
    if type(kv) is int and type(rope) is int:
        return (kv + rope) * _KV_BYTES, f"MLA: kv_lora_rank {kv} + qk_rope_head_dim {rope}, x {_KV_BYTES} bytes"
    heads, H = e.num_attention_heads, e.hidden_size
    kvh = e.num_key_value_heads or heads
    hd = e.head_dim or (H // heads if isinstance(heads, int) and isinstance(H, int) and heads else None)
    if not (isinstance(kvh, int) and isinstance(hd, int)):
        return None
    return kvh * 2 * hd * _KV_BYTES, f"{kvh} KV heads x head_dim {hd} x 2 (K and V) x {_KV_BYTES} bytes"


def draft_kv_estimate(cfg: dict[str, Any], tcfg: dict[str, Any]) -> dict[str, Any] | None:
    """How SGLang sizes the draft KV pool behind this target (:func:`kv_pool_sources`).

    SGLang budgets one token count N = M / (Tl x (Lt + Ld)) for both pools (M: the KV memory it
    sets aside; Tl: the target's KV bytes per token per layer; Lt, Ld: target and draft layers),
    then allocates the draft pool at N x Dl x Ld (Dl: the drafter's own per-layer KV). Per GiB of
    M, the pools take ``factor`` = (Lt + Ld x Dl / Tl) / (Lt + Ld) GiB.

    Returns:
        the figures, or None when a size is unknown.
    """
    d, t = essentials(cfg), essentials(tcfg)
    dk, tk = _kv_per_layer(cfg, d), _kv_per_layer(tcfg, t)
    Lt, Ld = t.num_hidden_layers, d.num_hidden_layers if isinstance(d.num_hidden_layers, int) else 1
    if dk is None or tk is None or not isinstance(Lt, int):
        return None
    (Dl, dhow), (Tl, thow) = dk, tk
    return {
        "draft_per_layer": Dl,
        "draft_how": dhow,
        "target_per_layer": Tl,
        "target_how": thow,
        "target_layers": Lt,
        "draft_layers": Ld,
        "draft_share": Dl * Ld / (Tl * (Lt + Ld)),
        "factor": (Lt + Ld * Dl / Tl) / (Lt + Ld),
        "per_token": Tl * Lt + Dl * Ld,
    }


def _draft_kv_findings(cfg: dict[str, Any], tcfg: dict[str, Any], d: Any, t: Any, engine: str) -> list[Finding]:
    """A drafter whose per-layer KV outgrows the target's (a Llama layer behind an MLA target): SGLang's
    draft pool is then sized for the target's KV and allocates past its budget at load."""
    est = draft_kv_estimate(cfg, tcfg) if engine == "sglang" else None
    if est is None or est["factor"] <= 1.05:
        return []
    gib = 1 << 30
    ctx = context_length(tcfg)[0] or 4096
    return [
        Finding(
            "target.draft_kv_memory",
            "warning",
            "$.num_key_value_heads",
            f"the drafter's KV cache is {est['draft_per_layer']:,} bytes per token per layer ({est['draft_how']}), the "
            f"target's {est['target_per_layer']:,} ({est['target_how']}, {est['target_layers']} layers). "
            + claim("sglang:kv_pool")
            + ", so the draft pool takes "
            f"{est['draft_share']:.2f} x the KV memory SGLang sets aside (planned: {est['draft_layers']}/"
            f"{est['target_layers'] + est['draft_layers']}), and the two pools {est['factor']:.2f} x it: with "
            f"100 GiB set aside, {100 * est['draft_share']:.0f} GiB for the drafter and {100 * est['factor']:.0f} "
            f"GiB in all; the launch dies allocating it (seen on an H200: 79 GiB) ({kv_pool_sources()})",
            f"launch SGLang with --max-total-tokens N: each token costs {est['per_token']:,} bytes in the two "
            f"pools (N = {ctx}, one full-length request: {ctx * est['per_token'] / gib:.2f} GiB)",
        )
    ]
