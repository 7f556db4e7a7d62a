"""``ckpt verify --launch --sweep``: one server per speculative setting, each against a
baseline without speculation; ranked by speed-up, with the launch commands of the best.

Sweep syntax: ``steps=1,3,5;topk=1,4;draft_tokens=4,8,16``, axes separated by ``;``,
values by ``,``; every combination is a setting. Axes left out keep the launch's own value.
SGLang takes all three; with topk 1 it sets draft tokens to steps + 1 itself, so such
settings differ only in steps. vLLM's EAGLE-3 is a chain: only ``steps``
(num_speculative_tokens) applies, and settings with topk > 1 or draft tokens are reported
as not applicable rather than launched.
"""

from __future__ import annotations

import itertools
import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ckpttools.engines.engine import SERVER_ENGINES, Engine, engine_for
from ckpttools.engines.http import RequestResult
from ckpttools.engines.launch import LaunchSpec
from ckpttools.errors import CkptError, ConfigError, opt
from ckpttools.measuring.launch_check import LaunchCheck
from ckpttools.measuring.request import MeasureRequest, Sweep
from ckpttools.measuring.verify import VerifyReport

__all__ = ["parse_sweep", "sweep", "run_sweep", "launch_commands"]

_AXES = ("steps", "topk", "draft_tokens")


def parse_sweep(text: str) -> list[dict[str, int]]:
    """The settings a sweep string names, in order, duplicates (as the engine reads them) dropped."""
    axes: dict[str, list[int]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, eq, vals = part.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in _AXES:
            raise ConfigError(
                f"sweep axis {part!r} is not one of {', '.join(a + '=...' for a in _AXES)}",
                hint=f"give {opt('sweep')} as e.g. 'steps=1,3,5;topk=1,4;draft_tokens=4,8,16'",
            )
        try:
            parts = [v.strip() for v in vals.split(",") if v.strip()]
            if not all(v.isascii() and v.isdigit() for v in parts):  # no "1_0", no other scripts' digits
                raise ValueError(vals)
            nums = [int(v) if len(v) <= 12 else 10**12 for v in parts]  # past every axis' bound either way
        except ValueError:
            raise ConfigError(
                f"sweep axis {key}: {vals[:40]!r} are not whole numbers",
                hint=f"give {opt('sweep')} as e.g. 'steps=1,3,5;topk=1,4;draft_tokens=4,8,16'",
            ) from None
        if not nums or min(nums) < 1:
            raise ConfigError(
                f"sweep axis {key}: give values of 1 or more",
                hint=f"give {opt('sweep')} as e.g. 'steps=1,3,5;topk=1,4;draft_tokens=4,8,16'",
            )
        if max(nums) > _AXIS_MAX[key]:
            raise ConfigError(
                f"sweep axis {key}: {max(nums)} is out of range (at most {_AXIS_MAX[key]})",
                hint=f"give {opt('sweep')} as e.g. 'steps=1,3,5;topk=1,4;draft_tokens=4,8,16'",
            )
        axes[key] = list(dict.fromkeys(nums))
    if not axes:
        raise ConfigError("the sweep names no axis", hint="e.g. 'steps=1,3;topk=1,4'")
    out: list[dict[str, int]] = []
    for combo in itertools.product(*axes.values()):
        s = dict(zip(axes, combo))
        if s.get("topk", 1) == 1 and "draft_tokens" in s:
            s["draft_tokens"] = s.get("steps", 0) + 1 if "steps" in s else s["draft_tokens"]
        if s not in out:
            out.append(s)
        if len(out) > MAX_SETTINGS:
            raise ConfigError(
                f"the sweep names more than {MAX_SETTINGS} settings, each a server start",
                hint="sweep fewer values per axis",
            )
    return out


#: the most settings one sweep may launch (each is a full server load), and each axis's largest value
MAX_SETTINGS = 64
_AXIS_MAX = {"steps": 64, "topk": 64, "draft_tokens": 4096}


def _applies(engine: Engine, s: dict[str, int]) -> str | None:
    """Why a setting cannot be launched on the engine (None: it can)."""
    why = engine.sweep_setting_refused(s)
    if why is not None:
        return why
    if s.get("topk", 1) > 1 and "draft_tokens" in s and s["draft_tokens"] > s.get("steps", 1) * s["topk"] + 1:
        return "draft_tokens is more than steps x topk + 1, the tree's size"
    return None


def _tps(r: RequestResult) -> float | None:
    return r.completion_tokens / r.latency_s if r.error is None and r.latency_s > 0 else None


def _ci(values: list[float]) -> tuple[float, float] | None:
    if len(values) < 5:
        return None
    m, sd = statistics.fmean(values), statistics.stdev(values)
    h = 2.776 * sd / math.sqrt(len(values)) if len(values) == 5 else 2.0 * sd / math.sqrt(len(values))
    return m - h, m + h


def _worse_than(best: dict[str, Any] | None):  # type: ignore[no-untyped-def]
    """An early stop: this setting's per-request tokens/s interval lies wholly below the best's."""

    def stop(results: list[RequestResult]) -> str | None:
        if not best or not best.get("tps_ci95"):
            return None
        ci = _ci([t for t in map(_tps, results) if t is not None])
        if ci is not None and ci[1] < best["tps_ci95"][0]:
            return (
                f"clearly worse after {len(results)} requests: per-request tokens/s [{ci[0]:.1f}, {ci[1]:.1f}] "
                f"is below the best setting's [{best['tps_ci95'][0]:.1f}, {best['tps_ci95'][1]:.1f}]"
            )
        return None

    return stop


def launch_commands(spec: LaunchSpec, setting: dict[str, int]) -> dict[str, str]:
    """The command of every server engine that serves the target with the drafter at this setting."""
    from ckpttools.engines.launch import build_command

    out = {}
    for name in SERVER_ENGINES:
        fields = engine_for(name).command_setting(spec, setting)
        s = LaunchSpec(
            name,
            spec.target,
            spec.drafter,
            tp=spec.tp,
            steps=setting.get("steps", spec.steps),
            engine_args=list(spec.engine_args) if name == spec.engine else [],
            python="python3",
            **fields,
        )
        out[name] = shlex.join(build_command(s))
    if setting.get("topk", 1) > 1:
        out["vllm_note"] = (
            f"vLLM drafts a chain: this command keeps steps={setting.get('steps', spec.steps)}, not the topk"
        )
    return out


def _run_setting(
    req: MeasureRequest, checked: LaunchCheck, s: dict[str, int], i: int, best: dict[str, Any] | None
) -> Any:
    from ckpttools.engines.launch import free_port
    from ckpttools.measuring.launch_check import check_port_and_release
    from ckpttools.measuring.verify import measure_one

    spec = req.launch
    assert spec is not None
    log = f"{spec.log_path or 'ckpt-sweep'}.setting{i}"
    one = replace(
        spec,
        steps=s.get("steps", spec.steps),
        topk=s.get("topk", spec.topk),
        draft_tokens=s.get("draft_tokens", spec.draft_tokens),
        port=free_port(),
        log_path=log,
    )
    again = check_port_and_release(one, req.pinned, checked.engine)  # the drafter was checked before the sweep
    return measure_one(replace(req, server=one, sweep=None), stop_if=_worse_than(best), checked=again)


def _baseline_run(req: MeasureRequest) -> dict[str, Any]:
    from ckpttools.io.net import NetClient

    from ckpttools.engines.launch import RunningServer, free_port
    from ckpttools.measuring.verify import _baseline, load_prompts

    spec = req.launch
    assert spec is not None
    base = replace(spec, drafter=None, port=free_port(), log_path=f"{spec.log_path or 'ckpt-sweep'}.baseline")
    try:
        with RunningServer(base) as srv, NetClient(timeout=req.timeout, connect=10.0) as client:
            srv.wait_ready(client)
            return _baseline(
                base.url,
                client,
                load_prompts(req.prompts, req.num_prompts, req.tokenizer),
                req.max_new_tokens,
                req.temperature,
                req.ignore_eos,
                req.concurrency[0],
            )
    except CkptError as e:
        return {"error": (str(e).splitlines() or [type(e).__name__])[0], "output_tokens_per_s": None}


def _entry(s: dict[str, int], rep: Any, base_tps: float | None) -> dict[str, Any]:
    tps = rep.output_tokens_per_s
    vals = [r["completion_tokens"] / r["latency_s"] for r in rep.requests if r["error"] is None and r["latency_s"] > 0]
    ci = _ci(vals)
    return {
        "setting": s,
        "status": "stopped early" if rep.stopped_early else "ok" if rep.accept_length is not None else "failed",
        "accept_length": rep.accept_length,
        "accept_length_ci95": rep.accept_length_ci95,
        "per_position_acceptance": rep.per_position_acceptance,
        "output_tokens_per_s": tps,
        "tps_ci95": list(ci) if ci else None,
        "speedup": tps / base_tps if tps and base_tps else None,
        "completed": rep.completed,
        "stopped_early": rep.stopped_early,
        "error": rep.errors[0] if rep.accept_length is None and rep.errors else None,
    }


def sweep(
    launch: LaunchSpec,
    settings: list[dict[str, int]],
    *,
    prompts: str = "builtin",
    num_prompts: int | None = 16,
    max_new_tokens: int = 256,
    concurrency: int | Sequence[int] = 1,
    temperature: float = 0.0,
    ignore_eos: bool = False,
    min_accept_len: float | None = None,
    flush_cache: bool = False,
    tokenizer: str | None = None,
    timeout: float = 600.0,
    context_lengths: Sequence[int] | None = None,
    repeat: int = 1,
    engine: str | None = None,
) -> VerifyReport:
    """Launch once per setting and once without speculation; return the best setting's report
    with ``sweep`` holding every setting, the ranking and the launch commands. A
    :class:`~ckpttools.measuring.request.MeasureRequest` with a :class:`~ckpttools.measuring.request.Sweep`,
    measured. A setting whose server fails to start or crashes is reported as failed and the
    sweep goes on."""
    req = MeasureRequest(
        drafters=(launch.drafter,) if launch.drafter else (),
        target=launch.target,
        server=launch,
        engine=engine or launch.engine,
        sweep=Sweep(tuple(settings)),
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
        flush_cache=flush_cache,
    )
    from ckpttools.measuring.launch_check import check_launch
    from ckpttools.measuring.verify import load_prompts

    load_prompts(req.prompts, req.num_prompts, req.tokenizer)  # refused here, before any server, if bad
    return run_sweep(req, check_launch(launch, req.drafters, req.pinned))  # once: the port, validate's errors


def run_sweep(req: MeasureRequest, checked: LaunchCheck) -> VerifyReport:
    """A sweep request, checked before the launch (``checked``), measured: the baseline, then each
    setting on a server of its own."""
    from ckpttools.io.fsutil import note
    from ckpttools.measuring.verify import verdict_line

    launch = req.launch
    assert launch is not None and req.sweep is not None
    base = _baseline_run(req)
    entries: list[dict[str, Any]] = []
    reports: list[Any] = []
    best: dict[str, Any] | None = None
    for i, s in enumerate(req.sweep.settings):
        why = _applies(checked.engine, s)
        if why:
            entries.append({"setting": s, "status": "not applicable", "error": why})
            reports.append(None)
            continue
        note(f"sweep setting {i + 1}/{len(req.sweep.settings)}: {s}")
        try:
            rep = _run_setting(req, checked, s, i, best)
            e = _entry(s, rep, base.get("output_tokens_per_s"))
        except CkptError as err:
            rep, e = (
                None,
                {"setting": s, "status": "failed", "error": (str(err).splitlines() or [type(err).__name__])[0]},
            )
        entries.append(e)
        reports.append(rep)
        if e["status"] == "ok" and (
            best is None or (e["output_tokens_per_s"] or 0) > (best["output_tokens_per_s"] or 0)
        ):
            best = e
    return _ranked(launch, base, entries, reports, verdict_line)


def _ranked(
    launch: LaunchSpec, base: dict[str, Any], entries: list[dict[str, Any]], reports: list[Any], verdict_line: Any
) -> VerifyReport:
    """The best setting's report (stopped or failed settings never win), holding the whole sweep."""
    ranked = sorted(
        (i for i, e in enumerate(entries) if e.get("output_tokens_per_s")),
        key=lambda i: -(entries[i]["output_tokens_per_s"] or 0),
    )
    passing = [i for i in ranked if entries[i]["status"] == "ok"]
    top = passing[0] if passing else ranked[0] if ranked else None
    out = reports[top] if top is not None else VerifyReport(engine=launch.engine, url=None)
    out.baseline = base
    out.speedup = entries[top]["speedup"] if top is not None else None
    out.sweep = {
        "settings": entries,
        "ranking": ranked,
        "best": entries[top]["setting"] if top is not None else None,
        "launch_commands": launch_commands(launch, entries[top]["setting"]) if top is not None else None,
        "ranked_by": "speed-up over the baseline" if base.get("output_tokens_per_s") else "tokens/s (no baseline)",
    }
    out.verdict = verdict_line(out) if top is not None else "no setting could be measured"
    return out
