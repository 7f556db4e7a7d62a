"""``ckpt quantize``: a weights-only FP8 drafter from a bf16 one, and the arithmetic of FP8 scales
that remap and export share (quantize a row, dequantize a weight exactly).

The output is in the compressed-tensors layout (:mod:`ckpttools.formats.quant`): each quantized
``X.weight`` as F8_E4M3 beside ``X.weight_scale`` (float32; (out, 1) per channel, (1,) per tensor),
and ``quantization_config`` with one config group targeting ``Linear``, weights
``{num_bits: 8, type: float, strategy, symmetric: true, dynamic: false}``, no input activations,
``format: float-quantized``, and ``ignore`` naming fc and lm_head unless asked to quantize them.
That is the layout SGLang was seen to serve (a known pair at 4.0, as in bf16), and the one the
engine tables say each release loads (:mod:`ckpttools.engines.quant_rules`): a module the chosen
release would build unquantized (SGLang's fc, its lm_head under compressed-tensors) is refused
with the reason.

Scale per channel (or per tensor): ``amax / 448``, an all-zero row's scale 1 (ModelOpt's rule,
modelopt/torch/export/quant_utils.py:79-102); value: ``w / scale`` clipped to +-448 and rounded
to E4M3 once (quant_utils.py:869-881; compressed_tensors quantization/quant_args.py:90-96).
Dequantized: ``value x scale`` in float32 (compressed_tensors quantization/lifecycle/forward.py:73-108;
a block scale repeated over its block), rounded once to the output dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpttools.engines.claims import applying
from ckpttools.engines.quant_load import module_treatment
from ckpttools.engines.quant_rules import module_kind, rules_for
from ckpttools.engines.releases import resolve
from ckpttools.errors import EXIT_FINDINGS, CheckpointFormatError, CkptError, ConfigError, opt
from ckpttools.formats.quant import FP8_MAX, QuantScheme, read_scheme
from ckpttools.io.checkpoint import Checkpoint, open_checkpoint
from ckpttools.io.guard import check_output
from ckpttools.io.plan import Check, Copy, Data, ManifestPlan, PlannedTensor, TensorRef, WritePlan, execute, side_files
from ckpttools.io.writer import parse_size

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "SCHEMES",
    "QuantizeReport",
    "QuantizeRejected",
    "plan_quantize",
    "quantize",
    "quantize_weight",
    "dequantize_weight",
    "headers_of",
]

SCHEMES = {"fp8-per-tensor": "tensor", "fp8-per-channel": "channel"}
#: the modules ``include`` may add to the quantized ones
OPTIONAL = ("lm_head", "fc")
_E4M3 = "F8_E4M3"


class QuantizeRejected(CkptError):
    """validate found errors in what quantize wrote; nothing was put at OUT (exit 1)."""

    exit_code = EXIT_FINDINGS

    def __init__(self, message: str, report: QuantizeReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class QuantizeReport:
    """What :func:`quantize` wrote."""

    output: str | None
    source: str
    scheme: str
    engine_release: str
    quantized: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    max_abs_error: float = 0.0
    seconds: float = 0.0
    validation: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def headers_of(ck: Checkpoint) -> dict[str, tuple[list[int], str]]:
    """{name: (shape, dtype)} of an open checkpoint, for :func:`ckpttools.formats.quant.read_scheme`."""
    return {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()}


def quantize_weight(w: np.ndarray, granularity: str) -> tuple[np.ndarray, np.ndarray]:
    """(E4M3 values, float32 scale) of a 2-D weight: per ``channel`` (scale (out, 1)) or ``tensor`` ((1,)).

    Example:
        >>> q, s = quantize_weight(np.array([[1.0, -2.0], [0.0, 0.0]], np.float32), "channel")
        >>> s.ravel().tolist(), float(q.astype(np.float32)[0, 1])
        ([0.004464285913854837, 1.0], -448.0)
    """
    import numpy as np
    import ml_dtypes

    a = np.asarray(w, np.float32)
    amax = np.abs(a).max(axis=1, keepdims=True) if granularity == "channel" else np.abs(a).max(keepdims=True)
    scale = (amax / np.float32(FP8_MAX[_E4M3])).astype(np.float32)
    scale[scale == 0] = 1.0
    q = np.clip(a / scale, -FP8_MAX[_E4M3], FP8_MAX[_E4M3]).astype(ml_dtypes.float8_e4m3fn)
    return q, (scale.reshape(-1, 1) if granularity == "channel" else scale.reshape(1))


def dequantize_weight(q: np.ndarray, scale: np.ndarray, block: Sequence[int] | None = None) -> np.ndarray:
    """``q x scale`` in float32: a scale of one value, one per row ((out,) or (out, 1)), or one per
    block ((ceil(out/bn), ceil(in/bk)) with ``block`` = [bn, bk]), repeated over its block."""
    import numpy as np

    v = np.asarray(q).astype(np.float32)
    s = np.asarray(scale).astype(np.float32)
    if s.size == 1:
        return v * s.reshape(())
    if block is not None and s.ndim == 2 and s.shape[1] != 1:
        bn, bk = int(block[0]), int(block[1])
        full = np.repeat(np.repeat(s, bn, axis=0), bk, axis=1)[: v.shape[0], : v.shape[1]]
        return v * full
    return v * s.reshape(v.shape[0], 1)


def _targets(ck: Checkpoint, include: Sequence[str]) -> list[str]:
    """The 2-D float weights to quantize: the decoder layers' linears, plus fc / lm_head if included."""
    out = []
    for n, t in ck.tensors.items():
        if not n.endswith(".weight") or len(t.shape) != 2 or t.dtype not in ("BF16", "F16", "F32"):
            continue
        kind = module_kind(n[: -len(".weight")])
        if kind == "embed" or (kind in OPTIONAL and kind not in include):
            continue
        out.append(n)
    return out


def _refuse_unloadable(release: Any, include: Sequence[str]) -> None:
    """A module the chosen release would build unquantized cannot be asked for: say why."""
    rules = rules_for(release)
    sup = rules.formats.get("compressed-tensors") if rules else None
    if sup is None:
        raise ConfigError(
            f"{release.spec}: ckpttools has no reading of how it loads compressed-tensors FP8",
            hint=f"give an engine release the tables know ({opt('engine')})",
        )
    probe = QuantScheme("compressed-tensors", {}, None)
    for kind in include:
        ok, why = module_treatment(sup, probe, kind)
        if not ok:
            raise ConfigError(
                f"{release.spec} would not load {kind} quantized: {why}",
                hint=f"leave {kind} out of {opt('include')} (it stays bf16)",
            )


#: input activations: none (weights only) or quantized per token at run time (compressed-tensors' FP8_DYNAMIC)
ACTIVATIONS = {
    "none": None,
    "dynamic": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True},
}


#: the names each optional module goes by: the file's, and the engines' layer names (vLLM's fc is model.fc;
#: see engines/quant_rules.py), so one ignore list holds in every reading
_NAMES = {"lm_head": ["lm_head"], "fc": ["fc", "model.fc"]}


def _config(ck: Checkpoint, granularity: str, include: Sequence[str], activations: str) -> dict[str, Any]:
    ignore = [n for k in OPTIONAL if k not in include for n in _NAMES[k]]
    weights = {"num_bits": 8, "type": "float", "strategy": granularity, "symmetric": True, "dynamic": False}
    # the class target Linear reaches no ParallelLMHead in the engines: an included lm_head is named
    targets = ["Linear", *(["lm_head"] if "lm_head" in include else [])]
    group = {"targets": targets, "weights": weights, "input_activations": ACTIVATIONS[activations]}
    qc = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": group},
        "ignore": ignore,
        "kv_cache_scheme": None,
    }
    return dict(ck.config or {}, quantization_config=qc)


def _auto_activations(release: Any, granularity: str) -> str:
    """``auto``: weights only where the release serves weights-only FP8 at this granularity, else
    dynamic input activations (the release table's ``weights_only``: engines/quant_rules.py)."""
    from ckpttools.engines.quant_rules import rules_for

    rules = rules_for(release)
    sup = rules.formats.get("compressed-tensors") if rules is not None else None
    if sup is not None and sup.weights_only and granularity not in sup.weights_only[0]:
        return "dynamic"
    return "none"


def _check_args(scheme: str, activations: str, include: Sequence[str]) -> None:
    if activations == "auto":
        return _check_args(scheme, "none", include)
    if scheme not in SCHEMES:
        raise ConfigError(f"scheme must be one of {', '.join(SCHEMES)}", hint=f"give {opt('scheme')} fp8-per-channel")
    if activations not in ACTIVATIONS:
        raise ConfigError(
            f"activations must be one of {', '.join(ACTIVATIONS)}", hint=f"give {opt('activations')} none"
        )
    bad = [k for k in include if k not in OPTIONAL]
    if bad:
        raise ConfigError(
            f"{bad[0]!r} cannot be included: only {', '.join(OPTIONAL)}", hint=f"give {opt('include')} lm_head or fc"
        )


def plan_quantize(
    src: str | Path,
    out: str | Path,
    *,
    scheme: str = "fp8-per-channel",
    engine: str = "sglang",
    include: Sequence[str] = (),
    activations: str = "auto",
    max_shard_size: int | str | None = None,
) -> WritePlan:
    """What :func:`quantize` would write (the quantized weights are computed here, in memory:
    ``plan.reads`` says so). Raises ConfigError for a scheme or module the release would not load,
    CheckpointFormatError for a drafter already quantized."""
    _check_args(scheme, activations, include)
    release = resolve(engine)
    _refuse_unloadable(release, include)
    granularity = SCHEMES[scheme]
    if activations == "auto":
        activations = _auto_activations(release, granularity)
    with open_checkpoint(src) as ck:
        check_output(out, [ck.root])
        existing = read_scheme(ck.config, headers_of(ck))
        if existing.format is not None or existing.quantized:
            raise CheckpointFormatError(
                f"{src} is already quantized ({existing.format or 'FP8 weights'})",
                path=str(src),
                hint="dequantize it first (ckpt export --dtype bf16), then quantize",
            )
        names = set(_targets(ck, include))
        if not names:
            raise CheckpointFormatError(f"{src}: no bf16/fp16/fp32 linear weight to quantize", path=str(src))
        report = QuantizeReport(None, str(src), scheme, release.spec)
        tensors = _tensors(ck, names, granularity, report)
        report.bytes_before = sum(t.nbytes for t in ck.tensors.values())
        report.bytes_after = sum(t.nbytes for t in tensors)
        params = {
            "scheme": scheme,
            "activations": activations,
            "engine": release.spec,
            "include": list(include),
            "max_shard_size": max_shard_size,
        }
        return WritePlan(
            "quantize",
            str(out),
            tensors,
            config=_config(ck, granularity, include, activations),
            config_before=ck.config,
            side_files=side_files(ck),
            manifest=ManifestPlan("quantize", params, {"drafter": ck.files()}),
            check=_validation(Path(out), release.spec, report),
            inputs=[ck.root],
            max_shard_size=parse_size(max_shard_size),
            reads=[f"every weight quantized ({len(names)}): read whole and quantized in memory"],
            report=report.to_dict(),
        )


def _tensors(ck: Checkpoint, names: set[str], granularity: str, report: QuantizeReport) -> list[PlannedTensor]:
    import numpy as np

    out: list[PlannedTensor] = []
    for n, t in ck.tensors.items():
        if n not in names:
            out.append(PlannedTensor(n, t.dtype, tuple(t.shape), Copy(TensorRef.of(ck, n))))
            report.kept.append(n)
            continue
        w = np.asarray(ck.read(n)).astype(np.float32)
        if not np.isfinite(w).all():
            raise CheckpointFormatError(
                f"{n} holds NaN or infinity: it cannot be quantized", tensor=n, path=str(ck.source)
            )
        q, s = quantize_weight(w, granularity)
        err = float(np.abs(dequantize_weight(q, s) - w).max()) if w.size else 0.0
        report.max_abs_error = max(report.max_abs_error, err)
        out.append(PlannedTensor(n, _E4M3, tuple(t.shape), Data(q)))
        out.append(PlannedTensor(n[: -len(".weight")] + ".weight_scale", "F32", tuple(s.shape), Data(s)))
        report.quantized.append(n)
    return out


def _validation(dest: Path, spec: str, report: QuantizeReport) -> Check:
    def run(tree: Path) -> dict[str, Any]:
        from ckpttools.ops.validate import validate

        with open_checkpoint(tree) as written:
            written.source = str(dest)
            val = validate(written, engine=spec)
        if not val.ok:
            report.validation = val.to_dict()
            raise QuantizeRejected(
                f"validate found {len(val.errors)} error(s) in the quantized drafter "
                f"({', '.join(f.id for f in val.errors)}); nothing was written to {dest}",
                report,
            )
        return val.to_dict()

    return Check(f"validate for {spec}: any error leaves nothing at the output", run, ("ckpttools.ops.validate",))


def quantize(
    src: str | Path,
    out: str | Path,
    *,
    scheme: str = "fp8-per-channel",
    engine: str = "sglang",
    include: Sequence[str] = (),
    activations: str = "auto",
    max_shard_size: int | str | None = None,
    force: bool = False,
    fsync: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> QuantizeReport:
    """Write a weights-only FP8 copy of a bf16 (or fp16/fp32) drafter, in the compressed-tensors layout.

    Args:
        src: the drafter (a directory, a .safetensors file, or a Hub repo id).
        out: the output directory (atomic: whole or absent).
        scheme: ``fp8-per-channel`` (one scale per output row) or ``fp8-per-tensor``.
        engine: the release the output is for (``sglang``, ``vllm``, or ``NAME==VERSION``): a module
            it would load unquantized is refused, and the output is validated in its reading.
        include: also quantize ``lm_head`` and/or ``fc`` (they stay bf16 otherwise).
        activations: ``auto`` (the default: weights only where the release serves that, else dynamic),
            ``none`` (weights only) or ``dynamic`` (inputs quantized per token at run time:
            compressed-tensors' FP8_DYNAMIC, the layout vLLM's CPU build has kernels for).

    Returns:
        a :class:`QuantizeReport` (the weights quantized, those kept, bytes before and after, the
        largest absolute error of a dequantized weight).

    Raises:
        ConfigError (exit 2) for a scheme, module or release it cannot serve; CheckpointFormatError
        (exit 2) for a drafter already quantized; QuantizeRejected (exit 1) when validate finds
        errors in the output (then nothing is written).

    Example:
        >>> quantize("./drafter", "./drafter-fp8", scheme="fp8-per-channel")  # doctest: +SKIP
    """
    import time

    t0 = time.perf_counter()
    with applying(resolve(engine)):
        plan = plan_quantize(
            src,
            out,
            scheme=scheme,
            engine=engine,
            include=include,
            activations=activations,
            max_shard_size=max_shard_size,
        )
        written = execute(plan, force=force, fsync=fsync, progress=progress)
    rep = QuantizeReport(**plan.report)
    rep.output = str(written.output)
    rep.validation = written.check_result
    rep.seconds = round(time.perf_counter() - t0, 3)
    return rep
