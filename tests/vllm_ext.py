"""A vLLM worker extension (``--worker-extension-cls tests.vllm_ext.DraftState``, called through
``POST /collective_rpc`` under VLLM_SERVER_DEV_MODE=1; vllm 0.32: v1/worker/worker_base.py:296-322,
entrypoints/serve/dev/rpc/api_router.py:23-60): the running draft model's own parameters, so a test
holds vLLM's real state after load_weights against ckpttools' load plan."""

from __future__ import annotations

from typing import Any

from tests.tamper_ext import TamperingSwap  # ckpt_swap's extension, and the test-only target write


class DraftState:
    def draft_state(self) -> dict[str, Any]:
        from tests.param_state import param_state

        runner = getattr(self, "model_runner", self)
        return param_state(runner.get_draft_model())


class TargetLoad:
    def load_target(self, path: str) -> dict[str, Any]:
        """Load another target of the same architecture and sizes into the running target model, as
        vLLM loads weights at start-up (load_weights inside its layerwise reload: weights processed
        into a kernel format after loading are restored first and processed again after;
        vllm 0.32 model_executor/model_loader/reload/layerwise.py:83-288), and read back each
        parameter that holds a file tensor as it is (same name, dtype and size): its sha256."""
        import glob
        import hashlib
        import os

        import torch
        from safetensors.torch import load_file
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        runner = getattr(self, "model_runner", self)
        model = runner.get_model()
        files: dict[str, Any] = {}
        for f in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
            files.update(load_file(f))
        initialize_layerwise_reload(model)
        try:
            model.load_weights(list(files.items()))
        finally:
            finalize_layerwise_reload(model, runner.vllm_config.model_config)
        params = dict(model.named_parameters(remove_duplicate=False))
        out = {}
        for name, t in files.items():
            p = params.get(name)
            if p is not None and p.dtype == t.dtype and p.numel() == t.numel():
                flat = p.detach().contiguous().reshape(-1).cpu()
                out[name] = hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()
        return {"digests": out, "tensors": len(files)}


class SwapAndDraftState(TamperingSwap, DraftState, TargetLoad):
    """The pool servers' extension (tests/vllm_pool.py): ckpttools' swap route (with tests/tamper_ext.py's
    write of the target for a drafter marked so), draft_state, load_target."""
