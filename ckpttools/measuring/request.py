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
from os import PathLike
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
        drafters = _drafter_list(drafters)
        _check_values(o)
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
            concurrency=_as_tuple("concurrency", concurrency),
            context_lengths=_as_tuple("context_lengths", context_lengths),
            timeout=timeout if timeout is not None else 600.0,
            **{k: o[k] for k in _AS_GIVEN},
        )


def _as_tuple(key: str, levels: Any) -> tuple[int, ...]:
    _check_levels(key, levels)
    return tuple(levels)


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


#: the request's numbers and the range each takes (:data:`ckpttools.io.inputs.BOUNDS`), checked when given
_NUMBERS = {
    "port": "port",
    "tp": "tp",
    "steps": "steps",
    "topk": "topk",
    "ready_timeout": "seconds",
    "timeout": "seconds",
    "num_prompts": "num_prompts",
    "repeat": "repeat",
    "max_new_tokens": "max_new_tokens",
    "temperature": "temperature",
    "min_accept_len": "min_accept_len",
}
#: the options that are text, or a sequence of texts (a str given for one of those is refused, not spelled out)
_TEXTS = ("host", "target", "engine_python", "log", "device", "baseline_host", "prompts", "tokenizer", "output", "plot")


def _drafter_list(drafters: Any) -> list[str]:
    """The drafters as given: a sequence of paths (a str alone would be read letter by letter)."""
    if isinstance(drafters, (str, bytes)) or not isinstance(drafters, Sequence):
        raise RequestError(
            f"drafters: give a list of paths, not {type(drafters).__name__} (e.g. [{str(drafters)[:40]!r}])",
            param="drafter",
        )
    bad = [d for d in drafters if not isinstance(d, (str, PathLike)) or not str(d)]
    if bad:
        raise RequestError(f"drafters: {bad[0]!r} is not a path", param="drafter")
    return [str(d) for d in drafters]


def _check_values(o: dict[str, Any]) -> None:
    """Each value given, of its type and inside its range, as the CLI's types check them: a library
    caller gets the same bounds (None: not given)."""
    from ckpttools.io.inputs import BOUNDS

    for key, bound in _NUMBERS.items():
        if isinstance(o[key], str):  # the CLI's types read text; a library caller gives the number
            raise RequestError(f"{opt(key)}: {o[key][:40]!r} is text, not a number", param=key)
        if o[key] is not None:
            try:
                BOUNDS[bound].check(o[key], opt(key))
            except ValueError as e:
                raise RequestError(str(e), param=key) from None
    for key in _TEXTS:
        if o[key] is not None and not isinstance(o[key], (str, PathLike)):
            raise RequestError(f"{opt(key)}: {o[key]!r} is not text", param=key)
    for key in ("engine_args",):
        v = o[key]
        if v is not None and (isinstance(v, (str, bytes)) or not all(isinstance(a, str) for a in v)):
            raise RequestError(f"{opt(key)}: give a list of arguments, each a str, not {v!r:.60}", param=key)
    if o["sweep"] is not None and not isinstance(o["sweep"], Sweep):
        raise RequestError(
            f"{opt('sweep')}: give a Sweep (ckpttools.measuring.sweep.parse_sweep of the text), not "
            f"{type(o['sweep']).__name__}",
            param="sweep",
        )


def _check_levels(key: str, levels: Any) -> None:
    """Concurrency levels or context lengths: a sequence of whole numbers, each in its range."""
    from ckpttools.io.inputs import BOUNDS, Bound

    if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence):
        raise RequestError(f"{opt(key)}: give a sequence of whole numbers, not {levels!r:.60}", param=key)
    if key == "concurrency":
        bound, most = BOUNDS["concurrency"], 32
    else:
        from ckpttools.measuring.traffic import MAX_CONTEXT_LENGTH

        bound, most = Bound(2, MAX_CONTEXT_LENGTH, True), 64
    if len(levels) > most:
        raise RequestError(f"{opt(key)}: {len(levels)} values, at most {most}", param=key)
    for v in levels:
        if type(v) is not int:  # no bool, no float: a level is a count
            raise RequestError(f"{opt(key)}: {v!r:.40} is not a whole number", param=key)
        try:
            bound.check(v, opt(key))
        except ValueError as e:
            raise RequestError(str(e), param=key) from None
    if len(set(levels)) != len(levels):
        raise RequestError(f"{opt(key)}: a value given twice (each is measured once)", param=key)


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
    import os

    first: dict[str, str] = {}
    for d in drafters:
        real = os.path.realpath(d)
        if real in first and first[real] != d:  # the same spelling twice is measured once
            raise RequestError(f"{first[real]} and {d} are one drafter ({real}): give each once", param="drafter")
        first.setdefault(real, d)
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
        if o["host"]:
            raise RequestError(
                f"{opt('launch')} starts a server and {opt('host')} measures a running one: give one of them"
            )
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

    if o["device"] is not None:
        raise RequestError(
            f"{opt('device')} is the offline probe's ({opt('engine')} torch); a launched server places its model "
            "itself: leave it out, or set the engine's own device options",
            param="device",
        )
    why = kind(None).sweep_setting_refused({"steps": o["steps"] or 3, "topk": o["topk"] or 1})
    if why is not None:
        raise RequestError(f"{opt('topk')} {o['topk']}: {why}", param="topk")
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
        log_path=o["log"] if o["log"] is not None else f"ckpt-verify-{name}-{port}.log",  # "": refused by check_outputs
        ready_timeout=o["ready_timeout"] if o["ready_timeout"] is not None else 900.0,
    )


def _check_structure(r: MeasureRequest) -> None:
    """What no request may be, however it was built (a library caller's too)."""
    if not isinstance(r.server, (RunningHost, LaunchSpec, Offline)):
        raise RequestError(
            f"server: give a RunningHost, a LaunchSpec or Offline, not {type(r.server).__name__} "
            "(MeasureRequest.from_options builds one from options)"
        )
    if not isinstance(r.drafters, tuple) or not all(isinstance(d, (str, PathLike)) and str(d) for d in r.drafters):
        raise RequestError(f"drafters: give a tuple of paths, not {r.drafters!r:.60}", param="drafter")
    if not 1 <= len(r.drafters) <= MAX_DRAFTERS and not (isinstance(r.server, RunningHost) and not r.drafters):
        raise RequestError(f"give 1 to {MAX_DRAFTERS} drafters, not {len(r.drafters)}")
    if len(r.drafters) > 1 and not isinstance(r.server, LaunchSpec):
        raise RequestError(
            f"several drafters need {opt('launch')} {opt('engine')} sglang|vllm: they share one server it starts"
        )
    if r.sweep is not None and not isinstance(r.server, LaunchSpec):
        raise RequestError(f"{opt('sweep')} needs {opt('launch')}: it starts one server per setting")
    if isinstance(r.server, Offline) and not r.target:
        raise RequestError(f"{opt('engine')} torch needs {opt('target')} and DRAFTER")
    if r.target:
        import os

        same = [d for d in r.drafters if os.path.realpath(d) == os.path.realpath(r.target)]
        if same:
            raise RequestError(
                f"{opt('target')} {r.target} and the drafter {same[0]} are one path: give the target model and the "
                "drafter apart",
                param="target",
            )
    if r.sweep is not None and not (isinstance(r.sweep, Sweep) and r.sweep.settings):
        raise RequestError(f"{opt('sweep')}: a sweep of no setting measures nothing", param="sweep")
    if isinstance(r.server, Offline):
        _check_offline(r)
    _check_levels("concurrency", r.concurrency)
    if not r.concurrency:
        raise RequestError("concurrency: give levels of 1 or more", param="concurrency")
    _check_levels("context_lengths", r.context_lengths)
    if not isinstance(r.prompts, (str, PathLike)) or not str(r.prompts).strip():
        raise RequestError(f"{opt('prompts')}: give 'builtin' or a JSONL file, not {r.prompts!r:.40}", param="prompts")


def _check_offline(r: MeasureRequest) -> None:
    """The offline probe's own settings: its steps in range, one request at a time."""
    from ckpttools.io.inputs import BOUNDS

    steps = r.server.steps if isinstance(r.server, Offline) else None
    try:
        if isinstance(steps, str):
            raise ValueError(f"{steps[:40]!r} is text, not a number")
        BOUNDS["steps"].check(steps, opt("steps"))
    except ValueError as e:
        raise RequestError(str(e), param="steps") from None
    if tuple(r.concurrency) != (1,):
        raise RequestError(
            f"{opt('concurrency')}: not measured by {opt('engine')} torch (one request at a time)", param="concurrency"
        )


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
