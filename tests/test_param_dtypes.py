"""Each tensor's dtype against what its parameter takes in the release (issue 31), and the config guard
on every path that sizes something from a config: the load plan, validate, the probe."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from ckpttools.demo.tiny import build_drafter, write_tensors
from ckpttools.engines.load_plan import UNCHECKED_DTYPES, load_plan, plan_findings
from ckpttools.engines.releases import ENGINES, FLOAT_DTYPES, KNOWN, TRTLLM_1_2, resolve
from ckpttools.errors import ConfigError
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.ops.validate import validate

RELEASES = [r for rels in (ENGINES["sglang"], ENGINES["vllm"]) for r in rels]
IDS = [r.spec for r in RELEASES]


@pytest.fixture(scope="module")
def drafters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    """{flavor: (headers, config)} of a tiny real drafter of each layout."""
    out = {}
    for flavor in ("sglang", "vllm"):
        d = build_drafter(tmp_path_factory.mktemp(flavor) / "d", flavor)
        with open_checkpoint(d) as ck:
            out[flavor] = ({n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()}, dict(ck.config or {}))
    return out


def _with(headers: dict, suffix: str, dtype: str) -> dict:
    name = next(n for n in headers if n == suffix or n.endswith("." + suffix))
    return {**headers, name: (headers[name][0], dtype)}


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
def test_every_parameter_kind_has_its_dtypes_with_a_source(rel: object) -> None:
    table = rel.param_dtypes  # type: ignore[attr-defined]
    assert table.verified and ".py:" in table.source
    assert set(table.value) == set(rel.init.value)  # type: ignore[attr-defined]
    for kind, (takes, how) in table.value.items():
        assert how and takes
        assert set(takes) == set(FLOAT_DTYPES) if kind != "d2t" else not set(takes) & {*FLOAT_DTYPES, "BOOL"}


def test_trtllm_dtypes_are_an_assumption_said_as_one() -> None:
    """Not read in TensorRT-LLM: the table says so, and assumes only that a weight takes a float."""
    fact = TRTLLM_1_2.param_dtypes
    assert not fact.verified and "not read" in fact.source
    assert all(fact.value[k][0] == FLOAT_DTYPES for k in fact.value if k != "d2t")


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
@pytest.mark.parametrize(
    "suffix, dtype",
    [
        ("lm_head.weight", "I64"),
        ("norm.weight", "BOOL"),
        ("layers.0.post_attention_layernorm.weight", "I8"),
        ("layers.0.self_attn.q_proj.weight", "U8"),
        ("fc.weight", "I32"),
        ("d2t", "F32"),
        ("d2t", "BOOL"),
    ],
)
def test_a_dtype_the_parameter_does_not_take_is_an_error(drafters: dict, rel: object, suffix: str, dtype: str) -> None:
    flavor = "sglang" if rel.name == "sglang" else "vllm"  # type: ignore[attr-defined]
    headers, cfg = drafters[flavor]
    clean = load_plan(headers, cfg, rel)  # type: ignore[arg-type]
    assert clean.dtypes == []
    plan = load_plan(_with(headers, suffix, dtype), cfg, rel)  # type: ignore[arg-type]
    (got,) = plan.dtypes
    assert got["dtype"] == dtype and got["verdict"] == "wrong" and dtype not in got["takes"]
    assert got["tensor"].endswith(suffix) and got["param"]
    (f,) = [f for f in plan_findings(plan) if f["code"] == "tensor_dtype"]
    assert f["severity"] == "error" and dtype in f["message"] and f["consequence"]
    assert plan.to_dict()["dtypes"] == plan.dtypes


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
@pytest.mark.parametrize("dtype", UNCHECKED_DTYPES)
def test_an_8bit_float_weight_is_named_not_passed(drafters: dict, rel: object, dtype: str) -> None:
    flavor = "sglang" if rel.name == "sglang" else "vllm"  # type: ignore[attr-defined]
    headers, cfg = drafters[flavor]
    plan = load_plan(_with(headers, "layers.0.self_attn.o_proj.weight", dtype), cfg, rel)  # type: ignore[arg-type]
    (got,) = plan.dtypes
    assert got["verdict"] == "unchecked"
    (f,) = [f for f in plan_findings(plan) if f["code"] == "tensor_dtype_unchecked"]
    assert f["severity"] == "warning" and "quantized" in f["message"]


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32", "F64"])
def test_any_float_weight_is_taken(drafters: dict, dtype: str) -> None:
    headers, cfg = drafters["sglang"]
    assert load_plan(_with(headers, "lm_head.weight", dtype), cfg, resolve("sglang")).dtypes == []


def test_d2t_integers_follow_each_engine(drafters: dict) -> None:
    """SGLang adds arange(Vd) to d2t (torch has no uint16 + int64); vLLM copies it into an int64 parameter."""
    for dtype in ("I64", "I32", "I16", "I8", "U8"):
        for rel in RELEASES:
            headers, cfg = drafters["sglang" if rel.name == "sglang" else "vllm"]
            assert load_plan(_with(headers, "d2t", dtype), cfg, rel).dtypes == [], (rel.spec, dtype)
    for dtype in ("U16", "U32", "U64"):
        sg = load_plan(_with(drafters["sglang"][0], "d2t", dtype), drafters["sglang"][1], KNOWN["sglang==0.5.17"])
        vl = load_plan(_with(drafters["vllm"][0], "d2t", dtype), drafters["vllm"][1], KNOWN["vllm==0.32"])
        assert [d["verdict"] for d in sg.dtypes] == ["wrong"] and vl.dtypes == []


def _retyped(src: Path, dst: Path, suffix: str, make: object) -> Path:
    with open_checkpoint(src) as ck:
        ts = {n: np.asarray(ck.read(n)).copy() for n in ck.tensors}
        cfg = dict(ck.config or {})
    name = next(n for n in ts if n == suffix or n.endswith("." + suffix))
    ts[name] = make(ts[name].astype(np.float32))  # type: ignore[operator]
    return write_tensors(dst, ts, cfg)


@pytest.mark.parametrize("engine", ["sglang==0.5.17", "sglang==0.5.23", "vllm==0.32", "vllm==0.33"])
def test_validate_says_it_with_and_without_the_load_plan(tmp_path: Path, engine: str) -> None:
    src = build_drafter(tmp_path / "d", "sglang" if engine.startswith("sglang") else "vllm")
    bad = _retyped(src, tmp_path / "x", "lm_head.weight", lambda a: (a * 100).astype(np.int64))
    assert not [f for f in validate(src, engine=engine).findings if f.id.startswith("tensors.dtype")]
    rep = validate(bad, engine=engine)
    (f,) = [f for f in rep.errors if f.id == "tensors.dtype"]
    assert f.location == "lm_head.weight" and "I64" in f.message and not rep.ok
    with_plan = validate(bad, engine=engine, load_plan=True)
    said = [f.id for f in with_plan.findings if "dtype" in f.id]
    assert said == ["tensors.dtype"]  # one verdict: the plan's finding is not said twice
    assert with_plan.load_plan is not None and with_plan.load_plan["dtypes"][0]["dtype"] == "I64"


def test_validate_checks_dtypes_by_name_when_no_plan_is_built(tmp_path: Path) -> None:
    """No drafter class for the architecture: no plan, but a d2t and the weights are still checked by name."""
    src = build_drafter(tmp_path / "d", "sglang", config_overrides={"architectures": ["NoSuchDrafter"]})
    bad = _retyped(src, tmp_path / "x", "norm.weight", lambda a: a > 0)
    rep = validate(bad, engine="sglang")
    assert [f.location for f in rep.findings if f.id == "tensors.dtype"] == ["norm.weight"]


# ------------------------------------------------------------------------------------- the config guard
HUGE = {"num_aux_hidden_states": 1_000_000_000, "fc_norm": True}


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
def test_the_load_plan_goes_through_the_config_guard(drafters: dict, rel: object) -> None:
    headers, cfg = drafters["sglang" if rel.name == "sglang" else "vllm"]  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    plan = load_plan(headers, {**cfg, **HUGE}, rel)  # type: ignore[arg-type]
    assert time.perf_counter() - t0 < 1.0
    assert plan.params == [] and {t.fate for t in plan.tensors} == {"refused"}
    assert "num_aux_hidden_states" in plan.refused[0] and "not a usable config" in plan.refused[0]


def test_a_speculators_config_is_guarded_as_the_engine_flattens_it(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "s", "speculators")
    with open_checkpoint(d) as ck:
        heads = {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()}
        cfg = dict(ck.config or {})
    cfg["transformer_layer_config"] = {**cfg["transformer_layer_config"], **HUGE}
    plan = load_plan(heads, cfg, resolve("vllm"))
    assert plan.params == [] and plan.refused and "$.num_aux_hidden_states" in plan.refused[0]


@pytest.mark.parametrize("load_plan_too", [False, True])
def test_validate_sizes_nothing_from_an_unusable_config(tmp_path: Path, load_plan_too: bool) -> None:
    d = build_drafter(tmp_path / "d", "sglang", fc_norm=True, config_overrides={"num_aux_hidden_states": 10**9})
    t0 = time.perf_counter()
    rep = validate(d, engine="sglang", load_plan=load_plan_too)
    assert time.perf_counter() - t0 < 5.0
    assert not rep.ok and any(f.location == "$.num_aux_hidden_states" for f in rep.errors)


def test_the_probe_goes_through_the_config_guard(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from ckpttools.measuring.probe import MlaAttention, _load_drafter

    d = build_drafter(tmp_path / "d", "sglang", fc_norm=True, config_overrides={"num_aux_hidden_states": 10**9})
    with pytest.raises(ConfigError, match="num_aux_hidden_states"):
        _load_drafter(d, "cpu", None)
    with pytest.raises(ConfigError, match="kv_lora_rank"):
        MlaAttention({"num_attention_heads": 4, "kv_lora_rank": 10**12, "qk_rope_head_dim": 8})
