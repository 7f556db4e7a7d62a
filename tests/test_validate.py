"""ckpt validate: real configs, every check at every severity, --fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_drafter, build_target
from ckpttools.engines.aux_rules import sglang_default_aux_ids
from ckpttools.ops.validate import validate

from .helpers import rewrite, tree_digest

REAL = Path(__file__).parent / "data" / "real-configs"

# drafter config -> (target config or None, the errors a careful engineer expects)
REAL_PAIRS = {
    # float16 drafters behind bfloat16 Llama-3.1 targets: SGLang 0.5.17 crashes at fc under --dtype auto
    "SafeAILab-EAGLE--traineagle3-llama3.1-8b": (
        "meta-llama--Llama-3.1-8B-Instruct",
        {"config.architectures", "target.context_length", "target.dtype"},
    ),
    "SpecForge--llama3-8B-eagle3": ("meta-llama--Llama-3.1-8B-Instruct", {"target.context_length", "target.dtype"}),
    "SpecForge--llama3-70B-eagle3": ("meta-llama--Llama-3.1-70B", {"target.context_length", "target.dtype"}),
    "SpecForge--qwen3-8b-eagle3": ("Qwen--Qwen3-8B", set()),
    "SpecForge--gpt-oss-20B-eagle3": ("openai--gpt-oss-20b", {"target.context_length"}),
    "speculators--research-llama3-8B": ("meta-llama--Llama-3.1-8B-Instruct", {"config.architectures"}),
    "AngelSlim--qwen3-8b-eagle3": ("Qwen--Qwen3-8B", {"config.architectures"}),
    "SpecForge--qwen2.5-0.5b-eagle3": (None, set()),
    "SpecForge--llama4-scout-17B-16E-eagle3": (None, set()),
    "TorchSpec--minimax-m25-eagle3": (None, {"config.draft_vocab_size"}),
    # TorchSpec's Kimi-K2.5 drafter config (a Llama layer, no draft_vocab_size) against DeepSeek-R1
    # (DeepseekV3ForCausalLM, the same 7168 hidden and 61 layers, but DeepSeek's 129280 vocabulary)
    "TorchSpec--kimi-k25-eagle3": ("deepseek-ai--DeepSeek-R1", {"config.draft_vocab_size", "target.vocab_size"}),
    # TorchSpec's MLA drafter: a training-side class name; without draft_vocab_size SGLang's MLA class
    # takes lm_head from the target, which is no error
    "TorchSpec--qwen3-8b-eagle3-mla": ("Qwen--Qwen3-8B", {"config.architectures"}),
}


@pytest.mark.parametrize("drafter", sorted(REAL_PAIRS))
def test_real_published_configs(drafter):
    target, expected = REAL_PAIRS[drafter]
    r = validate(REAL / f"{drafter}.config.json", REAL / f"{target}.config.json" if target else None)
    assert {f.id for f in r.errors} == expected, [(f.id, f.message) for f in r.errors]
    assert r.ok == (not expected)
    assert not [f for f in r.findings if f.id == "config.schema"]  # all are well-formed JSON configs
    if target:
        assert r.checked == ["config", "target"]
        if "eagle_config" not in json.loads((REAL / f"{drafter}.config.json").read_text()):
            info = [f for f in r.findings if f.id == "target.aux_layer_ids"]
            assert info and info[0].severity == "info"


def test_official_eagle_config_messages():
    r = validate(
        REAL / "SafeAILab-EAGLE--traineagle3-llama3.1-8b.config.json",
        REAL / "meta-llama--Llama-3.1-8B-Instruct.config.json",
    )
    arch = next(f for f in r.errors if f.id == "config.architectures")
    assert "plain Llama" in arch.message and arch.location == "$.architectures[0]"
    ctx = next(f for f in r.errors if f.id == "target.context_length")
    assert "covers 2,048 positions" in ctx.message and "131,072" in ctx.message
    assert "raise max_position_embeddings to 131072" in ctx.hint
    aux = next(f for f in r.findings if f.id == "target.aux_layer_ids")
    assert "[1, 15, 28]" in aux.message  # SGLang's default for 32 layers, as ids


def test_sglang_default_aux_ids_match_its_capture_points():
    # SGLang captures the input of layers [2, L//2, L-3]; an id i is captured as the input of i+1
    for L in (8, 24, 32, 61, 80):
        assert [i + 1 for i in sglang_default_aux_ids(L)] == [2, L // 2, L - 3]


def test_context_131072_against_262144_is_an_error_and_fix_cleans_it(tmp_path):
    d = build_drafter(tmp_path / "k2-drafter", max_position_embeddings=131072)
    t = build_target(tmp_path / "k25", max_position_embeddings=262144, text_config=True)
    before = tree_digest(d)
    r = CliRunner().invoke(cli, ["validate", str(d), "--target", str(t), "--json"])
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert [f["id"] for f in out["findings"] if f["severity"] == "error"] == ["target.context_length"]
    r = CliRunner().invoke(cli, ["validate", str(d), "--target", str(t), "--fix", "-o", str(tmp_path / "fixed")])
    assert r.exit_code == 0, r.output
    assert "max_position_embeddings 131072 -> 262144" in r.stdout
    assert tree_digest(d) == before  # the input is never touched
    assert validate(tmp_path / "fixed", t).ok
    cfg = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 262144
    # tensor bytes are copied unchanged
    from safetensors.numpy import load_file

    a = load_file(str(d / "model.safetensors"))
    b = load_file(str(tmp_path / "fixed" / "model.safetensors"))
    assert a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)
    assert (tmp_path / "fixed" / "ckpttools-manifest.json").is_file()


def test_fix_in_place_keeps_a_backup(tmp_path):
    d = build_drafter(tmp_path / "d", "eagle")
    before = tree_digest(d)
    r = CliRunner().invoke(cli, ["validate", str(d), "--fix", "--in-place"])
    assert r.exit_code == 0, r.output
    backups = [p for p in tmp_path.iterdir() if p.name.startswith("d.bak-")]
    assert len(backups) == 1 and tree_digest(backups[0]) == before
    assert json.loads((d / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_fix_refuses_to_overwrite_and_usage_errors(tmp_path):
    d = build_drafter(tmp_path / "d", "eagle")
    (tmp_path / "o").mkdir()
    r = CliRunner().invoke(cli, ["validate", str(d), "--fix", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "already exists" in r.stderr
    r = CliRunner().invoke(cli, ["validate", str(d), "--fix"])
    assert r.exit_code == 2 and "exactly one of -o OUT or --in-place" in r.stderr
    r = CliRunner().invoke(cli, ["validate", str(tmp_path / "nope")])
    assert r.exit_code == 2


def test_fix_renames_dropped_tensors(tmp_path):
    d = build_drafter(tmp_path / "d")
    bad = rewrite(d, tmp_path / "bad", rename={"fc.weight": "module.fc.weight", "norm.weight": "mystery.weight"})
    r = validate(bad)
    dropped = {f.location: f for f in r.findings if f.id == "tensors.dropped"}
    assert dropped["module.fc.weight"].severity == "error" and "'fc.weight'" in dropped["module.fc.weight"].hint
    assert dropped["mystery.weight"].severity == "warning"
    assert {f.location for f in r.errors if f.id == "tensors.missing"} == {"fc.weight", "norm.weight"}
    res = CliRunner().invoke(cli, ["validate", str(bad), "--fix", "-o", str(tmp_path / "fixed"), "--json"])
    out = json.loads(res.stdout)
    assert "tensor: module.fc.weight -> fc.weight" in out["changes"]
    assert res.exit_code == 1  # norm.weight is still missing: only a known rename is applied
    assert [f["location"] for f in out["after"]["findings"] if f["severity"] == "error"] == ["norm.weight"]


# --- one test per check and severity ---------------------------------------------
def _ids(r, sev=None):
    return {f.id for f in r.findings if sev is None or f.severity == sev}


def test_schema_errors_all_at_once_with_paths(tmp_path):
    cfg = json.loads((REAL / "SpecForge--llama3-8B-eagle3.config.json").read_text())
    cfg.update(hidden_size="4096", rms_norm_eps=-1, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, "x"]})
    del cfg["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = validate(tmp_path / "config.json")
    paths = sorted(f.location for f in r.findings if f.id == "config.schema")
    assert paths == ["$", "$.eagle_config.eagle_aux_hidden_state_layer_ids[1]", "$.hidden_size", "$.rms_norm_eps"]


@pytest.mark.parametrize(
    "arch,expect",
    [
        ("LlamaForCausalLMEagle3", None),
        ("Eagle3DeepseekV2ForCausalLM", None),
        ("LlamaForCausalLM", "plain Llama"),
        ("Eagle3LlamaForCausalLM", "vLLM's"),
        ("Qwen3ForCausalLM", "not an EAGLE-3 class"),
    ],
)
def test_architectures(tmp_path, arch, expect):
    cfg = json.loads((REAL / "SpecForge--qwen3-8b-eagle3.config.json").read_text()) | {"architectures": [arch]}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    found = [f for f in validate(tmp_path / "c.json").findings if f.id == "config.architectures"]
    assert (found[0].message if found else None) is None if expect is None else expect in found[0].message
    if expect:
        assert found[0].severity == "error"


def test_config_presence_act_and_dtype(tmp_path):
    base = json.loads((REAL / "SpecForge--qwen3-8b-eagle3.config.json").read_text())
    cases = {
        "no-dvs": ({k: v for k, v in base.items() if k != "draft_vocab_size"}, "config.draft_vocab_size", "error"),
        "null-dvs": (base | {"draft_vocab_size": None}, "config.draft_vocab_size", "info"),
        "no-layers": ({k: v for k, v in base.items() if k != "num_hidden_layers"}, "config.num_hidden_layers", "error"),
        "gelu": (base | {"hidden_act": "gelu"}, "config.hidden_act", "error"),
        "no-dtype": ({k: v for k, v in base.items() if k != "torch_dtype"}, "config.torch_dtype", "warning"),
        "fp32": (base | {"torch_dtype": "float32"}, "config.torch_dtype", "warning"),
    }
    for name, (cfg, fid, sev) in cases.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(cfg))
        got = [f for f in validate(tmp_path / f"{name}.json").findings if f.id == fid]
        assert got and got[0].severity == sev, name


def test_tensor_checks(tmp_path):
    d = build_drafter(tmp_path / "d", embed_tokens=True)
    assert validate(d).ok and not _ids(validate(d), "warning")
    no_head = rewrite(d, tmp_path / "nohead", drop=("lm_head.weight",))
    f = next(f for f in validate(no_head).findings if f.id == "tensors.lm_head_missing")
    assert f.severity == "error" and "accept length falls to 1.00" in f.message
    no_q = rewrite(d, tmp_path / "noq", drop=("layers.0.self_attn.q_proj.weight",))
    assert ("tensors.missing", "layers.0.self_attn.q_proj.weight") in {
        (f.id, f.location) for f in validate(no_q).errors
    }
    shape = rewrite(d, tmp_path / "shape", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3]}})
    bad = next(f for f in validate(shape).errors if f.id == "tensors.shape")
    assert bad.location == "fc.weight" and "[64, 128]" in bad.message
    emb = rewrite(d, tmp_path / "emb", config={"vocab_size": 2000})
    assert "embed_tokens.weight" in {f.location for f in validate(emb).errors if f.id == "tensors.shape"}
    train = build_drafter(tmp_path / "train", "training")
    info = [f for f in validate(train).findings if f.id == "tensors.training_only"]
    assert info and info[0].severity == "info"


def test_mapping_checks(tmp_path):
    d = build_drafter(tmp_path / "d")
    nomap = rewrite(d, tmp_path / "nomap", drop=("d2t", "t2d"))
    f = next(f for f in validate(nomap).errors if f.id == "mapping.missing")
    assert "SGLang will treat draft ids as target ids" in f.message
    full = rewrite(
        d,
        tmp_path / "full",
        drop=("d2t", "t2d"),
        config={"draft_vocab_size": None},
        replace={"lm_head.weight": lambda a: np.zeros((1024, 64), a.dtype)},
    )
    assert "mapping.missing" not in _ids(validate(full))
    dup = rewrite(d, tmp_path / "dup", replace={"d2t": lambda a: np.where(np.arange(len(a)) == 1, a[0] - 1, a)})
    assert {"mapping.d2t-duplicates", "mapping.t2d-mismatch"} <= _ids(validate(dup), "error")
    mo = build_drafter(tmp_path / "mo", "modelopt")
    r = validate(mo)
    assert r.ok and "mapping.order" in _ids(r, "info")


def test_target_checks(tmp_path):
    d = build_drafter(tmp_path / "d", aux_layer_ids=(1, 3, 7), max_position_embeddings=4096)
    t8 = build_target(tmp_path / "t8", num_layers=8)
    r = validate(d, t8)
    aux = next(f for f in r.errors if f.id == "target.aux_layer_ids")
    assert "[7]" in aux.message and "boundaries 0..7" in aux.message and "llama.py:885" in aux.hint
    ok = build_drafter(tmp_path / "ok", aux_layer_ids=(1, 3, 5))
    assert validate(ok, t8).ok
    assert _ids(validate(ok, build_target(tmp_path / "h", hidden_size=32)), "error") >= {"target.hidden_size"}
    padded = build_target(tmp_path / "pad", vocab_size=1088)
    v = next(f for f in validate(ok, padded).findings if f.id == "target.vocab_size")
    assert v.severity == "warning" and "padded" in v.message
    small = build_target(tmp_path / "small", vocab_size=512)
    assert "target.vocab_size" in _ids(validate(ok, small), "error")
    dup = build_drafter(tmp_path / "dupaux", aux_layer_ids=(3, 3, 5))
    assert "target.aux_layer_ids" in _ids(validate(dup, t8), "warning")
    rope = rewrite(ok, tmp_path / "rope", config={"rope_theta": 500000.0})
    assert "target.rope" in _ids(validate(rope, t8), "info")
    # the target given as a bare config.json, nested under text_config (Kimi-K2.5 style)
    k25 = build_target(tmp_path / "k25", text_config=True, num_layers=8)
    assert validate(ok, k25 / "config.json").ok
    bad_t = tmp_path / "bad-target.json"
    bad_t.write_text(json.dumps({"architectures": ["X"]}))
    assert "target.schema" in _ids(validate(ok, bad_t), "error")


def test_dtype_against_target(tmp_path):
    t = build_target(tmp_path / "t")  # bfloat16
    fp16 = build_drafter(tmp_path / "fp16", dtype="fp16")
    f = next(f for f in validate(fp16, t).errors if f.id == "target.dtype")
    assert "expected mat1 and mat2 to have the same dtype" in f.message and "--dtype bfloat16" in f.hint
    assert next(f for f in validate(fp16, t, engine="vllm").findings if f.id == "target.dtype").severity == "warning"
    assert validate(build_drafter(tmp_path / "bf16"), t).ok


def test_multi_layer_drafter_shapes(tmp_path):
    d = build_drafter(tmp_path / "d", num_layers=2)
    assert validate(d).ok  # layer 1 takes H, as SGLang 0.5.17 builds it
    wide = rewrite(
        d, tmp_path / "wide", replace={"layers.1.self_attn.q_proj.weight": lambda a: np.zeros((64, 128), a.dtype)}
    )
    bad = next(f for f in validate(wide).errors if f.id == "tensors.shape")
    assert bad.location == "layers.1.self_attn.q_proj.weight" and "[64, 64]" in bad.message


def test_deep_checks(tmp_path):
    d = build_drafter(tmp_path / "d")
    nan = rewrite(
        d,
        tmp_path / "nan",
        replace={
            "layers.0.mlp.up_proj.weight": lambda a: np.where(
                np.arange(a.size).reshape(a.shape) == 5, np.float32("nan"), a.astype(np.float32)
            ).astype(a.dtype)
        },
    )
    f = next(f for f in validate(nan, deep=True).errors if f.id == "deep.nonfinite")
    assert f.location == "layers.0.mlp.up_proj.weight" and f.message.startswith("1 NaN")
    zero = rewrite(d, tmp_path / "zero", replace={"lm_head.weight": lambda a: np.zeros_like(a)})
    assert "deep.zero" in _ids(validate(zero, deep=True), "error")
    assert "deep.zero" not in _ids(validate(zero))  # only with --deep
    const = rewrite(d, tmp_path / "const", replace={"fc.weight": lambda a: np.full_like(a, 0.5)})
    assert "deep.constant" in _ids(validate(const, deep=True), "error")
    assert validate(d, deep=True).ok


def test_deep_streams_in_bounded_chunks(tmp_path):
    from ckpttools.io.checkpoint import open_checkpoint

    d = build_drafter(tmp_path / "d", vocab_size=4096, draft_vocab_size=4000)
    with open_checkpoint(d) as ck:
        chunks = list(ck.iter_chunks("lm_head.weight", chunk_bytes=10_000))
        assert max(c.nbytes for c in chunks) <= 10_000 and len(chunks) > 40
        assert np.concatenate(chunks).tobytes() == ck.read("lm_head.weight").tobytes()


def test_config_only_and_missing_config(tmp_path):
    d = build_drafter(tmp_path / "d")
    (tmp_path / "cfgonly").mkdir()
    (tmp_path / "cfgonly" / "config.json").write_text((d / "config.json").read_text())
    r = validate(tmp_path / "cfgonly")
    assert r.ok and "input.no_weights" in _ids(r, "info") and r.checked == ["config"]
    nocfg = tmp_path / "nocfg"
    nocfg.mkdir()
    (nocfg / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes())
    assert "config.missing" in _ids(validate(nocfg), "error")


def test_cli_human_output_groups_by_severity(tmp_path):
    d = build_drafter(tmp_path / "d", "eagle")
    t = build_target(tmp_path / "t", max_position_embeddings=131072)
    r = CliRunner().invoke(cli, ["validate", str(d), "--target", str(t)])
    assert r.exit_code == 1
    assert r.stdout.index("ERRORS (3):") < r.stdout.index("INFO (1):")
    assert "[target.dtype]" in r.stdout  # the official layout is float16, the target bfloat16
    assert "FAILED: 3 error(s), 0 warning(s), 1 note(s)" in r.stdout
    ok = build_drafter(tmp_path / "ok")
    r = CliRunner().invoke(cli, ["validate", str(ok), "--target", str(build_target(tmp_path / "t2"))])
    assert r.exit_code == 0 and "OK: no errors" in r.stdout


def _target_of(tmp_path: Path, arch: str, num_layers: int = 8) -> Path:
    """A target config of another class (validate reads only its config)."""
    t = build_target(tmp_path / f"t-{arch}", num_layers=num_layers)
    cfg = json.loads((t / "config.json").read_text())
    cfg["architectures"] = [arch]
    p = tmp_path / f"{arch}.json"
    p.write_text(json.dumps(cfg))
    return p


def test_aux_ids_are_read_per_target_class(tmp_path):
    """SGLang 0.5.17 reads ids per target class (engines/aux_rules.py, with source lines); vLLM 0.32 as is."""
    from ckpttools.engines.aux_rules import capture_rule

    ds = _target_of(tmp_path, "DeepseekV3ForCausalLM")
    gpt = _target_of(tmp_path, "GptOssForCausalLM")
    llama = _target_of(tmp_path, "LlamaForCausalLM")
    # DeepSeek: a first id of 1 is shifted like Llama's; any other first id is used as it is
    d1 = build_drafter(tmp_path / "d1", aux_layer_ids=(1, 3, 5))
    assert validate(d1, ds).ok and "target.aux_rule" not in _ids(validate(d1, ds), "warning")
    d2 = build_drafter(tmp_path / "d2", aux_layer_ids=(2, 4, 7))
    r = validate(d2, ds)
    assert r.ok  # boundary 7 is the input of the last layer: reachable as is
    w = next(f for f in r.findings if f.id == "target.aux_rule")
    assert w.severity == "warning" and "inputs of layers [2, 4, 7]" in w.message and "deepseek_v2.py:3134" in w.hint
    assert "target.aux_layer_ids" in _ids(validate(d2, llama), "error")  # 7 + 1 = 8: past a Llama's last layer
    # gpt-oss: ids whose largest equals the layer count are boundaries, the last one included
    g = build_drafter(tmp_path / "g", aux_layer_ids=(2, 4, 8))
    assert validate(g, gpt).ok
    assert "target.aux_layer_ids" in _ids(validate(g, llama), "error")
    g7 = build_drafter(tmp_path / "g7", aux_layer_ids=(1, 3, 7))  # not ending at L: +1, so 7 -> 8, reachable
    assert validate(g7, gpt).ok and not validate(g7, llama).ok
    # vLLM: the ids are the boundaries, 0..L
    gv = build_drafter(tmp_path / "gv", "vllm", aux_layer_ids=(0, 4, 8))
    assert validate(gv, llama, engine="vllm").ok
    v9 = build_drafter(tmp_path / "v9", "vllm", aux_layer_ids=(2, 4, 9))
    assert "target.aux_layer_ids" in _ids(validate(v9, llama, engine="vllm"), "error")
    # the conversions the table allows, and the one it cannot make
    rule = capture_rule("sglang", "DeepseekV3ForCausalLM")[0]
    assert rule.ids_for([2, 4, 6], 8) == [2, 4, 6] and rule.boundaries([1, 3, 5], 8) == [2, 4, 6]
    assert rule.ids_for([1, 4, 6], 8) is None  # a first boundary of 1 cannot be asked of SGLang on DeepSeek
    assert capture_rule("sglang", "GptOssForCausalLM")[0].ids_for([2, 4, 8], 8) == [2, 4, 8]
    unknown = _target_of(tmp_path, "SomeNewForCausalLM")
    assert "target.aux_rule" in _ids(validate(d1, unknown), "info")


def test_vllm_serves_the_classes_its_registry_lists(tmp_path):
    """vLLM 0.32 registers LlamaForCausalLMEagle3 and the other EAGLE-3 names as its own
    classes (model_executor/models/registry.py:658-673): validate --engine vllm accepts them."""
    d = build_drafter(tmp_path / "d", "sglang")
    assert "config.architectures" not in _ids(validate(d, engine="vllm"), "error")
    odd = rewrite(d, tmp_path / "odd", config={"architectures": ["SomethingEagle3"]})
    assert "config.architectures" in _ids(validate(odd, engine="vllm"), "error")


def test_mla_drafter_configs_name_the_mla_class():
    r = validate(REAL / "TorchSpec--qwen3-8b-eagle3-mla.config.json")
    arch = next(f for f in r.errors if f.id == "config.architectures")
    assert "Eagle3DeepseekV2ForCausalLM" in arch.hint and "kimi_k25_eagle3.py" in arch.message
    dvs = next(f for f in r.findings if f.id == "config.draft_vocab_size")
    assert dvs.severity == "info" and "from the target" in dvs.message
