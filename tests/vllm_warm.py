"""Fill the session's vLLM cache with the model-class facts that each real vLLM server of the tests
would otherwise find out for itself: run in vLLM's venv, ``python tests/vllm_warm.py ARCH...``, with
VLLM_CACHE_ROOT set (tests/conftest.py starts it at the session's start, beside the first tests).

vLLM 0.32.0 inspects the class of every architecture a server loads (the target's and the drafter's)
in a subprocess that imports torch and vLLM, about 17 s on a loaded 2-core machine, unless its cache
holds that class's facts under the hash of the class's source file
(vllm/model_executor/models/registry.py:1043-1088, _run_in_subprocess :1550-1577). Here that same
inspection runs for every architecture in this one process, through vLLM's own code: only the
subprocess is left out, as this process initializes no device (the reason vLLM gives, :1078). vLLM
writes each entry atomically (:1026-1041), so a server that starts meanwhile and inspects a class itself
writes the same entry. An architecture vLLM does not know is passed over: a server would refuse it."""

from __future__ import annotations

import sys


def main(archs: list[str]) -> None:
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()  # type: ignore[attr-defined]
    for arch in archs:
        model = registry.ModelRegistry.models.get(arch)
        if model is not None:
            model.inspect_model_cls()
            print(f"vllm_warm: {arch}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
