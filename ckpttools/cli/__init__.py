"""The ``ckpt`` command line: commands (a thin layer over the library), rendering, output."""

from ckpttools.cli.commands import cli, main

__all__ = ["cli", "main"]
