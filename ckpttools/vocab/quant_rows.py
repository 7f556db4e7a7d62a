"""What a remap of drafter A into mapping B does with A's quantized lm_head scales, said by diff-vocab
before anything is written (the remap itself is :mod:`ckpttools.ops.quant_remap`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckpttools.formats.quant import module_of, read_scheme
from ckpttools.vocab.mapping import VocabMapping

__all__ = ["lm_head_scale_note"]


def lm_head_scale_note(a: Any, ma: VocabMapping, mb: VocabMapping) -> str | None:
    """One sentence, or None when A is no checkpoint or its lm_head is not FP8."""
    import numpy as np

    if not isinstance(a, (str, Path)) or not Path(str(a)).is_dir():
        return None
    from ckpttools.io.checkpoint import open_checkpoint

    with open_checkpoint(a) as ck:
        scheme = read_scheme(ck.config, {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()})
    head = next((w for w in scheme.quantized if module_of(w.weight) in ("lm_head", "model.lm_head")), None)
    if head is None:
        return None
    if head.granularity == "tensor":
        return f"A's lm_head is FP8 with one scale ({head.scale}): a remap keeps it as it is"
    if head.granularity == "channel":
        return f"A's lm_head is FP8 per channel: a remap moves {head.scale} with the rows, row for row"
    if head.granularity == "block" and head.block:
        bn = int(head.block[0])
        pos = {int(t): i for i, t in enumerate(ma.ids)}
        src = np.asarray([pos.get(int(t), -1) for t in mb.ids])
        whole = sum(
            1
            for b0 in range(0, len(src), bn)
            if (seg := src[b0 : b0 + bn]).size
            and ((seg < 0).all() or (seg[0] % bn == 0 and np.array_equal(seg, np.arange(seg[0], seg[0] + seg.size))))
        )
        total = -(-len(src) // bn)
        verdict = "a remap can move them" if whole == total else "a remap is refused: rows would cross blocks"
        return (
            f"A's lm_head has one scale per {bn}x{head.block[1]} block: {whole} of {total} blocks of B's slots are "
            f"whole blocks of A in order, or new; {verdict}"
        )
    return f"A's lm_head is FP8 with a {head.granularity} scale: a remap refuses it"
