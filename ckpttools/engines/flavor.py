"""Which layout a checkpoint is in, and the evidence for saying so."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from collections.abc import Container, KeysView, Set
from typing import Any

from ckpttools.formats.names import D2T_ALIASES, canonical_name

__all__ = [
    "Flavor",
    "detect_flavor",
    "FLAVORS",
    "LLAMA_TARGET",
    "MLA_ARCHS",
    "SPECULATORS_ARCHS",
    "FIXABLE_ARCHS",
    "fixable_kind",
    "LAYOUT_ARCH",
    "TARGET_ARCH",
]

#: the Llama target class, whose aux-layer rule most target classes share (engines/aux_rules.py)
LLAMA_TARGET = "LlamaForCausalLM"
#: the MLA drafter classes by name: SGLang's, and vLLM's alias for it (vllm registry.py:673)
MLA_ARCHS = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
#: the vllm-project/speculators format's class (transformers_utils/configs/speculators/base.py)
SPECULATORS_ARCHS = ("Eagle3Speculator",)
#: the names ``validate --fix`` renames to SGLang's Llama drafter class, and why each fails there:
#: ``plain_llama`` (SGLang builds a plain Llama), ``vllm_name`` (vLLM's class name)
FIXABLE_ARCHS = {"LlamaForCausalLM": "plain_llama", "Eagle3LlamaForCausalLM": "vllm_name"}


#: the ``architectures[0]`` each drafter layout is published with (the demo's tiny drafters use them)
LAYOUT_ARCH = {
    "sglang": "LlamaForCausalLMEagle3",
    "eagle": "LlamaForCausalLM",
    "vllm": "Eagle3LlamaForCausalLM",
    "mla": "Eagle3DeepseekV2ForCausalLM",
    "modelopt": "LlamaForCausalLMEagle3",
    "training": "LlamaForCausalLMEagle3",
    "speculators": "Eagle3Speculator",
}
#: target classes by family, as their config.json names them (their aux-layer rules: engines/aux_rules.py)
TARGET_ARCH = {
    "llama": LLAMA_TARGET,
    "deepseek": "DeepseekV3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "kimi_k25": "KimiK25ForConditionalGeneration",
}


def fixable_kind(arch: object) -> str | None:
    """Which of :data:`FIXABLE_ARCHS`' reasons ``arch`` is (None: not one ``validate --fix`` renames)."""
    return FIXABLE_ARCHS.get(arch) if isinstance(arch, str) else None


#: flavor id -> what it is
FLAVORS: dict[str, str] = {
    "sglang": "SGLang/SpecForge EAGLE-3 drafter",
    "eagle": "official EAGLE release (SafeAILab) EAGLE-3 drafter",
    "vllm": "vLLM/speculators EAGLE-3 drafter",
    "mla": "MLA EAGLE-3 drafter (DeepSeek-V2 style)",
    "modelopt": "NVIDIA ModelOpt EAGLE-3 export",
    "eagle3-unknown": "EAGLE-3 drafter of unrecognised layout",
    "mtp": "MTP/NextN head (a model's own next-token layers), not an EAGLE-3 drafter",
    "dflash": "DFlash block-diffusion drafter, not an EAGLE-3 drafter",
    "dspark": "DSpark drafter, not an EAGLE-3 drafter",
    "p-eagle": "P-EAGLE drafter (parallel-drafting EAGLE-3)",
    "eagle1": "EAGLE-1/2 drafter (no aux hidden states), not an EAGLE-3 drafter",
    "medusa": "Medusa heads, not an EAGLE-3 drafter",
    "mlp-speculator": "MLP speculator, not an EAGLE-3 drafter",
    "target": "plain (target) model",
    "mapping": "vocabulary mapping only (d2t/t2d)",
    "unknown": "unrecognised",
}


#: drafter kinds that are not EAGLE-3 (or not plain EAGLE-3): what marks them, and which engine
#: flag serves them. SGLang 0.5.17: speculative/spec_info.py:37-43 lists EAGLE, EAGLE3, DFLASH,
#: DSPARK, FROZEN_KV_MTP, STANDALONE, NGRAM; NextN/MTP heads run under EAGLE with their own
#: classes (models/deepseek_nextn.py:434, qwen3_next_mtp.py:152, ...). vLLM 0.32:
#: config/speculative.py:38-81 (methods mtp, dflash, dspark, eagle, eagle3, medusa,
#: mlp_speculator) and 1898 (P-EAGLE is eagle3 with parallel drafting; its drafts carry
#: ptd_token_id and a mask_hidden tensor, v1/spec_decode/llm_base_proposer.py:372 and 1406).
OTHER_KINDS: list[tuple[str, str, list[str], dict[str, str]]] = [
    (
        "mtp",
        r"(NextN|MTP)$",
        [r"(^|\.)eh_proj\.weight$", r"(^|\.)enorm\.weight$", r"(^|\.)hnorm\.weight$"],
        {
            "sglang": "--speculative-algorithm EAGLE (the head's own class serves it)",
            "vllm": '--speculative-config \'{"method": "mtp"}\'',
        },
    ),
    (
        "dflash",
        r"^DFlash",
        [],
        {"sglang": "--speculative-algorithm DFLASH", "vllm": '--speculative-config \'{"method": "dflash"}\''},
    ),
    (
        "dspark",
        r"DSpark",
        [],
        {"sglang": "--speculative-algorithm DSPARK", "vllm": '--speculative-config \'{"method": "dspark"}\''},
    ),
    (
        "p-eagle",
        r"^(PEagle|Peagle)",
        [r"(^|\.)mask_hidden$"],
        {"vllm": '--speculative-config \'{"method": "eagle3", "parallel_drafting": true}\'', "sglang": "none"},
    ),
    (
        "eagle1",
        r"^(LlamaForCausalLMEagle|Qwen2ForCausalLMEagle|MistralForCausalLMEagle|Ernie4_5_ForCausalLMEagle)$",
        [],
        {"sglang": "--speculative-algorithm EAGLE", "vllm": '--speculative-config \'{"method": "eagle"}\''},
    ),
    (
        "medusa",
        r"Medusa",
        [r"(^|\.)medusa_heads?\."],
        {"vllm": '--speculative-config \'{"method": "medusa"}\'', "sglang": "none"},
    ),
    (
        "mlp-speculator",
        r"^MLPSpeculator",
        [],
        {"vllm": '--speculative-config \'{"method": "mlp_speculator"}\'', "sglang": "none"},
    ),
]
_OTHER_CONFIG_KEYS = {"dflash_config": "dflash", "ptd_token_id": "p-eagle", "medusa_num_heads": "medusa"}


def _literal(pattern: str) -> str:
    """The longest plain run in a name pattern (every name it matches contains it)."""
    text = re.sub(r".[?*]", "|", pattern.replace("\\.", "\x00"))  # an optional character ends a run
    runs = re.split(r"\\.|[\^$()|?*+\[\]]", text)
    return max((r.replace("\x00", ".") for r in runs), key=len)


def _few_layers(joined: str) -> bool:
    return len(_layer_ids(joined)) <= 4


def other_kind(
    config: dict[str, Any] | None, names: list[str], joined: str | None = None
) -> tuple[str, list[str], dict[str, str]] | None:
    """A drafter kind that is not plain EAGLE-3, with the evidence and the engines' flags; None otherwise.

    Tensor names are searched as one text, a line per name (one regex pass in C per
    pattern: a 1 TB target has 35,000 names)."""
    cfg = config or {}
    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    joined = "\n".join(names) if joined is None else joined
    for kind, arch_re, name_res, flags in OTHER_KINDS:
        ev = [f"architectures[0] = {arch}"] if arch and re.search(arch_re, arch) else []
        ev += [f"config has {k}" for k, v in _OTHER_CONFIG_KEYS.items() if v == kind and k in cfg]
        for pat in name_res:
            if _literal(pat) not in joined:  # a C substring scan rules out almost every checkpoint
                continue
            if kind == "mtp" and not _few_layers(joined):  # a full model may carry its MTP layers
                break
            hit = next((n for n in names if re.search(pat, n)), None)
            if hit is not None:
                ev.append(f"tensor {hit}")
        if ev:
            return kind, ev, flags
    return None


@dataclass
class Flavor:
    """A detected layout: ``kind`` is a key of :data:`FLAVORS`."""

    kind: str
    evidence: list[str] = field(default_factory=list)
    has_d2t: bool = False
    has_t2d: bool = False
    #: for a kind that is not plain EAGLE-3: the flag each engine serves it with
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return FLAVORS[self.kind]

    @property
    def is_drafter(self) -> bool:
        return self.kind not in ("target", "mapping", "unknown")

    @property
    def is_plain_eagle3(self) -> bool:
        """An EAGLE-3 drafter export, remap and the EAGLE-3 checks apply to."""
        return self.kind in ("sglang", "eagle", "vllm", "mla", "modelopt", "eagle3-unknown")

    def refuse(self, source: str, what: str) -> None:
        """Raise, for a kind ``what`` (an operation) does not apply to."""
        if self.is_plain_eagle3 or not self.is_drafter:
            return
        from ckpttools.errors import CkptError

        served = "; ".join(f"{e}: {f}" for e, f in self.flags.items())
        raise CkptError(
            f"{source}: a {self.description}; {what} handles EAGLE-3 drafters only",
            path=source,
            hint=f"serve it as it is ({served})" if served else "serve it as it is",
        )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "description": self.description, "evidence": self.evidence}


def detect_flavor(config: dict[str, Any] | None, tensor_names: list[str] | Any) -> Flavor:
    """See :func:`_detect`; records whether d2t/t2d were present."""
    names = list(tensor_names)
    joined = "\n".join(names)  # one text for the C-level scans of both
    # a checkpoint's names come as a dict's keys: membership tests need no set of their own
    members = tensor_names if isinstance(tensor_names, (KeysView, Set, dict)) else set(names)
    mid_line = _has_midlayer(joined)
    canon = _canonical_subset(members, joined, mid_line)
    if joined.count("\n") == max(0, len(names) - 1):  # no name holds a newline: a line is a name
        has_mid = mid_line
    else:
        has_mid = any(n.startswith(("midlayer.", "model.midlayer.")) for n in names)
    other = other_kind(config, names, joined)
    if other is not None:
        kind, ev, flags = other
        served = "; ".join(f"{e}: {f}" for e, f in flags.items())
        f = Flavor(kind, [*ev, f"served by {served}"])
        f.flags = flags
    else:
        f = _detect(config, names, canon, has_mid)
    f.has_d2t, f.has_t2d = "d2t" in canon, "t2d" in canon
    return f


_KEY_NAMES = ("fc.weight", "d2t", "t2d", "embed_tokens.weight", "lm_head.weight")


def _canonical_subset(raw: Container[str], joined: str, mid_line: bool) -> set[str]:
    """The canonical forms of the few names detection needs, plus one name per layer.

    Canonicalising every name of a 35,000-tensor target costs more than reading its
    headers, so only the names that matter are looked at: ``raw`` answers membership,
    ``joined`` has a name a line, ``mid_line`` says whether a line starts with [model.]midlayer.
    """
    out: set[str] = set()
    for key in _KEY_NAMES:
        if key in raw or "model." + key in raw:
            out.add(key)
    if any(alias in raw for alias in D2T_ALIASES):
        out.add("d2t")
    # one regex pass in C over the joined names instead of a Python loop over every name
    out.update("layers." + i for i in _layer_ids(joined))
    if mid_line:
        out.add("layers.0")
    return out


# "layers.N" where a name starts with it (after an optional "model."); N is what follows up to the next dot.
# A name starts after a newline of "\n" + joined: a pattern that begins with a literal is searched for
# in C, where one anchored with ^ under re.M is tried at every character (3x slower on 35,000 names)
# A match takes in the lines after it that have the same N, so there is one match per run of a layer's
# names (they come together) rather than one per name
_LAYER_ID = re.compile(r"\n(?:model\.)?layers\.([^.\n]*)[^\n]*(?:\n(?:model\.)?layers\.\1(?![^.\n])[^\n]*)*")


def _layer_ids(joined: str) -> set[str]:
    """The N of every name (one a line of ``joined``) that starts with [model.]layers.N."""
    return set(_LAYER_ID.findall("\n" + joined))


def _has_midlayer(joined: str) -> bool:
    """Whether a name (one a line of ``joined``) starts with [model.]midlayer. (two substring scans)."""
    text = "\n" + joined
    return "\nmidlayer." in text or "\nmodel.midlayer." in text


def _detect(config: dict[str, Any] | None, names: list[str], canon: set[str], has_mid: bool) -> Flavor:
    """Decide the layout from config.json and the tensor names (headers only).

    Example:
        >>> detect_flavor({"architectures": ["LlamaForCausalLMEagle3"]}, ["fc.weight"]).kind
        'sglang'
    """
    cfg = config or {}
    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else None
    has_fc = "fc.weight" in canon
    has_d2t, has_t2d = "d2t" in canon, "t2d" in canon
    ev: list[str] = []
    if arch:
        ev.append(f"architectures[0] = {arch}")
    if has_fc:
        ev.append("has fc.weight (projection of the target's aux hidden states)")
    if has_mid:
        ev.append("tensor names use midlayer.")
    if has_d2t:
        ev.append("has d2t" + ("" if has_t2d else " but no t2d"))
    drafter_like = has_fc or has_mid or has_d2t or "draft_vocab_size" in cfg

    if arch in ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"):  # V3: vLLM's alias (registry.py:673)
        return Flavor("mla", ev)
    if drafter_like and has_d2t and not has_t2d and names:
        return Flavor("modelopt", ev + ["ModelOpt ships d2t without t2d"])
    if arch == "LlamaForCausalLM" and drafter_like and (has_mid or "draft_vocab_size" in cfg):
        if "draft_vocab_size" in cfg:
            ev.append("config has draft_vocab_size")
        return Flavor("eagle", ev)
    if arch in ("Eagle3LlamaForCausalLM", "Eagle3Speculator") or "speculators_config" in cfg:
        if "speculators_config" in cfg:
            ev.append("config has speculators_config")
        return Flavor("vllm", ev)
    if arch == "LlamaForCausalLMEagle3":
        return Flavor("sglang", ev)
    if drafter_like and cfg:
        return Flavor("eagle3-unknown", ev)
    if 0 < len(names) <= 2 and {canonical_name(n)[0] for n in names} <= {"d2t", "t2d"}:
        return Flavor("mapping", ev or ["only d2t/t2d tensors"])
    if not cfg and has_fc:
        return Flavor("eagle3-unknown", ev + ["no config.json"])
    n_layers = sum(1 for n in canon if n.startswith("layers."))
    if arch or (n_layers and "embed_tokens.weight" in canon):
        ev.append(f"{n_layers} decoder layer(s) in the weights, no fc/d2t")
        return Flavor("target", ev)
    return Flavor("unknown", ev or ["no config.json and no recognised tensor names"])
