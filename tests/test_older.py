"""Issue 31's older classes, at the library: environment variables checked before use, JSON Lines
split on \\n only, server counts read with limits, devices checked against this torch, and
tokenizer fields type-checked. (The CLI's side is in tests/corpus_older.py.)"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpttools.engines.http import (
    MAX_COUNT,
    MAX_DRAFT_STEPS,
    RequestResult,
    parse_sglang_meta,
    parse_vllm_metrics,
    parse_vllm_request_metrics,
)
from ckpttools.errors import CkptError, EnvVarError, ServerError, TokenizerError
from ckpttools.io import env
from ckpttools.io.inputs import jsonl_lines

# ----------------------------------------------------------------------------- environment


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("HF_HUB_DOWNLOAD_TIMEOUT", "abc"),
        ("HF_HUB_DOWNLOAD_TIMEOUT", "1.5"),
        ("HF_HUB_DOWNLOAD_TIMEOUT", "0"),
        ("HF_HUB_DOWNLOAD_TIMEOUT", ""),
        ("HF_HUB_ETAG_TIMEOUT", "-1"),
        ("HF_HUB_VERBOSITY", "WARNING"),  # huggingface_hub compares it case-sensitively
        ("HF_ENDPOINT", "huggingface.co"),
        ("HF_ENDPOINT", "http://[::1"),
        ("HF_ENDPOINT", " https://huggingface.co"),
        ("HF_HUB_OFFLINE", "y"),
        ("HF_HUB_OFFLINE", " 1"),  # huggingface_hub would read this as false
        ("HF_HOME", ""),
        ("HF_TOKEN", "hf_\u00e9"),
    ],
)
def test_a_bad_hub_variable_is_one_error_naming_it(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(EnvVarError) as e:
        env.check_hub_env()
    assert e.value.variable == var and var in str(e.value) and isinstance(e.value, ValueError)
    if var == "HF_TOKEN":
        assert value not in str(e.value)  # a token is never echoed


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("HF_HUB_DOWNLOAD_TIMEOUT", "30"),
        ("HF_HUB_VERBOSITY", "error"),
        ("HF_ENDPOINT", "http://127.0.0.1:8080/"),
        ("HF_HUB_OFFLINE", "TRUE"),
        ("HF_HUB_OFFLINE", "0"),
        ("HF_HUB_DISABLE_XET", ""),
        ("HF_TOKEN", "hf_abc\n"),  # huggingface_hub strips the newline a file read leaves
    ],
)
def test_good_hub_values_pass(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    env.check_hub_env()


def test_a_cache_folder_that_is_a_file_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    monkeypatch.setenv("HF_HUB_CACHE", str(f))
    with pytest.raises(EnvVarError, match="HF_HUB_CACHE.*names a file"):
        env.check_hub_env()


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan", "1e300"])
def test_ckpt_hub_deadline_is_a_bounded_number_of_seconds(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CKPT_HUB_DEADLINE", value)
    with pytest.raises(EnvVarError, match="CKPT_HUB_DEADLINE"):
        env.env_seconds("CKPT_HUB_DEADLINE")
    monkeypatch.setenv("CKPT_HUB_DEADLINE", "2.5")
    assert env.env_seconds("CKPT_HUB_DEADLINE") == 2.5
    monkeypatch.delenv("CKPT_HUB_DEADLINE")
    assert env.env_seconds("CKPT_HUB_DEADLINE") is None


def test_ckpt_debug_neither_0_nor_1_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpttools.cli.commands import cli

    monkeypatch.delenv("CKPT_DEBUG", raising=False)
    r = CliRunner().invoke(cli, ["example", "--help"], env={"CKPT_DEBUG": "yes"})
    assert r.exit_code == 2, r.output
    assert r.output.splitlines()[0] == "ckpt: error: environment variable CKPT_DEBUG='yes' is not 0 or 1"


# ----------------------------------------------------------------------------- JSON Lines


def test_jsonl_lines_split_on_newline_only() -> None:
    text = '{"a": "x\u2028y\u0085z\u2029"}\r\n\n  \t\n\u2028\n[1,\r 2]'
    assert list(jsonl_lines(text)) == [(1, '{"a": "x\u2028y\u0085z\u2029"}\r'), (4, "\u2028"), (5, "[1,\r 2]")]
    assert [json.loads(line) for n, line in jsonl_lines(text) if n != 4] == [{"a": "x\u2028y\u0085z\u2029"}, [1, 2]]


def test_prompts_and_frequencies_with_line_separators_are_read(tmp_path: Path) -> None:
    from ckpttools.measuring.verify import load_prompts
    from ckpttools.vocab.diff import load_frequencies

    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "one\u2028two\u0085three"}\n{"input_ids": [1, 2]}\n', encoding="utf-8")
    got = load_prompts(str(p))
    assert [x.text for x in got] == ["one\u2028two\u0085three", None] and got[1].input_ids == [1, 2]
    f = tmp_path / "f.jsonl"
    f.write_text('{"input_ids": [1,\r 2], "s": "\u2028"}\n[3]\n', encoding="utf-8", newline="")
    assert load_frequencies(f, 4).tolist() == [0.0, 1.0, 1.0, 1.0]


# ----------------------------------------------------------------------------- server counts


def _meta(**kw: object) -> dict:
    m = {"completion_tokens": 8, "spec_verify_ct": 4, "spec_num_correct_drafts": 4}
    m.update(kw)
    return m


#: the longest histogram a server may send (MAX_DRAFT_STEPS + 1 bins, one step in each), with the counts
#: SGLang gives with it (each step counted once, in the bin of its correct drafts): accept length 33
_LONGEST = {
    "spec_accept_histogram": [1] * (MAX_DRAFT_STEPS + 1),
    "spec_verify_ct": MAX_DRAFT_STEPS + 1,
    "spec_num_correct_drafts": MAX_DRAFT_STEPS * (MAX_DRAFT_STEPS + 1) // 2,
    "completion_tokens": (MAX_DRAFT_STEPS + 1) * (MAX_DRAFT_STEPS // 2 + 1),
}


def test_sglang_counts_past_their_limits_are_refused() -> None:
    with pytest.raises(ServerError, match="completion_tokens = .*not a count"):
        parse_sglang_meta(_meta(completion_tokens=MAX_COUNT + 1), RequestResult(0, "c"))
    with pytest.raises(ServerError, match="300000 bins"):
        parse_sglang_meta(_meta(spec_accept_histogram=[1] * 300_000), RequestResult(0, "c"))
    r = parse_sglang_meta(_meta(**_LONGEST), RequestResult(0, "c"))
    assert r.accept_length == 1 + MAX_DRAFT_STEPS / 2 and len(r.histogram or []) == MAX_DRAFT_STEPS + 1
    with pytest.raises(ServerError, match="counts 65 verify steps, spec_verify_ct 4"):  # bins that disagree
        parse_sglang_meta(_meta(spec_accept_histogram=[1] * (MAX_DRAFT_STEPS + 1)), RequestResult(0, "c"))
    with pytest.raises(ServerError, match="adds up to 6 correct drafts, spec_num_correct_drafts 4"):
        parse_sglang_meta(_meta(spec_accept_histogram=[1, 1, 1, 1]), RequestResult(0, "c"))


def test_vllm_counts_past_their_limits_are_refused() -> None:
    base = "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total 12\n"
    assert parse_vllm_metrics(base + "vllm:spec_decode_num_accepted_tokens_total 8\n")["accepted"] == 8
    with pytest.raises(ServerError, match="position 1000000000"):
        parse_vllm_metrics(base + 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 1\n')
    with pytest.raises(ServerError, match=r"2\^53"):
        parse_vllm_metrics(base + "vllm:spec_decode_num_accepted_tokens_total 1e300\n")
    spec = {"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 8}
    with pytest.raises(ServerError, match="300000 bins"):
        parse_vllm_request_metrics({**spec, "acceptance_histogram": [1] * 300_000}, RequestResult(0, "c"))


def test_summarize_of_the_largest_histograms_is_quick() -> None:
    import time

    from ckpttools.measuring.verify import VerifyReport, summarize

    rs = []
    for i in range(64):
        r = parse_sglang_meta(_meta(**_LONGEST), RequestResult(i, "c"))
        r.latency_s = 0.1
        rs.append(r)
    t = time.perf_counter()
    rep = summarize(rs, VerifyReport(engine="sglang", url=None, num_prompts=64), MAX_DRAFT_STEPS)
    assert time.perf_counter() - t < 2 and len(rep.per_position_acceptance or []) == MAX_DRAFT_STEPS


# ----------------------------------------------------------------------------- devices


@pytest.mark.parametrize("device", ["bogus", "CUDA", "", "cuda:x", "meta", "xpu", "cpu cuda"])
def test_a_device_name_the_offline_engine_does_not_run_on_is_refused(device: str) -> None:
    from ckpttools.measuring.probe import check_device

    with pytest.raises(CkptError, match="is not a device"):
        check_device(device)


def test_devices_this_torch_lacks_are_refused() -> None:
    torch = pytest.importorskip("torch")
    from ckpttools.measuring.probe import check_device

    assert check_device("cpu") == "cpu" and check_device("cpu:0") == "cpu:0"
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for dev in ("cuda", "cuda:0", f"cuda:{n + 7}"):
        if dev.startswith("cuda:") and int(dev[5:]) < n or (dev == "cuda" and n):
            assert check_device(dev) == dev
        else:
            with pytest.raises(CkptError, match=f"device {dev}: "):
                check_device(dev)
    if not torch.backends.mps.is_available():
        with pytest.raises(CkptError, match="MPS"):
            check_device("mps")


# ----------------------------------------------------------------------------- tokenizers


def _tokenizer(tmp_path: Path, **fields: object) -> Path:
    tok = {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}, "unk_token": "a"}, **fields}
    d = tmp_path / "tok"
    d.mkdir(exist_ok=True)
    (d / "tokenizer.json").write_text(json.dumps(tok))
    return d


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"added_tokens": 5}, "added_tokens is a number (5), not a list"),
        ({"added_tokens": [{"id": 2, "content": "c", "special": "yes"}]}, "special is a string"),
        ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": 5}}, "pre_tokenizer.pretokenizers is a number"),
        ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [3]}}, "pre_tokenizer.pretokenizers[0] is a number"),
        ({"decoder": {"type": 1}}, "decoder.type is a number"),
        ({"decoder": "ByteLevel"}, "decoder is a string"),
        ({"model": "WordLevel"}, "model is a string"),
    ],
)
def test_tokenizer_json_fields_of_the_wrong_type(tmp_path: Path, fields: dict, says: str) -> None:
    from ckpttools.vocab.tokens import load_vocab

    with pytest.raises(TokenizerError, match=says.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_vocab(_tokenizer(tmp_path, **fields))


def test_a_tokenizer_json_that_is_a_list(tmp_path: Path) -> None:
    from ckpttools.vocab.tokens import load_vocab

    (tmp_path / "tokenizer.json").write_text("[1, 2]")
    with pytest.raises(TokenizerError, match="a list at the top"):
        load_vocab(tmp_path)


@pytest.mark.parametrize(
    ("cfg", "says"),
    [
        ([1], "a list at the top"),
        ({"chat_template": 5}, "chat_template is a number"),
        ({"chat_template": [{"name": "default"}]}, r"chat_template\[0\]"),
        ({"chat_template": "{{ bos_token }}", "bos_token": 1}, "bos_token is a number"),
        ({"chat_template": "{{ bos_token }}", "pad_token": {"content": 1}}, "pad_token is an object"),
    ],
)
def test_tokenizer_config_fields_of_the_wrong_type(tmp_path: Path, cfg: object, says: str) -> None:
    from ckpttools.vocab.chat import load_chat_template

    d = _tokenizer(tmp_path)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(TokenizerError, match=says):
        load_chat_template(d)


def test_a_tiktoken_only_folder_is_the_file_load_vocab_reads(tmp_path: Path) -> None:
    from ckpttools.vocab.tokens import load_hf_tokenizer, load_vocab, tokenizer_file

    d = tmp_path / "tk"
    d.mkdir()
    (d / "tiktoken.model").write_text("".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256)))
    assert tokenizer_file(d) == d / "tiktoken.model" and load_vocab(d).size == 256
    with pytest.raises(TokenizerError, match="tiktoken.model .a tiktoken rank file. and no tokenizer.json"):
        load_hf_tokenizer(d)
    assert tokenizer_file(_tokenizer(tmp_path)) == tmp_path / "tok" / "tokenizer.json"
