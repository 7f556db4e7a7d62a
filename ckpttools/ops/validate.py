"""``ckpt validate``: catch before serve time what SGLang and vLLM would get wrong.

Every check yields :class:`Finding` objects (id, severity, location, message, hint).
Config-level checks run on a config.json alone; tensor checks when weights are there;
target checks with ``target=``; ``deep=True`` streams every tensor.

This module is the entry point (:func:`validate`: open the drafter, run the checks in order,
route the hints, add the load plan) and re-exports the names callers take from it. The checks
live by section: :mod:`~ckpttools.ops.validate_config` (config.json on its own),
:mod:`~ckpttools.ops.validate_tensors` (the weights, and the deep scan),
:mod:`~ckpttools.ops.validate_target` (against the target, and the draft KV pool);
:mod:`~ckpttools.ops.validate_report` holds :class:`Finding` and :class:`ValidationReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ckpttools.errors import ConfigError
from ckpttools.engines.claims import applied, applying
from ckpttools.formats.config import essentials
from ckpttools.engines.aux_rules import sglang_default_aux_ids
from ckpttools.engines.opened import OpenedDrafter, OpenedTarget, open_once, open_target
from ckpttools.formats.conventions import TargetOnce, load_target_config
from ckpttools.io.checkpoint import Checkpoint, open_checkpoint
from ckpttools.ops.validate_config import bom_findings, check_config, config_findings
from ckpttools.ops.validate_report import (
    open_drafter,
    FIX_REPAIRS,
    SEVERITIES,
    Finding,
    ValidationReport,
    fix_repairs,
    route_fix_hints,
    schema,
)
from ckpttools.ops.validate_target import (
    check_target,
    draft_kv_estimate,
    kv_pool_sources,
    target_findings,
    target_hidden_findings,
    target_vocab_findings,
)
from ckpttools.ops.validate_tensors import check_deep, check_tensors, tensor_findings, usable_plan
from ckpttools.ops import quant_check

__all__ = [
    "Finding",
    "ValidationReport",
    "validate",
    "load_target_config",
    "sglang_default_aux_ids",
    "SEVERITIES",
    # the checks, and what fix, export and the tests take from here (defined in validate_*.py)
    "check_config",
    "check_tensors",
    "check_target",
    "check_deep",
    "add_load_plan",
    "draft_kv_estimate",
    "kv_pool_sources",
    "schema",
    "fix_repairs",
    "route_fix_hints",
    "FIX_REPAIRS",
]

ENGINES = ("sglang", "vllm")


#: how much ``validate --deep`` may download from the Hub unless told otherwise
DEFAULT_MAX_DOWNLOAD = "20GB"


_open_drafter = open_drafter  # the name callers took before it moved to validate_report


# ------------------------------------------------------------------------ entry point
def validate(
    drafter: str | Path | Checkpoint | OpenedDrafter,
    target: str | Path | Checkpoint | TargetOnce | None = None,
    *,
    deep: bool = False,
    engine: str = "sglang",
    max_download: int | str = DEFAULT_MAX_DOWNLOAD,
    load_plan: bool = False,
    engine_args: Sequence[str] = (),
) -> ValidationReport:
    """Check a drafter (checkpoint, directory, or bare config.json), optionally against a target.

    Args:
        drafter: a drafter checkpoint, a directory with config.json, or a config.json; or a drafter
            opened already (:func:`ckpttools.engines.opened.open_once`), which is not opened again.
        target: the target's checkpoint, directory, repo id, or config.json; or a
            :class:`~ckpttools.formats.conventions.TargetOnce` (a run's checks of several drafters
            read its config once).
        deep: also stream every tensor looking for NaN/Inf and zero/constant heads.
        engine: ``sglang`` (default) or ``vllm``, optionally with a release (``NAME==VERSION``,
            :mod:`ckpttools.engines.releases`; without one, the newest known release): whose class
            names and aux-layer-id convention to check against.
        max_download: with ``deep`` on a Hub repo, the most it may download (bytes, or
            e.g. ``"50GB"``); a larger repo is refused before anything is fetched.
        load_plan: also say what that release builds from the drafter, tensor by tensor and
            parameter by parameter (``report.load_plan``), with a finding for each silent outcome.
        engine_args: the arguments the engine will be launched with: advice never asks for what
            they give already (e.g. SGLang's ``--max-total-tokens``), and the quantization the release
            then gives the drafter (``--quantization=fp8``; :mod:`ckpttools.ops.quant_check`).

    Returns:
        a :class:`ValidationReport`; ``report.ok`` is False when any finding is an error.

    Raises:
        CkptError subclasses (exit 2) when an input cannot be read at all.

    Example:
        >>> r = validate("./drafter", target="./target/config.json")  # doctest: +SKIP
        >>> [f.id for f in r.errors]
    """
    from ckpttools.engines.releases import resolve

    release = resolve(engine)
    if release.name not in ENGINES:
        raise ConfigError(f"{release.spec}: validate checks SGLang's or vLLM's reading", hint="give sglang or vllm")
    opened = open_once(drafter)  # opened and its config parsed once: every check below reads this
    if target is not None:
        target = open_target(target)  # read where first needed, once: the quantization checks read it too
    with applying(release):
        rep, plan = _validate(
            opened,
            target,
            deep=deep,
            engine=release.name,
            max_download=max_download,
            engine_args=engine_args,
            want_plan=load_plan,
        )
        quant_check.add_findings(rep, opened, target, release, tuple(engine_args))
        rep.findings.sort(key=lambda f: SEVERITIES.index(f.severity))
    rep.engine_release = release.spec
    rep.engine_release_from = "given" if ("==" in engine or "@" in engine) else "the newest known release"
    if load_plan:
        add_load_plan(rep, opened, release, plan)
    return rep


def add_load_plan(rep: ValidationReport, drafter: Any, release: Any, plan: Any = None) -> None:
    """The release's load plan of the drafter (``plan``: the one validate made, else made here), and its
    silent outcomes as findings."""
    from ckpttools.engines.load_plan import plan_findings

    if plan is None:  # a drafter of another kind, or a caller with none: made here (once per opened drafter)
        opened = open_once(drafter)
        if opened.checkpoint is None:
            return
        plan = opened.load_plan(release)
    rep.load_plan = plan.to_dict()
    # validate's own dropped-tensor and dtype findings come from this plan already: one verdict, one severity
    said = {f.location for f in rep.findings if f.id in ("tensors.dropped", "tensors.training_only")}
    typed = {f.location for f in rep.findings if f.id in ("tensors.dtype", "tensors.dtype_unchecked")}
    for f in plan_findings(plan):
        if f["code"] == "tensor_dropped" and f.get("tensor") in said:
            continue
        if f["code"] in ("tensor_dtype", "tensor_dtype_unchecked") and f.get("tensor") in typed:
            continue
        sev = f["severity"] if f["severity"] in SEVERITIES else "warning"
        where = f.get("name") or f.get("param") or f.get("tensor") or "load plan"
        rep.findings.append(Finding(f"load_plan.{f['code']}", sev, str(where), f["message"], f.get("consequence")))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    rep.findings.sort(key=lambda f: order[f.severity])


def _validate(
    opened: OpenedDrafter,
    target: OpenedTarget | None,
    *,
    deep: bool,
    engine: str,
    max_download: int | str,
    engine_args: Sequence[str] = (),
    want_plan: bool = False,
) -> tuple[ValidationReport, Any]:
    """The report, and the drafter's load plan (made once; None: no weights, or another kind of drafter)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}")
    cfg, ck, name = opened.config, opened.checkpoint, opened.source
    other = _other_kind_report(opened, target)
    if other is not None:
        return other, None
    ess = opened.essentials  # the config read once: every check below takes it
    bad_config = bool(ess.invalid)
    raw = opened.load_plan(applied(engine)) if ck is not None and (want_plan or not bad_config) else None
    checked = []
    findings: list[Finding] = []
    if cfg is None:
        findings.append(
            Finding(
                "config.missing",
                "error",
                "config.json",
                "no config.json: SGLang cannot load the drafter",
                "add the drafter's config.json",
            )
        )
    else:
        checked.append("config")
        findings += bom_findings(ck if ck is not None else opened.source, engine)
        findings += config_findings(opened.facts, engine)
    if ck is not None:
        checked.append("tensors")
        findings += tensor_findings(
            opened.facts if cfg is not None else None, ck, engine, None if bad_config else usable_plan(raw)
        )
    else:
        findings.append(Finding("input.no_weights", "info", name, "no weights given: config checks only"))
    tname = None
    if target is not None and cfg is not None:
        tname = target.read()[1]
        checked.append("target")
        findings += bom_findings(target, engine, whose="target")
        findings += target_findings(opened.facts, target.facts, ck, engine, engine_args)
    if deep and ck is not None:
        checked.append("deep")
        ck = _local_for_deep(ck, max_download)
        findings += check_deep(ck)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings = route_fix_hints(findings)
    findings.sort(key=lambda f: order[f.severity])
    rep = ValidationReport(name, tname, checked, findings)
    rep.hub = _hub_of(ck)
    return rep, raw


def _other_kind_report(opened: OpenedDrafter, target: OpenedTarget | None) -> ValidationReport | None:
    """A drafter kind that is not EAGLE-3 (MTP, DFlash, ...): the EAGLE-3 checks do not apply;
    what does is that it fits the target (vocabulary and hidden size)."""
    cfg, ck, name, f = opened.config, opened.checkpoint, opened.source, opened.flavor
    if f.is_plain_eagle3 or not f.is_drafter:
        return None
    served = "; ".join(f"{e}: {flag}" for e, flag in f.flags.items())
    findings = [
        Finding("input.kind", "info", name, f"a {f.description} ({', '.join(f.evidence[:-1])}); served by {served}")
    ]
    checked, tname = ["kind"], None
    if target is not None and cfg is not None:
        tname = target.read()[1]
        checked.append("target")
        d, t = essentials(cfg), target.facts.e
        findings += target_vocab_findings(d, t, None)
        findings += target_hidden_findings(d, t)
    rep = ValidationReport(name, tname, checked, findings)
    rep.hub = _hub_of(ck)
    return rep


def _local_for_deep(ck: Checkpoint, max_download: int | str) -> Checkpoint:
    """A Hub checkpoint's weights fetched (after saying how much), or refused above the bound."""
    if ck.hub is None or ck.files():
        return ck
    from ckpttools.errors import HubError, opt
    from ckpttools.io.fsutil import note
    from ckpttools.io.units import human_bytes
    from ckpttools.io.writer import parse_size

    size = sum(h.file_size for h in ck.headers.values())
    bound = parse_size(max_download) or 0
    if size > bound:
        raise HubError(
            f"{ck.source}: a deep check reads every tensor, and its weights are {human_bytes(size)} "
            f"(more than the {human_bytes(bound)} allowed)",
            url=str(ck.source),
            hint=f"raise the bound ({opt('max_download')} {int(size / 1e9) + 1}GB), or check without the deep scan",
        )
    note(f"{ck.source}: the deep check downloads {human_bytes(size)} of weights into the Hugging Face cache")
    return open_checkpoint(ck.source, ck.hub.revision, download=True)


def _hub_of(ck: Checkpoint | None) -> dict[str, Any] | None:
    return ck.hub.describe() if ck is not None and ck.hub is not None else None
