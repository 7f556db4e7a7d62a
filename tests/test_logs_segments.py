"""``ckpt logs`` splits a run at every weight update (issue 33 item 4): real-shaped logs of three
drafters (4.0, 1.0, 4.0) give three segments with those figures, where one merged figure was
printed before; every source of a split; the fast path equal to reading line by line; a log of
10,000 swaps in bounded time, memory and output; a trickled pipe; verify --host --log."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckpttools.measuring import logs_segments
from ckpttools.measuring.logs import read_logs

from .conftest import SHARED
from .corpus_segments import (
    START,
    UVICORN_SGL,
    dec,
    digest,
    hook,
    sgl_access,
    sgl_prefix,
    swaps,
    three_drafters,
    vllm_access,
    vllm_spec,
)
from .test_logs import _both_paths, _mixed_sglang

REPO = Path(__file__).resolve().parents[1]
#: a real SGLang 0.5.17 log (H200): requests at 4.0, then a real POST /update_weights_from_tensor
HEALTHY = REPO / "tests" / "data" / "sglang-0.5.17-logs" / "sglang-healthy.log"
EXCERPT = SHARED / "data" / "sglang-0.5.17-responses" / "server-log-excerpt.txt"
SCHEMA = json.loads((REPO / "schemas" / "logs-report.schema.json").read_text())


def _write(tmp_path: Path, text: str | bytes, name: str = "s.log") -> str:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


def _figures(r: object) -> list[float | None]:
    return [s["accept_length"] for s in r.segments]  # type: ignore[attr-defined]


def _as_noise(line: str) -> str:
    """A line of the recorded log as a drafter none of whose drafts is accepted would have it."""
    if "Decode batch" in line:
        return line.replace("accept len: 4.00, accept rate: 1.00", "accept len: 1.00, accept rate: 0.00")
    if '"request.finished"' in line:
        at = line.index("{")
        obj = json.loads(line[at:])
        m = obj["out"]["meta_info"]
        if m.get("spec_verify_ct"):
            ct = m["completion_tokens"]
            m |= {"spec_verify_ct": ct, "spec_num_correct_drafts": 0, "spec_accepted_drafts": 0, "spec_accept_rate": 0.0,
                  "spec_accept_length": 1.0, "spec_num_proposed_drafts": 3 * ct, "spec_proposed_drafts": 3 * ct,
                  "spec_correct_drafts_histogram": [ct, 0, 0, 0], "spec_accept_histogram": [ct, 0, 0, 0]}  # fmt: skip
        return line[:at] + json.dumps(obj)
    return line


def test_three_drafters_on_the_recorded_sglang_log_give_three_segments(tmp_path: Path) -> None:
    """The recorded H200 log: its requests at 4.0, its own update_weights_from_tensor line; then the
    same traffic replayed by a noise drafter (1.0), a second real-shaped update, and 4.0 again."""
    lines = HEALTHY.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if "POST /update_weights_from_tensor" in ln)
    traffic = [ln for ln in lines[:at] if ln.startswith("[2026-12-01 10:14:5") and "10:14:5" in ln[:25]]
    traffic = traffic[traffic.index(next(t for t in traffic if "GET /server_info" in t)) :]  # after the warmup
    log = lines[: at + 1] + [_as_noise(t) for t in traffic] + [lines[at]] + traffic + lines[at + 1 :]
    r = read_logs([_write(tmp_path, "\n".join(log) + "\n")], min_accept_len=2)
    assert _figures(r) == pytest.approx([4.0, 1.0, 4.0])
    assert [s["source"] for s in r.segments] == ["requests"] * 3 and all(s["exact"] for s in r.segments)
    assert [s["event"] for s in r.segments] == [None, "/update_weights_from_tensor", "/update_weights_from_tensor"]
    assert [s["request_count"] for s in r.segments] == [6, 6, 6]
    assert r.segments[1]["first_line"] == at + 1 and r.segments[0]["last_line"] == at
    assert 1.0 < r.accept_length < 4.0  # the one merged figure of before, kept at the top level
    assert r.exit_code == 1 and "segment 1 1.00 FAIL" in r.verdict and "below the bar of 2.00 in segment 1" in r.verdict
    assert [s["passed"] for s in r.segments] == [True, False, True]
    import jsonschema

    jsonschema.validate(r.to_dict(), SCHEMA)


@pytest.mark.skipif(not EXCERPT.is_file(), reason="the shared SGLang excerpt is not here")
def test_three_drafters_on_the_shared_excerpt(tmp_path: Path) -> None:
    ex = EXCERPT.read_text().splitlines()
    one = [ln.replace("accept len: 4.00, accept rate: 1.00", "accept len: 1.00, accept rate: 0.00") for ln in ex[3:]]
    log = ex + [UVICORN_SGL] + one + [sgl_access("/update_weights_from_disk", t="2026-11-30 10:47:00")] + ex[3:]
    r = read_logs([_write(tmp_path, "\n".join(log) + "\n")])
    assert _figures(r) == pytest.approx([4.0, 1.0, 4.0]) and [s["window_count"] for s in r.segments] == [5, 5, 5]
    assert r.accept_length == pytest.approx(3.0) and r.segment_count == 3


@pytest.mark.parametrize("how", ["access", "hook", "vllm", "vllm-hook"])
def test_each_source_splits_the_log(tmp_path: Path, how: str) -> None:
    r = read_logs([_write(tmp_path, three_drafters(how))], min_accept_len=2)
    assert _figures(r) == pytest.approx([4.0, 1.0, 4.0]) and r.exit_code == 1
    assert [len(s["windows"]) for s in r.segments] == [3, 3, 3]
    if "hook" in how:
        d = [s["drafter"] for s in r.segments]
        assert d[0] is None and [x["digest"] for x in d[1:]] == [digest(0xD1), digest(0xD2)]
        assert all(x["ranks"] == x["world"] == 2 and x["maps"] == "replaced" for x in d[1:])
        assert d[1]["path"] == "/srv/drafters/step-1/model.safetensors"
        assert [s["event"] for s in r.segments] == [None, "hook", "hook"] and r.segments[1]["event_status"] == 200
        assert r.event_counts["swap"] == 2
    import jsonschema

    jsonschema.validate(r.to_dict(), SCHEMA)


def test_a_single_segment_log_reads_as_before(tmp_path: Path) -> None:
    r = read_logs([_write(tmp_path, START + "\n" + dec(3.0) + "\n")], min_accept_len=2)
    assert r.segment_count == 1 and r.segments[0]["event"] is None and r.segments[0]["accept_length"] == 3.0
    assert r.verdict.startswith("accept length 3.00 tokens per verify step") and "segment" not in r.verdict


def test_what_does_not_split(tmp_path: Path) -> None:
    refused = [START, dec(4.0), sgl_access("/update_weights_from_tensor", 401), dec(2.0)]
    r = read_logs([_write(tmp_path, "\n".join(refused) + "\n")])
    assert r.segment_count == 1 and r.accept_length == 3.0 and "refused by the server" in r.events[-1]["text"]
    failed = [START, dec(4.0), sgl_access("/update_weights_from_tensor", 400), dec(2.0)]  # SGLang: success false
    assert read_logs([_write(tmp_path, "\n".join(failed) + "\n")]).segment_count == 1
    # a burst of updates with no figure between is one split (vLLM's start / update / finish, say)
    burst = [START, dec(4.0)] + [sgl_access("/update_weights_from_distributed")] * 3 + [dec(2.0)]
    r = read_logs([_write(tmp_path, "\n".join(burst) + "\n")])
    assert _figures(r) == [4.0, 2.0] and r.segments[1]["updates"] == 3
    # the same words elsewhere: a request's body, a line of another program, another endpoint
    other = [START, dec(4.0), sgl_prefix() + json.dumps({"event": "request.received", "obj": {"text": hook("/a", digest(1))}}),
             "echo " + UVICORN_SGL, sgl_access("/generate"), sgl_access("/update_weights_from_tensorx"), dec(2.0)]  # fmt: skip
    assert read_logs([_write(tmp_path, "\n".join(other) + "\n")]).segment_count == 1


def test_a_restart_after_an_update_begins_a_segment(tmp_path: Path) -> None:
    plain = [START, dec(4.0), START, dec(2.0)]
    assert read_logs([_write(tmp_path, "\n".join(plain) + "\n")]).segment_count == 1  # as before
    swapped = [START, dec(4.0), sgl_access("/update_weights_from_disk"), dec(1.0), START, dec(2.0)]
    r = read_logs([_write(tmp_path, "\n".join(swapped) + "\n")])
    assert _figures(r) == [4.0, 1.0, 2.0] and [s["event"] for s in r.segments][2] == "restart"
    assert [s["run"] for s in r.segments] == [0, 0, 1]
    r = read_logs([_write(tmp_path, "\n".join(swapped + [START, dec(2.0)] * 50) + "\n")])
    assert r.segment_count == 3 and r.run_count == 52  # restarts after that one: the same launched drafter
    vllm = [vllm_spec(2.0), "(APIServer pid=41) " + vllm_access("/collective_rpc"), vllm_spec(3.0)]
    assert _figures(read_logs([_write(tmp_path, "\n".join(vllm) + "\n")])) == [2.0, 3.0]


def test_interleaved_ranks_say_each_swap_reached_half(tmp_path: Path) -> None:
    lines = [START, dec(4.0)]
    lines += [hook(f"/d/{d}", digest(d), r, 2, prefix=sgl_prefix(f" TP{r}")) for r in (0, 1) for d in (1, 2)]
    lines.append(dec(3.0))
    r = read_logs([_write(tmp_path, "\n".join(lines) + "\n")])
    assert [s["drafter"]["ranks"] if s["drafter"] else None for s in r.segments] == [None, 1, 1, 1, 1]
    assert r.event_counts["interleaved"] == 3 and _figures(r)[-1] == 3.0


def test_a_repeated_swap_to_the_same_drafter_is_a_new_segment(tmp_path: Path) -> None:
    h = hook("/d/a", digest(7), 0, 1)
    r = read_logs([_write(tmp_path, "\n".join([START, h, dec(4.0), h, dec(2.0)]) + "\n")])
    assert _figures(r) == [None, 4.0, 2.0]
    # one rank's line twice in a row, no figure between: a second swap too (a rank logs once a swap)
    r = read_logs([_write(tmp_path, "\n".join([START, h, h, dec(4.0)]) + "\n")])
    assert r.segment_count == 3


def test_requests_go_to_the_segment_they_finished_in(tmp_path: Path) -> None:
    def req(steps: int, acc: int) -> str:
        meta = {"completion_tokens": steps + acc, "spec_verify_ct": steps, "spec_num_correct_drafts": acc}
        return sgl_prefix() + json.dumps({"event": "request.finished", "rid": "a", "out": {"meta_info": meta}})

    lines = [req(10, 30), req(10, 30), sgl_access("/update_weights_from_tensor"), req(10, 0), req(10, 10)]
    r = read_logs([_write(tmp_path, "\n".join(lines) + "\n")])
    assert _figures(r) == pytest.approx([4.0, 1.5]) and r.segments[1]["accept_length_ci95"] is not None
    assert r.accept_length == pytest.approx(1 + 70 / 40)


@pytest.mark.parametrize("seed", range(3))
def test_fast_path_equals_line_by_line_on_segmented_logs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    """Swaps and updates dropped at random into a mixed SGLang log (ranks, prefixes, tracebacks,
    restarts): both readers give the same report, segments and their windows included."""
    from ckpttools.measuring import logs_fast, logs_windows

    rnd = random.Random(seed)
    lines = _mixed_sglang(seed, 2500).split(b"\n")
    extra = [
        lambda: hook(f"/d/{rnd.randint(0, 5)}", digest(rnd.randint(0, 5)), rnd.randint(0, 1), 2, prefix=sgl_prefix(" TP0")),
        lambda: sgl_access(rnd.choice(["/update_weights_from_tensor", "/update_weights_from_disk"]), rnd.choice([200, 200, 401, 500])),
        lambda: hook("/d/x", "XYZ", prefix=sgl_prefix()),
    ]  # fmt: skip
    for _ in range(120):
        lines.insert(rnd.randrange(len(lines)), rnd.choice(extra)().encode())
    p = tmp_path / "s.log"
    p.write_bytes(b"\n".join(lines))
    for chunk in (4 << 20, 997):
        rep = _both_paths(monkeypatch, [str(p)], chunk)
    assert rep["segment_count"] > 20 and sum(s["window_count"] for s in rep["segments"]) == rep["window_count"]
    p2 = tmp_path / "h.log"
    p2.write_text(three_drafters("hook", n=300))
    monkeypatch.setattr(logs_windows, "MAX_WINDOWS", 8)  # the report's windows folded; each segment's cut
    monkeypatch.setattr(logs_segments, "SEGMENT_HEAD", 3)
    monkeypatch.setattr(logs_segments, "SEGMENT_TAIL", 5)
    monkeypatch.setattr(logs_fast, "QUEUE_MAX", 5 + seed)
    for chunk in (4 << 20, 333):
        _both_paths(monkeypatch, [str(p), str(p2)], chunk)
        got = _both_paths(monkeypatch, [str(p2)], chunk)
        assert [s["window_count"] for s in got["segments"]] == [300] * 3 and got["segments"][1][
            "windows_left_out"
        ] == 292


def test_10000_swaps_in_bounded_time_memory_and_output(tmp_path: Path) -> None:
    """Read in-process (the figures, the CPU time), and by the CLI in a process of its own (its
    peak memory, the size of what it prints: --json keeps every segment, the text folds)."""
    import os

    from ckpttools.cli.render import render_logs

    p = _write(tmp_path, swaps(10_000, world=2))
    t = time.process_time()
    r = read_logs([p])
    took = time.process_time() - t
    assert r.segment_count == 10_001 == len(r.segments)
    assert all(s["drafter"]["ranks"] == 2 for s in r.segments[1:])
    assert sum(s["windows_kept"] for s in r.segments) == logs_segments.WINDOWED
    assert sum(s["window_count"] for s in r.segments) == 10_000
    text = render_logs(r, show=10)
    assert took < 5 and len(text) < 20_000 and len(r.verdict) < 1000, (took, len(text))
    assert "... 9981 more segments (all in --json)" in text
    d = r.to_dict()  # as dataclasses.asdict makes it, copied: changing it leaves the report as it was
    assert d == dataclasses.asdict(r)
    d["segments"][1]["drafter"]["ranks"] = -1
    assert r.segments[1]["drafter"]["ranks"] == 2
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "out.json"
    # the CLI's own peak: VmHWM of its process image, read as it exits (ru_maxrss would count the pages
    # of the forking test worker, hundreds of MiB under pytest-xdist, and RUSAGE_CHILDREN every child's)
    hwm = tmp_path / "hwm"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(hwm)!r}, 'w').write("
        "[ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0].split()[1]))\n"
        "from ckpttools.cli import main\nsys.argv = ['ckpt', *sys.argv[1:]]\nmain()\n"
    )
    with out.open("wb") as f:
        subprocess.run([sys.executable, "-c", code, "logs", p, "--json"], stdout=f, env=env, check=True, timeout=120)
    peak_mib = int(hwm.read_text()) / 1024
    print(
        f"10,000 swaps: {took:.2f} s CPU in-process; the CLI's peak RSS {peak_mib:.0f} MiB, --json {out.stat().st_size} bytes"
    )
    assert peak_mib < 400 and out.stat().st_size < 16 << 20, (peak_mib, out.stat().st_size)
    assert len(json.loads(out.read_bytes())["segments"]) == 10_001


def test_a_trickled_pipe_reads_as_the_file(tmp_path: Path) -> None:
    """Stdin fed a few bytes at a time, lines (the hook's among them) cut across the writes."""
    import os

    data = three_drafters("hook").encode()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "ckpttools", "logs", "-", "--json"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
    assert proc.stdin is not None
    for i in range(0, len(data), 97):
        proc.stdin.write(data[i : i + 97])
        proc.stdin.flush()
        time.sleep(0.002)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    got = json.loads(out)
    assert [s["accept_length"] for s in got["segments"]] == pytest.approx([4.0, 1.0, 4.0])
    assert got["segments"][2]["drafter"]["digest"] == digest(0xD2)


def test_verify_reads_the_servers_log_the_same_way(tmp_path: Path) -> None:
    from ckpttools.cli.render import render_verify
    from ckpttools.measuring.verify import VerifyReport, _read_server_log

    rep = VerifyReport(engine="sglang", url="http://127.0.0.1:1")
    _read_server_log(rep, _write(tmp_path, three_drafters("hook")))
    sl = rep.server_log
    assert sl is not None and sl["segment_count"] == 3
    assert [s["accept_length"] for s in sl["segments"]] == pytest.approx([4.0, 1.0, 4.0])
    assert sl["segments"][2]["drafter"]["digest"] == digest(0xD2) and "windows" not in sl["segments"][0]
    text = render_verify(rep)
    assert "split at each weight update: 3 segments" in text and "00000000000000d2" in text
    rep = VerifyReport(engine="vllm", url="http://127.0.0.1:1")
    _read_server_log(rep, _write(tmp_path, "\n".join([vllm_spec(2.0), vllm_access("/collective_rpc"), vllm_spec(3.0)])))
    assert rep.server_log is not None and [s["accept_length"] for s in rep.server_log["segments"]] == [2.0, 3.0]


@pytest.mark.parametrize(
    "line, got",
    [
        (hook("/a b/c.safetensors", digest(1)), ("/a b/c.safetensors", digest(1), 0, 1, "replaced")),
        (hook("/r/\u00e9\"q\\", digest(2), 1, 2, "none", sgl_prefix(" DP0 TP1")), ("/r/\u00e9\"q\\", digest(2), 1, 2, "none")),
        (hook("/r", digest(3), prefix="\x1b[1;36m(Worker_TP0 pid=7) \x1b[0;0mINFO 12-01 08:54:20 \x1b[0m[ckpt_swap.py:80] "),
         ("/r", digest(3), 0, 1, "replaced")),
        (hook("/r", digest(3), prefix="(EngineCore_DP0 pid=7) ") + "\r", ("/r", digest(3), 0, 1, "replaced")),
        (hook("/r", "0123456789ABCDEF"), "not in the hook's format"),
        (hook("/r", digest(1)).replace("world=1", "world=0"), "not in the hook's format"),
        (hook("/r", digest(1), 3, 3), "rank 3 of a world of 3"),
        (hook("", digest(1)), "not in the hook's format"),
        (hook("/r\u2028x", digest(1)), "its path holds control characters"),
        (hook("/r", digest(1)) + " extra", "not in the hook's format"),
        ("echo " + hook("/r", digest(1)), None),
        (sgl_prefix() + "Receive: " + hook("/r", digest(1)), None),
    ],
)  # fmt: skip
def test_the_hooks_line(line: str, got: object) -> None:
    from ckpttools.engines import logs_formats as F

    h = F.parse_hook(line.encode())
    assert (tuple(h) if isinstance(h, F.Hook) else h) == got


def test_the_ranks_maps_and_status_of_a_swap(tmp_path: Path) -> None:
    lines = [START, dec(4.0), hook("/d/a", digest(9), 0, 2, "replaced"), hook("/d/a", digest(9), 1, 2, "none")]
    lines += [sgl_access("/update_weights_from_tensor", 400), dec(1.0)]  # the swap's request failed after the hook
    r = read_logs([_write(tmp_path, "\n".join(lines) + "\n")])
    d = r.segments[1]["drafter"]
    assert (d["ranks"], d["world"], d["maps"]) == (2, 2, "replaced/none") and r.segments[1]["event_status"] == 400
    assert r.segments[1]["event_endpoints"] == ["/update_weights_from_tensor"] and "400" in r.segments[1]["verdict"]


def test_segments_across_the_files_of_a_rotated_log(tmp_path: Path) -> None:
    a = _write(tmp_path, START + "\n" + dec(4.0) + "\n", "s.log.1")
    b = _write(tmp_path, "\n".join([dec(4.0), sgl_access("/update_weights_from_tensor"), dec(1.0)]) + "\n", "s.log")
    r = read_logs([a, b])
    s0, s1 = r.segments
    assert (s0["file"], s0["first_line"], s0["last_file"], s0["last_line"]) == (a, 1, b, 1) and s0["window_count"] == 2
    assert (s1["file"], s1["first_line"], s1["last_file"], s1["last_line"]) == (b, 2, b, 3)
    c = _write(tmp_path, sgl_access("/update_weights_from_tensor") + "\n" + dec(1.0) + "\n", "s.log.0")
    s0, s1 = read_logs(
        [a, c]
    ).segments  # the split on a file's first line: the segment before ends with the file before
    assert (s0["last_file"], s0["last_line"]) == (a, 2) and (s1["file"], s1["first_line"]) == (c, 1)
