"""ckpttools' canonical tensor names: one bare spelling for each drafter tensor, whatever
layout it came in, so every operation compares names in one form.

The canonical form is the bare layout (``layers.N...``, ``fc.weight``, ``d2t``): ``model.``
wrappers, ``midlayer`` and the ``aux_norm_low/mid/high`` names are folded into it. Which
canonical names an engine loads, and how it reads them, is engine knowledge and lives in
:mod:`ckpttools.engines.names` and the release tables.
"""

from __future__ import annotations

import re

__all__ = [
    "CANONICAL_PREFIXES",
    "EXACT_RENAMES",
    "TRAINING_ONLY_PATTERNS",
    "canonical_name",
    "is_training_only",
    "layer_index",
]

#: ordered (old prefix, new prefix); the first that matches wins, then matching restarts
CANONICAL_PREFIXES: list[tuple[str, str]] = [
    ("model.", ""),
    ("midlayer.", "layers.0."),
    ("midlayers.", "layers."),
    ("aux_norm_low.", "fc_norm.0."),
    ("aux_norm_mid.", "fc_norm.1."),
    ("aux_norm_high.", "fc_norm.2."),
]

_PREFIXES = tuple(old for old, _ in CANONICAL_PREFIXES)

#: whole-name renames applied after the prefixes
#: other names of d2t in the wild (speculators, ModelOpt)
D2T_ALIASES = ("draft_id_to_target_id", "hot_token_id")

EXACT_RENAMES: dict[str, str] = {alias: "d2t" for alias in D2T_ALIASES}

#: names that training frameworks leave in checkpoints and no engine reads
TRAINING_ONLY_PATTERNS: list[re.Pattern[str]] = [
    re.compile(p)
    for p in (
        r".*rotary_emb\.inv_freq",
        r"(target_)?lm_head_target\..*",
        r"target_model\..*",
        r"optimizer\..*",
        r".*\._extra_state",
        r"ema\..*",
        r"(draft_)?loss.*",
    )
]


def canonical_name(name: str) -> tuple[str, list[str]]:
    """The canonical (bare) name, and the rules applied to get there.

    Example:
        >>> canonical_name("model.midlayer.self_attn.q_proj.weight")
        ('layers.0.self_attn.q_proj.weight', ['model. -> ', 'midlayer. -> layers.0.'])
    """
    if not name.startswith(_PREFIXES) and name not in EXACT_RENAMES:
        return name, []
    applied: list[str] = []
    while name.startswith(_PREFIXES):
        for old, new in CANONICAL_PREFIXES:
            if name.startswith(old):
                name = new + name[len(old) :]
                applied.append(f"{old} -> {new}")
                break
    if name in EXACT_RENAMES:
        applied.append(f"{name} -> {EXACT_RENAMES[name]}")
        name = EXACT_RENAMES[name]
    return name, applied


def is_training_only(name: str) -> bool:
    canon, _ = canonical_name(name)
    return any(p.fullmatch(canon) for p in TRAINING_ONLY_PATTERNS)


def layer_index(name: str) -> int | None:
    m = re.match(r"layers\.(\d+)\.", canonical_name(name)[0])
    return int(m.group(1)) if m else None
