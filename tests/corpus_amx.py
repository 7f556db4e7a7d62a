"""Corpus cases for MLA drafters whose sizes vLLM's CPU build refuses on a CPU with AMX (its AMX
MLA backend packs the attention's weights for AMX tiles: engines/claims.py ``cpu_mla.amx``).
validate warns under ``--engine vllm`` naming the RuntimeError the server would die with, says
nothing of it for SGLang or for sizes the backend takes, and exits 0 (a warning)."""

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
    ]
