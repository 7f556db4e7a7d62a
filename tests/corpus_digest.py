"""``ckpt verify --launch`` with several drafters, and the target digest (issue 32): the server
digests every target parameter before the first swap and after the last. A fake engine
(tests/fake_engine; modes in tests/fake_engine/fake_swap.py) answers a digest that changed after a
swap (exit 1, the report kept, the changed tensor named), a digest its rank refused ("not checked"
and why, exit 0: no verdict is claimed), and an honest one ("unchanged", with what was compared).
The real engines: tests/test_vllm_swap.py (CPU) and tests/test_gpu_targets.py (H200)."""

from __future__ import annotations

from tests.corpus import Case
from tests.corpus_swap_answers import _run


def digest_cases() -> list[Case]:
    sg, vl = "sglang==0.5.17", "vllm==0.32.0"
    changed = "the target's weights read back differently after the swaps (model.embed_tokens.weight)"
    out: list[Case] = []
    for name, eng in (("sglang", sg), ("vllm", vl)):
        out += [
            _run(f"digest-{name}-target-written-by-a-swap", eng, "tamper-target-2", 1, stderr_has=changed),
            _run(
                f"digest-{name}-target-written-json-kept",
                eng,
                "tamper-target-1",
                1,
                "--json",
                stdout_has='"target_unchanged": false',
            ),
            _run(
                f"digest-{name}-target-refused",
                eng,
                "weights-null",
                0,
                stdout_has="target weights: not checked: before the first swap",
            ),
            _run(
                f"digest-{name}-target-unchanged",
                eng,
                "honest",
                0,
                stdout_has="target weights: unchanged: 2 parameters, 0.00 GiB; every target parameter digested",
            ),
        ]
    return out
