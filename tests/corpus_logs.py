"""Hostile server logs for ``ckpt logs`` (and ``verify --log`` read with --host), each met by
the real CLI in a subprocess: one error line at most, inputs unchanged, no hang.

Exit codes: a log that holds figures gives 0 (1 below --min-accept-len); a readable log with
no figures, or whose every figure is impossible, measured nothing (3); a log that cannot
be read, or a usage error, is 2."""

from __future__ import annotations

import gzip
import os

from tests.corpus import Case, both, write

DEC = (
    "[2026-11-30 10:46:41] Decode batch, #running-req: 1, #token: 52, token usage: 0.00, accept len: {al}, "
    "accept rate: {rate}, cuda graph: False, gen throughput (token/s): 0.65, #queue-req: 0\n"
)
GOOD = DEC.format(al="4.00", rate="1.00")
VLLM = (
    "(APIServer pid=41) INFO 12-01 08:54:20 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.00, "
    "Accepted throughput: 1.00 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: {acc} tokens, Drafted: 30 "
    "tokens, Per-position acceptance rate: 1.000, 0.000, 0.000, Avg Draft acceptance rate: 33.3%\n"
)
PROF = "Accept len: 0.58 EAGLE3_PROF (6400 cycles, 3688 tok, no sync)\n"


def _log(data: bytes | str, name: str = "s.log") -> object:
    return write(name, data)


def logs_cases() -> list[Case]:
    g = _log(GOOD)
    rx = r"\((?P<cycles>\d+) cycles, (?P<tokens>\d+) tok"
    out = [
        Case("logs-ok", ["logs", "s.log"], 0, g, stdout_has="accept length 4.00"),
        Case("logs-ok-json", ["logs", "s.log", "--json", "--show", "3"], 0, g, stdout_has='"accept_length": 4.0'),
        Case("logs-bar-pass", ["logs", "s.log", "--min-accept-len", "3"], 0, g),
        Case("logs-bar-fail", ["logs", "s.log", "--min-accept-len", "4.5"], 1, g),
        Case("logs-bar-out-of-range", ["logs", "s.log", "--min-accept-len", "0.5"], 2, g),
        Case("logs-bar-nan", ["logs", "s.log", "--min-accept-len", "nan"], 2, g),
        Case("logs-show-negative", ["logs", "s.log", "--show", "-1"], 2, g),
        Case("logs-missing", ["logs", "nope.log"], 2),
        Case("logs-no-args", ["logs"], 2),
        Case("logs-directory", ["logs", "dir"], 2, lambda d, b: (d / "dir").mkdir()),
        Case("logs-fifo", ["logs", "f.log"], 2, lambda d, b: os.mkfifo(d / "f.log")),
        Case("logs-empty", ["logs", "s.log"], 3, _log(b"")),
        Case("logs-stdin-empty", ["logs", "-"], 3),
        Case("logs-binary", ["logs", "s.log"], 3, _log(bytes(range(256)) * 4000)),
        Case("logs-invalid-utf8-and-good", ["logs", "s.log"], 0, _log(b"\xff\xfe\xc3(\n" + GOOD.encode())),
        Case("logs-long-line", ["logs", "s.log"], 0, _log(b"y" * (5 << 20) + b"\n" + GOOD.encode())),
        Case("logs-long-line-no-newline", ["logs", "s.log"], 3, _log(b"z" * (9 << 20))),
        Case("logs-accept-1001", ["logs", "s.log"], 3, _log(DEC.format(al="1001.00", rate="1.00"))),
        Case("logs-accept-nan", ["logs", "s.log"], 3, _log(DEC.format(al="nan", rate="1.00"))),
        Case("logs-negative-running", ["logs", "s.log"], 3, _log(GOOD.replace("#running-req: 1", "#running-req: -4"))),
        Case("logs-vllm-more-accepted", ["logs", "s.log"], 3, _log(VLLM.format(acc=31))),
        Case("logs-vllm-negative", ["logs", "s.log"], 3, _log(VLLM.format(acc=-3))),
        Case("logs-vllm-ok", ["logs", "s.log"], 0, _log(VLLM.format(acc=10)), stdout_has="2.00"),
        Case("logs-both-engines", ["logs", "s.log"], 2, _log(GOOD + VLLM.format(acc=10))),
        Case("logs-gz-ok", ["logs", "s.log.gz"], 0, _log(gzip.compress(GOOD.encode()), "s.log.gz")),
        Case("logs-gz-damaged", ["logs", "s.log.gz"], 2, _log(b"\x1f\x8b\x08\x00garbage" * 10, "s.log.gz")),
        Case("logs-gz-not-gzip", ["logs", "s.log.gz"], 2, _log(GOOD, "s.log.gz")),
        Case("logs-gz-truncated", ["logs", "s.log.gz"], 0, _log(gzip.compress(GOOD.encode() * 50)[:-12], "s.log.gz")),
        Case(
            "logs-pattern-ok",
            ["logs", "p.log", "--pattern", rx, "--convention", "accepted-per-step"],
            0,
            _log(PROF, "p.log"),
        ),
        Case(
            "logs-pattern-not-regex",
            ["logs", "p.log", "--pattern", "(unclosed", "--convention", "tokens-per-step"],
            2,
            _log(PROF, "p.log"),
        ),
        Case(
            "logs-pattern-no-groups",
            ["logs", "p.log", "--pattern", "Accept len", "--convention", "tokens-per-step"],
            2,
            _log(PROF, "p.log"),
        ),
        Case("logs-pattern-no-convention", ["logs", "p.log", "--pattern", rx], 2, _log(PROF, "p.log")),
        Case("logs-convention-bad", ["logs", "p.log", "--convention", "bogus"], 2, _log(PROF, "p.log")),
        Case("logs-plot-on-log", ["logs", "s.log", "--plot", "s.log"], 2, g),
        Case("logs-plot-in-dir-of-log", ["logs", "d/s.log", "--plot", "d"], 2, _log(GOOD, "d/s.log")),
        Case("logs-two-files", ["logs", "a.log", "b.log"], 0, both(_log(GOOD, "a.log"), _log(GOOD, "b.log"))),
        Case(
            "logs-crash",
            ["logs", "s.log"],
            0,
            _log(
                GOOD + "[2026-11-30 10:46:42] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "x.py", line 1\nAssertionError: captured 1 of 3 aux hidden states\n'
            ),  # fmt: skip
            stdout_has="the server died: AssertionError: captured 1 of 3",
        ),
        Case(
            "logs-interleaved",
            ["logs", "s.log"],
            0,
            _log(GOOD + GOOD.replace("10:46:41", "09:00:00") + GOOD),
            stdout_has="interleaved",
        ),
    ]
    return out
