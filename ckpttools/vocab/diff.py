"""Comparing two vocabulary mappings (``ckpt diff-vocab``) and building one from token
frequencies (``ckpt vocab build``). Vectorised throughout: a 163,840-token vocabulary is
a few boolean masks.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ckpttools.errors import CheckpointNotFoundError, MappingError, opt
from ckpttools.formats.config import MAX_VOCAB_SIZE
from ckpttools.io.fsutil import ensure_regular
from ckpttools.io.inputs import JSON_BLANK, loads_json, read_json

if TYPE_CHECKING:
    from ckpttools.io.plan import WritePlan
from ckpttools.vocab.mapping import VocabMapping, load_mapping
from ckpttools.vocab.quant_rows import lm_head_scale_note

__all__ = [
    "VocabDiff",
    "diff_vocab",
    "load_frequencies",
    "plan_mapping",
    "plan_vocab",
    "build_vocab",
    "BuildResult",
    "save_mapping",
    "token_strings",
]


@dataclass
class VocabDiff:
    """The result of :func:`diff_vocab`; the CLI renders it as a table or JSON."""

    a: dict[str, Any]
    b: dict[str, Any]
    target_vocab_note: str | None
    slots_total: int
    slots_agree: int
    slots_differ: int
    shared_tokens: int
    only_a: int
    only_b: int
    jaccard: float
    remap_rows_carried: int
    remap_rows_to_initialize: int
    verdict: str
    differing_slots: list[dict[str, Any]] = field(default_factory=list)
    only_a_tokens: list[dict[str, Any]] = field(default_factory=list)
    only_b_tokens: list[dict[str, Any]] = field(default_factory=list)
    frequency: dict[str, Any] | None = None
    #: what a remap does with A's FP8 lm_head scales (vocab.quant_rows), when A has them
    lm_head_scales: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_strings(tokenizer: str | Path | None):
    """A function id -> token string from an HF tokenizer.json (or a directory holding one)."""
    if tokenizer is None:
        return None
    from ckpttools.vocab.tokens import load_hf_tokenizer, load_tiktoken, tiktoken_file

    tk = tiktoken_file(tokenizer)
    if tk is not None:  # a tiktoken rank file: the token's bytes, shown as text where they decode
        vocab = load_tiktoken(tk).token_bytes

        def name(i: int) -> str | None:
            b = vocab[i] if 0 <= i < len(vocab) else None
            return None if b is None else b.decode("utf-8", "backslashreplace")

        return name
    return load_hf_tokenizer(tokenizer).id_to_token


def load_frequencies(path: str | Path, vocab_size: int | None = None) -> np.ndarray:
    """Token counts as a float64 array indexed by token id.

    Accepts a JSON object ``{id: count}``, an ``.npy`` of counts, or a JSONL file whose
    lines are token-id lists (or objects with ``input_ids``), counted while streaming.

    Raises:
        CheckpointNotFoundError, MappingError.
    """
    p = Path(path)
    if not os.path.exists(p):
        from ckpttools.io.fsutil import absent_words

        raise CheckpointNotFoundError(f"{p}: {absent_words(p, 'frequency file')}", path=p, hint=_FREQ_HINT)
    ensure_regular(p)
    limit = _id_limit(vocab_size)
    if p.suffix == ".npy":
        counts = _npy_counts(p)
    elif p.suffix == ".jsonl":
        counts = _jsonl_counts(p, vocab_size, limit)
    else:
        counts = _json_counts(p, vocab_size, limit)
    if len(counts) and not (np.isfinite(counts).all() and counts.min() >= 0):
        raise MappingError(
            f"{p}: counts must be finite and non-negative (found NaN, Inf or a negative count)", path=p, hint=_FREQ_HINT
        )
    if vocab_size is not None:
        if len(counts) > vocab_size and counts[vocab_size:].any():
            raise MappingError(f"{p}: counts token ids >= the vocab size {vocab_size}", path=p, hint=_FREQ_HINT)
        counts = np.pad(counts[:vocab_size], (0, max(0, vocab_size - len(counts))))
    return counts


_FREQ_HINT = 'give token counts as a JSON object {"id": count}, a 1-D .npy of counts, or JSONL of token-id lists'


def _id_limit(vocab_size: int | None) -> int:
    if vocab_size is not None and (type(vocab_size) is not int or not 0 < vocab_size <= MAX_VOCAB_SIZE):
        raise MappingError(f"vocab size {vocab_size!r} is not an integer between 1 and {MAX_VOCAB_SIZE}")
    return vocab_size if vocab_size is not None else MAX_VOCAB_SIZE


def _npy_counts(p: Path) -> np.ndarray:
    try:
        counts = np.load(p, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:  # EOFError: a 0-byte file
        raise MappingError(
            f"{p}: not a plain .npy array ({e.__class__.__name__}: {e})", path=p, hint=_FREQ_HINT
        ) from None
    if not isinstance(counts, np.ndarray) or counts.ndim != 1 or counts.dtype.kind not in "iuf":
        raise MappingError(
            f"{p}: expected a 1-D array of integer or float counts, got "
            f"{getattr(counts, 'dtype', '?')} of shape {getattr(counts, 'shape', '?')}",
            path=p,
            hint=_FREQ_HINT,
        )
    if len(counts) > MAX_VOCAB_SIZE:
        raise MappingError(f"{p}: {len(counts)} counts is more than any vocabulary ({MAX_VOCAB_SIZE})", path=p)
    return counts.astype(np.float64)


def _check_ids(p: Path, where: str, ids: np.ndarray, limit: int) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= limit):
        bad = int(ids[(ids < 0) | (ids >= limit)][0])
        raise MappingError(f"{where}: token id {bad} is outside [0, {limit})", path=p, hint=_FREQ_HINT)


def _jsonl_counts(p: Path, vocab_size: int | None, limit: int) -> np.ndarray:
    counts = np.zeros(vocab_size or 0, dtype=np.float64)
    lineno = 0
    try:
        with open(p, encoding="utf-8", newline="\n") as f:  # JSON Lines: split on \n only, never translated
            for lineno, line in enumerate(f, 1):
                if not line.strip(JSON_BLANK):
                    continue
                try:
                    row = loads_json(line, f"{p}:{lineno}", error=MappingError)
                except MappingError:
                    row = None
                if isinstance(row, dict):
                    row = row.get("input_ids", row.get("ids", row.get("tokens")))
                ids = np.asarray(row) if isinstance(row, list) and all(type(x) is int for x in row) else None
                if ids is None or ids.ndim != 1:
                    raise MappingError(f"{p}:{lineno}: not a list of integer token ids", path=p, hint=_FREQ_HINT)
                ids = ids.astype(np.int64) if ids.size else np.zeros(0, np.int64)
                _check_ids(p, f"{p}:{lineno}", ids, limit)
                binc = np.bincount(ids, minlength=len(counts))
                if len(binc) > len(counts):
                    counts = np.concatenate([counts, np.zeros(len(binc) - len(counts))])
                counts += binc
    except UnicodeDecodeError:
        raise MappingError(f"{p}:{lineno + 1}: not UTF-8 text", path=p, hint=_FREQ_HINT) from None
    return counts


def _json_counts(p: Path, vocab_size: int | None, limit: int) -> np.ndarray:
    try:
        obj = read_json(p, "frequencies", error=MappingError)
    except MappingError:
        obj = None
    if not isinstance(obj, dict):
        raise MappingError(f"{p}: expected a JSON object {{token_id: count}}", path=p, hint=_FREQ_HINT)
    try:
        keys = np.fromiter((int(k) for k in obj), dtype=np.int64, count=len(obj))
    except (ValueError, OverflowError):
        raise MappingError(f"{p}: keys must be integer token ids", path=p, hint=_FREQ_HINT) from None
    if not all(type(v) in (int, float) for v in obj.values()):
        raise MappingError(f"{p}: counts must be numbers", path=p, hint=_FREQ_HINT)
    try:
        vals = np.fromiter((float(v) for v in obj.values()), dtype=np.float64, count=len(obj))
    except OverflowError:
        raise MappingError(f"{p}: a count is too large", path=p, hint=_FREQ_HINT) from None
    _check_ids(p, str(p), keys, limit)
    counts = np.zeros(max(int(keys.max()) + 1 if keys.size else 0, vocab_size or 0), dtype=np.float64)
    np.add.at(counts, keys, vals)
    return counts


def _side(m: VocabMapping) -> dict[str, Any]:
    return {
        "source": m.source,
        "draft_vocab_size": m.draft_vocab_size,
        "target_vocab_size": m.target_vocab_size,
        "order": m.order,
    }


def diff_vocab(
    a: Any,
    b: Any,
    *,
    tokenizer: str | Path | None = None,
    frequencies: str | Path | np.ndarray | None = None,
    show: int = 10,
) -> VocabDiff:
    """Compare two mappings slot by slot and token by token.

    Args:
        a, b: checkpoints, mapping files, or :class:`VocabMapping` objects.
        tokenizer: an HF tokenizer.json (or its directory) to show token strings.
        frequencies: token counts (file or array) for the token mass each side covers.
        show: how many differing slots and one-sided tokens to list.

    Returns:
        a :class:`VocabDiff`. Its verdict says what a remap of A into B's space carries.

    Raises:
        MappingError (exit 2) when either mapping is malformed.

    Example:
        >>> d = diff_vocab("drafter-k2", "drafter-k25")  # doctest: +SKIP
        >>> d.slots_agree, d.shared_tokens
    """
    ma, mb = load_mapping(a).check(), load_mapping(b).check()
    ids_a, ids_b = ma.ids, mb.ids
    va, vb = ma.target_vocab_size, mb.target_vocab_size
    note = None
    if va is not None and vb is not None and va != vb:
        note = (
            f"target vocab sizes differ ({va:,} vs {vb:,}): padded vocabularies of one tokenizer, or two "
            "different tokenizers; ids are compared as they are"
        )
    v = max(va or 0, vb or 0, int(ids_a.max(initial=-1)) + 1, int(ids_b.max(initial=-1)) + 1)
    mask_a, mask_b = ma.t2d(v), mb.t2d(v)
    shared = int(np.count_nonzero(mask_a & mask_b))
    only_a, only_b = int(mask_a.sum()) - shared, int(mask_b.sum()) - shared
    union = shared + only_a + only_b
    n = min(len(ids_a), len(ids_b))
    agree_mask = ids_a[:n] == ids_b[:n]
    agree = int(np.count_nonzero(agree_mask))
    total = max(len(ids_a), len(ids_b))
    carried, to_init = shared, mb.draft_vocab_size - shared

    diff_rows, only_a_rows, only_b_rows = _examples(ids_a, ids_b, agree_mask, mask_a, mask_b, tokenizer, show)
    freq = None if frequencies is None else _token_mass(frequencies, v, mask_a, mask_b)
    verdict = _verdict(total, agree, shared, carried, to_init, mb.draft_vocab_size)
    return VocabDiff(
        a=_side(ma),
        b=_side(mb),
        target_vocab_note=note,
        slots_total=total,
        slots_agree=agree,
        slots_differ=total - agree,
        shared_tokens=shared,
        only_a=only_a,
        only_b=only_b,
        jaccard=shared / union if union else 1.0,
        remap_rows_carried=carried,
        remap_rows_to_initialize=to_init,
        verdict=verdict,
        differing_slots=diff_rows,
        only_a_tokens=only_a_rows,
        only_b_tokens=only_b_rows,
        frequency=freq,
        lm_head_scales=lm_head_scale_note(a, ma, mb),
    )


def _examples(
    ids_a: np.ndarray,
    ids_b: np.ndarray,
    agree_mask: np.ndarray,
    mask_a: np.ndarray,
    mask_b: np.ndarray,
    tokenizer: str | Path | None,
    show: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The first ``show`` differing slots and one-sided tokens, with token strings when a tokenizer is given."""
    names = token_strings(tokenizer)

    def tok(i: int) -> str | None:
        return names(int(i)) if names else None

    diff_rows = [
        {"slot": int(s), "a": int(ids_a[s]), "b": int(ids_b[s]), "a_token": tok(ids_a[s]), "b_token": tok(ids_b[s])}
        for s in np.flatnonzero(~agree_mask)[:show]
    ]
    only_a_rows = [{"id": int(i), "token": tok(i)} for i in np.flatnonzero(mask_a & ~mask_b)[:show]]
    only_b_rows = [{"id": int(i), "token": tok(i)} for i in np.flatnonzero(mask_b & ~mask_a)[:show]]
    return diff_rows, only_a_rows, only_b_rows


def _token_mass(frequencies: Any, v: int, mask_a: np.ndarray, mask_b: np.ndarray) -> dict[str, float]:
    counts = frequencies if isinstance(frequencies, np.ndarray) else load_frequencies(frequencies)
    counts = np.pad(counts[:v], (0, max(0, v - len(counts))))
    tot = float(counts.sum()) or 1.0
    return {
        "total": float(counts.sum()),
        "mass_a": float(counts[mask_a].sum() / tot),
        "mass_b": float(counts[mask_b].sum() / tot),
        "mass_shared": float(counts[mask_a & mask_b].sum() / tot),
        "mass_only_a": float(counts[mask_a & ~mask_b].sum() / tot),
        "mass_only_b": float(counts[mask_b & ~mask_a].sum() / tot),
    }


def _verdict(total: int, agree: int, shared: int, carried: int, to_init: int, vd_b: int) -> str:
    if agree == total and to_init == 0:
        return f"identical: all {total:,} slots agree; the drafter works with B's mapping as it is"
    remap = f"a remap carries {carried:,} rows and initializes {to_init:,}"
    lead = f"slots differ at {total - agree:,} of {total:,}"
    if shared >= 0.9 * vd_b:
        return (
            f"{lead}, but {shared:,} tokens are shared: {remap}. Swapping d2t/t2d without moving "
            "lm_head rows would break acceptance; remap instead"
        )
    return f"{lead}, and only {shared:,} tokens are shared: {remap}; expect acceptance to drop"


# ----------------------------------------------------------------------------- build
@dataclass
class BuildResult:
    """What :func:`build_vocab` wrote."""

    output: str
    draft_vocab_size: int
    target_vocab_size: int
    tokens_seen: int
    zero_count_tokens: int
    mass_covered: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_mapping(
    m: VocabMapping,
    out: str | Path,
    *,
    target_vocab_size: int | None = None,
    metadata: dict[str, str] | None = None,
    inputs: tuple[str | Path, ...] = (),
) -> WritePlan:
    """A mapping file as a plan: d2t (int64) and t2d (bool) in one .safetensors file."""
    from ckpttools.io.guard import check_output
    from ckpttools.io.plan import Data, PlannedTensor, WritePlan

    check_output(out, list(inputs))
    t2d = np.asarray(m.t2d(target_vocab_size or m.target_vocab_size), bool)
    tensors = [
        PlannedTensor("d2t", "I64", (m.draft_vocab_size,), Data(np.asarray(m.d2t, np.int64))),
        PlannedTensor("t2d", "BOOL", (len(t2d),), Data(t2d)),
    ]
    return WritePlan("vocab build", str(out), tensors, layout="file", metadata=metadata, inputs=list(inputs))


def save_mapping(
    m: VocabMapping,
    out: str | Path,
    *,
    target_vocab_size: int | None = None,
    force: bool = False,
    metadata: dict[str, str] | None = None,
    inputs: tuple[str | Path, ...] = (),
) -> Path:
    """Write d2t (int64) and t2d (bool) to a .safetensors file, atomically."""
    from ckpttools.io.plan import execute

    plan = plan_mapping(m, out, target_vocab_size=target_vocab_size, metadata=metadata, inputs=inputs)
    return execute(plan, force=force).output


def plan_vocab(
    frequencies: str | Path | np.ndarray,
    draft_vocab_size: int,
    out: str | Path,
    *,
    vocab_size: int | None = None,
) -> WritePlan:
    """What :func:`build_vocab` would write, as a plan (the counts are read; nothing is written).
    Its ``report`` holds the :class:`BuildResult` figures."""
    src = "<array>" if isinstance(frequencies, np.ndarray) else str(frequencies)
    if isinstance(frequencies, np.ndarray):
        counts = frequencies.astype(np.float64)
    else:
        counts = load_frequencies(frequencies, vocab_size)
    if vocab_size is None:
        if isinstance(frequencies, np.ndarray) or Path(frequencies).suffix == ".npy":
            vocab_size = len(counts)
        else:
            raise MappingError(
                f"{src}: the target vocab size cannot be known from a JSON/JSONL count file",
                hint=f"give {opt('vocab_size')} (the target's vocab_size, for t2d's length)",
            )
    counts = np.pad(counts[:vocab_size], (0, max(0, vocab_size - len(counts))))
    if draft_vocab_size <= 0 or draft_vocab_size > vocab_size:
        raise MappingError(f"draft vocab size {draft_vocab_size} must be between 1 and the vocab size {vocab_size}")
    ids = np.arange(vocab_size, dtype=np.int64)
    order = np.lexsort((ids, -counts))  # most frequent first, ties by lower id
    chosen = np.sort(order[:draft_vocab_size])
    m = VocabMapping.from_ids(chosen, vocab_size, source=str(out))
    meta = {"ckpttools": "vocab build", "frequencies": src, "draft_vocab_size": str(draft_vocab_size)}
    inputs = () if isinstance(frequencies, np.ndarray) else (frequencies,)
    plan = plan_mapping(m, out, target_vocab_size=vocab_size, metadata=meta, inputs=inputs)
    tot = float(counts.sum()) or 1.0
    plan.reads.append(f"token counts: {src}")
    plan.report = {
        "output": str(out),
        "draft_vocab_size": draft_vocab_size,
        "target_vocab_size": vocab_size,
        "tokens_seen": int(np.count_nonzero(counts)),
        "zero_count_tokens": int(np.count_nonzero(counts[chosen] == 0)),
        "mass_covered": float(counts[chosen].sum() / tot),
    }
    return plan


def build_vocab(
    frequencies: str | Path | np.ndarray,
    draft_vocab_size: int,
    out: str | Path,
    *,
    vocab_size: int | None = None,
    force: bool = False,
) -> BuildResult:
    """Build a mapping the way SpecForge/EAGLE/speculators do and write it as .safetensors.

    Keeps the ``draft_vocab_size`` most frequent tokens (ties: the lower id), stored in
    ascending target-id order as d2t (int64 offsets) plus t2d (bool).

    Raises:
        MappingError when the vocabulary is smaller than the draft vocabulary or the
        vocab size cannot be known.
    """
    from ckpttools.io.plan import execute

    plan = plan_vocab(frequencies, draft_vocab_size, out, vocab_size=vocab_size)
    execute(plan, force=force)
    return BuildResult(**plan.report)
