"""tiktoken rank files (Kimi-K2's tiktoken.model, Llama-3's original tokenizer.model) as
tokenizers: read as the plain format, checked against tiktoken's own encoder."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.errors import TokenizerError
from ckpttools.vocab.tokens import load_vocab, match_tokens

tiktoken = pytest.importorskip("tiktoken")

MERGES = [b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b"ld", b" world", b"\xe2\x82", b"\xe2\x82\xac"]


def _ranks(order: list[bytes]) -> dict[bytes, int]:
    return {tok: i for i, tok in enumerate(order)}


def _write(path: Path, ranks: dict[bytes, int]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for t, r in sorted(ranks.items(), key=lambda x: x[1])))
    return path


def _encoding(ranks: dict[bytes, int]):
    return tiktoken.Encoding(
        "test", pat_str=r"""'s|'t| ?\w+| ?[^\s\w]+|\s+""", mergeable_ranks=ranks, special_tokens={}
    )


def test_a_rank_file_reads_as_tiktoken_reads_it(tmp_path: Path) -> None:
    ranks = _ranks([bytes([b]) for b in range(256)] + MERGES)
    p = _write(tmp_path / "kimi" / "tiktoken.model", ranks)
    enc = _encoding(ranks)
    for source in (p, p.parent):  # the file, or the directory holding it (no tokenizer.json)
        v = load_vocab(source)
        assert v.style == "tiktoken" and v.size == len(ranks)
        assert v.token_bytes == [enc.decode_single_token_bytes(i) for i in range(len(ranks))]
    text = "hello world, 5€ hello"
    ids = enc.encode(text)
    assert b"".join(v.token_bytes[i] or b"" for i in ids) == text.encode()
    assert enc.encode("hello world")[:2] == [ranks[b"hello"], ranks[b" world"]]


def test_two_rank_files_match_token_by_token_and_diff_vocab_names_them(tmp_path: Path) -> None:
    order = [bytes([b]) for b in range(256)] + MERGES
    shuffled = order[:256] + MERGES[::-1]  # the same tokens, other ids
    a = _write(tmp_path / "a" / "tiktoken.model", _ranks(order))
    b = _write(tmp_path / "b" / "tiktoken.model", _ranks(shuffled))
    m = match_tokens(load_vocab(a), load_vocab(b))
    new_to_old = np.asarray(m.new_to_old)
    for new_id, tok in enumerate(shuffled):
        assert order[int(new_to_old[new_id])] == tok, new_id
    from ckpttools.vocab.diff import save_mapping
    from ckpttools.vocab.mapping import VocabMapping

    save_mapping(VocabMapping.from_ids(np.arange(256, 267), 267), tmp_path / "m1.safetensors")
    save_mapping(VocabMapping.from_ids(np.arange(250, 261), 267), tmp_path / "m2.safetensors")
    r = CliRunner().invoke(
        cli, ["diff-vocab", str(tmp_path / "m1.safetensors"), str(tmp_path / "m2.safetensors"), "--tokenizer", str(a)]
    )
    assert r.exit_code == 0, r.output
    assert "' world'" in r.output or " world" in r.output


def test_a_damaged_rank_file_is_one_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "tiktoken.model"
    p.write_bytes(base64.b64encode(b"a") + b" 0\n" + base64.b64encode(b"b") + b" 0\n")
    with pytest.raises(TokenizerError, match="rank 0 is out of range or repeated"):
        load_vocab(p)
    p.write_bytes(base64.b64encode(b"a") + b" 0\n!!notbase64 1\n")
    with pytest.raises(TokenizerError, match=r"tiktoken.model:2: not a tiktoken rank line"):
        load_vocab(p)
