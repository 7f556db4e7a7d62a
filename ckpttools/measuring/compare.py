"""Several drafters against one loaded target: ``ckpt verify --launch --target T D1 D2 ... Dn``.

One server is started with the target and the first drafter. Each drafter, the first included, is
then swapped in (``ckpttools.engines.swap``: the route the engine-release table gives), checked,
and measured on that server, in the order given. A drafter that cannot take the running one's place
(another config, other tensors), or whose swap fails or cannot be checked, is measured on a server
of its own after the shared one stops; the report says which and why. Before the first swap and
after the last, the server digests every target parameter where it lives (the engine object's
target_digest: engines.swap.target_digest): a swap never writes them, and a target that reads back
otherwise makes the run exit 1; a read that read nothing says "not checked" and why. A drafter whose
run ends in an error (a server that died, with its exit code and log tail, or did not start) has it
in its entry; the others are still measured.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckpttools.engines.engine import Engine
from ckpttools.engines.launch import LaunchSpec
from ckpttools.errors import EXIT_FINDINGS, CkptError, ServerError
from ckpttools.measuring.launch_check import LaunchCheck
from ckpttools.measuring.request import MAX_DRAFTERS, MeasureRequest, RunningHost

__all__ = ["CompareReport", "compare_drafters", "run_compare", "judge_target", "MAX_DRAFTERS"]


@dataclass
class CompareReport:
    """One entry per drafter, in the order given; ``to_dict`` is the JSON output."""

    engine: str
    target: str
    release: str | None
    tp: int = 1  # the tensor-parallel size every figure was measured at
    drafters: list[dict[str, Any]] = field(default_factory=list)
    server_starts: int = 0
    target_unchanged: bool | None = None
    target_check: str = "not checked"
    #: what the target digests covered (engines.swap.TargetDigest.compared), and the tensors that
    #: differ where they differ; None: not checked
    target_compared: dict[str, Any] | None = None
    seconds: float = 0.0
    verdict: str = ""
    reports: list[Any] = field(default_factory=list, repr=False)
    #: per drafter, the error its run ended in (None: it ran to the end)
    errors: list[CkptError | None] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("reports")
        d.pop("errors")
        return d

    @property
    def exit_code(self) -> int:
        """A drafter whose run ended in an error: that error's exit code (2: a server that died, did not
        start or answered impossible figures); else 1 where the target's weights changed during the
        swaps (no figure can be trusted); else the worst of the drafters' (3: one measured nothing)."""
        failed = [e.exit_code for e in self.errors if e is not None]
        if failed:
            return max(failed)
        if self.target_unchanged is False:
            return EXIT_FINDINGS
        codes = [r.exit_code for r in self.reports] or [3]
        return 3 if 3 in codes else max(codes)

    def error(self) -> CkptError | None:
        """The one error that stands for this run's failures, with the run's exit code (None: every
        drafter was measured, at or above any bar): the first failed drafter's, naming it and how
        many failed; else the first drafter that measured nothing."""
        failed = [(e["drafter"], err) for e, err in zip(self.drafters, self.errors) if err is not None]
        if failed:
            name, first = failed[0]
            more = f" ({len(failed)} of {len(self.drafters)} drafters failed)" if len(failed) > 1 else ""
            err = first.about(f"{name}: ", more)
        elif self.target_unchanged is False:
            changed = (self.target_compared or {}).get("changed") or []
            where = f" ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})" if changed else ""
            err = ServerError(
                f"the target's weights read back differently after the swaps{where}: no figure of this run can be trusted",
                hint="report this: a swap must never write the target",
            )
        else:
            empty = [(e["drafter"], r) for e, r in zip(self.drafters, self.reports) if r.accept_length is None]
            if not empty:
                return None
            name, rep = empty[0]
            more = f" ({len(empty)} of {len(self.drafters)} drafters measured nothing)" if len(empty) > 1 else ""
            err = ServerError(
                f"{name}: {rep.verdict}{more}",
                hint="check the server log; every request failed or carried no speculative figures",
            )
        err.exit_code = self.exit_code
        return err


def compare_drafters(
    launch: LaunchSpec,
    drafters: Sequence[str],
    *,
    engine: str,
    progress: Callable[[str], None] | None = None,
    prompts: str = "builtin",
    num_prompts: int | None = 16,
    max_new_tokens: int = 256,
    concurrency: int | Sequence[int] = 1,
    temperature: float = 0.0,
    ignore_eos: bool = False,
    min_accept_len: float | None = None,
    tokenizer: str | None = None,
    timeout: float = 600.0,
    repeat: int = 1,
) -> CompareReport:
    """Measure each drafter against the target of ``launch``, swapping on one server: a
    :class:`~ckpttools.measuring.request.MeasureRequest` of several drafters, measured.

    ``timeout`` bounds every request, the swaps' and the target checks' included. A drafter whose
    run ends in an error (its server died, did not start, or answered impossible figures) has the
    error in its entry (``error``; :meth:`CompareReport.error` gives one for the whole run) and the
    other drafters are measured and reported all the same."""
    req = MeasureRequest(
        drafters=tuple(drafters),
        target=launch.target,
        server=launch,
        engine=engine,
        prompts=prompts,
        num_prompts=num_prompts,
        repeat=repeat,
        max_new_tokens=max_new_tokens,
        concurrency=(concurrency,) if isinstance(concurrency, int) else tuple(concurrency) or (1,),
        temperature=temperature,
        ignore_eos=ignore_eos,
        min_accept_len=min_accept_len,
        tokenizer=tokenizer,
        timeout=timeout,
    )
    from ckpttools.measuring.launch_check import check_launch

    assert req.launch is not None
    t0 = time.monotonic()
    checked = check_launch(req.launch, req.drafters, req.pinned)  # every drafter validated, once, before any load
    return run_compare(req, checked, progress, t0)


def run_compare(
    req: MeasureRequest,
    checked: LaunchCheck,
    progress: Callable[[str], None] | None = None,
    started: float | None = None,
) -> CompareReport:
    """A request of several drafters, checked before the launch (``checked``: its engine as it will run),
    measured: each swapped in on one shared server (or, where it cannot be, on a server of its own)."""
    launch, drafters = req.launch, list(req.drafters)
    assert launch is not None
    t0 = time.monotonic() if started is None else started
    eng = checked.engine
    out = CompareReport(launch.engine, launch.target, eng.release.spec if eng.release is not None else None, launch.tp)
    entries: list[dict[str, Any] | None] = [None] * len(drafters)
    if eng.swap_route() is None:
        why = f"{out.release or launch.engine}: the engine-release table has no swap route"
        own = [(i, why) for i in range(len(drafters))]
    else:
        own = _shared_server(req, checked, out, entries, progress)
    for i, why in own:
        if progress:
            progress(f"{drafters[i]}: its own server ({why})")
        entries[i] = entry = _own_server(req, eng, drafters[i], why, out)
        if progress and entry["_error"] is not None:
            progress(f"{drafters[i]}: {_progress_words(entry)}")
    out.drafters = [e for e in entries if e is not None]
    out.reports = [e.pop("_report") for e in out.drafters]
    out.errors = [e.pop("_error") for e in out.drafters]
    out.seconds = time.monotonic() - t0
    out.verdict = "; ".join(f"{e['drafter']}: {r.verdict}" for e, r in zip(out.drafters, out.reports))
    return out


def _guard_configs(drafters: Sequence[str], checked: LaunchCheck | None = None) -> None:
    """Each drafter's config through the one config guard: server_spec and swappable read them
    (``checked``: the launch check, whose opened drafters are read, not the files again)."""
    from ckpttools.formats.config import require_valid_config

    for d in dict.fromkeys(drafters):
        opened = checked.opened.get(d) if checked is not None else None
        if opened is None:
            from ckpttools.io.checkpoint import open_checkpoint

            with open_checkpoint(d) as ck:
                require_valid_config(ck.config, d)
        else:
            require_valid_config(opened.require_checkpoint().config, d)


def shared_launch(req: MeasureRequest, checked: LaunchCheck) -> LaunchSpec:
    """The shared server's launch, before it starts: every drafter's config through the config guard,
    and the first drafter's launch with the swap route enabled; each drafter as ``checked`` opened it."""
    from ckpttools.engines.swap import prepare_launch

    launch, drafters = req.launch, list(req.drafters)
    assert launch is not None
    _guard_configs(drafters, checked)
    first = dataclasses.replace(launch, drafter=drafters[0])
    return prepare_launch(first, checked.engine.release, checked.drafter(drafters[0]))


@dataclass
class _Shared:
    """The shared server of a run, and what every drafter's turn on it needs."""

    req: MeasureRequest
    launch: LaunchSpec
    eng: Engine
    net: Any
    server: Any
    sspec: dict[str, Any]
    #: the launch check: each drafter as it opened it
    checked: LaunchCheck


def _shared_server(
    req: MeasureRequest,
    checked: LaunchCheck,
    out: CompareReport,
    entries: list[dict[str, Any] | None],
    progress: Callable[[str], None] | None,
) -> list[tuple[int, str]]:
    """Start the shared server, swap and measure each drafter; returns those left for their own servers.

    A shared server that dies ends the drafter in flight with the death (its exit code and its log's
    last lines, the log kept); the drafters after it go to their own servers."""
    from ckpttools.engines.launch import RunningServer
    from ckpttools.engines.swap import server_spec
    from ckpttools.io.net import NetClient

    launch, drafters, eng = req.launch, list(req.drafters), checked.engine
    assert launch is not None
    spec = shared_launch(req, checked)
    checked.announce(spec, len(drafters))
    net = NetClient(timeout=req.timeout, connect=10.0)
    server = RunningServer(spec).start()
    out.server_starts += 1
    try:
        server.wait_ready(net)
        sspec = server_spec(eng.release, checked.drafter(drafters[0]))
        before = _digest(launch, eng, sspec, net, req.timeout)
        shared = _Shared(req, launch, eng, net, server, sspec, checked)
        own, dead = _turns(shared, entries, progress)
        if dead is not None:
            out.target_check = "not checked: the shared server died before the read after the last swap"
            return own
        after = _digest(launch, eng, sspec, net, req.timeout)
        out.target_unchanged, out.target_check, out.target_compared = judge_target(before, after)
    finally:
        server.stop()
        net.close()
    return own


def _turns(
    shared: _Shared, entries: list[dict[str, Any] | None], progress: Callable[[str], None] | None
) -> tuple[list[tuple[int, str]], str | None]:
    """Each drafter's turn on the shared server, in order: (those left for their own servers, why the
    server died or None)."""
    from ckpttools.engines.swap import swappable

    drafters = shared.req.drafters
    own: list[tuple[int, str]] = []
    dead: str | None = None
    for i, d in enumerate(drafters):
        if dead is not None:
            own.append((i, dead))
            continue
        why = swappable(shared.checked.drafter(drafters[0]), shared.checked.drafter(d)) if i else None
        if why is None:
            entry, why = _swap_and_measure(shared, d)
            proc = shared.server.proc
            if proc is not None and proc.poll() is not None:
                dead = f"the shared server died (exit code {proc.returncode}) before its turn"
            if entry is not None:
                entries[i] = entry
                if progress:
                    progress(f"{d}: {_progress_words(entry)}")
                continue
        own.append((i, why or "the swap failed"))
    return own, dead


def _progress_words(entry: dict[str, Any]) -> str:
    """A drafter's outcome as the progress line says it (a failure in full is the run's error)."""
    if entry["_error"] is not None:
        return "not measured: its run ended in an error (in its entry)"
    return str(entry["_report"].verdict)


def _digest(launch: LaunchSpec, eng: Engine, sspec: dict[str, Any], net: Any, timeout: float) -> Any:
    """The target's digest (engines.swap.TargetDigest), or why it could not be read (a string)."""
    try:
        got = eng.target_digest(net, launch.url, launch.target, sspec, launch.tp, timeout)
    except ServerError as e:
        return str(e).splitlines()[0]
    return got if got is not None else f"{eng.label} gives no way to digest the target's weights"


def judge_target(before: Any, after: Any) -> tuple[bool | None, str, dict[str, Any] | None]:
    """(target_unchanged, the words, what was compared) from the digests read before the first swap
    and after the last (engines.swap.TargetDigest each, or why it could not be read): ``unchanged``
    or ``CHANGED`` only where both reads read something, and over the same tensors; else ``not
    checked`` and why (None)."""
    if isinstance(before, str):
        return None, f"not checked: before the first swap, {before}", None
    if isinstance(after, str):
        return None, f"not checked: after the last swap, {after}", None
    compared = after.compared()
    same = before.digest == after.digest
    compared["changed"] = [] if same else after.changed(before)
    size = f"{compared['parameters']:,} parameters, {compared['bytes'] / 2**30:.2f} GiB"
    extra = [f"{compared['buffers']} buffers"] if compared["buffers"] else []
    if compared["packed_layers"]:
        extra.append(f"{compared['packed_layers']} packed layers by their output")
    size += f" ({', '.join(extra)})" if extra else ""
    words = f"{'unchanged' if same else 'CHANGED'}: {size}; {after.how}, read before the first swap and after the last"
    if not same and compared["changed"]:
        words += f"; differs in {', '.join(compared['changed'][:3])}"
    return same, words, compared


def _death(server: Any, failures: bool, during: str) -> CkptError | None:
    """The shared server's death (its exit code, its log's last lines) as an error, or None: it is up."""
    from ckpttools.measuring.verify import _check_alive

    try:
        _check_alive(server, failures, during)
    except ServerError as e:
        return e
    return None


def _swap_and_measure(shared: _Shared, drafter: str) -> tuple[dict[str, Any] | None, str | None]:
    """Swap ``drafter`` in and measure it: (the entry, None), or (None, why it needs its own server).

    The entry holds the error the run ended in, where it did: the server's death, or an error of
    the measurement (impossible figures, a server that stopped answering)."""
    from ckpttools.measuring.verify import measure_one

    req, launch, eng, server = shared.req, shared.launch, shared.eng, shared.server
    t0 = time.monotonic()
    res = eng.swap_in(shared.net, launch.url, shared.checked.drafter(drafter), shared.sspec, launch.tp, req.timeout)
    if not res.ok:
        died = _death(server, res.request_failed, f"the swap of {drafter}")
        if died is None:
            return None, f"the swap failed: {res.why}"
        return _failed(launch, drafter, "swap", res.to_dict(), died), None
    one = dataclasses.replace(
        req,
        drafters=(drafter,),
        server=RunningHost(launch.url),
        engine=req.engine if req.pinned is not None else launch.engine,
        flush_cache=eng.flush_resets_counters,  # the counters start from zero where the flush resets them
    )
    try:
        rep = measure_one(one)
    except CkptError as e:
        return _failed(launch, drafter, "swap", res.to_dict(), _death(server, True, f"the run of {drafter}") or e), None
    died = _death(server, rep.failed > 0, f"the run of {drafter}")
    if died is not None:
        return _failed(launch, drafter, "swap", res.to_dict(), died), None
    entry = {"drafter": drafter, "placed": "swap", "swap": res.to_dict(), **rep.to_dict(), "error": None}
    entry["seconds"] = time.monotonic() - t0  # the swap, its checks and the measurement: the time to this verdict
    return {**entry, "_report": rep, "_error": None}, None


def _failed(launch: LaunchSpec, drafter: str, placed: str, swap: dict[str, Any], err: CkptError) -> dict[str, Any]:
    """The entry of a drafter whose run ended in ``err``: no figures, the error said."""
    from ckpttools.measuring.verify import VerifyReport

    msg = str(err)
    rep = VerifyReport(engine=launch.engine, url=launch.url, errors=[msg])
    rep.verdict = f"not measured: {msg.splitlines()[0] if msg else type(err).__name__}"
    entry = {"drafter": drafter, "placed": placed, "swap": swap, **rep.to_dict(), "error": msg}
    return {**entry, "_report": rep, "_error": err}


def _own_server(req: MeasureRequest, eng: Engine, drafter: str, why: str, out: CompareReport) -> dict[str, Any]:
    """``drafter`` measured on a server of its own (checked before the run: only its port now)."""
    from ckpttools.engines.launch import free_port
    from ckpttools.measuring.launch_check import check_port_and_release
    from ckpttools.measuring.verify import measure_one

    launch = req.launch
    assert launch is not None
    t0 = time.monotonic()
    out.server_starts += 1
    log = launch.log_path.removesuffix(".log") + f"-own-{out.server_starts}.log" if launch.log_path else None
    spec = dataclasses.replace(launch, drafter=drafter, port=free_port(), log_path=log)
    placed: dict[str, Any] = {"ok": False, "seconds": 0.0, "how": "its own server", "why": why}
    try:
        checked = check_port_and_release(spec, req.pinned, eng)
        rep = measure_one(dataclasses.replace(req, drafters=(drafter,), server=spec), checked=checked)
    except CkptError as e:  # this drafter's failure: the others' results stand
        placed["seconds"] = time.monotonic() - t0
        return _failed(spec, drafter, "own server", placed, e)
    placed["seconds"] = time.monotonic() - t0
    entry = {"drafter": drafter, "placed": "own server", "swap": placed, **rep.to_dict(), "error": None}
    return {**entry, "_report": rep, "_error": None}
