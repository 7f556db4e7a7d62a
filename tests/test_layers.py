"""The house: lower layers never import higher ones, and the published schemas equal the
ones the package uses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "ckpttools"

#: the layers, lowest first; a module may import its own layer and those below it
#: (``ops`` converts checkpoints; ``measuring`` validates a drafter before it measures or swaps one
#: in, so it sits above ``ops``, and nothing in ``ops`` may import it)
LAYERS = ["errors", "schemas", "io", "formats", "vocab", "engines", "ops", "measuring", "demo", "cli", "root"]


def _layer(module: str) -> str | None:
    """The layer a module is in; the package root (``import ckpttools``, ``from ckpttools import
    X``) is the top layer: it re-exports everything, so nothing inside may import it."""
    parts = module.split(".")
    if parts[0] != "ckpttools":
        return None
    return parts[1] if len(parts) >= 2 and parts[1] != "__main__" else "root"


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def test_every_module_is_in_a_layer() -> None:
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG)
        top = rel.parts[0].removesuffix(".py")
        assert top in LAYERS or top in ("__init__", "__main__"), f"{rel} is in no layer"


@pytest.mark.parametrize("path", sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")))
def test_lower_layers_never_import_higher_ones(path: str) -> None:
    p = PKG / path
    here = p.relative_to(PKG).parts[0].removesuffix(".py")
    if here not in LAYERS:  # the package's own __init__ and __main__ sit above every layer
        return
    for mod in _imports(p):
        there = _layer(mod)
        if there is None or there not in LAYERS:
            continue
        assert LAYERS.index(there) <= LAYERS.index(here), f"{path} ({here}) imports {mod} ({there}), a higher layer"


def test_no_relative_imports_across_layers() -> None:
    """Imports inside the package are absolute, so a move shows up in one grep."""
    for p in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                raise AssertionError(f"{p.relative_to(REPO)}: relative import of {node.module}")


def test_published_schemas_equal_the_packaged_ones() -> None:
    published = sorted((REPO / "schemas").glob("*.json"))
    packaged = sorted((PKG / "schemas").glob("*.json"))
    assert [p.name for p in published] == [p.name for p in packaged]
    for a, b in zip(published, packaged):
        assert a.read_bytes() == b.read_bytes(), f"schemas/{a.name} differs from ckpttools/schemas/{b.name}"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_library_messages_never_name_cli_flags() -> None:
    """Library text refers to parameters through ``errors.opt``; only cli/ spells ckpt's flags.

    Allowed: docstrings; engine flags (SGLang's, vLLM's), which the launcher and the demo
    pass to engines and which messages cite when they say how to launch one; and whole
    ``ckpt ...`` command lines in validate's advice.
    """
    import re

    engine_flags = re.compile(
        r"--(speculative|dtype|model|tp-size|tensor-parallel|host|port|max-model-len|enforce|skip-tokenizer|"
        r"attention-backend|sampling-backend|grammar-backend|disable-cuda|per-request-spec-decode-metrics|context-length|"
        r"max-total-tokens|quantization|kv-cache-memory-bytes)"
    )
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        if path.relative_to(PKG).parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip:
                continue
            if "ckpt " in node.value:
                continue
            for m in re.finditer(r"(?<![\w-])--[a-z][a-z-]+", node.value):
                if not engine_flags.match(m.group(0)):
                    bad.append(f"{path.relative_to(PKG)}:{node.lineno}: {m.group(0)}")
    assert not bad, bad


def test_no_function_over_60_lines() -> None:
    """Functions a reader can hold: at most 60 lines from ``def`` to the end, the docstring not counted."""
    long = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    n -= first.end_lineno - first.lineno + 1  # type: ignore[operator]
                if n > 60:
                    long.append(f"{path.relative_to(PKG)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long
