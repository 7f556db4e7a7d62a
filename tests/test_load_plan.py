"""Load plans: what each engine release builds from tiny drafters of every layout, read through
open_checkpoint, and the silent outcomes (dropped, left at init, overwritten) as findings."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckpttools.demo.tiny import DRAFTER_FLAVORS, build_drafter, build_known_pair, write_tensors
from ckpttools.engines.load_plan import FATES, SOURCES, LoadPlan, load_plan, plan_findings
from ckpttools.engines.releases import KNOWN, SGLANG_0_5_17, SGLANG_0_5_23, VLLM_0_32, VLLM_0_33, resolve
from ckpttools.io.checkpoint import open_checkpoint

Headers = dict[str, tuple[list[int], str]]


def _read(path: Path) -> tuple[Headers, dict[str, Any]]:
    with open_checkpoint(path) as ck:
        return {n: (list(e.shape), e.dtype) for n, e in ck.tensors.items()}, dict(ck.config or {})


def _rewrite(
    src: Path,
    out: Path,
    rename: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    config: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Path:
    """A copy of a checkpoint with tensors renamed or left out and the config edited."""
    with open_checkpoint(src) as ck:
        arrays = {(rename or {}).get(n, n): ck.read(n) for n in ck.tensors if n not in drop}
        cfg = dict(ck.config or {})
    return write_tensors(out, arrays, config(cfg) if config else cfg)


def _plan(path: Path, spec: str) -> LoadPlan:
    headers, cfg = _read(path)
    return load_plan(headers, cfg, resolve(spec))


def _codes(plan: LoadPlan, severity: str = "error") -> list[str]:
    return [f["code"] for f in plan_findings(plan) if f["severity"] == severity]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plans")


@pytest.fixture(scope="module")
def mislabelled(root: Path) -> Path:
    """SGLang layout, two layers, labelled LlamaForCausalLMEagle3, whose layer 1 kept vLLM's norm name."""
    good = build_drafter(root / "two", "sglang", num_layers=2)
    return _rewrite(
        good, root / "mislabelled", rename={"layers.1.hidden_norm.weight": "layers.1.input_layernorm.weight"}
    )


# ------------------------------------------------------------------------------------------------
# the JSON shape


@pytest.mark.parametrize("flavor", DRAFTER_FLAVORS)
@pytest.mark.parametrize("spec", list(KNOWN))
def test_plan_shape_for_every_flavor_and_release(root: Path, flavor: str, spec: str) -> None:
    path = root / f"shape-{flavor}"
    if not path.exists():
        build_drafter(path, flavor)
    headers, cfg = _read(path)
    before = copy.deepcopy(cfg)
    d = load_plan(headers, cfg, resolve(spec)).to_dict()
    assert cfg == before  # a pure function: the config is not touched
    json.dumps(d)
    name, _, version = spec.partition("==")
    assert d["engine"] == {"name": name, "release": version}
    assert set(d) >= {"engine", "class", "tensors", "params"}
    if d["class"] is not None and d["params"]:
        assert sorted(t["name"] for t in d["tensors"]) == sorted(headers)
    for t in d["tensors"]:
        assert t["fate"] in FATES
        if t["fate"] in ("loaded", "renamed"):
            assert t["param"]
    for p in d["params"]:
        assert p["source"] in SOURCES
        assert ("init" in p) == (p["source"] == "init"), p


# ------------------------------------------------------------------------------------------------
# clean drafters load clean


@pytest.mark.parametrize("spec", ["sglang==0.5.17", "sglang==0.5.23"])
def test_sglang_layout_under_sglang(root: Path, spec: str) -> None:
    plan = _plan(build_drafter(root / f"sg-{spec}", "sglang"), spec)
    assert plan.cls == "LlamaForCausalLMEagle3"
    assert plan.tensor("layers.0.self_attn.q_proj.weight").param == "model.layers.0.self_attn.qkv_proj.weight"
    assert plan.tensor("layers.0.self_attn.q_proj.weight").shard == "q"
    assert plan.tensor("d2t").fate == "renamed" and plan.tensor("d2t").param == "hot_token_id"
    assert plan.tensor("t2d").fate == "dropped"
    assert plan.param("model.embed_tokens.weight").source == "shared"
    assert plan.param("lm_head.weight").source == "file"
    assert plan.param("model.layers.0.self_attn.qkv_proj.weight").source == "file"
    assert _codes(plan) == [] and _codes(plan, "warning") == []


@pytest.mark.parametrize("spec", ["vllm==0.32", "vllm==0.33"])
def test_vllm_layout_under_vllm(root: Path, spec: str) -> None:
    plan = _plan(build_drafter(root / f"vl-{spec}", "vllm", num_layers=2), spec)
    assert plan.cls == "Eagle3LlamaForCausalLM"
    assert plan.tensor("d2t").param == "draft_id_to_target_id"
    assert plan.param("model.layers.1.input_layernorm.weight").source == "file"
    assert not plan.param("model.layers.1.hidden_norm.weight").used
    assert plan.param("model.embed_tokens.weight").source == "shared"
    assert plan.param("lm_head.weight").source == "file"
    assert _codes(plan) == [], plan_findings(plan)
    # the layout keeps layer 1's hidden_norm too: loaded where nothing reads it, next to the norm that is read
    assert plan.tensor("layers.1.hidden_norm.weight").fate == "dropped"
    assert _codes(plan, "warning") == ["tensor_dropped"]


def test_official_eagle_release(root: Path) -> None:
    path = build_drafter(root / "eagle", "eagle")
    sg = _plan(path, "sglang==0.5.17")
    assert sg.cls is None and sg.refused and "load_refused" in _codes(sg)
    vl = _plan(path, "vllm==0.32")
    assert vl.cls == "Eagle3LlamaForCausalLM"
    t = vl.tensor("midlayer.self_attn.q_proj.weight")
    assert (
        t.fate == "renamed" and t.param == "model.layers.0.self_attn.qkv_proj.weight" and "midlayer" in (t.rule or "")
    )
    assert _codes(vl) == []


def test_training_layout(root: Path) -> None:
    path = build_drafter(root / "training", "training")
    sg = _plan(path, "sglang==0.5.17")
    assert sg.tensor("model.fc.weight").param == "model.fc.weight"
    assert sg.tensor("model.layers.0.self_attn.rotary_emb.inv_freq").fate == "dropped"
    assert _codes(sg) == [] and "tensor_dropped" in _codes(sg, "info")
    assert sg.param("model.embed_tokens.weight").source == "overwritten"  # the target's replaces it
    assert {c["to"] for c in sg.casts} == {"float16"}  # float32 is served as float16
    vl = _plan(path, "vllm==0.32")  # vLLM adds model. again: model.model.* has no parameter
    assert vl.tensor("model.fc.weight").fate == "refused" and vl.refused


def test_mla_drafter(root: Path) -> None:
    path = build_drafter(root / "mla", "mla")
    sg = _plan(path, "sglang==0.5.23")
    assert sg.cls == "Eagle3DeepseekV2ForCausalLM"
    fused = "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"
    assert sg.tensor("layers.0.self_attn.q_a_proj.weight").param == fused
    assert sg.param(fused).source == "file"
    assert _codes(sg) == []
    lone = _plan(_rewrite(path, root / "mla-lone", drop=("layers.0.self_attn.kv_a_proj_with_mqa.weight",)), "sglang")
    assert lone.tensor("layers.0.self_attn.q_a_proj.weight").fate == "dropped"
    assert lone.param(fused).source == "init"
    vl = _plan(path, "vllm")
    assert vl.cls == "Eagle3DeepseekV2ForCausalLM" and vl.verified and _codes(vl) == []


def _fates(plan: LoadPlan) -> dict[str, tuple[str, str | None, str | None]]:
    return {t.name: (t.fate, t.param, t.shard) for t in plan.tensors}


def _sources(plan: LoadPlan) -> dict[str, tuple[str, str | None]]:
    return {p["name"]: (p["source"], p.get("init") or p.get("derived_from")) for p in plan.to_dict()["params"]}


@pytest.mark.parametrize("spec", ["vllm==0.32", "vllm==0.33"])
def test_vllm_mla_plan_of_a_tiny_mla_drafter(root: Path, spec: str) -> None:
    """vLLM's MLA drafter (deepseek_eagle3.py): q_a_proj and kv_a_proj_with_mqa stacked into
    fused_qkv_a_proj, gate/up into gate_up_proj, model. in front, d2t renamed, t2d skipped;
    embed_tokens shared with the target; W_UV and W_UK_T split from kv_b_proj after loading."""
    path = build_drafter(root / f"vl-mla-{spec}", "mla")
    plan = _plan(path, spec)
    a, m = "model.layers.0.self_attn.", "model.layers.0.mlp."
    assert plan.cls == "Eagle3DeepseekV2ForCausalLM" and plan.verified and not plan.refused
    assert _fates(plan) == {
        "fc.weight": ("loaded", "model.fc.weight", None),
        "layers.0.self_attn.q_a_proj.weight": ("loaded", a + "fused_qkv_a_proj.weight", "0"),
        "layers.0.self_attn.kv_a_proj_with_mqa.weight": ("loaded", a + "fused_qkv_a_proj.weight", "1"),
        "layers.0.self_attn.q_a_layernorm.weight": ("loaded", a + "q_a_layernorm.weight", None),
        "layers.0.self_attn.q_b_proj.weight": ("loaded", a + "q_b_proj.weight", None),
        "layers.0.self_attn.kv_a_layernorm.weight": ("loaded", a + "kv_a_layernorm.weight", None),
        "layers.0.self_attn.kv_b_proj.weight": ("loaded", a + "kv_b_proj.weight", None),
        "layers.0.self_attn.o_proj.weight": ("loaded", a + "o_proj.weight", None),
        "layers.0.mlp.gate_proj.weight": ("loaded", m + "gate_up_proj.weight", "0"),
        "layers.0.mlp.up_proj.weight": ("loaded", m + "gate_up_proj.weight", "1"),
        "layers.0.mlp.down_proj.weight": ("loaded", m + "down_proj.weight", None),
        "layers.0.input_layernorm.weight": ("loaded", "model.layers.0.input_layernorm.weight", None),
        "layers.0.hidden_norm.weight": ("loaded", "model.layers.0.hidden_norm.weight", None),
        "layers.0.post_attention_layernorm.weight": ("loaded", "model.layers.0.post_attention_layernorm.weight", None),
        "norm.weight": ("loaded", "model.norm.weight", None),
        "lm_head.weight": ("loaded", "lm_head.weight", None),
        "d2t": ("renamed", "draft_id_to_target_id", None),
        "t2d": ("dropped", None, None),
    }
    kvb = a + "kv_b_proj.weight"
    file_params = [a + n + ".weight" for n in ("fused_qkv_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_layernorm")]
    file_params += [kvb, a + "o_proj.weight", m + "gate_up_proj.weight", m + "down_proj.weight", "model.fc.weight"]
    file_params += [
        f"model.layers.0.{n}.weight" for n in ("input_layernorm", "post_attention_layernorm", "hidden_norm")
    ]
    assert _sources(plan) == {
        "model.embed_tokens.weight": ("shared", None),
        **{n: ("file", None) for n in file_params},
        "model.norm.weight": ("file", None),
        "lm_head.weight": ("file", None),
        "draft_id_to_target_id": ("file", None),
        a + "mla_attn.mla_attn.W_UV": ("overwritten", kvb),
        a + "mla_attn.mla_attn.W_UK_T": ("overwritten", kvb),
    }
    assert _codes(plan) == [] and _codes(plan, "warning") == []


def test_vllm_mla_plan_of_broken_mla_drafters(root: Path) -> None:
    """A lone q_a_proj leaves fused_qkv_a_proj's second shard at init (vLLM loads each shard on
    its own); no d2t leaves the map at zeros; q_lora_rank null builds kv_a_proj_with_mqa, which
    the loader's stacking still sends to fused_qkv_a_proj: the load raises; an input_norm (the
    class has none) raises; a bias is ignored; a second layer's hidden_norm is never read."""
    path = build_drafter(root / "vl-mla-broken", "mla")
    kva = "layers.0.self_attn.kv_a_proj_with_mqa.weight"
    lone = _plan(_rewrite(path, root / "vl-mla-lone", drop=(kva, "d2t")), "vllm==0.32")
    fused = lone.param("model.layers.0.self_attn.fused_qkv_a_proj.weight")
    assert fused.source == "file" and "shards 1" in (fused.reason or "")
    assert lone.param("draft_id_to_target_id").source == "init" and lone.param("draft_id_to_target_id").init
    assert {"param_partly_init"} <= set(_codes(lone)) and "param_at_init" in _codes(lone, "warning")
    null_q = _plan(_rewrite(path, root / "vl-mla-nullq", config=lambda c: {**c, "q_lora_rank": None}), "vllm==0.32")
    assert null_q.tensor(kva).fate == "refused" and null_q.refused
    assert null_q.tensor("layers.0.self_attn.q_a_proj.weight").fate == "refused"  # no q_a_proj without q_lora_rank
    with open_checkpoint(path) as ck:
        arrays = {n: ck.read(n) for n in ck.tensors}
        cfg = dict(ck.config or {})
    w = arrays["norm.weight"]
    extra = write_tensors(root / "vl-mla-extra", {**arrays, "input_norm.weight": w, "fc.bias": w[:1]}, cfg)
    ex = _plan(extra, "vllm==0.32")
    assert ex.tensor("input_norm.weight").fate == "refused" and ex.tensor("fc.bias").fate == "dropped"
    two = {**arrays, **{k.replace("layers.0.", "layers.1."): v for k, v in arrays.items() if k.startswith("layers.0.")}}
    p2 = _plan(write_tensors(root / "vl-mla-two", two, {**cfg, "num_hidden_layers": 2}), "vllm==0.32")
    assert not p2.refused and not p2.param("model.layers.1.hidden_norm.weight").used
    assert p2.tensor("layers.1.hidden_norm.weight").fate == "dropped"
    assert len([p for p in p2.params if p.derived_from]) == 4


def test_modelopt_and_speculators(root: Path) -> None:
    mo = _plan(build_drafter(root / "modelopt", "modelopt"), "sglang")
    assert mo.param("hot_token_id").source == "file" and _codes(mo) == []
    spec = build_drafter(root / "speculators", "speculators")
    assert _plan(spec, "vllm").cls == "Eagle3LlamaForCausalLM"
    assert _codes(_plan(spec, "vllm")) == []
    assert _plan(spec, "sglang").cls is None


# ------------------------------------------------------------------------------------------------
# the mislabelled two-layer drafter (seen on SGLang 0.5.17: no warning, 2 of 135 accepted)


@pytest.mark.parametrize("rel", [SGLANG_0_5_17, SGLANG_0_5_23], ids=lambda r: r.spec)
def test_mislabelled_two_layer_drafter_under_sglang(mislabelled: Path, rel: Any) -> None:
    headers, cfg = _read(mislabelled)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and "layers.1.hidden_norm.weight" not in headers
    plan = load_plan(headers, cfg, rel)
    t = plan.tensor("layers.1.input_layernorm.weight")
    assert t.fate == "dropped"
    assert t.param == "model.layers.1.input_layernorm.weight" and "never reads" in (t.reason or "")
    p = plan.param("model.layers.1.hidden_norm.weight")
    assert p.source == "init" and p.init == "ones"
    found = {(f["code"], f.get("tensor") or f.get("param")): f for f in plan_findings(plan)}
    drop = found[("tensor_dropped", "layers.1.input_layernorm.weight")]
    assert drop["severity"] == "error"
    assert "model.layers.1.hidden_norm.weight" in drop["consequence"] and "ones" in drop["consequence"]
    assert "garbage" in drop["consequence"]
    init = found[("param_at_init", "model.layers.1.hidden_norm.weight")]
    assert init["init"] == "ones" and init["severity"] == "error"
    d = plan.to_dict()
    assert {"name": "layers.1.input_layernorm.weight", "fate": "dropped"}.items() <= d["tensors"][
        [x["name"] for x in d["tensors"]].index("layers.1.input_layernorm.weight")
    ].items()


def test_the_same_drafter_is_right_for_vllm(mislabelled: Path) -> None:
    """vLLM's later layers read input_layernorm: the name is vLLM's, and vLLM loads it where it is read."""
    plan = _plan(mislabelled, "vllm==0.32")
    assert plan.tensor("layers.1.input_layernorm.weight").fate == "loaded"
    assert plan.param("model.layers.1.input_layernorm.weight").source == "file"
    assert _codes(plan) == []


def test_known_pair_two_layers(root: Path) -> None:
    _, drafter = build_known_pair(root / "pair2", drafter_layers=2)
    sg = _plan(drafter, "sglang==0.5.17")
    assert _codes(sg) == []
    vl = _plan(drafter, "vllm==0.32")  # SGLang's layout read by vLLM: the mirror image of the mislabelled case
    assert vl.tensor("layers.1.hidden_norm.weight").fate == "dropped"
    assert vl.param("model.layers.1.input_layernorm.weight").source == "init"
    assert "tensor_dropped" in _codes(vl) and "param_at_init" in _codes(vl)


# ------------------------------------------------------------------------------------------------
# options, switches, sharing


def test_qk_norm(root: Path) -> None:
    path = build_drafter(root / "qk", "sglang", qk_norm=True)
    sg = _plan(path, "sglang")
    assert sg.tensor("layers.0.self_attn.q_norm.weight").fate == "dropped"
    assert [s["option"] for s in sg.switches] == ["qk_norm"]
    qwen = _rewrite(path, root / "qk-qwen3", config=lambda c: {**c, "architectures": ["Eagle3Qwen3ForCausalLM"]})
    vl = _plan(qwen, "vllm==0.33")
    assert vl.cls == "Eagle3Qwen3ForCausalLM"
    assert vl.tensor("layers.0.self_attn.q_norm.weight").param == "model.layers.0.self_attn.q_norm.weight"
    assert vl.switches == [] and _codes(vl) == []
    assert _plan(path, "vllm").tensor("layers.0.self_attn.q_norm.weight").fate == "refused"


def test_eagle31_options_on_and_matching(root: Path) -> None:
    path = build_drafter(root / "e31", "sglang", fc_norm=True, norm_before_fc=True, norm_output=True)
    for spec in ("sglang==0.5.17", "sglang==0.5.23", "vllm==0.32"):
        plan = _plan(path, spec)
        assert plan.param("model.fc_norm.0.weight").source == "file", spec
        assert plan.param("model.input_norm.weight").source == "file", spec
        assert plan.switches == [] and _codes(plan) == [], spec


def test_eagle31_weights_with_the_switch_off(root: Path) -> None:
    path = build_drafter(root / "e31-on", "sglang", fc_norm=True, norm_before_fc=True)
    off = _rewrite(
        path, root / "e31-off", config=lambda c: {k: v for k, v in c.items() if k not in ("fc_norm", "norm_before_fc")}
    )
    sg = _plan(off, "sglang==0.5.17")
    assert sg.tensor("fc_norm.0.weight").fate == "dropped" and sg.tensor("input_norm.weight").fate == "dropped"
    assert {s["option"] for s in sg.switches} == {"fc_norm", "norm_before_fc"}
    assert "tensor_dropped" in _codes(sg)
    vl = _plan(off, "vllm==0.32")
    assert vl.tensor("input_norm.weight").fate == "dropped"  # mapped to nothing when norm_before_fc is off
    assert vl.tensor("fc_norm.0.weight").fate == "refused"  # no module named fc_norm: the load fails


def test_switch_on_without_weights(root: Path) -> None:
    path = build_drafter(root / "flag-only", "sglang", config_overrides={"fc_norm": True})
    plan = _plan(path, "sglang")
    assert plan.param("model.fc_norm.0.weight").source == "init"
    assert plan.param("model.fc_norm.0.weight").init == "ones"
    assert [s["option"] for s in plan.switches] == ["fc_norm"]


def test_missing_lm_head(root: Path) -> None:
    path = _rewrite(build_drafter(root / "head", "sglang"), root / "no-head", drop=("lm_head.weight",))
    sg = _plan(path, "sglang==0.5.17")
    assert sg.param("lm_head.weight").source == "init"
    assert "uninitialized" in (sg.param("lm_head.weight").init or "")
    assert any(f["code"] == "param_at_init" and f["param"] == "lm_head.weight" for f in plan_findings(sg))
    assert _plan(path, "vllm==0.32").param("lm_head.weight").source == "shared"


def test_full_vocab_head_is_replaced_by_the_targets(root: Path) -> None:
    plan = _plan(build_drafter(root / "full", "sglang", draft_vocab_size=None), "sglang==0.5.23")
    assert plan.param("lm_head.weight").source == "overwritten"
    assert plan.param("hot_token_id").source == "init"
    assert "param_overwritten" in _codes(plan, "warning")


def test_own_embedding(root: Path) -> None:
    path = build_drafter(root / "embed", "sglang", embed_tokens=True)
    assert _plan(path, "sglang").param("model.embed_tokens.weight").source == "overwritten"
    assert _plan(path, "vllm").param("model.embed_tokens.weight").source == "file"
    wide = build_drafter(root / "embed-wide", "sglang", embed_tokens=True, target_hidden_size=128)
    assert _plan(wide, "sglang").param("model.embed_tokens.weight").source == "file"


def test_missing_d2t_in_vllm_starts_at_zeros(root: Path) -> None:
    path = _rewrite(build_drafter(root / "d2t", "sglang"), root / "no-d2t", drop=("d2t", "t2d"))
    plan = _plan(path, "vllm==0.33")
    p = plan.param("draft_id_to_target_id")
    assert p.source == "init" and p.init and p.init.startswith("zeros")
    assert any(f["param"] == "draft_id_to_target_id" for f in plan_findings(plan) if f["code"] == "param_at_init")
    sg = _plan(path, "sglang==0.5.17")
    assert sg.param("hot_token_id").source == "init"


def test_releases_agree_where_the_code_is_the_same(root: Path) -> None:
    path = build_drafter(root / "same", "sglang", num_layers=2, fc_norm=True)
    for a, b in ((SGLANG_0_5_17, SGLANG_0_5_23), (VLLM_0_32, VLLM_0_33)):
        headers, cfg = _read(path)
        pa, pb = load_plan(headers, cfg, a).to_dict(), load_plan(headers, cfg, b).to_dict()
        assert pa["tensors"] == pb["tensors"] and pa["params"] == pb["params"]


def test_trtllm_plan_is_marked_unverified(root: Path) -> None:
    plan = _plan(build_drafter(root / "trt", "sglang"), "trtllm")
    assert plan.cls == "Eagle3ForCausalLM" and not plan.verified
    assert plan.tensor("layers.0.self_attn.q_proj.weight").param == "model.midlayer.self_attn.qkv_proj.weight"
    assert plan.casts == [{"tensor": "d2t", "param": "model.d2t", "from": "I64", "to": "int32"}]
