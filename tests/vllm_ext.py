"""A vLLM worker extension (``--worker-extension-cls tests.vllm_ext.DraftState``, called through
``POST /collective_rpc`` under VLLM_SERVER_DEV_MODE=1; vllm 0.32: v1/worker/worker_base.py:296-322,
entrypoints/serve/dev/rpc/api_router.py:23-60): the running draft model's own parameters, so a test
holds vLLM's real state after load_weights against ckpttools' load plan."""

from __future__ import annotations

from typing import Any


class DraftState:
    def draft_state(self) -> dict[str, Any]:
        from tests.param_state import param_state

        runner = getattr(self, "model_runner", self)
        return param_state(runner.get_draft_model())
