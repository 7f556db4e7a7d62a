"""export of a quantized drafter: dequantized exactly, or kept in FP8 for a release that loads it.

:func:`adjust` is called by :func:`ckpttools.ops.export.plan_export` with the planned tensors and
config:

- ``dtype`` ``bf16`` or ``fp16``: every FP8 weight becomes ``value x scale``, computed in float32
  and rounded once to the output dtype (:func:`ckpttools.ops.quantize.dequantize_weight`); the
  scales and ``quantization_config`` are left out. A weight whose scale is missing or misshapen
  cannot be dequantized: refused with the scheme's first problem.
- any other dtype: the FP8 weights and their scales are copied byte for byte (never cast: a scale
  rounded to bf16 changes every value it multiplies), if the output's release loads the scheme
  with every quantized module quantized (:mod:`ckpttools.engines.quant_rules`); otherwise refused
  with the reason, pointing at ``--dtype bf16``.
"""

from __future__ import annotations

from typing import Any

from ckpttools.engines.quant_load import module_treatment
from ckpttools.engines.quant_rules import rules_for
from ckpttools.engines.releases import EngineRelease
from ckpttools.errors import CheckpointFormatError, ConfigError, opt
from ckpttools.formats.quant import QuantScheme, read_scheme
from ckpttools.io.checkpoint import Checkpoint, numpy_dtype
from ckpttools.io.plan import Copy, Data, PlannedTensor, TensorRef

__all__ = ["adjust", "scheme_of_checkpoint"]

_DEQUANT = {"bf16": "BF16", "fp16": "F16"}


def scheme_of_checkpoint(ck: Checkpoint) -> QuantScheme:
    return read_scheme(ck.config, {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()})


def adjust(
    ck: Checkpoint,
    names: dict[str, str],
    tensors: list[PlannedTensor],
    cfg: dict[str, Any],
    dtype: str,
    release: EngineRelease,
    report: Any,
) -> list[PlannedTensor]:
    """The export's tensors for a quantized drafter (``cfg`` loses quantization_config when
    dequantized); ``report`` is the ExportReport, whose ``dropped`` and ``notes`` say what became of the scales."""
    scheme = scheme_of_checkpoint(ck)
    if scheme.format is None and not scheme.quantized and not scheme.scales:
        return tensors
    scales = set(scheme.scales)
    why = "a scale, dequantized into its weight" if dtype in _DEQUANT else "a scale, kept beside its weight"
    report.dropped = [[n, why] if n in scales else [n, r] for n, r in report.dropped]
    if dtype in _DEQUANT:
        return _dequantized(ck, scheme, names, tensors, cfg, _DEQUANT[dtype], report.notes)
    _refuse_unloaded(ck, scheme, release)
    report.dropped = [d for d in report.dropped if d[0] not in scales]
    extra: dict[str, list[PlannedTensor]] = {}
    for w in scheme.weights:
        if w.weight not in names:
            continue
        base = names[w.weight][: -len(".weight")]
        for s in (w.scale, w.input_scale):
            if s is not None and s not in names:
                info = ck.tensors[s]
                new = base + s[len(w.module) :]
                extra.setdefault(names[w.weight], []).append(
                    PlannedTensor(new, info.dtype, tuple(info.shape), Copy(TensorRef.of(ck, s)))
                )
    out = []
    for t in tensors:
        src = next((n for n, new in names.items() if new == t.name), None)
        if src in scales:  # a scale is never cast: a scale rounded to bf16 changes every value it multiplies
            t = PlannedTensor(t.name, ck.tensors[src].dtype, t.shape, Copy(TensorRef.of(ck, src)))
        out.append(t)
        out += extra.get(t.name, [])
    report.notes.append(
        f"kept in {scheme.format}: {len(scheme.quantized)} FP8 weights and {len(scales)} scales copied byte for byte, "
        f"which {release.spec} loads"
    )
    return out


def _refuse_unloaded(ck: Checkpoint, scheme: QuantScheme, release: EngineRelease) -> None:
    rules = rules_for(release)
    sup = rules.formats.get(scheme.format) if rules is not None and scheme.format else None
    hint = f"dequantize: {opt('dtype')} bf16"
    if sup is None or not sup.loads:
        what = scheme.format or "FP8 weights without a quantization_config"
        raise ConfigError(f"{ck.source}: ckpttools has no reading of {release.spec} loading {what}", hint=hint)
    for w in scheme.quantized:
        ok, why = module_treatment(sup, scheme, w.module)
        if not ok:
            raise ConfigError(f"{ck.source}: {release.spec} would load {w.weight} unscaled: {why}", hint=hint)
        if w.granularity and w.granularity not in sup.granularities:
            raise ConfigError(
                f"{ck.source}: {release.spec} serves {scheme.format} {' or '.join(sup.granularities)} weights, "
                f"and {w.weight} is quantized per {w.granularity}",
                hint=hint,
            )


def _dequantized(
    ck: Checkpoint,
    scheme: QuantScheme,
    names: dict[str, str],
    tensors: list[PlannedTensor],
    cfg: dict[str, Any],
    out_dtype: str,
    notes: list[str],
) -> list[PlannedTensor]:
    import numpy as np

    bad = next((p for p in scheme.problems if p.severity == "error"), None)
    if bad is not None:
        raise CheckpointFormatError(
            f"{ck.source}: cannot dequantize: {bad.message}",
            path=str(ck.source),
            tensor=bad.location,
            hint="give the drafter with every weight's scale, as quantization_config describes it",
        )
    new_of = {src: new for src, new in names.items()}
    quant = {w.weight: w for w in scheme.quantized}
    dropped = {new_of[s] for s in scheme.scales if s in new_of}
    out = []
    for t in tensors:
        src = next((n for n, new in names.items() if new == t.name), None)
        if t.name in dropped:
            continue
        if src in quant:
            w = quant[src]
            assert w.scale is not None
            from ckpttools.ops.quantize import dequantize_weight  # FP8 weights only

            v = dequantize_weight(ck.read(src), ck.read(w.scale), w.block)
            if not np.isfinite(v).all():
                raise CheckpointFormatError(
                    f"{ck.source}: {src} dequantizes to NaN or infinity (its scale {w.scale})",
                    path=str(ck.source),
                    tensor=src,
                )
            t = PlannedTensor(t.name, out_dtype, t.shape, Data(v.astype(numpy_dtype(out_dtype))))
        out.append(t)
    for key in ("quantization_config", "compression_config"):
        cfg.pop(key, None)
    notes.append(
        f"dequantized {len(quant)} FP8 weights ({scheme.format}): value x scale in float32, rounded once to "
        f"{out_dtype}; {len(dropped)} scales and quantization_config left out"
    )
    return out


def refuse_quantized(ck: Checkpoint, what: str) -> None:
    """Refuse a quantized drafter where ``what`` (an output format) has no quantized reading."""
    scheme = scheme_of_checkpoint(ck)
    if scheme.format is not None or scheme.quantized:
        raise ConfigError(
            f"{ck.source} is quantized ({scheme.format or 'FP8 weights'}): {what} takes bf16/fp16 drafters only",
            hint="dequantize first: ckpt export --format sglang --dtype bf16",
        )
