"""ckpt logs on lines as SGLang 0.5.17 and vLLM 0.32 format them, and on the real SGLang excerpt."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpttools.errors import ConfigError
from ckpttools.measuring.logs import _text, read_logs

from .conftest import SHARED

# found through CKPT_SHARED or ../shared, as every test finds the shared data
EXCERPT = SHARED / "data" / "sglang-0.5.17-responses" / "server-log-excerpt.txt"
REPO = Path(__file__).resolve().parents[1]


def sgl_decode(t: str, running: int, al: float, graph: str = "cuda graph", tags: str = "") -> str:
    # metrics_reporter.py:757, 798, 833-835
    return (
        f"[2026-11-30 {t}{tags}] Decode batch, #running-req: {running}, #token: 52, token usage: 0.00, "
        f"accept len: {al:.2f}, accept rate: {(al - 1) / 3:.2f}, {graph}: False, gen throughput (token/s): 0.65, "
        "#queue-req: 0"
    )


def vllm_spec(t: str, acc: int, drafted: int, pos: str, mean: float, level: str = "INFO") -> str:
    # v1/spec_decode/metrics.py:120-137, logger.py:28-33
    return (
        f"(APIServer pid=41) {level} {t} [metrics.py:120] SpecDecoding metrics: Mean acceptance length: {mean:.2f}, "
        f"Accepted throughput: 1.00 tokens/s, Drafted throughput: 1.00 tokens/s, Accepted: {acc} tokens, "
        f"Drafted: {drafted} tokens, Per-position acceptance rate: {pos}, Avg Draft acceptance rate: "
        f"{100 * acc / drafted:.1f}%"
    )


def write(tmp_path: Path, lines: list[str], name: str = "x.log") -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


@pytest.mark.skipif(not EXCERPT.is_file(), reason="the shared SGLang excerpt is not here")
def test_the_real_sglang_excerpt() -> None:
    r = read_logs([str(EXCERPT)])
    assert r.engine == "sglang" and r.window_count == 5 and r.accept_length == pytest.approx(4.0)
    assert not r.exact and "running-req" in (r.weighting or "")
    assert r.runs[0]["drafter_class"] == "LlamaForCausalLMEagle3"
    assert r.runs[0]["target_class"] == "LlamaForCausalLM"
    assert r.exit_code == 0


def test_sglang_windows_weighted_by_running_requests(tmp_path: Path) -> None:
    p = write(tmp_path, [sgl_decode("10:00:00", 1, 1.0), sgl_decode("10:00:01", 3, 3.0, "cpu graph", " DP0 TP0")])
    r = read_logs([p])
    assert r.accept_length == pytest.approx((1 * 1.0 + 3 * 3.0) / 4)
    assert r.windows[1]["rank"] == "DP0 TP0" and r.windows[0]["time"] == "2026-11-30 10:00:00"


def test_vllm_counts_merge_exactly_without_a_year(tmp_path: Path) -> None:
    lines = [
        "(APIServer pid=41) INFO 12-01 08:54:10 [api_utils.py:327] vLLM server version 0.32.0, serving model t",
        vllm_spec("12-01 08:54:20", 30, 30, "1.000, 1.000, 1.000", 4.0),
        vllm_spec("12-01 08:54:30", 10, 30, "1.000, 0.000, 0.000", 2.0, "DEBUG"),
    ]
    r = read_logs([write(tmp_path, lines)])
    assert r.engine == "vllm" and r.release == "0.32.0" and r.exact
    assert r.accept_length == pytest.approx(1 + 40 / 20)
    assert r.per_position_acceptance == pytest.approx([1.0, 0.5, 0.5])
    assert r.windows[1]["level"] == "debug" and r.windows[0]["time"] == "12-01 08:54:20"


def test_impossible_numbers_are_skipped_and_counted(tmp_path: Path) -> None:
    lines = [
        sgl_decode("10:00:00", 1, 2.0),
        sgl_decode("10:00:01", 1, 1001.0),
        sgl_decode("10:00:02", 1, 2.0).replace("accept len: 2.00", "accept len: nan"),
    ]
    lines.append(vllm_spec("12-01 08:54:20", 30, 30, "1.000, 1.000, 1.000", 4.0))
    with pytest.raises(ConfigError):  # both engines in one read
        read_logs([write(tmp_path, lines)])
    r = read_logs([write(tmp_path, lines[:3])])
    assert r.window_count == 1 and sum(r.skipped.values()) == 2


def test_runs_events_and_the_error_that_ended_the_server(tmp_path: Path) -> None:
    lines = [
        "[2026-11-30 10:00:00] server_args=ServerArgs(model_path='t')",
        "[2026-11-30 10:00:05] Load weight end. elapsed=0.19 s, type=LlamaForCausalLM, avail mem=1 GB, mem usage=0.01 GB.",
        "[2026-11-30 10:00:05] Load weight end. elapsed=0.02 s, type=LlamaForCausalLMEagle3, avail mem=1 GB, mem usage=0.00 GB.",
        "[2026-11-30 10:00:06] Prefill batch, #new-seq: 1, #new-token: 3, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
        "[2026-11-30 10:00:07] The server is fired up and ready to roll!",
        sgl_decode("10:00:08", 1, 3.0),
        "[2026-11-30 10:00:09] Start update_weights. Load format=auto",
        "[2026-11-30 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "AssertionError: captured 1 of 3 aux hidden states",
        "[2026-11-30 10:00:10] Received sigquit from a child process. It usually means the child failed.",
        "[2026-11-30 11:00:00] server_args=ServerArgs(model_path='t')",
        sgl_decode("11:00:08", 1, 2.0),
    ]
    r = read_logs([write(tmp_path, lines)])
    kinds = [e["kind"] for e in r.events]
    assert kinds.count("load") == 2 and "warmup" in kinds and "weight_update" in kinds and "restart" in kinds
    err = [e for e in r.events if e["kind"] == "error"]
    assert err and err[0]["text"] == "AssertionError: captured 1 of 3 aux hidden states"
    assert len(r.runs) == 2 and r.runs[0]["ended_by"] == err[0]["text"] and r.runs[1]["accept_length"] == 2.0


def test_request_log_json_is_exact_with_an_interval(tmp_path: Path) -> None:
    def req(steps: int, acc: int) -> str:
        meta = {"completion_tokens": steps + acc, "spec_verify_ct": steps, "spec_num_correct_drafts": acc}
        return "[2026-11-30 10:00:00] " + json.dumps(
            {"event": "request.finished", "rid": "a", "out": {"meta_info": meta}}
        )

    r = read_logs([write(tmp_path, [req(10, 30), req(10, 10), sgl_decode("10:00:01", 1, 3.0)])])
    assert r.exact and r.accept_length == pytest.approx(1 + 40 / 20) and r.accept_length_ci95 is not None
    assert r.windows_accept_length == pytest.approx(3.0)


def test_pattern_and_convention(tmp_path: Path) -> None:
    p = write(tmp_path, ["Accept len: 0.58 EAGLE3_PROF (6400 cycles, 3688 tok, no sync)"] * 3)
    rx = r"\((?P<cycles>\d+) cycles, (?P<tokens>\d+) tok"
    r = read_logs([p], pattern=rx, convention="accepted-per-step")
    assert r.exact and r.accept_length == pytest.approx(1 + 3688 / 6400)
    with pytest.raises(ConfigError):
        read_logs([p], pattern=rx)  # the convention must be stated
    with pytest.raises(ConfigError):
        read_logs([p], pattern="(unclosed")
    with pytest.raises(ConfigError):
        read_logs([p], pattern="(?P<x>.)", convention="accepted-per-step")


def test_gz_long_lines_binary_and_min_accept_len(tmp_path: Path) -> None:
    body = ("x" * (3 << 20) + "\n" + "\xff\x00garbage\n" + sgl_decode("10:00:00", 1, 2.0) + "\n").encode("latin-1")
    p = tmp_path / "x.log.gz"
    p.write_bytes(gzip.compress(body))
    r = read_logs([str(p)], min_accept_len=2.5)
    assert r.window_count == 1 and r.passed is False and r.exit_code == 1
    assert any("longer than" in k for k in r.skipped)


def test_nothing_measured_is_exit_3(tmp_path: Path) -> None:
    assert read_logs([write(tmp_path, ["hello"])]).exit_code == 3


def test_json_matches_the_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "schemas" / "logs-report.schema.json").read_text())
    p = write(
        tmp_path, [sgl_decode("10:00:00", 2, 2.0), "[2026-11-30 10:00:09] Start update_weights. Load format=auto"]
    )
    jsonschema.validate(read_logs([p]).to_dict(), schema)


# ----------------------------------------------------------------------------- the fast path
RECORDED = sorted((REPO / "tests" / "data").glob("sglang-*-logs/*.log"))
SGL_EVENTS = [
    "server_args=ServerArgs(model_path='t')",
    "Load weight end. elapsed=0.19 s, type=LlamaForCausalLM, avail mem=1 GB, mem usage=0.01 GB.",
    "Load weight end. elapsed=0.02 s, type=LlamaForCausalLMEagle3, avail mem=1 GB, mem usage=0.00 GB.",
    "Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
    "The server is fired up and ready to roll!",
    "Start update_weights. Load format=auto",
    "Update engine weights online from disk begin.",
    "Update weights end.",
    "Warning: Target model's context_length (8192) is greater than the derived context_length (2048).",
    "Scheduler hit an exception: Traceback (most recent call last):",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
    "Received sigquit from a child process. It usually means the child failed.",
    '{"event": "request.finished", "rid": "a", "out": {"meta_info": {"completion_tokens": 40, "spec_verify_ct": 10, '
    '"spec_num_correct_drafts": 30}}}',
    '"request.finished" and no JSON',
    "server_args=ServerArgs(model_path='t', speculative_num_steps=3)",  # (accept len above 4.00 skipped from here)
]
ODD = [
    '  File "x.py", line 1, in f',
    "AssertionError: captured 1 of 3 aux hidden states",
    "",
    "\x00\x01 binary \xff\xfe",
    "\xc3( invalid UTF-8",
    "Decode batch without a prefix, accept len: 2.00,",
    sgl_decode("10:00:00", 2, 3.0).replace("2026-11-30", "2026-02-30"),
    sgl_decode("10:00:00", 2, 3.0).replace("] Decode", "] junk] Decode"),
]


def _decode_body(running: int, al: str, rate: str) -> str:
    return (
        sgl_decode("", running, 1.0)
        .split("] ", 1)[1]
        .replace("accept len: 1.00", f"accept len: {al}")
        .replace("accept rate: 0.00", f"accept rate: {rate}")
    )


def _mixed_sglang(seed: int, n: int) -> bytes:
    """Mostly decode lines in SGLang's layout (the fast path), the rest what a server and a
    hostile file add: prefill and access lines, every event, tracebacks, request-log lines,
    other ranks, time going back, impossible figures, other layouts, binary, long lines."""
    import random

    r = random.Random(seed)
    tags = r.choice(["", " TP0", " DP0 TP0", " TP0 EP0"])
    out, t = [], 36000
    for _ in range(n):
        t += r.choice([0, 0, 1]) - (3600 if r.random() < 0.002 else 0)
        day = f"[2026-11-30 {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
        stamp = day + r.choice([tags] * 30 + ["", " TP1", ".250"]) + "] "
        k = r.random()
        if k < 0.6:
            al = r.choice([f"{r.uniform(1, 5):.2f}"] * 40 + ["1001.00", "nan", "0.50", "65.00", "-1.00", "4"])
            rate = r.choice([f"{r.uniform(0, 1):.2f}"] * 40 + ["1.50", "nan"])
            line = stamp + _decode_body(r.randint(0, 40), al, rate)
            if r.random() < 0.02:
                line = line.replace("#token: 52, ", r.choice(["#token: 52, #extra: 1, ", "#token: nan, "]))
            out.append(line if r.random() > 0.01 else line + ", Decode batch, #running-req: 3")
        elif k < 0.8:
            out.append(stamp + SGL_EVENTS[3])
        elif k < 0.95:
            out.append(day + f'] INFO:     127.0.0.1:{r.randint(1, 9999)} - "POST /generate HTTP/1.1" 200 OK')
        elif k < 0.99:
            out.append(stamp + r.choice(SGL_EVENTS))
        else:
            out.append(r.choice(ODD) if r.random() > 0.02 else "y" * ((1 << 20) + 3))
    return ("\r\n" if seed % 3 == 2 else "\n").join(out).encode("latin-1") + b"\n" * (seed % 2)


def _mixed_vllm(seed: int, n: int) -> bytes:
    import random

    r = random.Random(seed)
    out = ["(APIServer pid=41) INFO 12-01 08:54:10 [api_utils.py:327] vLLM server version 1.2.3, serving model t"]
    for i in range(n):
        t = f"12-01 08:{i // 60 % 60:02d}:{i % 60:02d}"
        acc, k = r.randint(0, 31), r.random()
        if k < 0.9:
            out.append(
                f"(APIServer pid=41) INFO {t} [loggers.py:282] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
                f"Avg generation throughput: {r.randint(0, 99)}.5 tokens/s, Running: 2 reqs, Waiting: 0 reqs"
            )
            out.append(vllm_spec(t, acc, 30, r.choice(["1.000, 0.500, 0.250", "1.5, 0, 0", "0.5, 0.5"]), 1 + acc / 10))
        else:
            out.append(r.choice(["(EngineCore_DP0 pid=7) Traceback (most recent call last):", "(EngineCore_DP0 pid=7) "
                                 "ERROR 12-01 08:59:00 [core.py:1] EngineCore encountered a fatal error.", '  File "x"',
                                 "torch.OutOfMemoryError: CUDA out of memory.", *ODD[3:6]]))  # fmt: skip
    return "\n".join(out).encode("latin-1") + b"\n"


def _both_paths(monkeypatch: pytest.MonkeyPatch, paths: list[str], chunk: int, **kw: object) -> dict:
    """The report read line by line, and read the fast way: they must be the same, to the bit."""
    from ckpttools.measuring import logs

    monkeypatch.setattr(logs, "_CHUNK", chunk)
    got = []
    for fast in (False, True):
        monkeypatch.setattr(logs, "FAST", fast)
        try:
            r = read_logs(paths, **kw)  # type: ignore[arg-type]
            got.append(json.dumps(r.to_dict() | {"exit": r.exit_code}, sort_keys=True))
        except ConfigError as e:
            got.append(str(e))
    assert got[0] == got[1], f"{paths} at chunks of {chunk} bytes: the fast path differs"
    return json.loads(got[0]) if got[0].startswith("{") else {}


def test_fast_path_equals_line_by_line_on_recorded_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RECORDED, "the recorded SGLang logs are in tests/data"
    logs = [str(p) for p in RECORDED] + ([str(EXCERPT)] if EXCERPT.is_file() else [])
    for chunk in (4 << 20, 4096, 61, 7):
        for p in logs:
            _both_paths(monkeypatch, [p], chunk)
    _both_paths(monkeypatch, logs, 997)  # one read of several files
    _both_paths(monkeypatch, logs[:1], 4 << 20, min_accept_len=3.9)


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_equals_line_by_line_on_mixed_logs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    from ckpttools.measuring import logs_fast, logs_windows

    n = [300, 3000, 8000][seed % 3]
    data = _mixed_sglang(seed, n)
    p = tmp_path / "s.log"
    p.write_bytes(data)
    gz = tmp_path / "s.log.gz"
    gz.write_bytes(gzip.compress(data))
    v = tmp_path / "v.log"
    v.write_bytes(_mixed_vllm(seed, 400))
    for chunk in (4 << 20, 65536, 1000, 61) if n < 8000 else (4 << 20, 65536, 1000):
        rep = _both_paths(monkeypatch, [str(p)], chunk)
        _both_paths(monkeypatch, [str(v)], chunk)
    assert rep["window_count"] > 0.4 * data.count(b"Decode batch")
    _both_paths(monkeypatch, [str(gz), str(p)], 4 << 20)
    # few windows kept, small batches: the merging of kept entries and the queue's flushes
    monkeypatch.setattr(logs_windows, "MAX_WINDOWS", 8)
    monkeypatch.setattr(logs_fast, "QUEUE_MAX", 5 + seed)
    for chunk in (4 << 20, 333):
        _both_paths(monkeypatch, [str(p)], chunk)


def test_the_fast_path_reads_most_decode_lines_itself(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The mixed log's decode lines are mostly queued as windows by the fast path, not read alone."""
    from ckpttools.measuring import logs_fast

    queued = []
    add = logs_fast.Queue.add
    monkeypatch.setattr(logs_fast.Queue, "add", lambda q, b: (queued.append(len(b)), add(q, b))[1])
    p = tmp_path / "s.log"
    p.write_bytes(_mixed_sglang(1, 20000))
    r = read_logs([str(p)])
    assert sum(queued) > 0.9 * r.window_count > 0


def test_every_keyword_is_found_by_the_fast_path() -> None:
    """A line the per-line reader acts on is never passed over: each keyword holds a rare
    character, or a needle (whose letter, when it has one, is in the needle)."""
    from ckpttools.measuring import logs, logs_fast

    from ckpttools.engines import logs_formats as F

    for key in [*logs._KEYWORDS, b"SpecDecoding metrics", b'"request.finished"', F.HOOK_KEY]:
        assert logs_fast.found(key), key
    for letter, needle in logs_fast.NEEDLES:
        assert letter in needle
    for line in (sgl_decode("10:00:00", 3, 2.5, tags=" DP0 TP0").encode(), SGL_EVENTS[3].encode()):
        assert not any(c in line for c in logs_fast.RARE)  # else the common lines are read alone (slow)


def test_stdin_reads_as_the_file(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ckpttools.cli.commands import cli

    p = tmp_path / "s.log"
    p.write_bytes(_mixed_sglang(4, 3000))
    a = CliRunner().invoke(cli, ["logs", str(p), "--json"])
    b = CliRunner().invoke(cli, ["logs", "-", "--json"], input=p.read_bytes())
    assert a.exit_code == b.exit_code and a.stdout.replace(json.dumps(str(p))[1:-1], "<stdin>") == b.stdout


@given(st.binary(max_size=400), st.sampled_from([3, 5, 40, 300]))
@settings(max_examples=400, deadline=None)
def test_a_lines_text_is_the_character_pass_where_one_is_needed_and_the_line_where_not(b: bytes, limit: int) -> None:
    """logs._text skips the character-by-character pass where every character is printable: the
    same text as the pass gives (non-printable characters as U+FFFD, cut at ``limit`` with '...')."""
    s = b.decode("utf-8", errors="replace").strip()
    cut = len(s) > limit
    want = "".join(c if c.isprintable() else "\ufffd" for c in (s[: limit - 3] if cut else s)) + ("..." * cut)
    assert _text(b, limit) == want
