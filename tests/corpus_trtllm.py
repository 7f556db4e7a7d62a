"""Hostile and ordinary runs of ``export --format trtllm``: refused where TensorRT-LLM's table says its
class cannot hold the drafter, where the captured layers cannot be said, where the output is aimed at
an input or exists; written (weights, config, fragment) where it can. tests/corpus.py's run_case
checks exit codes, one error line, inputs unchanged and nothing left at OUT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.corpus import Case, Setup, both, copy_in, damaged_safetensors, write

FRAGMENT = "trtllm-speculative-config.yaml"
TRT = ["--format", "trtllm"]


def _drafter(name: str, flavor: str = "sglang", **kw: Any) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_drafter

        build_drafter(d / name, flavor, **kw)

    return s


def _written() -> list[Case]:
    d, dt = copy_in("d"), both(copy_in("d"), copy_in("t"))
    return [
        Case(
            "trtllm-ok-target",
            ["export", "d", "-o", "out", *TRT, "--target", "t"],
            0,
            dt,
            out="out",
            stdout_has=FRAGMENT,
        ),
        Case(
            "trtllm-ok-json",
            ["export", "d", "-o", "out", *TRT, "--json", "--quiet"],
            0,
            d,
            out="out",
            stdout_has='"format": "trtllm"',
        ),
        Case(
            "trtllm-ok-two-layers-vllm",
            ["export", "v", "-o", "out", *TRT, "--target", "t"],
            0,
            both(_drafter("v", "vllm", num_layers=2, aux_layer_ids=(2, 4, 6)), copy_in("t")),
            out="out",
            stdout_has="eagle3_layers_to_capture [1, 3, 5]",
        ),
        Case(
            "trtllm-ok-sharded",
            ["export", "sh", "-o", "out", *TRT, "--max-shard-size", "60KB"],
            0,
            copy_in("sh"),
            out="out",
        ),
        Case(
            "trtllm-ok-source-has-a-fragment",
            ["export", "d", "-o", "out", *TRT],
            0,
            both(d, write(f"d/{FRAGMENT}", "speculative_config: {}\n")),
            out="out",
        ),
        Case(
            "trtllm-ok-out-exists-force",
            ["export", "d", "-o", "o", *TRT, "--force"],
            0,
            both(d, write("o/keep.txt", "mine")),
            out="o",
        ),
    ]


def _refused() -> list[Case]:
    d, dt = copy_in("d"), both(copy_in("d"), copy_in("t"))
    return [
        Case(
            "trtllm-mla",
            ["export", "m", "-o", "out", *TRT],
            2,
            _drafter("m", "mla"),
            out="out",
            stderr_has="an MLA drafter",
        ),
        Case(
            "trtllm-mla-with-target",
            ["export", "m", "-o", "out", *TRT, "--target", "t"],
            2,
            both(_drafter("m", "mla"), copy_in("t")),
            out="out",
            stderr_has="DeepseekV3WeightLoader",
        ),
        Case(
            "trtllm-qwen3",
            ["export", "q", "-o", "out", *TRT],
            2,
            _drafter("q", qk_norm=True),
            out="out",
            stderr_has="q_norm/k_norm",
        ),
        Case(
            "trtllm-boundary-zero",
            ["export", "v", "-o", "out", *TRT, "--target", "t"],
            2,
            both(_drafter("v", "vllm", aux_layer_ids=(0, 2, 4)), copy_in("t")),
            out="out",
            stderr_has="cannot capture the inputs of layers [0, 2, 4]",
        ),
        Case(
            "trtllm-past-the-last-layer",
            ["export", "p", "-o", "out", *TRT, "--target", "t"],
            2,
            both(_drafter("p", aux_layer_ids=(1, 3, 8)), copy_in("t")),
            out="out",
        ),
        Case(
            "trtllm-rejected-no-embedding",
            ["export", "h", "-o", "out", *TRT],
            1,
            _drafter("h", target_hidden_size=96),
            out="out",
            stdout_has="REJECTED",
        ),
        Case(
            "trtllm-fc-for-other-aux",
            ["export", "f", "-o", "out", *TRT, "--target", "t"],
            1,
            both(_drafter("f", aux_layer_ids=(1, 2, 4, 6)), copy_in("t")),
            out="out",
            stdout_has="capture_count",
        ),
        Case("trtllm-out-is-input", ["export", "d", "-o", "d", *TRT, "--force"], 2, d),
        Case("trtllm-out-inside-input", ["export", "d", "-o", "d/sub", *TRT, "--force"], 2, d),
        Case("trtllm-out-is-target", ["export", "d", "--target", "t", "-o", "t", *TRT, "--force"], 2, dt),
        Case(
            "trtllm-out-link-to-input",
            ["export", "d", "-o", "l", *TRT, "--force"],
            2,
            both(d, lambda c, b: (c / "l").symlink_to("d")),
        ),
        Case("trtllm-cwd-is-input", ["export", ".", "-o", "..", *TRT, "--force"], 2, d, cwd="d"),
        Case(
            "trtllm-out-exists",
            ["export", "d", "-o", "o", *TRT],
            2,
            both(d, write("o/keep.txt", "mine")),
            stderr_has="already exists",
        ),
        Case("trtllm-format-upper", ["export", "d", "-o", "out", "--format", "TRTLLM"], 2, d, out="out"),
        Case(
            "trtllm-st-short",
            ["export", "dd", "-o", "out", *TRT],
            2,
            both(copy_in("d", "dd"), write("dd/model.safetensors", damaged_safetensors()["short"])),
            out="out",
        ),
    ]


def _dry_runs() -> list[Case]:
    """No ``out=``: OUT is part of the tree run_case checks, so a dry run that wrote it fails."""
    d = copy_in("d")
    return [
        Case(
            "trtllm-dry-run",
            ["export", "d", "-o", "out", *TRT, "--dry-run"],
            0,
            d,
            stdout_has=f"side files made: {FRAGMENT}",
        ),
        Case(
            "trtllm-dry-run-json",
            ["export", "d", "-o", "out", *TRT, "--dry-run", "--json"],
            0,
            d,
            stdout_has='"written": false',
        ),
        Case("trtllm-dry-run-mla", ["export", "m", "-o", "out", *TRT, "--dry-run"], 2, _drafter("m", "mla")),
        Case("trtllm-dry-run-out-is-input", ["export", "d", "-o", "d", *TRT, "--force", "--dry-run"], 2, d),
        Case(
            "trtllm-dry-run-out-exists",
            ["export", "d", "-o", "o", *TRT, "--dry-run"],
            2,
            both(d, write("o/keep.txt", "mine")),
            stderr_has="already exists",
        ),
    ]


def trtllm_cases() -> list[Case]:
    return _written() + _refused() + _dry_runs()
