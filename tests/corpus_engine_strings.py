"""Hostile ``--engine`` values, tensors of a dtype their parameter does not take, and config sizes
that only the config guard stops (issue 31). tests/corpus.py's run_case checks exit codes, one error
line, inputs unchanged and nothing left behind; a near miss or a bad version is refused in one line
naming what is known, a wrong dtype is a finding (exit 1) under validate and validate --load-plan, an
8-bit float weight is named (a warning), and an unbounded size ends in a one-line refusal or a
finding, in about a second, not in a MemoryError."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.corpus import Case, Setup, both, copy_in, edit_json, write

#: the longest one argument may be on Linux (MAX_ARG_STRLEN, 128 KiB with its NUL): a 1 MiB --engine cannot
#: reach a command line at all; tests/test_engine_strings.py feeds 1 MiB to the parser itself
ARG_MAX = 128 * 1024 - 1


def _engine_name_cases() -> list[Case]:
    d = copy_in("d")
    out = []
    for tag, value in (
        ("capitalised", "SGLang"),
        ("alias-sgl", "sgl"),
        ("leading-space", " sglang"),
        ("trailing-space", "sglang "),
        ("upper-vllm", "VLLM"),
        ("alias-tensorrt-llm", "tensorrt-llm"),
        ("space-around-eq", "sglang == 0.5.17"),
        ("capitalised-release", "SGLang==0.5.17"),
        ("empty", ""),
    ):
        out.append(
            Case(f"engine-name-validate-{tag}", ["validate", "d", "--engine", value], 2, d, stderr_has="known: sglang")
        )
    out += [
        Case(
            "engine-name-validate-sgl-names-sglang", ["validate", "d", "--engine", "sgl"], 2, d, stderr_has="'sglang'"
        ),
        Case(
            "engine-name-verify-capitalised",
            ["verify", "--host", "http://127.0.0.1:9", "--engine", "SGLang", "d"],
            2,
            d,
            stderr_has="did you mean 'sglang'",
        ),
        Case(
            "engine-name-verify-auto-capitalised",
            ["verify", "--host", "http://127.0.0.1:9", "--engine", "Auto", "d"],
            2,
            d,
            stderr_has="did you mean 'auto'",
        ),
        Case(
            "engine-name-verify-launch-leading-space",
            ["verify", "--launch", "--engine", " sglang", "--target", "t", "d"],
            2,
            both(d, copy_in("t")),
            stderr_has="names are matched exactly",
        ),
        Case("engine-name-fix-alias", ["validate", "d", "--fix", "-o", "out", "--engine", "sgl"], 2, d, out="out"),
        Case("engine-name-validate-argmax", ["validate", "d", "--engine", "a" * ARG_MAX], 2, d, stderr_has="longer"),
        Case(
            "engine-name-validate-argmax-spaces",
            ["validate", "d", "--engine", "sglang" + " " * (ARG_MAX - 7) + "!"],
            2,
            d,
            stderr_has="longer than 128",
        ),
        Case(
            "engine-name-verify-argmax",
            ["verify", "--host", "http://127.0.0.1:9", "--engine", "sglang==" + "0" * (ARG_MAX - 9) + "!", "d"],
            2,
            d,
            stderr_has="longer than 128",
        ),
    ]
    return out


def _engine_version_cases() -> list[Case]:
    d = copy_in("d")
    out = [
        Case(
            f"engine-version-validate-{tag}",
            ["validate", "d", "--engine", value],
            2,
            d,
            stderr_has="known: sglang==0.5.17, sglang==0.5.23" if value.startswith("sglang") else "known: vllm==0.32",
        )
        for tag, value in (
            ("dev-post-rc-a-b", "sglang==0.5.17.dev.post.rc.a.b"),
            ("double-dot", "sglang==0.5..17"),
            ("two-posts", "sglang==0.5.17.post1.post2"),
            ("trailing-dash", "sglang==0.5.17-"),
            ("empty-local", "sglang==0.5.17+"),
            ("epoch", "sglang==1!0.5.17"),
            ("word", "vllm==latest"),
            ("at-dev-post", "vllm@0.32.0.dev.post.rc"),
            ("neighbour", "sglang==0.5.18"),
        )
    ]
    out += [
        Case(
            "engine-version-verify-dev-post-rc-a-b",
            ["verify", "--host", "http://127.0.0.1:9", "--engine", "sglang==0.5.17.dev.post.rc.a.b", "d"],
            2,
            d,
            stderr_has="PEP 440",
        ),
        # PEP 440 spellings of a known release still name its table
        Case("engine-version-validate-post-ok", ["validate", "d", "--engine", "sglang==0.5.17.post1"], 0, d),
        Case("engine-version-validate-local-ok", ["validate", "d", "--engine", "vllm@0.32.0+cpu"], 0, d),
        Case("engine-version-validate-v-ok", ["validate", "d", "--engine", "sglang==v0.5.23", "--json"], 0, d),
    ]
    return out


def _retyped(name: str, flavor: str, suffix: str, dtype: str) -> Setup:
    """A tiny drafter of ``flavor`` whose tensor named ``suffix`` (its canonical end) is stored as ``dtype``
    (a torch dtype name), written by safetensors itself."""

    def s(d: Path, base: Path) -> None:
        import torch
        from safetensors.torch import load_file, save_file

        from ckpttools.demo.tiny import build_drafter

        build_drafter(d / name, flavor)
        f = d / name / "model.safetensors"
        ts = load_file(str(f))
        hit = [n for n in ts if n == suffix or n.endswith("." + suffix)]
        assert hit, f"{suffix} is not among {sorted(ts)}"
        t = ts[hit[0]]
        scale = 1 if suffix == "d2t" else 100  # d2t keeps its offsets: only its dtype is wrong
        ts[hit[0]] = (t > 0) if dtype == "bool" else (t.double() * scale).to(getattr(torch, dtype))
        save_file(ts, str(f), metadata={"format": "pt"})

    return s


_DTYPES: list[tuple[str, str, str]] = [
    ("int64-lm-head", "lm_head.weight", "int64"),
    ("bool-norm", "norm.weight", "bool"),
    ("int8-norm", "layers.0.post_attention_layernorm.weight", "int8"),
    ("uint8-q-proj", "layers.0.self_attn.q_proj.weight", "uint8"),
    ("float-d2t", "d2t", "float32"),
]


def _dtype_cases() -> list[Case]:
    out = []
    for flavor, engines in (("sglang", ("sglang==0.5.17", "sglang==0.5.23")), ("vllm", ("vllm==0.32", "vllm==0.33"))):
        for tag, suffix, dtype in _DTYPES:
            setup = _retyped("x", flavor, suffix, dtype)
            for engine in engines:
                e = engine.replace("==", "-")
                argv = ["validate", "x", "--engine", engine]
                out += [
                    Case(f"dtype-{tag}-{flavor}-validate-{e}", argv, 1, setup, stdout_has="[tensors.dtype]"),
                    Case(
                        f"dtype-{tag}-{flavor}-load-plan-{e}",
                        [*argv, "--load-plan", "--json"],
                        1,
                        setup,
                        stdout_has='"verdict": "wrong"',
                    ),
                ]
        f8 = _retyped("x", flavor, "layers.0.self_attn.o_proj.weight", "float8_e4m3fn")
        for engine in engines:
            e = engine.replace("==", "-")
            argv = ["validate", "x", "--engine", engine]
            out += [
                # an FP8 weight with no scale and no quantization_config: refused since issue 34 (quant checks)
                Case(f"dtype-f8-e4m3-{flavor}-validate-{e}", argv, 1, f8, stdout_has="F8_E4M3, an 8-bit float"),
                Case(
                    f"dtype-f8-e4m3-{flavor}-load-plan-{e}",
                    [*argv, "--load-plan", "--json"],
                    1,
                    f8,
                    stdout_has='"verdict": "unchecked"',
                ),
            ]
    # vLLM copies any integer map into its int64 parameter; SGLang adds arange(Vd), which torch refuses for U16
    u16 = _retyped("x", "sglang", "d2t", "uint16")
    out += [
        Case("dtype-uint16-d2t-sglang-validate", ["validate", "x", "--engine", "sglang"], 1, u16, stdout_has="U16"),
        Case("dtype-uint16-d2t-vllm-validate", ["validate", "x", "--engine", "vllm", "--json"], 0, u16),
        # the export check reads the written tree's load plan: a wrong dtype leaves nothing at OUT
        Case(
            "dtype-int64-lm-head-export-trtllm",
            ["export", "x", "-o", "out", "--format", "trtllm"],
            1,
            _retyped("x", "sglang", "lm_head.weight", "int64"),
            out="out",
        ),
    ]
    return out


def _sized(name: str, change: Callable[[dict[str, Any]], object], flavor: str = "sglang", **kw: Any) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_drafter

        build_drafter(d / name, flavor, **kw)

    return both(s, edit_json(f"{name}/config.json", change))


def _bounds_cases() -> list[Case]:
    huge = _sized("b", lambda c: c.update(num_aux_hidden_states=1_000_000_000), fc_norm=True)
    layers = _sized("b", lambda c: c.update(num_hidden_layers=1_000_000_000))
    inner = _sized(
        "b",
        lambda c: c["transformer_layer_config"].update(num_aux_hidden_states=10**9, fc_norm=True),
        flavor="speculators",
    )
    t = copy_in("t")
    prompts = write("ids.jsonl", '{"input_ids": [1, 2, 3]}\n')  # no tokenizer needed
    p = ["--prompts", "ids.jsonl", "--num-prompts", "1", "--max-new-tokens", "4"]
    out = []
    for engine in ("sglang", "sglang==0.5.17", "vllm", "vllm==0.32"):
        e = engine.replace("==", "-")
        out += [
            Case(
                f"bounds-num-aux-1e9-fc-norm-load-plan-{e}",
                ["validate", "b", "--engine", engine, "--load-plan"],
                1,
                huge,
                stdout_has="num_aux_hidden_states",
            ),
            Case(
                f"bounds-num-aux-1e9-fc-norm-validate-{e}",
                ["validate", "b", "--engine", engine],
                1,
                huge,
                stdout_has="num_aux_hidden_states",
            ),
        ]
    out += [
        Case(
            "bounds-num-aux-1e9-fc-norm-load-plan-json",
            ["validate", "b", "--load-plan", "--json"],
            1,
            huge,
            stdout_has="not a usable config",
        ),
        Case(
            "bounds-layers-1e9-load-plan", ["validate", "b", "--load-plan"], 1, layers, stdout_has="num_hidden_layers"
        ),
        Case(
            "bounds-speculators-inner-num-aux-load-plan-vllm",
            ["validate", "b", "--engine", "vllm", "--load-plan", "--json"],
            1,
            inner,
            stdout_has="not a usable config",
        ),
        Case(
            "bounds-num-aux-1e9-fc-norm-export-trtllm",
            ["export", "b", "-o", "out", "--format", "trtllm"],
            2,
            huge,
            out="out",
            stderr_has="num_aux_hidden_states",
        ),
        Case(
            "bounds-num-aux-1e9-fc-norm-export-trtllm-target",
            ["export", "b", "-o", "out", "--format", "trtllm", "--target", "t"],
            2,
            both(huge, t),
            out="out",
        ),
        Case(
            "bounds-num-aux-1e9-fc-norm-probe",
            ["verify", "--engine", "torch", "--target", "t", "b", *p],
            1,
            both(huge, t, prompts),
            stderr_has="num_aux_hidden_states",
        ),
        Case(
            "bounds-num-aux-1e9-fc-norm-swap",
            ["verify", "--launch", "--engine", "vllm", "--target", "t", "d", "b", *p],
            1,
            both(huge, t, prompts, copy_in("d")),
            stderr_has="num_aux_hidden_states",
        ),
        Case(
            "bounds-architectures-object-swap",
            ["verify", "--launch", "--engine", "sglang", "--target", "t", "d", "b", *p],
            1,
            both(_sized("b", lambda c: c.update(architectures={"a": 1})), t, prompts, copy_in("d")),
            stderr_has="architectures",
        ),
    ]
    return out


def engine_string_cases() -> list[Case]:
    return _engine_name_cases() + _engine_version_cases() + _dtype_cases() + _bounds_cases()
