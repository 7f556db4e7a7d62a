"""The ``ckpt`` command line: the commands (each parses, makes one library call, renders), the
numeric parameter types, the human renderings of the library's results, and output helpers."""

from ckpttools.cli.commands import cli, main

__all__ = ["cli", "main"]
