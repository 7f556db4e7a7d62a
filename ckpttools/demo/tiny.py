"""Tiny real checkpoints: EAGLE-3 drafters in every layout, Llama targets, sharded and
sparse "huge" checkpoints. For tests, examples, benchmarks and the built-in demo.

Everything is written with the project's own streaming writer, in well under a second.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ckpttools.engines.flavor import LAYOUT_ARCH, TARGET_ARCH
from ckpttools.errors import ConfigError
from ckpttools.formats.conventions import CONFIG_DTYPE
from ckpttools.io.plan import Data, Hole, PlannedTensor, WritePlan, execute

__all__ = [
    "DRAFTER_FLAVORS",
    "random_mapping",
    "build_drafter",
    "build_target",
    "build_deepseek_target",
    "build_gpt_oss_target",
    "build_huge_sparse",
    "write_tensors",
    "build_known_pair",
    "known_prompts",
    "swap_pairs",
]

DRAFTER_FLAVORS = ("sglang", "eagle", "vllm", "speculators", "mla", "modelopt", "training")

_ST = {"bf16": "BF16", "fp16": "F16", "fp32": "F32", "F32": "F32", "BF16": "BF16", "F16": "F16"}


def _np_dtype(st: str) -> np.dtype:
    from ckpttools.io.checkpoint import numpy_dtype

    return numpy_dtype(st)


def random_mapping(vocab_size: int, draft_vocab_size: int, seed: int = 0) -> np.ndarray:
    """Absolute target ids of a random ascending mapping (the SpecForge/EAGLE order)."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(vocab_size, size=draft_vocab_size, replace=False)).astype(np.int64)


def write_tensors(
    out: str | Path,
    tensors: dict[str, np.ndarray],
    config: dict[str, Any] | None = None,
    *,
    max_shard_size: int | None = None,
    force: bool = False,
) -> Path:
    """Write arrays (already in their final dtype) plus a config.json as a checkpoint."""
    planned = [PlannedTensor(n, _st_of(a.dtype), tuple(a.shape), Data(a)) for n, a in tensors.items()]
    plan = WritePlan("demo", str(out), planned, config=config, max_shard_size=max_shard_size)
    return execute(plan, force=force).output


def _st_of(dt: np.dtype) -> str:
    dt = np.dtype(dt)
    table = {
        "float64": "F64",
        "float32": "F32",
        "float16": "F16",
        "bfloat16": "BF16",
        "int64": "I64",
        "int32": "I32",
        "int16": "I16",
        "int8": "I8",
        "uint8": "U8",
        "bool": "BOOL",
        "float8_e4m3fn": "F8_E4M3",
        "float8_e5m2": "F8_E5M2",
    }
    return table[dt.name]


def _make_weights(
    shapes: dict[str, tuple[int, ...]],
    npdt: np.dtype,
    rng: np.random.Generator,
    weight_fn: Callable[[str, tuple[int, ...]], np.ndarray] | None,
    norm_jitter: float,
) -> dict[str, np.ndarray]:
    """Each tensor from ``weight_fn`` (float32), else norms near 1 and the rest N(0, 0.02)."""
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        if weight_fn is not None:
            a = np.asarray(weight_fn(name, shape), dtype=np.float32)
        elif "norm" in name:
            a = np.ones(shape, np.float32) + (
                rng.normal(0, norm_jitter, shape).astype(np.float32) if norm_jitter else 0
            )
        else:
            a = rng.normal(0, 0.02, shape).astype(np.float32)
        out[name] = a.astype(npdt)
    return out


def mla_dims(hidden: int, head_dim: int, latent: int = 256) -> dict[str, int]:
    """MLA projection sizes for a tiny model: kv_lora_rank ``latent`` with a rope part of
    latent / 8. 256 + 32 and 512 + 64 are the two latent widths SGLang's triton MLA decode
    kernel has blocks for (288 and 576; others fail to compile); vLLM's CPU MLA backends take
    576 only (the release tables' claims ``mla_latent``, engines/claims.py).

    qk_nope_head_dim is head_dim / 2, and v_head_dim head_dim. At latent 512, the width vLLM's
    CPU build serves, qk_nope_head_dim is rounded up to a multiple of 32: on a CPU with AMX that
    build serves MLA with a backend that packs the weights for AMX tiles and refuses other widths
    (the claims ``cpu_mla.amx``; tests/test_amx_mla.py checks the known pairs' sizes against them).
    Latent 256 keeps the sizes SGLang's recorded GPU runs used."""
    if latent not in (256, 512):
        raise ConfigError(f"MLA latent width {latent}: the engines' MLA kernels take 256 or 512")
    nope = head_dim // 2
    if latent == 512:
        nope = -(-nope // 32) * 32
    return {
        "q_lora_rank": hidden // 2,
        "kv_lora_rank": latent,
        "qk_rope_head_dim": latent // 8,
        "qk_nope_head_dim": nope,
        "v_head_dim": head_dim,
    }


def _layer_tensors(
    prefix: str,
    H: int,
    heads: int,
    kv: int,
    hd: int,
    inter: int,
    first: bool,
    mla: int | None = None,
    drafter: bool = True,
) -> dict[str, tuple[int, ...]]:
    """A decoder layer's tensors. In an EAGLE-3 drafter (SGLang's layout) the ``first``
    layer's attention takes [embedding; hidden] (2H) and uses input_layernorm on the
    embedding; every drafter layer has hidden_norm (later layers fuse the residual into it)."""
    qin = 2 * H if first else H
    t: dict[str, tuple[int, ...]] = {}
    if mla:
        m = mla_dims(H, hd, mla)
        t |= {
            f"{prefix}self_attn.q_a_proj.weight": (m["q_lora_rank"], qin),
            f"{prefix}self_attn.q_a_layernorm.weight": (m["q_lora_rank"],),
            f"{prefix}self_attn.q_b_proj.weight": (
                heads * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"]),
                m["q_lora_rank"],
            ),
            f"{prefix}self_attn.kv_a_proj_with_mqa.weight": (m["kv_lora_rank"] + m["qk_rope_head_dim"], qin),
            f"{prefix}self_attn.kv_a_layernorm.weight": (m["kv_lora_rank"],),
            f"{prefix}self_attn.kv_b_proj.weight": (
                heads * (m["qk_nope_head_dim"] + m["v_head_dim"]),
                m["kv_lora_rank"],
            ),
        }
    else:
        t |= {
            f"{prefix}self_attn.q_proj.weight": (heads * hd, qin),
            f"{prefix}self_attn.k_proj.weight": (kv * hd, qin),
            f"{prefix}self_attn.v_proj.weight": (kv * hd, qin),
        }
    t |= {
        f"{prefix}self_attn.o_proj.weight": (H, heads * hd),
        f"{prefix}mlp.gate_proj.weight": (inter, H),
        f"{prefix}mlp.up_proj.weight": (inter, H),
        f"{prefix}mlp.down_proj.weight": (H, inter),
        f"{prefix}post_attention_layernorm.weight": (H,),
    }
    if first or not drafter:
        t[f"{prefix}input_layernorm.weight"] = (H,)
    if drafter:
        t[f"{prefix}hidden_norm.weight"] = (H,)
    return t


def _check_sizes(hidden_size: int, num_heads: int, vocab_size: int) -> None:
    """Sizes a real model could have: whole, even head dims and a vocabulary of at least 2."""
    if type(hidden_size) is not int or hidden_size <= 0 or hidden_size % (2 * num_heads):
        raise ConfigError(
            f"hidden size {hidden_size} must be a positive multiple of {2 * num_heads} "
            f"({num_heads} heads of an even size)"
        )
    if type(vocab_size) is not int or vocab_size < 2:
        raise ConfigError(f"vocab size {vocab_size} must be an integer of at least 2")


def build_drafter(
    out: str | Path,
    flavor: str = "sglang",
    *,
    hidden_size: int = 64,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 1024,
    draft_vocab_size: int | None = 256,
    target_hidden_size: int | None = None,
    num_aux: int = 3,
    num_layers: int = 1,
    aux_layer_ids: Sequence[int] | None = (1, 3, 5),
    mapping: np.ndarray | None = None,
    dtype: str = "bf16",
    embed_tokens: bool = False,
    max_position_embeddings: int = 4096,
    config_overrides: dict[str, Any] | None = None,
    weight_fn: Callable[[str, tuple[int, ...]], np.ndarray] | None = None,
    max_shard_size: int | None = None,
    seed: int = 0,
    force: bool = False,
    fc_norm: bool = False,
    norm_before_fc: bool = False,
    norm_output: bool = False,
    mla_latent: int = 256,
    qk_norm: bool = False,
) -> Path:
    """Write a tiny EAGLE-3 drafter in one of :data:`DRAFTER_FLAVORS`.

    Args:
        flavor: ``sglang`` (layers.N.), ``eagle`` (official release: midlayer.,
            max_position_embeddings 2048, fp16), ``vllm``, ``speculators`` (nested
            speculators_config), ``mla``, ``modelopt`` (d2t only, frequency order),
            ``training`` (fp32, ``model.`` prefix, training-only extra tensors); each with
            the class name of engines.flavor.LAYOUT_ARCH.
        mapping: absolute target ids of the draft slots (default: a random ascending set).
        draft_vocab_size: Vd; None writes a full-vocab head with no mapping tensors.
        weight_fn: makes each float tensor (name, shape) -> float32 array; default random.
        fc_norm, norm_before_fc, norm_output: EAGLE-3.1 options, with their weights
            (``fc_norm.N``, ``input_norm``) and config flags; ``num_aux`` other than 3
            writes ``num_aux_hidden_states``.
        qk_norm: per-head ``q_norm``/``k_norm`` in every layer, as a Qwen3-architecture
            drafter has them (vLLM serves it with its Qwen3 drafter class; SGLang has no
            class for it).

    Returns:
        the output path.
    """
    if flavor not in DRAFTER_FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; choose from {DRAFTER_FLAVORS}")
    _check_sizes(hidden_size, num_heads, vocab_size)
    if draft_vocab_size is not None and not 0 < draft_vocab_size <= vocab_size:
        raise ConfigError(f"draft vocab size {draft_vocab_size} must be from 1 to the vocab size {vocab_size}")
    dims = _Dims(hidden_size, num_heads, num_kv_heads, intermediate_size, target_hidden_size or hidden_size, mla_latent)
    st = "F32" if flavor == "training" else _ST["fp16" if flavor == "eagle" and dtype == "bf16" else dtype]
    rng = np.random.default_rng(seed)
    Vd = draft_vocab_size if draft_vocab_size is not None else vocab_size
    shapes = _drafter_shapes(flavor, dims, vocab_size, Vd, num_aux, num_layers, embed_tokens)
    shapes |= _option_shapes(flavor, dims, num_aux, num_layers, fc_norm, norm_before_fc, qk_norm)
    tensors = _make_weights(shapes, _np_dtype(st), rng, weight_fn, norm_jitter=0.01)
    if draft_vocab_size is not None and draft_vocab_size < vocab_size or mapping is not None:
        ids = np.asarray(mapping, dtype=np.int64) if mapping is not None else random_mapping(vocab_size, Vd, seed)
        if flavor == "modelopt" and mapping is None:
            ids = ids[rng.permutation(len(ids))]  # frequency order, not ascending
        tensors |= _mapping_tensors(ids, vocab_size, with_t2d=flavor != "modelopt")
    if flavor == "training":
        tensors = {("model." + n if not n.startswith(("lm_head", "d2t", "t2d")) else n): a for n, a in tensors.items()}
    cfg = _drafter_config(flavor, dims, num_layers, vocab_size, draft_vocab_size, max_position_embeddings, st)
    if target_hidden_size:
        cfg["target_hidden_size"] = dims.target_hidden
    if aux_layer_ids is not None and flavor == "vllm":
        cfg["eagle_aux_hidden_state_layer_ids"] = list(aux_layer_ids)  # where vLLM reads them
    elif aux_layer_ids is not None and flavor not in ("eagle", "speculators"):
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids)}
    cfg |= _option_flags(num_aux, fc_norm=fc_norm, norm_before_fc=norm_before_fc, norm_output=norm_output)
    if flavor == "speculators":
        cfg = _speculators_config(cfg, draft_vocab_size, target_hidden_size, aux_layer_ids)
    cfg = {**cfg, **(config_overrides or {})}
    return write_tensors(out, tensors, cfg, max_shard_size=max_shard_size, force=force)


@dataclass(frozen=True)
class _Dims:
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    target_hidden: int
    mla_latent: int = 256

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _option_shapes(
    flavor: str, d: _Dims, num_aux: int, num_layers: int, fc_norm: bool, norm_before_fc: bool, qk_norm: bool
) -> dict[str, tuple[int, ...]]:
    """The tensors the drafter options add: EAGLE-3.1 norms, and Qwen3's per-head q/k norms."""
    shapes: dict[str, tuple[int, ...]] = {"input_norm.weight": (num_aux * d.target_hidden,)} if norm_before_fc else {}
    shapes |= {f"fc_norm.{j}.weight": (d.target_hidden,) for j in range(num_aux) if fc_norm}
    if qk_norm and flavor != "mla":
        prefixes = ["midlayer." if flavor == "eagle" else "layers.0."] + [f"layers.{i}." for i in range(1, num_layers)]
        shapes |= {f"{q}self_attn.{n}_norm.weight": (d.head_dim,) for q in prefixes for n in "qk"}
    return shapes


def _option_flags(num_aux: int, **options: bool) -> dict[str, Any]:
    """EAGLE-3.1 flags as config.json states them; ``num_aux_hidden_states`` when it is not 3."""
    flags: dict[str, Any] = {k: True for k, on in options.items() if on}
    return flags | ({"num_aux_hidden_states": num_aux} if num_aux != 3 else {})


def _drafter_shapes(
    flavor: str, d: _Dims, vocab_size: int, draft_rows: int, num_aux: int, num_layers: int, embed_tokens: bool
) -> dict[str, tuple[int, ...]]:
    H, hd = d.hidden, d.head_dim
    shapes: dict[str, tuple[int, ...]] = {}
    if embed_tokens or flavor == "training":
        shapes["embed_tokens.weight"] = (vocab_size, H)
    shapes["fc.weight"] = (H, num_aux * d.target_hidden)
    layer_prefix = "midlayer." if flavor == "eagle" else "layers.0."
    mla = d.mla_latent if flavor == "mla" else None
    shapes |= _layer_tensors(layer_prefix, H, d.heads, d.kv_heads, hd, d.intermediate, True, mla)
    for i in range(1, num_layers):
        shapes |= _layer_tensors(f"layers.{i}.", H, d.heads, d.kv_heads, hd, d.intermediate, False)
        if flavor in ("vllm", "speculators"):  # vLLM's later layers read input_layernorm (and keep hidden_norm)
            shapes[f"layers.{i}.input_layernorm.weight"] = (H,)
    shapes["norm.weight"] = (H,)
    shapes["lm_head.weight"] = (draft_rows, H)
    if flavor == "training":
        shapes["layers.0.self_attn.rotary_emb.inv_freq"] = (hd // 2,)
    return shapes


def _mapping_tensors(ids: np.ndarray, vocab_size: int, with_t2d: bool) -> dict[str, np.ndarray]:
    """d2t (offsets: target id minus slot) and, unless left out, t2d."""
    out = {"d2t": ids - np.arange(len(ids), dtype=np.int64)}
    if with_t2d:
        t2d = np.zeros(vocab_size, dtype=bool)
        t2d[ids] = True
        out["t2d"] = t2d
    return out


_DRAFTER_ARCH = LAYOUT_ARCH


def _drafter_config(
    flavor: str,
    d: _Dims,
    num_layers: int,
    vocab_size: int,
    draft_vocab_size: int | None,
    max_position_embeddings: int,
    st: str,
) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": [_DRAFTER_ARCH[flavor]],
        "model_type": "deepseek_v2" if flavor == "mla" else "llama",
        "hidden_size": d.hidden,
        "intermediate_size": d.intermediate,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "num_hidden_layers": num_layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 2048 if flavor == "eagle" else max_position_embeddings,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "draft_vocab_size": draft_vocab_size,
        "torch_dtype": CONFIG_DTYPE[st],
    }
    if flavor == "mla":
        cfg |= mla_dims(d.hidden, d.head_dim, d.mla_latent)
    if flavor == "vllm":
        cfg["norm_before_residual"] = False
    return cfg


def _speculators_config(
    layer_cfg: dict[str, Any],
    draft_vocab_size: int | None,
    target_hidden_size: int | None,
    aux_layer_ids: Sequence[int] | None,
) -> dict[str, Any]:
    """The speculators library's layout: the layer config nested, the EAGLE-3 fields on top."""
    inner = {k: v for k, v in layer_cfg.items() if k not in ("architectures", "draft_vocab_size")}
    inner["architectures"] = [TARGET_ARCH["llama"]]
    cfg: dict[str, Any] = {
        "architectures": [LAYOUT_ARCH["speculators"]],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0",
        "draft_vocab_size": draft_vocab_size,
        "norm_before_residual": False,
        "target_hidden_size": target_hidden_size,
        "transformer_layer_config": inner,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": "tiny-target", "architectures": [TARGET_ARCH["llama"]]},
        },
    }
    if aux_layer_ids is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = list(aux_layer_ids)
    return cfg


def build_target(
    out: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 8,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 1024,
    max_position_embeddings: int = 4096,
    dtype: str = "bf16",
    tie_word_embeddings: bool = False,
    weight_fn: Callable[[str, tuple[int, ...]], np.ndarray] | None = None,
    text_config: bool = False,
    max_shard_size: int | None = None,
    seed: int = 1,
    force: bool = False,
    config_overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny Llama target (HF names: model.layers.N., model.embed_tokens, lm_head).

    ``text_config=True`` nests the text model's fields under ``text_config`` as
    multimodal wrappers such as Kimi-K2.5 do.
    """
    _check_sizes(hidden_size, num_heads, vocab_size)
    if num_layers < 4:
        raise ConfigError(f"a target needs at least 4 layers for EAGLE-3's three captures, not {num_layers}")
    H, hd = hidden_size, hidden_size // num_heads
    rng = np.random.default_rng(seed)
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, H)}
    for i in range(num_layers):
        shapes |= _layer_tensors(
            f"model.layers.{i}.", H, num_heads, num_kv_heads, hd, intermediate_size, False, drafter=False
        )
    shapes["model.norm.weight"] = (H,)
    if not tie_word_embeddings:
        shapes["lm_head.weight"] = (vocab_size, H)
    st = _ST[dtype]
    tensors = _make_weights(shapes, _np_dtype(st), rng, weight_fn, norm_jitter=0.0)
    text = {
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": intermediate_size,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": hd,
        "num_hidden_layers": num_layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": max_position_embeddings,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tie_word_embeddings,
        "vocab_size": vocab_size,
        "torch_dtype": CONFIG_DTYPE[st],
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    cfg: dict[str, Any]
    if text_config:
        cfg = {"architectures": [TARGET_ARCH["kimi_k25"]], "model_type": "kimi_k25", "text_config": text}
    else:
        cfg = {"architectures": [TARGET_ARCH["llama"]], **text}
    cfg = {**cfg, **(config_overrides or {})}
    return write_tensors(out, tensors, cfg, max_shard_size=max_shard_size, force=force)


def build_deepseek_target(
    out: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 8,
    num_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 1024,
    weight_fn: Callable[[str, tuple[int, ...]], np.ndarray] | None = None,
    seed: int = 1,
    force: bool = False,
    mla_latent: int = 256,
    config_overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny DeepSeek-V3 target (MLA attention, every layer a dense MLP:
    ``first_k_dense_replace`` = the layer count), HF names as transformers' DeepSeek-V3 class has them."""
    H = hidden_size
    m = mla_dims(H, 64, mla_latent)  # qk_nope 32 + rope: the q/k head; the latent for the MLA kernels
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, H)}
    for i in range(num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_a_proj.weight": (m["q_lora_rank"], H),
            p + "self_attn.q_a_layernorm.weight": (m["q_lora_rank"],),
            p + "self_attn.q_b_proj.weight": (
                num_heads * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"]),
                m["q_lora_rank"],
            ),
            p + "self_attn.kv_a_proj_with_mqa.weight": (m["kv_lora_rank"] + m["qk_rope_head_dim"], H),
            p + "self_attn.kv_a_layernorm.weight": (m["kv_lora_rank"],),
            p + "self_attn.kv_b_proj.weight": (
                num_heads * (m["qk_nope_head_dim"] + m["v_head_dim"]),
                m["kv_lora_rank"],
            ),
            p + "self_attn.o_proj.weight": (H, num_heads * m["v_head_dim"]),
            p + "mlp.gate_proj.weight": (intermediate_size, H),
            p + "mlp.up_proj.weight": (intermediate_size, H),
            p + "mlp.down_proj.weight": (H, intermediate_size),
            p + "input_layernorm.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
        }
    shapes |= {"model.norm.weight": (H,), "lm_head.weight": (vocab_size, H)}
    tensors = _make_weights(shapes, _np_dtype("BF16"), np.random.default_rng(seed), weight_fn, norm_jitter=0.0)
    cfg = _deepseek_config(H, num_layers, num_heads, intermediate_size, vocab_size, m)
    return write_tensors(out, tensors, {**cfg, **(config_overrides or {})}, force=force)


def _deepseek_config(
    H: int, num_layers: int, num_heads: int, inter: int, vocab_size: int, m: dict[str, int]
) -> dict[str, Any]:
    return {
        "architectures": [TARGET_ARCH["deepseek"]],
        "model_type": "deepseek_v3",
        "hidden_size": H,
        "intermediate_size": inter,
        "moe_intermediate_size": inter // 2,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_heads,
        "n_shared_experts": 1,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": num_layers,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "routed_scaling_factor": 1.0,
        "norm_topk_prob": True,
        **m,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def build_gpt_oss_target(
    out: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 8,
    num_heads: int = 2,
    num_kv_heads: int = 2,
    num_experts: int = 4,
    intermediate_size: int = 128,
    vocab_size: int = 1024,
    weight_fn: Callable[[str, tuple[int, ...]], np.ndarray] | None = None,
    seed: int = 1,
    force: bool = False,
    config_overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny gpt-oss target in bf16 (attention sinks, biases, a MoE of ``num_experts``
    experts with every one routed, sliding and full layers alternating), HF names as
    transformers' gpt-oss class has them: ``mlp.experts.gate_up_proj`` is (E, H, 2I) with gate and up
    interleaved (gate in the even columns), ``down_proj`` (E, I, H)."""
    H, hd, E, inter = hidden_size, 64, num_experts, intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, H)}
    for i in range(num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (num_heads * hd, H),
            p + "self_attn.q_proj.bias": (num_heads * hd,),
            p + "self_attn.k_proj.weight": (num_kv_heads * hd, H),
            p + "self_attn.k_proj.bias": (num_kv_heads * hd,),
            p + "self_attn.v_proj.weight": (num_kv_heads * hd, H),
            p + "self_attn.v_proj.bias": (num_kv_heads * hd,),
            p + "self_attn.o_proj.weight": (H, num_heads * hd),
            p + "self_attn.o_proj.bias": (H,),
            p + "self_attn.sinks": (num_heads,),
            p + "mlp.router.weight": (E, H),
            p + "mlp.router.bias": (E,),
            p + "mlp.experts.gate_up_proj": (E, H, 2 * inter),
            p + "mlp.experts.gate_up_proj_bias": (E, 2 * inter),
            p + "mlp.experts.down_proj": (E, inter, H),
            p + "mlp.experts.down_proj_bias": (E, H),
        }
    shapes |= {"model.norm.weight": (H,), "lm_head.weight": (vocab_size, H)}
    tensors = _make_weights(shapes, _np_dtype("BF16"), np.random.default_rng(seed), weight_fn, norm_jitter=0.0)
    cfg = _gpt_oss_config(H, hd, num_layers, num_heads, num_kv_heads, E, inter, vocab_size)
    return write_tensors(out, tensors, {**cfg, **(config_overrides or {})}, force=force)


def _gpt_oss_config(
    H: int, hd: int, num_layers: int, num_heads: int, num_kv_heads: int, E: int, inter: int, vocab_size: int
) -> dict[str, Any]:
    return {
        "architectures": [TARGET_ARCH["gpt_oss"]],
        "model_type": "gpt_oss",
        "hidden_size": H,
        "intermediate_size": inter,
        "head_dim": hd,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "num_local_experts": E,
        "num_experts_per_tok": E,
        "experts_per_token": E,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)],
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "attention_bias": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 4096,
        "initial_context_length": 4096,
        "rope_theta": 150000,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 1.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def build_huge_sparse(
    out: str | Path,
    *,
    num_shards: int = 64,
    num_tensors: int = 35_000,
    rows: int = 2048,
    hidden: int = 7168,
    vocab_size: int = 163_840,
    force: bool = False,
) -> Path:
    """A sparse MoE-shaped checkpoint whose headers describe ~1 TB (bf16) using almost no disk.

    Tensor data are holes in sparse files: headers are real, data read as zeros.
    """
    per_expert = 3
    experts = 384
    names: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab_size, hidden))]
    layer = 0
    while len(names) < num_tensors - 2:
        for e in range(experts):
            for proj in ("gate_proj", "up_proj", "down_proj")[:per_expert]:
                shape = (hidden, rows) if proj == "down_proj" else (rows, hidden)
                names.append((f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight", shape))
                if len(names) >= num_tensors - 2:
                    break
            if len(names) >= num_tensors - 2:
                break
        layer += 1
    names += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab_size, hidden))]
    per = -(-len(names) // num_shards)
    config = {
        "architectures": [TARGET_ARCH["deepseek"]],
        "model_type": "deepseek_v3",
        "hidden_size": hidden,
        "num_hidden_layers": layer,
        "vocab_size": vocab_size,
        "max_position_embeddings": 262144,
        "n_routed_experts": experts,
        "moe_intermediate_size": rows,
        "torch_dtype": "bfloat16",
        "rope_theta": 50000.0,
    }
    planned = [PlannedTensor(n, "BF16", shape, Hole()) for n, shape in names]
    shards = [[n for n, _ in names[i : i + per]] for i in range(0, len(names), per)]
    return execute(WritePlan("demo", str(out), planned, config=config, shards=shards), force=force).output


# ------------------------------------------------------------------ known acceptance
KNOWN_V, KNOWN_H, KNOWN_VD_LO, KNOWN_VD_HI = 256, 64, 64, 192
#: the ``split`` target repeats tokens below this and alternates pairs from it on
KNOWN_SPLIT = 128


def _known_embedding(seed: int = 3) -> np.ndarray:
    """±1 rows: each row's dot with itself is H, with any other row far below H."""
    rng = np.random.default_rng(seed)
    e = rng.choice(np.array([-1.0, 1.0], np.float32), size=(KNOWN_V, KNOWN_H))
    gram = e @ e.T
    np.fill_diagonal(gram, -np.inf)
    assert gram.max() < KNOWN_H * 0.75, "embedding rows not distinct enough"
    return e


def swap_pairs(ids: np.ndarray) -> np.ndarray:
    """The involution 2k <-> 2k+1."""
    return ids ^ 1


def build_known_pair(
    root: str | Path,
    *,
    target: str = "repeat",
    drafter: str = "id",
    drafter_flavor: str = "sglang",
    num_layers: int = 8,
    aux_layer_ids: Sequence[int] = (1, 3, 5),
    force: bool = False,
    target_arch: str = "llama",
    flip_boundary: int | None = None,
    mla_latent: int = 256,
    drafter_layers: int = 1,
    **options: bool,
) -> tuple[Path, Path]:
    """A tiny target and EAGLE-3 drafter whose acceptance is known by construction.

    The target's layers add nothing (o_proj and down_proj are zero), so every hidden
    state is the current token's embedding; its head is the embedding (``repeat``: the
    next token is the last one) or the embedding with pairs 2k/2k+1 swapped (``swap``:
    the tokens alternate). The drafter's fc passes the first aux state through and its
    layer adds nothing, so it predicts from the embedding of the token it was given the
    hidden state of: ``id`` predicts that token, ``swap`` its pair partner.

    EAGLE aligns the target's hidden state h_t with the next token x_{t+1} to predict
    x_{t+2}; later draft steps reuse the drafter's own hidden state. Greedy, topk 1,
    K draft steps, prompts of tokens 64..191:

    ======== ======= ========================================
    target   drafter tokens per verify step (accept length)
    ======== ======= ========================================
    repeat   id      K + 1 (every draft accepted)
    swap     id      2.0 (the first draft, x_{t+2} = x_t, only)
    repeat   swap    1.0 (no draft accepted)
    split    id      K + 1 on prompts ending below 128, 2.0 on
                     prompts ending at 128 or above
    ======== ======= ========================================

    ``split`` repeats tokens below 128 and swaps pairs from 128 on, so the figure
    depends on the prompt: two categories of prompts (``known_prompts(lo=..., hi=...)``)
    get two exact figures from one server.

    ``flip_boundary`` b makes the pair sensitive to which layers the engine captures:
    target layers b-1 and b each negate the residual stream (their MLP computes -2x of
    its ±1 input), so boundary b (the input of layer b) carries minus the embedding and
    boundaries b-1 and b+1 carry it as it is; the drafter's fc negates its first aux state
    back. The figures above then hold only when the first captured boundary is b; a
    capture one layer off gives 1.0 with the ``id`` drafter.

    ``target_arch`` is ``llama``, ``deepseek`` (DeepSeek-V3, MLA) or ``gpt_oss`` (its experts
    carry the flips); their classes are engines.flavor.TARGET_ARCH's. ``mla_latent`` (256 or 512) sizes the MLA
    latent of a DeepSeek target and an ``mla`` drafter (see :func:`mla_dims`).
    ``drafter_layers`` above 1 writes a multi-layer drafter (its later layers add nothing too).

    ``options`` are drafter options, each True/False: the EAGLE-3.1 ``fc_norm``,
    ``norm_before_fc`` and ``norm_output`` (the number of aux states follows
    ``aux_layer_ids``), and ``qk_norm`` (a Qwen3-architecture drafter's per-head norms). None
    changes the figures: the norms keep each state's direction, which is all the construction
    reads, and the attention adds nothing.

    Returns:
        (target path, drafter path) under ``root``.
    """
    root = Path(root)
    e = _known_embedding()
    if flip_boundary is not None and not 1 <= flip_boundary <= num_layers - 1:
        raise ConfigError(f"flip_boundary must be from 1 to {num_layers - 1}, not {flip_boundary}")
    flips = () if flip_boundary is None else (flip_boundary - 1, flip_boundary)
    tname = f"target-{target}" + ("" if target_arch == "llama" else f"-{target_arch}")
    tname += f"-flip{flip_boundary}" if flips else ""
    tname += f"-mla{mla_latent}" if target_arch == "deepseek" and mla_latent != 256 else ""
    tpath = _known_target(root / tname, target, e, num_layers, force, target_arch, flips, mla_latent)
    tag = "".join(f"-{k.replace('_', '')}" for k, on in sorted(options.items()) if on)
    tag += f"-aux{len(aux_layer_ids)}" if len(aux_layer_ids) != 3 else ""
    tag += "-ids" + "_".join(map(str, aux_layer_ids)) if flips else ""
    tag += f"-mla{mla_latent}" if drafter_flavor == "mla" and mla_latent != 256 else ""
    tag += f"-layers{drafter_layers}" if drafter_layers != 1 else ""
    name = f"drafter-{drafter}-{drafter_flavor}{tag}"
    sign = -1.0 if flips else 1.0
    dpath = _known_drafter(
        root / name, drafter, drafter_flavor, e, aux_layer_ids, force, options, sign, mla_latent, drafter_layers
    )
    return tpath, dpath


def _passthrough_weight(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Layers that add nothing (zero output projections, biases and experts, unit norms);
    the rest small and seeded by name."""
    if name.endswith(("o_proj.weight", "down_proj.weight", ".bias", "_bias")) or ".mlp." in name and "experts" in name:
        return np.zeros(shape, np.float32)
    if "norm" in name:
        return np.ones(shape, np.float32)
    return np.random.default_rng(zlib.crc32(name.encode())).normal(0, 0.02, shape).astype(np.float32)


#: SiLU(x)·x + SiLU(-x)·x = x²·tanh(x/2): tanh(1/2) for x = ±1 (the normed ±1 embedding)
_SILU_PAIR = float(np.tanh(0.5))


def _flip_weight(name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """The MLP of a layer that adds -2x to the residual x (±1 entries): the stream's sign flips.

    Llama/DeepSeek MLP (I = 2H): gate = [x; -x], up = [x; x], down sums both halves, scaled.
    gpt-oss experts (interleaved gate/up, gate in the even columns, up 0 so ``up + 1`` is 1):
    glu(x) - glu(-x) = x exactly, and every expert is the same, so routing does not matter.
    """
    H = KNOWN_H
    eye = np.eye(H, dtype=np.float32)
    if name.endswith("mlp.gate_proj.weight"):
        return np.concatenate([eye, -eye])
    if name.endswith("mlp.up_proj.weight"):
        return np.concatenate([eye, eye])
    if name.endswith("mlp.down_proj.weight"):
        return np.concatenate([eye, eye], axis=1) * (-2.0 / _SILU_PAIR)
    if name.endswith("mlp.experts.gate_up_proj"):
        w = np.zeros(shape, np.float32)
        w[:, np.arange(H), 2 * np.arange(H)] = 1.0
        w[:, np.arange(H), 2 * (np.arange(H) + H)] = -1.0
        return w
    if name.endswith("mlp.experts.down_proj"):
        w = np.zeros(shape, np.float32)
        w[:, np.arange(H), np.arange(H)] = -2.0
        w[:, np.arange(H) + H, np.arange(H)] = 2.0
        return w
    return None


def _known_target(
    out: Path,
    target: str,
    e: np.ndarray,
    num_layers: int,
    force: bool,
    target_arch: str = "llama",
    flips: Sequence[int] = (),
    mla_latent: int = 256,
) -> Path:
    ids = np.arange(KNOWN_V)
    nxt = {"repeat": ids, "swap": swap_pairs(ids), "split": np.where(ids < KNOWN_SPLIT, ids, swap_pairs(ids))}
    if target not in nxt:
        raise ConfigError(f"unknown known-pair target {target!r}; choose repeat, swap or split")
    head = e[nxt[target]]
    flip_prefixes = tuple(f"model.layers.{i}.mlp." for i in flips)

    def tw(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name == "model.embed_tokens.weight":
            return e
        if name == "lm_head.weight":
            return head
        flip = _flip_weight(name, shape) if name.startswith(flip_prefixes) else None
        return flip if flip is not None else _passthrough_weight(name, shape)

    common: dict[str, Any] = {"hidden_size": KNOWN_H, "num_layers": num_layers, "vocab_size": KNOWN_V}
    common["config_overrides"] = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}  # tokens 0/1 never appear
    if target_arch == "deepseek":
        tpath = build_deepseek_target(out, **common, weight_fn=tw, force=force, mla_latent=mla_latent)
    elif target_arch == "gpt_oss":
        tpath = build_gpt_oss_target(out, **common, weight_fn=tw, force=force)
    elif target_arch != "llama":
        raise ConfigError(f"unknown target_arch {target_arch!r}; choose llama, deepseek or gpt_oss")
    else:
        tpath = build_target(
            out,
            hidden_size=KNOWN_H,
            num_layers=num_layers,
            num_heads=2,
            num_kv_heads=2,
            intermediate_size=128,
            vocab_size=KNOWN_V,
            weight_fn=tw,
            force=force,
        )
    return tpath


def _known_drafter(
    out: Path,
    drafter: str,
    flavor: str,
    e: np.ndarray,
    aux_layer_ids: Sequence[int],
    force: bool,
    options: dict[str, bool] | None = None,
    fc_sign: float = 1.0,
    mla_latent: int = 256,
    num_layers: int = 1,
) -> Path:
    draft_ids = np.arange(KNOWN_VD_LO, KNOWN_VD_HI)
    pred = draft_ids if drafter == "id" else swap_pairs(draft_ids)  # row i scores the token pred^-1(ids[i])

    def dw(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name == "fc.weight":
            w = np.zeros(shape, np.float32)
            w[:, :KNOWN_H] = fc_sign * np.eye(KNOWN_H, dtype=np.float32)
            return w
        if name == "lm_head.weight":
            return e[pred]
        return _passthrough_weight(name, shape)

    return build_drafter(
        out,
        flavor,
        hidden_size=KNOWN_H,
        num_heads=2,
        num_kv_heads=2,
        intermediate_size=128,
        vocab_size=KNOWN_V,
        draft_vocab_size=len(draft_ids),
        mapping=draft_ids,
        aux_layer_ids=aux_layer_ids,
        weight_fn=dw,
        config_overrides={"bos_token_id": 0, "eos_token_id": 1},
        force=force,
        num_aux=len(aux_layer_ids),
        fc_norm=(options or {}).get("fc_norm", False),
        norm_before_fc=(options or {}).get("norm_before_fc", False),
        norm_output=(options or {}).get("norm_output", False),
        qk_norm=(options or {}).get("qk_norm", False),
        mla_latent=mla_latent,
        num_layers=num_layers,
    )


def known_prompts(
    n: int = 8, length: int = 8, seed: int = 0, lo: int = KNOWN_VD_LO, hi: int = KNOWN_VD_HI
) -> list[list[int]]:
    """Prompts of token ids from ``lo`` up to ``hi`` (default: the draft range, 64..191)."""
    if not KNOWN_VD_LO <= lo < hi <= KNOWN_VD_HI:
        raise ConfigError(f"known prompts draw from {KNOWN_VD_LO}..{KNOWN_VD_HI - 1}, not {lo}..{hi - 1}")
    rng = np.random.default_rng(seed)
    return [rng.integers(lo, hi, size=length).tolist() for _ in range(n)]
