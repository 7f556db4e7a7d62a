"""Hostile logs for ``ckpt logs``, by the root causes of issue 31 ("the held-out classes at zero"):

- ``logs-regex-``: lines that made a pattern backtrack (1 MiB of what it repeats) and a user's
  ``--pattern`` that backtracks: each read in bounded time;
- ``logs-num-``: figures that are not what they claim (``1_5``, floats and 2^63 as counts, a
  1,000-entry position list, an accept length of 1001, ``#running-req: 1e308``, ``"out": null``):
  each skipped and counted, never read, never a traceback, never a NaN with exit 0;
- ``logs-bound-``: 20,000 server starts: the report lists 32 runs and counts the rest;
- ``logs-gz-``: gzip known by its magic bytes, whatever the name.
"""

from __future__ import annotations

import gzip
import json

from tests.corpus import Case, write
from tests.corpus_logs import DEC, GOOD, VLLM

MIB = 1 << 20
ONE = "[2026-11-30 10:46:40] server_args=ServerArgs(model_path='t', speculative_num_steps=3)\n"


def _long(unit: bytes) -> bytes:
    """A line of ``unit`` repeated to just under ckpt logs' longest line (1 MiB), then a good line."""
    return unit * ((MIB - 1) // len(unit)) + b"\n" + GOOD.encode()


def _req(steps: int, acc: int, out: object = None) -> str:
    meta = {"completion_tokens": steps + acc, "spec_verify_ct": steps, "spec_num_correct_drafts": acc}
    body = {"event": "request.finished", "rid": "a", "out": {"meta_info": meta} if out is None else out}
    return "[2026-11-30 10:00:00] " + json.dumps(body) + "\n"


def _vllm(acc: str = "10", drafted: str = "30", pos: str = "1.000, 0.000, 0.000") -> str:
    return VLLM.format(acc=acc).replace("Drafted: 30 ", f"Drafted: {drafted} ").replace("1.000, 0.000, 0.000", pos)


def _starts(n: int) -> bytes:
    lines = []
    for i in range(n):
        t = f"2026-11-30 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        lines.append(f"[{t}] server_args=ServerArgs(model_path='t')")
        lines.append(DEC.format(al=f"{1 + i % 300 / 100:.2f}", rate="0.50").replace("10:46:41", t[11:]).rstrip("\n"))
    return ("\n".join(lines) + "\n").encode()


def logs_hostile_cases() -> list[Case]:
    s = ["logs", "s.log"]
    tps = ["--convention", "tokens-per-step"]
    ok = "accept length 4.00"
    out = [
        # ---- patterns that backtracked: 1 MiB of what they repeat, then a good line
        Case("logs-regex-vllm-prefix-1mib", s, 0, write("s.log", _long(b"\x1b[0m")), stdout_has=ok),
        Case(
            "logs-regex-decode-1mib",
            s,
            0,
            write("s.log", _long(b"Decode batch, #running-req: 1, accept len: 1, accept rate: 1, ")),
            stdout_has=ok,
        ),  # fmt: skip
        Case("logs-regex-load-1mib", s, 0, write("s.log", _long(b"Load weight end. ")), stdout_has=ok),
        Case(
            "logs-regex-sgl-rank-tags-1mib",
            s,
            0,
            write("s.log", b"[2026-11-30 10:46:40" + _long(b" TP0")),
            stdout_has=ok,
        ),  # fmt: skip
        Case(
            "logs-regex-spec-1mib",
            s,
            0,
            write("s.log", _long(b"SpecDecoding metrics: Mean acceptance length: 1, ")),
            stdout_has=ok,
        ),  # fmt: skip
        Case(
            "logs-regex-graph-1mib",
            s,
            0,
            write("s.log", b"Decode batch, #running-req: 1, accept len: 1, accept rate: 1, " + _long(b" graph: ")),
            stdout_has=ok,
        ),  # fmt: skip
        # ---- the user's pattern: refused when it backtracks on line after line; long lines not offered
        Case(
            "logs-regex-pattern-exponential",
            ["logs", "p.log", "--pattern", r"^(?P<accept_len>(?:a+)+)$", *tps],
            2,
            write("p.log", (b"a" * 40 + b"!\n") * 100),
            stderr_has="ran past its budget",
        ),  # fmt: skip
        Case(
            "logs-regex-pattern-one-slow-line",
            ["logs", "p.log", "--pattern", r"^(?:a+)+$|len: (?P<accept_len>\S+)", *tps],
            0,
            write("p.log", b"len: 2.5\n" + b"a" * 40 + b"!\nlen: 3.5\n"),
            stdout_has="1 lines the pattern did not finish within its budget",
        ),  # fmt: skip
        Case(
            "logs-regex-pattern-1mib-line",
            ["logs", "p.log", "--pattern", r"(?:a|a)*(?:a|a)*b|len: (?P<accept_len>\S+)", *tps],
            0,
            write("p.log", b"a" * (MIB - 1) + b"\nlen: 3.5\n"),
            stdout_has="not offered to the pattern",
        ),  # fmt: skip
        # ---- figures that are not what they claim
        Case(
            "logs-num-underscore",
            s,
            3,
            write("s.log", DEC.format(al="1_5", rate="0.50")),
            stderr_has="accept len not a decimal number",
        ),  # fmt: skip
        Case("logs-num-unicode-digits", s, 3, write("s.log", DEC.format(al="٣.٥", rate="0.50"))),
        Case("logs-num-exponent", s, 3, write("s.log", DEC.format(al="4e0", rate="1.00"))),
        Case("logs-num-accept-1001", s, 0, write("s.log", DEC.format(al="1001.00", rate="1.00") + GOOD), stdout_has=ok),
        Case(
            "logs-num-above-draft-steps",
            s,
            0,
            write("s.log", ONE + DEC.format(al="4.50", rate="1.00") + GOOD),
            stdout_has="1 Decode batch line with impossible figures (accept len outside [1, 4]",
        ),  # fmt: skip
        Case(
            "logs-num-running-1e308",
            s,
            0,
            write("s.log", GOOD.replace("#running-req: 1,", "#running-req: 1e308,") + GOOD),
            stdout_has=ok,
        ),  # fmt: skip
        Case(
            "logs-num-running-past-2p24",
            s,
            0,
            write(
                "s.log",
                GOOD.replace("#running-req: 1,", "#running-req: 16777217,") + DEC.format(al="2.00", rate="0.33"),
            ),
            stdout_has="accept length 2.00",
        ),  # fmt: skip
        Case("logs-num-count-float", s, 3, write("s.log", _vllm(acc="10.0")), stderr_has="accepted not an integer"),
        Case("logs-num-count-2p63", s, 3, write("s.log", _vllm(acc=str(2**63), drafted=str(2**63 + 3)))),
        Case("logs-num-positions-1000", s, 3, write("s.log", _vllm(pos=", ".join(["0.010"] * 1000)))),
        Case(
            "logs-num-positions-65",
            s,
            3,
            write("s.log", _vllm(drafted="65", acc="1", pos=", ".join(["0.015"] * 65))),
            stderr_has="more than 64",
        ),  # fmt: skip
        Case("logs-num-request-1001", s, 0, write("s.log", _req(10, 30) * 10 + _req(1, 1000)), stdout_has=ok),
        Case("logs-num-request-2p63", s, 0, write("s.log", _req(10, 30) + _req(2**63, 0)), stdout_has=ok),
        Case(
            "logs-num-request-float-count",
            s,
            0,
            write("s.log", _req(10, 30) + _req(10, 30).replace('"spec_verify_ct": 10', '"spec_verify_ct": 10.0')),
            stdout_has=ok,
        ),  # fmt: skip
        Case(
            "logs-num-request-out-null",
            s,
            3,
            write("s.log", '[2026-11-30 10:00:00] {"event": "request.finished", "rid": "a", "out": null}\n'),
            stderr_has="request line unreadable",
        ),  # fmt: skip
        Case("logs-num-request-out-list", s, 0, write("s.log", _req(10, 30, out=[1, 2]) + _req(10, 30)), stdout_has=ok),
        Case(
            "logs-num-request-histogram-1000",
            s,
            0,
            write(
                "s.log",
                _req(10, 30).replace(
                    '"spec_num_correct_drafts"',
                    '"spec_accept_histogram": ' + json.dumps([1] * 1000) + ', "spec_num_correct_drafts"',
                )
                + _req(10, 30),
            ),
            stdout_has=ok,
        ),  # fmt: skip
        # ---- bounded: 20,000 server starts
        Case(
            "logs-bound-20000-starts",
            s,
            0,
            write("s.log", _starts(20000)),
            stdout_has="... runs 16 to 19983 not listed (20000 runs in all)",
        ),  # fmt: skip
        Case(
            "logs-bound-20000-starts-json",
            [*s, "--json"],
            0,
            write("s.log", _starts(20000)),
            stdout_has='"run_count": 20000',
        ),  # fmt: skip
        Case(
            "logs-bound-many-pids",
            s,
            0,
            write("s.log", "".join(_vllm().replace("pid=41", f"pid={i}") for i in range(5000))),
            stdout_has="windows from two processes",
        ),  # fmt: skip
        # ---- gzip by its magic bytes
        Case("logs-gz-sniffed", s, 0, write("s.log", gzip.compress(GOOD.encode())), stdout_has=ok),
        Case("logs-gz-sniffed-truncated", s, 0, write("s.log", gzip.compress(GOOD.encode() * 50)[:-12]), stdout_has=ok),
        Case("logs-gz-sniffed-damaged", s, 2, write("s.log", b"\x1f\x8b\x08\x00garbage" * 10)),
        Case("logs-gz-magic-only", s, 3, write("s.log", b"\x1f\x8b")),
        Case("logs-gz-sniffed-twice", s, 3, write("s.log", gzip.compress(gzip.compress(GOOD.encode())))),  # once only
    ]
    return out
