"""The segments of ``ckpt logs``: a run split at every weight update, each part with its own
accept length, windows and (where ckpttools' hook names it) drafter.

What splits a run (the line formats are :mod:`ckpttools.engines.logs_formats`'):

- the hook's line (``ckpttools swap: drafter=... digest=...``): one line per rank per swap; the
  lines of one swap (the same digest and path, each rank once, no figure between them) are one
  split, and the segment's drafter says how many ranks of the world said so;
- an access line of a weight-update endpoint (SGLang's ``/update_weights_from_*``, vLLM's
  ``/update_weights`` and ``/collective_rpc``) that the server did not refuse (a 4xx answer
  leaves the weights as they were). One that follows a hook's swap with no figure between is that
  swap's own request (uvicorn logs it once the answer is sent); a burst of them with no figure
  between is one split. vLLM's ``/collective_rpc`` runs any worker method, and SGLang's
  ``/update_weights_from_tensor`` carries the hook's read-only requests too: in a run where the
  hook has named a swap, neither is taken for one;
- a server restart after a weight update (the drafter is the one launched again).

A figure (a decode window, a metrics line, a finished request) belongs to the segment in which its
line is. A request that spans a swap is counted where it finished.

Bounded: every segment's summary is kept up to :data:`MAX_SEGMENTS` (beyond: the first and the
last half of them, ``segment_count`` says how many in all); each keeps its first
:data:`SEGMENT_HEAD` and its last :data:`SEGMENT_TAIL` windows as logged (``windows_left_out``
counts those between; its figure is over them all), and the windows themselves only for the
first and last :data:`WINDOWED // 2` segments (the others keep their figures). Keeping windows
as logged, not merged, costs the fast path nothing per window: a batch gives at most that many.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ckpttools.engines import logs_formats as F
from ckpttools.measuring.logs_windows import Batch, Sums

__all__ = ["Segments", "MAX_SEGMENTS", "SEGMENT_HEAD", "SEGMENT_TAIL", "WINDOWED", "segment_verdict"]

#: segments listed in full; beyond, the first and the last half of them (all counted)
MAX_SEGMENTS = 20_000
#: the windows a segment keeps from its start and from its end, as logged
SEGMENT_HEAD = 32
SEGMENT_TAIL = 32
#: the segments that keep their windows: the first and the last half of this many
WINDOWED = 64
#: the access endpoints one segment lists (a burst of them is one split; all are counted)
MAX_ENDPOINTS = 8


class RequestPool:
    """Finished requests: pooled counts (the exact figure), a Welford mean and variance, and the
    mean's interval (a segment's; :class:`ckpttools.measuring.logs._Requests` adds its sample)."""

    def __init__(self) -> None:
        self.n, self.mean, self.m2, self.acc, self.steps = 0, 0.0, 0.0, 0, 0

    def add(self, r: Any) -> None:
        self.n += 1
        d = r.accept_length - self.mean
        self.mean += d / self.n
        self.m2 += d * (r.accept_length - self.mean)
        self.acc += r.accepted_drafts or 0
        self.steps += r.verify_steps or 0

    def ci95(self) -> list[float] | None:
        from ckpttools.measuring.verdict import t95

        if self.n < 2:
            return None
        t = t95(self.n)
        h = t * math.sqrt(self.m2 / (self.n - 1)) / math.sqrt(self.n)
        return [self.mean - h, self.mean + h]


class _Sums(Sums):
    """A segment's sums: the merged figure only (no per-position figures: one less list a window)."""

    def add(self, win: dict[str, Any]) -> None:
        self.n += 1
        self.w += win["weight"]
        self.wal += win["weight"] * win["accept_length"]
        self.exact = self.exact and win["exact"]


class _Segment:
    def __init__(self, index: int, event: str | None, file: str, line: int, time: str | None, run: int) -> None:
        self.info: dict[str, Any] = {"index": index, "run": run, "event": event, "event_status": None}
        self.info |= {"event_endpoints": [], "updates": 0 if event is None else 1, "file": file}
        self.info |= {"first_line": line, "last_file": file, "last_line": line, "time": time, "drafter": None}
        self.head: list[dict[str, Any]] = []
        self.tail: deque[dict[str, Any]] = deque(maxlen=SEGMENT_TAIL)
        self.sums = _Sums()
        self.pool = RequestPool()
        self.figures = 0  # windows and requests since the segment began (a hook's ranks, an access line)
        self.ranks: set[int] = set()

    @property
    def hook(self) -> bool:
        return self.info["event"] == "hook"


class Segments:
    """The segments of one read; the parser says where each line's figures go and what splits."""

    def __init__(self) -> None:
        self.count = 0
        self.first: list[dict[str, Any]] = []
        self.last: deque[dict[str, Any]] = deque(maxlen=MAX_SEGMENTS // 2)
        self.windowed: deque[dict[str, Any]] = deque()  # the kept summaries with windows, past the first ones
        self.hooked_runs: set[int] = set()
        self.cur = self._new(None, "", 0, None, 0)

    def _new(self, event: str | None, file: str, line: int, time: str | None, run: int) -> _Segment:
        s = _Segment(self.count, event, file, line, time, run)
        self.count += 1
        return s

    # ---- figures
    def window(self, w: dict[str, Any]) -> None:
        s = self.cur
        if s.info["time"] is None:
            s.info["time"] = w["time"]
        (s.head if len(s.head) < SEGMENT_HEAD else s.tail).append(w)
        s.sums.add(w)
        s.figures += 1

    def batch(self, b: Batch, k: int) -> None:
        """The first ``k`` windows of a fast-path batch."""
        if k <= 0:
            return
        s = self.cur
        if s.info["time"] is None:
            s.info["time"] = b.time[0]
        take = min(k, SEGMENT_HEAD - len(s.head))
        s.head += [b.window(i) for i in range(take)]
        s.tail.extend(b.window(i) for i in range(max(take, k - SEGMENT_TAIL), k))
        s.sums.add_batch(b, k)
        s.figures += k

    def request(self, r: Any) -> None:
        self.cur.pool.add(r)
        self.cur.figures += 1

    def head_left(self) -> int:
        return max(0, SEGMENT_HEAD - len(self.cur.head))

    @staticmethod
    def tail_size() -> int:
        return SEGMENT_TAIL

    # ---- splits
    def hook(self, h: F.Hook, file: str, line: int, time: str | None, run: int) -> bool:
        """A hook line; True when it begins a swap (a new segment, or the one an access line began)."""
        self.hooked_runs.add(run)
        s = self.cur
        d = s.info["drafter"]
        if (
            s.hook
            and not s.figures
            and d is not None
            and (d["digest"], d["path"], d["world"]) == (h.digest, h.path, h.world)
            and h.rank not in s.ranks
        ):
            self._rank(s, h)
            return False
        if s.info["event"] is not None and not s.hook and not s.figures and s.info["run"] == run:
            s.info["event"] = "hook"  # the swap's own requests came first (vLLM: one rpc before it)
        else:
            s = self._split("hook", file, line, time, run)
        s.info["drafter"] = {"path": h.path, "digest": h.digest, "world": h.world, "ranks": 0, "maps": []}
        self._rank(s, h)
        return True

    @staticmethod
    def _rank(s: _Segment, h: F.Hook) -> None:
        s.ranks.add(h.rank)
        d = s.info["drafter"]
        d["ranks"] = len(s.ranks)
        if h.maps not in d["maps"]:
            d["maps"].append(h.maps)

    def access(self, endpoint: bytes, status: int, file: str, line: int, time: str | None, run: int) -> str:
        """An access line of a weight-update endpoint: what it is to the segments: ``split``, ``swap``
        (the request of the hook's swap just named), ``burst`` (one of a burst that split already),
        ``refused`` or ``rpc`` (a collective_rpc where the hook names the swaps)."""
        name = endpoint.decode()
        s = self.cur
        if s.hook and not s.figures and s.info["run"] == run:
            self._endpoint(s, name, status)
            return "swap"
        if status in F.REFUSED:
            return "refused"
        if F.UPDATE_ENDPOINTS[endpoint][1] == "rpc" and run in self.hooked_runs:
            return "rpc"
        if s.info["event"] is not None and not s.figures and s.info["run"] == run:
            s.info["updates"] += 1
            self._endpoint(s, name, status)
            return "burst"
        s = self._split(name, file, line, time, run)
        self._endpoint(s, name, status)
        return "split"

    @staticmethod
    def _endpoint(s: _Segment, name: str, status: int) -> None:
        eps = s.info["event_endpoints"]
        if len(eps) < MAX_ENDPOINTS:
            eps.append(name)
        s.info["event_status"] = status

    def restart(self, file: str, line: int, time: str | None, run: int) -> None:
        """A server started again: a new segment where the last one came from a weight update (a
        restart after a restart keeps the segment: the drafter launched, both times)."""
        if self.cur.info["event"] not in (None, "restart"):
            self._split("restart", file, line, time, run)

    def _split(self, event: str, file: str, line: int, time: str | None, run: int) -> _Segment:
        prev = self.cur
        if prev.info["last_file"] == file or line > 1:  # (else it ended with the file before)
            prev.info["last_file"], prev.info["last_line"] = file, line - 1
        self._close(prev)
        self.cur = self._new(event, file, line, time, run)
        return self.cur

    def begin_file(self, file: str) -> None:
        """A file begins; the first one is where the first segment starts."""
        if self.count == 1 and not self.cur.info["file"]:
            self.cur.info |= {"file": file, "last_file": file, "first_line": 1, "last_line": 1}

    def at(self, file: str, line: int) -> None:
        """Where the reading is (the end of a file): the current segment runs to there."""
        self.cur.info["last_file"], self.cur.info["last_line"] = file, line

    # ---- the end
    def _close(self, s: _Segment) -> None:
        info = s.info
        p, sums = s.pool, s.sums
        al: float | None
        source: str | None
        if p.n and p.steps:
            al, exact, source = 1 + p.acc / p.steps, True, "requests"
        else:
            al, exact, source = sums.accept_length, sums.exact if sums.n else False, "windows" if sums.n else None
        info |= {"accept_length": al, "accepted_drafts_per_step": None if al is None else al - 1, "exact": exact}
        info |= {"source": source, "request_count": p.n, "accept_length_ci95": p.ci95() if p.n else None}
        windows = s.head + list(s.tail)
        info |= {"window_count": sums.n, "windows": windows, "windows_left_out": sums.n - len(windows)}
        info |= {"windows_kept": True, "passed": None, "verdict": ""}
        if info["drafter"] is not None:
            info["drafter"]["maps"] = "/".join(info["drafter"]["maps"])
        self._keep(info)

    def _keep(self, info: dict[str, Any]) -> None:
        if len(self.first) < MAX_SEGMENTS // 2:
            self.first.append(info)
            if len(self.first) > WINDOWED // 2:
                self.windowed.append(info)
        else:
            if len(self.last) == self.last.maxlen:
                _drop_windows(self.last[0])
            self.last.append(info)
            self.windowed.append(info)
        while len(self.windowed) > WINDOWED // 2:
            _drop_windows(self.windowed.popleft())

    def finish(self, min_accept_len: float | None) -> list[dict[str, Any]]:
        """Every segment kept, each with its verdict against the bar."""
        self._close(self.cur)
        out = self.first + list(self.last)
        for info in out:
            al = info["accept_length"]
            if min_accept_len is not None and al is not None:
                info["passed"] = al >= min_accept_len
            info["verdict"] = segment_verdict(info, min_accept_len)
        return out


def _drop_windows(info: dict[str, Any]) -> None:
    if info["windows"]:
        info["windows"], info["windows_kept"] = [], False


def label(info: dict[str, Any]) -> str:
    """How a segment began and what it holds, in a few words: ``segment 1 (hook: a.safetensors
    0123456789abcdef, 2/2 ranks)``."""
    d = info["drafter"]
    what = info["event"] or "the log's start"
    status = info["event_status"]
    if d is not None:
        name = d["path"].rsplit("/", 1)[-1][:60]
        what += f": {name} {d['digest']}, {d['ranks']}/{d['world']} ranks"
        what += "" if status is None or 200 <= status < 300 else f", its request answered {status}"
    elif info["event"] not in (None, "hook", "restart"):
        what += "" if status is None else f" {status}"
    return f"segment {info['index']} ({what})"


def segment_verdict(info: dict[str, Any], bar: float | None) -> str:
    al = info["accept_length"]
    if al is None:
        return f"{label(info)}: no speculative-decoding figures"
    how = "exact" if info["exact"] else "estimated"
    text = f"{label(info)}: accept length {al:.2f} ({how}, {info['window_count']} windows"
    text += f", {info['request_count']} requests)" if info["request_count"] else ")"
    if bar is not None:
        text += f", {'PASS' if info['passed'] else 'FAIL'}"
    return text
