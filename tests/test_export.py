"""ckpt export: every flavor to SGLang (and vLLM), bytes preserved, validated before it lands."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import DRAFTER_FLAVORS, build_drafter, build_target
from ckpttools.errors import ConfigError
from ckpttools.engines.names import sglang_loads, suggest_rename
from ckpttools.formats.names import canonical_name
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.ops.export import export
from ckpttools.ops.inspect import inspect
from ckpttools.ops.validate import validate

from .helpers import rewrite

REAL = Path(__file__).parent / "data" / "real-configs"


def tensor_bytes(path: Path) -> dict[str, bytes]:
    with open_checkpoint(path) as ck:
        return {n: bytes(ck.read_bytes(n)) for n in ck.tensors}


@pytest.fixture(scope="module")
def target8(tmp_path_factory):
    return build_target(tmp_path_factory.mktemp("t") / "t", num_layers=8, max_position_embeddings=131072)


@pytest.mark.parametrize("flavor", DRAFTER_FLAVORS)
def test_every_flavor_exports_to_sglang_with_bytes_preserved(flavor, tmp_path, target8):
    src = build_drafter(tmp_path / "src", flavor, max_shard_size=60_000 if flavor == "training" else None)
    (src / "tokenizer.json").write_text('{"model": {"vocab": {}}}')
    r = CliRunner().invoke(cli, ["export", str(src), "-o", str(tmp_path / "out"), "--target", str(target8), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["validation"]["ok"] and rep["source_flavor"] == inspect(src).kind
    ins = inspect(tmp_path / "out")
    assert ins.kind == ("mla" if flavor == "mla" else "sglang")
    assert validate(tmp_path / "out", target8).ok
    assert (tmp_path / "out" / "tokenizer.json").read_text() == (src / "tokenizer.json").read_text()
    a, b = tensor_bytes(src), tensor_bytes(tmp_path / "out")
    dropped = {n for n, _ in rep["dropped"]}
    cast = {c.split(":")[0] for c in rep["cast"]}
    # eagle (fp16) and training (fp32) are cast to the bf16 target's dtype (--dtype auto)
    assert bool(cast) == (flavor in ("eagle", "training"))
    with open_checkpoint(src) as ck:
        for n, data in a.items():
            if n in dropped:
                continue
            new = canonical_name(n)[0]
            if n in cast:  # exactly ml_dtypes' round-to-nearest-even of the source values
                assert b[new] == ck.read(n).astype(np.float32).astype(ml_dtypes.bfloat16).tobytes(), n
            else:
                assert b[new] == data, n  # byte for byte after the renames
    if flavor == "training":
        assert dropped == {"model.layers.0.self_attn.rotary_emb.inv_freq"}
        assert [x for x, _ in rep["renamed"]][:1] == ["model.embed_tokens.weight"]
    if flavor == "modelopt":
        assert "t2d" in b and any("frequency order" in n for n in rep["notes"])
        with open_checkpoint(tmp_path / "out") as ck:
            d2t, t2d = ck.read("d2t"), ck.read("t2d")
            assert np.array_equal(np.flatnonzero(t2d), np.sort(d2t + np.arange(len(d2t))))
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM" if flavor == "mla" else "LlamaForCausalLMEagle3"]
    assert cfg["draft_vocab_size"] == 256 and cfg["num_hidden_layers"] == 1 and cfg["max_position_embeddings"] == 131072
    assert "eagle_aux_hidden_state_layer_ids" in cfg["eagle_config"]


def test_fp32_to_bf16_cast_is_exactly_ml_dtypes_rounding(tmp_path, target8):
    src = build_drafter(tmp_path / "src", "training")
    r = export(src, tmp_path / "out", target=target8, dtype="bf16")
    assert r.cast and all("F32 -> BF16" in c for c in r.cast)
    with open_checkpoint(src) as a, open_checkpoint(tmp_path / "out") as b:
        for n in b.tensors:
            if n in ("d2t", "t2d"):
                continue
            ref = a.read("model." + n if "model." + n in a.tensors else n).astype(ml_dtypes.bfloat16)
            assert b.tensors[n].dtype == "BF16" and b.read(n).tobytes() == ref.tobytes(), n
    assert json.loads((tmp_path / "out" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert validate(tmp_path / "out", target8).ok and not [
        f for f in validate(tmp_path / "out").findings if f.id == "config.torch_dtype"
    ]


def test_official_eagle_config_gets_architectures_and_context_fixed(tmp_path):
    real = json.loads((REAL / "SafeAILab-EAGLE--traineagle3-llama3.1-8b.config.json").read_text())
    small = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
    over = {k: v for k, v in real.items() if k not in small}  # architectures, 2048, float16, 128256 / 32000 ...
    src = build_drafter(
        tmp_path / "eagle3-llama31",
        "eagle",
        vocab_size=real["vocab_size"],
        draft_vocab_size=real["draft_vocab_size"],
        hidden_size=64,
        intermediate_size=128,
        num_heads=4,
        num_kv_heads=2,
        config_overrides=over,
    )
    cfg0 = json.loads((src / "config.json").read_text())
    assert cfg0["architectures"] == ["LlamaForCausalLM"] and cfg0["max_position_embeddings"] == 2048
    # the real target config, at the tiny drafter's width (32 layers, 131072 context, llama3 rope kept)
    t_cfg = json.loads((REAL / "meta-llama--Llama-3.1-8B-Instruct.config.json").read_text()) | {"hidden_size": 64}
    target = tmp_path / "llama-3.1-8b-instruct.config.json"
    target.write_text(json.dumps(t_cfg))
    assert {f.id for f in validate(src, target).errors} == {
        "config.architectures",
        "target.context_length",
        "target.dtype",
    }
    r = export(src, tmp_path / "out", target=target)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["max_position_embeddings"] == 131072
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 15, 28]
    assert cfg["torch_dtype"] == "bfloat16" and cfg["draft_vocab_size"] == 32000  # cast to the target's dtype
    assert any(c.endswith("F16 -> BF16") for c in r.cast)
    assert ["midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight"] in r.renamed
    assert validate(tmp_path / "out", target).ok


def test_export_rejected_by_validate_leaves_nothing(tmp_path, target8):
    src = build_drafter(tmp_path / "src", aux_layer_ids=(1, 3, 7))  # 7 is out of range for 8 layers
    r = CliRunner().invoke(cli, ["export", str(src), "-o", str(tmp_path / "out"), "--target", str(target8)])
    assert r.exit_code == 1
    assert "REJECTED: nothing written" in r.stdout and "[target.aux_layer_ids]" in r.stdout
    assert "nothing was written to" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no OUT, no temporary directory
    nohead = rewrite(src, tmp_path / "nohead", drop=("lm_head.weight",), config={"eagle_config": {}})
    r = CliRunner().invoke(cli, ["export", str(nohead), "-o", str(tmp_path / "out2")])
    assert r.exit_code == 1 and "tensors.lm_head_missing" in r.stdout and not (tmp_path / "out2").exists()


def test_vllm_format(tmp_path, target8):
    src = build_drafter(tmp_path / "src", "sglang", aux_layer_ids=(1, 3, 5))
    r = export(src, tmp_path / "out", format="vllm", target=target8)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert cfg["norm_before_residual"] is False and cfg["norm_before_fc"] is False
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]  # vLLM captures the input of layer id
    assert "eagle_aux_hidden_state_layer_ids" not in cfg.get("eagle_config", {})
    assert any("vLLM captures the input of layer id" in n for n in r.notes)
    assert validate(tmp_path / "out", target8, engine="vllm").ok
    # and back: vLLM's ids become SGLang's again
    export(tmp_path / "out", tmp_path / "back", target=target8)
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert tensor_bytes(src) == tensor_bytes(tmp_path / "back")


def test_speculators_config_is_flattened(tmp_path, target8):
    src = build_drafter(tmp_path / "src", "speculators", aux_layer_ids=(2, 4, 6))
    r = export(src, tmp_path / "out", target=target8)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "speculators_config" not in cfg and "transformer_layer_config" not in cfg
    assert cfg["hidden_size"] == 64 and cfg["draft_vocab_size"] == 256
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert r.source_flavor == "vllm"


def test_int32_d2t_becomes_int64(tmp_path):
    src = build_drafter(tmp_path / "src")
    s32 = rewrite(src, tmp_path / "s32", replace={"d2t": lambda a: a.astype(np.int32)})
    r = export(s32, tmp_path / "out")
    assert "d2t: I32 -> I64" in r.cast
    with open_checkpoint(src) as a, open_checkpoint(tmp_path / "out") as b:
        assert b.tensors["d2t"].dtype == "I64" and np.array_equal(a.read("d2t"), b.read("d2t"))


def test_dtype_keep_against_a_bf16_target_is_rejected(tmp_path, target8):
    src = build_drafter(tmp_path / "src", "eagle")  # float16
    r = CliRunner().invoke(
        cli, ["export", str(src), "-o", str(tmp_path / "out"), "--target", str(target8), "--dtype", "keep"]
    )
    assert r.exit_code == 1 and "[target.dtype]" in r.stdout and not (tmp_path / "out").exists()


def test_refuses_existing_output(tmp_path):
    src = build_drafter(tmp_path / "src")
    (tmp_path / "out").mkdir()
    r = CliRunner().invoke(cli, ["export", str(src), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2 and "already exists" in r.stderr


# --- the rename rules, kept as data -------------------------------------------------
@pytest.mark.parametrize(
    "old,new",
    [
        ("midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight"),
        ("model.midlayer.hidden_norm.weight", "layers.0.hidden_norm.weight"),
        ("model.layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight"),
        ("model.fc.weight", "fc.weight"),
        ("aux_norm_low.weight", "fc_norm.0.weight"),
        ("aux_norm_high.weight", "fc_norm.2.weight"),
        ("draft_id_to_target_id", "d2t"),
        ("lm_head.weight", "lm_head.weight"),
    ],
)
def test_canonical_names(old, new):
    assert canonical_name(old)[0] == new and sglang_loads(old)


def test_names_sglang_drops_and_the_renames_that_fix_them():
    assert not sglang_loads("module.fc.weight") and suggest_rename("module.fc.weight") == "fc.weight"
    assert suggest_rename("draft_model.midlayer.mlp.down_proj.weight") == "layers.0.mlp.down_proj.weight"
    assert not sglang_loads("layers.0.self_attn.qkv.weight") and suggest_rename("layers.0.self_attn.qkv.weight") is None
    assert suggest_rename("fc.weight") is None  # already loads


def _target_config_of(tmp_path: Path, arch: str, num_layers: int = 8) -> Path:
    t = build_target(tmp_path / f"t-{arch}", num_layers=num_layers)
    cfg = json.loads((t / "config.json").read_text())
    cfg["architectures"] = [arch]
    (t / "config.json").write_text(json.dumps(cfg))
    return t / "config.json"


def test_export_keeps_the_captured_layers_across_engines_and_target_classes(tmp_path):
    """A vLLM drafter capturing the inputs of layers [2, 4, 6] keeps them when exported for SGLang:
    ids [1, 3, 5] for a Llama target, [2, 4, 6] for DeepSeek (whose rule uses a first id other than 1
    as it is), and back again. A first boundary of 1 cannot be said to SGLang on DeepSeek: refused."""
    src = build_drafter(tmp_path / "v", "vllm", aux_layer_ids=(2, 4, 6))

    def ids(out: Path) -> list[int]:
        cfg = json.loads((out / "config.json").read_text())
        return (
            cfg.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
            or cfg["eagle_aux_hidden_state_layer_ids"]
        )

    llama = _target_config_of(tmp_path, "LlamaForCausalLM")
    ds = _target_config_of(tmp_path, "DeepseekV3ForCausalLM")
    gpt = _target_config_of(tmp_path, "GptOssForCausalLM")
    assert ids(Path(export(src, tmp_path / "l", target=llama).output)) == [1, 3, 5]
    d = Path(export(src, tmp_path / "d", target=ds).output)
    assert ids(d) == [2, 4, 6]
    assert ids(Path(export(d, tmp_path / "dv", format="vllm", target=ds).output)) == [2, 4, 6]
    g = build_drafter(tmp_path / "g", "vllm", aux_layer_ids=(2, 4, 8))  # the last layer's output
    assert ids(Path(export(g, tmp_path / "gs", target=gpt).output)) == [2, 4, 8]
    first1 = build_drafter(tmp_path / "f1", "vllm", aux_layer_ids=(1, 4, 6))
    with pytest.raises(ConfigError, match=r"SGLang cannot capture the inputs of layers \[1, 4, 6\]"):
        export(first1, tmp_path / "f1s", target=ds)
    assert not (tmp_path / "f1s").exists()


def test_a_multi_layer_drafter_trades_its_later_norms_between_the_engines(tmp_path):
    """Layers 1 and up read hidden_norm in SGLang 0.5.17 (llama_eagle3.py:95-97) and
    input_layernorm in vLLM 0.32 (llama_eagle3.py:136-138): export renames them both ways, the
    weights unchanged, and validate in each engine's reading wants its own name."""
    d = build_drafter(tmp_path / "d", "sglang", num_layers=2, vocab_size=512, draft_vocab_size=128)
    with open_checkpoint(d) as ck:
        norm = np.asarray(ck.read("layers.1.hidden_norm.weight")).copy()
        assert "layers.1.input_layernorm.weight" not in ck.tensors
    missing = {f.location for f in validate(d, engine="vllm").errors if f.id == "tensors.missing"}
    assert missing == {"layers.1.input_layernorm.weight"}  # SGLang's layout read as vLLM reads it
    r = export(d, tmp_path / "v", format="vllm")
    assert ["layers.1.hidden_norm.weight", "layers.1.input_layernorm.weight"] in r.renamed
    assert any("layers 1 and up: hidden_norm becomes input_layernorm" in n for n in r.notes)
    with open_checkpoint(r.output) as ck:
        assert np.array_equal(np.asarray(ck.read("layers.1.input_layernorm.weight")), norm)
        assert "layers.1.hidden_norm.weight" not in ck.tensors and "layers.0.hidden_norm.weight" in ck.tensors
    assert validate(r.output, engine="vllm").ok
    back = export(r.output, tmp_path / "s", format="sglang")
    with open_checkpoint(back.output) as ck:
        assert np.array_equal(np.asarray(ck.read("layers.1.hidden_norm.weight")), norm)
    assert validate(back.output).ok


def test_the_d2t_check_during_the_copy_judges_as_the_check_before_it(tmp_path, target8):
    """export checks d2t/t2d on a thread while the tensors are copied (WritePlan.during) where
    the plan needs no mapping: its note lands where planning puts it, and its error leaves
    nothing at OUT, with the same line and exit code as --dry-run, which checks before."""
    from ckpttools.ops.export import _plan, _settings, plan_export

    def swapped(d2t: np.ndarray) -> np.ndarray:  # two slots' target ids traded: frequency order
        ids = d2t + np.arange(len(d2t))
        ids[[0, 1]] = ids[[1, 0]]
        return ids - np.arange(len(d2t))

    src = rewrite(build_drafter(tmp_path / "s0"), tmp_path / "src", replace={"d2t": swapped})  # t2d kept
    with open_checkpoint(src, download=True) as ck:
        settings = _settings("sglang", target8, "auto")
        plan = _plan(ck, src, tmp_path / "o", "sglang", target8, settings[0], "auto", settings[1], None, True)
        assert len(plan.during) == 1 and not any("frequency order" in n for n in plan.report["notes"])
    rep = export(src, tmp_path / "out", target=target8)
    assert rep.notes == plan_export(src, tmp_path / "o", target=target8).report["notes"]
    assert any("frequency order" in n for n in rep.notes)

    def beyond(d2t: np.ndarray) -> np.ndarray:
        d2t[-1] = 2**40  # a target id past any vocabulary: damaged
        return d2t

    bad = rewrite(src, tmp_path / "bad", replace={"d2t": beyond})
    dry = CliRunner().invoke(cli, ["export", str(bad), "-o", str(tmp_path / "o2"), "--dry-run"])
    real = CliRunner().invoke(cli, ["export", str(bad), "-o", str(tmp_path / "o2")])
    assert dry.exit_code == real.exit_code == 2, (dry.output, real.output)
    assert real.stderr == dry.stderr and "d2t" in real.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "out", "s0", "src"]  # no OUT, no temporary
