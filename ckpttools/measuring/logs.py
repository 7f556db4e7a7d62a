"""``ckpt logs``: what SGLang and vLLM server logs say about speculative decoding.

The line formats, each with the engine source line that writes it, are listed in
:mod:`ckpttools.engines.logs_formats`. A chunk's SGLang decode lines are read at once, the
rest line by line (:mod:`ckpttools.measuring.logs_fast`); the figures are the same as reading every
line alone (``FAST = False``), to the bit.

Conventions, labelled as verify labels them: accept length = tokens per verify step =
accepted drafts + 1 (SGLang's "accept len", vLLM's "Mean acceptance length"); accepted
drafts per step = accept length - 1.

How windows merge:

- vLLM's ``SpecDecoding metrics`` lines carry counts (accepted and drafted tokens; the
  drafts are drafted tokens over the per-position list's length), so the total is exact:
  1 + sum(accepted) / sum(drafts).
- SGLang's ``Decode batch`` lines carry a ratio only. Each is the accepted tokens over the
  verify steps of every running request during the last decode_log_interval forward
  passes, so a window holds about interval x batch size verify steps; the merge weights each
  window by its ``#running-req`` (at least 1), the one batch size the line gives. It is an
  estimate, labelled so.
- SGLang's ``--log-requests-format json`` lines carry each request's counts: those give the
  exact pooled figure and a 95% interval over requests, as verify computes them (warmup
  requests left out).
- ``--pattern`` lines: with counts (tokens and cycles, accepted and drafts) exact; with
  ``accept_len`` only, an estimate weighting each line alike.

A log is untrusted: it is read streaming in chunks (memory bounded by the chunk, the
longest line kept, the windows kept, the runs and events kept and the fast path's queue; what
is beyond the limits is summarised: merged windows, counts of runs and of events by kind),
lines over :data:`MAX_LINE` bytes are skipped, invalid UTF-8 is replaced, gzip is known by its
magic bytes (or a ``.gz`` name), every pattern runs in time linear in the line, and every figure
is read by :mod:`ckpttools.io.figures`: decimal text only, each kind within its range (counts
integers, accept length in [1, draft steps + 1], rates in [0, 1]). A line whose figures break
the rules is skipped, counted under its reason (``skipped``; ``skipped_lines`` in all).

A ``--pattern`` is the user's own regular expression, which can take exponential time: it is
offered only lines up to :data:`PATTERN_LINE` bytes, and each line gets
:data:`PATTERN_BUDGET` CPU seconds (a timer, in the main thread); a line over budget is skipped
and counted, and after :data:`PATTERN_STRIKES` of them the pattern is refused.
"""

from __future__ import annotations

import copy
import gzip
import os
import re
import signal
import sys
import threading
import zlib
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import IO, Any

from ckpttools.errors import ConfigError, opt
from ckpttools.io import figures as FIG
from ckpttools.measuring.verdict import verdict_exit_code
from ckpttools.measuring import logs_fast
from ckpttools.engines import logs_formats as F
from ckpttools.measuring.logs_segments import RequestPool, Segments
from ckpttools.measuring.logs_windows import MAX_WINDOWS, Kept, State, Sums

__all__ = ["LogsReport", "read_logs", "MAX_LINE", "MAX_WINDOWS", "MAX_RUNS", "MAX_EVENTS", "CONVENTIONS"]

#: a line longer than this is skipped (counted), never held whole
MAX_LINE = 1 << 20
#: the most accept length a server can report (64 draft steps, as the CLI bounds them, + 1)
MAX_ACCEPT_LEN = FIG.length_bound(None)
#: a line longer than this is not offered to --pattern (it is read as any other line)
PATTERN_LINE = 16 << 10
#: CPU seconds --pattern may take on one line (given up after one to two of them)
PATTERN_BUDGET = 0.1
#: lines over budget after which --pattern is refused
PATTERN_STRIKES = 3
_CHUNK = 4 << 20
#: read blocks of whole lines the fast way (:mod:`ckpttools.measuring.logs_fast`); False: each line alone
FAST = True
CONVENTIONS = ("tokens-per-step", "accepted-per-step")
LABEL = "tokens per verify step (accepted drafts + 1), the engines' convention"
SCHEMA_VERSION = 1


@dataclass
class LogsReport:
    """What ``ckpt logs`` read; ``to_dict`` is the JSON output (schemas/logs-report.schema.json)."""

    files: list[str]
    engine: str | None = None
    release: str | None = None
    release_source: str | None = None
    convention: str = LABEL
    source: str | None = None
    accept_length: float | None = None
    accepted_drafts_per_step: float | None = None
    exact: bool = False
    weighting: str | None = None
    accept_length_ci95: list[float] | None = None
    per_request: dict[str, Any] | None = None
    windows_accept_length: float | None = None
    per_position_acceptance: list[float] | None = None
    window_count: int = 0
    window_stride: int = 1
    windows: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_examples: list[str] = field(default_factory=list)
    lines: int = 0
    bytes: int = 0
    min_accept_len: float | None = None
    passed: bool | None = None
    verdict: str = ""
    run_count: int = 0
    event_counts: dict[str, int] = field(default_factory=dict)
    skipped_lines: int = 0
    #: the log split at every weight update (:mod:`ckpttools.measuring.logs_segments`): one segment where
    #: there is none; ``segment_count`` counts them all where more than MAX_SEGMENTS are
    segments: list[dict[str, Any]] = field(default_factory=list)
    segment_count: int = 0
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """As ``dataclasses.asdict`` makes it, 7x faster for a report of 20,000 segments (0.10 s, not
        0.77): its fields hold JSON values, copied here without a ``deepcopy`` of each one."""
        return {f.name: _copied(getattr(self, f.name)) for f in fields(self)}

    @property
    def exit_code(self) -> int:
        return verdict_exit_code(self.accept_length, self.passed)

    def summary(self) -> dict[str, Any]:
        """The lifetime figures verify places beside its own (``VerifyReport.server_log``)."""
        keys: tuple[str, ...] = (
            "files",
            "engine",
            "release",
            "source",
            "accept_length",
            "accepted_drafts_per_step",
            "exact",
        )
        keys += ("weighting", "accept_length_ci95", "window_count", "per_position_acceptance", "skipped", "verdict")
        out = {k: getattr(self, k) for k in keys}
        kinds = ("error", "restart", "warmup", "weight_update", "swap")
        out["events"] = [e for e in self.events if e["kind"] in kinds][:20]
        out["segment_count"] = self.segment_count
        keys = ("index", "first_line", "last_line", "event", "event_status", "drafter", "accept_length", "exact")
        keys += ("window_count", "request_count", "passed", "verdict")
        segs = self.segments if len(self.segments) <= 40 else self.segments[:20] + self.segments[-20:]
        out["segments"] = [{k: s[k] for k in keys} for s in segs]
        return out


# ----------------------------------------------------------------------------- reading
GZIP_MAGIC = b"\x1f\x8b"


def _open(path: str) -> tuple[IO[bytes], list[IO[bytes]], str]:
    """A binary stream of the log (``-``: stdin), decompressed as read where it is gzip: where it
    starts with gzip's magic bytes, whatever its name, or is named ``.gz`` (then data that is not
    gzip is an error, not text); the streams to close after; its name."""
    if path == "-":
        raw: Any = sys.stdin.buffer
        where, own = "<stdin>", []
        head = _peek(raw)
    else:
        from ckpttools.io.fsutil import open_regular

        p = Path(path)
        if not os.path.lexists(p):
            raise ConfigError(f"{p}: no such log file", path=p, hint="give a server log file, or - for stdin")
        raw = os.fdopen(open_regular(p), "rb")
        where, own = str(p), [raw]
        try:  # (read beside the stream: its buffering, and so its chunks, stay as they were)
            head = os.pread(raw.fileno(), 2, 0)
        except OSError as e:
            raw.close()
            raise ConfigError(f"{p}: cannot be read ({e.strerror})", path=p) from None
    if head == GZIP_MAGIC or where.endswith(".gz"):
        gz = gzip.GzipFile(fileobj=raw, mode="rb")
        return gz, [gz, *own], where  # type: ignore[list-item,return-value]
    return raw, own, where


def _peek(f: Any) -> bytes:
    """The first two bytes of a stream, left to be read: looked at where it can seek or peek."""
    try:
        if f.seekable():
            at = f.tell()
            head = f.read(2)
            f.seek(at)
            return bytes(head)
        if hasattr(f, "peek"):
            return bytes(f.peek(2)[:2])
    except OSError:
        pass
    return b""


def _chunks(f: IO[bytes], where: str, rep: LogsReport) -> Iterator[bytes]:
    """The stream in chunks; a damaged gzip is one error, a truncated one the end of the log."""
    while True:
        try:
            b = f.read1(_CHUNK) if hasattr(f, "read1") else f.read(_CHUNK)
        except EOFError:
            _skip(rep, "gzip stream truncated (the rest of the file)", f"{where}: compressed data ends early", False)
            return
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise ConfigError(
                f"{where}: damaged gzip data after {rep.bytes} bytes ({e})",
                path=where,
                hint="give the log uncompressed, or a whole .gz",
            ) from None
        if not b:
            return
        rep.bytes += len(b)
        yield b


#: whole lines read at once: ``blob[lo:hi]``, each line ending in a newline
Block = tuple[bytes, int, int]


def _lines(f: IO[bytes], where: str, rep: LogsReport) -> Generator[tuple[int, Block], int, None]:
    """(first line number, block of whole lines) per chunk: the line the last chunk left over,
    completed, then the rest up to the chunk's last newline; where a line is over MAX_LINE, the
    chunk's lines joined again with that line skipped (empty), never held whole. The reader sends
    back how many lines it read in a block (it counts them as it reads)."""
    carry, long_line, n = b"", False, 1
    for chunk in _chunks(f, where, rep):
        cut = None if long_line else _whole(carry, chunk)
        if cut is not None:
            head, lo, hi = cut
            if hi - lo < 1 << 20:  # a small chunk (a pipe's): one block, the copy cheaper than two
                n += yield n, (head + chunk[lo:hi], 0, len(head) + hi - lo)
            else:
                n += yield n, (head, 0, len(head))
                n += yield n, (chunk, lo, hi)
            carry = chunk[hi:]
            continue
        parts = chunk.split(b"\n")
        if long_line:
            if len(parts) == 1:
                continue
            parts[0], long_line = b"", False
            _skip(rep, f"line longer than {MAX_LINE} bytes", f"{where}:{n}")
            n += 1
            parts = parts[1:]
            carry = b""
        parts[0] = carry + parts[0]
        carry = parts.pop()
        if len(carry) > MAX_LINE:
            carry, long_line = b"", True
        if parts and max(map(len, parts)) > MAX_LINE:
            for i, part in enumerate(parts):
                if len(part) > MAX_LINE:
                    _skip(rep, f"line longer than {MAX_LINE} bytes", f"{where}:{n + i}")
                    parts[i] = b""
        if parts:
            joined = b"\n".join(parts) + b"\n"
            n += yield n, (joined, 0, len(joined))
    if long_line:
        _skip(rep, f"line longer than {MAX_LINE} bytes", f"{where}:{n}")
    elif carry:
        n += yield n, (carry + b"\n", 0, len(carry) + 1)
    rep.lines += n - 1


def _whole(carry: bytes, chunk: bytes) -> tuple[bytes, int, int] | None:
    """The first line ``carry`` + the chunk's start (its newline included), and where the whole
    lines after it start and end in the chunk; None when the chunk has no newline or a line there
    (or the one left over) is over MAX_LINE."""
    last = chunk.rfind(b"\n")
    first = chunk.find(b"\n")
    if last < 0 or len(carry) + first > MAX_LINE or len(chunk) - last - 1 > MAX_LINE:
        return None
    p = first + 1
    while last - p > MAX_LINE:  # each step: the lines that end in the next MAX_LINE + 1 bytes
        q = chunk.rfind(b"\n", p, p + MAX_LINE + 1)
        if q < 0:
            return None
        p = q + 1
    return carry + chunk[: first + 1], first + 1, last + 1


def _copied(v: Any) -> Any:
    """``v`` copied as ``dataclasses.asdict`` copies a field's value: dicts and lists anew, each level,
    str, numbers and None as they are (immutable), a dataclass as its dict, anything else deep-copied."""
    t = type(v)
    if t is dict:
        return {k: _copied(x) for k, x in v.items()}
    if t is list:
        return [_copied(x) for x in v]
    if v is None or t is str or t is int or t is float or t is bool:
        return v
    if is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    return copy.deepcopy(v)


def _skip(rep: LogsReport, why: str, example: str, line: bool = True) -> None:
    """Count ``why`` (``line``: a line skipped, else a thing left out: events past the limit, warmup)."""
    rep.skipped[why] = rep.skipped.get(why, 0) + 1
    rep.skipped_lines += line
    if len(rep.skipped_examples) < 20:
        rep.skipped_examples.append(f"{example}: {why}")


def _text(b: bytes, limit: int = 300) -> str:
    s = b.decode("utf-8", errors="replace").strip()
    cut = len(s) > limit  # cut before the character-by-character pass, which keeps the length
    if cut:
        s = s[: limit - 3]
    if not s.isprintable():  # the pass only where a character needs it (most lines: none)
        s = "".join(c if c.isprintable() else "\ufffd" for c in s)
    return s + "..." if cut else s


# ----------------------------------------------------------------------------- time
_DAYS: dict[bytes, int] = {}


def _day(date: bytes) -> int:
    """Days since 2000-01-01 of YYYY-MM-DD (or MM-DD, placed in 2000: vLLM writes no year)."""
    d = _DAYS.get(date)
    if d is None:
        import datetime as dt

        text = date.decode()
        y, m, dd = (int(x) for x in (text if len(text) > 5 else "2000-" + text).split("-"))
        try:
            d = (dt.date(y, m, dd) - dt.date(2000, 1, 1)).days
        except ValueError:
            d = 0
        if len(_DAYS) < 100_000:
            _DAYS[date] = d
    return d


def _seconds(stamp: bytes) -> int:
    date, _, hms = stamp.partition(b" ")
    return _day(date) * 86400 + int(hms[0:2]) * 3600 + int(hms[3:5]) * 60 + int(hms[6:8])


# ----------------------------------------------------------------------------- requests
class _Requests(RequestPool):
    """Per-request figures (SGLang's request log): the pool's counts, mean, variance and interval,
    with a bounded sample for the percentiles and the acceptance histogram."""

    SAMPLE = 100_000

    def __init__(self) -> None:
        super().__init__()
        self.sample: list[float] = []
        self.hist: list[int] = []
        self.fields: set[str] = set()

    def add(self, r: Any) -> None:
        super().add(r)
        self.fields.add(r.source)
        if len(self.sample) < self.SAMPLE:
            self.sample.append(r.accept_length)
        else:  # a reservoir: every request equally likely to be in the sample
            import random

            j = random.Random(self.n).randrange(self.n)
            if j < self.SAMPLE:
                self.sample[j] = r.accept_length
        for i, c in enumerate(r.histogram or []):
            if i >= len(self.hist):
                self.hist.append(0)
            self.hist[i] += c

    def summary(self) -> tuple[float, list[float] | None, dict[str, Any]]:
        from ckpttools.measuring.verdict import pct as _pct

        ci = self.ci95()
        s = self.sample
        per = {"n": self.n, "mean": self.mean, "min": min(s), "p25": _pct(s, 0.25), "median": _pct(s, 0.5)}
        per |= {"p75": _pct(s, 0.75), "max": max(s), "sampled": len(s) < self.n}
        return 1 + self.acc / self.steps, ci, per


# ----------------------------------------------------------------------------- the parser
_KEYWORDS: dict[bytes, str] = {
    b"server_args=ServerArgs(": "_start",
    b"vLLM server version ": "_start",
    b"Initializing a V1 LLM engine": "_start",
    b"version": "_release",
    b"Load weight end": "_load",
    b"Resolved architecture: ": "_load",
    b"fired up and ready to roll": "_ready",
    b"Starting vLLM server on": "_ready",
    b"Start update_weights": "_weights",
    b"Update engine weights": "_weights",
    b"Update weights end": "_weights",
    b"is greater than the derived context_length": "_context",
    b"Overriding the draft model's max_position_embeddings": "_context",
    b"Traceback (most recent call last)": "_traceback",
    b"out of memory": "_oom",
    b"Received sigquit": "_died",
    b"EngineCore encountered a fatal error": "_died",
    b"EngineCore failed to start": "_died",
    b"hit an exception": "_died",
    b"Avg generation throughput": "_vllm_stats",
    **{k: "_access" for k in F.ACCESS_KEYS},
}
_EVENTS = re.compile(b"|".join(re.escape(k) for k in sorted(_KEYWORDS, key=len, reverse=True)))
#: the most events kept (later ones are counted, by kind, in ``event_counts``)
MAX_EVENTS = 500
#: the runs listed: the first half and the last half of this many (all are counted in ``run_count``)
MAX_RUNS = 32


class _OverBudget(Exception):
    """--pattern ran past its budget on a line."""


class _Budget:
    """A CPU-time budget per line for the user's pattern (``search``). An interval timer
    (ITIMER_VIRTUAL: the process's CPU time) ticks every PATTERN_BUDGET seconds; a tick that finds
    the same line in the pattern as the tick before raises :class:`_OverBudget` in the match
    (Python's ``re`` checks for signals while it matches), so a line is given up after one to two
    budgets. Only in the main thread (where signals are delivered) and where the platform has the
    timer; elsewhere the pattern runs unbounded in time (lines stay bounded by PATTERN_LINE)."""

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted
        self.on = False
        self.seq = self.active = 0
        self.seen = -1
        self.old: Any = None
        self.old_timer: tuple[float, float] = (0.0, 0.0)

    def __enter__(self) -> _Budget:
        if self.wanted and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGVTALRM, self._tick)
            self.old_timer = signal.setitimer(signal.ITIMER_VIRTUAL, PATTERN_BUDGET, PATTERN_BUDGET)
            self.on = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.on:
            signal.setitimer(signal.ITIMER_VIRTUAL, *self.old_timer)
            signal.signal(signal.SIGVTALRM, self.old)
            self.on = False

    def _tick(self, signum: int, frame: Any) -> None:
        a = self.active
        if a and a == self.seen:
            self.active = 0
            raise _OverBudget
        self.seen = a

    def search(self, rx: re.Pattern[bytes], line: bytes) -> re.Match[bytes] | None:
        self.seq += 1
        try:
            self.active = self.seq
            return rx.search(line)
        finally:
            self.active = 0


class _Run:
    def __init__(self, index: int, where: str, line: int, time: str | None) -> None:
        self.info: dict[str, Any] = {"index": index, "file": where, "line": line, "time": time}
        self.info |= {"engine": None, "target_class": None, "drafter_class": None, "ended_by": None}
        self.starts: set[str] = set()
        self.sums = Sums()
        self.loads = 0
        self.load_rank: str | None = None
        self.ready = False
        self.prefill_at: dict[str, Any] | None = None
        self.held: list[Any] = []
        self.last_exc: tuple[int | None, str, str] | None = None  # (event index, kind, text)
        self.alive_after = True
        self.pids: set[str] = set()  # (two at most: a second one is the event)
        self.steps: int | None = None  # draft steps (SGLang's server_args): accept length <= steps + 1
        self.last_t: int | None = None
        self.back = 0


class _Parser:
    """One pass over the logs' lines, keeping sums, a bounded list of windows, events and runs."""

    def __init__(self, rep: LogsReport, pattern: re.Pattern[bytes] | None, kind: str, convention: str | None):
        self.rep, self.pattern, self.kind, self.convention = rep, pattern, kind, convention
        self.kept = Kept()
        self.total = Sums()
        self.req = _Requests()
        self.engines: set[str] = set()
        self.where = ""
        self.run_count = 0
        self.first_runs: list[dict[str, Any]] = []
        self.last_runs: deque[dict[str, Any]] = deque(maxlen=MAX_RUNS // 2)
        self.run = self._new_run(0, None)
        self.in_tb = False
        self.time: str | None = None
        self.vstats: tuple[str | None, float | None, float | None, float | None] | None = None
        self.warmup_requests = 0
        self.n = 0
        self.fastq = logs_fast.Queue()
        self.prefix = logs_fast.Prefixes()
        self.budget = _Budget(pattern is not None)
        self.segments = Segments()

    # ---- bookkeeping
    def _new_run(self, line: int, time: str | None) -> _Run:
        r = _Run(self.run_count, self.where, line, time)
        self.run_count += 1
        return r

    def _keep_run(self, info: dict[str, Any]) -> None:
        (self.first_runs if len(self.first_runs) < MAX_RUNS // 2 else self.last_runs).append(info)

    def _event(self, kind: str, n: int, text: str, **extra: Any) -> int | None:
        counts = self.rep.event_counts
        counts[kind] = counts.get(kind, 0) + 1
        if len(self.rep.events) >= MAX_EVENTS:
            _skip(self.rep, f"events beyond the first {MAX_EVENTS}", f"{self.where}:{n}", False)
            return None
        ev = {"kind": kind, "time": self.time, "file": self.where, "line": n, "run": self.run.info["index"]}
        self.rep.events.append(ev | {"text": text} | extra)
        return len(self.rep.events) - 1

    def _event_body(self, kind: str, n: int, line: bytes, limit: int) -> None:
        """An event whose text is the line after its prefix (not made when no more events are kept)."""
        full = len(self.rep.events) >= MAX_EVENTS
        self._event(kind, n, "" if full else _text(line[line.find(b"] ") + 2 if b"] " in line else 0 :], limit))

    def _stamp(self, line: bytes) -> tuple[str | None, str, str | None]:
        """(engine whose prefix the line has, rank tags or process, level) and the time it sets."""
        m = F.SGL_PREFIX.match(line)
        if m:
            self._clock(m.group(1))
            return "sglang", m.group(2).decode().strip(), None
        m = F.VLLM_PREFIX.match(line)
        if m:
            self._clock(m.group(4))
            return "vllm", f"{(m.group(1) or b'').decode()} {(m.group(2) or b'').decode()}".strip(), m.group(3).decode()
        return None, "", None

    def _clock(self, stamp: bytes) -> None:
        self.time = stamp.decode()
        try:
            t = _seconds(stamp)
        except ValueError:
            return
        self._tick(t)

    def _tick(self, t: int) -> bool:
        """The run's clock at line ``self.n``; True: its time went back."""
        r = self.run
        back = r.last_t is not None and t < r.last_t - 1
        if back:
            r.back += 1
            if r.back == 1:
                self._event(
                    "interleaved", self.n, "time goes backwards: lines of several servers interleave, or a clock moved"
                )
        r.last_t = t if r.last_t is None else max(t, r.last_t)
        return back

    # ---- what the fast path asks (logs_fast.Reader)
    @property
    def in_traceback(self) -> bool:
        return self.in_tb

    @property
    def run_index(self) -> int:
        return int(self.run.info["index"])

    def waiting(self) -> bool:
        r = self.run
        return r.prefill_at is None and not r.ready and bool(r.starts)

    def accept_bound(self) -> float | None:
        return None if self.run.steps is None else float(self.run.steps + 1)

    def drops_rank(self, rank: str) -> bool:
        lr = self.run.load_rank
        return bool(lr is not None and rank and rank != lr and "DP" not in rank)

    def clock(self, n: int, time: str, seconds: int | None) -> bool:
        self.time = time
        if seconds is None:
            return False
        self.n = n
        return self._tick(seconds)

    def went_back(self, count: int) -> None:
        self.run.back += count

    def alive(self) -> None:
        self.run.alive_after = True

    def kept_state(self) -> State:
        return self.kept.state()

    def segment_head_left(self) -> int:
        return self.segments.head_left()

    def segment_tail(self) -> int:
        return self.segments.tail_size()

    # ---- dispatch
    def feed_block(self, n: int, block: Block) -> int:
        """A block of whole lines, the first numbered ``n``: the fast way, unless a pattern is given
        (or FAST is off); returns how many lines."""
        blob, lo, hi = block
        if self.pattern is None and FAST:
            return logs_fast.scan(self, n, blob, lo, hi, _seconds)
        return self.feed_lines(n, blob[lo:hi])

    def feed_lines(self, n: int, text: bytes) -> int:
        """Whole lines (each ending in a newline) one at a time, the first numbered ``n``."""
        self.flush_fast(True)  # the windows the fast path queued come first
        lines = text.split(b"\n")[:-1]
        for i, line in enumerate(lines):
            self.feed(n + i, line)
        return len(lines)

    def flush_fast(self, whole: bool) -> None:
        """The fast path's queued windows into the kept list and the sums (``whole``: every one)."""
        b = self.fastq.take()
        if b is None:
            return
        self.engines.add("sglang")
        self.run.info["engine"] = self.run.info["engine"] or "sglang"
        k = self.kept.add_batch(b, whole)
        if k == 0 and not whole:  # an entry stands for more windows than the queue holds
            k = self.kept.add_batch(b, True)
        self.total.add_batch(b, k)
        self.run.sums.add_batch(b, k)
        self.segments.batch(b, k)
        self.fastq.put_back(b, k)

    def feed(self, n: int, line: bytes) -> None:
        self.n = n
        if self.in_tb and self._tb_line(n, line):
            return
        if self.pattern is not None:
            m = self._user_search(n, line)
            if m is not None:
                self._custom(n, line, m)
                return
        if F.HOOK_KEY in line and self._hook(n, line):
            return
        if b"Decode batch" in line:
            self._decode(n, line)
        elif b"SpecDecoding metrics" in line:
            self._spec(n, line)
        elif b"Prefill batch" in line:
            if self.run.prefill_at is None and not self.run.ready and self.run.starts:
                self._stamp(line)
                self.run.prefill_at = {"time": self.time, "line": n}
        elif b'"request.finished"' in line:
            self._request(n, line)
        else:
            m = _EVENTS.search(line)
            if m is not None:
                getattr(self, _KEYWORDS[m.group(0)])(n, line, m.group(0))

    def _user_search(self, n: int, line: bytes) -> re.Match[bytes] | None:
        """The user's --pattern on a line, within its budget: a line over PATTERN_LINE bytes is not
        offered; one that takes over PATTERN_BUDGET seconds is given up (both counted)."""
        if len(line) > PATTERN_LINE:
            _skip(self.rep, f"lines longer than {PATTERN_LINE} bytes, not offered to the pattern", f"{self.where}:{n}")
            return None
        try:
            return self.budget.search(self.pattern, line)  # type: ignore[arg-type]
        except _OverBudget:
            pass
        why = f"lines the pattern did not finish within its budget ({PATTERN_BUDGET} s of CPU a line)"
        _skip(self.rep, why, f"{self.where}:{n}")
        if self.rep.skipped[why] >= PATTERN_STRIKES:
            raise ConfigError(
                f"{opt('pattern')} ran past its budget on {PATTERN_STRIKES} lines (the last {self.where}:{n}): "
                "it backtracks, taking time that grows fast with the line",
                hint="write it without nested or adjacent repeats that can match the same text, e.g. (a+)+ or .*.*",
            )
        return None

    def _figures(self, n: int, what: str, fields: list[tuple[str, bytes, str]], steps: int | None = None) -> Any:
        """The fields' figures, each read as its kind (:mod:`ckpttools.io.figures`); None, the line
        skipped and counted under the rule it broke, when one is not a figure of its kind."""
        out: list[float] = []
        for name, text, kind in fields:
            try:
                out.append(FIG.read(text, kind, steps=steps))
            except FIG.FigureError as e:
                why = f"{what} with impossible figures ({name} {e.reason})"
                _skip(self.rep, why, f"{self.where}:{n}: {_text(text, 40)!r}")
                return None
        return out

    # ---- windows
    def _window(self, n: int, engine: str | None, rank: str, **fig: Any) -> None:
        """One window, checked: skipped (counted) when its figures cannot be."""
        al = fig["accept_length"]
        try:
            FIG.value(al, "length", steps=self.run.steps)
        except FIG.FigureError as e:
            _skip(self.rep, f"impossible figures (accept length {e.reason})", f"{self.where}:{n}")
            return
        if engine is not None:
            self.engines.add(engine)
            self.run.info["engine"] = self.run.info["engine"] or engine
        w = {"time": self.time, "time_end": None, "file": self.where, "line": n, "run": self.run.info["index"]}
        w |= {"rank": rank or None, "accept_length": al, "accepted_drafts_per_step": al - 1}
        for k in ("accept_rate", "running_requests", "queued_requests", "throughput", "per_position"):
            w[k] = fig.get(k)
        w |= {"accepted": fig.get("accepted"), "drafted": fig.get("drafted"), "weight": fig["weight"]}
        w |= {"exact": fig["exact"], "level": fig.get("level"), "n": 1}
        self.kept.add(w)
        self.total.add(w)
        self.run.sums.add(w)
        self.segments.window(w)
        self.run.alive_after = True

    def _decode(self, n: int, line: bytes) -> None:
        engine, rank, _ = self._stamp(line)
        g = F.parse_decode(line)
        if g is None:
            if b"accept len" in line:
                _skip(self.rep, "Decode batch line not in SGLang's format", f"{self.where}:{n}")
            return
        got = self._figures(n, "Decode batch line", [("#running-req", g[0], "requests"), ("accept len", g[1], "length"),
                            ("accept rate", g[2], "rate"), ("gen throughput", g[4], "throughput"),
                            ("#queue-req", g[5], "requests")], self.run.steps)  # fmt: skip
        if got is None:
            return
        running, al, rate, tput, queued = (float(x) for x in got)
        if self.run.load_rank is not None and rank and rank != self.run.load_rank and "DP" not in rank:
            return  # another tensor-parallel rank's copy of the same window
        self._window(n, engine or "sglang", rank, accept_length=al, accept_rate=rate, running_requests=running,
                     queued_requests=queued, throughput=tput, weight=max(running, 1.0), exact=False)  # fmt: skip

    def _spec(self, n: int, line: bytes) -> None:
        engine, proc, level = self._stamp(line)
        m = F.SPEC.search(line)
        if m is None:
            _skip(self.rep, "SpecDecoding metrics line not in vLLM's format", f"{self.where}:{n}")
            return
        what = "SpecDecoding metrics line"
        try:
            pos = FIG.read_list(m.group(6), "rate")
        except FIG.FigureError as e:
            _skip(self.rep, f"{what} with impossible figures (per-position rate: {e.reason})", f"{self.where}:{n}")
            return
        got = self._figures(n, what, [("accepted", m.group(4), "count"), ("drafted", m.group(5), "count"),
                            ("mean acceptance length", m.group(1), "length")], len(pos))  # fmt: skip
        if got is None:
            return
        acc, drafted, mean = got
        if acc > drafted:
            _skip(self.rep, f"{what} with impossible figures (more accepted than drafted)", f"{self.where}:{n}")
            return
        drafts, exact = self._drafts(mean, acc, drafted, pos)
        if not drafts:
            _skip(self.rep, "a window with no drafts", f"{self.where}:{n}")
            return
        self._pid(proc)
        st = self.vstats if self.vstats and self.vstats[0] == self.time else None
        self._window(n, engine or "vllm", proc, accept_length=1 + acc / drafts, accept_rate=acc / drafted if drafted else None,  # type: ignore[operator]
                     running_requests=st[2] if st else None, queued_requests=st[3] if st else None,
                     throughput=st[1] if st else None, per_position=pos, accepted=int(acc), drafted=int(drafted),  # type: ignore[arg-type]
                     weight=drafts, exact=exact, level=(level or "").lower() or None)  # fmt: skip

    @staticmethod
    def _drafts(mean: float, acc: float, drafted: float, pos: list[float]) -> tuple[float, bool]:
        """The window's drafts: drafted tokens over the drafts' length (the per-position list's),
        exact when that agrees with the logged mean; else accepted over the per-position sum."""
        k = len(pos)
        d = drafted / k
        if d > 0 and d.is_integer() and abs(1 + acc / d - mean) <= 0.0051:
            return d, True
        s = sum(pos)
        return (acc / s, False) if s > 0 else (d, False)

    def _pid(self, proc: str) -> None:
        if not proc:
            return
        if len(self.run.pids) >= 2 or proc in self.run.pids:
            return
        self.run.pids.add(proc)
        if len(self.run.pids) == 2:
            self._event(
                "interleaved", self.n, f"windows from two processes in one run ({', '.join(sorted(self.run.pids))})"
            )

    def _vllm_stats(self, n: int, line: bytes, _: bytes) -> None:
        self._stamp(line)
        m = F.VLLM_STATS.search(line)
        if m is not None:
            got = self._figures(n, "engine stats line", [("generation throughput", m.group(1), "throughput"),
                                ("running", m.group(2), "requests"), ("waiting", m.group(3), "requests")])  # fmt: skip
            tput, running, waiting = (float(x) for x in got) if got is not None else (None, None, None)
            self.vstats = (self.time, tput, running, waiting)

    # ---- per-request lines and custom lines
    def _request(self, n: int, line: bytes) -> None:
        """A finished request of SGLang's --log-requests-format json: its meta_info's counts."""
        from ckpttools.engines.http import RequestResult, check_figures, parse_sglang_meta
        from ckpttools.errors import CkptError
        from ckpttools.io.inputs import loads_json

        engine, _, _ = self._stamp(line)
        start = line.find(b"{")
        try:
            obj = loads_json(line[start:] if start >= 0 else line, f"{self.where}:{n}")
            out = obj.get("out") if isinstance(obj, dict) else None
            meta = out.get("meta_info") if isinstance(out, dict) else None
            if not isinstance(obj, dict) or obj.get("event") != "request.finished" or not isinstance(meta, dict):
                raise ConfigError("no out.meta_info")
            r = parse_sglang_meta(meta, RequestResult(index=self.req.n, category="log"))
            if r.accept_length is not None:
                check_figures(r, self.run.steps or FIG.MAX_STEPS)
        except CkptError:
            _skip(self.rep, "request line unreadable or with impossible figures", f"{self.where}:{n}")
            return
        if r.accept_length is None:
            _skip(self.rep, "request without speculative figures (no spec_verify_ct)", f"{self.where}:{n}")
            return
        self.engines.add(engine or "sglang")
        if self.run.starts and not self.run.ready and len(self.run.held) < 16:
            self.run.held.append(r)  # warmup, if the ready line follows
        else:
            self._add_request(r)

    def _add_request(self, r: Any) -> None:
        self.req.add(r)
        self.segments.request(r)

    def _custom(self, n: int, line: bytes, m: re.Match[bytes]) -> None:
        """A line of the user's --pattern, in the convention they stated."""
        self._stamp(line)
        g = m.groupdict()
        what = "pattern line"
        if self.kind == "accept_len":
            got = self._figures(n, what, [("accept_len", g["accept_len"] or b"", "per_step")])
            if got is None:
                return
            v, steps, exact = float(got[0]), 1.0, False
        else:
            a, b = ("tokens", "cycles") if self.kind == "tokens" else ("accepted", "drafts")
            got = self._figures(n, what, [(a, g[a] or b"", "count"), (b, g[b] or b"", "count")])
            if got is None:
                return
            top, st = got
            if st == 0:
                _skip(self.rep, f"{what} with impossible figures ({b} is 0)", f"{self.where}:{n}")
                return
            v, steps, exact = top / st, float(st), True
        al = v + 1 if self.kind == "accepted" or self.convention == "accepted-per-step" else v
        self._window(n, None, "", accept_length=al, weight=steps, exact=exact)

    # ---- events
    def _start(self, n: int, line: bytes, key: bytes) -> None:
        engine, _, _ = self._stamp(line)
        eng, kind = F.START_LINES[key]
        self._begin(n, eng, kind, _text(line, 200))
        m = F.SGL_STEPS.search(line) if kind == "server_args" else None
        if m is not None and 1 <= int(m.group(1)) <= FIG.MAX_STEPS:
            self.run.steps = int(m.group(1))
        self._release(n, line, key)

    def _begin(self, n: int, engine: str, kind: str, text: str) -> None:
        """A start line: the run's first, or (a kind seen already in this run) the next run."""
        r = self.run
        if kind in r.starts or (r.starts and engine != r.info["engine"]):
            self._close_run()
            self.run = r = self._new_run(n, self.time)
            self._event("restart", n, f"{engine} server started again (run {r.info['index'] + 1})")
            self.segments.restart(self.where, n, self.time, r.info["index"])
        elif not r.starts:
            r.info.update(line=n, time=self.time, file=self.where)
            self._event("start", n, f"{engine} server started")
        r.starts.add(kind)
        r.info["engine"] = engine
        self.engines.add(engine)

    def _release(self, n: int, line: bytes, _: bytes) -> None:
        for engine, rx, src in F.RELEASE_LINES:
            m = rx.search(line)
            if m is not None:
                self._stamp(line)
                self.rep.release = self.rep.release or m.group(1).decode(errors="replace")[:40]
                self.rep.release_source = self.rep.release_source or f"{self.where}:{n} ({src})"
                if "api_utils" in src and "version" not in self.run.starts:
                    self._begin(n, engine, "version", f"vLLM {m.group(1).decode(errors='replace')[:40]} server started")
                return

    def _load(self, n: int, line: bytes, key: bytes) -> None:
        """A model class built: the run's first is the target, its second the drafter (one rank's lines)."""
        _, rank, _ = self._stamp(line)
        if key.startswith(b"Load"):
            name = F.parse_load(line)
        else:
            m = F.RESOLVED.search(line)
            name = m.group(1) if m is not None else None
        if name is None:
            return
        r = self.run
        if r.load_rank is None:
            r.load_rank = rank
        elif rank != r.load_rank:
            return
        cls = _text(name, 120)
        r.loads += 1
        role = "target" if r.loads == 1 else "drafter" if r.loads == 2 else "model"
        if role != "model":
            r.info[f"{role}_class"] = cls
        self._event(
            "load",
            n,
            f"{role} class {cls} built" + (" (the drafter actually built)" if role == "drafter" else ""),
            model_class=cls,
            role=role,
        )

    def _ready(self, n: int, line: bytes, _: bytes) -> None:
        self._stamp(line)
        r = self.run
        if r.prefill_at is not None and not r.ready and b"fired up" in line:
            self._event("warmup", r.prefill_at["line"], "warmup request before the server was ready: SGLang counts its "
                        "verify steps in the next decode window and in its lifetime average", time=r.prefill_at["time"])  # fmt: skip
            self.warmup_requests += len(r.held)
            r.held.clear()
        r.ready = True
        r.alive_after = True
        self._event_body("ready", n, line, 120)

    def _weights(self, n: int, line: bytes, _: bytes) -> None:
        self._stamp(line)
        self._event_body("weight_update", n, line, 200)

    def _hook(self, n: int, line: bytes) -> bool:
        """ckpttools' swap hook's line (False: the key inside another line; read it as any line)."""
        h = F.parse_hook(line)
        if h is None:
            return False
        self._stamp(line)
        if isinstance(h, str):
            _skip(self.rep, f"swap hook line not in ckpttools' format ({h})", f"{self.where}:{n}")
            return True
        prev = self.segments.cur.info
        d = prev["drafter"] if prev["event"] == "hook" else None
        if self.segments.hook(h, self.where, n, self.time, self.run.info["index"]):
            seg = self.segments.cur.info["index"]
            if d is not None and d["ranks"] < d["world"]:
                self._event("interleaved", n, f"the swap to {d['digest']} (segment {prev['index']}) was logged by "
                            f"{d['ranks']} of its {d['world']} ranks before the next swap began")  # fmt: skip
            text = f"swap to {_text(h.path.encode(), 160)} ({h.digest}): segment {seg}"
            self._event("swap", n, text, digest=h.digest, segment=seg)
        return True

    def _access(self, n: int, line: bytes, _: bytes) -> None:
        """An access line of a weight-update endpoint."""
        got = F.parse_access(line)
        if got is None:
            return
        self._stamp(line)
        endpoint, status = got
        what = self.segments.access(endpoint, status, self.where, n, self.time, self.run.info["index"])
        if what == "rpc":
            return
        seg = self.segments.cur.info["index"]
        text = (
            f"POST {endpoint.decode()} {status}: "
            + {
                "split": f"a weight update, segment {seg}",
                "swap": f"the request of the swap of segment {seg}",
                "burst": f"a weight update, part of segment {seg}'s start",
                "refused": "refused by the server (the weights unchanged)",
            }[what]
        )
        self._event("weight_update", n, text, segment=seg if what != "refused" else None)

    def _context(self, n: int, line: bytes, _: bytes) -> None:
        self._stamp(line)
        self._event_body("context_override", n, line, 240)

    def _traceback(self, n: int, line: bytes, _: bytes) -> None:
        self._stamp(line)
        self.in_tb = True

    def _tb_line(self, n: int, line: bytes) -> bool:
        """Inside a traceback: frames are passed over; its exception line is an event. False: the
        line is a new log record (the traceback ended without one)."""
        body = line.rstrip(b"\r")
        if body[:1] in (b" ", b"\t", b"") or body.startswith(
            (b"During handling", b"The above exception", b"Traceback")
        ):
            return True
        m = F.EXC_LINE.match(body)
        self.in_tb = False
        if m is None:
            return False
        self._exception(n, _text(body[body.find(b") ") + 2 :] if m.group(1) else body, 400))
        return True

    def _exception(self, n: int, text: str) -> None:
        idx = self._event("exception", n, text)
        self.run.last_exc, self.run.alive_after = (idx, "exception", text), False

    def _oom(self, n: int, line: bytes, _: bytes) -> None:
        if b"CUDA" in line or b"OutOfMemory" in line:
            self._stamp(line)
            self._exception(n, _text(line[line.find(b"] ") + 2 if b"] " in line else 0 :], 400))

    def _died(self, n: int, line: bytes, key: bytes) -> None:
        self._stamp(line)
        text = _text(line[line.find(b"] ") + 2 if b"] " in line else 0 :].split(b"Traceback")[0], 200)
        idx = self._event("crash_message", n, text)
        if self.run.last_exc is None or self.run.alive_after:
            self.run.last_exc = (idx, "crash_message", text)
        self.run.alive_after = False
        if b"Traceback" in line:
            self.in_tb = True

    # ---- the end
    def _close_run(self) -> None:
        r = self.run
        for q in r.held:  # no ready line followed: not warmup
            self._add_request(q)
        r.held.clear()
        if r.last_exc is not None and not r.alive_after:
            idx, kind, text = r.last_exc
            if idx is not None:
                self.rep.events[idx]["kind"] = "error"
            counts = self.rep.event_counts
            counts[kind] -= 1
            counts["error"] = counts.get("error", 0) + 1
            if not counts[kind]:
                del counts[kind]
            r.info["ended_by"] = text
        s = r.sums
        r.info |= {"window_count": s.n, "accept_length": s.accept_length, "exact": s.exact if s.n else None}
        if r.back:
            r.info["time_went_back"] = r.back
        self._keep_run(r.info)

    def end_file(self) -> None:
        self.in_tb = False

    def finish(self) -> None:
        self.flush_fast(True)
        self._close_run()
        self.rep.runs = self.first_runs + list(self.last_runs)
        self.rep.run_count = self.run_count
        if len(self.engines - {None}) > 1:
            raise ConfigError(
                f"{', '.join(self.rep.files)}: the logs hold both SGLang and vLLM lines; their figures do not merge",
                hint="read each engine's logs on their own",
            )
        rep = self.rep
        rep.engine = next(iter(self.engines), None)
        if rep.release is None and rep.engine is not None:
            rep.release_source = "not in the log: " + F.NO_RELEASE_LINE[rep.engine]
        elif rep.release is not None and rep.engine is not None and (rep.engine, rep.release) not in F.KNOWN_RELEASES:
            rep.release_source = f"{rep.release_source}; a release whose line formats ckpttools was not read from"
        rep.windows = self.kept.done()
        rep.window_stride = self.kept.stride
        rep.window_count = self.total.n
        rep.windows_accept_length = self.total.accept_length
        rep.per_position_acceptance = self.total.per_position
        rep.events.sort(key=lambda e: (rep.files.index(e["file"]) if e["file"] in rep.files else 0, e["line"]))
        if self.warmup_requests:
            rep.skipped["warmup requests (left out of the per-request figures)"] = self.warmup_requests
        rep.event_counts = dict(sorted(rep.event_counts.items()))
        rep.segments = self.segments.finish(rep.min_accept_len)
        rep.segment_count = self.segments.count


# ----------------------------------------------------------------------------- the API
def _compile(pattern: str | None, convention: str | None) -> tuple[re.Pattern[bytes] | None, str]:
    """The user's --pattern, its kind (which named groups it has), checked against the convention."""
    if convention is not None and convention not in CONVENTIONS:
        raise ConfigError(f"convention {convention!r}: give one of {', '.join(CONVENTIONS)}")
    if pattern is None:
        return None, ""
    hint = (
        f"{opt('pattern')} takes a Python regular expression with named groups: (?P<accept_len>...), or "
        "(?P<tokens>...) and (?P<cycles>...), or (?P<accepted>...) and (?P<drafts>...)"
    )
    try:
        rx = re.compile(pattern.encode("utf-8", errors="surrogateescape"))
    except (re.error, OverflowError, RecursionError) as e:
        raise ConfigError(f"{opt('pattern')} {pattern[:80]!r} is not a regular expression ({e})", hint=hint) from None
    groups = set(rx.groupindex)
    kind = next((k for k, need in _KINDS if need <= groups), "")
    if not kind:
        raise ConfigError(f"{opt('pattern')} {pattern[:80]!r} lacks the named groups it needs", hint=hint)
    if kind != "accepted" and convention is None:
        raise ConfigError(
            f"{opt('pattern')} gives a per-step figure in an unstated convention",
            hint=f"say which with {opt('convention')} tokens-per-step (bonus token counted) or accepted-per-step",
        )
    if kind == "accepted" and convention == "tokens-per-step":
        raise ConfigError(
            f"{opt('pattern')}'s accepted and drafts groups count accepted drafts per step, not tokens per step",
            hint=f"leave out {opt('convention')}, or use (?P<tokens>...) and (?P<cycles>...)",
        )
    return rx, kind


_KINDS = (("accept_len", {"accept_len"}), ("tokens", {"tokens", "cycles"}), ("accepted", {"accepted", "drafts"}))


def read_logs(
    paths: list[str] | tuple[str, ...],
    *,
    pattern: str | None = None,
    convention: str | None = None,
    min_accept_len: float | None = None,
) -> LogsReport:
    """Read server logs (files, ``-`` for stdin, ``.gz``) and say what they hold about speculation.

    Args:
        paths: the logs, read in order (a rotated log's parts oldest first).
        pattern: a regular expression for a custom profiler's lines, with named groups
            ``accept_len``, or ``tokens`` and ``cycles``, or ``accepted`` and ``drafts``.
        convention: what ``accept_len`` or tokens / cycles count: ``tokens-per-step`` (the
            bonus token counted, as SGLang and vLLM) or ``accepted-per-step``.
        min_accept_len: the bar (tokens per verify step); below it the report fails (exit 1).

    Returns:
        a :class:`LogsReport`; ``exit_code`` is verify's (0 ok, 1 below the bar, 3 nothing measured).

    Raises:
        ConfigError: a log cannot be read (missing, not a regular file, damaged gzip), or the
            pattern is not usable.
    """
    from ckpttools.io.inputs import check_number

    if not paths:
        raise ConfigError("no log given", hint="give one or more server log files, or - for stdin")
    if min_accept_len is not None:
        try:
            min_accept_len = float(check_number(min_accept_len, opt("min_accept_len"), lo=1, hi=MAX_ACCEPT_LEN))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    rx, kind = _compile(pattern, convention)
    rep = LogsReport(files=[], min_accept_len=min_accept_len)
    if convention is not None:
        rep.convention = f"{LABEL}; the pattern's lines read as {convention}"
    p = _Parser(rep, rx, kind, convention)
    with p.budget:
        for path in paths:
            _read_one(p, path)
    p.finish()
    _conclude(rep, p)
    return rep


def _read_one(p: _Parser, path: str) -> None:
    f, own, where = _open(path)
    p.rep.files.append(where)
    p.where = where
    p.segments.begin_file(where)
    try:
        blocks = _lines(f, where, p.rep)
        got = _advance(blocks, None)
        before = p.rep.lines
        while got is not None:
            count = p.feed_block(*got)
            got = _advance(blocks, count)
        p.flush_fast(True)
        p.segments.at(where, max(1, p.rep.lines - before))
    finally:
        p.end_file()
        for s in own:
            s.close()


def _advance(blocks: Generator[tuple[int, Block], int, None], sent: int | None) -> Any:
    """The next chunk's lines, ``sent`` (a block's line count) given back; None at the end."""
    try:
        return blocks.send(sent)  # type: ignore[arg-type]
    except StopIteration:
        return None


def _conclude(rep: LogsReport, p: _Parser) -> None:
    """The overall figure (per-request counts first, then the windows), the bar, the verdict."""
    if p.req.n:
        rep.accept_length, rep.accept_length_ci95, rep.per_request = p.req.summary()
        rep.per_request["fields_used"] = "; ".join(sorted(p.req.fields))
        rep.exact, rep.source = True, "sglang request log (log_requests_format json): each request's counts"
        rep.weighting = "pooled counts: 1 + sum(accepted drafts) / sum(verify steps); interval over requests"
    elif p.total.n:
        rep.accept_length, rep.exact = p.total.accept_length, p.total.exact
        rep.source, rep.weighting = _source(rep, p)
    if rep.accept_length is not None:
        rep.accepted_drafts_per_step = rep.accept_length - 1
    if rep.min_accept_len is not None:
        rep.passed = rep.accept_length is not None and rep.accept_length >= rep.min_accept_len
        if len(rep.segments) > 1 and rep.accept_length is not None:  # every segment measured at the bar
            rep.passed = all(s["passed"] is not False for s in rep.segments)
    rep.verdict = verdict_line(rep)


def _source(rep: LogsReport, p: _Parser) -> tuple[str, str]:
    if p.pattern is not None:
        if p.kind == "accept_len":
            return "pattern lines (accept_len)", "an estimate: every line weighted alike (the lines carry no counts)"
        return f"pattern lines ({p.kind})", "exact: summed counts (each line weighted by its steps)"
    from ckpttools.engines.engine import ENGINE_OBJECTS, SGLang

    return ENGINE_OBJECTS.get(rep.engine or "", SGLang)().log_source()  # its log grammar


def verdict_line(rep: LogsReport) -> str:
    """One line, as verify's: the figure in both conventions, how it was merged, the bar."""
    if rep.accept_length is None:
        why = f"{rep.lines} line(s) read, no speculative-decoding figures"
        if rep.skipped:
            why += f"; skipped: {', '.join(f'{v} {k}' for k, v in list(rep.skipped.items())[:3])}"
        return f"accept length could not be read from the log ({why})"
    how = "exact" if rep.exact else "estimated"
    parts = [
        f"accept length {rep.accept_length:.2f} tokens per verify step ({rep.accepted_drafts_per_step:.2f} accepted "
        f"drafts per step), {how}, from {rep.source}"
    ]
    measured = [s for s in rep.segments if s["accept_length"] is not None]
    if len(measured) > 1:
        parts = [_segments_verdict(rep, measured)]
    elif rep.segment_count > 1 and measured:
        parts.append(
            f"every figure in segment {measured[0]['index']} of {rep.segment_count} (the log split at each weight update)"
        )
    if rep.min_accept_len is not None:
        ok = bool(rep.passed)
        every = "every segment " if len(measured) > 1 else ""
        parts.append(
            f"{'PASS' if ok else 'FAIL'}: {every if ok else ''}{'at or above' if ok else 'below'} the bar of "
            f"{rep.min_accept_len:.2f}" + ("" if ok or not every else f" in {_failed(rep)}")
        )
    died = [r["ended_by"] for r in rep.runs if r.get("ended_by")]  # (the runs kept: the first and the last)
    if died:
        parts.append(f"the server died: {died[-1][:160]}")
    return "; ".join(parts)


#: the segments a verdict names, at most (the first and the last half of them)
VERDICT_SEGMENTS = 8


def _fold(items: list[Any], most: int) -> tuple[list[Any], int]:
    """The first and last half of ``most`` items, and how many were left out between."""
    if len(items) <= most:
        return items, 0
    return items[: most // 2] + items[-(most // 2) :], len(items) - most


def _segments_verdict(rep: LogsReport, measured: list[dict[str, Any]]) -> str:
    """Segments with figures: each one's figure (folded past VERDICT_SEGMENTS)."""
    segs, left = _fold(measured, VERDICT_SEGMENTS)
    head = f"{rep.segment_count} segments (the log split at each weight update"
    empty = rep.segment_count - len(measured)
    head += f"; {empty} without figures)" if empty else ")"
    parts = []
    for i, s in enumerate(segs):
        if left and i == VERDICT_SEGMENTS // 2:
            parts.append(f"... {left} more")
        name = f" {s['drafter']['digest']}" if s["drafter"] else ""
        parts.append(f"segment {s['index']}{name} {s['accept_length']:.2f}" + (" FAIL" if s["passed"] is False else ""))
    return f"{head}: " + ", ".join(parts)


def _failed(rep: LogsReport) -> str:
    bad = [s["index"] for s in rep.segments if s["passed"] is False]
    shown = ", ".join(map(str, bad[:8])) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
    return f"segment{'s' if len(bad) > 1 else ''} {shown}"
