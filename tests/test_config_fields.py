"""Issue 20, config fields: every field read is typed and bounded (validate: a finding; export and
remap: exit 2), the schemas agree, and what users met: the speculators flavor, a config file given
to inspect, linked shards, validate's advice, and the draft KV pool behind an MLA target."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_deepseek_target, build_drafter, build_target
from ckpttools.engines.config_rules import canonical_shapes, context_length, weight_problems
from ckpttools.formats.config import config_problems, require_valid_config
from ckpttools.errors import ConfigError, UnsafePathError
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.io.writer import side_file_verdict
from ckpttools.ops.validate import draft_kv_estimate, schema, validate

from .helpers import tree_digest


def _run(*args: str) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _edit(d: Path, **changes: Any) -> None:
    p = d / "config.json"
    cfg = json.loads(p.read_text())
    for k, v in changes.items():
        if v is _DEL:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    p.write_text(json.dumps(cfg))


_DEL = object()


def _ids(r: Any, sev: str | None = None) -> set[str]:
    return {f.id for f in r.findings if sev is None or f.severity == sev}


def _find(r: Any, fid: str) -> Any:
    return next(f for f in r.findings if f.id == fid)


def _refused(d: Path, tmp_path: Path, what: str) -> None:
    """export and remap refuse the drafter with exit 2 and one error line naming ``what``; nothing written."""
    from ckpttools.demo.tiny import random_mapping
    from ckpttools.vocab.diff import save_mapping
    from ckpttools.vocab.mapping import VocabMapping

    m = tmp_path / "m.safetensors"
    if not m.exists():
        save_mapping(VocabMapping.from_ids(random_mapping(1024, 256), 1024), m)
    before = tree_digest(d)
    for args in (["export", d, "-o", tmp_path / "e"], ["remap", d, "--to", m, "-o", tmp_path / "r"]):
        r = _run(*args)
        assert r.exit_code == 2, (args, r.output)
        assert what in r.stderr.splitlines()[0], r.stderr
        assert not (tmp_path / "e").exists() and not (tmp_path / "r").exists()
    assert tree_digest(d) == before


# ----------------------------------------------------------------------------- MLA fields
MLA_BAD = [
    ("kv_lora_rank", "256"),
    ("kv_lora_rank", 0),
    ("kv_lora_rank", -256),
    ("kv_lora_rank", 10**9),
    ("kv_lora_rank", True),
    ("kv_lora_rank", None),
    ("q_lora_rank", 0),
    ("q_lora_rank", "32"),
    ("qk_rope_head_dim", 33),
    ("qk_rope_head_dim", 32.0),
    ("qk_nope_head_dim", [8]),
    ("qk_nope_head_dim", 1 << 20),
    ("v_head_dim", {"n": 16}),
    ("v_head_dim", -1),
]


@pytest.mark.parametrize("key,value", MLA_BAD, ids=[f"{k}={v!r}" for k, v in MLA_BAD])
def test_mla_field_out_of_range_is_a_finding_and_refused(tmp_path: Path, key: str, value: Any) -> None:
    d = build_drafter(tmp_path / "mla", "mla")
    _edit(d, **{key: value})
    assert f"$.{key}" in config_problems(json.loads((d / "config.json").read_text()))
    r = validate(d)
    assert not r.ok and any(f.location == f"$.{key}" for f in r.errors), r.findings
    _refused(d, tmp_path, f"$.{key}")


def test_mla_q_lora_rank_null_is_typed_but_sglang_refuses_it(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "mla", "mla")
    _edit(d, q_lora_rank=None)
    cfg = json.loads((d / "config.json").read_text())
    assert config_problems(cfg) == {}  # null is a value the engines know (vLLM takes it)
    r = validate(d)
    f = _find(r, "config.q_lora_rank")
    assert f.severity == "error" and "kimi_k25_eagle3.py:113-116" in f.message
    assert "config.q_lora_rank" not in _ids(validate(d, engine="vllm"))


def test_mla_drafter_of_two_layers_sglang_refuses(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "mla", "mla")
    _edit(d, num_hidden_layers=2)
    r = validate(d)
    assert "config.mla_num_hidden_layers" in _ids(r, "error")
    assert "kimi_k25_eagle3.py:242-243" in _find(r, "config.mla_num_hidden_layers").message


def test_mla_schema_says_the_same() -> None:
    props = schema("eagle3-drafter-config.schema.json")["properties"]
    assert props["q_lora_rank"]["type"] == ["integer", "null"]
    assert props["qk_rope_head_dim"]["multipleOf"] == 2
    for k in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
        assert props[k]["type"] == "integer" and props[k]["minimum"] == 1
    good = build_drafter_cfg("mla")
    v = jsonschema.Draft202012Validator(schema("eagle3-drafter-config.schema.json"))
    assert not list(v.iter_errors(good))
    assert list(v.iter_errors(good | {"qk_rope_head_dim": 33}))


def build_drafter_cfg(flavor: str, tmp: Path | None = None) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory() as t:
        d = build_drafter(Path(t) / "d", flavor)
        return json.loads((d / "config.json").read_text())


# ----------------------------------------------------------------------------- EAGLE-3.1 fields
def test_num_aux_hidden_states_against_fc_width(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", num_aux=3)
    _edit(d, num_aux_hidden_states=4)
    with open_checkpoint(d) as ck:
        probs = weight_problems(ck.config, canonical_shapes(ck.config, ck.tensors))
    assert "fc.weight takes 192 inputs, not 4 x 64" in probs["$.num_aux_hidden_states"]
    r = validate(d)
    assert "config.num_aux_hidden_states" in _ids(r, "error") or "tensors.shape" in _ids(r, "error")
    _refused(d, tmp_path, "num_aux_hidden_states")


@pytest.mark.parametrize("value", ["3", 0, 3.5, 10**6, [3]])
def test_num_aux_hidden_states_typed(tmp_path: Path, value: Any) -> None:
    d = build_drafter(tmp_path / "d")
    _edit(d, num_aux_hidden_states=value)
    r = validate(d)
    assert any(f.location == "$.num_aux_hidden_states" for f in r.errors)
    _refused(d, tmp_path, "$.num_aux_hidden_states")


def test_fc_norm_weights_without_the_flag(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", fc_norm=True)
    _edit(d, fc_norm=_DEL)
    r = validate(d)
    assert "config.fc_norm" in _ids(r, "error")
    _refused(d, tmp_path, "fc_norm")


def test_fc_norm_flag_with_one_weight_missing(tmp_path: Path) -> None:
    from ckpttools.demo.tiny import write_tensors

    d = build_drafter(tmp_path / "d", fc_norm=True)
    with open_checkpoint(d) as ck:
        tensors = {n: ck.read(n).copy() for n in ck.tensors if n != "fc_norm.2.weight"}
        cfg = dict(ck.config or {})
    shutil.rmtree(d)
    write_tensors(d, tensors, config=cfg)
    r = validate(d)
    f = _find(r, "config.fc_norm")
    assert "fc_norm.2.weight" in f.message and f.severity == "error"
    _refused(d, tmp_path, "fc_norm.2.weight")


def test_fc_norm_flag_on_and_no_weights(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d")
    _edit(d, fc_norm=True)
    assert "config.fc_norm" in _ids(validate(d), "error")
    _refused(d, tmp_path, "fc_norm")


@pytest.mark.parametrize("key", ["fc_norm", "use_aux_norm", "norm_before_fc", "norm_output"])
def test_eagle31_flags_must_be_booleans(tmp_path: Path, key: str) -> None:
    d = build_drafter(tmp_path / "d")
    _edit(d, **{key: "false"})  # a string reads as on
    assert any(f.location == f"$.{key}" for f in validate(d).errors)
    _refused(d, tmp_path, f"$.{key}")


def test_fc_norm_right_passes_and_exports(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", fc_norm=True, norm_before_fc=True)
    assert validate(d).ok
    r = _run("export", d, "-o", tmp_path / "e")
    assert r.exit_code == 0, r.output


# ----------------------------------------------------------------------------- sub-configs and layers
@pytest.mark.parametrize("value", [[1, 3, 5], "ids", 3, None])
def test_eagle_config_must_be_an_object(tmp_path: Path, value: Any) -> None:
    d = build_drafter(tmp_path / "d")
    _edit(d, eagle_config=value)
    assert any(f.location == "$.eagle_config" for f in validate(d).errors)
    _refused(d, tmp_path, "$.eagle_config")


@pytest.mark.parametrize("value", ["llama", [1], None])
def test_transformer_layer_config_must_be_an_object(tmp_path: Path, value: Any) -> None:
    d = build_drafter(tmp_path / "d", "speculators")
    _edit(d, transformer_layer_config=value)
    assert any(f.location == "$.transformer_layer_config" for f in validate(d, engine="vllm").errors)
    _refused(d, tmp_path, "$.transformer_layer_config")


@pytest.mark.parametrize("n", [2, 3, 64])
def test_num_hidden_layers_against_the_layers_present(tmp_path: Path, n: int) -> None:
    d = build_drafter(tmp_path / "d")
    _edit(d, num_hidden_layers=n)
    r = validate(d)
    f = _find(r, "config.layers_present")
    assert f.severity == "error" and f"is {n} but the weights hold decoder layers [0] (1)" in f.message
    _refused(d, tmp_path, "$.num_hidden_layers")


def test_two_layer_drafter_saying_one(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", num_layers=2)
    _edit(d, num_hidden_layers=1)
    assert "decoder layers 0..1 (2)" in _find(validate(d), "config.layers_present").message
    _refused(d, tmp_path, "$.num_hidden_layers")


def test_mtp_heads_are_not_held_to_the_drafter_layer_rule(tmp_path: Path) -> None:
    cfg = {"num_hidden_layers": 1, "architectures": ["DeepseekV3ForCausalLMNextN"]}
    assert canonical_shapes(cfg, {}) == {}
    require_valid_config(cfg, "x", {})  # no shapes: nothing to contradict


def test_require_valid_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"\$\.kv_lora_rank is 'x'"):
        require_valid_config({"kv_lora_rank": "x"}, "d")


# ----------------------------------------------------------------------------- speculators flavor
def test_speculators_example_has_no_schema_errors(tmp_path: Path) -> None:
    d = tmp_path / "spec"
    r = _run("example", "drafter", d, "--flavor", "speculators")
    assert r.exit_code == 0, r.output
    rep = validate(d)
    assert "config.schema" not in _ids(rep), [f.message for f in rep.findings]
    assert _ids(rep, "error") == {"config.architectures"}  # SGLang does not load this format: true
    assert validate(d, engine="vllm").ok
    r = _run("validate", d, "--engine", "vllm")
    assert r.exit_code == 0 and "required property" not in r.output


def test_speculators_missing_layer_field_is_named(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "spec", "speculators")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["transformer_layer_config"]["hidden_size"]
    (d / "config.json").write_text(json.dumps(cfg))
    msgs = [f.message for f in validate(d, engine="vllm").findings if f.id == "config.schema"]
    assert msgs == ["'hidden_size' is a required property"]


def test_flat_drafter_missing_field_still_reads_plainly(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d")
    _edit(d, intermediate_size=_DEL)
    msgs = [f.message for f in validate(d).findings if f.id == "config.schema"]
    assert msgs == ["'intermediate_size' is a required property"]


# ----------------------------------------------------------------------------- inspect of a config file
@pytest.mark.parametrize("name", ["X.config.json", "config.json"])
def test_inspect_a_config_file_describes_it(tmp_path: Path, name: str) -> None:
    d = build_drafter(tmp_path / "d")
    p = tmp_path / name
    shutil.copyfile(d / "config.json", p)
    r = _run("inspect", p)
    assert r.exit_code == 0, r.output
    assert "damaged" not in r.output and "a config file (no weights read)" in r.stdout
    assert "kind: sglang" in r.stdout
    j = _run("inspect", p, "--json")
    rep = json.loads(j.stdout)
    jsonschema.validate(rep, schema("inspect-report.schema.json"))
    assert rep["config_file"] is True and rep["config"]["hidden_size"] == 64 and rep["context_length"] == 4096


def test_inspect_a_target_config_file(tmp_path: Path) -> None:
    t = build_deepseek_target(tmp_path / "t")
    r = _run("inspect", t / "config.json")
    assert r.exit_code == 0 and "kind: target" in r.stdout and "0 decoder layer" not in r.stdout


def test_inspect_other_json_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "o.json").write_text('{"a": 1}')
    r = _run("inspect", tmp_path / "o.json")
    assert r.exit_code == 2 and "not a model config" in r.stderr
    (tmp_path / "l.json").write_text("[1]")
    assert _run("inspect", tmp_path / "l.json").exit_code == 2


# ----------------------------------------------------------------------------- linked shards
def _linked_copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).symlink_to(p.resolve())
    return dst


def test_a_directory_of_links_to_another_checkpoints_shards(tmp_path: Path) -> None:
    sh = build_drafter(tmp_path / "store" / "sh", max_shard_size=40_000, embed_tokens=True)
    ln = _linked_copy(sh, tmp_path / "ln")
    with open_checkpoint(ln) as ck:
        assert len(ck.headers) > 1 and ck.tensors
    assert _run("inspect", ln).exit_code == 0
    assert validate(ln).ok
    r = _run("export", ln, "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert validate(tmp_path / "out").ok


def test_a_shard_linked_from_outside_is_read(tmp_path: Path) -> None:
    sh = build_drafter(tmp_path / "sh", max_shard_size=40_000)
    first = sorted(sh.glob("*.safetensors"))[0]
    outside = tmp_path / "elsewhere" / first.name
    outside.parent.mkdir()
    shutil.move(first, outside)
    first.symlink_to(outside)
    assert validate(sh).ok


@pytest.mark.parametrize("entry", ["../outside.safetensors", "/etc/hostname", "a/../../x.safetensors", ""])
def test_an_index_entry_escaping_the_checkpoint_is_refused(tmp_path: Path, entry: str) -> None:
    sh = build_drafter(tmp_path / "sh", max_shard_size=40_000)
    idx = sh / "model.safetensors.index.json"
    o = json.loads(idx.read_text())
    o["weight_map"][next(iter(o["weight_map"]))] = entry
    idx.write_text(json.dumps(o))
    with pytest.raises(UnsafePathError):
        open_checkpoint(sh)
    assert _run("export", sh, "-o", tmp_path / "out").exit_code == 2


def test_a_side_file_linked_from_outside_is_never_copied(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d")
    secret = tmp_path / "secret.txt"
    secret.write_text("not the checkpoint's")
    (d / "tokenizer_config.json").symlink_to(secret)
    (d / "inside.txt").write_text("ok")
    (d / "alias.txt").symlink_to(d / "inside.txt")
    for name in ("training_args.bin", "optimizer.pt", "rng.pth", "state.pkl", "last.ckpt", "extra.pickle"):
        (d / name).write_bytes(b"\x80\x02}q\x00.")
    assert side_file_verdict(d / "tokenizer_config.json", d) == "a link that leads outside the checkpoint"
    assert side_file_verdict(d / "alias.txt", d) is None
    for args in (["export", d, "-o", tmp_path / "out"], ["validate", d, "--fix", "-o", tmp_path / "fx"]):
        r = _run(*args)
        assert r.exit_code == 0, r.output
    for out in (tmp_path / "out", tmp_path / "fx"):
        names = sorted(p.name for p in out.iterdir())
        assert "tokenizer_config.json" not in names and "training_args.bin" not in names
        assert "inside.txt" in names and "alias.txt" in names
        assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt", ".pickle")) for n in names)


def test_side_file_links_in_a_hub_snapshot_are_copied(tmp_path: Path) -> None:
    snap = tmp_path / "models--o--n" / "snapshots" / "abc"
    blobs = tmp_path / "models--o--n" / "blobs"
    blobs.mkdir(parents=True)
    d = build_drafter(snap)
    (blobs / "b1").write_text("{}")
    (d / "tokenizer.json").symlink_to(os.path.relpath(blobs / "b1", d))
    assert side_file_verdict(d / "tokenizer.json", d) is None


def test_a_link_in_a_hub_snapshot_leading_elsewhere_is_refused(tmp_path: Path) -> None:
    snap = tmp_path / "models--o--n" / "snapshots" / "abc"
    (tmp_path / "models--o--n" / "blobs").mkdir(parents=True)
    sh = build_drafter(snap, max_shard_size=40_000)
    first = sorted(sh.glob("*.safetensors"))[0]
    shutil.move(first, tmp_path / first.name)
    first.symlink_to(tmp_path / first.name)
    with pytest.raises(UnsafePathError, match="blobs"):
        open_checkpoint(sh)


# ----------------------------------------------------------------------------- validate's advice
def test_a_rule_with_no_ids_for_the_llama_layers_says_so(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", aux_layer_ids=(0, 1, 2))
    t = build_deepseek_target(tmp_path / "t")
    rep = validate(d, t)
    rule = [f for f in rep.findings if f.id == "target.aux_rule" and f.severity == "warning"]
    assert rule and "None" not in (rule[0].hint or "") and "no ids make SGLang capture" in (rule[0].hint or "")


def test_a_missing_norm_starts_at_ones(tmp_path: Path) -> None:
    from ckpttools.demo.tiny import write_tensors

    d = build_drafter(tmp_path / "d")
    with open_checkpoint(d) as ck:
        tensors = {n: ck.read(n).copy() for n in ck.tensors if "post_attention_layernorm" not in n}
        cfg = dict(ck.config or {})
    shutil.rmtree(d)
    write_tensors(d, tensors, config=cfg)
    f = next(f for f in validate(d).findings if f.id == "tensors.missing")
    assert "at ones" in f.message and "random" not in f.message and "layernorm.py:376" in f.message


def test_fix_is_advised_only_where_its_output_validates(tmp_path: Path) -> None:
    t = build_target(tmp_path / "t")
    # the official layout behind a bf16 target: --fix cannot cast, so export is the answer
    e = build_drafter(tmp_path / "eagle", "eagle")
    rep = validate(e, t)
    arch = _find(rep, "config.architectures")
    assert "validate --fix" not in (arch.hint or "") and "ckpt export does it" in (arch.hint or "")
    assert not any("validate --fix" in (f.hint or "") for f in rep.findings)
    r = _run("export", e, "-o", tmp_path / "ex", "--target", t)
    assert r.exit_code == 0, r.output
    assert validate(tmp_path / "ex", t).ok
    # a class name alone: --fix is advised, and its output validates
    lm = build_drafter(tmp_path / "lm", config_overrides={"architectures": ["LlamaForCausalLM"]})
    rep = validate(lm, t)
    assert "ckpt validate --fix does it" in (_find(rep, "config.architectures").hint or "")
    r = _run("validate", lm, "--fix", "-o", tmp_path / "fx", "--target", t)
    assert r.exit_code == 0, r.output
    assert validate(tmp_path / "fx", t).ok


def test_aux_ids_out_of_reach_crash_sglang(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", aux_layer_ids=(1, 3, 9))
    t = build_target(tmp_path / "t")
    f = next(f for f in validate(d, t).errors if f.id == "target.aux_layer_ids")
    assert "fewer states" not in f.message
    assert "captured 2 of 3 aux hidden states" in f.message and "aux_hidden_states.py:44-48" in f.message
    g = next(f for f in validate(d, t, engine="vllm").findings if f.id == "target.aux_layer_ids")
    assert "SGLang" not in g.message


def test_mla_drafter_default_context_is_deepseek_v3s(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", "mla")
    _edit(d, model_type="kimi_k2", max_position_embeddings=_DEL)
    cfg = json.loads((d / "config.json").read_text())
    ctx, how = context_length(cfg)
    assert ctx == 4096 and "DeepSeek-V3" in how
    assert context_length({"model_type": "llama"})[0] == 2048
    t = build_target(tmp_path / "t", max_position_embeddings=8192)
    f = _find(validate(d, t), "target.context_length")
    assert "covers 4,096 positions" in f.message and "2,048" not in f.message


def test_context_finding_names_sglangs_override(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", max_position_embeddings=2048)
    t = build_target(tmp_path / "t", max_position_embeddings=8192)
    f = _find(validate(d, t), "target.context_length")
    assert f.severity == "error" and "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in (f.hint or "")
    assert "model_config.py:" in f.message


def test_context_finding_under_vllm_speaks_of_vllm(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", max_position_embeddings=2048)
    t = build_target(tmp_path / "t", max_position_embeddings=8192)
    f = _find(validate(d, t, engine="vllm==0.32"), "target.context_length")
    assert "SGLang" not in f.message and "vLLM 0.32 raises" in f.message and f.severity == "warning"
    assert "speculative.py:1677-1709" in f.message
    # each release's own rule: 0.33 raises it only for rope types that size the cache alone
    f = _find(validate(d, t, engine="vllm==0.33"), "target.context_length")
    assert "vLLM 0.33 raises" in f.message and "only for rope types" in f.message and "1807-1846" in f.message


def test_missing_num_hidden_layers_names_the_model_types_default(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", "mla")
    _edit(d, model_type="kimi_k2", num_hidden_layers=_DEL)
    f = _find(validate(d), "config.num_hidden_layers")
    assert "(61," in f.message and "32" not in f.message


# ----------------------------------------------------------------------------- draft KV memory
def test_llama_drafter_behind_mla_target_warns_with_the_estimate(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", hidden_size=512, num_heads=32, num_kv_heads=32, intermediate_size=256)
    t = build_deepseek_target(tmp_path / "t", num_layers=4)
    cfg, tcfg = (json.loads((p / "config.json").read_text()) for p in (d, t))
    est = draft_kv_estimate(cfg, tcfg)
    assert est is not None
    # 32 KV heads x 16 x 2 x 2 bytes = 2048 per layer; MLA (256 + 32) x 2 = 576; 4 target layers, 1 draft
    assert est["draft_per_layer"] == 2048 and est["target_per_layer"] == 576
    assert est["factor"] == pytest.approx((4 + 2048 / 576) / 5)
    assert est["draft_share"] == pytest.approx(2048 / (576 * 5))
    f = _find(validate(d, t), "target.draft_kv_memory")
    assert f.severity == "warning" and "--max-total-tokens" in (f.hint or "")
    assert "pool_configurator.py:147-163" in f.message and "kv_cache_configurator.py:241-245" in f.message
    r = _run("validate", d, "--target", t)
    assert "target.draft_kv_memory" in r.stdout and "--max-total-tokens" in r.stdout
    assert "target.draft_kv_memory" not in _ids(validate(d, t, engine="vllm"))


def test_kimi_k2_shaped_drafter_estimate_matches_the_gpu() -> None:
    """Seen on an H200: a Kimi-K2-shaped Llama drafter behind a 4-layer Kimi-K2.5-shaped target tried to
    allocate 79 GiB. Assuming 8 KV heads x 128 (Kimi-K2 drafters' usual shape) and ~111 GiB set aside for
    KV (141 GiB at SGLang's default static fraction, less the weights), the estimate gives that figure."""
    d = {"hidden_size": 7168, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}
    t = {"hidden_size": 7168, "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    est = draft_kv_estimate(d | {"num_hidden_layers": 1}, t)
    assert est is not None and 111 * est["draft_share"] == pytest.approx(79, abs=1)


def test_matched_pairs_do_not_warn(tmp_path: Path) -> None:
    t = build_target(tmp_path / "t")
    assert "target.draft_kv_memory" not in _ids(validate(build_drafter(tmp_path / "d"), t))
    mt = build_deepseek_target(tmp_path / "mt", num_layers=4)
    mla = build_drafter(tmp_path / "mla", "mla", aux_layer_ids=(0, 1, 2))
    assert "target.draft_kv_memory" not in _ids(validate(mla, mt))


def test_a_multi_layer_vllm_drafter_is_sent_to_export_not_fix(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "vl", "vllm", num_layers=2)
    arch = _find(validate(d), "config.architectures")
    assert "ckpt export does it" in (arch.hint or "") and "input_layernorm" in arch.message
    r = _run("validate", d, "--fix", "-o", tmp_path / "fx")
    assert r.exit_code == 1  # --fix does not rename the class alone: its output would draft garbage
    assert not validate(tmp_path / "fx").ok
    assert _run("export", d, "-o", tmp_path / "ex").exit_code == 0 and validate(tmp_path / "ex").ok
    one = build_drafter(tmp_path / "vl1", "vllm")
    assert "ckpt validate --fix does it" in (_find(validate(one), "config.architectures").hint or "")
