"""validate's tensor checks: the drafter's weights against its config (:func:`check_tensors`): the
names an engine loads or drops, shapes, dtypes, the q/k norms, the EAGLE-3.1 options and norm flags,
d2t/t2d; and the deep scan (:func:`check_deep`), which streams every tensor."""

from __future__ import annotations

from typing import Any

from ckpttools.errors import MappingError
from ckpttools.engines.claims import applied, claim
from ckpttools.engines.engine import engine_for
from ckpttools.engines.config_facts import ConfigFacts, config_facts, facts_weight_problems
from ckpttools.engines.flavor import MLA_ARCHS
from ckpttools.formats.config import config_problems
from ckpttools.engines.aux_rules import FC_OPTION_SOURCES, LATER_LAYER_NORM
from ckpttools.engines.names import QK_NORM, QWEN3_DRAFTER_ARCH, sglang_loads, suggest_rename
from ckpttools.formats.names import canonical_name, is_training_only
from ckpttools.io.checkpoint import Checkpoint
from ckpttools.ops.validate_report import Finding

__all__ = ["check_tensors", "check_deep"]


def _expected_shapes(f: ConfigFacts, canon: dict[str, Any], engine: str) -> dict[str, tuple[int, ...]]:
    ess = f.e
    if ess.invalid:  # the one config guard: a size is read only from a usable config (validate says why)
        return {}
    H, V = ess.hidden_size, ess.vocab_size
    if not isinstance(H, int):
        return {}
    Ht = ess.target_hidden_size or H
    opts = f.fc[engine]
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
        return exp | _mla_shapes(f.config, H, heads, inter)
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
    return tensor_findings(config_facts(cfg) if cfg is not None else None, ck, engine, plan)


def tensor_findings(f: ConfigFacts | None, ck: Checkpoint, engine: str, plan: Any) -> list[Finding]:
    """:func:`check_tensors` of a config read once by the caller (``f``,
    :func:`~ckpttools.engines.config_facts.config_facts`; None: no config), with the load plan
    (:func:`usable_plan`) made once by the caller."""
    out, canon = _name_findings(ck, engine, f.config if f is not None else None, plan)
    out += _tensor_dtype_findings(ck, engine, plan)
    if f is None:
        return out
    shapes = _shape_findings(f, canon, engine)
    options = _option_findings(f, canon, engine)
    fields = _weight_field_findings(f, canon, {x.id for x in options})
    return out + shapes + options + fields + _mapping_findings(f.e, canon, ck)


def _plan(ck: Checkpoint, cfg: dict[str, Any] | None, engine: str) -> Any:
    """The applied release's load plan of the drafter (engines/load_plan.py); None when the config has a
    field the plan would size from that is unusable (validate says which) or it builds no class."""
    return usable_plan(None if config_problems(cfg) else raw_plan(ck, cfg, engine))


def raw_plan(ck: Checkpoint, cfg: dict[str, Any] | None, engine: str) -> Any:
    """The applied release's load plan of the drafter, whatever it builds (made once per drafter)."""
    from ckpttools.engines.load_plan import load_plan

    heads = {n: (list(e.shape), e.dtype) for n, e in ck.tensors.items()}
    return load_plan(heads, cfg or {}, applied(engine))


def usable_plan(plan: Any) -> Any:
    """The plan the tensor checks read: None when it builds no class or places no tensor."""
    return plan if plan is not None and plan.cls is not None and plan.tensors else None


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
    eng = engine_for(engine)
    who = eng.who
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
    new = suggest_rename(name) if eng.drops_unknown_names_silently else None
    if eng.drops_unknown_names_silently:
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
    serves = engine_for(engine).serves_qk_norm_drafter
    if serves and archs[:1] == [QWEN3_DRAFTER_ARCH]:
        return []
    msg = f"q_norm/k_norm ({len(qk)} tensors, e.g. {qk[0]}): a Qwen3-architecture drafter. " + claim(
        f"{engine}:qk_norm"
    )
    fix = (
        f"set architectures to [{QWEN3_DRAFTER_ARCH!r}] (ckpt export --format vllm does)"
        if serves
        else f"serve it with vLLM (ckpt export --format vllm writes {QWEN3_DRAFTER_ARCH})"
    )
    return [Finding("tensors.qk_norm", "error", qk[0], msg, fix)]


def _shape_findings(f: ConfigFacts, canon: dict[str, Any], engine: str) -> list[Finding]:
    out: list[Finding] = []
    ess = f.e
    for name, shape in _expected_shapes(f, canon, engine).items():
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
                        _missing_words(name, engine),
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


def _missing_words(name: str, engine: str) -> str:
    """What a missing tensor does in the engine (its claim, else SGLang's loader's words)."""
    key = engine_for(engine).missing_tensor_claim
    return claim(key) if key is not None else _sglang_missing(name)


def _sglang_missing(name: str) -> str:
    """What SGLang serves in place of a tensor it does not find (load_weights skips it)."""
    if name.endswith("norm.weight"):
        return claim("sglang:missing.norm")
    if name == "fc.weight":
        return claim("sglang:missing.fc")
    return claim("sglang:missing.other")


def _weight_field_findings(f: ConfigFacts, canon: dict[str, Any], seen: set[str]) -> list[Finding]:
    """Config fields the weights contradict (engines/config_rules.py weight_problems); not those already said."""
    shapes = {n: tuple(t.shape) for n, t in canon.items()}
    out = []
    for where, why in facts_weight_problems(f, shapes).items():
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


def _option_findings(f: ConfigFacts, canon: dict[str, Any], engine: str) -> list[Finding]:
    """EAGLE-3.1 options against the weights, both ways, and the aux count against the captures."""
    o = f.fc[engine]
    src = f"read from {FC_OPTION_SOURCES[engine]}"
    out: list[Finding] = []
    ids, where = f.aux_ids
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
    out += _norm_flag_findings(f.config, canon, o, engine, src)
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


def _mapping_findings(ess: Any, canon: dict[str, Any], ck: Checkpoint) -> list[Finding]:
    """d2t/t2d read and checked; or missing where the head is reduced."""
    out: list[Finding] = []
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
