"""Small FP8 drafters in each quantized layout, built from a bf16 drafter by the formats' own rules
(each rule cited in ckpttools/formats/quant.py): compressed-tensors through ``ckpt quantize`` (and by
hand for block scales), ModelOpt FP8 (per-tensor ``weight_scale`` and ``input_scale`` as scalars,
``quant_method: modelopt``, ``quant_algo: FP8``), and FP8 with block scales (``quant_method: fp8``,
``weight_block_size``, ``weight_scale_inv``). ``mutate`` writes a copy with tensors or config changed,
for the hostile cases."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from ckpttools.demo.tiny import build_drafter, write_tensors
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.ops.quantize import quantize, quantize_weight

E4M3 = ml_dtypes.float8_e4m3fn
#: the decoder layer's linears of a one-layer drafter
LINEARS = tuple(
    f"layers.0.{m}.weight"
    for m in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    )
)


def arrays(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every tensor of a checkpoint (in its dtype) and its config."""
    with open_checkpoint(path) as ck:
        return {n: np.array(ck.read(n)) for n in ck.tensors}, dict(ck.config or {})


def bf16(root: Path, name: str = "bf16", **kw: Any) -> Path:
    """A random bf16 drafter (hidden 64, Vd 256 of V 1024) whose lm_head rows differ in size, so
    per-channel scales differ row by row."""
    scale = np.linspace(0.25, 4.0, 256, dtype=np.float32)[np.random.default_rng(1).permutation(256)]

    def weights(n: str, shape: tuple[int, ...]) -> np.ndarray:
        a = np.random.default_rng(zlib.crc32(n.encode())).standard_normal(shape).astype(np.float32) * 0.05
        if n == "lm_head.weight":
            a = a * scale[: shape[0], None]
        return a.astype(ml_dtypes.bfloat16) if a.ndim > 1 else np.ones(shape, ml_dtypes.bfloat16)

    kw.setdefault("weight_fn", weights)
    return build_drafter(root / name, "sglang", **kw)


def ct(root: Path, src: Path, name: str = "ct", scheme: str = "fp8-per-channel", lm_head: bool = False) -> Path:
    """compressed-tensors FP8 by ``ckpt quantize`` (lm_head too through vLLM's reading, which quantizes it)."""
    engine = "vllm" if lm_head else "sglang"
    return Path(
        quantize(src, root / name, scheme=scheme, engine=engine, include=("lm_head",) if lm_head else ()).output
    )


def _write(out: Path, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> Path:
    return write_tensors(out, tensors, config)


def modelopt(root: Path, src: Path, name: str = "modelopt", ignore: tuple[str, ...] = ("lm_head", "fc")) -> Path:
    """ModelOpt FP8: per-tensor scalar weight_scale (amax / 448) and input_scale on each quantized linear."""
    t, cfg = arrays(src)
    out: dict[str, np.ndarray] = {}
    for n, a in t.items():
        mod = n[: -len(".weight")]
        if n.endswith(".weight") and a.ndim == 2 and mod not in ignore:
            q, s = quantize_weight(a.astype(np.float32), "tensor")
            out[n], out[mod + ".weight_scale"] = q, s.reshape(())
            out[mod + ".input_scale"] = np.asarray(0.01, np.float32)
        else:
            out[n] = a
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8", "ignore": list(ignore)}
    return _write(root / name, out, cfg)


def block_quantize(a: np.ndarray, block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """E4M3 values and float32 scales (ceil(out/bn), ceil(in/bk)), one per block: amax / 448."""
    w = a.astype(np.float32)
    bn, bk = block
    rows, cols = -(-w.shape[0] // bn), -(-w.shape[1] // bk)
    s = np.ones((rows, cols), np.float32)
    q = np.zeros(w.shape, E4M3)
    for i in range(rows):
        for j in range(cols):
            blk = w[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk]
            m = float(np.abs(blk).max()) / 448.0 or 1.0
            s[i, j] = m
            q[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk] = np.clip(blk / np.float32(m), -448, 448).astype(E4M3)
    return q, s


def block(
    root: Path, src: Path, name: str = "block", size: tuple[int, int] = (32, 32), head: bool = False, style: str = "fp8"
) -> Path:
    """FP8 with block scales: ``style`` fp8 (quant_method fp8, weight_scale_inv) or ct (compressed-tensors
    strategy block, weight_scale)."""
    t, cfg = arrays(src)
    out: dict[str, np.ndarray] = {}
    suffix = ".weight_scale_inv" if style == "fp8" else ".weight_scale"
    for n, a in t.items():
        mod = n[: -len(".weight")]
        if n in LINEARS or (head and n == "lm_head.weight"):
            out[n], out[mod + suffix] = block_quantize(a, size)
        else:
            out[n] = a
    if style == "fp8":
        qc: dict[str, Any] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": list(size),
        }
        qc["ignored_layers"] = ["fc"] if head else ["lm_head", "fc"]
    else:
        w = {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": list(size), "symmetric": True}
        qc = {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {**w, "dynamic": False}}},
            "ignore": ["fc"] + ([] if head else ["lm_head"]),
        }
    cfg["quantization_config"] = qc
    return _write(root / name, out, cfg)


def mutate(
    src: Path,
    out: Path,
    *,
    drop: tuple[str, ...] = (),
    tensors: dict[str, np.ndarray] | None = None,
    config: Callable[[dict[str, Any]], Any] | None = None,
) -> Path:
    """A copy of ``src`` with tensors dropped or replaced and the config edited in place by ``config``."""
    t, cfg = arrays(src)
    for n in drop:
        t.pop(n)
    t.update(tensors or {})
    if config is not None:
        config(cfg)
    return _write(out, t, cfg)


def write_config(path: Path, cfg: dict[str, Any]) -> None:
    """Replace a checkpoint's config.json (a config nested or huge past what write_tensors writes)."""
    (path / "config.json").write_text(json.dumps(cfg))
