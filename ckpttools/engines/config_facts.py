"""One config as validate's checks read it, read once: :class:`ConfigFacts` (the dict, its typed
essentials, and what the engines derive from it: :mod:`ckpttools.engines.config_rules`,
:mod:`ckpttools.engines.aux_rules`). A module of its own, so that ``ckpt inspect``, which needs
only the context rule, does not build the dataclass at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckpttools.engines.config_rules import (
    amx_mla_refusal,
    attention_head_size,
    context_length,
    is_mla,
    kv_bytes_per_layer,
    weight_contradictions,
)
from ckpttools.formats.config import ConfigEssentials, aux_layer_ids, essentials, lookup

__all__ = ["ConfigFacts", "config_facts", "facts_weight_problems"]


@dataclass(frozen=True)
class ConfigFacts:
    """One config as every check reads it, read once (:func:`config_facts`): the dict, its typed
    essentials, and what the engines derive from it. The checks of validate take this, not the dict:
    none of them looks a field up again."""

    #: the config.json as parsed ({} for none)
    config: dict[str, Any]
    #: its typed fields (:func:`ckpttools.formats.config.essentials`)
    e: ConfigEssentials
    #: the context length SGLang derives, and how (:func:`context_length`)
    context: tuple[int | None, str]
    #: an attention head's size, its JSON path and how it was read (:func:`attention_head_size`)
    head_size: tuple[int, str, str] | None
    #: an MLA model: an MLA class by name, or MLA attention fields (:func:`is_mla`)
    mla: bool
    #: SGLang's KV bytes per token per layer, and how (:func:`kv_bytes_per_layer`)
    kv_per_layer: tuple[int, str] | None
    #: the first size vLLM's AMX MLA backend refuses (:func:`amx_mla_refusal`; None: not MLA, or none)
    amx_refusal: dict[str, Any] | None
    #: (value, JSON path) of the fields read as they are written, wrong types included
    num_hidden_layers: tuple[Any, str | None]
    q_lora_rank: tuple[Any, str | None]
    hidden_act: tuple[Any, str | None]
    #: the aux layer ids as written, and where (:func:`ckpttools.formats.config.aux_layer_ids`)
    aux_ids: tuple[Any, str | None]
    #: how each engine sizes and normalises fc (:func:`ckpttools.engines.aux_rules.fc_options`), by name
    fc: dict[str, Any]

    @property
    def arch(self) -> Any:
        """``architectures[0]`` as written (None: absent or not a non-empty list)."""
        archs = self.config.get("architectures")
        return archs[0] if isinstance(archs, list) and archs else None


def config_facts(cfg: dict[str, Any] | None, e: ConfigEssentials | None = None) -> ConfigFacts:
    """Every fact the checks read of ``cfg``, read now (``e``: its essentials, made already)."""
    from ckpttools.engines.aux_rules import fc_options  # the aux rules: not for inspect's context length

    cfg = cfg or {}
    e = e if e is not None else essentials(cfg)
    mla = is_mla(cfg)
    return ConfigFacts(
        config=cfg,
        e=e,
        context=context_length(cfg),
        head_size=attention_head_size(cfg),
        mla=mla,
        kv_per_layer=kv_bytes_per_layer(cfg, e),
        amx_refusal=amx_mla_refusal(cfg) if mla else None,
        num_hidden_layers=lookup(cfg, "num_hidden_layers"),
        q_lora_rank=lookup(cfg, "q_lora_rank"),
        hidden_act=lookup(cfg, "hidden_act"),
        aux_ids=aux_layer_ids(cfg),
        fc={name: fc_options(cfg, name) for name in ("sglang", "vllm")},
    )


def facts_weight_problems(f: ConfigFacts, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """:func:`ckpttools.engines.config_rules.weight_problems` of a config read once (:func:`config_facts`)."""
    if not f.config or not shapes or f.e.invalid:
        return {}
    return weight_contradictions(f.config, f.e, f.num_hidden_layers, f.fc["sglang"].num_aux, shapes)
