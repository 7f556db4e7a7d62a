"""Several drafters against one loaded target: ``ckpt verify --launch --target T D1 D2 ... Dn``.

One server is started with the target and the first drafter. Each drafter, the first included, is
then swapped in (``ckpttools.engines.swap``: the route the engine-release table gives), checked,
and measured on that server, in the order given. A drafter that cannot take the running one's place
(another config, other tensors), or whose swap fails or cannot be checked, is measured on a server
of its own after the shared one stops; the report says which and why. Before the first swap and
after the last, the target's weights are read back: a swap never writes them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckpttools.errors import ServerError

__all__ = ["CompareReport", "compare_drafters", "MAX_DRAFTERS"]

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
    seconds: float = 0.0
    verdict: str = ""
    reports: list[Any] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("reports")
        return d

    @property
    def exit_code(self) -> int:
        """The worst of the drafters' exit codes (3: one was not measured at all)."""
        codes = [r.exit_code for r in self.reports] or [3]
        return 3 if 3 in codes else max(codes)


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

    ``verify_kwargs`` are :func:`ckpttools.ops.verify.verify`'s measurement options."""
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
        entries[i] = _own_server(launch, drafters[i], engine, why, out, verify_kwargs)
    out.drafters = [e for e in entries if e is not None]
    out.reports = [e.pop("_report") for e in out.drafters]
    out.seconds = time.monotonic() - t0
    out.verdict = "; ".join(f"{e['drafter']}: {r.verdict}" for e, r in zip(out.drafters, out.reports))
    return out


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
    """Start the shared server, swap and measure each drafter; returns those left for their own servers."""
    from ckpttools.engines.launch import RunningServer
    from ckpttools.engines.swap import prepare_launch, server_spec, swappable, target_checksum
    from ckpttools.formats.config import require_valid_config
    from ckpttools.io.checkpoint import open_checkpoint
    from ckpttools.io.net import NetClient
    from ckpttools.io.fsutil import note

    first = drafters[0]
    for d in dict.fromkeys(drafters):  # server_spec and swappable read each config: the one guard first
        with open_checkpoint(d) as ck:
            require_valid_config(ck.config, d)
    spec = prepare_launch(dataclasses.replace(launch, drafter=first), release)
    note(f"starting {spec.engine} on {spec.url} for {len(drafters)} drafters, log: {spec.log_path}")
    net = NetClient(timeout=verify_kwargs.get("timeout", 600.0), connect=10.0)
    server = RunningServer(spec).start()
    out.server_starts += 1
    own: list[tuple[int, str]] = []
    try:
        server.wait_ready(net)
        before = _checksum(target_checksum, launch, net)
        sspec = server_spec(release, first)
        for i, d in enumerate(drafters):
            why = swappable(first, d) if i else None
            if why is None:
                entry, why = _swap_and_measure(launch, d, sspec, engine, net, verify_kwargs)
                if entry is not None:
                    entries[i] = entry
                    if progress:
                        progress(f"{d}: {entry['_report'].verdict}")
                    continue
            own.append((i, why or "the swap failed"))
        after = _checksum(target_checksum, launch, net)
        out.target_unchanged = None if before is None or after is None else before == after
        out.target_check = _target_check_words(launch.engine, before, after)
        if out.target_unchanged is False:
            raise ServerError(
                "the target's weights read back differently after the swaps: no figure of this run can be trusted",
                hint="report this: a swap must never write the target",
            )
    finally:
        server.stop()
        net.close()
    return own


def _checksum(fn: Callable[..., str | None], launch: Any, net: Any) -> str | None:
    try:
        return fn(launch.engine, net, launch.url, launch.target)
    except ServerError:
        return None


def _target_check_words(engine: str, before: str | None, after: str | None) -> str:
    how = "every target weight's sums, through the worker extension" if engine == "vllm" else "/get_weights_by_name"
    if before is None or after is None:
        return f"not checked ({how} did not answer)"
    return f"{'unchanged' if before == after else 'CHANGED'}: {how}, read before the first swap and after the last"


def _swap_and_measure(
    launch: Any, drafter: str, sspec: dict[str, Any], engine: str, net: Any, verify_kwargs: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """Swap ``drafter`` in and measure it: (the entry, None), or (None, why it needs its own server)."""
    from ckpttools.engines.swap import swap_in
    from ckpttools.ops.verify import verify

    res = swap_in(launch.engine, net, launch.url, drafter, sspec, ranks=launch.tp)
    if not res.ok:
        return None, f"the swap failed: {res.why}"
    kw = dict(verify_kwargs)
    kw["flush_cache"] = launch.engine == "sglang"  # SGLang: the counters start from zero
    rep = verify(launch.url, engine=engine if "==" in engine else launch.engine, drafter=drafter, **kw)
    return {"drafter": drafter, "placed": "swap", "swap": res.to_dict(), **rep.to_dict(), "_report": rep}, None


def _own_server(
    launch: Any, drafter: str, engine: str, why: str, out: CompareReport, verify_kwargs: dict[str, Any]
) -> dict[str, Any]:
    from ckpttools.ops.verify import verify

    from ckpttools.engines.launch import free_port

    t0 = time.monotonic()
    out.server_starts += 1
    log = launch.log_path.removesuffix(".log") + f"-own-{out.server_starts}.log" if launch.log_path else None
    spec = dataclasses.replace(launch, drafter=drafter, port=free_port(), log_path=log)
    rep = verify(None, engine=engine, launch=spec, drafter=drafter, prechecked=True, **verify_kwargs)
    placed = {"ok": False, "seconds": time.monotonic() - t0, "how": "its own server", "why": why}
    return {"drafter": drafter, "placed": "own server", "swap": placed, **rep.to_dict(), "_report": rep}
