"""Which layout a checkpoint is in, and the evidence for saying so."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ckpttools.formats.names import D2T_ALIASES, canonical_name

__all__ = ["Flavor", "detect_flavor", "FLAVORS"]

#: flavor id -> what it is
FLAVORS: dict[str, str] = {
    "sglang": "SGLang/SpecForge EAGLE-3 drafter",
    "eagle": "official EAGLE release (SafeAILab) EAGLE-3 drafter",
    "vllm": "vLLM/speculators EAGLE-3 drafter",
    "mla": "MLA EAGLE-3 drafter (DeepSeek-V2 style)",
    "modelopt": "NVIDIA ModelOpt EAGLE-3 export",
    "eagle3-unknown": "EAGLE-3 drafter of unrecognised layout",
    "target": "plain (target) model",
    "mapping": "vocabulary mapping only (d2t/t2d)",
    "unknown": "unrecognised",
}


@dataclass
class Flavor:
    """A detected layout: ``kind`` is a key of :data:`FLAVORS`."""

    kind: str
    evidence: list[str] = field(default_factory=list)
    has_d2t: bool = False
    has_t2d: bool = False

    @property
    def description(self) -> str:
        return FLAVORS[self.kind]

    @property
    def is_drafter(self) -> bool:
        return self.kind not in ("target", "mapping", "unknown")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "description": self.description, "evidence": self.evidence}


def detect_flavor(config: dict[str, Any] | None, tensor_names: list[str] | Any) -> Flavor:
    """See :func:`_detect`; records whether d2t/t2d were present."""
    names = list(tensor_names)
    canon = _canonical_subset(names)
    f = _detect(config, names, canon)
    f.has_d2t, f.has_t2d = "d2t" in canon, "t2d" in canon
    return f


_KEY_NAMES = ("fc.weight", "d2t", "t2d", "embed_tokens.weight", "lm_head.weight")


def _canonical_subset(names: list[str]) -> set[str]:
    """The canonical forms of the few names detection needs, plus one name per layer.

    Canonicalising every name of a 35,000-tensor target costs more than reading its
    headers, so only the names that matter are looked at.
    """
    raw = set(names)
    out: set[str] = set()
    for key in _KEY_NAMES:
        if key in raw or "model." + key in raw:
            out.add(key)
    if any(alias in raw for alias in D2T_ALIASES):
        out.add("d2t")
    joined = "\n".join(names)  # one regex pass in C instead of a Python loop over every name
    out.update("layers." + i for i in set(_LAYER_ID.findall(joined)))
    if _MIDLAYER.search(joined):
        out.add("layers.0")
    return out


# "layers.N" where a name starts with it (after an optional "model."); N is what follows up to the next dot
_LAYER_ID = re.compile(r"^(?:model\.)?layers\.([^.\n]*)", re.M)
_MIDLAYER = re.compile(r"^(?:model\.)?midlayer\.", re.M)


def _detect(config: dict[str, Any] | None, names: list[str], canon: set[str]) -> Flavor:
    """Decide the layout from config.json and the tensor names (headers only).

    Example:
        >>> detect_flavor({"architectures": ["LlamaForCausalLMEagle3"]}, ["fc.weight"]).kind
        'sglang'
    """
    cfg = config or {}
    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else None
    has_mid = any(n.startswith(("midlayer.", "model.midlayer.")) for n in names)
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

    if arch == "Eagle3DeepseekV2ForCausalLM":
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
