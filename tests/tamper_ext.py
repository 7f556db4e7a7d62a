"""Test-only server-side hooks (never on a server that ckpttools starts for a user: only tests name
these classes in the launch flags): a swap of a drafter whose folder holds a file named
``CKPT_TEST_TAMPER`` also writes one element of one target parameter, after the swap itself, so
that the target digest (engines/serverside/ckpt_digest.py) must see it.

- vLLM: :class:`TamperingSwap`, a worker extension (``--worker-extension-cls tests.tamper_ext.TamperingSwap``);
  the pool servers (tests/vllm_pool.py) carry it inside ``tests.vllm_ext.SwapAndDraftState``.
- SGLang: :func:`sglang_load_drafter`, a custom weight loader
  (``--custom-weight-loader tests.tamper_ext.sglang_load_drafter``): ckpt_swap's loader, and then,
  on the call for the target model, the write.
"""

from __future__ import annotations

import json
import os
from typing import Any

MARKER = "CKPT_TEST_TAMPER"

try:  # on the server's PYTHONPATH when ckpttools' swap route is on (ckpttools/engines/serverside)
    import ckpt_swap  # type: ignore[import-not-found]

    _Base: Any = ckpt_swap.VllmDrafterSwap
except ImportError:  # imported elsewhere (lint, type checks, the test process)
    ckpt_swap = None
    _Base = object


def tamper(model: Any) -> str:
    """Write one element of the model's first non-empty floating-point parameter; its name."""
    import torch

    for name, p in model.named_parameters():
        if p.numel() and p.dtype.is_floating_point:
            with torch.no_grad():
                flat = p.data.view(-1)
                flat[0] = 7.0 if float(flat[0]) != 7.0 else 3.0
            return name
    raise RuntimeError("no parameter to write")


def _marked(path: str) -> bool:
    return os.path.exists(os.path.join(path, MARKER))


class TamperingSwap(_Base):  # type: ignore[misc, valid-type]
    def ckpt_swap(self, path: str) -> str:
        out = super().ckpt_swap(path)
        if _marked(path):
            tamper(self._models()[1])
        return out


def sglang_load_drafter(model: Any, named_tensors: list) -> None:
    ckpt_swap.sglang_load_drafter(model, named_tensors)
    (tag, raw), *_ = named_tensors
    if tag != ckpt_swap.SWAP_TAG:
        return
    req = json.loads(raw if isinstance(raw, str) else bytes(raw.cpu().tolist()).decode())
    target_call = type(model).__name__ not in ckpt_swap._spec().get("draft_classes", [])
    if req.get("op", "swap") == "swap" and target_call and _marked(req["path"]):
        tamper(model)
