"""The fast path of ``ckpt logs``: a block of whole lines read at once, the same figures as
reading each line.

Reading a line one at a time costs about as much as SGLang's decode lines are long, and a busy
server writes millions of them. Here a block (a chunk of the file cut at its last newline) is
searched once with :data:`ckpttools.engines.logs_formats.DECODE_FAST`; a decode line in the usual
layout, with figures the checks pass, becomes a window queued in arrays (no per-line objects);
every line that might mean anything else is found by what it must contain and handed to the
per-line reader, in file order:

- a line with a character of :data:`RARE`, or one of :data:`NEEDLES`: every keyword the per-line
  reader acts on holds one (a test checks that for each of them);
- a ``Decode batch`` in another layout, or with figures the checks refuse, or after a prefix
  that is not SGLang's;
- every line while a started run waits for its warmup request (its first ``Prefill batch``)
  or its ready line;
- the lines of a traceback, until it ends.

Every other line is one the per-line reader passes over. A block where the lines to read alone
are dense (a vLLM log: ``.py`` in every line) is read line by line. Queued windows join the kept
list and the sums before any line that could add a window or start a run, and at each file's
end (:meth:`ckpttools.measuring.logs_windows.Kept.add_batch`, exact to the bit).

The reader asks the parser only through :class:`Reader`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ckpttools.engines import logs_formats as F
from ckpttools.measuring.logs_windows import Batch, State, advance, starts

__all__ = ["RARE", "NEEDLES", "scan", "Queue", "Prefixes", "Reader"]


class Reader(Protocol):
    """What the fast path needs of the per-line reader (``ckpttools.measuring.logs``' parser)."""

    #: the windows queued by the fast path, not yet added
    fastq: Queue
    #: what each SGLang prefix says
    prefix: Prefixes
    #: the file being read, as the report names it
    where: str

    @property
    def in_traceback(self) -> bool:
        """Inside a traceback (its lines are read one at a time until it ends)."""

    @property
    def run_index(self) -> int:
        """The run the lines belong to."""

    def waiting(self) -> bool:
        """A started run waits for its warmup request or its ready line (every line read alone)."""

    def accept_bound(self) -> float | None:
        """The most accept length of the run's windows where its draft steps are known."""

    def drops_rank(self, rank: str) -> bool:
        """A decode window of ``rank`` is another tensor-parallel rank's copy (left out)."""

    def clock(self, n: int, time: str, seconds: int | None) -> bool:
        """Line ``n`` has the time ``time`` (``seconds``: as a count, None where not a date); True
        where the run's time went back."""

    def went_back(self, count: int) -> None:
        """So many more fast windows came after the run's time went back."""

    def alive(self) -> None:
        """A window was logged: the server was alive after its last error."""

    def kept_state(self) -> State:
        """The state of the list that keeps windows (a window's line is counted where it starts
        an entry)."""

    def segment_head_left(self) -> int:
        """How many more windows the current segment keeps from its start (their lines are counted)."""

    def segment_tail(self) -> int:
        """How many windows a segment keeps from its end (the last so many of each part get their lines)."""

    def feed(self, n: int, line: bytes) -> None:
        """One line read as any line."""

    def feed_lines(self, n: int, text: bytes) -> int:
        """Whole lines read one at a time; returns how many."""

    def flush_fast(self, whole: bool) -> None:
        """The queued windows into the kept lists and the sums."""


#: characters no SGLang decode, prefill or HTTP access line holds; with the needles, every
#: keyword the per-line reader acts on is found (see :func:`found`); NUL too (binary data is read
#: line by line)
RARE = tuple(bytes((c,)) for c in b"jmvxyz_='\x00")
#: (letter, needle): where the letter is in a block (it can be in SGLang's rank tags, so it is
#: not rare), the lines holding the needle; and a needle looked for in every block
NEEDLES = (
    (b"E", b"EngineCore"),
    (b"L", b"Load weight end"),
    (b"U", b"Update weights end"),
    (b"U", b"Update engine weights"),
    (b"", b'"request.finished"'),
)
#: text of a line whose per-line reading may add a window or start a run
DANGER = (b"Decode batch", b"SpecDecoding metrics", b"version", b"server_args=ServerArgs(", b"LLM engine") + (
    F.HOOK_KEY,
    *F.ACCESS_KEYS,
)  # (and the lines that split a run: the windows before them belong to the segment before)
#: windows queued before they join the kept list in one go (bounded memory)
QUEUE_MAX = 1 << 16
_BIG = 1 << 62
#: a block with a line to read alone in every so many bytes, or fewer, is read line by line
DENSE = 256
#: a needle's letter is looked at in so many places, at most, before the needle is searched for
_LETTER_HITS = 2048


def found(keyword: bytes) -> bool:
    """Whether :func:`candidates` finds every line that holds ``keyword``."""
    if any(c in keyword for c in RARE):
        return True
    return any(nd in keyword and letter in keyword for letter, nd in NEEDLES)


def _each_line(text: bytes, needle: bytes, i: int, hi: int, out: list[int], cap: int = _BIG) -> None:
    """The first position of ``needle`` in each line before ``hi`` that holds it, from ``i`` (its
    first); stops when ``out`` holds more than ``cap``."""
    while i >= 0 and len(out) <= cap:
        out.append(i)
        e = text.find(b"\n", i, hi)
        if e < 0:
            return
        i = text.find(needle, e, hi)


def _needle(text: bytes, lo: int, hi: int, letter: bytes, needle: bytes, out: list[int]) -> None:
    """Each place of ``needle``: where its letter is rare, looked for at each of the letter's
    places; else (or past a few thousand of them) searched for."""
    k = needle.find(letter)
    i = text.find(letter, lo, hi) if letter else lo
    for _ in range(_LETTER_HITS if letter else 0):
        if i < 0:
            return
        if i - k >= lo and text.startswith(needle, i - k, hi):
            out.append(i)
        i = text.find(letter, i + 1, hi)
    if i >= 0:
        start = max(lo, i - k)
        _each_line(text, needle, text.find(needle, start, hi), hi, out)


def candidates(blob: bytes, lo: int, hi: int) -> list[int] | None:
    """Positions, in order, in every line of ``blob[lo:hi]`` that must be read one at a time (one
    or more a line); None when they are so many (a vLLM log, say) that reading every line alone
    is quicker."""
    out: list[int] = []
    cap = (hi - lo) // DENSE + 16
    for c in RARE:
        _each_line(blob, c, blob.find(c, lo, hi), hi, out, cap)
        if len(out) > cap:
            return None
    for letter, nd in NEEDLES:
        _needle(blob, lo, hi, letter, nd, out)
    out.sort()
    return out


class Queue:
    """Fast windows of one run and one file not yet added: per block, then as one batch."""

    def __init__(self) -> None:
        self.parts: list[Batch] = []
        self.count = 0

    def add(self, b: Batch) -> None:
        if len(b):
            self.parts.append(b)
            self.count += len(b)

    def take(self) -> Batch | None:
        """The queued windows as one batch (the queue left empty)."""
        if not self.parts:
            return None
        ps, self.parts, self.count = self.parts, [], 0
        if len(ps) == 1:
            return ps[0]
        cat = np.concatenate
        return Batch(
            file=ps[0].file,
            run=ps[0].run,
            line=cat([p.line for p in ps]),
            time=[t for p in ps for t in p.time],
            rank=[r for p in ps for r in p.rank],
            accept_length=cat([p.accept_length for p in ps]),
            accept_rate=cat([p.accept_rate for p in ps]),
            running=cat([p.running for p in ps]),
            queued=cat([p.queued for p in ps]),
            throughput=cat([p.throughput for p in ps]),
        )

    def put_back(self, b: Batch, start: int) -> None:
        """Windows from ``start`` on were not added: they stay first in the queue."""
        if start < len(b):
            rest = Batch(b.file, b.run, b.line[start:], b.time[start:], b.rank[start:], b.accept_length[start:],
                         b.accept_rate[start:], b.running[start:], b.queued[start:], b.throughput[start:])  # fmt: skip
            self.parts.insert(0, rest)
            self.count += len(rest)


class Prefixes:
    """What an SGLang prefix (``[date time(.ms)( tags)``, the ``] `` left out) says: the time, its
    seconds (None: not a date), the rank tags; None for a prefix SGL_PREFIX does not read whole."""

    def __init__(self) -> None:
        self.cache: dict[bytes, tuple[str, int | None, str] | None] = {}

    def get(self, pre: bytes, seconds: Any) -> tuple[str, int | None, str] | None:
        hit = self.cache.get(pre, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        m = F.SGL_PREFIX.match(pre + b"] ")
        out: tuple[str, int | None, str] | None = None
        if m is not None and m.end() == len(pre) + 2:
            try:
                t: int | None = seconds(m.group(1))
            except ValueError:
                t = None
            out = (m.group(1).decode(), t, m.group(2).decode().strip())
        if len(pre) <= 120:  # (a longer one, in a hostile line, is read each time, never held)
            if len(self.cache) > 4096:
                self.cache.clear()
            self.cache[pre] = out
        return out


class _Scan:
    """One block: the fast windows queued, every other line that matters read one at a time.

    A window's line number is counted only where it will be seen: where the window starts a kept
    entry (:func:`ckpttools.measuring.logs_windows.starts` says which do)."""

    def __init__(self, p: Reader, n0: int, blob: bytes, lo: int, hi: int, cand: list[int], seconds: Any) -> None:
        self.p, self.blob, self.lo, self.hi, self.seconds = p, blob, lo, hi, seconds
        self.cpos, self.cline, self.n0 = lo, n0, n0  # cline: the number of the line at cpos
        self.floor = lo - 1  # where the last line read (either way) starts
        self.done = lo  # where the line after the last line read one at a time starts
        self.cand, self.ci = cand, 0
        self.waiting, self.limit = False, 0
        self.figures: list[bytes] = []  # the figures of this block's fast windows not yet queued, 5 each
        self.starts: list[int] = []  # where their lines start
        self.marks: list[tuple[int, str, str | None]] = []  # (window, time, rank) from that window on
        self.lines: dict[int, int] = {}  # window -> line number, for those that start a kept entry
        self.resolved = 0
        self.state = advance(p.kept_state(), p.fastq.count)
        self.head_left = max(0, p.segment_head_left() - p.fastq.count)
        self.npre: bytes | None = None  # newline and the last fast line's prefix; None: none to compare
        self.plen, self.back, self.drop = 0, False, False
        self.set_limit()

    def set_limit(self) -> None:
        """``limit``: read one at a time the lines before the next fast line past it (-1: every line,
        while a started run waits for its warmup request or its ready line)."""
        self.waiting = self.p.waiting()
        self.limit = -1 if self.waiting else self.cand[self.ci] if self.ci < len(self.cand) else _BIG

    def run(self) -> int:
        """Read the block; returns its line count."""
        blob, p = self.blob, self.p
        endswith, ga, sa = blob.endswith, self.figures.extend, self.starts.append
        if p.in_traceback:
            self.slow_line(self.lo)
        floor, limit, npre, plen, back, drop, nback = self.floor, self.limit, None, 0, False, False, 0
        amax, floats = p.accept_bound(), _FLOATS
        at = self.lo
        while at >= 0:
            matches, at = F.DECODE_FAST.finditer(blob, at, self.hi), -1
            for m in matches:
                x = m.start() - 2
                if npre is not None and endswith(npre, 0, x):  # the last fast line's prefix, after a newline
                    ls = x - plen
                    if floor < ls <= limit:
                        g = m.groups()
                        if g[0] is not None and (amax is None or floats[g[1]] <= amax):
                            if back:
                                nback += 1
                            floor = ls
                            if not drop:
                                ga(g)
                                sa(ls)
                            continue
                self.floor = max(self.floor, floor)
                if nback:
                    p.went_back(nback)
                    nback = 0
                at = self.other(m)
                floor, limit, npre, plen, back, drop = (
                    self.floor,
                    self.limit,
                    self.npre,
                    self.plen,
                    self.back,
                    self.drop,
                )
                amax = p.accept_bound()
                if at >= 0:
                    break  # on past the lines read (more Decode batch in them)
        self.floor = max(self.floor, floor)
        if nback:
            p.went_back(nback)
        self.slow_upto(self.hi)
        self.end_part()
        return self.cline + blob.count(b"\n", self.cpos, self.hi) - self.n0

    def other(self, m: Any) -> int:
        """A Decode batch not in the last fast line's run: the lines before it read as they must be,
        then it (the fast way, or as any line). Returns where to search on when the line (or the
        lines a traceback took in) holds another Decode batch; else -1."""
        ls = self.blob.rfind(b"\n", 0, m.start()) + 1
        if ls > self.floor and ls > self.limit:
            self.slow_upto(ls)
        if ls > self.floor:  # (else a line read already: a second Decode batch there, or a traceback's)
            g = m.groups()
            amax = self.p.accept_bound()
            if g[0] is None or (amax is not None and _FLOATS[g[1]] > amax) or not self.new_prefix(ls, m.start() - 2, g):
                self.slow_line(ls)
        end = max(self.done, self.blob.find(b"\n", m.end()) + 1)
        return end if self.blob.find(b"Decode batch", m.end(), end) >= 0 else -1

    def new_prefix(self, ls: int, x: int, g: tuple[bytes, ...]) -> bool:
        """A fast line after a line read one at a time, or with another prefix: its time, clock
        and rank; False: its prefix is not SGLang's (read it as any line)."""
        p = self.p
        pre = self.blob[ls:x]
        info = p.prefix.get(pre, self.seconds)
        if info is None:
            return False
        time, t, rank = info
        self.drop = p.drops_rank(rank)
        self.back = p.clock(self.line_at(ls) if t is not None else -1, time, t)
        self.floor = ls
        self.npre, self.plen = (b"\n" + pre, len(pre)) if ls > 0 else (None, 0)
        if not self.drop:
            p.alive()
            self.marks.append((len(self.starts), time, rank or None))
            self.figures.extend(g)
            self.starts.append(ls)
        return True

    def line_at(self, pos: int) -> int:
        """The number of the line starting at ``pos`` (past every one asked before)."""
        self.resolve()
        self.cline += self.blob.count(b"\n", self.cpos, pos)
        self.cpos = pos
        return self.cline

    def resolve(self) -> None:
        """Count the line numbers of the windows read since the last call that start a kept entry,
        or that the segment keeps from its start."""
        n = len(self.starts)
        if self.resolved == n:
            return
        firsts, self.state = starts(self.state, n - self.resolved)
        if self.head_left:
            k = min(self.head_left, n - self.resolved)
            firsts = sorted(set(firsts).union(range(k)))
            self.head_left -= k
        count, st = self.blob.count, self.starts
        for i in firsts:
            pos = st[self.resolved + i]
            self.cline += count(b"\n", self.cpos, pos)
            self.cpos = pos
            self.lines[self.resolved + i] = self.cline
        self.resolved = n

    def tail_lines(self, n: int) -> None:
        """The line numbers of the part's last windows (a segment keeps its last ones), counted from
        the last line number known, back or on, and the cursor left where it was."""
        todo = [i for i in range(max(0, n - self.p.segment_tail()), n) if i not in self.lines]
        if not todo:
            return
        count, st = self.blob.count, self.starts
        pos, line = self.cpos, self.cline
        for i in todo:
            at = st[i]
            line = line + count(b"\n", pos, at) if at >= pos else line - count(b"\n", at, pos)
            pos = at
            self.lines[i] = line

    def slow_upto(self, end: int) -> None:
        """Read one at a time each line before ``end`` that must be (every one while ``waiting``)."""
        blob = self.blob
        while True:
            if self.waiting:
                start = blob.find(b"\n", self.floor) + 1 if self.floor >= self.done else self.done
                if start >= end:
                    return
                self.slow_line(start)
                continue
            if self.limit >= end:
                return
            c = self.limit
            self.ci += 1
            self.set_limit()
            if c >= self.done:
                ls = blob.rfind(b"\n", 0, c) + 1
                if ls > self.floor:
                    self.slow_line(ls)

    def slow_line(self, ls: int) -> None:
        """Read the line at ``ls`` as any line, then the lines of a traceback it opens."""
        blob, p = self.blob, self.p
        self.npre = None
        while ls < self.hi:
            e = blob.find(b"\n", ls)
            line = blob[ls:e]
            n = self.line_at(ls)
            danger = any(d in line for d in DANGER)
            if danger and (p.fastq.count or self.starts):
                self.end_part()
                p.flush_fast(True)
            p.feed(n, line)
            if danger:
                self.state = p.kept_state()
                self.head_left = max(0, p.segment_head_left() - p.fastq.count)
            self.floor, self.done, ls = ls, e + 1, e + 1
            if not p.in_traceback:
                break
        self.set_limit()

    def end_part(self) -> None:
        """The windows of this block so far, as arrays, into the parser's queue."""
        if not self.starts:
            return
        self.resolve()
        n = len(self.starts)
        self.tail_lines(n)
        lines = np.full(n, -1, dtype=np.int64)
        if self.lines:
            lines[list(self.lines)] = list(self.lines.values())
        times: list[str] = []
        ranks: list[str | None] = []
        ends = [k for k, _, _ in self.marks[1:]] + [n]
        for (k, t, r), e in zip(self.marks, ends):
            times += [t] * (e - k)
            ranks += [r] * (e - k)
        f = self.figures
        figs = np.fromiter(map(_FLOATS.__getitem__, f), np.float64, len(f)).reshape(-1, 5).T.copy()
        running, al, rate, tput, queued = figs
        p = self.p
        p.fastq.add(Batch(p.where, p.run_index, lines, times, ranks, al, rate, running, queued, tput))
        self.figures.clear()
        self.starts.clear()
        self.marks.clear()
        self.lines.clear()
        self.resolved = 0


class _Floats(dict[bytes, float]):
    """float() of a figure's text, remembered (a log repeats its figures)."""

    def __missing__(self, key: bytes) -> float:
        v = float(key)
        if len(self) > 1 << 16:
            self.clear()
        self[key] = v
        return v


_FLOATS = _Floats()


def scan(p: Reader, n0: int, blob: bytes, lo: int, hi: int, seconds: Any) -> int:
    """Read a block of whole lines, ``blob[lo:hi]`` (each line ending in a newline), the first
    numbered ``n0``; returns the block's line count."""
    cand = candidates(blob, lo, hi)
    if cand is None:
        return int(p.feed_lines(n0, blob[lo:hi]))
    n = _Scan(p, n0, blob, lo, hi, cand, seconds).run()
    if p.fastq.count >= QUEUE_MAX:
        p.flush_fast(False)
    return n
