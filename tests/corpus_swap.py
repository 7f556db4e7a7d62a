"""Hostile runs of ``ckpt verify`` with several drafters (issue 23): each is refused in one line,
before any server starts, where the drafters cannot share one server or one of them is broken."""

from __future__ import annotations

from tests.corpus import Case, both, copy_in, damaged_safetensors, write

L = ["verify", "--launch", "--engine", "vllm", "--target", "t"]
P = ["--prompts", "prompts.jsonl", "--num-prompts", "2", "--max-new-tokens", "8"]
TDD = both(copy_in("t"), copy_in("d"), copy_in("d", "d2"), copy_in("prompts.jsonl"))


def swap_cases() -> list[Case]:
    bad = damaged_safetensors()["not-json"]
    return [
        Case("multi-with-host", ["verify", "--host", "http://127.0.0.1:9", "d", "d2", *P], 2, TDD),
        Case("multi-engine-torch", ["verify", "--engine", "torch", "--target", "t", "d", "d2", *P], 2, TDD),
        Case("multi-no-launch", ["verify", "--target", "t", "d", "d2", *P], 2, TDD),
        Case("multi-sweep", [*L, "d", "d2", "--sweep", "steps=1,2", *P], 2, TDD),
        Case("multi-plot", [*L, "d", "d2", "--plot", "p.png", *P], 2, TDD, out="p.png"),
        Case("multi-baseline", [*L, "d", "d2", "--baseline-host", "http://127.0.0.1:9", *P], 2, TDD),
        Case("multi-flush", [*L, "d", "d2", "--flush-cache", *P], 2, TDD),
        Case("multi-context", [*L, "d", "d2", "--context-lengths", "1k", *P], 2, TDD),
        Case("multi-auto-engine", ["verify", "--launch", "--target", "t", "d", "d2", *P], 2, TDD),
        Case("multi-missing-second", [*L, "d", "nope", *P], 2, TDD, stderr_has="nope"),
        Case(
            "multi-damaged-second",
            [*L, "d", "dd", *P],
            2,
            both(TDD, copy_in("d", "dd"), write("dd/model.safetensors", bad)),
        ),
        Case("multi-config-only", [*L, "d", "d2/config.json", *P], 2, TDD),
        Case(
            "multi-pickle",
            [*L, "d", "pt/pytorch_model.bin", *P],
            2,
            both(TDD, write("pt/pytorch_model.bin", b"\x80\x04K\x01.")),
        ),
        Case("multi-too-many", [*L, *(["d"] * 65), *P], 2, TDD, stderr_has="at most 64"),
        Case("multi-drafter-flags", [*L, "--drafter", "d", "--drafter", "nope", *P], 2, TDD, stderr_has="nope"),
        Case("multi-output-is-drafter", [*L, "d", "d2", "--output", "d2/config.json", *P], 2, TDD),
        Case("multi-log-is-drafter", [*L, "d", "d2", "--log", "d/model.safetensors", *P], 2, TDD),
    ]
