"""remap of a quantized lm_head: its scales move with its rows.

:func:`adjust` is called by :func:`ckpttools.ops.remap.plan_remap` with the planned tensors, once
lm_head's rows are gathered into the destination's order:

- a per-channel scale (one per row, (Vd, 1) or (Vd,)) is gathered with the same rows, so row i and
  its scale stay together (it was copied in the old slot order before: every row scaled by another
  token's scale, written silently);
- a per-tensor scale (and a static input scale) is kept as it is;
- rows new to the drafter: ``zero`` writes E4M3 zeros with scale 1; ``mean`` writes the mean of the
  carried rows dequantized, quantized again with its own scale (per channel) or with the tensor's
  scale (per tensor: the mean of values within +-448 is within it too); ``target`` is refused (the
  target's rows would need quantizing with scales ckpttools would invent);
- a block-quantized lm_head (one scale per bn x bk block) is remapped only when every output block
  of bn rows is one whole source block, in order, or all filled: then the scale rows move by blocks.
  Any other remap is refused with the first row that breaks a block.
"""

from __future__ import annotations

import numpy as np

from ckpttools.errors import MappingError, opt
from ckpttools.formats.quant import FP8_MAX, QuantWeight, module_of, read_scheme
from ckpttools.io.checkpoint import Checkpoint, numpy_dtype
from ckpttools.io.plan import Gather, PlannedTensor, TensorRef
from ckpttools.ops.quantize import dequantize_weight

__all__ = ["adjust"]


def adjust(ck: Checkpoint, tensors: list[PlannedTensor], head_name: str, fill: str) -> list[PlannedTensor]:
    """``tensors`` with lm_head's scales moved like its rows (see the module's docstring)."""
    scheme = read_scheme(ck.config, {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()})
    mod = module_of(head_name)
    w = scheme.weight(mod) if mod else None
    if w is None or not w.quantized or w.scale is None:
        return tensors
    by_name = {t.name: i for i, t in enumerate(tensors)}
    head = tensors[by_name[head_name]]
    g = head.source
    assert isinstance(g, Gather)
    if fill == "target" and bool((g.part != 0).any()):
        raise MappingError(
            f"{ck.source}: {head_name} is {w.dtype}; rows filled from the target would have to be quantized, with "
            "scales ckpttools would have to invent",
            path=str(ck.source),
            tensor=head_name,
            hint=f"fill with {opt('fill')} zero or mean, or dequantize first (ckpt export --dtype bf16)",
        )
    gran = w.granularity
    if gran == "tensor":
        if fill == "mean" and bool((g.part < 0).any()):
            tensors[by_name[head_name]] = _with_fill(head, g, _mean_row_tensor(ck, w, g))
        return tensors
    if gran == "channel":
        head_fill, scale_fill = _channel_fill(ck, w, g, fill)
        tensors[by_name[head_name]] = _with_fill(head, g, head_fill)
        tensors[by_name[w.scale]] = _scale_gather(ck, w, g.part, g.rows, scale_fill)
        return tensors
    if gran == "block" and w.block:
        part, rows = _block_rows(ck, w, g)
        tensors[by_name[w.scale]] = _scale_gather(ck, w, part, rows, _one(w.scale_dtype))
        return tensors
    raise MappingError(
        f"{ck.source}: {w.scale} {w.scale_shape} is a {gran} scale of {head_name}: ckpttools cannot tell which rows it covers",
        path=str(ck.source),
        tensor=w.scale,
        hint="dequantize first (ckpt export --dtype bf16), then remap",
    )


def _with_fill(head: PlannedTensor, g: Gather, fill: bytes) -> PlannedTensor:
    return PlannedTensor(head.name, head.dtype, head.shape, Gather(g.refs, g.part, g.rows, fill))


def _one(dtype: str | None) -> bytes:
    return np.asarray([1.0], np.float32).astype(numpy_dtype(dtype or "F32")).tobytes()


def _scale_gather(ck: Checkpoint, w: QuantWeight, part: np.ndarray, rows: np.ndarray, fill: bytes) -> PlannedTensor:
    assert w.scale is not None and w.scale_shape is not None and w.scale_dtype is not None
    ref = TensorRef.of(ck, w.scale)
    shape = (len(part), *w.scale_shape[1:])
    return PlannedTensor(w.scale, w.scale_dtype, shape, Gather((ref,), np.where(part == 0, 0, -1), rows, fill))


def _carried(g: Gather) -> np.ndarray:
    return np.sort(g.rows[g.part == 0])


def _deq_rows(ck: Checkpoint, w: QuantWeight, rows: np.ndarray) -> np.ndarray:
    assert w.scale is not None
    q = ck.read_rows_pread(w.weight, rows)
    s = np.asarray(ck.read(w.scale)).astype(np.float32)
    s = s.reshape(-1)[rows].reshape(-1, 1) if w.granularity == "channel" else s
    return dequantize_weight(q, s)


def _mean_row_tensor(ck: Checkpoint, w: QuantWeight, g: Gather) -> bytes:
    """Per tensor: the carried rows' mean in the tensor's own scale, clipped to the format's range."""
    q = ck.read_rows_pread(w.weight, _carried(g)).astype(np.float64)
    m = q.mean(axis=0) if len(q) else np.zeros(w.shape[1])
    top = FP8_MAX[w.dtype]
    return np.clip(m, -top, top).astype(np.float32).astype(numpy_dtype(w.dtype)).tobytes()


def _channel_fill(ck: Checkpoint, w: QuantWeight, g: Gather, fill: str) -> tuple[bytes, bytes]:
    """(row bytes, scale bytes) of a new row: zeros with scale 1, or the dequantized mean quantized again."""
    zeros = bytes(w.shape[1] * 1)
    if fill != "mean" or not bool((g.part < 0).any()):
        return zeros, _one(w.scale_dtype)
    rows = _carried(g)
    m = _deq_rows(ck, w, rows).astype(np.float64).mean(axis=0) if len(rows) else np.zeros(w.shape[1])
    top = FP8_MAX[w.dtype]
    s = float(np.abs(m).max()) / top or 1.0
    s = float(np.asarray([s], np.float32).astype(numpy_dtype(w.scale_dtype or "F32")).astype(np.float32)[0]) or 1.0
    q = np.clip(m / s, -top, top).astype(np.float32).astype(numpy_dtype(w.dtype))
    return q.tobytes(), np.asarray([s], np.float32).astype(numpy_dtype(w.scale_dtype or "F32")).tobytes()


def _block_rows(ck: Checkpoint, w: QuantWeight, g: Gather) -> tuple[np.ndarray, np.ndarray]:
    """The scale rows of a block-quantized head's remap: one per output block of bn rows, each a
    whole source block in order, or filled; refused otherwise."""
    assert w.block is not None
    bn = int(w.block[0])
    n_out = len(g.part)
    part: list[int] = []
    rows: list[int] = []
    for b0 in range(0, n_out, bn):
        seg_p, seg_r = g.part[b0 : b0 + bn], g.rows[b0 : b0 + bn]
        if bool((seg_p < 0).all()):
            if bool(np.frombuffer(g.fill, np.uint8).any()):
                _refuse_block(ck, w, b0, "a mean fill would need a scale of its own in a block of other rows")
            part.append(-1)
            rows.append(0)
            continue
        s0 = int(seg_r[0])
        want = np.arange(s0, s0 + len(seg_r))
        if (
            bool((seg_p != 0).any())
            or s0 % bn
            or not np.array_equal(seg_r, want)
            or _short_block(s0, len(seg_r), bn, w)
        ):
            _refuse_block(ck, w, b0, f"output rows {b0}..{b0 + len(seg_r) - 1} are not one whole source block in order")
        part.append(0)
        rows.append(s0 // bn)
    return np.asarray(part, np.int64), np.asarray(rows, np.int64)


def _short_block(s0: int, n: int, bn: int, w: QuantWeight) -> bool:
    """A partial output block must be the source's partial last block, and the reverse."""
    return n != min(bn, w.shape[0] - s0)


def _refuse_block(ck: Checkpoint, w: QuantWeight, b0: int, why: str) -> None:
    assert w.block is not None
    raise MappingError(
        f"{ck.source}: {w.weight} has one scale per {w.block[0]}x{w.block[1]} block, and this remap moves rows "
        f"across blocks ({why}): the scales cannot follow the rows",
        path=str(ck.source),
        tensor=w.weight,
        hint="dequantize first (ckpt export --dtype bf16), remap, and quantize again per channel (ckpt quantize)",
    )
