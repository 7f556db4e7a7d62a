"""A drafter refreshed on a server that stays up: ``ckpt serve`` starts one with ckpttools' guarded
swap hook, ``ckpt swap`` (:func:`swap_drafter`) puts another drafter in place, checked.

A swap here is validated before anything is sent (the drafter against the server's target in that
release's reading, load plan included, and against the running drafter: config, tensor names,
shapes and dtypes), then sent to the hook, which refuses any path outside the server's swap root,
a link out of it, anything not a regular non-empty safetensors file, and a wrong or missing key,
and says so. The answers are checked: every rank, the bytes read back, the cached maps, the
digest of what each rank loaded. With ``check`` prompts it is measured; below the bar the previous
drafter goes back in, checked the same way, and the report fails (exit 1).

What is guaranteed and what is not: README, "Refreshing a drafter on a running server".
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpttools.errors import EXIT_FINDINGS, CkptError, ConfigError, ServerError, UnsafePathError, opt

__all__ = ["SwapReport", "SwapStep", "SwapCheck", "LoadedDrafter", "ServeCommand", "swap_drafter", "serve_command"]

SCHEMA_VERSION = 1
#: prompts a swap's check measures at most
MAX_CHECK = 100_000


@dataclass(frozen=True)
class LoadedDrafter:
    """What the server's hook says it serves, every rank agreeing."""

    path: str | None
    digest: str | None
    #: "launch" (ckpt serve's word at start-up), "swap" (committed by the hook), "unknown"
    source: str
    generation: int


@dataclass(frozen=True)
class SwapStep:
    """One swap sent to the server (the new drafter, or the previous one put back)."""

    drafter: str
    digest: str
    ok: bool
    ranks: int
    maps_replaced: int
    checked: str
    seconds: float
    why: str | None


@dataclass(frozen=True)
class SwapCheck:
    """The measurement after the swap (``check`` prompts) and the bar it was held to."""

    num_prompts: int
    completed: int
    accept_length: float | None
    min_accept_len: float | None
    passed: bool | None
    verdict: str


@dataclass(frozen=True)
class SwapReport:
    """Everything one :func:`swap_drafter` did; ``to_dict`` follows schemas/swap-report.schema.json."""

    url: str
    engine: str
    release: str
    target: str | None
    before: LoadedDrafter
    swap: SwapStep
    after: LoadedDrafter
    label: str | None
    target_check: str
    check: SwapCheck | None
    rolled_back: bool
    rollback: SwapStep | None
    verdict: str
    exit_code: int
    seconds: float
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _target_digest(server: Any, net: Any, key: str | None, timeout: float) -> Any:
    """The target's digest through the hook (every parameter, where the weights live, on every
    rank), or the reason it could not be read (a string)."""
    from ckpttools.engines.guarded import guarded_target_digest

    try:
        return guarded_target_digest(
            server.engine, net, server.url, server.route, key=key, ranks=server.ranks or 1, timeout=timeout
        )
    except ServerError as e:
        return str(e)[:300]


def _target_words(before: Any, after: Any) -> tuple[str, list[str] | None]:
    """What the two digests say, in verify's words (measuring.compare.judge_target), and the tensors
    changed (None where nothing was compared)."""
    from ckpttools.measuring.compare import judge_target

    same, words, compared = judge_target(before, after)
    if same is None:
        return f"target digest: {words}", None
    return f"target {words}", [] if same else (compared or {}).get("changed") or ["(the digest)"]


def _state(server: Any, net: Any, key: str | None) -> LoadedDrafter:
    from ckpttools.engines.guarded import hook_state

    st = hook_state(server.engine, net, server.url, server.route, key=key, ranks=server.ranks)
    return LoadedDrafter(st.path, st.digest, st.source, st.generation)


def _validate(server: Any, drafter: str, running: LoadedDrafter) -> None:
    """The drafter against the server's target (that release's reading, load plan included) and
    against the running drafter (config, tensor names, shapes, dtypes); raises on the first fault."""
    from ckpttools.engines.swap import swappable
    from ckpttools.ops.validate import validate

    if server.target is None or not os.path.exists(server.target):
        raise ServerError(
            f"{server.url} serves target {server.target!r}, which is no folder here: the drafter cannot be "
            "validated against it",
            url=server.url,
            hint="run ckpt swap on the server's machine, where its target and drafters lie",
        )
    rep = validate(drafter, server.target, engine=server.release.spec, load_plan=True)
    if rep.errors:
        f = rep.errors[0]
        err = CkptError(
            f"{drafter} against the server's target {server.target}: validate found {len(rep.errors)} error(s) "
            f"({', '.join(x.id for x in rep.errors)}), e.g. {f.location}: {f.message}; nothing was sent",
            path=drafter,
            hint=f.hint or "run ckpt validate DRAFTER --target TARGET and fix what it lists",
        )
        err.exit_code = EXIT_FINDINGS
        raise err
    if running.path is None:
        raise ServerError(
            f"{server.url}: the hook does not say which drafter runs, so this one cannot be held against it",
            url=server.url,
            hint="start the server with ckpt serve (it tells the hook the launch drafter)",
        )
    why = swappable(running.path, drafter)
    if why is not None:
        raise CkptError(
            f"{drafter} cannot take the running drafter's place ({running.path}): {why}; nothing was sent",
            path=drafter,
            hint="a drafter of another shape needs a server of its own (ckpt serve)",
        )


def _send(server: Any, net: Any, drafter: str, digest: str, key: str | None, timeout: float) -> SwapStep:
    from ckpttools.engines.guarded import guarded_swap, set_label
    from ckpttools.engines.swap import server_spec

    res = guarded_swap(
        server.engine,
        net,
        server.url,
        drafter,
        server.route,
        server_spec(server.release, drafter),
        key=key,
        ranks=server.ranks or _ranks(server, net, key),
        digest=digest,
        timeout=timeout,
    )
    if not res.ok and server.route.get("version_label"):
        try:  # the label follows what is loaded: a refused swap leaves the old drafter, named as before
            st = _state(server, net, key)
            if st.digest is not None:
                set_label(net, server.url, server.route, st.digest[:16], key)
        except ServerError:
            pass
    return SwapStep(drafter, digest, res.ok, res.ranks, res.maps_replaced, res.checked, res.seconds, res.why)


def _ranks(server: Any, net: Any, key: str | None) -> int:
    from ckpttools.engines.guarded import hook_state

    return hook_state(server.engine, net, server.url, server.route, key=key).ranks


def _check_args(check: int | None, min_accept_len: float | None, steps: int | None) -> None:
    from ckpttools.io.inputs import check_number

    try:
        if check is not None:
            check_number(check, "check", lo=1, hi=MAX_CHECK, integer=True)
        if min_accept_len is not None:
            check_number(min_accept_len, "min_accept_len", lo=1, hi=65, integer=False)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if min_accept_len is not None:
        if check is None:
            raise ConfigError(f"{opt('min_accept_len')} needs {opt('check')} N: the bar is held against a measurement")
        if steps is not None and min_accept_len > steps + 1:
            raise ConfigError(
                f"{opt('min_accept_len')} {min_accept_len:g} can never be met: the server drafts {steps} steps, "
                f"at most {steps + 1} tokens per verify step"
            )


def _measure(server: Any, check: int, min_accept_len: float | None, kw: dict[str, Any]) -> tuple[SwapCheck, int]:
    from ckpttools.measuring.verify import verify

    rep = verify(
        server.url,
        engine=server.release.spec,
        num_prompts=check,
        min_accept_len=min_accept_len,
        flush_cache=True,
        **kw,
    )
    passed = rep.passed if min_accept_len is not None else None
    return SwapCheck(check, rep.completed, rep.accept_length, min_accept_len, passed, rep.verdict), rep.exit_code


def swap_drafter(
    host: str,
    drafter: str | Path,
    *,
    api_key: str | None = None,
    check: int | None = None,
    min_accept_len: float | None = None,
    engine: str = "auto",
    prompts: str = "builtin",
    max_new_tokens: int = 64,
    timeout: float = 600.0,
    ignore_eos: bool = False,
) -> SwapReport:
    """Put ``drafter`` in place of the running one on the server at ``host``, checked.

    Args:
        host: the server's base URL (http or https), started with ckpttools' hook (``ckpt serve``).
        drafter: the drafter's folder, under the server's swap root, on the server's machine.
        api_key: the key the server was started with (default: ``CKPT_API_KEY`` in the environment).
        check: measure this many prompts after the swap (``verify``'s measurement).
        min_accept_len: with ``check``, the bar: below it the previous drafter is swapped back in,
            checked the same way, and the report fails (``exit_code`` 1).
        engine: ``auto``, ``sglang`` or ``vllm``.
        prompts, max_new_tokens, ignore_eos: the check's prompts, as ``verify`` takes them.
        timeout: each request's deadline (seconds), the swap's and the check's.

    Returns:
        a frozen :class:`SwapReport`; ``exit_code`` 0 (swapped and, with a bar, at or above it) or 1
        (below the bar: rolled back).

    Raises:
        ServerError: the server cannot be reached, has no hook, refused the swap (its reason in the
            message: key, root, file), or a check of its answers failed; after a rollback that failed
            too, the message says what the server serves.
        CkptError: the drafter does not fit the target or the running drafter (nothing was sent).
        ValueError: ``check`` or ``min_accept_len`` out of range.
    """
    from ckpttools.engines.guarded import connect, drafter_digest
    from ckpttools.io.net import NetClient

    t0 = time.monotonic()
    key = api_key if api_key is not None else os.environ.get("CKPT_API_KEY") or None
    drafter = _before_any_request(drafter, check, min_accept_len)
    with NetClient(timeout=timeout, connect=10.0, retries=0) as net:
        server = connect(host, engine, net)
        _check_args(check, min_accept_len, server.steps)
        before = _state(server, net, key)
        _validate(server, drafter, before)
        digest = drafter_digest(drafter)
        target_before = _target_digest(server, net, key, timeout)
        step = _send(server, net, drafter, digest, key, timeout)
        if not step.ok:
            raise ServerError(f"{drafter}: {step.why}", url=server.url, hint=_refusal_hint(step.why or ""))
        after = _state(server, net, key)
        _held(after, digest, server.url, "after the swap")
        kw = {"prompts": prompts, "max_new_tokens": max_new_tokens, "timeout": timeout, "ignore_eos": ignore_eos}
        measured, rollback, after, code = _check_then_roll_back(
            server, net, key, before, after, check, min_accept_len, kw
        )
        rolled = rollback is not None
        label = after.digest[:16] if server.route.get("version_label") and after.digest else None
        target, changed = _target_words(target_before, _target_digest(server, net, key, timeout))
    verdict = _verdict(step, measured, rolled, after, changed)
    code = EXIT_FINDINGS if changed else code  # a swap must never write the target
    return SwapReport(
        server.url,
        server.engine,
        server.release.spec,
        server.target,
        before,
        step,
        after,
        label,
        target,
        measured,
        rolled,
        rollback,
        verdict,
        code,
        time.monotonic() - t0,
    )


def _before_any_request(drafter: str | Path, check: int | None, min_accept_len: float | None) -> str:
    """The drafter's absolute path, once the bar's values are in range and it is a readable drafter
    with weights (all before the network)."""
    from ckpttools.io.checkpoint import open_checkpoint

    _check_args(check, min_accept_len, None)
    drafter = os.path.abspath(drafter)
    with open_checkpoint(drafter):
        pass
    return drafter


def _check_then_roll_back(
    server: Any,
    net: Any,
    key: str | None,
    before: LoadedDrafter,
    after: LoadedDrafter,
    check: int | None,
    min_accept_len: float | None,
    kw: dict[str, Any],
) -> tuple[SwapCheck | None, SwapStep | None, LoadedDrafter, int]:
    """With ``check``: measure; below the bar, the previous drafter back in (checked). Returns the
    measurement, the rollback (None: none), what runs after, and the exit code."""
    if check is None:
        return None, None, after, 0
    measured, code = _measure(server, check, min_accept_len, kw)
    now = _state(server, net, key)
    if now.generation != after.generation or now.digest != after.digest:
        raise ServerError(
            f"{server.url}: another swap was made during the check (now {str(now.digest)[:16]}, "
            f"{now.path}): the figures are not this drafter's, and nothing was rolled back",
            url=server.url,
            hint="run one ckpt swap at a time against a server",
        )
    if measured.passed is not False:
        return measured, None, after, code
    rollback, after = _roll_back(server, net, before, key, kw["timeout"])
    return measured, rollback, after, EXIT_FINDINGS


def _held(st: LoadedDrafter, digest: str, url: str, when: str) -> None:
    if st.digest != digest:
        raise ServerError(
            f"{url}: {when}, the hook says it serves {str(st.digest)[:16]} ({st.path}), not {digest[:16]}",
            url=url,
            hint="the server does not serve what it answered for: restart it",
        )


def _roll_back(
    server: Any, net: Any, before: LoadedDrafter, key: str | None, timeout: float
) -> tuple[SwapStep, LoadedDrafter]:
    """The previous drafter back in, checked the same way; its files must still be the bytes it was."""
    from ckpttools.engines.guarded import drafter_digest

    assert before.path is not None and before.digest is not None
    now = drafter_digest(before.path)
    if now != before.digest:
        raise ServerError(
            f"below the bar, but the previous drafter {before.path} changed on disk since it was loaded "
            f"({before.digest[:16]}, now {now[:16]}): not rolled back; the server serves the new drafter",
            url=server.url,
            hint="keep each drafter the server loads in a folder of its own (never rewritten in place)",
        )
    back = _send(server, net, before.path, before.digest, key, timeout)
    if not back.ok:
        raise ServerError(
            f"below the bar, and the rollback to {before.path} failed: {back.why}",
            url=server.url,
            hint="swap the previous drafter in by hand, or restart the server",
        )
    after = _state(server, net, key)
    _held(after, before.digest, server.url, "after the rollback")
    return back, after


def _refusal_hint(why: str) -> str:
    if "key" in why:
        return f"give the key the server was started with ({opt('api_key')}, or CKPT_API_KEY)"
    if "swap root" in why:
        return (
            f"put the drafter under the server's swap root ({opt('swap_root')} of ckpt serve), as a folder of its own"
        )
    if "safetensors" in why or "FIFO" in why or "0 bytes" in why:
        return "give a folder of regular .safetensors files (ckpt export writes one)"
    return "check the server's log: the hook prints one line per swap"


def _verdict(
    step: SwapStep, measured: SwapCheck | None, rolled: bool, after: LoadedDrafter, changed: list[str] | None = None
) -> str:
    words = f"swapped in {step.drafter} ({step.digest[:16]}) on {step.ranks} rank{'s' if step.ranks != 1 else ''}"
    if measured is not None:
        al = "nothing measured" if measured.accept_length is None else f"accept length {measured.accept_length:.4f}"
        bar = f" against the bar {measured.min_accept_len:g}" if measured.min_accept_len is not None else ""
        words += f"; {al}{bar}"
    if rolled:
        why = (
            "NOT MEASURED, so not shown to meet the bar"
            if measured and measured.accept_length is None
            else "BELOW the bar"
        )
        words += f": {why}, rolled back to {after.path} ({str(after.digest)[:16]}), checked"
    if changed:  # every figure from this server is suspect
        words += f"; the TARGET's weights changed ({', '.join(changed[:3])}): restart the server"
    return words


@dataclass(frozen=True)
class ServeCommand:
    """What ``ckpt serve`` starts: the argv and the environment the hook needs (beyond the caller's)."""

    argv: list[str]
    env: dict[str, str]
    url: str
    log_path: str
    release: str
    spec: Any = dataclasses.field(repr=False, compare=False)


def _need_key(api_key: str | None) -> None:
    if not api_key:
        raise ServerError(
            "a server whose drafter can be swapped needs a key: none given",
            hint=f"give {opt('api_key')}, or set CKPT_API_KEY",
        )


def serve_command(
    engine: str,
    target: str,
    drafter: str,
    swap_root: str,
    *,
    api_key: str | None,
    engine_args: list[str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    tp: int = 1,
    steps: int = 3,
    python: str | None = None,
    log_path: str | None = None,
) -> ServeCommand:
    """The server's argv and environment with the guarded swap hook installed (nothing started).

    Raises:
        UnsafePathError: the drafter is not under the swap root.
        ServerError: a release without a swap route, a vLLM host that is not loopback, no key.
    """
    import sys

    from ckpttools.engines.guarded import check_inside, guard_env, is_loopback
    from ckpttools.engines.launch import LaunchSpec, build_command
    from ckpttools.engines.releases import resolve
    from ckpttools.engines.swap import prepare_launch, swap_route
    from ckpttools.measuring.launch_check import effective_engine
    from ckpttools.measuring.request import split_engine

    name, pinned = split_engine(engine)
    spec = LaunchSpec(
        engine=name,
        # a local target by its absolute path: the server names it so (/v1/models, /server_info), and
        # ckpt swap, run from any directory, validates the drafter against it there
        target=os.path.abspath(target) if os.path.lexists(target) else target,
        drafter=os.path.abspath(drafter),
        host=host,
        tp=tp,
        steps=steps,
        python=python or sys.executable,
    )
    spec = dataclasses.replace(spec, port=port or spec.port)
    rel_spec = effective_engine(spec, pinned)[0].spec
    release = resolve(rel_spec) if "==" in rel_spec else None
    route = swap_route(release)
    if route is None or release is None:
        raise ServerError(
            f"{rel_spec}: the release tables give no swap route for it, so no hook can be installed",
            hint=f"serve with a release that has one (ckpt validate {opt('engine')} lists them), or pin one",
        )
    _need_key(api_key)
    if route.get("loopback_only") and not is_loopback(host):
        raise UnsafePathError(
            f"{host}: {release.spec} guards none of its development endpoints (/collective_rpc included) with "
            "its API key, so the server must listen on loopback only",
            hint="serve on 127.0.0.1 and put an authenticating proxy in front for other machines",
        )
    check_inside(swap_root, drafter)
    key_flag = route.get("key_flag")
    args = [*(engine_args or []), *(["--" + key_flag, api_key] if key_flag else [])]
    log = log_path or f"ckpt-serve-{name}-{spec.port}.log"
    spec = dataclasses.replace(spec, engine_args=args, env=guard_env(swap_root, api_key, drafter), log_path=log)
    spec = prepare_launch(spec, release)
    return ServeCommand(build_command(spec), dict(spec.env), spec.url, log, release.spec, spec)


def serve(cmd: ServeCommand, *, ready: Any = None) -> int:
    """Start the server, wait until it answers, then until it exits (its exit code); Ctrl-C stops it.

    ``ready(url)`` is called once it answers /health."""
    from ckpttools.engines.launch import RunningServer
    from ckpttools.io.net import NetClient
    from ckpttools.measuring.launch_check import check_launch

    check_launch(cmd.spec, [cmd.spec.drafter])  # the port, and validate's errors and warnings, said once
    server = RunningServer(cmd.spec).start()
    old_term = _stop_on_sigterm()
    try:
        with NetClient(timeout=30.0, connect=5.0, retries=0) as net:
            server.wait_ready(net)
        if ready is not None:
            ready(cmd.url)
        assert server.proc is not None
        rc = server.proc.wait()
        raise ServerError(
            f"the server exited with code {rc}; last lines of {server.log_path}:\n{server.log_tail()}",
            hint=f"read {server.log_path}",
        )
    finally:
        server.stop()
        if old_term is not None:
            import signal

            signal.signal(signal.SIGTERM, old_term)


def _stop_on_sigterm() -> Any:
    """SIGTERM (a service manager's, a container's or a job's stop; also a parent that ignores SIGINT,
    as a pytest-xdist worker's children do) stops the server as Ctrl-C does: the handler raises
    KeyboardInterrupt, so the server is stopped on the way out and the command exits 130. Returns
    the handler it replaced (None outside the main thread, where none can be installed)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, stop)
