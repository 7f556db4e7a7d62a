"""``ckpt verify --engine torch``: accept length offline, with no server.

The target runs through transformers (hidden states out, KV cache cropped after each
verify). The drafter is a PyTorch EAGLE-3 forward written after SGLang's Llama drafter
class (the release table's ``sglang_llama`` loader; engines/releases.py cites it):

- the first draft pass sees fc(concat of the target's aux states), the aux state of
  layer id being that layer's output (HF ``hidden_states[id + 1]``);
- layer 0 attends over [input_layernorm(embedding); hidden_norm(hidden)] with RoPE and
  its own KV cache; later layers fuse the residual into hidden_norm (input_layernorm in a
  vLLM-layout drafter, as vLLM reads it);
- MLP, final norm, lm_head over the draft vocabulary, d2t to target ids;
- later draft steps feed back the drafter's own pre-norm hidden state.

An MLA drafter (SGLang's MLA drafter class) gets DeepSeek-V2 multi-latent attention with
YaRN (:class:`MlaAttention`); a Qwen3-architecture drafter gets its per-head q_norm/k_norm.

EAGLE's alignment: the target's hidden state at position t goes with token x_{t+1} and
predicts x_{t+2}. Chain drafting of K tokens, greedy verification; accept length is
tokens per verify step (accepted drafts + 1), as SGLang and vLLM count it.

torch and transformers are imported here only.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ckpttools.engines.http import RequestResult
from ckpttools.errors import CkptError, ConfigError, opt
from ckpttools.formats.config import aux_layer_ids, essentials, require_valid_config
from ckpttools.engines.aux_rules import (
    LATER_LAYER_NORM,
    capture_rule,
    default_boundaries,
    fc_options,
    layout_engine,
)
from ckpttools.engines.engine import other_server_engine
from ckpttools.engines.flavor import detect_flavor
from ckpttools.formats.names import canonical_name
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.measuring.request import MeasureRequest, Offline
from ckpttools.measuring.verify import VerifyReport, load_prompts, summarize, verdict_line

__all__ = ["Eagle3Drafter", "MlaAttention", "TorchSpeculator", "check_device", "verify_torch", "measure_offline"]


def _torch():
    try:
        import torch
    except ImportError:
        raise CkptError(
            "the offline torch engine needs torch and transformers",
            hint="pip install 'ckpttools[torch]' (or torch and transformers)",
        ) from None
    return torch


#: the devices the offline engine runs on: torch's names for the CPU, a CUDA GPU and Apple's GPU
_DEVICE = re.compile(r"(cpu|cuda|mps)(?::(\d{1,4}))?")
_DEVICE_HINT = f"give {opt('device')} cpu, cuda, cuda:N (a GPU's index) or mps"


def check_device(device: Any) -> str:
    """``device``, when this torch build can run on it on this machine: ``cpu``; ``cuda`` or
    ``cuda:N`` (a CUDA build, and a GPU of that index visible); ``mps`` (Apple's GPU).

    Raises:
        CkptError: not a device name, another kind of device, or one this build or machine lacks.
    """
    m = _DEVICE.fullmatch(device) if isinstance(device, str) else None
    if m is None:
        shown = repr(device) if len(repr(device)) <= 80 else repr(device)[:80] + "..."
        raise CkptError(f"{shown} is not a device the offline engine runs on", hint=_DEVICE_HINT)
    torch = _torch()
    kind, index = m[1], None if m[2] is None else int(m[2])
    import warnings

    with warnings.catch_warnings():  # a CUDA build without a driver warns on stderr when asked
        warnings.simplefilter("ignore")
        if kind == "cuda":
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:  # ROCm serves "cuda" too
                why = f"this torch ({torch.__version__}) is built without CUDA"
            elif n == 0:
                why = "no CUDA GPU is visible (check the driver and CUDA_VISIBLE_DEVICES)"
            elif index is not None and index >= n:
                why = f"this machine shows {n} CUDA GPU(s), cuda:0 to cuda:{n - 1}"
            else:
                return device
        elif kind == "mps":
            if torch.backends.mps.is_available() and index in (None, 0):
                return device
            why = "Apple's GPU (MPS) is not available to this torch" if index in (None, 0) else "there is only mps:0"
        else:
            return device
    raise CkptError(f"device {device}: {why}", hint=_DEVICE_HINT)


def _rms(x, w, eps):
    torch = _torch()
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _yarn_mscale(scale: float, m: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


class MlaAttention:
    """DeepSeek-V2 multi-latent attention as SGLang computes it in the MLA drafter (engines/claims.py
    ``mla_probe``: its MLA attention over [embedding; hidden]). q = q_b(rms(q_a(x))) (or q_proj), per head [nope | rope]; kv_a(x) =
    [latent | k_rope]; k_nope and v from kv_b(rms(latent)); k_rope is shared by the heads.
    RoPE is interleaved unless ``rope_interleave`` is false (deepseek_v2.py:1883); any
    rope_scaling is read as DeepSeek YaRN (deepseek_v2.py:1782-1783; rope_variant.py:334-410:
    ramped inv_freq over original_max_position_embeddings, cos/sin times
    mscale(factor, mscale) / mscale(factor, mscale_all_dim) * attn_factor), and the softmax
    scale is qk_head_dim^-0.5 times mscale(factor, mscale_all_dim)^2 (model_config.py:1961-1985).
    Weights are read by name from the drafter; the KV cache holds the expanded keys and values.
    """

    def __init__(self, cfg: dict[str, Any], device: str = "cpu") -> None:
        torch = _torch()
        require_valid_config(cfg, "the MLA drafter's config")
        self.heads = int(cfg["num_attention_heads"])
        self.nope, self.rope = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"])
        self.vd = int(cfg["v_head_dim"])
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.interleave = bool(cfg.get("rope_interleave", True))
        got = cfg.get("rope_parameters")
        params: dict[str, Any] = got if isinstance(got, dict) else {}
        rs = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else None
        if rs is None and params and params.get("rope_type", "default") != "default":
            rs = params
        base = float(cfg.get("rope_theta") or params.get("rope_theta") or 10000.0)
        dim = self.rope
        pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        self.scale = (self.nope + self.rope) ** -0.5
        self.mscale = 1.0
        inv = 1.0 / pos_freqs
        if rs:
            f = float(rs.get("factor", 1.0))
            orig = float(rs.get("original_max_position_embeddings", cfg.get("max_position_embeddings", 2048)))

            def corr(rot: float) -> float:
                return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

            lo = max(math.floor(corr(float(rs.get("beta_fast", 32)))), 0)
            hi = min(math.ceil(corr(float(rs.get("beta_slow", 1)))), dim - 1)
            ramp = ((torch.arange(dim // 2, dtype=torch.float32) - lo) / ((hi - lo) or 0.001)).clamp(0, 1)
            keep = (1 - ramp) * float(rs.get("extrapolation_factor", 1))
            inv = inv / f * (1 - keep) + inv * keep
            all_dim = float(rs.get("mscale_all_dim", 0) or 0)
            self.mscale = (
                _yarn_mscale(f, float(rs.get("mscale", 1))) / _yarn_mscale(f, all_dim) * float(rs.get("attn_factor", 1))
            )
            if rs.get("apply_yarn_scaling", True) and rs.get("apply_scale", True):
                self.scale *= _yarn_mscale(f, all_dim) ** 2
        self.inv_freq = inv.to(device)

    def rotate(self, x, pos):
        """RoPE on the last dim of x [T, h, rope], interleaved pairs or NeoX halves."""
        torch = _torch()
        f = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = (f.cos() * self.mscale)[:, None, :], (f.sin() * self.mscale)[:, None, :]
        x = x.float()
        if self.interleave:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
        x1, x2 = x[..., : self.rope // 2], x[..., self.rope // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def __call__(self, w: dict[str, Any], p: str, x, pos, cache: tuple[Any, Any]):
        """Attention of x [T, D] at positions pos over the cache; returns (output [T, H], new cache)."""
        torch = _torch()
        T, h = x.shape[0], self.heads
        xf = x.float()
        if p + "q_a_proj.weight" in w:
            qa = xf @ w[p + "q_a_proj.weight"].float().T
            q = _rms(qa, w[p + "q_a_layernorm.weight"], self.eps) @ w[p + "q_b_proj.weight"].float().T
        else:
            q = xf @ w[p + "q_proj.weight"].float().T
        q = q.view(T, h, self.nope + self.rope)
        kva = xf @ w[p + "kv_a_proj_with_mqa.weight"].float().T
        latent, k_pe = kva[:, : -self.rope], kva[:, -self.rope :]
        kvb = _rms(latent, w[p + "kv_a_layernorm.weight"], self.eps) @ w[p + "kv_b_proj.weight"].float().T
        kvb = kvb.view(T, h, self.nope + self.vd)
        k_pe = self.rotate(k_pe[:, None, :], pos).expand(T, h, self.rope)
        q = torch.cat([q[..., : self.nope], self.rotate(q[..., self.nope :], pos)], dim=-1)
        k = torch.cat([kvb[..., : self.nope], k_pe], dim=-1)
        v = kvb[..., self.nope :]
        k = k if cache[0] is None else torch.cat([cache[0], k])
        v = v if cache[1] is None else torch.cat([cache[1], v])
        S = k.shape[0]
        scores = torch.einsum("thd,shd->hts", q, k) * self.scale
        mask = torch.arange(S, device=x.device)[None, :] > torch.arange(S - T, S, device=x.device)[:, None]
        scores = scores.masked_fill(mask[None], float("-inf"))
        out = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(T, h * self.vd)
        return (out @ w[p + "o_proj.weight"].float().T).to(x.dtype), (k, v)


def _load_drafter(path: str | Path, device: str, dtype: Any) -> tuple[dict[str, Any], str, Any, dict[str, Any]]:
    """The drafter's config, layout, compute dtype and tensors by canonical name."""
    torch = _torch()
    with open_checkpoint(path, download=True) as ck:
        cfg = ck.config or {}
        require_valid_config(cfg, str(path))  # the one config guard, before any size is read from it
        flavor = detect_flavor(cfg, ck.tensors.keys()).kind
        dt = dtype or {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(
            essentials(cfg).torch_dtype or "", torch.float32
        )
        w = {}
        for n in ck.tensors:
            c = canonical_name(n)[0]
            a = ck.read(n)
            if c in ("d2t", "t2d"):
                w[c] = torch.from_numpy(a.astype("int64") if c == "d2t" else a.astype(bool))
            else:
                w[c] = torch.from_numpy(a.astype("float32")).to(device=device, dtype=dt)
    return cfg, flavor, dt, w


class Eagle3Drafter:
    """An EAGLE-3 drafter (SGLang's semantics) with its own KV cache, batch size 1."""

    def __init__(
        self,
        path: str | Path,
        target_embed: Any,
        num_target_layers: int,
        device: str = "cpu",
        dtype: Any = None,
        target_arch: str | None = None,
    ) -> None:
        torch = _torch()
        check_device(device)
        cfg, flavor, self.dtype, w = _load_drafter(path, device, dtype)
        e = essentials(cfg)
        H, heads = e.hidden_size, e.num_attention_heads
        if not isinstance(H, int) or not isinstance(heads, int):
            raise ConfigError("the drafter's config needs integer hidden_size and num_attention_heads")
        self.H: int = H
        self.heads: int = heads
        self.kv: int = e.num_key_value_heads or heads
        self.hd: int = e.head_dim or H // heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = float(e.rope_theta or 10000.0)
        self.mla = MlaAttention(cfg, device) if any(n.endswith("kv_a_proj_with_mqa.weight") for n in w) else None
        rs = e.rope_scaling
        scaled = isinstance(rs, dict) and rs.get("rope_type", rs.get("type")) not in (None, "default")
        #: the MLA attention applies the drafter's rope scaling itself; the Llama one does not
        self.rope_note: str | None = (
            f"rope_scaling {rs} ignored: plain RoPE is used" if scaled and self.mla is None else None
        )
        self.L = e.num_hidden_layers or 1
        self.w = w
        self.device = device
        self.embed = w.get("embed_tokens.weight", target_embed.to(device=device, dtype=self.dtype))
        vd = w["lm_head.weight"].shape[0]
        d2t = w.get("d2t")
        self.hot = (d2t + torch.arange(len(d2t))) if d2t is not None else torch.arange(vd)
        ids, _ = aux_layer_ids(cfg)
        self.aux_ids = list(ids) if ids is not None else None
        engine = layout_engine(flavor)
        self.opts = fc_options(cfg, engine)
        #: the norm of layers 1 and up, as the engine whose layout this is reads it
        self.later_norm = LATER_LAYER_NORM[engine][0]
        #: the target boundaries captured (inputs of these layers), read as the engine reads the ids
        self.rule = capture_rule(engine, target_arch)[0]
        if ids is None:
            self.boundaries = default_boundaries(num_target_layers)
        else:
            self.boundaries = self.rule.boundaries(ids, num_target_layers)
        self.cache: list[tuple[Any, Any]] = [(None, None)] * self.L
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        self.inv_freq = inv.to(device)

    def length(self) -> int:
        k = self.cache[0][0]
        return 0 if k is None else int(k.shape[0])

    def truncate(self, n: int) -> None:
        self.cache = [(k[:n], v[:n]) if k is not None else (None, None) for k, v in self.cache]

    def _rope(self, x, pos):
        torch = _torch()
        f = pos.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2 :]
        rot = torch.cat([-x2, x1], dim=-1)
        return (x.float() * cos + rot.float() * sin).to(x.dtype)

    def _attn(self, i: int, x, pos):
        torch = _torch()
        p = f"layers.{i}.self_attn."
        if self.mla is not None:
            out, self.cache[i] = self.mla(self.w, p, x, pos, self.cache[i])
            return out
        T = x.shape[0]
        q = (x @ self.w[p + "q_proj.weight"].T).view(T, self.heads, self.hd)
        k = (x @ self.w[p + "k_proj.weight"].T).view(T, self.kv, self.hd)
        v = (x @ self.w[p + "v_proj.weight"].T).view(T, self.kv, self.hd)
        if p + "q_norm.weight" in self.w:  # a Qwen3-architecture drafter: per-head RMSNorm before RoPE
            q, k = _rms(q, self.w[p + "q_norm.weight"], self.eps), _rms(k, self.w[p + "k_norm.weight"], self.eps)
        q, k = self._rope(q, pos), self._rope(k, pos)
        ck, cv = self.cache[i]
        k = k if ck is None else torch.cat([ck, k])
        v = v if cv is None else torch.cat([cv, v])
        self.cache[i] = (k, v)
        S = k.shape[0]
        rep = self.heads // self.kv
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q.float(), kk.float()) / self.hd**0.5
        qpos = torch.arange(S - T, S, device=x.device)
        mask = torch.arange(S, device=x.device)[None, :] > qpos[:, None]
        scores = scores.masked_fill(mask[None], float("-inf"))
        out = torch.einsum("hts,shd->thd", scores.softmax(-1), vv.float()).to(x.dtype).reshape(T, -1)
        return out @ self.w[p + "o_proj.weight"].T

    def _mlp(self, i: int, x):
        torch = _torch()
        p = f"layers.{i}.mlp."
        g = x @ self.w[p + "gate_proj.weight"].T
        u = x @ self.w[p + "up_proj.weight"].T
        return (torch.nn.functional.silu(g.float()) * u.float()).to(x.dtype) @ self.w[p + "down_proj.weight"].T

    def forward(self, token_ids, hidden, pos):
        """One pass over T positions: returns (target ids of the argmax drafts [T], pre-norm hidden [T, H])."""
        torch = _torch()
        w = self.w
        token_ids, pos = token_ids.to(self.device), pos.to(self.device)
        embeds = self.embed[token_ids]
        if hidden.shape[-1] != self.H:
            ones = torch.ones(hidden.shape[-1], dtype=hidden.dtype, device=hidden.device)
            if self.opts.norm_before_fc:  # as the engine: the flag decides; a missing weight stays at 1
                hidden = _rms(hidden, w.get("input_norm.weight", ones), self.eps)
            if self.opts.fc_norm:
                chunks = hidden.chunk(self.opts.num_aux, dim=-1)
                one = ones[: chunks[0].shape[-1]]
                hidden = torch.cat(
                    [_rms(c, w.get(f"fc_norm.{j}.weight", one), self.eps) for j, c in enumerate(chunks)], -1
                )
            hidden = hidden @ w["fc.weight"].T + (w["fc.bias"] if "fc.bias" in w else 0)
        residual = None
        for i in range(self.L):
            p = f"layers.{i}."
            if i == 0:
                residual = hidden
                x = torch.cat(
                    [
                        _rms(embeds, w[p + "input_layernorm.weight"], self.eps),
                        _rms(hidden, w[p + "hidden_norm.weight"], self.eps),
                    ],
                    dim=-1,
                )
            else:
                residual = hidden + residual
                x = _rms(residual, w[p + self.later_norm + ".weight"], self.eps)
            a = self._attn(i, x, pos)
            residual = a + residual
            hidden = self._mlp(i, _rms(residual, w[p + "post_attention_layernorm.weight"], self.eps))
        pre = hidden + residual
        normed = _rms(pre, w["norm.weight"], self.eps)
        logits = normed.float() @ w["lm_head.weight"].float().T
        return self.hot[logits.argmax(-1).cpu()], normed if self.opts.norm_output else pre


@contextmanager
def _transformers_log_held() -> Iterator[Callable[[], None]]:
    """transformers' log records held while the target loads; the yielded call says them (after a
    load that worked). A load that fails is one error line, so what transformers logged on its way
    to the failure (a warning about the same config field) is dropped with it."""
    import logging

    class Held(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    lg, held = logging.getLogger("transformers"), Held()
    saved = lg.handlers[:]
    lg.handlers = [held]

    def replay() -> None:  # called after the block: each record to transformers' own handlers again
        for r in held.records:
            lg.handle(r)

    try:
        yield replay
    finally:
        lg.handlers = saved


def _no_bom(path: Path) -> None:
    """Refuse a config.json that starts with a UTF-8 byte-order mark: ckpttools reads past one,
    transformers' reader refuses it ("not a valid JSON file"), so say which it is."""
    from ckpttools.io.checkpoint import starts_with_bom

    if starts_with_bom(path):
        raise ConfigError(
            f"{path}: starts with a UTF-8 byte-order mark, which transformers refuses",
            path=str(path),
            hint="save config.json as UTF-8 without a byte-order mark",
        )


class TorchSpeculator:
    """Target (transformers) plus drafter: greedy chain speculation, counting accepts."""

    def __init__(
        self, target: str | Path, drafter: str | Path, steps: int = 3, device: str = "cpu", dtype: str | None = None
    ) -> None:
        from ckpttools.io.env import check_hub_env

        torch = _torch()
        check_device(device)
        check_hub_env()  # transformers imports huggingface_hub, which reads its variables at import
        try:
            from transformers import AutoModelForCausalLM
            from transformers.utils import logging as hf_logging
        except ImportError:
            raise CkptError("the offline torch engine needs transformers", hint="pip install transformers") from None
        hf_logging.disable_progress_bar()  # the report is the output; no per-load bars on stderr
        with open_checkpoint(target) as tck:
            tcfg, (where, rev) = tck.config, tck.load_source()
        require_valid_config(tcfg, f"target {target}")  # transformers builds the target from these sizes
        tcfg_dtype = essentials(tcfg).torch_dtype
        tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
        self.dtype = tdt.get(dtype or tcfg_dtype or "float32", torch.float32)
        if rev is None:
            _no_bom(Path(where) / "config.json")
        try:
            with _transformers_log_held() as replay:  # said after a load, dropped with a refusal
                model: Any = AutoModelForCausalLM.from_pretrained(where, revision=rev, dtype=self.dtype)
            replay()
        except Exception as e:  # noqa: BLE001 - transformers' refusal of the config or its files: one line
            first = (str(e).strip().splitlines() or [""])[0][:300]
            raise CkptError(
                f"transformers could not build the target {target}: {type(e).__name__}: {first}",
                path=str(target),
                hint="check the target's config.json against what its model class reads (its rope_scaling type, "
                "a nested text_config); CKPT_DEBUG=1 shows transformers' traceback",
            ) from e
        self.model = model.to(device).eval()
        self.device = device
        self.L = self.model.config.num_hidden_layers
        emb = self.model.get_input_embeddings().weight.detach()
        arch = (getattr(self.model.config, "architectures", None) or [None])[0]
        self.drafter = Eagle3Drafter(drafter, emb, self.L, device, self.dtype, arch)
        self.steps = steps
        d = self.drafter
        bad = d.rule.uncaptured(d.aux_ids, self.L) if d.aux_ids is not None else []
        if bad:
            raise CkptError(
                f"aux layer ids {bad} are out of reach for a {self.L}-layer {arch}: the engine {d.rule.describe()} "
                f"and captures boundaries 0..{d.rule.top(self.L)} (read from {d.rule.source})"
            )
        self._last: list[Any] = []  # the last layer's output before the final norm (boundary L)
        if self.L in d.boundaries:
            norm = self.model.get_decoder().norm
            norm.register_forward_pre_hook(lambda mod, args: self._last.append(args[0]))

    def _target(self, ids: list[int], cache: Any) -> tuple[Any, Any]:
        torch = _torch()
        import warnings

        x = torch.tensor([ids], device=self.device)
        with warnings.catch_warnings():  # transformers 5.2x renames past_key_values; older 5.x lack the new name
            warnings.simplefilter("ignore", FutureWarning)
            out = self.model(input_ids=x, past_key_values=cache, use_cache=True, output_hidden_states=True)
        states = [self._last.pop()[0] if b == self.L else out.hidden_states[b][0] for b in self.drafter.boundaries]
        self._last.clear()
        aux = torch.cat(states, dim=-1)
        return out.logits[0].argmax(-1).tolist(), aux

    def generate(self, prompt: list[int], max_new_tokens: int) -> dict[str, Any]:
        """Greedy speculative generation; returns tokens and acceptance counts."""
        torch = _torch()
        from transformers import DynamicCache

        # inference mode, not no_grad: no view or version tracking on the tensors made here (only the
        # drafter's KV cache outlives the call, and the next generate starts a new one); on the story's
        # models the 12 prompts' generation took a median 1.41 s of CPU against 1.54 s, the same tokens
        # (8 alternating runs each, 2026-12-07)
        with torch.inference_mode():
            cache = DynamicCache()
            d = self.drafter
            d.cache = [(None, None)] * d.L
            preds, aux = self._target(prompt, cache)
            last = preds[-1]
            out = [last]
            n = len(prompt)
            toks, h = d.forward(torch.tensor(prompt[1:] + [last]), aux, torch.arange(n))
            draft_tok, draft_h = int(toks[-1]), h[-1:]
            verify_steps = accepted = 0
            hist = [0] * (self.steps + 1)
            while len(out) < max_new_tokens:
                base = d.length()
                drafts = [draft_tok]
                for k in range(1, self.steps):
                    t2, h2 = d.forward(torch.tensor([drafts[-1]]), draft_h, torch.tensor([base + k - 1]))
                    drafts.append(int(t2[-1]))
                    draft_h = h2[-1:]
                ctx = cache.get_seq_length()
                y, vaux = self._target([last, *drafts], cache)
                a = 0
                while a < len(drafts) and drafts[a] == y[a]:
                    a += 1
                verify_steps += 1
                accepted += a
                hist[a] += 1
                new = drafts[:a] + [y[a]]
                drop = cache.get_seq_length() - (ctx + a + 1)  # rejected drafts and the bonus position
                if drop > 0:
                    cache.crop(-drop)  # transformers 5 takes the number of positions to remove
                d.truncate(base)
                toks, h = d.forward(torch.tensor(new), vaux[: a + 1], torch.arange(base, base + a + 1))
                draft_tok, draft_h = int(toks[-1]), h[-1:]
                out += new
                last = y[a]
        return {"tokens": out[:max_new_tokens], "verify_steps": verify_steps, "accepted": accepted, "histogram": hist}


def _one(spec: TorchSpeculator, i: int, p: Any, max_new_tokens: int, steps: int) -> RequestResult:
    t = time.perf_counter()
    g = spec.generate(list(p.input_ids or []), max_new_tokens)
    r = RequestResult(
        i,
        p.category,
        completion_tokens=len(g["tokens"]),
        verify_steps=g["verify_steps"],
        accepted_drafts=g["accepted"],
        proposed_drafts=g["verify_steps"] * steps,
        latency_s=time.perf_counter() - t,
        histogram=g["histogram"],
        source="torch probe: 1 + accepted drafts / verify steps",
    )
    r.accept_length = 1 + (r.accepted_drafts or 0) / r.verify_steps if r.verify_steps else None
    r.extra["tokens"] = g["tokens"]
    return r


def verify_torch(
    target: str | Path,
    drafter: str | Path,
    *,
    steps: int = 3,
    prompts: str = "builtin",
    num_prompts: int | None = 16,
    max_new_tokens: int = 256,
    min_accept_len: float | None = None,
    tokenizer: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    context_lengths: list[int] | None = None,
    repeat: int = 1,
) -> VerifyReport:
    """The same report as the server engines, measured offline in PyTorch; with
    ``context_lengths``, also per context bin (prompts built to each length, as a server run
    builds them), with the target's and drafter's limits. A
    :class:`~ckpttools.measuring.request.MeasureRequest` with
    :class:`~ckpttools.measuring.request.Offline`, measured."""
    req = MeasureRequest(
        drafters=(str(drafter),),
        target=str(target),
        server=Offline(steps=steps, device=device, dtype=dtype),
        engine="torch",
        prompts=prompts,
        num_prompts=num_prompts,
        repeat=repeat,
        max_new_tokens=max_new_tokens,
        context_lengths=tuple(context_lengths or ()),
        min_accept_len=min_accept_len,
        tokenizer=tokenizer,
    )
    return measure_offline(req)


def measure_offline(req: MeasureRequest) -> VerifyReport:
    """An offline request (``req.server`` an :class:`~ckpttools.measuring.request.Offline`), measured here."""
    off = req.server
    assert isinstance(off, Offline) and req.target is not None and req.drafter is not None
    target, drafter, steps = req.target, req.drafter, off.steps
    tok = req.tokenizer
    if tok is None and (Path(target) / "tokenizer.json").is_file():
        tok = str(target)
    plist = load_prompts(req.prompts, req.num_prompts, tok, req.repeat)  # the cheap checks first: before torch loads
    if any(p.input_ids is None for p in plist):
        from ckpttools.io.fsutil import absent_words

        has = Path(target) / "tokenizer.json"
        linked = os.path.islink(has) and not has.exists()
        why = f"the target's tokenizer.json is {absent_words(has)}" if linked else "the target has no tokenizer.json"
        raise CkptError(
            f"text prompts need a tokenizer: {why}",
            hint=f"give {opt('tokenizer')}, or prompts with input_ids",
        )
    check_device(off.device)
    tcfg, dcfg, tctx = _validate_first(target, drafter)
    _past_context(plist, req.max_new_tokens, tctx)
    spec = TorchSpeculator(target, drafter, steps, off.device, off.dtype)
    rep = VerifyReport(
        engine="torch", url=None, num_prompts=len(plist), min_accept_len=req.min_accept_len, repeat=req.repeat
    )
    rep.server = {
        "target": str(target),
        "drafter": str(drafter),
        "steps": steps,
        "topk": 1,
        "device": off.device,
        "dtype": str(spec.dtype).removeprefix("torch."),
        "aux_layer_ids": spec.drafter.aux_ids,
        "aux_boundaries": spec.drafter.boundaries,
        "aux_rule": spec.drafter.rule.source,
    }
    _run_into(rep, spec, plist, req.max_new_tokens, steps)
    if req.context_lengths:
        bins = list(req.context_lengths)
        _context_bins(rep, spec, plist, (tcfg, dcfg), bins, req.max_new_tokens, steps)
    if req.min_accept_len is not None:
        rep.passed = rep.accept_length is not None and rep.accept_length >= req.min_accept_len
    if spec.drafter.rope_note:  # a caveat of how the figure was measured, not a failed request
        from ckpttools.io.fsutil import note

        rep.server["drafter_rope"] = spec.drafter.rope_note
        note(f"{spec.drafter.rope_note}: the drafter's attention here is not what an engine that scales it runs")
    rep.verdict = verdict_line(rep)
    return rep


def _past_context(plist: list[Any], max_new_tokens: int, tctx: int | None) -> None:
    """Say when the run's own prompts plus generation pass the target's context (``tctx``):
    transformers runs them anyway, at positions the target was not built for (a server would
    refuse or cut them)."""
    from ckpttools.io.fsutil import note

    longest = max((len(p.input_ids or []) for p in plist), default=0) + max_new_tokens
    if tctx and longest > tctx:
        note(
            f"prompts plus {max_new_tokens} new tokens reach {longest} tokens, past the target's context of "
            f"{tctx}: the figures include positions the target was not built for (give fewer new tokens)"
        )


def _validate_first(
    target: str | Path, drafter: str | Path
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, int | None]:
    """Refuse, as ``verify --launch`` does, a drafter that validate rejects against the target
    (read the way the engine its layout follows reads it), before torch loads either model. Each is
    opened and its config parsed once, for both engines' checks; returns (the target's config, the
    drafter's), as read."""
    from ckpttools.engines.opened import open_once, open_target
    from ckpttools.errors import EXIT_FINDINGS
    from ckpttools.ops.validate import validate

    from ckpttools.io.checkpoint import local_config_path

    bom_at = local_config_path(target)
    if bom_at is not None:  # the probe's own reader of the target, transformers, is what refuses it
        _no_bom(bom_at)
    opened, t = open_once(drafter), open_target(target)
    try:
        opened.require_checkpoint()  # a config.json alone: refused here, as the load would
        engine = layout_engine(opened.flavor.kind)
        rep = validate(opened, t, engine=engine)
        if rep.errors:  # a drafter the other engine serves as it is (a Qwen3 drafter in vLLM's class) is measured
            other = validate(opened, t, engine=other_server_engine(engine))
            rep = rep if other.errors else other
    finally:
        opened.close()
    if rep.errors:
        first = rep.errors[0]
        err = CkptError(
            f"{drafter} against {target}: validate found {len(rep.errors)} error(s) "
            f"({', '.join(f.id for f in rep.errors)}), e.g. {first.location}: {first.message}",
            path=str(drafter),
            hint=first.hint or "run ckpt validate DRAFTER --target TARGET and fix what it lists",
        )
        err.exit_code = EXIT_FINDINGS
        raise err
    return t.config_or_none(), opened.config, t.facts.context[0]  # the target's config read (validate passed)


def _run_into(rep: VerifyReport, spec: TorchSpeculator, plist: list[Any], max_new_tokens: int, steps: int) -> None:
    t0 = time.perf_counter()
    results = [_one(spec, i, p, max_new_tokens, steps) for i, p in enumerate(plist)]
    summarize(results, rep, steps)
    wall = time.perf_counter() - t0
    rep.output_tokens_per_s = rep.output_tokens / wall if wall else None
    rep.figures = "per-request"


def _context_bins(
    rep: VerifyReport,
    spec: TorchSpeculator,
    plist: list[Any],
    configs: tuple[dict[str, Any] | None, dict[str, Any] | None],
    lengths: list[int],
    max_new_tokens: int,
    steps: int,
) -> None:
    """Acceptance with prompts built to each length (as verify builds them for a server); ``configs``:
    the target's and the drafter's, as the check before the run read them."""
    from ckpttools.measuring.traffic import context_bins, context_limits

    def measure(built: list[Any]) -> VerifyReport:
        sub = VerifyReport(engine="torch", url=None, num_prompts=len(built), server=rep.server)
        _run_into(sub, spec, built, max_new_tokens, steps)
        return sub

    rep.context = context_bins(lengths, plist, context_limits(*configs, None), max_new_tokens, measure)
