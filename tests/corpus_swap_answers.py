"""Hostile runs of ``ckpt verify --launch`` with several drafters on one server (issue 31, the swap's
answers): the server is a fake engine (tests/fake_engine, picked with --engine-python; the modes in
tests/fake_engine/fake_swap.py) that answers a swap for more ranks than it has, answers
``/collective_rpc`` with a list, reads the target back as nothing, dies during a swap or during a
measurement, stalls past ``--timeout``, or cannot start a drafter's own server.

Each of these is a case of one class: the server's rank count decides (more answers is a failed
swap); a check that read nothing says "not checked" and why; a server that died is said to have
died, with its exit code and its log's last lines; the requests end at ``--timeout``; a drafter's
failure is in its entry, the other drafters are still measured and reported, and the run ends with
one error line and exit 2. Every case starts fake engines only (a second or two each)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.corpus import Case, both, copy_in, write

REPO = Path(__file__).resolve().parents[1]


def _fake_python(d: Path, base: Path) -> None:
    """``fakepy``: this Python, with the fake engines first on its path (the server's own path after)."""
    p = d / "fakepy"
    fake = REPO / "tests" / "fake_engine"
    p.write_text(f'#!/bin/sh\nPYTHONPATH="{fake}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    p.chmod(0o755)


SETUP = both(
    copy_in("t"),
    copy_in("d"),
    copy_in("d", "d2"),
    write("ids.jsonl", '{"input_ids": [5, 6, 7]}\n{"input_ids": [8, 9]}\n'),
    _fake_python,
)


def _run(name: str, engine: str, mode: str, code: int, *extra: str, **has: str) -> Case:
    argv = ["verify", "--launch", "--engine", engine, "--target", "t", "d", "d2", "--engine-python", "./fakepy"]
    argv += ["--prompts", "ids.jsonl", "--num-prompts", "2", "--max-new-tokens", "8", "--log", f"../{name}.log"]
    return Case(name, [*argv, *extra], code, SETUP, env={"CKPT_FAKE_ENGINE": mode}, **has)


def swap_answer_cases() -> list[Case]:
    sg, vl = "sglang==0.5.17", "vllm==0.32.0"
    died = "exit code -9 (killed: out of memory?); its log ../"
    return [
        # more answers than ranks: the second drafter goes to its own server, and says why
        _run("swap-answer-sglang-extra-rank", sg, "extra-rank-2", 0, stdout_has="but the server has 1 rank"),
        _run("swap-answer-vllm-extra-rank", vl, "extra-rank-2", 0, stdout_has="2 ranks answered, but the server has 1"),
        # an answer of another shape: a failed swap in one line, no traceback
        _run("swap-answer-vllm-rpc-list", vl, "rpc-list-2", 0, stdout_has="not an object with a results list"),
        # a target read that read nothing is not "unchanged"
        _run(
            "swap-answer-sglang-target-read-nothing",
            sg,
            "weights-null",
            0,
            stdout_has="target weights: not checked: before the first swap",
        ),
        # the shared server dies: the drafter in flight says so, exit code and log tail, exit 2
        _run("swap-answer-sglang-die-in-swap", sg, "die-in-swap-2", 2, stderr_has=f"during the swap of d2, {died}"),
        _run("swap-answer-sglang-die-in-measure", sg, "die-in-measure-2", 2, stderr_has=f"the run of d2, {died}"),
        _run("swap-answer-vllm-die-in-swap", vl, "die-in-swap-2", 2, stderr_has=f"during the swap of d2, {died}"),
        _run("swap-answer-vllm-die-in-measure", vl, "die-in-measure-2", 2, stderr_has=f"the run of d2, {died}"),
        # ... and the drafters after it are measured on their own servers
        _run(
            "swap-answer-sglang-die-first-rest-own",
            sg,
            "die-in-swap-1",
            2,
            stdout_has="own server: the shared server died (exit code -9) before its turn",
        ),
        # one drafter's own server fails: its entry says so, the other drafter's figures stay
        _run(
            "swap-answer-sglang-own-server-fails",
            sg,
            "refuse-swap-1+own-fails",
            2,
            stderr_has="d: the sglang server exited with code 1 before it was ready",
            stdout_has="d2  accept length 2.000",
        ),
        # a swap request ends at --timeout, not at a fixed 600 s
        _run(
            "swap-answer-sglang-timeout",
            sg,
            "stall-swap-2",
            0,
            "--timeout",
            "2",
            stdout_has="timed out (no whole answer within",
        ),
    ]
