"""Quantized drafters: read, checked, remapped, exported and written (issue 34), on small FP8
drafters built in each layout (tests/quant_drafters.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_target
from ckpttools.errors import CheckpointFormatError, ConfigError, MappingError
from ckpttools.formats.quant import read_scheme
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.ops.export import export
from ckpttools.ops.inspect import inspect
from ckpttools.ops.quantize import plan_quantize, quantize
from ckpttools.ops.remap import remap
from ckpttools.ops.validate import validate
from ckpttools.schemas import load_schema
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

from . import quant_drafters as qd

OLD = "sglang==0.5.17"
VL = "vllm==0.32"


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quant")
    src = qd.bf16(root)
    return {
        "root": root,
        "bf16": src,
        "ct": qd.ct(root, src),
        "ct_tensor": qd.ct(root, src, "ct-tensor", "fp8-per-tensor"),
        "ct_head": qd.ct(root, src, "ct-head", lm_head=True),
        "ct_head_tensor": qd.ct(root, src, "ct-head-tensor", "fp8-per-tensor", lm_head=True),
        "modelopt": qd.modelopt(root, src),
        "block": qd.block(root, src),
        "block_head": qd.block(root, src, "block-head", head=True),
    }


def scheme(path: Path):
    with open_checkpoint(path) as ck:
        return read_scheme(ck.config, {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()})


@pytest.mark.parametrize(
    "name, fmt, gran",
    [
        ("ct", "compressed-tensors", ["channel"]),
        ("ct_tensor", "compressed-tensors", ["tensor"]),
        ("modelopt", "modelopt", ["tensor"]),
        ("block", "fp8-block", ["block"]),
    ],
)
def test_each_format_is_read_with_its_granularity(w, name, fmt, gran) -> None:
    s = scheme(w[name])
    assert (s.format, s.granularities, s.problems) == (fmt, gran, [])
    assert len(s.quantized) == 7 and all(q.scale for q in s.quantized)
    assert s.bytes_on_disk < s.bytes_bf16


def test_inspect_names_scheme_scales_and_size(w) -> None:
    r = inspect(w["ct_head"])
    d = r.to_dict()
    jsonschema.validate(d, load_schema("inspect-report.schema.json"))
    q = d["quantization"]
    assert q["format"] == "compressed-tensors" and q["granularity"] == ["channel"]
    assert {x["weight"] for x in q["quantized"]} >= {"lm_head.weight", "layers.0.mlp.up_proj.weight"}
    assert q["unquantized"] == ["fc.weight"]
    out = CliRunner().invoke(cli, ["inspect", str(w["ct_head"]), "--no-tensors"]).output
    assert "quantization: compressed-tensors ($.quantization_config); per channel" in out
    assert "size on disk" in out and "in bf16" in out
    assert "quantization" not in inspect(w["bf16"]).to_dict()


def test_ckpt_quantize_output_validates_clean_on_sglang_with_scales_loaded(w) -> None:
    r = validate(w["ct"], engine=OLD, load_plan=True)
    assert r.ok and not [f for f in r.findings if f.severity == "warning"], r.findings
    fates = {t["name"]: t for t in r.load_plan["tensors"]}
    s = fates["layers.0.self_attn.k_proj.weight_scale"]
    assert (s["fate"], s["param"], s["shard"]) == ("loaded", "model.layers.0.self_attn.qkv_proj.weight_scale", "k")


def test_no_false_drops_warning_and_the_real_lm_head_loss_is_an_error(w) -> None:
    """Issue 34: validate said SGLang "drops" every weight_scale. It loads the layers' scales; it
    does drop lm_head's under compressed-tensors (ParallelLMHead gets no method), which per channel
    scales every logit by another factor."""
    r = validate(w["ct_head"], engine=OLD)
    assert not [f for f in r.findings if f.id == "tensors.dropped"]
    assert [f.location for f in r.findings if f.id == "quant.scale_dropped"] == ["lm_head.weight_scale"]
    assert [f.location for f in r.errors if f.id == "tensors.dtype"] == ["lm_head.weight"]
    per_tensor = validate(w["ct_head_tensor"], engine=OLD)
    assert [f.severity for f in per_tensor.findings if f.id == "quant.scale_dropped"] == ["warning"]
    assert validate(w["ct_head"], engine=VL).ok  # vLLM quantizes lm_head under compressed-tensors


def test_modelopt_and_block_drafters_validate(w) -> None:
    for name in ("modelopt", "block"):
        r = validate(w[name], engine=OLD, load_plan=True)
        assert r.ok, (name, [f for f in r.errors])
        dropped = [t for t in r.load_plan["tensors"] if t["fate"] == "dropped" and t["name"] != "t2d"]
        assert not dropped, dropped
    r = validate(w["block"], engine=OLD)
    assert any(f.id == "quant.engine" and "fp8-block" in f.message for f in r.findings)


def test_the_inherit_trap_is_said_and_the_opt_out_silences_it(w) -> None:
    trap = validate(w["bf16"], engine=OLD, engine_args=("--quantization=fp8",))
    found = [f for f in trap.findings if f.id == "quant.inherited"]
    assert found and found[0].severity == "warning" and "server_args.py:4078" in found[0].message
    assert "--speculative-draft-model-quantization unquant" in (found[0].hint or "")
    opted = validate(
        w["bf16"], engine=OLD, engine_args=("--quantization", "fp8", "--speculative-draft-model-quantization=unquant")
    )
    assert not [f for f in opted.findings if f.id == "quant.inherited"]
    own = validate(w["ct"], engine=OLD, engine_args=("--quantization=fp8",))
    assert [f.severity for f in own.findings if f.id == "quant.inherited"] == ["info"]
    assert not [
        f
        for f in validate(w["bf16"], engine=VL, engine_args=("--quantization=fp8",)).findings
        if f.id == "quant.inherited"
    ]


def _rows(path: Path) -> dict[int, tuple[bytes, bytes]]:
    """target token -> (its lm_head row's bytes, its scale's bytes)."""
    with open_checkpoint(path) as ck:
        m = VocabMapping.from_checkpoint(ck)
        head, sc = ck.read("lm_head.weight"), ck.read("lm_head.weight_scale")
        return {
            int(t): (head[i].tobytes(), sc[i].tobytes() if sc.shape[0] > 1 else sc.tobytes())
            for i, t in enumerate(m.ids)
        }


def _perm_mapping(path: Path, out: Path, seed: int = 0) -> Path:
    with open_checkpoint(path) as ck:
        m = VocabMapping.from_checkpoint(ck)
    ids = np.asarray(m.ids)[np.random.default_rng(seed).permutation(len(m.ids))]
    save_mapping(VocabMapping.from_ids(ids, 1024), out)
    return out


def test_per_channel_scales_move_with_their_rows_and_the_round_trip_is_byte_identical(w, tmp_path) -> None:
    src = w["ct_head"]
    perm = _perm_mapping(src, tmp_path / "perm.st")
    remap(src, tmp_path / "m2", to=perm)
    assert _rows(tmp_path / "m2") == _rows(src)  # every token keeps its row and its scale
    with open_checkpoint(tmp_path / "m2") as ck:
        assert ck.read("lm_head.weight_scale").tobytes() != qd.arrays(src)[0]["lm_head.weight_scale"].tobytes()
    remap(tmp_path / "m2", tmp_path / "m1", to=src)
    a, b = qd.arrays(src)[0], qd.arrays(tmp_path / "m1")[0]
    assert list(a) == list(b) and all(a[n].tobytes() == b[n].tobytes() for n in a)
    assert (src / "model.safetensors").read_bytes() == (tmp_path / "m1" / "model.safetensors").read_bytes()


def test_a_per_tensor_scale_is_kept_and_new_rows_stay_in_range(w, tmp_path) -> None:
    src = w["ct_head_tensor"]
    with open_checkpoint(src) as ck:
        ids = np.asarray(VocabMapping.from_checkpoint(ck).ids)
    new = np.concatenate([ids[:200], np.arange(1000, 1024)])[:224]
    save_mapping(VocabMapping.from_ids(np.sort(new), 1024), tmp_path / "m.st")
    remap(src, tmp_path / "mean", to=tmp_path / "m.st", fill="mean")
    a, b = qd.arrays(src)[0], qd.arrays(tmp_path / "mean")[0]
    assert a["lm_head.weight_scale"].tobytes() == b["lm_head.weight_scale"].tobytes()
    v = b["lm_head.weight"].astype(np.float32)
    assert np.isfinite(v).all() and np.abs(v).max() <= 448


def test_per_channel_mean_fill_gets_its_own_scale(w, tmp_path) -> None:
    src = w["ct_head"]
    with open_checkpoint(src) as ck:
        ids = np.asarray(VocabMapping.from_checkpoint(ck).ids)
    new = np.sort(np.concatenate([ids[:250], np.arange(1018, 1024)]))
    save_mapping(VocabMapping.from_ids(new, 1024), tmp_path / "m.st")
    remap(src, tmp_path / "out", to=tmp_path / "m.st", fill="mean")
    with open_checkpoint(tmp_path / "out") as ck:
        m = VocabMapping.from_checkpoint(ck)
        filled = [i for i, t in enumerate(m.ids) if t >= 1018]
        s = ck.read("lm_head.weight_scale").astype(np.float32)[filled]
        q = ck.read("lm_head.weight").astype(np.float32)[filled]
    assert (s > 0).all() and np.isfinite(q).all() and np.abs(q).max() <= 448 and np.abs(q).max() > 100
    target = build_target(tmp_path / "target")
    with pytest.raises(MappingError, match="invent"):
        remap(src, tmp_path / "t", to=tmp_path / "m.st", fill="target", target=target)


def test_block_heads_move_by_whole_blocks_or_are_refused(w, tmp_path) -> None:
    src = w["block_head"]  # lm_head 256 rows in 32-row blocks
    with open_checkpoint(src) as ck:
        ids = np.asarray(VocabMapping.from_checkpoint(ck).ids)
    blocks = np.random.default_rng(0).permutation(8)
    save_mapping(VocabMapping.from_ids(ids.reshape(8, 32)[blocks].ravel(), 1024), tmp_path / "b.st")
    remap(src, tmp_path / "moved", to=tmp_path / "b.st")
    a, b = qd.arrays(src)[0], qd.arrays(tmp_path / "moved")[0]
    assert b["lm_head.weight_scale_inv"].tobytes() == a["lm_head.weight_scale_inv"][blocks].tobytes()
    with pytest.raises(MappingError, match="across blocks"):
        remap(src, tmp_path / "no", to=_perm_mapping(src, tmp_path / "p.st"))
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("name", ["ct", "ct_tensor", "modelopt", "block_head"])
def test_dequantized_export_equals_numpy_bit_for_bit(w, tmp_path, name) -> None:
    src = w[name]
    export(src, tmp_path / "bf16", dtype="bf16")
    t, _ = qd.arrays(src)
    out, cfg = qd.arrays(tmp_path / "bf16")
    assert "quantization_config" not in cfg and not [n for n in out if "scale" in n]
    s = scheme(src)
    for q in s.quantized:
        v, sc = t[q.weight].astype(np.float32), t[q.scale].astype(np.float32)
        if q.granularity == "block":
            sc = np.repeat(np.repeat(sc, 32, 0), 32, 1)[: v.shape[0], : v.shape[1]]
        want = v * (sc.reshape(()) if sc.size == 1 else sc if sc.ndim == 2 and sc.shape[1] != 1 else sc.reshape(-1, 1))
        assert out[q.weight].dtype == ml_dtypes.bfloat16
        assert out[q.weight].tobytes() == want.astype(ml_dtypes.bfloat16).tobytes(), q.weight


def test_fp8_is_kept_for_a_release_that_loads_it_and_refused_otherwise(w, tmp_path) -> None:
    r = export(w["ct"], tmp_path / "kept", dtype="keep")
    a, b = qd.arrays(w["ct"])[0], qd.arrays(tmp_path / "kept")[0]
    assert all(a[n].tobytes() == b[n].tobytes() for n in a if n.endswith(("_scale", "proj.weight")))
    assert any("kept in compressed-tensors" in n for n in r.notes)
    with pytest.raises(ConfigError, match="lm_head.weight unscaled"):
        export(w["ct_head"], tmp_path / "x", dtype="keep")
    with pytest.raises(ConfigError, match="TensorRT-LLM"):
        export(w["ct"], tmp_path / "y", format="trtllm")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_quantize_writes_through_the_plan_and_refuses_what_the_release_drops(w, tmp_path) -> None:
    plan = plan_quantize(w["bf16"], tmp_path / "p", scheme="fp8-per-tensor")
    assert plan.operation == "quantize" and not (tmp_path / "p").exists()
    qc = plan.config["quantization_config"]
    assert qc["config_groups"]["group_0"]["weights"]["strategy"] == "tensor" and qc["ignore"] == [
        "lm_head",
        "fc",
        "model.fc",
    ]
    with pytest.raises(ConfigError, match="unquantized embedding method"):
        quantize(w["bf16"], tmp_path / "h", engine=OLD, include=("lm_head",))
    with pytest.raises(ConfigError, match="torch.nn.Linear"):
        quantize(w["bf16"], tmp_path / "f", engine=OLD, include=("fc",))
    with pytest.raises(CheckpointFormatError, match="already quantized"):
        quantize(w["ct"], tmp_path / "again")
    rep = quantize(w["bf16"], tmp_path / "q")
    assert rep.bytes_after < rep.bytes_before and rep.max_abs_error > 0 and rep.validation["ok"]


def test_quantize_cli_json_and_dry_run(w, tmp_path) -> None:
    r = CliRunner().invoke(cli, ["quantize", str(w["bf16"]), "-o", str(tmp_path / "o"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["scheme"] == "fp8-per-channel"
    d = CliRunner().invoke(cli, ["quantize", str(w["bf16"]), "-o", str(tmp_path / "d"), "--dry-run", "--json"])
    assert d.exit_code == 0 and json.loads(d.output)["operation"] == "quantize" and not (tmp_path / "d").exists()
    jsonschema.validate(json.loads(d.output), load_schema("write-plan.schema.json"))


def test_diff_vocab_says_what_a_remap_does_with_the_scales(w, tmp_path) -> None:
    from ckpttools.vocab.diff import diff_vocab

    perm = _perm_mapping(w["ct_head"], tmp_path / "p.st")
    assert "moves lm_head.weight_scale with the rows" in (diff_vocab(w["ct_head"], perm).lm_head_scales or "")
    assert "keeps it" in (diff_vocab(w["ct_head_tensor"], perm).lm_head_scales or "")
    assert "refused" in (diff_vocab(w["block_head"], perm).lm_head_scales or "")
    assert diff_vocab(w["ct"], perm).lm_head_scales is None  # lm_head in bf16
    out = CliRunner().invoke(cli, ["diff-vocab", str(w["ct_head"]), str(perm)]).output
    assert "note: A's lm_head is FP8 per channel" in out


def test_every_quant_rule_has_a_file_and_line() -> None:
    import re

    from ckpttools.engines.quant_rules import QUANT_RULES

    cite = re.compile(r"\.py:\d+")
    for spec, r in QUANT_RULES.items():
        for name in ("draft_flag", "inherits_target", "own_config", "opt_out", "online", "compatible"):
            assert cite.search(getattr(r, name).source) or getattr(r, name).source == "none", (spec, name)
        for fmt, sup in r.formats.items():
            assert cite.search(sup.source), (spec, fmt)
            for kind, how in sup.kinds.items():
                assert how == "quantized" or cite.search(how), (spec, fmt, kind)


def test_verify_launch_says_the_inherit_trap_before_the_load(w) -> None:
    import logging

    from ckpttools.engines.launch import LaunchSpec, free_port
    from ckpttools.engines.releases import resolve
    from ckpttools.measuring.launch_check import check_launch

    target = build_target(w["root"] / "t-launch")
    spec = LaunchSpec("sglang", str(target), str(w["bf16"]), port=free_port(), engine_args=["--quantization=fp8"])
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: seen.append(r.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("ckpttools")
    log.addHandler(handler)
    level, log.level = log.level, logging.INFO
    try:
        check_launch(spec, [str(w["bf16"])], resolve("sglang==0.5.17"))
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert any("engine arguments" in m and "unquant" in m for m in seen), seen


def test_vllm_reads_ignore_and_targets_by_its_own_layer_names(w, tmp_path) -> None:
    """vLLM names fc model.fc and matches the class target Linear against class names (ReplicatedLinear
    yes, ParallelLMHead no): an ignore entry "fc" leaves its fc quantized, a bf16 weight cast into an FP8
    layer; a "Linear" target alone leaves its lm_head unquantized, the FP8 rows loaded without their scale."""
    fc_only = qd.mutate(
        w["ct"], tmp_path / "fc-only", config=lambda c: c["quantization_config"].update(ignore=["lm_head", "fc"])
    )
    r = validate(fc_only, engine=VL)
    assert [(f.id, f.location) for f in r.errors] == [("quant.engine", "fc.weight")], r.errors
    assert validate(fc_only, engine=OLD).ok  # SGLang's fc is never quantized

    def linear_only(c: dict) -> None:
        c["quantization_config"]["config_groups"]["group_0"]["targets"] = ["Linear"]

    head = qd.mutate(w["ct_head"], tmp_path / "head-linear-only", config=linear_only)
    errs = {(f.id, f.location) for f in validate(head, engine=VL).errors}
    assert ("quant.scale_dropped", "lm_head.weight_scale") in errs and ("tensors.dtype", "lm_head.weight") in errs
    assert validate(w["ct_head"], engine=VL).ok  # ckpt quantize names lm_head among the targets
