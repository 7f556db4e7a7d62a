"""``ckpt verify``: measure accept length through a real server and give a verdict.

Two conventions are in use in the field; both are reported, labeled:
  - accept length = tokens per verify step = accepted drafts + 1 (SGLang's "accept len",
    vLLM's "mean acceptance length");
  - accepted drafts per step = accept length - 1.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ckpttools.engines.engine import SERVER_ENGINES, Engine, engine_for
from ckpttools.engines.http import Prompt, RequestResult, accept_limit, check_figures, check_url, detect_engine
from ckpttools.engines.launch import LaunchSpec
from ckpttools.errors import ConfigError, ImpossibleFiguresError, ServerError, opt
from ckpttools.formats.config import MAX_VOCAB_SIZE
from ckpttools.io.inputs import jsonl_lines, loads_json
from ckpttools.measuring.launch_check import LaunchCheck
from ckpttools.measuring.request import VERIFY_ENGINES, MeasureRequest, split_engine
from ckpttools.measuring.verdict import ci95 as _ci95
from ckpttools.measuring.verdict import pct as _pct
from ckpttools.measuring.verdict import verdict_exit_code
from ckpttools.measuring.traffic import (
    check_context_prompts,
    config_at,
    context_bins,
    context_limits,
    level_summary,
)

__all__ = ["VerifyReport", "verify", "load_prompts", "SpecOffError", "summarize"]


class SpecOffError(ServerError):
    """The server runs without speculative decoding: accept length cannot be measured."""

    default_hint = "start the server with --speculative-algorithm EAGLE3 (SGLang) or --speculative-config (vLLM)"


#: the version of the report's JSON (schemas/verify-report.schema.json); raised on any change
#: that removes or retypes a field
SCHEMA_VERSION = 1
__all__ += ["VERIFY_ENGINES", "split_engine", "measure_one", "prompts_of"]


@dataclass
class VerifyReport:
    """Everything ``ckpt verify`` measured; ``to_dict`` is the JSON output."""

    engine: str
    url: str | None
    server: dict[str, Any] = field(default_factory=dict)
    num_prompts: int = 0
    completed: int = 0
    failed: int = 0
    accept_length: float | None = None
    accepted_drafts_per_step: float | None = None
    accept_length_ci95: list[float] | None = None
    per_request: dict[str, float] | None = None
    per_position_acceptance: list[float] | None = None
    fields_used: str = ""
    server_avg_accept_length: float | None = None
    log_accept_lens: list[float] | None = None
    #: with a running server and its log (``server_log``): the log's lifetime figures (``ckpt logs``)
    server_log: dict[str, Any] | None = None
    output_tokens: int = 0
    output_tokens_per_s: float | None = None
    latency_s: dict[str, float] | None = None
    baseline: dict[str, Any] | None = None
    speedup: float | None = None
    min_accept_len: float | None = None
    passed: bool | None = None
    stopped_early: str | None = None
    verdict: str = ""
    errors: list[str] = field(default_factory=list)
    #: "per-request": figures from each request's own counts; "aggregate": only the server's
    #: totals over the run (vLLM without per-request metrics at concurrency > 1)
    figures: str = ""
    concurrency: int = 1
    categories: dict[str, dict[str, Any]] | None = None
    concurrency_levels: list[dict[str, Any]] | None = None
    context: dict[str, Any] | None = None
    sweep: dict[str, Any] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: each prompt was sent this many times in a row; intervals are over distinct prompts
    repeat: int = 1
    #: with topk 1: the accept length every smaller steps setting would give, estimated from this
    #: run's per-position acceptance (see :func:`steps_estimate`)
    steps_estimate: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exit_code(self) -> int:
        return verdict_exit_code(self.accept_length, self.passed)


# ----------------------------------------------------------------------------- prompts
def load_prompts(
    source: str = "builtin", num: int | None = None, tokenizer: str | None = None, repeat: int = 1
) -> list[Prompt]:
    """Prompts from the built-in set or a JSONL file of {"prompt": ...} / {"input_ids": [...]}.

    With ``tokenizer`` (an HF tokenizer.json or its directory), text prompts are turned
    into input_ids locally, for servers started without a tokenizer. ``num`` cuts the set
    (the categories in turn); a set shorter than ``num`` is never repeated to fill it (a
    note says so): each prompt is sent ``repeat`` times only when asked, one after another,
    and the interval is then computed over distinct prompts.
    """
    if source == "builtin":
        text = resources.files("ckpttools").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
        where = "built-in prompts"
    else:
        from ckpttools.io.fsutil import absent_words, read_regular_bytes

        p = Path(source)
        if not p.exists():
            raise ConfigError(f"{p}: {absent_words(p, 'prompts file')}", path=p, hint=_PROMPTS_HINT)
        try:
            text, where = read_regular_bytes(p).decode("utf-8"), str(p)
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p}: not UTF-8 text (byte {e.start})", path=p, hint=_PROMPTS_HINT) from None
    out = [_prompt(where, n, line) for n, line in jsonl_lines(text)]  # split on \n only: JSON Lines
    if not out:
        raise ConfigError(f"{where}: no prompts", hint=_PROMPTS_HINT)
    if any(p.messages is not None for p in out):
        out = _render_chats(out, tokenizer)
    elif tokenizer is not None:
        from ckpttools.vocab.tokens import load_hf_tokenizer

        tok = load_hf_tokenizer(tokenizer)
        out = [Prompt(input_ids=p.input_ids or tok.encode(p.text or "").ids, category=p.category) for p in out]
    if num is not None and num < len(out):
        out = _round_robin(out)[:num]
    elif num is not None and num > len(out):
        from ckpttools.io.fsutil import note

        note(
            f"{where} holds {len(out)} prompt(s), fewer than {opt('num_prompts')} {num}: measuring {len(out)} "
            f"distinct prompt(s){f', each sent {repeat} times' if repeat > 1 else ''}"
            f" (repeating prompts adds requests, not evidence; {opt('repeat')} asks for it)"
        )
    return [p for p in out for _ in range(repeat)]


def _round_robin(prompts: list[Prompt]) -> list[Prompt]:
    """The categories in turn (each in file order), so that a cut keeps every category."""
    by: dict[str, list[Prompt]] = {}
    for p in prompts:
        by.setdefault(p.category, []).append(p)
    queues = list(by.values())
    return [q[i] for i in range(max(len(q) for q in queues)) for q in queues if i < len(q)]


def _render_chats(prompts: list[Prompt], tokenizer: str | None) -> list[Prompt]:
    """Chat-format prompts rendered with the target's chat template, then tokenized."""
    if tokenizer is None:
        raise ConfigError(
            "the prompts hold chat messages, which need the target's chat template",
            hint=f"give {opt('tokenizer')} DIR (a tokenizer.json with its tokenizer_config.json)",
        )
    from ckpttools.vocab.chat import chat_encoder, load_chat_template
    from ckpttools.vocab.tokens import load_hf_tokenizer

    render = load_chat_template(tokenizer)
    encode = chat_encoder(tokenizer)
    tok = load_hf_tokenizer(tokenizer)
    out = []
    for p in prompts:
        if p.messages is not None:
            out.append(Prompt(input_ids=encode(render(p.messages)), category=p.category))
        else:
            out.append(Prompt(input_ids=p.input_ids or tok.encode(p.text or "").ids, category=p.category))
    return out


_PROMPTS_HINT = (
    'give a UTF-8 JSONL file, one {"prompt": "..."}, {"input_ids": [...]} or '
    '{"messages": [{"role": "user", "content": "..."}]} per line (optionally with "category"), '
    f"or the built-in prompts ({opt('prompts')} builtin)"
)


def _prompt(where: str, n: int, line: str) -> Prompt:
    """One JSONL line as a Prompt, or ConfigError saying what is wrong with it."""
    row = loads_json(line, f"{where}:{n}", hint=_PROMPTS_HINT)
    if not isinstance(row, dict):
        raise ConfigError(f"{where}:{n}: needs a JSON object", hint=_PROMPTS_HINT)
    cat = row.get("category", "custom")
    if not isinstance(cat, str):
        raise ConfigError(f"{where}:{n}: category must be a string", hint=_PROMPTS_HINT)
    ids = row.get("input_ids")
    if isinstance(ids, list):
        if not ids or not all(type(x) is int and 0 <= x < MAX_VOCAB_SIZE for x in ids):
            raise ConfigError(
                f"{where}:{n}: input_ids must be a non-empty list of token ids (integers from 0)", hint=_PROMPTS_HINT
            )
        return Prompt(input_ids=ids, category=cat)
    if isinstance(row.get("prompt"), str):
        return Prompt(text=row["prompt"], category=cat)
    msgs = row.get("messages")
    if isinstance(msgs, list) and msgs:
        if not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in msgs
        ):
            raise ConfigError(f'{where}:{n}: each message needs a "role" and a "content" string', hint=_PROMPTS_HINT)
        return Prompt(messages=[{"role": m["role"], "content": m["content"]} for m in msgs], category=cat)
    raise ConfigError(
        f'{where}:{n}: needs a "prompt" string, an "input_ids" list or a "messages" list', hint=_PROMPTS_HINT
    )


# ----------------------------------------------------------------------------- statistics
def summarize(results: list[RequestResult], rep: VerifyReport, steps: int | None = None) -> VerifyReport:
    """Pooled accept length, per-request distribution and 95% interval, per position.

    ``steps`` (the server's draft steps) sizes per-position acceptance: SGLang trims its
    histogram to the highest bucket seen (e.g. [63] when nothing was accepted).
    """
    ok = [r for r in results if r.error is None]
    rep.completed, rep.failed = len(ok), len(results) - len(ok)
    rep.errors = [f"request {r.index}: {r.error}" for r in results if r.error]
    rep.requests = [asdict(r) for r in results]
    rep.output_tokens = sum(r.completion_tokens for r in ok)
    lat = [r.latency_s for r in ok]
    if lat:
        rep.latency_s = {
            "mean": statistics.fmean(lat),
            "p50": _pct(lat, 0.5),
            "p90": _pct(lat, 0.9),
            "p95": _pct(lat, 0.95),
            "p99": _pct(lat, 0.99),
        }
    measured = [r for r in ok if r.accept_length is not None and r.verify_steps]
    if measured:
        verify_total = sum(r.verify_steps or 0 for r in measured)
        acc = sum(r.accepted_drafts or 0 for r in measured)
        rep.accept_length = 1 + acc / verify_total
        rep.accepted_drafts_per_step = acc / verify_total
        vals = _per_prompt(measured, rep.repeat)
        rep.accept_length_ci95 = _ci95(vals)
        rep.per_request = {
            "n": len(vals),
            "mean": statistics.fmean(vals),
            "min": min(vals),
            "p25": _pct(vals, 0.25),
            "median": _pct(vals, 0.5),
            "p75": _pct(vals, 0.75),
            "max": max(vals),
        }
        rep.fields_used = "; ".join(sorted({r.source for r in measured}))
        hists = [r.histogram for r in measured if r.histogram]
        if hists:
            k = max(max(len(h) for h in hists), (steps or 0) + 1)
            tot = [sum(h[i] if i < len(h) else 0 for h in hists) for i in range(k)]
            n = sum(tot)
            rep.per_position_acceptance = [sum(tot[j] for j in range(i, k)) / n for i in range(1, k)] if n else None
    rep.categories = by_category(ok, rep.accept_length_ci95)
    return rep


def _per_prompt(measured: list[RequestResult], repeat: int) -> list[float]:
    """Accept length per distinct prompt: a prompt sent ``repeat`` times counts once (its pooled
    figure), so repetition never narrows the interval."""
    if repeat <= 1:
        return [r.accept_length for r in measured if r.accept_length is not None]
    groups: dict[int, list[RequestResult]] = {}
    for r in measured:
        groups.setdefault(r.index // repeat, []).append(r)
    return [1 + sum(r.accepted_drafts or 0 for r in g) / sum(r.verify_steps or 0 for r in g) for g in groups.values()]


def by_category(ok: list[RequestResult], overall_ci: list[float] | None) -> dict[str, dict[str, Any]] | None:
    """Per category: pooled accept length, its 95% interval, and tokens/s per request (tokens
    over request latency); ``below_overall`` when the category's interval lies wholly below
    the overall one."""
    cats: dict[str, list[RequestResult]] = {}
    for r in ok:
        cats.setdefault(r.category, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for cat, rs in cats.items():
        m = [r for r in rs if r.accept_length is not None and r.verify_steps]
        steps = sum(r.verify_steps or 0 for r in m)
        ci = _ci95([r.accept_length for r in m if r.accept_length is not None])
        lat = sum(r.latency_s for r in rs)
        out[cat] = {
            "n": len(rs),
            "accept_length": 1 + sum(r.accepted_drafts or 0 for r in m) / steps if steps else None,
            "accept_length_ci95": ci,
            "tokens_per_s": sum(r.completion_tokens for r in rs) / lat if lat > 0 else None,
            "below_overall": bool(ci and overall_ci and ci[1] < overall_ci[0]),
        }
    return out or None


def verdict_line(rep: VerifyReport) -> str:
    """The one-line verdict of a report (shared by every engine's verify)."""
    if rep.accept_length is None:
        return "accept length could not be measured" + (f" ({rep.errors[0]})" if rep.errors else "")
    parts = [
        f"accept length {rep.accept_length:.2f} tokens per verify step ({rep.accepted_drafts_per_step:.2f} "
        "accepted drafts per step)"
    ]
    if rep.min_accept_len is not None:
        ok = rep.accept_length >= rep.min_accept_len
        parts.append(
            f"{'PASS' if ok else 'FAIL'}: {'at or above' if ok else 'below'} the bar of {rep.min_accept_len:.2f}"
        )
    if rep.speedup is not None:
        if rep.speedup < 1:
            parts.append(f"SLOWER than the same target without speculation: {rep.speedup:.2f}x its tokens/s")
        else:
            parts.append(f"{rep.speedup:.2f}x the tokens/s of the same target without speculation")
    if rep.stopped_early:
        parts.append(f"stopped early: {rep.stopped_early}")
    return "; ".join(parts)


# ----------------------------------------------------------------------------- measuring
def _measure(
    engine: Any,
    prompts: list[Prompt],
    *,
    max_new_tokens: int,
    temperature: float,
    ignore_eos: bool,
    concurrency: int,
    min_accept_len: float | None,
    progress: Callable[[int, int], None] | None,
    per_request_metrics: bool,
    steps: int | None = None,
    stop_if: Callable[[list[RequestResult]], str | None] | None = None,
) -> tuple[list[RequestResult], float, str | None]:
    """Send the prompts (one at a time, or ``concurrency`` at once); the results, the wall time, and why
    the run stopped early (None: it did not)."""
    results: list[RequestResult] = []
    stop_reason: str | None = None
    timeouts: set[int] = set()  # the requests that got no whole answer within --timeout

    def one(i: int, p: Prompt) -> RequestResult:
        try:
            before = engine.metrics() if per_request_metrics else None
            r = engine.run(i, p, max_new_tokens, temperature, ignore_eos)
            if before is not None and r.verify_steps is None:  # no per-request figures in the response
                _vllm_delta(r, before, engine.metrics())
            check_figures(r, steps)
            return r
        except ServerError as e:
            if getattr(e, "fatal", False):  # impossible figures: the run is an error, never a mixed success
                raise
            if e.timed_out:
                timeouts.add(i)
            return RequestResult(i, p.category, error=str(e))

    def done(r: RequestResult) -> bool:
        """Record a result; True when the run should stop."""
        nonlocal stop_reason
        results.append(r)
        if progress:
            progress(len(results), len(prompts))
        stop_reason = _below_bar(results, min_accept_len) or (stop_if(results) if stop_if else None)
        return stop_reason is not None or _stalled(results, len(prompts), timeouts)  # a stall: no early stop

    t0 = time.perf_counter()
    if concurrency <= 1:
        for i, p in enumerate(prompts):
            r = one(i, p)
            if done(r) or (r.error and "cannot connect" in r.error):
                break
    else:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futs = [pool.submit(one, i, p) for i, p in enumerate(prompts)]
            for f in futs:
                if done(f.result()):
                    for g in futs:
                        g.cancel()
                    break
    return results, time.perf_counter() - t0, stop_reason


#: requests in a row that time out end a measurement: the server is taken as not answering
STALLED_AFTER = 3


def _stalled(results: list[RequestResult], total: int, timeouts: set[int]) -> bool:
    """True when the last STALLED_AFTER results all timed out and prompts are left: a server that
    answers nothing would hold the run for every prompt's --timeout. The newest result's error then
    says that the run stopped there (a failed run, not an early stop)."""
    last = results[-STALLED_AFTER:]
    left = total - len(results)
    if left <= 0 or len(last) < STALLED_AFTER or any(x.index not in timeouts for x in last):
        return False
    note = f"{STALLED_AFTER} requests in a row timed out: the run stopped, {left} prompt(s) not measured"
    last[-1].error = f"{last[-1].error}; {note}"
    return True


def _below_bar(results: list[RequestResult], min_accept_len: float | None) -> str | None:
    """Why to stop early: the 95% interval of accept length is wholly below the bar (from 5 results)."""
    if min_accept_len is None:
        return None
    vals = [r.accept_length for r in results if r.accept_length is not None]
    ci = _ci95(vals) if len(vals) >= 5 else None
    if ci is not None and ci[1] < min_accept_len:
        return (
            f"after {len(vals)} requests the 95% interval [{ci[0]:.2f}, {ci[1]:.2f}] is below the bar "
            f"{min_accept_len:.2f}"
        )
    return None


def _vllm_delta(r: RequestResult, before: dict[str, Any], after: dict[str, Any]) -> None:
    _check_counters(before, after)
    drafts = after["drafts"] - before["drafts"]
    acc = after["accepted"] - before["accepted"]
    r.proposed_drafts = int(after["draft_tokens"] - before["draft_tokens"])
    if drafts > 0:
        r.verify_steps = int(drafts)
        r.accepted_drafts = int(acc)
        r.accept_length = 1 + acc / drafts
        per = sorted(after["accepted_per_pos"])
        r.extra["accepted_per_pos"] = [after["accepted_per_pos"][k] - before["accepted_per_pos"].get(k, 0) for k in per]
        r.source = "1 + vllm:spec_decode_num_accepted_tokens / vllm:spec_decode_num_drafts (per-request delta)"


def _check_counters(before: dict[str, Any], after: dict[str, Any]) -> None:
    """vLLM's counters only grow, and accepted tokens never exceed proposed ones."""
    for k in ("drafts", "draft_tokens", "accepted"):
        if after[k] < before[k]:
            raise ServerError(
                f"vLLM's {k} counter went down ({before[k]:g} -> {after[k]:g}): the server restarted "
                "or reports impossible figures",
                hint="measure again on a server that stays up",
            )
    if after["accepted"] - before["accepted"] > after["draft_tokens"] - before["draft_tokens"]:
        raise ServerError("vLLM reported more accepted tokens than it proposed: impossible figures")
    drafts = after["drafts"] - before["drafts"]
    for k, v in after["accepted_per_pos"].items():  # a position accepts at most once per draft
        d = v - before["accepted_per_pos"].get(k, 0)
        if d < 0 or d > drafts:
            raise ImpossibleFiguresError(
                f"impossible figures from the server: vLLM's accepted tokens at draft position {k} changed by "
                f"{d:g} over {drafts:g} drafts (each draft accepts at most one token there)"
            )


def verify(
    host: str | None = None,
    *,
    engine: str = "auto",
    prompts: str = "builtin",
    num_prompts: int | None = 16,
    max_new_tokens: int = 256,
    concurrency: int | Sequence[int] = 1,
    temperature: float = 0.0,
    ignore_eos: bool = False,
    baseline_host: str | None = None,
    min_accept_len: float | None = None,
    flush_cache: bool = False,
    tokenizer: str | None = None,
    timeout: float = 600.0,
    launch: LaunchSpec | None = None,
    progress: Callable[[int, int], None] | None = None,
    context_lengths: Sequence[int] | None = None,
    drafter: str | None = None,
    stop_if: Callable[[list[RequestResult]], str | None] | None = None,
    prechecked: bool = False,
    repeat: int = 1,
    server_log: str | None = None,
) -> VerifyReport:
    """Measure acceptance through a running server (``host``) or one to start (``launch``): a
    :class:`~ckpttools.measuring.request.MeasureRequest` of one drafter, measured.

    Args:
        host: the server's base URL, e.g. ``http://127.0.0.1:30000``.
        engine: ``auto`` (tell SGLang and vLLM apart by what they answer), ``sglang``, ``vllm``.
        prompts: ``builtin`` (seven categories) or a JSONL file; ``num_prompts`` takes the
            categories in turn, or repeats the set.
        concurrency: requests in flight; a list measures each level in turn on the same
            server (the first gives the main figures; ``concurrency_levels`` has them all).
        baseline_host: the same target without speculation, for the speedup.
        min_accept_len: the bar (tokens per verify step); below it the report fails
            (exit code 1), and the run stops early once the 95% interval is below it.
        launch: a :class:`ckpttools.engines.launch.LaunchSpec` to start, measure, and stop.
        context_lengths: also measure with prompts built to each length (prompt plus
            generation), reported in ``context`` with the target's and drafter's limits.
        drafter: the drafter's folder, for its limits on the context axis (``launch`` gives it too).
        stop_if: a further early stop: given the results so far, why to stop (None: go on).
        prechecked: the launch checks were done by the caller (a sweep).
        repeat: send each prompt this many times (intervals stay over distinct prompts).
        server_log: with ``host``, the running server's log: read after the run (``ckpt logs``),
            its lifetime figures placed beside the run's own in ``server_log``.

    Returns:
        a :class:`VerifyReport` (partial results are kept when requests fail).

    Raises:
        SpecOffError: the server runs without speculative decoding.
        ServerError: the server cannot be reached or answers badly.
    """
    from ckpttools.measuring.request import MeasureRequest, RunningHost

    server: LaunchSpec | RunningHost
    if launch is not None:
        server = launch
    elif host is not None:
        server = RunningHost(host, server_log)
    else:
        raise ValueError("give host or launch")
    drafters = (drafter,) if drafter is not None else (launch.drafter,) if launch and launch.drafter else ()
    req = MeasureRequest(
        drafters=tuple(d for d in drafters if d is not None),
        target=launch.target if launch is not None else None,
        server=server,
        engine=engine,
        prompts=prompts,
        num_prompts=num_prompts,
        repeat=repeat,
        max_new_tokens=max_new_tokens,
        concurrency=(concurrency,) if isinstance(concurrency, int) else tuple(concurrency) or (1,),
        context_lengths=tuple(context_lengths or ()),
        temperature=temperature,
        ignore_eos=ignore_eos,
        min_accept_len=min_accept_len,
        tokenizer=tokenizer,
        timeout=timeout,
        baseline_host=baseline_host,
        flush_cache=flush_cache,
    )
    checked = _checked(req, launch, prechecked) if launch is not None else None
    return measure_one(req, progress=progress, stop_if=stop_if, checked=checked)


def _checked(req: MeasureRequest, launch: LaunchSpec, prechecked: bool) -> LaunchCheck:
    """The one check before the launch (``prechecked``: the drafter was checked by the caller: only the
    port and the release); a bad prompts file is refused before it, as the cheap check."""
    from ckpttools.measuring.launch_check import check_launch, check_port_and_release

    prompts_of(req)
    if prechecked:
        return check_port_and_release(launch, req.pinned)
    return check_launch(launch, list(req.drafters), req.pinned)


def measure_one(
    req: MeasureRequest,
    *,
    progress: Callable[[int, int], None] | None = None,
    stop_if: Callable[[list[RequestResult]], str | None] | None = None,
    checked: LaunchCheck | None = None,
) -> VerifyReport:
    """One drafter on one server (running, or launched here and stopped after): the request measured.

    ``checked``: with a launch, the check made before it (:func:`ckpttools.measuring.launch_check.check_launch`,
    or for a further server of a run, :func:`~ckpttools.measuring.launch_check.check_port_and_release`)."""
    from ckpttools.io.net import NetClient

    launch, host = req.launch, req.host
    levels = list(req.concurrency)
    plist = prompts_of(req)
    if req.context_lengths:  # the cheap check first: before a server starts
        check_context_prompts(plist)
    client, server = NetClient(timeout=req.timeout, connect=10.0), None
    try:
        url, engine = (host.url if host is not None else None), req.engine
        if launch is not None:
            if checked is None:
                raise ValueError("a launch is checked before it starts: give checked")
            server, url, engine = _start(launch, client, checked)
        eng, rep, obj = _connect(url, engine, client, len(plist), req.min_accept_len, req.repeat)
        if req.flush_cache:
            obj.flush_cache(eng)
        kw: dict[str, Any] = {"max_new_tokens": req.max_new_tokens, "temperature": req.temperature}
        kw |= {"ignore_eos": req.ignore_eos, "min_accept_len": req.min_accept_len, "stop_if": stop_if, "obj": obj}
        results = _measure_into(rep, eng, plist, concurrency=levels[0], progress=progress, **kw)
        _check_alive(server, rep.failed > 0)
        rep.server_avg_accept_length = obj.server_avg_accept_length(eng)
        _more_levels(rep, eng, plist, levels, kw)
        if req.context_lengths:
            limits = _context_limits(rep, launch, req.drafter, checked)
            _context_bins(rep, eng, plist, list(req.context_lengths), limits, levels[0], kw)
        if req.baseline_host is not None:
            rep.baseline = _baseline(
                req.baseline_host,
                client,
                plist[: len(results)],
                req.max_new_tokens,
                req.temperature,
                req.ignore_eos,
                levels[0],
            )
        _conclude(rep, server, obj, host.log if host is not None else None)
        return rep
    finally:
        if server is not None:
            server.stop()
        client.close()


def prompts_of(req: MeasureRequest) -> list[Prompt]:
    """The prompts a request sends, tokenized here where they need to be (a launched target's own
    tokenizer serves chat prompts and context lengths when none is given)."""
    tok = _local_tokenizer(req.tokenizer, req.launch, req.prompts, req.context_lengths)
    return load_prompts(req.prompts, req.num_prompts, tok, req.repeat)


def _start(launch: LaunchSpec, client: Any, checked: LaunchCheck) -> tuple[Any, str, str]:
    """Start the checked server and wait for it: (the server, its URL, the engine release)."""
    from ckpttools.engines.launch import RunningServer

    checked.announce(launch)
    server = RunningServer(launch).start()
    try:
        server.wait_ready(client)
    except BaseException:
        server.stop()
        raise
    return server, launch.url, checked.engine.spec


def _read_server_log(rep: VerifyReport, path: str) -> None:
    """The running server's log, read as ``ckpt logs`` reads it; a log of another engine is refused."""
    from ckpttools.measuring.logs import read_logs

    lr = read_logs([path])
    if lr.engine is not None and lr.engine != rep.engine:
        raise ConfigError(
            f"{path} is a {lr.engine} log, but the server at {rep.url} is {rep.engine}",
            path=path,
            hint="give the log of the server measured",
        )
    rep.server_log = lr.summary()


def _check_alive(server: Any, failures: bool, during: str = "the run") -> None:
    """A launched server that died during the run is said to have died, with its exit code and its
    log's last lines (the log is kept), not read as requests that failed to connect. ``failures``:
    requests failed, so a server still up is given a moment for its exit to land."""
    if server is None or server.proc is None:
        return
    if server.proc.poll() is None:
        if not failures:
            return
        import subprocess

        try:  # a connection that broke as the server died: give its exit a moment to land
            server.proc.wait(timeout=3.0)
        except subprocess.TimeoutExpired:
            return
    code = server.proc.returncode
    why = " (killed: out of memory?)" if code in (-9, 137) else ""
    tail = " | ".join(ln.strip() for ln in server.log_tail(4).splitlines() if ln.strip())
    first = server.first_error()
    said = f"its log's first error: {first}; " if first else ""
    raise ServerError(
        f"the {server.spec.engine} server died during {during}, exit code {code}{why}; {said}"
        f"its log {server.log_path} ends: {tail[-600:]}",
        hint=f"read {server.log_path} (kept); " + engine_for(server.spec.engine).death_hint(first or ""),
    )


def _local_tokenizer(tokenizer: str | None, launch: Any, prompts: str, context_lengths: Any) -> str | None:
    """The tokenizer to tokenize with here: the one given, else a launched target's own when
    chat prompts or context lengths need token ids."""
    if tokenizer is None and launch is not None and os.path.lexists(Path(launch.target) / "tokenizer.json"):
        return launch.target if context_lengths or _has_chats(prompts) else None
    return tokenizer


def _has_chats(prompts: str) -> bool:
    try:
        return prompts != "builtin" and '"messages"' in Path(prompts).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _more_levels(rep: VerifyReport, eng: Any, plist: list[Prompt], levels: list[int], kw: dict[str, Any]) -> None:
    """The further concurrency levels, each a run of the same prompts on the same server."""
    if len(levels) < 2:
        return
    rep.concurrency_levels = [level_summary(rep)]
    for c in levels[1:]:
        sub = VerifyReport(engine=rep.engine, url=rep.url, num_prompts=len(plist), server=rep.server, repeat=rep.repeat)
        _measure_into(sub, eng, plist, concurrency=c, progress=None, **kw)
        rep.concurrency_levels.append(level_summary(sub))


def _context_limits(
    rep: VerifyReport, launch: LaunchSpec | None, drafter: str | None, checked: LaunchCheck | None
) -> dict[str, Any]:
    """The limits the context axis marks, from the configs the launch check read (a drafter it did
    not open, a running server's or one measured on a server of its own, is read here); a running
    server's target context is the one it reports."""
    name = launch.drafter if launch is not None else drafter
    got = checked.drafter(name) if checked is not None and name is not None else name
    dcfg = config_at(got) if got is None or isinstance(got, str) else got.config
    if launch is None:
        limits = context_limits(None, dcfg, None)
        served = rep.server.get("max_model_len")
        limits["target_context"] = served if type(served) is int else None
        return limits
    known = checked.target if checked is not None else None  # as the check read it (a Hub target's too)
    tcfg = config_at(launch.target) if known is None else known.config_or_none()
    eng = checked.engine if checked is not None else engine_for(launch.engine)
    return context_limits(tcfg, dcfg, eng.context_cap(launch.engine_args))


def _context_bins(
    rep: VerifyReport,
    eng: Any,
    plist: list[Prompt],
    asked: list[int],
    limits: dict[str, Any],
    concurrency: int,
    kw: dict[str, Any],
) -> None:
    """Acceptance with prompts built to each length, and the limits the axis marks."""

    def measure(built: list[Prompt]) -> VerifyReport:
        sub = VerifyReport(engine=rep.engine, url=rep.url, num_prompts=len(built), server=rep.server, repeat=rep.repeat)
        _measure_into(sub, eng, built, concurrency=concurrency, progress=None, **kw)
        return sub

    rep.context = context_bins(asked, plist, limits, kw["max_new_tokens"], measure)


def _measure_into(rep: VerifyReport, eng: Any, plist: list[Prompt], *, obj: Any, **kw: Any) -> list[RequestResult]:
    """Run the prompts and put the figures into ``rep``: per request, and where the engine keeps
    counters (``obj.reads_counters``) from their change over the run."""
    before = eng.metrics() if obj.reads_counters else None
    steps = rep.server.get("speculative_num_steps")
    steps = steps if type(steps) is int and steps > 0 else None
    per_request = obj.per_request_counters(kw["concurrency"])
    results, wall, stop = _measure(eng, plist, per_request_metrics=per_request, steps=steps, **kw)
    rep.concurrency = kw["concurrency"]
    summarize(results, rep, steps)
    rep.stopped_early = stop
    rep.output_tokens_per_s = rep.output_tokens / wall if wall > 0 else None
    per_req = [r for r in results if r.error is None]
    if before is not None and not (per_req and all(r.verify_steps is not None for r in per_req)):
        _run_delta(rep, before, eng.metrics(), steps)
        rep.figures = "aggregate" if kw["concurrency"] > 1 else "per-request"
    else:
        rep.figures = "per-request"
    return results


def steps_estimate(per_position: list[float] | None, topk: Any) -> dict[str, Any] | None:
    """The chain's accept length at every steps k <= K, from one run at steps K with topk 1.

    Draft j is accepted only when drafts 1..j-1 were, so position j's acceptance rate is
    P(the first j drafts accepted), and a chain of k drafts gives 1 + sum over j <= k of it. An
    estimate: a shorter chain drafts the same tokens, but the engine's batching and its
    counting at the chain's end can differ (a sweep measures the settings and compares)."""
    if not per_position or topk not in (None, 1):
        return None
    acc, run = [], 1.0
    for a in per_position:
        run += a
        acc.append(round(run, 6))
    return {
        "estimate": True,
        "from_steps": len(per_position),
        "steps": list(range(1, len(per_position) + 1)),
        "accept_length": acc,
    }


def _conclude(rep: VerifyReport, server: Any, obj: Any, server_log: str | None = None) -> None:
    """Speedup, pass/fail, the server's own log figures (launched: its accept len lines; running:
    the log given, read as ``ckpt logs`` reads it), the steps estimate, and the verdict."""
    rep.steps_estimate = steps_estimate(rep.per_position_acceptance, rep.server.get("speculative_eagle_topk"))
    if server_log is not None:
        _read_server_log(rep, server_log)
    if rep.baseline and rep.baseline.get("output_tokens_per_s") and rep.output_tokens_per_s:
        rep.speedup = rep.output_tokens_per_s / rep.baseline["output_tokens_per_s"]
    if rep.min_accept_len is not None:
        rep.passed = rep.accept_length is not None and rep.accept_length >= rep.min_accept_len
    if server is not None:
        rep.log_accept_lens = obj.log_accept_lens(server.log_path.read_text(errors="replace"))
    rep.verdict = verdict_line(rep)


def _connect(
    host: str | None, engine: str, client: Any, num_prompts: int, min_accept_len: float | None, repeat: int = 1
) -> tuple[Any, VerifyReport, Engine]:
    """The engine's client, a report that names the server, and the engine object (its release as
    pinned or as the server says); refuses a server with speculation off."""
    assert host is not None
    host = check_url(host)
    name, pinned = split_engine(engine)
    if name not in SERVER_ENGINES:  # auto: the server says which
        name = detect_engine(host, client)
    eng: Any = engine_for(name).client(host, client)
    rep = VerifyReport(engine=name, url=host, num_prompts=num_prompts, min_accept_len=min_accept_len, repeat=repeat)
    rep.server = eng.spec_settings()
    rep.server["drafter_loaded"] = _loaded_drafter(name, host, client, eng)
    eng.release = pinned or eng.server_release()
    rep.server["engine_release"] = eng.release.spec if eng.release is not None else None
    rep.server["engine_release_from"] = (
        "given" if pinned else "the server's own version" if eng.release else "not reported by the server"
    )
    if not eng.spec_enabled():
        raise SpecOffError(
            f"{host}: speculative decoding is off on this {name} server; accept length cannot be "
            "measured (and is not 1.0)",
            url=host,
        )
    return eng, rep, engine_for(name, eng.release)


def _loaded_drafter(engine: str, host: str, client: Any, eng: Any) -> dict[str, Any] | None:
    """Which drafter the server says it serves (ckpttools' swap hook, SGLang's weight_version), or None."""
    from ckpttools.engines.guarded import loaded_drafter

    return loaded_drafter(engine, client, host, eng.info() if hasattr(eng, "info") else None)


def _run_delta(rep: VerifyReport, before: dict[str, Any], after: dict[str, Any], steps: int | None = None) -> None:
    """vLLM: accept length over the whole run, from its counters' change."""
    _check_counters(before, after)
    drafts = after["drafts"] - before["drafts"]
    if drafts > 0 and rep.completed:  # counters that moved while every request failed measure nothing
        acc = after["accepted"] - before["accepted"]
        bound, limit = accept_limit(steps)
        if acc / drafts > bound:  # as check_figures bounds a request's figure
            raise ImpossibleFiguresError(
                f"impossible figures from the server: accept length {1 + acc / drafts:.3f} (run delta of vLLM's "
                f"counters) must lie in {limit}"
            )
        rep.accept_length, rep.accepted_drafts_per_step = 1 + acc / drafts, acc / drafts
        rep.per_position_acceptance = [
            (after["accepted_per_pos"][k] - before["accepted_per_pos"].get(k, 0)) / drafts
            for k in sorted(after["accepted_per_pos"])
        ]
        rep.fields_used = "1 + vllm:spec_decode_num_accepted_tokens / vllm:spec_decode_num_drafts (run delta)"


def _baseline(
    url: str,
    client: Any,
    prompts: list[Prompt],
    max_new_tokens: int,
    temperature: float,
    ignore_eos: bool,
    concurrency: int,
) -> dict[str, Any]:
    url = check_url(url)
    engine = detect_engine(url, client)
    eng: Any = engine_for(engine).client(url, client)
    results, wall, _ = _measure(
        eng,
        prompts,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        ignore_eos=ignore_eos,
        concurrency=concurrency,
        min_accept_len=None,
        progress=None,
        per_request_metrics=False,
    )
    toks = sum(r.completion_tokens for r in results if r.error is None)
    return {
        "url": url,
        "engine": engine,
        "completed": sum(r.error is None for r in results),
        "output_tokens": toks,
        "output_tokens_per_s": toks / wall if wall > 0 else None,
        "errors": [r.error for r in results if r.error],
    }
