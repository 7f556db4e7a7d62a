"""Corpus cases for drafters whose sizes vLLM's CPU build refuses: MLA sizes on a CPU with AMX (its AMX
MLA backend packs the attention's weights for AMX tiles: engines/claims.py ``cpu_mla.amx``), and
attention head sizes its CPU_ATTN backend has no kernel for, on any CPU (``cpu_attn.head_size``:
``ckpt example drafter``'s head_dim 16 is one). validate warns under ``--engine vllm`` naming the
RuntimeError the server would die with, says nothing of it for SGLang or for sizes the backend
takes, and exits 0 (a warning)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.corpus import Case, Setup, both, edit_json


def _mla(name: str, **kw: Any) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_drafter

        build_drafter(d / name, "mla", num_kv_heads=2, **kw)

    return s


def _config_only(name: str) -> Setup:
    """The drafter's config.json alone (its weights removed)."""

    def s(d: Path, base: Path) -> None:
        for f in (d / name).iterdir():
            if f.name != "config.json":
                f.unlink()

    return s


def _served(d: Path, base: Path) -> None:
    """The MLA pair tests/test_vllm_engine.py serves: DeepSeek-V3 target, MLA drafter exported for vLLM."""
    from ckpttools.demo.tiny import build_known_pair
    from ckpttools.ops.export import export

    tp, dp = build_known_pair(d / "kp", target_arch="deepseek", drafter_flavor="mla", mla_latent=512)
    export(dp, d / "v", format="vllm", target=tp)
    tp.rename(d / "t")


def _plain(name: str, **kw: Any) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_drafter

        build_drafter(d / name, "sglang", **kw)

    return s


_REMOVED = object()


def _example_target(name: str) -> Setup:
    """``ckpt example target``'s Llama target: 4 heads of 16."""

    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_target

        build_target(d / name)

    return s


def _head_dim(value: Any) -> Setup:
    """``ckpt example drafter``'s drafter (head_dim 16) with head_dim set to ``value`` (or removed)."""

    def edit(c: dict[str, Any]) -> dict[str, Any]:
        c = {k: v for k, v in c.items() if k != "head_dim"}
        return c if value is _REMOVED else {**c, "head_dim": value}

    return both(_plain("d"), edit_json("d/config.json", edit))


def cpu_attention_cases() -> list[Case]:
    warned = "its CPU_ATTN backend): head size 16"
    return [
        Case(
            "cpu-attn-head16-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            0,
            _plain("d"),
            stdout_has='head size 16 (head_dim) loads, and its engine dies on the first request ("RuntimeError: '
            'Unsupported CPU attention configuration: head_dim=16 ...")',
        ),
        Case(
            "cpu-attn-head16-validate-vllm032-json",
            ["validate", "d", "--engine", "vllm==0.32", "--json"],
            0,
            _plain("d"),
            stdout_has='"id": "config.cpu_attention_head_size"',
        ),
        Case(
            "cpu-attn-head16-validate-vllm-hint",
            ["validate", "d", "--engine", "vllm==0.33"],
            0,
            _plain("d"),
            stdout_has="give it a head size of 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512",
        ),
        Case("cpu-attn-head16-validate-sglang", ["validate", "d"], 0, _plain("d"), stdout_has="0 warning(s)"),
        Case(
            "cpu-attn-head-from-hidden-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            0,
            _head_dim(_REMOVED),
            stdout_has="head size 16 (hidden_size 64 / num_attention_heads 4)",
        ),
        Case(
            "cpu-attn-head-null-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            0,
            _head_dim(None),
            stdout_has=warned,
        ),
        Case(
            "cpu-attn-head64-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            0,
            _plain("d", hidden_size=128, num_heads=2),
            stdout_has="0 warning(s)",
        ),
        Case(
            "cpu-attn-head-string-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            1,
            _head_dim("16"),
            stdout_has="FAILED: 1 error(s), 0 warning(s)",
        ),
        Case(
            "cpu-attn-head-huge-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            1,
            _head_dim(10**30),
            stdout_has="FAILED: 1 error(s), 0 warning(s)",
        ),
        Case(
            "cpu-attn-target-head16-validate-vllm-json",
            ["validate", "w", "--target", "t", "--engine", "vllm", "--json"],
            0,
            both(_plain("w", num_heads=2), _example_target("t")),
            stdout_has='"id": "target.cpu_attention_head_size"',
        ),
        Case(
            "cpu-attn-config-only-validate-vllm",
            ["validate", "d/config.json", "--engine", "vllm"],
            0,
            both(_plain("d"), _config_only("d")),
            stdout_has=warned,
        ),
    ]


def amx_cases() -> list[Case]:
    nope16 = _mla("d", hidden_size=64, num_heads=2)  # two heads of 32 at latent 256: qk_nope_head_dim 16
    v48 = _mla("d", hidden_size=96, num_heads=2, mla_latent=512)  # heads of 48: v_head_dim 48
    return [
        Case(
            "amx-mla-nope16-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            0,
            nope16,
            stdout_has='qk_nope_head_dim 16 fails at load ("RuntimeError: invalid weight input features 16")',
        ),
        Case(
            "amx-mla-nope16-validate-vllm032-json",
            ["validate", "d", "--engine", "vllm==0.32", "--json"],
            0,
            nope16,
            stdout_has='"id": "config.mla_amx_sizes"',
        ),
        Case(
            "amx-mla-nope16-validate-vllm-hint",
            ["validate", "d", "--engine", "vllm==0.33"],
            0,
            nope16,
            stdout_has="--attention-backend CPU_MLA",
        ),
        Case("amx-mla-nope16-validate-sglang", ["validate", "d"], 0, nope16, stdout_has="0 warning(s)"),
        Case(
            "amx-mla-v48-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            0,
            v48,
            stdout_has='v_head_dim 48 fails on the first request ("RuntimeError: tinygemm requires N to be 32x.")',
        ),
        Case(
            "amx-mla-nope16-config-only-validate-vllm",
            ["validate", "d/config.json", "--engine", "vllm"],
            0,
            both(nope16, _config_only("d")),
            stdout_has="invalid weight input features 16",
        ),
        Case(
            "amx-mla-v-head-dim-string-validate-vllm",
            ["validate", "d", "--engine", "vllm"],
            1,
            both(
                _mla("d", hidden_size=64, num_heads=2), edit_json("d/config.json", lambda c: {**c, "v_head_dim": "32"})
            ),
        ),
        Case(
            "amx-mla-served-pair-validate-vllm",
            ["validate", "v", "--engine", "vllm", "--target", "t"],
            0,
            _served,
            stdout_has="OK: no errors, 0 warning(s)",
        ),
    ] + cpu_attention_cases()
