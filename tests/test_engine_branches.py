"""Engine behaviour lives in the engine objects (ckpttools/engines/engine.py): no module of ops/,
measuring/ or cli/ branches on an engine's name.

Looked for: a comparison whose one side is an engine's name (a name or attribute called ``engine``,
``engine_name``, ``*_engine``, ``.name`` of one, or ``resolve(...).name``) and whose other side is an
engine's name spelled out, or a tuple, list or set holding one (``engine == "sglang"``,
``rep.engine != "vllm"``, ``engine in ("sglang", "vllm")``). ops/, measuring/ and cli/ ask the engine object
instead (``engine_for(name).reads_counters``). Layout and format names that happen to be spelled as an
engine (``fmt == "vllm"``: export's output format) are not engines and are not looked for.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ckpttools"
ENGINE_WORDS = {"sglang", "vllm", "torch", "trtllm", "auto"}


def _is_engine_operand(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "engine" or node.id.endswith("_engine") or node.id == "engine_name"
    if isinstance(node, ast.Attribute):
        if node.attr in ("engine", "engine_name") or node.attr.endswith("_engine"):
            return True
        if node.attr == "name":
            v = node.value
            called = isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("resolve", "engine_for")
            return called or _is_engine_operand(v)
        return False
    if isinstance(node, ast.Subscript):  # r.info["engine"]
        s = node.slice
        return isinstance(s, ast.Constant) and s.value == "engine"
    return False


def _strings(node: ast.AST) -> set[str] | None:
    """The strings a literal holds (a string, or a tuple/list/set of them); None: no such literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
        got = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return set(got) if len(got) == len(node.elts) else None
    return None


def branches(source: str) -> list[str]:
    """Each engine-name comparison in ``source``: ``line: text``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for a, b in zip(sides, sides[1:]):
            for x, y in ((a, b), (b, a)):
                lit = _strings(y)
                if lit is None:
                    continue
                if _is_engine_operand(x) and lit & ENGINE_WORDS:
                    out.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(set(out))


def _modules() -> list[Path]:
    return sorted(p for top in ("ops", "measuring", "cli") for p in (PKG / top).rglob("*.py"))


def test_the_scan_finds_what_it_looks_for() -> None:
    assert branches('if engine == "sglang": pass')
    assert branches('x = rep.engine != "vllm"')
    assert branches('ok = engine in ("sglang", "vllm")')
    assert branches('ok = launch.engine not in ["torch"]')
    assert branches('ok = "vllm" == kind.engine')
    assert branches('ok = resolve(engine).name != "sglang"')
    assert not branches('ok = "==" in engine or fmt == "vllm"')
    assert branches('ok = spec.engine.name == "sglang"')
    assert not branches("ok = lr.engine != rep.engine")  # two engines compared: no name spelled
    assert not branches('ok = engine_for(engine).reads_counters and mode == "fast"')
    assert len(_modules()) > 15


@pytest.mark.parametrize("path", [str(p.relative_to(PKG)) for p in _modules()])
def test_no_engine_branch_in_ops_or_cli(path: str) -> None:
    hits = branches((PKG / path).read_text(encoding="utf-8"))
    assert not hits, f"ckpttools/{path} branches on engine names (ask the engine object, engines/engine.py): {hits}"
