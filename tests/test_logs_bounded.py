"""``ckpt logs`` keeps runs, events and windows bounded, with counts beyond the limits: a log
of many server starts gives a report of bounded size (issue 31: a million starts took 2.1 GB and
printed 320 MB). The 1 GB figure is benchmarks/bench_logs.py --starts 1000000 (README)."""

from __future__ import annotations

from pathlib import Path

from ckpttools.measuring import logs
from ckpttools.measuring.logs import read_logs
from ckpttools.measuring.logs_windows import MAX_WINDOWS


def _log(tmp_path: Path, starts: int, die_every: int = 0) -> str:
    lines = []
    for i in range(starts):
        t = f"2026-11-30 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        lines.append(f"[{t}] server_args=ServerArgs(model_path='t', speculative_num_steps=3)")
        lines.append(
            f"[{t}] Decode batch, #running-req: 1, #token: 52, token usage: 0.00, accept len: {1 + i % 300 / 100:.2f}, "
            "accept rate: 0.50, cuda graph: False, gen throughput (token/s): 0.65, #queue-req: 0"
        )
        if die_every and i % die_every == die_every - 1:
            lines += [f"[{t}] Scheduler hit an exception: Traceback (most recent call last):", '  File "x.py", line 1',
                      f"AssertionError: run {i} died"]  # fmt: skip
    p = tmp_path / f"starts-{starts}.log"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _reports(path: str) -> tuple[dict, bytes, str]:
    """The report, its --json bytes and its text, as the CLI prints them."""
    import orjson

    from ckpttools.cli.render import render_logs

    r = read_logs([path])
    return r.to_dict(), orjson.dumps(r.to_dict(), option=orjson.OPT_INDENT_2), render_logs(r, show=10)


def test_20000_starts_give_a_report_of_bounded_size(tmp_path: Path) -> None:
    _, small, _ = _reports(_log(tmp_path, 2000))
    rep, big, text = _reports(_log(tmp_path, 20000))
    assert rep["run_count"] == 20000 and len(rep["runs"]) == logs.MAX_RUNS
    assert [r["index"] for r in rep["runs"]] == list(range(16)) + list(range(19984, 20000))
    assert len(rep["events"]) == logs.MAX_EVENTS and rep["event_counts"]["restart"] == 19999
    assert rep["window_count"] == 20000 and len(rep["windows"]) < MAX_WINDOWS
    assert len(big) < 1 << 20 and len(big) < 1.2 * len(small), (len(small), len(big))
    assert len(text) < 20_000 and "... runs 16 to 19983 not listed (20000 runs in all)" in text


def test_the_last_error_is_named_past_the_event_limit(tmp_path: Path) -> None:
    r = read_logs([_log(tmp_path, 3000, die_every=1000)])
    assert r.runs[-1]["ended_by"] == "AssertionError: run 2999 died"
    assert r.verdict.endswith("the server died: AssertionError: run 2999 died")
    assert r.event_counts["error"] == 3 and "exception" not in r.event_counts
