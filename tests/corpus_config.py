"""Corpus cases for issue 20's config fields (hooked into tests/corpus.py's all_cases).

Every config field the code reads, out of range, of the wrong type, null, huge or nested: validate
says so (exit 1, a finding), export and remap refuse it (exit 2, one error line). And what users
met: the speculators flavor, inspect on a config file, linked shard directories, side files that
link outside, validate's advice, the draft KV pool behind an MLA target.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.corpus import Case, both, copy_in, edit_json, write

Setup = Callable[[Path, Path], None]


def _build(name: str, flavor: str = "sglang", **kw: Any) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_drafter

        build_drafter(d / name, flavor, **kw)

    return s


def _deepseek_target(name: str, **kw: Any) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_deepseek_target

        build_deepseek_target(d / name, **kw)

    return s


def _target(name: str, **kw: Any) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_target

        build_target(d / name, **kw)

    return s


def _setk(**kv: Any) -> Callable[[dict], None]:
    def c(o: dict) -> None:
        for k, v in kv.items():
            if v is _DEL:
                o.pop(k, None)
            else:
                o[k] = v

    return c


_DEL = object()


def _nested(depth: int) -> Any:
    v: Any = 512
    for _ in range(depth):
        v = {"v": v}
    return v


def _three(prefix: str, src: str, setup: Setup, vcode: int = 1, vargs: tuple[str, ...] = ()) -> list[Case]:
    """validate (``vcode``), export and remap (2) on one damaged drafter ``src``."""
    return [
        Case(f"{prefix}-validate", ["validate", src, *vargs], vcode, setup),
        Case(f"{prefix}-export", ["export", src, "-o", "out"], 2, setup, out="out"),
        Case(
            f"{prefix}-remap",
            ["remap", src, "--to", "m.safetensors", "-o", "out"],
            2,
            both(setup, copy_in("m.safetensors")),
            out="out",
        ),
    ]


def _mla_cases() -> list[Case]:
    bad = {
        "kv-lora-string": {"kv_lora_rank": "256"},
        "kv-lora-zero": {"kv_lora_rank": 0},
        "kv-lora-huge": {"kv_lora_rank": 10**12},
        "kv-lora-null": {"kv_lora_rank": None},
        "kv-lora-nested": {"kv_lora_rank": _nested(3)},
        "kv-lora-bool": {"kv_lora_rank": True},
        "q-lora-zero": {"q_lora_rank": 0},
        "q-lora-list": {"q_lora_rank": [32]},
        "rope-odd": {"qk_rope_head_dim": 33},
        "rope-float": {"qk_rope_head_dim": 32.0},
        "nope-negative": {"qk_nope_head_dim": -8},
        "v-head-huge": {"v_head_dim": 1 << 40},
    }
    out: list[Case] = []
    for name, change in bad.items():
        setup = both(_build("mla", "mla"), edit_json("mla/config.json", _setk(**change)))
        out += _three(f"cfg-mla-{name}", "mla", setup)
    null_q = both(_build("mla", "mla"), edit_json("mla/config.json", _setk(q_lora_rank=None)))
    out += [
        Case("cfg-mla-q-lora-null-sglang", ["validate", "mla"], 1, null_q, stdout_has="requires q_lora_rank"),
        Case(
            "cfg-mla-two-layers",
            ["validate", "mla"],
            1,
            both(_build("mla", "mla"), edit_json("mla/config.json", _setk(num_hidden_layers=2))),
            stdout_has="only supports 1 layer",
        ),
        Case("cfg-mla-ok-validate", ["validate", "mla"], 0, _build("mla", "mla")),
        Case("cfg-mla-ok-export", ["export", "mla", "-o", "out"], 0, _build("mla", "mla"), out="out"),
    ]
    return out


def _eagle31_cases() -> list[Case]:
    def cfg(**kv: Any) -> Setup:
        return both(copy_in("d", "dd"), edit_json("dd/config.json", _setk(**kv)))

    def fcn(**kv: Any) -> Setup:
        return both(_build("fn", fc_norm=True), edit_json("fn/config.json", _setk(**kv)))

    out: list[Case] = []
    for name, setup, src in (
        ("num-aux-4", cfg(num_aux_hidden_states=4), "dd"),
        ("num-aux-string", cfg(num_aux_hidden_states="3"), "dd"),
        ("num-aux-zero", cfg(num_aux_hidden_states=0), "dd"),
        ("num-aux-huge", cfg(num_aux_hidden_states=10**9), "dd"),
        ("num-aux-null-nested", cfg(num_aux_hidden_states={"n": 3}), "dd"),
        ("fc-norm-string", cfg(fc_norm="false"), "dd"),
        ("fc-norm-no-weights", cfg(fc_norm=True), "dd"),
        ("use-aux-norm-no-weights", cfg(use_aux_norm=True), "dd"),
        ("norm-before-fc-number", cfg(norm_before_fc=1), "dd"),
        ("fc-norm-weights-no-flag", fcn(fc_norm=_DEL), "fn"),
        ("fc-norm-weights-flag-false", fcn(fc_norm=False), "fn"),
    ):
        out += _three(f"cfg-e31-{name}", src, setup)
    out += [
        Case("cfg-e31-ok-validate", ["validate", "fn"], 0, _build("fn", fc_norm=True, norm_before_fc=True)),
        Case(
            "cfg-e31-ok-export",
            ["export", "fn", "-o", "out"],
            0,
            _build("fn", fc_norm=True, norm_before_fc=True),
            out="out",
        ),
    ]
    return out


def _subconfig_cases() -> list[Case]:
    def cfg(**kv: Any) -> Setup:
        return both(copy_in("d", "dd"), edit_json("dd/config.json", _setk(**kv)))

    def spec(**kv: Any) -> Setup:
        return both(_build("sp", "speculators"), edit_json("sp/config.json", _setk(**kv)))

    out: list[Case] = []
    for name, setup in (
        ("eagle-config-list", cfg(eagle_config=[1, 3, 5])),
        ("eagle-config-string", cfg(eagle_config="ids")),
        ("eagle-config-null", cfg(eagle_config=None)),
        ("layers-2", cfg(num_hidden_layers=2)),
        ("layers-4096", cfg(num_hidden_layers=4096)),
    ):
        out += _three(f"cfg-sub-{name}", "dd", setup)
    for name, setup in (
        ("tlc-string", spec(transformer_layer_config="llama")),
        ("tlc-null", spec(transformer_layer_config=None)),
    ):
        out += _three(f"cfg-sub-{name}", "sp", setup, vargs=("--engine", "vllm"))
    deep = both(copy_in("d", "dd"), edit_json("dd/config.json", _setk(eagle_config=_nested(100))))
    out += [
        Case("cfg-sub-nested-100-validate", ["validate", "dd"], 2, deep),
        Case("cfg-sub-nested-100-export", ["export", "dd", "-o", "out"], 2, deep, out="out"),
        Case(
            "cfg-sub-sharded-layers-3-export",
            ["export", "sh", "-o", "out"],
            2,
            both(copy_in("sh"), edit_json("sh/config.json", _setk(num_hidden_layers=3))),
            out="out",
        ),
    ]
    return out


def _speculators_cases() -> list[Case]:
    sp = _build("sp", "speculators")
    return [
        Case("cfg-spec-validate-vllm", ["validate", "sp", "--engine", "vllm"], 0, sp),
        Case("cfg-spec-validate-sglang", ["validate", "sp"], 1, sp, stdout_has="ERRORS (1)"),
        Case(
            "cfg-spec-example-validate-vllm",
            ["validate", "ex", "--engine", "vllm"],
            0,
            _build("ex", "speculators"),
        ),
        Case("cfg-spec-export", ["export", "sp", "-o", "out"], 0, sp, out="out"),
    ]


def _inspect_cases() -> list[Case]:
    def as_file(name: str) -> Setup:
        return both(copy_in("d"), lambda d, b: (d / name).write_bytes((d / "d" / "config.json").read_bytes()))

    return [
        Case("cfg-inspect-config-json", ["inspect", "d/config.json"], 0, copy_in("d"), stdout_has="a config file"),
        Case("cfg-inspect-named-config", ["inspect", "X.config.json"], 0, as_file("X.config.json")),
        Case(
            "cfg-inspect-named-config-json",
            ["inspect", "X.config.json", "--json"],
            0,
            as_file("X.config.json"),
            stdout_has='"config_file": true',
        ),
        Case("cfg-inspect-target-config", ["inspect", "t/config.json"], 0, copy_in("t"), stdout_has="kind: target"),
        Case("cfg-inspect-mla-config", ["inspect", "mla/config.json"], 0, _build("mla", "mla")),
        Case("cfg-inspect-spec-config", ["inspect", "sp/config.json"], 0, _build("sp", "speculators")),
        Case(
            "cfg-inspect-bad-field-config",
            ["inspect", "dd/config.json"],
            0,
            both(copy_in("d", "dd"), edit_json("dd/config.json", _setk(kv_lora_rank="x"))),
            stdout_has="ignored",
        ),
        Case("cfg-inspect-other-json", ["inspect", "o.json"], 2, write("o.json", '{"a": 1}')),
        Case("cfg-inspect-list-json", ["inspect", "o.config.json"], 2, write("o.config.json", "[1, 2]")),
        Case("cfg-inspect-empty-json", ["inspect", "o.config.json"], 2, write("o.config.json", "")),
        Case("cfg-inspect-not-utf8-json", ["inspect", "o.config.json"], 2, write("o.config.json", b'{"a": "\xff"}')),
        Case(
            "cfg-inspect-deep-json",
            ["inspect", "o.config.json"],
            2,
            write("o.config.json", '{"model_type": ' + "[" * 200 + "]" * 200 + "}"),
        ),
    ]


def _link_all(src: str, dst: str) -> Setup:
    """``dst``: a directory of links to every file of ``src`` (another checkpoint's shards)."""

    def s(d: Path, base: Path) -> None:
        (d / dst).mkdir()
        for p in sorted((d / src).iterdir()):
            (d / dst / p.name).symlink_to(os.path.relpath(p, d / dst))

    return s


def _link_side(name: str) -> Setup:
    def s(d: Path, base: Path) -> None:
        (d / "secret.txt").write_text("not the checkpoint's")
        (d / "d" / name).symlink_to("../secret.txt")

    return s


def _link_cases() -> list[Case]:
    linked = both(copy_in("sh", "store/sh"), _link_all("store/sh", "ln"))

    def escaping(o: dict) -> None:
        o["weight_map"][next(iter(o["weight_map"]))] = "../store/sh/model-00001-of-00006.safetensors"

    esc = both(
        linked,
        lambda d, b: (d / "ln" / "model.safetensors.index.json").unlink(),
        _copy_index,
        edit_json("ln/model.safetensors.index.json", escaping),
    )
    side = both(copy_in("d"), _link_side("tokenizer_config.json"))
    pickles = both(copy_in("d"), *(write(f"d/{n}", b"\x80\x02}q\x00.") for n in ("training_args.bin", "opt.pt")))
    return [
        Case("cfg-link-dir-inspect", ["inspect", "ln", "--no-tensors"], 0, linked),
        Case("cfg-link-dir-validate", ["validate", "ln"], 0, linked),
        Case("cfg-link-dir-export", ["export", "ln", "-o", "out"], 0, linked, out="out"),
        Case(
            "cfg-link-dir-remap",
            ["remap", "ln", "--to", "m.safetensors", "-o", "out"],
            0,
            both(linked, copy_in("m.safetensors")),
            out="out",
        ),
        Case("cfg-link-index-escapes-inspect", ["inspect", "ln"], 2, esc),
        Case("cfg-link-index-escapes-export", ["export", "ln", "-o", "out"], 2, esc, out="out"),
        Case("cfg-link-side-export", ["export", "d", "-o", "out"], 0, side, out="out"),
        Case(
            "cfg-link-side-remap",
            ["remap", "d", "--to", "m.safetensors", "-o", "out"],
            0,
            both(side, copy_in("m.safetensors")),
            out="out",
        ),
        Case("cfg-link-side-fix", ["validate", "d", "--fix", "-o", "out"], 0, side, out="out"),
        Case("cfg-pickles-beside-export", ["export", "d", "-o", "out"], 0, pickles, out="out"),
    ]


def _copy_index(d: Path, base: Path) -> None:
    src = d / "store" / "sh" / "model.safetensors.index.json"
    (d / "ln" / "model.safetensors.index.json").write_bytes(src.read_bytes())


def _advice_cases() -> list[Case]:
    short = both(copy_in("d", "dd"), copy_in("t"), edit_json("dd/config.json", _setk(max_position_embeddings=2048)))
    kv = both(
        _build("big", hidden_size=512, num_heads=32, num_kv_heads=32, intermediate_size=256, aux_layer_ids=(0, 1, 2)),
        _deepseek_target("mt", hidden_size=512, num_layers=4),
    )
    mla_ctx = both(
        _build("mla", "mla"),
        edit_json("mla/config.json", _setk(model_type="kimi_k2", max_position_embeddings=_DEL)),
        _target("t8", max_position_embeddings=8192),
    )
    return [
        Case(
            "cfg-advice-aux-out-of-reach",
            ["validate", "dd", "--target", "t"],
            1,
            both(_build("dd", aux_layer_ids=(1, 3, 9)), copy_in("t")),
            stdout_has="captured 2 of 3 aux hidden states",
        ),
        Case(
            "cfg-advice-context-override",
            ["validate", "dd", "--target", "t"],
            1,
            short,
            stdout_has="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        ),
        Case(
            "cfg-advice-context-vllm",
            ["validate", "dd", "--target", "t", "--engine", "vllm"],
            0,
            short,
            stdout_has="raises the drafter's max_position_embeddings",
        ),
        Case(
            "cfg-advice-export-not-fix",
            ["validate", "e", "--target", "t"],
            1,
            both(_build("e", "eagle"), copy_in("t")),
            stdout_has="(ckpt export does it)",
        ),
        Case(
            "cfg-advice-no-ids-for-llama-layers",
            ["validate", "dd", "--target", "mt"],
            0,
            both(_build("dd", aux_layer_ids=(0, 1, 2)), _deepseek_target("mt")),
            stdout_has="no ids make SGLang capture",
        ),
        Case(
            "cfg-advice-vllm-two-layers-export",
            ["validate", "vl"],
            1,
            _build("vl", "vllm", num_layers=2),
            stdout_has="ckpt export moves the norms",
        ),
        Case("cfg-advice-mla-default-context", ["validate", "mla", "--target", "t8"], 1, mla_ctx, stdout_has="4,096"),
        Case("cfg-kv-llama-behind-mla", ["validate", "big", "--target", "mt"], 0, kv, stdout_has="--max-total-tokens"),
        Case(
            "cfg-kv-llama-behind-mla-json",
            ["validate", "big", "--target", "mt", "--json"],
            0,
            kv,
            stdout_has="target.draft_kv_memory",
        ),
    ]


def config_field_cases() -> list[Case]:
    return (
        _mla_cases()
        + _eagle31_cases()
        + _subconfig_cases()
        + _speculators_cases()
        + _inspect_cases()
        + _link_cases()
        + _advice_cases()
    )
