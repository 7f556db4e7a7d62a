"""Hostile and ordinary runs on quantized drafters (issue 34): scales missing, misshapen, of the
wrong dtype, NaN/inf/zero; quantization_config that disagrees with the tensors, is huge, nested or of
an unknown method; block sizes that do not divide; lm_head scales a release drops; the inherit trap;
``ckpt quantize``'s every option; remap and export refusals. tests/corpus.py's run_case checks the
exit code, one error line (plus at most one hint) for exit 2, inputs unchanged, nothing left at OUT.

Each case builds its drafter from the base's bf16 drafter ``d`` with tests/quant_drafters.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from tests.corpus import Case, Setup, both, copy_in

OLD = ["--engine", "sglang==0.5.17"]
Q = "layers.0.self_attn.q_proj"


def _build(name: str, how: str, **kw: Any) -> Setup:
    """A quantized drafter ``name`` in the case dir, built by ``tests.quant_drafters.<how>`` from base/d."""

    def s(d: Path, base: Path) -> None:
        from tests import quant_drafters as qd

        getattr(qd, how)(d, base / "d", name, **kw)

    return s


def _mut(name: str, how: str, change: Callable[[dict[str, np.ndarray], dict[str, Any]], None], **kw: Any) -> Setup:
    """A quantized drafter built as ``_build`` does, then its tensors and config changed by ``change``."""

    def s(d: Path, base: Path) -> None:
        from tests import quant_drafters as qd

        tmp = getattr(qd, how)(d / ".build", base / "d", name, **kw)
        t, cfg = qd.arrays(tmp)
        change(t, cfg)
        qd.write_tensors(d / name, t, cfg)
        import shutil

        shutil.rmtree(d / ".build")

    return s


def _scale(value: float) -> Callable[[dict[str, np.ndarray], dict[str, Any]], None]:
    def c(t: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
        a = t[Q + ".weight_scale"].copy()
        a.reshape(-1)[3] = value
        t[Q + ".weight_scale"] = a

    return c


def _validate_cases() -> list[Case]:
    ct = _build("q", "ct")

    def drop(t: dict, cfg: dict) -> None:
        t.pop(Q + ".weight_scale")

    def half(t: dict, cfg: dict) -> None:
        t[Q + ".weight_scale"] = t[Q + ".weight_scale"][:32]

    def as_tensor(t: dict, cfg: dict) -> None:
        cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "tensor"

    def ignore_q(t: dict, cfg: dict) -> None:
        cfg["quantization_config"]["ignore"].append(Q)

    def int_scale(t: dict, cfg: dict) -> None:
        t[Q + ".weight_scale"] = np.ones(t[Q + ".weight_scale"].shape, np.int32)

    def f8_scale(t: dict, cfg: dict) -> None:
        t[Q + ".weight_scale"] = t[Q + ".weight_scale"].astype(ml_dtypes.float8_e4m3fn)

    def no_config(t: dict, cfg: dict) -> None:
        cfg.pop("quantization_config")

    def huge(t: dict, cfg: dict) -> None:
        g = cfg["quantization_config"]["config_groups"]["group_0"]
        cfg["quantization_config"]["config_groups"] = {f"g{i}": g for i in range(5000)}

    def method(t: dict, cfg: dict) -> None:
        cfg["quantization_config"]["quant_method"] = "gptq"

    def not_obj(t: dict, cfg: dict) -> None:
        cfg["quantization_config"] = [1, 2]

    def int4(t: dict, cfg: dict) -> None:
        cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4

    def orphan(t: dict, cfg: dict) -> None:
        t["norm.weight_scale"] = np.ones((1,), np.float32)

    def no_input_scale(t: dict, cfg: dict) -> None:
        t.pop(Q + ".input_scale")

    def bad_block(t: dict, cfg: dict) -> None:
        cfg["quantization_config"]["weight_block_size"] = [0, 128]

    v = ["validate", "q", *OLD]
    cases = [
        Case("quant-validate-ct-ok", v, 0, ct, stdout_has="OK"),
        Case("quant-validate-missing-scale", v, 1, _mut("q", "ct", drop), stdout_has="quant.missing_scale"),
        Case("quant-validate-wrong-shaped-scale", v, 1, _mut("q", "ct", half), stdout_has="quant.scale_shape"),
        Case(
            "quant-validate-config-says-tensor",
            v,
            1,
            _mut("q", "ct", as_tensor),
            stdout_has="quantization_config says tensor",
        ),
        Case("quant-validate-config-ignores-fp8", v, 1, _mut("q", "ct", ignore_q), stdout_has="quant.config_mismatch"),
        Case("quant-validate-scale-int32", v, 1, _mut("q", "ct", int_scale), stdout_has="quant.scale_dtype"),
        Case("quant-validate-scale-fp8", v, 1, _mut("q", "ct", f8_scale), stdout_has="quant.scale_dtype"),
        Case(
            "quant-validate-fp8-without-config", v, 1, _mut("q", "ct", no_config), stdout_has="no quantization_config"
        ),
        Case("quant-validate-config-huge", v, 1, _mut("q", "ct", huge), stdout_has="quant.config"),
        Case("quant-validate-config-unknown-method", v, 1, _mut("q", "ct", method), stdout_has="quant.config"),
        Case("quant-validate-config-not-object", v, 1, _mut("q", "ct", not_obj), stdout_has="not an object"),
        Case("quant-validate-config-int4", v, 1, _mut("q", "ct", int4), stdout_has="8-bit float"),
        Case("quant-validate-orphan-scale", v, 0, _mut("q", "ct", orphan), stdout_has="quant.orphan_scale"),
        Case("quant-validate-modelopt-ok", v, 0, _build("q", "modelopt"), stdout_has="OK"),
        Case(
            "quant-validate-modelopt-no-input-scale",
            v,
            1,
            _mut("q", "modelopt", no_input_scale),
            stdout_has="input_scale is missing",
        ),
        Case("quant-validate-block-ok", v, 0, _build("q", "block"), stdout_has="OK"),
        Case(
            "quant-validate-block-128-does-not-divide",
            v,
            1,
            _build("q", "block", size=(128, 128)),
            stdout_has="quant.block",
        ),
        Case("quant-validate-block-size-zero", v, 1, _mut("q", "block", bad_block), stdout_has="weight_block_size"),
        Case(
            "quant-validate-ct-block-weights-only",
            v,
            1,
            _build("q", "block", style="ct"),
            stdout_has="not block",
        ),
        Case(
            "quant-validate-lm-head-scale-dropped",
            v,
            1,
            _build("q", "ct", lm_head=True),
            stdout_has="quant.scale_dropped",
        ),
        Case(
            "quant-validate-lm-head-vllm-ok",
            ["validate", "q", "--engine", "vllm==0.32"],
            0,
            _build("q", "ct", lm_head=True),
        ),
        Case(
            "quant-validate-load-plan-scales",
            [*v, "--load-plan"],
            0,
            ct,
            stdout_has="weight_scale -> model.layers.0.self_attn.qkv_proj.weight_scale",
        ),
        Case(
            "quant-validate-inherit-trap",
            ["validate", "d", *OLD, "--engine-arg=--quantization=fp8"],
            0,
            copy_in("d"),
            stdout_has="quant.inherited",
        ),
        Case(
            "quant-validate-inherit-opt-out",
            [
                "validate",
                "d",
                *OLD,
                "--engine-arg=--quantization=fp8",
                "--engine-arg=--speculative-draft-model-quantization=unquant",
            ],
            0,
            copy_in("d"),
            stdout_has="OK",
        ),
        Case(
            "quant-validate-own-config-wins",
            ["validate", "q", *OLD, "--engine-arg", "--quantization=fp8", "--json"],
            0,
            ct,
            stdout_has="own quantization_config",
        ),
        Case("quant-validate-config-nested-deep", v, 2, both(ct, _deep_config("q"))),
        Case(
            "quant-validate-engine-arg-two-words",
            ["validate", "d", *OLD, "--engine-arg", "--quantization", "--engine-arg", "fp8"],
            0,
            copy_in("d"),
            stdout_has="quant.inherited",
        ),
        Case(
            "quant-validate-engine-arg-empty-value",
            ["validate", "d", *OLD, "--engine-arg=--quantization="],
            0,
            copy_in("d"),
            stdout_has="OK: no errors, 0 warning",
        ),
        Case(
            "quant-validate-engine-arg-huge",
            ["validate", "d", *OLD, "--engine-arg=--quantization=" + "x" * 200_000, "--json"],
            0,
            copy_in("d"),
            stdout_has="(" + "x" * 64 + ", inherited from --quantization " + "x" * 64 + ";",
        ),
    ]
    for name, val in (("nan", float("nan")), ("inf", float("inf")), ("zero", 0.0), ("negative", -1.0)):
        cases.append(
            Case(f"quant-validate-scale-{name}", v, 1, _mut("q", "ct", _scale(val)), stdout_has="quant.scale_values")
        )
    return cases


def _deep_config(name: str) -> Setup:
    def s(d: Path, base: Path) -> None:
        p = d / name / "config.json"
        cfg = json.loads(p.read_text())
        deep: Any = {}
        for _ in range(100):
            deep = {"x": deep}
        cfg["quantization_config"]["extra"] = deep
        p.write_text(json.dumps(cfg))

    return s


def _quantize_cases() -> list[Case]:
    d = copy_in("d")

    def nan_drafter(dd: Path, base: Path) -> None:
        from tests import quant_drafters as qd

        t, cfg = qd.arrays(base / "d")
        a = t[Q + ".weight"].copy()
        a[0, 0] = np.nan
        t[Q + ".weight"] = a
        qd.write_tensors(dd / "n", t, cfg)

    return [
        Case("quant-quantize-ok", ["quantize", "d", "-o", "out"], 0, d, out="out", stdout_has="7 weights quantized"),
        Case(
            "quant-quantize-per-tensor-json",
            ["quantize", "d", "-o", "out", "--scheme", "fp8-per-tensor", "--json"],
            0,
            d,
            out="out",
            stdout_has='"scheme": "fp8-per-tensor"',
        ),
        Case(
            "quant-quantize-lm-head-vllm",
            ["quantize", "d", "-o", "out", "--engine", "vllm", "--include", "lm_head", "--include", "fc"],
            0,
            d,
            out="out",
            stdout_has="9 weights quantized",
        ),
        Case(
            "quant-quantize-lm-head-sglang-refused",
            ["quantize", "d", "-o", "out", *OLD, "--include", "lm_head"],
            2,
            d,
            out="out",
            stderr_has="would not load lm_head quantized",
        ),
        Case("quant-quantize-fc-sglang-refused", ["quantize", "d", "-o", "out", "--include", "fc"], 2, d, out="out"),
        Case(
            "quant-quantize-bad-include", ["quantize", "d", "-o", "out", "--include", "embed_tokens"], 2, d, out="out"
        ),
        Case("quant-quantize-bad-scheme", ["quantize", "d", "-o", "out", "--scheme", "fp4"], 2, d, out="out"),
        Case(
            "quant-quantize-activations-dynamic",
            ["quantize", "d", "-o", "out", "--activations", "dynamic", "--engine", "vllm", "--json"],
            0,
            d,
            out="out",
            stdout_has='"engine_release": "vllm==0.33"',
        ),
        Case(
            "quant-quantize-bad-activations", ["quantize", "d", "-o", "out", "--activations", "static"], 2, d, out="out"
        ),
        Case(
            "quant-quantize-unknown-release",
            ["quantize", "d", "-o", "out", "--engine", "sglang==0.4.0"],
            2,
            d,
            out="out",
        ),
        Case(
            "quant-quantize-already-quantized",
            ["quantize", "q", "-o", "out"],
            2,
            _build("q", "ct"),
            out="out",
            stderr_has="already quantized",
        ),
        Case("quant-quantize-output-is-input", ["quantize", "d", "-o", "d"], 2, d),
        Case("quant-quantize-exists", ["quantize", "d", "-o", "t"], 2, both(d, copy_in("t"))),
        Case("quant-quantize-force", ["quantize", "d", "-o", "out", "--force"], 0, d, out="out"),
        Case(
            "quant-quantize-dry-run",
            ["quantize", "d", "-o", "out", "--dry-run"],
            0,
            d,
            stdout_has="quantize",
        ),
        Case("quant-quantize-nan-weight", ["quantize", "n", "-o", "out"], 2, nan_drafter, out="out", stderr_has="NaN"),
        Case("quant-quantize-missing", ["quantize", "nope", "-o", "out"], 2, out="out"),
    ]


def _write_cases() -> list[Case]:
    def perm(dd: Path, base: Path) -> None:
        from ckpttools.io.checkpoint import open_checkpoint
        from ckpttools.vocab.diff import save_mapping
        from ckpttools.vocab.mapping import VocabMapping

        with open_checkpoint(dd / "q") as ck:
            ids = np.asarray(VocabMapping.from_checkpoint(ck).ids)
        save_mapping(VocabMapping.from_ids(ids[np.random.default_rng(0).permutation(len(ids))], 1024), dd / "p.st")

    def drop(t: dict, cfg: dict) -> None:
        t.pop(Q + ".weight_scale")

    head = _build("q", "ct", lm_head=True)
    return [
        Case("quant-remap-ct-head-ok", ["remap", "q", "--to", "p.st", "-o", "out"], 0, both(head, perm), out="out"),
        Case(
            "quant-remap-block-refused",
            ["remap", "q", "--to", "p.st", "-o", "out"],
            2,
            both(_build("q", "block", head=True), perm),
            out="out",
            stderr_has="across blocks",
        ),
        Case(
            "quant-remap-fill-target-refused",
            ["remap", "q", "--to", "m.safetensors", "-o", "out", "--fill", "target", "--target", "t"],
            2,
            both(head, copy_in("m.safetensors"), copy_in("t")),
            out="out",
            stderr_has="invent",
        ),
        Case("quant-export-bf16-ok", ["export", "q", "-o", "out", "--dtype", "bf16"], 0, head, out="out"),
        Case(
            "quant-export-keep-ok",
            ["export", "q", "-o", "out", "--dtype", "keep", "--json"],
            0,
            _build("q", "ct"),
            out="out",
            stdout_has="kept in compressed-tensors",
        ),
        Case(
            "quant-export-keep-lm-head-refused",
            ["export", "q", "-o", "out", "--dtype", "keep"],
            2,
            head,
            out="out",
            stderr_has="unscaled",
        ),
        Case(
            "quant-export-trtllm-refused",
            ["export", "q", "-o", "out", "--format", "trtllm"],
            2,
            head,
            out="out",
            stderr_has="TensorRT-LLM",
        ),
        Case(
            "quant-export-dequant-missing-scale",
            ["export", "q", "-o", "out", "--dtype", "bf16"],
            2,
            _mut("q", "ct", drop),
            out="out",
            stderr_has="cannot dequantize",
        ),
        Case("quant-inspect-json", ["inspect", "q", "--json"], 0, head, stdout_has='"quantization"'),
        Case("quant-inspect-text", ["inspect", "q"], 0, _build("q", "modelopt"), stdout_has="quantization: modelopt"),
    ]


def quant_cases() -> list[Case]:
    return _validate_cases() + _quantize_cases() + _write_cases()
