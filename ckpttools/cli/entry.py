"""The ``ckpt`` entry point (``python -m ckpttools`` and the console script both start here).

``ckpt inspect`` in its common forms runs without Click: importing Click and building the
command group costs about a third of an inspect of a 1 TB target's 64 headers. Every other
command line (any other command, ``--help``, ``--revision``, a flag or value this parser does
not know for certain, a repeated option) goes to the Click group in
:mod:`ckpttools.cli.commands`, which stays the one definition of the command line.

What the fast path does is what the group does for those argument lists, in the same order:
the notes' handler and ``HF_HUB_VERBOSITY``, ``CKPT_DEBUG``'s check, the inputs declared, the
library call, the JSON or the table. An error is printed by the group's own boundary code
(:func:`ckpttools.cli.commands.report`, Click imported then), with inspect's flag names, so
the line and the exit code are the group's; tests/test_entry.py runs every inspect case of
the corpus both ways and requires the same exit code, stdout and stderr.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main", "console", "inspect_args"]

#: inspect's flags that take no value, and the parameter each sets
_FLAGS = {"--json": ("as_json", True), "--tensors": ("tensors", True), "--no-tensors": ("tensors", False)}
_FLAGS["--all-tensors"] = ("all_tensors", True)


def inspect_args(args: list[str]) -> dict[str, object] | None:
    """The parameters of ``ckpt inspect`` for ``args`` (the words after ``ckpt``) when they are
    certain to mean that to Click as well; None for anything else (Click then parses them).

    Taken: ``inspect``, one PATH that does not start with ``-``, each of ``--json``,
    ``--tensors``/``--no-tensors``, ``--all-tensors`` at most once, and ``--filter GLOB`` (or
    ``--filter=GLOB``) once with a value that is neither empty nor starts with ``-``. Anything
    else (``--revision``, ``-h``, ``--``, an unknown flag, a second PATH, a repeated option)
    is left to Click, whose message for it is the one users see.
    """
    if len(args) < 2 or args[0] != "inspect":
        return None
    params: dict[str, object] = {"as_json": False, "tensors": True, "pattern": None, "all_tensors": False}
    path: str | None = None
    seen: set[str] = set()
    rest = iter(args[1:])
    for a in rest:
        if not a.startswith("-"):
            if path is not None:
                return None
            path = a
            continue
        name, eq, value = a.partition("=")
        v: object
        if name == "--filter":
            if not eq:
                value = next(rest, "")
            if not value or value.startswith("-"):
                return None
            key, v = "pattern", value
        elif name in _FLAGS and not eq:
            key, v = _FLAGS[name]
        else:
            return None
        if key in seen:
            return None
        seen.add(key)
        params[key] = v
    if path is None:
        return None
    params["path"] = path
    return params


def console() -> None:
    """The process's entry (the console script and ``python -m ckpttools``): :func:`main`, and
    then the interpreter ends. Before it ends, every object is moved out of the collector's reach
    (``gc.freeze``): the interpreter's last collections walk every module's objects (numpy's,
    Click's, the tables'), 60 ms of a 3.4 GiB export that takes 1.3 s, and nothing that runs
    after them needs a cycle freed. Not for a caller that goes on running: that is :func:`main`."""
    try:
        main()
    finally:
        import gc

        gc.freeze()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: ``ckpt ARGV`` (default ``sys.argv[1:]``); exits with its code."""
    args = sys.argv[1:] if argv is None else list(argv)
    params = inspect_args(args)
    if params is None or os.environ.get("_CKPT_COMPLETE"):  # shell completion is Click's
        from ckpttools.cli.commands import main as click_main

        click_main(argv)
        return
    sys.exit(_inspect(**params))  # type: ignore[arg-type]


def _notes_to_stderr() -> None:
    """As the group does (ckpttools.cli.commands._notes_to_stderr), without importing Click:
    its note handler is put in place, Click with it, only before the first note."""
    from ckpttools.io.fsutil import BEFORE_FIRST_NOTE

    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    if _install_note_handler not in BEFORE_FIRST_NOTE:
        BEFORE_FIRST_NOTE.append(_install_note_handler)


def _install_note_handler() -> None:
    from ckpttools.cli import commands

    commands.note_flags_default("inspect")
    commands._install_note_handler()


def _inspect(path: str, as_json: bool, tensors: bool, pattern: str | None, all_tensors: bool) -> int:
    """``ckpt inspect PATH ...`` as the Click command runs it (no --revision): its exit code."""
    _notes_to_stderr()
    try:
        from ckpttools.io.env import debug
        from ckpttools.io.guard import declared_inputs

        debug()  # a CKPT_DEBUG that is neither 0 nor 1 is one error line, as any other bad value
        with declared_inputs(v for v in (path, pattern) if isinstance(v, str)):
            from ckpttools.ops.inspect import inspect

            report = inspect(path, tensors=tensors, filter=pattern, revision=None)
            if as_json:
                from ckpttools.cli.output import emit_json

                emit_json(report.to_dict())
            else:
                import click

                from ckpttools.cli.render import render_inspect

                click.echo(render_inspect(report, all_tensors=all_tensors))
    except (EOFError, KeyboardInterrupt):  # as Click's main and ours print it
        import click

        click.echo(file=sys.stderr)
        click.echo("ckpt: error: interrupted", err=True)
        return 130
    except Exception as e:
        from ckpttools.cli import commands
        from ckpttools.errors import CkptError

        if not isinstance(e, (CkptError, OSError)) or os.environ.get("CKPT_DEBUG") == "1":
            raise
        return commands.report(e, commands.command_flags("inspect"))
    return 0
