"""The boundaries as tests of the code: every output through the output guard, every numeric
option through one bounded type, every click option exercised by the hostile corpus."""

from __future__ import annotations

import re
from pathlib import Path

import click

from ckpttools.cli.commands import cli
from ckpttools.cli.params import Bounded
from tests.corpus import all_cases

PKG = Path(__file__).resolve().parents[1] / "ckpttools"

#: the one module that writes files (io/guard.py); the writer streams shards through guard.open_new
GUARD = {"io/guard.py"}
#: code that runs inside a serving engine's process, not ckpttools' (ckpttools is not importable there):
#: it writes only its answer, to the temporary directory the client made for it
ENGINE_SIDE = ("engines/serverside/",)
_WRITE = re.compile(
    r"""open\([^)]*["'](?:w|wb|a|ab|x|xb|w\+|r\+|wb\+|rb\+)["']|\.write_text\(|\.write_bytes\(|np\.save\(|"""
    r"""\bO_WRONLY\b|\bO_CREAT\b|\bO_RDWR\b|savefig\((?!buf)"""
)


def _commands() -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    todo: list[tuple[str, click.Command]] = [("", cli)]
    while todo:
        path, c = todo.pop()
        if isinstance(c, click.Group):
            todo += [(f"{path} {n}".strip(), sub) for n, sub in c.commands.items()]
        else:
            out.append((path, c))
    return out


def test_no_file_is_opened_for_writing_outside_the_guard() -> None:
    found = []
    for p in PKG.rglob("*.py"):
        rel = str(p.relative_to(PKG))
        if rel in GUARD or rel.startswith(ENGINE_SIDE):
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if _WRITE.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "files written outside ckpttools/io/guard.py:\n" + "\n".join(found)


def test_every_numeric_option_is_bounded() -> None:
    loose = []
    for path, c in _commands():
        for p in c.params:
            if isinstance(p, click.Option) and isinstance(
                p.type, (click.types.IntParamType, click.types.FloatParamType)
            ):
                if not isinstance(p.type, Bounded):
                    loose.append(f"ckpt {path} {p.opts[0]}")
    assert not loose, f"numeric options without a bounded type: {loose}"


def test_every_click_option_is_exercised_by_the_corpus() -> None:
    """A new flag is hostile until a corpus case gives it a value (per command)."""
    used: dict[str, set[str]] = {}
    names = {path for path, _ in _commands()}
    for case in all_cases():
        words = [a for a in case.argv if not a.startswith("-")]
        cmd = next((" ".join(words[:2]) for _ in [0] if " ".join(words[:2]) in names), words[0] if words else "")
        used.setdefault(cmd, set()).update(a.split("=")[0] for a in case.argv if a.startswith("-"))
    missing = []
    for path, c in _commands():
        for p in c.params:
            if isinstance(p, click.Option) and not p.hidden:
                flags = set(p.opts) | set(p.secondary_opts)
                if not flags & used.get(path, set()):
                    missing.append(f"ckpt {path} {p.opts[0]}")
    assert not missing, f"click options that no corpus case exercises: {missing}"
