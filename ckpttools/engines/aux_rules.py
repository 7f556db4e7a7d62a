"""Where each engine captures a target's hidden states for an EAGLE-3 drafter, keyed by
engine and target architecture, as data, with the source lines each rule was read from.

A *boundary* b is the residual stream entering decoder layer b: b = 0 is the embeddings'
output, b = L the last layer's output (before the final norm). A drafter is trained on
some boundaries; the config's ``eagle_aux_hidden_state_layer_ids`` only name them, and
each engine reads those ids its own way:

- vLLM 0.32 captures boundary = id, for every architecture, 0 <= id <= L.
- SGLang 0.5.17 depends on the target class: ``plus1`` (Llama, Qwen, ...: boundary =
  id + 1), ``first_id_one`` (DeepSeek-V2/V3, Kimi-K2.5, GLM-4 MoE Lite: id + 1 only when
  the first id is 1, else the ids as they are), ``boundary`` (gpt-oss: the ids as they
  are when the largest equals L, else id + 1). Its capture loops reach boundaries 0..L-1,
  except gpt-oss's, which reaches L.
- With no ids, both capture boundaries [2, L//2, L-3].

validate, export and the torch probe all read this one table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CaptureRule",
    "capture_rule",
    "default_boundaries",
    "RULES",
    "VLLM",
    "DEFAULT_SOURCES",
    "FcOptions",
    "fc_options",
    "FC_OPTION_SOURCES",
    "LATER_LAYER_NORM",
    "later_layer_norm_names",
    "layout_engine",
    "sglang_default_aux_ids",
]

_SG = "sglang 0.5.17: sglang/srt/models/"
_VL = "vllm 0.32.0: vllm/"


@dataclass(frozen=True)
class CaptureRule:
    """How one engine turns config ids into captured boundaries for one kind of target."""

    engine: str
    kind: str  # "plus1" | "first_id_one" | "boundary" | "as_is"
    reaches_last: bool  # whether boundary L (the last layer's output) can be captured
    source: str

    def boundaries(self, ids: list[int], num_layers: int) -> list[int]:
        """The boundaries the engine captures for these ids (ascending, as both concatenate them)."""
        return sorted(set(self._each(ids, num_layers)))

    def top(self, num_layers: int) -> int:
        """The largest boundary the engine's capture loop reaches."""
        return num_layers if self.reaches_last else num_layers - 1

    def uncaptured(self, ids: list[int], num_layers: int) -> list[int]:
        """The ids whose boundary the engine never reaches (the drafter then gets fewer aux states)."""
        top = self.top(num_layers)
        return [i for i, b in zip(ids, self._each(ids, num_layers)) if not 0 <= b <= top]

    def _each(self, ids: list[int], num_layers: int) -> list[int]:
        if self.kind == "as_is":
            return list(ids)
        if self.kind == "first_id_one":
            return [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)
        if self.kind == "boundary":
            return list(ids) if ids and max(ids) == num_layers else [i + 1 for i in ids]
        return [i + 1 for i in ids]

    def ids_for(self, boundaries: list[int], num_layers: int) -> list[int] | None:
        """Config ids that make this engine capture exactly ``boundaries`` (None: no ids can)."""
        b = sorted(boundaries)
        candidates = [b, [x - 1 for x in b]]
        for ids in candidates:
            if (
                all(i >= 0 for i in ids)
                and self.boundaries(ids, num_layers) == b
                and not self.uncaptured(ids, num_layers)
            ):
                return ids
        return None

    def describe(self) -> str:
        return {
            "as_is": "captures the input of layer id (boundary = id)",
            "plus1": "captures the output of layer id (boundary = id + 1)",
            "first_id_one": "adds 1 to the ids only when the first id is 1, else uses them as they are",
            "boundary": "uses the ids as they are when the largest equals the layer count, else adds 1",
        }[self.kind]


def _sg(kind: str, where: str, reaches_last: bool = False) -> CaptureRule:
    return CaptureRule("sglang", kind, reaches_last, _SG + where)


_LLAMA = "llama.py:885-897 (set_eagle3_layers_to_capture), capture loop llama.py:434-437"
_DEEPSEEK = "deepseek_v2.py:3134-3149 (set_eagle3_layers_to_capture), capture deepseek_v2.py:2826"
_GPT_OSS = "gpt_oss.py:1328-1343 (set_eagle3_layers_to_capture), capture loop gpt_oss.py:723-741"

#: SGLang 0.5.17, by the target's architectures[0]
RULES: dict[str, CaptureRule] = {
    **{
        a: _sg("plus1", _LLAMA)
        for a in ("LlamaForCausalLM", "Phi3ForCausalLM", "InternLM3ForCausalLM", "MistralForCausalLM")
    },
    "Qwen2ForCausalLM": _sg("plus1", "qwen2.py:747"),
    "Qwen3ForCausalLM": _sg("plus1", "qwen3.py:688-701"),
    "Qwen3MoeForCausalLM": _sg("plus1", "qwen3_moe.py:1073"),
    "Gemma3ForCausalLM": _sg("plus1", "gemma3_causal.py:920"),
    "Glm4MoeForCausalLM": _sg("plus1", "glm4_moe.py:1446"),
    "MiniMaxM2ForCausalLM": _sg("plus1", "minimax_m2.py:1254"),
    **{a: _sg("first_id_one", _DEEPSEEK) for a in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")},
    "DeepseekV32ForCausalLM": _sg("first_id_one", _DEEPSEEK),
    "KimiK25ForConditionalGeneration": _sg(
        "first_id_one", "kimi_k25.py:674 and 920-931 (a DeepseekV3ForCausalLM language model); " + _DEEPSEEK
    ),
    "Glm4MoeLiteForCausalLM": _sg("first_id_one", "glm4_moe_lite.py:1013"),
    "GptOssForCausalLM": _sg("boundary", _GPT_OSS, reaches_last=True),
}

#: SGLang's rule for a target class not in RULES: the Llama rule, which most classes share
SGLANG_FALLBACK = _sg("plus1", _LLAMA + " (assumed: the class is not in ckpttools' table)")

#: vLLM 0.32: the ids are the boundaries, for every architecture
VLLM = CaptureRule(
    "vllm",
    "as_is",
    True,
    _VL + "v1/worker/gpu_model_runner.py:5268-5283 (ids from the draft config), "
    "model_executor/models/interfaces.py:1577-1578 and 1607-1610 (captured when layer_idx is an id), "
    "llama.py:427-440 (boundaries start_layer and idx + 1), deepseek_v2.py:1561 and 1586 (end_layer too)",
)

DEFAULT_SOURCES = (
    _SG
    + "llama.py:892, qwen3.py:695-699, deepseek_v2.py:3141, gpt_oss.py:1335; "
    + _VL
    + "model_executor/models/interfaces.py:1733, deepseek_v2.py:1958-1960"
)


def default_boundaries(num_layers: int) -> list[int]:
    """What both engines capture when the config gives no ids: boundaries [2, L//2, L-3]."""
    L = num_layers
    return [2, L // 2, L - 3]


def capture_rule(engine: str, target_arch: str | None) -> tuple[CaptureRule, bool]:
    """The rule, and whether it was read for this very class (False: assumed)."""
    if engine == "vllm":
        return VLLM, True
    if target_arch in RULES:
        return RULES[target_arch], True
    return SGLANG_FALLBACK, False


@dataclass(frozen=True)
class FcOptions:
    """The EAGLE-3.1 options around the drafter's fc, as an engine reads them from config.json.

    Read off SGLang 0.5.17 sglang/srt/models/llama_eagle3.py:148-198 (and its forward,
    229-260) and vLLM 0.32 vllm/model_executor/models/llama_eagle3.py:184-252 (forward
    405-416, load 464-465): ``num_aux_hidden_states`` sizes fc (else the number of
    ``eagle_config`` ids, else 3: ids at the top level do not count); ``norm_before_fc``
    (in eagle_config or at the top) is one RMSNorm over the concatenated aux states,
    ``input_norm``; ``fc_norm`` (SGLang also the legacy ``use_aux_norm``) is one RMSNorm
    per aux state, ``fc_norm.N``; ``norm_output`` feeds the next draft step the normed
    output instead of the pre-norm one.
    """

    num_aux: int
    num_aux_from: str
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool


FC_OPTION_SOURCES = {
    "sglang": _SG + "llama_eagle3.py:148-198 (forward 229-260)",
    "vllm": _VL + "model_executor/models/llama_eagle3.py:184-252 (forward 405-416, loading 464-465)",
}


def fc_options(cfg: dict | None, engine: str = "sglang") -> FcOptions:
    """How ``engine`` sizes and normalises the drafter's fc for this config."""
    cfg = cfg or {}
    got = cfg.get("eagle_config")
    eagle: dict = got if isinstance(got, dict) else {}
    n = cfg.get("num_aux_hidden_states")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    archs = cfg.get("architectures")
    if engine == "sglang" and isinstance(archs, list) and archs[:1] == ["Eagle3DeepseekV2ForCausalLM"]:
        # the MLA drafter counts eagle_config's ids, else top-level ones, else 3, and has no
        # norm_before_fc (sglang/srt/models/kimi_k25_eagle3.py:47-58 and 207-254)
        top = cfg.get("eagle_aux_hidden_state_layer_ids")
        got = ids if isinstance(ids, list) and ids else top if isinstance(top, list) and top else None
        num, source = (len(got), "the aux layer ids") if got else (3, "the default (3)")
        fc_norm = bool(cfg.get("fc_norm")) or bool(cfg.get("use_aux_norm"))
        return FcOptions(num, source, False, fc_norm, bool(cfg.get("norm_output", False)))
    if type(n) is int and n > 0:
        num, source = n, "num_aux_hidden_states"
    elif isinstance(ids, list) and ids:
        num, source = len(ids), "eagle_config.eagle_aux_hidden_state_layer_ids"
    else:
        num, source = 3, "the default (3)"
    fc_norm = bool(cfg.get("fc_norm")) or (engine == "sglang" and bool(cfg.get("use_aux_norm")))
    before = bool(eagle.get("norm_before_fc", cfg.get("norm_before_fc", False)))
    return FcOptions(num, source, before, fc_norm, bool(cfg.get("norm_output", False)))


def layout_engine(flavor: str) -> str:
    """The engine whose reading a drafter layout follows: vLLM's for the vLLM/speculators layout
    (detect_flavor's ``vllm``), SGLang's for every other EAGLE-3 layout."""
    return "vllm" if flavor == "vllm" else "sglang"


#: The norm a drafter layer after the first applies to its input, the previous layer's residual
#: fused in: (weight name, where it was read). Layer 0 is the same in both engines
#: (input_layernorm on the embedding, hidden_norm on the hidden state).
LATER_LAYER_NORM = {
    "sglang": ("hidden_norm", _SG + "llama_eagle3.py:95-97"),
    "vllm": ("input_layernorm", _VL + "model_executor/models/llama_eagle3.py:136-138, qwen3_eagle3.py:116-118"),
}

_LATER_NORM = re.compile(r"layers\.([1-9]\d*)\.(hidden_norm|input_layernorm)\.weight")


def later_layer_norm_names(names: dict[str, str], src_engine: str, out_engine: str) -> dict[str, str]:
    """Output names for a drafter moved from one engine's layout to the other's: in layers 1 and
    up, hidden_norm and input_layernorm trade names, so each engine reads the norm the drafter
    was trained with. Names are {source name: canonical name}; layer 0 and other tensors stay."""
    if LATER_LAYER_NORM[src_engine][0] == LATER_LAYER_NORM[out_engine][0]:
        return dict(names)
    swap = {"hidden_norm": "input_layernorm", "input_layernorm": "hidden_norm"}
    out = {}
    for n, new in names.items():
        m = _LATER_NORM.fullmatch(new)
        out[n] = f"layers.{m.group(1)}.{swap[m.group(2)]}.weight" if m else new
    return out


def sglang_default_aux_ids(num_target_layers: int, target_arch: str | None = "LlamaForCausalLM") -> list[int]:
    """The ids that make SGLang capture its own default boundaries [2, L//2, L-3] for a target
    of this class (for Llama: [1, L//2 - 1, L - 4]); see :data:`RULES`."""
    L = num_target_layers
    ids = capture_rule("sglang", target_arch)[0].ids_for(default_boundaries(L), L)
    assert ids is not None  # every rule in the table can express the default
    return ids
