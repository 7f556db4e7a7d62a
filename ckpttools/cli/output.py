"""Rendering helpers for the CLI: human sizes, aligned tables, JSON to stdout."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ckpttools.io.units import human_bytes

__all__ = ["human_bytes", "human_count", "table", "emit_json", "byte_progress"]


def human_count(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], indent: str = "  ") -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for j, r in enumerate(cells):
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if j == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit_json(obj: Any) -> None:
    """JSON to stdout, indented (orjson: fast even for a 35,000-tensor table)."""
    import orjson

    try:
        data = orjson.dumps(obj, default=_default, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    except TypeError as e:
        if "UTF-8" not in str(e):
            raise
        # a file name that is not UTF-8 (Python holds its bytes as lone surrogates, which orjson refuses):
        # the same JSON with every non-ASCII character escaped, each such byte as \udcXX
        import json

        from ckpttools.io.guard import finite

        data = json.dumps(finite(obj), indent=2, default=_default, allow_nan=False).encode("ascii")
    sys.stdout.buffer.write(data + b"\n") if hasattr(sys.stdout, "buffer") else sys.stdout.write(data.decode() + "\n")
    sys.stdout.flush()


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class byte_progress:
    """A tqdm bar on stderr fed by ``progress(done, total, name)`` callbacks.

    Off when stderr is not a terminal or ``quiet`` is set.
    """

    def __init__(self, desc: str, quiet: bool = False) -> None:
        self.bar = None
        self.desc = desc
        self.enabled = not quiet and sys.stderr.isatty()

    def __call__(self, done: int, total: int, name: str) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.desc, unit="B", unit_scale=True, file=sys.stderr, leave=False)
        bar = self.bar
        assert bar is not None
        bar.set_postfix_str(name[-40:], refresh=False)
        bar.update(done - bar.n)

    def __enter__(self) -> "byte_progress":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
