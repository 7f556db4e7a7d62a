"""``measure(request)``: the one library call behind ``ckpt verify``.

A :class:`~ckpttools.measuring.request.MeasureRequest` says what to measure; this runs it: the
outputs it names are checked before anything starts, then the request goes where its server comes from (the
offline probe, one server, a sweep of servers, or several drafters on one shared server), and the
JSON report and the plot are written where asked.
"""

from __future__ import annotations

from collections.abc import Callable

from ckpttools.measuring.compare import CompareReport, run_compare
from ckpttools.measuring.launch_check import check_launch
from ckpttools.measuring.request import LaunchSpec, MeasureRequest, Offline, RequestError, RunningHost
from ckpttools.measuring.verify import VerifyReport, measure_one, prompts_of

__all__ = ["measure", "check_outputs", "request_inputs"]


def measure(
    request: MeasureRequest,
    *,
    on_request: Callable[[int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> VerifyReport | CompareReport:
    """Measure what ``request`` asks and return its report.

    Args:
        request: what to measure (:meth:`MeasureRequest.from_options` builds one from options).
        on_request: called with (requests done, requests in all) as one drafter's run goes.
        on_note: called with a line as each drafter of several is placed and measured.

    Returns:
        a :class:`~ckpttools.measuring.verify.VerifyReport` for one drafter (``sweep`` filled for a
        sweep), or a :class:`~ckpttools.measuring.compare.CompareReport` for several.

    Raises:
        CkptError subclasses: an output aimed at an input, a drafter refused before the launch,
        a server that cannot be reached or answers badly (see ``ckpt verify``'s exit codes).

    Example:
        >>> req = MeasureRequest.from_options(["./d"], engine="torch", target="./t")  # doctest: +SKIP
        >>> measure(req).accept_length  # doctest: +SKIP
    """
    if not isinstance(request, MeasureRequest):
        raise RequestError(
            f"measure takes a MeasureRequest, not {type(request).__name__}: build one with MeasureRequest.from_options"
        )
    check_outputs(request)
    rep = _run(request, on_request, on_note)  # a launch is checked first, once: the port, the release, each drafter
    if request.output:
        from ckpttools.io.guard import write_json

        write_json(request.output, rep.to_dict(), request_inputs(request))
    if request.plot and isinstance(rep, VerifyReport):
        from ckpttools.measuring.plot import plot_report

        plot_report(rep, request.plot)
    return rep


def _run(
    req: MeasureRequest,
    on_request: Callable[[int, int], None] | None,
    on_note: Callable[[str], None] | None,
) -> VerifyReport | CompareReport:
    if isinstance(req.server, Offline):
        from ckpttools.measuring.probe import measure_offline

        return measure_offline(req)
    checked = None
    if isinstance(req.server, LaunchSpec):
        prompts_of(req)  # the cheap checks first: a bad prompts file is refused before the launch check
        checked = check_launch(req.server, req.drafters, req.pinned)
    if checked is not None and len(req.drafters) > 1:
        return run_compare(req, checked, on_note)
    if checked is not None and req.sweep is not None:
        from ckpttools.measuring.sweep import run_sweep

        return run_sweep(req, checked)
    return measure_one(req, progress=on_request, checked=checked)


def request_inputs(req: MeasureRequest) -> list[str]:
    """What a request reads: its drafters, the target, the prompts and tokenizer files, a running
    server's log. No output of the run may be any of them, lie inside one, or hold one."""
    got = [*req.drafters, req.target, req.tokenizer, None if req.prompts == "builtin" else req.prompts]
    if isinstance(req.server, RunningHost):
        got.append(req.server.log)
    return [str(p) for p in got if p]


def check_outputs(req: MeasureRequest) -> None:
    """Before anything is measured: no report, plot or log is aimed at an input (the request's own,
    :func:`request_inputs`, and any the caller declared), at a directory, or at another of the run's
    outputs.

    Raises:
        UnsafePathError: an output aimed at an input or a directory. RequestError: two outputs at one file.
    """
    import os

    from ckpttools.errors import UnsafePathError, opt
    from ckpttools.io.guard import check_output

    inputs = request_inputs(req)
    log = req.server.log_path if isinstance(req.server, LaunchSpec) else None
    seen: dict[str, str] = {}
    for key, out in (("output", req.output), ("plot", req.plot), ("log", log)):
        if out is None:
            continue
        if not str(out):  # once: nothing written, nothing said
            raise RequestError(f"{opt(key)} is an empty path: give a file name, or leave it out", param=key)
        check_output(out, inputs)
        if os.path.isdir(out):
            raise UnsafePathError(f"{key} {out} is a directory", path=str(out), hint="give a file name")
        real = os.path.realpath(out)
        if real in seen:
            raise RequestError(
                f"{opt(seen[real])} and {opt(key)} are one file, {out}: each output needs a path of its own",
                param=key,
            )
        seen[real] = key
