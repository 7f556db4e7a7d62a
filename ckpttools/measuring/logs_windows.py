"""The windows ``ckpt logs`` keeps and sums: one window at a time (any line), or a batch of
SGLang decode windows at once (the fast path, :mod:`ckpttools.measuring.logs_fast`).

A batch gives the same figures, to the last bit, as adding its windows one by one: sums are
accumulated in file order (``numpy.cumsum`` adds left to right, as ``+=`` does), and a kept
entry that stands for ``stride`` windows is folded window by window, as :func:`_merge`
folds it, for all the entries of a batch at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MAX_WINDOWS", "Batch", "State"]

#: the windows kept in the report; beyond, neighbours are merged (``window_stride`` says how many)
MAX_WINDOWS = 1024


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two neighbouring windows as one (the kept list is full): weighted by their verify steps."""
    w = a["weight"] + b["weight"]

    def mean(k: str, by: str = "weight") -> Any:
        if a[k] is None or b[k] is None:
            return a[k] if b[k] is None else b[k]
        return (a[k] * a[by] + b[k] * b[by]) / (a[by] + b[by])

    out = dict(a)
    out.update(weight=w, n=a["n"] + b["n"], exact=a["exact"] and b["exact"], time_end=b["time_end"] or b["time"])
    out["accept_length"] = mean("accept_length")
    out["accepted_drafts_per_step"] = out["accept_length"] - 1
    out["accept_rate"] = mean("accept_rate")
    out["running_requests"] = mean("running_requests", "n")
    out["throughput"] = mean("throughput", "n")
    for k in ("accepted", "drafted"):
        out[k] = None if a[k] is None or b[k] is None else a[k] + b[k]
    pa, pb = a["per_position"], b["per_position"]
    if pa and pb and len(pa) == len(pb):
        out["per_position"] = [(x * a["weight"] + y * b["weight"]) / w for x, y in zip(pa, pb)]
    else:
        out["per_position"] = None
    return out


@dataclass
class Batch:
    """SGLang decode windows of one run and one file, in file order, as arrays: what
    ``_Parser._window`` would have made of each (no per-position list, no counts, estimated)."""

    file: str
    run: int
    line: np.ndarray
    time: list[str]
    rank: list[str | None]
    accept_length: np.ndarray
    accept_rate: np.ndarray
    running: np.ndarray
    queued: np.ndarray
    throughput: np.ndarray

    def __len__(self) -> int:
        return len(self.line)

    @property
    def weight(self) -> np.ndarray:
        return np.maximum(self.running, 1.0)

    def window(self, i: int) -> dict[str, Any]:
        """Window ``i`` as the per-line path builds it."""
        al = float(self.accept_length[i])
        w: dict[str, Any] = {"time": self.time[i], "time_end": None, "file": self.file, "line": int(self.line[i])}
        w |= {"run": self.run, "rank": self.rank[i], "accept_length": al, "accepted_drafts_per_step": al - 1}
        w |= {"accept_rate": float(self.accept_rate[i]), "running_requests": float(self.running[i])}
        w |= {"queued_requests": float(self.queued[i]), "throughput": float(self.throughput[i])}
        w |= {"per_position": None, "accepted": None, "drafted": None, "weight": max(float(self.running[i]), 1.0)}
        w |= {"exact": False, "level": None, "n": 1}
        return w


def _fold(b: Batch, start: int, groups: int, stride: int) -> list[dict[str, Any]]:
    """``groups`` entries of ``stride`` windows each from window ``start``: each the left fold of
    :func:`_merge` over its windows, computed for every entry at once."""
    sl = slice(start, start + groups * stride)
    shape = (groups, stride)
    al, rate = b.accept_length[sl].reshape(shape), b.accept_rate[sl].reshape(shape)
    run, tput, wt = b.running[sl].reshape(shape), b.throughput[sl].reshape(shape), b.weight[sl].reshape(shape)
    a_al, a_rate, a_run, a_tput, a_w = al[:, 0], rate[:, 0], run[:, 0], tput[:, 0], wt[:, 0]
    for j in range(1, stride):
        bw = wt[:, j]
        den = a_w + bw
        a_al = (a_al * a_w + al[:, j] * bw) / den
        a_rate = (a_rate * a_w + rate[:, j] * bw) / den
        a_run = (a_run * j + run[:, j] * 1) / (j + 1)
        a_tput = (a_tput * j + tput[:, j] * 1) / (j + 1)
        a_w = den
    out = []
    for g, (x, r, ru, tp, w) in enumerate(
        zip(a_al.tolist(), a_rate.tolist(), a_run.tolist(), a_tput.tolist(), a_w.tolist())
    ):
        first, last = start + g * stride, start + g * stride + stride - 1
        e = b.window(first)
        e.update(weight=w, n=stride, time_end=b.time[last] if stride > 1 else None)
        e.update(accept_length=x, accepted_drafts_per_step=x - 1, accept_rate=r, running_requests=ru, throughput=tp)
        out.append(e)
    return out


#: what a :class:`Kept` holds: (entries kept, stride, windows in the entry not yet full)
State = tuple[int, int, int]


def starts(state: State, count: int) -> tuple[list[int], State]:
    """Which of ``count`` more windows start a kept entry (their line is the entry's), and the state
    after them; a state is (entries kept, stride, windows in the entry not yet full), as :class:`Kept`
    would have it."""
    items, stride, pn = state
    out, j = [], 0
    while j < count:
        if pn == 0:
            out.append(j)
        need = stride - pn
        if j + need > count:
            pn += count - j
            break
        j, pn, items = j + need, 0, items + 1
        if items >= MAX_WINDOWS:
            items, stride = (items + 1) // 2, stride * 2
    return out, (items, stride, pn)


def advance(state: State, count: int) -> State:
    """The state after ``count`` more windows, in as many steps as the stride doubles."""
    items, stride, pn = state
    if count < stride - pn:
        return items, stride, pn + count
    count -= stride - pn
    items += 1
    while True:
        if items >= MAX_WINDOWS:
            items, stride = (items + 1) // 2, stride * 2
        full = min(count // stride, MAX_WINDOWS - items)
        items, count = items + full, count - full * stride
        if items < MAX_WINDOWS:
            return items, stride, count


class Kept:
    """The windows kept for the report, in file order, at most MAX_WINDOWS: when full, pairs are
    merged and each later entry stands for ``stride`` logged windows."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.stride = 1
        self.pending: dict[str, Any] | None = None

    def state(self) -> State:
        return len(self.items), self.stride, self.pending["n"] if self.pending is not None else 0

    def add(self, w: dict[str, Any]) -> None:
        self.pending = w if self.pending is None else _merge(self.pending, w)
        if self.pending["n"] < self.stride:
            return
        self._append([self.pending])
        self.pending = None

    def _append(self, new: list[dict[str, Any]]) -> None:
        self.items += new
        if len(self.items) >= MAX_WINDOWS:
            it = self.items
            self.items = [_merge(it[i], it[i + 1]) if i + 1 < len(it) else it[i] for i in range(0, len(it), 2)]
            self.stride *= 2

    def add_batch(self, b: Batch, whole: bool) -> int:
        """Add the batch's windows as :meth:`add` would, one by one; with ``whole`` false, stop
        before a last entry the batch does not fill (those windows stay to be added). Returns
        the windows added."""
        i, n = 0, len(b)
        while i < n and self.pending is not None:
            self.add(b.window(i))
            i += 1
        while n - i >= self.stride:
            groups, stride = min(MAX_WINDOWS - len(self.items), (n - i) // self.stride), self.stride
            self._append(_fold(b, i, groups, stride))
            i += groups * stride
        if whole:
            for j in range(i, n):
                self.add(b.window(j))
            i = n
        return i

    def done(self) -> list[dict[str, Any]]:
        if self.pending is not None:
            self.items.append(self.pending)
            self.pending = None
        return self.items


class Sums:
    """Weighted sums of windows: the merged figure is sum(weight x accept length) / sum(weight)."""

    def __init__(self) -> None:
        self.w = self.wal = 0.0
        self.n = 0
        self.exact = True
        self.pos: list[float] | None = None
        self.pos_w = 0.0

    def add(self, win: dict[str, Any]) -> None:
        self.n += 1
        self.w += win["weight"]
        self.wal += win["weight"] * win["accept_length"]
        self.exact = self.exact and win["exact"]
        p = win["per_position"]
        if p is not None and (self.pos is None or len(self.pos) == len(p)):
            self.pos = [a + b * win["weight"] for a, b in zip(self.pos or [0.0] * len(p), p)]
            self.pos_w += win["weight"]

    def add_batch(self, b: Batch, stop: int) -> None:
        """The batch's first ``stop`` windows, summed in order as :meth:`add` sums them."""
        if stop <= 0:
            return
        w = b.weight[:stop]
        self.n += stop
        self.w = float(np.cumsum(np.concatenate(([self.w], w)))[-1])
        self.wal = float(np.cumsum(np.concatenate(([self.wal], w * b.accept_length[:stop])))[-1])
        self.exact = False

    @property
    def accept_length(self) -> float | None:
        return self.wal / self.w if self.w > 0 else None

    @property
    def per_position(self) -> list[float] | None:
        return [x / self.pos_w for x in self.pos] if self.pos and self.pos_w > 0 else None
