"""The CLI's numeric parameter types: every numeric option of every command is one of these.

Each is finite, of its kind (whole number or not), inside a stated range, and a bad value
is one usage error naming the bound (exit 2). The checks themselves are the library's
(:func:`ckpttools.io.inputs.check_number`), so a library caller gets the same bounds.
"""

from __future__ import annotations

from typing import Any

import click

from ckpttools.formats.config import MAX_VOCAB_SIZE
from ckpttools.io.inputs import BOUNDS, Bound, check_number

__all__ = [
    "check_python",
    "Path",
    "Bounded",
    "PORT",
    "SECONDS",
    "PROMPTS",
    "NEW_TOKENS",
    "STEPS",
    "TOPK",
    "TP",
    "VOCAB",
    "SHOW",
    "TEMPERATURE",
    "ACCEPT_LEN",
    "MAX_CONCURRENCY",
    "MAX_LEVELS",
    "REPEAT",
    "levels",
    "LEVELS",
]


class Path(click.Path):
    """click's Path, less the empty string: ``--output ""`` once wrote nothing and said nothing, and
    ``--swap-root ""`` trusted the current folder. An empty path is one usage error (exit 2)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value == "":
            self.fail("an empty path: give a file or folder name, or leave the option out", param, ctx)
        return super().convert(value, param, ctx)


class Bounded(click.ParamType):
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``); whole with ``integer``."""

    def __init__(
        self, lo: float | None, hi: float | None, *, integer: bool, lo_open: bool = False, unit: str = ""
    ) -> None:
        self.lo, self.hi, self.integer, self.lo_open, self.unit = lo, hi, integer, lo_open, unit
        self.name = "integer" if integer else "number"

    @classmethod
    def of(cls, b: Bound) -> Bounded:
        """The click type of the library's range ``b`` (:data:`ckpttools.io.inputs.BOUNDS`)."""
        return cls(b.lo, b.hi, integer=b.integer, lo_open=b.lo_open, unit=b.unit)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None:
            return None
        name = _flag(param)
        try:
            return check_number(
                value, name, lo=self.lo, hi=self.hi, integer=self.integer, lo_open=self.lo_open, unit=self.unit
            )
        except ValueError as e:
            self.fail(str(e), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str | None:
        lo = "" if self.lo is None else f"{self.lo:g}"
        hi = "" if self.hi is None else f"{self.hi:g}"
        return f"{'INTEGER' if self.integer else 'NUMBER'} {'(' if self.lo_open else '['}{lo}-{hi}]"


def _flag(param: click.Parameter | None) -> str:
    if param is None:
        return "the value"
    longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    return (longs or list(getattr(param, "opts", [])) or [param.name or "the value"])[0]


#: a TCP port
PORT = Bounded.of(BOUNDS["port"])
#: a wait, in seconds: more than 0, at most a week
SECONDS = Bounded.of(BOUNDS["seconds"])
#: how many prompts: at most the size of any real prompt set we would send one by one
PROMPTS = Bounded.of(BOUNDS["num_prompts"])
#: how often each prompt is sent
REPEAT = Bounded.of(BOUNDS["repeat"])
#: tokens to generate per request
NEW_TOKENS = Bounded.of(BOUNDS["max_new_tokens"])
#: EAGLE draft steps (SGLang and vLLM take small numbers; 64 is far past any useful one)
STEPS = Bounded.of(BOUNDS["steps"])
TOPK = Bounded.of(BOUNDS["topk"])
#: tensor-parallel size
TP = Bounded.of(BOUNDS["tp"])
VOCAB = Bounded(1, MAX_VOCAB_SIZE, integer=True)
SHOW = Bounded(0, 1_000_000, integer=True)
#: sampling temperature (0: greedy)
TEMPERATURE = Bounded.of(BOUNDS["temperature"])
#: tokens per verify step: at least 1, at most steps + 1 (checked against --steps by the command)
ACCEPT_LEN = Bounded.of(BOUNDS["min_accept_len"])
#: the most requests in flight at one level
MAX_CONCURRENCY = int(BOUNDS["concurrency"].hi or 0)
#: the most concurrency levels one run measures
MAX_LEVELS = 32


def levels(text: str, flag: str = "--concurrency") -> list[int]:
    """A comma list of concurrency levels, each a whole number in [1, MAX_CONCURRENCY]."""
    parts = [x.strip() for x in str(text).split(",")]
    if not any(parts) or len(parts) > MAX_LEVELS or not all(parts):
        shown = text if len(text) <= 40 else f"{text[:37]}..."
        raise click.BadParameter(
            f"{shown!r}: give 1 to {MAX_LEVELS} whole numbers, comma-separated, e.g. 1 or 1,8", param_hint=flag
        )
    out = []
    for x in parts:
        try:
            out.append(int(BOUNDS["concurrency"].check(x, flag)))
        except ValueError as e:
            raise click.BadParameter(f"{e}", param_hint=flag) from None
    if len(set(out)) != len(out):
        raise click.BadParameter(f"{text!r}: a level given twice (each is measured once)", param_hint=flag)
    return out


class Levels(click.ParamType):
    """A comma list of concurrency levels (:func:`levels`), parsed as click reads the option."""

    name = "levels"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, list):
            return value
        return levels(value, _flag(param))


#: ``--concurrency``: 1 to 32 levels, each in [1, MAX_CONCURRENCY]
LEVELS = Levels()


def check_python(python: str | None, flag: str = "--engine-python") -> None:
    """The interpreter that has the engine: an executable file, checked before anything starts."""
    if python is None:
        return
    import os
    import shutil

    found = shutil.which(python) if os.sep not in python else python
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise click.BadParameter(f"{python!r} is not an executable Python interpreter", param_hint=flag)
