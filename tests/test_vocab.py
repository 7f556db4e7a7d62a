"""VocabMapping, diff-vocab and vocab build."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_drafter
from ckpttools.errors import MappingError
from ckpttools.vocab.diff import build_vocab, diff_vocab, load_frequencies
from ckpttools.vocab.mapping import VocabMapping, load_mapping

from .conftest import real_configs_dir


@st.composite
def mappings(draw, max_v=400):
    v = draw(st.integers(min_value=1, max_value=max_v))
    ids = draw(st.sets(st.integers(min_value=0, max_value=v - 1), min_size=1, max_size=v))
    ids = np.array(sorted(ids), dtype=np.int64)
    if draw(st.booleans()):
        ids = ids[np.random.default_rng(draw(st.integers(0, 99))).permutation(len(ids))]
    return VocabMapping.from_ids(ids, v)


@given(mappings())
def test_round_trips_between_d2t_ids_and_t2d(m):
    again = VocabMapping.from_d2t(m.d2t, m.target_vocab_size)
    np.testing.assert_array_equal(again.ids, m.ids)
    mask = m.t2d()
    assert mask.dtype == np.bool_ and len(mask) == m.target_vocab_size and mask.sum() == m.draft_vocab_size
    from_mask = VocabMapping.from_t2d(mask)
    np.testing.assert_array_equal(from_mask.ids, np.sort(m.ids))
    if m.order == "ascending":  # the documented invariant: nonzero(t2d) == arange(Vd) + d2t
        np.testing.assert_array_equal(np.flatnonzero(mask), np.arange(m.draft_vocab_size) + m.d2t)
        assert not [p for p in VocabMapping.from_d2t(m.d2t, t2d=mask).problems() if p.severity == "error"]


@given(mappings())
def test_a_diffed_with_itself_agrees_everywhere(m):
    d = diff_vocab(m, m)
    assert d.slots_agree == d.slots_total == m.draft_vocab_size
    assert d.shared_tokens == m.draft_vocab_size and d.only_a == d.only_b == 0 and d.jaccard == 1.0
    assert d.remap_rows_to_initialize == 0 and d.verdict.startswith("identical")


@settings(max_examples=60)
@given(mappings(max_v=200), mappings(max_v=200))
def test_shared_is_symmetric_and_bounds_agreeing_slots(a, b):
    ab, ba = diff_vocab(a, b), diff_vocab(b, a)
    assert ab.shared_tokens == ba.shared_tokens and ab.slots_agree == ba.slots_agree
    assert ab.slots_agree <= ab.shared_tokens
    assert ab.only_a == ba.only_b and ab.shared_tokens + ab.only_a == a.draft_vocab_size
    assert ab.remap_rows_carried + ab.remap_rows_to_initialize == b.draft_vocab_size
    # independent computation
    assert ab.shared_tokens == len(set(a.ids.tolist()) & set(b.ids.tolist()))
    assert ab.slots_agree == sum(x == y for x, y in zip(a.ids.tolist(), b.ids.tolist()))


def shifted_pair(v=163_840, vd=32_000, seed=0):
    """B = A with one token inserted early (the last dropped): every later slot shifts."""
    rng = np.random.default_rng(seed)
    a = np.sort(rng.choice(np.arange(10, v), size=vd, replace=False))
    b = np.sort(np.concatenate([[3], a[:-1]]))  # token 3 is new and lands in slot 0
    return VocabMapping.from_ids(a, v, source="A"), VocabMapping.from_ids(b, v, source="B")


def test_one_inserted_token_shifts_every_slot_but_tokens_are_shared():
    a, b = shifted_pair()
    d = diff_vocab(a, b)
    assert d.slots_agree == 0 and d.slots_differ == 32_000
    assert d.shared_tokens == 31_999 and d.only_a == 1 and d.only_b == 1
    assert d.remap_rows_carried == 31_999 and d.remap_rows_to_initialize == 1
    assert d.verdict == (
        "slots differ at 32,000 of 32,000, but 31,999 tokens are shared: a remap carries "
        "31,999 rows and initializes 1. Swapping d2t/t2d without moving lm_head rows would "
        "break acceptance; remap instead"
    )


def test_cli_on_drafter_checkpoints_and_mapping_files(tmp_path):
    a, b = shifted_pair(v=5000, vd=1000)
    da = build_drafter(tmp_path / "da", vocab_size=5000, draft_vocab_size=1000, mapping=a.ids)
    save_file({"d2t": b.d2t, "t2d": b.t2d(5000)}, str(tmp_path / "b.safetensors"))
    np.save(tmp_path / "b_d2t.npy", b.d2t)
    (tmp_path / "b.json").write_text(json.dumps({"target_ids": b.ids.tolist(), "vocab_size": 5000}))
    for other in ("b.safetensors", "b_d2t.npy", "b.json"):
        r = CliRunner().invoke(cli, ["diff-vocab", str(da), str(tmp_path / other), "--json"])
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        assert (d["slots_agree"], d["shared_tokens"], d["remap_rows_to_initialize"]) == (0, 999, 1), other
    r = CliRunner().invoke(cli, ["diff-vocab", str(da), str(tmp_path / "b.safetensors")])
    assert r.exit_code == 0 and "verdict: slots differ at 1,000 of 1,000, but 999 tokens are shared" in r.stdout


def test_pt_mapping_is_read_with_weights_only(tmp_path):
    torch = pytest.importorskip("torch")
    _, b = shifted_pair(v=5000, vd=1000)
    torch.save({"d2t": torch.from_numpy(b.d2t), "t2d": torch.from_numpy(b.t2d(5000))}, tmp_path / "m.pt")
    m = load_mapping(tmp_path / "m.pt")
    np.testing.assert_array_equal(m.ids, b.ids)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"d2t": Evil()}, tmp_path / "evil.pt")
    r = CliRunner().invoke(cli, ["diff-vocab", str(tmp_path / "evil.pt"), str(tmp_path / "m.pt")])
    assert r.exit_code == 2 and "weights_only" in r.stderr and "pwned" not in r.output


def test_tokenizer_strings_from_the_real_tinyllama_tokenizer(tmp_path):
    tok = real_configs_dir() / "tokenizers" / "tinyllama-1.1b-chat"
    a = VocabMapping.from_ids(np.arange(100, 400), 32000, source="A")
    b = VocabMapping.from_ids(np.arange(101, 401), 32000, source="B")
    d = diff_vocab(a, b, tokenizer=tok, show=2)
    from tokenizers import Tokenizer

    ref = Tokenizer.from_file(str(tok / "tokenizer.json"))
    assert d.differing_slots[0] == {
        "slot": 0,
        "a": 100,
        "b": 101,
        "a_token": ref.id_to_token(100),
        "b_token": ref.id_to_token(101),
    }
    assert d.only_a_tokens == [{"id": 100, "token": ref.id_to_token(100)}]
    assert d.only_b_tokens == [{"id": 400, "token": ref.id_to_token(400)}]


def test_frequencies_give_token_mass(tmp_path):
    a = VocabMapping.from_ids([0, 1, 2], 6)
    b = VocabMapping.from_ids([1, 2, 3], 6)
    (tmp_path / "f.json").write_text(json.dumps({"0": 50, "1": 30, "2": 10, "3": 5, "5": 5}))
    f = diff_vocab(a, b, frequencies=tmp_path / "f.json").frequency
    assert f["mass_a"] == pytest.approx(0.90) and f["mass_b"] == pytest.approx(0.45)
    assert f["mass_only_a"] == pytest.approx(0.50) and f["mass_only_b"] == pytest.approx(0.05)


def test_padded_target_vocabs_are_named():
    a = VocabMapping.from_ids(np.arange(0, 16000, 2), 151_936)
    b = VocabMapping.from_ids(np.arange(0, 16000, 2), 152_064)
    d = diff_vocab(a, b)
    assert d.slots_agree == 8000 and "target vocab sizes differ (151,936 vs 152,064)" in d.target_vocab_note


# --- vocab build --------------------------------------------------------------------
def test_build_keeps_top_n_ties_by_lower_id_in_ascending_order(tmp_path):
    counts = np.array([5, 9, 0, 9, 1, 5, 7, 0], dtype=np.int64)
    np.save(tmp_path / "c.npy", counts)
    r = build_vocab(tmp_path / "c.npy", 4, tmp_path / "m.safetensors")
    # by count: 1 (9), 3 (9), 6 (7), then 0 and 5 tie at 5 -> lower id 0
    got = load_file(str(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(got["d2t"] + np.arange(4), [0, 1, 3, 6])
    assert got["d2t"].dtype == np.int64 and got["t2d"].dtype == np.bool_ and len(got["t2d"]) == 8
    np.testing.assert_array_equal(np.flatnonzero(got["t2d"]), [0, 1, 3, 6])
    assert r.mass_covered == pytest.approx(30 / 36)


def test_build_from_jsonl_counts_streaming_and_matches_json(tmp_path):
    rng = np.random.default_rng(3)
    lines = [rng.integers(0, 300, size=rng.integers(1, 50)).tolist() for _ in range(200)]
    (tmp_path / "c.jsonl").write_text(
        "\n".join(json.dumps(x) if i % 2 else json.dumps({"input_ids": x}) for i, x in enumerate(lines))
    )
    ref = np.bincount(np.concatenate(lines), minlength=300)
    np.testing.assert_array_equal(load_frequencies(tmp_path / "c.jsonl", 300), ref)
    (tmp_path / "c.json").write_text(json.dumps({str(i): int(c) for i, c in enumerate(ref) if c}))
    runner = CliRunner()
    for src, out in (("c.jsonl", "a.safetensors"), ("c.json", "b.safetensors")):
        r = runner.invoke(
            cli,
            [
                "vocab",
                "build",
                "--frequencies",
                str(tmp_path / src),
                "--vocab-size",
                "300",
                "--draft-vocab-size",
                "64",
                "-o",
                str(tmp_path / out),
            ],
        )
        assert r.exit_code == 0, r.output
        assert "Vd 64 of V 300" in r.stdout
    d = diff_vocab(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert d.slots_agree == 64
    expect = np.sort(np.lexsort((np.arange(300), -ref))[:64])
    np.testing.assert_array_equal(load_mapping(tmp_path / "a.safetensors").ids, expect)


def test_build_refuses_overwrite_and_unknown_vocab_size(tmp_path):
    (tmp_path / "c.json").write_text('{"1": 3}')
    r = CliRunner().invoke(
        cli,
        [
            "vocab",
            "build",
            "--frequencies",
            str(tmp_path / "c.json"),
            "--draft-vocab-size",
            "1",
            "-o",
            str(tmp_path / "m.safetensors"),
        ],
    )
    assert r.exit_code == 2 and "--vocab-size" in r.stderr
    (tmp_path / "m.safetensors").write_bytes(b"keep me")
    r = CliRunner().invoke(
        cli,
        [
            "vocab",
            "build",
            "--frequencies",
            str(tmp_path / "c.json"),
            "--vocab-size",
            "4",
            "--draft-vocab-size",
            "1",
            "-o",
            str(tmp_path / "m.safetensors"),
        ],
    )
    assert r.exit_code == 2 and "already exists" in r.stderr
    assert (tmp_path / "m.safetensors").read_bytes() == b"keep me"


# --- malformed mappings: exit 2, one clear line -------------------------------------
def _st(tmp: Path, name: str, **tensors) -> Path:
    save_file(tensors, str(tmp / name))
    return tmp / name


MALFORMED = {
    "wrong-dtype": (lambda t: _st(t, "m.safetensors", d2t=np.zeros(8, np.float32)), "must be an integer type"),
    "t2d-dtype": (
        lambda t: _st(t, "m.safetensors", d2t=np.zeros(4, np.int64), t2d=np.ones(4, np.float32)),
        "t2d has dtype float32; it must be bool",
    ),
    "out-of-range": (
        lambda t: _st(t, "m.safetensors", d2t=np.array([0, 1, 9], np.int64), t2d=np.ones(5, bool)),
        "maps to target id 11, outside the target vocab of 5",
    ),
    "negative": (lambda t: _st(t, "m.safetensors", d2t=np.array([0, -5], np.int64)), "below 0"),
    "duplicates": (lambda t: _st(t, "m.safetensors", d2t=np.array([1, 0, 0], np.int64)), "repeat a target id (e.g. 1)"),
    "t2d-disagrees": (
        lambda t: _st(t, "m.safetensors", d2t=np.array([0, 0], np.int64), t2d=np.array([1, 0, 1, 0], bool)),
        "the sets differ",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_mapping_is_exit_2(case, tmp_path):
    make, expected = MALFORMED[case]
    bad = make(tmp_path)
    good = _st(tmp_path, "good.safetensors", d2t=np.zeros(3, np.int64))
    r = CliRunner().invoke(cli, ["diff-vocab", str(bad), str(good)])
    assert r.exit_code == 2, r.output
    assert expected in r.stderr.splitlines()[0], r.stderr
    with pytest.raises(MappingError):
        diff_vocab(bad, good)


def test_length_disagreeing_with_config_is_exit_2(tmp_path):
    d = build_drafter(tmp_path / "d", draft_vocab_size=256, config_overrides={"draft_vocab_size": 200})
    r = CliRunner().invoke(cli, ["diff-vocab", str(d), str(d)])
    assert r.exit_code == 2 and "d2t has 256 slots but config draft_vocab_size is 200" in r.stderr
    d2 = build_drafter(tmp_path / "d2", vocab_size=1024, config_overrides={"vocab_size": 2048})
    r = CliRunner().invoke(cli, ["diff-vocab", str(d2), str(d2)])
    assert r.exit_code == 2 and "t2d has length 1024 but the target vocab is 2048" in r.stderr


def test_missing_mapping_says_what_engines_do(tmp_path):
    from ckpttools.demo.tiny import write_tensors
    from ckpttools.io.checkpoint import open_checkpoint

    d = build_drafter(tmp_path / "d")
    with open_checkpoint(d) as ck:
        bare = write_tensors(
            tmp_path / "bare", {n: ck.read(n).copy() for n in ck.tensors if n not in ("d2t", "t2d")}, ck.config
        )
    r = CliRunner().invoke(cli, ["diff-vocab", str(bare), str(d)])
    assert r.exit_code == 2 and "holds no vocabulary mapping" in r.stderr
    assert "SGLang will treat draft ids as target ids and vLLM will use the first Vd target ids" in r.stderr
