"""ckpt verify against local servers that answer as SGLang releases did, and vLLM's metrics."""

from __future__ import annotations

import itertools
import json
import sys

import jsonschema
import pytest
from click.testing import CliRunner

from ckpttools.demo.tiny import build_drafter, build_known_pair, known_prompts
from ckpttools.cli.commands import cli
from ckpttools.engines.http import parse_vllm_metrics
from ckpttools.engines.launch import LaunchSpec, build_command, parse_sglang_accept_lens
from ckpttools.measuring.verify import SpecOffError, load_prompts, verify

from .conftest import REPO, SHARED
from .fake_servers import FakeSGLang

RESPONSES = SHARED / "data" / "sglang-0.5.17-responses"


def recorded(name: str) -> dict:
    p = RESPONSES / name
    if not p.is_file():
        pytest.skip(f"{p} not found")
    return json.loads(p.read_text())["meta_info"]


@pytest.fixture
def prompts_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(json.dumps({"input_ids": [64 + i, 65 + i, 66]}) for i in range(6)))
    return str(p)


def test_recorded_0517_responses_give_exactly_4_and_1(prompts_file):
    all_acc, none_acc = recorded("generate-all-drafts-accepted.json"), recorded("generate-no-drafts-accepted.json")
    with FakeSGLang(lambda i, b: all_acc, avg_accept=4.0) as s:
        r = verify(s.url, prompts=prompts_file, num_prompts=3)
    assert r.engine == "sglang" and r.completed == 3
    assert r.accept_length == 4.0 and r.accepted_drafts_per_step == 3.0  # 1 + 48/16
    assert r.fields_used == "1 + spec_num_correct_drafts / spec_verify_ct"
    assert r.per_position_acceptance == [1.0, 1.0, 1.0]
    assert r.server_avg_accept_length == 4.0 and r.server["speculative_num_steps"] == 3
    with FakeSGLang(lambda i, b: none_acc) as s:
        r = verify(s.url, prompts=prompts_file, num_prompts=3)
    # the server's own spec_accept_length is 64/63 = 1.016 (it counts the prefill token); drafts say 1.0
    assert r.accept_length == 1.0 and r.accepted_drafts_per_step == 0.0
    assert r.requests[0]["extra"]["server_spec_accept_length"] == pytest.approx(64 / 63)
    assert r.per_position_acceptance == [0.0, 0.0, 0.0]


def test_mixed_requests_match_hand_computation(prompts_file):
    # (completion, verify, correct) per request; hand-computed pooled figure:
    rows = [(64, 16, 48), (64, 32, 32), (40, 20, 20), (10, 10, 0)]
    hists = [[0, 0, 0, 16], [0, 32, 0, 0], [0, 20, 0, 0], [10, 0, 0, 0]]

    def meta(i, body):
        c, v, k = rows[i % 4]
        return {
            "completion_tokens": c,
            "spec_verify_ct": v,
            "spec_num_correct_drafts": k,
            "spec_num_proposed_drafts": 3 * v,
            "spec_accept_histogram": hists[i % 4],
        }

    with FakeSGLang(meta) as s:
        r = verify(s.url, prompts=prompts_file, num_prompts=4)
    assert r.accept_length == pytest.approx(1 + 100 / 78)
    per = [4.0, 2.0, 2.0, 1.0]
    assert r.per_request["mean"] == pytest.approx(sum(per) / 4) and r.per_request["min"] == 1.0
    import statistics

    half = 3.182 * statistics.stdev(per) / 2  # t(0.975, 3) * sd / sqrt(4)
    assert r.accept_length_ci95 == pytest.approx([2.25 - half, 2.25 + half])
    # acceptance at position i = share of verify steps that accepted at least i drafts;
    # summed histogram [10, 52, 0, 16] over 78 steps
    assert r.per_position_acceptance == pytest.approx([68 / 78, 16 / 78, 16 / 78])
    assert r.output_tokens == 178


def test_older_releases(prompts_file):
    # spec_verify_ct only: completion / verify, labeled as including the prefill token
    with FakeSGLang(lambda i, b: {"completion_tokens": 33, "spec_verify_ct": 11}, old_info_path=True) as s:
        r = verify(s.url, prompts=prompts_file, num_prompts=2)
    assert r.accept_length == pytest.approx(3.0) and "includes the prefill token" in r.fields_used
    # late-2025 names
    with FakeSGLang(
        lambda i, b: {
            "completion_tokens": 30,
            "spec_verify_ct": 10,
            "spec_accept_token_num": 15,
            "spec_draft_token_num": 30,
        }
    ) as s:
        r = verify(s.url, prompts=prompts_file, num_prompts=2)
    assert r.accept_length == 2.5 and r.fields_used == "1 + spec_accept_token_num / spec_verify_ct"


def test_requests_carry_text_or_input_ids_and_flush(prompts_file, tmp_path):
    meta = recorded("generate-all-drafts-accepted.json")
    with FakeSGLang(lambda i, b: meta) as s:
        verify(s.url, prompts="builtin", num_prompts=2, max_new_tokens=7, temperature=0.5, flush_cache=True)
        assert isinstance(s.requests[0]["text"], str) and s.flushed == 1
        assert s.requests[0]["sampling_params"] == {"max_new_tokens": 7, "temperature": 0.5, "ignore_eos": False}
    with FakeSGLang(lambda i, b: meta) as s:
        verify(s.url, prompts=prompts_file, num_prompts=1)
        assert s.requests[0]["input_ids"] == [64, 65, 66]


def test_spec_off_is_said_and_never_reported_as_1(prompts_file, tmp_path):
    with FakeSGLang(lambda i, b: {"completion_tokens": 10}, spec=False) as s:
        with pytest.raises(SpecOffError, match="speculative decoding is off"):
            verify(s.url, prompts=prompts_file)
        r = CliRunner().invoke(cli, ["verify", "--host", s.url, "--prompts", prompts_file, "--json"])
    assert r.exit_code == 2 and "accept length cannot be measured" in r.stderr and "1.0" not in r.stdout


def test_faults_are_clear_and_partial_results_kept(prompts_file, tmp_path):
    r = CliRunner().invoke(cli, ["verify", "--host", "http://127.0.0.1:9", "--prompts", prompts_file])
    assert r.exit_code == 2 and "cannot connect" in r.stderr
    with FakeSGLang(lambda i, b: {}, status=500) as s:
        rep = verify(s.url, prompts=prompts_file, num_prompts=2)
    assert rep.failed == 2 and rep.accept_length is None and "HTTP 500" in rep.errors[0]
    assert rep.verdict.startswith("accept length could not be measured")
    with FakeSGLang(lambda i, b: {}, raw=b"<html>oops") as s:
        rep = verify(s.url, prompts=prompts_file, num_prompts=1)
    assert "malformed JSON" in rep.errors[0]
    with FakeSGLang(
        lambda i, b: {"completion_tokens": 8, "spec_verify_ct": 4, "spec_num_correct_drafts": 4}, delay=1.5
    ) as s:
        out = tmp_path / "r.json"
        res = CliRunner().invoke(
            cli,
            [
                "verify",
                "--host",
                s.url,
                "--prompts",
                prompts_file,
                "--num-prompts",
                "2",
                "--timeout",
                "0.5",
                "--output",
                str(out),
            ],
        )
        # nothing measured is a failure with its own exit code, never a pass
        assert res.exit_code == 3 and "timed out" in res.stdout
        assert "ckpt: error: accept length could not be measured" in res.stderr
        saved = json.loads(out.read_text())
        assert saved["failed"] == 2 and saved["accept_length"] is None
    # some requests fail, the rest still count
    with FakeSGLang(
        lambda i, b: {"completion_tokens": 8, "spec_verify_ct": 4, "spec_num_correct_drafts": 4} if i % 2 == 0 else None
    ) as s:
        rep = verify(s.url, prompts=prompts_file, num_prompts=4)
    assert rep.completed == 2 and rep.failed == 2 and rep.accept_length == 2.0


def test_a_server_that_stops_answering_ends_the_run_after_three_timeouts_in_a_row(prompts_file):
    """Six prompts on a server that answers none within --timeout: the run stops after three
    requests in a row timed out (measuring/verify.py STALLED_AFTER), says so, and sends no more,
    instead of waiting out every prompt's timeout. Timeouts that are not in a row do not stop it."""
    import time

    ok = {"completion_tokens": 8, "spec_verify_ct": 4, "spec_num_correct_drafts": 4}
    with FakeSGLang(lambda i, b: ok, delay=1.5) as s:
        t0 = time.monotonic()
        r = CliRunner().invoke(
            cli, ["verify", "--host", s.url, "--prompts", prompts_file, "--num-prompts", "6", "--timeout", "0.3"]
        )
        took = time.monotonic() - t0
        sent = len(s.requests)
    assert r.exit_code == 3 and "ckpt: error: accept length could not be measured" in r.stderr, r.output
    assert sent == 3 and took < 6 * 0.3 + 1.0, (sent, took)
    assert "3 requests in a row timed out: the run stopped, 3 prompt(s) not measured" in r.stdout
    with FakeSGLang(lambda i, b: (time.sleep(1.0) if i % 3 else None) or ok) as s:  # every third answers
        rep = verify(s.url, prompts=prompts_file, num_prompts=6, timeout=0.3)
    assert len(rep.requests) == 6 and rep.completed == 2 and rep.failed == 4 and rep.accept_length == 2.0
    assert not any("in a row" in e for e in rep.errors)


def test_bar_verdict_and_early_stop(prompts_file):
    with FakeSGLang(
        lambda i, b: {"completion_tokens": 10, "spec_verify_ct": 10, "spec_num_correct_drafts": i % 2}
    ) as s:
        rep = verify(s.url, prompts=prompts_file, num_prompts=40, min_accept_len=2.0)
    assert rep.passed is False and rep.exit_code == 1
    assert rep.completed == 5 and rep.stopped_early.startswith("after 5 requests the 95% interval")
    assert "FAIL: below the bar of 2.00" in rep.verdict
    with FakeSGLang(lambda i, b: {"completion_tokens": 40, "spec_verify_ct": 10, "spec_num_correct_drafts": 30}) as s:
        r = CliRunner().invoke(
            cli, ["verify", "--host", s.url, "--prompts", prompts_file, "--num-prompts", "6", "--min-accept-len", "3.5"]
        )
    assert r.exit_code == 0 and "PASS: at or above the bar of 3.50" in r.stdout


def test_baseline_speedup_said_plainly_when_below_1(prompts_file):
    fast = {"completion_tokens": 40, "spec_verify_ct": 40, "spec_num_correct_drafts": 0}
    with (
        FakeSGLang(lambda i, b: fast, delay=0.2) as spec,
        FakeSGLang(lambda i, b: {"completion_tokens": 40}, spec=False, delay=0.05) as base,
    ):
        rep = verify(spec.url, prompts=prompts_file, num_prompts=3, baseline_host=base.url)
    assert rep.speedup is not None and rep.speedup < 1
    assert "SLOWER than the same target without speculation" in rep.verdict
    assert rep.baseline["completed"] == 3 and rep.baseline["engine"] == "sglang"


def test_vllm_metrics_parsing():
    text = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="t"} 20.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="t"} 60.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="t"} 20.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="t",position="0"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="t",position="1"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="t",position="2"} 0.0
"""
    m = parse_vllm_metrics(text)
    assert m["present"] and m["drafts"] == 20 and m["accepted"] == 20 and m["draft_tokens"] == 60
    assert m["accepted_per_pos"] == {0: 20.0, 1: 0.0, 2: 0.0}
    assert not parse_vllm_metrics("# nothing\n")["present"]


def test_prompts_builtin_and_files(tmp_path):
    b = load_prompts("builtin", None)
    cats = {c: sum(p.category == c for p in b) for c in {p.category for p in b}}
    want = {"chat", "code", "math", "summarization", "qa", "translation", "long-context"}
    assert set(cats) == want and min(cats.values()) >= 20  # issue 15: seven categories, 20+ each
    assert len(load_prompts("builtin", 500)) == len(b) == 151  # a short set is never repeated to fill a count
    twice = load_prompts("builtin", 500, repeat=2)  # repetition only when asked, each prompt in a row
    assert len(twice) == 302 and twice[0] is twice[1] and twice[2] is twice[3]
    first = load_prompts("builtin", 14)  # a cut takes the categories in turn
    assert [p.category for p in first[:7]] == [p.category for p in first[7:]] and {p.category for p in first} == want
    longest = max(b, key=lambda p: len(p.text or ""))
    assert longest.category == "long-context" and len(longest.text or "") > 6000
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nope": 1}\n')
    r = CliRunner().invoke(cli, ["verify", "--host", "http://127.0.0.1:9", "--prompts", str(bad)])
    assert r.exit_code == 2 and 'needs a "prompt" string' in r.stderr


def test_chat_prompts_render_with_the_tokenizers_own_template(tmp_path):
    """{"messages": [...]} lines render with the real TinyLlama template and tokenize as
    transformers' apply_chat_template does; without a tokenizer they are refused clearly."""
    from tests.conftest import REAL_CONFIGS

    tok_dir = REAL_CONFIGS / "tokenizers" / "tinyllama-1.1b-chat"
    if not tok_dir.is_dir():
        pytest.skip(f"no real tokenizer at {tok_dir} (shared/ is laid beside the checkout in CI)")
    transformers = pytest.importorskip("transformers")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}]
    f = tmp_path / "chats.jsonl"
    f.write_text(json.dumps({"category": "chat", "messages": msgs}) + "\n" + json.dumps({"prompt": "hi"}) + "\n")
    got = load_prompts(str(f), None, str(tok_dir))
    ref = transformers.AutoTokenizer.from_pretrained(str(tok_dir)).apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=True
    )
    ref = ref["input_ids"] if hasattr(ref, "keys") else ref
    assert got[0].input_ids == list(ref) and got[0].category == "chat"
    r = CliRunner().invoke(cli, ["verify", "--host", "http://127.0.0.1:9", "--prompts", str(f)])
    assert r.exit_code == 2 and "chat template" in r.stderr and "--tokenizer" in r.stderr


def test_launch_commands_and_log_parsing(tmp_path):
    s = LaunchSpec("sglang", "/t", "/d", port=31000, steps=3, topk=1)
    cmd = build_command(s)
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    for flag, val in (
        ("--speculative-algorithm", "EAGLE3"),
        ("--speculative-num-steps", "3"),
        ("--speculative-eagle-topk", "1"),
        ("--speculative-num-draft-tokens", "4"),
        ("--speculative-draft-model-path", "/d"),
        ("--host", "127.0.0.1"),
    ):
        assert cmd[cmd.index(flag) + 1] == val
    v = build_command(LaunchSpec("vllm", "/t", "/d", steps=5, engine_args=["--enforce-eager"]))
    assert json.loads(v[v.index("--speculative-config") + 1]) == {
        "method": "eagle3",
        "model": "/d",
        "num_speculative_tokens": 5,
    }
    assert v[-1] == "--enforce-eager"
    log = RESPONSES / "server-log-excerpt.txt"
    if log.is_file():
        lens = parse_sglang_accept_lens(log.read_text())
        assert lens and all(x == 4.0 for x in lens)


def _launch(tmp_path, target, drafter, *extra: str):
    args = ["verify", "--launch", "--engine", "sglang", "--target", str(target), "--drafter", str(drafter)]
    args += ["--engine-python", "/bin/false", "--log", str(tmp_path / "s.log"), "--ready-timeout", "30", *extra]
    return CliRunner().invoke(cli, args)


def test_launch_failure_shows_the_log(tmp_path):
    tp, dp = build_known_pair(tmp_path / "pair")
    r = _launch(tmp_path, tp, dp)
    assert r.exit_code == 2 and "exited with code 1 before it was ready" in r.stderr
    assert "ckpt: note: starting sglang on http://127.0.0.1:" in r.stderr  # said once one starts
    assert (tmp_path / "s.log").read_text().startswith("$ /bin/false -m sglang.launch_server")


def test_a_launched_server_is_polled_soon_at_first_then_once_a_second(tmp_path, monkeypatch):
    """wait_ready's polls: 0.05 s, 0.1 s, 0.2 s... after the start, at most READY_POLL apart. A real
    process that answers /health 200 after 2 s (its "python" a script that waits, then serves)."""
    from ckpttools.engines import launch

    script = tmp_path / "slowpy"
    serve = (
        "import sys, time, http.server as h; time.sleep(2.0); port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "class H(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.send_header('Content-Length', '0'); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        "h.HTTPServer(('127.0.0.1', port), H).serve_forever()\n"
    )
    (tmp_path / "serve.py").write_text(serve)
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "serve.py"}" "$@"\n')
    script.chmod(0o755)
    slept: list[float] = []
    real_sleep = launch.time.sleep
    monkeypatch.setattr(launch.time, "sleep", lambda s: (slept.append(s), real_sleep(s))[1])
    spec = LaunchSpec("sglang", "t", "d", port=launch.free_port(), python=str(script), log_path=str(tmp_path / "s.log"))
    with launch.RunningServer(spec) as srv:
        waited = srv.wait_ready(None)
        polls = list(slept)  # (not the sleeps of the stop that follows)
    assert polls[:5] == [0.05, 0.1, 0.2, 0.4, 0.8] and set(polls[5:]) == {launch.READY_POLL} == {1.0}, polls
    assert waited >= 2.0
    # a wait of hours (a --ready-timeout for a 1 TB target) keeps polling once a second, with no overflow
    long_wait = list(itertools.islice(launch._poll_delays(), 20_000))
    assert long_wait[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0] and set(long_wait[5:]) == {1.0}


def test_launch_refuses_what_is_knowable_before_any_server_starts(tmp_path):
    """A missing prompts file, a drafter with validate errors against the target, a port in use:
    each refused before the (minutes-long) server load, with no server started and no log."""
    import socket

    tp, dp = build_known_pair(tmp_path / "pair")
    r = _launch(tmp_path, tp, dp, "--prompts", str(tmp_path / "missing.jsonl"))
    assert r.exit_code == 2 and "no such prompts file" in r.stderr and "starting" not in r.stderr
    bad = build_drafter(tmp_path / "bad", vocab_size=256, draft_vocab_size=128, aux_layer_ids=(1, 3, 20))
    r = _launch(tmp_path, tp, bad)  # aux id 20 is past the 8-layer target
    assert r.exit_code == 1 and "validate found 1 error(s) (target.aux_layer_ids)" in r.stderr
    assert "starting" not in r.stderr
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = _launch(tmp_path, tp, dp, "--port", str(port))
    assert r.exit_code == 2 and f"127.0.0.1:{port} is in use" in r.stderr and "--port" in r.stderr
    assert "starting" not in r.stderr
    assert not (tmp_path / "s.log").exists()


def test_sweep_syntax():
    from ckpttools.measuring.sweep import parse_sweep

    got = parse_sweep("steps=1,3;topk=1,4;draft_tokens=4,8")
    # topk 1: SGLang sets draft tokens to steps + 1 itself, so those settings collapse
    assert got == [
        {"steps": 1, "topk": 1, "draft_tokens": 2},
        {"steps": 1, "topk": 4, "draft_tokens": 4},
        {"steps": 1, "topk": 4, "draft_tokens": 8},
        {"steps": 3, "topk": 1, "draft_tokens": 4},
        {"steps": 3, "topk": 4, "draft_tokens": 4},
        {"steps": 3, "topk": 4, "draft_tokens": 8},
    ]
    assert parse_sweep(" steps = 2 , 5 ") == [{"steps": 2}, {"steps": 5}]
    for bad, says in (
        ("depth=3", "not one of"),
        ("steps=a", "whole numbers"),
        ("steps=0", "1 or more"),
        (";", "no axis"),
    ):
        r = CliRunner().invoke(
            cli, ["verify", "--launch", "--engine", "sglang", "--target", ".", "--drafter", ".", "--sweep", bad]
        )
        assert r.exit_code == 2 and says in r.stderr, (bad, r.output)


def test_a_sweep_reports_settings_whose_server_fails_and_goes_on(tmp_path):
    """Every server of this sweep fails to start (the interpreter has no SGLang): the baseline and
    both settings are reported with the server's own error, and the run ends unmeasured (exit 3)."""
    tp, dp = build_known_pair(tmp_path, target="repeat", drafter="id")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(2)))
    out = tmp_path / "rep.json"
    r = CliRunner().invoke(
        cli,
        ["verify", "--launch", "--engine", "sglang", "--target", str(tp), "--drafter", str(dp), "--prompts", str(prompts),
         "--sweep", "steps=1,2", "--engine-python", sys.executable, "--log", str(tmp_path / "s.log"),
         "--ready-timeout", "60", "--output", str(out)],
    )  # fmt: skip
    assert r.exit_code == 3, r.output
    rep = json.loads(out.read_text())
    sw = rep["sweep"]
    assert [e["status"] for e in sw["settings"]] == ["failed", "failed"] and sw["best"] is None
    assert all("sglang" in e["error"] for e in sw["settings"]), sw["settings"]
    assert rep["baseline"]["error"] and "failed" in r.stdout
    jsonschema.validate(rep, json.loads((REPO / "schemas" / "verify-report.schema.json").read_text()))


def test_plot_and_schema_on_the_torch_engine(tmp_path):
    """--plot draws a PNG from a real report (the offline torch engine on a known pair); the JSON
    report follows the published schema; without figures the plot is refused in one line."""
    pytest.importorskip("transformers")
    tp, dp = build_known_pair(tmp_path, target="swap", drafter="id")
    prompts = tmp_path / "p.jsonl"
    rows = [{"category": c, "input_ids": p} for c, seed in (("a", 1), ("b", 2)) for p in known_prompts(2, seed=seed)]
    prompts.write_text("\n".join(json.dumps(x) for x in rows))
    png = tmp_path / "r.png"
    r = CliRunner().invoke(
        cli,
        ["verify", "--engine", "torch", "--target", str(tp), str(dp), "--prompts", str(prompts), "--num-prompts", "4",
         "--max-new-tokens", "12", "--plot", str(png), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    jsonschema.validate(rep, json.loads((REPO / "schemas" / "verify-report.schema.json").read_text()))
    assert rep["categories"]["a"]["accept_length"] == rep["categories"]["b"]["accept_length"] == 2.0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_the_offline_engine_measures_context_bins_and_refuses_what_it_cannot_measure(tmp_path):
    """--engine torch builds the context bins as a server run does; options it cannot honour
    (a server's concurrency, sweep, sampling, topk) are refused, never silently ignored."""
    tp, dp = build_known_pair(tmp_path, target="repeat", drafter="id")
    pf = tmp_path / "p.jsonl"
    pf.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(3)))
    base = ["verify", "--engine", "torch", "--target", str(tp), str(dp), "--prompts", str(pf), "--num-prompts", "3"]
    r = CliRunner().invoke(cli, [*base, "--max-new-tokens", "16", "--context-lengths", "64,128,16,8k", "--json"])
    assert r.exit_code == 0, r.output
    ctx = json.loads(r.stdout)["context"]
    got = {b["tokens"]: b.get("accept_length", b.get("skipped")) for b in ctx["bins"]}
    assert got[64] == got[128] == 4.0  # the repeat pair accepts every draft at any length
    assert "no room for the prompt" in got[16] and f"past the target's context of {ctx['target_context']}" in got[8192]
    for extra, name in (
        (["--concurrency", "4"], "--concurrency"),
        (["--sweep", "steps=1,3"], "--sweep"),
        (["--temperature", "0.7"], "--temperature"),
        (["--topk", "4"], "--topk"),
    ):
        r = CliRunner().invoke(cli, [*base, *extra])
        assert r.exit_code == 2 and f"{name}: not measured by --engine torch" in r.stderr, (extra, r.output)


def test_a_bin_past_the_targets_context_builds_no_prompt():
    """A bin past the target's context is skipped before its prompts are built: 16 prompts of 16M
    tokens would be gigabytes of lists (a hostile run: MemoryError under a 4 GB limit). Prompts of
    text only, which no bin can be built from, show it: building one would raise."""
    from ckpttools.engines.http import Prompt
    from ckpttools.errors import ConfigError
    from ckpttools.measuring.traffic import MAX_CONTEXT_LENGTH, context_bins, context_prompts

    text_only = [Prompt(text="hello", category="a")]
    with pytest.raises(ConfigError, match="token ids"):
        context_prompts(text_only, 64, 8)
    limits = {"target_context": 4096, "drafter_max_position_embeddings": None, "drafter_rope": None}
    calls: list[int] = []
    got = context_bins([4, MAX_CONTEXT_LENGTH], text_only, limits, 8, lambda built: calls.append(len(built)))
    assert calls == []
    assert [b["skipped"] for b in got["bins"]] == [
        "4 tokens leave no room for the prompt before 8 new tokens",
        "past the target's context of 4096 tokens",
    ]


def test_the_drafters_context_is_read_where_inspect_reads_it():
    """A speculators drafter keeps max_position_embeddings and rope_scaling in
    transformer_layer_config; the context axis reads them there, as inspect does."""
    from ckpttools.formats.config import lookup
    from ckpttools.measuring.traffic import context_limits

    inner = {"max_position_embeddings": 1024, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    for dcfg in ({"transformer_layer_config": inner}, {"text_config": inner}, inner):
        got = context_limits(None, dcfg, None)
        assert got["drafter_max_position_embeddings"] == lookup(dcfg, "max_position_embeddings")[0] == 1024
        assert got["drafter_rope"] == {"rope_type": "linear", "factor": 2.0}


def test_a_server_that_dies_is_said_to_have_died_and_its_log_kept(tmp_path, prompts_file):
    """A launched server killed during the run (here: a stand-in for sglang.launch_server that
    SIGKILLs itself on the first request, as the OOM killer does) is named as dead, with its
    exit code and its log's last lines; the log stays."""
    fake = tmp_path / "fakepy"
    fake.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO / "tests" / "fake_engine"}" exec "{sys.executable}" "$@"\n')
    fake.chmod(0o755)
    tp, dp = build_known_pair(tmp_path / "pair")
    log = tmp_path / "logs" / "server.log"
    argv = ["verify", "--launch", "--engine", "sglang", "--target", str(tp), "--drafter", str(dp)]
    argv += ["--prompts", prompts_file, "--num-prompts", "2", "--engine-python", str(fake), "--log", str(log)]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 2, r.output
    assert "the sglang server died during the run, exit code -9 (killed: out of memory?)" in r.stderr
    assert "CUDA out of memory" in r.stderr and "cannot connect" not in r.stderr
    assert "CUDA out of memory" in log.read_text()


RESPONSES_0523 = REPO / "tests" / "data" / "sglang-0.5.23-responses"


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_each_sglang_release_read_with_its_own_table(prompts_file, version):
    """The recorded 0.5.17 answers and the 0.5.23 answers (fields as 0.5.23 writes them) give the
    same figures, each read with its release's table, which the report names."""
    src = RESPONSES if version == "0.5.17" else RESPONSES_0523
    if not src.is_dir():
        pytest.skip(f"{src} not found")
    got = {}
    for name in ("generate-all-drafts-accepted.json", "generate-no-drafts-accepted.json"):
        meta = json.loads((src / name).read_text())["meta_info"]
        with FakeSGLang(lambda i, b: meta, version=version) as s:
            r = verify(s.url, prompts=prompts_file, num_prompts=3)
        assert r.server["engine_release"] == f"sglang=={version}"
        assert r.server["engine_release_from"] == "the server's own version"
        got[name] = (r.accept_length, r.per_position_acceptance, r.fields_used)
    assert got["generate-all-drafts-accepted.json"][:2] == (4.0, [1.0, 1.0, 1.0])
    assert got["generate-no-drafts-accepted.json"][:2] == (1.0, [0.0, 0.0, 0.0])


def test_an_answer_with_no_field_the_release_knows_is_an_error_naming_what_it_saw(prompts_file):
    old = {"completion_tokens": 64, "spec_verify_ct": 16, "spec_accepted_drafts": 48}  # 0.5.17's aliases only
    with FakeSGLang(lambda i, b: {k: v for k, v in old.items() if k != "spec_verify_ct"}, version="0.5.23") as s:
        r = verify(s.url, prompts=prompts_file, num_prompts=2)
    assert r.accept_length is None and r.exit_code == 3
    assert "carries none of the fields sglang==0.5.23 reports acceptance in" in r.errors[0]
    assert "it has: completion_tokens, spec_accepted_drafts" in r.errors[0]
    with FakeSGLang(lambda i, b: old) as s:  # no version reported: any known release's names
        r = verify(s.url, prompts=prompts_file, num_prompts=2)
    assert r.accept_length == 4.0 and r.server["engine_release"] is None
    with FakeSGLang(lambda i, b: old) as s:  # pinned by the user
        r = verify(s.url, engine="sglang==0.5.17", prompts=prompts_file, num_prompts=2)
    assert r.accept_length == 4.0 and r.server["engine_release"] == "sglang==0.5.17"
    assert r.server["engine_release_from"] == "given"


def test_unknown_releases_are_refused_with_the_known_ones(prompts_file):
    with FakeSGLang(lambda i, b: recorded("generate-all-drafts-accepted.json"), version="0.5.99") as s:
        r = CliRunner().invoke(cli, ["verify", "--host", s.url, "--prompts", prompts_file, "--num-prompts", "2"])
    assert r.exit_code == 2 and "0.5.17" in r.stderr and "0.5.23" in r.stderr, r.output
    r = CliRunner().invoke(cli, ["verify", "--host", "http://127.0.0.1:9", "--engine", "sglang==0.4.0"])
    assert r.exit_code == 2 and "sglang==0.5.23" in r.stderr and "Invalid value for --engine" in r.stderr


def test_vllm_release_from_its_version_endpoint(prompts_file):
    from .fake_servers import MisbehavingServer

    with MisbehavingServer() as srv:
        r = verify(srv.url + "/vl-version-0.33.0", engine="vllm", prompts=prompts_file, num_prompts=2)
        assert r.server["engine_release"] == "vllm==0.33" and r.accept_length is not None
        r = verify(srv.url + "/vl-plain", engine="vllm", prompts=prompts_file, num_prompts=2)
        assert r.server["engine_release"] is None
