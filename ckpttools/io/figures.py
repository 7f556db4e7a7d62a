"""One reader for figures from outside: the numbers in server logs and in servers' answers.

A server's figures reach ckpttools as text in its log (``accept len: 3.62``) or as JSON
numbers in its answers (``"spec_verify_ct": 10``). Either way they are checked here, as what
they are, before anything adds them up:

- **text** is decimal as the engines write it (``%d``, ``%.2f``, ``f"{x:.3f}"``): ASCII digits,
  at most one point with digits after it, an optional leading minus, no leading zero, at most
  :data:`MAX_TEXT` characters. ``float()`` alone would also take ``1_5`` (15), ``٣``, ``1e308``,
  ``inf``, ``nan`` and spaces: none of those is a figure.
- **kinds** have ranges (:data:`KINDS`): counts are integers in [0, 2^53] (exact as floats, so a
  sum of them is exact and finite), running or queued requests integers in [0, 2^24], rates in
  [0, 1], throughputs in [0, 10^12] tokens/s; an accept length (tokens per verify step) lies in
  [1, steps + 1]; a per-position list has at most :data:`MAX_STEPS` entries.
- a JSON count is an ``int`` (not a float, not a bool) within its kind's range.

Every figure that passes is finite and bounded, so a sum of up to 2^40 of them (a log's worth
of windows, weighted) is finite too. A figure that fails raises :class:`FigureError`, whose
``reason`` is short, fixed text (it keys the ``skipped`` counts of a report): the caller skips
the line, or refuses the answer, and says why.

    >>> read(b"3.62", "length", steps=3)
    3.62
    >>> read(b"1_5", "count")
    Traceback (most recent call last):
    ...
    ckpttools.io.figures.FigureError: not a decimal number
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FigureError",
    "Kind",
    "KINDS",
    "MAX_STEPS",
    "MAX_TEXT",
    "read",
    "read_list",
    "value",
    "whole",
    "length_bound",
]

#: the most characters of one figure's text (2^53 has 16 digits; %.2f of 10^12 has 16)
MAX_TEXT = 40
#: the most draft steps a server runs (the CLI's bound on --steps); a per-position list is no longer
MAX_STEPS = 64

_DECIMAL = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_INTEGER = re.compile(rb"0|[1-9][0-9]*")


class FigureError(ValueError):
    """A figure that is not one: not decimal text, not an integer where a count is, or out of its range."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Kind:
    """What a figure is: its range and whether it is a whole number."""

    name: str
    lo: float
    hi: float
    integer: bool = False

    @property
    def rule(self) -> str:
        what = "an integer" if self.integer else "a number"
        return f"{what} in [{_g(self.lo)}, {_g(self.hi)}]"


def _g(x: float) -> str:
    if x >= 2**20 and math.log2(x).is_integer():
        return f"2^{int(math.log2(x))}"
    return f"{x:g}"


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("count", 0, 2**53, integer=True),  # tokens, drafts, verify steps
        Kind("requests", 0, 2**24, integer=True),  # running or queued requests
        Kind("rate", 0, 1),  # a fraction (acceptance rate)
        Kind("percent", 0, 100),
        Kind("throughput", 0, 1e12),  # tokens/s
        Kind("length", 1, MAX_STEPS + 1),  # tokens per verify step; read() narrows it to [1, steps + 1]
        Kind("per_step", 0, MAX_STEPS + 1),  # tokens or accepted drafts per step, in a stated convention
    )
}


def length_bound(steps: int | None) -> float:
    """The most tokens per verify step with ``steps`` draft steps (None: the most any server runs)."""
    if steps is None or not 1 <= steps <= MAX_STEPS:
        steps = MAX_STEPS
    return float(steps + 1)


def read(text: bytes | str, kind: str, *, steps: int | None = None) -> float:
    """The figure ``text`` as a number of ``kind`` (an int for the integer kinds).

    Args:
        text: the figure as the log has it (bytes, or str).
        kind: a key of :data:`KINDS`.
        steps: for ``length``: the draft steps, which bound it at steps + 1.

    Raises:
        FigureError: not decimal text, not an integer for a count, or out of range.
    """
    b = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    k = KINDS[kind]
    if len(b) > MAX_TEXT or _DECIMAL.fullmatch(b) is None:
        raise FigureError("not a decimal number")
    if k.integer:
        if _INTEGER.fullmatch(b) is None:
            raise FigureError(f"not {k.rule}")
        v: float = int(b)
    else:
        v = float(b)
    _check(v, k, steps)
    return v


def read_list(text: bytes | str, kind: str, *, sep: bytes = b",", most: int = MAX_STEPS) -> list[float]:
    """A list of figures of ``kind``, ``sep``-separated (spaces around each allowed), 1 to ``most`` of them.

    Raises:
        FigureError: empty, longer than ``most``, or an entry :func:`read` refuses.
    """
    b = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    if b.count(sep) >= most:
        raise FigureError(f"a list of more than {most} figures")
    parts = [p.strip(b" ") for p in b.split(sep)]
    if not parts or any(not p for p in parts):
        raise FigureError("an empty figure in a list")
    return [read(p, kind) for p in parts]


def value(v: Any, kind: str, *, steps: int | None = None) -> float:
    """A number a server sent as JSON (or a Prometheus sample), checked as ``kind``: an integer kind
    takes an ``int`` only (a Prometheus counter's float only where it is whole); a bool is no number.

    Raises:
        FigureError: not a number of the kind, not finite, or out of range.
    """
    k = KINDS[kind]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FigureError(f"not {k.rule}")
    if isinstance(v, float) and not math.isfinite(v):
        raise FigureError("not a finite number")
    if k.integer and not isinstance(v, int):
        raise FigureError(f"not {k.rule}")
    _check(v, k, steps)
    return v


def whole(v: Any, kind: str = "count") -> int:
    """A Prometheus counter's sample (always a float in its text format) as a count: finite,
    whole, within the kind's range.

    Raises:
        FigureError: not finite, not whole, or out of range.
    """
    k = KINDS[kind]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or float(v) != int(v):
        raise FigureError(f"not {k.rule}")
    n = int(v)
    _check(n, k, None)
    return n


def _check(v: float, k: Kind, steps: int | None) -> None:
    hi = length_bound(steps) if k.name == "length" else k.hi
    if not k.lo <= v <= hi:
        raise FigureError(f"not {k.rule}" if k.name != "length" else f"outside [1, {_g(hi)}] (draft steps + 1)")
