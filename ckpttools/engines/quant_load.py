"""The quantized part of a load plan: each scale's fate and each FP8 weight's parameter, in one
release's reading (:mod:`ckpttools.engines.quant_rules`).

:func:`apply` is called by :func:`ckpttools.engines.load_plan.load_plan` once the plain plan is
made. A scale of a module the release quantizes loads into that module's scale parameter (named
like its weight's parameter: ``...qkv_proj.weight_scale``, shard ``q``); a scale of a module it
builds unquantized (SGLang's fc, lm_head under compressed-tensors) is dropped, with the reason,
and that module's FP8 weight becomes a dtype error: copied into a bf16 parameter without its scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ckpttools.engines.quant_rules import FormatSupport, module_kind, rules_for
from ckpttools.engines.releases import EngineRelease
from ckpttools.formats.quant import FP8_DTYPES, QuantScheme, module_of, read_scheme

__all__ = ["apply", "module_treatment", "SCALE_PARAM_KINDS"]

SCALE_PARAM_KINDS = ("weight_scale", "weight_scale_inv", "input_scale")


def module_treatment(sup: FormatSupport | None, scheme: QuantScheme, module: str) -> tuple[bool, str]:
    """(quantized?, why not) for one module in a release that reads ``scheme`` with ``sup``."""
    if sup is None:
        return False, "the release reads no quantization config of this drafter: its layers are plain bf16 ones"
    kind = module_kind(module)
    treat = sup.kinds.get(kind, "quantized")
    w = scheme.weight(module)
    if not treat.startswith("quantized"):
        return False, treat
    if kind in sup.names and scheme.rules is not None:
        names, class_linear, how = sup.names[kind]
        if scheme.engine_strategy(names, class_linear) is None:
            return False, f"quantization_config leaves {names[0]} unquantized in this engine's reading: {how}"
        return True, ""
    if w is not None and w.configured is None:
        return False, "quantization_config leaves this module unquantized (ignored or untargeted)"
    return True, ""


def apply(
    plan: Any, release: EngineRelease, config: Mapping[str, Any], headers: Mapping[str, tuple[Sequence[int], str]]
) -> None:
    """Give each scale tensor its fate and fix the FP8 weights' dtype entries in ``plan`` (in place)."""
    rules = rules_for(release)
    if rules is None:
        return
    scheme = read_scheme(config, {n: (list(s), d) for n, (s, d) in headers.items()})
    if scheme.format is None and not scheme.scales:
        return  # no quantization to speak of: FP8 weights without scales stay "unchecked"
    sup = rules.formats.get(scheme.format) if scheme.format else None
    scales = set(scheme.scales)
    by_name = {t.name: t for t in plan.tensors}
    out = []
    loaded: set[str] = set()
    for t in plan.tensors:
        if t.name not in scales:
            out.append(t)
            continue
        mod = module_of(t.name) or t.name
        suffix = t.name[len(mod) + 1 :]
        w = by_name.get(mod + ".weight")
        quantized, why = module_treatment(sup, scheme, mod)
        if quantized and w is not None and w.param is not None and w.fate in ("loaded", "renamed"):
            param = w.param.rsplit(".", 1)[0] + "." + suffix
            out.append(replace(t, fate=w.fate, param=param, shard=w.shard, rule=w.rule, reason=None))
            loaded.add(t.name)
        else:  # no scale parameter: the loader drops it (SGLang) or raises over it (vLLM), as the plain plan says
            reason = why or f"its weight {mod}.weight is not loaded"
            fate = "refused" if t.fate == "refused" else "dropped"
            out.append(replace(t, fate=fate, param=None, shard=None, reason=f"a scale with no parameter: {reason}"))
    plan.tensors = out
    plan.refused = [m for m in plan.refused if m.split(": ", 1)[0] not in loaded]
    plan.dtypes = _dtypes(plan.dtypes, sup, scheme)
    where = f"{release.spec}"
    if sup is not None:
        plan.notes.append(
            f"quantization: {scheme.format}, which {where} {'loads' if sup.loads else 'refuses'}: {sup.how} ({sup.source})"
        )
    elif scheme.format is not None:
        plan.notes.append(f"quantization: {scheme.format}, which {where} has no reading for in ckpttools' tables")


def _dtypes(entries: list[dict[str, Any]], sup: FormatSupport | None, scheme: QuantScheme) -> list[dict[str, Any]]:
    """Drop the 'unchecked' entries of FP8 weights the release loads into FP8 layers; make the
    others errors saying why the weight loads unscaled."""
    out = []
    for e in entries:
        if e.get("dtype") not in FP8_DTYPES:
            out.append(e)
            continue
        mod = module_of(e["tensor"]) or e["tensor"]
        quantized, why = module_treatment(sup, scheme, mod)
        if quantized:
            continue
        out.append(dict(e, verdict="wrong", how=f"{why}; its values are copied without their scale"))
    return out
