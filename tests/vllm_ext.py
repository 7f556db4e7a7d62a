"""A vLLM worker extension (``--worker-extension-cls tests.vllm_ext.DraftState``, called through
``POST /collective_rpc`` under VLLM_SERVER_DEV_MODE=1; vllm 0.32: v1/worker/worker_base.py:296-322,
entrypoints/serve/dev/rpc/api_router.py:23-60): the running draft model's own parameters, so a test
holds vLLM's real state after load_weights against ckpttools' load plan."""

from __future__ import annotations

from typing import Any


class DraftState:
    def draft_state(self) -> dict[str, Any]:
        runner = getattr(self, "model_runner", self)
        model = runner.get_draft_model()
        out = {}
        for name, p in model.named_parameters():
            t = p.detach().float()
            out[name] = {
                "shape": list(p.shape),
                "dtype": str(p.dtype).removeprefix("torch."),
                "sum": float(t.sum()),
                "all_ones": bool((t == 1).all().item()),
            }
        return {"class": type(model).__name__, "params": out}
