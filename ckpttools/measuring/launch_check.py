"""The one check before a launch: what a long server load would otherwise end with, refused first.

The release that will actually run is read once, from the launch's interpreter (``LaunchSpec.python``)
unless the engine was pinned, and every claim is judged under it and under the engine arguments
given. Each drafter is opened, its config parsed, and validated once, against the target, with its
load plan (:class:`~ckpttools.engines.opened.OpenedDrafter`, kept in :attr:`LaunchCheck.opened` for
the rest of the run: the compare flow and the swap helpers read it, never the files again); a port
in use, a drafter with no weights, and validate's errors are refused. Warnings are said once per run:
those every drafter shares once, the others under the drafter's name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ckpttools.engines.engine import Engine, engine_for
from ckpttools.engines.launch import LaunchSpec
from ckpttools.engines.opened import OpenedDrafter, OpenedTarget, open_once
from ckpttools.errors import EXIT_FINDINGS, CkptError

__all__ = ["LaunchCheck", "check_launch", "check_port_and_release", "effective_engine"]


@dataclass
class LaunchCheck:
    """What the check found: the engine as it will run, each drafter's report, the warnings said."""

    engine: Engine
    #: how the release was found: ``given``, ``installed`` (the launch's interpreter), or ``not known``
    release_from: str
    reports: dict[str, Any] = field(default_factory=dict)
    #: the warning lines, as said (shared first, then per drafter)
    warnings: list[str] = field(default_factory=list)
    #: each drafter as the check opened it, by the name given (the run reads these, not the files)
    opened: dict[str, OpenedDrafter] = field(default_factory=dict)
    #: the target as the check read it (None: a check of the port and the release only)
    target: OpenedTarget | None = None

    def drafter(self, name: str) -> OpenedDrafter | str:
        """``name`` as the check opened it, else the name itself (a helper given it opens it)."""
        return self.opened.get(name, name)

    def announce(self, spec: LaunchSpec, drafters: int = 1) -> None:
        """Say that a server starts (only now that one does)."""
        from ckpttools.io.fsutil import note

        many = f" for {drafters} drafters" if drafters > 1 else ""
        note(f"starting {spec.engine} on {spec.url}{many}, log: {spec.log_path}")


def effective_engine(spec: LaunchSpec, pinned: Any = None) -> tuple[Engine, str]:
    """The engine object of the release that will run: the one pinned, else the one the launch's
    interpreter has installed (read before anything starts), else the engine with no release known."""
    if pinned is not None:
        return engine_for(spec.engine, pinned), "given"
    eng = engine_for(spec.engine)
    release = eng.installed_release(spec.python)
    return (eng.with_release(release), "installed") if release is not None else (eng, "not known")


def check_launch(spec: LaunchSpec, drafters: Sequence[str], pinned: Any = None) -> LaunchCheck:
    """Check a launch of ``spec``'s target with each of ``drafters`` before any server starts.

    Args:
        spec: the launch (its port, target, interpreter and engine arguments).
        drafters: every drafter the run measures (each opened and validated once, in order; the
            opened drafters are in the result's ``opened``).
        pinned: the release the user pinned (``NAME==VERSION``), or None.

    Raises:
        ServerError: the port is taken. NoWeightsError: a drafter is a config alone.
        CkptError (exit 1): validate found errors in a drafter against the target.
    """
    from ckpttools.engines.opened import open_target

    out = check_port_and_release(spec, pinned)
    per: dict[str, list[str]] = {}
    out.target = target = open_target(spec.target)  # its config read once, by the first drafter's checks
    for d in dict.fromkeys(drafters):
        out.opened[d] = opened = open_once(d)
        rep = _validated(spec, d, out.engine, opened, target)
        out.reports[d] = rep
        per[d] = [_warning_line(w) for w in rep.findings if w.severity == "warning"]
    out.warnings = _say_once(per)
    return out


def check_port_and_release(spec: LaunchSpec, pinned: Any = None, known: Engine | None = None) -> LaunchCheck:
    """The check of another server of a run whose drafters were checked already: its port, and the
    release that will run (``known``: as the run's check found it; else read from the interpreter)."""
    from ckpttools.engines.launch import check_port

    check_port(spec.host, spec.port)
    if known is not None:
        eng, how = known, "given" if pinned is not None else "installed"
    else:
        eng, how = effective_engine(spec, pinned)
    eng.launch_argv(spec)  # the engine arguments judged now (one clashing with ckpt's own flags), before "starting"
    return LaunchCheck(eng, how)


def _validated(
    spec: LaunchSpec, drafter: str, eng: Engine, opened: OpenedDrafter | None = None, target: Any = None
) -> Any:
    """``drafter`` validated once against the target, under the release and engine arguments that run
    (``opened``: the drafter opened already, read as it is; ``target``: the run's OpenedTarget, else
    ``spec.target``)."""
    from ckpttools.errors import NoWeightsError
    from ckpttools.ops.validate import validate

    try:
        given = target if target is not None else spec.target
        rep = validate(opened or drafter, given, engine=eng.spec, engine_args=spec.engine_args)
    finally:
        if opened is not None:
            opened.close()  # the maps validate's value checks made: the index stays for the run
    if "tensors" not in rep.checked:
        raise NoWeightsError(
            f"{drafter}: no weights to serve (a config.json alone)",
            path=str(drafter),
            hint="give the drafter's directory",
        )
    errors = [f for f in rep.errors if not _allowed_at_launch(f, spec, eng)]
    if errors:
        first = errors[0]
        err = CkptError(
            f"{drafter} against {spec.target}: validate found {len(errors)} error(s) "
            f"({', '.join(f.id for f in errors)}), e.g. {first.location}: {first.message}",
            path=str(drafter),
            hint=first.hint or "run ckpt validate DRAFTER --target TARGET and fix what it lists",
        )
        err.exit_code = EXIT_FINDINGS
        raise err
    return rep


def _warning_line(w: Any) -> str:
    return f"validate warns before the load: {w.location}: {w.message}" + (f" ({w.hint})" if w.hint else "")


def _say_once(per: dict[str, list[str]]) -> list[str]:
    """Each warning once: one every drafter has (or the only drafter's) as it is, the others under
    the drafter's name."""
    from ckpttools.io.fsutil import note

    lists = list(per.values())
    shared = [w for w in dict.fromkeys(lists[0])] if lists else []
    shared = [w for w in shared if all(w in ws for ws in lists)]
    lines = list(shared)
    if len(per) > 1:
        lines += [f"{d}: {w}" for d, ws in per.items() for w in dict.fromkeys(ws) if w not in shared]
    for line in lines:
        note(line)
    return lines


def _allowed_at_launch(f: Any, spec: LaunchSpec, eng: Engine) -> bool:
    """A finding the engine launches past when told to: an engine whose table records a switch that
    serves a drafter whose context is shorter than the target's (``context_override``: SGLang warns
    and raises the drafter's max_position_embeddings), set for the launch. That is how a context
    sweep measures past the drafter's trained length."""
    var = eng.context_override_var()
    flag = {**os.environ, **spec.env}.get(var, "") if var else ""
    if f.id == "target.context_length" and flag.lower() in ("1", "true", "yes"):
        from ckpttools.io.fsutil import note

        note(f"{f.message}; launching anyway: {var} is set")
        return True
    return False
