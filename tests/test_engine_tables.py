"""The engine release tables: resolve()'s syntax and errors, every fact cited, and what differs
between releases, as read from each release's source."""

from __future__ import annotations

import dataclasses
import re

import pytest

from ckpttools.engines import releases as R
from ckpttools.engines.releases import (
    KNOWN,
    SGLANG_0_5_17,
    SGLANG_0_5_23,
    TRTLLM_1_2,
    VLLM_0_32,
    VLLM_0_33,
    Cited,
    EngineRelease,
    release_from_version_string,
    resolve,
)
from ckpttools.errors import ConfigError
from ckpttools.engines import aux_rules, names

ALL = [SGLANG_0_5_17, SGLANG_0_5_23, VLLM_0_32, VLLM_0_33, TRTLLM_1_2]


@pytest.mark.parametrize(
    "spec, want",
    [
        ("sglang", SGLANG_0_5_23),
        ("sglang==0.5.17", SGLANG_0_5_17),
        ("sglang@0.5.17", SGLANG_0_5_17),
        ("sglang@v0.5.23", SGLANG_0_5_23),
        ("sglang==0.5.17.post1", SGLANG_0_5_17),
        ("sglang==0.5.17rc1", SGLANG_0_5_17),
        ("vllm", VLLM_0_33),
        ("vllm==0.32", VLLM_0_32),
        ("vllm==0.32.0", VLLM_0_32),
        ("vllm@0.32.0+cpu", VLLM_0_32),
        ("vllm==0.33.1", VLLM_0_33),
        ("trtllm", TRTLLM_1_2),
        ("trtllm==1.2.1", TRTLLM_1_2),
    ],
)
def test_resolve_syntax(spec: str, want: EngineRelease) -> None:
    assert resolve(spec) is want


@pytest.mark.parametrize(
    "spec",
    [
        "sglang==0.5.18",
        "sglang==0.5.170",
        "sglang==0.5",
        "vllm==0.34",
        "vllm==0.3",
        "llama.cpp",
        "",
        "sglang==",
        "sglang 0.5.17 x",
        "sglang==0.5.17.dev.post.rc.a.b",
    ],
)
def test_resolve_unknown_lists_the_known_ones_with_a_hint(spec: str) -> None:
    with pytest.raises(ConfigError) as e:
        resolve(spec)
    msg = str(e.value)
    assert "known:" in msg
    engine = spec.split("=")[0]
    listed = [s for s in KNOWN if s.startswith(engine + "==")] if engine in R.ENGINES else list(KNOWN)
    for s in listed:
        assert s in msg
    assert e.value.hint and "NAME==VERSION" in e.value.hint
    assert isinstance(e.value, ValueError)


def test_newest_is_the_last_of_each_engine() -> None:
    for name, rels in R.ENGINES.items():
        assert resolve(name) is rels[-1]
        assert [r.name for r in rels] == [name] * len(rels)


@pytest.mark.parametrize(
    "engine, text, want",
    [
        ("sglang", "0.5.17.post1", SGLANG_0_5_17),
        ("sglang", "sglang 0.5.23", SGLANG_0_5_23),
        ("sglang", "Version: 0.5.17", SGLANG_0_5_17),
        ("vllm", "0.32.0+cpu", VLLM_0_32),
        ("vllm", "0.33.0", VLLM_0_33),
    ],
)
def test_release_from_version_string(engine: str, text: str, want: EngineRelease) -> None:
    assert release_from_version_string(engine, text) is want


def test_a_release_nobody_has_read_is_not_assumed() -> None:
    for engine, text in [("sglang", "0.5.18"), ("sglang", "0.6.0"), ("vllm", "0.34.0"), ("vllm", "dev")]:
        with pytest.raises(ConfigError):
            release_from_version_string(engine, text)


_CITE = re.compile(
    r"[\w/.]+\.py(:\d+(-\d+)?|@[0-9a-f]{8})|ckpttools\.(formats|engines)\.|eagle3-facts\.md|not read|none|wheel"
)


@pytest.mark.parametrize("rel", ALL, ids=lambda r: r.spec)
def test_every_fact_has_a_source(rel: EngineRelease) -> None:
    facts = rel.facts()
    assert len(facts) >= 18
    for name, fact in facts.items():
        assert isinstance(fact, Cited), name
        assert fact.source.strip(), f"{rel.spec}.{name} has no source"
        if not fact.verified:
            continue  # an unverified fact says what it was read from instead (or "not read")
        assert _CITE.search(fact.source), f"{rel.spec}.{name}: {fact.source!r} cites no file:line"
        if fact.verified and rel.name != "trtllm" and fact.source not in ("none",):
            assert (
                re.search(r"\.py:\d+", fact.source)
                or "ckpttools.formats." in fact.source
                or "ckpttools.engines." in fact.source
                or "wheel" in fact.source
            ), f"{rel.spec}.{name}: {fact.source!r}"
    for dc in rel.drafter_classes.value:
        assert dc.source and dc.loader in (
            "sglang_llama",
            "sglang_mla",
            "vllm_llama",
            "vllm_qwen3",
            "vllm_mla",
            "trtllm_eagle3",
            "unmodelled",
        )
    for rules in rel.loaders.value.values():
        assert rules.source


def test_trtllm_is_marked_unverified() -> None:
    assert not TRTLLM_1_2.loaders.verified
    assert all(not dc.verified for dc in TRTLLM_1_2.drafter_classes.value)
    assert "1.2.1" in TRTLLM_1_2.read_from


def test_sglang_0_5_23_meta_info_differs() -> None:
    old = set(SGLANG_0_5_17.acceptance_fields.value)
    new = set(SGLANG_0_5_23.acceptance_fields.value)
    gone = {"spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_histogram"}
    assert gone <= old and not gone & new
    assert {"spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_correct_drafts_histogram"} <= new
    assert set(SGLANG_0_5_23.acceptance_fields_removed.value) == gone
    assert "tokenizer_manager.py:2794-2810" in SGLANG_0_5_17.acceptance_fields.source
    assert "tokenizer_manager.py:3150-3207" in SGLANG_0_5_23.acceptance_fields.source


def test_sglang_0_5_23_weight_update_sessions() -> None:
    assert "/begin_weight_update" not in SGLANG_0_5_17.weight_update.value
    assert {"/begin_weight_update", "/end_weight_update", "/weights_checker"} <= set(SGLANG_0_5_23.weight_update.value)
    assert "weight_updater.py:71-77" in SGLANG_0_5_23.weight_update.source
    assert "io_struct.py:2197-2223" in SGLANG_0_5_23.weight_update.source


def test_context_rules() -> None:
    for rel in (SGLANG_0_5_17, SGLANG_0_5_23):
        assert rel.context_rule.value.startswith("refuse")
        assert rel.context_override.value == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    assert VLLM_0_32.context_rule.value.startswith("raise")
    assert "speculative.py:1677-1709" in VLLM_0_32.context_rule.source
    assert VLLM_0_32.context_override.value is None
    assert "rope" in VLLM_0_33.context_rule.value  # 0.33 raises it only for rope types that size the cache alone


def _uncited(rules: R.LoaderRules) -> R.LoaderRules:
    return dataclasses.replace(rules, source="", derived=tuple((n, f, "") for n, f, _ in rules.derived))


def test_vllm_0_33_is_0_32_with_medusa_and_mlp_speculator_dropped() -> None:
    assert VLLM_0_33.drafter_classes.value == VLLM_0_32.drafter_classes.value
    # the same rules; 0.33's MLA rules cite 0.33's own mla_attention.py lines
    assert {k: _uncited(v) for k, v in VLLM_0_33.loaders.value.items()} == {
        k: _uncited(v) for k, v in VLLM_0_32.loaders.value.items()
    }
    assert set(VLLM_0_33.dropped_methods.value) == {"medusa", "mlp_speculator"}
    assert VLLM_0_32.dropped_methods.value == ()
    assert "per-request-spec-decode-metrics" in VLLM_0_32.launch_flags.value
    assert "protocol.py:100-129" in VLLM_0_32.acceptance_fields.source


def test_sglang_tables_reuse_the_formats_data() -> None:
    for rel in (SGLANG_0_5_17, SGLANG_0_5_23):
        assert rel.aux_rules.value is aux_rules.RULES
        assert rel.later_layer_norm.value == aux_rules.LATER_LAYER_NORM["sglang"][0] == "hidden_norm"
    assert SGLANG_0_5_17.name_patterns.value is names.SGLANG_NAME_PATTERNS
    assert VLLM_0_32.aux_rules.value is aux_rules.VLLM
    assert VLLM_0_32.later_layer_norm.value == "input_layernorm"
    assert "0.5.17" in SGLANG_0_5_23.aux_rules.source and "llama.py:929" in SGLANG_0_5_23.aux_rules.source


def test_drafter_classes() -> None:
    for rel in (SGLANG_0_5_17, SGLANG_0_5_23):
        assert rel.drafter_class("LlamaForCausalLMEagle3").cls == "LlamaForCausalLMEagle3"  # type: ignore[union-attr]
        assert rel.drafter_class("Eagle3DeepseekV2ForCausalLM").loader == "sglang_mla"  # type: ignore[union-attr]
        assert rel.drafter_class("LlamaForCausalLM") is None
        assert rel.drafter_class("Eagle3LlamaForCausalLM") is None
    for rel in (VLLM_0_32, VLLM_0_33):
        for arch in ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "LlamaForCausalLM"):
            assert rel.drafter_class(arch).cls == "Eagle3LlamaForCausalLM"  # type: ignore[union-attr]
        assert rel.drafter_class("Eagle3Qwen3ForCausalLM").loader == "vllm_qwen3"  # type: ignore[union-attr]
        for arch in ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"):
            dc = rel.drafter_class(arch)
            assert dc is not None and dc.cls == "Eagle3DeepseekV2ForCausalLM" and dc.loader == "vllm_mla"
        mla = rel.loaders.value["vllm_mla"]
        assert (".fused_qkv_a_proj", ".q_a_proj", "0") in mla.stacked and mla.unknown == "refused"
        assert {d[0] for d in mla.derived} == {
            ".self_attn.mla_attn.mla_attn.W_UV",
            ".self_attn.mla_attn.mla_attn.W_UK_T",
        }
        assert "deepseek_eagle3.py:" in mla.source
    old, new = (r.loaders.value["vllm_mla"] for r in (VLLM_0_32, VLLM_0_33))
    assert ", 1325;" in old.derived[0][2] and "1347" not in old.derived[0][2] and ", 1347;" in new.derived[0][2]


def test_flags_are_spelled_for_the_command_line() -> None:
    assert "--speculative-algorithm" in SGLANG_0_5_23.flags()
    assert VLLM_0_33.flags()[0] == "--speculative-config"


def test_the_next_release_is_one_replace() -> None:
    nxt = dataclasses.replace(SGLANG_0_5_23, version="0.5.24", date="2026-12")
    assert nxt.spec == "sglang==0.5.24" and nxt.loaders is SGLANG_0_5_23.loaders
    with pytest.raises(dataclasses.FrozenInstanceError):
        nxt.version = "x"  # type: ignore[misc]
