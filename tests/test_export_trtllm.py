"""ckpt export --format trtllm: what TensorRT-LLM's PyTorch-backend EAGLE-3 loader reads, as its engine
table says (read from its source, not run), and the serving-config fragment with the captured layers.

Each output is checked against the table: its headers and config go through the TensorRT-LLM loader
model (engines/load_plan.py), and the fragment's ids against the table's capture rule."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import DRAFTER_FLAVORS, build_drafter, build_target
from ckpttools.engines.load_plan import load_plan, plan_findings
from ckpttools.engines.releases import TRTLLM_1_2
from ckpttools.errors import CkptError, ConfigError
from ckpttools.engines.aux_rules import capture_rule
from ckpttools.io.checkpoint import numpy_dtype, open_checkpoint
from ckpttools.ops.export import ExportRejected, export, plan_export
from ckpttools.ops.export_trtllm import FRAGMENT_NAME

from .helpers import rewrite

yaml = pytest.importorskip("yaml")

LAYOUT = TRTLLM_1_2.export_format.value
assert LAYOUT is not None
FRAG = LAYOUT["fragment"]
LLAMA_FLAVORS = [f for f in DRAFTER_FLAVORS if f != "mla"]


@pytest.fixture(scope="module")
def target8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_target(tmp_path_factory.mktemp("t") / "t", num_layers=8)


def _read(path: Path) -> tuple[dict[str, tuple[list[int], str]], dict[str, Any]]:
    with open_checkpoint(path) as ck:
        return {n: (list(e.shape), e.dtype) for n, e in ck.tensors.items()}, dict(ck.config or {})


def _fragment(out: Path) -> dict[str, Any]:
    d = yaml.safe_load((out / FRAGMENT_NAME).read_text())
    assert list(d) == [FRAG["key"]]
    return d[FRAG["key"]]


def _assert_loads_as_the_table_says(out: Path) -> None:
    """Every tensor lands in a parameter of the class (loaded; several layers: renamed layers.N. ->
    midlayer.N. by load_weights only), every parameter from the file or shared as the table's sharing says."""
    headers, cfg = _read(out)
    plan = load_plan(headers, cfg, TRTLLM_1_2)
    assert plan.cls == TRTLLM_1_2.drafter_classes.value[0].cls and not plan.refused
    several = cfg["num_hidden_layers"] > 1
    for t in plan.tensors:
        assert not t.name.startswith("model."), t.name  # bare: load_weights adds model.
        if several and re.match(r"layers\.\d+\.", t.name):
            assert t.fate == "renamed" and t.rule == "layers.N. -> midlayer[.N].", t
        else:
            assert t.fate == "loaded", t
    for p in plan.params:
        assert p.source in ("file", "shared"), p
        if p.source == "shared":  # the target's embedding, when the hidden sizes agree (the table's sharing)
            assert p.name == "model.embed_tokens.weight" and TRTLLM_1_2.sharing.value["embed_tokens"].startswith(
                "target_unless_hidden_differs"
            )
    assert not [f for f in plan_findings(plan) if f["severity"] != "info"], plan_findings(plan)
    assert not plan.casts  # d2t already int32; floats as the source or the target's dtype


def _assert_d2t(src: Path, out: Path) -> None:
    """d2t int32, equal to the source's offsets, present only for a reduced draft vocab; no t2d."""
    headers, cfg = _read(out)
    assert "t2d" not in headers
    if cfg["draft_vocab_size"] == cfg["vocab_size"]:
        assert "d2t" not in headers
        return
    assert headers["d2t"] == ([cfg["draft_vocab_size"]], LAYOUT["d2t_dtype"])
    with open_checkpoint(src) as a, open_checkpoint(out) as b:
        d = next(n for n in a.tensors if n.endswith("d2t") or n == "draft_id_to_target_id")
        assert np.array_equal(np.asarray(a.read(d)).astype(np.int64), np.asarray(b.read("d2t")).astype(np.int64))


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("flavor", LLAMA_FLAVORS)
def test_every_llama_flavor_exports_as_the_loader_reads_it(
    flavor: str, num_layers: int, tmp_path: Path, target8: Path
) -> None:
    src = build_drafter(tmp_path / "src", flavor, num_layers=num_layers)
    r = export(src, tmp_path / "out", format="trtllm", target=target8)
    out = Path(str(r.output))
    assert r.validation is not None and r.validation["ok"] and r.validation["load_plan"]["class"]
    headers, cfg = _read(out)
    assert cfg["architectures"] == [LAYOUT["architecture"]] and isinstance(cfg["draft_vocab_size"], int)
    one, _ = LAYOUT["layer_prefix"]
    layer_names = [n for n in headers if "self_attn" in n or "mlp." in n or "layernorm" in n or "hidden_norm" in n]
    if num_layers == 1:
        assert layer_names and all(n.startswith(one) for n in layer_names)
    else:
        assert all(re.match(r"layers\.[01]\.", n) for n in layer_names)
        assert not any(re.match(r"layers\.1\.input_layernorm", n) for n in headers)  # only the first layer has it
    assert "embed_tokens.weight" not in headers  # hidden sizes agree: the target's is shared
    _assert_loads_as_the_table_says(out)
    _assert_d2t(src, out)
    assert (out / FRAGMENT_NAME).is_file() and r.validation["load_plan"] == load_plan(*_read(out), TRTLLM_1_2).to_dict()


def test_weights_are_the_sources_cast_to_the_target_dtype(tmp_path: Path, target8: Path) -> None:
    src = build_drafter(tmp_path / "src", "eagle", num_layers=1)  # float16, midlayer. names
    r = export(src, tmp_path / "out", format="trtllm", target=target8)
    with open_checkpoint(src) as a, open_checkpoint(Path(str(r.output))) as b:
        for n, e in a.tensors.items():
            if n in ("d2t", "t2d"):
                continue
            got = np.asarray(b.read(n))
            want = np.asarray(a.read(n)).astype(np.float32).astype(numpy_dtype(b.tensors[n].dtype))
            assert got.tobytes() == want.tobytes(), n


def _boundaries(flavor: str, ids: list[int], target_cfg: dict[str, Any]) -> list[int]:
    """What the drafter's ids mean (vLLM layout: the ids; any other: SGLang's reading for the target class)."""
    if flavor == "vllm":
        return sorted(set(ids))
    rule, _ = capture_rule("sglang", target_cfg["architectures"][0])
    return rule.boundaries(ids, target_cfg["num_hidden_layers"])


def _target_of(tmp_path: Path, arch: str, num_layers: int = 8) -> Path:
    t = build_target(tmp_path / f"t-{arch}-{num_layers}", num_layers=num_layers)
    cfg = json.loads((t / "config.json").read_text())
    cfg["architectures"] = [arch]
    (t / "config.json").write_text(json.dumps(cfg))
    return t


@pytest.mark.parametrize(
    "flavor, ids, arch",
    [
        ("sglang", [1, 3, 5], "LlamaForCausalLM"),
        ("sglang", [0, 3, 6], "LlamaForCausalLM"),
        ("vllm", [2, 4, 6], "LlamaForCausalLM"),
        ("vllm", [2, 4, 8], "LlamaForCausalLM"),  # the last layer's output: TensorRT-LLM reaches it
        ("sglang", [2, 4, 6], "DeepseekV3ForCausalLM"),  # first id not 1: SGLang reads them as they are
        ("sglang", [1, 3, 5], "DeepseekV3ForCausalLM"),
        ("modelopt", [1, 3, 5], "Qwen3ForCausalLM"),
    ],
)
def test_the_fragment_captures_the_layers_the_aux_ids_mean(
    flavor: str, ids: list[int], arch: str, tmp_path: Path
) -> None:
    target = _target_of(tmp_path, arch)
    tcfg = json.loads((target / "config.json").read_text())
    src = build_drafter(tmp_path / "src", flavor, aux_layer_ids=ids)
    r = export(src, tmp_path / "out", format="trtllm", target=target)
    frag = _fragment(tmp_path / "out")
    bounds = _boundaries(flavor, ids, tcfg)
    # TensorRT-LLM captures the output of layer id (boundary id + 1): the table's rule, and by hand
    assert frag[FRAG["layers"]] == [b - 1 for b in bounds] == TRTLLM_1_2.aux_rules.value.ids_for(bounds, 8)
    assert frag[FRAG["decoding_type"][0]] == FRAG["decoding_type"][1]
    assert frag[FRAG["model"]] == os.path.abspath(tmp_path / "out") and frag[FRAG["max_draft_len"]] > 0
    assert set(frag) == {FRAG["decoding_type"][0], FRAG["max_draft_len"], FRAG["model"], FRAG["layers"]}
    assert any(f"{FRAG['layers']} {frag[FRAG['layers']]}" in n for n in r.notes)
    # and a later export reads the same layers back from the output's config
    back = Path(str(export(tmp_path / "out", tmp_path / "back", format="vllm", target=target).output))
    assert json.loads((back / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == bounds


def test_no_ids_with_a_target_is_trtllms_own_default(tmp_path: Path, target8: Path) -> None:
    src = build_drafter(tmp_path / "src", aux_layer_ids=None)
    export(src, tmp_path / "out", format="trtllm", target=target8)
    L = 8
    assert _fragment(tmp_path / "out")[FRAG["layers"]] == [1, L // 2 - 1, L - 4]  # speculative/eagle3.py's default
    r = export(src, tmp_path / "bare", format="trtllm")  # no target: nothing to say, TensorRT-LLM's default applies
    assert FRAG["layers"] not in _fragment(tmp_path / "bare")
    assert any("TensorRT-LLM captures its default" in n for n in r.notes)


def test_the_embeddings_output_and_layers_past_the_last_are_refused(tmp_path: Path, target8: Path) -> None:
    v0 = build_drafter(tmp_path / "v0", "vllm", aux_layer_ids=(0, 2, 4))  # boundary 0: the embeddings' output
    with pytest.raises(ConfigError, match=r"cannot capture the inputs of layers \[0, 2, 4\]"):
        export(v0, tmp_path / "o0", format="trtllm", target=target8)
    past = build_drafter(tmp_path / "past", "sglang", aux_layer_ids=(1, 3, 8))  # output of layer 8 of 8
    with pytest.raises(ConfigError, match=r"inputs of layers \[2, 4, 9\] of a 8-layer target"):
        export(past, tmp_path / "o1", format="trtllm", target=target8)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["past", "v0"]


def test_full_vocab_has_no_d2t(tmp_path: Path, target8: Path) -> None:
    full = build_drafter(tmp_path / "full", draft_vocab_size=None)
    export(full, tmp_path / "o", format="trtllm", target=target8)
    headers, cfg = _read(tmp_path / "o")
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] == 1024 and "d2t" not in headers
    _assert_loads_as_the_table_says(tmp_path / "o")
    ident = build_drafter(tmp_path / "ident", draft_vocab_size=1024, mapping=np.arange(1024))
    r = export(ident, tmp_path / "oi", format="trtllm")
    assert "d2t" not in _read(tmp_path / "oi")[0] and ["d2t", next(w for n, w in r.dropped if n == "d2t")] in r.dropped


def test_a_different_hidden_size_keeps_embed_tokens_and_rejects_without_it(tmp_path: Path) -> None:
    src = build_drafter(tmp_path / "src", target_hidden_size=96, embed_tokens=True)
    export(src, tmp_path / "o", format="trtllm")
    assert "embed_tokens.weight" in _read(tmp_path / "o")[0]
    _assert_loads_as_the_table_says(tmp_path / "o")
    bare = build_drafter(tmp_path / "bare", target_hidden_size=96)
    r = CliRunner().invoke(cli, ["export", str(bare), "-o", str(tmp_path / "ob"), "--format", "trtllm"])
    assert r.exit_code == 1 and "load_plan.param_at_init" in r.stdout and "model.embed_tokens.weight" in r.stdout
    assert "nothing was written to" in r.stderr and not (tmp_path / "ob").exists()


def test_eagle31_options_are_where_the_class_reads_them(tmp_path: Path, target8: Path) -> None:
    src = build_drafter(tmp_path / "src", fc_norm=True, norm_before_fc=True, num_aux=4, aux_layer_ids=(1, 2, 4, 6))
    export(src, tmp_path / "o", format="trtllm", target=target8)
    headers, cfg = _read(tmp_path / "o")
    assert cfg["eagle_config"]["norm_before_fc"] is True and cfg["fc_norm"] is True  # its switches' places
    assert "input_norm.weight" in headers and "fc_norm.3.weight" in headers
    assert len(_fragment(tmp_path / "o")[FRAG["layers"]]) == 4
    _assert_loads_as_the_table_says(tmp_path / "o")


def test_fc_sized_for_other_aux_states_is_rejected(tmp_path: Path, target8: Path) -> None:
    src = build_drafter(tmp_path / "src", num_aux=3, aux_layer_ids=(1, 2, 4, 6))  # fc takes 3, ids name 4
    with pytest.raises(ExportRejected, match="trtllm.capture_count"):
        export(src, tmp_path / "o", format="trtllm", target=target8)
    assert not (tmp_path / "o").exists()


def test_mla_and_qwen3_drafters_are_refused_as_the_table_says(tmp_path: Path) -> None:
    mla = build_drafter(tmp_path / "mla", "mla")
    with pytest.raises(CkptError, match="an MLA drafter") as e:
        export(mla, tmp_path / "o", format="trtllm")
    assert LAYOUT["refused"]["mla"] in str(e.value)
    qk = build_drafter(tmp_path / "qk", "sglang", qk_norm=True)
    with pytest.raises(CkptError, match="Qwen3-architecture") as e:
        export(qk, tmp_path / "o", format="trtllm")
    assert LAYOUT["refused"]["qk_norm"] in str(e.value)
    assert not (tmp_path / "o").exists()


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path, target8: Path) -> None:
    src = build_drafter(tmp_path / "src")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["export", str(src), "-o", str(tmp_path / "out"), "--format", "trtllm", "--target", str(target8)]
    text = CliRunner().invoke(cli, [*argv, "--dry-run"])
    assert text.exit_code == 0, text.output
    assert "nothing was written" in text.stdout and f"side files made: {FRAGMENT_NAME}" in text.stdout
    assert "midlayer.self_attn.q_proj.weight" in text.stdout and "d2t" in text.stdout
    js = CliRunner().invoke(cli, [*argv, "--dry-run", "--json"])
    assert js.exit_code == 0, js.output
    d = json.loads(js.stdout)
    assert d["written"] is False and {t["name"]: t["dtype"] for t in d["tensors"]}["d2t"] == "I32"
    assert {"name": FRAGMENT_NAME, "kept": True, "why": next(s["why"] for s in d["side_files"] if s["kept"])} in (
        d["side_files"]
    )
    assert "t2d" not in {t["name"] for t in d["tensors"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no OUT, no temporary


def test_the_plan_and_the_written_tree_agree(tmp_path: Path, target8: Path) -> None:
    src = build_drafter(tmp_path / "src", num_layers=2)
    plan = plan_export(src, tmp_path / "out", format="trtllm", target=target8)
    frag = next(s for s in plan.side_files if s.name == FRAGMENT_NAME)
    export(src, tmp_path / "out", format="trtllm", target=target8)
    assert (tmp_path / "out" / FRAGMENT_NAME).read_bytes() == frag.data
    assert sorted(_read(tmp_path / "out")[0]) == sorted(t.name for t in plan.tensors)
    assert json.loads((tmp_path / "out" / "ckpttools-manifest.json").read_text())["parameters"]["format"] == "trtllm"


def test_an_existing_output_is_refused(tmp_path: Path) -> None:
    src = build_drafter(tmp_path / "src")
    (tmp_path / "out").mkdir()
    r = CliRunner().invoke(cli, ["export", str(src), "-o", str(tmp_path / "out"), "--format", "trtllm"])
    assert r.exit_code == 2 and "already exists" in r.stderr
    assert not any((tmp_path / "out").iterdir())


def test_a_fragment_in_the_source_is_written_anew(tmp_path: Path, target8: Path) -> None:
    src = build_drafter(tmp_path / "src")
    (src / FRAGMENT_NAME).write_text("speculative_config: {stale: true}\n")
    export(src, tmp_path / "out", format="trtllm", target=target8)
    assert "stale" not in _fragment(tmp_path / "out") and FRAG["layers"] in _fragment(tmp_path / "out")


def test_d2t_is_built_from_t2d_when_the_source_has_only_that(tmp_path: Path) -> None:
    src = build_drafter(tmp_path / "src")
    only = rewrite(src, tmp_path / "only", drop=("d2t",))
    r = export(only, tmp_path / "o", format="trtllm")
    assert "d2t: built from t2d, as I32" in r.built and ["t2d", r.dropped[-1][1]] in r.dropped
    _assert_d2t(src, tmp_path / "o")
    bare = rewrite(src, tmp_path / "bare", drop=("d2t", "t2d"))
    with pytest.raises(ConfigError, match="no d2t or t2d"):
        export(bare, tmp_path / "ob", format="trtllm")


def test_one_captured_layer_and_a_null_target_hidden_size(tmp_path: Path, target8: Path) -> None:
    one = build_drafter(tmp_path / "one", num_aux=1, aux_layer_ids=(3,))  # TensorRT-LLM builds no fc for it
    with pytest.raises(ExportRejected, match="trtllm.capture_count"):
        export(one, tmp_path / "o1", format="trtllm", target=target8)
    null = build_drafter(tmp_path / "null", config_overrides={"target_hidden_size": None})
    r = export(null, tmp_path / "on", format="trtllm", target=target8)
    assert "target_hidden_size" not in _read(tmp_path / "on")[1] and any(
        "target_hidden_size" in c for c in r.config_changes
    )
