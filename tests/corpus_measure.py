"""Hostile runs of ``ckpt verify`` against the measure request (ckpttools/measuring/request.py, issue 32): the
option combinations it refuses (each one error line, exit 2), and the engine arguments the check before
the launch reads (``--engine-arg=--max-total-tokens=N``: a value that is not a token count leaves the
advice as it is; one of a full-length request or more silences it; a smaller one says so, naming the
release that runs). The launches start the fake SGLang of tests/fake_engine (a second each), through an
interpreter whose metadata says sglang 0.5.17 is installed."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.corpus import Case, both, copy_in, write

REPO = Path(__file__).resolve().parents[1]


def _fake_python(d: Path, base: Path) -> None:
    """``fakepy``: this Python, the fake engines and an sglang 0.5.17 distribution's metadata first on its path."""
    dist = d / "site" / "sglang-0.5.17.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17\n")
    path = f"{REPO / 'tests' / 'fake_engine'}:{d / 'site'}"
    p = d / "fakepy"
    p.write_text(f'#!/bin/sh\nPYTHONPATH="{path}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    p.chmod(0o755)


def _kv_pair(d: Path, base: Path) -> None:
    """A Llama drafter whose per-layer KV outgrows its MLA target's: SGLang's KV pools advice is about it."""
    from ckpttools.demo.tiny import build_deepseek_target, build_drafter

    build_drafter(d / "big", hidden_size=512, num_heads=32, num_kv_heads=32, intermediate_size=256,
                  aux_layer_ids=(0, 1, 2))  # fmt: skip
    build_deepseek_target(d / "mt", hidden_size=512, num_layers=4)


IDS = write("ids.jsonl", '{"input_ids": [5, 6, 7]}\n{"input_ids": [8, 9]}\n')
PAIR = both(copy_in("t"), copy_in("d"), copy_in("d", "d2"), IDS)
LAUNCH = both(_kv_pair, _fake_python, IDS)


def _tokens(name: str, value: str, **has: str) -> Case:
    argv = ["verify", "--launch", "--engine", "sglang", "--target", "mt", "big", "--engine-python", "./fakepy"]
    argv += ["--prompts", "ids.jsonl", "--num-prompts", "2", "--max-new-tokens", "8", "--log", f"../{name}.log"]
    argv += [f"--engine-arg=--max-total-tokens={value}"]
    return Case(name, argv, 0, LAUNCH, env={"CKPT_FAKE_ENGINE": "honest"}, **has)


LAUNCH_T = ["verify", "--launch", "--engine", "sglang", "--target", "t"]


def measure_cases() -> list[Case]:
    host = ["--host", "http://127.0.0.1:9", "--prompts", "ids.jsonl"]
    return [
        Case("measure-request-drafters-with-host", ["verify", *host, "d", "d2"], 2, PAIR, stderr_has="need --launch"),
        Case(
            "measure-request-drafters-offline",
            ["verify", "--engine", "torch", "--target", "t", "d", "d2"],
            2,
            PAIR,
            stderr_has="several drafters need --launch",
        ),
        Case(
            "measure-request-sweep-with-host",
            ["verify", *host, "--sweep", "steps=1,3"],
            2,
            PAIR,
            stderr_has="--sweep needs --launch",
        ),  # fmt: skip
        Case(
            "measure-request-sweep-with-drafters",
            ["verify", "--launch", "--engine", "sglang", "--target", "t", "d", "d2", "--sweep", "steps=1,3"],
            2,
            PAIR,
            stderr_has="--sweep is not taken with several drafters",
        ),
        Case("measure-request-host-with-tp", ["verify", *host, "--tp", "2"], 2, PAIR, stderr_has="--tp: used only"),
        Case(
            "measure-request-offline-concurrency",
            ["verify", "--engine", "torch", "--target", "t", "d", "--concurrency", "1,4"],
            2,
            PAIR,
            stderr_has="--concurrency: not measured by --engine torch",
        ),
        Case(
            "measure-request-bar-never-met",
            [
                "verify",
                "--launch",
                "--engine",
                "sglang",
                "--target",
                "t",
                "d",
                "--steps",
                "2",
                "--min-accept-len",
                "3.5",
            ],
            2,
            PAIR,
            stderr_has="can never be met",
        ),
        Case(
            "measure-request-launch-auto",
            ["verify", "--launch", "--target", "t", "d"],
            2,
            PAIR,
            stderr_has="--launch needs --engine sglang|vllm",
        ),  # fmt: skip
        Case("measure-request-nothing", ["verify", "d"], 2, PAIR, stderr_has="give --host URL, or --launch"),
        # a hostile run of the request's surface (2026-12-05): each refused before anything starts
        Case(
            "measure-request-launch-and-host",
            [*LAUNCH_T, "d", "--host", "http://127.0.0.1:9"],
            2,
            PAIR,
            stderr_has="--launch starts a server and --host measures a running one",
        ),
        Case("measure-request-launch-device", [*LAUNCH_T, "d", "--device", "cuda"], 2, PAIR, stderr_has="--device"),
        Case(
            "measure-request-vllm-topk",
            ["verify", "--launch", "--engine", "vllm", "--target", "t", "d", "--topk", "4"],
            2,
            PAIR,
            stderr_has="drafts a chain",
        ),
        Case("measure-request-sweep-empty", [*LAUNCH_T, "d", "--sweep", ""], 2, PAIR, stderr_has="names no axis"),
        Case(
            "measure-request-sweep-zero-hint",
            [*LAUNCH_T, "d", "--sweep", "steps=0"],
            2,
            PAIR,
            stderr_has="hint: give --sweep as e.g.",
        ),
        Case("measure-request-sweep-underscore", [*LAUNCH_T, "d", "--sweep", "steps=1_0"], 2, PAIR),
        Case(
            "measure-request-one-drafter-two-spellings",
            [*LAUNCH_T, "d", "./d/"],
            2,
            PAIR,
            stderr_has="are one drafter",
        ),
        Case(
            "measure-request-target-is-the-drafter",
            ["verify", "--engine", "torch", "--target", "d", "d"],
            2,
            PAIR,
            stderr_has="are one path",
        ),
        Case(
            "measure-request-prompts-empty",
            ["verify", "--engine", "torch", "--target", "t", "d", "--prompts", ""],
            2,
            PAIR,
            stderr_has="give 'builtin' or a JSONL file",
        ),
        Case(
            "measure-request-output-a-directory",
            ["verify", "--engine", "torch", "--target", "t", "d", "--prompts", "ids.jsonl", "--output", "sub"],
            2,
            both(PAIR, lambda d, base: (d / "sub").mkdir()),
            stderr_has="output sub is a directory",
        ),
        Case(
            "measure-request-plot-is-the-output",
            ["verify", *host, "--output", "r.png", "--plot", "r.png"],
            2,
            PAIR,
            stderr_has="are one file",
        ),
        Case(
            "measure-request-log-is-the-output",
            [*LAUNCH_T, "d", "--log", "x.out", "--output", "x.out"],
            2,
            PAIR,
            stderr_has="are one file",
        ),
        *[
            Case(f"measure-request-concurrency-{i}", ["verify", *host, "--concurrency", v], 2, PAIR)
            for i, v in enumerate(["1_0", "\u0663", "1,8,", "1,1", "1" * 5000, ",".join(["1"] * 33)])
        ],
        # the engine arguments the check before the launch reads
        _tokens("measure-kv-tokens-not-a-number", "abc", stderr_has="launch SGLang with --max-total-tokens N"),
        _tokens("measure-kv-tokens-negative", "-5", stderr_has="launch SGLang with --max-total-tokens N"),
        _tokens("measure-kv-tokens-too-few", "1", stderr_has="the --max-total-tokens 1 given is fewer"),
        _tokens("measure-kv-tokens-huge", "9" * 400, stderr_has="starting sglang"),
        _tokens("measure-kv-tokens-names-the-release", "300", stderr_has="SGLang 0.5.17 sizes one token count"),
        # read as SGLang 0.5.17 reads the number (human_readable_int: case-sensitive SI and IEC suffixes)
        _tokens("measure-kv-tokens-si-suffix", "300k", stderr_has="starting sglang"),
        _tokens("measure-kv-tokens-iec-decimal", "1.5Ki", stderr_has="launch SGLang with --max-total-tokens N"),
        _tokens("measure-kv-tokens-upper-k", "300K", stderr_has="launch SGLang with --max-total-tokens N"),
        _tokens("measure-kv-tokens-fullwidth-k", "\uff13\uff10\uff10\uff4b", stderr_has="launch SGLang with"),
        _tokens("measure-kv-tokens-huge-suffix", "9" * 400 + "T", stderr_has="starting sglang"),
        _tokens("measure-kv-tokens-small-suffix", "1k", stderr_has="the --max-total-tokens 1,000 given is fewer"),
        Case(
            "measure-context-length-suffix",
            [
                "verify",
                "--launch",
                "--engine",
                "sglang",
                "--target",
                "mt",
                "big",
                "--engine-python",
                "./fakepy",
                "--prompts",
                "ids.jsonl",
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "8",
                "--log",
                "../ctx.log",
                "--engine-arg=--context-length=1Ki",
                "--context-lengths",
                "64,2k",
            ],
            0,
            LAUNCH,
            env={"CKPT_FAKE_ENGINE": "honest"},
            stdout_has="past the target's context of 1024 tokens",
        ),  # fmt: skip
    ]
