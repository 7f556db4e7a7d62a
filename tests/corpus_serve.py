"""Hostile runs of ``ckpt serve`` and ``ckpt swap`` (issue 33).

``{hook}`` is tests/hook_host.py's server: vLLM 0.32's answers around the REAL swap hook
(engines/serverside/ckpt_swap.py), one server of its own per first path segment (each case names
its own, so no case sees another's swaps); ``{hookroot}`` its swap root (drafters ``d``, ``d2``,
``noise``, ``wide``, ``fifo``, ``empty``, ``junk``, ``linkout``), ``{hookbase}`` the folder around it
(``outside``: a drafter beside the root). The key is ``sesame-key``.

What the server refuses (wrong key, no key, outside the root, a link out, a write that fails) is
said by the hook in its answer and comes back as one error line (exit 2); what the client refuses
before anything is sent (a FIFO, a 0-byte or non-safetensors file, a drafter for another target, a
server without the hook, a hook answering for another drafter, bad --check or --min-accept-len, a
URL that is not http, a log aimed at an input) is one error line too, with its exit code.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.corpus import Case, both, copy_in

KEY = ["--api-key", "sesame-key"]
SC = "--engine-arg=--speculative-config="


def _swap(name: str, seg: str, drafter: str, code: int, *extra: str, key: bool = True, **has: str) -> Case:
    argv = ["swap", "--host", f"{{hook}}/{seg}-{name}", drafter, *(KEY if key else []), *extra]
    return Case(name, argv, code, **has)


def _hook_copy(rel: str, as_name: str) -> object:
    """A drafter of the hook's root copied into the case's folder (outside the root)."""

    def s(d: Path, base: Path) -> None:
        shutil.copytree(base / "serve-hook" / "hookroot" / rel, d / as_name)

    return s


def _serve_tree(d: Path, base: Path) -> None:
    """``t`` (the corpus target) and ``root/d`` (the corpus drafter under a swap root)."""
    shutil.copytree(base / "d", d / "root" / "d")


SERVE_SETUP = both(copy_in("t"), copy_in("d"), _serve_tree)


def _serve(name: str, code: int, *extra: str, engine: str = "vllm==0.32.0", **has: str) -> Case:
    argv = ["serve", "--engine", engine, "--target", "t", "--drafter", "root/d", "--swap-root", "root", *extra]
    return Case(name, argv, code, SERVE_SETUP, **has)


def serve_cases() -> list[Case]:
    r = "{hookroot}"
    return [
        # the honest swap, and its JSON
        _swap("serve-swap-ok", "ok", f"{r}/d2", 0, stdout_has="swapped in"),
        _swap("serve-swap-ok-json", "ok", f"{r}/d2", 0, "--json", stdout_has='"schema_version": 1'),
        Case(
            "serve-swap-key-from-env",
            ["swap", "--host", "{hook}/ok-serve-swap-key-from-env", f"{r}/d2"],
            0,
            env={"CKPT_API_KEY": "sesame-key"},
            stdout_has="map(s) replaced",
        ),
        # SGLang's route: weight_version names the drafter; the admin key refuses before the hook runs
        _swap("serve-swap-sglang-ok", "sg", f"{r}/sg-d2", 0, stdout_has="named: weight_version"),
        _swap("serve-swap-sglang-wrong-key", "sg", f"{r}/sg-d2", 2, "--api-key", "x", key=False, stderr_has="401"),
        _swap("serve-swap-sglang-no-key", "sg", f"{r}/sg-d2", 2, key=False, stderr_has="(none given)"),
        _swap("serve-swap-sglang-outside-root", "sg", "{hookbase}/sg-outside", 2, stderr_has="it lies outside it"),
        # refused by the server, said in its answer
        _swap("serve-swap-wrong-key", "ok", f"{r}/d2", 2, "--api-key", "nope", key=False, stderr_has="wrong key"),
        _swap("serve-swap-no-key", "ok", f"{r}/d2", 2, key=False, stderr_has="no key given"),
        _swap("serve-swap-outside-root", "ok", "{hookbase}/outside", 2, stderr_has="it lies outside it"),
        Case(
            "serve-swap-outside-root-relative",
            ["swap", "--host", "{hook}/ok-serve-swap-outside-root-relative", "d2", *KEY],
            2,
            _hook_copy("d2", "d2"),  # type: ignore[arg-type]
            stderr_has="not under the swap root",
        ),
        _swap("serve-swap-link-out", "ok", f"{r}/linkout", 2, stderr_has="a link leads out of it"),
        _swap("serve-swap-write-fails", "failwrite", f"{r}/d2", 2, stderr_has="the old weights were put back"),
        # refused before anything is sent
        _swap("serve-swap-fifo", "ok", f"{r}/fifo", 2, stderr_has="model.safetensors"),
        _swap("serve-swap-zero-bytes", "ok", f"{r}/empty", 2, stderr_has="model.safetensors"),
        _swap("serve-swap-not-safetensors", "ok", f"{r}/junk", 2, stderr_has="model.safetensors"),
        _swap("serve-swap-other-target", "ok", f"{r}/wide", 1, stderr_has="validate found"),
        _swap("serve-swap-missing-drafter", "ok", f"{r}/nope", 2),
        _swap("serve-swap-no-hook-vllm", "nohook", f"{r}/d2", 2, stderr_has="no ckpttools swap hook"),
        Case("serve-swap-no-hook-sglang", ["swap", "--host", "{srv}/sg-ok", f"{r}/d2", *KEY], 2),
        _swap("serve-swap-hook-lies", "liar", f"{r}/d2", 2, stderr_has="answered for digest"),
        # a swap that writes the target too: the target digest before and after catches it
        _swap("serve-swap-writes-target", "tamper", f"{r}/d2", 1, stdout_has="target CHANGED"),
        _swap("serve-swap-check-zero", "ok", f"{r}/d2", 2, "--check", "0"),
        _swap("serve-swap-check-huge", "ok", f"{r}/d2", 2, "--check", "100001"),
        _swap("serve-swap-check-text", "ok", f"{r}/d2", 2, "--check", "many"),
        _swap("serve-swap-min-without-check", "ok", f"{r}/d2", 2, "--min-accept-len", "2", stderr_has="needs --check"),
        _swap("serve-swap-min-nan", "ok", f"{r}/d2", 2, "--check", "2", "--min-accept-len", "nan"),
        _swap("serve-swap-min-below-one", "ok", f"{r}/d2", 2, "--check", "2", "--min-accept-len", "0.5"),
        Case("serve-swap-url-ftp", ["swap", "--host", "ftp://127.0.0.1:1", f"{r}/d2", *KEY], 2, stderr_has="http"),
        Case("serve-swap-url-no-scheme", ["swap", "--host", "127.0.0.1:1", f"{r}/d2", *KEY], 2),
        # measured below the bar: the previous drafter back in, checked, exit 1
        _swap(
            "serve-swap-below-bar-rolls-back",
            "ok",
            f"{r}/noise",
            1,
            "--check",
            "3",
            "--min-accept-len",
            "2",
            stdout_has="rolled back",
        ),
        _swap("serve-swap-above-bar", "ok", f"{r}/d2", 0, "--check", "3", "--min-accept-len", "2", stdout_has="4.0000"),
        # ckpt serve: what it would start, and what it refuses
        # every option of the two commands: a good value where a case can take one, and a bad one
        _swap("serve-swap-opt-engine-vllm", "ok", f"{r}/d2", 0, "--engine", "vllm", stdout_has="swapped in"),
        _swap("serve-swap-opt-engine-bad", "ok", f"{r}/d2", 2, "--engine", "trtllm"),
        _swap("serve-swap-opt-prompts-missing", "ok", f"{r}/d2", 2, "--check", "2", "--prompts", "nope.jsonl"),
        _swap("serve-swap-opt-max-new-tokens-0", "ok", f"{r}/d2", 2, "--max-new-tokens", "0"),
        _swap("serve-swap-opt-ignore-eos", "ok", f"{r}/d2", 0, "--ignore-eos", stdout_has="swapped in"),
        _swap("serve-swap-opt-timeout-0", "ok", f"{r}/d2", 2, "--timeout", "0"),
        _serve("serve-opt-engine-arg", 0, *KEY, "--print", "--engine-arg=--max-num-seqs=4", stdout_has="max-num-seqs"),
        # a --speculative-config among the engine arguments: its keys join ckpttools' own (vLLM)
        _serve(
            "serve-spec-config-merged",
            0,
            *KEY,
            "--print",
            SC + '{"attention_backend": "CPU_MLA"}',
            stdout_has='"num_speculative_tokens": 3, "attention_backend": "CPU_MLA"',
        ),
        _serve(
            "serve-spec-config-split",
            0,
            *KEY,
            "--print",
            "--engine-arg=--speculative-config",
            '--engine-arg={"attention_backend": "CPU_MLA"}',
            stdout_has='"attention_backend": "CPU_MLA"',
        ),
        # an engine argument that sets one of ckpt's own flags: argparse keeps the last (or takes a prefix),
        # so the server would load another drafter than the one checked, or listen elsewhere
        _serve(
            "serve-engine-arg-sets-drafter",
            2,
            *KEY,
            "--print",
            "--engine-arg=--speculative-draft-model-path=/etc",
            engine="sglang==0.5.17",
            stderr_has="sets --speculative-draft-model-path, which ckpttools sets itself",
        ),
        _serve("serve-engine-arg-sets-port", 2, *KEY, "--print", "--engine-arg=--port=1", stderr_has="sets --port"),
        _serve(
            "serve-engine-arg-prefix-of-model", 2, *KEY, "--print", "--engine-arg=--mod=/etc", stderr_has="sets --model"
        ),
        _serve(
            "serve-engine-arg-steps-sglang",
            2,
            *KEY,
            "--print",
            "--engine-arg=--speculative-num-steps",
            "--engine-arg=9",
            engine="sglang==0.5.17",
            stderr_has="sets --speculative-num-steps",
        ),
        # the engines' other spellings of those flags (the release tables' flag_spellings): aliases,
        # vLLM's --a_b for --a-b and its --flag.key, which it appends after the rest
        _serve(
            "serve-engine-arg-tp-short-vllm",
            2,
            *KEY,
            "--print",
            "--engine-arg=-tp",
            "--engine-arg=2",
            stderr_has="sets --tensor-parallel-size",
        ),  # fmt: skip
        _serve(
            "serve-engine-arg-underscores-vllm",
            2,
            *KEY,
            "--print",
            "--engine-arg=--tensor_parallel_size=2",
            stderr_has="sets --tensor-parallel-size",
        ),  # fmt: skip
        _serve(
            "serve-engine-arg-dotted-spec-vllm",
            2,
            *KEY,
            "--print",
            "--engine-arg=--speculative-config.model=/etc",
            stderr_has="sets --speculative-config in another spelling",
        ),  # fmt: skip
        _serve(
            "serve-engine-arg-sc-vllm",
            2,
            *KEY,
            "--print",
            "--engine-arg=-sc",
            '--engine-arg={"model": "/etc"}',
            stderr_has="sets --speculative-config in another spelling",
        ),  # fmt: skip
        _serve(
            "serve-engine-arg-alias-tp-sglang",
            2,
            *KEY,
            "--print",
            "--engine-arg=--tensor-parallel-size=2",
            engine="sglang==0.5.17",
            stderr_has="sets --tp-size",
        ),  # fmt: skip
        _serve(
            "serve-engine-arg-alias-drafter-sglang",
            2,
            *KEY,
            "--print",
            "--engine-arg=--speculative-draft-model=/etc",
            engine="sglang==0.5.17",
            stderr_has="sets --speculative-draft-model-path",
        ),  # fmt: skip
        _serve("serve-swap-root-empty", 2, *KEY, "--print", "--swap-root", "", stderr_has="an empty path"),
        _serve("serve-log-empty", 2, *KEY, "--print", "--log", "", stderr_has="an empty path"),
        _serve(
            "serve-swap-root-a-file",
            2,
            *KEY,
            "--print",
            "--swap-root",
            "root/d/config.json",
            stderr_has="ckpt: hint: give --swap-root the folder that holds the drafters",
        ),
        _serve("serve-spec-config-not-json", 2, *KEY, "--print", SC + "{bad", stderr_has="not valid JSON"),
        _serve("serve-spec-config-nan", 2, *KEY, "--print", SC + '{"x": NaN}', stderr_has="not valid JSON"),
        _serve("serve-spec-config-list", 2, *KEY, "--print", SC + "[1]", stderr_has="JSON object expected"),
        _serve(
            "serve-spec-config-sets-model", 2, *KEY, "--print", SC + '{"model": "elsewhere"}', stderr_has="sets 'model'"
        ),
        _serve(
            "serve-spec-config-sets-steps",
            2,
            *KEY,
            "--print",
            SC + '{"num_speculative_tokens": "3"}',
            stderr_has="sets 'num_speculative_tokens'",
        ),
        _serve("serve-spec-config-twice", 2, *KEY, "--print", SC + "{}", SC + "{}", stderr_has="given 2 times"),
        _serve(
            "serve-spec-config-no-value",
            2,
            *KEY,
            "--print",
            "--engine-arg=--speculative-config",
            stderr_has="has no value",
        ),
        _serve(
            "serve-spec-config-huge", 2, *KEY, "--print", SC + '{"x": "' + "a" * 70_000 + '"}', stderr_has="longer than"
        ),
        _serve(
            "serve-spec-config-nested",
            2,
            *KEY,
            "--print",
            SC + '{"x": ' + "[" * 300 + "]" * 300 + "}",
            stderr_has="nested",
        ),
        _serve("serve-opt-port", 0, *KEY, "--print", "--port", "31999", stdout_has="31999"),
        _serve("serve-opt-port-0", 2, *KEY, "--print", "--port", "0"),
        _serve("serve-opt-tp-0", 2, *KEY, "--print", "--tp", "0"),
        _serve("serve-opt-steps-0", 2, *KEY, "--print", "--steps", "0"),
        _serve("serve-opt-engine-python-missing", 2, *KEY, "--print", "--engine-python", "no/such/python"),
        _serve("serve-print-vllm", 0, *KEY, "--print", stdout_has="CKPT_SWAP_KEY_SHA256="),
        _serve("serve-print-sglang", 0, *KEY, "--print", engine="sglang==0.5.17", stdout_has="--admin-api-key"),
        _serve("serve-no-key", 2, "--print", stderr_has="needs a key"),
        _serve("serve-vllm-not-loopback", 2, *KEY, "--host", "0.0.0.0", "--print", stderr_has="loopback"),
        Case(
            "serve-drafter-outside-root",
            ["serve", "--engine", "vllm==0.32.0", "--target", "t", "--drafter", "d", "--swap-root", "root", *KEY],
            2,
            SERVE_SETUP,
            stderr_has="not under the swap root",
        ),
        _serve("serve-root-missing", 2, *KEY, "--print", "--swap-root", "nowhere"),
        Case(
            "serve-drafter-missing",
            [
                "serve",
                "--engine",
                "vllm==0.32.0",
                "--target",
                "t",
                "--drafter",
                "root/gone",
                "--swap-root",
                "root",
                *KEY,
                "--print",
            ],
            2,
            SERVE_SETUP,
            stderr_has="no such drafter",
        ),  # fmt: skip
        Case(
            "serve-drafter-is-a-file",
            [
                "serve",
                "--engine",
                "vllm==0.32.0",
                "--target",
                "t",
                "--drafter",
                "root/d/config.json",
                "--swap-root",
                "root",
                *KEY,
                "--print",
            ],
            2,
            SERVE_SETUP,
            stderr_has="cannot be read",
        ),  # fmt: skip
        _serve("serve-log-over-input", 2, *KEY, "--log", "root/d/config.json"),
        _serve("serve-release-without-route", 2, *KEY, "--print", engine="sglang==0.5.23", stderr_has="no swap route"),
    ]
