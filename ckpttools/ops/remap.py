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
from ckpttools.formats.config import canonical_shapes, essentials, require_valid_config
from ckpttools.formats.names import canonical_name
from ckpttools.io.checkpoint import Checkpoint, numpy_dtype, open_checkpoint
from ckpttools.io.guard import check_output
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
    req = _Request(
        to,
        frequencies,
        draft_vocab_size,
        fill,
        target,
        source_tokenizer,
        target_tokenizer,
        parse_size(max_shard_size),
        force,
        fsync,
    )
    req.check()
    ck = open_checkpoint(drafter, download=True)
    try:
        require_valid_config(ck.config, str(drafter), canonical_shapes(ck.config, ck.tensors))
        check_output(out, [ck.root, *req.inputs()])
    except BaseException:
        ck.close()
        raise
    hashes = BackgroundDigests(ck.files())  # hashed while the copy runs
    target_ck = _OnDemand(target)
    try:
        plan = _plan(ck, req, target_ck)
        _write(ck, plan, req, Path(out), target_ck, hashes, progress)
        return _report(ck, plan, req, Path(out), time.perf_counter() - t0)
    finally:
        target_ck.close()
        hashes.close()
        ck.close()


@dataclass(frozen=True)
class _Request:
    """The caller's options, as given."""

    to: Any
    frequencies: Any
    draft_vocab_size: int | None
    fill: str
    target: Any
    source_tokenizer: Any
    target_tokenizer: Any
    shard_size: int | None
    force: bool
    fsync: bool

    def check(self) -> None:
        if self.fill not in FILL_POLICIES:
            raise ValueError(f"fill must be one of {FILL_POLICIES}")
        if (self.to is None) == (self.frequencies is None):
            raise MappingError(
                f"give exactly one destination: a mapping ({opt('to')}) or token counts ({opt('frequencies')})"
            )
        if self.fill == "target" and self.target is None:
            raise MappingError(
                f"filling rows from the target ({opt('fill')} target) needs the target model",
                hint=f"give {opt('target')}, or fill with the mean ({opt('fill')} mean)",
            )
        if (self.source_tokenizer is None) != (self.target_tokenizer is None):
            raise MappingError(
                f"a cross-tokenizer remap needs both tokenizers: {opt('source_tokenizer')} and {opt('target_tokenizer')}"
            )

    def inputs(self) -> list[Any]:
        given = (self.to, self.frequencies, self.target, self.source_tokenizer, self.target_tokenizer)
        return [x for x in given if x is not None]

    def params(self, draft_vocab_size: int) -> dict[str, Any]:
        """The manifest's record of the options."""

        def s(x: Any) -> str | None:
            return str(x) if x else None

        return {
            "to": s(self.to),
            "frequencies": s(self.frequencies),
            "draft_vocab_size": draft_vocab_size,
            "fill": self.fill,
            "target": s(self.target),
            "source_tokenizer": s(self.source_tokenizer),
            "target_tokenizer": s(self.target_tokenizer),
            "max_shard_size": self.shard_size,
            "fsync": self.fsync,
        }

    def small_inputs(self) -> list[Path]:
        """The files read whole besides the drafter (hashed into the manifest)."""
        small = []
        if self.to is not None and Path(self.to).is_file():
            small.append(Path(self.to))
        if self.frequencies is not None:
            small.append(Path(self.frequencies))
        for tok in (self.source_tokenizer, self.target_tokenizer):
            if tok is not None:
                p = Path(tok)
                small.append(p / "tokenizer.json" if p.is_dir() else p)
        return small


@dataclass
class _Plan:
    """What the output holds and where each row of it comes from; nothing written yet."""

    src_map: VocabMapping
    dst_map: VocabMapping
    dest_desc: str
    counts: np.ndarray | None  # token counts, when the destination came from frequencies
    token_match: dict[str, Any] | None
    v_src: int
    v_new: int
    n2o: np.ndarray  # new token id -> old token id (-1: no match)
    src_rows: np.ndarray  # output head row -> source head row (-1: filled)
    head: str | None  # the source lm_head's name (None: a full-vocab drafter using the target's head)
    hidden: int
    head_dtype: np.dtype
    fill_raw: np.ndarray  # one filled row, as bytes
    fill_vec: np.ndarray | None  # the mean row, for fill="mean"
    tgt: tuple[Checkpoint, str] | None  # the target's head, for fill="target"
    emb: str | None
    emb_rows: np.ndarray | None  # None: embed_tokens copied unchanged
    emb_note: str
    d2t_name: str
    t2d_name: str
    specs: list[TensorSpec]
    config: dict[str, Any]

    @property
    def rows_carried(self) -> int:
        return int(np.count_nonzero(self.src_rows >= 0))

    def is_head(self, name: str) -> bool:
        return name == self.head or (self.head is None and name == "lm_head.weight")


def _plan(ck: Checkpoint, req: _Request, target_ck: _OnDemand) -> _Plan:
    from ckpttools.formats.flavor import detect_flavor

    detect_flavor(ck.config, ck.tensors.keys()).refuse(str(ck.source), "remap")
    ess = essentials(ck.config)
    src_map = _source_mapping(ck)
    v_src = src_map.target_vocab_size or ess.vocab_size
    if v_src is None:
        raise MappingError(
            f"{ck.source}: the target vocabulary size is unknown (no t2d, no vocab_size in config.json)",
            path=str(ck.source),
            hint="add vocab_size to the drafter's config.json",
        )
    v_default, n2o, token_match = _token_translation(req, src_map, v_src)
    dst_map, counts, dest_desc = _dest_mapping(req.to, req.frequencies, req.draft_vocab_size, v_default)
    v_new = dst_map.target_vocab_size or v_default
    top = max(v_new, int(dst_map.ids.max(initial=-1)) + 1)
    if top > len(n2o):
        n2o = np.pad(n2o, (0, top - len(n2o)), constant_values=-1)
    src_rows = _source_rows(src_map, dst_map, n2o)
    emb = _find(ck, "embed_tokens.weight")
    head, hidden, tgt = _head_source(ck, src_map, emb, dst_map, req, target_ck)
    if head is None:
        src_rows[:] = -1
    head_st = ck.tensors[head].dtype if head else tgt[0].tensors[tgt[1]].dtype  # type: ignore[index]
    fill_raw = np.zeros(hidden * DTYPE_SIZES[head_st], np.uint8)  # zeros: no element dtype needed
    head_dtype = numpy_dtype(head_st)  # mean and target fills compute in the element dtype (bf16 via ml_dtypes)
    fill_vec = _mean_rows(ck, head, src_rows, head_dtype) if req.fill == "mean" and head is not None else None
    if fill_vec is not None:
        fill_raw = fill_vec.view(np.uint8)
    emb_rows, emb_note = _embed_plan(ck, emb, req, n2o, v_new)
    plan = _Plan(
        src_map,
        dst_map,
        dest_desc,
        counts,
        token_match,
        v_src,
        v_new,
        n2o,
        src_rows,
        head,
        hidden,
        head_dtype,
        fill_raw,
        fill_vec,
        tgt,
        emb,
        emb_rows,
        emb_note,
        _find(ck, "d2t") or "d2t",
        _find(ck, "t2d") or "t2d",
        [],
        {},
    )
    plan.specs = _specs(ck, plan)
    plan.config = dict(ck.config or {}, draft_vocab_size=dst_map.draft_vocab_size)
    if v_new != ess.vocab_size:
        plan.config["vocab_size"] = v_new
    return plan


def _head_source(
    ck: Checkpoint, src_map: VocabMapping, emb: str | None, dst_map: VocabMapping, req: _Request, target_ck: _OnDemand
) -> tuple[str | None, int, tuple[Checkpoint, str] | None]:
    """The drafter's head (None: it uses the target's), the hidden size, and the target's head when filling from it."""
    head = _find(ck, "lm_head.weight")
    _check_source(ck, src_map, head, emb)
    hidden = essentials(ck.config).hidden_size if head is None else ck.tensors[head].shape[1]
    if head is None and req.fill != "target":
        raise MappingError(
            f"{ck.source}: no lm_head to move (a full-vocab drafter using the target's head)",
            hint=f"cut the target's head down instead: {opt('fill')} target with {opt('target')}",
        )
    if not isinstance(hidden, int):
        raise MappingError(f"{ck.source}: the hidden size is unknown (no lm_head, no hidden_size in config.json)")
    tgt = _target_head(target_ck, hidden) if req.fill == "target" else None
    if tgt is not None and int(dst_map.ids.max(initial=-1)) >= tgt[0].tensors[tgt[1]].shape[0]:
        raise MappingError(f"{req.target}: its lm_head has fewer rows than the destination mapping's largest id")
    return head, hidden, tgt


def _token_translation(
    req: _Request, src_map: VocabMapping, v_src: int
) -> tuple[int, np.ndarray, dict[str, Any] | None]:
    """The new vocabulary's default size and each new token's old id (identity without tokenizers)."""
    v_default = v_src  # the destination's own size, else the target's, else the new tokenizer's
    if req.target is not None:
        from ckpttools.formats.conventions import load_target_config

        tcfg = load_target_config(req.target)[0]
        require_valid_config(tcfg, f"target {req.target}")
        tv = essentials(tcfg).vocab_size
        v_default = tv if isinstance(tv, int) else v_default
    if req.source_tokenizer is None:
        return v_default, np.arange(v_src, dtype=np.int64), None
    from ckpttools.vocab.tokens import load_vocab, match_tokens

    old_vocab, new_vocab = load_vocab(req.source_tokenizer), load_vocab(req.target_tokenizer)
    if req.target is None:
        v_default = new_vocab.size
    tm = match_tokens(old_vocab, new_vocab, prefer=src_map.t2d(max(v_src or 0, old_vocab.size)))
    return v_default, tm.new_to_old, tm.to_dict()


def _source_rows(src_map: VocabMapping, dst_map: VocabMapping, n2o: np.ndarray) -> np.ndarray:
    """Which source head row feeds each output row (-1: none, the row is filled)."""
    slot_of = np.full(max(len(n2o), int(src_map.ids.max(initial=-1)) + 1, 1), -1, dtype=np.int64)
    slot_of[src_map.ids] = np.arange(src_map.draft_vocab_size)
    old_ids = n2o[dst_map.ids]
    src_rows = np.where(old_ids >= 0, slot_of[np.clip(old_ids, 0, None)], -1)
    src_rows[old_ids >= len(slot_of)] = -1
    return src_rows


def _embed_plan(
    ck: Checkpoint, emb: str | None, req: _Request, n2o: np.ndarray, v_new: int
) -> tuple[np.ndarray | None, str]:
    """embed_tokens: the same tokenizer -> copied; otherwise rebuilt by the same matching."""
    if emb is None:
        return None, "absent"
    if req.source_tokenizer is None and ck.tensors[emb].shape[0] == v_new:
        return None, "copied unchanged (same tokenizer)"
    emb_rows = n2o[:v_new].copy()
    emb_rows[emb_rows >= ck.tensors[emb].shape[0]] = -1
    matched = int(np.count_nonzero(emb_rows >= 0))
    rest = "from the target's embed_tokens" if req.target is not None else "zeros"
    return emb_rows, f"rebuilt for {v_new:,} tokens: {matched:,} rows matched by bytes, {v_new - matched:,} {rest}"


def _specs(ck: Checkpoint, plan: _Plan) -> list[TensorSpec]:
    """The output's tensors: the source's order, the vocabulary-dependent ones resized."""
    k, v_new = plan.dst_map.draft_vocab_size, plan.v_new
    specs: list[TensorSpec] = []
    for n, t in ck.tensors.items():
        if n == plan.head:
            specs.append(TensorSpec(n, t.dtype, (k, plan.hidden)))
        elif n == plan.d2t_name:
            specs.append(TensorSpec(n, "I64", (k,)))
        elif n == plan.t2d_name:
            specs.append(TensorSpec(n, "BOOL", (v_new,)))
        elif n == plan.emb and plan.emb_rows is not None:
            specs.append(TensorSpec(n, t.dtype, (v_new, t.shape[1])))
        else:
            specs.append(TensorSpec(n, t.dtype, t.shape))
    if plan.head is None:
        assert plan.tgt is not None  # a head-less drafter was refused unless filled from the target
        st = {"BF16": "BF16", "F16": "F16"}.get(plan.tgt[0].tensors[plan.tgt[1]].dtype, "BF16")
        specs.append(TensorSpec("lm_head.weight", st, (k, plan.hidden)))
    if plan.d2t_name not in ck.tensors:
        specs.append(TensorSpec("d2t", "I64", (k,)))
    if plan.t2d_name not in ck.tensors:
        specs.append(TensorSpec("t2d", "BOOL", (v_new,)))
    return specs


def _write(
    ck: Checkpoint,
    plan: _Plan,
    req: _Request,
    out: Path,
    target_ck: _OnDemand,
    hashes: BackgroundDigests,
    progress: Progress | None,
) -> None:
    total = sum(s.nbytes for s in plan.specs)
    done = 0
    with CheckpointWriter(out, plan.specs, max_shard_size=req.shard_size, force=req.force, fsync=req.fsync) as w:
        for spec in plan.specs:
            _write_tensor(w, ck, plan, req, spec.name, target_ck)
            done += spec.nbytes
            if progress:
                progress(done, total, spec.name)
        w.add_json("config.json", plan.config)
        copy_side_files(ck, w)
        w.add_json(MANIFEST_NAME, _manifest(ck, plan, req, hashes, target_ck))


def _write_tensor(
    w: CheckpointWriter, ck: Checkpoint, plan: _Plan, req: _Request, n: str, target_ck: _OnDemand
) -> None:
    if plan.is_head(n):
        if req.fill != "target":  # rows move in the kernel, fills are written
            assert plan.head is not None  # a head-less drafter was refused unless fill is target
            w.write_segments(n, _row_segments(ck, plan.head, plan.src_rows, plan.fill_raw))
        else:
            rows = _rows_from(
                ck, plan.head, plan.src_rows, plan.fill_vec, plan.tgt, plan.dst_map.ids, plan.hidden, plan.head_dtype
            )
            w.write_chunks(n, rows)
    elif n in (plan.d2t_name, "d2t") and (n == plan.d2t_name or plan.d2t_name not in ck.tensors):
        w.write(n, plan.dst_map.d2t)
    elif n in (plan.t2d_name, "t2d") and (n == plan.t2d_name or plan.t2d_name not in ck.tensors):
        w.write(n, plan.dst_map.t2d(plan.v_new))
    elif n == plan.emb and plan.emb_rows is not None:
        et = ck.tensors[n]
        edt = numpy_dtype(et.dtype)
        emb_tgt = None
        if req.target is not None:
            tck = target_ck.get()
            tname = _find(tck, "embed_tokens.weight")
            if tname and tck.tensors[tname].shape[1] == et.shape[1]:
                emb_tgt = (tck, tname)
        zeros = np.zeros(et.shape[1], edt)
        w.write_chunks(n, _rows_from(ck, n, plan.emb_rows, zeros, emb_tgt, np.arange(plan.v_new), et.shape[1], edt))
    else:
        t = ck.tensors[n]
        w.copy_range(n, ck.shard_paths[t.shard], t.start)


def _manifest(
    ck: Checkpoint, plan: _Plan, req: _Request, hashes: BackgroundDigests, target_ck: _OnDemand
) -> dict[str, Any]:
    sources: dict[str, Any] = {"drafter": ck.files()}
    small = req.small_inputs()
    if small:
        sources["inputs"] = small
    done_hashes = hashes.result()
    for p in small:
        if p.stat().st_size <= _HASH_LIMIT:
            done_hashes[str(p)] = file_digest(p)
        else:
            done_hashes[str(p)] = {"note": "not hashed: larger than 64 MiB and read only in part"}
    extra: dict[str, Any] = {
        "note": "a destination or target checkpoint directory is read only in part and is not hashed"
    }
    hub = {
        "drafter": ck.hub_record(),
        "destination": plan.dst_map.origin,
        "target": target_ck.ck.hub_record() if target_ck.ck is not None else None,
    }
    if any(hub.values()):
        extra["hub"] = {k: v for k, v in hub.items() if v is not None}
    params = req.params(plan.dst_map.draft_vocab_size)
    return make_manifest("remap", params, sources, hashes=done_hashes, extra=extra)


def _token_mass(plan: _Plan, req: _Request) -> dict[str, float] | None:
    """How much of the counted text each set of rows covers (with frequencies only)."""
    counts, dst, src = plan.counts, plan.dst_map.ids, plan.src_map.ids
    if counts is None:
        return None
    tot = float(counts.sum()) or 1.0
    old = float(counts[src[src < len(counts)]].sum() / tot) if req.source_tokenizer is None else float("nan")
    return {
        "covered_by_new_mapping": float(counts[dst].sum() / tot),
        "covered_by_carried_rows": float(counts[dst[plan.src_rows >= 0]].sum() / tot),
        "covered_by_filled_rows": float(counts[dst[plan.src_rows < 0]].sum() / tot),
        "covered_by_old_mapping": old,
    }


_FILL_DESC = {"zero": "zeros", "mean": "the mean of the carried rows", "target": "the target's lm_head rows"}


def _report(ck: Checkpoint, plan: _Plan, req: _Request, out: Path, seconds: float) -> RemapReport:
    k = plan.dst_map.draft_vocab_size
    replaced = (plan.head, plan.d2t_name, plan.t2d_name, plan.emb, "lm_head.weight")
    return RemapReport(
        output=str(out),
        source=str(ck.source),
        destination=plan.dest_desc,
        draft_vocab_size_before=plan.src_map.draft_vocab_size,
        draft_vocab_size_after=k,
        vocab_size_before=plan.v_src,
        vocab_size_after=plan.v_new,
        rows_carried=plan.rows_carried,
        rows_filled=k - plan.rows_carried,
        fill=f"{req.fill} ({_FILL_DESC[req.fill]})",
        embed_tokens=plan.emb_note,
        token_match=plan.token_match,
        token_mass=_token_mass(plan, req),
        tensors_copied=sum(1 for s in plan.specs if s.name not in replaced),
        bytes_written=sum(s.nbytes for s in plan.specs),
        seconds=seconds,
    )
