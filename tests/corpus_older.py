"""The corpus of issue 31's older classes, each met by the real CLI in a subprocess:

- ``older-net-``: huggingface_hub's own client meets a hostile Hub (tests/local_hub.py): a
  redirect loop or an undecodable body while downloading config.json is one error (2);
- ``older-env-``: every environment variable ckpttools or huggingface_hub reads, set badly, is
  one error naming it (2). huggingface_hub reads its variables when it is imported, so every
  one of these cases sets ``Case.env``: each must run in a process of its own;
- ``older-jsonl-``: JSON Lines are split on ``\\n`` only: strings holding U+2028, U+2029 or
  U+0085, and a lone ``\\r`` between values, are read (0);
- ``older-steps-``: a server's counts past their limits (absurd draft steps, a 300,000-bin
  histogram, counts past 2**53, a draft position of 1e9) end in time: an error while
  connecting (2), or every request failed (3);
- ``older-device-``: ``verify --engine torch --device`` with a device this torch or machine
  lacks, or no device name at all (2);
- ``older-tok-``: tokenizer.json and tokenizer_config.json fields of the wrong type (2), and a
  tokenizer folder holding only tiktoken.model: read where a rank file serves (remap,
  diff-vocab: 0), named where tokenizer.json is needed (verify's text prompts: 2).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

from tests.corpus import Case, Setup, both, copy_in, write
from tests.corpus_net import CALM_ENV, HUB_ENV

#: --timeout 30: the stand-in answers at once, and none of these cases is about a deadline; with 2 s,
#: older-steps-sg-info-steps-huge ran out of it once in a clean clone (2026-12-06: its /server_info, served
#: by a thread of the test worker, under the whole suite's load on 2 cores)
_P = ["--prompts", "prompts.jsonl", "--num-prompts", "2", "--max-new-tokens", "8", "--timeout", "30"]


def _net_cases() -> list[Case]:
    # each of these ends on its own (the client's redirect limit, a body that does not decode), not on a
    # deadline, and says so: the deadlines a loaded machine meets. Under HUB_ENV's 4 s, the redirect loop
    # run again in a fresh process (test_cases_run_by_a_zygote_read_alike) ran out of time first in a
    # clean clone of 2026-12-07 ("did not arrive within 4 s"), its Hub served by the busy test worker
    env = dict(CALM_ENV)
    out = []
    for mode in ("small-redirect-loop", "head-redirect-loop", "small-gzip"):
        says = "does not decode" if mode.endswith("gzip") else "redirected in a loop"
        out.append(Case(f"older-net-config-{mode}", ["inspect", f"org/d-{mode}"], 2, env=env, stderr_has=says))
        out.append(
            Case(
                f"older-net-target-config-{mode}",
                ["validate", "org/d", "--target", f"org/t-{mode}"],
                2,
                env=env,
                stderr_has=says,
            )
        )
    return out


#: (case, variable, value, expected exit of ``inspect org/d`` on the local Hub)
_HUB_VALUES = (
    ("download-timeout-word", "HF_HUB_DOWNLOAD_TIMEOUT", "abc"),
    ("download-timeout-float", "HF_HUB_DOWNLOAD_TIMEOUT", "1.5"),
    ("download-timeout-zero", "HF_HUB_DOWNLOAD_TIMEOUT", "0"),
    ("download-timeout-negative", "HF_HUB_DOWNLOAD_TIMEOUT", "-3"),
    ("download-timeout-empty", "HF_HUB_DOWNLOAD_TIMEOUT", ""),
    ("download-timeout-huge", "HF_HUB_DOWNLOAD_TIMEOUT", "10" * 40),
    ("etag-timeout-word", "HF_HUB_ETAG_TIMEOUT", "soon"),
    ("verbosity-unknown", "HF_HUB_VERBOSITY", "loud"),
    ("endpoint-not-url", "HF_ENDPOINT", "notaurl"),
    ("endpoint-ftp", "HF_ENDPOINT", "ftp://127.0.0.1:21"),
    ("endpoint-port-past-65535", "HF_ENDPOINT", "http://127.0.0.1:99999"),
    ("endpoint-port-word", "HF_ENDPOINT", "http://127.0.0.1:abc"),
    ("endpoint-empty", "HF_ENDPOINT", ""),
    ("offline-maybe", "HF_HUB_OFFLINE", "maybe"),
    ("disable-xet-word", "HF_HUB_DISABLE_XET", "please"),
    ("hf-home-empty", "HF_HOME", ""),
    ("hf-home-file", "HF_HOME", "a-file"),
    ("hub-cache-empty", "HF_HUB_CACHE", ""),
    ("token-non-ascii", "HF_TOKEN", "hf_t\u00f6ken"),
    ("hub-deadline-word", "CKPT_HUB_DEADLINE", "abc"),
    ("hub-deadline-inf", "CKPT_HUB_DEADLINE", "inf"),
    ("hub-deadline-zero", "CKPT_HUB_DEADLINE", "0"),
    ("hub-deadline-huge", "CKPT_HUB_DEADLINE", "1e300"),
)


def _env_cases() -> list[Case]:
    out = []
    for name, var, value in _HUB_VALUES:
        env = {**HUB_ENV, var: value}
        setup = write("a-file", "not a folder") if value == "a-file" else None
        says = f"ckpt: error: environment variable {var}"
        out.append(Case(f"older-env-{name}", ["inspect", "org/d"], 2, setup, env=env, stderr_has=says))
    ids = write("ids.jsonl", '{"input_ids": [1, 2, 3]}\n')
    pair = both(copy_in("d"), copy_in("t"), ids)
    torch = ["verify", "d", "--engine", "torch", "--target", "t", "--prompts", "ids.jsonl", "--max-new-tokens", "4"]
    out += [
        # offline, the variables are read too (huggingface_hub reads them at import)
        Case(
            "older-env-offline-download-timeout",
            ["inspect", "org/absent"],
            2,
            env={"HF_HUB_DOWNLOAD_TIMEOUT": "1.5"},
            stderr_has="ckpt: error: environment variable HF_HUB_DOWNLOAD_TIMEOUT",
        ),
        # transformers imports huggingface_hub: the offline torch engine checks first
        Case(
            "older-env-torch-download-timeout",
            [*torch, "--num-prompts", "1"],
            2,
            pair,
            env={"HF_HUB_DOWNLOAD_TIMEOUT": "abc"},
            stderr_has="ckpt: error: environment variable HF_HUB_DOWNLOAD_TIMEOUT",
        ),
        # a local command imports no huggingface_hub: a bad Hub variable is not its concern
        Case("older-env-local-unaffected", ["inspect", "d"], 0, copy_in("d"), env={"HF_HUB_DOWNLOAD_TIMEOUT": "abc"}),
        # a deprecated variable huggingface_hub warns about: one note line, not a Python warning
        Case(
            "older-env-deprecated-transfer",
            ["inspect", "org/d"],
            0,
            env={**HUB_ENV, "HF_HUB_ENABLE_HF_TRANSFER": "1"},
            stderr_has="ckpt: note: huggingface_hub:",
        ),
    ]
    return out


def _jsonl_cases() -> list[Case]:
    sep = {"u2028": "\u2028", "u2029": "\u2029", "u0085": "\u0085"}
    out = []
    for name, ch in sep.items():
        text = json.dumps({"prompt": f"one{ch}two"}, ensure_ascii=False) + "\n" + '{"input_ids": [1, 2, 3]}\n'
        out.append(
            Case(
                f"older-jsonl-prompts-{name}",
                ["verify", "--host", "{srv}/sg-ok", "--prompts", "pp.jsonl", "--num-prompts", "2"],
                0,
                write("pp.jsonl", text),
                stdout_has="accept length 2.00",
            )
        )
        freq = "[1, 2, 3]\n" + json.dumps({"input_ids": [4, 5], "source": f"a{ch}b"}, ensure_ascii=False) + "\n"
        build = ["vocab", "build", "--frequencies", "f.jsonl", "--vocab-size", "1024", "--draft-vocab-size", "4"]
        out.append(
            Case(
                f"older-jsonl-freq-{name}",
                [*build, "-o", "map.safetensors"],
                0,
                write("f.jsonl", freq),
                "map.safetensors",
            )
        )
    build = ["vocab", "build", "--frequencies", "f.jsonl", "--vocab-size", "1024", "--draft-vocab-size", "4"]
    out += [
        Case(
            "older-jsonl-prompts-crlf",
            ["verify", "--host", "{srv}/sg-ok", "--prompts", "pp.jsonl", "--num-prompts", "2", "--max-new-tokens", "8"],
            0,
            write("pp.jsonl", '{"prompt": "a"}\r\n{"input_ids": [1, 2]}\r\n'),
        ),
        Case(  # a \r between values is JSON whitespace; universal newlines once split the line there
            "older-jsonl-freq-lone-cr",
            [*build, "-o", "map.safetensors"],
            0,
            write("f.jsonl", '{"input_ids": [1,\r 2, 3]}\n'),
            "map.safetensors",
        ),
        Case(  # U+2028 is no JSON whitespace: a line of it is not blank, and not JSON
            "older-jsonl-prompts-u2028-alone",
            ["verify", "--host", "{srv}/sg-ok", "--prompts", "pp.jsonl"],
            2,
            write("pp.jsonl", '{"prompt": "a"}\n\u2028\n'),
            stderr_has="pp.jsonl:2",
        ),
    ]
    return out


def _steps_cases() -> list[Case]:
    prompts = copy_in("prompts.jsonl")
    out = []
    for mode, code, says in (
        ("sg-info-steps-huge", 2, "speculative_num_steps = 1000000000000000: not a count"),
        ("sg-nosteps-hist-huge", 3, "has 300000 bins"),
        ("sg-counts-huge", 3, "completion_tokens = 1152921504606846976: not an integer in [0, 2^53]"),
        ("vl-metrics-pos-huge", 2, "draft position 1000000000"),
        ("vl-metrics-counter-huge", 2, "not an integer in [0, 2^53]"),
        ("vl-hist-huge", 3, "has 300000 bins"),
        # no steps named: the figure is still bound by the most draft steps any chain runs (64)
        (
            "sg-nosteps-acc-huge",
            2,
            "accept length 1001.000 (1 + spec_num_correct_drafts / spec_verify_ct) must lie in [1, 65]",
        ),
        ("vl-acc-huge", 2, "must lie in [1, 65] (the server names no draft steps"),
        ("vl-metrics-pos-over", 2, "at draft position 0 changed by"),  # a rate above 1 at one position
        ("sg-hist-contradicts", 2, "counts 1000100 verify steps, spec_verify_ct 4"),  # SGLang counts each step in both
        ("vl-rpc-deep", 0, None),  # the hook's state nested too deep: "cannot say" which drafter, not a traceback
    ):
        extra = ["--engine", "vllm"] if mode.startswith("vl-") else []
        argv = ["verify", "--host", "{srv}/" + mode, *_P, *extra]
        out.append(Case(f"older-steps-{mode}", argv, code, prompts, stderr_has=says))
    return out


def _device_cases() -> list[Case]:
    pair = both(copy_in("d"), copy_in("t"), write("ids.jsonl", '{"input_ids": [1, 2, 3]}\n'))
    torch = ["verify", "d", "--engine", "torch", "--target", "t", "--prompts", "ids.jsonl", "--max-new-tokens", "4"]
    out = []
    for name, dev in (
        ("cuda", "cuda"),
        ("cuda-index", "cuda:7"),
        ("mps", "mps"),
        ("bogus", "bogus"),
        ("upper-case", "CUDA"),
        ("empty", ""),
        ("meta", "meta"),
    ):
        out.append(Case(f"older-device-{name}", [*torch, "--device", dev], 2, pair, stderr_has="--device"))
    return out


def _tiktoken(d: Path, base: Path) -> None:
    (d / "tk").mkdir()
    lines = "".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256))
    (d / "tk" / "tiktoken.model").write_text(lines)


def _tokenizer_json(change: Callable[[dict], object]) -> Setup:
    """A copy of the base tokenizer (``bt/``) with its tokenizer.json changed."""

    def s(d: Path, base: Path) -> None:
        (d / "bt").mkdir()
        obj = json.loads((base / "tok" / "tokenizer.json").read_text())
        new = change(obj)
        (d / "bt" / "tokenizer.json").write_text(json.dumps(obj if new is None else new))

    return s


def _tok_cases() -> list[Case]:
    remap = ["remap", "d", "--to", "m.safetensors", "-o", "out", "--target-tokenizer", "tok", "--source-tokenizer"]
    base = both(copy_in("d"), copy_in("m.safetensors"), copy_in("tok"))
    fields: dict[str, Callable[[dict], object]] = {
        "top-list": lambda o: [o],
        "model-list": lambda o: o.update(model=[1]),
        "added-tokens-int": lambda o: o.update(added_tokens=5),
        "added-special-string": lambda o: o.update(added_tokens=[{"id": 1, "content": "x", "special": "no"}]),
        "pretokenizers-int": lambda o: o.update(pre_tokenizer={"type": "Sequence", "pretokenizers": 5}),
        "pre-tokenizer-type-list": lambda o: o.update(pre_tokenizer={"type": ["ByteLevel"]}),
        "decoder-list": lambda o: o.update(decoder=[1]),
        "decoders-entry-int": lambda o: o.update(decoder={"type": "Sequence", "decoders": [7]}),
    }
    out = [
        Case(
            f"older-tok-json-{name}",
            [*remap, "bt"],
            2,
            both(base, _tokenizer_json(f)),
            "out",
            stderr_has="not a usable Hugging Face tokenizer.json",
        )
        for name, f in fields.items()
    ]
    chat = write("chat.jsonl", '{"messages": [{"role": "user", "content": "t2 t3"}]}\n')
    configs = {
        "top-list": [1],
        "template-int": {"chat_template": 5},
        "template-entry-int": {"chat_template": [{"name": "default", "template": 5}]},
        "template-entry-string": {"chat_template": ["{{ messages }}"]},
        "bos-int": {"chat_template": "{{ bos_token }}{{ messages[0].content }}", "bos_token": 7},
        "eos-list": {"chat_template": "{{ messages[0].content }}", "eos_token": ["</s>"]},
    }
    for name, cfg in configs.items():
        setup = both(copy_in("tok", "ct"), write("ct/tokenizer_config.json", json.dumps(cfg)), chat)
        argv = ["verify", "--host", "{srv}/sg-ok", "--prompts", "chat.jsonl", "--tokenizer", "ct"]
        out.append(Case(f"older-tok-config-{name}", argv, 2, setup, stderr_has="tokenizer_config.json"))
    out += [
        Case("older-tok-tiktoken-only-remap", [*remap, "tk"], 0, both(base, _tiktoken), "out"),
        Case(
            "older-tok-tiktoken-only-diff-vocab",
            ["diff-vocab", "d", "m.safetensors", "--tokenizer", "tk"],
            0,
            both(copy_in("d"), copy_in("m.safetensors"), _tiktoken),
        ),
        Case(
            "older-tok-tiktoken-only-verify-text",
            ["verify", "--host", "{srv}/sg-ok", "--prompts", "prompts.jsonl", "--tokenizer", "tk"],
            2,
            both(copy_in("prompts.jsonl"), _tiktoken),
            stderr_has="tiktoken",
        ),
    ]
    return out


def older_cases() -> list[Case]:
    """Every case of issue 31's older classes."""
    return _net_cases() + _env_cases() + _jsonl_cases() + _steps_cases() + _device_cases() + _tok_cases()
