"""``ckpt remap``: move a drafter into another vocabulary mapping's space.

Row j of the output lm_head is the input's row for the same target token; tokens new
to the drafter are filled (zeros, the mean of the carried rows, or the target model's
own lm_head row). d2t, t2d and draft_vocab_size are written new; every other tensor is
copied byte for byte, in the kernel where the OS allows. Memory stays bounded: lm_head
rows move in chunks through positioned reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ckpttools.errors import MappingError, opt
from ckpttools.formats.config import essentials, require_valid_config
from ckpttools.formats.names import canonical_name
from ckpttools.io.checkpoint import Checkpoint, numpy_dtype, open_checkpoint
from ckpttools.io.fsutil import check_output_path
from ckpttools.io.manifest import MANIFEST_NAME, BackgroundDigests, file_digest, make_manifest
from ckpttools.io.safetensors_header import DTYPE_SIZES
from ckpttools.io.writer import CheckpointWriter, TensorSpec, copy_side_files, parse_size
from ckpttools.vocab.mapping import VocabMapping, load_mapping

__all__ = ["RemapReport", "remap", "FILL_POLICIES"]

FILL_POLICIES = ("zero", "mean", "target")
_CHUNK_BYTES = 64 << 20
_HASH_LIMIT = 64 << 20  # secondary inputs larger than this are recorded by size, not hashed

Progress = Callable[[int, int, str], None]


@dataclass
class RemapReport:
    """What :func:`remap` did. Counts are rows of the output lm_head unless said otherwise."""

    output: str
    source: str
    destination: str
    draft_vocab_size_before: int
    draft_vocab_size_after: int
    vocab_size_before: int | None
    vocab_size_after: int | None
    rows_carried: int
    rows_filled: int
    fill: str
    embed_tokens: str
    token_match: dict[str, Any] | None
    token_mass: dict[str, float] | None
    tensors_copied: int
    bytes_written: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _find(ck: Checkpoint, canon: str) -> str | None:
    return next((n for n in ck.tensors if canonical_name(n)[0] == canon), None)


def _source_mapping(ck: Checkpoint) -> VocabMapping:
    m = VocabMapping.from_checkpoint(ck, allow_missing=True)
    ess = essentials(ck.config)
    if m is not None:
        return m.check()
    v = ess.vocab_size
    head = _find(ck, "lm_head.weight")
    rows = ck.tensors[head].shape[0] if head else None
    if isinstance(v, int) and (ess.draft_vocab_size is None or ess.draft_vocab_size == v) and rows in (None, v):
        return VocabMapping.identity(v, source=f"{ck.source} (full vocabulary)")
    raise MappingError(
        f"{ck.source}: no d2t/t2d and the head is reduced ({rows} rows of {v}): which token each row "
        "belongs to is unknown",
        hint="give the drafter's original mapping, or remap the checkpoint it was trained with",
    )


def _check_source(ck: Checkpoint, m: VocabMapping, head: str | None, emb: str | None) -> None:
    """Refuse, before anything is written, a drafter whose tensors disagree with its mapping:
    every row read later must exist."""
    for name in (head, emb):
        if name is not None and len(ck.tensors[name].shape) != 2:
            raise MappingError(
                f"{ck.source}: {name} has shape {list(ck.tensors[name].shape)}; a 2-D [rows, hidden] "
                "matrix was expected",
                path=str(ck.source),
                tensor=name,
                hint="the checkpoint is damaged or not an EAGLE-3 drafter",
            )
    if head is not None and ck.tensors[head].shape[0] != m.draft_vocab_size:
        raise MappingError(
            f"{ck.source}: {head} has {ck.tensors[head].shape[0]} rows but the mapping has {m.draft_vocab_size} "
            "draft slots: which row belongs to which token is unknown",
            path=str(ck.source),
            tensor=head,
            hint="the drafter's head and d2t must come from the same training run",
        )
    if head is not None and emb is not None and ck.tensors[head].shape[1] != ck.tensors[emb].shape[1]:
        raise MappingError(
            f"{ck.source}: {head} and {emb} have different hidden sizes",
            path=str(ck.source),
            hint="the checkpoint is damaged",
        )


def _dest_mapping(
    to: Any, frequencies: Any, draft_vocab_size: int | None, vocab_size: int
) -> tuple[VocabMapping, np.ndarray | None, str]:
    counts = None
    if frequencies is not None:
        from ckpttools.vocab.diff import load_frequencies

        counts = load_frequencies(frequencies, vocab_size)
        if not draft_vocab_size or draft_vocab_size > vocab_size:
            raise MappingError(f"{opt('draft_vocab_size')} must be between 1 and {vocab_size}")
        order = np.lexsort((np.arange(vocab_size), -counts))
        ids = np.sort(order[:draft_vocab_size])
        return (
            VocabMapping.from_ids(ids, vocab_size, source=f"top {draft_vocab_size} of {frequencies}"),
            counts,
            str(frequencies),
        )
    try:
        m = load_mapping(to)
    except MappingError:
        # a target checkpoint's own full vocabulary
        with open_checkpoint(to) as ck:
            if VocabMapping.from_checkpoint(ck, allow_missing=True) is not None:
                raise
            v = essentials(ck.config).vocab_size
            if not isinstance(v, int):
                raise
            m = VocabMapping.identity(v, source=f"{to} (full vocabulary)")
    if m.target_vocab_size is None:
        m.target_vocab_size = vocab_size
    return m.check(), None, str(to)


class _OnDemand:
    """A checkpoint opened on first use (headers of a 1-2 TB target are read once), closed by close()."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.ck: Checkpoint | None = None

    def get(self) -> Checkpoint:
        if self.ck is None:
            self.ck = open_checkpoint(self.source)
        return self.ck

    def close(self) -> None:
        if self.ck is not None:
            self.ck.close()


def _target_head(target: _OnDemand, hidden: int) -> tuple[Checkpoint, str]:
    ck = target.get()
    name = _find(ck, "lm_head.weight") or _find(ck, "embed_tokens.weight")
    if name is None:
        raise MappingError(
            f"{target.source}: no lm_head (or tied embed_tokens) to fill rows from", path=str(target.source)
        )
    h = ck.tensors[name].shape[1]
    if h != hidden:
        raise MappingError(
            f"filling rows from the target needs equal hidden sizes: the drafter's is {hidden}, the target's "
            f"lm_head has {h}",
            hint=f"fill with the mean or with zeros ({opt('fill')} mean or zero)",
        )
    return ck, name


def _gather(ck: Checkpoint, name: str, rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Rows of a tensor in the given order, as raw bytes of ``dtype`` (uint8, one row per row).

    Positioned reads, runs of consecutive rows coalesced; rows move as bytes, and are
    cast only when the tensor's dtype differs from ``dtype``.
    """
    t = ck.tensors[name]
    if not len(rows):
        return np.empty((0, t.shape[1] * dtype.itemsize), dtype=np.uint8)
    ascending = bool(np.all(np.diff(rows) > 0))
    order = None if ascending else np.argsort(rows, kind="stable")
    got = ck.read_rows_pread(name, rows if ascending else rows[order])
    if got.dtype != dtype:
        got = got.astype(np.float32).astype(dtype)
    raw = got.reshape(len(rows), -1).view(np.uint8)
    if order is None:
        return raw
    out = np.empty_like(raw)
    out[order] = raw
    return out


def _rows_from(
    src: Checkpoint | None,
    src_name: str | None,
    src_rows: np.ndarray,
    fill_vec: np.ndarray | None,
    tgt: tuple[Checkpoint, str] | None,
    tgt_rows: np.ndarray,
    hidden: int,
    dtype: np.dtype,
) -> Iterator[np.ndarray]:
    """Yield the output tensor in chunks of raw rows: carried rows from ``src``, the rest filled."""
    n = len(src_rows)
    row_bytes = hidden * dtype.itemsize
    fill_raw = np.zeros(row_bytes, np.uint8) if fill_vec is None else fill_vec.astype(dtype).view(np.uint8)
    step = max(1, _CHUNK_BYTES // max(1, row_bytes))
    for j0 in range(0, n, step):
        sl = src_rows[j0 : j0 + step]
        have = sl >= 0
        if have.all() and src is not None and src_name is not None:
            yield _gather(src, src_name, sl, dtype)
            continue
        chunk = np.empty((len(sl), row_bytes), dtype=np.uint8)
        if have.any() and src is not None and src_name is not None:
            chunk[have] = _gather(src, src_name, sl[have], dtype)
        miss = ~have
        if tgt is not None:
            chunk[miss] = _gather(tgt[0], tgt[1], tgt_rows[j0 : j0 + step][miss], dtype)
        else:
            chunk[miss] = fill_raw
        yield chunk


def _row_segments(ck: Checkpoint, name: str, src_rows: np.ndarray, fill_raw: np.ndarray) -> Iterator[Any]:
    """The output tensor as segments: each run of consecutive source rows is one kernel
    copy, each run of rows to fill is written from memory. Same dtype in and out."""
    t = ck.tensors[name]
    row_bytes = t.nbytes // t.shape[0]
    path = ck.shard_paths[t.shard]
    n = len(src_rows)
    if not n:
        return
    have = src_rows >= 0
    # a run breaks where carried/filled switches, or where source rows stop being consecutive
    brk = np.flatnonzero((have[1:] != have[:-1]) | (have[1:] & (src_rows[1:] != src_rows[:-1] + 1))) + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [n]])
    max_fill_rows = max(1, _CHUNK_BYTES // row_bytes)
    for a, b in zip(starts.tolist(), ends.tolist()):
        if have[a]:
            yield ("copy", path, t.start + int(src_rows[a]) * row_bytes, (b - a) * row_bytes)
        else:
            for c in range(a, b, max_fill_rows):
                yield np.broadcast_to(fill_raw, (min(b, c + max_fill_rows) - c, row_bytes))


def _mean_rows(ck: Checkpoint, name: str, rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The mean of the given rows, computed in float64 streaming in chunks."""
    h = ck.tensors[name].shape[1]
    acc = np.zeros(h, dtype=np.float64)
    rows = np.sort(rows[rows >= 0])
    step = max(1, _CHUNK_BYTES // (h * 4))
    for i in range(0, len(rows), step):
        acc += ck.read_rows_pread(name, rows[i : i + step]).astype(np.float64).sum(axis=0)
    return (acc / max(1, len(rows))).astype(np.float32).astype(dtype)


def remap(
    drafter: str | Path,
    out: str | Path,
    *,
    to: str | Path | None = None,
    frequencies: str | Path | None = None,
    draft_vocab_size: int | None = None,
    fill: str = "zero",
    target: str | Path | None = None,
    source_tokenizer: str | Path | None = None,
    target_tokenizer: str | Path | None = None,
    max_shard_size: int | str | None = None,
    force: bool = False,
    fsync: bool = False,
    progress: Progress | None = None,
) -> RemapReport:
    """Rewrite a drafter into another vocabulary mapping's space.

    Args:
        drafter: the drafter checkpoint (read only).
        out: the output directory (written atomically; refused if it exists unless ``force``).
        to: the destination mapping: another drafter, a mapping file, or a target
            checkpoint (its full vocabulary).
        frequencies, draft_vocab_size: instead of ``to``, build the destination mapping
            from token counts (top N, ties by lower id, ascending).
        fill: ``zero``, ``mean`` (of the carried rows) or ``target`` (the target's lm_head
            row for that token; needs ``target`` and equal hidden sizes).
        target: the target model, for ``fill="target"`` and for embed_tokens rows that
            the tokenizer matching cannot supply.
        source_tokenizer, target_tokenizer: HF tokenizer.json of the drafter's and the
            destination's tokenizers, when they differ: tokens are matched by bytes.
        max_shard_size: e.g. ``"5GB"``; default one file.
        fsync: flush every output file to disk before the final rename (survives power
            loss, costs the writeback time; the rename is atomic either way).
        progress: called as ``progress(bytes_done, bytes_total, tensor_name)``.

    Returns:
        a :class:`RemapReport`.

    Raises:
        MappingError, OutputExistsError, and the checkpoint errors (all exit 2).

    Example:
        >>> remap("drafter-k2", "drafter-k2-in-m2", to="mapping-m2.safetensors")  # doctest: +SKIP
    """
    t0 = time.perf_counter()
    if fill not in FILL_POLICIES:
        raise ValueError(f"fill must be one of {FILL_POLICIES}")
    if (to is None) == (frequencies is None):
        raise MappingError("give exactly one of a destination mapping (to=) or frequencies=")
    if fill == "target" and target is None:
        raise MappingError(
            f"filling rows from the target ({opt('fill')} target) needs the target model",
            hint=f"give {opt('target')}, or fill with the mean ({opt('fill')} mean)",
        )
    if (source_tokenizer is None) != (target_tokenizer is None):
        raise MappingError(
            f"a cross-tokenizer remap needs both tokenizers: {opt('source_tokenizer')} and {opt('target_tokenizer')}"
        )
    shard_size = parse_size(max_shard_size)

    ck = open_checkpoint(drafter)
    try:
        require_valid_config(ck.config, str(drafter))
        check_output_path(
            out, [ck.root, *(x for x in (to, frequencies, target, source_tokenizer, target_tokenizer) if x is not None)]
        )
    except BaseException:
        ck.close()
        raise
    hashes = BackgroundDigests(ck.files())  # hashed while the copy runs
    target_ck = _OnDemand(target)
    try:
        return _remap(
            ck,
            Path(out),
            to,
            frequencies,
            draft_vocab_size,
            fill,
            target,
            target_ck,
            source_tokenizer,
            target_tokenizer,
            shard_size,
            force,
            fsync,
            progress,
            hashes,
            t0,
        )
    finally:
        target_ck.close()
        hashes.close()
        ck.close()


def _remap(
    ck,
    out,
    to,
    frequencies,
    draft_vocab_size,
    fill,
    target,
    target_ck,
    source_tokenizer,
    target_tokenizer,
    shard_size,
    force,
    fsync,
    progress,
    hashes,
    t0,
) -> RemapReport:
    ess = essentials(ck.config)
    src_map = _source_mapping(ck)
    v_src = src_map.target_vocab_size or ess.vocab_size
    if v_src is None:
        raise MappingError(
            f"{ck.source}: the target vocabulary size is unknown (no t2d, no vocab_size in config.json)",
            path=str(ck.source),
            hint="add vocab_size to the drafter's config.json",
        )

    # the new vocabulary size: the destination's own, else the target's, else the new tokenizer's
    v_default = v_src
    if target is not None:
        from ckpttools.formats.conventions import load_target_config

        tcfg = load_target_config(target)[0]
        require_valid_config(tcfg, f"target {target}")
        tv = essentials(tcfg).vocab_size
        v_default = tv if isinstance(tv, int) else v_default
    token_match = None
    if source_tokenizer is not None:
        from ckpttools.vocab.tokens import load_vocab, match_tokens

        old_vocab, new_vocab = load_vocab(source_tokenizer), load_vocab(target_tokenizer)
        if target is None:
            v_default = new_vocab.size
        tm = match_tokens(old_vocab, new_vocab, prefer=src_map.t2d(max(v_src or 0, old_vocab.size)))
        n2o = tm.new_to_old
        token_match = tm.to_dict()
    else:
        n2o = np.arange(v_src, dtype=np.int64)
    dst_map, counts, dest_desc = _dest_mapping(to, frequencies, draft_vocab_size, v_default)
    v_new = dst_map.target_vocab_size or v_default
    if max(v_new, int(dst_map.ids.max(initial=-1)) + 1) > len(n2o):
        n2o = np.pad(n2o, (0, max(v_new, int(dst_map.ids.max()) + 1) - len(n2o)), constant_values=-1)

    # which source slot feeds each output row
    slot_of = np.full(max(len(n2o), int(src_map.ids.max(initial=-1)) + 1, 1), -1, dtype=np.int64)
    slot_of[src_map.ids] = np.arange(src_map.draft_vocab_size)
    old_ids = n2o[dst_map.ids]
    src_rows = np.where(old_ids >= 0, slot_of[np.clip(old_ids, 0, None)], -1)
    src_rows[old_ids >= len(slot_of)] = -1

    head = _find(ck, "lm_head.weight")
    _check_source(ck, src_map, head, _find(ck, "embed_tokens.weight"))
    hidden = ess.hidden_size if head is None else ck.tensors[head].shape[1]
    if head is None and fill != "target":
        raise MappingError(
            f"{ck.source}: no lm_head to move (a full-vocab drafter using the target's head)",
            hint=f"cut the target's head down instead: {opt('fill')} target with {opt('target')}",
        )
    if not isinstance(hidden, int):
        raise MappingError(f"{ck.source}: the hidden size is unknown (no lm_head, no hidden_size in config.json)")
    if head is None:
        src_rows[:] = -1
    tgt = _target_head(target_ck, hidden) if fill == "target" else None
    if tgt is not None and int(dst_map.ids.max(initial=-1)) >= tgt[0].tensors[tgt[1]].shape[0]:
        raise MappingError(f"{target}: its lm_head has fewer rows than the destination mapping's largest id")
    head_st = ck.tensors[head].dtype if head else tgt[0].tensors[tgt[1]].dtype  # type: ignore[index]
    fill_raw = np.zeros(hidden * DTYPE_SIZES[head_st], np.uint8)  # zeros: no element dtype needed
    fill_vec = None
    head_dtype = numpy_dtype(head_st)  # mean and target fills compute in the element dtype (bf16 via ml_dtypes)
    if fill == "mean" and head is not None:
        fill_vec = _mean_rows(ck, head, src_rows, head_dtype)
        fill_raw = fill_vec.view(np.uint8)

    # embed_tokens: same tokenizer -> copied; otherwise rebuilt by the same matching
    emb = _find(ck, "embed_tokens.weight")
    emb_note = "absent"
    emb_rows = None
    if emb is not None:
        if source_tokenizer is None and ck.tensors[emb].shape[0] == v_new:
            emb_note = "copied unchanged (same tokenizer)"
        else:
            emb_rows = n2o[:v_new].copy()
            emb_rows[emb_rows >= ck.tensors[emb].shape[0]] = -1
            matched = int(np.count_nonzero(emb_rows >= 0))
            emb_note = f"rebuilt for {v_new:,} tokens: {matched:,} rows matched by bytes, {v_new - matched:,} " + (
                "from the target's embed_tokens" if target is not None else "zeros"
            )

    # the plan: source order, with the vocab-dependent tensors replaced
    d2t_name = _find(ck, "d2t") or "d2t"
    t2d_name = _find(ck, "t2d") or "t2d"
    new_specs: list[TensorSpec] = []
    for n, t in ck.tensors.items():
        if n == head:
            new_specs.append(TensorSpec(n, t.dtype, (dst_map.draft_vocab_size, hidden)))
        elif n == d2t_name:
            new_specs.append(TensorSpec(n, "I64", (dst_map.draft_vocab_size,)))
        elif n == t2d_name:
            new_specs.append(TensorSpec(n, "BOOL", (v_new,)))
        elif n == emb and emb_rows is not None:
            new_specs.append(TensorSpec(n, t.dtype, (v_new, t.shape[1])))
        else:
            new_specs.append(TensorSpec(n, t.dtype, t.shape))
    if head is None:
        st = {"BF16": "BF16", "F16": "F16"}.get(tgt[0].tensors[tgt[1]].dtype, "BF16")  # type: ignore[index]
        new_specs.append(TensorSpec("lm_head.weight", st, (dst_map.draft_vocab_size, hidden)))
    if d2t_name not in ck.tensors:
        new_specs.append(TensorSpec("d2t", "I64", (dst_map.draft_vocab_size,)))
    if t2d_name not in ck.tensors:
        new_specs.append(TensorSpec("t2d", "BOOL", (v_new,)))
    total = sum(s.nbytes for s in new_specs)
    done = 0

    cfg = dict(ck.config or {})
    cfg["draft_vocab_size"] = dst_map.draft_vocab_size
    if v_new != ess.vocab_size:
        cfg["vocab_size"] = v_new
    params = {
        "to": str(to) if to else None,
        "frequencies": str(frequencies) if frequencies else None,
        "draft_vocab_size": dst_map.draft_vocab_size,
        "fill": fill,
        "target": str(target) if target else None,
        "source_tokenizer": str(source_tokenizer) if source_tokenizer else None,
        "target_tokenizer": str(target_tokenizer) if target_tokenizer else None,
        "max_shard_size": shard_size,
        "fsync": fsync,
    }
    tgt_rows = dst_map.ids
    with CheckpointWriter(out, new_specs, max_shard_size=shard_size, force=force, fsync=fsync) as w:
        for spec in new_specs:
            n = spec.name
            if n in (head, "lm_head.weight") and (n == head or head is None):
                if fill != "target":  # rows move in the kernel, fills are written
                    assert head is not None  # a head-less drafter was refused unless fill is target
                    w.write_segments(n, _row_segments(ck, head, src_rows, fill_raw))
                else:
                    w.write_chunks(n, _rows_from(ck, head, src_rows, fill_vec, tgt, tgt_rows, hidden, head_dtype))
            elif n == d2t_name or (n == "d2t" and d2t_name not in ck.tensors):
                w.write(n, dst_map.d2t)
            elif n == t2d_name or (n == "t2d" and t2d_name not in ck.tensors):
                w.write(n, dst_map.t2d(v_new))
            elif n == emb and emb_rows is not None:
                et = ck.tensors[emb]
                edt = numpy_dtype(et.dtype)
                emb_tgt = None
                if target is not None:
                    tck = target_ck.get()
                    tname = _find(tck, "embed_tokens.weight")
                    if tname and tck.tensors[tname].shape[1] == et.shape[1]:
                        emb_tgt = (tck, tname)
                w.write_chunks(
                    n,
                    _rows_from(
                        ck, emb, emb_rows, np.zeros(et.shape[1], edt), emb_tgt, np.arange(v_new), et.shape[1], edt
                    ),
                )
            else:
                t = ck.tensors[n]
                w.copy_range(n, ck.shard_paths[t.shard], t.start)
            done += spec.nbytes
            if progress:
                progress(done, total, n)
        w.add_json("config.json", cfg)
        copy_side_files(ck, w)
        sources = {"drafter": ck.files()}
        small = []
        if to is not None and Path(to).is_file():
            small.append(Path(to))
        if frequencies is not None:
            small.append(Path(frequencies))
        for tok in (source_tokenizer, target_tokenizer):
            if tok is not None:
                p = Path(tok)
                small.append(p / "tokenizer.json" if p.is_dir() else p)
        if small:
            sources["inputs"] = small
        done_hashes = hashes.result()
        for p in small:
            if p.stat().st_size <= _HASH_LIMIT:
                done_hashes[str(p)] = file_digest(p)
            else:
                done_hashes[str(p)] = {"note": "not hashed: larger than 64 MiB and read only in part"}
        extra = {"note": "a destination or target checkpoint directory is read only in part and is not hashed"}
        w.add_json(MANIFEST_NAME, make_manifest("remap", params, sources, hashes=done_hashes, extra=extra))

    carried = int(np.count_nonzero(src_rows >= 0))
    mass = None
    if counts is not None:
        tot = float(counts.sum()) or 1.0
        mass = {
            "covered_by_new_mapping": float(counts[dst_map.ids].sum() / tot),
            "covered_by_carried_rows": float(counts[dst_map.ids[src_rows >= 0]].sum() / tot),
            "covered_by_filled_rows": float(counts[dst_map.ids[src_rows < 0]].sum() / tot),
            "covered_by_old_mapping": float(counts[src_map.ids[src_map.ids < len(counts)]].sum() / tot)
            if source_tokenizer is None
            else float("nan"),
        }
    fill_desc = {"zero": "zeros", "mean": "the mean of the carried rows", "target": "the target's lm_head rows"}[fill]
    return RemapReport(
        output=str(out),
        source=str(ck.source),
        destination=dest_desc,
        draft_vocab_size_before=src_map.draft_vocab_size,
        draft_vocab_size_after=dst_map.draft_vocab_size,
        vocab_size_before=v_src,
        vocab_size_after=v_new,
        rows_carried=carried,
        rows_filled=dst_map.draft_vocab_size - carried,
        fill=f"{fill} ({fill_desc})",
        embed_tokens=emb_note,
        token_match=token_match,
        token_mass=mass,
        tensors_copied=sum(1 for s in new_specs if s.name not in (head, d2t_name, t2d_name, emb, "lm_head.weight")),
        bytes_written=total,
        seconds=time.perf_counter() - t0,
    )
