"""ckpt remap: rows follow their tokens; everything else byte for byte; atomic output."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_drafter, build_target
from ckpttools.errors import MappingError, OutputExistsError
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.ops.remap import remap
from ckpttools.vocab.diff import diff_vocab, save_mapping
from ckpttools.vocab.mapping import VocabMapping, load_mapping

from .conftest import real_configs_dir
from .helpers import tree_digest


def rows_by_token(path: Path) -> dict[int, bytes]:
    """token id -> raw bytes of its lm_head row."""
    with open_checkpoint(path) as ck:
        m = VocabMapping.from_checkpoint(ck)
        head = ck.read("lm_head.weight")
        return {int(t): head[i].tobytes() for i, t in enumerate(m.ids)}


def all_bytes(path: Path) -> dict[str, bytes]:
    with open_checkpoint(path) as ck:
        return {n: bytes(ck.read_bytes(n)) for n in ck.tensors}


@st.composite
def two_mappings(draw):
    v = draw(st.integers(20, 300))
    a = draw(st.sets(st.integers(0, v - 1), min_size=1, max_size=v))
    b = draw(st.sets(st.integers(0, v - 1), min_size=1, max_size=v))
    return v, np.array(sorted(a)), np.array(sorted(b))


@settings(max_examples=25, deadline=None)
@given(two_mappings(), st.sampled_from(["zero", "mean"]))
def test_a_to_b_to_a_restores_shared_rows_and_rows_follow_tokens(m, fill):
    v, ids_a, ids_b = m
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        d = build_drafter(
            t / "a",
            vocab_size=v,
            draft_vocab_size=len(ids_a),
            mapping=ids_a,
            hidden_size=16,
            num_heads=2,
            num_kv_heads=1,
            intermediate_size=32,
        )
        save_mapping(VocabMapping.from_ids(ids_b, v), t / "b.safetensors")
        r = remap(d, t / "ab", to=t / "b.safetensors", fill=fill)
        src, ab = rows_by_token(d), rows_by_token(t / "ab")
        shared = set(ids_a.tolist()) & set(ids_b.tolist())
        assert r.rows_carried == len(shared) and r.rows_filled == len(ids_b) - len(shared)
        # every output row is its token's source row, or the fill
        with open_checkpoint(d) as ck:
            head = ck.read("lm_head.weight").astype(np.float32)
            carried_slots = [i for i, tok in enumerate(ids_a) if tok in shared]
            fill_row = (
                np.zeros(16, np.float32)
                if fill == "zero"
                else head[carried_slots].astype(np.float64).mean(0).astype(np.float32)
                if carried_slots
                else np.zeros(16, np.float32)
            )
            import ml_dtypes

            fill_bytes = fill_row.astype(ml_dtypes.bfloat16).tobytes()
        for tok, row in ab.items():
            assert row == (src[tok] if tok in shared else fill_bytes)
        # and back: every shared row is restored byte for byte
        save_mapping(VocabMapping.from_ids(ids_a, v), t / "a.safetensors")
        remap(t / "ab", t / "aba", to=t / "a.safetensors", fill=fill)
        aba = rows_by_token(t / "aba")
        assert all(aba[tok] == src[tok] for tok in shared)
        # everything that is not vocabulary-dependent is byte-identical
        b0, b2 = all_bytes(d), all_bytes(t / "aba")
        for n in b0:
            if n not in ("lm_head.weight",):
                assert b0[n] == b2[n], n


@settings(max_examples=15, deadline=None)
@given(st.integers(30, 400), st.integers(1, 29), st.booleans())
def test_remap_to_own_mapping_is_byte_identical(v, vd, embed):
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        d = build_drafter(
            t / "a",
            vocab_size=v,
            draft_vocab_size=vd,
            hidden_size=16,
            num_heads=2,
            num_kv_heads=1,
            intermediate_size=32,
            embed_tokens=embed,
            seed=v,
        )
        remap(d, t / "same", to=d)
        assert all_bytes(d) == all_bytes(t / "same")
        cfg_a = json.loads((d / "config.json").read_text())
        assert json.loads((t / "same" / "config.json").read_text()) == cfg_a


def test_the_seed_case_32000_slots_over_163840(tmp_path):
    rng = np.random.default_rng(7)
    v, vd = 163_840, 32_000
    # B drops 298 of A's tokens and adds 298 early ids, so nearly every later slot shifts
    ids_a = np.sort(rng.choice(np.arange(2000, v), size=vd, replace=False))
    kept = np.sort(rng.choice(ids_a, size=vd - 298, replace=False))
    ids_b = np.sort(np.concatenate([kept, rng.choice(2000, size=298, replace=False)]))
    a = build_drafter(
        tmp_path / "k2",
        vocab_size=v,
        draft_vocab_size=vd,
        mapping=ids_a,
        hidden_size=16,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=32,
    )
    save_mapping(VocabMapping.from_ids(ids_b, v), tmp_path / "m2.safetensors")
    d = diff_vocab(a, tmp_path / "m2.safetensors")
    assert d.slots_agree < 300 and d.shared_tokens == vd - 298
    r = CliRunner().invoke(
        cli, ["remap", str(a), "--to", str(tmp_path / "m2.safetensors"), "-o", str(tmp_path / "out"), "--json"]
    )
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["rows_carried"] == vd - 298 and rep["rows_filled"] == 298
    after = diff_vocab(tmp_path / "out", tmp_path / "m2.safetensors")
    assert after.slots_agree == vd and after.slots_differ == 0
    src, out = rows_by_token(a), rows_by_token(tmp_path / "out")
    shared = set(ids_a.tolist()) & set(ids_b.tolist())
    assert sum(out[t] == src[t] for t in shared) == len(shared)


def test_fill_target_reads_only_needed_rows_from_a_sharded_target(tmp_path):
    t = build_target(tmp_path / "t", vocab_size=1024, hidden_size=64, max_shard_size=100_000)
    with open_checkpoint(t) as ck:
        assert len(ck.headers) > 1
        t_head = ck.read("lm_head.weight").copy()
    d = build_drafter(tmp_path / "d", vocab_size=1024, draft_vocab_size=100, mapping=np.arange(0, 200, 2))
    save_mapping(VocabMapping.from_ids(np.arange(0, 300, 3), 1024), tmp_path / "m.safetensors")
    r = remap(d, tmp_path / "o", to=tmp_path / "m.safetensors", fill="target", target=t)
    src, out = rows_by_token(d), rows_by_token(tmp_path / "o")
    for tok in range(0, 300, 3):
        assert out[tok] == (src[tok] if tok in src else t_head[tok].tobytes())
    assert r.rows_carried == len(set(range(0, 200, 2)) & set(range(0, 300, 3)))
    small = build_target(tmp_path / "small", hidden_size=32)
    with pytest.raises(
        MappingError, match="needs equal hidden sizes: the drafter's is 64, the target's lm_head has 32"
    ):
        remap(d, tmp_path / "o2", to=tmp_path / "m.safetensors", fill="target", target=small)
    r = CliRunner().invoke(
        cli, ["remap", str(d), "--to", str(tmp_path / "m.safetensors"), "--fill", "target", "-o", str(tmp_path / "o3")]
    )
    # the CLI names its flags; the library, raising the same error, names its parameters
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        "ckpt: error: filling rows from the target (--fill target) needs the target model",
        "ckpt: hint: give --target, or fill with the mean (--fill mean)",
    ]
    with pytest.raises(MappingError) as ei:
        remap(d, tmp_path / "o4", to=tmp_path / "m.safetensors", fill="target")
    assert str(ei.value) == "filling rows from the target (fill= target) needs the target model"
    assert ei.value.hint == "give target=, or fill with the mean (fill= mean)" and ei.value.params == ("fill", "target")


def test_full_vocab_head_cut_down_and_reduced_head_expanded(tmp_path):
    full = build_drafter(tmp_path / "full", vocab_size=500, draft_vocab_size=None)
    with open_checkpoint(full) as ck:
        assert "d2t" not in ck.tensors
        head = ck.read("lm_head.weight").copy()
    ids = np.sort(np.random.default_rng(1).choice(500, 64, replace=False))
    save_mapping(VocabMapping.from_ids(ids, 500), tmp_path / "m.safetensors")
    r = remap(full, tmp_path / "cut", to=tmp_path / "m.safetensors")
    assert r.rows_carried == 64 and r.draft_vocab_size_before == 500
    out = rows_by_token(tmp_path / "cut")
    assert all(out[int(t)] == head[t].tobytes() for t in ids)
    # expanding back to the full vocabulary of a target checkpoint
    tgt = build_target(tmp_path / "t", vocab_size=500)
    r = remap(tmp_path / "cut", tmp_path / "expanded", to=tgt)
    assert r.draft_vocab_size_after == 500 and r.rows_carried == 64 and r.rows_filled == 436
    exp = rows_by_token(tmp_path / "expanded")
    assert all(exp[int(t)] == head[t].tobytes() for t in ids)
    assert load_mapping(tmp_path / "expanded").is_identity


def test_frequencies_destination_and_token_mass(tmp_path):
    d = build_drafter(tmp_path / "d", vocab_size=400, draft_vocab_size=50, mapping=np.arange(50))
    counts = np.zeros(400)
    counts[:100] = np.arange(100, 0, -1)
    np.save(tmp_path / "c.npy", counts)
    r = CliRunner().invoke(
        cli,
        [
            "remap",
            str(d),
            "--frequencies",
            str(tmp_path / "c.npy"),
            "--draft-vocab-size",
            "60",
            "-o",
            str(tmp_path / "o"),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["rows_carried"] == 50 and rep["rows_filled"] == 10
    tot = counts.sum()
    assert rep["token_mass"]["covered_by_carried_rows"] == pytest.approx(counts[:50].sum() / tot)
    assert rep["token_mass"]["covered_by_filled_rows"] == pytest.approx(counts[50:60].sum() / tot)
    r = CliRunner().invoke(cli, ["remap", str(d), "--frequencies", str(tmp_path / "c.npy"), "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--draft-vocab-size" in r.stderr


def test_output_is_atomic_refuses_overwrite_and_has_a_manifest(tmp_path):
    d = build_drafter(tmp_path / "d", embed_tokens=True)
    (d / "tokenizer.json").write_text("{}")
    before = tree_digest(d)
    (tmp_path / "o").mkdir()
    with pytest.raises(OutputExistsError):
        remap(d, tmp_path / "o", to=d)
    r = remap(d, tmp_path / "o", to=d, force=True, max_shard_size="60KB")
    assert tree_digest(d) == before
    files = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert "model.safetensors.index.json" in files and "tokenizer.json" in files
    man = json.loads((tmp_path / "o" / "ckpttools-manifest.json").read_text())
    assert man["operation"] == "remap" and man["parameters"]["fill"] == "zero"
    src = {Path(f["path"]).name: f["digest"] for f in man["sources"]["drafter"]}
    import xxhash

    assert src["model.safetensors"]["xxh3_128"] == xxhash.xxh3_128((d / "model.safetensors").read_bytes()).hexdigest()
    assert r.embed_tokens == "copied unchanged (same tokenizer)"
    assert all_bytes(d) == all_bytes(tmp_path / "o")


def test_kill_9_during_remap_leaves_nothing_at_out(tmp_path):
    d = build_drafter(
        tmp_path / "d",
        hidden_size=256,
        num_heads=4,
        num_kv_heads=4,
        intermediate_size=1024,
        vocab_size=50_000,
        draft_vocab_size=20_000,
        embed_tokens=True,
    )
    save_mapping(VocabMapping.from_ids(np.arange(1, 20_001), 50_000), tmp_path / "m.safetensors")
    before = tree_digest(d)
    out = tmp_path / "out"
    # the progress callback (public API) sleeps after each tensor, so the kill lands mid-write
    code = (
        "import time; from ckpttools.ops.remap import remap; "
        f"remap({str(d)!r}, {str(out)!r}, to={str(tmp_path / 'm.safetensors')!r}, fill='mean', "
        "progress=lambda done, total, name: time.sleep(0.3))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 60
    tmps: list[Path] = []
    while time.time() < deadline and not tmps:
        tmps = [p for p in tmp_path.iterdir() if p.name.startswith(".out.ckpt-tmp-") and any(p.iterdir())]
        time.sleep(0.01)
    time.sleep(0.5)
    assert proc.poll() is None, "remap finished before the kill"
    assert tmps and (tmps[0] / "model.safetensors").stat().st_size > 0  # it really was writing
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    assert tree_digest(d) == before
    assert tmps[0].exists()  # the kill left its temporary, named with the dead pid
    # a second run removes it and succeeds
    remap(d, out, to=tmp_path / "m.safetensors")
    assert out.is_dir()
    assert not [p for p in tmp_path.iterdir() if ".ckpt-tmp-" in p.name]


def _byte_level_tokenizer(tmp: Path, texts: list[str]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    p = tmp / "bl" / "tokenizer.json"
    p.parent.mkdir()
    tok.save(str(p))
    return p


def test_cross_tokenizer_remap_with_the_real_tinyllama_tokenizer(tmp_path):
    from tokenizers import Tokenizer, decoders

    tl = real_configs_dir() / "tokenizers" / "tinyllama-1.1b-chat" / "tokenizer.json"
    tl_tok = Tokenizer.from_file(str(tl))
    words = [tl_tok.id_to_token(i).replace("▁", " ") for i in range(300, 8000)]
    texts = ["".join(words[i : i + 40]) for i in range(0, len(words), 40)] * 3
    bl = _byte_level_tokenizer(tmp_path, texts)
    bl_tok = Tokenizer.from_file(str(bl))
    v_old, v_new = tl_tok.get_vocab_size(), bl_tok.get_vocab_size()
    src_ids = np.sort(np.random.default_rng(0).choice(np.arange(3, v_old), 4000, replace=False))
    d = build_drafter(
        tmp_path / "d",
        vocab_size=v_old,
        draft_vocab_size=4000,
        mapping=src_ids,
        embed_tokens=True,
        hidden_size=16,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=32,
    )
    save_mapping(VocabMapping.identity(v_new), tmp_path / "full-new.safetensors")
    r = remap(d, tmp_path / "o", to=tmp_path / "full-new.safetensors", source_tokenizer=tl, target_tokenizer=bl)
    assert r.vocab_size_after == v_new and r.draft_vocab_size_after == v_new

    # independent computation on printable-ASCII tokens: the libraries' own decoders
    bl_dec = decoders.ByteLevel()
    new_ascii = {}
    for tokstr, i in bl_tok.get_vocab().items():
        s = bl_dec.decode([tokstr])
        if s.isascii() and s.isprintable() and s and tokstr not in ("<s>", "</s>", "<pad>"):
            new_ascii[s.encode()] = i
    old_ascii = {}
    for tokstr, i in tl_tok.get_vocab().items():
        if tokstr.startswith("<") and tokstr.endswith(">"):
            continue
        s = tokstr.replace("▁", " ")
        if s.isascii() and s.isprintable() and s:
            old_ascii.setdefault(s.encode(), i)
    expected_matches = {j: old_ascii[b] for b, j in new_ascii.items() if b in old_ascii}
    assert len(expected_matches) > 1000
    from ckpttools.vocab.tokens import load_vocab, match_tokens

    tm = match_tokens(load_vocab(tl), load_vocab(bl))
    ours = {j: int(tm.new_to_old[j]) for j in expected_matches}
    assert ours == expected_matches
    assert tm.exact_matches >= len(expected_matches) and r.token_match["exact_matches"] == tm.exact_matches
    # rows: carried exactly for matched tokens that the drafter's mapping holds (remap prefers,
    # among old tokens with the same bytes, one the drafter has a row for)
    mask = np.zeros(v_old, bool)
    mask[src_ids] = True
    tm = match_tokens(load_vocab(tl), load_vocab(bl), prefer=mask)
    src_rows, out_rows = rows_by_token(d), rows_by_token(tmp_path / "o")
    carried = [j for j in range(v_new) if tm.new_to_old[j] >= 0 and int(tm.new_to_old[j]) in src_rows]
    assert r.rows_carried == len(carried) > 100
    assert all(out_rows[j] == src_rows[int(tm.new_to_old[j])] for j in carried)
    # embed_tokens rebuilt by the same matching
    with open_checkpoint(d) as a, open_checkpoint(tmp_path / "o") as b:
        ea, eb = a.read("embed_tokens.weight"), b.read("embed_tokens.weight")
        assert eb.shape == (v_new, 16)
        j = carried[0]
        assert eb[j].tobytes() == ea[int(tm.new_to_old[j])].tobytes()
    assert "rebuilt for" in r.embed_tokens
