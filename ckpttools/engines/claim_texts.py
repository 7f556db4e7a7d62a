"""The claim texts: what each engine release does, in the words validate, export, fix and the
probe say it, each a template with the source (file:line) it was read from.

Plain data, below the release tables: :mod:`ckpttools.engines.releases` holds these in each
release's ``claims`` (a newer release inherits the older's and replaces what changed), and
:func:`ckpttools.engines.claims.claim` fills a template in for the release being applied.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "SGLANG_CLAIMS",
    "VLLM_CLAIMS",
    "VLLM_AMX_MLA_CHECKS",
    "VLLM_CPU_ATTN_HEAD_SIZES",
    "vllm_amx_mla_claims",
    "vllm_cpu_attn_claims",
]

_SG = "sglang/srt/"
_VL = "vllm/"
#: transformers' config reader (5.19.0, what vllm-cpu 0.32.0 installs): the text is json.loads-ed as read, a
#: byte-order mark included (observed: "It looks like the config file at ... is not a valid JSON file")
_TF_JSON = "5.19.0 configuration_utils.py:988-991 (json.loads of the text as read; observed)"

#: SGLang 0.5.17's claims (paths under sglang/srt/); "seen" marks what was observed on a GPU run
SGLANG_CLAIMS: Mapping[str, tuple[str, str]] = {
    "config.bom": (
        "{sglang} reads config.json through transformers, whose reader refuses a leading byte-order mark "
        '("not a valid JSON file"): the server cannot start',
        _SG + "utils/hf_transformers/config.py:86 (AutoConfig.from_pretrained); transformers " + _TF_JSON,
    ),
    "arch.plain_llama": (
        "SGLang builds a plain Llama for it, not its EAGLE-3 class, and dies loading lm_head "
        "(seen on {sglang}: AssertionError: self.org_vocab_size=... loaded_weight.shape[output_dim]=...)",
        "seen on the H200 (sglang 0.5.17)",
    ),
    "arch.vllm_name": (
        "this is vLLM's (and AngelSlim's) name: vLLM loads it, but SGLang has no EAGLE-3 class under it "
        "and will not build {llama}",
        _SG + "models/registry.py (no class of that name); models/llama_eagle3.py:283",
    ),
    "arch.speculators": (
        "this is the vllm-project/speculators format (nested config): vLLM loads it, SGLang does not",
        _SG + "models/registry.py (no class of that name)",
    ),
    "arch.mla_fields": (
        " (the config has MLA fields, kv_lora_rank and qk_rope_head_dim: SGLang's MLA drafter class is "
        "{mla}, sglang/srt/models/kimi_k25_eagle3.py:314 and 520)",
        _SG + "models/kimi_k25_eagle3.py:314, 520",
    ),
    "norms.vllm_later": (
        "; its layers after the first keep vLLM's norm (input_layernorm) where SGLang reads hidden_norm "
        "({source}): renaming the class alone loads without a warning and drafts garbage (seen on {sglang}); "
        "ckpt export moves the norms",
        _SG + "models/llama_eagle3.py:95-97; seen on the H200 (2 of 135 drafts accepted)",
    ),
    "mla.q_lora_null": (
        "q_lora_rank is null: {sglang}'s MLA drafter widens the q down-projection and refuses to "
        'load without one ("Eagle3 MLA layer requires q_lora_rank in the draft config", '
        "kimi_k25_eagle3.py:113-116); {vllm} takes null (deepseek_eagle3.py:76)",
        _SG + "models/kimi_k25_eagle3.py:113-116; vllm/model_executor/models/deepseek_eagle3.py:76",
    ),
    "mla.layers": (
        "num_hidden_layers is {n}: {sglang}'s MLA drafter has one layer and refuses any other count "
        '("EAGLE3 currently only supports 1 layer", kimi_k25_eagle3.py:242-243)',
        _SG + "models/kimi_k25_eagle3.py:242-243",
    ),
    "mla.draft_vocab_missing": (
        "draft_vocab_size is missing: SGLang's MLA drafter reads it with getattr and then serves a "
        "full-vocabulary head taken from the target ({sglang}: sglang/srt/models/kimi_k25_eagle3.py:345-355)",
        _SG + "models/kimi_k25_eagle3.py:345-355",
    ),
    "qk_norm": (
        "{sglang} has no EAGLE-3 class with these norms: it drops them and computes attention without them",
        _SG + "models/ (no qwen3 EAGLE-3 drafter; llama_eagle3.py load_weights skips unknown names)",
    ),
    "missing.norm": (
        "expected tensor is missing: {sglang} starts this norm at ones (RMSNorm's initial weight, "
        "sglang/srt/layers/layernorm.py:376), not the trained values, and says nothing",
        _SG + "layers/layernorm.py:376",
    ),
    "missing.fc": (
        "expected tensor is missing: {sglang} keeps torch.nn.Linear's random init (llama_eagle3.py:155)",
        _SG + "models/llama_eagle3.py:155",
    ),
    "missing.other": (
        "expected tensor is missing: {sglang} leaves the weight as allocated, uninitialised memory "
        "(torch.empty, sglang/srt/layers/quantization/unquant.py:141-160), and says nothing",
        _SG + "layers/quantization/unquant.py:141-160",
    ),
    "aux.crash": (
        'so {sglang} crashes on the first forward ("captured {got} of {want} aux '
        'hidden states", sglang/srt/layers/aux_hidden_states.py:44-48; seen on the GPU)',
        _SG + "layers/aux_hidden_states.py:44-48; seen on the H200",
    ),
    "context.refuse": (
        "{sglang} refuses to launch (\"Target model's context_length ({tctx}) is greater than "
        'the derived context_length ({dctx})", sglang/srt/configs/model_config.py:771-791), and past '
        "{dctx:,} tokens acceptance drops",
        _SG + "configs/model_config.py:771-791",
    ),
    "context.override": (
        "or launch with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, SGLang's own override, which raises the "
        "drafter's max_position_embeddings to the target's at load (model_config.py:778-787)",
        _SG + "configs/model_config.py:778-787",
    ),
    "dtype.crash": (
        "under --dtype auto SGLang crashes at the drafter's fc on the first request "
        '("expected mat1 and mat2 to have the same dtype")',
        "seen on the H200 (sglang 0.5.17, --dtype auto: the drafter runs in its own torch_dtype)",
    ),
    "kv_pool": (
        "{sglang} sizes one token count for both pools from the target's per-layer KV",
        "sglang 0.5.17: model_executor/pool_configurator.py:147-163 (the target's per-token KV scaled by "
        "1 + draft layers / target layers, assuming equal per-layer KV), 200-212 (MLA: kv_lora_rank + "
        "qk_rope_head_dim per layer), 290-296 (MHA: kv heads x (head_dim + v_head_dim) per layer); "
        "mem_cache/kv_cache_configurator.py:241-245 (the draft worker reuses the target's token count), "
        "1690-1705 (--max-total-tokens caps it)",
    ),
    "mla_probe": (
        "DeepSeek-V2 multi-latent attention as {sglang} computes it in the MLA drafter",
        _SG + "models/kimi_k25_eagle3.py:77-110 (attention over [embedding; hidden]), 88-141 (the layer)",
    ),
    "export.qk_norm": (
        "{sglang} has no EAGLE-3 class with q_norm/k_norm and would drop them",
        _SG + "models/ (no qwen3 EAGLE-3 drafter)",
    ),
    "export.qk_norm_hint": (
        "export it for vLLM, which serves it as {qwen3}",
        "vllm/model_executor/models/registry.py:665",
    ),
    "mla_latent": (
        "{sglang}'s triton MLA decode kernel has blocks for latent + rope widths 288 and 576 only; others fail "
        "to compile",
        _SG + "kernels/ops/attention/decode_attention.py:638-646",
    ),
    "logs.no_version": (
        "SGLang logs no version line ({sglang}: entrypoints/engine.py:237 logs server_args only)",
        _SG + "entrypoints/engine.py:237",
    ),
}

#: the attention head sizes vLLM's CPU attention backend (CPU_ATTN) serves: vllm-cpu 0.32.0,
#: v1/attention/backends/cpu_attn.py:68-70 (``get_supported_head_sizes``); any other size is refused by
#: its C++ kernel dispatch ("Unsupported CPU attention configuration: head_dim=", in _C.abi3.so)
VLLM_CPU_ATTN_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


#: vLLM 0.32's CPU build on a CPU with AMX: what its AMX MLA backend's kernels check of an MLA model's
#: sizes, in the order it checks them: (config field, the multiple it must be, the RuntimeError's text,
#: when it is raised). Checks 1-2 are convert_weight_packed on W_UK [heads, kv_lora_rank (out features),
#: qk_nope_head_dim (input features)] at load (amx_mla.py:303), 3-4 on W_UV [heads, v_head_dim,
#: kv_lora_rank] (amx_mla.py:304): csrc/cpu/sgl-kernels/gemm.cpp convert_weight_packed refuses out
#: features not a multiple of TILE_N and input features not one of TILE_K (16 and 32, gemm.h:15-17 at
#: vllm-project/vllm@2092f832). 5 is bmm_cpu's N (csrc/cpu/sgl-kernels/bmm.cpp bmm_cpu: N % 32) on W_UV
#: in the first prefill (amx_mla.py:476). The C++ is not in the wheel: the texts are those in its
#: vllm/_C.abi3.so, and tests/test_amx_mla.py runs these checks against that library's own ops.
VLLM_AMX_MLA_CHECKS: tuple[tuple[str, int, str, str], ...] = (
    ("kv_lora_rank", 16, "invalid weight out features {n}", "at load"),
    ("qk_nope_head_dim", 32, "invalid weight input features {n}", "at load"),
    ("v_head_dim", 16, "invalid weight out features {n}", "at load"),
    ("kv_lora_rank", 32, "invalid weight input features {n}", "at load"),
    ("v_head_dim", 32, "tinygemm requires N to be 32x.", "on the first request"),
)


def vllm_cpu_attn_claims(lines: str, seen: str) -> dict[str, tuple[str, str]]:
    """The claims ``cpu_attn.head_size`` and its hint, with one release's lines of
    v1/attention/backends/cpu_attn.py (its ``get_supported_head_sizes``: :data:`VLLM_CPU_ATTN_HEAD_SIZES`)."""
    src = _VL + "v1/attention/backends/cpu_attn.py:" + lines + " (get_supported_head_sizes)"
    return {
        "cpu_attn.head_size": (
            "{vllm}'s CPU build serves attention heads of sizes {sizes} only (its CPU_ATTN backend): head size "
            '{n} ({how}) loads, and its engine dies on the first request ("RuntimeError: Unsupported CPU attention '
            'configuration: head_dim={n} ..."); its GPU builds take other sizes',
            src + "; " + seen,
        ),
        "cpu_attn.head_size_hint": (
            "to serve it on vLLM's CPU build, give it a head size of {sizes} (head_dim, or hidden_size / "
            "num_attention_heads), or serve it on a GPU",
            src,
        ),
    }


def vllm_amx_mla_claims(
    select: str, pin: str, prefill: str, decode: str, draft: str = "v1/spec_decode/llm_base_proposer.py:1283-1291"
) -> dict[str, tuple[str, str]]:
    """The claims ``cpu_mla.amx`` and its hint, with one release's lines (paths under vllm/). ``draft``:
    where the drafter's attention backend is chosen on its own (never the target's --attention-backend,
    unless the speculative config's ``attention_backend`` names one); seen on vllm-cpu 0.32.0 on a CPU
    with AMX: the target pinned to CPU_MLA alone, the MLA drafter took AMX_MLA and the engine core exited
    with "ValueError: No common block size for 128 (CPU_MLA: [16]; AMX_MLA: [MultipleOf(32)])"
    (v1/worker/utils.py:555)."""
    mla = "v1/attention/backends/mla/"
    return {
        "cpu_mla.amx": (
            "on a CPU with AMX (amx_bf16 and amx_tile in /proc/cpuinfo) {vllm}'s CPU build serves MLA attention "
            "with its AMX backend, which packs W_UK [heads, kv_lora_rank, qk_nope_head_dim] and W_UV [heads, "
            "v_head_dim, kv_lora_rank] for AMX tiles (" + mla + "amx_mla.py:301-304, at load; multiplied in "
            "prefill, " + prefill + ") and takes kv_lora_rank, qk_nope_head_dim and v_head_dim only as multiples "
            'of 32: {field} {value} fails {when} ("RuntimeError: {error}"); without AMX it serves MLA with its '
            "reference backend, which takes these sizes",
            _VL + select + " (the AMX backend whenever torch.cpu._is_amx_tile_supported(), unless CPU_MLA is "
            "asked for); " + _VL + mla + "amx_mla.py:294-304 (W_UK and W_UV packed by convert_weight_packed at "
            "load), " + prefill + " (bmm_cpu on them in prefill); " + _VL + decode + " (bmm_cpu in decode); the "
            "checks: ckpttools.engines.claims.VLLM_AMX_MLA_CHECKS (read from vllm-cpu 0.32.0's _C.abi3.so)",
        ),
        "cpu_mla.amx_hint": (
            "on such a CPU, launch {vllm} with --attention-backend CPU_MLA, its reference MLA backend ("
            + pin
            + '), and with "attention_backend": "CPU_MLA" in its --speculative-config (ckpttools adds the keys of '
            "one given among the engine arguments to its own): the drafter's backend is chosen on its own ("
            + draft
            + "), and with the target alone pinned the two have no common KV block size and the server exits; "
            "or give the drafter sizes that are multiples of 32",
            _VL + pin + "; " + _VL + draft + "; observed on vllm-cpu 0.32.0 (v1/worker/utils.py:555)",
        ),
    }


#: vLLM 0.32's claims (paths under vllm/)
VLLM_CLAIMS: Mapping[str, tuple[str, str]] = {
    "cpu.kv_cache": (
        "{vllm}'s CPU build allocates the whole KV cache it is given when it starts (VLLM_CPU_KVCACHE_SPACE GiB "
        "where that is set, which wins over --kv-cache-memory-bytes), and with a size given and eager execution "
        "it skips its warm-up run: with 1 GiB, 4.3-5.3 s of a server's start went to it, with 128 MiB 0.4 s",
        _VL + "platforms/cpu.py:323-327; v1/worker/cpu_worker.py:189-206; v1/engine/core.py:401-404 (its "
        '"init engine (profile, create kv cache, warmup model) took ..." line); observed on vllm-cpu 0.32.0 '
        "(2026-12-06, the tests' model pairs)",
    ),
    "config.bom": (
        "{vllm} reads config.json through transformers, whose reader refuses a leading byte-order mark "
        '("not a valid JSON file"): the server cannot start',
        _VL + "transformers_utils/config.py:308 (PreTrainedConfig.get_config_dict); transformers " + _TF_JSON,
    ),
    **vllm_cpu_attn_claims(
        "68-70",
        "observed on vllm-cpu 0.32.0: `ckpt example` target and drafter (head_dim 16) launched, the engine died "
        'on the first request with "Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0"',
    ),
    "arch.wants": (
        "{arch!r}: vLLM's EAGLE-3 drafter class is {llama}",
        _VL + "model_executor/models/registry.py:658-673",
    ),
    "qk_norm": (
        "{vllm} serves it only as {qwen3} (registry.py:665, qwen3_eagle3.py)",
        _VL + "model_executor/models/registry.py:665",
    ),
    "missing": (
        "expected tensor is missing: {vllm} serves without it and no error (observed), "
        "the weight left at its initial value",
        "observed on vllm-cpu 0.32.0",
    ),
    "fc_norm_hint": (
        " ({vllm} reads fc_norm, not use_aux_norm)",
        _VL + "model_executor/models/llama_eagle3.py:184-252",
    ),
    "context.raise": (
        "{vllm} raises the drafter's max_position_embeddings to the target's max_model_len "
        "itself (vllm/config/speculative.py:1677-1709) and launches, but past "
        "{dctx:,} tokens the drafter runs beyond the positions it was trained on and acceptance drops",
        _VL + "config/speculative.py:1677-1709",
    ),
    "mla_latent": (
        '{vllm}\'s CPU MLA backend takes latent + rope width 576 only ("Head dimension 288 is not supported by MLA")',
        "observed on vllm-cpu 0.32.0",
    ),
    "logs.source": ("vllm-cpu 0.32.0: v1/spec_decode/metrics.py, logger.py", _VL + "v1/spec_decode/metrics.py"),
    **vllm_amx_mla_claims(
        "platforms/cpu.py:151-164",
        "platforms/cpu.py:156, 165-176",
        "amx_mla.py:420-422 and 476",
        "model_executor/layers/attention/mla_attention.py:1054-1066, 1401-1410",
    ),
}
