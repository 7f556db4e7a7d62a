"""``ckpt remap``: move a drafter into another vocabulary mapping's space.

Row j of the output lm_head is the input's row for the same target token; tokens new
to the drafter are filled (zeros, the mean of the carried rows, or the target model's
own lm_head row). d2t, t2d and draft_vocab_size are written new; every other tensor is
copied byte for byte, in the kernel where the OS allows. Memory stays bounded: lm_head
rows move in chunks through positioned reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ckpttools.errors import MappingError, opt
from ckpttools.engines.config_rules import canonical_shapes, weight_problems
from ckpttools.formats.config import essentials, require_valid_config
from ckpttools.formats.names import canonical_name
from ckpttools.io.checkpoint import Checkpoint, numpy_dtype, open_checkpoint
from ckpttools.io.guard import check_output
from ckpttools.io.preflight import refuse_shared_names
from ckpttools.io.plan import (
    Copy,
    Data,
    Gather,
    ManifestPlan,
    PlannedTensor,
    TensorRef,
    WritePlan,
    execute,
    side_files,
)
from ckpttools.io.safetensors_header import DTYPE_SIZES
from ckpttools.io.writer import parse_size
from ckpttools.ops import quant_remap
from ckpttools.vocab.mapping import VocabMapping, load_mapping

__all__ = ["RemapReport", "plan_remap", "remap", "FILL_POLICIES"]

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
        p = Path(str(to))
        if p.suffix.lower() in (".npy", ".json", ".pt") and p.name != "config.json":
            raise  # a mapping file's own fault: read as a target's weights, it would be named as theirs
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


def _target_matrix(ck: Checkpoint, name: str, what: str) -> tuple[int, int]:
    """A target tensor remap reads rows of: a 2-D [rows, hidden] matrix, or one clear error
    (every target tensor is checked here before a row of it is planned)."""
    shape = ck.tensors[name].shape
    if len(shape) != 2:
        raise MappingError(
            f"{ck.source}: the target's {name} has shape {list(shape)}; {what} needs a 2-D [rows, hidden] matrix",
            path=str(ck.source),
            tensor=name,
            hint="the target checkpoint is damaged or is not a causal language model",
        )
    return int(shape[0]), int(shape[1])


def _target_head(target: _OnDemand, hidden: int) -> tuple[Checkpoint, str]:
    ck = target.get()
    name = _find(ck, "lm_head.weight") or _find(ck, "embed_tokens.weight")
    if name is None:
        raise MappingError(
            f"{target.source}: no lm_head (or tied embed_tokens) to fill rows from", path=str(target.source)
        )
    _, h = _target_matrix(ck, name, "filling rows from the target")
    if h != hidden:
        raise MappingError(
            f"filling rows from the target needs equal hidden sizes: the drafter's is {hidden}, the target's "
            f"lm_head has {h}",
            hint=f"fill with the mean or with zeros ({opt('fill')} mean or zero)",
        )
    return ck, name


def _mean_rows(ck: Checkpoint, name: str, rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The mean of the given rows, computed in float64 streaming in chunks."""
    h = ck.tensors[name].shape[1]
    acc = np.zeros(h, dtype=np.float64)
    rows = np.sort(rows[rows >= 0])
    step = max(1, _CHUNK_BYTES // (h * 4))
    for i in range(0, len(rows), step):
        acc += ck.read_rows_pread(name, rows[i : i + step]).astype(np.float64).sum(axis=0)
    return (acc / max(1, len(rows))).astype(np.float32).astype(dtype)


def plan_remap(
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
    fsync: bool = False,
    download: bool = True,
) -> WritePlan:
    """What :func:`remap` would write, as a :class:`~ckpttools.io.plan.WritePlan` (nothing written).

    Reads headers, d2t/t2d, the destination mapping and the tokenizers; with
    ``fill="mean"`` it also reads every carried lm_head row (``plan.reads`` says so).
    ``download=False`` (``--dry-run``) reads a Hub drafter's headers without downloading it;
    ``fsync`` is recorded in the manifest (``execute`` does it).
    """
    shard_size = parse_size(max_shard_size)
    req = _Request(
        to, frequencies, draft_vocab_size, fill, target, source_tokenizer, target_tokenizer, shard_size, fsync
    )
    req.check()
    with open_checkpoint(drafter, download=download) as ck:
        require_valid_config(
            ck.config, str(drafter), weight_problems(ck.config, canonical_shapes(ck.config, ck.tensors))
        )
        check_output(out, [ck.root, *req.inputs()])
        target_ck = _OnDemand(target)
        try:
            return _plan(ck, req, target_ck, Path(out))
        finally:
            target_ck.close()


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
    plan = plan_remap(
        drafter,
        out,
        to=to,
        frequencies=frequencies,
        draft_vocab_size=draft_vocab_size,
        fill=fill,
        target=target,
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        max_shard_size=max_shard_size,
        fsync=fsync,
    )
    execute(plan, force=force, fsync=fsync, progress=progress)
    return RemapReport(output=str(out), **plan.report, seconds=time.perf_counter() - t0)


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
        from ckpttools.vocab.tokens import tokenizer_file

        small = []
        if self.to is not None and Path(self.to).is_file():
            small.append(Path(self.to))
        if self.frequencies is not None:
            small.append(Path(self.frequencies))
        for tok in (self.source_tokenizer, self.target_tokenizer):
            if tok is not None:
                small.append(tokenizer_file(tok))  # the file load_vocab reads: tokenizer.json or tiktoken's
        return small


@dataclass(frozen=True)
class _Rows:
    """The vocabulary decisions: which source head row feeds each output row, and the mappings."""

    src_map: VocabMapping
    dst_map: VocabMapping
    dest_desc: str
    counts: np.ndarray | None  # token counts, when the destination came from frequencies
    token_match: dict[str, Any] | None
    v_src: int
    v_new: int
    n2o: np.ndarray  # new token id -> old token id (-1: no match)
    src_rows: np.ndarray  # output head row -> source head row (-1: filled)

    @property
    def rows_carried(self) -> int:
        return int(np.count_nonzero(self.src_rows >= 0))


def _plan(ck: Checkpoint, req: _Request, target_ck: _OnDemand, out: Path) -> WritePlan:
    from ckpttools.engines.flavor import detect_flavor

    detect_flavor(ck.config, ck.tensors.keys()).refuse(str(ck.source), "remap")
    rows = _vocab_rows(ck, req)
    emb = _find(ck, "embed_tokens.weight")
    head, hidden, tgt = _head_source(ck, rows.src_map, emb, rows.dst_map, req, target_ck)
    if head is None:
        rows.src_rows[:] = -1
    reads: list[str] = []
    head_t = _head_tensor(ck, head, hidden, rows, tgt, req, reads)
    emb_t, emb_note = _embed_tensor(ck, emb, req, rows, target_ck)
    tensors = _tensors(ck, head_t, emb_t, rows)
    if head is not None:  # an FP8 lm_head's scales move with its rows
        tensors = quant_remap.adjust(ck, tensors, head_t.name, req.fill)
    config = dict(ck.config or {}, draft_vocab_size=rows.dst_map.draft_vocab_size)
    if rows.v_new != essentials(ck.config).vocab_size:
        config["vocab_size"] = rows.v_new
    return WritePlan(
        "remap",
        str(out),
        tensors,
        config=config,
        config_before=ck.config,
        side_files=side_files(ck),
        manifest=_manifest(ck, rows, req, target_ck),
        inputs=[ck.root, *req.inputs()],
        max_shard_size=req.shard_size,
        reads=reads,
        report=_report(ck, rows, req, tensors, emb_note, emb),
    )


#: the tensors remap writes anew; each must come from one source tensor (it finds them by canonical name)
_REWRITTEN = ("lm_head.weight", "embed_tokens.weight", "d2t", "t2d")


def _vocab_rows(ck: Checkpoint, req: _Request) -> _Rows:
    pairs = ((n, c) for n in ck.tensors if (c := canonical_name(n)[0]) in _REWRITTEN)
    refuse_shared_names(pairs, str(ck.source))  # a second d2t would be copied unchanged beside the new one
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
    return _Rows(src_map, dst_map, dest_desc, counts, token_match, v_src, v_new, n2o, src_rows)


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


def _head_tensor(
    ck: Checkpoint,
    head: str | None,
    hidden: int,
    rows: _Rows,
    tgt: tuple[Checkpoint, str] | None,
    req: _Request,
    reads: list[str],
) -> PlannedTensor:
    """The output lm_head: carried rows from the drafter's head, the rest filled (zeros, the
    mean of the carried rows, or the target's rows for those tokens)."""
    refs = [TensorRef.of(ck, head)] if head is not None else []
    if head is not None:
        st = ck.tensors[head].dtype
    else:
        assert tgt is not None  # a head-less drafter was refused unless filled from the target
        st = {"BF16": "BF16", "F16": "F16"}.get(tgt[0].tensors[tgt[1]].dtype, "BF16")
    part = np.where(rows.src_rows >= 0, 0, -1)
    src = np.where(rows.src_rows >= 0, rows.src_rows, 0)
    if tgt is not None:
        part = np.where(rows.src_rows >= 0, 0, len(refs))
        src = np.where(rows.src_rows >= 0, rows.src_rows, rows.dst_map.ids)
        refs.append(TensorRef.of(*tgt))
    fill = bytes(hidden * DTYPE_SIZES[st])  # zeros
    if req.fill == "mean" and head is not None:
        fill = _mean_rows(ck, head, rows.src_rows, numpy_dtype(st)).tobytes()
        reads.append(f"{head}: every carried row ({rows.rows_carried:,}), for the mean that fills the rest")
    k = rows.dst_map.draft_vocab_size
    return PlannedTensor(head or "lm_head.weight", st, (k, hidden), Gather(tuple(refs), part, src, fill))


def _embed_tensor(
    ck: Checkpoint, emb: str | None, req: _Request, rows: _Rows, target_ck: _OnDemand
) -> tuple[PlannedTensor | None, str]:
    """embed_tokens: the same tokenizer -> copied; otherwise rebuilt by the same matching,
    the rows no token matched taken from the target's embed_tokens (or zeros)."""
    if emb is None:
        return None, "absent"
    et, v_new = ck.tensors[emb], rows.v_new
    if req.source_tokenizer is None and et.shape[0] == v_new:
        return None, "copied unchanged (same tokenizer)"
    emb_rows = rows.n2o[:v_new].copy()
    emb_rows[emb_rows >= et.shape[0]] = -1
    refs = [TensorRef.of(ck, emb)]
    part = np.where(emb_rows >= 0, 0, -1)
    if req.target is not None:
        tck = target_ck.get()
        tname = _find(tck, "embed_tokens.weight")
        t_rows, t_hidden = _target_matrix(tck, tname, "taking embed_tokens rows from it") if tname else (0, 0)
        if tname and t_hidden == et.shape[1]:
            refs.append(TensorRef.of(tck, tname))
            part = np.where(emb_rows >= 0, 0, 1)
            wanted = np.flatnonzero(emb_rows < 0)
            if len(wanted) and int(wanted[-1]) >= t_rows:
                raise MappingError(
                    f"{req.target}: its {tname} has {t_rows:,} rows, but token {int(wanted[-1]):,} of the new "
                    f"vocabulary ({v_new:,} tokens) has no matched row and would be taken from it",
                    path=str(req.target),
                    tensor=tname,
                    hint="give the target of the destination vocabulary",
                )
    src = np.where(emb_rows >= 0, emb_rows, np.arange(v_new))
    matched = int(np.count_nonzero(emb_rows >= 0))
    rest = "from the target's embed_tokens" if req.target is not None else "zeros"
    note = f"rebuilt for {v_new:,} tokens: {matched:,} rows matched by bytes, {v_new - matched:,} {rest}"
    fill = bytes(et.nbytes // max(1, et.shape[0]))
    return PlannedTensor(emb, et.dtype, (v_new, et.shape[1]), Gather(tuple(refs), part, src, fill)), note


def _tensors(ck: Checkpoint, head_t: PlannedTensor, emb_t: PlannedTensor | None, rows: _Rows) -> list[PlannedTensor]:
    """The output's tensors: the source's order, the vocabulary-dependent ones new, the rest copied."""
    k, v_new = rows.dst_map.draft_vocab_size, rows.v_new
    d2t = PlannedTensor(_find(ck, "d2t") or "d2t", "I64", (k,), Data(np.asarray(rows.dst_map.d2t, np.int64)))
    t2d = PlannedTensor(_find(ck, "t2d") or "t2d", "BOOL", (v_new,), Data(np.asarray(rows.dst_map.t2d(v_new), bool)))
    new = {t.name: t for t in (head_t, emb_t, d2t, t2d) if t is not None}
    out = [
        new.pop(n) if n in new else PlannedTensor(n, t.dtype, t.shape, Copy(TensorRef.of(ck, n)))
        for n, t in ck.tensors.items()
    ]
    return out + [new[n] for n in ("lm_head.weight", "d2t", "t2d") if n in new]


def _manifest(ck: Checkpoint, rows: _Rows, req: _Request, target_ck: _OnDemand) -> ManifestPlan:
    sources: dict[str, Any] = {"drafter": ck.files()}
    small = req.small_inputs()
    if small:
        sources["inputs"] = small
    unhashed = {
        str(p): "not hashed: larger than 64 MiB and read only in part" for p in small if p.stat().st_size > _HASH_LIMIT
    }
    extra: dict[str, Any] = {
        "note": "a destination or target checkpoint directory is read only in part and is not hashed"
    }
    hub = {
        "drafter": ck.hub_record(),
        "destination": rows.dst_map.origin,
        "target": target_ck.ck.hub_record() if target_ck.ck is not None else None,
    }
    if any(hub.values()):
        extra["hub"] = {k: v for k, v in hub.items() if v is not None}
    params = req.params(rows.dst_map.draft_vocab_size)
    return ManifestPlan("remap", params, sources, extra, unhashed)


def _token_mass(plan: _Rows, req: _Request) -> dict[str, float] | None:
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


def _report(
    ck: Checkpoint, rows: _Rows, req: _Request, tensors: list[PlannedTensor], emb_note: str, emb: str | None
) -> dict[str, Any]:
    """The report's figures (all but the output and the time), known before anything is written."""
    k = rows.dst_map.draft_vocab_size
    return {
        "source": str(ck.source),
        "destination": rows.dest_desc,
        "draft_vocab_size_before": rows.src_map.draft_vocab_size,
        "draft_vocab_size_after": k,
        "vocab_size_before": rows.v_src,
        "vocab_size_after": rows.v_new,
        "rows_carried": rows.rows_carried,
        "rows_filled": k - rows.rows_carried,
        "fill": f"{req.fill} ({_FILL_DESC[req.fill]})",
        "embed_tokens": emb_note,
        "token_match": rows.token_match,
        "token_mass": _token_mass(rows, req),
        "tensors_copied": sum(1 for t in tensors if isinstance(t.source, Copy) and t.name != emb),
        "bytes_written": sum(t.nbytes for t in tensors),
    }
