"""Matching tokens of two tokenizers by their bytes.

Hugging Face tokenizer.json vocabularies spell tokens differently: byte-level BPE
(GPT-2, Llama-3, Qwen) maps each byte to a printable character; SentencePiece-style
vocabularies (Llama-2, TinyLlama) write a space as "▁" and bytes as "<0xNN>". Both are
normalised here to the bytes a token stands for; special tokens match only special
tokens with the same content.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ckpttools.errors import TokenizerError
from ckpttools.formats.config import MAX_VOCAB_SIZE

__all__ = [
    "TokenizerVocab",
    "load_vocab",
    "load_hf_tokenizer",
    "match_tokens",
    "TokenMatch",
    "bytes_to_unicode",
    "tokenizer_json",
    "tokenizer_file",
]


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


@dataclass
class TokenizerVocab:
    """Token id -> the bytes it stands for (special tokens as ``b"\\xffSPECIAL:" + content``)."""

    path: str
    style: str  # "byte-level" | "sentencepiece" | "plain" | "tiktoken"
    token_bytes: list[bytes | None]
    byte_fallback: set[int] | None = None  # ids of <0xNN> tokens (used only when no piece exists)

    @property
    def size(self) -> int:
        return len(self.token_bytes)


def _styles(tok: dict[str, Any]) -> str:
    def types(node: Any) -> list[str]:
        if not isinstance(node, dict):
            return []
        out = [node.get("type", "")]
        for key in ("pretokenizers", "decoders", "normalizers"):
            for sub in node.get(key) or []:
                out += types(sub)
        return out

    kinds = types(tok.get("pre_tokenizer")) + types(tok.get("decoder"))  # checked by _check_components
    if "ByteLevel" in kinds:
        return "byte-level"
    vocab = (tok.get("model") or {}).get("vocab")
    pieces = vocab.keys() if isinstance(vocab, dict) else [p[0] for p in vocab or []]
    if "ByteFallback" in kinds or "Metaspace" in kinds or any(p.startswith("▁") for p in list(pieces)[:5000]):
        return "sentencepiece"
    return "plain"


#: names a tiktoken rank file goes by (Kimi-K2 ships tiktoken.model; Llama-3's original release
#: tokenizer.model in the same format)
TIKTOKEN_NAMES = ("tiktoken.model", "tokenizer.model")
_RANK_LINE = re.compile(rb"^[A-Za-z0-9+/]+=*\s+\d+$")


def tiktoken_file(path: str | Path) -> Path | None:
    """The tiktoken rank file a path names (the file, or one in a directory without a
    tokenizer.json), recognised by its content: lines of ``base64(token bytes) rank``."""
    from ckpttools.io.fsutil import ensure_regular

    p = Path(path)
    if p.is_dir():
        if (p / "tokenizer.json").exists():
            return None
        p = next((p / n for n in TIKTOKEN_NAMES if (p / n).is_file()), p / TIKTOKEN_NAMES[0])
    if not p.is_file() or p.name == "tokenizer.json":
        return None
    ensure_regular(p)
    with open(p, "rb") as f:
        first = f.readline(4096).strip()
    return p if _RANK_LINE.match(first) else None


def load_tiktoken(p: Path) -> TokenizerVocab:
    """A tiktoken rank file read as the plain format it is: one ``base64 rank`` per line.

    The ranks are the token ids; special tokens a model adds after them (defined in its
    Python tokenizer code, not in this file) are unknown here and stay None.
    """
    import base64
    import binascii

    from ckpttools.io.fsutil import read_regular_bytes

    ranks: dict[int, bytes] = {}
    for n, line in enumerate(read_regular_bytes(p, limit=1 << 30).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("needs two fields")
            tok, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
        except (ValueError, binascii.Error) as e:
            raise TokenizerError(f"{p}:{n}: not a tiktoken rank line ({e})", path=p) from None
        if not 0 <= rank < MAX_VOCAB_SIZE or rank in ranks:
            raise TokenizerError(f"{p}:{n}: rank {rank} is out of range or repeated", path=p)
        ranks[rank] = tok
    out: list[bytes | None] = [None] * (max(ranks, default=-1) + 1)
    for rank, tok in ranks.items():
        out[rank] = tok
    return TokenizerVocab(str(p), "tiktoken", out, None)


def tokenizer_json(path: str | Path) -> Path:
    """The tokenizer.json a path names: the file itself, or the one in a directory.

    Raises:
        TokenizerError: no such file (a folder with only a tiktoken rank file says so), or not a
        regular file.
    """
    from ckpttools.io.fsutil import ensure_regular

    p = Path(path)
    if p.is_dir():
        ranks = [n for n in TIKTOKEN_NAMES if (p / n).is_file()]
        p = p / "tokenizer.json"
        if ranks and not p.exists():
            raise TokenizerError(
                f"{p.parent}: holds {ranks[0]} (a tiktoken rank file) and no tokenizer.json, which this needs",
                path=p,
                hint="give the model's tokenizer.json (tokenizing text, or rendering chats, needs it)",
            )
    if not p.exists():
        from ckpttools.io.fsutil import absent_words

        words = "no tokenizer.json here" if not os.path.islink(p) else absent_words(p)
        raise TokenizerError(f"{p}: {words}", path=p)
    try:
        return ensure_regular(p)
    except ValueError as e:
        raise TokenizerError(str(e), path=p) from None


def tokenizer_file(path: str | Path) -> Path:
    """The one file :func:`load_vocab` reads for ``path``: its tiktoken rank file, else its
    tokenizer.json (what a manifest hashes as the tokenizer input).

    Raises:
        TokenizerError: neither is there.
    """
    return tiktoken_file(path) or tokenizer_json(path)


def load_hf_tokenizer(path: str | Path) -> Any:
    """A ``tokenizers.Tokenizer`` from a tokenizer.json (or its directory).

    Raises:
        TokenizerError: missing, not a regular file, or refused by the tokenizers library.
    """
    from tokenizers import Tokenizer

    p = tokenizer_json(path)
    try:
        return Tokenizer.from_file(str(p))
    except Exception as e:  # the tokenizers library raises a bare Exception on bad files
        msg = str(e).splitlines()[0][:200] if str(e) else e.__class__.__name__
        raise TokenizerError(f"{p}: not a readable tokenizer.json ({msg})", path=p) from None


def _read_tokenizer(p: Path) -> tuple[dict[str, Any], list[tuple[str, int]], dict[int, dict[str, Any]]]:
    """tokenizer.json's content, its (piece, id) items and its added tokens, checked."""
    from ckpttools.errors import ConfigError
    from ckpttools.io.fsutil import read_regular_bytes
    from ckpttools.io.inputs import JSON_LIMITS, json_kind, loads_json

    def bad(what: str) -> TokenizerError:
        return TokenizerError(f"{p}: not a usable Hugging Face tokenizer.json ({what})", path=p)

    try:
        tok = loads_json(read_regular_bytes(p, JSON_LIMITS["tokenizer"]), str(p))
    except ConfigError as e:
        raise bad(str(e).removeprefix(f"{p}: ")) from None
    if not isinstance(tok, dict):
        raise bad(f"{json_kind(tok)} at the top, not an object")
    model = tok.get("model")
    if not isinstance(model, dict):
        raise bad(f"model is {json_kind(model)}, not an object" if model is not None else "no model")
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        items = list(vocab.items())
    elif isinstance(vocab, list) and all(isinstance(v, list) and v and isinstance(v[0], str) for v in vocab):
        items = [(piece[0], i) for i, piece in enumerate(vocab)]
    else:
        raise bad("no model.vocab")
    for piece, i in items:
        if type(i) is not int or not 0 <= i < MAX_VOCAB_SIZE:
            raise bad(f"token {piece!r} has id {i!r}; ids are integers from 0 to {MAX_VOCAB_SIZE - 1}")
    added_tokens = tok.get("added_tokens")
    if added_tokens is not None and not isinstance(added_tokens, list):
        raise bad(f"added_tokens is {json_kind(added_tokens)}, not a list")
    added: dict[int, dict[str, Any]] = {}
    for a in added_tokens or []:
        i = a.get("id") if isinstance(a, dict) else None
        if type(i) is not int or not 0 <= i < MAX_VOCAB_SIZE or not isinstance(a.get("content"), str):
            raise bad(f"added token {str(a)[:80]!r} needs an integer id from 0 and a string content")
        if a.get("special") is not None and not isinstance(a["special"], bool):
            raise bad(f"added token {i}: special is {json_kind(a['special'])}, not true or false")
        added[i] = a
    for key in ("pre_tokenizer", "decoder"):
        _check_components(tok.get(key), key, bad)
    return tok, items, added


def _check_components(node: Any, where: str, bad: Any) -> None:
    """A pre_tokenizer or decoder of tokenizer.json, as :func:`_styles` reads it: null, or an
    object whose ``type`` is a string and whose nested lists hold more of them."""
    from ckpttools.io.inputs import json_kind

    if node is None:
        return
    if not isinstance(node, dict):
        raise bad(f"{where} is {json_kind(node)}, not an object")
    if node.get("type") is not None and not isinstance(node["type"], str):
        raise bad(f"{where}.type is {json_kind(node['type'])}, not a string")
    for key in ("pretokenizers", "decoders", "normalizers"):
        subs = node.get(key)
        if subs is None:
            continue
        if not isinstance(subs, list):
            raise bad(f"{where}.{key} is {json_kind(subs)}, not a list")
        for n, sub in enumerate(subs):
            _check_components(sub, f"{where}.{key}[{n}]", bad)


def load_vocab(path: str | Path) -> TokenizerVocab:
    """Read an HF tokenizer.json (or a directory holding one) into token bytes.

    A tiktoken rank file (Kimi's ``tiktoken.model``, Llama-3's original ``tokenizer.model``),
    or a directory holding one and no tokenizer.json, is read too (:func:`load_tiktoken`).

    Raises:
        TokenizerError
    """
    tk = tiktoken_file(path)
    if tk is not None:
        return load_tiktoken(tk)
    p = tokenizer_json(path)
    tok, items, added = _read_tokenizer(p)
    size = max([i for _, i in items] + list(added) + [-1]) + 1
    style = _styles(tok)
    out: list[bytes | None] = [None] * size
    fallback: set[int] = set()
    if style == "byte-level":
        dec = {c: b for b, c in bytes_to_unicode().items()}
        for s, i in items:
            try:
                out[i] = bytes(dec[c] for c in s)
            except KeyError:
                out[i] = s.encode("utf-8")
    else:
        for s, i in items:
            if style == "sentencepiece" and len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
                try:
                    out[i] = bytes([int(s[3:5], 16)])
                    fallback.add(i)
                    continue
                except ValueError:
                    pass
            out[i] = s.replace("▁", " ").encode("utf-8") if style == "sentencepiece" else s.encode("utf-8")
    for i, a in added.items():
        if a.get("special"):
            out[i] = b"\xffSPECIAL:" + a["content"].encode("utf-8")
        elif out[i] is None:
            out[i] = a["content"].encode("utf-8")
    return TokenizerVocab(str(p), style, out, fallback)


@dataclass
class TokenMatch:
    """For each token of the new tokenizer, the old tokenizer's id with the same bytes (or -1)."""

    new_to_old: np.ndarray
    exact_matches: int
    unmatched: int
    source_style: str
    target_style: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "exact_matches": self.exact_matches,
            "unmatched": self.unmatched,
            "source_style": self.source_style,
            "target_style": self.target_style,
        }


def match_tokens(old: TokenizerVocab, new: TokenizerVocab, prefer: np.ndarray | None = None) -> TokenMatch:
    """Match every token of ``new`` to a token of ``old`` with the same bytes.

    Args:
        prefer: a bool mask over old ids. When several old tokens share the bytes (e.g.
            "!" and its byte-fallback "<0x21>"), one in the mask wins, then a real piece
            over a byte-fallback token (which a tokenizer emits only when no piece
            exists), then the lowest id.
    """
    fb = old.byte_fallback or set()

    def rank(i: int) -> tuple[bool, bool, int]:
        return (not (prefer is not None and i < len(prefer) and prefer[i]), i in fb, i)

    by_bytes: dict[bytes, int] = {}
    for i, b in enumerate(old.token_bytes):
        if b is None:
            continue
        cur = by_bytes.get(b)
        if cur is None or rank(i) < rank(cur):
            by_bytes[b] = i
    n2o = np.full(new.size, -1, dtype=np.int64)
    for j, b in enumerate(new.token_bytes):
        if b is not None and b in by_bytes:
            n2o[j] = by_bytes[b]
    matched = int(np.count_nonzero(n2o >= 0))
    return TokenMatch(n2o, matched, new.size - matched, old.style, new.style)
