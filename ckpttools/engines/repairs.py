"""The config repairs export and ``validate --fix`` share: config.json made to agree with the
weights it sits beside and with the target it will serve.

- max_position_embeddings raised to the target's context (SGLang refuses a shorter drafter);
- num_hidden_layers: the layers the weights hold;
- draft_vocab_size: lm_head's rows;
- torch_dtype: the weights' majority float dtype.

export makes every field agree (``only_missing=False``); fix only adds what is missing
(``only_missing=True``), since a field a user wrote may be right for reasons the weights
do not show.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ckpttools.engines.config_rules import context_length
from ckpttools.formats.conventions import CONFIG_DTYPE
from ckpttools.formats.names import canonical_name, layer_index

__all__ = ["repair_config", "majority_dtype"]

_ABSENT = object()


def majority_dtype(dtypes: list[str]) -> str | None:
    """The commonest float dtype among ``dtypes`` (safetensors names), as config.json names it."""
    floats = [d for d in dtypes if d in CONFIG_DTYPE]
    if not floats:
        return None
    return CONFIG_DTYPE[max(sorted(set(floats)), key=floats.count)]


def _set(cfg: dict[str, Any], key: str, value: Any, why: str, changes: list[str]) -> None:
    old = cfg.get(key, _ABSENT)
    if old == value:
        return
    if old is _ABSENT:
        changes.append(f"config: {key} added = {value} ({why})")
    else:
        changes.append(f"config: {key} {old!r} -> {value!r} ({why})")
    cfg[key] = value


def repair_config(
    cfg: dict[str, Any],
    tensors: Mapping[str, Any],
    *,
    target_cfg: dict[str, Any] | None = None,
    only_missing: bool = False,
    dtypes: list[str] | None = None,
) -> list[str]:
    """Repair ``cfg`` in place; returns each change, in words.

    Args:
        tensors: the output's tensors by output name (anything with ``dtype`` and ``shape``).
        dtypes: the output's dtypes when they differ from ``tensors``' (export's cast).
    """
    changes: list[str] = []
    if target_cfg is not None:
        dctx, _ = context_length(cfg)
        tctx, _ = context_length(target_cfg)
        if tctx is not None and (dctx is None or dctx < tctx):
            _set(cfg, "max_position_embeddings", tctx, "the target's context", changes)
    if not (only_missing and "num_hidden_layers" in cfg):
        n = len({i for i in map(layer_index, tensors) if i is not None})
        _set(cfg, "num_hidden_layers", max(n, 1), "layers in the weights", changes)
    head = next((t for n, t in tensors.items() if canonical_name(n)[0] == "lm_head.weight"), None)
    if not (only_missing and ("draft_vocab_size" in cfg or "speculators_config" in cfg)):
        if head is not None:
            _set(cfg, "draft_vocab_size", head.shape[0], "lm_head's rows", changes)
        elif "draft_vocab_size" not in cfg and not only_missing:
            _set(cfg, "draft_vocab_size", None, "no lm_head: the target's", changes)
    if not (only_missing and ("torch_dtype" in cfg or "dtype" in cfg)):
        dt = majority_dtype(dtypes if dtypes is not None else [t.dtype for t in tensors.values()])
        if dt is not None:
            _set(cfg, "torch_dtype", dt, "the weights' dtype", changes)
            if not only_missing:
                cfg.pop("dtype", None)
    return changes
