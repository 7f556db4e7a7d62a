"""validate's result: a :class:`Finding` per check, the :class:`ValidationReport` that holds them,
and what ``validate --fix`` repairs (its hints name ``--fix`` only when its output would validate;
otherwise ``ckpt export``). Every check module builds on this one; :mod:`ckpttools.ops.validate`
re-exports its names."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from pathlib import Path

from ckpttools.engines.claims import applied
from ckpttools.engines.opened import OpenedDrafter, open_once
from ckpttools.io.checkpoint import Checkpoint
from ckpttools.schemas import load_schema

__all__ = ["SEVERITIES", "FIX_REPAIRS", "Finding", "ValidationReport", "schema", "fix_repairs", "route_fix_hints"]

SEVERITIES = ("error", "warning", "info")


#: the errors ``validate --fix`` repairs (architectures only for engines.flavor.FIXABLE_ARCHS; the fields only when missing)
FIX_REPAIRS = {
    "config.architectures",
    "config.bom",
    "target.context_length",
    "config.num_hidden_layers",
    "config.draft_vocab_size",
    "config.torch_dtype",
    "tensors.dropped",
}


#: hint text naming --fix, and what it says when --fix would leave other errors (export repairs more)
_FIX_TEXTS = {
    "(ckpt validate --fix does it)": "(ckpt export does it)",
    "(ckpt validate --fix does)": "(ckpt export does)",
    " (ckpt export --target TARGET does; so does ckpt validate --fix --target TARGET)": (
        " (ckpt export --target TARGET does)"
    ),
}


@dataclass
class Finding:
    """One result of one check."""

    id: str
    severity: str
    location: str
    message: str
    hint: str | None = None


@dataclass
class ValidationReport:
    """The findings of :func:`validate`, plus what was checked."""

    drafter: str
    target: str | None
    checked: list[str]
    findings: list[Finding] = field(default_factory=list)
    #: for a Hub drafter: the repo, revision, commit and bytes transferred (``describe()``)
    hub: dict[str, Any] | None = None
    #: the engine release whose reading was checked (``name==version``), and how it was chosen
    engine_release: str | None = None
    engine_release_from: str | None = None
    #: what that release builds from the drafter (engines.load_plan), when asked for
    load_plan: dict[str, Any] | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def counts(self) -> dict[str, int]:
        return {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter,
            "target": self.target,
            "checked": self.checked,
            "ok": self.ok,
            "counts": self.counts(),
            "findings": [asdict(f) for f in self.findings],
            **({"hub": self.hub} if self.hub is not None else {}),
            "engine_release": self.engine_release,
            "engine_release_from": self.engine_release_from,
            **({"load_plan": self.load_plan} if self.load_plan is not None else {}),
        }


@lru_cache(maxsize=None)
def schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped in ckpttools.schemas."""
    return load_schema(name)


def fix_repairs(f: Finding) -> bool:
    """Whether ``validate --fix`` repairs this error (ops/fix.py)."""
    if f.id not in FIX_REPAIRS:
        return False
    if f.id == "config.architectures":
        fixable = any(f.message.startswith(_claim_prefix(k)) for k in ("arch.plain_llama", "arch.vllm_name"))
        return fixable and _claim_prefix("norms.vllm_later") not in f.message
    if f.id in ("config.num_hidden_layers", "config.draft_vocab_size", "config.torch_dtype"):
        return "is missing" in f.message
    return True


def _claim_prefix(key: str) -> str:
    """An SGLang claim's text up to its first field: what every message made from it starts with."""
    return applied("sglang").claims.value[key][0].split("{")[0]


def route_fix_hints(findings: list[Finding]) -> list[Finding]:
    """Hints name ``validate --fix`` only when its output would validate, that is when it repairs every
    error; otherwise they name ``ckpt export``, which rewrites the whole drafter."""
    if all(fix_repairs(f) for f in findings if f.severity == "error"):
        return findings
    out = []
    for f in findings:
        hint = f.hint
        for old, new in _FIX_TEXTS.items():
            hint = hint.replace(old, new) if hint else hint
        out.append(Finding(f.id, f.severity, f.location, f.message, hint))
    return out


def open_drafter(
    drafter: str | Path | Checkpoint | OpenedDrafter,
) -> tuple[dict[str, Any] | None, Checkpoint | None, str]:
    """(config, checkpoint or None for a config alone, the name to report) of a drafter path, checkpoint,
    or drafter opened already (:func:`ckpttools.engines.opened.open_once`: not opened again)."""
    d = open_once(drafter)
    return d.config, d.checkpoint, d.source
