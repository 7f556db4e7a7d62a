"""What to measure, as one typed value: :class:`MeasureRequest`.

A request names the drafters and the target, where the server comes from (a running host, a
:class:`~ckpttools.engines.launch.LaunchSpec` to start, or the offline PyTorch probe), one setting
or a sweep, and the prompts, concurrency, context lengths, the bar and the outputs.
:meth:`MeasureRequest.from_options` is the one place where option combinations are judged: what a
running server cannot honour, what the offline probe cannot, what several drafters on one server
cannot. :func:`ckpttools.measuring.measure.measure` runs a request.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ckpttools.engines.engine import ENGINE_OBJECTS, Engine, engine_for
from ckpttools.engines.launch import LaunchSpec
from ckpttools.errors import EXIT_USAGE, CkptError, ConfigError, opt

__all__ = [
    "MeasureRequest",
    "RunningHost",
    "Offline",
    "Sweep",
    "RequestError",
    "LaunchSpec",
    "split_engine",
    "VERIFY_ENGINES",
    "MAX_DRAFTERS",
]

#: what verify's engine may be: a server engine (optionally with a release), auto-detected, or offline
VERIFY_ENGINES = ("auto", "torch", "sglang", "vllm")
#: drafters one run measures at most
MAX_DRAFTERS = 64


class RequestError(CkptError, ValueError):
    """Options that do not go together (or a value one of them cannot take): bad usage, exit 2.

    ``param`` names the one parameter at fault where there is one (the CLI shows it as a bad value)."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class RunningHost:
    """A server that is already up: its URL, and optionally its log (read, never written)."""

    url: str
    log: str | None = None


@dataclass(frozen=True)
class Offline:
    """The PyTorch probe in this process: no server."""

    steps: int = 3
    device: str = "cpu"
    dtype: str | None = None


@dataclass(frozen=True)
class Sweep:
    """One server per speculative setting (:func:`ckpttools.measuring.sweep.parse_sweep`), plus a baseline."""

    settings: tuple[dict[str, int], ...]


@dataclass(frozen=True)
class MeasureRequest:
    """What one measurement is: built directly, or by :meth:`from_options`, which judges combinations."""

    drafters: tuple[str, ...]
    target: str | None
    server: RunningHost | LaunchSpec | Offline
    #: ``auto``, ``sglang``, ``vllm`` or ``torch``, optionally ``NAME==VERSION``
    engine: str = "auto"
    sweep: Sweep | None = None
    prompts: str = "builtin"
    num_prompts: int | None = 16
    repeat: int = 1
    max_new_tokens: int = 256
    concurrency: tuple[int, ...] = (1,)
    context_lengths: tuple[int, ...] = ()
    temperature: float = 0.0
    ignore_eos: bool = False
    min_accept_len: float | None = None
    tokenizer: str | None = None
    timeout: float = 600.0
    #: the same target without speculation, for the speedup
    baseline_host: str | None = None
    #: empty the server's cache first (SGLang: its counters start from zero)
    flush_cache: bool = False
    #: the JSON report and the plot to write (None: none)
    output: str | None = None
    plot: str | None = None

    def __post_init__(self) -> None:
        _check_structure(self)

    # ------------------------------------------------------------------ what it is
    @property
    def drafter(self) -> str | None:
        return self.drafters[0] if self.drafters else None

    @property
    def launch(self) -> LaunchSpec | None:
        return self.server if isinstance(self.server, LaunchSpec) else None

    @property
    def host(self) -> RunningHost | None:
        return self.server if isinstance(self.server, RunningHost) else None

    @property
    def engine_name(self) -> str:
        """The engine's name without a release (``auto`` until a server says which)."""
        return split_engine(self.engine)[0]

    @property
    def pinned(self) -> Any:
        """The release table the engine was pinned to (``NAME==VERSION``), or None."""
        return split_engine(self.engine)[1]

    def engine_object(self, release: Any = None) -> Engine:
        """The engine object of a launch or of the offline probe (a running host: detected first)."""
        return engine_for(self.engine_name, release if release is not None else self.pinned)

    # ------------------------------------------------------------------ building one from options
    @classmethod
    def from_options(
        cls,
        drafters: Sequence[str],
        *,
        engine: str = "auto",
        host: str | None = None,
        launch: bool = False,
        target: str | None = None,
        port: int | None = None,
        tp: int | None = None,
        steps: int | None = None,
        topk: int | None = None,
        engine_args: Sequence[str] | None = None,
        engine_python: str | None = None,
        ready_timeout: float | None = None,
        log: str | None = None,
        device: str | None = None,
        sweep: Sweep | None = None,
        baseline_host: str | None = None,
        flush_cache: bool = False,
        prompts: str = "builtin",
        num_prompts: int | None = 16,
        repeat: int = 1,
        max_new_tokens: int = 256,
        concurrency: Sequence[int] = (1,),
        context_lengths: Sequence[int] = (),
        temperature: float = 0.0,
        ignore_eos: bool = False,
        min_accept_len: float | None = None,
        tokenizer: str | None = None,
        timeout: float | None = None,
        output: str | None = None,
        plot: str | None = None,
    ) -> MeasureRequest:
        """A request from options as a command line gives them: ``None`` (or an empty value) is an
        option not given. Every combination that cannot be measured is refused here.

        Raises:
            RequestError: options that do not go together, naming them.
        """
        o = dict(locals())
        del o["cls"], o["drafters"]
        name = split_engine(engine)[0]
        kind = ENGINE_OBJECTS.get(name)
        offline = kind is not None and not kind.serves
        ours = launch or offline  # ckpttools sets the steps
        _check_drafters(list(drafters), o, offline)
        _check_bar(min_accept_len, steps if steps is not None else 3, ours)
        if not ours:
            _check_unused_by_host(o)
        server = _server(list(drafters), o, name, kind, offline)
        return cls(
            drafters=tuple(drafters),
            target=target,
            server=server,
            engine=engine,
            sweep=sweep,
            concurrency=tuple(concurrency),
            context_lengths=tuple(context_lengths),
            timeout=timeout if timeout is not None else 600.0,
            **{k: o[k] for k in _AS_GIVEN},
        )


#: the request's fields that :meth:`MeasureRequest.from_options` takes as they are given
_AS_GIVEN = (
    "prompts",
    "num_prompts",
    "repeat",
    "max_new_tokens",
    "temperature",
    "ignore_eos",
    "min_accept_len",
    "tokenizer",
    "baseline_host",
    "flush_cache",
    "output",
    "plot",
)


def _names(keys: Sequence[str]) -> str:
    return ", ".join(opt(k) for k in keys)


def _check_drafters(drafters: list[str], o: dict[str, Any], offline: bool) -> None:
    """Several drafters share one server that ckpttools starts: nothing that needs a server per drafter."""
    if len(drafters) <= 1:
        return
    if not o["launch"] or offline:
        raise RequestError(
            f"several drafters need {opt('launch')} {opt('engine')} sglang|vllm: they share one server it starts"
        )
    if len(drafters) > MAX_DRAFTERS:
        raise RequestError(f"{len(drafters)} drafters: one run measures at most {MAX_DRAFTERS}")
    for key in ("sweep", "plot", "context_lengths", "baseline_host", "flush_cache"):
        if o[key]:
            raise RequestError(
                f"{opt(key)} is not taken with several drafters (each is measured from a flushed cache on one "
                f"server); give one drafter, or leave {opt(key)} out"
            )


def _check_bar(min_accept_len: float | None, steps: int, ours: bool) -> None:
    if ours and min_accept_len is not None and min_accept_len > steps + 1:
        raise RequestError(
            f"{min_accept_len:g} can never be met: {steps} draft steps give at most {steps + 1} tokens per verify step",
            param="min_accept_len",
        )


#: what only a server ckpttools starts (or the offline probe) uses
_OURS_ONLY = ("engine_args", "engine_python", "ready_timeout", "port", "tp", "topk", "steps", "device", "target")
#: what the offline probe cannot honour, refused rather than ignored: (option, its value when unset)
_SERVER_ONLY = (
    ("host", None),
    ("launch", False),
    ("sweep", None),
    ("baseline_host", None),
    ("flush_cache", False),
    ("temperature", 0.0),
    ("topk", 1),
    ("tp", 1),
    ("port", None),
)
#: what only a server run uses, refused by the offline probe when given at all
_LAUNCH_ONLY = ("engine_args", "timeout", "log", "engine_python", "ready_timeout")


def _check_unused_by_host(o: dict[str, Any]) -> None:
    given = [k for k in _OURS_ONLY if o[k] not in (None, (), [])]
    if given:
        raise RequestError(
            f"{_names(given)}: used only when ckpttools starts the server ({opt('launch')}) or runs offline "
            f"({opt('engine')} torch); a running server ({opt('host')}) has its own settings"
        )


def _server(
    drafters: list[str], o: dict[str, Any], name: str, kind: type[Engine] | None, offline: bool
) -> RunningHost | LaunchSpec | Offline:
    drafter = drafters[0] if drafters else None
    if offline:
        return _offline(drafter, o)
    if o["launch"]:
        return _launch_spec(drafter, o, name, kind)
    if not o["host"]:
        raise RequestError(f"give {opt('host')} URL, or {opt('launch')}, or {opt('engine')} torch")
    if o["sweep"]:
        raise RequestError(f"{opt('sweep')} needs {opt('launch')}: it starts one server per setting")
    return RunningHost(o["host"], o["log"])


def _offline(drafter: str | None, o: dict[str, Any]) -> Offline:
    if not (o["target"] and drafter):
        raise RequestError(f"{opt('engine')} torch needs {opt('target')} and DRAFTER")
    given = [k for k, unset in _SERVER_ONLY if o[k] not in (None, unset)]
    given += [k for k in _LAUNCH_ONLY if o[k] not in (None, (), [])]
    if list(o["concurrency"]) != [1]:
        given.append("concurrency")
    if "launch" in given:  # the hint below would name the option given
        raise RequestError(
            f"{opt('launch')} starts a server, and {opt('engine')} torch runs with none: give {opt('engine')} "
            f"sglang or vllm to launch one, or leave {opt('launch')} out to measure offline"
        )
    if "host" in given:
        raise RequestError(
            f"{opt('host')} measures a running server, and {opt('engine')} torch runs with none: leave "
            f"{opt('engine')} torch out (the server's engine is read from it), or {opt('host')} to measure offline"
        )
    if given:
        raise RequestError(
            f"{_names(given)}: not measured by {opt('engine')} torch (one request at a time, greedy, topk 1, "
            f"no server); use {opt('launch')} or {opt('host')} for these"
        )
    if o["device"] is not None and not str(o["device"]).strip():
        raise RequestError(f"{opt('device')} '': no device named (give cpu, cuda or cuda:N)", param="device")
    return Offline(steps=o["steps"] or 3, device=o["device"] or "cpu")


def _launch_spec(drafter: str | None, o: dict[str, Any], name: str, kind: type[Engine] | None) -> LaunchSpec:
    if not (o["target"] and drafter) or kind is None:
        raise RequestError(f"{opt('launch')} needs {opt('engine')} sglang|vllm, {opt('target')} and {opt('drafter')}")
    from ckpttools.engines.launch import free_port

    port = o["port"] or free_port()
    return LaunchSpec(
        engine=name,
        target=o["target"],
        drafter=drafter,
        port=port,
        tp=o["tp"] or 1,
        steps=o["steps"] or 3,
        topk=o["topk"] or 1,
        engine_args=list(o["engine_args"] or ()),
        python=o["engine_python"] or sys.executable,
        log_path=o["log"] or f"ckpt-verify-{name}-{port}.log",
        ready_timeout=o["ready_timeout"] if o["ready_timeout"] is not None else 900.0,
    )


def _check_structure(r: MeasureRequest) -> None:
    """What no request may be, however it was built (a library caller's too)."""
    if not 1 <= len(r.drafters) <= MAX_DRAFTERS and not (isinstance(r.server, RunningHost) and not r.drafters):
        raise RequestError(f"give 1 to {MAX_DRAFTERS} drafters, not {len(r.drafters)}")
    if len(r.drafters) > 1 and not isinstance(r.server, LaunchSpec):
        raise RequestError(
            f"several drafters need {opt('launch')} {opt('engine')} sglang|vllm: they share one server it starts"
        )
    if r.sweep is not None and not isinstance(r.server, LaunchSpec):
        raise RequestError(f"{opt('sweep')} needs {opt('launch')}: it starts one server per setting")
    if not r.concurrency or min(r.concurrency) < 1:
        raise RequestError("concurrency: give levels of 1 or more", param="concurrency")


def split_engine(engine: str) -> tuple[str, Any]:
    """``NAME==VERSION`` (or ``NAME@VERSION``) as (``NAME``, its table); a bare name as (name, None).

    The name is matched exactly: ``SGLang``, ``sgl`` or ``' sglang'`` are refused, naming the one
    meant (a near miss must not turn into a pinned release, which has no swap route or target check).

    Raises:
        ConfigError: a name other than :data:`VERIFY_ENGINES`, or a release no table knows (the
            message lists the known ones).
    """
    from ckpttools.engines.releases import resolve, split_spec

    name, version = split_spec(engine, VERIFY_ENGINES)
    if version is None:
        return name, None
    kind = ENGINE_OBJECTS.get(name)
    if kind is None or not kind.serves:
        raise ConfigError(
            f"{engine}: only sglang and vllm take a release", hint="give sglang==VERSION or vllm==VERSION"
        )
    rel = resolve(engine)
    return rel.name, rel
