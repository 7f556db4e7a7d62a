"""Several drafters against one loaded target: ``ckpt verify --launch --target T D1 D2 ... Dn``.

One server is started with the target and the first drafter. Each drafter, the first included, is
then swapped in (``ckpttools.engines.swap``: the route the engine-release table gives), checked,
and measured on that server, in the order given. A drafter that cannot take the running one's place
(another config, other tensors), or whose swap fails or cannot be checked, is measured on a server
of its own after the shared one stops; the report says which and why. Before the first swap and
after the last, the server digests every target parameter where it lives (engines.swap.
target_digest): a swap never writes them, and a target that reads back otherwise makes the run
exit 1; a read that read nothing says "not checked" and why. A drafter whose run ends in an error
(a server that died, with its exit code and log tail, or did not start) has it in its entry; the
others are still measured.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckpttools.errors import EXIT_FINDINGS, CkptError, ServerError

__all__ = ["CompareReport", "compare_drafters", "judge_target", "MAX_DRAFTERS"]

#: drafters one run measures at most
MAX_DRAFTERS = 64


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


def _route(launch: Any, engine: str) -> tuple[Any, dict[str, Any] | None]:
    """The release the launch runs (pinned in ``engine``, else the one its Python has) and its swap route."""
    from ckpttools.engines.releases import resolve
    from ckpttools.engines.swap import swap_route
    from ckpttools.ops.verify import _launch_release, split_engine

    name, pinned = split_engine(engine)
    spec = pinned.spec if pinned is not None else _launch_release(launch)
    release = resolve(spec) if "==" in spec else None
    return release, swap_route(release)


def compare_drafters(
    launch: Any,
    drafters: Sequence[str],
    *,
    engine: str,
    progress: Callable[[str], None] | None = None,
    **verify_kwargs: Any,
) -> CompareReport:
    """Measure each drafter against the target of ``launch`` (a LaunchSpec), swapping on one server.

    ``verify_kwargs`` are :func:`ckpttools.ops.verify.verify`'s measurement options; their
    ``timeout`` bounds every request, the swaps' and the target checks' included. A drafter whose
    run ends in an error (its server died, did not start, or answered impossible figures) has the
    error in its entry (``error``; :meth:`CompareReport.error` gives one for the whole run) and the
    other drafters are measured and reported all the same."""
    from ckpttools.ops.verify import _check_before_launch

    if not 1 <= len(drafters) <= MAX_DRAFTERS:
        raise ValueError(f"give 1 to {MAX_DRAFTERS} drafters, not {len(drafters)}")
    t0 = time.monotonic()
    for d in dict.fromkeys(drafters):  # every drafter validated against the target before any load
        _check_before_launch(dataclasses.replace(launch, drafter=d), announce=False)
    release, route = _route(launch, engine)
    out = CompareReport(launch.engine, launch.target, release.spec if release is not None else None, launch.tp)
    entries: list[dict[str, Any] | None] = [None] * len(drafters)
    own: list[tuple[int, str]] = []
    if route is None:
        why = f"{out.release or launch.engine}: the engine-release table has no swap route"
        own = [(i, why) for i in range(len(drafters))]
    else:
        own = _shared_server(launch, drafters, release, route, engine, out, entries, progress, verify_kwargs)
    for i, why in own:
        if progress:
            progress(f"{drafters[i]}: its own server ({why})")
        entries[i] = entry = _own_server(launch, drafters[i], engine, why, out, verify_kwargs)
        if progress and entry["_error"] is not None:
            progress(f"{drafters[i]}: {_progress_words(entry)}")
    out.drafters = [e for e in entries if e is not None]
    out.reports = [e.pop("_report") for e in out.drafters]
    out.errors = [e.pop("_error") for e in out.drafters]
    out.seconds = time.monotonic() - t0
    out.verdict = "; ".join(f"{e['drafter']}: {r.verdict}" for e, r in zip(out.drafters, out.reports))
    return out


def _guard_configs(drafters: Sequence[str]) -> None:
    """Each drafter's config through the one config guard: server_spec and swappable read them."""
    from ckpttools.formats.config import require_valid_config
    from ckpttools.io.checkpoint import open_checkpoint

    for d in dict.fromkeys(drafters):
        with open_checkpoint(d) as ck:
            require_valid_config(ck.config, d)


def _shared_server(
    launch: Any,
    drafters: Sequence[str],
    release: Any,
    route: dict[str, Any],
    engine: str,
    out: CompareReport,
    entries: list[dict[str, Any] | None],
    progress: Callable[[str], None] | None,
    verify_kwargs: dict[str, Any],
) -> list[tuple[int, str]]:
    """Start the shared server, swap and measure each drafter; returns those left for their own servers.

    A shared server that dies ends the drafter in flight with the death (its exit code and its log's
    last lines, the log kept); the drafters after it go to their own servers."""
    from ckpttools.engines.launch import RunningServer
    from ckpttools.engines.swap import prepare_launch, server_spec, swappable
    from ckpttools.io.net import NetClient
    from ckpttools.io.fsutil import note

    first = drafters[0]
    _guard_configs(drafters)
    spec = prepare_launch(dataclasses.replace(launch, drafter=first), release)
    note(f"starting {spec.engine} on {spec.url} for {len(drafters)} drafters, log: {spec.log_path}")
    timeout = verify_kwargs.get("timeout", 600.0)
    net = NetClient(timeout=timeout, connect=10.0)
    server = RunningServer(spec).start()
    out.server_starts += 1
    own: list[tuple[int, str]] = []
    dead: str | None = None
    try:
        server.wait_ready(net)
        sspec = server_spec(release, first)
        before = _digest(launch, sspec, net, timeout)
        for i, d in enumerate(drafters):
            if dead is not None:
                own.append((i, dead))
                continue
            why = swappable(first, d) if i else None
            if why is None:
                entry, why = _swap_and_measure(launch, d, sspec, engine, net, server, verify_kwargs)
                if server.proc is not None and server.proc.poll() is not None:
                    dead = f"the shared server died (exit code {server.proc.returncode}) before its turn"
                if entry is not None:
                    entries[i] = entry
                    if progress:
                        progress(f"{d}: {_progress_words(entry)}")
                    continue
            own.append((i, why or "the swap failed"))
        if dead is not None:
            out.target_check = "not checked: the shared server died before the read after the last swap"
            return own
        after = _digest(launch, sspec, net, timeout)
        out.target_unchanged, out.target_check, out.target_compared = judge_target(before, after)
    finally:
        server.stop()
        net.close()
    return own


def _progress_words(entry: dict[str, Any]) -> str:
    """A drafter's outcome as the progress line says it (a failure in full is the run's error)."""
    if entry["_error"] is not None:
        return "not measured: its run ended in an error (in its entry)"
    return str(entry["_report"].verdict)


def _digest(launch: Any, sspec: dict[str, Any], net: Any, timeout: float) -> Any:
    """The target's digest (engines.swap.TargetDigest), or why it could not be read (a string)."""
    from ckpttools.engines.swap import target_digest

    try:
        return target_digest(net, launch.url, sspec, launch.tp, timeout=timeout)
    except ServerError as e:
        return str(e).splitlines()[0]


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
    from ckpttools.ops.verify import _check_alive

    try:
        _check_alive(server, failures, during)
    except ServerError as e:
        return e
    return None


def _swap_and_measure(
    launch: Any, drafter: str, sspec: dict[str, Any], engine: str, net: Any, server: Any, verify_kwargs: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """Swap ``drafter`` in and measure it: (the entry, None), or (None, why it needs its own server).

    The entry holds the error the run ended in, where it did: the server's death, or an error of
    the measurement (impossible figures, a server that stopped answering)."""
    from ckpttools.engines.swap import swap_in
    from ckpttools.ops.verify import verify

    t0 = time.monotonic()
    res = swap_in(
        launch.engine, net, launch.url, drafter, sspec, ranks=launch.tp, timeout=verify_kwargs.get("timeout", 600.0)
    )
    if not res.ok:
        died = _death(server, res.request_failed, f"the swap of {drafter}")
        if died is None:
            return None, f"the swap failed: {res.why}"
        return _failed(launch, drafter, "swap", res.to_dict(), died), None
    kw = dict(verify_kwargs)
    kw["flush_cache"] = launch.engine == "sglang"  # SGLang: the counters start from zero
    try:
        rep = verify(launch.url, engine=engine if "==" in engine else launch.engine, drafter=drafter, **kw)
    except CkptError as e:
        return _failed(launch, drafter, "swap", res.to_dict(), _death(server, True, f"the run of {drafter}") or e), None
    died = _death(server, rep.failed > 0, f"the run of {drafter}")
    if died is not None:
        return _failed(launch, drafter, "swap", res.to_dict(), died), None
    entry = {"drafter": drafter, "placed": "swap", "swap": res.to_dict(), **rep.to_dict(), "error": None}
    entry["seconds"] = time.monotonic() - t0  # the swap, its checks and the measurement: the time to this verdict
    return {**entry, "_report": rep, "_error": None}, None


def _failed(launch: Any, drafter: str, placed: str, swap: dict[str, Any], err: CkptError) -> dict[str, Any]:
    """The entry of a drafter whose run ended in ``err``: no figures, the error said."""
    from ckpttools.ops.verify import VerifyReport

    msg = str(err)
    rep = VerifyReport(engine=launch.engine, url=launch.url, errors=[msg])
    rep.verdict = f"not measured: {msg.splitlines()[0] if msg else type(err).__name__}"
    entry = {"drafter": drafter, "placed": placed, "swap": swap, **rep.to_dict(), "error": msg}
    return {**entry, "_report": rep, "_error": err}


def _own_server(
    launch: Any, drafter: str, engine: str, why: str, out: CompareReport, verify_kwargs: dict[str, Any]
) -> dict[str, Any]:
    from ckpttools.ops.verify import verify

    from ckpttools.engines.launch import free_port

    t0 = time.monotonic()
    out.server_starts += 1
    log = launch.log_path.removesuffix(".log") + f"-own-{out.server_starts}.log" if launch.log_path else None
    spec = dataclasses.replace(launch, drafter=drafter, port=free_port(), log_path=log)
    placed: dict[str, Any] = {"ok": False, "seconds": 0.0, "how": "its own server", "why": why}
    try:
        rep = verify(None, engine=engine, launch=spec, drafter=drafter, prechecked=True, **verify_kwargs)
    except CkptError as e:  # this drafter's failure: the others' results stand
        placed["seconds"] = time.monotonic() - t0
        return _failed(spec, drafter, "own server", placed, e)
    placed["seconds"] = time.monotonic() - t0
    entry = {"drafter": drafter, "placed": "own server", "swap": placed, **rep.to_dict(), "error": None}
    return {**entry, "_report": rep, "_error": None}
