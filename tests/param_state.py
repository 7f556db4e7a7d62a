"""A model's own parameters as plain data (names, shapes, dtypes, sums, whether all ones), read
inside a running engine by tests/gpu_dump.py (SGLang) and tests/vllm_ext.py (vLLM)."""

from __future__ import annotations

from typing import Any


def param_state(model: Any) -> dict[str, Any]:
    out = {}
    for name, p in model.named_parameters():
        t = p.detach().float()
        out[name] = {
            "shape": list(p.shape),
            "dtype": str(p.dtype).removeprefix("torch."),
            "sum": float(t.sum()),
            "abs_sum": float(t.abs().sum()),
            "all_ones": bool((t == 1).all().item()),
        }
    return {"class": type(model).__name__, "params": out}
