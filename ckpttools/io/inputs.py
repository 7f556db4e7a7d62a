"""The input boundary: every JSON file and every number a user gives is read here.

- **JSON files** (prompts, configs, indexes, tokenizer.json, tokenizer_config.json,
  mapping and frequency files, the Hub listing cache) are read by :func:`read_json` /
  :func:`loads_json`: a size limit per kind of file, UTF-8 only, at most
  :data:`MAX_JSON_DEPTH` levels of nesting (a deeply nested file is one error line, never
  a RecursionError), and no NaN/Infinity literals.
- **JSONL text** (prompts, token-id frequency files) is split into lines by
  :func:`jsonl_lines` on ``\n`` only, as JSON Lines says: ``str.splitlines()`` also breaks at
  U+2028, U+0085, form feeds and the like, which a JSON string may hold unescaped.
- **Numbers** (every numeric option of every command) are checked by :func:`check_number`:
  finite, of the right kind, inside a stated range; the message names the bound.
  The CLI's parameter types (:mod:`ckpttools.cli.params`) are built on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpttools.errors import ConfigError

__all__ = [
    "MAX_JSON_DEPTH",
    "JSON_LIMITS",
    "read_json",
    "loads_json",
    "json_depth_ok",
    "check_number",
    "Bound",
    "BOUNDS",
    "jsonl_lines",
    "JSON_BLANK",
    "json_kind",
]

#: nesting deeper than this is refused: no config, index, tokenizer or prompt needs more
MAX_JSON_DEPTH = 64

#: the largest file read for each kind of JSON input, in bytes
JSON_LIMITS: dict[str, int] = {
    "config": 16 << 20,
    "index": 256 << 20,
    "tokenizer": 1 << 30,
    "tokenizer_config": 64 << 20,
    "mapping": 1 << 30,
    "frequencies": 1 << 30,
    "prompts": 1 << 30,
    "cache": 256 << 20,
    "json": 256 << 20,
}


#: the whitespace JSON allows between values (RFC 8259 section 2); a line of only these is blank
JSON_BLANK = " \t\r\n"


def jsonl_lines(text: str | Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) of each line of JSON Lines text that is not blank.

    ``text`` is split on ``\n`` only (an iterable of lines, e.g. a file opened with
    ``newline="\n"``, is taken as split); a ``\r`` before it is JSON whitespace. A line is
    blank when it holds JSON whitespace only (U+2028 or U+00A0 is not).
    """
    lines = text.split("\n") if isinstance(text, str) else text
    for n, line in enumerate(lines, 1):
        if line.strip(JSON_BLANK):
            yield n, line


def json_kind(v: Any) -> str:
    """What a JSON value is, for a message: ``a string ('x')``, ``a number (5)``, ``a list``, ``null``."""
    if v is None:
        return "null"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    name = names.get(type(v), type(v).__name__)
    if isinstance(v, (list, dict)):
        return name
    shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "..."
    return f"{name} ({shown})"


def json_depth_ok(obj: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``obj`` nests at most ``limit`` containers deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            if d > limit:
                return False
            values = o.values() if isinstance(o, dict) else o
            # the kinds of value first, in C: a 35,000-entry weight_map holds no container at all
            if any(issubclass(t, (dict, list)) for t in set(map(type, values))):
                stack.extend((v, d + 1) for v in values if isinstance(v, (dict, list)))
    return True


def loads_json(
    data: bytes | str,
    where: str,
    *,
    hint: str | None = None,
    max_depth: int = MAX_JSON_DEPTH,
    error: type[Exception] = ConfigError,
) -> Any:
    """Parse JSON text from an untrusted source; any failure is one ``error`` naming ``where``.

    Raises:
        ConfigError (or ``error``): not UTF-8, not JSON, NaN/Infinity, or nested too deep.
    """
    import orjson

    if isinstance(data, str):
        raw = data.encode("utf-8", errors="surrogatepass")
    else:
        raw = bytes(data)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        obj = orjson.loads(raw)  # C parser: no Python recursion; refuses NaN, Infinity and bytes not UTF-8
    except orjson.JSONDecodeError as e:
        try:  # which fault to name: text that is not UTF-8 first (decoded only here: a 3 MB index is 3 MB more)
            raw.decode("utf-8")
        except UnicodeDecodeError as u:
            raise _err(error, f"{where}: not UTF-8 text (byte {u.start})", where, hint) from None
        msg = str(e)
        if "recursion" in msg.lower() or "depth limit" in msg.lower():
            raise _err(error, f"{where}: nested more than {max_depth} levels deep", where, hint) from None
        raise _err(error, f"{where}: not valid JSON ({msg.splitlines()[0][:160]})", where, hint) from None
    if not json_depth_ok(obj, max_depth):
        raise _err(error, f"{where}: nested more than {max_depth} levels deep", where, hint)
    return obj


def _err(cls: type[Exception], msg: str, where: str, hint: str | None) -> Exception:
    try:
        return cls(msg, path=where, hint=hint)  # type: ignore[call-arg]
    except TypeError:
        return cls(msg)


def read_json(
    path: str | Path,
    kind: str = "json",
    *,
    hint: str | None = None,
    max_depth: int = MAX_JSON_DEPTH,
    error: type[Exception] = ConfigError,
) -> Any:
    """A JSON file, read whole (a regular file of at most ``JSON_LIMITS[kind]`` bytes) and parsed
    by :func:`loads_json`.

    Raises:
        ConfigError (or ``error``), CheckpointFormatError (not a regular file, too large),
        FileNotFoundError.
    """
    from ckpttools.io.fsutil import read_regular_bytes

    data = read_regular_bytes(path, JSON_LIMITS.get(kind, JSON_LIMITS["json"]))
    return loads_json(data, str(path), hint=hint, max_depth=max_depth, error=error)


def check_number(
    value: Any,
    name: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    integer: bool = False,
    lo_open: bool = False,
    unit: str = "",
) -> int | float:
    """``value`` as a finite number inside ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``).

    Raises:
        ValueError: naming the bound it broke (the CLI shows it as a bad parameter).
    """
    u = f" {unit}" if unit else ""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    if isinstance(value, str):
        text = value.strip()
        kind = "a whole number" if integer else "a number"
        if not text.isascii() or "_" in text:  # int() and float() also take "1_000" and other scripts' digits
            raise ValueError(f"{_shown(text)} is not {kind} (ASCII digits only)")
        if len(text) > 40 and text.lstrip("+-").isdigit():  # past every bound, and past int()'s digit limit
            side = "at least" if text.startswith("-") else "at most"
            bound = lo if text.startswith("-") else hi
            if bound is not None:
                raise ValueError(f"{_shown(text)} is out of range: {name} must be {side} {_fmt(bound)}{u}")
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            if integer:
                try:
                    f = float(text)
                except ValueError:
                    raise ValueError(f"{_shown(text)} is not a whole number") from None
                if not (math.isfinite(f) and f.is_integer()):
                    raise ValueError(f"{_shown(text)} is not a whole number") from None
                value = int(f)
            else:
                raise ValueError(f"{_shown(text)} is not a number") from None
    if not isinstance(value, (int, float)):
        raise ValueError(f"{_shown(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number")
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{value} is not a whole number")
        value = int(value)
    if lo is not None and (value < lo or (lo_open and value == lo)):
        rel = "more than" if lo_open else "at least"
        raise ValueError(f"{value}{u} is out of range: {name} must be {rel} {_fmt(lo)}{u}")
    if hi is not None and value > hi:
        raise ValueError(f"{value}{u} is out of range: {name} must be at most {_fmt(hi)}{u}")
    return value


def _shown(v: Any) -> str:
    """A value as a message quotes it: its repr, cut to 40 characters."""
    r = repr(v)
    return r if len(r) <= 40 else f"{r[:37]}..."


@dataclass(frozen=True)
class Bound:
    """The range of one numeric parameter: finite, in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``),
    whole with ``integer``. The CLI's types (:mod:`ckpttools.cli.params`) and the library's checks
    of the same parameters (:meth:`ckpttools.measuring.request.MeasureRequest.from_options`) use one."""

    lo: float | None
    hi: float | None
    integer: bool
    lo_open: bool = False
    unit: str = ""

    def check(self, value: Any, name: str) -> int | float:
        """:func:`check_number` of ``value`` against this range (ValueError naming ``name``)."""
        return check_number(
            value, name, lo=self.lo, hi=self.hi, integer=self.integer, lo_open=self.lo_open, unit=self.unit
        )


#: the ranges of the numbers a user gives, by the parameter they bound
BOUNDS: dict[str, Bound] = {
    #: a TCP port
    "port": Bound(1, 65535, True),
    #: a wait, in seconds: more than 0, at most a week
    "seconds": Bound(0, 7 * 86400, False, lo_open=True, unit="s"),
    #: how many prompts: at most the size of any real prompt set we would send one by one
    "num_prompts": Bound(1, 100_000, True),
    "repeat": Bound(1, 1000, True),
    #: tokens to generate per request
    "max_new_tokens": Bound(1, 1 << 20, True),
    #: EAGLE draft steps (SGLang and vLLM take small numbers; 64 is far past any useful one)
    "steps": Bound(1, 64, True),
    "topk": Bound(1, 64, True),
    #: tensor-parallel size
    "tp": Bound(1, 1024, True),
    #: sampling temperature (0: greedy)
    "temperature": Bound(0, 100, False),
    #: tokens per verify step: at least 1, at most steps + 1 (checked against the steps where known)
    "min_accept_len": Bound(1, 65, False),
    #: one concurrency level: the most requests in flight at once
    "concurrency": Bound(1, 1024, True),
}


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
