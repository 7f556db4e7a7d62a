"""What an engine release does, said for the release being applied: :func:`claim` fills in a
claim text (:mod:`ckpttools.engines.claim_texts`, each with the source it was read from) in the
words validate, export, fix and the probe say it.

A release table (:mod:`ckpttools.engines.releases`) holds its claims in ``claims``; a newer
release inherits the older's, and replaces what changed. :func:`claim` fills a template in:
``{sglang}`` and ``{vllm}`` become the release being applied (``SGLang 0.5.23``), set with
:func:`applying`, and the other fields come from the caller. The operations never write an
engine's version or class name themselves: they name a claim, or ask :func:`arch` for a class.
The claim tables are re-exported here under their old names.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ckpttools.engines.claim_texts import SGLANG_CLAIMS, VLLM_AMX_MLA_CHECKS, VLLM_CLAIMS, vllm_amx_mla_claims
from ckpttools.engines.releases import ENGINES, EngineRelease

__all__ = [
    "SGLANG_CLAIMS",
    "VLLM_CLAIMS",
    "VLLM_AMX_MLA_CHECKS",
    "claim",
    "applying",
    "applied",
    "label",
    "arch",
    "archs",
    "ENGINE_NAMES",
    "vllm_amx_mla_claims",
]

#: how each engine is named in a message
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}


_APPLIED: contextvars.ContextVar[Mapping[str, EngineRelease] | None] = contextvars.ContextVar(
    "ckpt_applied_releases", default=None
)


@contextmanager
def applying(*releases: EngineRelease) -> Iterator[None]:
    """Within the block, claims and classes are those of these releases (others: the newest known)."""
    now = dict(_APPLIED.get() or {})
    now.update({r.name: r for r in releases})
    token = _APPLIED.set(now)
    try:
        yield
    finally:
        _APPLIED.reset(token)


def applied(engine: str) -> EngineRelease:
    """The release of ``engine`` being applied: the one :func:`applying` set, else the newest known."""
    got = (_APPLIED.get() or {}).get(engine)
    return got if got is not None else ENGINES[engine][-1]


def label(engine: str) -> str:
    """``SGLang 0.5.23``: the applied release, as a message names it."""
    return f"{ENGINE_NAMES.get(engine, engine)} {applied(engine).version}"


def arch(engine: str, loader: str) -> str:
    """The class name the applied release of ``engine`` builds with ``loader`` (``sglang_llama``,
    ``sglang_mla``, ``vllm_llama``, ``vllm_qwen3``, ``trtllm_eagle3``), as config.json names it."""
    for dc in applied(engine).drafter_classes.value:
        if dc.loader == loader:
            return dc.archs[0]
    raise KeyError(f"{applied(engine).spec} has no drafter class with loader {loader}")


def archs(engine: str) -> tuple[str, ...]:
    """Every ``architectures[0]`` the applied release of ``engine`` builds a drafter class for."""
    return tuple(a for dc in applied(engine).drafter_classes.value for a in dc.archs)


def claim(key: str, **fields: object) -> str:
    """The claim ``key`` ("sglang:mla.layers"), filled in: the applied releases' names, classes
    (``{llama}``: that engine's Llama drafter class; ``{mla}``: SGLang's MLA one; ``{qwen3}``:
    vLLM's Qwen3 one) and the caller's ``fields``."""
    engine, _, name = key.partition(":")
    text = applied(engine).claims.value[name][0]
    names = {"sglang": label("sglang"), "vllm": label("vllm")}
    classes = {"llama": arch(engine, f"{engine}_llama"), "mla": arch("sglang", "sglang_mla")}
    classes["qwen3"] = arch("vllm", "vllm_qwen3")
    return text.format(**{**names, **classes, **fields})
