"""validate's target checks: the drafter against its target's config (:func:`check_target`):
vocabulary, hidden size, aux layer ids under the engine's capture rule, dtype, context length and
rope, and how SGLang sizes the draft KV pool behind the target (:func:`draft_kv_estimate`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ckpttools.errors import MappingError
from ckpttools.engines.claims import applied, claim
from ckpttools.engines.config_facts import ConfigFacts, config_facts
from ckpttools.engines.engine import engine_for
from ckpttools.engines.flavor import LLAMA_TARGET
from ckpttools.engines.aux_rules import capture_rule, default_boundaries
from ckpttools.io.checkpoint import Checkpoint
from ckpttools.ops.validate_config import cpu_attention_findings, schema_findings, sglang_said, type_findings
from ckpttools.ops.validate_report import Finding

__all__ = ["check_target", "target_vocab_findings", "target_hidden_findings", "draft_kv_estimate", "kv_pool_sources"]


def check_target(
    cfg: dict[str, Any],
    tcfg: dict[str, Any],
    ck: Checkpoint | None = None,
    engine: str = "sglang",
    *,
    engine_args: Sequence[str] = (),
) -> list[Finding]:
    """The drafter against its target's config: vocabulary, hidden size, aux layers, dtype, context, rope;
    the KV advice under the engine arguments given (``engine_args``)."""
    return target_findings(config_facts(cfg), config_facts(tcfg), ck, engine, engine_args)


def target_findings(
    d: ConfigFacts,
    t: ConfigFacts,
    ck: Checkpoint | None,
    engine: str,
    engine_args: Sequence[str] = (),
) -> list[Finding]:
    """:func:`check_target` of both configs read once by the caller
    (:func:`~ckpttools.engines.config_facts.config_facts`: ``d`` the drafter's, ``t`` the target's)."""
    tcfg = t.config
    out = schema_findings(tcfg, "target-config.schema.json", "target.schema", "target config: ", _TARGET_FIX)
    out += type_findings(tcfg, "target.type", "target config: ", {f.location for f in out})
    if out:
        return out
    out += target_vocab_findings(d.e, t.e, ck)
    out += target_hidden_findings(d.e, t.e)
    out += _aux_id_findings(d, t, engine)
    out += _target_dtype_findings(d.e, t.e, engine)
    out += _target_context_findings(d, t, engine)
    out += _draft_kv_findings(d, t, engine, engine_args)
    return out + cpu_attention_findings(t, engine, "target")


_TARGET_FIX = "give the target's own config.json"


def target_vocab_findings(d: Any, t: Any, ck: Checkpoint | None) -> list[Finding]:
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


def target_hidden_findings(d: Any, t: Any) -> list[Finding]:
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


def _aux_id_findings(d: ConfigFacts, tf: ConfigFacts, engine: str) -> list[Finding]:
    """Aux layer ids against the target, read the way the engine reads them for the target's class
    (engines/aux_rules.py holds each rule with the source lines it was read from)."""
    t = tf.e
    L = t.num_hidden_layers
    if not isinstance(L, int):  # the target schema requires it; a bad value was reported before
        return []
    arch = t.architectures[0] if t.architectures else None
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
    ids, where = d.aux_ids
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
    if engine_for(engine).aux_out_of_reach_crashes:
        return msg + claim(f"{engine}:aux.crash", got=len(ids) - len(bad), want=len(ids))
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
                "error" if engine_for(engine).dtype_mismatch_crashes else "warning",
                "$.torch_dtype",
                f"the drafter is {d.torch_dtype} (served as {_served(d.torch_dtype)}) but the target is "
                f"{t.torch_dtype}: " + claim("sglang:dtype.crash") + sglang_said(engine),
                f"ckpt export --target TARGET casts to {t.torch_dtype}; or launch with --dtype {t.torch_dtype}",
            )
        )
    return out


def _context_finding(dctx: int, dhow: str, tctx: int, thow: str, engine: str, rope: str = "default") -> Finding:
    covers = f"the drafter covers {dctx:,} positions ({dhow}) but the target's context is {tctx:,} ({thow}): "
    if engine_for(engine).raises_short_context:
        cache_only = applied(engine).claims.value.get("context.cache_only_rope")
        limited = cache_only is not None and rope not in cache_only[0].split()
        return Finding(
            "target.context_length",
            "warning",
            "$.max_position_embeddings",
            covers
            + (
                claim(f"{engine}:context.limit", rope=rope, dctx=dctx)
                if limited
                else claim(f"{engine}:context.raise", dctx=dctx)
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


def _target_context_findings(df: ConfigFacts, tf: ConfigFacts, engine: str = "sglang") -> list[Finding]:
    """Context length and rope against the target's."""
    out: list[Finding] = []
    d, t = df.e, tf.e
    dctx, dhow = df.context
    tctx, thow = tf.context
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


def kv_pool_sources() -> str:
    """Where the applied SGLang release sizes the KV pools (engines/claims.py ``kv_pool``)."""
    return applied("sglang").claims.value["kv_pool"][1]


def draft_kv_estimate(cfg: dict[str, Any], tcfg: dict[str, Any]) -> dict[str, Any] | None:
    """How SGLang sizes the draft KV pool behind this target (:func:`kv_pool_sources`).

    SGLang budgets one token count N = M / (Tl x (Lt + Ld)) for both pools (M: the KV memory it
    sets aside; Tl: the target's KV bytes per token per layer; Lt, Ld: target and draft layers),
    then allocates the draft pool at N x Dl x Ld (Dl: the drafter's own per-layer KV). Per GiB of
    M, the pools take ``factor`` = (Lt + Ld x Dl / Tl) / (Lt + Ld) GiB.

    Returns:
        the figures, or None when a size is unknown.
    """
    return _kv_estimate(config_facts(cfg), config_facts(tcfg))


def _kv_estimate(df: ConfigFacts, tf: ConfigFacts) -> dict[str, Any] | None:
    """:func:`draft_kv_estimate` of both configs read once by the caller."""
    dk, tk = df.kv_per_layer, tf.kv_per_layer
    d, t = df.e, tf.e
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


def _draft_kv_findings(d: ConfigFacts, t: ConfigFacts, engine: str, engine_args: Sequence[str] = ()) -> list[Finding]:
    """A drafter whose per-layer KV outgrows the target's (a Llama layer behind an MLA target): SGLang's
    draft pool is then sized for the target's KV and allocates past its budget at load. A token cap the
    engine arguments give already, of one full-length request or more, leaves nothing to advise."""
    eng = engine_for(engine)
    est = _kv_estimate(d, t) if eng.shares_kv_token_count else None
    if est is None or est["factor"] <= 1.05:
        return []
    gib = 1 << 30
    ctx = eng.context_cap(engine_args) or t.context[0] or 4096  # the context the launch serves
    cap = eng.kv_token_cap(engine_args)
    if cap is not None and cap >= ctx:
        return []
    need = f"N = {ctx}, one full-length request: {ctx * est['per_token'] / gib:.2f} GiB"
    if cap is None:
        hint = (
            f"launch SGLang with --max-total-tokens N: each token costs {est['per_token']:,} bytes in the two "
            f"pools ({need})"
        )
    else:
        hint = (
            f"the --max-total-tokens {cap:,} given is fewer than one full-length request: raise it to {ctx} "
            f"or more (each token costs {est['per_token']:,} bytes in the two pools; {need})"
        )
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
            hint,
        )
    ]
