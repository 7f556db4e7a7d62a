"""ckpt logs on lines as SGLang 0.5.17 and vLLM 0.32 format them, and on the real SGLang excerpt."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ckpttools.errors import ConfigError
from ckpttools.ops.logs import read_logs

EXCERPT = Path("/work/shared/data/sglang-0.5.17-responses/server-log-excerpt.txt")
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
