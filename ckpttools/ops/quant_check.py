"""validate's checks of a quantized drafter, and of a bf16 one behind a quantized launch.

:func:`add_findings` is called by :func:`ckpttools.ops.validate.validate` with the report it made:

- the scheme as the files hold it (:func:`ckpttools.formats.quant.read_scheme`): every FP8 weight
  has its scale, of the shape its granularity means, in a float dtype; quantization_config agrees
  with the tensors; every scale is finite and positive (read: scales are small);
- what the applied release does with it (:mod:`ckpttools.engines.quant_rules`): whether it loads
  the format and the granularity, its block-size rule, ModelOpt's static input scales, which of
  fc, lm_head and embed_tokens it builds unquantized (the load plan then drops their scales and
  validate's dtype check says their FP8 values load unscaled);
- the quantization the drafter is given at launch (``engine_args`` such as
  ``--quantization=fp8``, the target's own quantization_config): a bf16 drafter handed the
  target's method is the inherit trap.

The load plan's "dropped" findings for scales are replaced by one finding each saying what the
scale's loss does (validate reported every weight_scale as an unknown name before).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ckpttools.engines.quant_load import module_treatment
from ckpttools.engines.quant_rules import draft_quantization, module_kind, rules_for
from ckpttools.formats.quant import QuantScheme, read_scheme

__all__ = ["add_findings", "scheme_of"]

#: the most elements of one scale tensor read for the value checks (a per-block scale of a
#: 163840 x 7168 head is 1280 x 56)
MAX_SCALE_ELEMENTS = 1 << 24


def scheme_of(ck: Any) -> QuantScheme:
    """The quantization scheme of an open checkpoint."""
    return read_scheme(ck.config, {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()})


def add_findings(rep: Any, drafter: Any, target: Any, release: Any, engine_args: Sequence[str]) -> None:
    """Add the quantization findings to ``rep`` (a ValidationReport), in place.

    ``drafter``: the drafter validate opened (:class:`~ckpttools.engines.opened.OpenedDrafter`: not
    opened again), or a path or checkpoint (opened here)."""
    from ckpttools.engines.opened import open_once
    from ckpttools.ops.validate_report import Finding

    opened = open_once(drafter)
    cfg, ck = opened.config, opened.checkpoint
    if cfg is None and ck is None:
        return
    scheme = read_scheme(cfg, opened.headers())
    rules = rules_for(release)
    found: list[Any] = [Finding(p.id, p.severity, p.location, p.message, _HINTS.get(p.id)) for p in scheme.problems]
    if ck is not None and scheme.scales:
        found += _value_findings(ck, scheme, Finding)
    if rules is not None and (scheme.format is not None or scheme.quantized):
        found += _release_findings(scheme, rules, release.spec, Finding)
        blocked = {f.location for f in found if f.id == "quant.block" and f.severity == "error"}
        found = [f for f in found if not (f.id == "quant.block" and f.severity == "warning" and f.location in blocked)]
    if rules is not None:
        found += _launch_findings(scheme, rules, release.spec, target, engine_args, Finding)
    if scheme.scales:
        scales = set(scheme.scales)
        rep.findings = [f for f in rep.findings if not (f.id == "tensors.dropped" and f.location in scales)]
        found += _dropped_scale_findings(scheme, rules, release.spec, Finding)
    if (scheme.format is not None or scheme.quantized) and "quantization" not in rep.checked:
        rep.checked.append("quantization")
    rep.findings += found


_HINTS = {
    "quant.missing_scale": "re-export the drafter with its scales, or dequantize it where they are (ckpt export --dtype bf16)",
    "quant.scale_shape": "re-export the scales in the shape quantization_config gives their strategy",
    "quant.scale_dtype": "store scales as float32 (or bfloat16/float16)",
    "quant.config": "write quantization_config as the format's documentation gives it",
    "quant.config_mismatch": "make quantization_config and the tensors agree (ignore lists, strategies)",
    "quant.orphan_scale": "remove the scale, or give its weight in FP8",
    "quant.block": "use a block size that divides the weight's dimensions",
}


def _value_findings(ck: Any, scheme: QuantScheme, finding: Any) -> list[Any]:
    import numpy as np

    out = []
    for name in scheme.scales:
        t = ck.tensors[name]
        if t.dtype not in ("F32", "BF16", "F16", "F64") or int(np.prod(t.shape or [1])) > MAX_SCALE_ELEMENTS:
            continue
        v = np.asarray(ck.read(name)).astype(np.float32)
        bad = int(np.count_nonzero(~np.isfinite(v) | (v <= 0)))
        if bad:
            out.append(
                finding(
                    "quant.scale_values",
                    "error",
                    name,
                    f"{bad} of {v.size} scale values are NaN, infinite, zero or negative: those rows dequantize to garbage",
                    "re-quantize the weight (a scale is amax / 448, and 1 for an all-zero row)",
                )
            )
    return out


def _release_findings(scheme: QuantScheme, rules: Any, spec: str, finding: Any) -> list[Any]:
    sup = rules.formats.get(scheme.format) if scheme.format else None
    if sup is None:
        return []
    out = [finding("quant.engine", "info", "quantization_config", f"{spec} reads {scheme.format}: {sup.how}", None)]
    if not sup.loads:
        out.append(
            finding("quant.engine", "error", "quantization_config", f"{spec} does not load {scheme.format}", None)
        )
    for w in scheme.quantized:
        quantized, _ = module_treatment(sup, scheme, w.module)
        if quantized and w.granularity and w.granularity not in sup.granularities:
            out.append(
                finding(
                    "quant.engine",
                    "error",
                    w.weight,
                    f"{spec} serves {scheme.format} weights {' or '.join(sup.granularities)}, not {w.granularity} "
                    f"({sup.source})",
                    "quantize per channel or per tensor (ckpt quantize --scheme fp8-per-channel)",
                )
            )
        if quantized and w.granularity and sup.weights_only and _weights_only(scheme):
            served, why = sup.weights_only
            if w.granularity not in served:
                out.append(
                    finding(
                        "quant.engine",
                        "error",
                        w.weight,
                        f"{spec} does not serve weights-only {scheme.format} FP8 per {w.granularity}: {why}",
                        f"quantize with dynamic input activations (ckpt quantize --activations dynamic) or per "
                        f"{' or per '.join(served)}",
                    )
                )
        if quantized and sup.needs_input_scale and w.input_scale is None:
            out.append(
                finding(
                    "quant.missing_scale",
                    "error",
                    w.weight,
                    f"{spec} builds {scheme.format} FP8 layers with a static input_scale ({sup.source}), and "
                    f"{w.module}.input_scale is missing: it stays at its initial value",
                    "export the calibrated input scales with the weights",
                )
            )
    out += _block_rule_findings(scheme, sup, spec, finding)
    out += _engine_quantizes_bf16(scheme, sup, spec, finding)
    return out


def _engine_quantizes_bf16(scheme: QuantScheme, sup: Any, spec: str, finding: Any) -> list[Any]:
    """A module the files keep in bf16 that the engine, reading quantization_config by its own layer
    names, builds as an FP8 layer: the bf16 weight is cast into it and its scale stays at its initial value."""
    out = []
    for w in scheme.weights:
        kind = module_kind(w.module)
        if w.quantized or kind not in sup.names or scheme.rules is None:
            continue
        names, class_linear, how = sup.names[kind]
        if scheme.engine_strategy(names, class_linear) is None:
            continue
        out.append(
            finding(
                "quant.engine",
                "error",
                w.weight,
                f"{spec} builds {names[0]} as an FP8 layer ({how}), but {w.weight} is {w.dtype}: it is cast into the "
                "FP8 parameter and the layer's weight_scale, absent from the files, stays at its initial value",
                f"add {names[0]} to quantization_config's ignore (ckpt quantize writes it)",
            )
        )
    return out


def _block_rule_findings(scheme: QuantScheme, sup: Any, spec: str, finding: Any) -> list[Any]:
    if not sup.block_rule:
        return []
    out = []
    for w in scheme.quantized:
        if w.granularity != "block" or not w.block:
            continue
        bn, bk = w.block
        merged = any(p in w.module for p in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))
        if w.shape[1] % bk or (merged and w.shape[0] % bn):
            out.append(
                finding(
                    "quant.block",
                    "error",
                    w.weight,
                    f"{w.weight} {w.shape} with {bn}x{bk} blocks: {spec} requires {sup.block_rule}",
                    "quantize with a block size that divides the layer's sizes, or per channel",
                )
            )
    return out


def _dropped_scale_findings(scheme: QuantScheme, rules: Any, spec: str, finding: Any) -> list[Any]:
    """One finding per scale the release drops (its module built unquantized)."""
    sup = rules.formats.get(scheme.format) if rules is not None and scheme.format else None
    out = []
    for w in scheme.quantized:
        if w.scale is None or w.configured is None:
            continue
        quantized, why = module_treatment(sup, scheme, w.module)
        if quantized:
            continue
        uniform = w.granularity == "tensor"
        effect = (
            "one scale for the whole tensor: the output is scaled uniformly (argmax kept, softmax sharpened or flattened)"
            if uniform
            else "each row's output is divided by its own scale: "
            + (
                "the draft tokens' ranking changes and acceptance drops"
                if module_kind(w.module) == "lm_head"
                else "the layer computes garbage"
            )
        )
        out.append(
            finding(
                "quant.scale_dropped",
                "warning" if uniform else "error",
                w.scale,
                f"{spec} drops {w.scale} without a word: {why}; {effect}",
                f"keep {w.module} in bf16 (ckpt export --dtype bf16 dequantizes it; ckpt quantize leaves it out)",
            )
        )
    return out


def _target_method(target: Any) -> str | None:
    if target is None:
        return None
    from ckpttools.engines.opened import open_target

    tcfg = open_target(target).read()[0]
    qc = tcfg.get("quantization_config") if isinstance(tcfg, dict) else None
    m = qc.get("quant_method") if isinstance(qc, dict) else None
    return m if isinstance(m, str) else None


def _launch_findings(
    scheme: QuantScheme, rules: Any, spec: str, target: Any, engine_args: Sequence[str], finding: Any
) -> list[Any]:
    """The quantization the release gives the drafter at launch, and the inherit trap."""
    out = []
    tmethod = _target_method(target)
    choice = draft_quantization(rules, scheme.format, None, engine_args)
    if choice.trap:
        flag = rules.draft_flag.value
        out.append(
            finding(
                "quant.inherited",
                "warning",
                "engine arguments",
                f"{spec} gives this drafter, which has no quantization_config, the target's quantization "
                f"({choice.method}, {choice.how}; {rules.inherits_target.source}) and says nothing: {rules.online.value}",
                f"launch with {flag} {rules.opt_out.value} to keep the drafter as trained (ckpt validate and verify: "
                f"--engine-arg={flag}={rules.opt_out.value})"
                if rules.opt_out.value
                else None,
            )
        )
    elif tmethod and scheme.format is None and not choice.method:
        out.append(
            finding(
                "quant.inherited",
                "info",
                "target",
                f"the target is quantized ({tmethod}); {spec} passes only the launch flag --quantization on to the "
                f"drafter ({rules.inherits_target.source}), not the target's own quantization_config: the drafter "
                "stays unquantized unless --quantization is given",
                None,
            )
        )
    elif scheme.format is not None and (engine_args or tmethod):
        out.append(
            finding(
                "quant.inherited",
                "info",
                "quantization_config",
                f"{spec} quantizes the drafter by its own quantization_config ({choice.how}; {choice.source})",
                None,
            )
        )
    return out


def _weights_only(scheme: QuantScheme) -> bool:
    """A compressed-tensors config whose every group quantizes weights alone (no input_activations)."""
    groups = (scheme.config or {}).get("config_groups") if isinstance(scheme.config, dict) else None
    if scheme.format != "compressed-tensors" or not isinstance(groups, dict) or not groups:
        return False
    return all(isinstance(g, dict) and not g.get("input_activations") for g in groups.values())
