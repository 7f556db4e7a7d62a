"""The ``ckpt`` command line: the commands (each parses, makes one library call, renders), the
numeric parameter types, the human renderings of the library's results, and output helpers.

``main`` is the entry point (ckpttools.cli.entry: ``ckpt inspect`` runs without Click); ``cli``,
the Click group, is imported from ckpttools.cli.commands when asked for, so that importing
ckpttools.cli.output or .render does not load Click.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckpttools.cli.entry import main

if TYPE_CHECKING:
    from ckpttools.cli.commands import cli

__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:
    if name == "cli":
        from ckpttools.cli.commands import cli

        return cli
    raise AttributeError(f"module 'ckpttools.cli' has no attribute {name!r}")
