"""The package's version, from its installed metadata (the bottom layer's one source for it)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ckpttools")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0.1.0"

__all__ = ["__version__"]
