"""What verify measures beyond one figure: concurrency levels and context-length bins."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ckpttools.engines.http import Prompt
from ckpttools.errors import CkptError, ConfigError, opt

__all__ = [
    "level_summary",
    "check_context_prompts",
    "context_prompts",
    "context_limits",
    "context_bins",
    "parse_lengths",
]


def level_summary(rep: Any) -> dict[str, Any]:
    """One measured run in a few figures (a concurrency level or a context bin)."""
    return {
        "concurrency": rep.concurrency,
        "figures": rep.figures,
        "completed": rep.completed,
        "failed": rep.failed,
        "accept_length": rep.accept_length,
        "accept_length_ci95": rep.accept_length_ci95,
        "per_position_acceptance": rep.per_position_acceptance,
        "output_tokens_per_s": rep.output_tokens_per_s,
        "latency_s": rep.latency_s,
    }


def parse_lengths(text: str) -> list[int]:
    """'1k,8k,32768' -> [1024, 8192, 32768] (k = 1024)."""
    out = []
    if not text.strip():
        raise ConfigError(
            "no context length given", hint=f"give {opt('context_lengths')} as e.g. 1k,8k,32768, or leave it out"
        )
    for part in text.split(","):
        p = part.strip().lower()
        mult = 1024 if p.endswith("k") else 1
        digits = p[:-1] if mult > 1 else p
        # ASCII digits only: int() would also take "1_000" and other scripts' digits ("１２８")
        if not (digits.isascii() and digits.isdigit()):
            raise ConfigError(
                f"context length {part.strip()[:40]!r} is not a number of tokens",
                hint=f"give {opt('context_lengths')} as e.g. 1k,8k,32768",
            )
        if len(digits) > 9:  # past MAX_CONTEXT_LENGTH whatever the digits, and past int()'s digit limit
            raise ConfigError(
                f"context length {digits[:12]}... is out of range: at most {MAX_CONTEXT_LENGTH} tokens",
                hint="no released target reads more; lengths past the target's own context are skipped anyway",
            )
        n = int(digits) * mult
        if n < 2:
            raise ConfigError(f"context length {n} is too short", hint="give lengths of at least 2 tokens")
        if n > MAX_CONTEXT_LENGTH:
            raise ConfigError(
                f"context length {n} is out of range: at most {MAX_CONTEXT_LENGTH} tokens",
                hint="no released target reads more; lengths past the target's own context are skipped anyway",
            )
        out.append(n)
    if len(set(out)) > MAX_CONTEXT_BINS:
        raise ConfigError(f"{len(set(out))} context lengths: at most {MAX_CONTEXT_BINS}", hint="give fewer lengths")
    return sorted(set(out))


#: the longest context a bin may ask for (16M tokens), and the most bins in one run
MAX_CONTEXT_LENGTH = 1 << 24
MAX_CONTEXT_BINS = 32


def check_context_prompts(prompts: list[Prompt]) -> None:
    """Refuse, before anything runs, prompts that no bin can be built from (text without token ids)."""
    if any(p.input_ids is None for p in prompts):
        raise ConfigError(
            "context lengths need token ids to build prompts of an exact length",
            hint=f"give {opt('tokenizer')} (or, with a launched server, a target that has tokenizer.json), "
            "or prompts with input_ids",
        )


def context_prompts(prompts: list[Prompt], length: int, max_new_tokens: int) -> list[Prompt]:
    """Each prompt lengthened to ``length - max_new_tokens`` tokens: the other prompts of its
    category (in turn, from the next one) come first, as a long document before a question,
    and the prompt itself last; prompt plus generation then ends at ``length``, and a bin
    keeps the set's mix of categories."""
    check_context_prompts(prompts)
    n = length - max_new_tokens
    by: dict[str, list[Prompt]] = {}
    for p in prompts:
        by.setdefault(p.category, []).append(p)
    out = []
    for p in prompts:
        same = by[p.category]
        j = next(k for k, q in enumerate(same) if q is p) + 1
        own = p.input_ids or []
        ids: list[int] = []
        while len(ids) + len(own) < n:  # the category's other prompts first, the prompt itself last
            ids.extend(same[j % len(same)].input_ids or [])
            j += 1
        out.append(Prompt(input_ids=(ids + own)[-n:], category=p.category))
    return out


def config_at(path: str | None) -> dict[str, Any] | None:
    """The config.json of a local checkpoint directory that the run has not opened (a drafter
    measured on a running server), read for the context axis; None where there is none to read."""
    if path is None or not (Path(path) / "config.json").is_file():
        return None
    from ckpttools.io.inputs import read_json

    try:
        got = read_json(Path(path) / "config.json", "config")
    except (CkptError, OSError):
        return None
    return got if isinstance(got, dict) else None


def context_limits(tcfg: dict[str, Any] | None, dcfg: dict[str, Any] | None, served: int | None) -> dict[str, Any]:
    """The lengths a context axis marks, from the target's and the drafter's configs as the run read
    them (None: not read): the target's context (``served`` first: the context the launch's engine
    arguments set, as the engine reads them, e.g. vLLM's ``--max-model-len 1k``), the drafter's
    max_position_embeddings and its rope scaling's original length and factor."""
    from ckpttools.engines.config_rules import context_length

    from ckpttools.formats.config import lookup

    target_ctx = served or context_length(tcfg)[0]
    out: dict[str, Any] = {"target_context": target_ctx, "drafter_max_position_embeddings": None, "drafter_rope": None}
    if dcfg:  # where inspect reads them: the top level, or a sub-config (speculators' transformer_layer_config)
        mpe = lookup(dcfg, "max_position_embeddings")[0]
        out["drafter_max_position_embeddings"] = mpe if type(mpe) is int else None
        rs = lookup(dcfg, "rope_scaling")[0]
        if isinstance(rs, dict):
            out["drafter_rope"] = {
                k: rs.get(k) for k in ("rope_type", "type", "factor", "original_max_position_embeddings") if k in rs
            }
    return out


def context_bins(
    asked: list[int],
    prompts: list[Prompt],
    limits: dict[str, Any],
    max_new_tokens: int,
    measure: Callable[[list[Prompt]], Any],
) -> dict[str, Any]:
    """The report's ``context``: each asked length measured on ``prompts`` built to it (``measure``
    returns a report), or skipped with the reason; with the limits the axis marks. A bin's prompts
    are built only when it is measured, one bin at a time: a length past the target's context
    costs nothing (16 prompts of 16M tokens would be gigabytes of lists)."""
    tctx, dmpe = limits["target_context"], limits["drafter_max_position_embeddings"]
    out: list[dict[str, Any]] = []
    for n in asked:
        entry: dict[str, Any] = {"tokens": n, "past_drafter_context": bool(dmpe and n > dmpe)}
        if n <= max_new_tokens:
            entry["skipped"] = f"{n} tokens leave no room for the prompt before {max_new_tokens} new tokens"
        elif tctx and n > tctx:
            entry["skipped"] = f"past the target's context of {tctx} tokens"
        else:
            entry |= level_summary(measure(context_prompts(prompts, n, max_new_tokens)))
        out.append(entry)
    return {**limits, "bins": out}
