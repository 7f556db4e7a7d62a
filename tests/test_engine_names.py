"""Engine knowledge lives in ckpttools/engines/ only: no other module of the package names an
engine release's version or an engine class (data files and tests excepted).

The names looked for are every class the release tables know (drafter classes and the
architectures that reach them, the aux-layer rules' target classes, the layouts' and target
families' class names), and anything shaped like a model class (``...ForCausalLM...``,
``...ForConditionalGeneration``, ``Eagle3...``) but transformers' own auto classes. The
versions are every known release's, and any other SGLang 0.5.x / vLLM 0.x release spelled out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ckpttools.engines import aux_rules, flavor, releases

PKG = Path(__file__).resolve().parents[1] / "ckpttools"

#: the package's own classes whose names happen to start like an engine's (the probe's torch drafter)
OWN_CLASSES = {"Eagle3Drafter"}

_SHAPED = re.compile(r"\b[A-Za-z0-9_]*(?:ForCausalLM|ForConditionalGeneration)[A-Za-z0-9_]*\b|\bEagle3[A-Z]\w*\b")


def _table_classes() -> set[str]:
    out: set[str] = set(aux_rules.RULES) | set(flavor.LAYOUT_ARCH.values()) | set(flavor.TARGET_ARCH.values())
    out |= set(flavor.FIXABLE_ARCHS) | set(flavor.MLA_ARCHS) | set(flavor.SPECULATORS_ARCHS)
    for rel in releases.KNOWN.values():
        for dc in rel.drafter_classes.value:
            out |= {dc.cls, *dc.archs}
    return out


def _versions() -> re.Pattern[str]:
    known = {r.version for r in releases.KNOWN.values() if r.name in ("sglang", "vllm")}
    spelled = "|".join(re.escape(v) for v in sorted(known, key=len, reverse=True))
    # a known release, or any SGLang 0.5.x / vLLM 0.2x-0.3x release number, not inside a longer number
    return re.compile(rf"(?<![\w.])(?:{spelled}|0\.5\.\d+|0\.[23]\d\.\d+)(?![\w]|\.\d)")


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if p.relative_to(PKG).parts[0] != "engines")


def _hits(text: str, classes: set[str], versions: re.Pattern[str]) -> list[str]:
    found = []
    for i, line in enumerate(text.splitlines(), 1):
        names = {m.group(0) for m in _SHAPED.finditer(line)} - OWN_CLASSES
        names = {n for n in names if not n.startswith("AutoModel")}  # transformers' auto classes
        names |= {c for c in classes if re.search(rf"\b{re.escape(c)}\b", line)}
        vers = {m.group(0) for m in versions.finditer(line)}
        if names or vers:
            found.append(f"{i}: {sorted(names | vers)}")
    return found


def test_the_scan_finds_what_it_looks_for() -> None:
    """The scan itself: a line naming a class or a release is found, one naming neither is not."""
    classes, versions = _table_classes(), _versions()
    assert _hits('arch = "LlamaForCausalLMEagle3"', classes, versions)
    assert _hits("SGLang 0.5.17 refuses it", classes, versions)
    assert _hits("vLLM 0.32 raises it", classes, versions)
    assert _hits("served as Eagle3Qwen3ForCausalLM", classes, versions)
    assert _hits("the KimiK25ForConditionalGeneration wrapper", classes, versions)
    assert not _hits("a float 0.325 and version 1.0.32 and Eagle3Drafter", classes, versions)
    assert len(_modules()) > 40 and len(classes) > 30


@pytest.mark.parametrize("path", [str(p.relative_to(PKG)) for p in _modules()])
def test_no_module_outside_engines_names_an_engine_release_or_class(path: str) -> None:
    hits = _hits((PKG / path).read_text(encoding="utf-8"), _table_classes(), _versions())
    assert not hits, f"ckpttools/{path} names engine releases or classes (move them to ckpttools/engines/): {hits}"
